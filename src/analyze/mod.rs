//! The `analyze` pipeline: capture → wire → tcp → detect → report, one file
//! per thread, results merged.

mod agg;
mod collect;
mod limits;
mod upstream;
pub(crate) mod verdict;

pub(crate) use agg::FileResult;
pub use collect::ConnState;
pub use limits::{RTO_NS, SLOW_THINK_NS};

use crate::capture::{Capture, Format, LinkType};
use crate::filter::Filter;
use crate::record::{self, Report};
use crate::tcp::Tracker;
use crate::wire;
use collect::Collector;

/// What to analyse and how.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Keep only matching segments.
    pub filter: Option<Filter>,
    /// Draw this connection (`N`, or `F:N` with several files).
    pub flow: Option<String>,
    /// Most rows a ladder shows.
    pub ladder_rows: usize,
    /// Bytes of input analysed so far, for a progress bar (updated every few MB).
    pub progress: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// Once raised (Ctrl-C), every walk stops and the report covers what was read.
    pub stop: Option<&'static std::sync::atomic::AtomicBool>,
}

/// Timestamps further than this from a file's first packet (~13 days) are
/// clamped: a damaged or stepped clock must not overflow the arithmetic
/// (differences and sums of a few of them stay far below `i64::MAX`).
pub const TS_SPAN_NS: i64 = 1 << 50;

/// Error for an input that gave nothing to analyse.
#[derive(Debug)]
pub struct InputError {
    /// File name.
    pub file: String,
    /// Offset and what.
    pub detail: String,
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file, self.detail)
    }
}

