//! `inspect`: a live process's TCP sockets and why they may stall.
//!
//! For one process (and the workers that share its listening sockets) it
//! lists every TCP socket (`sockets`) with TCP_NODELAY/TCP_CORK/TCP_QUICKACK
//! (read on a duplicate from `pidfd_getfd`, `sockopt`), `tcp_info` from
//! sock_diag (`diag`) and the delayed-ACK state from /proc/net/tcp
//! (`procfs`); it names the server software and its own knob (`software`,
//! `nginx`, `advice`), and watches the host's delayed-ACK counters for a
//! window (`host`). Nothing about the process is changed. With `--trace` it
//! also records the process's reads and writes on TCP sockets for that window
//! (eBPF where it loads, else ptrace, which slows the process meanwhile) and
//! finds write-write-read (`trace`).

mod advice;
pub(crate) mod bounded;
mod diag;
pub(crate) mod host;
mod nginx;
pub(crate) mod procfs;
mod run_as;
mod sockets;
pub(crate) mod sockopt;
mod software;
mod trace;

pub use trace::MAX_DURATION as MAX_TRACE;
pub use trace::Method as TraceMethod;
pub use trace::ReadySlot as TraceReady;
pub use trace::Sample as TraceSample;

use crate::record::inspect::{Host, InspectReport, Process, Socket, Summary};
use advice::advice;
use sockets::{Held, read_sockets};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::io;
use std::time::{Duration, Instant};

/// What to inspect besides the process.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long the host's TcpExt counters are watched (the inspection lasts at least this long).
    pub window: Duration,
    /// Only sockets on this local port (and nginx's settings for the server on it).
    pub port: Option<u16>,
    /// Trace the process's reads and writes with ptrace for this long (at most
    /// [`MAX_TRACE`]); the window is then at least this long.
    pub trace: Option<Duration>,
    /// When tracing is refused (permission, another tracer), say so in the
    /// report's notes instead of failing the inspection.
    pub trace_optional: bool,
    /// eBPF, ptrace, or eBPF when it loads (the default).
    pub trace_method: TraceMethod,
    /// Whether an eBPF trace may sample busy TCP_NODELAY sockets (the default) or traces every socket.
    pub trace_sample: TraceSample,
    /// Say on stderr when the trace's window begins (the command line's
    /// `inspect --trace`: a script can start its load then).
    pub announce: bool,
    /// eBPF programs made ready ahead of the trace (diagnose fills it before
    /// the inspection starts); `None`: the trace makes its own.
    pub trace_ready: Option<TraceReady>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            window: Duration::from_secs(1),
            port: None,
            trace: None,
            trace_optional: false,
            trace_method: TraceMethod::Auto,
            trace_sample: TraceSample::Auto,
            announce: false,
            trace_ready: None,
        }
    }
}

/// Why a process could not be inspected. Displayed as one line: what, where, what to do.
#[derive(Debug)]
pub enum InspectError {
    /// No process has this pid (or it exited before its sockets could be read).
    NoProcess {
        /// The pid asked for.
        pid: u32,
    },
    /// Reading the process needs ptrace permission over it.
    Permission {
        /// `pid N` or `port N`.
        at: String,
        /// What could not be done.
        what: String,
        /// How to get the permission.
        hint: String,
    },
    /// Another tracer (a debugger, strace) holds the process: ptrace allows one.
    Traced {
        /// `pid N`.
        at: String,
        /// The tracer's pid (TracerPid in /proc/PID/status).
        by: u32,
        /// The tracer's name.
        comm: String,
    },
    /// This kernel lacks something `inspect` needs (pidfd_getfd: Linux ≥ 5.6).
    Unsupported {
        /// `pid N`.
        at: String,
        /// What is missing.
        what: String,
    },
    /// Any other failure.
    Io {
        /// `pid N` or `port N`.
        at: String,
        /// What could not be done.
        what: String,
        /// The error.
        err: io::Error,
    },
}

