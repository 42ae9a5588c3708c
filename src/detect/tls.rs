//! TLS on the wire: each direction's byte stream cut into records (headers
//! read where captured; a record may span segments, a segment may hold
//! several), what each record is by its type and position, and the server
//! name from the ClientHello. State is bounded: a few counters per direction
//! and at most [`HELLO_MAX`] bytes of a ClientHello that spans segments.
//!
//! Which bytes are requests and responses (application data) and which are
//! not:
//! - handshake, change_cipher_spec and alert records never are;
//! - TLS 1.3 (told by the ServerHello) encrypts the handshake in
//!   application-data records: the server's are handshake until the client's
//!   Finished, the client's Finished is its first such record of the length a
//!   Finished has under the chosen cipher suite;
//! - after the handshake a TLS 1.3 server sends session tickets, also as
//!   application-data records. Chosen: by position and size. Records the
//!   server sent before its ACK covered any of the client's application data
//!   are tickets (nothing to respond to yet); otherwise its first records
//!   after the handshake are tickets when at least two of them, of at most
//!   [`TICKET_MAX`] bytes, have the same length (a server writes its tickets
//!   alike; OpenSSL sends two). The first of them counts as response until
//!   the second confirms it; a lone ticket stays counted as response.
//! - a TLS 1.3 application-data record of an encrypted alert's length (19
//!   bytes: a close_notify) after the handshake is taken for one;
//! - bytes whose record header the snap length cut (or after a gap) are
//!   application data once that side's handshake is over, else handshake.

mod record;

pub use record::{Record, TlsHold, TlsSegment, What};

use crate::wire::tls::{self as wire, RecordHeader};

/// Most bytes of a ClientHello kept while it spans segments.
pub const HELLO_MAX: usize = 4096;
/// Longest record taken for a session ticket.
pub const TICKET_MAX: u32 = 2048;
/// Records listed per segment; more are counted.
pub const ROW_RECORDS: usize = 6;
/// Body length of a TLS 1.3 encrypted alert: 2 bytes, the inner type, a 16-byte tag.
const ALERT_LEN: u16 = 2 + 1 + 16;
/// TLS 1.3 encrypted client handshake records (a client certificate…) before
/// its Finished is assumed, if none has a Finished's length.
const CLIENT_FLIGHT_MAX: u8 = 4;

#[derive(Clone, Copy, Debug, Default)]
enum Tickets {
    #[default]
    Idle,
    /// A first record that may be a ticket: its length and the frames it spans.
    Tentative(u32, [u64; 2]),
    /// Tickets of this length.
    Run(u32),
    Over,
}

/// A recent segment, for describing a Nagle hold.
#[derive(Clone, Copy, Debug, Default)]
struct Shape {
    frame: u64,
    starts: bool,
    ends: bool,
    /// Carried only (maybe-)tickets: 1 maybe, 2 confirmed.
    ticket: u8,
}

#[derive(Debug)]
struct Dir {
    /// Relative sequence number expected next.
    next: i64,
    /// Body bytes of the current record still to come.
    left: u32,
    cur: Record,
    cur_app: bool,
    /// A record header split across segments.
    hdr: [u8; 5],
    have: u8,
    synced: bool,
    ccs: bool,
    /// This side's handshake is over.
    done: bool,
    flight: u8,
    recent: [Shape; 2],
}

impl Default for Dir {
    fn default() -> Dir {
        Dir {
            next: 1,
            left: 0,
            cur: Record::default(),
            cur_app: false,
            hdr: [0; 5],
            have: 0,
            synced: true,
            ccs: false,
            done: false,
            flight: 0,
            recent: [Shape::default(); 2],
        }
    }
}

/// One connection's TLS state.
#[derive(Debug, Default)]
pub struct Tls {
    dir: [Dir; 2],
    client_hello: bool,
    server_hello: bool,
    tls13: bool,
    finished_len: Option<u16>,
    /// The client's relative sequence number after its Finished.
    client_done_at: Option<i64>,
    tickets: Tickets,
    /// Frames of tentative tickets just confirmed (rows to relabel).
    confirmed: Option<[u64; 2]>,
    /// The confirmed tickets began in an earlier segment, counted as response.
    unstart: bool,
    /// The ClientHello's server name.
    pub sni: Option<Box<str>>,
    hello: Vec<u8>,
    hello_left: u32,
}

