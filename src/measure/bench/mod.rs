//! `bench`: wrk-class HTTP/1.1 load with what wrk lacks: time to first
//! byte, the largest gap inside one response (the client-side signature of a
//! server's Nagle stall), connect times, errors by kind, client socket knobs
//! (`--nodelay`, `--quickack`, `--split-writes`) and a fixed-rate mode with
//! coordinated-omission correction (as wrk2).
//!
//! One thread per worker, each with its own epoll loop; the request bytes are
//! built once and nothing is allocated per request over plain HTTP (over TLS,
//! rustls allocates a little per record: see `tls.rs`).

mod config;
pub mod http;
mod notes;
mod sock;
mod tls;
mod worker;

pub use config::{BenchError, MAX_BODY_FILE, Options, Url, check_header, check_method, check_rate, split_url};

use crate::dist::{Coarse, Dist};
use crate::measure::tls::Negotiated;
use crate::record::bench::{
    BenchOptions, BenchReport, ConnectionTimes, Distribution, Errors, PhaseTimes, ThreadRate, TimePoint, TlsReport,
};
use config::Config;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One worker's measurements; merged at the end.
#[derive(Debug)]
pub(crate) struct Stats {
    latency: Dist,
    ttfb: Dist,
    gap: Dist,
    connect: Dist,
    /// TLS handshake times (TCP connected → handshake complete).
    handshake: Dist,
    handshakes: u64,
    /// Handshakes that resumed an earlier session.
    resumed: u64,
    /// What the first TLS handshake negotiated.
    negotiated: Option<Negotiated>,
    /// The server's certificate was refused: why (the run stops).
    cert_error: Option<String>,
    requests: u64,
    bytes: u64,
    errors: Errors,
    /// Responses by status code (index = code; 0 for codes out of range).
    statuses: Vec<u64>,
    rate_samples: Vec<f64>,
    /// Latency per `Config::step` of the run, by when the response ended.
    timeline: Vec<Coarse>,
    /// The first connect, read and write error, in words (errors are counted, not logged).
    first_errors: [Option<String>; 3],
    /// ab's "Connection Times" per request.
    times: ConnTimes,
}

/// ab's "Connection Times" of each request: its connect (zero on a reused
/// connection), processing (the rest), waiting (last byte written → first
/// byte read) and total (connect's start, or the request's, → last byte).
#[derive(Debug, Default)]
pub(crate) struct ConnTimes {
    connect: Dist,
    processing: Dist,
    waiting: Dist,
    total: Dist,
}

impl ConnTimes {
    fn record(&mut self, connect: Duration, total: Duration, waiting: Duration) {
        let ns = |d: Duration| d.as_nanos() as i64;
        self.connect.record(ns(connect));
        self.processing.record(ns(total.saturating_sub(connect)));
        self.waiting.record(ns(waiting));
        self.total.record(ns(total));
    }

    fn merge(&mut self, o: &ConnTimes) {
        self.connect.merge(&o.connect);
        self.processing.merge(&o.processing);
        self.waiting.merge(&o.waiting);
        self.total.merge(&o.total);
    }

    fn report(&self) -> ConnectionTimes {
        let row = |d: &Dist| {
            let (mean, sd) = d.mean_stdev_ms();
            let r = |v: f64| (v * 1e3).round() / 1e3;
            PhaseTimes {
                min_ms: r(d.min_ms()),
                mean_ms: r(mean),
                sd_ms: r(sd),
                median_ms: r(d.quantile_ms(0.5)),
                max_ms: r(d.max_ms()),
            }
        };
        ConnectionTimes {
            connect: row(&self.connect),
            processing: row(&self.processing),
            waiting: row(&self.waiting),
            total: row(&self.total),
        }
    }
}

impl Stats {
    fn new() -> Stats {
        Stats {
            latency: Dist::default(),
            ttfb: Dist::default(),
            gap: Dist::default(),
            connect: Dist::default(),
            handshake: Dist::default(),
            handshakes: 0,
            resumed: 0,
            negotiated: None,
            cert_error: None,
            requests: 0,
            bytes: 0,
            errors: Errors::default(),
            statuses: vec![0; 1000],
            rate_samples: Vec::with_capacity(1024),
            timeline: Vec::new(),
            first_errors: [None, None, None],
            times: ConnTimes::default(),
        }
    }

    /// Counts an error; keeps the first one's words (built only then: errors can come by thousands).
    fn connect_error(&mut self, why: &dyn std::fmt::Display) {
        self.errors.connect += 1;
        self.first_errors[0].get_or_insert_with(|| why.to_string());
    }

    /// Counts an error; keeps the first one's words (built only then: errors can come by thousands).
    fn read_error(&mut self, why: &dyn std::fmt::Display) {
        self.errors.read += 1;
        self.first_errors[1].get_or_insert_with(|| why.to_string());
    }

