//! Cause detectors. Each is a small state machine fed one connection's
//! [`Event`]s in order; what it concludes comes out as [`Observation`]s.
//! They do no I/O and keep no global state, so each is tested on hand-built
//! event sequences as well as on real captures.

pub mod exchange;
pub mod expect;
pub mod handshake;
pub mod http;
pub mod nagle;
pub mod timer;
pub mod tls;
pub mod window;

use crate::tcp::{ConnInfo, DataClass, Event, EventKind, Side};
use crate::wire::Segment;

/// Nagle + delayed-ACK stall: one held segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// The side whose segment was held (runs Nagle).
    pub nagle: Side,
    /// Frame of the small unacknowledged segment that made Nagle wait.
    pub small_frame: u64,
    /// Frame of the late pure ACK from the other side.
    pub ack_frame: u64,
    /// Frame of the held segment.
    pub held_frame: u64,
    /// The ACKing host's own delay: small segment → its ACK as seen at the
    /// capture point, less the round trip from there to the ACKing host
    /// (when measured), ns. The same whichever end the capture was taken at.
    pub ack_delay_ns: i64,
    /// Small segment → its ACK, as seen at the capture point, ns.
    pub ack_seen_ns: i64,
    /// Small segment → held segment: the time the held bytes lost, ns.
    pub stall_ns: i64,
    /// Nagle + loss: the ACK that would have released the held segment was
    /// lost, so the sender's loss timer sent it ([`timer`]). `ack_frame` is
    /// then the lost ACK if the capture saw it, else 0 (and its delays 0).
    pub timer: bool,
    /// How the hold looks over TLS (two records, or behind a session ticket).
    pub tls: tls::TlsHold,
}

/// One request/response exchange (client message, then server message).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Exchange {
    /// First and last request segment times, ns.
    pub req_first: i64,
    /// Last request segment time.
    pub req_last: i64,
    /// First response segment time.
    pub resp_first: i64,
    /// Last response segment time.
    pub resp_last: i64,
    /// Request payload bytes.
    pub req_bytes: u64,
    /// Response payload bytes.
    pub resp_bytes: u64,
    /// Nagle stall time inside the request (client-held), ns.
    pub req_stall: i64,
    /// Nagle stall time inside the response (server-held), ns.
    pub resp_stall: i64,
    /// Request end → first response byte spent on a Nagle hold of that byte
    /// (behind a small segment of the server's still unacknowledged, such as
    /// a TLS session ticket), ns.
    pub first_stall: i64,
    /// Pauses inside the response that neither the network (waiting for an
    /// ACK), a Nagle stall nor a loss explains: the server application writing late, ns.
    pub resp_pause: i64,
    /// Pauses inside the request that nothing of TCP explains: the client
    /// waiting between the parts of its own request (e.g. for `100 Continue`), ns.
    pub req_pause: i64,
    /// Time inside the request and the response spent waiting for lost bytes
    /// to be re-sent, or for the sender's loss timer to release held ones, ns.
    pub loss: i64,
    /// Request end → first response byte spent on a loss instead of the server
    /// application (the first response bytes went missing), ns.
    pub first_loss: i64,
    /// Round trips the exchange took: 1, plus each wait for an ACK before
    /// the sender could go on (window- or ACK-clocked rounds).
    pub rounds: u32,
    /// First frame of the request.
    pub first_frame: u64,
    /// Last frame of the response.
    pub last_frame: u64,
}

/// Where one exchange's time went, ns: the split `analyze` reports per server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Times {
    /// Client ↔ server round trip.
    pub network: i64,
    /// Application: request end → first response byte (network removed), plus pauses inside the response.
    pub think: i64,
    /// The client pausing inside its own request.
    pub client: i64,
    /// Sending the bytes.
    pub transfer: i64,
    /// Nagle + delayed-ACK holds.
    pub stall: i64,
    /// Waiting for lost bytes to be re-sent.
    pub loss: i64,
    /// All of it: request start → last response byte, as the client sees it.
    pub total: i64,
}