impl Tls {
    /// Reads one new data segment of `side` (0 client, 1 server): `seq`
    /// relative, `len` on the wire, `payload` as captured, `ack` the
    /// segment's relative acknowledgement of the other side's bytes.
    pub fn segment(
        &mut self,
        side: usize,
        frame: u64,
        seq: i64,
        len: u32,
        payload: &[u8],
        ack: Option<i64>,
    ) -> TlsSegment {
        let mut d = std::mem::take(&mut self.dir[side]);
        let mut out = TlsSegment::default();
        if seq != d.next {
            (d.synced, d.left, d.have) = (false, 0, 0);
        }
        d.next = seq + i64::from(len);
        out.starts = d.synced && d.left == 0 && d.have == 0;
        let (len, cap) = (len as usize, payload.len().min(len as usize));
        let mut pos = 0usize;
        let mut maybe = 0u32;
        while pos < len {
            if !d.synced {
                if pos == 0 && RecordHeader::parse(payload).is_some() {
                    d.synced = true;
                    out.starts = true;
                    if side == 0 && self.tls13 && !d.done {
                        // Lost in the client's flight: take its handshake as over.
                        d.done = true;
                        self.client_done_at = Some(seq);
                    }
                } else {
                    out.unread += (len - pos) as u32;
                    break;
                }
            }
            if d.left > 0 {
                let take = (d.left as usize).min(len - pos);
                if pos == 0 {
                    out.push(Record { cont: true, ..d.cur });
                }
                if d.cur_app {
                    out.app += take as u32;
                    if d.cur.what == What::MaybeTicket {
                        maybe += take as u32;
                        if let Tickets::Tentative(_, f) = &mut self.tickets {
                            f[1] = frame;
                        }
                    }
                }
                if side == 0 && self.hello_left > 0 {
                    self.more_hello(payload.get(pos..cap.min(pos + take)).unwrap_or_default(), take, pos + take > cap);
                }
                d.left -= take as u32;
                pos += take;
                continue;
            }
            let need = 5 - usize::from(d.have);
            let at = usize::from(d.have);
            if pos + need > cap.min(len) {
                if cap < len {
                    // The header lies beyond the snap length.
                    (d.synced, d.have) = (false, 0);
                    out.unread += (len - pos) as u32;
                } else {
                    // Split across segments: keep its first bytes.
                    d.hdr[at..at + len - pos].copy_from_slice(&payload[pos..len]);
                    d.have += (len - pos) as u8;
                }
                break;
            }
            d.hdr[at..].copy_from_slice(&payload[pos..pos + need]);
            d.have = 0;
            pos += need;
            let hdr = d.hdr;
            let Some(h) = RecordHeader::parse(&hdr) else {
                d.synced = false;
                out.unread += (len + need - pos) as u32;
                break;
            };
            let body_len = usize::from(h.len());
            let body = payload.get(pos..cap.min(pos + body_len)).unwrap_or_default();
            let end = seq + (pos + body_len) as i64;
            let cut = cap < len.min(pos + body_len);
            let (what, app) = self.classify(&mut d, side, frame, h, body, end, ack, cut);
            let rec = Record { ctype: h.content_type(), what, len: body_len as u32 + 5, cont: false };
            if what == What::Ticket && maybe > 0 {
                // The tentative ticket earlier in this segment is one too.
                for r in out.records.iter_mut().filter(|r| r.what == What::MaybeTicket) {
                    r.what = What::Ticket;
                }
                out.app -= maybe;
                maybe = 0;
            }
            out.push(rec);
            let take = body_len.min(len - pos);
            if app {
                out.app += (take + 5) as u32;
                if what == What::MaybeTicket {
                    maybe += (take + 5) as u32;
                }
            }
            (d.cur, d.cur_app, d.left) = (rec, app, (body_len - take) as u32);
            pos += take;
        }
        if out.unread > 0 && self.past_handshake(&d, side) {
            out.app += out.unread;
        }
        if out.app > maybe && side == 0 || out.unread > 0 && side == 1 {
            // A request, or response bytes of unknown records: the records
            // before were no tickets (the server's tickets come first).
            if let Tickets::Tentative(..) | Tickets::Idle = self.tickets
                && self.client_done_at.is_some()
                && (side == 1 || matches!(self.tickets, Tickets::Tentative(..)))
            {
                self.tickets = Tickets::Over;
            }
        }
        out.ends = d.synced && d.left == 0 && d.have == 0;
        let only_tickets = out.n > 0 && out.app == maybe && out.unread == 0;
        let ticket = match only_tickets {
            true if maybe > 0 => 1,
            true if out.records().iter().all(|r| r.what == What::Ticket) => 2,
            _ => 0,
        };
        d.recent = [d.recent[1], Shape { frame, starts: out.starts, ends: out.ends, ticket }];
        if let Some([a, b]) = self.confirmed {
            for s in d.recent.iter_mut().filter(|s| (a..=b).contains(&s.frame) && s.ticket == 1) {
                s.ticket = 2;
            }
        }
        self.dir[side] = d;
        out
    }

