//! `trace`'s record: each TTL's probes and who answered.

use serde::Serialize;

/// What `tcpdoctor trace` found on the way to a TCP port.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct TraceReport {
    /// Schema version (`SCHEMA_VERSION`).
    pub schema: u32,
    /// tcpdoctor's version.
    pub version: &'static str,
    /// `raw_syn` (TTL-limited raw SYNs, ICMP on a raw socket) or `connect`
    /// (TTL-limited `connect()`, ICMP from the socket's error queue).
    pub method: &'static str,
    /// Where the send and receive times come from, in words.
    pub timestamps: String,
    /// The host as given.
    pub target: String,
    /// The address traced to.
    pub address: String,
    /// The TCP port.
    pub port: u16,
    /// Our address (raw_syn: with the reserved source port).
    pub source: String,
    /// Largest TTL tried.
    pub max_hops: u8,
    /// Probes per hop.
    pub queries: u32,
    /// How long a hop waits for its answers, ms.
    pub wait_ms: f64,
    /// One per TTL tried, from 1.
    pub hops: Vec<TraceHop>,
    /// Whether the destination answered (SYN-ACK or RST).
    pub reached: bool,
    /// `open` or `closed` when reached.
    pub final_state: Option<&'static str>,
    /// Things worth knowing about this run.
    pub notes: Vec<String>,
}

/// One TTL's probes.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct TraceHop {
    /// The TTL (hop limit) the probes left with.
    pub ttl: u8,
    /// One per probe, in the order sent.
    pub probes: Vec<TraceProbe>,
}

/// One probe's answer.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct TraceProbe {
    /// `time_exceeded` (a router), `open` / `closed` (the destination: SYN-ACK / RST),
    /// `unreachable` (an ICMP destination unreachable) or `none` (silence: `*`).
    pub reply: &'static str,
    /// Who answered.
    pub from: Option<String>,
    /// Round trip, ms.
    pub rtt_ms: Option<f64>,
    /// For `unreachable`: traceroute's mark (`!H`, `!N`, `!P`, `!X`…).
    pub mark: Option<String>,
    /// For `unreachable`: the ICMP error in words.
    pub icmp: Option<String>,
}
