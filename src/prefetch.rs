//! A hint to the CPU to bring memory into the cache before it is read: the
//! walks over a capture's bytes ask for those ahead of the record they read,
//! the connection table for a connection's first lines. Only a hint: it reads
//! nothing and never faults.

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

/// How far ahead of a record's end a walk over a capture's bytes asks for
/// them: a few records, which the walk reaches after DRAM's latency. The
/// hardware's own prefetcher stops at each 4 KiB page and, on some CPUs
/// (Zen 3), trails a record walk that reads 2-3 lines a record: asking
/// ahead took one thread 0.58 -> 0.48 s and two 0.32 -> 0.28 s on such a
/// machine (plain builds; bench/RESULTS.md, sixteenth session).
pub(crate) const AHEAD: usize = 1024;

/// Asks for the three lines [`AHEAD`] of `end` in `bytes` (a record is
/// under 192 bytes on average in the captures measured, so a walk that asks
/// at each record misses no line; asking twice for a line costs little).
#[inline(always)]
pub(crate) fn ahead(bytes: &[u8], end: usize) {
    let p = bytes.as_ptr().wrapping_add(end + AHEAD);
    line(p);
    line(p.wrapping_add(64));
    line(p.wrapping_add(128));
}
