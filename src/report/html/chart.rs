//! Charts as SVG: a latency histogram on a log time axis, latency over time,
//! and where an exchange's time goes as one stacked bar.

use crate::record::{ExchangeTimes, Histogram};
use crate::words::dur;
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

/// Rough width of a label in the charts' 11 px font (it only has to keep labels apart).
fn text_width(s: &str) -> f64 {
    s.chars().count() as f64 * 6.5
}

/// Lays out labels beside vertical lines so that no two overlap, nor overlap what `rows`
/// already holds (x ranges per row): each goes right of its line (left of it near the
/// right edge), in the first row where it fits. Returns (text x, row, anchored at its end).
fn place_labels(labels: &[(f64, &str)], right_edge: f64, mut rows: Vec<Vec<(f64, f64)>>) -> Vec<(f64, usize, bool)> {
    let mut out = Vec::new();
    for &(x, text) in labels {
        let w = text_width(text);
        let end = x + 4.0 + w > right_edge;
        let (a, b) = if end { (x - 4.0 - w, x - 4.0) } else { (x + 4.0, x + 4.0 + w) };
        let free = |row: &Vec<(f64, f64)>| row.iter().all(|&(c, d)| b + 4.0 < c || d + 4.0 < a);
        let row = rows.iter().position(free).unwrap_or(rows.len());
        if row == rows.len() {
            rows.push(Vec::new());
        }
        rows[row].push((a, b));
        out.push((if end { x - 4.0 } else { x + 4.0 }, row, end));
    }
    out
}

/// Percentile marks named `{prefix}p50` … `{prefix}max`.
pub fn percentiles(prefix: &str, p50: f64, p90: f64, p99: f64, max: f64) -> Vec<(String, f64)> {
    [("p50", p50), ("p90", p90), ("p99", p99), ("max", max)]
        .into_iter()
        .map(|(n, v)| (format!("{prefix}{n}"), v))
        .collect()
}

/// Marks that would print the same value become one label ("p50, p90 43.9 ms").
fn merge_marks(marks: &[(String, f64)]) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    for (name, v) in marks {
        match out.iter_mut().find(|(_, w)| ms_label(*w) == ms_label(*v)) {
            Some((names, _)) => {
                names.push_str(", ");
                names.push_str(name);
            }
            None => out.push((name.clone(), *v)),
        }
    }
    out.into_iter().map(|(n, v)| (format!("{n} {}", ms_label(v)), v)).collect()
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

