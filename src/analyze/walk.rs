//! Reading a capture: every packet is counted and timed ([`Reading`]); its
//! segments go through the tracker, the detectors and the collector
//! ([`Analyser`]), all on one thread ([`walk`]) or split between shard
//! threads that each walk the file (shards.rs).

use super::collect::Collector;
use super::{ConnState, Options, TS_SPAN_NS};
use crate::analyze::agg::FileResult;
use crate::capture::{Format, LinkType, Packet, Packets};
use crate::filter::Filter;
use crate::tcp::Tracker;
use crate::tcp::book::Shared;
use crate::tcp::table::SWEEP_EVERY;
use crate::wire::{Segment, WireError};

/// What reading a file counted (the same however its connections are split).
pub(super) struct Reading {
    pub(super) n: u64,
    pub(super) first_ts: Option<i64>,
    /// The span times are clamped to, once `first_ts` is set (worked out
    /// once: at every packet it cost 11-12 instructions; bench/RESULTS.md).
    span: (i64, i64),
    pub(super) last_ts: i64,
    pub(super) clamped: u64,
    pub(super) unsupported: Vec<(LinkType, u64)>,
    /// Packets that are not TCP/IP.
    pub(super) other: u64,
    pub(super) bad: u64,
    pub(super) first_bad: Option<(u64, String)>,
}

impl Default for Reading {
    fn default() -> Reading {
        Reading {
            n: 0,
            first_ts: None,
            span: (i64::MIN, i64::MAX),
            last_ts: i64::MIN,
            clamped: 0,
            unsupported: Vec::new(),
            other: 0,
            bad: 0,
            first_bad: None,
        }
    }
}

impl Reading {
    /// Times a packet: its time clamped to the file's span, or `None` when
    /// its link type is not supported. The packets themselves are counted by
    /// the walk (a shard's walk passes over frames it does not own and times
    /// only its own).
    #[inline(always)]
    pub(super) fn time(&mut self, p: &Packet<'_>) -> Option<i64> {
        let ts = self.clamp(p.ts_ns);
        self.clamped += u64::from(ts != p.ts_ns);
        self.last_ts = self.last_ts.max(ts);
        if p.link.supported() {
            return Some(ts);
        }
        match self.unsupported.iter_mut().find(|(l, _)| *l == p.link) {
            Some((_, k)) => *k += 1,
            None => self.unsupported.push((p.link, 1)),
        }
        None
    }

    /// A packet's time clamped to the file's span (the first call sets the span).
    #[inline(always)]
    pub(super) fn clamp(&mut self, ts: i64) -> i64 {
        self.begin(ts);
        ts.max(self.span.0).min(self.span.1)
    }

    /// The file's first time is `t0`, unless one was set before.
    #[inline(always)]
    pub(super) fn begin(&mut self, t0: i64) {
        if self.first_ts.is_none() {
            self.set_first(t0);
        }
    }

    #[cold]
    fn set_first(&mut self, t0: i64) {
        self.first_ts = Some(t0);
        self.span = (t0.saturating_sub(TS_SPAN_NS), t0.saturating_add(TS_SPAN_NS));
    }

    /// Adds another shard's counts of the frames it owned (the packet count
    /// and the first time each shard takes alike from the walk).
    pub(super) fn add_owned(&mut self, o: &Reading) {
        self.last_ts = self.last_ts.max(o.last_ts);
        self.clamped += o.clamped;
        for &(l, k) in &o.unsupported {
            match self.unsupported.iter_mut().find(|(m, _)| *m == l) {
                Some((_, n)) => *n += k,
                None => self.unsupported.push((l, k)),
            }
        }
        self.other += o.other;
        self.bad += o.bad;
        if let Some(b) = &o.first_bad
            && self.first_bad.as_ref().is_none_or(|a| b.0 < a.0)
        {
            self.first_bad = Some(b.clone());
        }
    }

    /// Counts a frame that decoded to no segment (`Err`: a malformed one).
    #[cold]
    pub(super) fn not_segment(&mut self, frame: u64, e: Option<WireError>) {
        match e {
            None => self.other += 1,
            Some(e) => {
                self.bad += 1;
                self.first_bad.get_or_insert((frame, e.to_string()));
            }
        }
    }
}

/// Sweeps of the connection table run on the frame count (every shard sees
/// every frame number, so every shard sweeps at the same times).
#[inline]
pub(super) fn sweep_due(frame: u64) -> bool {
    frame.is_multiple_of(u64::from(SWEEP_EVERY))
}

