//! Records the compiler's version and the target triple for watch's
//! `tcpdoctor_build_info` metric.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC");
    // Cargo names the compiler it builds with; `rustc --version` says "rustc 1.95.0 (hash date)".
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(&rustc).arg("--version").output().expect("cargo's RUSTC runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().nth(1).expect("rustc --version names a version");
    println!("cargo:rustc-env=TCPDOCTOR_RUSTC={version}");
    println!("cargo:rustc-env=TCPDOCTOR_TARGET={}", std::env::var("TARGET").expect("cargo sets TARGET"));
}
