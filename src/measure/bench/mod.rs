//! `bench`: wrk-class HTTP/1.1 load with what wrk lacks: time to first
//! byte, the largest gap inside one response (the client-side signature of a
//! server's Nagle stall), connect times, errors by kind, client socket knobs
//! (`--nodelay`, `--quickack`, `--split-writes`) and a fixed-rate mode with
//! coordinated-omission correction (as wrk2).
//!
//! One thread per worker, each with its own epoll loop; the request bytes are
//! built once and nothing is allocated per request.

pub mod http;
mod sock;
mod worker;

use crate::dist::{Coarse, Dist};
use crate::report::bench::{BenchOptions, BenchReport, Distribution, Errors, ThreadRate, TimePoint};
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What the user asked for.
#[derive(Clone, Debug)]
pub struct Options {
    /// `http://host[:port][/path]`.
    pub url: String,
    /// Worker threads.
    pub threads: usize,
    /// Connections (spread over the threads; all are used).
    pub connections: usize,
    /// How long to run.
    pub duration: Duration,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Request method.
    pub method: String,
    /// Extra header lines (`Name: value`).
    pub headers: Vec<String>,
    /// Request body.
    pub body: Vec<u8>,
    /// Fixed total request rate, requests/s.
    pub rate: Option<f64>,
    /// Reuse connections.
    pub keepalive: bool,
    /// TCP_NODELAY on client sockets.
    pub nodelay: bool,
    /// TCP_QUICKACK after every read.
    pub quickack: bool,
    /// Write the request header and body separately.
    pub split_writes: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            url: String::new(),
            threads: 2,
            connections: 10,
            duration: Duration::from_secs(10),
            timeout: Duration::from_secs(2),
            method: "GET".into(),
            headers: Vec::new(),
            body: Vec::new(),
            rate: None,
            keepalive: true,
            nodelay: true,
            quickack: false,
            split_writes: false,
        }
    }
}

/// A run that could not start; the message says what to change.
#[derive(Debug)]
pub struct BenchError(pub String);

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

/// A validated run.
#[derive(Debug)]
pub(crate) struct Config {
    url: String,
    addr: SocketAddr,
    threads: usize,
    connections: usize,
    duration: Duration,
    timeout: Duration,
    request: http::Request,
    method: String,
    rate: Option<f64>,
    keepalive: bool,
    nodelay: bool,
    quickack: bool,
    split_writes: bool,
    /// Width of one point of latency over time (1 s, or longer to keep ≤ 600 points).
    step: Duration,
    notes: Vec<String>,
}

/// Splits `http://host[:port][/path]` into (authority, host, port, path).
pub(crate) fn split_url(url: &str) -> Result<(String, String, u16, String), BenchError> {
    let bad = |why: &str| BenchError(format!("URL {url:?}: {why} (expected http://HOST[:PORT][/PATH])"));
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {
            return Err(bad("https is not supported: bench speaks plain HTTP/1.1; point it at the HTTP port"));
        }
        Some(_) => return Err(bad("unknown scheme")),
        None => url,
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    if authority.is_empty() {
        return Err(bad("no host"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, tail) = v6.split_once(']').ok_or_else(|| bad("unclosed ["))?;
        (h, tail.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().map_err(|_| bad("bad port"))?,
        None => 80,
    };
    Ok((authority.to_string(), host.to_string(), port, path))
}

impl Config {
    /// Checks the options and resolves the host.
    pub(crate) fn new(o: &Options) -> Result<Config, BenchError> {
        let (authority, host, port, path) = split_url(&o.url)?;
        let addr = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| BenchError(format!("URL {:?}: cannot resolve {host}: {e}", o.url)))?
            .next()
            .ok_or_else(|| BenchError(format!("URL {:?}: {host} has no address", o.url)))?;
        if o.connections == 0 {
            return Err(BenchError("-c must be at least 1".into()));
        }
        if o.threads == 0 {
            return Err(BenchError("-t must be at least 1".into()));
        }
        if o.duration.is_zero() || o.timeout.is_zero() {
            return Err(BenchError("-d and --timeout must be longer than 0".into()));
        }
        if let Some(r) = o.rate
            && !(r.is_finite() && r > 0.0)
        {
            return Err(BenchError(format!("-R {r}: the rate must be a positive number of requests/s")));
        }
        if o.split_writes && o.body.is_empty() {
            return Err(BenchError(
                "--split-writes writes the request header, then the body: give a body with --body or --body-file"
                    .into(),
            ));
        }
        let mut notes = Vec::new();
        let threads = if o.threads > o.connections {
            notes.push(format!(
                "{} threads for {} connections: using {} threads",
                o.threads, o.connections, o.connections
            ));
            o.connections
        } else {
            o.threads
        };
        let method = o.method.to_ascii_uppercase();
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') {
            return Err(BenchError(format!("--method {:?}: not an HTTP method", o.method)));
        }
        if let Some(h) = o.headers.iter().find(|h| !h.contains(':') || h.contains(['\r', '\n'])) {
            return Err(BenchError(format!("-H {h:?}: expected 'Name: value' on one line")));
        }
        let request = http::Request::new(&method, &authority, &path, &o.headers, &o.body, !o.keepalive);
        Ok(Config {
            url: o.url.clone(),
            addr,
            threads,
            connections: o.connections,
            duration: o.duration,
            timeout: o.timeout,
            request,
            method,
            rate: o.rate,
            keepalive: o.keepalive,
            nodelay: o.nodelay,
            quickack: o.quickack,
            split_writes: o.split_writes,
            step: (o.duration / 600).max(Duration::from_secs(1)),
            notes,
        })
    }
}

