//! The streaming reader against the in-memory one: the same bytes, fed
//! through `Capture::from_reader_buffered` in chunks of varying size into a
//! tiny buffer (so records straddle every refill and the buffer grows and
//! compacts), must give exactly the packets, damage and skipped blocks that
//! the walk over the whole slice gives, or the same error. (The analysis
//! after the walk is fuzzed by `packets`; tests/robustness.rs checks that both
//! paths give the same report.)
//!
//! The first 8 input bytes seed the chunk sizes and the buffer size; the rest
//! is the capture.
//!
//! Run: `cargo +nightly fuzz run stream -- -max_total_time=300`
//! (seed fuzz/corpus/stream/ with tests/data/*.pcap*, each behind 8 bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::io::Read;
use tcpdoctor::capture::{Capture, Packets};

/// A reader that hands out its bytes in pseudo-random chunks.
struct Chunks {
    data: Vec<u8>,
    at: usize,
    rng: u64,
}

impl Chunks {
    fn next_size(&mut self) -> usize {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        match self.rng % 8 {
            0 => 0, // an interrupted read: retried
            1..=5 => 1 + (self.rng >> 8) as usize % 16,
            _ => 1 + (self.rng >> 8) as usize % 4096,
        }
    }
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.next_size();
        if n == 0 && self.at < self.data.len() {
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        let n = n.min(buf.len()).min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

type Seen = (Vec<(u64, i64, u32, Vec<u8>, u32)>, Option<String>, Option<(u64, u64)>);

fn walk(p: &mut Packets<'_>) -> Seen {
    let mut out = Vec::new();
    while let Some(x) = p.next() {
        out.push((x.frame, x.ts_ns, x.link.0, x.data.to_vec(), x.orig_len));
    }
    (out, p.damage().map(|d| d.to_string()), p.undeclared())
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let seed = u64::from_le_bytes(data[..8].try_into().unwrap());
    let bytes = &data[8..];
    let whole = Packets::new(bytes).map(|mut p| walk(&mut p)).map_err(|e| e.to_string());
    let reader = Chunks { data: bytes.to_vec(), at: 0, rng: seed | 1 };
    let stream = Capture::from_reader_buffered("fuzz", reader, 1 + (seed >> 56) as usize % 64);
    let streamed = stream.packets().map(|mut p| walk(&mut p)).map_err(|e| e.to_string());
    assert_eq!(whole, streamed);
});
