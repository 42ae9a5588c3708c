//! Ctrl-C for verbs that run until stopped (bench, lab, capture): the first
//! SIGINT sets a flag the loops check, so they stop and report what they
//! have; the handler is then reset, so a second Ctrl-C kills.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Clears the flag and arms the handler.
pub fn catch() {
    STOP.store(false, Ordering::Relaxed);
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as *const () as usize;
        sa.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
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
