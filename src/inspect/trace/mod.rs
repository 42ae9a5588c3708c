//! `inspect --trace`: a live process's write pattern, recorded with ptrace
//! like `strace -f`, then detached.
//!
//! Every thread of the process and of its workers is seized
//! (`PTRACE_SEIZE`, new threads followed with `PTRACE_O_TRACECLONE`) and
//! stopped at each syscall entry and exit (`PTRACE_SYSCALL`); reads, writes
//! and waits on TCP sockets are recorded with monotonic times
//! ([`events`]). When the window ends (or on Ctrl-C) each thread is
//! interrupted and detached; signals that arrived meanwhile are passed on,
//! and group-stopped threads stay stopped. [`detect`] then looks for
//! write-write-read on sockets with Nagle on.
//!
//! No seccomp filter is installed (it could never be removed from the
//! process), so every syscall costs two stops: the report says how much.
//!
//! Where eBPF loads, the same records come from programs in the kernel
//! instead ([`ebpf`]), nothing stops the process, and each write's bytes are
//! followed until they leave the host ([`hold`]); [`Method`] says which.

mod decode;
mod detect;
mod ebpf;
mod events;
mod hold;
mod proof;
mod ptrace;
mod records;

use super::{procfs, sockopt};
use crate::record::inspect::{Trace, TraceExample, TraceKind, TraceLine, TraceOverhead};
use events::{Call, Dir, Event, Nagle, Role, Sock, Sys};
use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest trace allowed: every syscall of the process is slowed meanwhile.
pub const MAX_DURATION: Duration = Duration::from_secs(60);

/// Most calls kept; later ones are counted, not analysed (bounds memory: ~48 MB).
const MAX_EVENTS: usize = 1_000_000;

/// How long detaching may take before the rest is left to the kernel (which
/// detaches every tracee when the tracer thread exits).
const DETACH_LIMIT: Duration = Duration::from_secs(2);

/// A socket `inspect` already read, so the tracer need not look it up again.
#[derive(Clone, Debug)]
pub(crate) struct Known {
    /// Process holding it.
    pub pid: u32,
    /// Its descriptor there.
    pub fd: i32,
    /// Socket inode.
    pub inode: u64,
    /// `listening`, `accepted` or `outgoing`, as `inspect` names it.
    pub role: &'static str,
    /// Local `ip:port`.
    pub local: String,
    /// Peer `ip:port`.
    pub peer: String,
    /// TCP_NODELAY when read.
    pub nodelay: Option<bool>,
    /// TCP_CORK when read.
    pub cork: Option<bool>,
    /// Send MSS from tcp_info.
    pub mss: Option<u32>,
}

/// How the trace is recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Method {
    /// eBPF when it loads, ptrace otherwise.
    #[default]
    Auto,
    /// eBPF or nothing.
    Ebpf,
    /// ptrace.
    Ptrace,
}

/// What to trace.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    /// The process first, then its workers.
    pub pids: Vec<u32>,
    /// Sockets already read.
    pub known: Vec<Known>,
    /// Ports the processes listen on (a socket on one of them is the server side).
    pub listen_ports: HashSet<u16>,
    /// The window.
    pub duration: Duration,
    /// Only sockets on this local port are analysed (`inspect :PORT`).
    pub port: Option<u16>,
    /// eBPF, ptrace, or eBPF when it loads.
    pub method: Method,
    /// Say on stderr when the window begins.
    pub announce: bool,
}

/// One line on stderr when the window begins (after loading, calibrating
/// and attaching): what is traced, how, for how long.
fn announce(req: &Request, how: &str) {
    if req.announce {
        let pids: Vec<String> = req.pids.iter().map(u32::to_string).collect();
        eprintln!(
            "tcpdoctor: tracing pid {} with {how} for {} s (Ctrl-C ends it early)",
            pids.join(","),
            req.duration.as_secs_f64()
        );
    }
}

/// Why the trace could not start.
#[derive(Debug)]
pub(crate) enum TraceError {
    /// PTRACE_SEIZE of `pid` refused: no permission.
    Permission { pid: u32 },
    /// Another tracer (`by`: a debugger, strace) holds `pid`.
    Traced { pid: u32, by: u32 },
    /// `pid` is gone.
    Gone { pid: u32 },
    /// Something else went wrong (`what`), e.g. `pid` is tcpdoctor's own process.
    Other { pid: u32, what: String },
    /// `--method ebpf` and the programs would not load (`why`).
    Bpf { pid: u32, why: String },
}

