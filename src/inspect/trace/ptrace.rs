//! ptrace mechanics: seize, interrupt, resume, listen, detach; syscall info
//! (`PTRACE_GET_SYSCALL_INFO`, Linux ≥ 5.3); waits that a signal from the
//! watchdog can cut short; and a measurement of what one stop costs.
//!
//! All requests must come from the thread that attached (the tracer thread).

use std::io;
use std::sync::Once;

/// `PTRACE_O_TRACESYSGOOD`: syscall stops report `SIGTRAP | 0x80`.
const O_TRACESYSGOOD: libc::c_int = 1;
/// `PTRACE_O_TRACECLONE`: new threads are traced from their first instruction.
const O_TRACECLONE: libc::c_int = 8;
/// The options every tracee gets. No `PTRACE_O_EXITKILL`: if tcpdoctor dies,
/// the kernel detaches and the process runs on.
pub(crate) const OPTIONS: libc::c_int = O_TRACESYSGOOD | O_TRACECLONE;

/// `PTRACE_EVENT_CLONE`.
pub(crate) const EVENT_CLONE: i32 = 3;
/// `PTRACE_EVENT_STOP`: an interrupt stop, a new thread's first stop, or (with a stop signal) a group-stop.
pub(crate) const EVENT_STOP: i32 = 128;

/// `PTRACE_GET_SYSCALL_INFO` (linux/ptrace.h): the libc crate names it for glibc only, not musl.
const PTRACE_GET_SYSCALL_INFO: libc::c_uint = 0x420e;
/// `PTRACE_SYSCALL_INFO_ENTRY` / `_EXIT`.
pub(crate) const INFO_ENTRY: u8 = 1;
pub(crate) const INFO_EXIT: u8 = 2;

/// What a wait reported about one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// It exited or was killed: no longer traced.
    Gone,
    /// Syscall entry or exit.
    Syscall,
    /// A ptrace event (`EVENT_CLONE`, `EVENT_STOP`…) and the stop signal.
    Event(i32, i32),
    /// About to receive this signal: it must be passed on when resuming.
    Signal(i32),
}

/// Decodes a wait status (`waitpid(2)`'s encoding).
pub(crate) fn decode(status: i32) -> Stop {
    if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
        return Stop::Gone;
    }
    let sig = libc::WSTOPSIG(status);
    let event = status >> 16;
    if sig == libc::SIGTRAP | 0x80 {
        Stop::Syscall
    } else if event != 0 {
        Stop::Event(event, sig)
    } else {
        Stop::Signal(sig)
    }
}

/// Whether an `EVENT_STOP` with this signal is a group-stop (job control),
/// which must stay stopped (`PTRACE_LISTEN`) rather than be resumed.
pub(crate) fn is_group_stop(sig: i32) -> bool {
    matches!(sig, libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU)
}

