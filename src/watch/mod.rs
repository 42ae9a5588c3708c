//! `watch`: live capture → the same streaming analysis as `analyze`
//! (decode, connection tracking, detectors) → a line per finding as it
//! happens, a periodic summary per server endpoint, and Prometheus metrics.
//!
//! [`Watch`] is the analysis, fed one packet at a time by anything (the live
//! ring in [`run`], or a synthetic replay in `examples/watch_churn.rs`); its
//! memory is bounded by [`Options`] whatever passes.

mod finding;
mod http;
pub mod metrics;
pub mod owners;
mod process;
pub mod render;
mod sink;
mod slots;

pub use crate::record::watch::{Finding, Kind, Owner};
pub use http::MetricsServer;
pub use metrics::Metrics;
pub use owners::Owners;
pub use sink::{ConnState, Limits, Row, WatchSink};
pub use slots::Counts;

use crate::capture::LinkType;
use crate::capture::live::{Live, LiveCapture, LiveError, LiveStats};
use crate::tcp::Tracker;
use crate::wire;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Bounds of the analysis.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Connections silent this long are finished and forgotten.
    pub idle: Duration,
    /// Most connections tracked at once; beyond it the longest silent are evicted (and counted).
    pub max_connections: usize,
    /// Endpoint table and finding-line bounds.
    pub limits: Limits,
}

impl Default for Options {
    fn default() -> Self {
        Options { idle: Duration::from_secs(120), max_connections: 100_000, limits: Limits::default() }
    }
}

/// The streaming analysis: decode → track → detect → findings and counts.
pub struct Watch {
    tracker: Tracker<Box<ConnState>>,
    sink: WatchSink,
    metrics: Option<Arc<Metrics>>,
    frame: u64,
    published_evictions: u64,
    /// Frames that were not TCP over IP, or could not be decoded.
    pub skipped: u64,
}

/// What is left when a watch ends.
pub struct Final {
    /// Findings that came out of the connections finished at the end.
    pub findings: Vec<Finding>,
    /// The whole run, per server endpoint.
    pub rows: Vec<Row>,
    /// `analyze`'s verdict sentences over the whole run.
    pub verdict: Vec<String>,
    /// Connections evicted to stay under the cap.
    pub evicted: u64,
    /// Connections whose server was folded into `other`.
    pub folded: u64,
    /// Endpoint slots recycled.
    pub recycled: u64,
}

impl Watch {
    /// An empty analysis; `metrics` are kept up to date if given.
    pub fn new(o: &Options, metrics: Option<Arc<Metrics>>) -> Watch {
        let idle_ns = i64::try_from(o.idle.as_nanos()).unwrap_or(i64::MAX);
        Watch {
            tracker: Tracker::with_limits(idle_ns, o.max_connections),
            sink: WatchSink::new(o.limits, metrics.clone()),
            metrics,
            frame: 0,
            published_evictions: 0,
            skipped: 0,
        }
    }

    /// Feeds one captured frame.
    pub fn packet(&mut self, link: LinkType, ts_ns: i64, data: &[u8], orig_len: u32) {
        self.frame += 1;
        match wire::decode(self.frame, ts_ns, link, data, orig_len) {
            Ok(Some(seg)) => self.tracker.segment(&seg, &mut self.sink),
            _ => self.skipped += 1,
        }
    }

    /// Finishes connections idle (or closed) as of `now_ns`, and updates the gauges.
    pub fn expire(&mut self, now_ns: i64) {
        self.tracker.expire(now_ns, &mut self.sink);
        self.publish();
    }

    /// Brings the connection metrics up to date.
    pub fn publish(&mut self) {
        if let Some(m) = &self.metrics {
            m.tracked.set(self.tracker.len() as i64);
            m.evicted.inc_by(self.tracker.evicted() - self.published_evictions);
        }
        self.published_evictions = self.tracker.evicted();
    }

    /// Connections tracked now.
    pub fn tracked(&self) -> usize {
        self.tracker.len()
    }

    /// Connections evicted so far to stay under the cap.
    pub fn evicted(&self) -> u64 {
        self.tracker.evicted()
    }

    /// Connections folded into `other` so far.
    pub fn folded(&self) -> u64 {
        self.sink.folded()
    }

    /// Endpoint slots given to a new endpoint so far.
    pub fn recycled(&self) -> u64 {
        self.sink.recycled()
    }

    /// Server endpoints counted by name.
    pub fn endpoints(&self) -> usize {
        self.sink.endpoints()
    }

    /// Findings to print since the last call (rate-limited), oldest first.
    pub fn findings(&mut self) -> Vec<Finding> {
        self.sink.take_findings().collect()
    }

    /// The interval's rows; starts the next interval.
    pub fn interval(&mut self) -> Vec<Row> {
        self.sink.interval()
    }

