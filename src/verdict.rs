//! Turns merged aggregates into findings with plain-language verdicts and fixes.

use crate::analyze::{CountAgg, FileResult, NagleAgg, ServerAgg};
use crate::report::text::{dur, plural};
use crate::report::{
    self, AppLatencyFinding, Breakdown, EndpointRole, Finding, HostRole, NagleFinding, Report, RetransFinding,
    SynFinding, ZeroWindowFinding,
};
use crate::tcp::{CapturePoint, Side};
use crate::wire::Endpoint;

/// Builds the report from everything the files produced.
pub(crate) fn build(mut m: FileResult, inputs: Vec<report::Input>) -> Report {
    let mut findings = Vec::new();
    let mut nagle: Vec<_> = m.nagle.iter().collect();
    nagle.sort_by_key(|(e, _)| **e);
    for (ep, a) in nagle {
        let server = m.servers.get(ep);
        let software = server.and_then(|s| s.software.clone());
        // A server's responses are all its exchanges, stalled connections or not;
        // a client endpoint is one connection, whose exchanges `a` already counts.
        let exchanges = match a.side {
            Some(Side::Server) => server.map_or(a.exchanges, |s| s.exchanges),
            _ => a.exchanges,
        };
        findings.push(Finding::NagleDelayedAck(nagle_finding(*ep, a, exchanges, software)));
    }
    let mut keys: Vec<_> = m.retrans.keys().copied().collect();
    keys.sort();
    for k in keys {
        findings.push(Finding::Retransmission(retrans_finding(k.0, k.1, &m.retrans[&k])));
    }
    let mut keys: Vec<_> = m.syn.keys().copied().collect();
    keys.sort();
    for k in keys {
        findings.push(Finding::SynRetransmission(syn_finding(k.0, k.1, &m.syn[&k])));
    }
    let mut keys: Vec<_> = m.zero.keys().copied().collect();
    keys.sort();
    for k in keys {
        findings.push(Finding::ZeroWindow(zero_finding(k.0, k.1, &m.zero[&k])));
    }
    let mut servers: Vec<_> = m.servers.iter().filter(|(_, s)| s.exchanges > 0).collect();
    servers.sort_by_key(|(e, _)| **e);
    let mut breakdown = Vec::new();
    for (ep, s) in servers {
        if let Some(f) = app_finding(*ep, s) {
            findings.push(Finding::AppLatency(f));
        }
        breakdown.push(breakdown_of(*ep, s));
    }
    findings.sort_by(|a, b| b.time_lost_ms().total_cmp(&a.time_lost_ms()));
    breakdown.sort_by(|a, b| (b.stall_ms * b.exchanges as f64).total_cmp(&(a.stall_ms * a.exchanges as f64)));
    // Ids are "N" or "F:N": order ties by number, not as strings ("2" before "10").
    let num = |id: &str| -> (u64, u64) {
        match id.split_once(':') {
            Some((f, n)) => (f.parse().unwrap_or(0), n.parse().unwrap_or(0)),
            None => (0, id.parse().unwrap_or(0)),
        }
    };
    m.conns.sort_by(|a, b| b.time_lost_ms.total_cmp(&a.time_lost_ms).then(num(&a.id).cmp(&num(&b.id))));
    let stalled_exchanges = std::mem::take(&mut m.stalled).into_ladders();
    let slowest_exchanges = std::mem::take(&mut m.slowest).into_ladders();
    let ladder = m.flow.take().or(stalled_exchanges.first().cloned());
    Report {
        schema: report::SCHEMA_VERSION,
        version: env!("CARGO_PKG_VERSION"),
        inputs,
        findings,
        breakdown,
        connections: m.conns,
        connections_omitted: m.conns_omitted,
        ladder,
        stalled_exchanges,
        slowest_exchanges,
        warnings: m.warnings,
    }
}

fn ms(ns: i64) -> f64 {
    report::ms(ns)
}

/// Names the ACK timer a delay (ms) looks like.
pub(crate) fn ack_timer(p50_ms: f64) -> String {
    match p50_ms {
        x if (35.0..70.0).contains(&x) => "Linux delayed ACK, 40 ms minimum (HZ/25)".into(),
        x if (85.0..130.0).contains(&x) => "macOS delayed ACK, ~100 ms".into(),
        x if (170.0..240.0).contains(&x) => "Windows delayed ACK, 200 ms, or Linux's 200 ms maximum".into(),
        x => format!("delayed ACK of ~{x:.0} ms"),
    }
}