/// What the tracer thread hands back.
struct Recording {
    events: Vec<Event>,
    socks: Vec<Sock>,
    dropped: u64,
    traced: Duration,
    exited: bool,
    threads: u32,
    new_threads: u32,
    stops: u64,
    handling: Duration,
    handling_max: Duration,
    signals: u64,
    calibration: Option<ptrace::Calibration>,
    /// Calls recorded as they ended, without their start (eBPF on the socket tracepoints).
    untimed: bool,
    notes: Vec<String>,
}

/// Shared between the tracer thread and the watchdog.
#[derive(Default)]
struct Shared {
    /// Set by the watchdog: detach now.
    ending: AtomicBool,
    /// The tracer thread's id, once it waits for stops.
    tid: AtomicI32,
    /// When the processes were attached.
    started: Mutex<Option<Instant>>,
}

/// Traces `req.pids` for `req.duration` (or until `stop` is set), then
/// detaches and finds the write pattern.
pub(crate) fn run(req: Request, stop: &AtomicBool) -> Result<Trace, TraceError> {
    let main = req.pids.first().copied().unwrap_or(0);
    if main == std::process::id() {
        return Err(TraceError::Other { pid: main, what: "tcpdoctor cannot trace its own process".into() });
    }
    let fallback = match req.method {
        Method::Ptrace => None,
        Method::Ebpf | Method::Auto => match ebpf::record(&req, stop) {
            Ok((rec, extra)) => {
                let interrupted = stop.load(Ordering::Relaxed) && rec.traced < req.duration && !rec.exited;
                let mut t = report(rec, Some(extra), req.duration, interrupted, req.port);
                t.processes = req.pids;
                return Ok(t);
            }
            Err(why) if req.method == Method::Ebpf => return Err(TraceError::Bpf { pid: main, why }),
            Err(why) => Some(why),
        },
    };
    let mut t = ptrace_run(req, stop)?;
    if let Some(why) = fallback {
        t.fallback = Some(why.clone());
        t.notes.insert(
            0,
            format!("eBPF was not used ({why}): traced with ptrace instead, which stops the process at every syscall"),
        );
    }
    Ok(t)
}

