//! The current exchange's first rows, kept compact while the exchange runs.
//! Most exchanges end without a ladder, and their rows are dropped: a full
//! 128-byte [`Row`] written for every packet only filled the cache with
//! lines that were rarely read again. A row here is 48 bytes; TLS records,
//! which few rows carry, sit apart.

use crate::detect::tls::TlsSegment;
use crate::record::{Mark, Row, RowKind};
use crate::tcp::{DataClass, Event, EventKind, Side};

/// A row without its TLS records and with the acknowledgement in one word.
#[derive(Clone, Copy)]
struct Slim {
    frame: u64,
    ts_ns: i64,
    seq: i64,
    /// [`NO_ACK`] when the segment had no ACK flag.
    ack: i64,
    window: u64,
    len: u32,
    from: Side,
    kind: RowKind,
    flags: u8,
    mark: Option<Mark>,
}

/// Rows a connection's first exchange makes room for: a short connection's.
const FIRST_ROWS: usize = 16;

/// No relative acknowledgement is this low (they start near 0 and move by
/// at most 2³¹ from the highest sequence seen).
const NO_ACK: i64 = i64::MIN;

/// Rows of one exchange.
#[derive(Default)]
pub(super) struct Rows {
    slim: Vec<Slim>,
    /// (index in `slim`, records) of the rows that carry TLS records.
    tls: Vec<(u32, TlsSegment)>,
}

/// The kind, sequence and length a row shows for an event.
#[inline]
fn kind(ev: &Event) -> (RowKind, i64, u32) {
    match ev.kind {
        EventKind::Syn { .. } => (RowKind::Syn, 0, 0),
        EventKind::Data { seq, len, class } => (
            match class {
                DataClass::New => RowKind::Data,
                DataClass::Retransmission { .. } => RowKind::Retransmission,
                DataClass::OutOfOrder => RowKind::OutOfOrder,
                DataClass::Probe => RowKind::Probe,
            },
            seq,
            len,
        ),
        EventKind::Ack => (RowKind::Ack, 0, 0),
        EventKind::Fin => (RowKind::Fin, 0, 0),
        EventKind::Rst => (RowKind::Rst, 0, 0),
    }
}

/// The full row of an event (TCP flags byte `flags`).
pub(super) fn row(ev: &Event, flags: u8) -> Row {
    let (kind, seq, len) = kind(ev);
    Row {
        frame: ev.frame,
        ts_ns: ev.ts_ns,
        t_ms: 0.0,
        from: ev.from,
        kind,
        flags,
        seq,
        len,
        ack: ev.ack,
        window: ev.window,
        mark: None,
        tls: None,
    }
}

impl Rows {
    /// Rows held.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.slim.len()
    }

    /// Adds the row of `ev`.
    #[inline]
    pub(super) fn push(&mut self, ev: &Event, flags: u8, tls: Option<&TlsSegment>, mark: Option<Mark>) {
        if let Some(t) = tls {
            self.tls.push((self.slim.len() as u32, *t));
        }
        let (kind, seq, len) = kind(ev);
        if self.slim.capacity() == 0 {
            // A short connection's rows at once: growing from 4 took three
            // allocations and two copies for each connection.
            self.slim.reserve_exact(FIRST_ROWS);
        }
        self.slim.push(Slim {
            frame: ev.frame,
            ts_ns: ev.ts_ns,
            seq,
            ack: ev.ack.unwrap_or(NO_ACK),
            window: ev.window,
            len,
            from: ev.from,
            kind,
            flags,
            mark,
        });
    }

    /// Marks the small segment and the late ACK of a Nagle stall.
    pub(super) fn mark_stall(&mut self, small_frame: u64, ack_frame: u64) {
        for r in &mut self.slim {
            if r.frame == small_frame {
                r.mark = Some(Mark::SmallUnacked);
            } else if r.frame == ack_frame {
                r.mark = Some(Mark::LateAck);
            }
        }
    }

    /// The client and server were swapped: every row's sender turns round.
    pub(super) fn turn(&mut self) {
        for r in &mut self.slim {
            r.from = r.from.other();
        }
    }

    /// Rows of frames `a..=b` now known to carry session tickets say so.
    pub(super) fn confirm_tickets(&mut self, a: u64, b: u64) {
        for (i, t) in &mut self.tls {
            if (a..=b).contains(&self.slim[*i as usize].frame) {
                t.confirm_tickets();
            }
        }
    }

    /// Writes the full rows into `out` (emptied first), for a ladder.
    pub(super) fn write(&self, out: &mut Vec<Row>) {
        out.clear();
        out.extend(self.slim.iter().map(|s| Row {
            frame: s.frame,
            ts_ns: s.ts_ns,
            t_ms: 0.0,
            from: s.from,
            kind: s.kind,
            flags: s.flags,
            seq: s.seq,
            len: s.len,
            ack: (s.ack != NO_ACK).then_some(s.ack),
            window: s.window,
            mark: s.mark,
            tls: None,
        }));
        for (i, t) in &self.tls {
            out[*i as usize].tls = Some(*t);
        }
    }

    /// Forgets every row (the buffers stay).
    #[inline]
    pub(super) fn clear(&mut self) {
        self.slim.clear();
        self.tls.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(frame: u64, from: Side, kind: EventKind, ack: Option<i64>) -> Event {
        Event { ts_ns: frame as i64 * 1000, frame, from, kind, ack, window: 1 << 20 }
    }

    #[test]
    fn slim_rows_come_back_as_the_full_rows_with_marks_and_turns() {
        let evs = [
            ev(1, Side::Client, EventKind::Syn { retransmit: false }, None),
            ev(2, Side::Client, EventKind::Data { seq: 1, len: 10, class: DataClass::New }, Some(1)),
            ev(3, Side::Server, EventKind::Ack, Some(11)),
            ev(4, Side::Client, EventKind::Data { seq: 11, len: 5, class: DataClass::OutOfOrder }, Some(1)),
        ];
        let mut rows = Rows::default();
        let mut want = Vec::new();
        for (i, e) in evs.iter().enumerate() {
            let mark = (i == 3).then_some(Mark::Held);
            rows.push(e, 0x10 + i as u8, None, mark);
            want.push(Row { mark, ..row(e, 0x10 + i as u8) });
        }
        rows.mark_stall(2, 3);
        want[1].mark = Some(Mark::SmallUnacked);
        want[2].mark = Some(Mark::LateAck);
        rows.turn();
        for w in &mut want {
            w.from = w.from.other();
        }
        let mut got = vec![row(&evs[0], 0)];
        rows.write(&mut got);
        let text = |r: &[Row]| format!("{r:?}");
        assert_eq!(text(&got), text(&want));
        rows.clear();
        rows.write(&mut got);
        assert!(got.is_empty());
    }
}
