//! `lab --json`: one row per server started.

use schemars::JsonSchema;
use serde::Serialize;

/// A lab server.
#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
pub struct LabRow {
    /// Schema version (`SCHEMA_VERSION`).
    pub schema: u32,
    /// tcpdoctor's version.
    pub version: &'static str,
    /// `nagle`, `nodelay`, `think`, `nagle-tls`, `nodelay-tls`, `nginx-nodelay-off`, `nginx-nodelay-on`.
    pub name: String,
    pub url: String,
    /// What the server does, in words.
    pub what: String,
    /// HTTPS servers: the PEM file of their certificate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cacert: Option<String>,
    /// nginx: its master's process id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// With `--rtt`: the network namespace the servers run in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl LabRow {
    /// A row with `schema` and `version` filled in.
    pub fn new(name: impl Into<String>, url: String, what: String) -> LabRow {
        LabRow {
            schema: super::SCHEMA_VERSION,
            version: env!("CARGO_PKG_VERSION"),
            name: name.into(),
            url,
            what,
            ..LabRow::default()
        }
    }
}
