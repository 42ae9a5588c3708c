//! Shared helpers for integration tests.
#![allow(dead_code)]

use std::process::{Command, Stdio};

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