impl fmt::Display for InspectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InspectError::NoProcess { pid } => {
                write!(f, "pid {pid}: no such process (it may have exited; `ps -p {pid}` shows whether it runs)")
            }
            InspectError::Permission { at, what, hint } => {
                write!(f, "{at}: cannot {what}: needs ptrace permission; {hint}")
            }
            InspectError::Traced { at, by, comm } => write!(
                f,
                "{at}: cannot attach with ptrace: already traced by pid {by} ({comm}); ptrace allows one tracer: \
stop that one first, or inspect without --trace"
            ),
            InspectError::Unsupported { at, what } => write!(f, "{at}: {what}"),
            InspectError::Io { at, what, err } => write!(f, "{at}: cannot {what}: {err}"),
        }
    }
}

impl std::error::Error for InspectError {}

/// How to get ptrace permission over `pid` on this host.
pub(crate) fn ptrace_hint(pid: Option<u32>) -> String {
    let mut h = match pid.and_then(|p| procfs::status_field(p, "Uid").ok().flatten()) {
        Some(uid) => format!("run tcpdoctor as its user (uid {uid}) or as root, or give it CAP_SYS_PTRACE"),
        None => "run tcpdoctor as the process's user or as root, or give it CAP_SYS_PTRACE".into(),
    };
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope") {
        let s = s.trim();
        let what = match s {
            "0" => "",
            "1" => ": the same user is not enough unless it started the process",
            "2" => ": only CAP_SYS_PTRACE",
            _ => ": ptrace is disabled until reboot",
        };
        h.push_str(&format!("; kernel.yama.ptrace_scope={s}{what}"));
    }
    h
}

fn io_error(at: &str, what: &str, err: io::Error) -> InspectError {
    InspectError::Io { at: at.into(), what: what.into(), err }
}

/// The process listening on TCP `port` (any local address, IPv4 or IPv6).
/// With several (a master and its workers, or SO_REUSEPORT), the one whose
/// parent does not hold the socket too; Ok(None) when nothing listens.
pub fn find_listener(port: u16) -> Result<Option<u32>, InspectError> {
    let at = format!("port {port}");
    let rows = procfs::net_tcp("/proc/net").map_err(|e| io_error(&at, "read /proc/net/tcp", e))?;
    let inodes: HashSet<u64> = rows
        .iter()
        .filter(|r| r.state == procfs::LISTEN && r.local.port() == port && r.inode != 0)
        .map(|r| r.inode)
        .collect();
    if inodes.is_empty() {
        return Ok(None);
    }
    let (holders, denied) = procfs::holders(&inodes);
    if holders.is_empty() {
        if denied {
            return Err(InspectError::Permission {
                at,
                what: "see which process holds its listening socket".into(),
                hint: ptrace_hint(None),
            });
        }
        let why = io::Error::other("no process visible here holds it (another PID namespace?)");
        return Err(io_error(&at, "find the listening process", why));
    }
    let root = holders.iter().copied().find(|&p| procfs::ppid(p).is_none_or(|pp| !holders.contains(&pp)));
    Ok(root.or(holders.first().copied()))
}

