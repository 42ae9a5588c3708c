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
    /// TCP flags byte, written as tcpdump does (`P.` for PSH+ACK).
    #[serde(serialize_with = "flags_json")]
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
    /// The client pausing inside its own request.
    pub client_wait_ms: f64,
    /// Sending the bytes, stalls excluded.
    pub transfer_ms: f64,
    /// Nagle + delayed-ACK stall.
    pub stall_ms: f64,
    /// Waiting for lost bytes to be re-sent.
    pub loss_ms: f64,
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

impl Row {
    /// The arrow's label: flags, then size and sequence (data), ACK number (pure ACK) or the kind.
    pub fn label(&self) -> String {
        let what = match self.kind {
            RowKind::Syn => (if self.from == Side::Client { "SYN" } else { "SYN-ACK" }).to_string(),
            RowKind::Data => format!("{} B  seq {}", self.len, self.seq),
            RowKind::Retransmission => format!("{} B  seq {}  RETRANSMISSION", self.len, self.seq),
            RowKind::OutOfOrder => format!("{} B  seq {}  out of order", self.len, self.seq),
            RowKind::Probe => "probe".to_string(),
            RowKind::Ack if self.window == 0 => format!("ACK {}  win 0", self.ack.unwrap_or(0)),
            RowKind::Ack => format!("ACK {}", self.ack.unwrap_or(0)),
            RowKind::Fin => "FIN".to_string(),
            RowKind::Rst => "RST".to_string(),
        };
        format!("[{}] {what}", flags_text(self.flags))
    }
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
            let what = r.label();
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

    #[test]
    fn the_text_ladder_labels_each_segment_with_flags_and_size() {
        let row = |kind, flags, len, ack| Row {
            frame: 1,
            ts_ns: 0,
            t_ms: 0.0,
            from: Side::Server,
            kind,
            flags,
            seq: 31007,
            len,
            ack,
            window: 0,
            mark: None,
        };
        let l = Ladder {
            connection: "1".into(),
            title: "t".into(),
            client: "c".into(),
            server: "s".into(),
            rows: vec![row(RowKind::Data, 0x18, 238, Some(1)), row(RowKind::Ack, 0x10, 0, Some(5))],
            truncated: false,
            times: None,
        };
        let mut out = String::new();
        l.render(&mut out);
        assert!(out.contains("- [P.] 238 B  seq 31007 --|"), "{out}");
        assert!(out.contains(" [.] ACK 5  win 0 --|"), "{out}");
        let json = serde_json::to_value(l.rows[0]).unwrap();
        assert_eq!(json["flags"], "P.");
    }
}