/// A series' legend: its name and how many values it has.
fn legend_text(s: &Series<'_>) -> String {
    format!("{} ({})", s.name, s.hist.bins.iter().map(|b| b.count).sum::<u64>())
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
    let bands: Vec<(f64, f64, &str)> = [(36.0, 52.0, "delayed ACK ~40 ms"), (185.0, 230.0, "RTO / ACK 200 ms")]
        .into_iter()
        .map(|(a, b, what)| {
            let (xa, xb) = band(a, b);
            (xa, xb, what)
        })
        .filter(|(xa, xb, _)| xb - xa > 1.0)
        .collect();
    // Band labels sit above the plot, the second a line higher if they would touch.
    let crowded = bands.len() == 2 && {
        let half = |i: usize| text_width(bands[i].2) / 2.0;
        (bands[0].0 + bands[0].1) / 2.0 + half(0) + 4.0 > (bands[1].0 + bands[1].1) / 2.0 - half(1)
    };
    // Percentile labels sit inside the plot, below the band labels, in rows that keep them apart.
    let marks = merge_marks(marks);
    let labels: Vec<(f64, &str)> = marks.iter().map(|(t, ms)| (x(*ms), t.as_str())).collect();
    // The legend (more than one series) holds the first rows at the left.
    let legend: Vec<Vec<(f64, f64)>> = match series.len() {
        0 | 1 => vec![],
        _ => series.iter().map(|s| vec![(LEFT + 10.0, LEFT + 26.0 + text_width(&legend_text(s)))]).collect(),
    };
    let placed = place_labels(&labels, W - RIGHT, legend);
    html! {
        svg class="chart hist" xmlns="http://www.w3.org/2000/svg" width=(W) height=(H) viewBox=(format!("0 0 {W} {H}")) {
            @for (i, (xa, xb, what)) in bands.iter().enumerate() {
                g class="band" {
                    rect x=(xa) y=(TOP) width=(xb - xa) height=(H - TOP - BOTTOM) {}
                    text x=((xa + xb) / 2.0) y=(if crowded && i == 1 { TOP - 18.0 } else { TOP - 6.0 }) text-anchor="middle" { (what) }
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
            // All lines first, then the labels (with a halo) over them.
            g class="mark" {
                @for (xm, _) in &labels { line x1=(xm) y1=(TOP) x2=(xm) y2=(H - BOTTOM) {} }
                @for ((_, text), (tx, row, end)) in labels.iter().zip(&placed) {
                    text x=(tx) y=(TOP + 12.0 + 13.0 * *row as f64) text-anchor=(if *end { "end" } else { "start" }) { (text) }
                }
            }
            @if series.len() > 1 {
                @for (i, s) in series.iter().enumerate() {
                    g class=(format!("legend {}", s.class)) {
                        rect x=(LEFT + 10.0) y=(TOP + 3.0 + 13.0 * i as f64) width="9" height="9" {}
                        text x=(LEFT + 26.0) y=(TOP + 12.0 + 13.0 * i as f64) { (legend_text(s)) }
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
        ("waiting for the upstream", "upstream", t.upstream_ms),
        ("client waiting inside its request", "client", t.client_wait_ms),
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
    use crate::record::Bin;

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
    fn close_percentiles_get_labels_that_do_not_overlap() {
        let h = Histogram {
            bins: vec![Bin { lo_ms: 39.8, hi_ms: 44.7, count: 90 }, Bin { lo_ms: 0.1, hi_ms: 0.11, count: 1 }],
        };
        let two = [Series { name: "before", class: "b", hist: &h }, Series { name: "after", class: "c", hist: &h }];
        let marks = percentiles("", 43.9, 43.9, 47.0, 47.9);
        let s = histogram(&two, &marks).into_string();
        // Equal values share a label; every line is drawn before any label.
        assert!(s.contains(">p50, p90 43.9 ms</text>") && s.contains(">p99 47.0 ms</text>"), "{s}");
        let group = &s[s.find(r#"<g class="mark">"#).unwrap()..];
        assert!(group.rfind("<line").unwrap() < group.find("<text").unwrap(), "{group}");
        // On a wide axis the two bands' labels would touch: the second goes a line higher.
        let wide = Histogram {
            bins: vec![Bin { lo_ms: 0.001, hi_ms: 0.0011, count: 1 }, Bin { lo_ms: 5000.0, hi_ms: 5500.0, count: 1 }],
        };
        let s = histogram(&[Series { name: "x", class: "a", hist: &wide }], &[]).into_string();
        assert!(s.contains(&format!(r#"y="{}" text-anchor="middle">RTO / ACK 200 ms<"#, TOP - 18.0)), "{s}");
        assert!(s.contains(&format!(r#"y="{}" text-anchor="middle">delayed ACK ~40 ms<"#, TOP - 6.0)), "{s}");
        // The layout itself: labels of close lines go to separate rows, clear of the legend.
        let legend = vec![vec![(66.0, 150.0)], vec![(66.0, 150.0)]];
        let labels = [(100.0, "p50 1.0 ms"), (104.0, "p90 1.1 ms"), (400.0, "p99 9.0 ms"), (798.0, "max 90 ms")];
        let placed = place_labels(&labels, 800.0, legend);
        assert_eq!(placed.iter().map(|p| p.1).collect::<Vec<_>>(), [2, 3, 0, 0], "{placed:?}");
        assert!(placed[3].2 && placed[3].0 < 798.0, "near the right edge a label goes left of its line");
        let span = |i: usize| {
            let (x, _, end) = placed[i];
            let w = text_width(labels[i].1);
            if end { (x - w, x) } else { (x, x + w) }
        };
        for i in 0..labels.len() {
            for j in i + 1..labels.len() {
                let ((a, b), (c, d)) = (span(i), span(j));
                assert!(placed[i].1 != placed[j].1 || b < c || d < a, "{i} and {j} overlap: {placed:?}");
            }
        }
    }

    #[test]
    fn breakdown_leaves_out_empty_parts() {
        let t = ExchangeTimes { total_ms: 44.0, network_ms: 0.1, stall_ms: 43.9, ..ExchangeTimes::default() };
        let s = breakdown(&t).into_string();
        assert!(s.contains("Nagle + delayed ACK stall") && !s.contains("loss"), "{s}");
    }
}
