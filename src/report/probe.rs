//! `probe`'s JSON schema and its hping3-like text.

use serde::Serialize;
use std::fmt::Write;

/// What `tcpdoctor probe` measured.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ProbeReport {
    /// Schema version ([`super::SCHEMA_VERSION`]).
    pub schema: u32,
    /// tcpdoctor's version.
    pub version: &'static str,
    /// `raw_syn` (hand-built SYNs on a raw socket) or `connect` (timed `connect()`).
    pub method: &'static str,
    /// Where the send and receive times come from, in words.
    pub timestamps: String,
    /// The host as given.
    pub target: String,
    /// The address probed.
    pub address: String,
    /// The port probed.
    pub port: u16,
    /// Our address (raw_syn: also our reserved port; connect: port 0, a new one per probe).
    pub source: String,
    /// Probes asked for.
    pub count: u32,
    /// Time between probe starts, ms.
    pub interval_ms: f64,
    /// How long a probe waits for its reply, ms.
    pub timeout_ms: f64,
    /// One per probe, in order.
    pub probes: Vec<ProbeResult>,
    /// Totals.
    pub summary: ProbeSummary,
    /// Things worth knowing about this run (e.g. why `connect` was used).
    pub notes: Vec<String>,
}

/// One probe's outcome.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ProbeResult {
    /// Probe number, from 0.
    pub seq: u32,
    /// `open` (SYN-ACK / connected), `closed` (RST / refused) or `filtered` (no answer, or an ICMP error).
    pub state: &'static str,
    /// Round trip, ms: SYN out → reply in (raw_syn), or the time `connect()` took (connect). Null when
    /// nothing came back.
    pub rtt_ms: Option<f64>,
    /// connect: the kernel's smoothed RTT of the connection (`tcpi_rtt`), ms.
    pub tcpi_rtt_ms: Option<f64>,
    /// Whether `rtt_ms` comes from kernel timestamps on both ends (raw_syn).
    pub kernel_timestamps: bool,
    /// Who answered (the target, or the router that sent an ICMP error).
    pub from: Option<String>,
    /// Our source port for this probe (the reply's destination port).
    pub local_port: u16,
    /// raw_syn: TTL (IPv4) or hop limit (IPv6) of the reply.
    pub ttl: Option<u8>,
    /// raw_syn: TCP flags of the reply, hping3 style (`SA`, `RA`).
    pub flags: Option<String>,
    /// raw_syn: window of the reply.
    pub window: Option<u16>,
    /// raw_syn: IP length of the reply, bytes.
    pub len: Option<usize>,
    /// The ICMP error that answered instead, in words.
    pub icmp: Option<String>,
}

/// Totals over the probes.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct ProbeSummary {
    /// Probes sent.
    pub sent: u32,
    /// TCP answers (open or closed). ICMP errors count as lost.
    pub received: u32,
    /// Percentage of probes without a TCP answer.
    pub loss_pct: f64,
    /// Smallest round trip, ms.
    pub min_ms: Option<f64>,
    /// Mean round trip, ms.
    pub avg_ms: Option<f64>,
    /// Largest round trip, ms.
    pub max_ms: Option<f64>,
}

