//! The eBPF programs' records (`src/ebpf/trace.bpf.c`) decoded into the
//! recorder's [`Event`]s and [`Sock`]s, and the writes and segments that
//! [`hold`] joins.
//!
//! On the socket tracepoints a call is recorded at its end: no start time,
//! no waits. A `sendfile` or `splice` that loops over pipe buffers makes one
//! record per pass (a `sendmmsg` or `recvmmsg` one per message); the passes
//! of one call are joined back into it here.

use super::events::{self, Call, Dir, Event, Nagle, Role, Sock, Sys};
use super::hold::{self, Fate};
use super::records::{
    B_IN_FLIGHT, B_LEFT, B_NONAGLE_SHIFT, C_ACCEPT, C_WAIT, C_WRITE, CallRec, EV_RETRANS, EV_XMIT, NAGLE_CORK,
    NAGLE_OFF, Record, SockRec, arg_index,
};
use super::{Known, MAX_EVENTS};
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Whether a call makes one record per pass (per pipe buffer, per message).
fn looping(call: Call) -> bool {
    matches!(call, Call::Sendfile | Call::Splice | Call::Sendmmsg | Call::Recvmmsg)
}

/// One write's fate.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hold {
    pub port: u16,
    pub tid: u32,
    pub t_ns: u64,
    pub bytes: u32,
    pub fate: Fate,
}

/// A write followed into the kernel: its socket, thread and (event) time.
struct Written {
    w: hold::Write,
    sock: u32,
    tid: u32,
    t_ns: u64,
}

/// A looping call whose passes may continue in the thread's next record.
struct Open {
    nr: u16,
    ino: u32,
    arg: u32,
    /// Bytes (messages for `*mmsg`) done so far.
    done: u64,
    event: Option<usize>,
    write: Option<usize>,
}

#[derive(Default)]
struct Thread {
    /// When its last record was made: its next call began after.
    last_t: u64,
    open: Option<Open>,
}

/// Records → the recorder's events and sockets.
pub(super) struct Decoder {
    t0: u64,
    /// Socket tracepoints: calls have no start, and looping calls come in passes.
    sock_hooks: bool,
    listen_ports: HashSet<u16>,
    /// Socket inodes listed before the trace: any other is a connection made since.
    known: HashSet<u64>,
    by_inode: HashMap<u64, u32>,
    addrs: HashMap<u32, SockRec>,
    pub socks: Vec<Sock>,
    pub events: Vec<Event>,
    pub dropped: u64,
    pub tids: HashSet<u32>,
    pub tgids: HashSet<u32>,
    writes: Vec<Written>,
    xmits: Vec<hold::Xmit>,
    threads: HashMap<u32, Thread>,
}

impl Decoder {
    pub fn new(known: &[Known], listen_ports: &HashSet<u16>, t0: u64, sock_hooks: bool) -> Decoder {
        let mut d = Decoder {
            t0,
            sock_hooks,
            listen_ports: listen_ports.clone(),
            known: known.iter().map(|k| k.inode).collect(),
            by_inode: HashMap::new(),
            addrs: HashMap::new(),
            socks: Vec::new(),
            events: Vec::new(),
            dropped: 0,
            tids: HashSet::new(),
            tgids: HashSet::new(),
            writes: Vec::new(),
            xmits: Vec::new(),
            threads: HashMap::new(),
        };
        for k in known {
            d.by_inode.insert(k.inode, d.socks.len() as u32);
            d.socks.push(Sock {
                pid: k.pid,
                fd: k.fd,
                inode: k.inode,
                role: Role::from_name(k.role),
                local: Some(k.local.clone()),
                port: k.local.parse::<SocketAddr>().ok().map(|a| a.port()),
                peer: Some(k.peer.clone()),
                mss: k.mss,
                accepted_in_window: false,
            });
        }
        d
    }

    fn rel(&self, t: u64) -> u64 {
        t.saturating_sub(self.t0)
    }

