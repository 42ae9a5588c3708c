//! Connection tracking: turns segments into per-connection [`Event`]s with
//! relative sequence numbers, roles (client/server) and a classification of
//! every data segment (new, retransmitted, out of order).

mod half;
pub mod table;

pub use table::{Sink, Tracker};

use crate::wire::Endpoint;

/// Connection number, in order of first appearance in the capture (1-based).
pub type ConnId = u32;

/// Which end of a connection sent a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
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

/// How the client and server were told apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RoleSource {
    /// From the SYN / SYN-ACK in the capture.
    Handshake,
    /// No handshake captured: the server is taken to be the end with the
    /// lower port (well-known or listening ports are lower than ephemeral ones).
    LowerPort,
}

/// What the tracker knows about a connection at the time of an event.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// Connection number.
    pub id: ConnId,
    /// The client's address and port.
    pub client: Endpoint,
    /// The server's address and port.
    pub server: Endpoint,
    /// How the roles were decided.
    pub roles: RoleSource,
    /// Largest segment each side may send (the peer's MSS option), if seen.
    pub mss: [Option<u32>; 2],
    /// Shortest observed time from the capture point to each side and back
    /// (e.g. SYN → SYN-ACK for the server), in ns. Tells where the capture was
    /// taken: near a side, this is about zero.
    pub rtt_to: [Option<i64>; 2],
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
