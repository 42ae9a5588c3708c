//! The readers of one mapped file (a file split between shard threads is
//! read by each of them): pages are dropped from the mapping only behind
//! the last one. A reader more than [`LEAD`] windows
//! ahead of the last waits for it, so resident memory stays a few windows
//! however unevenly the readers go (the last one sets the pace anyway).

use super::WINDOW;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Windows a reader may run ahead of the last reader.
const LEAD: usize = 2;
/// Longest wait for the last reader at one window.
const MAX_WAIT: Duration = Duration::from_secs(1);

#[derive(Default)]
struct State {
    /// Each reader's offset; `None` once it is done.
    at: Vec<Option<usize>>,
    /// Pages before this offset were dropped.
    released: usize,
}

#[derive(Default)]
pub(super) struct Readers {
    state: Mutex<State>,
    moved: Condvar,
}

impl Readers {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new reader's slot. The first of a new set of readers starts the
    /// file's window over (an earlier walk may have dropped all of it).
    pub(super) fn join(&self) -> usize {
        let mut s = self.lock();
        if s.at.iter().all(Option::is_none) {
            *s = State::default();
        }
        s.at.push(Some(0));
        s.at.len() - 1
    }

    /// The reader in `slot` is done: nobody waits for it any more.
    pub(super) fn leave(&self, slot: usize) {
        let mut s = self.lock();
        if let Some(a) = s.at.get_mut(slot) {
            *a = None;
        }
        drop(s);
        self.moved.notify_all();
    }

    /// The reader in `slot` is at `offset` of the mapping: waits while it
    /// leads the last reader by more than [`LEAD`] windows, then says which
    /// pages to drop.
    pub(super) fn moved_to(&self, slot: usize, offset: usize) -> std::ops::Range<usize> {
        let mut s = self.lock();
        if let Some(a) = s.at.get_mut(slot) {
            *a = Some(offset);
        }
        self.moved.notify_all();
        let last = |s: &State| s.at.iter().flatten().copied().min().unwrap_or(offset);
        // The last reader moves on or leaves (its walk ends or fails); one
        // that holds its walk without moving is given up on after a while
        // (the pages in between then stay mapped a little longer).
        let until = Instant::now() + MAX_WAIT;
        while last(&s) + LEAD * WINDOW < offset {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s = self.moved.wait_timeout(s, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        let page = 4096;
        // A reader behind the pages dropped (one that started late) maps
        // them again as it reads, and they are dropped behind it in turn.
        s.released = s.released.min(offset / page * page);
        let upto = last(&s).saturating_sub(WINDOW) / page * page;
        let release = s.released..upto.max(s.released);
        s.released = release.end;
        release
    }
}

#[cfg(test)]
mod tests {
    use crate::capture::test_files::{resident_kb, zero_frames};
    use crate::capture::{Capture, WINDOW};

    /// Two readers of one mapped file: the one ahead drops no page the other
    /// has yet to read, waits (boundedly) once it leads by more than two
    /// windows, and pages go once both are past them.
    #[test]
    fn pages_are_dropped_behind_the_last_reader_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.pcap");
        zero_frames(&path, 4 * WINDOW);
        let cap = Capture::open(&path).unwrap();
        let (mut ahead, mut behind) = (cap.packets().unwrap(), cap.packets().unwrap());
        assert!(behind.next().is_some());
        let start = std::time::Instant::now();
        while ahead.offset() < (WINDOW * 5 / 2) as u64 {
            ahead.next().unwrap();
        }
        let waited = start.elapsed();
        let kb = |x: usize| (x / 1024) as u64;
        assert!(resident_kb(&path) >= kb(WINDOW * 5 / 2), "pages the reader behind has yet to read were dropped");
        assert!(waited >= std::time::Duration::from_millis(900), "the reader ahead did not wait: {waited:?}");
        while behind.offset() < (WINDOW * 5 / 2) as u64 {
            behind.next().unwrap();
        }
        assert!(resident_kb(&path) < kb(WINDOW * 5 / 2), "pages behind both readers stayed mapped");
    }
}
