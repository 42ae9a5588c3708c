//! Segments released by the sender's loss timer instead of by an ACK.
//!
//! A sender whose next bytes wait for an ACK (held by Nagle behind a small
//! unacknowledged segment, or by the congestion window) sends them when that
//! ACK arrives. When the ACK is lost, Linux's tail-loss probe fires instead
//! (`tcp_schedule_loss_probe`: 2·srtt, plus the 200 ms minimum RTO when one
//! segment is in flight, capped by the time left to the RTO; srtt includes the
//! peer's delayed ACKs, so 200–400 ms in practice) and `tcp_send_loss_probe`
//! sends the waiting new segment with Nagle off, or re-sends the last one when
//! nothing waits. A re-send is a retransmission (the tracker says so); the
//! new-segment probe is recognised here (the Nagle detector, which follows
//! each side's last segment and its first ACK anyway, asks), wherever the
//! capture was taken:
//! - on the sender's side of the loss: no ACK covering the previous segment
//!   was seen at all;
//! - on the ACKing side of it: an ACK was seen, but the new segment's
//!   timestamp echo (TSecr) is older than that ACK's TSval, so the sender
//!   never received it. Without timestamps nothing is concluded.
//!
//! Only gaps of at least [`LOSS_TIMER_MIN_NS`] count: the probe's shorter
//! form (2·srtt + 2 jiffies) needs several segments in flight, which a held
//! segment rarely has; missing one leaves the gap to the other rules.
//!
//! Near the receiver, a segment lost before the capture point and re-sent
//! arrives as if sent late. Linux numbers each socket's IPv4 packets in turn
//! (the IP ID), so once a side's IDs have run up by one several times, a
//! step of two says one of its packets never reached the capture point.
//! Stacks with global or random IDs, and IPv6, never show such a run.

/// Shortest gap taken for a loss timer: Linux's 200 ms minimum RTO less capture jitter.
pub const LOSS_TIMER_MIN_NS: i64 = 195_000_000;

/// Steps of one in a row a side's IP IDs must show before a step of two is believed.
const ID_RUN_MIN: u8 = 3;

/// One side's IPv4 IDs: the last, and how many steps of one led to it.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Ids {
    have: bool,
    last: u16,
    run: u8,
    /// Payload of the last packet: one larger than the MSS (a GSO
    /// super-packet) takes several IDs.
    len: u32,
}

impl Ids {
    /// Records a packet of `len` payload bytes; returns whether exactly one
    /// packet before it is missing.
    #[inline]
    pub(super) fn step(&mut self, id: Option<u16>, len: u32, mss: Option<u32>) -> bool {
        let Some(id) = id else {
            self.have = false;
            return false;
        };
        let step = if self.have { id.wrapping_sub(self.last) } else { 0 };
        let (run, missed) = match step {
            1 => (self.run.saturating_add(1), false),
            2 if self.run >= ID_RUN_MIN && mss.is_none_or(|m| self.len <= m) => (self.run, true),
            _ => (0, false),
        };
        *self = Ids { have: true, last: id, run, len };
        missed
    }
}

/// What the loss timer and the IDs say about a new segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Release {
    /// Sent by the sender's loss timer.
    pub probe: bool,
    /// The sender's packet just before it never reached the capture point.
    pub missed: bool,
}

/// The first ACK the capture point saw covering a segment: frame, time, TSval.
pub(super) type AckSeen = (u64, i64, Option<u32>);

/// Whether a new segment that continues its sender's previous one `since_ns`
/// later was sent by the loss timer, given the first ACK of that previous
/// segment seen here (if any) and the new segment's (TSval, TSecr). `Some`
/// holds the ACK that was seen but never reached the sender, if one was.
#[inline]
pub(super) fn by_timer(since_ns: i64, acked: Option<AckSeen>, ts: Option<(u32, u32)>) -> Option<Option<AckSeen>> {
    if since_ns < LOSS_TIMER_MIN_NS {
        return None;
    }
    match acked {
        None => Some(None),
        // Seen here, but what the sender echoes is older: it never got it.
        Some(a @ (_, _, Some(tsval))) if ts.is_some_and(|t| older(t.1, tsval)) => Some(Some(a)),
        Some(_) => None,
    }
}

/// `a` is an older timestamp than `b` (RFC 7323 wrap-around order).
fn older(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_compare_across_the_wrap() {
        assert!(older(u32::MAX - 5, 3) && !older(3, u32::MAX - 5) && !older(7, 7));
    }
}
