//! A pcap file read in windows of bytes that threads can read side by side:
//! window `k` holds the records that start in bytes `[k·size, (k+1)·size)`.
//! Where a window's first record starts is known from the window before it;
//! a window read before that one is done finds a start by looking for a
//! chain of sound records; whoever analyses it checks [`Window::start`]
//! against the end of the window before, and has it read again from there
//! if the two differ.
//!
//! The records are read where they lie, in the file's mapping: copying them
//! into buffers the threads shared took 2-4 % more time and 3-7 % more CPU
//! (bench/RESULTS.md), likely because each copy first had to take the
//! buffer's lines back from the other core. A file that shrinks
//! under the reads reads as zeros from the cut (sigbus.rs): a window sorted
//! after it says so ([`Window::bad`] without damage), and [`Windows::cut`]
//! tells the shards when they are done; either sends the file back to one
//! thread, which reports the cut.

use super::pcap::Parser;
use super::{Bytes, Capture, Head, Packet, Step};

/// Records in a chain that make a guessed start believable.
const CHAIN: usize = 16;
/// The largest window: a record's offset in its window (which runs up to the
/// longest record past its end) must fit in 32 bits.
const MAX_SIZE: u64 = 1 << 30;
/// Bytes mapped ahead past a window's end, for its last records.
const OVERHANG: u64 = 4 << 10;
/// Bytes of a file's pages that one fault maps (Linux's `fault_around_bytes`,
/// 64 KiB unless changed in debugfs; with less, the sort faults in the rest).
const FAULT_AROUND: usize = 64 << 10;

/// How a file's windows are read.
pub(crate) struct Windows<'c> {
    cap: &'c Capture,
    /// The file's bytes, up to its size when it was opened.
    bytes: &'c [u8],
    parser: Parser,
    size: u64,
}

/// One window's records, sorted.
pub(crate) struct Window {
    /// Offset of its first record (`None`: a guess found none).
    pub(crate) start: Option<u64>,
    /// Offset after its last record: where the next window's first starts.
    pub(crate) end: u64,
    /// A record failed the checks (or the file shrank) at `end`.
    pub(crate) bad: bool,
    /// Why, as a walk of the file says it, when the record at `end` is
    /// damaged (not when the file shrank).
    pub(crate) damage: Option<String>,
    /// Offset its records' offsets count from.
    base: u64,
    /// Its records.
    len: u32,
    /// Per sort, the records given it (in order). Every record is in one:
    /// record `i` is found by its index ([`Windows::packet`]).
    sorts: Vec<Vec<Rec>>,
}

/// A record of a window, as sorted: its index and its offset, side by side,
/// so that whoever analyses it finds its bytes from its own list alone (a
/// separate list of offsets, read at each record, waited on the other core's
/// lines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(8))]
pub(crate) struct Rec {
    /// Its index in the window.
    pub(crate) index: u32,
    /// Its offset from the window's base.
    at: u32,
}

// `push_streamed` writes a Rec as one aligned 8-byte word.
const _: () = assert!(size_of::<Rec>() == 8 && align_of::<Rec>() == 8);

/// A window's lists, kept to be filled again.
#[derive(Default)]
pub(crate) struct Spare {
    sorts: Vec<Vec<Rec>>,
}

