//! `nodelay`: TCP_NODELAY set on a running server's sockets without a
//! restart, and put back. A `pidfd_getfd` duplicate shares the socket, so
//! `setsockopt` on it changes the server's own socket; connections accepted
//! later start with their listening socket's value. The previous values are
//! saved first ([`state`]) so that [`restore()`] works after Ctrl-C or a crash.
//! This is the only part of tcpdoctor that changes another process.

mod restore;
mod sockets;
pub mod state;
mod switch;

pub use restore::restore;
pub use switch::switch;

use crate::inspect::procfs;
use crate::inspect::sockopt::Pidfd;
use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why nothing (or not everything) was switched. Displayed as one line:
/// where, what, what to do.
#[derive(Debug)]
pub enum NodelayError {
    /// No process has this pid.
    NoProcess {
        /// The pid asked for.
        pid: u32,
    },
    /// restore: the process is gone; the state saved for it was removed.
    Gone {
        /// The pid asked for.
        pid: u32,
        /// The state files removed.
        removed: Vec<PathBuf>,
    },
    /// The process has no listening TCP socket (on the port).
    NoSockets {
        /// The process.
        pid: u32,
        /// The port named, if any.
        port: Option<u16>,
    },
    /// restore: no state saved for this process.
    NoState {
        /// The process.
        pid: u32,
        /// The state directory.
        dir: PathBuf,
        /// State files of an earlier process with the same pid, removed.
        stale: usize,
    },
    /// Changing the process's sockets needs ptrace permission over it.
    Permission {
        /// `pid N`.
        at: String,
        /// What could not be done.
        what: String,
        /// How to get the permission.
        hint: String,
    },
    /// Another tracer (a debugger, strace) holds the process.
    Traced {
        /// The traced process.
        pid: u32,
        /// The tracer's pid.
        by: u32,
        /// The tracer's name.
        comm: String,
    },
    /// This kernel lacks pidfd_open or pidfd_getfd.
    Unsupported {
        /// `pid N`.
        at: String,
        /// What is missing.
        what: String,
    },
    /// The state directory or file: unsafe, or cannot be written or read.
    State(String),
    /// Any other failure.
    Io {
        /// `pid N fd M`.
        at: String,
        /// What could not be done.
        what: String,
        /// The error.
        err: io::Error,
    },
}

impl fmt::Display for NodelayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodelayError::NoProcess { pid } => {
                write!(f, "pid {pid}: no such process (it may have exited; `ps -p {pid}` shows whether it runs)")
            }
            NodelayError::Gone { pid, removed } => write!(
                f,
                "pid {pid}: no such process; its sockets closed when it exited, so the saved state {} was removed",
                removed.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            ),
            NodelayError::NoSockets { pid, port } => write!(
                f,
                "pid {pid} ({}): no listening TCP socket{}: `nodelay` switches a server's listening sockets and the \
connections accepted on them (`tcpdoctor inspect {pid}` lists its sockets)",
                crate::escape::clean(&procfs::comm(*pid)),
                port.map(|p| format!(" on port {p}")).unwrap_or_default()
            ),
            NodelayError::NoState { pid, dir, stale } => write!(
                f,
                "pid {pid}: nothing to restore: no state saved for it in {} (`tcpdoctor nodelay {pid} on` saves one; \
restore removes it){}",
                dir.display(),
                match stale {
                    0 => String::new(),
                    n => format!("; removed {n} state file(s) of an earlier process with this pid"),
                }
            ),
            NodelayError::Permission { at, what, hint } => {
                write!(f, "{at}: cannot {what}: needs ptrace permission; {hint}")
            }
            NodelayError::Traced { pid, by, comm } => write!(
                f,
                "pid {pid}: already traced by pid {by} ({}); tcpdoctor changes no socket of a process another tracer \
(a debugger, strace) holds: stop that one first",
                crate::escape::clean(comm)
            ),
            NodelayError::Unsupported { at, what } => write!(f, "{at}: {what}"),
            NodelayError::State(m) => f.write_str(m),
            NodelayError::Io { at, what, err } => write!(f, "{at}: cannot {what}: {err}"),
        }
    }
}

impl std::error::Error for NodelayError {}

/// A process pinned by a pidfd, with the start time that names it.
struct Pinned {
    pid: u32,
    start_time: u64,
    pidfd: Pidfd,
}

/// Pins process `pid` (a thread id means its process).
fn pin(pid: u32) -> Result<Pinned, NodelayError> {
    let pid = match procfs::status_field(pid, "Tgid") {
        Ok(t) => t.unwrap_or(pid),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(NodelayError::NoProcess { pid }),
        Err(e) => {
            return Err(NodelayError::Io { at: format!("pid {pid}"), what: "read /proc/PID/status".into(), err: e });
        }
    };
    let pidfd = Pidfd::open(pid).map_err(|e| match e.raw_os_error() {
        Some(libc::ESRCH) => NodelayError::NoProcess { pid },
        Some(libc::ENOSYS) => NodelayError::Unsupported {
            at: format!("pid {pid}"),
            what: "cannot open a pidfd: pidfd_open needs Linux 5.3 or later".into(),
        },
        _ => NodelayError::Io { at: format!("pid {pid}"), what: "open a pidfd (pidfd_open)".into(), err: e },
    })?;
    let start_time = procfs::start_time(pid).ok_or(NodelayError::NoProcess { pid })?;
    // Still alive after the read: the start time is the pinned process's (a zombie counts as gone).
    if pidfd.exited() {
        return Err(NodelayError::NoProcess { pid });
    }
    Ok(Pinned { pid, start_time, pidfd })
}

/// The tracer holding `pid`, if any: (its pid, its name).
fn tracer(pid: u32) -> Option<(u32, String)> {
    let by = procfs::status_field(pid, "TracerPid").ok().flatten().filter(|&t| t != 0)?;
    Some((by, procfs::comm(by)))
}

/// Whether a state saved by `nodelay` exists for process `pid` (its file),
/// so that an experiment does not undo an operator's change when it restores.
pub fn saved(pid: u32) -> Option<PathBuf> {
    let p = pin(pid).ok()?;
    let dir = state::Dir::open().ok()?;
    dir.load(p.pid, p.start_time).ok().flatten().map(|_| dir.shown(p.pid, p.start_time))
}

fn state_err(e: String) -> NodelayError {
    NodelayError::State(e)
}