fn req(request: libc::c_uint, tid: u32, addr: usize, data: usize) -> io::Result<libc::c_long> {
    // SAFETY: every request used here takes a tid and two word-sized
    // arguments; those that write memory get a live buffer of the size passed.
    let r = unsafe { libc::ptrace(request as _, tid as libc::pid_t, addr, data) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// Attaches without stopping the thread.
pub(crate) fn seize(tid: u32) -> io::Result<()> {
    req(libc::PTRACE_SEIZE as _, tid, 0, OPTIONS as usize).map(drop)
}

/// Asks a seized thread to stop (reported as `EVENT_STOP`).
pub(crate) fn interrupt(tid: u32) -> io::Result<()> {
    req(libc::PTRACE_INTERRUPT as _, tid, 0, 0).map(drop)
}

/// Resumes until the next syscall entry or exit, delivering `sig` (0: none).
pub(crate) fn resume(tid: u32, sig: i32) -> io::Result<()> {
    req(libc::PTRACE_SYSCALL as _, tid, 0, sig as usize).map(drop)
}

/// Leaves a group-stopped thread stopped, still reporting to us.
pub(crate) fn listen(tid: u32) -> io::Result<()> {
    req(libc::PTRACE_LISTEN as _, tid, 0, 0).map(drop)
}

/// Detaches a stopped thread, delivering `sig` (0: none).
pub(crate) fn detach(tid: u32, sig: i32) -> io::Result<()> {
    req(libc::PTRACE_DETACH as _, tid, 0, sig as usize).map(drop)
}

/// The new thread's id after an `EVENT_CLONE`.
pub(crate) fn event_msg(tid: u32) -> io::Result<u32> {
    let mut msg: libc::c_ulong = 0;
    req(libc::PTRACE_GETEVENTMSG as _, tid, 0, (&raw mut msg) as usize)?;
    Ok(msg as u32)
}

/// `struct ptrace_syscall_info` (include/uapi/linux/ptrace.h): 24 bytes of
/// header, then a union whose largest member (seccomp) takes 64.
#[repr(C)]
struct RawInfo {
    op: u8,
    _pad: [u8; 3],
    arch: u32,
    _ip: u64,
    _sp: u64,
    data: [u64; 8],
}

/// One syscall stop, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Info {
    /// [`INFO_ENTRY`], [`INFO_EXIT`] or something else (none, seccomp).
    pub op: u8,
    /// `AUDIT_ARCH_*` of the syscall (a 32-bit process on x86_64 differs).
    pub arch: u32,
    /// Entry: the syscall number.
    pub nr: u64,
    /// Entry: its arguments.
    pub args: [u64; 6],
    /// Exit: the return value (-errno on error).
    pub ret: i64,
}

/// What the thread's current syscall stop is about.
pub(crate) fn syscall_info(tid: u32) -> io::Result<Info> {
    let mut raw = RawInfo { op: 0, _pad: [0; 3], arch: 0, _ip: 0, _sp: 0, data: [0; 8] };
    let size = size_of::<RawInfo>();
    req(PTRACE_GET_SYSCALL_INFO, tid, size, (&raw mut raw) as usize)?;
    let mut args = [0u64; 6];
    args.copy_from_slice(&raw.data[1..7]);
    Ok(Info { op: raw.op, arch: raw.arch, nr: raw.data[0], args, ret: raw.data[0] as i64 })
}

/// Waits for any of this thread's tracees (`__WNOTHREAD`: never another
/// thread's children) to change state. A kick ([`kick`]) cuts it short with
/// `Interrupted`.
pub(crate) fn wait_any() -> io::Result<(u32, i32)> {
    let mut status = 0;
    // SAFETY: status is a live int.
    let r = unsafe { libc::waitpid(-1, &mut status, libc::__WALL | libc::__WNOTHREAD) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok((r as u32, status)) }
}

/// This thread's id.
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// The signal that cuts a tracer's wait short (its handler does nothing and
/// is installed without SA_RESTART, so the wait returns EINTR).
fn kick_signal() -> libc::c_int {
    libc::SIGRTMIN() + 7
}

extern "C" fn on_kick(_: libc::c_int) {}

/// Installs the kick handler (once per process).
pub(crate) fn arm_kick() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the handler does nothing, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_kick as *const () as usize;
            sa.sa_flags = 0;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(kick_signal(), &sa, std::ptr::null_mut());
        }
    });
}

/// Interrupts a wait in thread `tid` of this process ([`arm_kick`] first).
pub(crate) fn kick(tid: i32) {
    // SAFETY: tgkill to a thread of our own process, with a handled signal.
    unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, kick_signal()) };
}

/// What one stop costs, measured at start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Calibration {
    /// Added to the traced process per stop, µs.
    pub per_stop_us: f64,
    /// Of which the tracer's own handling (wait return → resume), µs.
    pub handling_us: f64,
}

/// Measures what a syscall stop costs a traced process: a child runs `n`
/// getppid() calls untraced, then traced (two stops each, handled as the
/// tracer handles them); the difference per stop. None when it could not be
/// measured (the child is gone either way: it kills itself after 5 s).
pub(crate) fn calibrate(n: u32) -> Option<Calibration> {
    let (go, res) = (pipe()?, pipe()?);
    // SAFETY: the child runs only async-signal-safe calls (see `child`).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: just forked; the child never returns.
        unsafe { child(go[0], res[1], n) }
    }
    close(go[0]);
    close(res[1]);
    let (out, reaped) = if pid < 0 { (None, true) } else { measure(pid as u32, go[1], res[0], n) };
    close(go[1]);
    close(res[0]);
    if !reaped {
        // SAFETY: our own child, not reaped yet (so the pid is still its own).
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), libc::__WALL);
        }
    }
    out
}

/// The two rounds; also whether the child was reaped.
fn measure(pid: u32, go: i32, res: i32, n: u32) -> (Option<Calibration>, bool) {
    let Some(untraced) = round(go, res) else { return (None, false) };
    if seize(pid).is_err() || interrupt(pid).is_err() {
        return (None, false);
    }
    // The child blocks in read(go) until the second byte: the interrupt stops it there.
    let mut armed = false;
    let (mut handling, mut stops) = (std::time::Duration::ZERO, 0u32);
    loop {
        let mut status = 0;
        // SAFETY: status is a live int; pid is our child.
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::__WALL) };
        if r < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return (None, false);
        }
        let t0 = std::time::Instant::now();
        let ok = match decode(status) {
            Stop::Gone => break,
            Stop::Syscall => syscall_info(pid).and_then(|_| resume(pid, 0)).is_ok(),
            Stop::Event(..) => {
                let ok = resume(pid, 0).is_ok();
                if !armed {
                    armed = true;
                    if write_all(go, &[2]).is_none() {
                        return (None, false);
                    }
                }
                ok
            }
            Stop::Signal(sig) => resume(pid, sig).is_ok(),
        };
        handling += t0.elapsed();
        stops += 1;
        if !ok {
            return (None, false);
        }
    }
    // The child wrote its result before it exited; the pipe keeps it.
    let Some(traced) = read_u64_nonblocking(res) else { return (None, true) };
    let per_stop_us = traced.saturating_sub(untraced) as f64 / f64::from(2 * n) / 1e3;
    let handling_us = handling.as_secs_f64() * 1e6 / f64::from(stops.max(1));
    (Some(Calibration { per_stop_us, handling_us }), true)
}

