//! The JSON Schemas in `schema/`: equal to what the types generate (run with
//! `TCPDOCTOR_WRITE_SCHEMAS=1` to rewrite them after changing a type), every
//! verb's real output valid against its schema, and the README's field lists
//! naming exactly the schema's fields. Real servers on loopback (the lab);
//! root for capture, raw probes and watch (skipped locally without it,
//! failed with CI=true).

mod common;

use common::{lab, lab_rows, port_of, require_root, run_bounded, tcpdoctor, url_of};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

fn schema_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schema")
}

fn schema(stem: &str) -> Value {
    let path = schema_dir().join(format!("{stem}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// Checks `v` against `schema/STEM.json`, listing every violation.
fn valid(stem: &str, v: &Value) {
    let s = schema(stem);
    let validator = jsonschema::validator_for(&s).unwrap();
    let errors: Vec<String> = validator.iter_errors(v).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "{stem}: {} violations:\n{}", errors.len(), errors.join("\n"));
}

/// `tcpdoctor ARGS`: exit code and stdout (stderr in the panic message when it is not `ok`).
fn run(args: &[&str], ok: &[i32]) -> String {
    let mut c = tcpdoctor();
    c.args(args);
    let (out, _) = run_bounded(c, Duration::from_secs(120));
    let code = out.status.code().unwrap_or(-1);
    assert!(ok.contains(&code), "{args:?}: exit {code}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn json(args: &[&str], ok: &[i32]) -> Value {
    let out = run(args, ok);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

#[test]
fn committed_schemas_equal_the_types() {
    let generated = tcpdoctor::record::schema::all();
    let write = std::env::var("TCPDOCTOR_WRITE_SCHEMAS").is_ok_and(|v| v == "1");
    if write {
        std::fs::create_dir_all(schema_dir()).unwrap();
    }
    for (stem, v) in &generated {
        let path = schema_dir().join(format!("{stem}.json"));
        let text = tcpdoctor::record::schema::text(v);
        if write {
            std::fs::write(&path, &text).unwrap();
        }
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            kept == text,
            "{} differs from what the types generate: run TCPDOCTOR_WRITE_SCHEMAS=1 cargo test --test schema committed",
            path.display()
        );
        jsonschema::meta::validate(v).unwrap_or_else(|e| panic!("{stem}: not a valid JSON Schema: {e}"));
    }
    let files: BTreeSet<String> = std::fs::read_dir(schema_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = generated.iter().map(|(s, _)| format!("{s}.json")).collect();
    assert_eq!(files, expected, "schema/ holds exactly one file per generated schema");
}

#[test]
fn offline_outputs_are_valid() {
    let capture = common::data("wwr_nagle.pcap").display().to_string();
    let v = json(&["analyze", &capture, "--json"], &[0, 1]);
    assert_eq!(v["findings"][0]["kind"], "nagle_delayed_ack");
    valid("analyze", &v);
    let v = json(&["analyze", &common::data("rtt/proxy_jdk.pcap").display().to_string(), "--json"], &[0, 1]);
    valid("analyze", &v);
    let v = json(&["demo", "--offline", "--json"], &[0]);
    assert_eq!(v.as_array().unwrap().len(), 2);
    valid("demo-offline", &v);
    // A wrong field type is caught: the check can fail.
    let mut bad = v[0].clone();
    bad["schema"] = "one".into();
    assert!(!jsonschema::is_valid(&schema("analyze"), &bad));
}

#[test]
fn live_outputs_are_valid() {
    if !require_root() {
        return;
    }
    let (lab_proc, rows) = lab_rows(&[]);
    assert!(rows.iter().all(|r| r["schema"] == 1 && r["version"].is_string()), "{rows:?}");
    valid("lab", &Value::Array(rows.clone()));
    let servers: Vec<(String, String)> =
        rows.iter().map(|r| (r["name"].as_str().unwrap().into(), r["url"].as_str().unwrap().into())).collect();
    let nagle = url_of(&servers, "nagle").to_string();
    let port = port_of(&nagle).to_string();

    let v = json(&["bench", "-c", "2", "-d", "1s", "--json", &nagle], &[0]);
    valid("bench", &v);
    let v = json(&["bench", "-n", "5", "--json", &nagle], &[0]);
    valid("bench", &v);
    valid("probe", &json(&["probe", "127.0.0.1", "-p", &port, "-c", "2", "-i", "0.1", "--json"], &[0]));
    valid("probe", &json(&["probe", "127.0.0.1", "-p", "1", "-c", "1", "--unprivileged", "--json"], &[0]));
    valid("trace", &json(&["trace", "127.0.0.1", "-p", &port, "-q", "1", "--json"], &[0]));
    let pid = lab_proc.0.id().to_string();
    valid("inspect", &json(&["inspect", &pid, "--json"], &[0, 1]));
    valid("inspect", &json(&["inspect", &format!(":{port}"), "--json"], &[0, 1]));
    let on = json(&["nodelay", &format!(":{port}"), "on", "--json"], &[0]);
    valid("nodelay", &on);
    valid("nodelay", &json(&["nodelay", &format!(":{port}"), "restore", "--json"], &[0]));
    let d = json(&["diagnose", "-d", "1s", "--json", &nagle], &[0, 1]);
    assert_eq!(d["verdict"]["cause"], "nagle_delayed_ack");
    valid("diagnose", &d);

    // watch: finding lines while the Nagle server is under load, then the summaries.
    let mut w = tcpdoctor();
    w.args(["watch", "-i", "lo", "--json", "--duration", "3s", "--summary-every", "1s", "port", &port]);
    let watch = std::thread::spawn(move || run_bounded(w, Duration::from_secs(30)).0);
    std::thread::sleep(Duration::from_millis(700));
    run(&["bench", "-c", "2", "-d", "1s", &nagle], &[0]);
    let out = watch.join().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let kinds: BTreeSet<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, BTreeSet::from(["finding", "summary"]), "{lines:?}");
    for l in &lines {
        assert_eq!((l["schema"].as_u64(), l["version"].is_string()), (Some(1), true), "{l}");
        valid("watch", l);
    }
    drop(lab_proc);

    // diagnose --verify: both reports and their comparison.
    let (_lab2, servers) = lab(&[]);
    let v = json(
        &["diagnose", "-d", "1s", "--json", url_of(&servers, "nagle"), "--verify", url_of(&servers, "nodelay")],
        &[0, 1],
    );
    assert!(v["comparison"].is_object() && v["after"].is_object(), "{v}");
    valid("diagnose", &v);
}

#[test]
fn live_demo_is_valid() {
    if !require_root() {
        return;
    }
    let v = json(&["demo", "--json"], &[0]);
    valid("demo", &v);
}

/// The backticked names in the first column of the README table that follows `marker`.
fn table_fields(readme: &str, marker: &str) -> BTreeSet<String> {
    let start = readme.find(marker).unwrap_or_else(|| panic!("README: no {marker:?}"));
    let table = readme[start..].lines().skip_while(|l| !l.starts_with("| field")).skip(2);
    let mut names = BTreeSet::new();
    for row in table.take_while(|l| l.starts_with('|')) {
        let first = row.split('|').nth(1).unwrap();
        names.extend(first.split('`').skip(1).step_by(2).map(|n| n.trim_end_matches("[]").to_string()));
    }
    names
}

fn top_properties(stem: &str) -> BTreeSet<String> {
    schema(stem)["properties"].as_object().unwrap().keys().cloned().collect()
}

/// The properties of `schema/STEM.json`'s definition `def`.
fn def_properties(stem: &str, def: &str) -> BTreeSet<String> {
    let s = schema(stem);
    s["$defs"][def]["properties"].as_object().unwrap_or_else(|| panic!("{stem}: no {def}")).keys().cloned().collect()
}

/// Backticked words of the README paragraph starting at `marker` (to the next blank line).
fn paragraph_words(readme: &str, marker: &str) -> BTreeSet<String> {
    let start = readme.find(marker).unwrap_or_else(|| panic!("README: no {marker:?}"));
    let end = readme[start..].find("\n\n").map_or(readme.len(), |e| start + e);
    readme[start..end].split('`').skip(1).step_by(2).map(|n| n.trim_end_matches("[]").to_string()).collect()
}

#[test]
fn readme_field_lists_match_the_schemas() {
    let readme = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    // Tables: exactly the schema's top-level fields.
    assert_eq!(table_fields(&readme, "`tcpdoctor analyze FILE --json` prints"), top_properties("analyze"));
    assert_eq!(
        table_fields(&readme, "`--json` prints one object (schema version 1, as `analyze`)"),
        top_properties("probe")
    );
    // Prose lists: every schema field is named, nested objects too.
    let bench = paragraph_words(&readme, "`--json` prints one object (schema version 1, `src/record/bench.rs`)");
    for (what, fields) in [
        ("bench", top_properties("bench")),
        ("options", def_properties("bench", "BenchOptions")),
        ("distribution", def_properties("bench", "Distribution")),
        ("connection times", def_properties("bench", "PhaseTimes")),
        ("tls", def_properties("bench", "TlsReport")),
        ("errors", def_properties("bench", "Errors")),
    ] {
        let missing: Vec<_> = fields.difference(&bench).collect();
        assert!(missing.is_empty(), "README's bench JSON paragraph does not name {what} fields {missing:?}");
    }
    let trace =
        paragraph_words(&readme, "`--json` prints one object (schema version 1): `schema`, `version`, `method`");
    let missing: Vec<_> = top_properties("trace").into_iter().filter(|f| !trace.contains(f)).collect();
    assert!(missing.is_empty(), "README's trace JSON paragraph does not name {missing:?}");
}

/// Whether a property name says its unit, or is not a duration.
#[test]
fn every_duration_field_says_its_unit() {
    // A number whose name has no unit suffix must say its unit in its description
    // (or in its object's): fields are only added within a version, never renamed.
    let units = ["_ms", "_s", "_us", "_ns", "_pct", "_per_s"];
    let unit_words =
        ["ms", " s", "µs", "ns", "%", "/s", "count", "share", "bytes", "0–1", "number", "version", "seconds", "ratio"];
    let mut bare = Vec::new();
    for (stem, s) in tcpdoctor::record::schema::all() {
        let mut objects: Vec<(String, &Value)> = vec![(stem.to_string(), &s)];
        if let Some(defs) = s["$defs"].as_object() {
            objects.extend(defs.iter().map(|(k, v)| (format!("{stem}/{k}"), v)));
        }
        for (name, o) in objects {
            let Some(props) = o["properties"].as_object() else { continue };
            let object_says = o["description"].as_str().unwrap_or("");
            for (p, d) in props {
                let ty = d["type"].to_string();
                if !ty.contains("number") || units.iter().any(|u| p.ends_with(u)) {
                    continue;
                }
                let says = format!("{} {object_says}", d["description"].as_str().unwrap_or(""));
                if !unit_words.iter().any(|w| says.contains(w)) {
                    bare.push(format!("{name}.{p}"));
                }
            }
        }
    }
    assert!(bare.is_empty(), "numbers without a unit in their name or description: {bare:?}");
}
