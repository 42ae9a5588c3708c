//! `watch`'s records: its JSON lines (a `finding` line per finding and a
//! `summary` line per interval), the finding itself, its kind and the
//! process that owns the endpoint at fault.

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
    pub finding: Finding,
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

/// One finding, as it happens.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct Finding {
    /// When the finding became certain (the held segment, the re-send, the answer…), ns since the epoch
    /// (lines carry it as `time` and `ts`).
    #[serde(skip)]
    pub ts_ns: i64,
    /// What it is.
    pub kind: Kind,
    /// The connection's server endpoint.
    pub server: String,
    /// The connection's client endpoint.
    pub client: String,
    /// The side at fault: Nagle's, the re-sender's, the SYN's sender's, the one that closed its window.
    pub role: &'static str,
    /// Time it cost, ms: the stall, the wait for the re-send, the connect, the closed window.
    pub ms: f64,
    /// Nagle only: the ACKing host delayed its ACK this long (the late ACK
    /// came this long after the small segment, less the round trip from the
    /// capture point to that host), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_delay_ms: Option<f64>,
    /// Nagle only: which ACK timer that delay looks like.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_timer: Option<String>,
    /// The finding in words.
    pub summary: String,
    /// The process owning the side at fault's endpoint, when it is on this
    /// host and eBPF could say (see `owners`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
}

/// What kind of trouble a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A segment held by Nagle until the peer's delayed ACK.
    NagleDelayedAck,
    /// Bytes re-sent after a retransmission timeout (≥ 180 ms after the first copy).
    RetransmissionTimeout,
    /// A SYN or SYN-ACK sent more than once (a 1 s / 3 s connect).
    SynRetransmission,
    /// A receiver closed its window; its peer had to wait.
    ZeroWindow,
}

impl Kind {
    /// Every kind, in the order of [`Kind::idx`].
    pub const ALL: [Kind; 4] =
        [Kind::NagleDelayedAck, Kind::RetransmissionTimeout, Kind::SynRetransmission, Kind::ZeroWindow];

    /// The name used in JSON and in metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Kind::NagleDelayedAck => "nagle_delayed_ack",
            Kind::RetransmissionTimeout => "retransmission_timeout",
            Kind::SynRetransmission => "syn_retransmission",
            Kind::ZeroWindow => "zero_window",
        }
    }

    /// Index for per-kind arrays.
    pub fn idx(self) -> usize {
        self as usize
    }
}

/// The process that owns an endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Owner {
    /// Its process id (tgid).
    pub pid: u32,
    /// Its name as the kernel has it (`comm`, which the process can set).
    pub comm: String,
    /// Its cgroup v2 path, when it is not the root.
    pub cgroup: Option<String>,
    /// A container id found in that path (docker, containerd, CRI-O, podman), first 12 characters.
    pub container: Option<String>,
}
