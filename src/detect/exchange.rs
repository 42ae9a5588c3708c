//! Request/response exchanges: a run of new client bytes, then a run of new
//! server bytes. The next client bytes (or the end) close the exchange.
//!
//! A gap before the next segment of the message being sent is, in order:
//! - a Nagle stall, when the segment was held until a delayed ACK;
//! - loss, when the segment is a re-send, was sent by the sender's loss
//!   timer (a probe, Nagle + loss included), or comes after a gap as long as
//!   a loss timer and after something of the sender's that went missing
//!   before the capture point (bytes it skips, or a packet its IP ID skips:
//!   then it is most likely the re-send);
//! - network, when it follows the receiver's ACK within the round trip to
//!   the sender (flow control, congestion window): one more round trip;
//! - else the sender's own pause: the server application inside its response
//!   (think time), or the client inside its request (e.g. waiting for `100
//!   Continue`), which is never the server's.
//!
//! The wait before the first response byte is think time, unless that byte
//! follows something missing after a loss timer's gap: then the first bytes were lost.

use super::timer::{LOSS_TIMER_MIN_NS, Release};
use super::{Exchange, Stall};
use crate::tcp::{DataClass, Event, EventKind, Side};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    #[default]
    Idle,
    Request,
    Response,
}

/// Gaps shorter than this are scheduling noise, not pauses.
pub const PAUSE_MIN_NS: i64 = 2_000_000;

/// Per-connection exchange state. In C order: the exchanges first, the
/// fields every data segment reads last, next to what follows in [`super::Detectors`].
#[derive(Debug, Default)]
#[repr(C)]
pub struct Exchanges {
    /// The exchange as it was before its response began, in case that
    /// beginning turns out not to be response (TLS session tickets); kept
    /// only once [`Exchanges::undoable`] was called.
    before_response: Exchange,
    /// The exchange under way (request, or response) is `xs[cur]`, changed
    /// in place, as this runs on every data segment; the other slot holds the
    /// last one finished. A finished exchange is handed out from its own slot,
    /// written packets ago: copying it just after its last fields were
    /// stored would stall the CPU on every exchange.
    xs: [Exchange; 2],
    cur: usize,
    /// Last pure ACK from the side receiving the message being sent.
    peer_ack_ts: Option<i64>,
    /// End of each side's highest new bytes (0 before any: the first byte is
    /// relative sequence 1, handshake captured or not).
    hi: [i64; 2],
    /// Last new request segment (a re-sent one may have been needless).
    req_new_last: i64,
    phase: Phase,
    undoable: bool,
}

/// Where a gap before a segment that continues a message goes.
enum Charge {
    Stall(i64),
    Loss(i64),
    /// One more round trip: the sender waited for the receiver's ACK.
    Round,
    /// The sender's own pause.
    Pause(i64),
    Nothing,
}

impl Charge {
    /// Adds it to the message's stall, its sender's pause, the loss or the round trips.
    #[inline]
    fn add(self, stall: &mut i64, pause: &mut i64, loss: &mut i64, rounds: &mut u32) {
        match self {
            Charge::Stall(n) => *stall = stall.saturating_add(n),
            Charge::Loss(n) => *loss = loss.saturating_add(n),
            Charge::Round => *rounds += 1,
            Charge::Pause(n) => *pause = pause.saturating_add(n),
            Charge::Nothing => {}
        }
    }
}

impl Exchanges {
    /// Feeds one event, the stall the Nagle detector found on it (if any),
    /// what the loss timer and IP IDs say of it, and the round trips from the
    /// capture point to [client, server] (ns, as the tracker keeps them: read
    /// only for a segment that continues a message, which few are). `app`: a
    /// data segment carries application bytes; one that does not (TLS
    /// handshake records) is no part of a request or response.
    #[inline(always)]
    pub fn step(
        &mut self,
        ev: &Event,
        stall: Option<&Stall>,
        release: Release,
        rtt: &[Option<i64>; 2],
        app: bool,
    ) -> Option<&Exchange> {
        match ev.kind {
            EventKind::Data { seq, len, class: DataClass::New } if !app => {
                let hi = &mut self.hi[ev.from.idx()];
                *hi = (*hi).max(seq + i64::from(len));
                None
            }
            EventKind::Data { seq, len, class: DataClass::New } => self.new_data(ev, seq, len, stall, release, rtt),
            EventKind::Ack => {
                if matches!((self.phase, ev.from), (Phase::Response, Side::Client) | (Phase::Request, Side::Server)) {
                    self.peer_ack_ts = Some(ev.ts_ns);
                }
                None
            }
            EventKind::Data { class: DataClass::Retransmission { .. }, .. } => {
                self.resent(ev);
                None
            }
            _ => None,
        }
    }

