//! The same trace with eBPF (`src/ebpf/trace.bpf.c`): the kernel filters
//! the syscalls of the traced processes by tgid and sends each read, write
//! and wait on a TCP socket through a ring buffer; nothing stops the process.
//! Records are decoded here into the recorder's [`Event`]s and [`Sock`]s, so
//! the same detector judges them; writes also carry their sequence numbers,
//! joined with the device transmits in [`hold`].

use super::events::{self, Call, Dir, Event, Nagle, Role, Sock, Sys};
use super::hold::{self, Fate};
use super::{Known, MAX_EVENTS, Recording, Request};
use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The programs and the raw tracepoints they attach to.
const PROGRAMS: &[(&str, &str)] = &[
    ("trace_enter", "sys_enter"),
    ("trace_exit", "sys_exit"),
    ("trace_fork", "sched_process_fork"),
    ("trace_xmit", "net_dev_start_xmit"),
    ("trace_retransmit", "tcp_retransmit_skb"),
    ("trace_drop", "kfree_skb"),
];

/// `struct event` in trace.bpf.c.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Raw {
    t_enter: u64,
    t_exit: u64,
    sk: u64,
    ino: u64,
    ret: i64,
    arg2: u64,
    arg3: u64,
    tid: u32,
    tgid: u32,
    nr: u32,
    fd: i32,
    seq: u32,
    snd_nxt: u32,
    packets_out: u32,
    mss: u32,
    kind: u16,
    code: u8,
    nonagle: u8,
    family: u16,
    lport: u16,
    rport: u16,
    left: u16,
    laddr: [u8; 16],
    raddr: [u8; 16],
}

const EV_CALL: u16 = 1;
const EV_XMIT: u16 = 2;
const EV_RETRANS: u16 = 3;
const EV_DROP: u16 = 4;
const C_READ: u8 = 1;
const C_WRITE: u8 = 2;
const C_WAIT: u8 = 3;
const C_SPLICE: u8 = 4;
const C_ACCEPT: u8 = 5;
/// `TCP_NAGLE_OFF` and `TCP_NAGLE_CORK` in `tcp_sock.nonagle`.
const NAGLE_OFF: u8 = 1;
const NAGLE_CORK: u8 = 2;

/// Calls per calibration round (each makes a record: the ring holds them).
const CAL_CALLS: u32 = 5_000;

/// What one call costs with the programs attached, measured before the trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Calibration {
    /// Added to a traced call (a read on a TCP socket of a traced process), ns.
    pub traced_ns: f64,
    /// Added to any other process's syscall, ns.
    pub other_ns: f64,
}

/// What the eBPF trace adds to the recording.
pub(crate) struct Extra {
    /// Records the ring buffer had no room for.
    pub lost: u64,
    /// Records sent.
    pub sent: u64,
    pub calibration: Option<Calibration>,
    /// Each write's fate, with its local port, thread and entry time (as in its [`Event`]).
    pub holds: Vec<Hold>,
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

/// Loads and attaches the programs; Err says why eBPF cannot be used.
pub(super) fn start() -> Result<Session, String> {
    let mut bpf = crate::ebpf::load(crate::ebpf::TRACE_OBJ, PROGRAMS)?;
    let take =
        |bpf: &mut aya::Ebpf, name: &str| bpf.take_map(name).ok_or_else(|| format!("the BPF object has no map {name}"));
    let map_err = |e: aya::maps::MapError| format!("BPF map: {e}");
    let mut calls: Array<MapData, u8> = Array::try_from(take(&mut bpf, "calls")?).map_err(map_err)?;
    for nr in 0..512u32 {
        let code = match events::classify(events::ARCH_X86_64, u64::from(nr)) {
            Some(Sys::Io(Call::Splice)) => C_SPLICE,
            Some(Sys::Io(c)) => match c.dir() {
                Dir::Read => C_READ,
                Dir::Write => C_WRITE,
                Dir::Wait => C_WAIT,
            },
            Some(Sys::Accept) => C_ACCEPT,
            _ => 0,
        };
        if code != 0 {
            calls.set(nr, code, 0).map_err(map_err)?;
        }
    }
    Ok(Session {
        traced: Array::try_from(take(&mut bpf, "traced")?).map_err(map_err)?,
        ring: RingBuf::try_from(take(&mut bpf, "events")?).map_err(map_err)?,
        counts: PerCpuArray::try_from(take(&mut bpf, "counts")?).map_err(map_err)?,
        _calls: calls,
        _bpf: bpf,
    })
}

/// Loaded and attached programs: dropping it detaches them.
pub(super) struct Session {
    /// One bit per traced process id (`traced` in trace.bpf.c).
    traced: Array<MapData, u64>,
    ring: RingBuf<MapData>,
    counts: PerCpuArray<MapData, u64>,
    _calls: Array<MapData, u8>,
    _bpf: aya::Ebpf,
}

impl Session {
    /// Traces process `pid` (`on`) or stops tracing it.
    fn mark(&mut self, pid: u32, on: bool) -> Result<(), String> {
        let (w, bit) = (pid >> 6, 1u64 << (pid & 63));
        let err = |e: aya::maps::MapError| format!("BPF map: {e}");
        let word = self.traced.get(&w, 0).map_err(err)?;
        self.traced.set(w, if on { word | bit } else { word & !bit }, 0).map_err(err)
    }

