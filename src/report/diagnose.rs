//! `diagnose`'s text: the verdict block and the before/after comparison.

use crate::record::diagnose::{Comparison, DiagnoseReport};
use crate::words::ms;
use std::fmt::Write;

/// The verdict block.
pub fn render_verdict(r: &DiagnoseReport) -> String {
    let v = &r.verdict;
    let mut s = String::new();
    let head = format!("VERDICT ({} confidence):", v.confidence);
    let paint = if v.cause == "none" { super::style::good } else { super::style::bad };
    let _ = writeln!(s, "\n{} {}", paint(&head), v.summary);
    if let Some(n) = &v.nagle_side {
        let _ = writeln!(s, "  Nagle (no TCP_NODELAY): {n}");
    }
    if let Some(d) = &v.delayed_ack_side {
        let _ = writeln!(s, "  Delays its ACKs:        {d}");
    }
    if v.lost_per_request_ms > 0.0 {
        let _ = writeln!(s, "  Lost per request:       {} (median)", ms(v.lost_per_request_ms));
    }
    if !v.evidence.is_empty() {
        let _ = writeln!(s, "{}", super::style::head("EVIDENCE"));
        for e in &v.evidence {
            let _ = writeln!(s, "  - {e}");
        }
    }
    if !r.missing.is_empty() {
        let _ = writeln!(s, "{}", super::style::warn("NOT CHECKED"));
        for m in &r.missing {
            let _ = writeln!(s, "  - {m}");
        }
    }
    if !v.fix.is_empty() {
        let _ = writeln!(s, "{}", super::style::head("FIX"));
        for f in &v.fix {
            let _ = writeln!(s, "  - {f}");
        }
    }
    s
}

/// Before and after side by side.
pub fn render_comparison(c: &Comparison) -> String {
    let mut s = String::new();
    let row = |s: &mut String, what: &str, b: String, a: String| {
        let _ = writeln!(s, "  {what:<24} {b:>20} {a:>20}");
    };
    let opt = |v: Option<f64>, f: fn(f64) -> String| v.map_or("-".to_string(), f);
    let _ = writeln!(s, "\nBEFORE / AFTER");
    row(&mut s, "", "before".into(), "after".into());
    row(&mut s, "url", short(&c.before.url), short(&c.after.url));
    row(&mut s, "median under load", opt(c.before.p50_ms, ms), opt(c.after.p50_ms, ms));
    row(&mut s, "p99 under load", opt(c.before.p99_ms, ms), opt(c.after.p99_ms, ms));
    let rate = |v: f64| format!("{v:.0}/s");
    row(&mut s, "requests", opt(c.before.requests_per_s, rate), opt(c.after.requests_per_s, rate));
    let n = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    row(&mut s, "Nagle stalls captured", n(c.before.stalls), n(c.after.stalls));
    row(&mut s, "verdict", c.before.cause.clone(), c.after.cause.clone());
    let _ = writeln!(
        s,
        "{}: median latency under load {} -> {}{}.",
        if c.fixed { super::style::good("FIXED") } else { super::style::bad("NOT FIXED") },
        opt(c.before.p50_ms, ms),
        opt(c.after.p50_ms, ms),
        if c.speedup_p50 > 0.0 { format!(" ({:.0}x)", c.speedup_p50) } else { String::new() }
    );
    s
}

fn short(url: &str) -> String {
    let u = url.trim_start_matches("http://");
    if u.chars().count() > 20 { format!("{}…", u.chars().take(19).collect::<String>()) } else { u.to_string() }
}