/// Inspects process `pid` (a thread id means its process): sockets, software,
/// host settings. Takes at least `opts.window`.
pub fn inspect(pid: u32, opts: &Options) -> Result<InspectReport, InspectError> {
    let start = Instant::now();
    let before = host::tcp_ext();
    let mut notes = Vec::new();
    let at = format!("pid {pid}");
    let pid = match procfs::status_field(pid, "Tgid") {
        Ok(Some(t)) => t,
        Ok(None) => pid,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(InspectError::NoProcess { pid }),
        Err(e) => return Err(io_error(&at, "read /proc/PID/status", e)),
    };
    if at != format!("pid {pid}") {
        notes.push(format!("{at} is a thread of process {pid}; inspecting the process"));
    }
    let at = format!("pid {pid}");
    // Read now: once the process has exited, /proc no longer says whose it was.
    let uid = procfs::status_field(pid, "Uid").ok().flatten();
    let pidfd = sockopt::Pidfd::open(pid).map_err(|e| match e.raw_os_error() {
        Some(libc::ESRCH) => InspectError::NoProcess { pid },
        Some(libc::ENOSYS) => InspectError::Unsupported {
            at: at.clone(),
            what: "cannot open a pidfd: pidfd_open needs Linux 5.3 or later".into(),
        },
        _ => io_error(&at, "open a pidfd (pidfd_open)", e),
    })?;
    let own = procfs::socket_fds(pid).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => InspectError::NoProcess { pid },
        io::ErrorKind::PermissionDenied => InspectError::Permission {
            at: at.clone(),
            what: format!("list its file descriptors (/proc/{pid}/fd)"),
            hint: ptrace_hint(Some(pid)),
        },
        _ => io_error(&at, "list its file descriptors", e),
    })?;
    if own.is_empty() && pidfd.exited() {
        return Err(InspectError::NoProcess { pid });
    }
    // The process's own network namespace (a container's), else ours.
    let rows = procfs::net_tcp(&format!("/proc/{pid}/net"))
        .or_else(|_| procfs::net_tcp("/proc/net"))
        .map_err(|e| io_error(&at, "read /proc/net/tcp", e))?;
    let by_inode: HashMap<u64, &procfs::TcpEntry> =
        rows.iter().filter(|r| r.inode != 0).map(|r| (r.inode, r)).collect();
    let is_listen = |i: &u64| by_inode.get(i).is_some_and(|r| r.state == procfs::LISTEN);

    let mut held: Vec<Held> = own.iter().map(|&(fd, inode)| Held { pid, fd, inode }).collect();
    let mut workers = Vec::new();
    if own.iter().any(|(_, i)| is_listen(i)) {
        for c in procfs::children(pid) {
            match procfs::socket_fds(c) {
                Ok(fds) if fds.iter().any(|(_, i)| is_listen(i)) => {
                    workers.push(c);
                    held.extend(fds.into_iter().map(|(fd, inode)| Held { pid: c, fd, inode }));
                }
                Ok(_) => {}
                Err(e) => notes.push(format!("child {c}: cannot list its descriptors: {e}")),
            }
        }
    }
    // A listening socket shared with workers is listed once, under the first holder.
    let mut seen = HashSet::new();
    held.retain(|h| by_inode.contains_key(&h.inode) && seen.insert(h.inode));
    let listen_ports: HashSet<u16> =
        held.iter().filter(|h| is_listen(&h.inode)).map(|h| by_inode[&h.inode].local.port()).collect();
    if let Some(port) = opts.port {
        let n = held.len();
        held.retain(|h| by_inode[&h.inode].local.port() == port);
        if n > held.len() {
            notes.push(format!(
                "{} TCP socket(s) on other local ports left out (`inspect {pid}` lists all)",
                n - held.len()
            ));
        }
    }

    let mut sockets = read_sockets(&held, &by_inode, &listen_ports, (pid, &pidfd), &mut notes)?;
    let inodes: HashSet<u64> = sockets.iter().map(|s| s.inode).collect();
    match diag::tcp_infos(&inodes) {
        Ok(infos) => {
            let mut missing = 0;
            for s in &mut sockets {
                s.info = infos.get(&s.inode).cloned();
                missing += usize::from(s.info.is_none());
            }
            if missing > 0 {
                notes.push(format!(
                    "tcp_info missing for {missing} socket(s): closed meanwhile, or in another network namespace"
                ));
            }
        }
        Err(e) => notes.push(format!("sock_diag (tcp_info) failed: {e}")),
    }
    for s in &mut sockets {
        s.held_now = held_now(s);
    }
    sockets.sort_by(|a, b| {
        (a.state != "listen", &a.local, &a.peer, a.pid, a.fd).cmp(&(
            b.state != "listen",
            &b.local,
            &b.peer,
            b.pid,
            b.fd,
        ))
    });
    let summary = Summary::of(&sockets);

    let proc = software::Proc::read(pid);
    // A server on one port has one set of settings that apply: nginx's
    // server block for that port, not only its http-level defaults.
    let only_port = (listen_ports.len() == 1).then(|| listen_ports.iter().copied().next()).flatten();
    let software = software::classify(&proc, opts.port.or(only_port));
    let mut host = Host {
        tcp_autocorking: host::sysctl("tcp_autocorking"),
        tcp_pingpong_thresh: host::sysctl("tcp_pingpong_thresh"),
        ..Host::default()
    };
    let peers: BTreeSet<std::net::IpAddr> =
        sockets.iter().filter(|s| s.state == "established").filter_map(|s| peer_ip(&s.peer)).collect();
    if peers.len() > host::MAX_ROUTES {
        notes.push(format!("routes shown for {} of {} peers", host::MAX_ROUTES, peers.len()));
    }
    for p in peers.into_iter().take(host::MAX_ROUTES) {
        match host::route(p) {
            Ok(r) => host.routes.push(r),
            Err(e) => {
                notes.push(format!("route lookup failed: {e}"));
                break;
            }
        }
    }

    let trace = match opts.trace {
        Some(d) => {
            let pids: Vec<u32> = std::iter::once(pid).chain(workers.iter().copied()).collect();
            match trace_process(pids, &sockets, &listen_ports, d, opts) {
                Ok(t) => Some(t),
                Err(e) if opts.trace_optional => {
                    notes.push(format!("not traced: {e}"));
                    None
                }
                Err(e) => return Err(e),
            }
        }
        None => None,
    };
    if let Some(rest) = opts.window.checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
    host.window_ms = (start.elapsed().as_secs_f64() * 1e3).round();
    match (before, host::tcp_ext()) {
        (Some(b), Some(a)) => host.counters = host::deltas(&b, &a),
        _ => notes.push("/proc/net/netstat unreadable: no TcpExt counters".into()),
    }
    let exited = pidfd.exited() || trace.as_ref().is_some_and(|t| t.exited);
    if exited {
        notes.push("the process exited during the inspection; its sockets are as they were before".into());
    }
    let advice = advice(&software, &summary, &host, trace.as_ref());
    Ok(InspectReport {
        schema: crate::record::SCHEMA_VERSION,
        version: env!("CARGO_PKG_VERSION"),
        process: Process {
            pid,
            comm: proc.comm.clone(),
            cmdline: proc.cmdline.join(" "),
            exe: proc.exe.as_ref().map(|p| p.display().to_string()),
            uid,
            workers,
            exited,
        },
        port: opts.port,
        software,
        sockets,
        summary,
        host,
        advice,
        notes,
        trace,
    })
}

