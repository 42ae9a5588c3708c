//! The `analyze` pipeline: capture → wire → tcp → detect → report. Files
//! share the threads; a large file alone gets several (shards.rs); results
//! merge.

mod agg;
mod collect;
mod conns;
mod limits;
mod merge;
mod shards;
mod split;
mod upstream;
pub(crate) mod verdict;
mod walk;
mod windowed;

pub(crate) use agg::{ARRIVAL, FileResult};
pub use collect::ConnState;
pub use limits::{RTO_NS, SLOW_THINK_NS};

use crate::capture::Capture;
use crate::filter::Filter;
use crate::record::{self, Report};
use walk::Walked;

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
    /// Threads in all (`None`: one per core, up to [`AUTO_THREADS`]). With
    /// fewer files than threads, each file's connections are split between
    /// `threads / files` of them; the report is the same for any number.
    pub threads: Option<usize>,
}

/// Most threads used when none are asked for.
pub const AUTO_THREADS: usize = 16;

/// Smallest file split between threads when the thread count is automatic:
/// below it, starting and merging shards costs about what they save.
pub const SHARD_MIN_BYTES: u64 = 16 << 20;

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

/// "N", or "F:N" for file F of several.
pub(crate) fn conn_label(file_tag: Option<usize>, id: u32) -> String {
    match file_tag {
        Some(f) => format!("{f}:{id}"),
        None => id.to_string(),
    }
}

/// Analyses one capture in `shards` parts (1: today's single walk).
fn analyze_file(
    cap: &Capture,
    file_tag: Option<usize>,
    opts: &Options,
    shards: usize,
) -> Result<FileResult, InputError> {
    let err = |detail: String| InputError { file: cap.name.clone(), detail };
    // A pcap file is read once, in windows the shards share; others are
    // walked whole by each shard.
    let sharded = match (shards > 1).then(|| windowed::windows(cap)) {
        Some(Some(windows)) => windowed::run(&windows, file_tag, opts, shards),
        Some(None) => shards::run(cap, file_tag, opts, shards).map_err(err)?,
        None => None,
    };
    let w = match sharded {
        Some(w) => w,
        None => walk::walk(cap, file_tag, opts).map_err(err)?,
    };
    finish_file(cap, w)
}

/// The file's results from its walk(s): upstream links, warnings, input summary.
fn finish_file(cap: &Capture, w: Walked) -> Result<FileResult, InputError> {
    let err = |detail: String| InputError { file: cap.name.clone(), detail };
    let Walked { mut r, reading, tcp, filtered, end } = w;
    let walk::Reading { n, first_ts, last_ts, clamped, unsupported, other, bad, first_bad, .. } = reading;
    let walk::Ending { format, damage, stopped, offset, skipped } = end;
    let other = other + filtered;
    // In endpoint order: ties between upstreams go the same way however the servers were met.
    let mut windows: Vec<_> = r.servers.iter_mut().map(|(e, s)| (*e, std::mem::take(&mut s.windows))).collect();
    windows.sort_unstable_by_key(|w| w.0);
    r.upstream = upstream::link(&mut windows).into_iter().collect();
    r.conns.finish();
    if let Some(d) = &damage {
        r.warnings.push(format!("{}: {d}; analysed the {n} packets before it", cap.name));
    }
    if stopped {
        r.warnings.push(format!(
            "{}: interrupted (Ctrl-C) after {n} packets, at offset {offset}; the report covers those",
            cap.name
        ));
    }
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
    if let agg::HeadsUnread(n, first, kept) = r.heads_unread
        && n > 0
    {
        r.warnings.push(format!(
            "{}: {n} requests were cut by the capture's snap length before the end of their request line (first: frame {first}; at most {kept} bytes of payload kept): whether they asked for `Expect: 100-continue` could not be read, so a wait for a `100 Continue` counts as the client's own time there; capture whole frames (`tcpdump -s 0`) to tell",
            cap.name
        ));
    }
    if let (n, Some((_, id, frame))) = &r.roles_corrected {
        r.warnings.push(format!(
            "{}: {n} connections started before the capture had their client and server swapped by later evidence (first: connection {id}, frame {frame}); what was found before the swap was counted with the roles the other way round",
            cap.name
        ));
    }
    if let (n, Some((_, id, frame))) = &r.roles_contradicted {
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
    if n == 0
        && let Some(d) = &damage
    {
        return Err(err(d.clone()));
    }
    r.input = record::Input {
        file: cap.name.clone(),
        format: format.into(),
        packets: n,
        tcp_segments: tcp,
        other_packets: other,
        malformed_packets: bad,
        connections: r.conns.count(),
        start_s: first_ts.unwrap_or(0) as f64 / 1e9,
        duration_ms: record::ms(last_ts - first_ts.unwrap_or(last_ts)),
        damage,
        skipped_blocks: skipped.map_or(0, |s| s.0),
        interrupted: stopped,
    };
    Ok(r)
}

/// Shards for `cap` when `per_file` threads are its share: only a file
/// that can be walked more than once (not a stream), not for `--flow` (its
/// id is known only after the merge), and with the automatic count only a
/// large one.
fn shards_for(cap: &Capture, opts: &Options, per_file: usize) -> usize {
    let big = |len: u64| opts.threads.is_some() || len >= SHARD_MIN_BYTES;
    match cap.len() {
        Some(len) if opts.flow.is_none() && big(len) => per_file,
        _ => 1,
    }
}

/// Analyses each capture (in parallel: files share the threads, and with
/// fewer files than threads each file is split between several) and merges
/// the results. Fails only if no input could be read at all.
pub fn analyze(captures: &[Capture], opts: &Options) -> Result<Report, InputError> {
    let tag = |i: usize| (captures.len() > 1).then_some(i + 1);
    let total = opts
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()).min(AUTO_THREADS))
        .max(1);
    let threads = total.min(captures.len()).max(1);
    let per_file = (total / captures.len().max(1)).max(1);
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
                        let shards = shards_for(&captures[i], opts, per_file);
                        mine.push((i, analyze_file(&captures[i], tag(i), opts, shards)));
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
