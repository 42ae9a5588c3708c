//! `diagnose URL`: the seed's layered method in one command. (1) TCP round
//! trip; (2) requests alone on fresh connections vs keep-alive load; (3) when
//! the load is far slower, the client-side quick-ACK experiment; (4) a live
//! capture during the load, analysed; (5) the server process, when local;
//! (6) the verdict, with evidence and the fix for that server. Over https
//! every step is the same: requests are timed on decrypted data, the capture
//! and the process are read at the TCP level.

mod alone;
pub mod conclude;
mod facts;
pub mod fix;
mod local;
mod no_answer;
pub mod try_nodelay;

use crate::measure::bench::{self, http::Request};
use crate::measure::probe;
use crate::measure::tls::{Target, Trust};
use crate::record::SCHEMA_VERSION;
use crate::record::diagnose::{CaptureStep, Comparison, DiagnoseReport, LoadStep, RttStep, ServerStep, Summary};
use crate::words::ms;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The largest `--before` file: a `diagnose --json` record is a few KB, a
/// hundred connections' ladders included.
pub const MAX_BEFORE_FILE: u64 = 64 << 20;

/// What to diagnose and how hard to push.
#[derive(Clone, Debug)]
pub struct Options {
    /// `http[s]://host[:port][/path]`.
    pub url: String,
    /// Keep-alive connections for the load steps.
    pub connections: usize,
    /// How long the keep-alive load runs.
    pub load: Duration,
    /// How long the quick-ACK experiment runs.
    pub experiment: Duration,
    /// Requests on fresh connections in step 2.
    pub alone: u32,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Capture packets during the load (needs CAP_NET_RAW).
    pub capture: bool,
    /// Interface to capture on (default: the one the route to the server uses).
    pub interface: Option<String>,
    /// Inspect the server process when it runs on this host.
    pub inspect: bool,
    /// Which certificates an https server may present.
    pub trust: Trust,
    /// How step 5 traces the server: eBPF when it loads (the default), or forced.
    pub trace_method: crate::inspect::TraceMethod,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            url: String::new(),
            connections: 8,
            load: Duration::from_secs(2),
            experiment: Duration::from_millis(1500),
            alone: 10,
            timeout: Duration::from_secs(1),
            capture: true,
            interface: None,
            inspect: true,
            trust: Trust::System,
            trace_method: crate::inspect::TraceMethod::Auto,
        }
    }
}

