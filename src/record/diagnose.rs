//! `diagnose`'s record: one part per step of the method (RTT, alone vs
//! under load, the quick-ACK experiment, capture, server process, verdict),
//! and the before/after comparison.

pub use super::load::LoadStep;
use super::{Breakdown, Finding};
use serde::Serialize;

/// Everything one `diagnose` run measured and concluded.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct DiagnoseReport {
    /// Schema version (`SCHEMA_VERSION`).
    pub schema: u32,
    /// tcpdoctor's version.
    pub version: &'static str,
    /// The URL diagnosed.
    pub url: String,
    /// The address it resolved to.
    pub address: String,
    /// Whether that address belongs to this host (the server process can be inspected).
    pub local: bool,
    /// Wall time of the whole run, s.
    pub elapsed_s: f64,
    /// Step 1: TCP round trip.
    pub rtt: Option<RttStep>,
    /// Step 2: requests on fresh connections, one at a time.
    pub alone: Option<LoadStep>,
    /// Step 2: keep-alive requests on several connections at once.
    pub load: Option<LoadStep>,
    /// Step 3: the same load with TCP_QUICKACK on the client (run only when load is far above alone).
    pub quickack: Option<LoadStep>,
    /// Step 4: packets captured during the load, analysed.
    pub capture: Option<CaptureStep>,
    /// Step 5: the server process, when it runs on this host.
    pub server: Option<ServerStep>,
    /// `Server:` header of the first response, if any.
    pub server_header: Option<String>,
    /// Step 6: the conclusion.
    pub verdict: Verdict,
    /// Steps skipped or failed, and why (missing evidence).
    pub missing: Vec<String>,
    /// `--try-nodelay`: the fix tried live on the server (absent without the option).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub try_nodelay: Option<super::nodelay::TryNodelay>,
}

/// TCP round trip to the port (probe).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RttStep {
    /// `raw_syn` (kernel timestamps) or `connect`.
    pub method: &'static str,
    /// Probes sent and answered.
    pub sent: u32,
    /// Probes answered (by SYN-ACK or RST).
    pub received: u32,
    /// Probes answered by SYN-ACK: something listens.
    pub open: u32,
    /// Probes answered by RST (refused): nothing listens.
    pub closed: u32,
    /// Smallest round trip, ms.
    pub min_ms: Option<f64>,
    /// Mean round trip, ms.
    pub avg_ms: Option<f64>,
}

/// The live capture taken during the load, analysed like `analyze`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct CaptureStep {
    /// Interface captured on.
    pub interface: String,
    /// Packets kept.
    pub packets: u64,
    /// Packets the kernel dropped (ring full).
    pub kernel_drops: u64,
    /// The capture stopped at its packet limit before the load ended.
    pub truncated: bool,
    /// What the analysis found, worst first.
    pub findings: Vec<Finding>,
    /// Where the server's exchange time went.
    pub breakdown: Vec<Breakdown>,
    /// Ladders of the worst stalled exchanges, as in `analyze`.
    pub stalled_exchanges: Vec<super::Ladder>,
    /// Ladders of the slowest exchange of connections that never stalled, as in `analyze`.
    pub slowest_exchanges: Vec<super::Ladder>,
    /// Connections, most time lost first (at most 100).
    pub connections: Vec<super::Connection>,
}

/// The server process found listening on the port.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ServerStep {
    /// Process id.
    pub pid: u32,
    /// Process name.
    pub name: String,
    /// Server software kind: nginx, jdk-httpserver, java, python, node, go, other.
    pub software: String,
    /// The software in words.
    pub software_name: String,
    /// The software's own TCP_NODELAY knob, when known (nginx `tcp_nodelay`, the JDK property).
    pub nodelay_setting: Option<bool>,
    /// Where that setting was read (`nginx -T`, `command line`, `default`…).
    pub setting_source: Option<String>,
    /// Established connections seen.
    pub established: usize,
    /// Of those, with TCP_NODELAY off (Nagle on).
    pub nagle_on: usize,
    /// Sockets whose options could not be read.
    pub unreadable: usize,
    /// The server's write pattern, traced (eBPF or ptrace) beside the load (absent
    /// when it could not be traced: `missing` says why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<super::inspect::Trace>,
}

