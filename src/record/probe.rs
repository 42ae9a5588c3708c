//! `probe`'s record: one result per probe and their totals.

use serde::Serialize;

/// What `tcpdoctor probe` measured.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ProbeReport {
    /// Schema version (`SCHEMA_VERSION`).
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn p(seq: u32, state: &'static str, rtt: Option<f64>) -> ProbeResult {
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
}
