//! Durations in words, shared by the text of several verbs.

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
