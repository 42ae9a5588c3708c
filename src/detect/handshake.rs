//! SYN and SYN-ACK retransmissions: connects that took 1 s, 3 s or more.

use super::Observation;
use crate::tcp::{Event, EventKind, Side};

#[derive(Debug, Default, Clone, Copy)]
struct Tries {
    first_ts: i64,
    first_frame: u64,
    last_ts: i64,
    last_frame: u64,
    retries: u32,
}

/// Per-connection handshake state. In C order: `reported`, read by every
/// packet, first, next to what precedes it in [`super::Detectors`].
#[derive(Debug, Default)]
#[repr(C)]
pub struct Handshake {
    reported: [bool; 2],
    syn: [Option<Tries>; 2],
}

impl Handshake {
    /// Feeds one event.
    pub fn step(&mut self, ev: &Event) -> Option<Observation> {
        let i = ev.from.idx();
        if let EventKind::Syn { retransmit } = ev.kind {
            let t = self.syn[i].get_or_insert(Tries { first_ts: ev.ts_ns, first_frame: ev.frame, ..Tries::default() });
            t.last_ts = ev.ts_ns;
            t.last_frame = ev.frame;
            if retransmit {
                t.retries += 1;
            }
        }
        // The other side answering completes this side's attempt: SYN-ACK answers
        // the SYN, the client's first ACK (or data) answers the SYN-ACK.
        let answered = ev.from.other();
        let j = answered.idx();
        if self.reported[j] || self.syn[j].is_none() {
            return None; // the common case: handshake long done (or never seen)
        }
        let answers = match ev.kind {
            EventKind::Syn { .. } => ev.from == Side::Server,
            EventKind::Ack | EventKind::Data { .. } => true,
            _ => false,
        };
        if answers
            && !self.reported[j]
            && let Some(t) = self.syn[j]
        {
            self.reported[j] = true;
            if t.retries > 0 {
                return Some(Observation::SynRetry {
                    from: answered,
                    retries: t.retries,
                    delay_ns: ev.ts_ns - t.first_ts,
                    answered: true,
                    frames: [t.first_frame, t.last_frame],
                });
            }
        }
        None
    }

    /// Reports SYNs that were never answered.
    pub fn finish(&mut self) -> Option<Observation> {
        for side in [Side::Client, Side::Server] {
            let i = side.idx();
            if let Some(t) = self.syn[i]
                && !self.reported[i]
                && t.retries > 0
            {
                self.reported[i] = true;
                return Some(Observation::SynRetry {
                    from: side,
                    retries: t.retries,
                    delay_ns: t.last_ts - t.first_ts,
                    answered: false,
                    frames: [t.first_frame, t.last_frame],
                });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::build::{MS, Seq};
    use crate::tcp::Side::{Client, Server};

    #[test]
    fn one_second_connect() {
        let mut s = Seq::new();
        s.syn(0, Client, false);
        s.syn(1000 * MS, Client, true);
        s.syn(1000 * MS + 50_000, Server, false);
        s.ack(1000 * MS + 60_000, Client);
        let mut h = Handshake::default();
        let got: Vec<_> = s.events.iter().filter_map(|e| h.step(e)).collect();
        assert_eq!(
            got,
            vec![Observation::SynRetry {
                from: Client,
                retries: 1,
                delay_ns: 1000 * MS + 50_000,
                answered: true,
                frames: [1, 2]
            }]
        );
        assert!(h.finish().is_none());
    }

    #[test]
    fn clean_handshake_and_unanswered_syns() {
        let mut s = Seq::new();
        s.syn(0, Client, false);
        s.syn(50_000, Server, false);
        s.ack(60_000, Client);
        let mut h = Handshake::default();
        assert!(s.events.iter().all(|e| h.step(e).is_none()));

        let mut s = Seq::new();
        s.syn(0, Client, false);
        s.syn(1000 * MS, Client, true);
        s.syn(3000 * MS, Client, true);
        let mut h = Handshake::default();
        assert!(s.events.iter().all(|e| h.step(e).is_none()));
        let Some(Observation::SynRetry { retries: 2, answered: false, delay_ns, .. }) = h.finish() else {
            panic!("unanswered SYNs not reported")
        };
        assert_eq!(delay_ns, 3000 * MS);
    }
}
