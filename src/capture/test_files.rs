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

/// Every pcap and pcapng file in tests/data and its folders: path and bytes.
pub(crate) fn captures() -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut dirs = vec![std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data"))];
    let mut out = Vec::new();
    while let Some(p) = dirs.pop() {
        if p.is_dir() {
            dirs.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else if p.extension().is_some_and(|x| x == "pcap" || x == "pcapng") {
            let bytes = std::fs::read(&p).unwrap();
            out.push((p, bytes));
        }
    }
    out
}

/// `frame`, then a copy of it for each `(offset, byte)` change that falls
/// inside it, then its first `cut` bytes for each cut (as a snap length cuts it).
pub(crate) fn variants(frame: &[u8], changes: &[(usize, u8)], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut out = vec![frame.to_vec()];
    for &(at, x) in changes {
        let mut d = frame.to_vec();
        if let Some(b) = d.get_mut(at) {
            *b = x;
            out.push(d);
        }
    }
    out.extend(cuts.iter().map(|&cut| frame[..frame.len().min(cut)].to_vec()));
    out
}
