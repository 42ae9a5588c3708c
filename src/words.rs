//! Numbers in words, as the verbs' sentences (verdicts, notes, summaries)
//! and their text renderers both write them.

/// A duration for people: "44.1 ms", "812 µs", "19.5 s".
pub fn dur(ns: i64) -> String {
    let x = ns as f64;
    if ns.abs() >= 10_000_000_000 {
        format!("{:.1} s", x / 1e9)
    } else if ns.abs() >= 1_000_000_000 {
        format!("{:.2} s", x / 1e9)
    } else if ns.abs() >= 10_000_000 {
        format!("{:.1} ms", x / 1e6)
    } else if ns.abs() >= 1_000_000 {
        format!("{:.2} ms", x / 1e6)
    } else {
        format!("{:.0} µs", x / 1e3)
    }
}

/// "1 connection", "3 connections".
pub fn plural(n: u64, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}

/// The plural ending for `n` things: none for one, `s` otherwise.
pub fn plural_s(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Latency in the unit that reads best.
pub fn ms(v: f64) -> String {
    if v < 1.0 {
        format!("{:.0} µs", v * 1e3)
    } else if v < 100.0 {
        format!("{v:.1} ms")
    } else if v < 10_000.0 {
        format!("{v:.0} ms")
    } else {
        format!("{:.1} s", v / 1e3)
    }
}

/// Time as wrk prints it: µs, ms or s with two decimals.
pub fn time_ms(ms: f64) -> String {
    if ms < 1.0 {
        format!("{:.2}us", ms * 1e3)
    } else if ms < 1e3 {
        format!("{ms:.2}ms")
    } else if ms < 60e3 {
        format!("{:.2}s", ms / 1e3)
    } else {
        format!("{:.2}m", ms / 60e3)
    }
}

/// `1 socket`, `2 sockets`.
pub fn sockets(n: usize) -> String {
    format!("{n} socket{}", if n == 1 { "" } else { "s" })
}
