//! Shared helpers for integration tests.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tcpdoctor::analyze::{Options, analyze};
use tcpdoctor::capture::Capture;
use tcpdoctor::report::{Finding, NagleFinding, Report};

/// Path of a file in tests/data.
pub fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// Analyses one capture, which must be undamaged.
pub fn run_path(path: &Path) -> Report {
    let cap = Capture::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let r = analyze(&[cap], &Options { ladder_rows: 60, ..Options::default() }).expect("analysable");
    assert!(r.inputs[0].damage.is_none(), "{}: damaged: {:?}", path.display(), r.inputs[0].damage);
    assert_eq!(r.inputs[0].malformed_packets, 0, "{}: malformed packets", path.display());
    r
}

/// Analyses one capture in tests/data.
pub fn run(name: &str) -> Report {
    run_path(&data(name))
}

/// The Nagle findings.
pub fn nagle(r: &Report) -> Vec<&NagleFinding> {
    r.findings
        .iter()
        .filter_map(|f| match f {
            Finding::NagleDelayedAck(n) => Some(n),
            _ => None,
        })
        .collect()
}

/// The kinds of finding, sorted, once each.
pub fn kinds(r: &Report) -> Vec<&'static str> {
    let mut k: Vec<_> = r
        .findings
        .iter()
        .map(|f| match f {
            Finding::NagleDelayedAck(_) => "nagle_delayed_ack",
            Finding::Retransmission(_) => "retransmission",
            Finding::SynRetransmission(_) => "syn_retransmission",
            Finding::ZeroWindow(_) => "zero_window",
            Finding::AppLatency(_) => "app_latency",
        })
        .collect();
    k.sort();
    k.dedup();
    k
}

/// Checks every capture listed in `dir/expected.json` against it; returns how many.
pub fn check_against_oracle(dir: &Path) -> usize {
    let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
    let expected: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    for (name, want) in &expected {
        let r = run_path(&dir.join(name));
        let got = nagle(&r);
        let want_nagle = want["nagle"].as_array().unwrap();
        assert_eq!(got.len(), want_nagle.len(), "{name}: {:#?}", r.findings);
        for w in want_nagle {
            let f = got
                .iter()
                .find(|f| f.nagle_side.endpoint == w["endpoint"].as_str().unwrap())
                .unwrap_or_else(|| panic!("{name}: no Nagle finding for {}", w["endpoint"]));
            assert_eq!(f.nagle_side.role, w["role"].as_str().unwrap(), "{name}");
            let (lo, hi) = (w["min_stalls"].as_u64().unwrap(), w["max_stalls"].as_u64().unwrap());
            assert!((lo..=hi).contains(&f.stalls), "{name}: {} stalls, expected {lo}..={hi}", f.stalls);
        }
        for ep in want["must_not_blame"].as_array().unwrap() {
            assert!(got.iter().all(|f| f.nagle_side.endpoint != ep.as_str().unwrap()), "{name}: {ep} blamed");
        }
        let k = kinds(&r);
        for other in want["other_kinds"].as_array().unwrap() {
            assert!(k.contains(&other.as_str().unwrap()), "{name}: {other} missing from {k:?}");
        }
    }
    expected.len()
}

/// Whether an external tool the test needs is installed. Outside CI a missing
/// tool skips the test (with a note); with `CI=true` it fails it, so CI never
/// passes by skipping. `scripts/test.sh` installs every tool.
pub fn require(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool} || test -x /usr/sbin/{tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{tool} is missing; run scripts/test.sh, which installs it");
        }
        eprintln!("SKIPPED: {tool} is not installed (scripts/test.sh installs it)");
    }
    found
}

/// Whether the tests may create network namespaces and capture (root).
pub fn require_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc_geteuid() } == 0;
    if !root {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("these tests need root (network namespaces, packet capture)");
        }
        eprintln!("SKIPPED: not root");
    }
    root
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}
