//! `bench`'s text in wrk's layout (so a reader of the seed write-ups can swap
//! `wrk` for `tcpdoctor bench`), plus what wrk lacks.

use crate::record::bench::{BenchReport, ConnectionTimes, Distribution};
use crate::words::time_ms;
use std::fmt::Write;

/// A count as wrk prints it: 1.23k, 4.56M.
fn metric(v: f64) -> String {
    if v < 1e3 {
        format!("{v:.2}")
    } else if v < 1e6 {
        format!("{:.2}k", v / 1e3)
    } else {
        format!("{:.2}M", v / 1e6)
    }
}

/// Bytes as wrk prints them (binary units).
fn bytes(v: f64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"];
    let mut v = v;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2}{}", units[u])
}

/// Renders a run in wrk's layout, then what wrk does not show.
pub fn render(r: &BenchReport, latency_table: bool) -> String {
    let mut s = String::new();
    let mode = match r.options.rate {
        Some(rate) => format!(" at {} requests/s", metric(rate)),
        None => String::new(),
    };
    let d = if r.duration_s.fract() == 0.0 { format!("{}s", r.duration_s) } else { time_ms(r.duration_s * 1e3) };
    match r.options.requests {
        Some(n) => _ = writeln!(s, "Running {n} requests @ {}{mode}", r.url),
        None => _ = writeln!(s, "Running {d} test @ {}{mode}", r.url),
    }
    let _ = writeln!(s, "  {} threads and {} connections", r.threads, r.connections);
    let _ = writeln!(s, "  Thread Stats   Avg      Stdev     Max   +/- Stdev");
    let l = &r.latency;
    let _ = writeln!(
        s,
        "    Latency {:>10} {:>9} {:>9} {:>8.2}%",
        time_ms(l.mean),
        time_ms(l.stdev),
        time_ms(l.max),
        l.within_stdev_pct
    );
    let t = &r.requests_per_s_per_thread;
    let _ = writeln!(
        s,
        "    Req/Sec {:>10} {:>9} {:>9} {:>8.2}%",
        metric(t.mean),
        metric(t.stdev),
        metric(t.max),
        t.within_stdev_pct
    );
    if latency_table {
        let _ = writeln!(s, "  Latency Distribution");
        for (p, v) in [("50%", l.p50), ("75%", l.p75), ("90%", l.p90), ("99%", l.p99), ("99.9%", l.p999)] {
            let _ = writeln!(s, "  {p:>5} {:>9}", time_ms(v));
        }
    }
    let _ =
        writeln!(s, "  {} requests in {}, {} read", r.requests, time_ms(r.elapsed_s * 1e3), bytes(r.bytes_read as f64));
    let e = &r.errors;
    if e.connect + e.read + e.write + e.timeout > 0 {
        let _ = writeln!(
            s,
            "  Socket errors: connect {}, read {}, write {}, timeout {}",
            e.connect, e.read, e.write, e.timeout
        );
    }
    if e.status > 0 {
        let _ = writeln!(s, "  Non-2xx or 3xx responses: {}", e.status);
    }
    if e.malformed > 0 {
        let _ = writeln!(s, "  Malformed responses: {}", e.malformed);
    }
    let _ = writeln!(s, "Requests/sec: {:>10.2}", r.requests_per_s);
    let _ = writeln!(s, "Transfer/sec: {:>10}", bytes(r.bytes_per_s));
    if latency_table && r.requests > 0 {
        connection_times(&mut s, &r.connection_times);
    }
    // What wrk does not show.
    let _ = writeln!(s, "\n  tcpdoctor        p50       p90       p99     p99.9       max");
    let empty = Distribution::default();
    let handshake = r.tls.as_ref().map_or(&empty, |t| &t.handshake);
    for (name, d) in [
        ("First byte", &r.time_to_first_byte),
        ("Read gap", &r.max_read_gap),
        ("Connect", &r.connect),
        ("Handshake", handshake),
    ] {
        if d.count == 0 {
            continue;
        }
        let _ = writeln!(
            s,
            "  {name:<10} {:>9} {:>9} {:>9} {:>9} {:>9}",
            time_ms(d.p50),
            time_ms(d.p90),
            time_ms(d.p99),
            time_ms(d.p999),
            time_ms(d.max)
        );
    }
    let o = &r.options;
    let _ = writeln!(
        s,
        "  client: nodelay {}, quickack {}, split writes {}, keep-alive {}, timeout {}",
        on(o.nodelay),
        on(o.quickack),
        on(o.split_writes),
        on(o.keepalive),
        time_ms(o.timeout_s * 1e3)
    );
    if let Some(t) = &r.tls {
        let _ = writeln!(
            s,
            "  TLS: {} {}, ALPN {}; {} handshakes, {} resumed; certificate {}",
            if t.version.is_empty() { "-" } else { &t.version },
            if t.cipher_suite.is_empty() { "-" } else { &t.cipher_suite },
            t.alpn.as_deref().unwrap_or("none"),
            t.handshakes,
            t.resumed,
            t.certificate
        );
    }
    if r.interrupted {
        let _ = writeln!(s, "  interrupted: results cover the first {}", time_ms(r.elapsed_s * 1e3));
    }
    for n in &r.notes {
        let _ = writeln!(s, "{} {n}", super::style::warn("NOTE:"));
    }
    s
}

/// ab's block, with two decimals (ab rounds to whole ms, which is 0 on a LAN).
fn connection_times(s: &mut String, t: &ConnectionTimes) {
    let _ = writeln!(s, "\nConnection Times (ms)");
    let _ = writeln!(s, "              min   mean[+/-sd]  median      max");
    for (name, p) in
        [("Connect:", &t.connect), ("Processing:", &t.processing), ("Waiting:", &t.waiting), ("Total:", &t.total)]
    {
        let _ = writeln!(
            s,
            "{name:<11} {:>6.2} {:>7.2} {:>6.2} {:>7.2} {:>8.2}",
            p.min_ms, p.mean_ms, p.sd_ms, p.median_ms, p.max_ms
        );
    }
}

fn on(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_like_wrk() {
        assert_eq!(time_ms(0.63591), "635.91us");
        assert_eq!(time_ms(43.6), "43.60ms");
        assert_eq!(time_ms(2000.0), "2.00s");
        assert_eq!(metric(56200.0), "56.20k");
        assert_eq!(bytes(1.02 * 1024.0 * 1024.0 * 1024.0), "1.02GB");
        assert_eq!(bytes(100.0), "100.00B");
    }
}