impl Exchange {
    /// Splits the exchange's time, given the round trips from the capture
    /// point to the client and to the server (ns).
    pub fn times(&self, rtt_to_client: i64, rtt_to_server: i64) -> Times {
        let first = (self.resp_first - self.req_last - rtt_to_server).max(0);
        let first_loss = self.first_loss.min(first);
        let first_stall = self.first_stall.min(first - first_loss);
        let think = first - first_loss - first_stall + self.resp_pause;
        let inner_stall = self.req_stall + self.resp_stall;
        let transfer = ((self.req_last - self.req_first) + (self.resp_last - self.resp_first)
            - inner_stall
            - self.resp_pause
            - self.req_pause
            - self.loss)
            .max(0);
        let stall = inner_stall + first_stall;
        let network = rtt_to_client + rtt_to_server;
        let loss = self.loss + first_loss;
        let total = network + think + self.req_pause + transfer + stall + loss;
        Times { network, think, client: self.req_pause, transfer, stall, loss, total }
    }
}

/// What a detector concluded from an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    /// A Nagle + delayed-ACK stall.
    Stall(Stall),
    /// A completed exchange.
    Exchange(Exchange),
    /// Bytes sent again.
    Retransmission {
        /// Sender.
        from: Side,
        /// The bytes had already been acknowledged (a lost ACK, not lost data).
        spurious: bool,
        /// Frame of the re-sent segment.
        frame: u64,
        /// How long after the first copy (or after the gap appeared), ns.
        since_ns: i64,
    },
    /// A SYN or SYN-ACK had to be sent more than once.
    SynRetry {
        /// Client (SYN) or server (SYN-ACK).
        from: Side,
        /// Extra copies sent.
        retries: u32,
        /// First SYN → the answer that completed the handshake (or to the last copy if unanswered), ns.
        delay_ns: i64,
        /// Whether the handshake completed.
        answered: bool,
        /// Frame of the first copy and of the last.
        frames: [u64; 2],
    },
    /// A request head asked `Expect: 100-continue` and its body followed only
    /// after the client gave up waiting for the server's `100 Continue`.
    ExpectWait {
        /// Head → body, ns.
        wait_ns: i64,
        /// Frames of the head and of the body's first segment.
        frames: [u64; 2],
        /// The `Expect:` header was captured (else the snap length cut the
        /// head before it and the shape alone says so).
        header_seen: bool,
    },
    /// A request's first segment was cut by the capture's snap length before
    /// the end of its request line: whether it asked for `100 Continue` (or
    /// anything else its head says) cannot be read.
    HeadUnread {
        /// Frame of the segment.
        frame: u64,
        /// Payload bytes captured of it.
        kept: u32,
    },
    /// A side advertised a zero receive window, stalling its peer.
    ZeroWindow {
        /// The side that could not take more data.
        from: Side,
        /// How long the window stayed closed, ns.
        duration_ns: i64,
        /// Frames where it closed and reopened.
        frames: [u64; 2],
    },
}

/// Receives what the detectors conclude. A closure taking [`Observation`]s
/// is one; a receiver that only reads an exchange takes it by reference
/// instead ([`Observer::exchange`]): copied into an `Observation` it was a
/// 136-byte `memcpy` call every second packet.
pub trait Observer {
    /// Any observation.
    fn observe(&mut self, o: Observation);
    /// A completed exchange.
    #[inline]
    fn exchange(&mut self, x: &Exchange) {
        self.observe(Observation::Exchange(*x));
    }
}

impl<F: FnMut(Observation)> Observer for F {
    #[inline]
    fn observe(&mut self, o: Observation) {
        self(o);
    }
}

/// All detectors' state for one connection. In C order, the fields every
/// packet reads or writes together (the layout Rust picks spread them over
/// twice as many cache lines, and with many connections taking turns each
/// line is a miss): the small ones first, then each detector's bulky part
/// before its per-packet fields.
#[derive(Debug, Default)]
#[repr(C)]
pub struct Detectors {
    /// TLS state, once a first payload looked like a TLS record (boxed: most
    /// connections of a cleartext capture never need it).
    tls: Option<Box<tls::Tls>>,
    sniffed: bool,
    /// Directions whose first payload was looked at for TLS.
    tls_checked: [bool; 2],
    window: window::ZeroWindow,
    expect: expect::Expect,
    nagle: nagle::Nagle,
    exchanges: exchange::Exchanges,
    handshake: handshake::Handshake,
    /// The TLS records of the last data segment, on a TLS connection.
    pub tls_segment: Option<tls::TlsSegment>,
    /// HTTP `Server:` value from the first response, if any.
    pub server_software: Option<String>,
}

