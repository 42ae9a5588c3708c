//! Which descriptors of the traced processes are TCP sockets (ptrace sees
//! only numbers): looked up in /proc, with each socket's options and role.

use super::super::{procfs, sockopt};
use super::Known;
use super::events::{Nagle, Role, Sock};
use std::collections::{HashMap, HashSet};

/// Descriptor → TCP socket, per process, looked up in /proc on first use
/// and forgotten when the number may name another file.
pub(super) struct FdMap {
    by_fd: HashMap<(u32, i32), Option<u32>>,
    by_inode: HashMap<u64, u32>,
    not_tcp: HashSet<u64>,
    pub(super) socks: Vec<Sock>,
    /// TCP_NODELAY and TCP_CORK per socket, as last read.
    opts: Vec<(Option<bool>, Option<bool>)>,
    pidfds: HashMap<u32, Option<sockopt::Pidfd>>,
    rows: HashMap<u64, procfs::TcpEntry>,
    listen_ports: HashSet<u16>,
    unreadable: u32,
    pub(super) notes: Vec<String>,
}

impl FdMap {
    pub(super) fn new(known: &[Known], listen_ports: HashSet<u16>) -> FdMap {
        let mut m = FdMap {
            by_fd: HashMap::new(),
            by_inode: HashMap::new(),
            not_tcp: HashSet::new(),
            socks: Vec::new(),
            opts: Vec::new(),
            pidfds: HashMap::new(),
            rows: HashMap::new(),
            listen_ports,
            unreadable: 0,
            notes: Vec::new(),
        };
        for k in known {
            let role = Role::from_name(k.role);
            let s = m.add(k.pid, k.fd, k.inode, role, (k.nodelay, k.cork));
            let sock = &mut m.socks[s as usize];
            sock.port = k.local.parse::<std::net::SocketAddr>().ok().map(|a| a.port());
            sock.local = Some(k.local.clone());
            sock.peer = Some(k.peer.clone());
            sock.mss = k.mss;
            m.by_fd.insert((k.pid, k.fd), Some(s));
        }
        m
    }

    pub(super) fn add(&mut self, pid: u32, fd: i32, inode: u64, role: Role, opts: (Option<bool>, Option<bool>)) -> u32 {
        let s = self.socks.len() as u32;
        self.socks.push(Sock {
            pid,
            fd,
            inode,
            role,
            local: None,
            port: None,
            peer: None,
            mss: None,
            accepted_in_window: false,
        });
        self.opts.push(opts);
        self.by_inode.insert(inode, s);
        s
    }

    pub(super) fn pidfd(&mut self, pid: u32) -> Option<&sockopt::Pidfd> {
        self.pidfds.entry(pid).or_insert_with(|| sockopt::Pidfd::open(pid).ok()).as_ref()
    }

