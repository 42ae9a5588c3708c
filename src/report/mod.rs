//! The report: serde types of the JSON output (one schema for every verb
//! that analyses packets) and its text rendering; `probe` and `trace` have
//! their own types, with the same `schema` version.

pub mod bench;
pub mod diagnose;
pub mod html;
pub mod inspect;
pub mod lab;
mod ladder;
mod load;
pub mod nodelay;
pub mod probe;
pub mod progress;
pub mod schema;
pub mod style;
pub(crate) mod text;
pub mod trace;
pub mod width;

pub use crate::dist::Spread;
pub use inspect::InspectReport;
pub use ladder::{ExchangeTimes, Ladder, Mark, Row, RowKind};
pub use probe::{ProbeReport, ProbeResult, ProbeSummary};
pub use text::render;
pub use trace::{TraceHop, TraceProbe, TraceReport};

use serde::Serialize;

/// Version of the JSON schema; bumped only for incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// Everything `analyze` found.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// Schema version ([`SCHEMA_VERSION`]).
    pub schema: u32,
    /// tcpdoctor's version.
    pub version: &'static str,
    /// One entry per input file.
    pub inputs: Vec<Input>,
    /// Causes found, the costliest first.
    pub findings: Vec<Finding>,
    /// Where each server's exchange time goes.
    pub breakdown: Vec<Breakdown>,
    /// Connections, most time lost first (capped; see `connections_omitted`).
    pub connections: Vec<Connection>,
    /// Connections left out of `connections` to bound memory.
    pub connections_omitted: u64,
    /// Packet ladder of the worst stalled exchange, or of `--flow`.
    pub ladder: Option<Ladder>,
    /// Ladders of the worst stalled exchanges, worst first (at most 20): each connection's
    /// worst, then the next worst of each (up to 3 per connection).
    pub stalled_exchanges: Vec<Ladder>,
    /// Ladders of the slowest exchange of connections that never stalled (at most 10), slowest first.
    pub slowest_exchanges: Vec<Ladder>,
    /// Problems with the input that did not stop the analysis.
    pub warnings: Vec<String>,
}

/// What was read from one input.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct Input {
    /// Path as given (`-` for stdin).
    pub file: String,
    /// `pcap` or `pcapng`.
    pub format: String,
    /// Frames read.
    pub packets: u64,
    /// TCP segments analysed (after `--filter`).
    pub tcp_segments: u64,
    /// Frames that were not TCP/IP (ARP, UDP, fragments…) or did not match the filter.
    pub other_packets: u64,
    /// Frames whose headers were malformed or cut short.
    pub malformed_packets: u64,
    /// Connections seen.
    pub connections: u64,
    /// First frame's time, seconds since the epoch.
    pub start_s: f64,
    /// Time from first to last frame, ms.
    pub duration_ms: f64,
    /// Where the file stopped being readable, if it did.
    pub damage: Option<String>,
    /// pcapng packet blocks skipped because they name an undeclared interface.
    pub skipped_blocks: u64,
    /// The analysis was stopped (Ctrl-C) before the input's end.
    pub interrupted: bool,
}

/// "ip:port" and the role it plays.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct EndpointRole {
    /// `ip:port` (IPv6 as `[addr]:port`).
    pub endpoint: String,
    /// `client` or `server`.
    pub role: &'static str,
}

/// A host and the role it plays.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct HostRole {
    /// IP address.
    pub host: String,
    /// `client` or `server`.
    pub role: &'static str,
}

/// A latency histogram: log-spaced bins (20 per decade, ±6 %), empty bins left out.
#[derive(Clone, Debug, Serialize, serde::Deserialize, Default, PartialEq, schemars::JsonSchema)]
pub struct Histogram {
    /// Filled bins, shortest first.
    pub bins: Vec<Bin>,
}

/// One histogram bin.
#[derive(Clone, Copy, Debug, Serialize, serde::Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Bin {
    /// Lower edge, ms.
    pub lo_ms: f64,
    /// Upper edge, ms (for the last bin, over 100 s: the largest value).
    pub hi_ms: f64,
    /// Values in [lo_ms, hi_ms).
    pub count: u64,
}

impl From<&crate::dist::Coarse> for Histogram {
    fn from(c: &crate::dist::Coarse) -> Histogram {
        let r = |v: f64| (v * 1e6).round() / 1e6;
        let bins = c
            .bins()
            .map(|(b, count)| {
                let (lo, hi) = crate::dist::coarse_edges_ms(b);
                Bin { lo_ms: r(lo), hi_ms: r(if hi.is_finite() { hi } else { c.max_ms().max(lo) }), count }
            })
            .collect();
        Histogram { bins }
    }
}

