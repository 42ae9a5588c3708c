//! Turns merged aggregates into findings with plain-language verdicts and fixes.

mod expect;
mod path;
mod upstream;

use expect::expect_finding;
use path::network_finding;
use upstream::{upstream_finding, upstream_ns};

use super::agg::{CountAgg, FileResult, NagleAgg, ServerAgg};
use crate::record::{
    self, AppLatencyFinding, Breakdown, EndpointRole, Finding, HostRole, NagleFinding, Report, RetransFinding,
    SynFinding, ZeroWindowFinding,
};
use crate::tcp::{CapturePoint, Side};
use crate::wire::Endpoint;
use crate::words::{dur, plural};

/// Builds the report from everything the files produced.
pub(crate) fn build(mut m: FileResult, inputs: Vec<record::Input>) -> Report {
    let mut findings = Vec::new();
    let mut nagle: Vec<_> = m.nagle.iter().collect();
    nagle.sort_by_key(|(e, _)| **e);
    for (ep, a) in nagle {
        let server = m.servers.get(ep);
        let software = server.and_then(|s| s.software.clone());
        let name = server.and_then(ServerAgg::name);
        // A server's responses are all its exchanges, stalled connections or not;
        // a client endpoint is one connection, whose exchanges `a` already counts.
        let exchanges = match a.side {
            Some(Side::Server) => server.map_or(a.exchanges, |s| s.exchanges),
            _ => a.exchanges,
        };
        findings.push(Finding::NagleDelayedAck(nagle_finding(*ep, a, exchanges, software, name)));
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
    let mut keys: Vec<_> = m.expect.keys().copied().collect();
    keys.sort();
    for k in keys {
        findings.push(Finding::Expect100Continue(expect_finding(k.0, k.1, &m.expect[&k])));
    }
    let mut servers: Vec<_> = m.servers.iter().filter(|(_, s)| s.exchanges > 0).collect();
    servers.sort_by_key(|(e, _)| **e);
    let mut breakdown = Vec::new();
    let waiting = |ep: &Endpoint| m.upstream.get(ep).filter(|w| w.holds());
    for &(ep, s) in &servers {
        // A proxy waiting for its upstream is not slow itself: said below instead.
        if waiting(ep).is_none()
            && let Some(f) = app_finding(*ep, s, tcp_cause_on(&m, *ep))
        {
            findings.push(Finding::AppLatency(f));
        }
        if let Some(f) = network_finding(*ep, s) {
            findings.push(Finding::NetworkLatency(f));
        }
        breakdown.push(breakdown_of(*ep, s, waiting(ep).map_or(0, |w| upstream_ns(s, w))));
    }
    findings.sort_by(|a, b| b.time_lost_ms().total_cmp(&a.time_lost_ms()));
    // After the causes they point at: the upstream's time seen again from its proxy.
    let waits: Vec<_> = servers
        .iter()
        .filter(|(_, s)| app_worthy(s))
        .filter_map(|&(ep, s)| upstream_finding(*ep, s, waiting(ep)?, &findings))
        .collect();
    findings.extend(waits.into_iter().map(Finding::UpstreamWait));
    breakdown.sort_by(|a, b| (b.stall_ms * b.exchanges as f64).total_cmp(&(a.stall_ms * a.exchanges as f64)));
    m.conns.rows.sort_by(super::conns::Row::report_order);
    let stalled_exchanges = std::mem::take(&mut m.stalled).into_ladders();
    let slowest_exchanges = std::mem::take(&mut m.slowest).into_ladders();
    let ladder = m.flow.take().or(stalled_exchanges.first().cloned());
    Report {
        schema: record::SCHEMA_VERSION,
        version: env!("CARGO_PKG_VERSION"),
        inputs,
        findings,
        breakdown,
        connections_omitted: m.conns.omitted,
        connections: m.conns.rows.into_iter().map(super::conns::Row::record).collect(),
        ladder,
        stalled_exchanges,
        slowest_exchanges,
        warnings: m.warnings,
    }
}

fn ms(ns: i64) -> f64 {
    record::ms(ns)
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

fn nagle_finding(
    ep: Endpoint,
    a: &NagleAgg,
    exchanges: u64,
    software: Option<String>,
    name: Option<String>,
) -> NagleFinding {
    let side = a.side.unwrap_or(Side::Server);
    let peer = a.peer.map(|p| p.to_string()).unwrap_or_default();
    let stall = a.stalls.spread();
    let acks = a.acks.spread();
    let lossy = a.with_loss.spread();
    let (rtt_c, rtt_s) = (a.rtt_to(Side::Client), a.rtt_to(Side::Server));
    let what = if side == Side::Server { "responses" } else { "requests" };
    let sw = software.as_deref().map(|s| format!(", \"{}\"", crate::escape::clean(s))).unwrap_or_default();
    let sw = match &name {
        Some(n) => format!(", TLS name {}{sw}", crate::escape::clean(n)),
        None => sw,
    };
    // A stall in a request whose response never came is not a finished exchange.
    let exchanges = exchanges.max(a.stalls.count() + a.with_loss.count());
    let lost_ns = a.lost_ns.saturating_add(a.with_loss_ns);
    let lossy_part = |n: u64, more: &str| {
        format!(
            "{n} {more}{} {} held ~{} until {ep}'s loss timer sent the held bytes, because the ACK from {peer} (or the small segment) was lost: Nagle + loss, which TCP_NODELAY avoids too",
            if n == 1 { what.trim_end_matches('s') } else { what },
            if n == 1 { "was" } else { "were" },
            dur_ms(lossy.p50),
        )
    };
    let mut summary = if a.stalls.count() > 0 {
        format!(
            "Nagle + delayed ACK: {} of {exchanges} {what} from {ep} ({}{sw}) were held ~{} until {peer} ({}) sent a delayed ACK",
            a.stalls.count(),
            side.name(),
            dur_ms(stall.p50),
            side.other().name(),
        )
    } else {
        format!("Nagle + loss: from {ep} ({}{sw}), ", side.name())
    };
    match (a.stalls.count(), a.with_loss.count()) {
        (_, 0) => {}
        (0, n) => summary += &lossy_part(n, ""),
        (_, n) => summary += &format!("; {}", lossy_part(n, "more ")),
    }
    summary += &format!("; {} lost in total.", dur(lost_ns));
    summary += &tls_part(a, what);
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
        time_lost_ms: ms(lost_ns),
        example_frames: a.examples.frames(),
        with_loss: a.with_loss.count(),
        with_loss_ms: lossy,
        with_loss_time_ms: ms(a.with_loss_ns),
        with_loss_frames: a.with_loss_examples.frames(),
        fix: nagle_fixes(ep, side, &peer, software.as_deref()),
        server_software: software,
        server_name: name,
        tls_records: a.tls_records,
        tls_ticket: a.tls_ticket,
    }
}

/// The holds in TLS terms: " Over TLS: in 29 of them the header and body went out as two TLS records…".
fn tls_part(a: &NagleAgg, what: &str) -> String {
    let mut parts = Vec::new();
    if a.tls_records > 0 {
        let parts_of = if what == "responses" { "the header and body" } else { "its parts" };
        parts.push(format!(
            "in {} {parts_of} went out as two TLS records, the second held by Nagle until the ACK",
            if a.tls_records == a.stalls.count() { "each".to_string() } else { format!("{} of them", a.tls_records) }
        ));
    }
    if a.tls_ticket > 0 {
        parts.push(format!(
            "{} waited behind the server's TLS session ticket, sent just before {} and held the same way",
            plural(a.tls_ticket, what.trim_end_matches('s')),
            if a.tls_ticket == 1 { "it" } else { "them" }
        ));
    }
    if parts.is_empty() { String::new() } else { format!(" Over TLS: {}.", parts.join("; ")) }
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
        example_frames: a.examples.frames(),
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
        example_frames: a.examples.frames(),
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
        example_frames: a.examples.frames(),
    }
}