    /// What a record is, and whether it is application data.
    #[allow(clippy::too_many_arguments)]
    fn classify(
        &mut self,
        d: &mut Dir,
        side: usize,
        frame: u64,
        h: RecordHeader<'_>,
        body: &[u8],
        end: i64,
        ack: Option<i64>,
        cut: bool,
    ) -> (What, bool) {
        let msg = || body.first().map_or(What::Plain, |&t| What::Message(t));
        match (side, h.content_type()) {
            (_, wire::CHANGE_CIPHER_SPEC) => {
                d.ccs = true;
                (What::Plain, false)
            }
            (_, wire::HANDSHAKE) if d.ccs && !self.tls13 => {
                // TLS 1.2: the Finished after change_cipher_spec, encrypted.
                d.done = true;
                if side == 0 {
                    self.client_done_at = Some(end);
                }
                (What::Encrypted, false)
            }
            (0, wire::HANDSHAKE) => {
                if body.first() == Some(&1) && !self.client_hello {
                    self.client_hello = true;
                    if body.len() < usize::from(h.len()) && !cut {
                        self.hello = body[..body.len().min(HELLO_MAX)].to_vec();
                        self.hello_left = u32::from(h.len()) - body.len() as u32;
                    } else {
                        self.take_sni(body);
                    }
                }
                (msg(), false)
            }
            (_, wire::HANDSHAKE) => {
                if body.first() == Some(&2)
                    && let Some(sh) = wire::server_hello(body)
                {
                    self.server_hello = true;
                    self.tls13 = sh.version == 0x0304;
                    self.finished_len = wire::tls13_finished_len(sh.suite);
                }
                (msg(), false)
            }
            (0, wire::APPLICATION_DATA) if self.tls13 && self.server_hello && !d.done => {
                let finished = self.finished_len.is_none_or(|f| f == h.len());
                if finished || d.flight >= CLIENT_FLIGHT_MAX {
                    d.done = true;
                    self.client_done_at = Some(end);
                    (What::Finished, false)
                } else {
                    d.flight += 1;
                    (What::Encrypted, false)
                }
            }
            (_, wire::APPLICATION_DATA) if self.tls13 && self.client_done_at.is_some() && h.len() == ALERT_LEN => {
                (What::Alert, false)
            }
            (1, wire::APPLICATION_DATA) if self.tls13 => match self.client_done_at {
                None => (What::Encrypted, false),
                Some(at) => self.ticket(frame, u32::from(h.len()) + 5, ack.is_some_and(|a| a <= at)),
            },
            (_, wire::APPLICATION_DATA) => (What::Plain, true),
            _ => (What::Plain, false),
        }
    }

    /// A server application-data record after the handshake: a session ticket?
    /// `before_data`: the server had not yet acknowledged any client application data.
    fn ticket(&mut self, frame: u64, len: u32, before_data: bool) -> (What, bool) {
        let (state, what) = match self.tickets {
            _ if before_data && len <= TICKET_MAX && !matches!(self.tickets, Tickets::Over) => {
                (Tickets::Run(len), What::Ticket)
            }
            Tickets::Idle if len <= TICKET_MAX => (Tickets::Tentative(len, [frame, frame]), What::MaybeTicket),
            Tickets::Tentative(l, frames) if l == len => {
                self.confirmed = Some(frames);
                self.unstart = frames[0] < frame;
                (Tickets::Run(l), What::Ticket)
            }
            Tickets::Run(l) if l == len => (Tickets::Run(l), What::Ticket),
            _ => (Tickets::Over, What::Plain),
        };
        self.tickets = state;
        (what, what != What::Ticket)
    }

    fn past_handshake(&self, d: &Dir, side: usize) -> bool {
        let started = self.client_hello || self.server_hello;
        !started || d.done || (side == 1 && self.client_done_at.is_some())
    }

    fn more_hello(&mut self, bytes: &[u8], take: usize, cut: bool) {
        let room = HELLO_MAX.saturating_sub(self.hello.len());
        self.hello.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.hello_left = self.hello_left.saturating_sub(take as u32);
        if self.hello_left == 0 || cut || room == 0 {
            let hello = std::mem::take(&mut self.hello);
            self.take_sni(&hello);
            self.hello_left = 0;
        }
    }

    fn take_sni(&mut self, hello: &[u8]) {
        if let Some(name) = wire::client_hello_sni(hello) {
            self.sni = Some(String::from_utf8_lossy(&name[..name.len().min(255)]).into());
        }
    }

    /// Frames of tentative tickets confirmed by the last segment (their rows
    /// may be relabelled), once.
    pub fn take_confirmed(&mut self) -> Option<[u64; 2]> {
        self.confirmed.take()
    }

    /// The last segment confirmed tickets that an earlier segment had begun
    /// and that were counted as the start of a response, once.
    pub fn take_unstart(&mut self) -> bool {
        std::mem::take(&mut self.unstart)
    }

    /// How a hold of `side`'s segment behind its `small_frame` looks in TLS
    /// terms; the held segment is the last one read.
    pub fn hold(&self, side: usize, small_frame: u64) -> TlsHold {
        let [small, held] = self.dir[side].recent;
        match small.frame == small_frame {
            true if small.ticket == 2 => TlsHold::Ticket,
            true if small.ends && held.starts => TlsHold::Records,
            _ => TlsHold::None,
        }
    }
}

#[cfg(test)]
mod tests;
