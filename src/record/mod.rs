//! The record model: the serde types every verb's results are made of (what
//! `--json` prints and what the renderers in `report/` read), their JSON
//! Schemas and the schema version. The verbs' code fills them; nothing here
//! measures, analyses or renders (`tests/layers.rs`). Field docs are the
//! schemas' descriptions and type names their definitions' names.

mod analyze;
pub mod bench;
pub mod demo;
pub mod diagnose;
mod finding;
mod histogram;
pub mod inspect;
pub mod lab;
mod ladder;
pub mod load;
pub mod nodelay;
pub mod probe;
pub mod schema;
pub mod trace;
pub mod watch;

pub use crate::dist::Spread;
pub use analyze::{Breakdown, Connection, EndpointRole, HostRole, Input, Report};
pub use finding::{
    AppLatencyFinding, ExpectFinding, Finding, NagleFinding, NetworkLatencyFinding, RetransFinding, SynFinding,
    UpstreamWaitFinding, ZeroWindowFinding,
};
pub use histogram::{Bin, Histogram};
pub use inspect::InspectReport;
pub use ladder::{ExchangeTimes, Ladder, Mark, Row, RowKind, flags_text};
pub use probe::{ProbeReport, ProbeResult, ProbeSummary};
pub use trace::{TraceHop, TraceProbe, TraceReport};

/// Version of the JSON schema; bumped only for incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// ns → ms with µs precision, for output.
pub fn ms(ns: i64) -> f64 {
    (ns as f64 / 1e3).round() / 1e3
}
