//! One direction of a connection: its sequence space and what is in flight.

use super::DataClass;
use std::collections::VecDeque;

/// Segments remembered per direction while unacknowledged; beyond this the
/// oldest are forgotten (retransmissions of them get no original frame).
const INFLIGHT_CAP: usize = 256;
/// Holes (bytes skipped by the sender as seen here) remembered per direction.
const HOLES_CAP: usize = 8;
/// A hole filled sooner than this is reordering, later is a re-send.
const REORDER_NS: i64 = 3_000_000;

#[derive(Clone, Copy, Debug)]
struct Sent {
    start: i64,
    end: i64,
    ts: i64,
    frame: u64,
    resent: bool,
}

/// An RTT sample: the time from a segment to the ACK that covered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    /// Newest covered segment → ACK, ns.
    pub(crate) ns: i64,
    /// Bytes of the segments this ACK covered first.
    pub(crate) bytes: i64,
    /// The covered segment was a SYN (a handshake sample).
    pub(crate) syn: bool,
}

#[derive(Clone, Copy, Debug)]
struct Hole {
    start: i64,
    end: i64,
    ts: i64,
}

/// Sequence state of one direction. In C order: what every packet reads first.
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct Half {
    /// Raw sequence number of relative 0 (`None` until the first segment).
    base: Option<u32>,
    /// Relative end of the highest byte sent so far (the next new sequence).
    pub(crate) hi: i64,
    /// Highest acknowledgement of these bytes seen from the peer.
    acked_to: i64,
    inflight: VecDeque<Sent>,
    holes: Vec<Hole>,
    /// Largest payload seen in one segment: about the MSS the receiver
    /// measures (Linux's `rcv_mss`), when no SYN told it.
    pub(crate) max_len: u32,
    /// SYN options.
    pub(crate) wscale: Option<u8>,
    pub(crate) fin: bool,
    /// Offered the timestamp option in its SYN.
    pub(crate) timestamps: bool,
    pub(crate) mss: Option<u16>,
    /// ISN of this side's SYN, if seen.
    pub(crate) isn: Option<u32>,
}

impl Half {
    /// Relative sequence of a raw one, unwrapped around the highest seen.
    #[inline]
    pub(crate) fn rel(&mut self, raw: u32) -> i64 {
        let base = *self.base.get_or_insert(raw.wrapping_sub(1));
        let hi_raw = base.wrapping_add(self.hi as u32);
        self.hi + i64::from(raw.wrapping_sub(hi_raw) as i32)
    }

    /// Relative form of an acknowledgement number, if this side's sequence space is known.
    #[inline]
    pub(crate) fn rel_ack(&self, raw: u32) -> Option<i64> {
        let base = self.base?;
        let hi_raw = base.wrapping_add(self.hi as u32);
        Some(self.hi + i64::from(raw.wrapping_sub(hi_raw) as i32))
    }

    /// Records a SYN: sets the sequence origin. Returns whether it repeats an earlier SYN.
    pub(crate) fn syn(&mut self, isn: u32, ts: i64, frame: u64) -> bool {
        if self.isn == Some(isn) {
            // Answered SYN-ACKs reply to the latest copy, so time from it.
            if let Some(s) = self.inflight.iter_mut().find(|s| s.start == 0) {
                s.ts = ts;
                s.frame = frame;
            }
            return true;
        }
        self.isn = Some(isn);
        self.base = Some(isn);
        self.hi = 1;
        self.inflight.clear();
        self.holes.clear();
        self.inflight.push_back(Sent { start: 0, end: 1, ts, frame, resent: false });
        false
    }

    /// Classifies a payload-carrying segment and updates what is in flight.
    pub(crate) fn data(&mut self, start: i64, len: u32, ts: i64, frame: u64) -> DataClass {
        let end = start + i64::from(len);
        if end <= self.hi {
            if len <= 1 && start == self.hi - 1 {
                return DataClass::Probe;
            }
            if let Some(i) = self.holes.iter().position(|h| start < h.end && end > h.start) {
                let h = self.holes[i];
                self.fill_hole(i, start, end);
                if ts - h.ts < REORDER_NS {
                    return DataClass::OutOfOrder;
                }
                return DataClass::Retransmission { since_ns: ts - h.ts, original_frame: None, spurious: false };
            }
            let orig = self.inflight.iter_mut().find(|s| s.start <= start && start < s.end);
            return match orig {
                Some(s) => {
                    // Time since the previous copy, so that a segment re-sent
                    // twice is not charged its first wait twice.
                    let since_ns = ts - s.ts;
                    s.resent = true;
                    s.ts = ts;
                    DataClass::Retransmission { since_ns, original_frame: Some(s.frame), spurious: false }
                }
                // Gone from the in-flight queue: acknowledged already (spurious),
                // or forgotten because the queue was full.
                None => DataClass::Retransmission { since_ns: 0, original_frame: None, spurious: end <= self.acked_to },
            };
        }
        if start > self.hi && self.holes.len() < HOLES_CAP {
            self.holes.push(Hole { start: self.hi, end: start, ts });
        }
        if self.inflight.len() == INFLIGHT_CAP {
            self.inflight.pop_front();
        }
        self.max_len = self.max_len.max(len);
        self.inflight.push_back(Sent { start, end, ts, frame, resent: false });
        self.hi = self.hi.max(end);
        DataClass::New
    }