    fn count(&self, i: u32) -> u64 {
        self.counts.get(&i, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }

    /// Reads every waiting record.
    fn drain(&mut self, into: &mut Vec<Raw>) {
        while let Some(item) = self.ring.next() {
            if item.len() >= std::mem::size_of::<Raw>() {
                // SAFETY: the program wrote a whole `struct event`, laid out as `Raw` (plain integers).
                into.push(unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<Raw>()) });
            }
        }
    }
}

/// This thread's CPU time, ns: unlike the wall clock, not inflated when
/// other work on the host takes the CPU away mid-loop.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime with a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `n` non-blocking reads on a connected loopback TCP socket, CPU ns per call
/// (the programs run in the calling thread, so their time is counted).
fn read_loop(n: u32) -> Option<f64> {
    use std::os::fd::AsRawFd;
    let l = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
    let c = std::net::TcpStream::connect(l.local_addr().ok()?).ok()?;
    let _peer = l.accept().ok()?;
    let fd = c.as_raw_fd();
    let mut b = [0u8; 1];
    let t = thread_cpu_ns();
    for _ in 0..n {
        // SAFETY: recv into a valid buffer on our own socket; EAGAIN expected.
        unsafe { libc::recv(fd, b.as_mut_ptr().cast(), 1, libc::MSG_DONTWAIT) };
    }
    Some(thread_cpu_ns().saturating_sub(t) as f64 / f64::from(n))
}