impl From<&crate::dist::Dist> for Histogram {
    fn from(d: &crate::dist::Dist) -> Histogram {
        Histogram::from(&crate::dist::Coarse::from(d))
    }
}

/// One cause, with its evidence.
// A report holds a few findings, one per endpoint and cause: their size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    /// Nagle on one side, delayed ACKs on the other.
    NagleDelayedAck(NagleFinding),
    /// Bytes sent more than once.
    Retransmission(RetransFinding),
    /// Connects that needed SYN (or SYN-ACK) retries.
    SynRetransmission(SynFinding),
    /// A receiver closed its window.
    ZeroWindow(ZeroWindowFinding),
    /// The responder itself is slow (think time).
    AppLatency(AppLatencyFinding),
    /// Clients wait for a `100 Continue` the server never sends.
    #[serde(rename = "expect_100_continue")]
    Expect100Continue(ExpectFinding),
    /// The exchanges' time is mostly the path's round trip.
    NetworkLatency(NetworkLatencyFinding),
    /// A server (a reverse proxy) waits for another server's answers.
    UpstreamWait(UpstreamWaitFinding),
}

impl Finding {
    /// Total time this cause cost, ms.
    pub fn time_lost_ms(&self) -> f64 {
        match self {
            Finding::NagleDelayedAck(f) => f.time_lost_ms,
            Finding::Retransmission(f) => f.time_lost_ms,
            Finding::SynRetransmission(f) => f.time_lost_ms,
            Finding::ZeroWindow(f) => f.time_lost_ms,
            Finding::AppLatency(f) => f.time_lost_ms,
            Finding::Expect100Continue(f) => f.time_lost_ms,
            Finding::NetworkLatency(f) => f.time_lost_ms,
            Finding::UpstreamWait(f) => f.time_lost_ms,
        }
    }
    /// The plain-language verdict.
    pub fn summary(&self) -> &str {
        match self {
            Finding::NagleDelayedAck(f) => &f.summary,
            Finding::Retransmission(f) => &f.summary,
            Finding::SynRetransmission(f) => &f.summary,
            Finding::ZeroWindow(f) => &f.summary,
            Finding::AppLatency(f) => &f.summary,
            Finding::Expect100Continue(f) => &f.summary,
            Finding::NetworkLatency(f) => &f.summary,
            Finding::UpstreamWait(f) => &f.summary,
        }
    }
}

/// `nagle_delayed_ack`: one per endpoint whose segments were held.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct NagleFinding {
    /// The verdict in one sentence.
    pub summary: String,
    /// The endpoint running Nagle (no TCP_NODELAY).
    pub nagle_side: EndpointRole,
    /// The host delaying its ACKs.
    pub delayed_ack_side: HostRole,
    /// Held segments found.
    pub stalls: u64,
    /// Messages this endpoint sent (responses for a server, requests for a client).
    pub exchanges: u64,
    /// Connections with at least one stall.
    pub connections: u64,
    /// How long held segments waited (small segment → held segment).
    pub stall_ms: Spread,
    /// The delayed-ACK side's own delay: how late its ACKs were as seen at
    /// the capture point, less the round trip from there to it.
    pub ack_delay_ms: Spread,
    /// How late the ACKs were as seen at the capture point.
    pub ack_seen_ms: Spread,
    /// Which delayed-ACK timer `ack_delay_ms` looks like.
    pub ack_timer: String,
    /// Where the capture was taken (see [`Connection::capture_point`]), from
    /// the round trips below.
    pub capture_point: &'static str,
    /// Round trip from the capture point to the client, ms (its stalled
    /// connections', mean weighted by their stalls).
    pub rtt_to_client_ms: Option<f64>,
    /// Round trip from the capture point to the server, ms (likewise).
    pub rtt_to_server_ms: Option<f64>,
    /// Sum of stall times, those with loss included.
    pub time_lost_ms: f64,
    /// Frames of the first stalls: [small segment, late ACK, held segment] each, flattened.
    pub example_frames: Vec<u64>,
    /// Nagle + loss, counted apart from `stalls`: held segments that the
    /// sender's loss timer sent because the ACK that would have released them
    /// (or the small segment) was lost.
    pub with_loss: u64,
    /// How long those waited (small segment → held segment).
    pub with_loss_ms: Spread,
    /// Sum of those waits (part of `time_lost_ms`).
    pub with_loss_time_ms: f64,
    /// [small segment, held segment] of the first of those, flattened.
    pub with_loss_frames: Vec<u64>,
    /// HTTP `Server:` header of this endpoint's responses, if captured.
    pub server_software: Option<String>,
    /// TLS server names (SNI) its clients asked for, if any.
    pub server_name: Option<String>,
    /// Of `stalls`, over TLS: the held segment began a record right after the
    /// small one ended another (the message went out as two records).
    pub tls_records: u64,
    /// Of `stalls`, over TLS: a response held behind the server's session ticket.
    pub tls_ticket: u64,
    /// What to change, most direct first.
    pub fix: Vec<String>,
}