impl Detectors {
    /// Runs every detector on one event and its segment, dispatched once on
    /// the event's kind: in each arm the detectors' own matches on it fold
    /// away. Left to the compiler, the tracker's events of every kind could
    /// share one copy of the detectors, each then matching the kind again
    /// (15–20 instructions a packet). New data and pure ACKs are nearly every
    /// event; the rest share a copy out of line.
    #[inline(always)]
    pub fn step(&mut self, info: &ConnInfo, ev: &Event, seg: &Segment<'_>, out: &mut impl Observer) {
        match ev.kind {
            EventKind::Data { class: DataClass::New, .. } => self.run(info, ev, seg, out),
            EventKind::Ack => self.run(info, ev, seg, out),
            _ => self.run_rare(info, ev, seg, out),
        }
    }

    #[inline(never)]
    fn run_rare(&mut self, info: &ConnInfo, ev: &Event, seg: &Segment<'_>, out: &mut impl Observer) {
        self.run(info, ev, seg, out);
    }

    #[inline(always)]
    fn run(&mut self, info: &ConnInfo, ev: &Event, seg: &Segment<'_>, out: &mut impl Observer) {
        let payload = seg.payload;
        if let EventKind::Data { class: DataClass::Retransmission { since_ns, spurious, .. }, .. } = ev.kind {
            out.observe(Observation::Retransmission { from: ev.from, spurious, frame: ev.frame, since_ns });
        }
        if !self.sniffed && ev.from == Side::Server && matches!(ev.kind, EventKind::Data { class: DataClass::New, .. })
        {
            // Only the first response can carry the header we look for.
            self.sniffed = true;
            self.server_software = http::server_header(payload).map(str::to_string);
        }
        let app = self.tls_step(ev, seg);
        let mut stall = self.nagle.step(info, ev, || seg.timestamps(), seg.ip_id);
        let release = self.nagle.release();
        if let Some(s) = &mut stall {
            if let Some(t) = &self.tls {
                s.tls = t.hold(s.nagle.idx(), s.small_frame);
            }
            out.observe(Observation::Stall(*s));
        }
        if let EventKind::Data { class: DataClass::New, len, .. } = ev.kind {
            let starts = !self.exchanges.in_request();
            if let Some(o) = self.expect.step(info, ev, payload, starts) {
                out.observe(o);
            }
            // Rare (a frame cut by the snap length), so looked at further only then.
            if payload.len() < len as usize && starts && ev.from == Side::Client && http::head_unread(payload) {
                out.observe(Observation::HeadUnread { frame: ev.frame, kept: payload.len() as u32 });
            }
        }
        if let Some(x) = self.exchanges.step(ev, stall.as_ref(), release, &info.rtt_to, app) {
            out.exchange(x);
        }
        if let Some(o) = self.handshake.step(ev) {
            out.observe(o);
        }
        if let Some(o) = self.window.step(ev) {
            out.observe(o);
        }
    }

    /// Reads a new data segment's TLS records, once the connection looks like
    /// TLS; says whether the segment carries application data (always, when not
    /// TLS). The checks that settle most segments of a cleartext connection are
    /// inlined; the reading is not (its call cost ~17 instructions a packet).
    #[inline(always)]
    fn tls_step(&mut self, ev: &Event, seg: &Segment<'_>) -> bool {
        let EventKind::Data { seq, len, class: DataClass::New } = ev.kind else {
            // Only ever set on a TLS connection: elsewhere the store would touch a line for nothing.
            if self.tls.is_some() {
                self.tls_segment = None;
            }
            return true;
        };
        let side = ev.from.idx();
        if self.tls.is_none() && (self.tls_checked[side] || seg.payload.is_empty()) {
            return true;
        }
        self.tls_read(side, ev, seq, len, seg.payload)
    }