    /// Takes `old`'s buffers, emptied (this half is new: its own are empty).
    pub(crate) fn keep_buffers(&mut self, old: &mut Half) {
        // A queue grown by one long flight is not kept at that size.
        const KEEP: usize = 16;
        old.inflight.clear();
        old.inflight.shrink_to(KEEP);
        old.holes.clear();
        self.inflight = std::mem::take(&mut old.inflight);
        self.holes = std::mem::take(&mut old.holes);
    }

    /// A FIN takes one sequence number.
    pub(crate) fn fin(&mut self, at: i64) {
        self.fin = true;
        self.hi = self.hi.max(at + 1);
    }

    fn fill_hole(&mut self, i: usize, start: i64, end: i64) {
        let h = self.holes[i];
        self.holes.swap_remove(i);
        if h.start < start {
            self.holes.push(Hole { start: h.start, end: start, ts: h.ts });
        }
        if end < h.end && self.holes.len() < HOLES_CAP {
            self.holes.push(Hole { start: end, end: h.end, ts: h.ts });
        }
    }

    /// The peer acknowledged everything below `ack`. Returns the time since the
    /// newest segment it covers was sent (an RTT sample, Karn's rule applied).
    pub(crate) fn acked(&mut self, ack: i64, ts: i64) -> Option<Sample> {
        self.acked_to = self.acked_to.max(ack);
        let mut sample: Option<Sample> = None;
        let mut first = None;
        while let Some(s) = self.inflight.front() {
            if s.end > ack {
                break;
            }
            let from = *first.get_or_insert(s.start);
            // Karn: no sample from re-sent bytes; none either from a clock that stepped back.
            sample = if s.resent || ts < s.ts {
                None
            } else {
                Some(Sample { ns: ts - s.ts, bytes: s.end - from, syn: s.start == 0 })
            };
            self.inflight.pop_front();
        }
        if !self.holes.is_empty() {
            self.holes.retain(|h| h.end > ack);
        }
        sample
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_wraps_without_a_jump() {
        let mut h = Half::default();
        assert_eq!(h.rel(u32::MAX - 9), 1);
        assert_eq!(h.data(1, 100, 0, 1), DataClass::New);
        // 100 bytes later the raw number has wrapped past zero.
        assert_eq!(h.rel(90), 101);
        assert_eq!(h.data(101, 10, 1, 2), DataClass::New);
        assert_eq!(h.hi, 111);
    }

    #[test]
    fn resent_bytes_name_their_first_frame() {
        let mut h = Half::default();
        h.rel(1000);
        h.data(1, 100, 0, 7);
        let c = h.data(1, 100, 250_000_000, 9);
        assert_eq!(c, DataClass::Retransmission { since_ns: 250_000_000, original_frame: Some(7), spurious: false });
        // The second re-send is charged from the first (backed-off RTO), not from the original.
        let c = h.data(1, 100, 750_000_000, 10);
        assert_eq!(c, DataClass::Retransmission { since_ns: 500_000_000, original_frame: Some(7), spurious: false });
        // Acknowledged, then sent again: the ACK was lost, not the data.
        h.acked(101, 300_000_000);
        let c = h.data(1, 100, 400_000_000, 11);
        assert_eq!(c, DataClass::Retransmission { since_ns: 0, original_frame: None, spurious: true });
    }

    #[test]
    fn a_hole_filled_at_once_is_reordering_and_later_is_loss() {
        let mut h = Half::default();
        h.rel(0);
        h.data(1, 10, 0, 1);
        h.data(21, 10, 0, 2); // 11..21 missing
        assert_eq!(h.data(11, 10, 1_000_000, 3), DataClass::OutOfOrder);
        h.data(41, 10, 2_000_000, 4); // 31..41 missing
        assert!(matches!(h.data(31, 10, 300_000_000, 5), DataClass::Retransmission { .. }));
    }

    #[test]
    fn ack_samples_skip_resent_segments() {
        let mut h = Half::default();
        h.rel(0);
        h.data(1, 10, 0, 1);
        assert_eq!(h.acked(11, 5_000), Some(Sample { ns: 5_000, bytes: 10, syn: false }));
        h.data(11, 10, 10_000, 2);
        h.data(11, 10, 20_000, 3);
        assert_eq!(h.acked(21, 30_000), None);
        assert_eq!(h.data(20, 1, 40_000, 4), DataClass::Probe);
    }
}
