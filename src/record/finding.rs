//! The causes `analyze` names, each with its evidence (also in `diagnose`'s capture step).

use super::{EndpointRole, HostRole, Spread};
use serde::Serialize;

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
    /// Where the capture was taken (as each connection's `capture_point`), from
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
