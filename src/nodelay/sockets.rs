//! A server's TCP sockets as `nodelay` sees them: its listening sockets and
//! the connections accepted on them, in the process and in its children that
//! share a listening socket (nginx's workers), each read and set through a
//! `pidfd_getfd` duplicate.

use super::NodelayError;
use crate::inspect::procfs::{self, LISTEN};
use crate::inspect::sockopt::{self, Pidfd};
use std::collections::{HashMap, HashSet};
use std::io;
use std::net::SocketAddr;

/// `TCP_ESTABLISHED` in the kernel's state numbering.
const ESTABLISHED: u8 = 1;

/// One socket found in a process's descriptors.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    pub pid: u32,
    pub fd: i32,
    pub inode: u64,
    pub listening: bool,
    pub local: SocketAddr,
    pub peer: SocketAddr,
}

/// A process and the children that share its listening sockets, with a pidfd on each.
pub(crate) struct Server {
    pub workers: Vec<u32>,
    pidfds: HashMap<u32, Pidfd>,
    /// Every TCP socket they hold, once each (a shared one under its first holder).
    all: Vec<Found>,
}

fn denied(pid: u32, what: String) -> NodelayError {
    NodelayError::Permission { at: format!("pid {pid}"), what, hint: crate::inspect::ptrace_hint(Some(pid)) }
}

/// `(fd, inode)` of the process's sockets, in the error words of `nodelay`.
fn fds_of(pid: u32) -> Result<Vec<(i32, u64)>, NodelayError> {
    procfs::socket_fds(pid).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => NodelayError::NoProcess { pid },
        io::ErrorKind::PermissionDenied => denied(pid, format!("list its file descriptors (/proc/{pid}/fd)")),
        _ => NodelayError::Io { at: format!("pid {pid}"), what: "list its file descriptors".into(), err: e },
    })
}

impl Server {
    /// Reads process `pid` (pinned by `pidfd`) and its children holding one
    /// of its listening sockets.
    pub fn read(pid: u32, pidfd: Pidfd) -> Result<Server, NodelayError> {
        let own = fds_of(pid)?;
        let rows = procfs::net_tcp(&format!("/proc/{pid}/net"))
            .or_else(|_| procfs::net_tcp("/proc/net"))
            .map_err(|e| NodelayError::Io { at: format!("pid {pid}"), what: "read /proc/net/tcp".into(), err: e })?;
        let by_inode: HashMap<u64, &procfs::TcpEntry> =
            rows.iter().filter(|r| r.inode != 0).map(|r| (r.inode, r)).collect();
        let is_listen = |i: &u64| by_inode.get(i).is_some_and(|r| r.state == LISTEN);
        let mut held: Vec<(u32, i32, u64)> = own.iter().map(|&(fd, i)| (pid, fd, i)).collect();
        let mut workers = Vec::new();
        let mut pidfds = HashMap::from([(pid, pidfd)]);
        if own.iter().any(|(_, i)| is_listen(i)) {
            for c in procfs::children(pid) {
                // A child that exited meanwhile is simply not a worker.
                let Ok(fds) = procfs::socket_fds(c) else { continue };
                if !fds.iter().any(|(_, i)| is_listen(i)) {
                    continue;
                }
                let Ok(pfd) = Pidfd::open(c) else { continue };
                workers.push(c);
                pidfds.insert(c, pfd);
                held.extend(fds.into_iter().map(|(fd, i)| (c, fd, i)));
            }
        }
        let mut seen = HashSet::new();
        let all = held
            .into_iter()
            .filter_map(|(p, fd, inode)| {
                let r = by_inode.get(&inode).filter(|r| r.state == LISTEN || r.state == ESTABLISHED)?;
                let listening = r.state == LISTEN;
                seen.insert(inode).then_some(Found { pid: p, fd, inode, listening, local: r.local, peer: r.peer })
            })
            .collect();
        Ok(Server { workers, pidfds, all })
    }

    /// Its listening sockets (on `port`, or all) and the established
    /// connections accepted on them, listening sockets first.
    pub fn sockets(&self, port: Option<u16>) -> Vec<Found> {
        let ports: HashSet<u16> = self
            .all
            .iter()
            .filter(|s| s.listening && port.is_none_or(|p| s.local.port() == p))
            .map(|s| s.local.port())
            .collect();
        let mut v: Vec<Found> = self.all.iter().filter(|s| ports.contains(&s.local.port())).cloned().collect();
        v.sort_by_key(|s| (!s.listening, s.local, s.peer, s.pid, s.fd));
        v
    }

    /// Socket `inode` wherever the process or its workers hold it now.
    pub fn find(&self, inode: u64) -> Option<&Found> {
        self.all.iter().find(|s| s.inode == inode)
    }

    /// A duplicate of `s` (None: closed or reused since it was listed).
    pub fn dup(&self, s: &Found) -> Result<Option<std::os::fd::OwnedFd>, NodelayError> {
        let Some(p) = self.pidfds.get(&s.pid) else { return Ok(None) };
        match p.getfd(s.fd, s.inode) {
            Ok(d) => Ok(Some(d)),
            Err(e) => match e.raw_os_error() {
                Some(libc::EBADF) | Some(libc::ESRCH) => Ok(None),
                Some(libc::EPERM) => {
                    Err(denied(s.pid, "duplicate its sockets to set TCP_NODELAY (pidfd_getfd)".into()))
                }
                Some(libc::ENOSYS) => Err(NodelayError::Unsupported {
                    at: format!("pid {}", s.pid),
                    what: "cannot duplicate its sockets: pidfd_getfd needs Linux 5.6 or later".into(),
                }),
                _ => Err(NodelayError::Io {
                    at: format!("pid {} fd {}", s.pid, s.fd),
                    what: "duplicate it".into(),
                    err: e,
                }),
            },
        }
    }

    /// The TCP_NODELAY of `s` now (None: closed since it was listed).
    pub fn get(&self, s: &Found) -> Result<Option<bool>, NodelayError> {
        let Some(d) = self.dup(s)? else { return Ok(None) };
        sockopt::nodelay(&d).map(Some).map_err(|e| io_at(s, "read TCP_NODELAY", e))
    }

    /// Sets TCP_NODELAY of `s` to `on` and reads it back (None: closed).
    pub fn set(&self, s: &Found, on: bool) -> Result<Option<bool>, NodelayError> {
        let Some(d) = self.dup(s)? else { return Ok(None) };
        sockopt::set_nodelay(&d, on).map_err(|e| io_at(s, "set TCP_NODELAY", e))?;
        sockopt::nodelay(&d).map(Some).map_err(|e| io_at(s, "read TCP_NODELAY back", e))
    }
}

fn io_at(s: &Found, what: &str, err: io::Error) -> NodelayError {
    NodelayError::Io { at: format!("pid {} fd {}", s.pid, s.fd), what: what.into(), err }
}
