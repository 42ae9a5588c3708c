//! Live: re-takes every capture with real servers (lab servers, nginx, the
//! JDK HttpServer, loss by nft in network namespaces) into a temp dir using
//! tests/data/make_captures.sh, then checks tcpdoctor's verdicts against the
//! script's independent tshark-based count. Needs root and the tools that
//! scripts/test.sh installs.

mod common;

use std::process::Command;

#[test]
fn fresh_captures_match_the_independent_count() {
    if !common::require_root() {
        return;
    }
    for t in ["tcpdump", "tshark", "nginx", "javac", "ab", "nft", "ip"] {
        if !common::require(t) {
            return;
        }
    }
    let dir = std::env::temp_dir().join(format!("tcpdoctor-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new("bash")
        .arg(common::data("make_captures.sh"))
        .env("TCPDOCTOR_CAPTURE_DIR", &dir)
        .output()
        .expect("bash runs");
    let log = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "make_captures.sh failed:\n{log}");
    let n = common::check_against_oracle(&dir);
    assert!(n >= 19, "{n} captures made:\n{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
