//! A packet ladder in text (Wireshark's Flow Graph): client on the left,
//! server on the right, one row per segment.

use crate::record::{Ladder, Mark, Row, RowKind, flags_text};
use crate::tcp::Side;

/// The arrow's label: flags, then size and sequence (data), ACK number (pure ACK) or the kind.
pub fn label(r: &Row) -> String {
    let what = match r.kind {
        RowKind::Syn => (if r.from == Side::Client { "SYN" } else { "SYN-ACK" }).to_string(),
        RowKind::Data => format!("{} B  seq {}", r.len, r.seq),
        RowKind::Retransmission => format!("{} B  seq {}  RETRANSMISSION", r.len, r.seq),
        RowKind::OutOfOrder => format!("{} B  seq {}  out of order", r.len, r.seq),
        RowKind::Probe => "probe".to_string(),
        RowKind::Ack if r.window == 0 => format!("ACK {}  win 0", r.ack.unwrap_or(0)),
        RowKind::Ack => format!("ACK {}", r.ack.unwrap_or(0)),
        RowKind::Fin => "FIN".to_string(),
        RowKind::Rst => "RST".to_string(),
    };
    format!("[{}] {what}", flags_text(r.flags))
}

/// A ladder as text lines: the title, the two ends, an arrow per segment.
pub fn render(l: &Ladder, out: &mut String) {
    use std::fmt::Write;
    const W: usize = 46;
    let _ = writeln!(out, "{}", l.title);
    let client = format!("{} (client)", l.client);
    let _ = writeln!(out, "   frame   time ms  {client:<w$}  {} (server)", l.server, w = W + 1);
    for r in &l.rows {
        let what = label(r);
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
        let tls = r.tls.map(|t| format!("  {}", t.label())).unwrap_or_default();
        let _ = writeln!(out, "{:>8} {:>9.3}  {arrow}{tls}{note}", r.frame, r.t_ms);
    }
    if l.truncated {
        let _ = writeln!(out, "   … more segments not shown (raise --ladder-rows)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            tls: None,
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
        render(&l, &mut out);
        assert!(out.contains("- [P.] 238 B  seq 31007 --|"), "{out}");
        assert!(out.contains(" [.] ACK 5  win 0 --|"), "{out}");
        let json = serde_json::to_value(l.rows[0]).unwrap();
        assert_eq!(json["flags"], "P.");
    }
}
