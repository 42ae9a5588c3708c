//! Text rendering for a terminal: verdict first, evidence after.

use super::style::{bad, good, head, warn};
use crate::record::{Finding, Report};
use crate::words::{dur, plural};
use std::fmt::Write;

fn ms(x: f64) -> String {
    dur((x * 1e6).round() as i64)
}

/// How many connection rows the text shows.
const CONN_ROWS: usize = 15;

/// Renders the whole report.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    for i in &r.inputs {
        let _ = writeln!(
            o,
            "{}: {}, {} TCP, {}, {} ({})",
            i.file,
            plural(i.packets, "packet"),
            i.tcp_segments,
            plural(i.connections, "connection"),
            ms(i.duration_ms),
            i.format
        );
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "{}", head("VERDICT"));
    if r.findings.is_empty() {
        let _ = writeln!(
            o,
            "  {}",
            good(
                "No stall found: no Nagle + delayed-ACK holds, retransmissions, slow connects, zero windows or slow responders."
            )
        );
    }
    for f in &r.findings {
        let _ = writeln!(o, "  * {}", bad(f.summary()));
        match f {
            Finding::NagleDelayedAck(n) => {
                let place = captured(n.capture_point, n.rtt_to_client_ms, n.rtt_to_server_ms);
                // On a short path what the capture point saw is the timer itself.
                let place = match n.capture_point {
                    "near_both" => format!("; {place}"),
                    _ => format!(" (seen p50 {} at the capture point: {place})", ms(n.ack_seen_ms.p50)),
                };
                let _ = writeln!(
                    o,
                    "    ACK timer: {}; the {}'s delay p50 {}, max {}{place}.",
                    n.ack_timer,
                    n.delayed_ack_side.role,
                    ms(n.ack_delay_ms.p50),
                    ms(n.ack_delay_ms.max),
                );
                fixes(&mut o, &n.fix);
                if let Some(ex) = n.example_frames.get(..3) {
                    let _ = writeln!(
                        o,
                        "    Evidence: frame {} small segment, frame {} late ACK, frame {} held segment (Wireshark: frame.number in {{{},{},{}}}).",
                        ex[0], ex[1], ex[2], ex[0], ex[1], ex[2]
                    );
                }
                if n.with_loss > 0 {
                    let _ = writeln!(
                        o,
                        "    Nagle + loss: {} held until the loss timer, p50 {}, {} in all; small → held segment at frames {}.",
                        n.with_loss,
                        ms(n.with_loss_ms.p50),
                        ms(n.with_loss_time_ms),
                        pairs(&n.with_loss_frames)
                    );
                }
            }
            Finding::Expect100Continue(x) => {
                fixes(&mut o, &x.fix);
                let _ = writeln!(o, "    Evidence: request head → body at frames {}.", pairs(&x.example_frames));
            }
            Finding::NetworkLatency(x) => {
                let _ = writeln!(
                    o,
                    "    Round trip p50 {}, p90 {}; median exchange {}.",
                    ms(x.rtt_ms.p50),
                    ms(x.rtt_ms.p90),
                    ms(x.exchange_p50_ms)
                );
                fixes(&mut o, &x.fix);
                let _ = writeln!(o, "    Evidence: exchanges at frames {}.", pairs(&x.example_frames));
            }
            Finding::Retransmission(x) => examples(&mut o, &x.example_frames),
            Finding::SynRetransmission(x) => examples(&mut o, &x.example_frames),
            Finding::ZeroWindow(x) => examples(&mut o, &x.example_frames),
            Finding::UpstreamWait(x) => {
                fixes(&mut o, &x.fix);
                let _ = writeln!(o, "    Evidence: slow exchanges at frames {}.", pairs(&x.example_frames));
            }
            Finding::AppLatency(x) => {
                let _ = writeln!(o, "    Evidence: slow exchanges at frames {}.", pairs(&x.example_frames));
            }
        }
    }
    if !r.breakdown.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "{}", head("WHERE THE TIME GOES (mean per exchange)"));
        // The upstream column only where a proxy waited for one.
        let proxied = r.breakdown.iter().any(|b| b.upstream_ms > 0.0);
        let up = |v: &str| if proxied { format!(" {v:>10}") } else { String::new() };
        let _ = writeln!(
            o,
            "  {:<28} {:>9} {:>10} {:>10} {:>10} {:>10}{} {:>10} {:>10} {:>10} {:>10}",
            "server",
            "exchanges",
            "total",
            "p90",
            "network",
            "think",
            up("upstream"),
            "client",
            "transfer",
            "stall",
            "loss"
        );
        for b in &r.breakdown {
            let _ = writeln!(
                o,
                "  {:<28} {:>9} {:>10} {:>10} {:>10} {:>10}{} {:>10} {:>10} {:>10} {:>10}",
                named(&b.server, b.server_name.as_deref()),
                b.exchanges,
                ms(b.total_ms),
                ms(b.total_spread_ms.p90),
                ms(b.network_ms),
                ms(b.think_ms),
                up(&ms(b.upstream_ms)),
                ms(b.client_wait_ms),
                ms(b.transfer_ms),
                ms(b.stall_ms),
                ms(b.loss_ms)
            );
        }
    }
    if !r.connections.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "{}", head("CONNECTIONS (most time lost first)"));
        let _ = writeln!(
            o,
            "  {:>6} {:<28} {:<28} {:>7} {:>9} {:>6} {:>7} {:>10} {:>9}",
            "id", "client", "server", "packets", "exchanges", "stalls", "retrans", "lost", "rtt"
        );
        for c in r.connections.iter().take(CONN_ROWS) {
            let rtt = c.rtt_ms.map_or("-".to_string(), ms);
            let guessed = if c.roles_from == "lower_port" { "?" } else { "" };
            let _ = writeln!(
                o,
                "  {:>6} {:<28} {:<28} {:>7} {:>9} {:>6} {:>7} {:>10} {:>9}",
                c.id,
                c.client,
                named(&format!("{}{guessed}", c.server), c.server_name.as_deref()),
                c.packets,
                c.exchanges,
                c.stalls,
                c.retransmissions,
                ms(c.time_lost_ms),
                rtt
            );
        }
        let more = r.connections.len().saturating_sub(CONN_ROWS) as u64 + r.connections_omitted;
        if more > 0 {
            let _ = writeln!(o, "  … {more} more (--json lists them; --flow ID draws one)");
        }
    }
    if let Some(l) = &r.ladder {
        let _ = writeln!(o);
        super::ladder::render(l, &mut o);
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "{}", head("WARNINGS"));
        for w in &r.warnings {
            let _ = writeln!(o, "  ! {}", warn(w));
        }
    }
    o
}