    /// Decodes `records` (made before `t_end`, in any order).
    pub fn run(&mut self, records: &mut [Record], t_end: u64) {
        records.sort_by_key(Record::t);
        for r in records.iter() {
            match r {
                Record::Sock(s) => {
                    self.addrs.insert(s.ino, *s);
                }
                Record::Segment(s) if s.t <= t_end => self.xmits.push(hold::Xmit {
                    sk: u64::from(s.ino),
                    t: self.rel(s.t),
                    seq: s.seq,
                    end: s.end,
                    what: match s.kind {
                        EV_XMIT => hold::Sent::Out,
                        EV_RETRANS => hold::Sent::Again,
                        _ => hold::Sent::Dropped,
                    },
                }),
                Record::Call(c) if c.t <= t_end => self.call(c),
                _ => {}
            }
        }
        // A socket first seen outside a socket syscall (io_uring): its descriptor, by inode.
        for s in self.socks.iter_mut().filter(|s| s.fd < 0) {
            s.fd = fd_of_inode(s.pid, s.inode).unwrap_or(-1);
        }
    }

    /// The socket of a call, added on first sight.
    fn sock(&mut self, r: &CallRec) -> u32 {
        let ino = u64::from(r.ino);
        let s = match self.by_inode.get(&ino) {
            Some(&s) => s,
            None => {
                let s = self.socks.len() as u32;
                let mut sock = Sock {
                    pid: r.tgid,
                    fd: r.fd,
                    inode: ino,
                    role: Role::Unknown,
                    local: None,
                    port: None,
                    peer: None,
                    mss: None,
                    accepted_in_window: false,
                };
                if let Some(a) = self.addrs.get(&r.ino) {
                    let addr = |b: &[u8; 16], port: u16| {
                        let ip = if a.family == libc::AF_INET6 as u16 {
                            IpAddr::V6(Ipv6Addr::from(*b))
                        } else {
                            IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
                        };
                        SocketAddr::new(ip, port).to_string()
                    };
                    sock.local = Some(addr(&a.laddr, a.lport));
                    sock.peer = Some(addr(&a.raddr, a.rport));
                    sock.port = Some(a.lport);
                    sock.role = if self.listen_ports.contains(&a.lport) { Role::Accepted } else { Role::Outgoing };
                    // Without accept in view: a server-side socket not listed before the trace is a new connection.
                    sock.accepted_in_window =
                        self.sock_hooks && sock.role == Role::Accepted && !self.known.contains(&ino);
                }
                self.socks.push(sock);
                self.by_inode.insert(ino, s);
                s
            }
        };
        let sock = &mut self.socks[s as usize];
        if sock.fd < 0 && sock.pid == r.tgid {
            sock.fd = r.fd;
        }
        s
    }

    fn call(&mut self, r: &CallRec) {
        self.tgids.insert(r.tgid);
        self.tids.insert(r.tid);
        let th = self.threads.entry(r.tid).or_default();
        let since = th.last_t;
        th.last_t = r.t;
        let open = th.open.take();
        if r.dir == C_ACCEPT {
            let s = self.sock(r) as usize;
            self.socks[s].role = Role::Accepted;
            self.socks[s].accepted_in_window = true;
            return;
        }
        let write = r.dir == C_WRITE;
        let call = match events::classify(events::ARCH_X86_64, u64::from(r.nr)) {
            Some(Sys::Io(c)) if r.fd >= 0 || r.dir == C_WAIT => c,
            // Not a socket syscall of this direction: io_uring, or the kernel's own.
            _ if self.sock_hooks && write => Call::SockSend,
            _ if self.sock_hooks => Call::SockRecv,
            _ => return,
        };
        if let Some(o) = open
            && o.nr == r.nr
            && o.ino == r.ino
            && o.arg == r.arg
        {
            self.join(r, call, o);
            return;
        }
        let t_ns = self.rel(if self.sock_hooks { r.t } else { r.t_enter });
        let end_ns = self.rel(r.t);
        let mut ev = Event {
            t_ns,
            end_ns,
            tid: r.tid,
            call,
            dir: Dir::Wait,
            sock: None,
            fd: -1,
            ret: r.ret.into(),
            nagle: Nagle::Unknown,
        };
        let mut written = None;
        if r.dir != C_WAIT {
            let s = self.sock(r);
            ev.sock = Some(s);
            ev.fd = r.fd;
            ev.dir = if write { Dir::Write } else { Dir::Read };
            if write {
                let mut args = [0u64; 6];
                if let Some(i) = arg_index(call, self.sock_hooks) {
                    args[i] = r.arg.into();
                }
                let nonagle = r.bits >> B_NONAGLE_SHIFT;
                ev.nagle = Nagle::of(Some(nonagle & NAGLE_OFF != 0), Some(nonagle & NAGLE_CORK != 0), call.more(&args));
                if r.mss > 0 {
                    self.socks[s as usize].mss = Some(r.mss.into());
                }
                if r.ret > 0 && !call.counts_messages() {
                    // On the socket tracepoints the call's start is not known: it came after the thread's last record.
                    let t_enter = if self.sock_hooks { self.rel(since) } else { t_ns };
                    let w = hold::Write {
                        sk: u64::from(r.ino),
                        t_enter,
                        t_exit: end_ns,
                        bytes: r.ret as u32,
                        end: r.seq,
                        snd_nxt: r.snd_nxt,
                        in_flight: r.bits & B_IN_FLIGHT != 0,
                        mss: r.mss.into(),
                        nagle: ev.nagle,
                        left: r.bits & B_LEFT != 0,
                    };
                    written = Some(self.writes.len());
                    self.writes.push(Written { w, sock: s, tid: r.tid, t_ns });
                }
            }
        }
        let event = if self.events.len() < MAX_EVENTS {
            self.events.push(ev);
            Some(self.events.len() - 1)
        } else {
            self.dropped += 1;
            None
        };
        let done = amount(call, r.ret);
        if self.sock_hooks && looping(call) && r.ret > 0 && done < u64::from(r.arg) {
            let open = Open { nr: r.nr, ino: r.ino, arg: r.arg, done, event, write: written };
            self.threads.entry(r.tid).or_default().open = Some(open);
        }
    }