    /// Lost bytes of the message being sent: the wait for their re-send is loss time.
    fn resent(&mut self, ev: &Event) {
        let x = &mut self.xs[self.cur & 1];
        match (self.phase, ev.from) {
            (Phase::Request, Side::Client) => {
                x.loss = x.loss.saturating_add((ev.ts_ns - x.req_last).max(0));
                x.req_last = x.req_last.max(ev.ts_ns);
            }
            (Phase::Response, Side::Server) => {
                x.loss = x.loss.saturating_add((ev.ts_ns - x.resp_last).max(0));
                x.resp_last = x.resp_last.max(ev.ts_ns);
                x.last_frame = ev.frame;
            }
            _ => {}
        }
    }

    /// Where the gap between `last` and a segment at `t` that continues a message goes.
    #[inline]
    fn charge(&self, ev: &Event, last: i64, held: i64, lost: bool, skips: bool, rtt: &[Option<i64>; 2]) -> Charge {
        let (t, ns) = (ev.ts_ns, ev.ts_ns - last);
        let rtt = rtt.map(|r| r.unwrap_or(0));
        if held > 0 {
            Charge::Stall(held)
        } else if lost || (skips && ns >= LOSS_TIMER_MIN_NS) {
            Charge::Loss(ns)
        } else if self
            .peer_ack_ts
            .is_some_and(|a| a > last && t - a <= 2 * rtt[ev.from.idx()] + super::nagle::PROMPT_SLACK_NS)
        {
            if ns > 0 && ns >= (rtt[0] + rtt[1]) / 2 { Charge::Round } else { Charge::Nothing }
        } else if ns >= PAUSE_MIN_NS {
            Charge::Pause(ns)
        } else {
            Charge::Nothing
        }
    }

    #[inline(always)]
    fn new_data(
        &mut self,
        ev: &Event,
        seq: i64,
        len: u32,
        stall: Option<&Stall>,
        release: Release,
        rtt: &[Option<i64>; 2],
    ) -> Option<&Exchange> {
        let t = ev.ts_ns;
        let bytes = u64::from(len);
        let hi = &mut self.hi[ev.from.idx()];
        // Something of the sender's went missing before this segment.
        let skips = seq > (*hi).max(1) || release.missed;
        *hi = (*hi).max(seq + i64::from(len));
        let held = stall.filter(|s| !s.timer).map_or(0, |s| s.stall_ns);
        match (self.phase, ev.from) {
            (Phase::Request, Side::Client) => {
                let c = self.charge(ev, self.xs[self.cur & 1].req_last, held, release.probe, skips, rtt);
                let x = &mut self.xs[self.cur & 1];
                c.add(&mut x.req_stall, &mut x.req_pause, &mut x.loss, &mut x.rounds);
                x.req_last = t;
                x.req_bytes += bytes;
                self.req_new_last = t;
                None
            }
            (Phase::Response, Side::Server) => {
                let c = self.charge(ev, self.xs[self.cur & 1].resp_last, held, release.probe, skips, rtt);
                let x = &mut self.xs[self.cur & 1];
                c.add(&mut x.resp_stall, &mut x.resp_pause, &mut x.loss, &mut x.rounds);
                x.resp_last = t;
                x.resp_bytes += bytes;
                x.last_frame = ev.frame;
                None
            }
            (Phase::Request, Side::Server) => {
                if self.undoable {
                    self.before_response = self.xs[self.cur & 1];
                }
                let x = &mut self.xs[self.cur & 1];
                if skips && t - self.req_new_last >= LOSS_TIMER_MIN_NS {
                    // The response's first bytes went missing: the wait was for their re-send.
                    x.first_loss = t - x.req_last;
                }
                x.resp_first = t;
                x.resp_last = t;
                x.resp_bytes = bytes;
                // Held behind a small segment sent after the request: that wait is the hold's.
                x.first_stall = held.min((t - x.req_last).max(0));
                x.last_frame = ev.frame;
                self.phase = Phase::Response;
                self.peer_ack_ts = None;
                None
            }
            (Phase::Response, Side::Client) => {
                self.cur ^= 1;
                self.xs[self.cur & 1] = start(ev, bytes, held);
                self.phase = Phase::Request;
                self.peer_ack_ts = None;
                self.req_new_last = t;
                Some(&self.xs[(self.cur ^ 1) & 1])
            }
            (Phase::Idle, Side::Client) => {
                self.xs[self.cur & 1] = start(ev, bytes, held);
                self.phase = Phase::Request;
                self.req_new_last = t;
                None
            }
            // The server speaks first (a banner): not a request/response exchange.
            (Phase::Idle, Side::Server) => None,
        }
    }