impl<'c> Windows<'c> {
    /// `cap` in windows of `size` bytes: `None` unless it is a pcap file (or
    /// pcap bytes in memory) whose link type is supported, and `size` lies in
    /// 64 B–1 GiB (offsets in a window are 32 bits).
    pub(crate) fn new(cap: &'c Capture, size: u64) -> Option<Windows<'c>> {
        let bytes = cap.bytes()?;
        let Head::Ready(parser, _) = Parser::header(bytes.get(..24)?, true) else { return None };
        if !parser.link().supported() || !(64..=MAX_SIZE).contains(&size) {
            return None;
        }
        Some(Windows { cap, bytes, parser, size })
    }

    /// How many windows the file has.
    pub(crate) fn count(&self) -> u64 {
        (self.bytes.len() as u64).div_ceil(self.size)
    }

    /// The link type of every frame.
    pub(crate) fn link(&self) -> super::LinkType {
        self.parser.link()
    }

    /// Whether the file shrank under the reads: records read since may hold
    /// zeros. A read of a page wholly past the new end faulted (sigbus.rs);
    /// one of the page the file now ends in did not, so its size is asked too.
    pub(crate) fn cut(&self) -> bool {
        match &self.cap.bytes {
            Bytes::Mapped(m) => m.guard.zeroed_from() != usize::MAX || m.size() < self.bytes.len() as u64,
            _ => false,
        }
    }

    /// Sorts window `k`'s records into `spare`'s lists, from the record at
    /// `from` (`None`: guessed), each into one of `of` with `sort` (which
    /// returns less than `of`). Never fails: a window that cannot be read
    /// whole says so in [`Window::bad`].
    pub(crate) fn read(
        &self,
        k: u64,
        from: Option<u64>,
        spare: Spare,
        of: usize,
        sort: impl Fn(&[u8]) -> usize,
    ) -> Window {
        let len = self.bytes.len() as u64;
        let lo = if k == 0 { 24 } else { k * self.size };
        let hi = ((k + 1) * self.size).min(len);
        let base = from.unwrap_or(lo).min(len);
        let Spare { mut sorts } = spare;
        sorts.resize_with(of, Vec::new);
        sorts.iter_mut().for_each(Vec::clear);
        let mut w = Window { start: from, end: base, bad: false, damage: None, base, len: 0, sorts };
        self.map_ahead(base, hi.max(base) + OVERHANG);
        let buf = &self.bytes[base as usize..];
        let pos = match from {
            Some(_) => 0,
            None => match self.guess(buf, base, hi) {
                Some(p) => p,
                None => return self.checked(w),
            },
        };
        w.start = Some(base + pos as u64);
        let stop = hi.saturating_sub(base) as usize;
        let (n, pos) = if self.parser.usual() {
            sort_records::<true>(self.parser, buf, pos, stop, &mut w, &sort)
        } else {
            sort_records::<false>(self.parser, buf, pos, stop, &mut w, &sort)
        };
        streamed();
        w.len = n;
        w.end = base + pos as u64;
        self.checked(w)
    }

    /// `w`, marked unreadable if the file shrank meanwhile (zeros are not damage).
    fn checked(&self, mut w: Window) -> Window {
        if self.cut() {
            (w.bad, w.damage) = (true, None);
        }
        w
    }

    /// Maps `[from, to)` of a mapped file before the sort reads it, by
    /// reading a byte every [`FAULT_AROUND`] bytes: each fault maps that many.
    /// `MADV_POPULATE_READ` faults the same way and then walks every page
    /// again (`get_user_pages`: ~12 ms of two threads' CPU on the bench
    /// capture); leaving the faults to the sort, or reading a byte of every
    /// page, was no faster than the populate (bench/RESULTS.md).
    fn map_ahead(&self, from: u64, to: u64) {
        if matches!(self.cap.bytes, Bytes::Mapped(_)) {
            let (from, to) = (from as usize, (to as usize).min(self.bytes.len()));
            let touch = |at: usize| {
                // SAFETY: in bounds of the mapping; a fault past a file that
                // shrank is handled (sigbus.rs), and `checked` then says so.
                unsafe { std::ptr::read_volatile(self.bytes.as_ptr().add(at)) };
            };
            if from < to {
                touch(from);
            }
            let mut at = (from | (FAULT_AROUND - 1)) + 1;
            while at < to {
                touch(at);
                at += FAULT_AROUND;
            }
        }
    }

    /// Drops this process's mapping of the whole pages in bytes `[from, to)`
    /// (the page cache keeps them): every thread is done with them, and
    /// resident memory stays at the windows in use, not the file.
    pub(crate) fn release(&self, from: u64, to: u64) {
        if let Bytes::Mapped(m) = &self.cap.bytes {
            let page = usize::try_from(procfs::page_size()).unwrap_or(4096).max(1);
            let (from, to) = (from as usize / page * page, to as usize / page * page);
            if from < to {
                // SAFETY: no slice into these bytes is kept (every thread is
                // done with the window). For a read-only private file mapping,
                // DONTNEED only drops our page-table entries: a later access
                // would read the same file bytes again.
                let _ = unsafe { m.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, to - from) };
            }
        }
    }

    /// The first offset in `buf` (the file from `base`) before `hi` where a
    /// chain of sound records starts: [`CHAIN`] of them, or fewer that reach
    /// the window's end or the file's.
    fn guess(&self, buf: &[u8], base: u64, hi: u64) -> Option<usize> {
        let len = self.bytes.len() as u64;
        let last = (hi.saturating_sub(base) as usize).min(buf.len());
        (0..last).find(|&p| {
            let mut at = p;
            for n in 0..CHAIN {
                match self.parser.whole(buf, at) {
                    Some((_, range, _)) => at = range.end,
                    None => return false,
                }
                if base + at as u64 >= hi || base + at as u64 == len {
                    return n >= 1 || base + at as u64 == len;
                }
            }
            true
        })
    }

