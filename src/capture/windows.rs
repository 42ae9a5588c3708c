//! A pcap file read in windows of bytes that threads can read side by side:
//! window `k` holds the records that start in bytes `[k·size, (k+1)·size)`.
//! Where a window's first record starts is known from the window before it;
//! a window read before that one is done finds a start by looking for a
//! chain of sound records; whoever analyses it checks [`Window::start`]
//! against the end of the window before, and has it read again from there
//! if the two differ.

use super::pcap::{MAX_CAPLEN, Parser};
use super::{Capture, Head, LinkType, Packet, Step};

/// Records in a chain that make a guessed start believable.
const CHAIN: usize = 16;
/// The largest window: a record's offset in its window's bytes (which run up
/// to the longest record past its end) must fit in 32 bits.
const MAX_SIZE: u64 = 1 << 30;
/// Bytes read past a window's end for its last records (a longer one reads more).
const OVERHANG: usize = 4 << 10;

/// How a file's windows are read.
pub(crate) struct Windows<'c> {
    cap: &'c Capture,
    parser: Parser,
    /// The file's size when it was opened.
    len: u64,
    size: u64,
}

/// One window's records, read.
pub(crate) struct Window {
    /// Offset of its first record (`None`: a guess found none).
    pub(crate) start: Option<u64>,
    /// Offset after its last record: where the next window's first starts.
    pub(crate) end: u64,
    /// A record failed the checks (or the file ended early) at `end`.
    pub(crate) bad: bool,
    /// Why, as a walk of the file says it, when the record at `end` is
    /// damaged (not when the file shrank).
    pub(crate) damage: Option<String>,
    /// The file's bytes from `base`.
    base: u64,
    buf: Vec<u8>,
    /// Each record's offset in `buf`.
    at: Vec<u32>,
    /// Per sort, the indexes of the records given it (in order).
    sorts: Vec<Vec<u32>>,
}

/// A window's buffers, kept to be filled again (no page faults for fresh ones).
#[derive(Default)]
pub(crate) struct Spare {
    buf: Vec<u8>,
    at: Vec<u32>,
    sorts: Vec<Vec<u32>>,
}

impl<'c> Windows<'c> {
    /// `cap` in windows of `size` bytes: `None` unless it is a pcap file (or
    /// pcap bytes in memory) whose link type is supported, and `size` lies in
    /// 64 B–1 GiB (offsets in a window are 32 bits).
    pub(crate) fn new(cap: &'c Capture, size: u64) -> Option<Windows<'c>> {
        let len = cap.len()?;
        let mut head = [0u8; 24];
        if len < 24 || read_at(cap, 0, &mut head).ok()? < 24 {
            return None;
        }
        let Head::Ready(parser, _) = Parser::header(&head, true) else { return None };
        if !parser.link().supported() || !(64..=MAX_SIZE).contains(&size) {
            return None;
        }
        Some(Windows { cap, parser, len, size })
    }

    /// How many windows the file has.
    pub(crate) fn count(&self) -> u64 {
        self.len.div_ceil(self.size)
    }

    /// The link type of every frame.
    pub(crate) fn link(&self) -> LinkType {
        self.parser.link()
    }

    /// Reads window `k` into `spare`'s buffers, from the record at `from`
    /// (`None`: guessed), sorting each frame into one of `of` with `sort`. Never fails: a
    /// window that cannot be read whole says so in [`Window::bad`].
    pub(crate) fn read(
        &self,
        k: u64,
        from: Option<u64>,
        spare: Spare,
        of: usize,
        sort: impl Fn(&[u8]) -> usize,
    ) -> Window {
        let lo = if k == 0 { 24 } else { k * self.size };
        let hi = ((k + 1) * self.size).min(self.len);
        let base = from.unwrap_or(lo).min(self.len);
        let Spare { mut buf, mut at, mut sorts } = spare;
        at.clear();
        sorts.resize_with(of, Vec::new);
        sorts.iter_mut().for_each(Vec::clear);
        let mut w = Window { start: from, end: base, bad: false, damage: None, base, buf: Vec::new(), at, sorts };
        let want = (hi.max(base) + OVERHANG as u64).min(self.len) - base;
        w.bad = !self.fill(&mut buf, base, 0, want as usize);
        let mut pos = match from {
            Some(_) => 0,
            None => match self.guess(&buf, base, hi) {
                Some(p) => p,
                None => {
                    w.buf = buf;
                    return w;
                }
            },
        };
        w.start = Some(base + pos as u64);
        while !w.bad && base + (pos as u64) < hi {
            let rec = match self.parser.whole(&buf, pos) {
                Some(r) => Some(r),
                // Past the bytes read: read the longest record's worth more.
                None if (buf.len() as u64) < self.len - base => {
                    let more = (pos + 24 + MAX_CAPLEN as usize) as u64;
                    let kept = buf.len();
                    w.bad = !self.fill(&mut buf, base, kept, more.min(self.len - base) as usize);
                    self.parser.whole(&buf, pos)
                }
                None => None,
            };
            let Some((_, range, _)) = rec else {
                if !w.bad {
                    // The general walk says what is wrong (its checks are the same).
                    let eof = base + buf.len() as u64 == self.len;
                    if let Step::Damage(what) = self.parser.record(&buf[pos..], eof) {
                        w.damage = Some(what);
                    }
                }
                w.bad = true;
                break;
            };
            if let Some(list) = w.sorts.get_mut(sort(&buf[range.clone()])) {
                list.push(w.at.len() as u32);
            }
            w.at.push(pos as u32);
            pos = range.end;
        }
        w.end = base + pos as u64;
        w.buf = buf;
        w
    }

    /// Makes `buf` the `want` bytes at `base`, reading those after the first
    /// `kept` it already holds: false when the file now ends before them.
    fn fill(&self, buf: &mut Vec<u8>, base: u64, kept: usize, want: usize) -> bool {
        // A kept buffer is only resized when it grows (zeroing it costs).
        if buf.len() < want {
            buf.resize(want, 0);
        } else {
            buf.truncate(want);
        }
        let mut got = kept.min(want);
        while got < want {
            match read_at(self.cap, base + got as u64, &mut buf[got..]) {
                Ok(0) | Err(_) => {
                    buf.truncate(got);
                    return false;
                }
                Ok(n) => got += n,
            }
        }
        true
    }

    /// The first offset in `buf` (the file from `base`) before `hi` where a
    /// chain of sound records starts: [`CHAIN`] of them, or fewer that reach
    /// the window's end or the file's.
    fn guess(&self, buf: &[u8], base: u64, hi: u64) -> Option<usize> {
        let last = (hi.saturating_sub(base) as usize).min(buf.len());
        (0..last).find(|&p| {
            let mut at = p;
            for n in 0..CHAIN {
                match self.parser.whole(buf, at) {
                    Some((_, range, _)) => at = range.end,
                    None => return false,
                }
                if base + at as u64 >= hi || base + at as u64 == self.len {
                    return n >= 1 || base + at as u64 == self.len;
                }
            }
            true
        })
    }

    /// Frame `i` of window `w`.
    #[inline(always)]
    pub(crate) fn packet<'w>(&self, w: &'w Window, i: usize, frame: u64) -> Option<Packet<'w>> {
        let (ts_ns, range, orig_len) = self.parser.whole(&w.buf, *w.at.get(i)? as usize)?;
        Some(Packet { frame, ts_ns, link: self.parser.link(), data: &w.buf[range], orig_len })
    }
}