/// Traces `pids` (the process, then its workers) for `d`; Ctrl-C ends it early.
fn trace_process(
    pids: Vec<u32>,
    sockets: &[Socket],
    listen_ports: &HashSet<u16>,
    d: Duration,
    opts: &Options,
) -> Result<crate::record::inspect::Trace, InspectError> {
    let known = sockets
        .iter()
        .map(|s| trace::Known {
            pid: s.pid,
            fd: s.fd,
            inode: s.inode,
            role: s.role,
            local: s.local.clone(),
            peer: s.peer.clone(),
            nodelay: s.nodelay,
            cork: s.cork,
            mss: s.info.as_ref().map(|i| i.mss).filter(|&m| m > 0),
        })
        .collect();
    let main = pids[0];
    let req = trace::Request {
        pids,
        known,
        listen_ports: listen_ports.clone(),
        duration: d.min(MAX_TRACE),
        port: opts.port,
        method: opts.trace_method,
        sample: opts.trace_sample,
        announce: opts.announce,
        ready: opts.trace_ready.clone(),
    };
    trace::run(req, crate::interrupt::flag()).map_err(|e| match e {
        trace::TraceError::Permission { pid } => InspectError::Permission {
            at: format!("pid {pid}"),
            what: "attach with ptrace to trace it (PTRACE_SEIZE)".into(),
            hint: ptrace_hint(Some(pid)),
        },
        trace::TraceError::Traced { pid, by } => {
            InspectError::Traced { at: format!("pid {pid}"), by, comm: procfs::comm(by) }
        }
        trace::TraceError::Gone { pid } => InspectError::NoProcess { pid },
        trace::TraceError::Other { pid, what } => {
            InspectError::Unsupported { at: format!("pid {}", pid.max(main)), what }
        }
        trace::TraceError::Bpf { pid, why } => InspectError::Unsupported {
            at: format!("pid {pid}"),
            what: format!("cannot trace with eBPF: {why}; run as root, or use --method ptrace"),
        },
    })
}