    /// TCP_NODELAY and TCP_CORK now; Err(true) when the socket is not TCP.
    pub(super) fn read_opts(&mut self, pid: u32, fd: i32, inode: u64) -> Result<(Option<bool>, Option<bool>), bool> {
        match self.pidfd(pid).map(|p| p.sockopts(fd, inode)) {
            Some(Ok(o)) => Ok((Some(o.nodelay), Some(o.cork))),
            Some(Err(e)) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOPROTOOPT)) => Err(true),
            _ => Err(false),
        }
    }

    /// The TCP socket behind `fd` of `pid`, if it is one.
    pub(super) fn lookup(&mut self, pid: u32, fd: i32) -> Option<u32> {
        if fd < 0 {
            return None;
        }
        if let Some(&v) = self.by_fd.get(&(pid, fd)) {
            return v;
        }
        let v = socket_inode(pid, fd).and_then(|ino| self.socket(pid, fd, ino, None));
        self.by_fd.insert((pid, fd), v);
        v
    }

    /// Classifies socket `inode` (held as `fd` by `pid`): its options tell
    /// TCP from the rest, /proc/PID/net/tcp its addresses and role.
    pub(super) fn socket(&mut self, pid: u32, fd: i32, inode: u64, role: Option<Role>) -> Option<u32> {
        if let Some(&s) = self.by_inode.get(&inode) {
            return Some(s);
        }
        if self.not_tcp.contains(&inode) {
            return None;
        }
        let opts = match self.read_opts(pid, fd, inode) {
            Ok(o) => o,
            Err(true) => {
                self.not_tcp.insert(inode);
                return None;
            }
            // Options unreadable (closed meanwhile?): TCP only if the table says so.
            Err(false) => {
                self.row(pid, inode)?;
                self.unreadable += 1;
                (None, None)
            }
        };
        let row = if role.is_none() { self.row(pid, inode) } else { None };
        let role = role.unwrap_or_else(|| match &row {
            Some(r) if r.state == procfs::LISTEN => Role::Listening,
            Some(r) if self.listen_ports.contains(&r.local.port()) => Role::Accepted,
            Some(_) => Role::Outgoing,
            None => Role::Unknown,
        });
        let s = self.add(pid, fd, inode, role, opts);
        if let Some(r) = row {
            let sock = &mut self.socks[s as usize];
            sock.local = Some(r.local.to_string());
            sock.port = Some(r.local.port());
            sock.peer = Some(r.peer.to_string());
        }
        Some(s)
    }

    /// The /proc/PID/net/tcp row of `inode`, reading the table again when it is not there yet.
    pub(super) fn row(&mut self, pid: u32, inode: u64) -> Option<procfs::TcpEntry> {
        if !self.rows.contains_key(&inode)
            && let Ok(rows) = procfs::net_tcp(&format!("/proc/{pid}/net"))
        {
            self.rows = rows.into_iter().filter(|r| r.inode != 0).map(|r| (r.inode, r)).collect();
        }
        self.rows.get(&inode).cloned()
    }

    /// `accept` on `listener` returned `fd`: a new server-side connection.
    pub(super) fn accepted(&mut self, pid: u32, listener: i32, fd: i32) {
        self.forget(pid, fd);
        let Some(l) = self.lookup(pid, listener) else { return };
        if let Some(ino) = socket_inode(pid, fd) {
            let v = self.socket(pid, fd, ino, Some(Role::Accepted));
            if let Some(s) = v {
                let port = self.socks[l as usize].port;
                let sock = &mut self.socks[s as usize];
                sock.accepted_in_window = true;
                sock.port = sock.port.or(port);
            }
            self.by_fd.insert((pid, fd), v);
        }
    }

    /// setsockopt(IPPROTO_TCP) on `fd`: TCP_NODELAY or TCP_CORK may have changed.
    pub(super) fn reread(&mut self, pid: u32, fd: i32) {
        if let Some(s) = self.lookup(pid, fd) {
            let ino = self.socks[s as usize].inode;
            if let Ok(o) = self.read_opts(pid, fd, ino) {
                self.opts[s as usize] = o;
            }
        }
    }

    pub(super) fn nagle(&self, s: u32, more: bool) -> Nagle {
        let (nodelay, cork) = self.opts.get(s as usize).copied().unwrap_or((None, None));
        Nagle::of(nodelay, cork, more)
    }

    pub(super) fn forget(&mut self, pid: u32, fd: i32) {
        self.by_fd.remove(&(pid, fd));
    }

    pub(super) fn forget_range(&mut self, pid: u32, first: u64, last: u64) {
        self.by_fd.retain(|&(p, fd), _| p != pid || (fd as u64) < first || fd as u64 > last);
    }

    pub(super) fn forget_process(&mut self, pid: u32) {
        self.by_fd.retain(|&(p, _), _| p != pid);
    }
}

/// The socket inode behind a descriptor (`socket:[N]`), if it is a socket.
fn socket_inode(pid: u32, fd: i32) -> Option<u64> {
    let t = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    t.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}