fn analyze_file(cap: &Capture, file_tag: Option<usize>, opts: &Options) -> Result<FileResult, InputError> {
    let err = |detail: String| InputError { file: cap.name.clone(), detail };
    let mut packets = cap.packets_until(opts.stop).map_err(|e| err(e.to_string()))?;
    if let Some(p) = &opts.progress {
        packets.count_into(p.clone());
    }
    let mut c = Collector::new(file_tag, opts);
    let mut tracker: Tracker<ConnState> = Tracker::default();
    let (mut n, mut tcp, mut other, mut bad) = (0u64, 0u64, 0u64, 0u64);
    let (mut first_ts, mut last_ts) = (None, i64::MIN);
    let mut clamped = 0u64;
    let mut unsupported: Vec<(LinkType, u64)> = Vec::new();
    let mut first_bad: Option<(u64, String)> = None;
    while let Some(p) = packets.next() {
        n += 1;
        let t0 = *first_ts.get_or_insert(p.ts_ns);
        let ts = p.ts_ns.clamp(t0.saturating_sub(TS_SPAN_NS), t0.saturating_add(TS_SPAN_NS));
        clamped += u64::from(ts != p.ts_ns);
        last_ts = last_ts.max(ts);
        if !p.link.supported() {
            match unsupported.iter_mut().find(|(l, _)| *l == p.link) {
                Some((_, k)) => *k += 1,
                None => unsupported.push((p.link, 1)),
            }
            continue;
        }
        // Matched by reference: moving the segment out copies it, and reading
        // its fields back from that copy stalls on every packet.
        match &wire::decode(p.frame, ts, p.link, p.data, p.orig_len) {
            Ok(Some(seg)) => {
                if opts.filter.as_ref().is_some_and(|f| !f.matches(seg)) {
                    other += 1;
                    continue;
                }
                tcp += 1;
                tracker.segment(seg, &mut c);
            }
            Ok(None) => other += 1,
            Err(e) => {
                bad += 1;
                first_bad.get_or_insert((p.frame, e.to_string()));
            }
        }
    }
    tracker.finish(&mut c);
    let format = match packets.format() {
        Format::Pcap => "pcap",
        Format::PcapNg => "pcapng",
    };
    let damage = packets.damage().map(|d| d.to_string());
    let mut r = c.finish();
    if let Some(d) = &damage {
        r.warnings.push(format!("{}: {d}; analysed the {n} packets before it", cap.name));
    }
    if packets.stopped() {
        r.warnings.push(format!(
            "{}: interrupted (Ctrl-C) after {n} packets, at offset {}; the report covers those",
            cap.name,
            packets.offset()
        ));
    }
    let skipped = packets.undeclared();
    if let Some((k, at)) = skipped {
        r.warnings.push(format!(
            "{}: {k} packet blocks name an undeclared interface (first at offset {at}); skipped",
            cap.name
        ));
    }
    for (l, k) in &unsupported {
        r.warnings.push(format!(
            "{}: link type {l} is not supported; skipped {k} packets (supported: Ethernet, Linux cooked SLL/SLL2, NULL/LOOP, raw IP)",
            cap.name
        ));
    }
    if clamped > 0 {
        r.warnings.push(format!(
            "{}: {clamped} packets have timestamps more than 13 days from the first packet (a damaged or stepped clock); they were clamped",
            cap.name
        ));
    }
    if let Some((frame, what)) = &first_bad {
        r.warnings.push(format!("{}: {bad} malformed packets skipped (first: frame {frame}, {what})", cap.name));
    }
    if r.dropped > 0 {
        r.warnings.push(format!(
            "{}: more than {} server endpoints (or Nagle endpoints); {} observations of the others were left out of the findings and breakdown, to bound memory",
            cap.name,
            agg::MAX_ENDPOINTS,
            r.dropped
        ));
    }
    if r.guessed_roles > 0 {
        r.warnings.push(format!(
            "{}: {} connections started before the capture and showed nothing that tells client from server (no request or status line or TLS hello, no known server endpoint, no single ephemeral port); their server was taken to be the end with the lower port (marked ?)",
            cap.name, r.guessed_roles
        ));
    }
    if let (n, Some((id, frame))) = &r.roles_corrected {
        r.warnings.push(format!(
            "{}: {n} connections started before the capture had their client and server swapped by later evidence (first: connection {id}, frame {frame}); what was found before the swap was counted with the roles the other way round",
            cap.name
        ));
    }
    if let (n, Some((id, frame))) = &r.roles_contradicted {
        r.warnings.push(format!(
            "{}: {n} connections started before the capture look like client on both sides or server on both sides (first: connection {id}, frame {frame}); the roles from the first data were kept",
            cap.name
        ));
    }
    if tcp == 0 && other == 0 && bad == 0 && !unsupported.is_empty() {
        let links: Vec<String> = unsupported.iter().map(|(l, _)| l.to_string()).collect();
        return Err(err(format!(
            "link type {} is not supported (supported: Ethernet, Linux cooked SLL/SLL2, NULL/LOOP, raw IP)",
            links.join(", ")
        )));
    }
    if n == 0 && damage.is_some() {
        return Err(err(packets.damage().map(|d| d.to_string()).unwrap_or_default()));
    }
    r.input = record::Input {
        file: cap.name.clone(),
        format: format.into(),
        packets: n,
        tcp_segments: tcp,
        other_packets: other,
        malformed_packets: bad,
        connections: r.conns.len() as u64 + r.conns_omitted,
        start_s: first_ts.unwrap_or(0) as f64 / 1e9,
        duration_ms: record::ms(last_ts - first_ts.unwrap_or(last_ts)),
        damage,
        skipped_blocks: skipped.map_or(0, |s| s.0),
        interrupted: packets.stopped(),
    };
    Ok(r)
}

/// Analyses each capture (in parallel, one thread per file up to the core
/// count) and merges the results. Fails only if no input could be read at all.
pub fn analyze(captures: &[Capture], opts: &Options) -> Result<Report, InputError> {
    let tag = |i: usize| (captures.len() > 1).then_some(i + 1);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(captures.len()).max(1);
    let mut results: Vec<Option<Result<FileResult, InputError>>> = (0..captures.len()).map(|_| None).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= captures.len() {
                            break mine;
                        }
                        mine.push((i, analyze_file(&captures[i], tag(i), opts)));
                    }
                })
            })
            .collect();
        for h in handles {
            for (i, r) in h.join().expect("analysis thread panicked") {
                results[i] = Some(r);
            }
        }
    });
    let mut ok = Vec::new();
    let mut errors = Vec::new();
    for r in results.into_iter().flatten() {
        match r {
            Ok(f) => ok.push(f),
            Err(e) => errors.push(e),
        }
    }
    if ok.is_empty() {
        // Name every file, on one line.
        let mut e = errors.into_iter();
        let mut first = e.next().expect("at least one input");
        for more in e {
            first.detail = format!("{}; {more}", first.detail);
        }
        return Err(first);
    }
    let mut merged = FileResult::default();
    let mut inputs = Vec::new();
    for f in ok {
        merged.merge(f, &mut inputs);
    }
    let mut report = verdict::build(merged, inputs);
    for e in errors {
        report.warnings.insert(0, format!("{e} (file skipped)"));
    }
    Ok(report)
}