fn nagle_fixes(ep: Endpoint, side: Side, peer: &str, software: Option<&str>) -> Vec<String> {
    use crate::diagnose::fix::{self, Software};
    if side == Side::Server {
        let sw = software.map_or(Software::Other, Software::from_header);
        return fix::for_server_nagle(sw, &ep.to_string(), peer);
    }
    vec![
        format!("Enable TCP_NODELAY on the client ({ep}), or send each request in one write (headers and body together)."),
        "Java: socket.setTcpNoDelay(true); Python: sock.setsockopt(IPPROTO_TCP, TCP_NODELAY, 1); Rust/tokio/hyper: set_nodelay(true).".into(),
        fix::workaround(peer),
    ]
}

fn nagle_finding(ep: Endpoint, a: &NagleAgg, exchanges: u64, software: Option<String>) -> NagleFinding {
    let side = a.side.unwrap_or(Side::Server);
    let peer = a.peer.map(|p| p.to_string()).unwrap_or_default();
    let stall = a.stalls.spread();
    let acks = a.acks.spread();
    let (rtt_c, rtt_s) = (a.rtt_to(Side::Client), a.rtt_to(Side::Server));
    let what = if side == Side::Server { "responses" } else { "requests" };
    let sw = software.as_deref().map(|s| format!(", \"{}\"", crate::report::escape::clean(s))).unwrap_or_default();
    // A stall in a request whose response never came is not a finished exchange.
    let exchanges = exchanges.max(a.stalls.count());
    let summary = format!(
        "Nagle + delayed ACK: {} of {exchanges} {what} from {ep} ({}{sw}) were held ~{} until {peer} ({}) sent a delayed ACK; {} lost in total.",
        a.stalls.count(),
        side.name(),
        dur_ms(stall.p50),
        side.other().name(),
        dur(a.lost_ns),
    );
    NagleFinding {
        summary,
        nagle_side: EndpointRole { endpoint: ep.to_string(), role: side.name() },
        delayed_ack_side: HostRole { host: peer.clone(), role: side.other().name() },
        stalls: a.stalls.count(),
        exchanges,
        connections: a.connections,
        stall_ms: stall,
        ack_delay_ms: acks,
        ack_seen_ms: a.seen.spread(),
        ack_timer: ack_timer(acks.p50),
        capture_point: CapturePoint::from_rtt(rtt_c, rtt_s).name(),
        rtt_to_client_ms: rtt_c.map(ms),
        rtt_to_server_ms: rtt_s.map(ms),
        time_lost_ms: ms(a.lost_ns),
        example_frames: a.examples.clone(),
        fix: nagle_fixes(ep, side, &peer, software.as_deref()),
        server_software: software,
    }
}

fn retrans_finding(server: Endpoint, from: Side, a: &CountAgg) -> RetransFinding {
    let d = a.dist.spread();
    let real = a.events - a.spurious;
    let summary = if real == 0 {
        format!(
            "Spurious retransmission: {} re-sent by the {} side of {server} after the capture point had seen them acknowledged: an ACK was lost or late on its way back, not the data (the loss shows on the other side).",
            plural(a.events, "segment"),
            from.name(),
        )
    } else {
        let spurious = match a.spurious {
            0 => String::new(),
            k => format!(" {k} more were spurious (already acknowledged)."),
        };
        format!(
            "Retransmission: {} re-sent by the {} side of {server} ({} after a timeout of 200 ms or more), {} (p50) after the previous copy; {} lost. Loss, not Nagle: these bytes were sent twice.{spurious}",
            plural(real, "segment"),
            from.name(),
            a.timeouts,
            dur_ms(d.p50),
            dur(a.lost_ns)
        )
    };
    RetransFinding {
        summary,
        server: server.to_string(),
        sender: from.name(),
        retransmissions: a.events,
        timeouts: a.timeouts,
        spurious: a.spurious,
        connections: a.connections,
        delay_ms: d,
        time_lost_ms: ms(a.lost_ns),
        example_frames: a.examples.clone(),
    }
}

fn syn_finding(server: Endpoint, from: Side, a: &CountAgg) -> SynFinding {
    let d = a.dist.spread();
    let what = if from == Side::Client { "SYN" } else { "SYN-ACK" };
    let unanswered = if a.unanswered > 0 { format!(" ({} never answered)", a.unanswered) } else { String::new() };
    SynFinding {
        summary: format!(
            "Slow connect: {} to {server} needed {}{unanswered}; connecting took {} (p50, max {}). The 1 s (older kernels 3 s) SYN timer: a dropped SYN, full accept queue or firewall, not Nagle.",
            plural(a.connections, "connection"),
            plural(a.retries, &format!("{what} retransmission")),
            dur_ms(d.p50),
            dur_ms(d.max)
        ),
        server: server.to_string(),
        sender: from.name(),
        connections: a.connections,
        unanswered: a.unanswered,
        retries: a.retries,
        connect_ms: d,
        time_lost_ms: ms(a.lost_ns),
        example_frames: a.examples.clone(),
    }
}

