//! The benches' timer: runs a command and writes "wall_s cpu_s peak_kb user_s"
//! for it, to the 0.1 ms: wall from a monotonic clock, CPU (user + system),
//! peak RSS and user CPU from wait4's rusage.
//!
//! timed OUT CMD [ARGS…]   (CMD's stdin, stdout and stderr are this program's;
//! exits with CMD's exit code, or 128 + the signal that ended it)
//!
//! Why not Python (bench/timed.py until the fourteenth session): its fork
//! added ~1.6 ms to every run's wall time, and the child's peak RSS started at
//! the interpreter's ~10 MB (exec keeps the larger of the old and new
//! high-water marks), so smaller peaks read as 10 MB. Here the command is
//! spawned (vfork-like) from a process of ~2 MB.

use std::io::Write;
use std::time::Instant;

/// Writes `bytes` to `path` whole or not at all: a new file beside it, renamed
/// over it (a reader never sees half a line).
fn write_whole(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let mut f = tempfile::NamedTempFile::new_in(dir)?;
    f.write_all(bytes)?;
    f.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let [out, cmd, rest @ ..] = args.as_slice() else {
        eprintln!("usage: timed OUT CMD [ARGS…]");
        std::process::exit(2);
    };
    let start = Instant::now();
    // Reaped below by wait4, which also gives the child's own rusage.
    #[allow(clippy::zombie_processes)]
    let child = match std::process::Command::new(cmd).args(rest).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("timed: cannot run {}: {e}", cmd.to_string_lossy());
            std::process::exit(127);
        }
    };
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, reaped here and nowhere else.
    if unsafe { libc::wait4(pid, &mut status, 0, &mut ru) } != pid {
        eprintln!("timed: wait4: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    let wall = start.elapsed().as_secs_f64();
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let (user, sys) = (secs(ru.ru_utime), secs(ru.ru_stime));
    let line = format!("{wall:.4} {:.4} {} {user:.4}\n", user + sys, ru.ru_maxrss);
    if let Err(e) = write_whole(std::path::Path::new(out), line.as_bytes()) {
        eprintln!("timed: cannot write {}: {e}", out.to_string_lossy());
        std::process::exit(1);
    }
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) };
    std::process::exit(code);
}