    /// Counts an error; keeps the first one's words (built only then: errors can come by thousands).
    fn write_error(&mut self, why: &dyn std::fmt::Display) {
        self.errors.write += 1;
        self.first_errors[2].get_or_insert_with(|| why.to_string());
    }

    #[inline]
    fn status(&mut self, code: u16) {
        let i = usize::from(code);
        self.statuses[if i < 1000 { i } else { 0 }] += 1;
        if !(200..400).contains(&code) {
            self.errors.status += 1;
        }
    }

    fn merge(&mut self, o: Stats) {
        self.latency.merge(&o.latency);
        self.ttfb.merge(&o.ttfb);
        self.gap.merge(&o.gap);
        self.connect.merge(&o.connect);
        self.handshake.merge(&o.handshake);
        self.times.merge(&o.times);
        self.handshakes += o.handshakes;
        self.resumed += o.resumed;
        if self.negotiated.is_none() {
            self.negotiated = o.negotiated;
        }
        if self.cert_error.is_none() {
            self.cert_error = o.cert_error;
        }
        self.requests += o.requests;
        self.bytes += o.bytes;
        let (e, f) = (&mut self.errors, &o.errors);
        e.connect += f.connect;
        e.read += f.read;
        e.write += f.write;
        e.timeout += f.timeout;
        e.status += f.status;
        e.malformed += f.malformed;
        for (a, b) in self.statuses.iter_mut().zip(&o.statuses) {
            *a += b;
        }
        self.rate_samples.extend(o.rate_samples);
        if self.timeline.len() < o.timeline.len() {
            self.timeline.resize_with(o.timeline.len(), Coarse::default);
        }
        for (a, b) in self.timeline.iter_mut().zip(&o.timeline) {
            a.merge(b);
        }
        for (a, b) in self.first_errors.iter_mut().zip(o.first_errors) {
            if a.is_none() {
                *a = b;
            }
        }
    }
}

pub(crate) fn distribution(d: &Dist) -> Distribution {
    let (mean, stdev) = d.mean_stdev_ms();
    let within = if d.count() == 0 { 0.0 } else { d.share_between(mean - stdev, mean + stdev) * 100.0 };
    let r = |v: f64| (v * 1e3).round() / 1e3;
    Distribution {
        count: d.count(),
        mean: r(mean),
        stdev: r(stdev),
        within_stdev_pct: (within * 100.0).round() / 100.0,
        p50: r(d.quantile_ms(0.5)),
        p75: r(d.quantile_ms(0.75)),
        p90: r(d.quantile_ms(0.9)),
        p99: r(d.quantile_ms(0.99)),
        p999: r(d.quantile_ms(0.999)),
        max: r(d.max_ms()),
    }
}

/// Latency over time; the last point may be shorter than a step (its rate counts only its own time).
fn timeline(t: &[Coarse], step: Duration, elapsed: Duration) -> Vec<TimePoint> {
    let r = |v: f64| (v * 1e3).round() / 1e3;
    t.iter()
        .enumerate()
        .map(|(i, c)| {
            let from = step * i as u32;
            let len = step.min(elapsed.saturating_sub(from)).max(Duration::from_millis(1));
            TimePoint {
                t_s: from.as_secs_f64(),
                requests: c.count(),
                requests_per_s: (c.count() as f64 / len.as_secs_f64()).round(),
                p50_ms: r(c.quantile_ms(0.5)),
                p99_ms: r(c.quantile_ms(0.99)),
                max_ms: r(c.max_ms()),
            }
        })
        .collect()
}

fn thread_rate(samples: &[f64]) -> ThreadRate {
    if samples.is_empty() {
        return ThreadRate::default();
    }
    let n = samples.len() as f64;
    let mean = samples.iter().sum::<f64>() / n;
    let stdev = (samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / n).sqrt();
    let within = samples.iter().filter(|s| (**s - mean).abs() <= stdev).count() as f64 / n * 100.0;
    let r2 = |v: f64| (v * 100.0).round() / 100.0;
    ThreadRate {
        mean: r2(mean),
        stdev: r2(stdev),
        max: r2(samples.iter().copied().fold(0.0, f64::max)),
        within_stdev_pct: r2(within),
    }
}

/// Makes room for `connections` sockets: raises the soft open-files limit up
/// to the hard one when needed, or says what to do.
fn ensure_fd_limit(connections: usize) -> Result<(), BenchError> {
    // Sockets plus stdio, epoll instances and the odd file.
    let need = connections as u64 + 64;
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: lim is a live rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 || lim.rlim_cur >= need {
        return Ok(());
    }
    if lim.rlim_max >= need {
        let raised = libc::rlimit { rlim_cur: need, rlim_max: lim.rlim_max };
        // SAFETY: raised is a live rlimit within the hard limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(());
        }
    }
    Err(BenchError::Start(format!(
        "-c {connections} needs about {need} open files but this process may open {} (hard limit {}); \
raise it (`ulimit -n {need}`) or use fewer connections",
        lim.rlim_cur, lim.rlim_max
    )))
}

