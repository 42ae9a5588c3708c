//! One bench run summarised: a step of `diagnose` and the load of
//! `--try-nodelay`, before and after.

use super::bench::{BenchReport, Distribution};
use serde::Serialize;

/// One bench run, summarised.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
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
    /// `latency` as a histogram (for drawing).
    pub latency_histogram: super::Histogram,
    /// bench's notes (delayed-ACK clustering and its signature, error words).
    pub notes: Vec<String>,
    /// TLS (https URLs only): version, cipher suite, handshakes and their times.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<super::bench::TlsReport>,
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
            latency_histogram: super::Histogram::default(),
            notes: Vec::new(),
            tls: None,
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
            latency_histogram: r.latency_histogram.clone(),
            notes: r.notes.clone(),
            tls: r.tls.clone(),
        }
    }
}
