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
//! new-segment probe is recognised here, at either capture point:
//! - before the loss (near the receiver): no ACK covering the previous
//!   segment was seen at all;
//! - after it (near the ACKing side): an ACK was seen, but the new segment's
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

use crate::tcp::{ConnInfo, DataClass, Event, EventKind};

/// Shortest gap taken for a loss timer: Linux's 200 ms minimum RTO less capture jitter.
pub const LOSS_TIMER_MIN_NS: i64 = 195_000_000;

/// A new segment the sender's loss timer released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Frame of the sender's previous segment, left unacknowledged.
    pub prev_frame: u64,
    /// That segment was smaller than the MSS (Nagle could hold the next one behind it).
    pub prev_small: bool,
    /// The ACK seen at the capture point that never reached the sender, if any: frame and delay after the previous segment.
    pub lost_ack: Option<(u64, i64)>,
    /// Previous segment → this one, ns.
    pub since_ns: i64,
}

#[derive(Clone, Copy, Debug)]
struct Last {
    end: i64,
    ts: i64,
    frame: u64,
    len: u32,
    /// The peer's first segment covering it: frame, time and TSval.
    acked: Option<(u64, i64, Option<u32>)>,
}

/// Steps of one in a row a side's IP IDs must show before a step of two is believed.
const ID_RUN_MIN: u32 = 3;

/// One side's IPv4 IDs: the last, and how many steps of one led to it.
#[derive(Clone, Copy, Debug, Default)]
struct Ids {
    last: Option<u16>,
    run: u32,
    /// The last packet was larger than the MSS (a GSO super-packet takes several IDs).
    big: bool,
}

impl Ids {
    /// Records a packet; returns whether exactly one packet before it is missing.
    fn step(&mut self, id: Option<u16>, big: bool) -> bool {
        let Some(id) = id else {
            *self = Ids::default();
            return false;
        };
        let step = self.last.map(|l| id.wrapping_sub(l));
        let missed = step == Some(2) && self.run >= ID_RUN_MIN && !self.big;
        self.run = match step {
            Some(1) => self.run + 1,
            Some(2) if missed => self.run,
            _ => 0,
        };
        self.last = Some(id);
        self.big = big;
        missed
    }
}

/// What the loss timer and the IDs say about a new segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Release {
    /// Sent by the sender's loss timer.
    pub probe: Option<Probe>,
    /// The sender's packet just before it never reached the capture point.
    pub missed: bool,
}

/// Per-connection state: each side's last new segment and IP IDs.
#[derive(Debug, Default)]
pub struct LossTimer {
    last: [Option<Last>; 2],
    ids: [Ids; 2],
}

/// `a` is an older timestamp than `b` (RFC 7323 wrap-around order).
fn older(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}

