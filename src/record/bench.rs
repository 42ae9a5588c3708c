//! `bench`'s record: latency, first byte, read gaps, connects, TLS, errors,
//! and the rate over time.

use serde::Serialize;
use std::collections::BTreeMap;

/// Everything one `bench` run measured.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct BenchReport {
    /// Schema version (`SCHEMA_VERSION`).
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

/// One row of `ConnectionTimes`.
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
