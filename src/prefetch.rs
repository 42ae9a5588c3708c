//! A hint to the CPU to bring memory into the cache before it is read: the
//! mapped walk asks for pages ahead, the connection table for a connection's
//! first lines. Only a hint: it reads nothing and never faults.

/// Asks for the cache line at `p`, whatever `p` is (even past a mapping).
#[inline(always)]
pub(crate) fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch hint reads nothing and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks for the first `bytes` of `x` at once, a line at a time.
#[inline(always)]
pub(crate) fn first<X>(x: &X, bytes: usize) {
    for off in (0..bytes.min(size_of::<X>())).step_by(64) {
        line((x as *const X).cast::<u8>().wrapping_add(off));
    }
}
