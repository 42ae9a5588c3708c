//! `bench` results: the JSON type and wrk's text layout (so a reader of the
//! seed write-ups can swap `wrk` for `tcpdoctor bench`), plus what wrk lacks.

use crate::words::time_ms;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Everything one `bench` run measured.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct BenchReport {
    /// Schema version ([`super::SCHEMA_VERSION`]).
    pub schema: u32,
    /// tcpdoctor's version.
    pub version: &'static str,
    /// Target URL.
    pub url: String,
    /// Address connected to.
    pub address: String,
    /// Request method.
    pub method: String,
    /// Worker threads.
    pub threads: usize,
    /// Connections, all of them used.
    pub connections: usize,
    /// Requested duration, s.
    pub duration_s: f64,
    /// Time actually measured, s (shorter when interrupted).
    pub elapsed_s: f64,
    /// Stopped early by Ctrl-C.
    pub interrupted: bool,
    /// Client socket settings and modes.
    pub options: BenchOptions,
    /// Completed responses (any status).
    pub requests: u64,
    /// Bytes received.
    pub bytes_read: u64,
    /// Completed responses per second.
    pub requests_per_s: f64,
    /// Bytes received per second.
    pub bytes_per_s: f64,
    /// Request sent → last byte of the response (with `-R`: from the time the
    /// request was due, so a stalled server is not hidden: coordinated omission).
    pub latency: Distribution,
    /// Request sent → first byte of the response.
    pub time_to_first_byte: Distribution,
    /// Largest gap between two reads of one response (0 when it came in one read).
    pub max_read_gap: Distribution,
    /// Connection set-up time (new connections).
    pub connect: Distribution,
    /// ab's "Connection Times" of each request, ms.
    pub connection_times: ConnectionTimes,
    /// TLS (https URLs): what was negotiated, handshakes; null for http.
    pub tls: Option<TlsReport>,
    /// Completed responses per second, per thread, sampled every 100 ms.
    pub requests_per_s_per_thread: ThreadRate,
    /// `latency` as a histogram (for drawing).
    pub latency_histogram: super::Histogram,
    /// Width of one `timeline` point, s.
    pub timeline_step_s: f64,
    /// Latency over time, one point per step, by when each response ended.
    pub timeline: Vec<TimePoint>,
    /// Errors by kind.
    pub errors: Errors,
    /// Responses by status code.
    pub status_codes: BTreeMap<u16, u64>,
    /// Plain-language observations (delayed-ACK clustering and its signature).
    pub notes: Vec<String>,
    /// When no response completed: why, in one sentence (then `bench` exits 5); else null.
    pub nothing_measured: Option<String>,
}

/// The TLS side of a run.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct TlsReport {
    /// `TLSv1.3` or `TLSv1.2` (of the first handshake).
    pub version: String,
    /// The cipher suite, e.g. `TLS13_AES_256_GCM_SHA384`.
    pub cipher_suite: String,
    /// The application protocol the server chose (ALPN), if it chose one.
    pub alpn: Option<String>,
    /// Completed handshakes (one per new connection).
    pub handshakes: u64,
    /// Of those, resumed sessions (abbreviated handshakes).
    pub resumed: u64,
    /// TCP connected → handshake complete, ms.
    pub handshake: Distribution,
    /// How the server's certificate was checked.
    pub certificate: &'static str,
}

/// Latency during one step of a run (percentiles ±6 %).
#[derive(Clone, Debug, Serialize, Default, PartialEq, schemars::JsonSchema)]
pub struct TimePoint {
    /// Start of the step, s since the run started.
    pub t_s: f64,
    /// Responses completed in the step.
    pub requests: u64,
    /// Their rate.
    pub requests_per_s: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
}

/// Client settings of a run.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct BenchOptions {
    /// TCP_NODELAY on the client's sockets.
    pub nodelay: bool,
    /// TCP_QUICKACK set after every read.
    pub quickack: bool,
    /// Request header and body written separately.
    pub split_writes: bool,
    /// Connections reused for many requests.
    pub keepalive: bool,
    /// Fixed request rate (requests/s, all connections), if any.
    pub rate: Option<f64>,
    /// Per-request timeout, s.
    pub timeout_s: f64,
    /// A fixed number of requests (`-n`), if any.
    pub requests: Option<u64>,
}