fn zero_finding(server: Endpoint, from: Side, a: &CountAgg) -> ZeroWindowFinding {
    let d = a.dist.spread();
    ZeroWindowFinding {
        summary: format!(
            "Zero window: the {} side of connections to {server} closed its receive window {}, for {} (p50, max {}); its peer had to stop sending. The {} application is not reading fast enough.",
            from.name(),
            plural(a.events, "time"),
            dur_ms(d.p50),
            dur_ms(d.max),
            from.name()
        ),
        server: server.to_string(),
        receiver: from.name(),
        events: a.events,
        closed_ms: d,
        time_lost_ms: ms(a.lost_ns),
        example_frames: a.examples.clone(),
    }
}

fn app_finding(server: Endpoint, s: &ServerAgg) -> Option<AppLatencyFinding> {
    // Worth a finding when at least a tenth of the exchanges waited on the application.
    if s.slow == 0 || s.slow * 10 < s.exchanges {
        return None;
    }
    let think = s.think.spread();
    let rtt = s.sum_network / s.exchanges.max(1) as i64;
    Some(AppLatencyFinding {
        summary: format!(
            "Application latency: {server} spent {} (p50; p90 {}) of application time, before its first response byte or pausing mid-response, in {} of {} exchanges, while the network round trip is {}: the time is in the server application, not in TCP.",
            dur_ms(think.p50),
            dur_ms(think.p90),
            s.slow,
            s.exchanges,
            dur(rtt)
        ),
        server: server.to_string(),
        slow_exchanges: s.slow,
        exchanges: s.exchanges,
        think_ms: think,
        time_lost_ms: ms(s.slow_think_ns),
        example_frames: s.slow_examples.clone(),
    })
}

fn breakdown_of(server: Endpoint, s: &ServerAgg) -> Breakdown {
    let n = s.exchanges.max(1) as i64;
    Breakdown {
        server: server.to_string(),
        server_software: s.software.clone(),
        exchanges: s.exchanges,
        total_ms: ms(s.sum_total / n),
        total_spread_ms: s.total.spread(),
        network_ms: ms(s.sum_network / n),
        think_ms: ms(s.sum_think / n),
        transfer_ms: ms(s.sum_transfer / n),
        stall_ms: ms(s.sum_stall / n),
        loss_ms: ms(s.sum_loss / n),
        latency_histogram: report::Histogram::from(&s.total),
    }
}

fn dur_ms(x: f64) -> String {
    dur((x * 1e6) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::Stall;

    /// Stalls of a server captured next to it, 80 ms from the client whose timer is 42 ms.
    #[test]
    fn the_timer_is_named_from_the_ackers_delay_not_from_what_the_capture_point_saw() {
        let mut a = NagleAgg::default();
        let path = 80_000_000;
        for i in 0..5 {
            let timer = 42_000_000 + i * 100_000;
            let s = Stall {
                nagle: Side::Server,
                small_frame: 1,
                ack_frame: 2,
                held_frame: 3,
                ack_delay_ns: timer,
                ack_seen_ns: timer + path,
                stall_ns: timer + path,
            };
            a.add([10, 0, 0, 2].into(), &s);
        }
        a.add_rtt([Some(path), Some(30_000)], 3);
        a.add_rtt([Some(path), None], 2);
        let ep = Endpoint { ip: [10, 0, 0, 1].into(), port: 61000 };
        let f = nagle_finding(ep, &a, 5, None);
        assert!(f.ack_timer.starts_with("Linux"), "{}", f.ack_timer);
        assert!((42.0..42.5).contains(&f.ack_delay_ms.p50) && (122.0..122.5).contains(&f.ack_seen_ms.p50), "{f:?}");
        assert_eq!((f.capture_point, f.rtt_to_client_ms, f.rtt_to_server_ms), ("near_server", Some(80.0), Some(0.03)));
        // One connection with the roles the other way round does not flip the finding.
        let s = Stall {
            nagle: Side::Client,
            small_frame: 1,
            ack_frame: 2,
            held_frame: 3,
            ack_delay_ns: 1,
            ack_seen_ns: 1,
            stall_ns: 1,
        };
        a.add([10, 0, 0, 2].into(), &s);
        assert_eq!(nagle_finding(ep, &a, 6, None).nagle_side.role, "server");
    }
}
