//! Connection tracking: turns segments into per-connection [`Event`]s with
//! relative sequence numbers, roles (client/server) and a classification of
//! every data segment (new, retransmitted, out of order).

pub mod book;
mod half;
pub mod roles;
pub mod table;

pub use table::{Sink, Tracker};

use crate::wire::Endpoint;

/// Connection number, in order of first appearance in the capture (1-based).
pub type ConnId = u32;

/// Which end of a connection sent a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The end that opened the connection (sent the SYN).
    Client = 0,
    /// The end that accepted it.
    Server = 1,
}

impl Side {
    /// The other end.
    #[inline]
    pub fn other(self) -> Side {
        match self {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        }
    }
    /// Index for two-element arrays.
    #[inline]
    pub fn idx(self) -> usize {
        self as usize
    }
    /// "client" or "server".
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
        }
    }
}

/// How the client and server were told apart. Declared strongest evidence
/// first: the tracker compares them by that order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RoleSource {
    /// From the SYN / SYN-ACK in the capture.
    Handshake,
    /// From a first payload: an HTTP request or status line, a TLS ClientHello or ServerHello.
    Content,
    /// The server's endpoint answered a SYN or was named the server by
    /// content on another connection, or is shared by more connections.
    SharedEndpoint,
    /// Exactly one of the two ports lies in an ephemeral range: that end is the client.
    EphemeralPort,
    /// Nothing else told: the server is taken to be the end with the lower
    /// port (well-known or listening ports are lower than ephemeral ones). A guess.
    LowerPort,
}

impl RoleSource {
    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            RoleSource::Handshake => "handshake",
            RoleSource::Content => "content",
            RoleSource::SharedEndpoint => "shared_endpoint",
            RoleSource::EphemeralPort => "ephemeral_port",
            RoleSource::LowerPort => "lower_port",
        }
    }
}

/// Later evidence about a connection's roles that did not match the first decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RolesDoubt {
    /// Later data (the other direction's first payload, or one a guess
    /// looked at) held stronger evidence and the roles were swapped at this
    /// frame; what was observed before it was observed in the old roles.
    Corrected(u64),
    /// Content contradicted roles that content had decided (say, both
    /// directions began with a request line), at this frame; the roles were kept.
    Contradicted(u64),
}

/// What the tracker knows about a connection at the time of an event. In C
/// order: what the detectors read on every packet (round trips, MSS) first.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct ConnInfo {
    /// Shortest observed time from the capture point to each side and back
    /// (e.g. SYN → SYN-ACK for the server), in ns, from ACKs that cannot
    /// hold a delayed-ACK timer (see `table::prompt`). Tells where the
    /// capture was taken: near a side, this is about zero.
    pub rtt_to: [Option<i64>; 2],
    /// Largest segment each side may send (the peer's MSS option), if seen.
    pub mss: [Option<u32>; 2],
    /// Connection number.
    pub id: ConnId,
    /// How the roles were decided.
    pub roles: RoleSource,
    /// Later packets may still swap the roles: no handshake and no payload
    /// yet, or only evidence weaker than content that the other direction's
    /// first payload (or, for a guess, the next few) may overturn.
    pub roles_open: bool,
    /// Later evidence that disagreed with the roles, if any.
    pub roles_doubt: Option<RolesDoubt>,
    /// The client's address and port.
    pub client: Endpoint,
    /// The server's address and port.
    pub server: Endpoint,
}

impl ConnInfo {
    /// The endpoint of a side.
    pub fn endpoint(&self, side: Side) -> Endpoint {
        match side {
            Side::Client => self.client,
            Side::Server => self.server,
        }
    }
    /// Round-trip from the capture point to `side` (0 when unknown).
    #[inline]
    pub fn rtt_to(&self, side: Side) -> i64 {
        self.rtt_to[side.idx()].unwrap_or(0)
    }
    /// Full client↔server round trip as far as known, in ns.
    #[inline]
    pub fn rtt(&self) -> i64 {
        self.rtt_to(Side::Client) + self.rtt_to(Side::Server)
    }
    /// Where the capture was taken.
    pub fn capture_point(&self) -> CapturePoint {
        CapturePoint::from_rtt(self.rtt_to[0], self.rtt_to[1])
    }
}

/// Where a capture was taken on a connection's path, judged from the round
/// trips from the capture point to each side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CapturePoint {
    /// The round trip to the server is at most a quarter of the one to the client.
    NearServer,
    /// The round trip to the client is at most a quarter of the one to the server.
    NearClient,
    /// Neither side is that much closer.
    InBetween,
    /// The whole round trip is under [`SHORT_PATH_NS`] (loopback, one host, a
    /// LAN): close to both ends, wherever it was taken.
    NearBoth,
    /// A side's round trip was not measured.
    Unknown,
}

/// A client ↔ server round trip shorter than this is close to both ends
/// wherever captured: it changes no timer reading by more than a millisecond.
pub const SHORT_PATH_NS: i64 = 1_000_000;

impl CapturePoint {
    /// From the round trips (ns) from the capture point to the client and to the server.
    pub fn from_rtt(client: Option<i64>, server: Option<i64>) -> CapturePoint {
        let (Some(c), Some(s)) = (client, server) else {
            return CapturePoint::Unknown;
        };
        if c + s < SHORT_PATH_NS {
            CapturePoint::NearBoth
        } else if 4 * s <= c {
            CapturePoint::NearServer
        } else if 4 * c <= s {
            CapturePoint::NearClient
        } else {
            CapturePoint::InBetween
        }
    }

    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            CapturePoint::NearServer => "near_server",
            CapturePoint::NearClient => "near_client",
            CapturePoint::InBetween => "in_between",
            CapturePoint::NearBoth => "near_both",
            CapturePoint::Unknown => "unknown",
        }
    }
}

/// Classification of a segment carrying payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataClass {
    /// Bytes beyond anything sent before.
    New,
    /// Bytes seen before (or lost before the capture point and re-sent late).
    Retransmission {
        /// Time since the previous copy of these bytes (or since the hole was seen), ns.
        since_ns: i64,
        /// Frame of the first transmission, when still remembered.
        original_frame: Option<u64>,
        /// The capture point had already seen these bytes acknowledged: the
        /// sender re-sent because an ACK was lost or late, not the data.
        spurious: bool,
    },
    /// Bytes that fill a hole shortly after it appeared: reordering, not loss.
    OutOfOrder,
    /// A keep-alive or window probe (0–1 byte just below the next sequence).
    Probe,
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// SYN (from the client) or SYN-ACK (from the server).
    Syn {
        /// Same initial sequence number seen before from this side.
        retransmit: bool,
    },
    /// A segment with payload.
    Data {
        /// Relative sequence number of the first byte (1 = first byte after the SYN).
        seq: i64,
        /// Payload length on the wire.
        len: u32,
        /// New, retransmitted, reordered or probe.
        class: DataClass,
    },
    /// No payload, no SYN/FIN/RST: an acknowledgement or window update.
    Ack,
    /// FIN (any payload on the same segment came as a `Data` event first).
    Fin,
    /// RST.
    Rst,
}

/// One segment, seen from its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// Capture time, ns.
    pub ts_ns: i64,
    /// Frame number in the capture.
    pub frame: u64,
    /// Sender.
    pub from: Side,
    /// What the segment did.
    pub kind: EventKind,
    /// Relative acknowledgement of the other side's bytes, when ACK is set.
    pub ack: Option<i64>,
    /// Receive window the sender advertised, in bytes (scaled when both SYNs were seen).
    pub window: u64,
}