/// The conclusion.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct Verdict {
    /// `nagle_delayed_ack`, `app_latency`, `network`, `retransmission`,
    /// `syn_retransmission`, `zero_window`, `closed` (nothing listens),
    /// `no_response` (connections accepted, no HTTP response), `unreachable` or `none`.
    pub cause: &'static str,
    /// The verdict in one or two sentences.
    pub summary: String,
    /// `ip:port (server|client)` of the side running Nagle.
    pub nagle_side: Option<String>,
    /// The side delaying its ACKs.
    pub delayed_ack_side: Option<String>,
    /// Time this cause costs one request, ms (median).
    pub lost_per_request_ms: f64,
    /// `high` (independent evidence agrees), `medium` (one strong signal) or `low`.
    pub confidence: &'static str,
    /// What supports it, one fact per line, each naming its step.
    pub evidence: Vec<String>,
    /// What to change, most direct first.
    pub fix: Vec<String>,
}

/// What a before/after comparison needs of one diagnosis.
#[derive(Clone, Debug, Serialize, PartialEq, schemars::JsonSchema)]
pub struct Summary {
    /// The URL diagnosed.
    pub url: String,
    /// The verdict's cause.
    pub cause: String,
    /// Median latency under load, ms.
    pub p50_ms: Option<f64>,
    /// 99th percentile under load, ms.
    pub p99_ms: Option<f64>,
    /// Responses per second under load.
    pub requests_per_s: Option<f64>,
    /// Nagle stalls in the capture (when there was one).
    pub stalls: Option<u64>,
    /// Time lost per request, ms.
    pub lost_per_request_ms: f64,
    /// Latency under load as a histogram (for the HTML overlay; not in the comparison's JSON).
    #[serde(skip)]
    pub latency_histogram: Option<super::Histogram>,
}

impl Summary {
    /// From a diagnosis just made.
    pub fn of(r: &DiagnoseReport) -> Summary {
        Summary {
            url: r.url.clone(),
            cause: r.verdict.cause.to_string(),
            p50_ms: r.load.as_ref().map(|l| l.latency.p50),
            p99_ms: r.load.as_ref().map(|l| l.latency.p99),
            requests_per_s: r.load.as_ref().map(|l| l.requests_per_s),
            stalls: r.capture.as_ref().map(|c| {
                c.findings.iter().map(|f| if let Finding::NagleDelayedAck(n) = f { n.stalls } else { 0 }).sum()
            }),
            lost_per_request_ms: r.verdict.lost_per_request_ms,
            latency_histogram: r.load.as_ref().map(|l| l.latency_histogram.clone()),
        }
    }

    /// From the JSON of an earlier `diagnose --json` run; `None` if it is not one.
    pub fn from_json(v: &serde_json::Value) -> Option<Summary> {
        let cause = v.get("verdict")?.get("cause")?.as_str()?.to_string();
        let load = v.get("load").filter(|l| !l.is_null());
        let lat = |k: &str| load.and_then(|l| l["latency"][k].as_f64());
        let stalls = v.get("capture").filter(|c| !c.is_null()).map(|c| {
            c["findings"].as_array().map_or(0, |f| {
                f.iter().filter(|x| x["kind"] == "nagle_delayed_ack").filter_map(|x| x["stalls"].as_u64()).sum()
            })
        });
        Some(Summary {
            url: v.get("url")?.as_str()?.to_string(),
            cause,
            p50_ms: lat("p50"),
            p99_ms: lat("p99"),
            requests_per_s: load.and_then(|l| l["requests_per_s"].as_f64()),
            stalls,
            lost_per_request_ms: v["verdict"]["lost_per_request_ms"].as_f64().unwrap_or(0.0),
            latency_histogram: load.and_then(|l| serde_json::from_value(l["latency_histogram"].clone()).ok()),
        })
    }
}

/// What `diagnose --json` prints: the report; with `--verify URL2` both
/// reports and their comparison; with `--before FILE` the report and the comparison.
#[derive(Clone, Copy, Debug, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum DiagnoseOutput<'a> {
    Report(&'a DiagnoseReport),
    Verified { before: &'a DiagnoseReport, after: &'a DiagnoseReport, comparison: &'a Comparison },
    Compared { report: &'a DiagnoseReport, comparison: &'a Comparison },
}

/// Before and after a fix (`--verify URL2`, `--before FILE`, the demo).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Comparison {
    /// The diagnosis before the fix.
    pub before: Summary,
    /// The diagnosis after.
    pub after: Summary,
    /// Median latency under load, before ÷ after (a ratio).
    pub speedup_p50: f64,
    /// Whether the problem found before is gone after.
    pub fixed: bool,
}

impl Comparison {
    /// Puts two diagnoses side by side.
    pub fn new(before: Summary, after: Summary) -> Comparison {
        let speedup = match (before.p50_ms, after.p50_ms) {
            (Some(b), Some(a)) if a > 0.0 => ((b / a) * 10.0).round() / 10.0,
            _ => 0.0,
        };
        let fixed = before.cause != "none" && matches!(after.cause.as_str(), "none" | "network");
        Comparison { before, after, speedup_p50: speedup, fixed }
    }
}
