//! Charts as SVG: a latency histogram on a log time axis, latency over time,
//! and where an exchange's time goes as one stacked bar.

use crate::report::text::dur;
use crate::report::{ExchangeTimes, Histogram};
use maud::{Markup, html};

const W: f64 = 820.0;
const H: f64 = 240.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 40.0;

fn ms_label(ms: f64) -> String {
    dur((ms * 1e6).round() as i64)
}

/// A decade tick label: "1 µs", "10 ms", "1 s".
fn decade_label(exp: i32) -> String {
    match exp {
        -3 => "1 µs".into(),
        -2 => "10 µs".into(),
        -1 => "100 µs".into(),
        0 => "1 ms".into(),
        1 => "10 ms".into(),
        2 => "100 ms".into(),
        3 => "1 s".into(),
        4 => "10 s".into(),
        e => format!("1e{e} ms"),
    }
}

/// One histogram drawn in a chart.
pub struct Series<'a> {
    /// Legend text.
    pub name: &'a str,
    /// CSS class (colour).
    pub class: &'a str,
    /// The data.
    pub hist: &'a Histogram,
}

/// Histograms overlaid on one log time axis, with vertical marks (percentiles) and the
/// delayed-ACK and RTO bands shaded.
pub fn histogram(series: &[Series<'_>], marks: &[(String, f64)]) -> Markup {
    let bins = series.iter().flat_map(|s| s.hist.bins.iter());
    let lo = bins.clone().map(|b| b.lo_ms.max(1e-3)).fold(f64::INFINITY, f64::min);
    let hi = bins.clone().map(|b| b.hi_ms).fold(0.0, f64::max);
    if !lo.is_finite() || hi <= 0.0 {
        return html! { p.empty { "No latencies were measured." } };
    }
    let (e0, e1) = (lo.log10().floor() as i32, (hi.log10().ceil() as i32).max(lo.log10().floor() as i32 + 1));
    let x = |ms: f64| LEFT + (ms.max(1e-3).log10() - f64::from(e0)) / f64::from(e1 - e0) * (W - LEFT - RIGHT);
    // Each series as shares of its own requests, so a 10-request run and a 80 000-request
    // run overlay readably.
    let total = |h: &Histogram| h.bins.iter().map(|b| b.count).sum::<u64>().max(1) as f64;
    let top = series
        .iter()
        .flat_map(|s| {
            let n = total(s.hist);
            s.hist.bins.iter().map(move |b| b.count as f64 / n)
        })
        .fold(0.0, f64::max)
        .max(1e-9);
    let y = |share: f64| H - BOTTOM - share / top * (H - TOP - BOTTOM);
    let band =
        |a: f64, b: f64| (x(a.clamp(10f64.powi(e0), 10f64.powi(e1))), x(b.clamp(10f64.powi(e0), 10f64.powi(e1))));
    html! {
        svg class="chart hist" xmlns="http://www.w3.org/2000/svg" width=(W) height=(H) viewBox=(format!("0 0 {W} {H}")) {
            @for (a, b, what) in [(36.0, 52.0, "delayed ACK ~40 ms"), (185.0, 230.0, "RTO / ACK 200 ms")] {
                @let (xa, xb) = band(a, b);
                @if xb - xa > 1.0 {
                    g class="band" {
                        rect x=(xa) y=(TOP) width=(xb - xa) height=(H - TOP - BOTTOM) {}
                        text x=((xa + xb) / 2.0) y=(TOP - 6.0) text-anchor="middle" { (what) }
                    }
                }
            }
            line class="axisline" x1=(LEFT) y1=(H - BOTTOM) x2=(W - RIGHT) y2=(H - BOTTOM) {}
            @for e in e0..=e1 {
                line class="grid" x1=(x(10f64.powi(e))) y1=(TOP) x2=(x(10f64.powi(e))) y2=(H - BOTTOM) {}
                text class="axis" x=(x(10f64.powi(e))) y=(H - BOTTOM + 16.0) text-anchor="middle" { (decade_label(e)) }
            }
            text class="axis" x="8" y=(TOP + 4.0) { (format!("{:.0}%", top * 100.0)) }
            text class="axis" x="8" y=(H - BOTTOM) { "0" }
            text class="axis" x=(W / 2.0) y=(H - 6.0) text-anchor="middle" { "latency (log scale); bar height: share of requests" }
            @for s in series {
                @let n = total(s.hist);
                g class=(format!("bars {}", s.class)) {
                    @for b in &s.hist.bins {
                        @let (xa, xb) = (x(b.lo_ms), x(b.hi_ms));
                        @let yb = y(b.count as f64 / n);
                        rect x=(xa) y=(yb) width=((xb - xa).max(1.0)) height=(H - BOTTOM - yb) {
                            title { (s.name) ", " (ms_label(b.lo_ms)) " – " (ms_label(b.hi_ms)) ": " (b.count) }
                        }
                    }
                }
            }
            @for (i, (name, ms)) in marks.iter().enumerate() {
                @let left = x(*ms) > W * 0.7;
                g class="mark" {
                    line x1=(x(*ms)) y1=(TOP) x2=(x(*ms)) y2=(H - BOTTOM) {}
                    text x=(if left { x(*ms) - 4.0 } else { x(*ms) + 4.0 }) y=(TOP + 12.0 + 13.0 * i as f64)
                        text-anchor=(if left { "end" } else { "start" }) { (name) " " (ms_label(*ms)) }
                }
            }
            @if series.len() > 1 {
                @for (i, s) in series.iter().enumerate() {
                    g class=(format!("legend {}", s.class)) {
                        rect x=(LEFT + 10.0) y=(TOP + 4.0 + 16.0 * i as f64) width="10" height="10" {}
                        text x=(LEFT + 26.0) y=(TOP + 13.0 + 16.0 * i as f64) { (s.name) " (" (total(s.hist) as u64) ")" }
                    }
                }
            }
        }
    }
}

/// One point of latency over time: (start s, p50, p99, max ms, requests/s).
pub type Point = (f64, f64, f64, f64, f64);

/// Latency percentiles over time (log scale) above the request rate.
pub fn timeline(points: &[Point], step_s: f64) -> Markup {
    if points.is_empty() {
        return html! { p.empty { "No responses were completed." } };
    }
    let t_end = points.last().map_or(step_s, |p| p.0 + step_s);
    let lat = points.iter().flat_map(|p| [p.1, p.2, p.3]).filter(|v| *v > 0.0);
    let (lo, hi) = (lat.clone().fold(f64::INFINITY, f64::min), lat.fold(0.0, f64::max));
    let (e0, e1) = if lo.is_finite() {
        (lo.log10().floor() as i32, (hi.log10().ceil() as i32).max(lo.log10().floor() as i32 + 1))
    } else {
        (-1, 2)
    };
    let rate_top = points.iter().map(|p| p.4).fold(1.0, f64::max);
    let (h1, h2) = (H, 120.0);
    let x = |t: f64| LEFT + t / t_end * (W - LEFT - RIGHT);
    let y = |ms: f64| h1 - BOTTOM - (ms.max(1e-3).log10() - f64::from(e0)) / f64::from(e1 - e0) * (h1 - TOP - BOTTOM);
    let yr = |r: f64| h1 + h2 - 24.0 - r / rate_top * (h2 - 40.0);
    let line = |k: fn(&Point) -> f64| {
        points
            .iter()
            .filter(|p| p.4 > 0.0)
            .map(|p| format!("{:.1},{:.1}", x(p.0 + step_s / 2.0), y(k(p))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let total = h1 + h2;
    html! {
        svg class="chart timeline" xmlns="http://www.w3.org/2000/svg" width=(W) height=(total) viewBox=(format!("0 0 {W} {total}")) {
            @for e in e0..=e1 {
                line class="grid" x1=(LEFT) y1=(y(10f64.powi(e))) x2=(W - RIGHT) y2=(y(10f64.powi(e))) {}
                text class="axis" x="6" y=(y(10f64.powi(e)) + 4.0) { (decade_label(e)) }
            }
            polyline class="p50" points=(line(|p| p.1)) {}
            polyline class="p99" points=(line(|p| p.2)) {}
            polyline class="max" points=(line(|p| p.3)) {}
            @for (i, (name, class)) in [("p50", "p50"), ("p99", "p99"), ("max", "max")].iter().enumerate() {
                g class=(format!("legend {class}")) {
                    rect x=(W - RIGHT - 60.0) y=(TOP + 16.0 * i as f64) width="10" height="3" {}
                    text x=(W - RIGHT - 44.0) y=(TOP + 5.0 + 16.0 * i as f64) { (name) }
                }
            }
            text class="axis" x=(LEFT) y=(TOP - 10.0) { "latency (log scale)" }
            g class="rate" {
                @for p in points {
                    rect x=(x(p.0) + 1.0) y=(yr(p.4)) width=((x(p.0 + step_s) - x(p.0) - 2.0).max(1.0)) height=(h1 + h2 - 24.0 - yr(p.4)) {
                        title { (format!("{:.0}-{:.0} s: {:.0} requests/s", p.0, p.0 + step_s, p.4)) }
                    }
                }
            }
            text class="axis" x="6" y=(yr(rate_top) + 4.0) { (format!("{rate_top:.0}/s")) }
            text class="axis" x=(LEFT) y=(h1 + 8.0) { "requests per second" }
            text class="axis" x=(W / 2.0) y=(total - 4.0) text-anchor="middle" { (format!("time, s (0 – {t_end:.0})")) }
        }
    }
}

/// Where one exchange's (or a server's mean) time goes, as a stacked bar with a legend.
pub fn breakdown(t: &ExchangeTimes) -> Markup {
    let parts = [
        ("network", "network", t.network_ms),
        ("server think time", "think", t.think_ms),
        ("transfer", "transfer", t.transfer_ms),
        ("Nagle + delayed ACK stall", "stall", t.stall_ms),
        ("loss", "loss", t.loss_ms),
    ];
    let sum: f64 = parts.iter().map(|p| p.2).sum::<f64>().max(1e-9);
    let width = 600.0;
    let mut at = 0.0;
    let mut segs = Vec::new();
    for (name, class, v) in parts.iter().filter(|p| p.2 > 0.0) {
        let w = v / sum * width;
        segs.push((*name, *class, at, w, *v));
        at += w;
    }
    html! {
        div.breakdown {
            svg class="bar" xmlns="http://www.w3.org/2000/svg" width=(width) height="22" viewBox=(format!("0 0 {width} 22")) {
                @for (name, class, x, w, v) in &segs {
                    rect class=(class) x=(x) y="2" width=(w.max(1.0)) height="18" { title { (name) ": " (ms_label(*v)) } }
                }
            }
            ul.legend {
                @for (name, class, v) in parts {
                    @if v > 0.0 {
                        li { span class=(format!("key {class}")) {} (name) " " strong { (ms_label(v)) } }
                    }
                }
                li { "total " strong { (ms_label(t.total_ms)) } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Bin;

    #[test]
    fn histogram_marks_and_bands() {
        let h = Histogram {
            bins: vec![Bin { lo_ms: 0.1, hi_ms: 0.112, count: 3 }, Bin { lo_ms: 39.8, hi_ms: 44.7, count: 90 }],
        };
        let s = histogram(&[Series { name: "load", class: "a", hist: &h }], &[("p50".into(), 41.0)]).into_string();
        assert!(s.contains("delayed ACK ~40 ms") && s.contains("p50 41.0 ms"), "{s}");
        assert_eq!(s.matches("<rect").count(), 2 + 1, "two bars and the delayed-ACK band: {s}");
        let empty = histogram(&[Series { name: "x", class: "a", hist: &Histogram::default() }], &[]).into_string();
        assert!(empty.contains("No latencies"));
    }

    #[test]
    fn breakdown_leaves_out_empty_parts() {
        let t = ExchangeTimes { total_ms: 44.0, network_ms: 0.1, stall_ms: 43.9, ..ExchangeTimes::default() };
        let s = breakdown(&t).into_string();
        assert!(s.contains("Nagle + delayed ACK stall") && !s.contains("loss"), "{s}");
    }
}
