//! Ctrl-C for verbs that run until stopped (bench, lab, capture): the first
//! SIGINT sets a flag the loops check, so they stop and report what they
//! have; the handler is then reset, so a second Ctrl-C kills.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Clears the flag and arms the handler for Ctrl-C.
pub fn catch() {
    arm(&[libc::SIGINT]);
}

/// Like [`catch`], and SIGTERM and SIGHUP too: for verbs that own other
/// processes (lab's nginx), which must be stopped however we are asked to end.
pub fn catch_all() {
    arm(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP]);
}

fn arm(signals: &[libc::c_int]) {
    STOP.store(false, Ordering::Relaxed);
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        for &sig in signals {
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Whether Ctrl-C was pressed since [`catch`].
pub fn requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// The flag itself, for code that takes an `&AtomicBool`.
pub fn flag() -> &'static AtomicBool {
    &STOP
}
