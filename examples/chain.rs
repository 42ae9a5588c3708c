//! What any sort of a pcap file's records costs at least on a machine: the
//! kernel's work to map the file (asked for in 2 MiB windows, as two threads
//! do, or by faults, as one thread's walk does), one core reading every
//! cache line of it, and one core following the chain of record headers
//! (each record's offset comes from the one before it), reading one word of
//! each frame, without and with asking for the lines 1 KiB ahead.
//! bench/RESULTS.md holds these against the sort of `analyze --threads 2`.
//!
//! cargo run --release --example chain -- bench/out/big.pcap

use std::io::Write;
use std::time::Instant;

const WINDOW: usize = 2 << 20;

/// Asks for the three lines 1 KiB past `at` (a hint: it cannot fault).
fn ask_ahead(m: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in [0, 64, 128] {
        // SAFETY: a prefetch hint reads nothing and cannot fault.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(m.as_ptr().wrapping_add(at + 1024 + line).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (m, at);
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: chain FILE.pcap (a little-endian pcap file, page-cached)");
        std::process::exit(2);
    };
    let fail = |what: &str, e: std::io::Error| -> ! {
        eprintln!("chain: cannot {what} {path}: {e}");
        std::process::exit(1);
    };
    let file = std::fs::File::open(&path).unwrap_or_else(|e| fail("open", e));
    let map = || {
        // SAFETY: read-only map of a file nobody truncates during the run.
        unsafe { memmap2::Mmap::map(&file) }.unwrap_or_else(|e| fail("map", e))
    };
    for round in 1..=3 {
        let m = map();
        let t = Instant::now();
        for from in (0..m.len()).step_by(WINDOW) {
            let len = WINDOW.min(m.len() - from);
            if let Err(e) = m.advise_range(memmap2::Advice::PopulateRead, from, len) {
                fail("populate (MADV_POPULATE_READ, Linux 5.14) the mapping of", e);
            }
        }
        let populate = ms(t);

        let t = Instant::now();
        let mut sum = 0u64;
        for i in (0..m.len().saturating_sub(8)).step_by(64) {
            sum = sum.wrapping_add(u64::from_le_bytes(m[i..i + 8].try_into().unwrap()));
        }
        let lines = ms(t);

        let t = Instant::now();
        let u32le = |i: usize| u32::from_le_bytes(m[i..i + 4].try_into().unwrap());
        let (mut at, mut records) = (24usize, 0u64);
        while at + 16 + 30 <= m.len() {
            // The frame's first word past the Ethernet header: a load on the record's line.
            sum = sum.wrapping_add(u64::from(u32le(at + 16 + 26)));
            at += 16 + u32le(at + 8) as usize;
            records += 1;
        }
        let chain = ms(t);

        // The same, asking for the lines 1 KiB ahead (as analyze's walks do).
        let t = Instant::now();
        let (mut at, mut asked) = (24usize, 0u64);
        while at + 16 + 30 <= m.len() {
            ask_ahead(&m, at);
            sum = sum.wrapping_add(u64::from(u32le(at + 16 + 26)));
            at += 16 + u32le(at + 8) as usize;
            asked += 1;
        }
        let ahead = ms(t);
        let t = Instant::now();
        drop(m);
        let unmap = ms(t);

        let m = map();
        let t = Instant::now();
        for i in (0..m.len()).step_by(4096) {
            sum = sum.wrapping_add(u64::from(m[i]));
        }
        let faults = ms(t);
        std::hint::black_box(sum);
        // A closed standard output (`| head`) ends the run quietly.
        let written = writeln!(
            std::io::stdout(),
            "round {round}: populate in 2 MiB windows {populate:.1} ms; every line {lines:.1} ms ({:.1} GB/s); \
             record chain {chain:.1} ms ({records} records, {:.1} ns each), asking 1 KiB ahead {ahead:.1} ms \
             ({:.1} ns); unmap {unmap:.1} ms; map by faults {faults:.1} ms",
            m.len() as f64 / lines / 1e6,
            chain * 1e6 / records.max(1) as f64,
            ahead * 1e6 / asked.max(1) as f64,
        );
        if written.is_err() {
            return;
        }
    }
}