/// Where a timed step is, for a progress display.
#[derive(Clone, Copy, Debug)]
pub enum Progress {
    /// A timed step began: what it is and how long it runs.
    Start(&'static str, Duration),
    /// Time into the step and responses so far (about once a second).
    Tick(Duration, u64),
    /// The step ended; its line comes next.
    End,
}

/// A diagnosis that gave no verdict; the message says why.
#[derive(Debug)]
pub enum DiagnoseError {
    /// The URL cannot be used as written.
    Usage(String),
    /// The host does not resolve.
    Resolve(String),
    /// A step the verdict needs measured nothing: which step, and why.
    NotMeasured(String),
    /// TLS could not be set up (no CA store), or the server's certificate was refused.
    Certificate(String),
}

impl std::fmt::Display for DiagnoseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DiagnoseError::Usage(m)
            | DiagnoseError::Resolve(m)
            | DiagnoseError::NotMeasured(m)
            | DiagnoseError::Certificate(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for DiagnoseError {}

/// A step's one-line finding, for printing as the run goes.
fn step_line(n: usize, title: &str, text: &str) -> String {
    format!("[{n}/6] {title:<15} {text}\n")
}

/// Runs the method against one URL. `say` gets each step's line as soon as
/// the step ends; `progress` hears how the timed (load) steps go.
pub fn run(
    o: &Options,
    say: &mut dyn FnMut(&str),
    progress: &mut dyn FnMut(Progress),
) -> Result<DiagnoseReport, DiagnoseError> {
    let start = Instant::now();
    let bench::Url { https, authority, host, port, path } =
        bench::split_url(&o.url).map_err(|e| DiagnoseError::Usage(e.to_string()))?;
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| DiagnoseError::Resolve(format!("URL {:?}: cannot resolve {host}: {e}", o.url)))?
        .next()
        .ok_or_else(|| DiagnoseError::Resolve(format!("URL {:?}: {host} has no address", o.url)))?;
    let tls = match https {
        true => Some(Target::new(&host, &o.trust).map_err(|e| DiagnoseError::Certificate(format!("{}: {e}", o.url)))?),
        false => None,
    };
    let local = local::is_local(addr.ip());
    let mut missing = Vec::new();

    let rtt = rtt_step(addr, say, &mut missing);

    let req = Request::new("GET", &authority, &path, &[], &[], true);
    let alone = alone::run(addr, tls.as_ref(), &req, o.alone, o.timeout, Duration::from_secs(2));
    if let Some(why) = &alone.certificate {
        say(&step_line(2, "Alone", &format!("no answer: {why}")));
        return Err(DiagnoseError::Certificate(format!("{}: {why}", o.url)));
    }
    let header =
        alone.server_header.as_deref().map(|h| format!("; Server: {}", crate::escape::clean(h))).unwrap_or_default();
    say(&step_line(
        2,
        "Alone",
        &match &alone.first_error {
            _ if alone.step.requests > 0 => format!(
                "median {} (first byte {}) over {} requests, each on a fresh connection{}{header}",
                ms(alone.step.latency.p50),
                ms(alone.step.time_to_first_byte.p50),
                alone.step.requests,
                alone.step.tls.as_ref().map(tls_words).unwrap_or_default()
            ),
            Some((_, e)) => format!("no answer: {e}"),
            None => "not measured".into(),
        },
    ));
    if alone.step.requests == 0 && alone.first_error.is_none() {
        // Neither a response nor a failure: stopped before the first request ended.
        return Err(DiagnoseError::NotMeasured(
            "step 2 (one request alone): nothing measured: interrupted before any request completed".into(),
        ));
    }

    let mut report = DiagnoseReport {
        schema: SCHEMA_VERSION,
        version: env!("CARGO_PKG_VERSION"),
        url: o.url.clone(),
        address: addr.to_string(),
        local,
        elapsed_s: 0.0,
        rtt,
        alone: Some(alone.step.clone()),
        load: None,
        quickack: None,
        capture: None,
        server: None,
        server_header: alone.server_header.clone(),
        verdict: Default::default(),
        missing: Vec::new(),
        try_nodelay: None,
    };
    if alone.step.requests > 0 {
        let (load, capture, server) = load_step(o, addr, local, say, progress, &mut missing)?;
        report.quickack = experiment(o, &alone.step, &load, say, progress, &mut missing)?;
        report.load = Some(load);
        report.capture = capture;
        report.server = server;
        // Steps 4 and 5 ran beside the load; they are printed in the method's order.
        if let Some(c) = &report.capture {
            say(&step_line(4, "Capture", &local::capture_line(c)));
        }
        if let Some(s) = &report.server {
            say(&step_line(5, "Server process", &local::server_line(s)));
        }
    } else {
        missing.push("steps 2-5: the server gave no complete response to a request alone".into());
    }
    let facts = conclude::Facts {
        server: addr.to_string(),
        rtt: report.rtt.as_ref(),
        alone: report.alone.as_ref(),
        alone_error: alone.first_error.as_ref().map(|(k, e)| (*k, e.as_str())),
        load: report.load.as_ref(),
        quickack: report.quickack.as_ref(),
        capture: report.capture.as_ref(),
        process: report.server.as_ref(),
        server_header: report.server_header.as_deref(),
        tls: https,
    };
    report.verdict = conclude::conclude(&facts);
    report.missing = missing;
    report.elapsed_s = (start.elapsed().as_secs_f64() * 1e3).round() / 1e3;
    Ok(report)
}

/// Diagnoses `o.url` (before), then `after_url`, and compares them;
/// `verdict` gets each diagnosis as it is made, for the caller to show.
pub fn verify(
    o: &Options,
    after_url: &str,
    say: &mut dyn FnMut(&str),
    verdict: &mut dyn FnMut(&DiagnoseReport),
    progress: &mut dyn FnMut(Progress),
) -> Result<(DiagnoseReport, DiagnoseReport, Comparison), DiagnoseError> {
    say(&format!("== before: {}\n", o.url));
    let before = run(o, say, progress)?;
    verdict(&before);
    say(&format!("\n== after: {after_url}\n"));
    let after = run(&Options { url: after_url.to_string(), ..o.clone() }, say, progress)?;
    verdict(&after);
    let c = Comparison::new(Summary::of(&before), Summary::of(&after));
    Ok((before, after, c))
}

fn rtt_step(addr: SocketAddr, say: &mut dyn FnMut(&str), missing: &mut Vec<String>) -> Option<RttStep> {
    let o = probe::Options {
        host: addr.ip().to_string(),
        port: addr.port(),
        count: 5,
        interval: Duration::from_millis(20),
        timeout: Duration::from_millis(500),
        family: None,
        unprivileged: false,
    };
    match probe::run(&o, |_| {}) {
        Ok(r) => {
            let count = |state: &str| r.probes.iter().filter(|p| p.state == state).count() as u32;
            let s = RttStep {
                method: r.method,
                sent: r.summary.sent,
                received: r.summary.received,
                open: count("open"),
                closed: count("closed"),
                min_ms: r.summary.min_ms,
                avg_ms: r.summary.avg_ms,
            };
            let text = rtt_line(&s);
            if r.method != "raw_syn" {
                missing.push("step 1: RTT from connect() (includes this process's own overhead): run as root for raw SYNs with kernel timestamps".into());
            }
            say(&step_line(1, "TCP round trip", &text));
            Some(s)
        }
        Err(e) => {
            say(&step_line(1, "TCP round trip", &format!("not measured: {e}")));
            missing.push(format!("step 1: {e}"));
            None
        }
    }
}

/// Step 1's line: a SYN-ACK is an answer, a RST says the port is closed.
fn rtt_line(s: &RttStep) -> String {
    let how = if s.method == "raw_syn" { "raw SYN, kernel timestamps" } else { "timed connect()" };
    let rst = match s.closed {
        0 => String::new(),
        n => format!(", {n} with RST"),
    };
    match (s.open, s.min_ms, s.avg_ms) {
        (0, _, _) if s.closed > 0 => {
            format!("port closed: {} of {} probes answered with RST ({how})", s.closed, s.sent)
        }
        (open, Some(min), Some(avg)) if open > 0 => {
            format!("min {}, avg {} ({how}, {open} of {} answered{rst})", ms(min), ms(avg), s.sent)
        }
        _ => format!("no answer to {} probes ({how})", s.sent),
    }
}

/// bench's run for a timed step, reported to `progress` from start to end.
fn timed_bench(
    o: &Options,
    what: &'static str,
    duration: Duration,
    quickack: bool,
    progress: &mut dyn FnMut(Progress),
) -> Result<crate::record::bench::BenchReport, bench::BenchError> {
    progress(Progress::Start(what, duration));
    let r = bench::run(&bench_opts(o, duration, quickack), &mut |t, n| progress(Progress::Tick(t, n)));
    progress(Progress::End);
    r
}

fn bench_opts(o: &Options, duration: Duration, quickack: bool) -> bench::Options {
    bench::Options {
        url: o.url.clone(),
        threads: o.connections.clamp(1, 2),
        connections: o.connections,
        duration,
        timeout: o.timeout,
        quickack,
        trust: o.trust.clone(),
        ..bench::Options::default()
    }
}

/// `; TLSv1.3 TLS13_AES_256_GCM_SHA384, handshake 1.2 ms (3 of 10 resumed)`.
fn tls_words(t: &crate::record::bench::TlsReport) -> String {
    format!(
        "; {} {}, handshake {} ({} of {} resumed)",
        t.version,
        t.cipher_suite,
        ms(t.handshake.p50),
        t.resumed,
        t.handshakes
    )
}

fn load_line(l: &LoadStep) -> String {
    format!(
        "median {}, p99 {} over {} keep-alive connections ({} requests, {:.0}/s{})",
        ms(l.latency.p50),
        ms(l.latency.p99),
        l.connections,
        l.requests,
        l.requests_per_s,
        if l.errors > 0 { format!(", {} errors", l.errors) } else { String::new() }
    )
}

/// Step 2's load, with the capture (4) and the process inspection (5) running beside it.
fn load_step(
    o: &Options,
    addr: SocketAddr,
    local: bool,
    say: &mut dyn FnMut(&str),
    progress: &mut dyn FnMut(Progress),
    missing: &mut Vec<String>,
) -> Result<(LoadStep, Option<CaptureStep>, Option<ServerStep>), DiagnoseError> {
    let cap = if o.capture { local::start_capture(o, addr, missing) } else { None };
    if !o.capture {
        missing.push("step 4: packet capture turned off (--no-capture)".into());
    }
    let inspect = (o.inspect && local).then(|| local::start_inspect(addr.port(), o.trace_method));
    if !local {
        missing.push(format!(
            "step 5: {} is not on this host, so its process and socket options were not read",
            addr.ip()
        ));
    } else if !o.inspect {
        missing.push("step 5: process inspection turned off (--no-inspect)".into());
    }
    let result = timed_bench(o, "load ", o.load, false, progress);
    let mut capture = cap.and_then(|c| local::finish_capture(c, missing));
    let server = inspect.and_then(|i| local::finish_inspect(i, addr.port(), missing));
    let r = measured(result).map_err(|e| step_failed(2, "Under load", "under load", e, say))?;
    if r.interrupted {
        missing.push("interrupted by Ctrl-C: the load ran short".into());
    }
    let l = LoadStep::of(&r);
    say(&step_line(2, "Under load", &load_line(&l)));
    if let Some(c) = capture.take_if(|c| c.packets == 0) {
        // Responses came, packets did not: the capture watched the wrong place.
        missing.push(format!(
            "step 4: no packet of the load was seen on {} (not the interface the traffic uses? name it with -i)",
            c.interface
        ));
    }
    Ok((l, capture, server))
}

/// A timed step's report when it measured something; else why not, in words.
fn measured(
    r: Result<crate::record::bench::BenchReport, bench::BenchError>,
) -> Result<crate::record::bench::BenchReport, bench::BenchError> {
    let r = r?;
    if r.requests > 0 {
        return Ok(r);
    }
    Err(bench::BenchError::NotMeasured(r.nothing_measured.unwrap_or_else(|| "no response completed".into())))
}

/// A timed step that gave no report: its line, and the error that ends the run
/// (a refused certificate is said as it is; anything else measured nothing).
fn step_failed(n: usize, title: &str, what: &str, e: bench::BenchError, say: &mut dyn FnMut(&str)) -> DiagnoseError {
    if let bench::BenchError::Certificate(m) = e {
        say(&step_line(n, title, &format!("no answer: {m}")));
        return DiagnoseError::Certificate(m);
    }
    say(&step_line(n, title, &format!("nothing measured: {e}")));
    DiagnoseError::NotMeasured(format!("step {n} ({what}): nothing measured: {e}"))
}

/// Step 3: the same load with TCP_QUICKACK on the client, when the load is
/// far slower than one request alone.
fn experiment(
    o: &Options,
    alone: &LoadStep,
    load: &LoadStep,
    say: &mut dyn FnMut(&str),
    progress: &mut dyn FnMut(Progress),
    missing: &mut Vec<String>,
) -> Result<Option<LoadStep>, DiagnoseError> {
    if crate::interrupt::requested() {
        missing.push("step 3: not run (interrupted by Ctrl-C)".into());
        return Ok(None);
    }
    if !conclude::needs_experiment(alone, load) {
        say(&step_line(
            3,
            "Quick-ACK A/B",
            &format!(
                "not needed: under load p90 {} is within {} of one request alone ({})",
                ms(load.latency.p90),
                ms(conclude::EXCESS_MS),
                ms(alone.latency.p50)
            ),
        ));
        return Ok(None);
    }
    // Needed and empty would leave a slow load unexplained, and the verdict would fall through to "none".
    let r = measured(timed_bench(o, "quick-ACK ", o.experiment, true, progress))
        .map_err(|e| step_failed(3, "Quick-ACK A/B", "quick-ACK A/B", e, say))?;
    let q = LoadStep::of(&r);
    say(&step_line(
        3,
        "Quick-ACK A/B",
        &format!(
            "with TCP_QUICKACK on the client: median {} (without: {}); read gap inside a response: median {}",
            ms(q.latency.p50),
            ms(load.latency.p50),
            ms(load.max_read_gap.p50)
        ),
    ));
    Ok(Some(q))
}