    /// Another pass of the looping call `o`: its bytes (or messages) added;
    /// a failed pass ends the call, which returns what it had done.
    fn join(&mut self, r: &CallRec, call: Call, mut o: Open) {
        let t = self.rel(r.t);
        let more = amount(call, r.ret);
        if let Some(e) = o.event.and_then(|i| self.events.get_mut(i)) {
            e.ret += more as i64;
            e.t_ns = t;
            e.end_ns = t;
        }
        if let Some(w) = o.write.and_then(|i| self.writes.get_mut(i))
            && r.ret > 0
        {
            // The call's bytes end where this pass's end: its fate is theirs.
            w.w.bytes = w.w.bytes.saturating_add(r.ret as u32);
            w.w.t_exit = t;
            w.w.end = r.seq;
            w.w.snd_nxt = r.snd_nxt;
            w.w.in_flight = r.bits & B_IN_FLIGHT != 0;
            w.w.left = r.bits & B_LEFT != 0;
            w.t_ns = t;
        }
        o.done += more;
        if r.ret > 0 && o.done < u64::from(o.arg) {
            self.threads.entry(r.tid).or_default().open = Some(o);
        }
    }

    /// Each write's fate, with its local port, thread and time (as in its [`Event`]).
    pub fn holds(&mut self) -> Vec<Hold> {
        self.xmits.sort_by_key(|x| x.t);
        let writes: Vec<hold::Write> = self.writes.iter().map(|w| w.w).collect();
        hold::join(&writes, &self.xmits)
            .into_iter()
            .zip(&self.writes)
            .map(|(fate, w): (Fate, &Written)| Hold {
                port: self.socks[w.sock as usize].port.unwrap_or(0),
                tid: w.tid,
                t_ns: w.t_ns,
                bytes: w.w.bytes,
                fate,
            })
            .collect()
    }
}

/// What one pass adds to its call's result: bytes, or one message.
fn amount(call: Call, ret: i32) -> u64 {
    match ret {
        r if r <= 0 => 0,
        _ if call.counts_messages() => 1,
        r => r as u64,
    }
}