/// Runs a benchmark. `progress` is called about once a second with
/// (elapsed, requests so far) for a progress bar.
pub fn run(o: &Options, progress: &mut dyn FnMut(Duration, u64)) -> Result<BenchReport, BenchError> {
    let cfg = Config::new(o)?;
    ensure_fd_limit(cfg.connections)?;
    let start = Instant::now();
    let deadline = start + cfg.duration;
    let counters: Vec<AtomicU64> = (0..cfg.threads).map(|_| AtomicU64::new(0)).collect();
    let fatal = AtomicBool::new(false);
    let stats = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        let mut first = 0;
        for (t, counter) in counters.iter().enumerate() {
            // Every connection is used: the first (c mod t) workers take one more.
            let n = cfg.connections / cfg.threads + usize::from(t < cfg.connections % cfg.threads);
            let cfg = &cfg;
            let fatal = &fatal;
            let first_conn = first;
            first += n;
            handles.push(scope.spawn(move || -> Result<Stats, String> {
                let w = worker::Worker::new(cfg, n, start, first_conn).map_err(|e| format!("epoll: {e}"))?;
                w.run(deadline, &crate::interrupt::requested, fatal, counter)
            }));
        }
        let mut next = start + Duration::from_secs(1);
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
            let now = Instant::now();
            if now >= next {
                progress(now - start, counters.iter().map(|c| c.load(Ordering::Relaxed)).sum());
                next += Duration::from_secs(1);
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a worker thread panicked".into())))
            .collect::<Vec<_>>()
    });
    let interrupted = crate::interrupt::requested();
    // Workers stop at the deadline; only Ctrl-C (or -n's requests all done) makes the run shorter.
    let elapsed = if interrupted || cfg.requests.is_some() { start.elapsed().min(cfg.duration) } else { cfg.duration };
    let mut all = Stats::new();
    for s in stats {
        // A worker whose loop failed stopped counting: the sums would undercount.
        all.merge(s.map_err(BenchError::NotMeasured)?);
    }
    if let Some(why) = all.cert_error.take() {
        return Err(BenchError::Certificate(format!("{}: {why}", cfg.url)));
    }
    let secs = elapsed.as_secs_f64();
    let status_codes: BTreeMap<u16, u64> =
        all.statuses.iter().enumerate().filter(|(_, n)| **n > 0).map(|(c, n)| (c as u16, *n)).collect();
    Ok(BenchReport {
        schema: crate::record::SCHEMA_VERSION,
        version: env!("CARGO_PKG_VERSION"),
        url: cfg.url.clone(),
        address: cfg.addr.to_string(),
        method: cfg.method.clone(),
        threads: cfg.threads,
        connections: cfg.connections,
        duration_s: cfg.duration.as_secs_f64(),
        elapsed_s: (secs * 1e3).round() / 1e3,
        interrupted,
        options: BenchOptions {
            nodelay: cfg.nodelay,
            quickack: cfg.quickack,
            split_writes: cfg.split_writes,
            keepalive: cfg.keepalive,
            rate: cfg.rate,
            timeout_s: cfg.timeout.as_secs_f64(),
            requests: cfg.requests,
        },
        requests: all.requests,
        bytes_read: all.bytes,
        requests_per_s: ((all.requests as f64 / secs) * 100.0).round() / 100.0,
        bytes_per_s: (all.bytes as f64 / secs).round(),
        latency: distribution(&all.latency),
        time_to_first_byte: distribution(&all.ttfb),
        max_read_gap: distribution(&all.gap),
        connect: distribution(&all.connect),
        connection_times: all.times.report(),
        tls: cfg.tls.as_ref().map(|t| {
            let n = all.negotiated.clone().unwrap_or_default();
            TlsReport {
                version: n.version,
                cipher_suite: n.cipher_suite,
                alpn: n.alpn,
                handshakes: all.handshakes,
                resumed: all.resumed,
                handshake: distribution(&all.handshake),
                certificate: t.trust,
            }
        }),
        requests_per_s_per_thread: thread_rate(&all.rate_samples),
        latency_histogram: crate::record::Histogram::from(&all.latency),
        timeline_step_s: cfg.step.as_secs_f64(),
        timeline: timeline(&all.timeline, cfg.step, elapsed),
        notes: notes::notes(&cfg, &all),
        nothing_measured: notes::nothing_measured(&cfg, &all, interrupted),
        errors: all.errors,
        status_codes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_rate_of_samples() {
        let r = thread_rate(&[10.0, 10.0, 20.0, 20.0]);
        assert_eq!((r.mean, r.stdev, r.max, r.within_stdev_pct), (15.0, 5.0, 20.0, 100.0));
        assert_eq!(thread_rate(&[]).mean, 0.0);
    }
}