impl Window {
    /// Asks the cache for record `i`'s first bytes (a hint: any `i` will do).
    #[inline(always)]
    pub(crate) fn prefetch(&self, i: usize) {
        if let Some(&at) = self.at.get(i) {
            let p = self.buf.as_ptr().wrapping_add(at as usize);
            crate::prefetch::line(p);
            crate::prefetch::line(p.wrapping_add(64));
        }
    }

    /// Its records.
    pub(crate) fn len(&self) -> usize {
        self.at.len()
    }

    /// The indexes of the records sorted into `sort`.
    pub(crate) fn sorted(&self, sort: usize) -> &[u32] {
        self.sorts.get(sort).map_or(&[], Vec::as_slice)
    }

    /// Its buffers, to be filled again.
    pub(crate) fn spare(self) -> Spare {
        Spare { buf: self.buf, at: self.at, sorts: self.sorts }
    }

    /// Bytes of the file it read.
    pub(crate) fn bytes(&self) -> u64 {
        self.end - self.base
    }
}

/// Reads `buf.len()` bytes at `offset` of a file or of bytes in memory, as
/// far as its size at open: fewer only at that end, or if it shrank.
fn read_at(cap: &Capture, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let len = cap.len().unwrap_or(0);
    let n = (buf.len() as u64).min(len.saturating_sub(offset)) as usize;
    match &cap.bytes {
        super::Bytes::Mapped(m) => m.file.read_at(&mut buf[..n], offset),
        super::Bytes::Owned(v) => Ok(copy(v, offset, &mut buf[..n])),
        super::Bytes::Static(s) => Ok(copy(s, offset, &mut buf[..n])),
        super::Bytes::Stream(..) => Ok(0),
    }
}

fn copy(from: &[u8], offset: u64, to: &mut [u8]) -> usize {
    let o = offset as usize;
    to.copy_from_slice(&from[o..o + to.len()]);
    to.len()
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
                let offsets = |w: &Window| w.at.iter().map(|&a| w.base + u64::from(a)).collect::<Vec<_>>();
                if g.start == kn.start {
                    assert_eq!(
                        (offsets(&g), &g.sorts, g.end),
                        (offsets(kn), &kn.sorts, kn.end),
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
