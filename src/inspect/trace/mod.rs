//! `inspect --trace`: a live process's write pattern (reads, writes and
//! waits on its TCP sockets, per thread, with times), recorded for a window
//! and then judged.
//!
//! Where eBPF loads, programs in the kernel record the calls ([`ebpf`]):
//! nothing stops the process, and each write's bytes are followed until they
//! leave the host ([`hold`]). Otherwise ([`tracer`]) every thread is seized
//! with ptrace, like `strace -f`, stopped at each syscall entry and exit, and
//! detached when the window ends (or on Ctrl-C); signals that arrived
//! meanwhile are passed on, and group-stopped threads stay stopped. No
//! seccomp filter is installed (it could never be removed from the process),
//! so every syscall costs two stops: the report says how much. [`Method`]
//! says which is used. [`detect`] then looks for write-write-read on sockets
//! with Nagle on, and [`report`](mod@report) builds what is shown.

mod decode;
mod detect;
mod ebpf;
mod events;
mod fds;
mod hold;
mod proof;
mod ptrace;
mod records;
mod report;
mod tracer;

use crate::record::inspect::Trace;
use events::{Event, Sock};
use report::report;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The longest trace allowed: every syscall of the process is slowed meanwhile.
pub const MAX_DURATION: Duration = Duration::from_secs(60);

/// Most calls kept; later ones are counted, not analysed (bounds memory: ~48 MB).
const MAX_EVENTS: usize = 1_000_000;

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

/// Whether TCP_NODELAY sockets may be sampled (`inspect --sample`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sample {
    /// Once their calls come faster than a trace needs (20,000 a second).
    #[default]
    Auto,
    /// Never: every socket is traced.
    All,
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
    /// Whether eBPF may sample busy TCP_NODELAY sockets.
    pub sample: Sample,
    /// Say on stderr when the window begins.
    pub announce: bool,
    /// eBPF programs made ready ahead, if any (else the trace makes its own).
    pub ready: Option<ReadySlot>,
}

/// Where eBPF programs made ready ahead of a trace wait for it (loaded,
/// attached and calibrated, or why they could not be): taken once, by the
/// first trace that asks.
#[derive(Clone, Default)]
pub struct ReadySlot(std::sync::Arc<std::sync::Mutex<Option<Result<ebpf::Ready, String>>>>);

impl ReadySlot {
    /// Loads, attaches and calibrates the programs into the slot (a few
    /// hundred ms); a trace with ptrace leaves them unused.
    pub fn fill(&self) {
        let r = ebpf::ready();
        *self.lock() = Some(r);
    }

    /// The programs made ready, if the slot holds them (they are then gone from it).
    pub(crate) fn take(&self) -> Option<Result<ebpf::Ready, String>> {
        self.lock().take()
    }

    /// Whether the slot still holds something no trace took.
    pub fn is_filled(&self) -> bool {
        self.lock().is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Result<ebpf::Ready, String>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for ReadySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_filled() { "ReadySlot(filled)" } else { "ReadySlot(empty)" })
    }
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
    /// When the call programs were detached (ns since the window began,
    /// from, to): the calls then are not seen (eBPF's slices).
    gaps: Vec<(u64, u64)>,
    notes: Vec<String>,
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
    let mut t = tracer::ptrace_run(req, stop)?;
    if let Some(why) = fallback {
        t.fallback = Some(why.clone());
        t.notes.insert(
            0,
            format!("eBPF was not used ({why}): traced with ptrace instead, which stops the process at every syscall"),
        );
    }
    Ok(t)
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
