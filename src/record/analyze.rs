//! `analyze`'s record (also `demo --offline`'s, and the capture step of
//! `diagnose`): what was read, the findings, where the time goes, the connections.

use super::{Finding, Histogram, Ladder, Spread};
use serde::Serialize;

/// Everything `analyze` found.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// Schema version (`SCHEMA_VERSION`).
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
