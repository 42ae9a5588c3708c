//! `Expect: 100-continue`: a client sends its request head, then waits for
//! the server's `100 Continue` before the body. A server that never answers
//! it leaves the client to its own timeout (curl: 1 s) before the body goes:
//! time that is the client's waiting, neither the server's nor TCP's.
//!
//! Signature: a request's first segment holds a whole head asking for it and
//! nothing after the head (or a head the capture's snap length cut before
//! its end, whose lines seen do not rule it out: curl puts `Expect:` last);
//! the client's next new bytes, not another request, come with no server
//! data in between, more than [`EXPECT_WAIT_MIN_NS`] beyond the round trip
//! later. Server data in between (the `100 Continue` or a final status) ends
//! the watch: nothing is found.

use super::{Observation, http};
use crate::tcp::{ConnInfo, DataClass, Event, EventKind, Side};

/// A wait longer than the round trip by this much is the client's own.
pub const EXPECT_WAIT_MIN_NS: i64 = 10_000_000;

/// Per-connection state.
#[derive(Debug, Default)]
pub struct Expect {
    /// The head that asked (or may have): its time, frame, and whether the header was seen.
    waiting: Option<(i64, u64, bool)>,
}

impl Expect {
    /// Feeds one segment of new data (the caller leaves the rest out);
    /// `payload` is its captured payload, `starts` says it begins a request
    /// (the client speaks after the server, or first). Runs on every data
    /// segment: what is neither a request's first segment that may carry a
    /// body nor the one after a head that asked returns at once.
    #[inline]
    pub fn step(&mut self, info: &ConnInfo, ev: &Event, payload: &[u8], starts: bool) -> Option<Observation> {
        if ev.from == Side::Server {
            if self.waiting.is_some() {
                self.waiting = None;
            }
            return None;
        }
        // GET and HEAD carry no body to wait for.
        if self.waiting.is_none() && (!starts || matches!(payload.first(), Some(b'G' | b'H'))) {
            return None;
        }
        self.request(info, ev, payload, starts)
    }

    #[inline(never)]
    fn request(&mut self, info: &ConnInfo, ev: &Event, payload: &[u8], starts: bool) -> Option<Observation> {
        let EventKind::Data { len, class: DataClass::New, .. } = ev.kind else {
            return None;
        };
        if let Some((t, frame, header_seen)) = self.waiting.take() {
            let wait_ns = ev.ts_ns - t;
            let body = !http::is_request(payload);
            return (body && wait_ns - info.rtt() >= EXPECT_WAIT_MIN_NS).then_some(Observation::ExpectWait {
                wait_ns,
                frames: [frame, ev.frame],
                header_seen,
            });
        }
        if starts && let Some(seen) = http::expect_continue(payload, len) {
            self.waiting = Some((ev.ts_ns, ev.frame, seen));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::build::{MS, Seq, US, info};
    use crate::tcp::Side::{Client, Server};

    const HEAD: &[u8] = b"POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: 4096\r\nExpect: 100-continue\r\n\r\n";

    fn run(s: &Seq, payloads: &[&[u8]]) -> Vec<Observation> {
        let i = info(20 * US, 20 * US);
        let mut x = Expect::default();
        // As the caller does: new data only, a request starting when the client speaks after the server.
        let mut client_spoke = false;
        s.events
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e.kind, EventKind::Data { class: DataClass::New, .. }))
            .filter_map(|(k, e)| {
                let starts = e.from == Client && !client_spoke;
                client_spoke = e.from == Client;
                x.step(&i, e, payloads.get(k).copied().unwrap_or(&[]), starts)
            })
            .collect()
    }

    /// curl against a server that never answers 100: the body follows one second later.
    #[test]
    fn unanswered_expect_is_a_client_wait() {
        let mut s = Seq::new();
        let head = s.data(0, Client, HEAD.len() as u32);
        s.ack(40 * MS, Server);
        let body = s.data(1001 * MS, Client, 4096);
        s.data(1002 * MS, Server, 100);
        let got = run(&s, &[HEAD]);
        assert_eq!(got, [Observation::ExpectWait { wait_ns: 1001 * MS, frames: [head, body], header_seen: true }]);
    }

    /// The server answers 100 Continue: the client was not left waiting.
    #[test]
    fn answered_expect_is_nothing() {
        let mut s = Seq::new();
        s.data(0, Client, HEAD.len() as u32);
        s.data(100 * US, Server, 25);
        s.data(200 * US, Client, 4096);
        s.data(1200 * US, Server, 100);
        assert!(run(&s, &[HEAD, b"HTTP/1.1 100 Continue\r\n\r\n"]).is_empty());
    }

    /// The head cut by the snap length before its `Expect:` line: the same wait, said
    /// to be inferred. A pipelined second request after a cut head is no body.
    #[test]
    fn a_head_cut_short_is_judged_by_its_shape() {
        const CUT: &[u8] = b"POST /upload HTTP/1.1\r\nHost: h\r\nUser-Agent: curl/7.88.1\r\nContent-Le";
        let mut s = Seq::new();
        let head = s.data(0, Client, 174);
        let body = s.data(1000 * MS, Client, 1448);
        let got = run(&s, &[CUT]);
        assert_eq!(got, [Observation::ExpectWait { wait_ns: 1000 * MS, frames: [head, body], header_seen: false }]);
        assert!(run(&s, &[CUT, b"GET /next HTTP/1.1\r\nHost: h\r\n"]).is_empty());
    }

    /// Head and body in one segment, or a head without the header: nothing waits.
    #[test]
    fn no_wait_without_the_header_or_with_the_body_along() {
        let mut s = Seq::new();
        s.data(0, Client, HEAD.len() as u32 + 10);
        s.data(900 * MS, Client, 4096);
        assert!(run(&s, &[HEAD]).is_empty());
        let mut s = Seq::new();
        s.data(0, Client, 60);
        s.data(900 * MS, Client, 4096);
        assert!(run(&s, &[b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4096\r\n\r\n"]).is_empty());
    }
}