    /// Frame `i` of window `w`, found by its index in the sorts' lists
    /// (asked for once a window and at each sweep, not per record: the sort
    /// then keeps one list, not two).
    pub(crate) fn packet<'w>(&'w self, w: &Window, i: usize, frame: u64) -> Option<Packet<'w>> {
        let i = u32::try_from(i).ok()?;
        let r = w.sorts.iter().find_map(|l| l.binary_search_by_key(&i, |r| r.index).ok().map(|at| l[at]))?;
        self.records(w).packet(r, frame)
    }

    /// Window `w`'s records, to be read in the order of its sorts' lists.
    pub(crate) fn records<'w>(&'w self, w: &Window) -> Records<'w> {
        Records { buf: &self.bytes[w.base as usize..], parser: self.parser }
    }
}

/// A window's records as a shard reads them: its bytes and the parser, held
/// by value (read through [`Windows`] at every record, each was a load of a
/// load).
#[derive(Clone, Copy)]
pub(crate) struct Records<'w> {
    /// The file from the window's base.
    buf: &'w [u8],
    parser: Parser,
}

impl<'w> Records<'w> {
    /// Sorted record `r`, as frame `frame`.
    #[inline(always)]
    pub(crate) fn packet(&self, r: Rec, frame: u64) -> Option<Packet<'w>> {
        let (ts_ns, range, orig_len) = self.parser.whole(self.buf, r.at as usize)?;
        Some(Packet { frame, ts_ns, link: self.parser.link(), data: &self.buf[range], orig_len })
    }

    /// Asks the cache for sorted record `r`'s first bytes (a hint).
    #[inline(always)]
    pub(crate) fn prefetch(&self, r: Rec) {
        let p = self.buf.as_ptr().wrapping_add(r.at as usize);
        crate::prefetch::line(p);
        crate::prefetch::line(p.wrapping_add(64));
    }
}

/// Sorts the records of `buf` from `pos` until one starts at `stop` or
/// later into `w`'s lists, with `sort` (clamped to them): how many, and where
/// the next starts. A record that is not whole ends the window (`w.bad`, and
/// `w.damage` when the walk calls it damage). `USUAL`: the file's records
/// have the usual layout, whose fields are then constants in the loop. Not
/// inlined: in the shard's loop its values would live on the stack.
#[inline(never)]
fn sort_records<const USUAL: bool>(
    parser: Parser,
    buf: &[u8],
    mut pos: usize,
    stop: usize,
    w: &mut Window,
    sort: &impl Fn(&[u8]) -> usize,
) -> (u32, usize) {
    let parser = if USUAL { parser.as_usual() } else { parser };
    let last = w.sorts.len().saturating_sub(1);
    let mut n = 0;
    while pos < stop {
        let Some((_, range, _)) = parser.whole(buf, pos) else {
            // The general walk says what is wrong (its checks are the same).
            if let Step::Damage(what) = parser.record(&buf[pos..], true) {
                w.damage = Some(what);
            }
            w.bad = true;
            break;
        };
        crate::prefetch::ahead(buf, range.end);
        // Clamped: every record must be in a list, where `packet` finds it.
        let to = sort(&buf[range.clone()]).min(last);
        if let Some(list) = w.sorts.get_mut(to) {
            push_streamed(list, Rec { index: n, at: pos as u32 });
        }
        n += 1;
        pos = range.end;
    }
    (n, pos)
}

