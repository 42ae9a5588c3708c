//! JSON Schemas of every verb's `--json` output, generated from the types
//! that serialize it (schemars), so they cannot drift from the code. The
//! repository keeps them in `schema/` (checked against this by `tests/schema.rs`).

use schemars::JsonSchema;
use schemars::generate::{Contract, SchemaSettings};

fn of<T: JsonSchema>(title: &str) -> serde_json::Value {
    // What the types write, not what they would read: a field skipped when empty is optional.
    let g = SchemaSettings::draft2020_12().with(|s| s.contract = Contract::Serialize).into_generator();
    let mut v = g.into_root_schema_for::<T>().to_value();
    if let Some(o) = v.as_object_mut() {
        o.insert("title".into(), title.into());
    }
    v
}

/// (file stem, schema) for each verb's JSON; `demo-offline` and `analyze` share a type.
pub fn all() -> Vec<(&'static str, serde_json::Value)> {
    use super::*;
    vec![
        ("analyze", of::<Report>("tcpdoctor analyze --json")),
        ("bench", of::<bench::BenchReport>("tcpdoctor bench --json")),
        ("probe", of::<ProbeReport>("tcpdoctor probe --json")),
        ("trace", of::<TraceReport>("tcpdoctor trace --json")),
        ("inspect", of::<InspectReport>("tcpdoctor inspect --json")),
        ("nodelay", of::<nodelay::NodelayReport>("tcpdoctor nodelay --json")),
        ("diagnose", of::<diagnose::DiagnoseOutput<'static>>("tcpdoctor diagnose --json")),
        ("demo", of::<demo::LiveDemo>("tcpdoctor demo --json")),
        ("demo-offline", of::<Vec<Report>>("tcpdoctor demo --offline --json")),
        ("lab", of::<Vec<lab::LabRow>>("tcpdoctor lab --json")),
        ("watch", of::<watch::Line>("tcpdoctor watch --json (each line)")),
    ]
}

/// A schema as the repository keeps it: pretty, with a final newline.
pub fn text(v: &serde_json::Value) -> String {
    format!("{}\n", serde_json::to_string_pretty(v).unwrap_or_default())
}