/// Where and how the walk over the file ended.
#[derive(Default)]
pub(super) struct Ending {
    pub(super) format: &'static str,
    pub(super) damage: Option<String>,
    pub(super) stopped: bool,
    pub(super) offset: u64,
    pub(super) skipped: Option<(u64, u64)>,
}

impl Ending {
    pub(super) fn of(packets: &Packets<'_>) -> Ending {
        Ending {
            format: match packets.format() {
                Format::Pcap => "pcap",
                Format::PcapNg => "pcapng",
            },
            damage: packets.damage().map(|d| d.to_string()),
            stopped: packets.stopped(),
            offset: packets.offset(),
            skipped: packets.undeclared(),
        }
    }
}

/// A file's analysis before its warnings and summary are written.
pub(super) struct Walked {
    pub(super) r: FileResult,
    pub(super) reading: Reading,
    /// Segments analysed, and segments the filter left out.
    pub(super) tcp: u64,
    pub(super) filtered: u64,
    pub(super) end: Ending,
}

/// The tracker, detectors and collector of one thread: all of a file's
/// connections, or one shard's.
pub(super) struct Analyser<'o> {
    c: Collector<'o>,
    tracker: Tracker<ConnState>,
    filter: Option<&'o Filter>,
    pub(super) tcp: u64,
    pub(super) filtered: u64,
}

impl<'o> Analyser<'o> {
    /// One thread's analyser; `shard`: its handle on the role evidence its file's shards share.
    pub(super) fn new(file_tag: Option<usize>, opts: &'o Options, shard: Option<Shared>) -> Analyser<'o> {
        let numbering = shard.is_some();
        let tracker = match shard {
            Some(s) => Tracker::default().shard(s),
            None => Tracker::default().manual_sweeps(),
        };
        Analyser {
            c: Collector::new(file_tag, opts, numbering),
            tracker,
            filter: opts.filter.as_ref(),
            tcp: 0,
            filtered: 0,
        }
    }

    /// The table's sweep before `frame`, at time `ts`.
    pub(super) fn sweep(&mut self, frame: u64, ts: i64) {
        self.c.at_sweep(frame);
        self.tracker.expire(ts, &mut self.c);
    }

    #[inline(always)]
    pub(super) fn segment(&mut self, seg: &Segment<'_>) {
        if self.filter.is_some_and(|f| !f.matches(seg)) {
            self.filtered += 1;
            return;
        }
        self.tcp += 1;
        self.c.at_packet(seg.frame);
        self.tracker.segment(seg, &mut self.c);
    }

    /// A frame at time `ts`: its segment analysed, or the frame counted as not one.
    #[inline(always)]
    pub(super) fn frame(&mut self, p: &Packet<'_>, ts: i64, reading: &mut Reading) {
        match crate::wire::decode(p.frame, ts, p.link, p.data, p.orig_len) {
            // Borrowed in place: moving the segment out copies it, and reading
            // its fields back from that copy stalls on every packet.
            Ok(Some(ref seg)) => self.segment(seg),
            Ok(None) => reading.not_segment(p.frame, None),
            Err(e) => reading.not_segment(p.frame, Some(e)),
        }
    }

    /// Every packet of this analyser up to `frame` was given to it.
    #[inline]
    pub(super) fn passed(&mut self, frame: u64, all: bool) {
        self.tracker.passed(frame, all);
    }

    /// Closes what is still open: the results.
    pub(super) fn finish(mut self) -> FileResult {
        self.c.at_end();
        self.tracker.finish(&mut self.c);
        self.c.finish()
    }
}

/// Analyses the whole capture on this thread.
pub(super) fn walk(cap: &crate::capture::Capture, file_tag: Option<usize>, opts: &Options) -> Result<Walked, String> {
    let mut packets = cap.packets_until(opts.stop).map_err(|e| e.to_string())?;
    if let Some(p) = &opts.progress {
        packets.count_into(p.clone());
    }
    let mut a = Analyser::new(file_tag, opts, None);
    let mut reading = Reading::default();
    packets.for_each(|p| {
        let Some(ts) = reading.time(p) else { return };
        if sweep_due(p.frame) {
            a.sweep(p.frame, ts);
        }
        a.frame(p, ts, &mut reading);
    });
    reading.n = packets.frames();
    let (tcp, filtered) = (a.tcp, a.filtered);
    Ok(Walked { r: a.finish(), reading, tcp, filtered, end: Ending::of(&packets) })
}