impl ProbeSummary {
    /// Totals of `probes`.
    pub fn of(probes: &[ProbeResult]) -> ProbeSummary {
        let sent = probes.len() as u32;
        let rtts: Vec<f64> = probes.iter().filter(|p| p.state != "filtered").filter_map(|p| p.rtt_ms).collect();
        let received = probes.iter().filter(|p| p.state != "filtered").count() as u32;
        let loss_pct = if sent == 0 { 0.0 } else { round3(100.0 * f64::from(sent - received) / f64::from(sent)) };
        let (min_ms, avg_ms, max_ms) = if rtts.is_empty() {
            (None, None, None)
        } else {
            let min = rtts.iter().copied().fold(f64::INFINITY, f64::min);
            let max = rtts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let avg = rtts.iter().sum::<f64>() / rtts.len() as f64;
            (Some(min), Some(round3(avg)), Some(max))
        };
        ProbeSummary { sent, received, loss_pct, min_ms, avg_ms, max_ms }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

/// The header line, like hping3's `HPING host (…)`.
pub fn render_header(r: &ProbeReport) -> String {
    let how = match r.method {
        "raw_syn" => "raw TCP SYN",
        _ => "TCP connect()",
    };
    format!("PROBE {} ({}) port {}: {how} from {}, {}\n", r.target, r.address, r.port, r.source, r.timestamps)
}

/// One probe's line, like hping3's `len=44 ip=… sport=PORT flags=SA seq=0 … rtt=… ms`
/// (`sport` is the replying port, as in hping3).
pub fn render_probe(p: &ProbeResult, port: u16) -> String {
    let mut o = String::new();
    if let Some(len) = p.len {
        let _ = write!(o, "len={len} ");
    }
    if let Some(from) = &p.from {
        let _ = write!(o, "ip={from} ");
    }
    if let Some(ttl) = p.ttl {
        let _ = write!(o, "ttl={ttl} ");
    }
    let _ = write!(o, "sport={port} ");
    if let Some(f) = &p.flags {
        let _ = write!(o, "flags={f} ");
    }
    let _ = write!(o, "seq={} ", p.seq);
    if let Some(w) = p.window {
        let _ = write!(o, "win={w} ");
    }
    let _ = write!(o, "state={}", p.state);
    match (p.rtt_ms, p.tcpi_rtt_ms) {
        (Some(rtt), Some(k)) => {
            let _ = write!(o, " connect={rtt:.3} ms tcpi_rtt={k:.3} ms");
        }
        (Some(rtt), None) => {
            let _ = write!(o, " rtt={rtt:.3} ms");
        }
        _ => {}
    }
    if let Some(i) = &p.icmp {
        let _ = write!(o, " ({i})");
    } else if p.state == "filtered" {
        o.push_str(" (no reply)");
    }
    o.push('\n');
    o
}

/// The closing statistics, like hping3's.
pub fn render_summary(r: &ProbeReport) -> String {
    let s = &r.summary;
    let mut o = String::new();
    let _ = writeln!(o, "\n--- {} tcpdoctor probe statistic ---", r.target);
    let sent = crate::words::plural(u64::from(s.sent), "probe");
    let replies = if s.received == 1 { "1 reply".to_string() } else { format!("{} replies", s.received) };
    let _ = writeln!(o, "{sent} sent, {replies}, {:.0}% loss", s.loss_pct);
    match (s.min_ms, s.avg_ms, s.max_ms) {
        (Some(a), Some(b), Some(c)) => {
            let _ = writeln!(o, "round-trip min/avg/max = {a:.3}/{b:.3}/{c:.3} ms");
        }
        _ => {
            let _ = writeln!(o, "round-trip min/avg/max = -/-/- ms");
        }
    }
    let how = match r.method {
        "raw_syn" => format!("raw SYN + {}", r.timestamps),
        _ => format!("connect() + {}", r.timestamps),
    };
    let _ = writeln!(o, "method: {how}");
    o
}

/// The whole text, as printed when every probe is done.
pub fn render(r: &ProbeReport) -> String {
    let mut o = render_header(r);
    for p in &r.probes {
        o.push_str(&render_probe(p, r.port));
    }
    o.push_str(&render_summary(r));
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(seq: u32, state: &'static str, rtt: Option<f64>) -> ProbeResult {
        ProbeResult {
            seq,
            state,
            rtt_ms: rtt,
            tcpi_rtt_ms: None,
            kernel_timestamps: true,
            from: rtt.map(|_| "127.0.0.1".into()),
            local_port: 40000,
            ttl: rtt.map(|_| 64),
            flags: rtt.map(|_| "SA".into()),
            window: rtt.map(|_| 65495),
            len: rtt.map(|_| 44),
            icmp: None,
        }
    }

    #[test]
    fn summary_counts_tcp_answers_only() {
        let mut icmp = p(3, "filtered", None);
        icmp.icmp = Some("host unreachable".into());
        let probes = vec![p(0, "open", Some(0.02)), p(1, "closed", Some(0.04)), p(2, "filtered", None), icmp];
        let s = ProbeSummary::of(&probes);
        assert_eq!((s.sent, s.received, s.loss_pct), (4, 2, 50.0));
        assert_eq!((s.min_ms, s.avg_ms, s.max_ms), (Some(0.02), Some(0.03), Some(0.04)));
        let none = ProbeSummary::of(&[p(0, "filtered", None)]);
        assert_eq!((none.received, none.loss_pct, none.min_ms), (0, 100.0, None));
    }

    #[test]
    fn hping_like_line() {
        assert_eq!(
            render_probe(&p(0, "open", Some(0.0214)), 80),
            "len=44 ip=127.0.0.1 ttl=64 sport=80 flags=SA seq=0 win=65495 state=open rtt=0.021 ms\n"
        );
        assert_eq!(render_probe(&p(2, "filtered", None), 80), "sport=80 seq=2 state=filtered (no reply)\n");
    }
}
