//! The live `demo`'s record: each lab server diagnosed, and the fix verified.

/// One lab server diagnosed by the live demo.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct Case {
    /// `(a)`, `(b)`, `(c)`, `(d)`.
    pub label: &'static str,
    /// What the server does.
    pub server: String,
    /// What tcpdoctor found.
    pub diagnosis: super::diagnose::DiagnoseReport,
}

/// The live demo's whole record.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct LiveDemo {
    /// Schema version.
    pub schema: u32,
    /// The lab servers, diagnosed: (a)-(c) over HTTP, (d) the Nagle one over HTTPS.
    pub cases: Vec<Case>,
    /// Server (a) diagnosed again after switching it to TCP_NODELAY.
    pub after_fix: super::diagnose::DiagnoseReport,
    /// Server (a) before and after.
    pub fix: super::diagnose::Comparison,
}
