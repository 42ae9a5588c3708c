//! The kinds of trouble watch reports: shared by its findings, JSON lines
//! and Prometheus metrics.

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