/// `retransmission`: grouped by server endpoint and sending side.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RetransFinding {
    /// The verdict in one sentence.
    pub summary: String,
    /// The server of the affected connections.
    pub server: String,
    /// Who re-sent: `client` or `server`.
    pub sender: &'static str,
    /// Segments re-sent.
    pub retransmissions: u64,
    /// Re-sent ≥ 200 ms after the first copy (retransmission timeout).
    pub timeouts: u64,
    /// Re-sent although already acknowledged at the capture point (an ACK was lost, not data).
    pub spurious: u64,
    /// Connections affected.
    pub connections: u64,
    /// Time from the previous copy to the re-send (spurious re-sends excluded).
    pub delay_ms: Spread,
    /// Sum of those delays.
    pub time_lost_ms: f64,
    /// Frames of the first re-sent segments.
    pub example_frames: Vec<u64>,
}

/// `syn_retransmission`: slow connects.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SynFinding {
    /// The verdict in one sentence.
    pub summary: String,
    /// The server being connected to.
    pub server: String,
    /// `client` (SYN re-sent) or `server` (SYN-ACK re-sent).
    pub sender: &'static str,
    /// Connections whose handshake needed retries.
    pub connections: u64,
    /// Of those, never answered in the capture.
    pub unanswered: u64,
    /// Total extra SYNs.
    pub retries: u64,
    /// First SYN → answer.
    pub connect_ms: Spread,
    /// Sum of connect delays.
    pub time_lost_ms: f64,
    /// [first SYN, last SYN] frames of the first affected connections, flattened.
    pub example_frames: Vec<u64>,
}

/// `zero_window`: grouped by server endpoint and the side that closed its window.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ZeroWindowFinding {
    /// The verdict in one sentence.
    pub summary: String,
    /// The server of the affected connections.
    pub server: String,
    /// The side that advertised a zero window (`client` or `server`).
    pub receiver: &'static str,
    /// Times the window closed.
    pub events: u64,
    /// How long it stayed closed.
    pub closed_ms: Spread,
    /// Sum of closed times.
    pub time_lost_ms: f64,
    /// [closed, reopened] frames, flattened.
    pub example_frames: Vec<u64>,
}

/// `app_latency`: the responder takes long before its first byte.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct AppLatencyFinding {
    /// The verdict in one sentence.
    pub summary: String,
    /// The slow server.
    pub server: String,
    /// Exchanges with think time ≥ 10 ms.
    pub slow_exchanges: u64,
    /// All exchanges of this server.
    pub exchanges: u64,
    /// Server application time per exchange: request end → first response
    /// byte (network removed), plus pauses inside the response.
    pub think_ms: Spread,
    /// Sum of think time over slow exchanges.
    pub time_lost_ms: f64,
    /// [last request frame, first response frame] of slow exchanges, flattened.
    pub example_frames: Vec<u64>,
}

/// `expect_100_continue`: per client host and server.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ExpectFinding {
    /// The verdict in one sentence.
    pub summary: String,
    /// The waiting client host.
    pub client: HostRole,
    /// The server that never answered `100 Continue`.
    pub server: String,
    /// Requests whose body waited.
    pub requests: u64,
    /// Of those, requests whose head the capture's snap length cut before
    /// its end: the header was not seen, the shape (a request head, no answer,
    /// then the body after a wait) says so.
    pub header_cut: u64,
    /// Connections they came on.
    pub connections: u64,
    /// Head → body.
    pub wait_ms: Spread,
    /// Sum of the waits.
    pub time_lost_ms: f64,
    /// [request head, first body segment] frames, flattened.
    pub example_frames: Vec<u64>,
    /// What to change, most direct first.
    pub fix: Vec<String>,
}

/// `network_latency`: one server whose exchanges are mostly round trips.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct NetworkLatencyFinding {
    /// The verdict in one sentence.
    pub summary: String,
    /// The server.
    pub server: String,
    /// Its exchanges.
    pub exchanges: u64,
    /// Client ↔ server round trip per exchange (from each connection's RTT samples).
    pub rtt_ms: Spread,
    /// Median exchange time, as the client sees it.
    pub exchange_p50_ms: f64,
    /// Share of all exchange time spent on round trips (0–1).
    pub rtt_share: f64,
    /// Round trips per exchange, mean: counted, 1 plus each wait of the
    /// sender for the receiver's ACK (a window- or ACK-clocked round).
    pub round_trips_per_exchange: f64,
    /// Time spent on round trips: each exchange's round trips × its RTT, summed.
    pub time_lost_ms: f64,
    /// [first request frame, last response frame] of the first exchanges, flattened.
    pub example_frames: Vec<u64>,
    /// What to change, most direct first.
    pub fix: Vec<String>,
}

