//! What the TLS reader says of a segment: its records (type, what they
//! carry, size, whether continued) and the bytes that are application data;
//! and how a Nagle hold looks in TLS terms.

use super::ROW_RECORDS;
use crate::wire::tls as wire;

/// What a record carries, as far as its cleartext and position tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum What {
    /// Only its content type is known.
    #[default]
    Plain,
    /// A cleartext handshake message of this type.
    Message(u8),
    /// An encrypted handshake message.
    Encrypted,
    /// The client's encrypted Finished (TLS 1.3, known by its length).
    Finished,
    /// A TLS 1.3 session ticket (NewSessionTicket after the handshake).
    Ticket,
    /// Maybe a session ticket, not yet confirmed (counted as application data).
    MaybeTicket,
    /// A TLS 1.3 encrypted alert (close_notify), known by its length.
    Alert,
}

/// One record, or the part of it in a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Record {
    /// Content type (20–23).
    pub ctype: u8,
    /// What it carries.
    pub what: What,
    /// Size on the wire, its 5-byte header included.
    pub len: u32,
    /// Began in an earlier segment: this one continues it.
    pub cont: bool,
}

impl Record {
    /// The content type's name.
    pub fn type_name(&self) -> &'static str {
        match self.ctype {
            wire::CHANGE_CIPHER_SPEC => "change_cipher_spec",
            wire::ALERT => "alert",
            wire::HANDSHAKE => "handshake",
            _ => "application data",
        }
    }

    /// What it carries, when more is known than its type.
    pub fn message(&self) -> Option<String> {
        match self.what {
            What::Message(t) => Some(wire::handshake_name(t).map_or_else(|| format!("type {t}"), str::to_string)),
            What::Encrypted => Some("encrypted handshake".into()),
            What::Finished => Some("Finished".into()),
            What::Ticket => Some("session ticket".into()),
            What::Alert => Some("encrypted alert".into()),
            What::Plain | What::MaybeTicket => None,
        }
    }

    /// "TLS handshake (ClientHello) 517 B", "TLS application data 133 B".
    pub fn label(&self) -> String {
        let what = self.message().map(|m| format!(" ({m})")).unwrap_or_default();
        let cont = if self.cont { ", continued" } else { "" };
        format!("TLS {}{what} {} B{cont}", self.type_name(), self.len)
    }
}

/// The TLS records of one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TlsSegment {
    /// The first records (a continued one first).
    pub records: [Record; ROW_RECORDS],
    /// How many of `records` are set.
    pub n: u8,
    /// Records beyond those.
    pub more: u16,
    /// Bytes whose records are not known (headers beyond the snap length,
    /// or the stream out of step after a gap).
    pub unread: u32,
    /// Bytes of application data (requests, responses).
    pub app: u32,
    /// The segment starts on a record boundary.
    pub starts: bool,
    /// It ends on one.
    pub ends: bool,
}

impl TlsSegment {
    /// The records listed.
    pub fn records(&self) -> &[Record] {
        &self.records[..usize::from(self.n)]
    }

    /// Its maybe-tickets were confirmed to be session tickets.
    pub fn confirm_tickets(&mut self) {
        for r in self.records.iter_mut().filter(|r| r.what == What::MaybeTicket) {
            r.what = What::Ticket;
        }
    }

    pub(super) fn push(&mut self, r: Record) {
        match self.records.get_mut(usize::from(self.n)) {
            Some(slot) => {
                *slot = r;
                self.n += 1;
            }
            None => self.more = self.more.saturating_add(1),
        }
    }

    /// The segment's records in words, several joined by commas.
    pub fn label(&self) -> String {
        let mut parts: Vec<String> = self.records().iter().map(Record::label).collect();
        if self.more > 0 {
            parts.push(format!("{} more records", self.more));
        }
        if self.unread > 0 {
            parts.push(format!("{} B not read (records not captured)", self.unread));
        }
        parts.join(", ")
    }
}

/// How a Nagle hold looks in TLS terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TlsHold {
    /// Not TLS, or nothing TLS-specific.
    #[default]
    None,
    /// The small segment ended a record and the held one began the next: the
    /// message went out as two (or more) records, the later held.
    Records,
    /// The small segment was the server's session ticket: the response waited behind it.
    Ticket,
}
