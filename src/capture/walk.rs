//! The walk over a capture's records, the same for mapped bytes and streams:
//! the format parser looks at the bytes at the read position; a stream that
//! holds too few is refilled ("need more bytes" is damage only at the end).

use super::source::{Bytes, Fill, Slice, Source, Stream};
use super::{Damage, Format, LinkType, OpenError, Packet, WINDOW, format_of, hex, pcap, pcapng};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What a format parser makes of a record.
pub(crate) enum Record<'a> {
    Packet {
        ts_ns: i64,
        link: LinkType,
        data: &'a [u8],
        orig_len: u32,
    },
    /// A block that carries no packet (interface description, statistics…).
    Skip,
    /// A packet block naming an interface that was never described: skipped.
    Undeclared,
}

/// What a format parser makes of the bytes at the read position.
pub(crate) enum Step<'a> {
    /// A record of this many bytes.
    Record(usize, Record<'a>),
    /// The record is longer than the bytes at hand: at least this many are needed.
    Need(usize),
    /// The bytes here are not a record.
    Damage(String),
}

/// What a format parser makes of the file header.
pub(crate) enum Head<P> {
    /// The parser, and the header's size (0: the header is read again as a record).
    Ready(P, usize),
    Need(usize),
    Bad(OpenError),
}

enum Parser {
    Pcap(pcap::Parser),
    PcapNg(pcapng::Parser),
}

/// What [`Parser::quick`] reads of a record: (time, link type, data range,
/// packet length, record end).
type Quick = (i64, LinkType, std::ops::Range<usize>, u32, usize);

/// [`Packets::next_unless`]'s loop, for records that `quick` reads; `None`
/// where it reads none (then the general walk goes on).
#[inline(always)]
fn pass_over<'s>(
    s: &mut Slice<'s>,
    walk: &mut Walk,
    every: u64,
    until: u64,
    mut pass: impl FnMut(LinkType, &[u8]) -> bool,
    mut quick: impl FnMut(&mut Parser, &'s [u8], usize) -> Option<Quick>,
) -> Option<(Packet<'s>, bool)> {
    while !walk.done
        && let Some((ts_ns, link, range, orig_len, end)) = quick(&mut walk.parser, s.bytes, s.pos)
        && s.check(end).is_ok()
    {
        let frame = walk.past_mapped(s, end);
        let data = &s.bytes[range];
        let asked = frame & (every - 1) != 0 && frame != 1 && frame < until;
        if !asked || !pass(link, data) {
            return Some((Packet { frame, ts_ns, link, data, orig_len }, asked));
        }
    }
    None
}

impl Parser {
    /// The record at `at` of bytes in memory when it is a whole, sound
    /// packet record (pcap) or enhanced packet block (pcapng): (time, link
    /// type, data range, packet length, record end). `None` leaves it to the
    /// general walk.
    #[inline(always)]
    fn quick(&mut self, bytes: &[u8], at: usize) -> Option<Quick> {
        match self {
            Parser::Pcap(p) => p.whole(bytes, at).map(|(ts_ns, range, orig_len)| {
                let end = range.end;
                (ts_ns, p.link(), range, orig_len, end)
            }),
            Parser::PcapNg(p) => p.whole(bytes, at),
        }
    }
}

/// The packets of a capture, one at a time (each borrowed until the next).
/// Stops at the first damaged record; [`Packets::damage`] then says where and why.
pub struct Packets<'a> {
    src: Source<'a>,
    walk: Walk,
}

/// The walk's state, apart from its bytes (so both can be borrowed at once).
struct Walk {
    parser: Parser,
    frame: u64,
    damage: Option<Damage>,
    /// Packet blocks skipped for naming an undeclared interface, and where the first was.
    undeclared: Option<(u64, u64)>,
    stop: Option<&'static AtomicBool>,
    stopped: bool,
    done: bool,
    progress: Option<Arc<AtomicU64>>,
}

/// Every packet of bytes in memory, and where the walk stopped early, if it did.
pub fn all_packets(bytes: &[u8]) -> Result<(Vec<Packet<'_>>, Option<Damage>), OpenError> {
    let mut walk = Packets::new(bytes)?;
    let mut out = Vec::new();
    while let Some(p) = walk.next() {
        // The walk lends its packets; a slice walk's data lies in `bytes` itself.
        let at = p.data.as_ptr() as usize - bytes.as_ptr() as usize;
        out.push(Packet { data: &bytes[at..at + p.data.len()], ..p });
    }
    Ok((out, walk.walk.damage))
}

