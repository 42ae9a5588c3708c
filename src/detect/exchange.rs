//! Request/response exchanges: a run of new client bytes, then a run of new
//! server bytes. The next client bytes (or the end) close the exchange.

use super::{Exchange, Stall};
use crate::tcp::{DataClass, Event, EventKind, Side};

#[derive(Debug, Default)]
enum Phase {
    #[default]
    Idle,
    Request(Exchange),
    Response(Exchange),
}

/// Per-connection exchange state.
#[derive(Debug, Default)]
pub struct Exchanges {
    phase: Phase,
}

impl Exchanges {
    /// Feeds one event (and the stall the Nagle detector found on it, if any).
    #[inline]
    pub fn step(&mut self, ev: &Event, stall: Option<&Stall>) -> Option<Exchange> {
        let EventKind::Data {
            len,
            class: DataClass::New,
            ..
        } = ev.kind
        else {
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
                x.req_stall += held;
                None
            }
            (Phase::Response(x), Side::Server) => {
                x.resp_last = t;
                x.resp_bytes += bytes;
                x.resp_stall += held;
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
        let mut got: Vec<Exchange> = s.events.iter().filter_map(|e| x.step(e, None)).collect();
        got.extend(x.finish());
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].req_bytes, got[0].resp_bytes), (100, 800));
        assert_eq!(got[0].resp_last - got[0].resp_first, 40 * MS - 40 * US);
        assert_eq!((got[1].req_first, got[1].resp_first), (41 * MS, 42 * MS));
    }

    #[test]
    fn server_banner_and_unanswered_request_make_no_exchange() {
        let mut s = Seq::new();
        s.data(0, Server, 20);
        s.data(MS, Client, 10);
        let mut x = Exchanges::default();
        assert!(s.events.iter().all(|e| x.step(e, None).is_none()));
        assert!(x.finish().is_none());
    }
}