impl LossTimer {
    /// Feeds one event with its segment's timestamps (TSval, TSecr) and IPv4 ID, if any.
    pub fn step(&mut self, info: &ConnInfo, ev: &Event, ts: Option<(u32, u32)>, ip_id: Option<u16>) -> Release {
        let a = ev.from;
        let len = match ev.kind {
            EventKind::Data { len, .. } => len,
            _ => 0,
        };
        let big = info.mss[a.idx()].is_some_and(|m| len > m);
        let missed = self.ids[a.idx()].step(ip_id, big);
        // This segment acknowledges the other side's last one?
        if let (Some(l), Some(ack)) = (&mut self.last[a.other().idx()], ev.ack)
            && l.acked.is_none()
            && ack >= l.end
        {
            l.acked = Some((ev.frame, ev.ts_ns, ts.map(|t| t.0)));
        }
        match ev.kind {
            EventKind::Data { seq, len, class: DataClass::New } => {
                let probe = self.last[a.idx()].and_then(|l| {
                    let since_ns = ev.ts_ns - l.ts;
                    if seq != l.end || since_ns < LOSS_TIMER_MIN_NS {
                        return None;
                    }
                    let lost_ack = match l.acked {
                        None => None,
                        // Seen here, but what the sender echoes is older: it never got it.
                        Some((frame, at, Some(tsval))) if ts.is_some_and(|t| older(t.1, tsval)) => {
                            Some((frame, at - l.ts))
                        }
                        Some(_) => return None,
                    };
                    let prev_small = info.mss[a.idx()].is_none_or(|m| l.len < m);
                    Some(Probe { prev_frame: l.frame, prev_small, lost_ack, since_ns })
                });
                self.last[a.idx()] =
                    Some(Last { end: seq + i64::from(len), ts: ev.ts_ns, frame: ev.frame, len, acked: None });
                Release { probe, missed }
            }
            // A re-send (the timer's other form) or a probe: the tracker classifies it.
            EventKind::Data { .. } | EventKind::Fin => {
                self.last[a.idx()] = None;
                Release::default()
            }
            EventKind::Syn { .. } | EventKind::Rst => {
                self.last = [None, None];
                Release::default()
            }
            EventKind::Ack => Release::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::build::{MS, Seq, US, info};
    use crate::tcp::Side::{Client, Server};

    fn probes(s: &Seq, ts: &[Option<(u32, u32)>]) -> Vec<(u64, Probe)> {
        let i = info(20 * US, 20 * US);
        let mut t = LossTimer::default();
        s.events
            .iter()
            .enumerate()
            .filter_map(|(k, e)| t.step(&i, e, ts.get(k).copied().flatten(), None).probe.map(|p| (e.frame, p)))
            .collect()
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
        let (frame, p) = got[0];
        assert_eq!((frame, p.prev_frame, p.prev_small, p.lost_ack), (held, small, true, None));
        assert_eq!(p.since_ns, 232 * MS - 30 * US);
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
        assert_eq!(got[0].1.lost_ack, Some((ack, 44 * MS - 40 * US)));
        // The same with the ACK received (echoed): an application writing late, not a probe.
        let echoed = [Some((1000, 5)), Some((6, 1000)), Some((1044, 6)), Some((238, 1044))];
        assert!(probes(&s, &echoed).is_empty());
        // Without timestamps nothing can be told.
        assert!(probes(&s, &[]).is_empty());
    }

    /// Short gaps, re-sends and segments after an acknowledged one are not probes.
    #[test]
    fn what_is_not_a_probe() {
        let mut s = Seq::new();
        s.data(0, Client, 68);
        s.data(40 * US, Server, 106);
        s.data(150 * MS, Server, 600); // too soon for a loss timer
        s.resend(400 * MS, Server, 600, 250 * MS); // a re-send: the tracker's retransmission
        s.data(700 * MS, Server, 600);
        s.ack(701 * MS, Client);
        s.data(1000 * MS, Server, 600); // after an ACK that got through (no timestamps to doubt it)
        assert!(probes(&s, &[]).is_empty());
    }

    #[test]
    fn timestamps_compare_across_the_wrap() {
        assert!(older(u32::MAX - 5, 3) && !older(3, u32::MAX - 5) && !older(7, 7));
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
        let i = info(20 * US, 20 * US);
        let server_ids = |ids: &[u16]| {
            let mut t = LossTimer::default();
            let mut next = ids.iter();
            s.events
                .iter()
                .map(|e| {
                    let id = if e.from == Server { next.next().copied() } else { Some(7) };
                    t.step(&i, e, None, id).missed
                })
                .collect::<Vec<bool>>()
        };
        let last = s.events.len() - 1;
        // Linux: one apart, then two.
        let got = server_ids(&[101, 102, 103, 104, 105, 106, 107, 109]);
        assert!(got[last] && got.iter().filter(|m| **m).count() == 1, "{got:?}");
        // Random or global IDs never make a run: nothing is concluded.
        let got = server_ids(&[4711, 90, 3, 60001, 812, 9, 2000, 2002]);
        assert!(got.iter().all(|m| !m));
    }
}
