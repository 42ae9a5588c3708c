//! Arbitrary bytes through the whole packet path: container (pcap/pcapng)
//! recognition and walking, link/IP/TCP decoding, connection tracking, the
//! detectors, and both report renderings. Also every link type's decoder on
//! the raw bytes, so the wire layer is reached without a valid container.
//!
//! Run: `cargo +nightly fuzz run packets -- -max_total_time=300`
//! (seed fuzz/corpus/packets/ with tests/data/*.pcap*).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcpdoctor::analyze::{Options, analyze};
use tcpdoctor::capture::{Capture, LinkType};
use tcpdoctor::wire;

const LINKS: [u32; 11] = [0, 1, 12, 14, 101, 108, 113, 228, 229, 276, 147];

fuzz_target!(|data: &[u8]| {
    let opts = Options { ladder_rows: 60, ..Default::default() };
    if let Ok(r) = analyze(&[Capture::from_bytes("fuzz", data.to_vec())], &opts) {
        let _ = tcpdoctor::report::render(&r);
        let _ = serde_json::to_string(&r);
    }
    let orig = data.len() as u32;
    for link in LINKS {
        let _ = wire::decode(1, 0, LinkType(link), data, orig);
    }
});