/// A server endpoint with its TLS name, if any: "127.0.0.1:8443 tls.test".
fn named(server: &str, name: Option<&str>) -> String {
    match name {
        Some(n) => format!("{server} {}", crate::escape::clean(n)),
        None => server.to_string(),
    }
}

/// "11-13, 16-18": frames in pairs.
fn pairs(frames: &[u64]) -> String {
    let p: Vec<String> = frames.chunks(2).map(|c| c.iter().map(u64::to_string).collect::<Vec<_>>().join("-")).collect();
    p.join(", ")
}

fn fixes(o: &mut String, fix: &[String]) {
    for (k, f) in fix.iter().enumerate() {
        let _ = writeln!(o, "    {} {f}", if k == 0 { "Fix:" } else { "    " });
    }
}

/// Where a capture was taken, in words.
pub(crate) fn captured(point: &str, client: Option<f64>, server: Option<f64>) -> String {
    let rt = |x: Option<f64>| x.map_or_else(|| "not measured".to_string(), ms);
    match point {
        "near_server" => format!("captured near the server; round trip to the client {}", rt(client)),
        "near_client" => format!("captured near the client; round trip to the server {}", rt(server)),
        "in_between" => {
            format!("captured in between; round trip {} to the client, {} to the server", rt(client), rt(server))
        }
        "near_both" => {
            format!("captured close to both ends (round trip {})", ms(client.unwrap_or(0.0) + server.unwrap_or(0.0)))
        }
        _ => format!("capture point unknown (round trip {} to the client, {} to the server)", rt(client), rt(server)),
    }
}

fn examples(o: &mut String, frames: &[u64]) {
    if !frames.is_empty() {
        let list: Vec<String> = frames.iter().map(u64::to_string).collect();
        let _ = writeln!(o, "    Evidence: frames {}.", list.join(", "));
    }
}
