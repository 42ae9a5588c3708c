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
    use crate::detect::Stall;
    use crate::detect::build::{MS, Seq, US, info};
    use crate::detect::nagle::Nagle;
    use crate::tcp::Side::{Client, Server};

    /// The Nagle detector's stalls (plain and timer) and releases, with event k's timestamps `ts[k]`.
    fn run(s: &Seq, ts: &[Option<(u32, u32)>], ids: &[Option<u16>]) -> Vec<(u64, Option<Stall>, Release)> {
        let i = info(20 * US, 20 * US);
        let mut n = Nagle::default();
        s.events
            .iter()
            .enumerate()
            .map(|(k, e)| {
                let st = n.step(&i, e, || ts.get(k).copied().flatten(), ids.get(k).copied().flatten());
                (e.frame, st, n.release())
            })
            .collect()
    }

    fn probes(s: &Seq, ts: &[Option<(u32, u32)>]) -> Vec<(u64, Option<Stall>)> {
        run(s, ts, &[]).into_iter().filter(|x| x.2.probe).map(|x| (x.0, x.1)).collect()
    }

    /// Captured at the server: the client's delayed ACK never arrives, the body leaves 232 ms after the header.
    #[test]
    fn held_segment_sent_by_the_probe_when_no_ack_came() {
        let mut s = Seq::new();
        s.data(0, Client, 68);
        let small = s.data(30 * US, Server, 106);
        let held = s.data(232 * MS, Server, 600);
        let got = probes(&s, &[]);
        assert_eq!(got.len(), 1);
        let st = got[0].1.expect("Nagle + loss");
        assert_eq!((got[0].0, st.small_frame, st.ack_frame, st.held_frame), (held, small, 0, held));
        assert!(st.timer && st.stall_ns == 232 * MS - 30 * US);
    }

    /// Captured at the client: its ACK is seen, but the server's next segment echoes an older
    /// TSval, so the ACK was lost on the way.
    #[test]
    fn an_ack_seen_here_but_never_echoed_was_lost() {
        let mut s = Seq::new();
        s.data(0, Client, 68); // TSval 1000
        s.data(40 * US, Server, 106); // echoes 1000
        let ack = s.ack(44 * MS, Client); // TSval 1044
        s.data(232 * MS, Server, 600); // echoes 1000: never got 1044
        let ts = [Some((1000, 5)), Some((6, 1000)), Some((1044, 6)), Some((238, 1000))];
        let got = probes(&s, &ts);
        assert_eq!(got.len(), 1);
        let st = got[0].1.expect("Nagle + loss");
        assert_eq!((st.ack_frame, st.ack_seen_ns), (ack, 44 * MS - 40 * US));
        // The same with the ACK received (echoed): an application writing late, not a probe.
        let echoed = [Some((1000, 5)), Some((6, 1000)), Some((1044, 6)), Some((238, 1044))];
        assert!(probes(&s, &echoed).is_empty());
        // Without timestamps nothing can be told.
        assert!(probes(&s, &[]).is_empty());
    }

    /// Short gaps, re-sends and segments after an acknowledged one are not probes;
    /// a probe after a full-sized segment is loss, not Nagle + loss.
    #[test]
    fn what_is_not_a_probe_and_what_is_not_nagle() {
        let mut s = Seq::new();
        s.data(0, Client, 68);
        s.data(40 * US, Server, 106);
        s.data(150 * MS, Server, 600); // too soon for a loss timer
        s.resend(400 * MS, Server, 600, 250 * MS); // a re-send: the tracker's retransmission
        s.data(700 * MS, Server, 600);
        s.ack(701 * MS, Client);
        s.data(1000 * MS, Server, 1448); // after an ACK that got through (no timestamps to doubt it)
        s.data(1300 * MS, Server, 600); // no ACK of the full-sized one: a probe, nothing held by Nagle
        let got = probes(&s, &[]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, None);
    }

    /// Captured at the client: the server's body was lost before it and re-sent by the
    /// probe; the IDs of the server's packets, one apart so far, skip one.
    #[test]
    fn a_step_of_two_in_a_run_of_ids_is_a_packet_lost_before_the_capture_point() {
        let mut s = Seq::new();
        for k in 0..3 {
            s.data(k * 50 * MS, Client, 68);
            s.data(k * 50 * MS + 40 * US, Server, 106);
            s.ack(k * 50 * MS + 44 * MS, Client);
            s.data(k * 50 * MS + 44 * MS + 40 * US, Server, 600);
        }
        s.data(150 * MS, Client, 68);
        s.data(150 * MS + 40 * US, Server, 106);
        s.ack(194 * MS, Client);
        s.data(420 * MS, Server, 600); // the first copy, ID +1, never arrived
        let ids = |server: &[u16]| {
            let mut next = server.iter();
            let ids: Vec<Option<u16>> =
                s.events.iter().map(|e| if e.from == Server { next.next().copied() } else { Some(7) }).collect();
            run(&s, &[], &ids).into_iter().map(|x| x.2.missed).collect::<Vec<bool>>()
        };
        let last = s.events.len() - 1;
        // Linux: one apart, then two.
        let got = ids(&[101, 102, 103, 104, 105, 106, 107, 109]);
        assert!(got[last] && got.iter().filter(|m| **m).count() == 1, "{got:?}");
        // Random or global IDs never make a run: nothing is concluded.
        let got = ids(&[4711, 90, 3, 60001, 812, 9, 2000, 2002]);
        assert!(got.iter().all(|m| !m));
    }

    #[test]
    fn timestamps_compare_across_the_wrap() {
        assert!(older(u32::MAX - 5, 3) && !older(3, u32::MAX - 5) && !older(7, 7));
    }
}
