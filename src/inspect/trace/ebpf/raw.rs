//! The ring's items as read while the trace runs: copied into chunks that
//! never move, parsed into records after the window.

use super::super::records::{self, Record};

/// Ring items as read (a record, or a CPU's stage of them), each after its
/// length as 4 bytes: copied while the trace runs, parsed after it. Kept in
/// chunks that are never moved (a growing `Vec` copies all it holds at each
/// doubling, while the traced server needs the CPU).
#[derive(Default)]
pub(super) struct Raw {
    chunks: Vec<Vec<u8>>,
    len: usize,
}

/// A chunk's size (an item larger than this gets a chunk of its own).
const RAW_CHUNK: usize = 4 << 20;

impl Raw {
    pub(super) fn push(&mut self, item: &[u8]) {
        let need = 4 + item.len();
        let last = match self.chunks.last_mut() {
            Some(c) if c.capacity() - c.len() >= need => c,
            _ => {
                self.chunks.push(Vec::with_capacity(RAW_CHUNK.max(need)));
                self.chunks.last_mut().expect("just pushed")
            }
        };
        last.extend_from_slice(&(item.len() as u32).to_ne_bytes());
        last.extend_from_slice(item);
        self.len += need;
    }

    /// The records of every item, in the order read.
    pub(super) fn records(&self) -> Vec<Record> {
        let mut out = Vec::with_capacity(self.len / 56);
        for chunk in &self.chunks {
            let mut b = &chunk[..];
            while let Some((len, rest)) = b.split_first_chunk::<4>() {
                let n = (u32::from_ne_bytes(*len) as usize).min(rest.len());
                out.extend(records::records_in(&rest[..n]));
                b = &rest[n..];
            }
        }
        out
    }
}

/// Appends `item` to `into` while it holds less than `room` bytes, else
/// counts its records in `overflow`.
pub(super) fn keep(into: &mut Raw, item: &[u8], room: usize, overflow: &mut u64) {
    if into.len < room {
        into.push(item);
    } else {
        *overflow += records::records_in(item).count() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::records::{CallRec, EV_CALL, EV_SOCK, EV_XMIT, SegRec, SockRec};
    use super::*;

    fn bytes<T: Copy>(v: &T) -> Vec<u8> {
        // SAFETY: the record types are plain integers, read as bytes.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }

    #[test]
    fn items_copied_while_tracing_are_the_records_after() {
        let call = |t| CallRec { kind: EV_CALL, t, ino: 3, ..CallRec::default() };
        let sock = SockRec { kind: EV_SOCK, ino: 3, lport: 80, ..SockRec::default() };
        let seg = SegRec { kind: EV_XMIT, ino: 3, t: 5, seq: 1, end: 9, ..SegRec::default() };
        let mut raw = Raw::default();
        raw.push(&bytes(&sock));
        raw.push(&bytes(&call(1)));
        // A stage: several records in one item.
        raw.push(&[bytes(&seg), bytes(&call(7)), bytes(&call(8))].concat());
        raw.push(&bytes(&call(9)));
        assert_eq!(
            raw.records(),
            [
                Record::Sock(sock),
                Record::Call(call(1)),
                Record::Segment(seg),
                Record::Call(call(7)),
                Record::Call(call(8)),
                Record::Call(call(9))
            ]
        );
    }

    #[test]
    fn items_spread_over_several_chunks_come_back_in_order() {
        let mut raw = Raw::default();
        let n = RAW_CHUNK / 50;
        for t in 0..n as u64 {
            raw.push(&bytes(&CallRec { kind: EV_CALL, t, ino: 3, ..CallRec::default() }));
        }
        assert!(raw.chunks.len() >= 2, "{} chunks", raw.chunks.len());
        let ts: Vec<u64> = raw.records().iter().map(Record::t).collect();
        assert_eq!(ts, (0..n as u64).collect::<Vec<_>>());
    }

    #[test]
    fn items_past_the_room_are_counted_not_kept() {
        let call = CallRec { kind: EV_CALL, t: 1, ino: 3, ..CallRec::default() };
        let stage = [bytes(&call), bytes(&call), bytes(&call)].concat();
        let (mut raw, mut over) = (Raw::default(), 0);
        keep(&mut raw, &stage, 100, &mut over);
        keep(&mut raw, &stage, 100, &mut over);
        assert_eq!((raw.records().len(), over), (3, 3));
    }
}