fn median3(f: &mut dyn FnMut() -> Option<f64>) -> Option<f64> {
    let mut v: Vec<f64> = (0..3).filter_map(|_| f()).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Measures a traced and an untraced call: `base` was measured before the
/// programs were attached; the calibration's own records are thrown away.
fn calibrate(s: &mut Session, base: Option<f64>) -> Option<Calibration> {
    let me = std::process::id();
    let other = median3(&mut || read_loop(CAL_CALLS))?;
    s.mark(me, true).ok()?;
    let mut junk = Vec::new();
    let traced = median3(&mut || {
        let r = read_loop(CAL_CALLS);
        s.drain(&mut junk);
        r
    });
    let _ = s.mark(me, false);
    s.drain(&mut junk);
    let base = base?;
    Some(Calibration { traced_ns: (traced? - base).max(0.0), other_ns: (other - base).max(0.0) })
}

/// Traces `req.pids` with the programs in a fresh [`Session`] until the
/// window ends, `stop` is set or the process exits; Err when eBPF cannot be used.
pub(super) fn record(req: &Request, stop: &AtomicBool) -> Result<(Recording, Extra), String> {
    let base = median3(&mut || read_loop(CAL_CALLS));
    let mut s = start()?;
    let calibration = calibrate(&mut s, base);
    let (lost0, sent0) = (s.count(0), s.count(1));
    let mut initial: HashSet<u32> = HashSet::new();
    for &pid in &req.pids {
        s.mark(pid, true)?;
        initial.extend(super::tasks(pid));
    }
    let t0 = crate::ebpf::monotonic_ns();
    let started = Instant::now();
    let main = req.pids.first().copied().unwrap_or(0);
    let mut raw: Vec<Raw> = Vec::new();
    let mut exited = false;
    let mut overflow = 0u64;
    while started.elapsed() < req.duration && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10).min(req.duration.saturating_sub(started.elapsed())));
        s.drain(&mut raw);
        if raw.len() > MAX_EVENTS * 2 {
            overflow += (raw.len() - MAX_EVENTS * 2) as u64;
            raw.truncate(MAX_EVENTS * 2);
        }
        if super::exiting(main) {
            exited = true;
            break;
        }
    }
    let traced = started.elapsed();
    let t_end = crate::ebpf::monotonic_ns();
    s.drain(&mut raw);
    let (lost, sent) = (s.count(0) - lost0, s.count(1) - sent0);
    // Detach now: the programs stop running before the records are analysed.
    drop(s);
    let mut dec = Decoder::new(&req.known, &req.listen_ports, t0);
    raw.sort_by_key(|r| r.t_enter);
    for r in raw.iter().filter(|r| r.t_exit <= t_end) {
        dec.add(r);
    }
    dec.dropped += overflow;
    let holds = dec.holds();
    let tids: HashSet<u32> = dec.tids.iter().copied().collect();
    let mut notes = Vec::new();
    if lost > 0 {
        notes.push(format!(
            "{lost} records did not fit in the 8 MiB ring buffer and were lost: counts are lower bounds"
        ));
    }
    if exited {
        notes.push(format!(
            "the process exited {:.1} s into the trace: the results cover the time before",
            traced.as_secs_f64()
        ));
    }
    let forked: Vec<u32> = dec.tgids.iter().copied().filter(|t| !req.pids.contains(t)).collect();
    if !forked.is_empty() {
        notes.push(format!("{} process(es) forked during the trace were traced too", forked.len()));
    }
    let rec = Recording {
        events: dec.events,
        socks: dec.socks,
        dropped: dec.dropped,
        traced,
        exited,
        threads: initial.union(&tids).count() as u32,
        new_threads: tids.difference(&initial).count() as u32,
        stops: 0,
        handling: Duration::ZERO,
        handling_max: Duration::ZERO,
        signals: 0,
        calibration: None,
        notes,
    };
    Ok((rec, Extra { lost, sent, calibration, holds }))
}

/// Records → the recorder's events and sockets.
struct Decoder {
    t0: u64,
    listen_ports: HashSet<u16>,
    by_inode: HashMap<u64, u32>,
    socks: Vec<Sock>,
    events: Vec<Event>,
    dropped: u64,
    tids: Vec<u32>,
    tgids: HashSet<u32>,
    /// Each write, its socket, thread and entry time.
    writes: Vec<(hold::Write, u32, u32, u64)>,
    xmits: Vec<hold::Xmit>,
}