/// The descriptor of socket `inode` in process `pid`, from /proc/PID/fd.
fn fd_of_inode(pid: u32, inode: u64) -> Option<i32> {
    let want = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten().find_map(|e| {
        let link = std::fs::read_link(e.path()).ok()?;
        (link.to_str() == Some(want.as_str())).then(|| e.file_name().to_str()?.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::super::records::{EV_CALL, EV_SOCK};
    use super::*;

    const SENDFILE: u16 = 40;
    const WRITEV: u16 = 20;

    fn rec(t: u64, nr: u16, ret: i32, arg: u32, seq: u32) -> Record {
        Record::Call(CallRec {
            kind: EV_CALL,
            dir: C_WRITE,
            ino: 500,
            t,
            tid: 9,
            tgid: 9,
            ret,
            fd: 7,
            nr,
            mss: 1448,
            arg,
            seq,
            snd_nxt: seq,
            bits: B_LEFT,
            ..CallRec::default()
        })
    }

    fn decode(records: &mut [Record]) -> Decoder {
        let mut d = Decoder::new(&[], &HashSet::from([80]), 0, true);
        d.run(records, u64::MAX);
        d
    }

    #[test]
    fn a_sendfile_in_passes_is_one_call_and_two_writes_stay_two() {
        // sendfile of 140,000 B: passes of 65,536, 65,536 and 8,928; then
        // another sendfile of the same count; then two writev.
        let mut r = [
            rec(10, SENDFILE, 65_536, 140_000, 65_536),
            rec(11, SENDFILE, 65_536, 140_000, 131_072),
            rec(12, SENDFILE, 8_928, 140_000, 140_000),
            rec(20, SENDFILE, 65_536, 140_000, 205_536),
            rec(30, WRITEV, 200, 0, 205_736),
            rec(31, WRITEV, 200, 0, 205_936),
        ];
        let mut d = decode(&mut r);
        let got: Vec<(Call, i64, u64)> = d.events.iter().map(|e| (e.call, e.ret, e.t_ns)).collect();
        assert_eq!(
            got,
            [
                (Call::Sendfile, 140_000, 12),
                (Call::Sendfile, 65_536, 20),
                (Call::Writev, 200, 30),
                (Call::Writev, 200, 31)
            ]
        );
        // The joined call's bytes end where its last pass ended; it left during the call.
        let h = d.holds();
        assert_eq!((h[0].bytes, h[0].t_ns, h[0].fate), (140_000, 12, Fate::AtOnce));
        assert_eq!(h.len(), 4);
    }

    #[test]
    fn a_pass_that_fails_ends_the_call_with_what_it_had_sent() {
        // Non-blocking: the socket's buffer fills in the second pass (EAGAIN);
        // the caller tries again with the same count later.
        let mut r = [
            rec(10, SENDFILE, 65_536, 140_000, 65_536),
            rec(11, SENDFILE, -libc::EAGAIN, 140_000, 65_536),
            rec(50, SENDFILE, 65_536, 140_000, 131_072),
        ];
        let d = decode(&mut r);
        let got: Vec<(Call, i64)> = d.events.iter().map(|e| (e.call, e.ret)).collect();
        assert_eq!(got, [(Call::Sendfile, 65_536), (Call::Sendfile, 65_536)]);
        // A first pass that fails is the call's error.
        let mut r = [rec(10, SENDFILE, -libc::EAGAIN, 140_000, 0), rec(11, SENDFILE, 100, 140_000, 100)];
        let got: Vec<i64> = decode(&mut r).events.iter().map(|e| e.ret).collect();
        assert_eq!(got, [-i64::from(libc::EAGAIN), 100]);
    }

    #[test]
    fn a_send_outside_a_socket_syscall_and_a_new_connection() {
        // io_uring_enter (426) sent on socket 500, which was not listed before
        // the trace: a server-side connection accepted since.
        let Record::Call(mut c) = rec(10, 426, 300, 0, 300) else { unreachable!() };
        c.fd = -1;
        let sock = SockRec {
            kind: EV_SOCK,
            family: libc::AF_INET as u16,
            ino: 500,
            lport: 80,
            rport: 4000,
            ..SockRec::default()
        };
        let mut r = [Record::Call(c), Record::Sock(sock)];
        let d = decode(&mut r);
        assert_eq!((d.events[0].call, d.events[0].dir, d.events[0].fd), (Call::SockSend, Dir::Write, -1));
        let s = &d.socks[0];
        assert_eq!((s.role, s.accepted_in_window, s.port), (Role::Accepted, true, Some(80)));
        assert_eq!(s.local.as_deref(), Some("0.0.0.0:80"));
    }
}
