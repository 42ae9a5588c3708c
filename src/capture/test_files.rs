//! Test helpers: big pcap files written on the spot, and how much of a
//! mapped file this process holds resident.

use std::io::Write;

/// Writes a little-endian µs pcap of Ethernet frames of 1,500 zero bytes (no
/// connection in them) of at least `bytes` bytes to `path`, a new file (in the
/// test's own temporary directory).
pub(crate) fn zero_frames(path: &std::path::Path, bytes: usize) {
    let file = std::fs::OpenOptions::new().write(true).create_new(true).open(path).unwrap();
    let mut f = std::io::BufWriter::new(file);
    f.write_all(&0xa1b2_c3d4_u32.to_le_bytes()).unwrap();
    f.write_all(&[2, 0, 4, 0]).unwrap();
    for v in [0u32, 0, 65535, 1] {
        f.write_all(&v.to_le_bytes()).unwrap();
    }
    let frame = vec![0u8; 1500];
    for i in 0..bytes.div_ceil(1516) as u32 {
        for v in [i, 0, 1500, 1500] {
            f.write_all(&v.to_le_bytes()).unwrap();
        }
        f.write_all(&frame).unwrap();
    }
    f.flush().unwrap();
}

/// Resident KB of this process's mapping of `path` (/proc/self/smaps).
pub(crate) fn resident_kb(path: &std::path::Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let name = path.to_str().unwrap();
    let mut mine = false;
    for line in smaps.lines() {
        if line.contains('-') && line.split_whitespace().count() >= 5 {
            mine = line.ends_with(name);
        } else if mine && let Some(kb) = line.strip_prefix("Rss:") {
            return kb.trim().trim_end_matches("kB").trim().parse().unwrap();
        }
    }
    panic!("{name} is not mapped");
}