/// `upstream_wait`: a server whose slow answers each held a whole exchange
/// of one other server in the capture (request sent after the server's
/// request ended, answer over before the server began answering).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct UpstreamWaitFinding {
    /// The verdict in one sentence.
    pub summary: String,
    /// The waiting server (the proxy).
    pub server: String,
    /// The server it waits for.
    pub upstream: String,
    /// The proxy's exchanges.
    pub exchanges: u64,
    /// Of those, exchanges with application time ≥ 10 ms.
    pub slow_exchanges: u64,
    /// Slow exchanges tested (the first 1024, while the upstream's exchanges are known).
    pub waits_judged: u64,
    /// Of those, waits at least half filled by the upstream's exchanges.
    pub waits_matched: u64,
    /// Request end → first response byte of the matched waits.
    pub wait_ms: Spread,
    /// The proxy's time spent inside the upstream's exchanges: the upstream's
    /// time seen again from the proxy, not a cause of its own.
    pub time_lost_ms: f64,
    /// [first request frame, last response frame] of slow exchanges, flattened.
    pub example_frames: Vec<u64>,
    /// What to change, most direct first.
    pub fix: Vec<String>,
}

/// Where one server's exchange time goes (means per exchange, ms).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Breakdown {
    /// The server.
    pub server: String,
    /// HTTP `Server:` header, if seen.
    pub server_software: Option<String>,
    /// TLS server names (SNI) its clients asked for, if any.
    pub server_name: Option<String>,
    /// Exchanges measured.
    pub exchanges: u64,
    /// Client-observed latency: request start → response end, plus the client's side of the path.
    pub total_ms: f64,
    /// Percentiles of `total_ms`.
    pub total_spread_ms: Spread,
    /// Network round trip (client ↔ server).
    pub network_ms: f64,
    /// Server application time: request end → first response byte less the
    /// network, plus pauses inside the response that no ACK, stall or loss
    /// explains, less the time spent waiting for an upstream (`upstream_ms`).
    pub think_ms: f64,
    /// Waiting for an upstream server's answers (see `upstream_wait`).
    pub upstream_ms: f64,
    /// The client pausing between the parts of its own request (e.g. waiting
    /// for `100 Continue`): the client's time, never the server's.
    pub client_wait_ms: f64,
    /// Time sending request and response bytes, stalls excluded.
    pub transfer_ms: f64,
    /// Nagle + delayed-ACK stall time.
    pub stall_ms: f64,
    /// Waiting for lost bytes to be re-sent, or for a loss timer to send held ones (Nagle + loss).
    pub loss_ms: f64,
    /// Client-observed latency per exchange (`total_ms` of each).
    pub latency_histogram: Histogram,
}

/// One connection's row.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Connection {
    /// Connection number (`--flow ID`); with several files, `file:number`.
    pub id: String,
    /// Client endpoint.
    pub client: String,
    /// Server endpoint.
    pub server: String,
    /// The TLS server name (SNI) its client asked for, if any.
    pub server_name: Option<String>,
    /// What told client from server: `handshake`, `content`,
    /// `shared_endpoint`, `ephemeral_port`, or `lower_port` (a guess).
    pub roles_from: &'static str,
    /// Packets.
    pub packets: u64,
    /// Payload bytes client → server.
    pub bytes_to_server: u64,
    /// Payload bytes server → client.
    pub bytes_to_client: u64,
    /// Exchanges.
    pub exchanges: u64,
    /// Nagle stalls.
    pub stalls: u64,
    /// Retransmitted segments.
    pub retransmissions: u64,
    /// Time lost to every cause found, ms.
    pub time_lost_ms: f64,
    /// Round trip client ↔ server, ms (from the handshake when captured).
    pub rtt_ms: Option<f64>,
    /// Where the capture was taken: `near_server`, `near_client`,
    /// `in_between`, `near_both` (a path under 1 ms) or `unknown`.
    pub capture_point: &'static str,
    /// Round trip from the capture point to the client, ms.
    pub rtt_to_client_ms: Option<f64>,
    /// Round trip from the capture point to the server, ms.
    pub rtt_to_server_ms: Option<f64>,
    /// First frame.
    pub first_frame: u64,
    /// Duration, ms.
    pub duration_ms: f64,
}

/// ns → ms with µs precision, for output.
pub fn ms(ns: i64) -> f64 {
    (ns as f64 / 1e3).round() / 1e3
}