/// The trace with ptrace.
fn ptrace_run(req: Request, stop: &AtomicBool) -> Result<Trace, TraceError> {
    let main = req.pids.first().copied().unwrap_or(0);
    ptrace::arm_kick();
    let shared = Arc::new(Shared::default());
    let sh = Arc::clone(&shared);
    let (duration, port) = (req.duration, req.port);
    let pids = req.pids.clone();
    let tracer = std::thread::Builder::new()
        .name("tcpdoctor-trace".into())
        .spawn(move || Tracer::new(req, sh).run())
        .map_err(|e| TraceError::Other { pid: main, what: format!("cannot start the tracer thread: {e}") })?;
    let mut interrupted = false;
    // The watchdog: ends the window, then kicks the tracer out of its waits
    // until it is done (a kick that lands outside a wait is repeated).
    while !tracer.is_finished() {
        let started = *shared.started.lock().unwrap_or_else(|e| e.into_inner());
        let stopped = stop.load(Ordering::Relaxed);
        if stopped || started.is_some_and(|t0| t0.elapsed() >= duration) {
            interrupted |= stopped && started.is_none_or(|t0| t0.elapsed() < duration);
            shared.ending.store(true, Ordering::Relaxed);
        }
        let tid = shared.tid.load(Ordering::Relaxed);
        if shared.ending.load(Ordering::Relaxed) && tid > 0 {
            ptrace::kick(tid);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let rec = tracer.join().map_err(|_| TraceError::Other { pid: main, what: "the tracer thread failed".into() })??;
    let mut t = report(rec, None, duration, interrupted, port);
    t.processes = pids;
    Ok(t)
}

/// One traced thread.
struct Thread {
    tgid: u32,
    /// The syscall it is in (seen at entry), if one of ours.
    entry: Option<Entry>,
}

#[derive(Clone, Copy)]
struct Entry {
    sys: Sys,
    args: [u64; 6],
    t_ns: u64,
}

struct Tracer {
    req: Request,
    shared: Arc<Shared>,
    start: Instant,
    threads: HashMap<u32, Thread>,
    fds: FdMap,
    rec: Recording,
    other_arch: u64,
    info_failed: bool,
}

impl Tracer {
    fn new(req: Request, shared: Arc<Shared>) -> Tracer {
        let fds = FdMap::new(&req.known, req.listen_ports.clone());
        Tracer {
            req,
            shared,
            start: Instant::now(),
            threads: HashMap::new(),
            fds,
            rec: Recording {
                events: Vec::new(),
                socks: Vec::new(),
                dropped: 0,
                traced: Duration::ZERO,
                exited: false,
                threads: 0,
                new_threads: 0,
                stops: 0,
                handling: Duration::ZERO,
                handling_max: Duration::ZERO,
                signals: 0,
                calibration: None,
                untimed: false,
                notes: Vec::new(),
            },
            other_arch: 0,
            info_failed: false,
        }
    }

    fn run(mut self) -> Result<Recording, TraceError> {
        // Before attaching, so the process is not slowed for it.
        // The median of three: one round can land on a moment the machine is busier.
        let mut cal: Vec<ptrace::Calibration> = (0..3).filter_map(|_| ptrace::calibrate(ptrace::CAL_CALLS)).collect();
        cal.sort_by(|a, b| a.per_stop_us.total_cmp(&b.per_stop_us));
        self.rec.calibration = cal.get(cal.len() / 2).copied();
        if self.rec.calibration.is_none() {
            self.rec
                .notes
                .push("the cost of a stop could not be measured at start (ptrace over a child failed)".into());
        }
        if self.shared.ending.load(Ordering::Relaxed) {
            return Ok(self.rec);
        }
        if let Err(e) = self.attach() {
            self.detach();
            return Err(e);
        }
        self.start = Instant::now();
        self.shared.tid.store(ptrace::gettid(), Ordering::Relaxed);
        *self.shared.started.lock().unwrap_or_else(|e| e.into_inner()) = Some(self.start);
        announce(&self.req, "ptrace");
        self.trace();
        self.rec.traced = self.start.elapsed();
        self.detach();
        if self.other_arch > 0 {
            self.rec.notes.push(format!(
                "{} syscall stops of another architecture (a 32-bit process?) were not decoded",
                self.other_arch
            ));
        }
        self.rec.socks = std::mem::take(&mut self.fds.socks);
        self.rec.notes.append(&mut self.fds.notes);
        Ok(self.rec)
    }

    /// Seizes every thread of every process; threads started meanwhile are
    /// caught by listing again until no new one appears.
    fn attach(&mut self) -> Result<(), TraceError> {
        let pids = self.req.pids.clone();
        for (n, &pid) in pids.iter().enumerate() {
            for _ in 0..10 {
                let tids = tasks(pid);
                let fresh: Vec<u32> = tids.into_iter().filter(|t| !self.threads.contains_key(t)).collect();
                if fresh.is_empty() {
                    break;
                }
                for tid in fresh {
                    match ptrace::seize(tid) {
                        Ok(()) => {
                            self.threads.insert(tid, Thread { tgid: pid, entry: None });
                            self.rec.threads += 1;
                            // Stops it at once; its first report is handled like any other.
                            let _ = ptrace::interrupt(tid);
                        }
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                        // A thread (or the process) exiting refuses attaching with EPERM too.
                        Err(e) if e.raw_os_error() == Some(libc::EPERM) && exiting(tid) => {}
                        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                            let by = procfs::status_field(pid, "TracerPid").ok().flatten().unwrap_or(0);
                            return Err(if by != 0 {
                                TraceError::Traced { pid, by }
                            } else {
                                TraceError::Permission { pid }
                            });
                        }
                        Err(e) => {
                            return Err(TraceError::Other { pid, what: format!("PTRACE_SEIZE of thread {tid}: {e}") });
                        }
                    }
                }
            }
            if n == 0 && !self.threads.values().any(|t| t.tgid == pid) {
                return Err(TraceError::Gone { pid });
            }
        }
        Ok(())
    }

    fn ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Handles stops until the window ends or every thread is gone.
    fn trace(&mut self) {
        while !self.shared.ending.load(Ordering::Relaxed) {
            if self.threads.is_empty() {
                self.rec.exited = true;
                break;
            }
            if self.rec.exited {
                // The process is gone; its workers (if any) are detached now.
                break;
            }
            match ptrace::wait_any() {
                Ok((tid, status)) => {
                    let t0 = Instant::now();
                    self.on_stop(tid, status);
                    let took = t0.elapsed();
                    self.rec.stops += 1;
                    self.rec.handling += took;
                    self.rec.handling_max = self.rec.handling_max.max(took);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {
                    self.threads.clear();
                }
                Err(e) => {
                    self.rec.notes.push(format!("waiting for the process failed: {e}; the trace ended early"));
                    break;
                }
            }
        }
        if self.rec.exited {
            self.rec.notes.push(format!(
                "the process exited {:.1} s into the trace: the results cover the time before",
                self.start.elapsed().as_secs_f64()
            ));
        }
    }

    fn tgid_of(&self, tid: u32) -> u32 {
        self.threads
            .get(&tid)
            .map_or_else(|| procfs::status_field(tid, "Tgid").ok().flatten().unwrap_or(tid), |t| t.tgid)
    }

    fn on_stop(&mut self, tid: u32, status: i32) {
        if !self.threads.contains_key(&tid) && ptrace::decode(status) != ptrace::Stop::Gone {
            // A new thread's first stop can come before its creator's clone event.
            let tgid = self.tgid_of(tid);
            self.add_thread(tid, tgid);
        }
        match ptrace::decode(status) {
            ptrace::Stop::Gone => {
                // A leader is reported gone only once its whole process is.
                if let Some(t) = self.threads.remove(&tid)
                    && t.tgid == tid
                {
                    if tid == self.req.pids[0] {
                        self.rec.exited = true;
                    } else {
                        self.rec.notes.push(format!("worker {tid} exited during the trace"));
                    }
                }
            }
            ptrace::Stop::Syscall => {
                self.on_syscall(tid);
                let _ = ptrace::resume(tid, 0);
            }
            ptrace::Stop::Event(ptrace::EVENT_CLONE, _) => {
                if let Ok(new) = ptrace::event_msg(tid) {
                    let tgid = self.tgid_of(tid);
                    self.add_thread(new, tgid);
                }
                let _ = ptrace::resume(tid, 0);
            }
            ptrace::Stop::Event(ptrace::EVENT_STOP, sig) if ptrace::is_group_stop(sig) => {
                // Job control stopped the process: it stays stopped, as untraced.
                if ptrace::listen(tid).is_err() {
                    let _ = ptrace::resume(tid, 0);
                }
            }
            ptrace::Stop::Event(..) => {
                let _ = ptrace::resume(tid, 0);
            }
            ptrace::Stop::Signal(sig) => {
                self.rec.signals += 1;
                let _ = ptrace::resume(tid, sig);
            }
        }
    }

    fn add_thread(&mut self, tid: u32, tgid: u32) {
        if self.threads.insert(tid, Thread { tgid, entry: None }).is_none() {
            self.rec.threads += 1;
            self.rec.new_threads += 1;
        }
    }

    fn on_syscall(&mut self, tid: u32) {
        let info = match ptrace::syscall_info(tid) {
            Ok(i) => i,
            Err(e) => {
                // ESRCH: killed meanwhile. Anything else means nothing can be decoded: say so once.
                if e.raw_os_error() != Some(libc::ESRCH) && !self.info_failed {
                    self.info_failed = true;
                    self.rec.notes.push(format!(
                        "PTRACE_GET_SYSCALL_INFO failed ({e}; it needs Linux 5.3): syscalls were not decoded"
                    ));
                }
                return;
            }
        };
        let now = self.ns();
        let Some(th) = self.threads.get_mut(&tid) else { return };
        match info.op {
            ptrace::INFO_ENTRY => {
                if info.arch != events::ARCH_X86_64 && info.arch != events::ARCH_AARCH64 {
                    self.other_arch += 1;
                }
                th.entry = events::classify(info.arch, info.nr).map(|sys| Entry { sys, args: info.args, t_ns: now });
            }
            ptrace::INFO_EXIT => {
                if let Some(e) = th.entry.take() {
                    let tgid = th.tgid;
                    self.on_exit(tid, tgid, e, info.ret, now);
                }
            }
            _ => {}
        }
    }

    fn on_exit(&mut self, tid: u32, tgid: u32, e: Entry, ret: i64, now: u64) {
        let a = e.args;
        match e.sys {
            Sys::Io(call) => self.record(tid, tgid, call, &a, ret, e.t_ns, now),
            Sys::Close => self.fds.forget(tgid, a[0] as i32),
            Sys::CloseRange => self.fds.forget_range(tgid, a[0], a[1]),
            Sys::DupTo => self.fds.forget(tgid, a[1] as i32),
            Sys::NewFd if ret >= 0 => self.fds.forget(tgid, ret as i32),
            Sys::Fcntl if ret >= 0 && (a[1] == libc::F_DUPFD as u64 || a[1] == libc::F_DUPFD_CLOEXEC as u64) => {
                self.fds.forget(tgid, ret as i32)
            }
            Sys::Accept if ret >= 0 => self.fds.accepted(tgid, a[0] as i32, ret as i32),
            Sys::SetSockOpt if ret == 0 && a[1] == libc::IPPROTO_TCP as u64 => self.fds.reread(tgid, a[0] as i32),
            Sys::Exec if ret == 0 => self.fds.forget_process(tgid),
            _ => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn record(&mut self, tid: u32, tgid: u32, call: Call, a: &[u64; 6], ret: i64, t_ns: u64, end_ns: u64) {
        let mut ev = Event { t_ns, end_ns, tid, call, dir: call.dir(), sock: None, fd: -1, ret, nagle: Nagle::Unknown };
        if call.dir() != Dir::Wait {
            let Some((fd, dir, s)) =
                call.fds(a).into_iter().flatten().find_map(|(fd, dir)| self.fds.lookup(tgid, fd).map(|s| (fd, dir, s)))
            else {
                return;
            };
            ev.fd = fd;
            ev.dir = dir;
            ev.sock = Some(s);
            if dir == Dir::Write {
                ev.nagle = self.fds.nagle(s, call.more(a));
            }
        }
        if self.rec.events.len() < MAX_EVENTS {
            self.rec.events.push(ev);
        } else {
            self.rec.dropped += 1;
        }
    }

    /// Interrupts every thread and detaches each at its next stop, passing on
    /// a signal it was about to receive; bounded by [`DETACH_LIMIT`].
    fn detach(&mut self) {
        for &tid in self.threads.keys() {
            let _ = ptrace::interrupt(tid);
        }
        let mut left: HashSet<u32> = self.threads.keys().copied().collect();
        let until = Instant::now() + DETACH_LIMIT;
        // Kicks keep coming while the tracer runs, so each wait ends within ~10 ms.
        self.shared.ending.store(true, Ordering::Relaxed);
        self.shared.tid.store(ptrace::gettid(), Ordering::Relaxed);
        while !left.is_empty() && Instant::now() < until {
            match ptrace::wait_any() {
                Ok((tid, status)) => match ptrace::decode(status) {
                    ptrace::Stop::Gone => {
                        left.remove(&tid);
                    }
                    ptrace::Stop::Signal(sig) => {
                        self.rec.signals += 1;
                        let _ = ptrace::detach(tid, sig);
                        left.remove(&tid);
                    }
                    ptrace::Stop::Event(ptrace::EVENT_CLONE, _) => {
                        // The new thread reports its first stop next; detach it then.
                        if let Ok(new) = ptrace::event_msg(tid) {
                            left.insert(new);
                        }
                        let _ = ptrace::detach(tid, 0);
                        left.remove(&tid);
                    }
                    // Syscall, interrupt or group-stop (which the kernel keeps in force).
                    _ => {
                        let _ = ptrace::detach(tid, 0);
                        left.remove(&tid);
                    }
                },
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        if !left.is_empty() {
            self.rec.notes.push(format!(
                "{} thread(s) did not stop within {} s to be detached; the kernel detaches them as the tracer thread ends",
                left.len(),
                DETACH_LIMIT.as_secs()
            ));
        }
        self.threads.clear();
    }
}

/// Whether a thread is gone or a zombie (ptrace refuses zombies with EPERM).
fn exiting(tid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{tid}/status")) {
        Ok(s) => s
            .lines()
            .find_map(|l| l.strip_prefix("State:"))
            .is_some_and(|v| matches!(v.trim().chars().next(), Some('Z' | 'X'))),
        Err(_) => true,
    }
}

/// Thread ids of a process.
fn tasks(pid: u32) -> Vec<u32> {
    let Ok(d) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut v: Vec<u32> = d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    v.sort_unstable();
    v
}

/// Descriptor → TCP socket, per process, looked up in /proc on first use
/// and forgotten when the number may name another file.
struct FdMap {
    by_fd: HashMap<(u32, i32), Option<u32>>,
    by_inode: HashMap<u64, u32>,
    not_tcp: HashSet<u64>,
    socks: Vec<Sock>,
    /// TCP_NODELAY and TCP_CORK per socket, as last read.
    opts: Vec<(Option<bool>, Option<bool>)>,
    pidfds: HashMap<u32, Option<sockopt::Pidfd>>,
    rows: HashMap<u64, procfs::TcpEntry>,
    listen_ports: HashSet<u16>,
    unreadable: u32,
    notes: Vec<String>,
}

impl FdMap {
    fn new(known: &[Known], listen_ports: HashSet<u16>) -> FdMap {
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

    fn add(&mut self, pid: u32, fd: i32, inode: u64, role: Role, opts: (Option<bool>, Option<bool>)) -> u32 {
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

    fn pidfd(&mut self, pid: u32) -> Option<&sockopt::Pidfd> {
        self.pidfds.entry(pid).or_insert_with(|| sockopt::Pidfd::open(pid).ok()).as_ref()
    }

    /// TCP_NODELAY and TCP_CORK now; Err(true) when the socket is not TCP.
    fn read_opts(&mut self, pid: u32, fd: i32, inode: u64) -> Result<(Option<bool>, Option<bool>), bool> {
        match self.pidfd(pid).map(|p| p.sockopts(fd, inode)) {
            Some(Ok(o)) => Ok((Some(o.nodelay), Some(o.cork))),
            Some(Err(e)) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOPROTOOPT)) => Err(true),
            _ => Err(false),
        }
    }

    /// The TCP socket behind `fd` of `pid`, if it is one.
    fn lookup(&mut self, pid: u32, fd: i32) -> Option<u32> {
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
    fn socket(&mut self, pid: u32, fd: i32, inode: u64, role: Option<Role>) -> Option<u32> {
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
    fn row(&mut self, pid: u32, inode: u64) -> Option<procfs::TcpEntry> {
        if !self.rows.contains_key(&inode)
            && let Ok(rows) = procfs::net_tcp(&format!("/proc/{pid}/net"))
        {
            self.rows = rows.into_iter().filter(|r| r.inode != 0).map(|r| (r.inode, r)).collect();
        }
        self.rows.get(&inode).cloned()
    }

    /// `accept` on `listener` returned `fd`: a new server-side connection.
    fn accepted(&mut self, pid: u32, listener: i32, fd: i32) {
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
    fn reread(&mut self, pid: u32, fd: i32) {
        if let Some(s) = self.lookup(pid, fd) {
            let ino = self.socks[s as usize].inode;
            if let Ok(o) = self.read_opts(pid, fd, ino) {
                self.opts[s as usize] = o;
            }
        }
    }

    fn nagle(&self, s: u32, more: bool) -> Nagle {
        let (nodelay, cork) = self.opts.get(s as usize).copied().unwrap_or((None, None));
        Nagle::of(nodelay, cork, more)
    }

    fn forget(&mut self, pid: u32, fd: i32) {
        self.by_fd.remove(&(pid, fd));
    }

    fn forget_range(&mut self, pid: u32, first: u64, last: u64) {
        self.by_fd.retain(|&(p, fd), _| p != pid || (fd as u64) < first || fd as u64 > last);
    }

    fn forget_process(&mut self, pid: u32) {
        self.by_fd.retain(|&(p, _), _| p != pid);
    }
}

/// The socket inode behind a descriptor (`socket:[N]`), if it is a socket.
fn socket_inode(pid: u32, fd: i32) -> Option<u64> {
    let t = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    t.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// The report: MSS from tcp_info for the sockets still open, the detection, the cost.
fn report(
    mut rec: Recording,
    extra: Option<ebpf::Extra>,
    requested: Duration,
    interrupted: bool,
    port: Option<u16>,
) -> Trace {
    let inodes: HashSet<u64> = rec.socks.iter().filter(|s| s.mss.is_none()).map(|s| s.inode).collect();
    if !inodes.is_empty() {
        match super::diag::tcp_infos(&inodes) {
            Ok(infos) => {
                for s in &mut rec.socks {
                    if let Some(i) = infos.get(&s.inode).filter(|i| i.mss > 0) {
                        s.mss = Some(i.mss);
                    }
                }
            }
            Err(e) => rec.notes.push(format!("sock_diag (tcp_info, for the MSS) failed: {e}")),
        }
    }
    if let Some(port) = port {
        // `inspect :PORT`: other ports' sockets are left out (waits stay: they show the thread's state).
        let other: HashSet<u32> =
            (0..rec.socks.len() as u32).filter(|&s| rec.socks[s as usize].port.is_some_and(|p| p != port)).collect();
        let n = rec.events.len();
        rec.events.retain(|e| e.sock.is_none_or(|s| !other.contains(&s)));
        if rec.events.len() < n {
            rec.notes.push(format!(
                "{} calls on other local ports left out (`inspect PID` keeps them)",
                n - rec.events.len()
            ));
        }
    }
    // Entry order, so that a call that blocked sorts where it began.
    rec.events.sort_by_key(|e| e.t_ns);
    let d = detect::detect(&rec.events, &rec.socks);
    let ms = |ns: u64| ns as f64 / 1e6;
    let kinds = d
        .kinds
        .iter()
        .map(|k| TraceKind {
            role: k.role.map_or("unknown", Role::name),
            nagle: k.nagle.map_or("unknown", Nagle::name),
            sockets: k.sockets,
            responses: k.responses,
            single: k.single,
            in_pieces: k.in_pieces,
            write_write_read: k.write_write_read,
        })
        .collect();
    let holds: Vec<decode::Hold> = extra
        .as_ref()
        .map(|x| x.holds.iter().filter(|h| port.is_none_or(|p| h.port == p)).copied().collect())
        .unwrap_or_default();
    let fates: HashMap<(u32, u64), hold::Fate> = holds.iter().map(|h| ((h.tid, h.t_ns), h.fate)).collect();
    let example = d.example.as_ref().map(|ex| example(&rec.events, &rec.socks, ex, &fates, rec.untimed));
    let mut notes = std::mem::take(&mut rec.notes);
    if rec.dropped > 0 {
        notes.push(format!(
            "{} calls after the first {MAX_EVENTS} were counted but not analysed (a shorter --trace keeps all)",
            rec.dropped
        ));
    }
    if d.mss_defaulted > 0 {
        notes.push(format!(
            "MSS unknown for {} socket(s) closed before the end (tcp_info gone): {} B assumed",
            d.mss_defaulted,
            detect::DEFAULT_MSS
        ));
    }
    if d.first_responses > 0 {
        notes.push(format!(
            "{} write-write-read response(s) were the first on a new connection and are not counted: a new \
connection's peer ACKs at once (quick-ACK mode), so they do not stall",
            d.first_responses
        ));
    }
    if d.unfinished > 0 {
        notes.push(format!("{} response(s) were still open when the trace ended (not counted)", d.unfinished));
    }
    if extra.is_none() {
        notes.push(
            "ptrace stops the process at every syscall (like strace); a thread waiting in epoll_wait may see one \
EINTR when tracing starts and when it ends, which servers retry"
                .into(),
        );
    }
    let calls = rec.events.len() as u64 + rec.dropped;
    let (overhead, cost, kernel_hold) = match &extra {
        None => (Some(overhead(&rec, d.responses)), None, None),
        Some(x) => (None, Some(proof::cost(x, calls, rec.traced, d.responses)), Some(proof::holds(&holds))),
    };
    let kernel_confirms = proof::confirms(d.write_write_read, kernel_hold.as_ref());
    let nagle_fraction = (d.nagle_responses > 0).then(|| d.nagle_in_pieces as f64 / d.nagle_responses as f64);
    let text = if d.responses == 0 {
        "no complete response was seen on a TCP socket (no traffic in the window?)".to_string()
    } else if d.write_write_read > 0 {
        format!(
            "write-write-read: {} of {} responses on Nagle sockets were written in small pieces and then the \
process waited for the next request{}",
            d.write_write_read,
            d.nagle_responses,
            d.gap_wwr_ns
                .map(|g| format!(" (median {:.1} ms from the last piece to the next request)", ms(g)))
                .unwrap_or_default()
        ) + &kernel_hold.as_ref().filter(|_| kernel_confirms == Some(false)).map(proof::not_held).unwrap_or_default()
    } else if d.nagle_responses > 0 {
        format!(
            "no write-write-read on Nagle sockets: {} of {} responses there were written in one piece",
            d.nagle_responses - d.nagle_in_pieces,
            d.nagle_responses
        )
    } else {
        let pieces: u64 = d.kinds.iter().map(|k| k.in_pieces).sum();
        format!(
            "no response was written with Nagle on ({} of {} responses in pieces, all with TCP_NODELAY or TCP_CORK): \
no stall shape",
            pieces, d.responses
        )
    };
    Trace {
        requested_ms: requested.as_secs_f64() * 1e3,
        traced_ms: rec.traced.as_secs_f64() * 1e3,
        interrupted,
        exited: rec.exited,
        processes: Vec::new(),
        threads: rec.threads,
        new_threads: rec.new_threads,
        sockets: rec.events.iter().filter_map(|e| e.sock).collect::<HashSet<u32>>().len() as u32,
        calls,
        responses: d.responses,
        kinds,
        nagle_responses: d.nagle_responses,
        nagle_in_pieces_fraction: nagle_fraction,
        write_write_read: d.write_write_read,
        first_responses: d.first_responses,
        found: d.write_write_read > 0,
        gap_wwr_ms: d.gap_wwr_ns.map(ms),
        gap_other_ms: d.gap_other_ns.map(ms),
        mss_default_sockets: d.mss_defaulted,
        example,
        method: if extra.is_some() { "ebpf" } else { "ptrace" },
        fallback: None,
        overhead,
        cost,
        kernel_hold,
        kernel_confirms,
        text,
        notes,
    }
}

/// The example's lines, timed from its first write.
fn example(
    ev: &[Event],
    socks: &[Sock],
    ex: &detect::Example,
    fates: &HashMap<(u32, u64), hold::Fate>,
    untimed: bool,
) -> TraceExample {
    let sock = &socks[ex.sock as usize];
    // Accepted during the trace: its peer is in the table if it is still open.
    let row = if sock.peer.is_none() {
        procfs::net_tcp(&format!("/proc/{}/net", sock.pid))
            .ok()
            .and_then(|r| r.into_iter().find(|r| r.inode == sock.inode))
    } else {
        None
    };
    let t0 = ex.events.first().map_or(0, |&i| ev[i].t_ns);
    let lines = ex
        .events
        .iter()
        .map(|&i| {
            let e = &ev[i];
            let t_ms = e.t_ns.saturating_sub(t0) as f64 / 1e6;
            let took_ms = (!untimed).then(|| e.end_ns.saturating_sub(e.t_ns) as f64 / 1e6);
            let result = match e.ret {
                r if r < 0 => errno_name(-r),
                r if e.dir == Dir::Wait => format!("→ {r}"),
                r if e.call.counts_messages() => format!("{r} msg"),
                r => format!("{r} B"),
            };
            // A call outside a socket syscall (io_uring) names no descriptor.
            let mut text = match e.sock {
                Some(_) if e.fd >= 0 => format!("+{:.3} {} fd {} {result}", t_ms / 1e3, e.call.name(), e.fd),
                _ => format!("+{:.3} {} {result}", t_ms / 1e3, e.call.name()),
            };
            if let Some(took) = took_ms.filter(|&t| t >= 1.0) {
                text.push_str(&format!(" (waited {took:.1} ms)"));
            }
            if let Some(f) = fates.get(&(e.tid, e.t_ns)) {
                text.push_str(&format!(" [kernel: {}]", proof::fate_phrase(*f)));
            }
            TraceLine {
                t_ms,
                took_ms,
                tid: e.tid,
                call: e.call.name(),
                kind: match e.dir {
                    Dir::Write => "write",
                    Dir::Read => "read",
                    Dir::Wait => "wait",
                },
                fd: e.sock.map(|_| e.fd).filter(|&fd| fd >= 0),
                ret: e.ret,
                text,
            }
        })
        .collect();
    TraceExample {
        pid: sock.pid,
        fd: sock.fd,
        local: sock.local.clone().or_else(|| row.as_ref().map(|r| r.local.to_string())),
        peer: sock.peer.clone().or_else(|| row.as_ref().map(|r| r.peer.to_string())),
        nagle: ex.nagle.name(),
        gap_ms: ex.gap_ns.map(|g| g as f64 / 1e6),
        lines,
        elided: ex.elided,
    }
}

fn errno_name(e: i64) -> String {
    match e as i32 {
        libc::EAGAIN => "EAGAIN".into(),
        libc::EINTR => "EINTR".into(),
        libc::ECONNRESET => "ECONNRESET".into(),
        libc::EPIPE => "EPIPE".into(),
        libc::EBADF => "EBADF".into(),
        // ERESTARTSYS and kin: interrupted, restarted by the kernel.
        512..=516 => "restarted".into(),
        n => format!("errno {n}"),
    }
}

/// The cost: stops × (the stop's cost measured at start + the tracer's extra work here).
fn overhead(rec: &Recording, responses: u64) -> TraceOverhead {
    let secs = rec.traced.as_secs_f64().max(1e-6);
    let stops_per_s = rec.stops as f64 / secs;
    let tracer_us = if rec.stops > 0 { rec.handling.as_secs_f64() * 1e6 / rec.stops as f64 } else { 0.0 };
    let calibrated = rec.calibration.map(|c| c.per_stop_us);
    // The calibration already includes a minimal handling; add what this trace's handling took beyond it.
    let us_per_stop = match rec.calibration {
        Some(c) => c.per_stop_us + (tracer_us - c.handling_us).max(0.0),
        None => tracer_us,
    };
    // Thread time spent held in stops per second, summed over threads (a
    // single-threaded server loses this share of its capacity).
    let held_share = stops_per_s * us_per_stop / 1e6;
    let added_ms = (responses > 0).then(|| rec.stops as f64 / responses as f64 * us_per_stop / 1e3);
    let mut text = format!(
        "{} stops ({:.0}/s); each cost the process ≈ {:.1} µs ({}tracer's own work {:.1} µs), so each traced \
syscall took ≈ {:.0} µs longer and its threads were held {:.0} % of the time (summed over threads)",
        rec.stops,
        stops_per_s,
        us_per_stop,
        calibrated.map(|c| format!("measured at start {c:.1} µs; ")).unwrap_or_default(),
        tracer_us,
        2.0 * us_per_stop,
        held_share * 100.0
    );
    if let Some(a) = added_ms {
        // The process's own time; requests queued behind a busy thread wait that much more each.
        text.push_str(&format!(
            "; ≈ {a:.3} ms of the process's time added per response (on a busy server, requests queued behind \
it wait longer still)"
        ));
    }
    TraceOverhead {
        stops: rec.stops,
        stops_per_s,
        calibrated_us_per_stop: calibrated,
        tracer_us_per_stop: tracer_us,
        tracer_us_max: rec.handling_max.as_secs_f64() * 1e6,
        us_per_stop,
        added_us_per_syscall: 2.0 * us_per_stop,
        held_share,
        added_ms_per_response: added_ms,
        signals_passed: rec.signals,
        text,
    }
}