    /// [`Detectors::tls_step`] for a new data segment that may be TLS: a
    /// side's first payload, or any on a TLS connection.
    #[inline(never)]
    fn tls_read(&mut self, side: usize, ev: &Event, seq: i64, len: u32, payload: &[u8]) -> bool {
        if self.tls.is_none() {
            self.tls_checked[side] = true;
            if crate::wire::tls::RecordHeader::parse(payload).is_none() {
                return true;
            }
            self.tls = Some(Box::default());
            self.exchanges.undoable();
        }
        let Some(t) = self.tls.as_mut() else { return true };
        let s = t.segment(side, ev.frame, seq, len, payload, ev.ack);
        if t.take_unstart() {
            self.exchanges.unstart_response();
        }
        self.tls_segment = Some(s);
        s.app > 0
    }

    /// The ClientHello's server name (SNI), once read.
    pub fn server_name(&self) -> Option<&str> {
        self.tls.as_ref().and_then(|t| t.sni.as_deref())
    }

    /// Frames of segments now known to carry only session tickets, once.
    pub fn take_confirmed_tickets(&mut self) -> Option<[u64; 2]> {
        self.tls.as_mut().and_then(|t| t.take_confirmed())
    }

    /// Flushes what is still open when the connection ends at `last_ts`.
    pub fn finish(&mut self, last_ts: i64, out: &mut impl Observer) {
        if let Some(x) = self.exchanges.finish() {
            out.exchange(&x);
        }
        if let Some(o) = self.handshake.finish() {
            out.observe(o);
        }
        self.window.finish(last_ts, out);
    }
}

#[cfg(test)]
mod tests;

/// Test helpers: build event sequences by hand.
#[cfg(test)]
pub(crate) mod build {
    use crate::tcp::{ConnInfo, DataClass, Event, EventKind, RoleSource, Side};
    use crate::wire::Endpoint;

    pub const MS: i64 = 1_000_000;
    pub const US: i64 = 1_000;

    pub fn info(rtt_client: i64, rtt_server: i64) -> ConnInfo {
        ConnInfo {
            id: 1,
            client: Endpoint { ip: [127, 0, 0, 1].into(), port: 40000 },
            server: Endpoint { ip: [127, 0, 0, 1].into(), port: 8080 },
            roles: RoleSource::Handshake,
            roles_open: false,
            roles_doubt: None,
            mss: [Some(1448), Some(1448)],
            rtt_to: [Some(rtt_client), Some(rtt_server)],
        }
    }

    /// A sequence builder that numbers frames and tracks both sides' sequence numbers.
    pub struct Seq {
        pub events: Vec<Event>,
        next: [i64; 2],
        frame: u64,
    }

    impl Seq {
        pub fn new() -> Seq {
            Seq { events: Vec::new(), next: [1, 1], frame: 0 }
        }
        fn push(&mut self, t: i64, from: Side, kind: EventKind, window: u64) -> u64 {
            self.frame += 1;
            let ack = Some(self.next[from.other().idx()]);
            self.events.push(Event { ts_ns: t, frame: self.frame, from, kind, ack, window });
            self.frame
        }
        /// New data of `len` bytes from `from` at time `t`.
        pub fn data(&mut self, t: i64, from: Side, len: u32) -> u64 {
            let seq = self.next[from.idx()];
            self.next[from.idx()] += i64::from(len);
            self.push(t, from, EventKind::Data { seq, len, class: DataClass::New }, 65535)
        }
        /// The last `len` bytes of `from` sent again.
        pub fn resend(&mut self, t: i64, from: Side, len: u32, since_ns: i64) -> u64 {
            let seq = self.next[from.idx()] - i64::from(len);
            let class = DataClass::Retransmission { since_ns, original_frame: None, spurious: false };
            self.push(t, from, EventKind::Data { seq, len, class }, 65535)
        }
        /// `len` bytes of `from` that never reach the capture point.
        pub fn skip(&mut self, from: Side, len: u32) {
            self.next[from.idx()] += i64::from(len);
        }
        /// A pure ACK from `from` covering everything the other side sent.
        pub fn ack(&mut self, t: i64, from: Side) -> u64 {
            self.push(t, from, EventKind::Ack, 65535)
        }
        /// A pure ACK advertising `window` bytes.
        pub fn ack_window(&mut self, t: i64, from: Side, window: u64) -> u64 {
            self.push(t, from, EventKind::Ack, window)
        }
        pub fn syn(&mut self, t: i64, from: Side, retransmit: bool) -> u64 {
            self.push(t, from, EventKind::Syn { retransmit }, 65535)
        }
    }
}
