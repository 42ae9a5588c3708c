//! The ptrace recording: a tracer thread seizes every thread of the
//! processes (`PTRACE_SEIZE`, new threads followed with
//! `PTRACE_O_TRACECLONE`) and stops each at every syscall entry and exit
//! (`PTRACE_SYSCALL`), recording the calls on TCP sockets ([`events`]); a
//! watchdog ends the window on time or on Ctrl-C and kicks the tracer out of
//! its waits until it has detached.

use super::super::procfs;
use super::events::{self, Call, Dir, Event, Nagle, Sys};
use super::fds::FdMap;
use super::report::report;
use super::{MAX_EVENTS, Recording, Request, TraceError, announce, exiting, ptrace, tasks};
use crate::record::inspect::Trace;
use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long detaching may take before the rest is left to the kernel (which
/// detaches every tracee when the tracer thread exits).
const DETACH_LIMIT: Duration = Duration::from_secs(2);

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

/// The trace with ptrace.
pub(super) fn ptrace_run(req: Request, stop: &AtomicBool) -> Result<Trace, TraceError> {
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
                gaps: Vec::new(),
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
