//! The speed floor on a machine: the leanest loop that still does what every
//! analysis must (map the file, walk pcap records, decode Ethernet/IPv4/TCP,
//! look the connection up, keep per-direction sequence/ACK state), with no
//! detectors, exchanges or histograms; it asks for the file ahead as
//! analyze does. bench/RESULTS.md compares `analyze` against it.
//!
//! cargo run --release --example floor -- bench/out/big.pcap

use rustc_hash::FxHashMap;

#[derive(Default, Clone, Copy)]
struct Dir {
    hi: u32,
    last_ts: i64,
    acked: u32,
    late: u32,
}

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: floor FILE.pcap (little-endian µs pcap of Ethernet frames)");
        std::process::exit(2);
    };
    let file = std::fs::File::open(&path).expect("open");
    // SAFETY: read-only map of a file nobody truncates during the run.
    let map = unsafe { memmap2::Mmap::map(&file) }.expect("map");
    let b = &map[..];
    let start = std::time::Instant::now();
    let (mut at, mut n) = (24usize, 0u64);
    let mut index: FxHashMap<(u64, u64), u32> = FxHashMap::default();
    let mut conns: Vec<[Dir; 2]> = Vec::new();
    let u32le = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    while at + 16 <= b.len() {
        // The lines 1 KiB ahead asked for, as analyze's walks do (a hint; on
        // Zen 3 it took this loop 0.175 -> 0.146 s on big.pcap).
        #[cfg(target_arch = "x86_64")]
        for line in [0, 64, 128] {
            // SAFETY: a prefetch hint reads nothing and cannot fault.
            unsafe {
                use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
                _mm_prefetch::<_MM_HINT_T0>(b.as_ptr().wrapping_add(at + 1024 + line).cast());
            }
        }
        let ts = i64::from(u32le(at)) * 1_000_000_000 + i64::from(u32le(at + 4)) * 1000;
        let cap = u32le(at + 8) as usize;
        let Some(d) = b.get(at + 16..at + 16 + cap) else { break };
        at += 16 + cap;
        n += 1;
        if d.len() < 54 || d[12..14] != [8, 0] || d[23] != 6 {
            continue;
        }
        let ip = &d[14..];
        let ihl = usize::from(ip[0] & 15) * 4;
        let tcp = &ip[ihl..];
        let be32 = |x: &[u8]| u32::from_be_bytes([x[0], x[1], x[2], x[3]]);
        let len = usize::from(u16::from_be_bytes([ip[2], ip[3]])).saturating_sub(ihl + usize::from(tcp[12] >> 4) * 4);
        let a = (u64::from(be32(&ip[12..])) << 16) | u64::from(u16::from_be_bytes([tcp[0], tcp[1]]));
        let z = (u64::from(be32(&ip[16..])) << 16) | u64::from(u16::from_be_bytes([tcp[2], tcp[3]]));
        let (key, dir) = if a <= z { ((a, z), 0) } else { ((z, a), 1) };
        let next = conns.len() as u32;
        let i = *index.entry(key).or_insert(next) as usize;
        if i == conns.len() {
            conns.push(Default::default());
        }
        let [x, y] = &mut conns[i];
        let (me, peer) = if dir == 0 { (x, y) } else { (y, x) };
        let (seq, ack) = (be32(&tcp[4..]), be32(&tcp[8..]));
        if ack.wrapping_sub(peer.acked) as i32 > 0 {
            peer.late += u32::from(len == 0 && ts - peer.last_ts > 30_000_000);
            peer.acked = ack;
        }
        if len > 0 {
            let end = seq.wrapping_add(len as u32);
            if end.wrapping_sub(me.hi) as i32 > 0 {
                me.hi = end;
            }
            me.last_ts = ts;
        }
    }
    let t = start.elapsed();
    let late: u32 = conns.iter().map(|c| c[0].late + c[1].late).sum();
    println!(
        "{n} packets in {:.1} ms: {:.1} M packets/s ({} connections, {late} late ACKs)",
        t.as_secs_f64() * 1e3,
        n as f64 / t.as_secs_f64() / 1e6,
        conns.len()
    );
}