/// ab's "Connection Times (ms)": each request's connect (zero on a reused
/// connection), processing (the rest), waiting (request written → first byte)
/// and total (from the connect's start on a new connection, else from the
/// request's; with `-n` this is also `latency`).
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct ConnectionTimes {
    pub connect: PhaseTimes,
    pub processing: PhaseTimes,
    pub waiting: PhaseTimes,
    pub total: PhaseTimes,
}

/// One row of [`ConnectionTimes`].
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct PhaseTimes {
    pub min_ms: f64,
    pub mean_ms: f64,
    /// Standard deviation, ms.
    pub sd_ms: f64,
    pub median_ms: f64,
    pub max_ms: f64,
}

/// A distribution of durations, ms.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct Distribution {
    /// Values recorded.
    pub count: u64,
    /// Mean, ms.
    pub mean: f64,
    /// Standard deviation, ms.
    pub stdev: f64,
    /// Share of values within one standard deviation of the mean, %.
    pub within_stdev_pct: f64,
    /// Percentiles, ms.
    pub p50: f64,
    /// 75th percentile, ms.
    pub p75: f64,
    /// 90th percentile, ms.
    pub p90: f64,
    /// 99th percentile, ms.
    pub p99: f64,
    /// 99.9th percentile, ms.
    pub p999: f64,
    /// Largest value, ms.
    pub max: f64,
}

/// Per-thread request rate samples.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct ThreadRate {
    /// Mean, requests/s.
    pub mean: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// Largest sample.
    pub max: f64,
    /// Share of samples within one standard deviation, %.
    pub within_stdev_pct: f64,
}

/// Errors by kind, as counts.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct Errors {
    /// Connections that could not be set up (refused, unreachable, timed out).
    pub connect: u64,
    /// Reads that failed, or the server closed or reset the connection mid-response.
    pub read: u64,
    /// Writes that failed.
    pub write: u64,
    /// Requests with no complete response within `--timeout`.
    pub timeout: u64,
    /// Responses whose status is not 2xx or 3xx.
    pub status: u64,
    /// Responses that are not valid HTTP/1.x.
    pub malformed: u64,
}

impl Errors {
    /// All errors together.
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.timeout + self.status + self.malformed
    }
}

/// A count as wrk prints it: 1.23k, 4.56M.
fn metric(v: f64) -> String {
    if v < 1e3 {
        format!("{v:.2}")
    } else if v < 1e6 {
        format!("{:.2}k", v / 1e3)
    } else {
        format!("{:.2}M", v / 1e6)
    }
}

/// Bytes as wrk prints them (binary units).
fn bytes(v: f64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"];
    let mut v = v;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2}{}", units[u])
}

