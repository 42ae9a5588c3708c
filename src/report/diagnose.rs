//! `diagnose` results: one record per run of the method (RTT, alone vs
//! under load, the quick-ACK experiment, capture, server process, verdict),
//! and its text.

use super::bench::{BenchReport, Distribution};
use super::{Breakdown, Finding};
use serde::Serialize;
use std::fmt::Write;

/// Everything one `diagnose` run measured and concluded.
#[derive(Clone, Debug, Serialize)]
pub struct DiagnoseReport {
    /// Schema version ([`super::SCHEMA_VERSION`]).
    pub schema: u32,
    /// tcpdoctor's version.
    pub version: &'static str,
    /// The URL diagnosed.
    pub url: String,
    /// The address it resolved to.
    pub address: String,
    /// Whether that address belongs to this host (the server process can be inspected).
    pub local: bool,
    /// Wall time of the whole run, s.
    pub elapsed_s: f64,
    /// Step 1: TCP round trip.
    pub rtt: Option<RttStep>,
    /// Step 2: requests on fresh connections, one at a time.
    pub alone: Option<LoadStep>,
    /// Step 2: keep-alive requests on several connections at once.
    pub load: Option<LoadStep>,
    /// Step 3: the same load with TCP_QUICKACK on the client (run only when load is far above alone).
    pub quickack: Option<LoadStep>,
    /// Step 4: packets captured during the load, analysed.
    pub capture: Option<CaptureStep>,
    /// Step 5: the server process, when it runs on this host.
    pub server: Option<ServerStep>,
    /// `Server:` header of the first response, if any.
    pub server_header: Option<String>,
    /// Step 6: the conclusion.
    pub verdict: Verdict,
    /// Steps skipped or failed, and why (missing evidence).
    pub missing: Vec<String>,
}

/// TCP round trip to the port (probe).
#[derive(Clone, Debug, Serialize)]
pub struct RttStep {
    /// `raw_syn` (kernel timestamps) or `connect`.
    pub method: &'static str,
    /// Probes sent and answered.
    pub sent: u32,
    /// Probes answered.
    pub received: u32,
    /// Smallest round trip, ms.
    pub min_ms: Option<f64>,
    /// Mean round trip, ms.
    pub avg_ms: Option<f64>,
}

/// One bench run, summarised.
#[derive(Clone, Debug, Serialize)]
pub struct LoadStep {
    /// Connections.
    pub connections: usize,
    /// Keep-alive (many requests per connection) or a new connection per request.
    pub keepalive: bool,
    /// TCP_QUICKACK after every read on the client.
    pub quickack: bool,
    /// Measured time, s.
    pub elapsed_s: f64,
    /// Completed responses.
    pub requests: u64,
    /// Responses per second.
    pub requests_per_s: f64,
    /// Request written → last byte, ms.
    pub latency: Distribution,
    /// Request written → first byte, ms.
    pub time_to_first_byte: Distribution,
    /// Largest gap between two reads of one response, ms.
    pub max_read_gap: Distribution,
    /// Errors of every kind.
    pub errors: u64,
    /// bench's notes (delayed-ACK clustering and its signature, error words).
    pub notes: Vec<String>,
}

impl LoadStep {
    /// A step with nothing measured yet.
    pub fn empty(connections: usize, keepalive: bool, quickack: bool) -> LoadStep {
        LoadStep {
            connections,
            keepalive,
            quickack,
            elapsed_s: 0.0,
            requests: 0,
            requests_per_s: 0.0,
            latency: Distribution::default(),
            time_to_first_byte: Distribution::default(),
            max_read_gap: Distribution::default(),
            errors: 0,
            notes: Vec::new(),
        }
    }

    /// Summarises a bench run.
    pub fn of(r: &BenchReport) -> LoadStep {
        LoadStep {
            connections: r.connections,
            keepalive: r.options.keepalive,
            quickack: r.options.quickack,
            elapsed_s: r.elapsed_s,
            requests: r.requests,
            requests_per_s: r.requests_per_s,
            latency: r.latency.clone(),
            time_to_first_byte: r.time_to_first_byte.clone(),
            max_read_gap: r.max_read_gap.clone(),
            errors: r.errors.total(),
            notes: r.notes.clone(),
        }
    }
}

/// The live capture taken during the load, analysed like `analyze`.
#[derive(Clone, Debug, Serialize)]
pub struct CaptureStep {
    /// Interface captured on.
    pub interface: String,
    /// Packets kept.
    pub packets: u64,
    /// Packets the kernel dropped (ring full).
    pub kernel_drops: u64,
    /// What the analysis found, worst first.
    pub findings: Vec<Finding>,
    /// Where the server's exchange time went.
    pub breakdown: Vec<Breakdown>,
}

/// The server process found listening on the port.
#[derive(Clone, Debug, Serialize)]
pub struct ServerStep {
    /// Process id.
    pub pid: u32,
    /// Process name.
    pub name: String,
    /// Server software kind: nginx, jdk-httpserver, java, python, node, go, other.
    pub software: String,
    /// The software's own TCP_NODELAY knob, when known (nginx `tcp_nodelay`, the JDK property).
    pub nodelay_setting: Option<bool>,
    /// Established connections seen.
    pub established: usize,
    /// Of those, with TCP_NODELAY off (Nagle on).
    pub nagle_on: usize,
    /// Sockets whose options could not be read.
    pub unreadable: usize,
}

