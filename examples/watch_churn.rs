//! Memory under churn: feeds a synthetic stream of N short connections
//! (default 1,000,000) through `watch`'s analysis ([`tcpdoctor::watch::Watch`],
//! the code a live capture feeds) and prints the process's RSS and the packets/s
//! so far (one thread) as it goes.
//! No packet is sent anywhere: frames are built in memory.
//!
//! The stream, 10,000 new connections per second of capture time:
//! - every connection: handshake, one request, a response, FINs; clients on
//!   127.0.0.0/8 with rotating ports; servers on 127.0.0.1, 1,000 ports (so the
//!   endpoint table fills and the rest fold into `other`);
//! - one in ten responses is held by Nagle until a 40 ms delayed ACK (findings);
//! - every other connection is abandoned without a FIN (it stays until the idle
//!   timeout or the connection cap evicts it), so the cap is reached after
//!   ~200,000 connections and holds from then on.
//!
//! `cargo run --release --example watch_churn -- [N] [MAX_CONNECTIONS]`

use std::time::Instant;
use tcpdoctor::capture::LinkType;
use tcpdoctor::watch::{Limits, Options, Watch};

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH: u8 = 0x08;
const FIN: u8 = 0x01;

/// An Ethernet + IPv4 + TCP frame.
fn frame(buf: &mut Vec<u8>, src: ([u8; 4], u16), dst: ([u8; 4], u16), seq: u32, ack: u32, flags: u8, payload: usize) {
    buf.clear();
    buf.extend_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00]);
    let opts: &[u8] = if flags & SYN != 0 { &[2, 4, 0x05, 0xb4] } else { &[] };
    let tcp_len = 20 + opts.len();
    let total = (20 + tcp_len + payload) as u16;
    buf.extend_from_slice(&[0x45, 0]);
    buf.extend_from_slice(&total.to_be_bytes());
    buf.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
    buf.extend_from_slice(&src.0);
    buf.extend_from_slice(&dst.0);
    buf.extend_from_slice(&src.1.to_be_bytes());
    buf.extend_from_slice(&dst.1.to_be_bytes());
    buf.extend_from_slice(&seq.to_be_bytes());
    buf.extend_from_slice(&ack.to_be_bytes());
    buf.push(((tcp_len / 4) as u8) << 4);
    buf.push(flags | if flags & SYN == 0 { ACK } else { 0 });
    buf.extend_from_slice(&65535u16.to_be_bytes());
    buf.extend_from_slice(&[0, 0, 0, 0]);
    buf.extend_from_slice(opts);
    buf.resize(buf.len() + payload, b'x');
}

/// (current RSS, peak RSS) in MiB, from /proc/self/status.
fn rss() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |key: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kb("VmRSS:") / 1024.0, kb("VmHWM:") / 1024.0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let cap: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let opts = Options { max_connections: cap, limits: Limits::default(), ..Options::default() };
    let mut w = Watch::new(&opts, Some(std::sync::Arc::new(tcpdoctor::watch::Metrics::new())));
    let checkpoints = [100_000, 250_000, 500_000, 750_000, 1_000_000, 1_500_000, 2_000_000, 3_000_000, n];
    println!("connections  packets     tracked  evicted   folded  endpoints  findings  RSS MiB  peak MiB  Mpkt/s");
    let (mut buf, mut packets, mut findings) = (Vec::with_capacity(256), 0u64, 0u64);
    let start = Instant::now();
    let mut next_second = 0i64;
    const MS: i64 = 1_000_000;
    for i in 0..n {
        let t0 = 1_700_000_000_000_000_000 + i as i64 * 100_000; // 10,000 connections per second
        let c = ([127, 1 + (i >> 24) as u8 % 250, (i >> 16) as u8, (i >> 8) as u8], 1024 + (i % 60_000) as u16);
        let s = ([127, 0, 0, 1], 10_000 + (i % 1000) as u16);
        let (ci, si) = ((i as u32).wrapping_mul(2_654_435_761), (i as u32).wrapping_mul(40_503));
        let stall = i % 10 == 0;
        let abandon = i % 2 == 1;
        let mut pkts: Vec<(i64, bool, u32, u32, u8, usize)> = vec![
            (0, true, ci, 0, SYN, 0),
            (20_000, false, si, ci + 1, SYN | ACK, 0),
            (40_000, true, ci + 1, si + 1, 0, 0),
            (60_000, true, ci + 1, si + 1, PSH, 80),
        ];
        let (resp_end, t_end) = if stall {
            pkts.push((100_000, false, si + 1, ci + 81, PSH, 120));
            pkts.push((40 * MS + 100_000, true, ci + 81, si + 121, 0, 0));
            pkts.push((40 * MS + 115_000, false, si + 121, ci + 81, PSH, 600));
            (si + 721, 40 * MS + 200_000)
        } else {
            pkts.push((100_000, false, si + 1, ci + 81, PSH, 720));
            (si + 721, 200_000)
        };
        pkts.push((t_end, true, ci + 81, resp_end, 0, 0));
        if !abandon {
            pkts.push((t_end + 10_000, true, ci + 81, resp_end, FIN, 0));
            pkts.push((t_end + 30_000, false, resp_end, ci + 82, FIN, 0));
            pkts.push((t_end + 40_000, true, ci + 82, resp_end + 1, 0, 0));
        }
        // Interleaving within one connection is all that matters to the analysis.
        for (dt, from_client, seq, ack, flags, len) in pkts {
            let (src, dst) = if from_client { (c, s) } else { (s, c) };
            frame(&mut buf, src, dst, seq, ack, flags, len);
            w.packet(LinkType::ETHERNET, t0 + dt, &buf, buf.len() as u32);
            packets += 1;
        }
        if t0 >= next_second {
            // What the live loop does every second of its clock, and at each summary.
            next_second = t0 + 1_000 * MS;
            w.expire(t0);
            findings += w.findings().len() as u64;
            let _ = w.interval();
        }
        if checkpoints.contains(&(i + 1)) {
            findings += w.findings().len() as u64;
            let (now, peak) = rss();
            println!(
                "{:>11}  {:>9}  {:>8}  {:>7}  {:>7}  {:>9}  {:>8}  {:>7.1}  {:>8.1}  {:>6.2}",
                i + 1,
                packets,
                w.tracked(),
                w.evicted(),
                w.folded(),
                w.endpoints(),
                findings,
                now,
                peak,
                packets as f64 / start.elapsed().as_secs_f64() / 1e6
            );
        }
    }
}
