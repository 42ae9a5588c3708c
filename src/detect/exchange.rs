//! Request/response exchanges: a run of new client bytes, then a run of new
//! server bytes. The next client bytes (or the end) close the exchange.
//!
//! Inside a response, a gap before the next segment is the application's
//! (a "pause") unless the server was waiting: for a client ACK (the segment
//! follows it within the round trip to the server) or held by Nagle.

use super::{Exchange, Stall};
use crate::tcp::{DataClass, Event, EventKind, Side};

#[derive(Debug, Default)]
enum Phase {
    #[default]
    Idle,
    Request(Exchange),
    Response(Exchange),
}

/// Gaps shorter than this are scheduling noise, not pauses.
pub const PAUSE_MIN_NS: i64 = 2_000_000;

/// Per-connection exchange state.
#[derive(Debug, Default)]
pub struct Exchanges {
    phase: Phase,
    /// Last pure ACK from the client while the response was being sent.
    client_ack_ts: Option<i64>,
}

impl Exchanges {
    /// Feeds one event (and the stall the Nagle detector found on it, if any).
    #[inline]
    pub fn step(&mut self, ev: &Event, stall: Option<&Stall>, rtt_to_server: i64) -> Option<Exchange> {
        if ev.kind == EventKind::Ack && ev.from == Side::Client && matches!(self.phase, Phase::Response(_)) {
            self.client_ack_ts = Some(ev.ts_ns);
            return None;
        }
        if let EventKind::Data { class: DataClass::Retransmission { .. }, .. } = ev.kind {
            // Lost bytes of the message being sent: the wait for their re-send is loss time.
            match (&mut self.phase, ev.from) {
                (Phase::Request(x), Side::Client) => {
                    x.loss = x.loss.saturating_add((ev.ts_ns - x.req_last).max(0));
                    x.req_last = x.req_last.max(ev.ts_ns);
                }
                (Phase::Response(x), Side::Server) => {
                    x.loss = x.loss.saturating_add((ev.ts_ns - x.resp_last).max(0));
                    x.resp_last = x.resp_last.max(ev.ts_ns);
                    x.last_frame = ev.frame;
                }
                _ => {}
            }
            return None;
        }
        let EventKind::Data { len, class: DataClass::New, .. } = ev.kind else {
            return None;
        };
        let t = ev.ts_ns;
        let bytes = u64::from(len);
        let held = stall.map_or(0, |s| s.stall_ns);
        // Mutate in place: this runs on every data segment.
        match (&mut self.phase, ev.from) {
            (Phase::Request(x), Side::Client) => {
                x.req_last = t;
                x.req_bytes += bytes;
                x.req_stall = x.req_stall.saturating_add(held);
                None
            }
            (Phase::Response(x), Side::Server) => {
                // Released by an ACK (flow control, congestion window, Nagle):
                // the segment follows that ACK within the round trip to the server.
                let released = matches!(self.client_ack_ts,
                    Some(a) if a > x.resp_last && t - a <= 2 * rtt_to_server + super::nagle::PROMPT_SLACK_NS);
                let pause = t - x.resp_last;
                if held == 0 && !released && pause >= PAUSE_MIN_NS {
                    x.resp_pause = x.resp_pause.saturating_add(pause);
                }
                x.resp_last = t;
                x.resp_bytes += bytes;
                x.resp_stall = x.resp_stall.saturating_add(held);
                x.last_frame = ev.frame;
                None
            }
            (Phase::Request(x), Side::Server) => {
                x.resp_first = t;
                x.resp_last = t;
                x.resp_bytes = bytes;
                x.resp_stall = held;
                x.last_frame = ev.frame;
                let x = *x;
                self.phase = Phase::Response(x);
                self.client_ack_ts = None;
                None
            }
            (Phase::Response(x), Side::Client) => {
                let done = *x;
                self.phase = Phase::Request(start(ev, bytes, held));
                Some(done)
            }
            (Phase::Idle, Side::Client) => {
                self.phase = Phase::Request(start(ev, bytes, held));
                None
            }
            // The server speaks first (a banner): not a request/response exchange.
            (Phase::Idle, Side::Server) => None,
        }
    }

    /// The exchange still open at the end of the connection, if it got a response.
    pub fn finish(&mut self) -> Option<Exchange> {
        match std::mem::take(&mut self.phase) {
            Phase::Response(x) => Some(x),
            _ => None,
        }
    }
}

fn start(ev: &Event, bytes: u64, held: i64) -> Exchange {
    Exchange {
        req_first: ev.ts_ns,
        req_last: ev.ts_ns,
        req_bytes: bytes,
        req_stall: held,
        first_frame: ev.frame,
        last_frame: ev.frame,
        ..Exchange::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::build::{MS, Seq, US};
    use crate::tcp::Side::{Client, Server};

    #[test]
    fn keep_alive_exchanges_split_on_direction() {
        let mut s = Seq::new();
        s.data(0, Client, 100);
        s.data(50 * US, Server, 200);
        s.ack(40 * MS, Client);
        s.data(40 * MS + 10 * US, Server, 600);
        s.data(41 * MS, Client, 100);
        s.data(42 * MS, Server, 800);
        let mut x = Exchanges::default();
        let mut got: Vec<Exchange> = s.events.iter().filter_map(|e| x.step(e, None, 20 * US)).collect();
        got.extend(x.finish());
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].req_bytes, got[0].resp_bytes), (100, 800));
        assert_eq!(got[0].resp_last - got[0].resp_first, 40 * MS - 40 * US);
        assert_eq!((got[1].req_first, got[1].resp_first), (41 * MS, 42 * MS));
    }

    #[test]
    fn a_pause_mid_response_is_the_applications_but_waiting_for_an_ack_is_not() {
        let mut s = Seq::new();
        s.data(0, Client, 100);
        s.data(50 * US, Server, 200);
        s.ack(40 * MS, Client); // delayed ACK; the app writes 5 ms later, so it was not waiting for it
        s.data(45 * MS, Server, 600);
        s.data(50 * MS + 100 * US, Server, 600); // 5.1 ms with no ACK between: a pause
        s.ack(50 * MS + 200 * US, Client);
        s.data(50 * MS + 230 * US, Server, 600); // right after the ACK: released by it, not a pause
        s.data(60 * MS, Client, 100);
        let mut x = Exchanges::default();
        let got: Vec<Exchange> = s.events.iter().filter_map(|e| x.step(e, None, 20 * US)).collect();
        assert_eq!(got.len(), 1);
        let pause = got[0].resp_pause;
        assert_eq!(pause, (45 * MS - 50 * US) + (50 * MS + 100 * US - 45 * MS));
    }

    #[test]
    fn server_banner_and_unanswered_request_make_no_exchange() {
        let mut s = Seq::new();
        s.data(0, Server, 20);
        s.data(MS, Client, 10);
        let mut x = Exchanges::default();
        assert!(s.events.iter().all(|e| x.step(e, None, 0).is_none()));
        assert!(x.finish().is_none());
    }
}
