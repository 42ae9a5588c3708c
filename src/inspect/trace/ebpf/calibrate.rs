//! What a call costs with the programs attached: a loop of non-blocking
//! reads timed in thread CPU before and after they are.

use super::raw::Raw;
use super::session::Session;
use super::{CAL_CALLS, Calibration};

/// This thread's CPU time, ns: unlike the wall clock, not inflated when
/// other work on the host takes the CPU away mid-loop.
pub(super) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime with a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `n` non-blocking reads on a connected loopback TCP socket, CPU ns per call
/// (the programs run in the calling thread, so their time is counted).
pub(super) fn read_loop(n: u32) -> Option<f64> {
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

/// Runs of a loop taken for each figure: the least is kept, since work
/// elsewhere on the host (a server under load beside us) only adds time, and
/// a median of three still came out below the untraced loop under such load.
const RUNS: usize = 5;

/// The least of [`RUNS`] runs of `f`.
pub(super) fn least(f: &mut dyn FnMut() -> Option<f64>) -> Option<f64> {
    (0..RUNS).filter_map(|_| f()).min_by(f64::total_cmp)
}

/// Measures a traced and an untraced call: `base` was measured before the
/// programs were attached; the calibration's own records are thrown away.
/// `None` when the traced call did not come out dearer than `base` (a figure
/// of zero would claim the programs cost nothing).
pub(super) fn calibrate(s: &mut Session, base: Option<f64>) -> Option<Calibration> {
    let me = std::process::id();
    let other = least(&mut || read_loop(CAL_CALLS))?;
    s.mark(me, true).ok()?;
    let mut junk = 0;
    let traced = least(&mut || {
        let r = read_loop(CAL_CALLS);
        s.drain(&mut Raw::default(), 0, &mut junk);
        r
    });
    let _ = s.mark(me, false);
    s.drain(&mut Raw::default(), 0, &mut junk);
    let (base, traced) = (base?, traced?);
    (traced > base).then(|| Calibration { traced_ns: traced - base, other_ns: (other - base).max(0.0) })
}