/// Calls per calibration round (~1000 × 2 stops: some 10–50 ms).
pub(crate) const CAL_CALLS: u32 = 1000;

fn round(go: i32, res: i32) -> Option<u64> {
    write_all(go, &[1])?;
    let mut b = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        // SAFETY: b[got..] is valid for writes of 8 - got bytes.
        let n = unsafe { libc::read(res, b[got..].as_mut_ptr().cast(), 8 - got) };
        if n <= 0 {
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        }
        got += n as usize;
    }
    Some(u64::from_ne_bytes(b))
}

fn read_u64_nonblocking(res: i32) -> Option<u64> {
    let mut p = libc::pollfd { fd: res, events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd, no wait.
    if unsafe { libc::poll(&mut p, 1, 0) } <= 0 {
        return None;
    }
    let mut b = [0u8; 8];
    // SAFETY: b is valid for writes of 8 bytes.
    let n = unsafe { libc::read(res, b.as_mut_ptr().cast(), 8) };
    (n == 8).then(|| u64::from_ne_bytes(b))
}

fn write_all(fd: i32, b: &[u8]) -> Option<()> {
    // SAFETY: b is valid for reads of b.len() bytes.
    let n = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
    (n == b.len() as isize).then_some(())
}

fn pipe() -> Option<[i32; 2]> {
    let mut p = [0; 2];
    // SAFETY: p is a live array of two ints.
    (unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } == 0).then_some(p)
}

fn close(fd: i32) {
    // SAFETY: a descriptor this module opened and closes once.
    unsafe { libc::close(fd) };
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a live timespec; clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calibration child: after fork in a threaded process, so only
/// async-signal-safe calls, no allocation, no panics.
unsafe fn child(go: i32, res: i32, n: u32) -> ! {
    // SAFETY: all calls below are async-signal-safe; alarm bounds the child's life.
    unsafe {
        libc::alarm(5);
        for _ in 0..2 {
            let mut b = [0u8; 1];
            if libc::read(go, b.as_mut_ptr().cast(), 1) != 1 {
                libc::_exit(1);
            }
            let t0 = now_ns();
            for _ in 0..n {
                libc::syscall(libc::SYS_getppid);
            }
            let d = (now_ns() - t0).to_ne_bytes();
            libc::write(res, d.as_ptr().cast(), 8);
        }
        libc::_exit(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_statuses_decode() {
        // Encodings as waitpid(2) builds them: exit 0, killed by 9, syscall
        // stop, clone event, group-stop under SEIZE, a signal-delivery-stop.
        assert_eq!(decode(0), Stop::Gone);
        assert_eq!(decode(9), Stop::Gone);
        assert_eq!(decode(((libc::SIGTRAP | 0x80) << 8) | 0x7f), Stop::Syscall);
        assert_eq!(decode((EVENT_CLONE << 16) | (libc::SIGTRAP << 8) | 0x7f), Stop::Event(EVENT_CLONE, libc::SIGTRAP));
        assert_eq!(decode((EVENT_STOP << 16) | (libc::SIGSTOP << 8) | 0x7f), Stop::Event(EVENT_STOP, libc::SIGSTOP));
        assert_eq!(decode((libc::SIGUSR1 << 8) | 0x7f), Stop::Signal(libc::SIGUSR1));
        assert!(is_group_stop(libc::SIGTSTP) && !is_group_stop(libc::SIGTRAP));
    }

    #[test]
    fn a_stop_costs_something_measurable() {
        // Needs ptrace over our own child (allowed unless ptrace is disabled outright).
        let Some(c) = calibrate(CAL_CALLS) else {
            panic!("calibration failed: ptrace over a child not permitted here?");
        };
        assert!(c.per_stop_us > 0.05 && c.per_stop_us < 1000.0, "{c:?}");
        assert!(c.handling_us > 0.0 && c.handling_us < c.per_stop_us * 10.0, "{c:?}");
    }
}