/// Whether a TCP cause was found on `server`'s connections (Nagle on either
/// side, re-sends, slow connects, closed windows, or stall or loss time).
fn tcp_cause_on(m: &FileResult, server: Endpoint) -> bool {
    let on_server = |k: &(Endpoint, Side)| k.0 == server;
    m.nagle.iter().any(|(ep, a)| *ep == server || (a.side == Some(Side::Client) && a.peer == Some(server.ip)))
        || m.retrans.keys().any(on_server)
        || m.syn.keys().any(on_server)
        || m.zero.keys().any(on_server)
        || m.servers.get(&server).is_some_and(|s| s.sums.stall.get() > 0 || s.sums.loss.get() > 0)
}

/// Worth a finding when at least a tenth of the exchanges waited on the
/// application and that wait is a twentieth or more of all exchange time: a
/// few scheduling hiccups beside seconds of Nagle stalls are not a cause.
fn app_worthy(s: &ServerAgg) -> bool {
    s.slow > 0 && s.slow * 10 >= s.exchanges && s.slow_think_ns.saturating_mul(20) >= s.sums.total().get()
}

fn app_finding(server: Endpoint, s: &ServerAgg, tcp_cause: bool) -> Option<AppLatencyFinding> {
    if !app_worthy(s) {
        return None;
    }
    let think = s.think.spread();
    let rtt = s.sums.network.get() / s.exchanges.max(1) as i64;
    // Never "not in TCP" when TCP also cost time here: that time is counted apart.
    let whose = if tcp_cause {
        "this is the server application's own time; the TCP causes on this server are listed apart and not counted in it"
    } else {
        "the time is in the server application, not in TCP"
    };
    Some(AppLatencyFinding {
        summary: format!(
            "Application latency: {server} spent {} (p50; p90 {}) of application time, before its first response byte or pausing mid-response, in {} of {} exchanges, while the network round trip is {}: {whose}.",
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
        example_frames: s.slow_examples.frames(),
    })
}

fn breakdown_of(server: Endpoint, s: &ServerAgg, upstream_ns: i64) -> Breakdown {
    let n = s.exchanges.max(1) as i64;
    Breakdown {
        server: server.to_string(),
        server_software: s.software.clone(),
        server_name: s.name(),
        exchanges: s.exchanges,
        total_ms: ms(s.sums.total().get() / n),
        total_spread_ms: s.total.spread(),
        network_ms: ms(s.sums.network.get() / n),
        think_ms: ms((s.sums.think.get() - upstream_ns) / n),
        upstream_ms: ms(upstream_ns / n),
        client_wait_ms: ms(s.sums.client.get() / n),
        transfer_ms: ms(s.sums.transfer.get() / n),
        stall_ms: ms(s.sums.stall.get() / n),
        loss_ms: ms(s.sums.loss.get() / n),
        latency_histogram: record::Histogram::from(&s.total),
    }
}

pub(crate) fn dur_ms(x: f64) -> String {
    dur((x * 1e6) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::ARRIVAL;
    use crate::detect::{Exchange, Stall, Times};

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
                timer: false,
                tls: Default::default(),
            };
            a.add(ARRIVAL, [10, 0, 0, 2].into(), &s);
        }
        a.add_rtt([Some(path), Some(30_000)], 3);
        a.add_rtt([Some(path), None], 2);
        let ep = Endpoint { ip: [10, 0, 0, 1].into(), port: 61000 };
        let f = nagle_finding(ep, &a, 5, None, None);
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
            timer: false,
            tls: Default::default(),
        };
        a.add(ARRIVAL, [10, 0, 0, 2].into(), &s);
        assert_eq!(nagle_finding(ep, &a, 6, None, None).nagle_side.role, "server");
    }

    fn app_summary(with_nagle: bool) -> String {
        let server = Endpoint { ip: [127, 0, 0, 1].into(), port: 8080 };
        let mut m = FileResult::default();
        let s = m.servers.entry(server).or_default();
        for _ in 0..10 {
            let t = Times { think: 50_000_000, total: 50_000_000, ..Times::default() };
            s.add_exchange(ARRIVAL, &t, &Exchange::default());
        }
        if with_nagle {
            let st = Stall {
                nagle: Side::Server,
                small_frame: 1,
                ack_frame: 2,
                held_frame: 3,
                ack_delay_ns: 40_000_000,
                ack_seen_ns: 40_000_000,
                stall_ns: 40_000_000,
                timer: false,
                tls: Default::default(),
            };
            m.nagle.entry(server).or_default().add(ARRIVAL, [127, 0, 0, 2].into(), &st);
        }
        let r = build(m, Vec::new());
        r.findings.iter().find(|f| matches!(f, Finding::AppLatency(_))).expect("app latency").summary().to_string()
    }

    /// "not in TCP" only when no TCP cause was found on the same server.
    #[test]
    fn app_latency_never_says_not_in_tcp_beside_a_tcp_cause() {
        assert!(app_summary(false).ends_with("the time is in the server application, not in TCP."));
        let s = app_summary(true);
        assert!(!s.contains("not in TCP") && s.contains("listed apart"), "{s}");
    }

    fn nagle_of(plain: u64, lossy: u64) -> NagleFinding {
        let server = Endpoint { ip: [127, 0, 0, 1].into(), port: 8080 };
        let mut m = FileResult::default();
        let a = m.nagle.entry(server).or_default();
        for k in 0..plain + lossy {
            let timer = k >= plain;
            let st = Stall {
                nagle: Side::Server,
                small_frame: 5 * k + 1,
                ack_frame: if timer { 0 } else { 5 * k + 2 },
                held_frame: 5 * k + 3,
                ack_delay_ns: if timer { 0 } else { 44_000_000 },
                ack_seen_ns: if timer { 0 } else { 44_000_000 },
                stall_ns: if timer { 232_000_000 } else { 44_000_000 },
                timer,
                tls: Default::default(),
            };
            a.add(ARRIVAL, [127, 0, 0, 2].into(), &st);
        }
        match build(m, Vec::new()).findings.into_iter().next() {
            Some(Finding::NagleDelayedAck(n)) => n,
            f => panic!("{f:?}"),
        }
    }

    /// Holds the loss timer released are counted apart from plain stalls, and both cost Nagle.
    #[test]
    fn nagle_plus_loss_is_counted_apart() {
        let n = nagle_of(29, 2);
        assert_eq!((n.stalls, n.with_loss), (29, 2));
        assert!((43.0..45.0).contains(&n.stall_ms.p50) && (43.0..45.0).contains(&n.ack_delay_ms.max), "{n:?}");
        assert!((231.0..233.0).contains(&n.with_loss_ms.p50), "{n:?}");
        assert_eq!(n.with_loss_frames, [146, 148, 151, 153]);
        assert!(
            (n.time_lost_ms - (29.0 * 44.0 + 2.0 * 232.0)).abs() < 0.01 && (n.with_loss_time_ms - 464.0).abs() < 0.01
        );
        assert!(
            n.summary.contains("29 of 31 responses") && n.summary.contains("2 more responses were held ~231.9 ms"),
            "{}",
            n.summary
        );
        let only = nagle_of(0, 1);
        assert!(
            only.summary.starts_with("Nagle + loss: from 127.0.0.1:8080 (server), 1 response was held"),
            "{}",
            only.summary
        );
    }
}
