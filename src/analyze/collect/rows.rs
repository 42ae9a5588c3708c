//! The current exchange's first rows, kept as their events while the
//! exchange runs. Most exchanges end without a ladder, and their rows are
//! dropped: a full 128-byte [`Row`] built for every packet cost work and
//! cache lines for rows rarely read again. A row here is its event copied
//! whole (no field mapped); TLS records, which few rows carry, sit apart.

use crate::detect::tls::TlsSegment;
use crate::record::{Mark, Row, RowKind};
use crate::tcp::{DataClass, Event, EventKind};

/// A row as the event it came from, with its TCP flags and mark: the event
/// is copied whole (a few wide moves), and turned into a [`Row`] only for
/// the few exchanges whose ladder is kept.
#[derive(Clone, Copy)]
struct Entry {
    ev: Event,
    flags: u8,
    mark: Option<Mark>,
}

/// Rows a connection's first exchange makes room for: a short connection's.
const FIRST_ROWS: usize = 16;

/// Rows of one exchange.
#[derive(Default)]
pub(super) struct Rows {
    entries: Vec<Entry>,
    /// (index in `entries`, records) of the rows that carry TLS records.
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
        self.entries.len()
    }

    /// Adds the row of `ev`.
    #[inline]
    pub(super) fn push(&mut self, ev: &Event, flags: u8, tls: Option<&TlsSegment>, mark: Option<Mark>) {
        if let Some(t) = tls {
            self.tls.push((self.entries.len() as u32, *t));
        }
        if self.entries.len() == self.entries.capacity() {
            self.make_room();
        }
        // Room was made above: the push's own check is dropped by the compiler.
        self.entries.push(Entry { ev: *ev, flags, mark });
    }

    /// Room for one more row: a short connection's rows at once at first
    /// (growing from 4 took three allocations and two copies for each
    /// connection), then as a `Vec` grows.
    #[cold]
    fn make_room(&mut self) {
        if self.entries.capacity() == 0 {
            self.entries.reserve_exact(FIRST_ROWS);
        } else {
            self.entries.reserve(1);
        }
    }

    /// Marks the small segment and the late ACK of a Nagle stall.
    pub(super) fn mark_stall(&mut self, small_frame: u64, ack_frame: u64) {
        for r in &mut self.entries {
            if r.ev.frame == small_frame {
                r.mark = Some(Mark::SmallUnacked);
            } else if r.ev.frame == ack_frame {
                r.mark = Some(Mark::LateAck);
            }
        }
    }

    /// The client and server were swapped: every row's sender turns round.
    pub(super) fn turn(&mut self) {
        for r in &mut self.entries {
            r.ev.from = r.ev.from.other();
        }
    }

    /// Rows of frames `a..=b` now known to carry session tickets say so.
    pub(super) fn confirm_tickets(&mut self, a: u64, b: u64) {
        for (i, t) in &mut self.tls {
            if (a..=b).contains(&self.entries[*i as usize].ev.frame) {
                t.confirm_tickets();
            }
        }
    }

    /// Writes the full rows into `out` (emptied first), for a ladder.
    pub(super) fn write(&self, out: &mut Vec<Row>) {
        out.clear();
        out.extend(self.entries.iter().map(|s| Row { mark: s.mark, ..row(&s.ev, s.flags) }));
        for (i, t) in &self.tls {
            out[*i as usize].tls = Some(*t);
        }
    }

    /// Forgets every row (the buffers stay).
    #[inline]
    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.tls.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::Side;

    fn ev(frame: u64, from: Side, kind: EventKind, ack: Option<i64>) -> Event {
        Event { ts_ns: frame as i64 * 1000, frame, from, kind, ack, window: 1 << 20 }
    }

    #[test]
    fn rows_kept_as_events_come_back_as_the_full_rows_with_marks_and_turns() {
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
