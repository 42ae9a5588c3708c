//! watch's JSON lines as types, so their schema is generated like the other
//! verbs': a `finding` line per finding and a `summary` line per interval.

use schemars::JsonSchema;
use serde::Serialize;
use std::collections::BTreeMap;

/// One JSON line of `watch --json`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Line {
    Finding(FindingLine),
    Summary(SummaryLine),
}

/// A finding as it happens.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct FindingLine {
    /// Schema version (1).
    pub schema: u32,
    /// tcpdoctor's version.
    pub version: &'static str,
    /// Always `finding`.
    #[serde(rename = "type")]
    pub kind_of_line: &'static str,
    /// When the finding became certain, UTC (`2026-05-01T12:03:04.123Z`).
    pub time: String,
    /// The same, seconds since the epoch.
    pub ts: f64,
    /// The finding itself.
    #[serde(flatten)]
    pub finding: super::sink::Finding,
}

/// The counts of an interval (or of the whole run, `final`).
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct SummaryLine {
    /// Schema version (1).
    pub schema: u32,
    /// tcpdoctor's version.
    pub version: &'static str,
    /// Always `summary`.
    #[serde(rename = "type")]
    pub kind_of_line: &'static str,
    /// The last summary, of the whole run.
    #[serde(rename = "final")]
    pub last: bool,
    /// When, UTC.
    pub time: String,
    /// The same, seconds since the epoch.
    pub ts: f64,
    /// Seconds the summary covers.
    pub seconds: f64,
    /// Packets captured in that time.
    pub packets: u64,
    /// Packets the kernel dropped in that time.
    pub kernel_drops: u64,
    /// Connections tracked now.
    pub tracked_connections: usize,
    /// Connections evicted to stay under the cap, since the start.
    pub evicted_connections: u64,
    /// Connections whose server was folded into `other`, since the start.
    pub folded_connections: u64,
    /// Endpoint slots given to a new endpoint, since the start.
    pub recycled_endpoints: u64,
    /// One per server endpoint.
    pub endpoints: Vec<EndpointLine>,
    /// The verdict sentences (final summary).
    pub verdict: Vec<String>,
}

/// A server endpoint's counts in a summary.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EndpointLine {
    pub server: String,
    /// HTTP `Server:` header, if seen.
    pub software: Option<String>,
    pub exchanges: u64,
    /// Findings by kind.
    pub findings: BTreeMap<String, u64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub time_lost_ms: f64,
    /// Findings not printed as lines (over the per-interval limit).
    pub not_shown: u64,
}
