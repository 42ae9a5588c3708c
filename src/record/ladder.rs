//! A packet ladder (Wireshark's Flow Graph) as data: one row per segment of
//! one connection, client and server apart.

use crate::detect::tls::TlsSegment;
use crate::tcp::Side;
use serde::Serialize;

/// What a row's segment was.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RowKind {
    /// SYN or SYN-ACK.
    Syn,
    /// New payload.
    Data,
    /// Payload sent again.
    Retransmission,
    /// Reordered payload.
    OutOfOrder,
    /// Keep-alive / window probe.
    Probe,
    /// Pure ACK.
    Ack,
    /// FIN.
    Fin,
    /// RST.
    Rst,
}

/// Why a row is highlighted.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mark {
    /// The small segment whose ACK Nagle waited for.
    SmallUnacked,
    /// The delayed ACK.
    LateAck,
    /// The segment Nagle held.
    Held,
}

/// One segment.
#[derive(Clone, Copy, Debug, Serialize, schemars::JsonSchema)]
pub struct Row {
    /// Frame number.
    pub frame: u64,
    /// Capture time, ns (absolute; rendered relative to the first row).
    #[serde(skip)]
    pub ts_ns: i64,
    /// Time since the ladder's first row, ms.
    pub t_ms: f64,
    /// Sender.
    pub from: Side,
    /// Kind of segment.
    pub kind: RowKind,
    /// TCP flags byte, written as tcpdump does (`P.` for PSH+ACK).
    #[serde(serialize_with = "flags_json")]
    #[schemars(with = "String")]
    pub flags: u8,
    /// Relative sequence number.
    pub seq: i64,
    /// Payload bytes.
    pub len: u32,
    /// Relative acknowledgement, if ACK set.
    pub ack: Option<i64>,
    /// Advertised window, bytes.
    pub window: u64,
    /// Highlight.
    pub mark: Option<Mark>,
    /// Its TLS records, on a TLS connection.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "tls_json")]
    #[schemars(with = "Option<TlsRowJson>")]
    pub tls: Option<TlsSegment>,
}

/// One TLS record of a row, as JSON.
#[derive(Serialize, schemars::JsonSchema)]
pub struct TlsRecordJson {
    /// `handshake`, `application data`, `change_cipher_spec` or `alert`.
    pub content_type: &'static str,
    /// What it carries, when more is known than its type (ClientHello, Finished, session ticket…).
    pub message: Option<String>,
    /// Record length, bytes.
    pub length: u32,
    /// The record began in an earlier segment.
    pub continued: bool,
}

/// A row's TLS records, as JSON.
#[derive(Serialize, schemars::JsonSchema)]
pub struct TlsRowJson {
    /// "TLS handshake (ClientHello) 517 B".
    pub label: String,
    /// The first records of the segment.
    pub records: Vec<TlsRecordJson>,
    /// Records beyond those listed.
    pub more_records: u16,
    /// Bytes whose records are not known (beyond the snap length, or after a gap).
    pub unread_bytes: u32,
}

fn tls_json<S: serde::Serializer>(t: &Option<TlsSegment>, s: S) -> Result<S::Ok, S::Error> {
    let Some(t) = t else { return s.serialize_none() };
    let records = t
        .records()
        .iter()
        .map(|r| TlsRecordJson { content_type: r.type_name(), message: r.message(), length: r.len, continued: r.cont })
        .collect();
    TlsRowJson { label: t.label(), records, more_records: t.more, unread_bytes: t.unread }.serialize(s)
}

/// A run of one connection's segments.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Ladder {
    /// Connection id.
    pub connection: String,
    /// What is drawn and why.
    pub title: String,
    /// Client endpoint.
    pub client: String,
    /// Server endpoint.
    pub server: String,
    /// The rows, in capture order.
    pub rows: Vec<Row>,
    /// More segments existed than were kept.
    pub truncated: bool,
    /// Where the drawn exchange's time went (absent for a whole connection, `--flow`).
    pub times: Option<ExchangeTimes>,
}

/// One exchange's latency, split by cause, ms.
#[derive(Clone, Copy, Debug, Serialize, Default, PartialEq, schemars::JsonSchema)]
pub struct ExchangeTimes {
    /// Request start → response end, plus the client's side of the path.
    pub total_ms: f64,
    /// Network round trip.
    pub network_ms: f64,
    /// Server application time.
    pub think_ms: f64,
    /// Waiting for an upstream server (a server's mean only; 0 for one exchange).
    #[serde(skip_serializing_if = "is_zero")]
    pub upstream_ms: f64,
    /// The client pausing inside its own request.
    pub client_wait_ms: f64,
    /// Sending the bytes, stalls excluded.
    pub transfer_ms: f64,
    /// Nagle + delayed-ACK stall.
    pub stall_ms: f64,
    /// Waiting for lost bytes to be re-sent.
    pub loss_ms: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// TCP flags in tcpdump's notation and bit order: `S`, `S.`, `P.`, `FP.`, `.`; `none` when no flag is set.
pub fn flags_text(f: u8) -> String {
    const NAMES: [char; 8] = ['F', 'S', 'R', 'P', '.', 'U', 'E', 'W'];
    let s: String = NAMES.iter().enumerate().filter(|(i, _)| f & (1 << i) != 0).map(|(_, c)| *c).collect();
    if s.is_empty() { "none".into() } else { s }
}

fn flags_json<S: serde::Serializer>(f: &u8, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&flags_text(*f))
}

impl Ladder {
    /// Sets `t_ms` relative to the first row.
    pub fn finish_times(&mut self) {
        let t0 = self.rows.first().map_or(0, |r| r.ts_ns);
        for r in &mut self.rows {
            r.t_ms = super::ms(r.ts_ns - t0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_as_tcpdump_writes_them() {
        assert_eq!(flags_text(0x02), "S");
        assert_eq!(flags_text(0x12), "S.");
        assert_eq!(flags_text(0x18), "P.");
        assert_eq!(flags_text(0x19), "FP.");
        assert_eq!(flags_text(0x04), "R");
        assert_eq!(flags_text(0xc2), "SEW");
        assert_eq!(flags_text(0), "none");
    }
}