    /// Finishes every connection and returns what is left to say.
    pub fn finish(mut self) -> Final {
        self.tracker.finish(&mut self.sink);
        self.publish();
        let findings = self.findings();
        let rows = self.sink.totals();
        let (evicted, folded, recycled) = (self.tracker.evicted(), self.sink.folded(), self.sink.recycled());
        Final { findings, rows, verdict: self.sink.verdict(), evicted, folded, recycled }
    }
}

/// How a live watch runs.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Bounds of the analysis.
    pub watch: Options,
    /// Time between summaries.
    pub summary_every: Duration,
    /// Stop after this long (default: until `stop`).
    pub duration: Option<Duration>,
    /// JSON lines instead of text.
    pub json: bool,
}

/// Now, ns since the epoch (the clock the kernel stamps packets with).
fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Names the owning processes of the findings' endpoints: the side at
/// fault's for the line, the server endpoint's for the metrics.
fn label(findings: &mut [Finding], owners: &mut Option<Owners>, metrics: Option<&Metrics>) {
    let Some(ow) = owners else { return };
    for f in findings {
        let at_fault = if f.role == "client" { &f.client } else { &f.server };
        f.owner = ow.lookup(at_fault);
        if let Some(m) = metrics {
            let server = if f.role == "client" { ow.lookup(&f.server) } else { f.owner.clone() };
            if let Some(o) = server {
                m.set_owner(&f.server, &o);
            }
        }
    }
}

/// Runs a live watch on `cap` until `stop` is set or the duration passes,
/// writing findings and summaries to `out`. When `out` fails (a closed pipe,
/// a full disk) the watch goes on if it serves metrics, and ends otherwise:
/// nobody would see what it finds. With `owners`, each finding names the
/// process that owns the stalled endpoint.
pub fn run(
    cap: &mut LiveCapture,
    o: &RunOptions,
    metrics: Option<Arc<Metrics>>,
    mut owners: Option<Owners>,
    stop: &AtomicBool,
    out: &mut dyn Write,
) -> Result<LiveStats, LiveError> {
    let mut w = Watch::new(&o.watch, metrics.clone());
    let started = Instant::now();
    let every = o.summary_every.max(Duration::from_millis(100));
    let mut next_summary = started + every;
    let mut last_summary = started;
    let mut next_expire = started + Duration::from_secs(1);
    // Counts at the last summary, and at the last metrics update.
    let mut seen = LiveStats::default();
    let mut published = LiveStats::default();
    let deadline = o.duration.map(|d| started + d);
    // The ring loop's own flag: `stop`, or an output nobody reads any more.
    let halt = AtomicBool::new(false);
    let gone = std::cell::Cell::new(false);
    let mut say = |s: String| {
        let s = if o.json { crate::escape::json(&s) } else { crate::escape::terminal(&s) };
        if out.write_all(s.as_bytes()).and_then(|()| out.flush()).is_err() && metrics.is_none() {
            gone.set(true);
        }
    };
    let stats = cap.each(&halt, deadline, &mut |ev| match ev {
        Live::Packet(p) => w.packet(p.link, p.ts_ns, p.data, p.orig_len),
        Live::Tick(st) => {
            if stop.load(std::sync::atomic::Ordering::Relaxed) || gone.get() {
                halt.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            if let Some(m) = &metrics {
                m.packets.inc_by(st.packets - published.packets);
                m.drops.inc_by(st.kernel_drops - published.kernel_drops);
            }
            published = *st;
            let mut findings = w.findings();
            label(&mut findings, &mut owners, metrics.as_deref());
            if !findings.is_empty() {
                say(findings.iter().map(|f| render::finding(f, o.json)).collect());
            }
            let now = Instant::now();
            if now >= next_expire {
                next_expire = now + Duration::from_secs(1);
                w.expire(now_ns());
            } else {
                w.publish();
            }
            if now >= next_summary {
                let h = render::Header {
                    ts_ns: now_ns(),
                    seconds: (now - last_summary).as_secs_f64(),
                    packets: st.packets - seen.packets,
                    drops: st.kernel_drops - seen.kernel_drops,
                    tracked: w.tracked(),
                    evicted: w.evicted(),
                    folded: w.folded(),
                    recycled: w.recycled(),
                    last: false,
                };
                say(render::summary(&h, &w.interval(), &[], o.json));
                next_summary = now + every;
                last_summary = now;
                seen = *st;
            }
        }
    })?;
    let mut rest = w.finish();
    label(&mut rest.findings, &mut owners, metrics.as_deref());
    let mut text: String = rest.findings.iter().map(|f| render::finding(f, o.json)).collect();
    let h = render::Header {
        ts_ns: now_ns(),
        seconds: started.elapsed().as_secs_f64(),
        packets: stats.packets,
        drops: stats.kernel_drops,
        tracked: 0,
        evicted: rest.evicted,
        folded: rest.folded,
        recycled: rest.recycled,
        last: true,
    };
    text.push_str(&render::summary(&h, &rest.rows, &rest.verdict, o.json));
    say(text);
    Ok(stats)
}
