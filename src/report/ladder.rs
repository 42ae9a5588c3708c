//! A packet ladder (Wireshark's Flow Graph, in text): client on the left,
//! server on the right, one row per segment.

use crate::tcp::Side;
use serde::Serialize;

/// What a row's segment was.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
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
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
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
#[derive(Clone, Copy, Debug, Serialize)]
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
}

/// A run of one connection's segments.
#[derive(Clone, Debug, Serialize)]
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
#[derive(Clone, Copy, Debug, Serialize, Default, PartialEq)]
pub struct ExchangeTimes {
    /// Request start → response end, plus the client's side of the path.
    pub total_ms: f64,
    /// Network round trip.
    pub network_ms: f64,
    /// Server application time.
    pub think_ms: f64,
    /// Sending the bytes, stalls excluded.
    pub transfer_ms: f64,
    /// Nagle + delayed-ACK stall.
    pub stall_ms: f64,
    /// Waiting for lost bytes to be re-sent.
    pub loss_ms: f64,
}

impl Ladder {
    /// Sets `t_ms` relative to the first row.
    pub fn finish_times(&mut self) {
        let t0 = self.rows.first().map_or(0, |r| r.ts_ns);
        for r in &mut self.rows {
            r.t_ms = super::ms(r.ts_ns - t0);
        }
    }

    /// Renders as text lines.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        const W: usize = 46;
        let _ = writeln!(out, "{}", self.title);
        let client = format!("{} (client)", self.client);
        let _ = writeln!(out, "   frame   time ms  {client:<w$}  {} (server)", self.server, w = W + 1);
        for r in &self.rows {
            let what = match r.kind {
                RowKind::Syn => (if r.from == Side::Client { "SYN" } else { "SYN-ACK" }).to_string(),
                RowKind::Data => format!("{} B  seq {}", r.len, r.seq),
                RowKind::Retransmission => format!("{} B  seq {} RETRANSMISSION", r.len, r.seq),
                RowKind::OutOfOrder => format!("{} B  seq {} out of order", r.len, r.seq),
                RowKind::Probe => "probe".to_string(),
                RowKind::Ack => format!("ACK {}", r.ack.unwrap_or(0)),
                RowKind::Fin => "FIN".to_string(),
                RowKind::Rst => "RST".to_string(),
            };
            let body = W.saturating_sub(what.len() + 4);
            let arrow = if r.from == Side::Client {
                format!("|-- {what} {}>|", "-".repeat(body))
            } else {
                format!("|<{} {what} --|", "-".repeat(body))
            };
            let note = match r.mark {
                Some(Mark::SmallUnacked) => super::style::warn("  small segment, unacknowledged"),
                Some(Mark::LateAck) => super::style::bad("  << delayed ACK"),
                Some(Mark::Held) => super::style::bad("  << held by Nagle until the ACK"),
                None => String::new(),
            };
            let _ = writeln!(out, "{:>8} {:>9.3}  {arrow}{note}", r.frame, r.t_ms);
        }
        if self.truncated {
            let _ = writeln!(out, "   … more segments not shown (raise --ladder-rows)");
        }
    }
}
