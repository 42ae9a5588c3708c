//! Thresholds shared by the collector and the aggregates: what counts as a
//! slow answer and as a retransmission timeout.

/// Application time at or above which an exchange counts as slow.
pub const SLOW_THINK_NS: i64 = 10_000_000;
/// Re-send delay that marks a retransmission timeout (Linux RTO minimum is 200 ms).
pub const RTO_NS: i64 = 180_000_000;