/// Small unsent bytes wait behind unacknowledged data, with Nagle on.
fn held_now(s: &Socket) -> bool {
    let Some(i) = &s.info else { return false };
    s.state == "established"
        && s.nodelay != Some(true)
        && s.cork != Some(true)
        && i.unacked > 0
        && i.notsent.is_some_and(|n| n > 0 && n < i.mss.max(1))
}

/// The peer's address as routes know it: an IPv4 peer of a dual-stack socket
/// (`[::ffff:10.0.0.1]:80`) takes the IPv4 route, not an IPv6 one.
fn peer_ip(peer: &str) -> Option<std::net::IpAddr> {
    peer.parse::<std::net::SocketAddr>().ok().map(|a| a.ip().to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn finds_and_inspects_this_process() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        c.write_all(b"x").unwrap();
        assert_eq!(find_listener(port).unwrap(), Some(std::process::id()));
        let opts = Options { window: Duration::ZERO, port: Some(port), ..Options::default() };
        let r = inspect(std::process::id(), &opts).unwrap();
        // The listener, the accepted socket (nodelay on) and the client socket (outgoing, to the same port: left out).
        let roles: Vec<(&str, Option<bool>)> = r.sockets.iter().map(|s| (s.role, s.nodelay)).collect();
        assert_eq!(roles, vec![("listening", Some(false)), ("accepted", Some(true))], "{:#?}", r.sockets);
        assert!(r.sockets[1].info.is_some());
        assert_eq!((r.summary.established, r.summary.nagle_on), (1, 0));
        assert!(!r.process.exited);
    }

    #[test]
    fn errors_are_one_line_with_what_where_and_what_to_do() {
        let e = InspectError::Permission {
            at: "pid 7".into(),
            what: "list its descriptors".into(),
            hint: ptrace_hint(None),
        };
        let t = e.to_string();
        assert!(
            t.starts_with("pid 7: cannot list its descriptors: needs ptrace permission; run tcpdoctor as")
                && t.contains("CAP_SYS_PTRACE")
                && !t.contains('\n'),
            "{t}"
        );
        let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
        assert!(matches!(inspect(pid_max, &Options::default()), Err(InspectError::NoProcess { .. })));
    }

    #[test]
    fn held_means_small_unsent_bytes_behind_unacknowledged_data_with_nagle_on() {
        use crate::record::inspect::TcpInfo;
        let sock = |nodelay, cork, unacked, notsent| Socket {
            state: "established".into(),
            nodelay,
            cork,
            info: Some(TcpInfo { mss: 1448, unacked, notsent, ..TcpInfo::default() }),
            ..Socket::default()
        };
        assert!(held_now(&sock(Some(false), Some(false), 1, Some(600))));
        // Unknown options (unreadable) still count: the kernel state says it.
        assert!(held_now(&sock(None, None, 1, Some(600))));
        // TCP_NODELAY or TCP_CORK: not Nagle's doing.
        assert!(!held_now(&sock(Some(true), Some(false), 1, Some(600))));
        assert!(!held_now(&sock(Some(false), Some(true), 1, Some(600))));
        // Nothing in flight (e.g. a zero window), nothing waiting, or a full segment waiting.
        assert!(!held_now(&sock(Some(false), Some(false), 0, Some(600))));
        assert!(!held_now(&sock(Some(false), Some(false), 1, Some(0))));
        assert!(!held_now(&sock(Some(false), Some(false), 1, Some(1448))));
        assert!(!held_now(&sock(Some(false), Some(false), 1, None)));
        let mut listen = sock(Some(false), Some(false), 1, Some(600));
        listen.state = "listen".into();
        assert!(!held_now(&listen));
        assert!(!held_now(&Socket { info: None, ..sock(Some(false), Some(false), 1, Some(600)) }));
    }

    #[test]
    fn ipv4_peers_of_dual_stack_sockets_take_the_ipv4_route() {
        assert_eq!(peer_ip("[::ffff:127.0.0.1]:8080"), Some("127.0.0.1".parse().unwrap()));
        assert_eq!(peer_ip("[::1]:8080"), Some("::1".parse().unwrap()));
        assert_eq!(peer_ip("10.0.0.1:80"), Some("10.0.0.1".parse().unwrap()));
        assert_eq!(peer_ip("*:*"), None);
    }
}
