//! `probe`'s hping3-like text.

use crate::record::probe::{ProbeReport, ProbeResult};
use std::fmt::Write;

/// The header line, like hping3's `HPING host (…)`.
pub fn render_header(r: &ProbeReport) -> String {
    let how = match r.method {
        "raw_syn" => "raw TCP SYN",
        _ => "TCP connect()",
    };
    format!("PROBE {} ({}) port {}: {how} from {}, {}\n", r.target, r.address, r.port, r.source, r.timestamps)
}

/// One probe's line, like hping3's `len=44 ip=… sport=PORT flags=SA seq=0 … rtt=… ms`
/// (`sport` is the replying port, as in hping3).
pub fn render_probe(p: &ProbeResult, port: u16) -> String {
    let mut o = String::new();
    if let Some(len) = p.len {
        let _ = write!(o, "len={len} ");
    }
    if let Some(from) = &p.from {
        let _ = write!(o, "ip={from} ");
    }
    if let Some(ttl) = p.ttl {
        let _ = write!(o, "ttl={ttl} ");
    }
    let _ = write!(o, "sport={port} ");
    if let Some(f) = &p.flags {
        let _ = write!(o, "flags={f} ");
    }
    let _ = write!(o, "seq={} ", p.seq);
    if let Some(w) = p.window {
        let _ = write!(o, "win={w} ");
    }
    let _ = write!(o, "state={}", p.state);
    match (p.rtt_ms, p.tcpi_rtt_ms) {
        (Some(rtt), Some(k)) => {
            let _ = write!(o, " connect={rtt:.3} ms tcpi_rtt={k:.3} ms");
        }
        (Some(rtt), None) => {
            let _ = write!(o, " rtt={rtt:.3} ms");
        }
        _ => {}
    }
    if let Some(i) = &p.icmp {
        let _ = write!(o, " ({i})");
    } else if p.state == "filtered" {
        o.push_str(" (no reply)");
    }
    o.push('\n');
    o
}

/// The closing statistics, like hping3's.
pub fn render_summary(r: &ProbeReport) -> String {
    let s = &r.summary;
    let mut o = String::new();
    let _ = writeln!(o, "\n--- {} tcpdoctor probe statistic ---", r.target);
    let sent = crate::words::plural(u64::from(s.sent), "probe");
    let replies = if s.received == 1 { "1 reply".to_string() } else { format!("{} replies", s.received) };
    let _ = writeln!(o, "{sent} sent, {replies}, {:.0}% loss", s.loss_pct);
    match (s.min_ms, s.avg_ms, s.max_ms) {
        (Some(a), Some(b), Some(c)) => {
            let _ = writeln!(o, "round-trip min/avg/max = {a:.3}/{b:.3}/{c:.3} ms");
        }
        _ => {
            let _ = writeln!(o, "round-trip min/avg/max = -/-/- ms");
        }
    }
    let how = match r.method {
        "raw_syn" => format!("raw SYN + {}", r.timestamps),
        _ => format!("connect() + {}", r.timestamps),
    };
    let _ = writeln!(o, "method: {how}");
    o
}

/// The whole text, as printed when every probe is done.
pub fn render(r: &ProbeReport) -> String {
    let mut o = render_header(r);
    for p in &r.probes {
        o.push_str(&render_probe(p, r.port));
    }
    o.push_str(&render_summary(r));
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::probe::tests::p;

    #[test]
    fn hping_like_line() {
        assert_eq!(
            render_probe(&p(0, "open", Some(0.0214)), 80),
            "len=44 ip=127.0.0.1 ttl=64 sport=80 flags=SA seq=0 win=65495 state=open rtt=0.021 ms\n"
        );
        assert_eq!(render_probe(&p(2, "filtered", None), 80), "sport=80 seq=2 state=filtered (no reply)\n");
    }
}
