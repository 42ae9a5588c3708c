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
    last: [(i64, u64); 2],
}

impl ZeroWindow {
    /// Feeds one event.
    pub fn step(&mut self, ev: &Event) -> Option<Observation> {
        if matches!(ev.kind, EventKind::Syn { .. } | EventKind::Rst) {
            return None;
        }
        let i = ev.from.idx();
        self.last[i] = (ev.ts_ns, ev.frame);
        match (self.closed[i], ev.window) {
            (None, 0) => {
                self.closed[i] = Some(Closed { ts: ev.ts_ns, frame: ev.frame });
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
                    frames: [c.frame, self.last[i].1],
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

    #[test]
    fn window_closed_then_reopened() {
        let mut s = Seq::new();
        s.data(0, Server, 1000);
        s.ack_window(MS, Client, 0);
        s.ack_window(2 * MS, Client, 0);
        s.ack_window(300 * MS, Client, 65535);
        let mut z = ZeroWindow::default();
        let got: Vec<_> = s.events.iter().filter_map(|e| z.step(e)).collect();
        assert_eq!(got, vec![Observation::ZeroWindow { from: Client, duration_ns: 299 * MS, frames: [2, 4] }]);
        let mut n = 0;
        z.finish(400 * MS, &mut |_| n += 1);
        assert_eq!(n, 0);
    }
}