/// Renders a run in wrk's layout, then what wrk does not show.
pub fn render(r: &BenchReport, latency_table: bool) -> String {
    let mut s = String::new();
    let mode = match r.options.rate {
        Some(rate) => format!(" at {} requests/s", metric(rate)),
        None => String::new(),
    };
    let d = if r.duration_s.fract() == 0.0 { format!("{}s", r.duration_s) } else { time_ms(r.duration_s * 1e3) };
    match r.options.requests {
        Some(n) => _ = writeln!(s, "Running {n} requests @ {}{mode}", r.url),
        None => _ = writeln!(s, "Running {d} test @ {}{mode}", r.url),
    }
    let _ = writeln!(s, "  {} threads and {} connections", r.threads, r.connections);
    let _ = writeln!(s, "  Thread Stats   Avg      Stdev     Max   +/- Stdev");
    let l = &r.latency;
    let _ = writeln!(
        s,
        "    Latency {:>10} {:>9} {:>9} {:>8.2}%",
        time_ms(l.mean),
        time_ms(l.stdev),
        time_ms(l.max),
        l.within_stdev_pct
    );
    let t = &r.requests_per_s_per_thread;
    let _ = writeln!(
        s,
        "    Req/Sec {:>10} {:>9} {:>9} {:>8.2}%",
        metric(t.mean),
        metric(t.stdev),
        metric(t.max),
        t.within_stdev_pct
    );
    if latency_table {
        let _ = writeln!(s, "  Latency Distribution");
        for (p, v) in [("50%", l.p50), ("75%", l.p75), ("90%", l.p90), ("99%", l.p99), ("99.9%", l.p999)] {
            let _ = writeln!(s, "  {p:>5} {:>9}", time_ms(v));
        }
    }
    let _ =
        writeln!(s, "  {} requests in {}, {} read", r.requests, time_ms(r.elapsed_s * 1e3), bytes(r.bytes_read as f64));
    let e = &r.errors;
    if e.connect + e.read + e.write + e.timeout > 0 {
        let _ = writeln!(
            s,
            "  Socket errors: connect {}, read {}, write {}, timeout {}",
            e.connect, e.read, e.write, e.timeout
        );
    }
    if e.status > 0 {
        let _ = writeln!(s, "  Non-2xx or 3xx responses: {}", e.status);
    }
    if e.malformed > 0 {
        let _ = writeln!(s, "  Malformed responses: {}", e.malformed);
    }
    let _ = writeln!(s, "Requests/sec: {:>10.2}", r.requests_per_s);
    let _ = writeln!(s, "Transfer/sec: {:>10}", bytes(r.bytes_per_s));
    if latency_table && r.requests > 0 {
        connection_times(&mut s, &r.connection_times);
    }
    // What wrk does not show.
    let _ = writeln!(s, "\n  tcpdoctor        p50       p90       p99     p99.9       max");
    let empty = Distribution::default();
    let handshake = r.tls.as_ref().map_or(&empty, |t| &t.handshake);
    for (name, d) in [
        ("First byte", &r.time_to_first_byte),
        ("Read gap", &r.max_read_gap),
        ("Connect", &r.connect),
        ("Handshake", handshake),
    ] {
        if d.count == 0 {
            continue;
        }
        let _ = writeln!(
            s,
            "  {name:<10} {:>9} {:>9} {:>9} {:>9} {:>9}",
            time_ms(d.p50),
            time_ms(d.p90),
            time_ms(d.p99),
            time_ms(d.p999),
            time_ms(d.max)
        );
    }
    let o = &r.options;
    let _ = writeln!(
        s,
        "  client: nodelay {}, quickack {}, split writes {}, keep-alive {}, timeout {}",
        on(o.nodelay),
        on(o.quickack),
        on(o.split_writes),
        on(o.keepalive),
        time_ms(o.timeout_s * 1e3)
    );
    if let Some(t) = &r.tls {
        let _ = writeln!(
            s,
            "  TLS: {} {}, ALPN {}; {} handshakes, {} resumed; certificate {}",
            if t.version.is_empty() { "-" } else { &t.version },
            if t.cipher_suite.is_empty() { "-" } else { &t.cipher_suite },
            t.alpn.as_deref().unwrap_or("none"),
            t.handshakes,
            t.resumed,
            t.certificate
        );
    }
    if r.interrupted {
        let _ = writeln!(s, "  interrupted: results cover the first {}", time_ms(r.elapsed_s * 1e3));
    }
    for n in &r.notes {
        let _ = writeln!(s, "{} {n}", super::style::warn("NOTE:"));
    }
    s
}

/// ab's block, with two decimals (ab rounds to whole ms, which is 0 on a LAN).
fn connection_times(s: &mut String, t: &ConnectionTimes) {
    let _ = writeln!(s, "\nConnection Times (ms)");
    let _ = writeln!(s, "              min   mean[+/-sd]  median      max");
    for (name, p) in
        [("Connect:", &t.connect), ("Processing:", &t.processing), ("Waiting:", &t.waiting), ("Total:", &t.total)]
    {
        let _ = writeln!(
            s,
            "{name:<11} {:>6.2} {:>7.2} {:>6.2} {:>7.2} {:>8.2}",
            p.min_ms, p.mean_ms, p.sd_ms, p.median_ms, p.max_ms
        );
    }
}

fn on(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_like_wrk() {
        assert_eq!(time_ms(0.63591), "635.91us");
        assert_eq!(time_ms(43.6), "43.60ms");
        assert_eq!(time_ms(2000.0), "2.00s");
        assert_eq!(metric(56200.0), "56.20k");
        assert_eq!(bytes(1.02 * 1024.0 * 1024.0 * 1024.0), "1.02GB");
        assert_eq!(bytes(100.0), "100.00B");
    }
}