    /// From now on a response's beginning may be undone
    /// ([`Exchanges::unstart_response`]): the connection speaks TLS.
    pub fn undoable(&mut self) {
        self.undoable = true;
    }

    /// What began the response was not response (TLS session tickets): the
    /// request is under way again, as it was.
    pub fn unstart_response(&mut self) {
        if self.phase == Phase::Response && self.undoable {
            self.xs[self.cur & 1] = self.before_response;
            self.phase = Phase::Request;
            self.peer_ack_ts = None;
        }
    }

    /// A request is under way: the client spoke last (new bytes).
    #[inline]
    pub fn in_request(&self) -> bool {
        self.phase == Phase::Request
    }

    /// The exchange still open at the end of the connection, if it got a response.
    pub fn finish(&mut self) -> Option<Exchange> {
        let done = std::mem::take(&mut self.phase) == Phase::Response;
        done.then_some(self.xs[self.cur & 1])
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
        rounds: 1,
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
        let mut got: Vec<Exchange> = s
            .events
            .iter()
            .filter_map(|e| x.step(e, None, Release::default(), &[Some(20 * US), Some(20 * US)], true).copied())
            .collect();
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
        let got: Vec<Exchange> = s
            .events
            .iter()
            .filter_map(|e| x.step(e, None, Release::default(), &[Some(20 * US), Some(20 * US)], true).copied())
            .collect();
        assert_eq!(got.len(), 1);
        let pause = got[0].resp_pause;
        assert_eq!(pause, (45 * MS - 50 * US) + (50 * MS + 100 * US - 45 * MS));
    }

    #[test]
    fn an_undone_response_start_puts_the_request_back_as_it_was() {
        let mut s = Seq::new();
        s.data(0, Client, 100);
        s.data(MS, Server, 50); // taken for the response's start: TLS session tickets, say
        s.data(2 * MS, Client, 30); // the request goes on
        s.data(3 * MS, Server, 200);
        let mut x = Exchanges::default();
        x.undoable();
        let (e, r) = (&s.events, Release::default());
        assert!(x.step(&e[0], None, r, &[Some(0), Some(0)], true).is_none());
        assert!(x.step(&e[1], None, r, &[Some(0), Some(0)], true).is_none());
        x.unstart_response();
        for ev in &e[2..] {
            assert!(x.step(ev, None, r, &[Some(0), Some(0)], true).is_none(), "one exchange, not two");
        }
        let done = x.finish().expect("the exchange");
        assert_eq!((done.req_bytes, done.req_last, done.resp_first, done.resp_bytes), (130, 2 * MS, 3 * MS, 200));
    }

    #[test]
    fn server_banner_and_unanswered_request_make_no_exchange() {
        let mut s = Seq::new();
        s.data(0, Server, 20);
        s.data(MS, Client, 10);
        let mut x = Exchanges::default();
        assert!(s.events.iter().all(|e| x.step(e, None, Release::default(), &[Some(0), Some(0)], true).is_none()));
        assert!(x.finish().is_none());
    }
}