impl<P> Head<P> {
    fn map<Q>(self, f: impl FnOnce(P) -> Q) -> Head<Q> {
        match self {
            Head::Ready(p, n) => Head::Ready(f(p), n),
            Head::Need(n) => Head::Need(n),
            Head::Bad(e) => Head::Bad(e),
        }
    }
}

impl<'a> Packets<'a> {
    /// Walks bytes in memory (recognises pcap or pcapng by magic number).
    pub fn new(bytes: &'a [u8]) -> Result<Packets<'a>, OpenError> {
        Packets::start(Source::Slice(Slice::new(bytes, None)), None)
    }

    /// Reads the file header; a stream is read until it is complete. `stop`
    /// ends a wait for bytes (see [`Packets::stopped`]).
    pub(crate) fn start(mut src: Source<'a>, stop: Option<&'static AtomicBool>) -> Result<Packets<'a>, OpenError> {
        let parser = match &mut src {
            Source::Slice(s) => header(s, stop)?,
            Source::Stream(s) => header(s, stop)?,
        };
        let p = Packets {
            src,
            walk: Walk {
                parser,
                frame: 0,
                damage: None,
                undeclared: None,
                stop,
                stopped: false,
                done: false,
                progress: None,
            },
        };
        if let Source::Slice(s) = &p.src {
            s.window();
        }
        Ok(p)
    }

    /// Adds the bytes walked to `counter` every few MB (files, not streams), for a progress bar.
    pub fn count_into(&mut self, counter: Arc<AtomicU64>) {
        match &mut self.src {
            // A stream's size is unknown: nothing to count against.
            Source::Stream(_) => {}
            Source::Slice(_) => self.walk.progress = Some(counter),
        }
    }