/// The conclusion.
#[derive(Clone, Debug, Serialize, Default)]
pub struct Verdict {
    /// `nagle_delayed_ack`, `app_latency`, `network`, `retransmission`,
    /// `syn_retransmission`, `zero_window`, `server_errors`, `unreachable` or `none`.
    pub cause: &'static str,
    /// The verdict in one or two sentences.
    pub summary: String,
    /// `ip:port (server|client)` of the side running Nagle.
    pub nagle_side: Option<String>,
    /// The side delaying its ACKs.
    pub delayed_ack_side: Option<String>,
    /// Time this cause costs one request, ms (median).
    pub lost_per_request_ms: f64,
    /// `high` (independent evidence agrees), `medium` (one strong signal) or `low`.
    pub confidence: &'static str,
    /// What supports it, one fact per line, each naming its step.
    pub evidence: Vec<String>,
    /// What to change, most direct first.
    pub fix: Vec<String>,
}

/// Before and after, for `--verify`.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// The diagnosis before the fix.
    pub before: DiagnoseReport,
    /// The diagnosis after.
    pub after: DiagnoseReport,
    /// Median latency under load, before ÷ after.
    pub speedup_p50: f64,
    /// Whether the cause found before is gone after.
    pub fixed: bool,
}

/// A step's one-line finding, for printing as the run goes.
pub fn step_line(n: usize, title: &str, text: &str) -> String {
    format!("[{n}/6] {title:<15} {text}\n")
}

/// Latency in the unit that reads best.
pub fn ms(v: f64) -> String {
    if v < 1.0 {
        format!("{:.0} µs", v * 1e3)
    } else if v < 100.0 {
        format!("{v:.1} ms")
    } else if v < 10_000.0 {
        format!("{v:.0} ms")
    } else {
        format!("{:.1} s", v / 1e3)
    }
}

/// The verdict block.
pub fn render_verdict(r: &DiagnoseReport) -> String {
    let v = &r.verdict;
    let mut s = String::new();
    let _ = writeln!(s, "\nVERDICT ({} confidence): {}", v.confidence, v.summary);
    if let Some(n) = &v.nagle_side {
        let _ = writeln!(s, "  Nagle (no TCP_NODELAY): {n}");
    }
    if let Some(d) = &v.delayed_ack_side {
        let _ = writeln!(s, "  Delays its ACKs:        {d}");
    }
    if v.lost_per_request_ms > 0.0 {
        let _ = writeln!(s, "  Lost per request:       {} (median)", ms(v.lost_per_request_ms));
    }
    if !v.evidence.is_empty() {
        let _ = writeln!(s, "EVIDENCE");
        for e in &v.evidence {
            let _ = writeln!(s, "  - {e}");
        }
    }
    if !r.missing.is_empty() {
        let _ = writeln!(s, "NOT CHECKED");
        for m in &r.missing {
            let _ = writeln!(s, "  - {m}");
        }
    }
    if !v.fix.is_empty() {
        let _ = writeln!(s, "FIX");
        for f in &v.fix {
            let _ = writeln!(s, "  - {f}");
        }
    }
    s
}

/// Before and after side by side.
pub fn render_comparison(c: &Comparison) -> String {
    let mut s = String::new();
    let row = |s: &mut String, what: &str, b: String, a: String| {
        let _ = writeln!(s, "  {what:<26} {b:>18} {a:>18}");
    };
    let _ = writeln!(s, "\nBEFORE / AFTER");
    row(&mut s, "", "before".into(), "after".into());
    row(&mut s, "url", short(&c.before.url), short(&c.after.url));
    let lat =
        |r: &DiagnoseReport, f: fn(&Distribution) -> f64| r.load.as_ref().map_or("-".into(), |l| ms(f(&l.latency)));
    row(&mut s, "p50 under load", lat(&c.before, |d| d.p50), lat(&c.after, |d| d.p50));
    row(&mut s, "p99 under load", lat(&c.before, |d| d.p99), lat(&c.after, |d| d.p99));
    let rps = |r: &DiagnoseReport| r.load.as_ref().map_or("-".into(), |l| format!("{:.0}/s", l.requests_per_s));
    row(&mut s, "requests", rps(&c.before), rps(&c.after));
    let stalls = |r: &DiagnoseReport| {
        r.capture.as_ref().map_or("-".into(), |cap| {
            let n: u64 =
                cap.findings.iter().map(|f| if let Finding::NagleDelayedAck(n) = f { n.stalls } else { 0 }).sum();
            n.to_string()
        })
    };
    row(&mut s, "Nagle stalls captured", stalls(&c.before), stalls(&c.after));
    row(&mut s, "verdict", c.before.verdict.cause.into(), c.after.verdict.cause.into());
    let _ = writeln!(
        s,
        "{}: median latency under load {} -> {} ({:.0}x).",
        if c.fixed { "FIXED" } else { "NOT FIXED" },
        lat(&c.before, |d| d.p50),
        lat(&c.after, |d| d.p50),
        c.speedup_p50
    );
    s
}

fn short(url: &str) -> String {
    let u = url.trim_start_matches("http://");
    if u.chars().count() > 18 { format!("{}…", u.chars().take(17).collect::<String>()) } else { u.to_string() }
}
