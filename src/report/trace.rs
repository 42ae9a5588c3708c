//! `trace`'s traceroute-like text.

use crate::record::trace::{TraceHop, TraceReport};
use std::fmt::Write;

/// The header line, like traceroute's `traceroute to HOST (ADDR), 30 hops max`.
pub fn render_header(r: &TraceReport) -> String {
    let how = match r.method {
        "raw_syn" => "raw TCP SYN",
        _ => "TCP connect()",
    };
    format!(
        "trace to {} ({}) port {}, {} hops max, {} probes per hop: {how} from {}, {}\n",
        r.target, r.address, r.port, r.max_hops, r.queries, r.source, r.timestamps
    )
}

/// One hop's line, like traceroute's ` 1  10.0.1.2  0.052 ms  0.031 ms  0.030 ms`; the
/// destination's line ends in `[open]` or `[closed]`.
pub fn render_hop(h: &TraceHop) -> String {
    let mut o = format!("{:2} ", h.ttl);
    let mut last: Option<&str> = None;
    for p in &h.probes {
        match (&p.from, p.rtt_ms) {
            (Some(from), Some(rtt)) => {
                if last != Some(from.as_str()) {
                    let _ = write!(o, " {from}");
                    last = Some(from);
                }
                let _ = write!(o, "  {rtt:.3} ms");
                if let Some(m) = &p.mark {
                    let _ = write!(o, " {m}");
                }
            }
            _ => o.push_str(" *"),
        }
    }
    for state in ["open", "closed"] {
        if h.probes.iter().any(|p| p.reply == state) {
            let _ = write!(o, "  [{state}]");
            break;
        }
    }
    o.push('\n');
    o
}

/// The closing line: whether and how the destination was reached.
pub fn render_summary(r: &TraceReport) -> String {
    let method = match r.method {
        "raw_syn" => format!("method: raw SYN + {}", r.timestamps),
        _ => format!("method: connect() + {}", r.timestamps),
    };
    let outcome = match (r.reached, r.final_state) {
        (true, Some(s)) => format!("{} port {} reached in {}: {s}", r.address, r.port, hops(r.hops.len())),
        _ if r.hops.last().is_some_and(|h| h.probes.iter().any(|p| p.reply == "unreachable")) => {
            format!("{} port {} not reached: unreachable (ICMP) after {}", r.address, r.port, hops(r.hops.len()))
        }
        _ => format!("{} port {} not reached within {}", r.address, r.port, hops(usize::from(r.max_hops))),
    };
    format!("{outcome}\n{method}\n")
}

fn hops(n: usize) -> String {
    if n == 1 { "1 hop".into() } else { format!("{n} hops") }
}

/// The whole text, as printed when the trace is done.
pub fn render(r: &TraceReport) -> String {
    let mut o = render_header(r);
    for h in &r.hops {
        o.push_str(&render_hop(h));
    }
    o.push_str(&render_summary(r));
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::trace::TraceProbe;

    fn p(reply: &'static str, from: Option<&str>, rtt: Option<f64>) -> TraceProbe {
        TraceProbe { reply, from: from.map(String::from), rtt_ms: rtt, mark: None, icmp: None }
    }

    #[test]
    fn traceroute_like_lines() {
        let h = TraceHop {
            ttl: 1,
            probes: vec![
                p("time_exceeded", Some("10.0.1.2"), Some(0.0521)),
                p("time_exceeded", Some("10.0.1.2"), Some(0.031)),
                p("time_exceeded", Some("10.0.1.2"), Some(0.03)),
            ],
        };
        assert_eq!(render_hop(&h), " 1  10.0.1.2  0.052 ms  0.031 ms  0.030 ms\n");
        let stars = TraceHop { ttl: 12, probes: vec![p("none", None, None), p("none", None, None)] };
        assert_eq!(render_hop(&stars), "12  * *\n");
        let mixed = TraceHop {
            ttl: 3,
            probes: vec![
                p("open", Some("10.0.3.2"), Some(0.1)),
                p("none", None, None),
                p("time_exceeded", Some("10.0.2.1"), Some(0.2)),
            ],
        };
        assert_eq!(render_hop(&mixed), " 3  10.0.3.2  0.100 ms * 10.0.2.1  0.200 ms  [open]\n");
        let mut u = p("unreachable", Some("10.0.2.1"), Some(0.5));
        u.mark = Some("!X".into());
        assert_eq!(render_hop(&TraceHop { ttl: 2, probes: vec![u] }), " 2  10.0.2.1  0.500 ms !X\n");
    }
}