    /// The next packet, or `None` at the end, at damage, or once stopped.
    #[inline(always)]
    #[allow(clippy::should_implement_trait)] // a lending iterator: the packet borrows the walk
    pub fn next(&mut self) -> Option<Packet<'_>> {
        // Most records: a whole, sound pcap record or pcapng packet block in
        // memory (the mapped file, or already in a stream's buffer), read
        // without the general walk (which reads the rest, refills, and says
        // what is damaged).
        if !self.walk.done {
            match &mut self.src {
                Source::Slice(s) => {
                    if let Some((ts_ns, link, range, orig_len, end)) = self.walk.parser.quick(s.bytes, s.pos)
                        && s.check(end).is_ok()
                    {
                        let frame = self.walk.past_mapped(s, end);
                        return Some(Packet { frame, ts_ns, link, data: &s.bytes[range], orig_len });
                    }
                }
                Source::Stream(s) => {
                    if let Some((ts_ns, link, range, orig_len, end)) = self.walk.parser.quick(s.storage(), s.cursor()) {
                        self.walk.past_buffered(s, end);
                        return Some(self.buffered(ts_ns, link, range, orig_len));
                    }
                }
            }
        }
        self.next_general()
    }

    /// Gives `f` every packet in turn, as [`Packets::next`] would. The loop
    /// over whole pcap records (mapped, or in a stream's buffer) runs here,
    /// its state in locals: called once a packet, `next` reloads it from the
    /// walk every time.
    #[inline(always)]
    pub fn for_each(&mut self, mut f: impl FnMut(&Packet<'_>)) {
        loop {
            let pcap = match &self.walk.parser {
                Parser::Pcap(p) => Some(*p),
                Parser::PcapNg(_) => None,
            };
            let walk = &mut self.walk;
            match (&mut self.src, pcap) {
                (Source::Slice(s), Some(pcap)) => {
                    let link = pcap.link();
                    while !walk.done
                        && let Some((ts_ns, range, orig_len)) = pcap.whole(s.bytes, s.pos)
                        && s.check(range.end).is_ok()
                    {
                        let frame = walk.past_mapped(s, range.end);
                        f(&Packet { frame, ts_ns, link, data: &s.bytes[range], orig_len });
                    }
                }
                (Source::Stream(s), Some(pcap)) => {
                    let link = pcap.link();
                    while !walk.done
                        && let Some((ts_ns, range, orig_len)) = pcap.whole(s.storage(), s.cursor())
                    {
                        let frame = walk.past_buffered(s, range.end);
                        f(&Packet { frame, ts_ns, link, data: &s.storage()[range], orig_len });
                    }
                }
                _ => {}
            }
            // The rest (pcapng, refills, damage, the end): a packet at a time.
            let Some(p) = self.next() else { return };
            f(&p);
        }
    }

    /// The packet whose data is `range` of the stream's buffer.
    fn buffered(&self, ts_ns: i64, link: LinkType, range: std::ops::Range<usize>, orig_len: u32) -> Packet<'_> {
        let data = match &self.src {
            Source::Stream(s) => &s.storage()[range],
            Source::Slice(s) => &s.bytes[range],
        };
        Packet { frame: self.walk.frame, ts_ns, link, data, orig_len }
    }

    /// Like [`Packets::next`], but passes over the whole records (pcap) or
    /// enhanced packet blocks (pcapng) of a file in memory whose frame `pass`
    /// says to (given its link type and data), except every `every`-th frame
    /// (a power of two), the first, and those from frame `until` on. The flag
    /// says whether `pass` was asked about the packet (and said no).
    #[inline(always)]
    pub fn next_unless(
        &mut self,
        every: u64,
        until: u64,
        pass: impl FnMut(LinkType, &[u8]) -> bool,
    ) -> Option<(Packet<'_>, bool)> {
        if let Source::Slice(s) = &mut self.src {
            let found = match &self.walk.parser {
                // The pcap parser is copied out of the walk: its loop then keeps it in registers.
                Parser::Pcap(pcap) => {
                    let (pcap, link) = (*pcap, pcap.link());
                    pass_over(s, &mut self.walk, every, until, pass, |_, bytes, at| {
                        let (ts_ns, range, orig_len) = pcap.whole(bytes, at)?;
                        let end = range.end;
                        Some((ts_ns, link, range, orig_len, end))
                    })
                }
                Parser::PcapNg(_) => pass_over(s, &mut self.walk, every, until, pass, Parser::quick),
            };
            if found.is_some() {
                return found;
            }
        }
        self.next().map(|p| (p, false))
    }

    /// The next packet by the general walk: what the quick paths leave
    /// (other blocks, damage, bytes a stream has yet to read).
    #[inline(never)]
    pub(crate) fn next_general(&mut self) -> Option<Packet<'_>> {
        match &mut self.src {
            Source::Slice(s) => self.walk.next_in(s),
            Source::Stream(s) => self.walk.next_in(s),
        }
    }

    /// Frames walked so far (returned or passed over).
    pub fn frames(&self) -> u64 {
        self.walk.frame
    }

    /// The container format.
    pub fn format(&self) -> Format {
        match self.walk.parser {
            Parser::Pcap(_) => Format::Pcap,
            Parser::PcapNg(_) => Format::PcapNg,
        }
    }

    /// Byte offset of the next record.
    pub fn offset(&self) -> u64 {
        match &self.src {
            Source::Slice(s) => s.offset(),
            Source::Stream(s) => s.offset(),
        }
    }

    /// Where reading stopped early, if it did.
    pub fn damage(&self) -> Option<&Damage> {
        self.walk.damage.as_ref()
    }

    /// Packet blocks skipped because they name an interface the file never
    /// described (pcapng), and the offset of the first; `None` if there were none.
    pub fn undeclared(&self) -> Option<(u64, u64)> {
        self.walk.undeclared
    }

    /// Whether the walk ended because the stop flag was raised.
    pub fn stopped(&self) -> bool {
        self.walk.stopped
    }
}

