//! watch's output: a line per finding and a summary table, as text or as
//! JSON lines (one object per line, `type` `finding` or `summary`).

use super::sink::Row;
use crate::record::watch::{EndpointLine, Finding, FindingLine, Kind, Line, Owner, SummaryLine};
use crate::words::dur;
use std::fmt::Write;

/// The facts at the top of a summary.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    /// When, ns since the epoch.
    pub ts_ns: i64,
    /// Seconds the summary covers.
    pub seconds: f64,
    /// Packets captured in that time.
    pub packets: u64,
    /// Packets the kernel dropped in that time.
    pub drops: u64,
    /// Connections tracked now.
    pub tracked: usize,
    /// Connections evicted to stay under the cap, since the start.
    pub evicted: u64,
    /// Connections whose server was folded into `other`, since the start.
    pub folded: u64,
    /// Endpoint slots given to a new endpoint, since the start.
    pub recycled: u64,
    /// The final summary (the whole run).
    pub last: bool,
}

/// `2026-05-01T12:03:04.123Z` (UTC).
pub fn time(ts_ns: i64) -> String {
    let secs = ts_ns.div_euclid(1_000_000_000);
    let ms = ts_ns.rem_euclid(1_000_000_000) / 1_000_000;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

/// One finding: `TIME SUMMARY` or a JSON line.
pub fn finding(f: &Finding, json: bool) -> String {
    if !json {
        let owner = f.owner.as_ref().map(owner_suffix).unwrap_or_default();
        return format!("{} {}{owner}\n", time(f.ts_ns), f.summary);
    }
    let line = Line::Finding(FindingLine {
        schema: crate::record::SCHEMA_VERSION,
        version: env!("CARGO_PKG_VERSION"),
        kind_of_line: "finding",
        time: time(f.ts_ns),
        ts: f.ts_ns as f64 / 1e9,
        finding: f.clone(),
    });
    format!("{}\n", serde_json::to_string(&line).unwrap_or_default())
}

/// ` [pid 123 nginx, container 0123456789ab]`, for a finding's line.
fn owner_suffix(o: &Owner) -> String {
    let mut s = format!(" [pid {} {}", o.pid, o.comm);
    match (&o.container, &o.cgroup) {
        (Some(c), _) => s.push_str(&format!(", container {c}")),
        (None, Some(g)) => s.push_str(&format!(", cgroup {g}")),
        _ => {}
    }
    s.push(']');
    s
}

fn ms_text(ms: f64) -> String {
    dur((ms * 1e6) as i64)
}

/// A summary: the header line, one row per server endpoint, and (final
/// summary) the verdict sentences; or one JSON line.
pub fn summary(h: &Header, rows: &[Row], verdict: &[String], json: bool) -> String {
    if json {
        let endpoints = rows
            .iter()
            .map(|r| {
                let c = &r.counts;
                EndpointLine {
                    server: r.server.clone(),
                    software: r.software.clone(),
                    exchanges: c.exchanges,
                    findings: Kind::ALL.iter().map(|k| (k.name().to_string(), c.found[k.idx()])).collect(),
                    p50_ms: c.latency.quantile_ms(0.5),
                    p99_ms: c.latency.quantile_ms(0.99),
                    time_lost_ms: crate::record::ms(c.lost_ns),
                    not_shown: c.suppressed,
                }
            })
            .collect();
        let line = Line::Summary(SummaryLine {
            schema: crate::record::SCHEMA_VERSION,
            version: env!("CARGO_PKG_VERSION"),
            kind_of_line: "summary",
            last: h.last,
            time: time(h.ts_ns),
            ts: h.ts_ns as f64 / 1e9,
            seconds: (h.seconds * 1e3).round() / 1e3,
            packets: h.packets,
            kernel_drops: h.drops,
            tracked_connections: h.tracked,
            evicted_connections: h.evicted,
            folded_connections: h.folded,
            recycled_endpoints: h.recycled,
            endpoints,
            verdict: verdict.to_vec(),
        });
        return format!("{}\n", serde_json::to_string(&line).unwrap_or_default());
    }
    let mut s = String::new();
    // Rare, so said only when it happened.
    let recycled = match h.recycled {
        0 => String::new(),
        n => format!(", {n} endpoint slots recycled"),
    };
    if h.last {
        let _ = writeln!(
            s,
            "{} FINAL SUMMARY over {:.1} s: {} packets, {} dropped by the kernel; {} connections evicted (cap), {} folded into other{recycled}",
            time(h.ts_ns),
            h.seconds,
            h.packets,
            h.drops,
            h.evicted,
            h.folded
        );
    } else {
        let _ = writeln!(
            s,
            "{} SUMMARY last {:.1} s: {} packets, {} dropped by the kernel; {} connections tracked, {} evicted (cap), {} folded into other{recycled}",
            time(h.ts_ns),
            h.seconds,
            h.packets,
            h.drops,
            h.tracked,
            h.evicted,
            h.folded
        );
    }
    if rows.is_empty() {
        s.push_str("  no exchanges and no findings\n");
    } else {
        let _ = writeln!(
            s,
            "  {:<28} {:>9} {:>7} {:>5} {:>5} {:>7} {:>9} {:>9} {:>10}",
            "server", "exchanges", "stalls", "rto", "syn", "zerowin", "p50", "p99", "time lost"
        );
        for r in rows {
            let c = &r.counts;
            let f = |k: Kind| c.found[k.idx()];
            let (p50, p99) = if c.exchanges > 0 {
                (ms_text(c.latency.quantile_ms(0.5)), ms_text(c.latency.quantile_ms(0.99)))
            } else {
                ("-".into(), "-".into())
            };
            let more = match c.suppressed {
                0 => String::new(),
                n => format!("  ({n} more finding lines not shown)"),
            };
            let _ = writeln!(
                s,
                "  {:<28} {:>9} {:>7} {:>5} {:>5} {:>7} {:>9} {:>9} {:>10}{more}",
                r.server,
                c.exchanges,
                f(Kind::NagleDelayedAck),
                f(Kind::RetransmissionTimeout),
                f(Kind::SynRetransmission),
                f(Kind::ZeroWindow),
                p50,
                p99,
                dur(c.lost_ns)
            );
        }
    }
    if h.last && !verdict.is_empty() {
        s.push_str("VERDICT (whole run)\n");
        for v in verdict {
            let _ = writeln!(s, "  * {v}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycled_slots_are_said_when_there_were_some() {
        let mut h = Header {
            ts_ns: 0,
            seconds: 1.0,
            packets: 0,
            drops: 0,
            tracked: 0,
            evicted: 0,
            folded: 4,
            recycled: 0,
            last: false,
        };
        assert!(summary(&h, &[], &[], false).lines().next().unwrap().ends_with(" 4 folded into other"));
        h.recycled = 3;
        assert!(summary(&h, &[], &[], false).contains(" 4 folded into other, 3 endpoint slots recycled\n"));
        let v: serde_json::Value = serde_json::from_str(&summary(&h, &[], &[], true)).unwrap();
        assert_eq!(v["recycled_endpoints"], 3);
    }

    #[test]
    fn times_are_utc_rfc3339() {
        assert_eq!(time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(time(951_782_400_123_456_789), "2000-02-29T00:00:00.123Z");
        assert_eq!(time(1_767_225_599_999_000_000), "2025-12-31T23:59:59.999Z");
    }

    #[test]
    fn a_line_names_the_container_before_the_cgroup() {
        let mut o = Owner { pid: 7, comm: "nginx".into(), cgroup: Some("/a.service".into()), container: None };
        assert_eq!(owner_suffix(&o), " [pid 7 nginx, cgroup /a.service]");
        o.container = Some("0123456789ab".into());
        assert_eq!(owner_suffix(&o), " [pid 7 nginx, container 0123456789ab]");
    }
}
