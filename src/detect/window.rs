//! Zero window: a receiver that stops reading closes its window and the
//! sender must wait (probing) until it reopens.

use super::{Observation, Observer};
use crate::tcp::{Event, EventKind, Side};

#[derive(Debug, Default, Clone, Copy)]
struct Closed {
    ts: i64,
    frame: u64,
}

/// Per-connection zero-window state.
#[derive(Debug, Default)]
#[repr(C)]
pub struct ZeroWindow {
    closed: [Option<Closed>; 2],
    /// While a side's window is closed, the frame of its last packet (kept
    /// only then: a store on every packet cost more than the rare close).
    last: [u64; 2],
}

impl ZeroWindow {
    /// Feeds one event.
    pub fn step(&mut self, ev: &Event) -> Option<Observation> {
        if matches!(ev.kind, EventKind::Syn { .. } | EventKind::Rst) {
            return None;
        }
        let i = ev.from.idx();
        match (self.closed[i], ev.window) {
            (None, 0) => {
                self.closed[i] = Some(Closed { ts: ev.ts_ns, frame: ev.frame });
                self.last[i] = ev.frame;
                None
            }
            (Some(c), w) if w > 0 => {
                self.closed[i] = None;
                Some(Observation::ZeroWindow {
                    from: ev.from,
                    duration_ns: ev.ts_ns - c.ts,
                    frames: [c.frame, ev.frame],
                })
            }
            (Some(_), _) => {
                self.last[i] = ev.frame;
                None
            }
            _ => None,
        }
    }

    /// A window still closed at the end counts up to the connection's last packet.
    pub fn finish(&mut self, last_ts: i64, out: &mut impl Observer) {
        for from in [Side::Client, Side::Server] {
            let i = from.idx();
            if let Some(c) = self.closed[i].take() {
                out.observe(Observation::ZeroWindow {
                    from,
                    duration_ns: last_ts - c.ts,
                    frames: [c.frame, self.last[i]],
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::build::{MS, Seq};
    use crate::tcp::Side::{Client, Server};

    /// A response, then the client closes its window at 1 ms (frame 2).
    fn closed_by_client() -> Seq {
        let mut s = Seq::new();
        s.data(0, Server, 1000);
        s.ack_window(MS, Client, 0);
        s
    }

    /// What the detector observes on `s`'s events, and at its end at `end`.
    fn observed(s: &Seq, end: i64) -> (Vec<Observation>, Vec<Observation>) {
        let mut z = ZeroWindow::default();
        let during = s.events.iter().filter_map(|e| z.step(e)).collect();
        let mut at_end = Vec::new();
        z.finish(end, &mut |o| at_end.push(o));
        (during, at_end)
    }

    #[test]
    fn window_closed_then_reopened() {
        let mut s = closed_by_client();
        s.ack_window(2 * MS, Client, 0);
        s.ack_window(300 * MS, Client, 65535);
        let (during, at_end) = observed(&s, 400 * MS);
        assert_eq!(during, vec![Observation::ZeroWindow { from: Client, duration_ns: 299 * MS, frames: [2, 4] }]);
        assert!(at_end.is_empty());
    }

    /// A window still closed at the end counts to the closing side's last
    /// packet, not to the one that closed it nor to the other side's.
    #[test]
    fn a_window_closed_at_the_end_ends_at_its_sides_last_packet() {
        let mut s = closed_by_client();
        s.ack_window(5 * MS, Client, 0);
        s.data(9 * MS, Server, 1);
        let (during, at_end) = observed(&s, 10 * MS);
        assert!(during.is_empty());
        assert_eq!(at_end, vec![Observation::ZeroWindow { from: Client, duration_ns: 9 * MS, frames: [2, 3] }]);
    }
}