/// Reads the file header, refilling a stream until it is complete.
fn header(src: &mut impl Bytes, stop: Option<&'static AtomicBool>) -> Result<Parser, OpenError> {
    let mut need = 4;
    loop {
        match src.fill(need, stop) {
            Fill::Done => {}
            Fill::Stopped => return Err(OpenError::io("interrupted before the capture header came")),
            Fill::Failed(e) => return Err(OpenError::io(format!("cannot read: {e}"))),
        }
        let (buf, eof) = src.peek();
        if buf.is_empty() {
            return Err(OpenError::at(0, "empty file (no capture header)"));
        }
        let head = match format_of(buf) {
            Some(Format::Pcap) => pcap::Parser::header(buf, eof).map(Parser::Pcap),
            Some(Format::PcapNg) => pcapng::Parser::header(buf, eof).map(Parser::PcapNg),
            None if buf.len() < 4 && !eof => Head::Need(4),
            None => {
                return Err(OpenError::at(
                    0,
                    format!(
                        "not a pcap or pcapng file (magic {}); write captures with `tcpdump -w` or `tshark -w`",
                        hex(&buf[..buf.len().min(4)])
                    ),
                ));
            }
        };
        match head {
            Head::Ready(p, used) => {
                src.consume(used);
                return Ok(p);
            }
            Head::Need(n) => need = n,
            Head::Bad(e) => return Err(e),
        }
    }
}

impl Walk {
    /// Moves a walk over mapped bytes past the whole record ending at `end`
    /// (into the next window, maybe); the record's frame number.
    #[inline(always)]
    fn past_mapped(&mut self, s: &mut Slice<'_>, end: usize) -> u64 {
        s.pos = end;
        if s.next_window() {
            self.crossed_window();
        }
        self.frame += 1;
        self.frame
    }

    /// Moves a stream's walk past the whole record ending at `end` of its
    /// buffer; the record's frame number.
    #[inline(always)]
    fn past_buffered(&mut self, s: &mut Stream, end: usize) -> u64 {
        // The buffer (1 MiB) outgrows some CPUs' L2: its front is back in L3.
        crate::prefetch::ahead(s.storage(), end);
        s.consume(end - s.cursor());
        self.frame += 1;
        self.frame
    }

    /// The next packet from `src` (the same loop for every kind of bytes).
    #[inline]
    fn next_in<'s>(&mut self, src: &'s mut impl Bytes) -> Option<Packet<'s>> {
        loop {
            if self.done {
                return None;
            }
            let at = src.offset();
            let (buf, eof) = src.peek();
            if buf.is_empty() && eof {
                self.done = true;
                return None;
            }
            let step = match &mut self.parser {
                Parser::Pcap(p) => p.record(buf, eof),
                Parser::PcapNg(p) => p.record(buf, eof),
            };
            let (used, found) = match step {
                Step::Record(used, Record::Packet { ts_ns, link, data, orig_len }) => {
                    // Where the data lies in the storage, so the borrow of `buf` can end here.
                    let from = src.cursor() + (data.as_ptr() as usize - buf.as_ptr() as usize);
                    (used, Some((ts_ns, link, from..from + data.len(), orig_len)))
                }
                Step::Record(used, Record::Skip) => (used, None),
                Step::Record(used, Record::Undeclared) => {
                    self.undeclared.get_or_insert((0, at)).0 += 1;
                    (used, None)
                }
                Step::Need(n) => {
                    match src.fill(n, self.stop) {
                        Fill::Done => {}
                        Fill::Stopped => {
                            self.stopped = true;
                            self.done = true;
                        }
                        Fill::Failed(e) => self.fail(at, format!("cannot read: {e}")),
                    }
                    continue;
                }
                Step::Damage(what) => {
                    self.fail(at, what);
                    continue;
                }
            };
            if let Err(what) = src.check(src.cursor() + used) {
                self.fail(at, what);
                continue;
            }
            src.consume(used);
            if src.next_window() {
                self.crossed_window();
            }
            if let Some((ts_ns, link, range, orig_len)) = found {
                self.frame += 1;
                return Some(Packet { frame: self.frame, ts_ns, link, data: &src.storage()[range], orig_len });
            }
        }
    }

    fn fail(&mut self, offset: u64, what: String) {
        self.damage = Some(Damage { offset, what });
        self.done = true;
    }

    /// Every window of a mapped file: count, and look at the stop flag.
    #[cold]
    fn crossed_window(&mut self) {
        if let Some(p) = &self.progress {
            p.fetch_add(WINDOW as u64, Ordering::Relaxed);
        }
        if self.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            self.stopped = true;
            self.done = true;
        }
    }
}