impl Decoder {
    fn new(known: &[Known], listen_ports: &HashSet<u16>, t0: u64) -> Decoder {
        let mut d = Decoder {
            t0,
            listen_ports: listen_ports.clone(),
            by_inode: HashMap::new(),
            socks: Vec::new(),
            events: Vec::new(),
            dropped: 0,
            tids: Vec::new(),
            tgids: HashSet::new(),
            writes: Vec::new(),
            xmits: Vec::new(),
        };
        for k in known {
            let role = Role::from_name(k.role);
            d.by_inode.insert(k.inode, d.socks.len() as u32);
            d.socks.push(Sock {
                pid: k.pid,
                fd: k.fd,
                inode: k.inode,
                role,
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

    /// The socket of a record, added on first sight. The programs send a
    /// socket's addresses with its first record only (`family` 0 after), which
    /// may sort after a call that began earlier: they are filled in when they come.
    fn sock(&mut self, r: &Raw) -> u32 {
        let s = match self.by_inode.get(&r.ino) {
            Some(&s) => s,
            None => {
                let s = self.socks.len() as u32;
                self.socks.push(Sock {
                    pid: r.tgid,
                    fd: r.fd,
                    inode: r.ino,
                    role: Role::Unknown,
                    local: None,
                    port: None,
                    peer: None,
                    mss: None,
                    accepted_in_window: false,
                });
                self.by_inode.insert(r.ino, s);
                s
            }
        };
        let sock = &mut self.socks[s as usize];
        if r.family != 0 && sock.local.is_none() {
            let addr = |a: &[u8; 16], port: u16| {
                let ip = if r.family == libc::AF_INET6 as u16 {
                    IpAddr::V6(Ipv6Addr::from(*a))
                } else {
                    IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
                };
                SocketAddr::new(ip, port).to_string()
            };
            sock.local = Some(addr(&r.laddr, r.lport));
            sock.peer = Some(addr(&r.raddr, r.rport));
            sock.port = Some(r.lport);
            if sock.role == Role::Unknown {
                sock.role = if self.listen_ports.contains(&r.lport) { Role::Accepted } else { Role::Outgoing };
            }
        }
        s
    }

    fn add(&mut self, r: &Raw) {
        match r.kind {
            EV_XMIT | EV_RETRANS | EV_DROP => {
                self.xmits.push(hold::Xmit {
                    sk: r.sk,
                    t: self.rel(r.t_exit),
                    seq: r.seq,
                    end: r.snd_nxt,
                    what: match r.kind {
                        EV_XMIT => hold::Sent::Out,
                        EV_RETRANS => hold::Sent::Again,
                        _ => hold::Sent::Dropped,
                    },
                });
                return;
            }
            EV_CALL => {}
            _ => return,
        }
        self.tgids.insert(r.tgid);
        if !self.tids.contains(&r.tid) {
            self.tids.push(r.tid);
        }
        if r.code == C_ACCEPT {
            let s = self.sock(r) as usize;
            self.socks[s].role = Role::Accepted;
            self.socks[s].accepted_in_window = true;
            return;
        }
        let Some(Sys::Io(call)) = events::classify(events::ARCH_X86_64, u64::from(r.nr)) else { return };
        let (t_ns, end_ns) = (self.rel(r.t_enter), self.rel(r.t_exit));
        let mut ev = Event {
            t_ns,
            end_ns,
            tid: r.tid,
            call,
            dir: Dir::Wait,
            sock: None,
            fd: -1,
            ret: r.ret,
            nagle: Nagle::Unknown,
        };
        if r.code != C_WAIT {
            let s = self.sock(r);
            ev.sock = Some(s);
            ev.fd = r.fd;
            ev.dir = if r.code == C_WRITE { Dir::Write } else { Dir::Read };
            if ev.dir == Dir::Write {
                let args = [r.fd as u64, 0, r.arg2, r.arg3, 0, 0];
                ev.nagle =
                    Nagle::of(Some(r.nonagle & NAGLE_OFF != 0), Some(r.nonagle & NAGLE_CORK != 0), call.more(&args));
                if r.mss > 0 {
                    self.socks[s as usize].mss = Some(r.mss);
                }
                if r.ret > 0 && !call.counts_messages() {
                    let w = hold::Write {
                        sk: r.sk,
                        t_enter: t_ns,
                        t_exit: end_ns,
                        bytes: r.ret as u32,
                        end: r.seq,
                        snd_nxt: r.snd_nxt,
                        packets_out: r.packets_out,
                        mss: r.mss,
                        nagle: ev.nagle,
                        left: r.left != 0,
                    };
                    self.writes.push((w, s, r.tid, t_ns));
                }
            }
        }
        if self.events.len() < MAX_EVENTS {
            self.events.push(ev);
        } else {
            self.dropped += 1;
        }
    }

    fn holds(&mut self) -> Vec<Hold> {
        self.xmits.sort_by_key(|x| x.t);
        let writes: Vec<hold::Write> = self.writes.iter().map(|w| w.0).collect();
        hold::join(&writes, &self.xmits)
            .into_iter()
            .zip(&self.writes)
            .map(|(fate, &(w, s, tid, t_ns))| Hold {
                port: self.socks[s as usize].port.unwrap_or(0),
                tid,
                t_ns,
                bytes: w.bytes,
                fate,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_record_layout_matches_the_programs() {
        // struct event in trace.bpf.c: 136 bytes, the verifier's ringbuf_mem size.
        assert_eq!(std::mem::size_of::<super::Raw>(), 136);
    }
}