/// Appends `r` to `list` past the cache. The list's lines were last read by
/// the shard that analysed its window, often on the other core: a plain
/// store first takes each line back from that core's cache, which cost the
/// sort up to a third of its time in the VM's slower regime (bench/RESULTS.md).
/// The shard that reads the list next reads it from memory, in order.
/// [`streamed`] must follow before anything reads the list.
#[inline(always)]
fn push_streamed(list: &mut Vec<Rec>, r: Rec) {
    #[cfg(target_arch = "x86_64")]
    {
        if list.len() == list.capacity() {
            // Growing moves the entries streamed so far: a read of them.
            streamed();
            list.reserve(1);
        }
        let bits = (u64::from(r.at) << 32 | u64::from(r.index)) as i64;
        // SAFETY: there is room for one more Rec (reserved above), which is
        // `repr(C, align(8))`: 8 bytes, `index` in the low four, then `at`,
        // and the list's entries are 8-aligned as `movnti` wants them.
        unsafe {
            std::arch::x86_64::_mm_stream_si64(list.as_mut_ptr().add(list.len()).cast(), bits);
            list.set_len(list.len() + 1);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    list.push(r);
}

/// Orders the streamed stores before any later access to what they wrote
/// (Rust's rule for them, from this thread too) and before the stores that
/// hand the lists on.
#[inline(always)]
fn streamed() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a store fence reads and writes nothing.
    unsafe {
        std::arch::x86_64::_mm_sfence();
    }
}

impl Window {
    /// Its records.
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    /// The records sorted into `sort`.
    pub(crate) fn sorted(&self, sort: usize) -> &[Rec] {
        self.sorts.get(sort).map_or(&[], Vec::as_slice)
    }

    /// Its lists, to be filled again.
    pub(crate) fn spare(self) -> Spare {
        Spare { sorts: self.sorts }
    }

    /// Bytes of the file it covers.
    pub(crate) fn bytes(&self) -> u64 {
        self.end - self.base
    }

    /// Offset of its first byte.
    pub(crate) fn base(&self) -> u64 {
        self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(out: &mut Vec<u8>, ts_s: u32, data: &[u8]) {
        for v in [ts_s, 0, data.len() as u32, data.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(data);
    }

    /// wwr_nagle.pcap with a large frame in its middle whose bytes are a
    /// chain of sound-looking records.
    fn with_fake_records() -> Vec<u8> {
        let real = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/wwr_nagle.pcap")).unwrap();
        let (packets, _) = crate::capture::all_packets(&real).unwrap();
        let mut fake = Vec::new();
        while fake.len() < 9000 {
            record(&mut fake, 7, &[0x55; 100]);
        }
        let mut out = real[..24].to_vec();
        for (i, p) in packets.iter().enumerate() {
            if i == packets.len() / 2 {
                record(&mut out, 1, &fake);
            }
            record(&mut out, (p.ts_ns / 1_000_000_000) as u32, p.data);
        }
        out
    }

    /// Record `i` of `w`, looked for in every list.
    fn find(w: &Window, i: usize) -> Rec {
        let mut found = w.sorts.iter().flatten().filter(|r| r.index as usize == i);
        let r = *found.next().expect("every record is in a list");
        assert!(found.next().is_none(), "and in one only");
        r
    }

    /// Every frame of a window, asked for by its index, is the frame a walk
    /// of the file gives at that place (the first, the last, the ones
    /// between), whichever list holds it; in a file of the usual layout and
    /// in a big-endian one (which the sort reads with its general loop).
    #[test]
    fn a_frame_is_found_by_its_index() {
        let be = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/wwr_nagle_be.pcap")).unwrap();
        for (bytes, size, of) in [
            (with_fake_records(), 1000, 2),
            (with_fake_records(), 3000, 3),
            (with_fake_records(), 4096, 1),
            (be.clone(), 700, 2),
            (be, 4096, 3),
        ] {
            let (all, _) = crate::capture::all_packets(&bytes).unwrap();
            let cap = Capture::from_bytes("fake.pcap", bytes.clone());
            assert_eq!(Windows::new(&cap, size).unwrap().parser.usual(), bytes[0] == 0xd4);
            let w = Windows::new(&cap, size).unwrap();
            let mut frame = 0;
            let mut from = 24;
            for k in 0..w.count() {
                let win = w.read(k, Some(from), Spare::default(), of, |d| d.len() % of);
                from = win.end;
                for i in 0..win.len() {
                    frame += 1;
                    let p = w.packet(&win, i, frame as u64).expect("found");
                    let want = &all[frame - 1];
                    assert_eq!((p.ts_ns, p.data, p.orig_len), (want.ts_ns, want.data, want.orig_len), "frame {frame}");
                    assert_eq!(find(&win, i).index as usize, i);
                }
                assert!(w.packet(&win, win.len(), 0).is_none(), "none past the last");
            }
            assert_eq!(frame, all.len(), "windows of {size}");
        }
    }

    /// Each window read from where the one before it ended.
    fn in_order(w: &Windows<'_>) -> Vec<Window> {
        let mut from = 24;
        (0..w.count())
            .map(|k| {
                let r = w.read(k, Some(from), Spare::default(), 2, |d| d.len() % 2);
                from = r.end;
                r
            })
            .collect()
    }

    /// A guessed start that is right gives the same window as the known
    /// one; inside the large frame the guess is wrong (and says a start the
    /// known chain does not have, so the shards read it again).
    #[test]
    fn a_guess_is_the_known_start_or_shows_it_is_not() {
        let cap = Capture::from_bytes("fake.pcap", with_fake_records());
        let mut wrong = 0;
        for size in [1000, 3000, 4096] {
            let w = Windows::new(&cap, size).unwrap();
            let known = in_order(&w);
            assert_eq!(known.last().unwrap().end, cap.len().unwrap(), "the chain ends at the file's end");
            assert!(known.iter().all(|k| !k.bad));
            for (k, kn) in known.iter().enumerate().skip(1) {
                let g = w.read(k as u64, None, Spare::default(), 2, |d| d.len() % 2);
                let offsets = |w: &Window| (0..w.len()).map(|i| w.base + u64::from(find(w, i).at)).collect::<Vec<_>>();
                // Each sorted record's index, and its offset in the file (the
                // two windows count their offsets from different bases).
                let sorts = |w: &Window| {
                    let rec = |r: &Rec| (r.index, w.base + u64::from(r.at));
                    w.sorts.iter().map(|l| l.iter().map(rec).collect::<Vec<_>>()).collect::<Vec<_>>()
                };
                if g.start == kn.start {
                    assert_eq!(
                        (offsets(&g), sorts(&g), g.end),
                        (offsets(kn), sorts(kn), kn.end),
                        "window {k} of {size}"
                    );
                } else {
                    wrong += 1;
                }
            }
        }
        assert!(wrong >= 3, "{wrong} wrong guesses");
    }

    /// A file cut inside its last record: the window read from its known
    /// start says why as a walk of the file does.
    #[test]
    fn a_cut_record_is_the_walks_damage() {
        let mut bytes = with_fake_records();
        bytes.truncate(bytes.len() - 7);
        let cap = Capture::from_bytes("cut.pcap", bytes.clone());
        let mut walk = cap.packets().unwrap();
        let mut n = 0;
        while walk.next().is_some() {
            n += 1;
        }
        let damage = walk.damage().unwrap().clone();
        let w = Windows::new(&cap, 4096).unwrap();
        let known = in_order(&w);
        let last = known.iter().find(|k| k.bad).unwrap();
        assert_eq!(last.damage.as_deref(), Some(damage.what.as_str()));
        assert_eq!(last.end, damage.offset);
        let upto: usize = known.iter().take_while(|k| !k.bad).map(Window::len).sum::<usize>() + last.len();
        assert_eq!(upto, n);
    }

    /// A mapped file cut under the reads: a window past the cut reads zeros,
    /// which is not damage; it is not whole, and `cut` says the file shrank
    /// (so the shards give the file back to one thread, which reports it).
    #[test]
    fn a_file_cut_under_the_mapping_is_not_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.pcap");
        std::fs::write(&path, with_fake_records()).unwrap();
        let cap = Capture::open(&path).unwrap();
        let w = Windows::new(&cap, 4096).unwrap();
        let known = in_order(&w);
        assert!(known.iter().all(|k| !k.bad) && !w.cut());
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(8192).unwrap();
        let last = w.read(w.count() - 1, None, Spare::default(), 2, |d| d.len() % 2);
        assert!(last.bad && last.damage.is_none(), "bad {}, damage {:?}", last.bad, last.damage);
        let again = w.read(w.count() - 2, known[known.len() - 2].start, Spare::default(), 2, |d| d.len() % 2);
        assert!(again.bad && again.damage.is_none());
        assert!(w.cut());
    }

    /// Only pcap files of a supported link type are read in windows.
    #[test]
    fn only_pcap_of_a_supported_link() {
        let ng = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/nagle_ns.pcapng")).unwrap();
        assert!(Windows::new(&Capture::from_bytes("a.pcapng", ng), 4096).is_none());
        let mut odd = with_fake_records();
        odd[20] = 147;
        assert!(Windows::new(&Capture::from_bytes("a.pcap", odd), 4096).is_none());
        assert!(Windows::new(&Capture::from_bytes("a.pcap", vec![0xd4, 0xc3, 0xb2]), 4096).is_none());
        let ok = Capture::from_bytes("a.pcap", with_fake_records());
        assert!(Windows::new(&ok, 4096).is_some());
        assert!(Windows::new(&ok, 63).is_none() && Windows::new(&ok, (1 << 30) + 1).is_none());
    }
}