/// One worker's measurements; merged at the end.
#[derive(Debug)]
pub(crate) struct Stats {
    latency: Dist,
    ttfb: Dist,
    gap: Dist,
    connect: Dist,
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
}

impl Stats {
    fn new() -> Stats {
        Stats {
            latency: Dist::default(),
            ttfb: Dist::default(),
            gap: Dist::default(),
            connect: Dist::default(),
            requests: 0,
            bytes: 0,
            errors: Errors::default(),
            statuses: vec![0; 1000],
            rate_samples: Vec::with_capacity(1024),
            timeline: Vec::new(),
            first_errors: [None, None, None],
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

/// Delayed-ACK timers and other kernel "magic numbers", ms: (low, high, what).
const CLUSTERS: [(f64, f64, &str); 2] = [
    (36.0, 52.0, "Linux's delayed-ACK timer (40 ms minimum)"),
    (185.0, 230.0, "a 200 ms timer: Windows' delayed ACK, or Linux's minimum retransmission timeout"),
];
/// Share of responses in a band that makes it worth a note.
const CLUSTER_SHARE: f64 = 0.2;

/// Plain-language observations on the distributions.
fn notes(cfg: &Config, s: &Stats) -> Vec<String> {
    let mut out = cfg.notes.clone();
    let pct = |x: f64| (x * 100.0).round();
    for (lo, hi, what) in CLUSTERS {
        let share = s.latency.share_between(lo, hi);
        if share < CLUSTER_SHARE {
            continue;
        }
        let gap_share = s.gap.share_between(lo * 0.8, hi);
        let mut n = format!("{}% of responses took {lo:.0}-{hi:.0} ms: {what}.", pct(share));
        if gap_share >= CLUSTER_SHARE {
            n.push_str(&format!(
                " In {}% the first bytes came at once and the rest {:.0} ms later (largest read gap p50): \
the server writes its response in pieces with Nagle on, and the last piece waits for this client's delayed ACK. \
Fix: TCP_NODELAY on the server (nginx: `tcp_nodelay on;`); confirm with `--quickack`, which should remove the stall.",
                pct(gap_share),
                s.gap.quantile_ms(0.5)
            ));
        } else if cfg.split_writes && !cfg.nodelay {
            n.push_str(
                " This client wrote the request header and body separately with Nagle on (--split-writes \
--nodelay off): the body waited for the server's delayed ACK (client-side Nagle). Fix: TCP_NODELAY on the \
client, or one write per request.",
            );
        } else if cfg.quickack && lo < 100.0 {
            n.push_str(" With --quickack on, this is not this client delaying ACKs: look at the server's think time.");
        } else {
            n.push_str(
                " Whole responses arrived late (no gap inside them): the server took that long, or the request \
was held before it reached the server. `tcpdoctor analyze` on a capture tells which.",
            );
        }
        out.push(n);
    }
    for (lo, hi, what) in [(900.0, 1300.0, "1 s"), (2900.0, 3500.0, "3 s")] {
        let share = s.connect.share_between(lo, hi);
        if share >= CLUSTER_SHARE {
            out.push(format!(
                "{}% of connects took ~{what}: SYN retransmissions (the first SYN or SYN-ACK was lost, the kernel \
retried after its {what} timer). Look for a full accept queue or packet loss on the server's side.",
                pct(share)
            ));
        }
    }
    for ((kind, n), why) in
        [("connect", s.errors.connect), ("read", s.errors.read), ("write", s.errors.write)].iter().zip(&s.first_errors)
    {
        if let (true, Some(why)) = (*n > 0, why) {
            out.push(format!("{n} {kind} errors; the first: {why}."));
        }
    }
    if s.requests == 0 && s.errors.timeout > 0 {
        out.push(format!(
            "The server accepted connections but never answered within {}: {} timeouts.",
            crate::report::bench::time_ms(cfg.timeout.as_secs_f64() * 1e3),
            s.errors.timeout
        ));
    }
    out
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
    Err(BenchError(format!(
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
    let stats = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        let mut first = 0;
        for (t, counter) in counters.iter().enumerate() {
            // Every connection is used: the first (c mod t) workers take one more.
            let n = cfg.connections / cfg.threads + usize::from(t < cfg.connections % cfg.threads);
            let cfg = &cfg;
            let first_conn = first;
            first += n;
            handles.push(scope.spawn(move || -> Result<Stats, String> {
                let w = worker::Worker::new(cfg, n, start, first_conn).map_err(|e| format!("epoll: {e}"))?;
                Ok(w.run(deadline, &crate::interrupt::requested, counter))
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
    // Workers stop at the deadline; only Ctrl-C makes the run shorter.
    let elapsed = if interrupted { start.elapsed().min(cfg.duration) } else { cfg.duration };
    let mut all = Stats::new();
    for s in stats {
        all.merge(s.map_err(BenchError)?);
    }
    let secs = elapsed.as_secs_f64();
    let status_codes: BTreeMap<u16, u64> =
        all.statuses.iter().enumerate().filter(|(_, n)| **n > 0).map(|(c, n)| (c as u16, *n)).collect();
    Ok(BenchReport {
        schema: crate::report::SCHEMA_VERSION,
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
        },
        requests: all.requests,
        bytes_read: all.bytes,
        requests_per_s: ((all.requests as f64 / secs) * 100.0).round() / 100.0,
        bytes_per_s: (all.bytes as f64 / secs).round(),
        latency: distribution(&all.latency),
        time_to_first_byte: distribution(&all.ttfb),
        max_read_gap: distribution(&all.gap),
        connect: distribution(&all.connect),
        requests_per_s_per_thread: thread_rate(&all.rate_samples),
        latency_histogram: crate::report::Histogram::from(&all.latency),
        timeline_step_s: cfg.step.as_secs_f64(),
        timeline: timeline(&all.timeline, cfg.step, elapsed),
        notes: notes(&cfg, &all),
        errors: all.errors,
        status_codes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = split_url("http://127.0.0.1:8080/a/b?c").unwrap();
        assert_eq!(u, ("127.0.0.1:8080".into(), "127.0.0.1".into(), 8080, "/a/b?c".into()));
        let u = split_url("http://[::1]/").unwrap();
        assert_eq!((u.1.as_str(), u.2, u.3.as_str()), ("::1", 80, "/"));
        let u = split_url("localhost:81?x=1").unwrap();
        assert_eq!((u.1.as_str(), u.2, u.3.as_str()), ("localhost", 81, "/?x=1"));
        assert!(split_url("https://x/").unwrap_err().0.contains("https is not supported"));
        assert!(split_url("http://x:99999/").is_err());
        assert!(split_url("http:///").is_err());
    }

    #[test]
    fn options_are_checked() {
        let o = |f: &dyn Fn(&mut Options)| {
            let mut o = Options { url: "http://127.0.0.1:1/".into(), ..Options::default() };
            f(&mut o);
            Config::new(&o)
        };
        assert!(o(&|_| {}).is_ok());
        assert!(o(&|o| o.connections = 0).is_err());
        assert!(o(&|o| o.split_writes = true).unwrap_err().0.contains("--body"));
        assert!(o(&|o| o.rate = Some(0.0)).is_err());
        assert!(o(&|o| o.headers = vec!["no colon".into()]).is_err());
        let c = o(&|o| {
            o.threads = 8;
            o.connections = 3
        })
        .unwrap();
        assert_eq!(c.threads, 3);
        assert_eq!(c.notes.len(), 1);
    }

    #[test]
    fn thread_rate_of_samples() {
        let r = thread_rate(&[10.0, 10.0, 20.0, 20.0]);
        assert_eq!((r.mean, r.stdev, r.max, r.within_stdev_pct), (15.0, 5.0, 20.0, 100.0));
        assert_eq!(thread_rate(&[]).mean, 0.0);
    }
}
