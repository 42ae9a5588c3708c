//! Step 6: the verdict, a pure function of what the steps measured.
//!
//! The rules follow the seed method. Requests on fresh connections start in
//! quick-ACK mode, so they show the latency without the Nagle + delayed-ACK
//! interplay; keep-alive load shows it. When the load is far slower, the
//! client-side experiment decides: if TCP_QUICKACK on the client (which then
//! never delays an ACK) removes the excess, the time was spent waiting for
//! delayed ACKs, and since this client writes each request in one call with
//! TCP_NODELAY, the segment held was the server's. A capture or the server's
//! socket options confirm it independently.

pub use super::facts::{Facts, NoAnswer};
use super::fix::{self, Software};
use crate::record::Finding;
use crate::record::diagnose::{CaptureStep, LoadStep, Verdict};
use crate::words::ms;

/// A read gap this long inside one response is a held segment, not transfer.
const GAP_MS: f64 = 25.0;
/// Load this much slower than one request alone calls for the experiment.
pub const EXCESS_MS: f64 = 10.0;

/// Whether the load is slow enough, compared with one request alone, to run
/// the quick-ACK experiment.
pub fn needs_experiment(alone: &LoadStep, load: &LoadStep) -> bool {
    load.requests > 0 && load.latency.p90 - alone.latency.p50 > EXCESS_MS
}

fn nagle_capture(c: Option<&CaptureStep>) -> Option<&crate::record::NagleFinding> {
    c?.findings.iter().find_map(|f| match f {
        Finding::NagleDelayedAck(n) if n.nagle_side.role == "server" => Some(n),
        _ => None,
    })
}

/// Draws the verdict.
pub fn conclude(f: &Facts<'_>) -> Verdict {
    let done = |s: Option<&LoadStep>| s.is_some_and(|s| s.requests > 0);
    if !done(f.alone) && !done(f.load) {
        return super::no_answer::verdict(f);
    }
    if let Some(v) = nagle(f) {
        return v;
    }
    if let Some(v) = from_capture(f) {
        return v;
    }
    if let Some(v) = app_latency(f) {
        return v;
    }
    if let Some(v) = network(f) {
        return v;
    }
    none(f)
}

fn nagle(f: &Facts<'_>) -> Option<Verdict> {
    let (alone, load) = (f.alone?, f.load?);
    let base = alone.latency.p50;
    let excess = load.latency.p50 - base;
    let mut evidence = Vec::new();
    let mut sources = 0;

    // The A/B experiment: does never delaying an ACK on the client remove the excess?
    let ab = f.quickack.filter(|q| q.requests > 0 && excess >= EXCESS_MS).filter(|q| {
        let removed = (load.latency.p50 - q.latency.p50) / excess;
        removed >= 0.7
    });
    if let Some(q) = ab {
        sources += 1;
        evidence.push(format!(
            "step 3: with TCP_QUICKACK on the client (it never delays an ACK), the median under load fell from {} to {}: the requests were waiting for delayed ACKs",
            ms(load.latency.p50),
            ms(q.latency.p50)
        ));
    }
    let gap = load.max_read_gap.p50 >= GAP_MS && excess >= EXCESS_MS;
    if gap {
        sources += 1;
        let (parts, held) = if f.tls { ("two TLS records", "second record") } else { ("two parts", "second write") };
        evidence.push(format!(
            "step 2: under load, half the responses arrived in {parts} {} apart (the first byte after {}): the server's {held} was held",
            ms(load.max_read_gap.p50),
            ms(load.time_to_first_byte.p50)
        ));
    }
    let cap = nagle_capture(f.capture);
    if let Some(n) = cap {
        sources += 2; // packets are the direct proof
        evidence.push(format!(
            "step 4: the capture shows {} stalls in {} responses: {} holds its next segment {} (median) until {} ACKs the first, {} late ({} timer; frames {})",
            n.stalls,
            n.exchanges,
            n.nagle_side.endpoint,
            ms(n.stall_ms.p50),
            n.delayed_ack_side.host,
            ms(n.ack_delay_ms.p50),
            n.ack_timer,
            n.example_frames.iter().take(3).map(u64::to_string).collect::<Vec<_>>().join(", ")
        ));
    }
    if ab.is_none() && !gap && cap.is_none() {
        return None;
    }
    if let Some(p) = f.process {
        if p.nagle_on > 0 {
            sources += 1;
            evidence.push(format!(
                "step 5: pid {} ({}): {} of {} established connections have TCP_NODELAY off",
                p.pid, p.name, p.nagle_on, p.established
            ));
        }
        if p.nodelay_setting == Some(false) {
            let src = p.setting_source.as_deref().map(|s| format!(", from {s}")).unwrap_or_default();
            let name = crate::escape::clean(&p.software_name);
            evidence.push(format!("step 5: {name}'s own setting turns TCP_NODELAY off{src}"));
        }
        // The application's own calls: the stall's shape, seen from inside the
        // server; not when the kernel saw the pieces leave as they were written.
        if let Some(t) = p.trace.as_ref().filter(|t| t.found && t.kernel_confirms != Some(false)) {
            sources += 1;
            evidence.push(format!("step 5: {}", super::local::trace_phrase(t)));
        }
    }
    let server = cap.map_or(f.server.clone(), |n| n.nagle_side.endpoint.clone());
    let client = cap.map_or("the client".to_string(), |n| format!("the client {}", n.delayed_ack_side.host));
    let lost = match (ab, cap) {
        (Some(q), _) => load.latency.p50 - q.latency.p50,
        (None, Some(n)) => n.stall_ms.p50,
        (None, None) => excess,
    }
    .max(0.0);
    let sw = f.software();
    let who = if sw == Software::Other { String::new() } else { format!(" ({})", sw.name()) };
    let (pieces, piece) = match f.tls {
        true => ("as two or more TLS records", "record"),
        false => ("in pieces", "piece"),
    };
    Some(Verdict {
        cause: "nagle_delayed_ack",
        summary: format!(
            "Nagle + delayed ACK: the server {server}{who} writes each response {pieces} with Nagle on, and {client} delays its ACK of the first {piece}, so the rest waits ~{} per request. One request alone takes {}; under keep-alive load, {}.",
            ms(lost),
            ms(base),
            ms(load.latency.p50)
        ),
        nagle_side: Some(format!("{server} (server)")),
        delayed_ack_side: Some(format!("{client} (Linux: 40 ms minimum; Windows: 200 ms)")),
        lost_per_request_ms: round(lost),
        confidence: match sources {
            s if s >= 3 => "high",
            2 => "medium",
            _ => "low",
        },
        evidence,
        fix: match f.tls {
            true => fix::for_tls_server_nagle(sw, &server, &client),
            false => fix::for_server_nagle(sw, &server, &client),
        },
    })
}

/// Causes only packets can show: retransmissions, SYN retries, zero windows.
/// A cause only packets show (loss, SYN retries, zero window) is the verdict
/// when it costs the average request this much, or this share of its median.
const MATTERS_MS: f64 = 1.0;
const MATTERS_SHARE: f64 = 0.1;

/// The worst finding of the capture that only packets show (not Nagle, think
/// time or the path, which the other steps measure), and whether it costs
/// enough per request to be the cause.
fn other_finding<'a>(f: &Facts<'a>) -> Option<(&'a Finding, bool)> {
    let c = f.capture?;
    let worst = c
        .findings
        .iter()
        .filter(|x| matches!(x, Finding::Retransmission(_) | Finding::SynRetransmission(_) | Finding::ZeroWindow(_)))
        .max_by(|a, b| a.time_lost_ms().total_cmp(&b.time_lost_ms()))?;
    let (requests, p50) = f.load.map_or((1, 0.0), |l| (l.requests.max(1), l.latency.p50));
    let per_request = worst.time_lost_ms() / requests as f64;
    Some((worst, per_request >= MATTERS_MS.max(MATTERS_SHARE * p50)))
}

fn from_capture(f: &Facts<'_>) -> Option<Verdict> {
    let (worst, true) = other_finding(f)? else {
        return None;
    };
    let (cause, fix) = match worst {
        Finding::Retransmission(_) => (
            "retransmission",
            "Find where packets are lost (`nstat -az | grep -i retrans`, interface drops, a firewall); TCP waits at least 200 ms (RTO) for each loss it cannot repair fast.",
        ),
        Finding::SynRetransmission(_) => (
            "syn_retransmission",
            "Connects wait 1 s (then 3 s) for a lost SYN or SYN-ACK: check the listen backlog (`ss -ltn` Recv-Q, `nstat | grep ListenOverflows`) and drops on the path.",
        ),
        Finding::ZeroWindow(_) => (
            "zero_window",
            "The receiver stops reading: make the reading side consume faster, or give it larger buffers.",
        ),
        _ => return None,
    };
    Some(Verdict {
        cause,
        summary: worst.summary().to_string(),
        lost_per_request_ms: 0.0,
        confidence: "high",
        evidence: vec![format!("step 4: {}", worst.summary())],
        fix: vec![fix.into()],
        ..Verdict::default()
    })
}

fn app_latency(f: &Facts<'_>) -> Option<Verdict> {
    let (alone, load) = (f.alone?, f.load);
    let think = alone.time_to_first_byte.p50 - f.rtt_ms();
    let under_load = load.filter(|l| l.requests > 0);
    let mut evidence = Vec::new();
    let summary = if think >= EXCESS_MS {
        let rest = alone.latency.p50 - alone.time_to_first_byte.p50;
        evidence.push(format!(
            "step 2: one request alone waits {} for its first byte, and the rest follows {}: the server answers late, in one piece",
            ms(alone.time_to_first_byte.p50),
            if rest < 1.0 { "at once".to_string() } else { format!("within {}", ms(rest)) }
        ));
        if let Some(l) = under_load {
            evidence.push(format!(
                "step 2: under load the median is {} (alone {})",
                ms(l.latency.p50),
                ms(alone.latency.p50)
            ));
        }
        format!(
            "Application latency: the server takes ~{} before it answers, even one request alone on a fresh connection; the network round trip is {}. This is not Nagle or delayed ACK.",
            ms(think),
            ms(f.rtt_ms())
        )
    } else {
        // Fast alone, slow under load, and never delayed ACKs: the server queues.
        let l = under_load?;
        if l.latency.p50 - alone.latency.p50 < EXCESS_MS {
            return None;
        }
        let q = f.quickack.filter(|q| q.requests > 0)?;
        evidence.push(format!(
            "step 3: TCP_QUICKACK on the client changed nothing ({} vs {}): no delayed ACK is waited for",
            ms(q.latency.p50),
            ms(l.latency.p50)
        ));
        evidence.push(format!(
            "step 2: one request alone takes {}, {} at once take {} each",
            ms(alone.latency.p50),
            l.connections,
            ms(l.latency.p50)
        ));
        format!(
            "The server slows under concurrency ({} alone, {} with {} connections): queueing or CPU in the application, not Nagle or delayed ACK.",
            ms(alone.latency.p50),
            ms(l.latency.p50),
            l.connections
        )
    };
    if let Some(Finding::AppLatency(a)) =
        f.capture.and_then(|c| c.findings.iter().find(|x| matches!(x, Finding::AppLatency(_))))
    {
        evidence.push(format!("step 4: {}", a.summary));
    }
    Some(Verdict {
        cause: "app_latency",
        summary,
        lost_per_request_ms: round(think.max(0.0)),
        confidence: if evidence.len() >= 2 { "high" } else { "medium" },
        evidence,
        fix: vec![
            "Profile the request handler (slow queries, locks, upstream calls, GC); TCP settings will not help.".into(),
        ],
        ..Verdict::default()
    })
}

fn network(f: &Facts<'_>) -> Option<Verdict> {
    let alone = f.alone?;
    let rtt = f.rtt_ms();
    if alone.latency.p50 < 1.0 || rtt < 0.5 * alone.latency.p50 {
        return None;
    }
    Some(Verdict {
        cause: "network",
        summary: format!(
            "Network latency: the round trip is {}, most of the {} one request takes; the server itself is quick.",
            ms(rtt),
            ms(alone.latency.p50)
        ),
        lost_per_request_ms: round(rtt),
        confidence: "medium",
        evidence: vec![format!("step 1: TCP round trip {}; step 2: request {}", ms(rtt), ms(alone.latency.p50))],
        fix: vec!["Move client and server closer, or make fewer round trips (keep-alive, batching).".into()],
        ..Verdict::default()
    })
}

fn none(f: &Facts<'_>) -> Verdict {
    let mut evidence = Vec::new();
    let alone = f.alone.map(|a| a.latency.p50);
    if let Some(a) = alone {
        evidence.push(format!("step 2: one request alone takes {}", ms(a)));
    }
    if let Some(l) = f.load.filter(|l| l.requests > 0) {
        evidence.push(format!(
            "step 2: under keep-alive load ({} connections) the median is {}, p99 {}",
            l.connections,
            ms(l.latency.p50),
            ms(l.latency.p99)
        ));
    }
    if let Some(c) = f.capture {
        match other_finding(f) {
            Some((minor, _)) => evidence.push(format!(
                "step 4: {} packets captured, no stall; too rare to matter here: {}",
                c.packets,
                minor.summary()
            )),
            None => evidence
                .push(format!("step 4: {} packets captured, no stall, retransmission or zero window", c.packets)),
        }
    }
    if let Some(p) = f.process.filter(|p| p.established > 0) {
        evidence.push(format!(
            "step 5: pid {}: {} of {} established connections have Nagle on",
            p.pid, p.nagle_on, p.established
        ));
    }
    if let Some(t) = f.process.and_then(|p| p.trace.as_ref()) {
        evidence.push(format!("step 5: {}", super::local::trace_phrase(t)));
    }
    Verdict {
        cause: "none",
        summary: format!(
            "No latency problem found: {} answers in {} alone and {} under load, round trip {}.",
            f.server,
            alone.map_or("-".into(), ms),
            f.load.map_or("-".into(), |l| ms(l.latency.p50)),
            ms(f.rtt_ms())
        ),
        confidence: if f.capture.is_some() { "high" } else { "medium" },
        evidence,
        ..Verdict::default()
    }
}

fn round(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::bench::Distribution;
    use crate::record::diagnose::{RttStep, ServerStep};

    fn step(p50: f64, ttfb: f64, gap: f64, quickack: bool) -> LoadStep {
        let d = |v: f64| Distribution { count: 100, p50: v, p75: v, p90: v, p99: v, max: v, ..Default::default() };
        LoadStep {
            requests: 100,
            latency: d(p50),
            time_to_first_byte: d(ttfb),
            max_read_gap: d(gap),
            ..LoadStep::empty(8, true, quickack)
        }
    }

    fn rtt(ms: f64) -> RttStep {
        RttStep { method: "raw_syn", sent: 5, received: 5, open: 5, closed: 0, min_ms: Some(ms), avg_ms: Some(ms) }
    }

    #[test]
    fn stall_removed_by_quickack_with_a_read_gap_is_server_nagle() {
        let (r, alone, load, qa) =
            (rtt(0.02), step(0.15, 0.14, 0.0, false), step(43.9, 0.1, 43.7, false), step(0.2, 0.1, 0.0, true));
        let f = Facts {
            server: "127.0.0.1:80".into(),
            rtt: Some(&r),
            alone: Some(&alone),
            load: Some(&load),
            quickack: Some(&qa),
            server_header: Some("nginx/1.22.1"),
            ..Facts::default()
        };
        let v = conclude(&f);
        assert_eq!(v.cause, "nagle_delayed_ack");
        assert_eq!(v.confidence, "medium");
        assert!((v.lost_per_request_ms - 43.7).abs() < 0.01, "{}", v.lost_per_request_ms);
        assert!(v.nagle_side.unwrap().contains("127.0.0.1:80 (server)"));
        assert!(v.fix[0].contains("tcp_nodelay on;"));
        assert_eq!(v.evidence.len(), 2);
        assert!(v.summary.contains("in pieces") && !v.summary.contains("TLS"), "{}", v.summary);
        // The same over https: records named, and nginx's record size among the fixes.
        let v = conclude(&Facts { tls: true, ..f });
        assert!(v.summary.contains("as two or more TLS records"), "{}", v.summary);
        assert!(v.evidence.iter().any(|e| e.contains("arrived in two TLS records")), "{:#?}", v.evidence);
        assert!(v.fix[1].contains("ssl_buffer_size"), "{:#?}", v.fix);
    }

    fn server(trace: Option<crate::record::inspect::Trace>) -> ServerStep {
        ServerStep {
            pid: 7,
            name: "nginx".into(),
            software: "nginx".into(),
            software_name: "nginx 1.22.1".into(),
            nodelay_setting: Some(false),
            setting_source: Some("nginx -T".into()),
            established: 8,
            nagle_on: 8,
            unreadable: 0,
            trace,
        }
    }

    #[test]
    fn a_traced_write_write_read_is_evidence_and_raises_confidence() {
        use crate::record::inspect::{Trace, TraceExample, TraceHold, TraceLine};
        let (r, alone, load, qa) =
            (rtt(0.02), step(0.15, 0.14, 0.0, false), step(43.9, 0.1, 43.7, false), step(0.2, 0.1, 0.0, true));
        let line = |call: &'static str, kind: &'static str, fd: Option<i32>, ret: i64| TraceLine {
            call,
            kind,
            fd,
            ret,
            ..TraceLine::default()
        };
        let found = Trace {
            traced_ms: 500.0,
            responses: 90,
            nagle_responses: 90,
            write_write_read: 88,
            found: true,
            gap_wwr_ms: Some(43.9),
            method: "ptrace",
            example: Some(TraceExample {
                lines: vec![
                    line("writev", "write", Some(7), 238),
                    line("sendfile", "write", Some(7), 587),
                    line("epoll_wait", "wait", None, 1),
                ],
                ..TraceExample::default()
            }),
            ..Trace::default()
        };
        let facts = |p| Facts {
            server: "127.0.0.1:80".into(),
            rtt: Some(&r),
            alone: Some(&alone),
            load: Some(&load),
            quickack: Some(&qa),
            process: p,
            ..Facts::default()
        };
        // Sockets unreadable (no Nagle count): the trace is what makes it three sources.
        let with = ServerStep { nagle_on: 0, unreadable: 8, ..server(Some(found.clone())) };
        let v = conclude(&facts(Some(&with)));
        assert_eq!((v.cause, v.confidence), ("nagle_delayed_ack", "high"));
        let e =
            v.evidence.iter().find(|e| e.contains("write-write-read")).unwrap_or_else(|| panic!("{:#?}", v.evidence));
        assert!(e.starts_with("step 5: traced 0.5 s with ptrace: 88 of 90 responses"), "{e}");
        assert!(e.contains("writev 238 B + sendfile 587 B, then epoll_wait"), "{e}");
        // Traced with eBPF, the kernel's own account of the hold joins the line.
        let hold = |nagle| TraceHold { writes: 180, nagle, nagle_median_ms: Some(43.6), ..TraceHold::default() };
        let ebpf = |nagle, confirms| Trace {
            method: "ebpf",
            kernel_hold: Some(hold(nagle)),
            kernel_confirms: Some(confirms),
            ..found.clone()
        };
        let with = ServerStep { nagle_on: 0, unreadable: 8, ..server(Some(ebpf(88, true))) };
        let v = conclude(&facts(Some(&with)));
        assert_eq!(v.confidence, "high");
        let e = v.evidence.iter().find(|e| e.contains("write-write-read")).unwrap();
        assert!(
            e.ends_with("; the kernel held 88 of 180 writes by Nagle until the peer's ACK (median 43.6 ms)"),
            "{e}"
        );
        // The shape, but the kernel saw the pieces leave as written: not Nagle evidence.
        let paced = ServerStep { nagle_on: 0, unreadable: 8, ..server(Some(ebpf(3, false))) };
        let v = conclude(&facts(Some(&paced)));
        assert_eq!(v.confidence, "medium", "{:#?}", v.evidence);
        assert!(v.evidence.iter().all(|e| !e.contains("write-write-read")), "{:#?}", v.evidence);
        let phrase = crate::diagnose::local::trace_phrase(paced.trace.as_ref().unwrap());
        assert!(phrase.contains("; but the kernel held only 3 of 180 writes by Nagle"), "{phrase}");
        // Without it: the A/B and the read gap only.
        let without = ServerStep { nagle_on: 0, unreadable: 8, ..server(None) };
        let v = conclude(&facts(Some(&without)));
        assert_eq!(v.confidence, "medium");
        assert!(v.evidence.iter().all(|e| !e.contains("write-write-read")));
        // A trace that saw none is not Nagle evidence, and a healthy server's verdict says what it saw.
        let none = server(Some(Trace { traced_ms: 500.0, responses: 90, ..Trace::default() }));
        let (fast_alone, fast_load) = (step(0.15, 0.14, 0.0, false), step(0.3, 0.2, 0.0, false));
        let f = Facts {
            server: "s".into(),
            alone: Some(&fast_alone),
            load: Some(&fast_load),
            process: Some(&none),
            ..Facts::default()
        };
        let v = conclude(&f);
        assert_eq!(v.cause, "none");
        assert!(
            v.evidence.iter().any(|e| e.contains("no write-write-read on Nagle sockets in 90 responses")),
            "{:#?}",
            v.evidence
        );
    }

    #[test]
    fn think_time_is_app_latency_not_nagle() {
        let (r, alone, load) = (rtt(0.02), step(45.3, 45.2, 0.0, false), step(45.6, 45.5, 0.0, false));
        let f = Facts { server: "s".into(), rtt: Some(&r), alone: Some(&alone), load: Some(&load), ..Facts::default() };
        assert!(!needs_experiment(&alone, &load));
        let v = conclude(&f);
        assert_eq!(v.cause, "app_latency");
        assert!((v.lost_per_request_ms - 45.18).abs() < 0.01);
    }

    #[test]
    fn load_slowness_that_quickack_does_not_change_is_queueing() {
        let (alone, load, qa) = (step(0.2, 0.2, 0.0, false), step(30.0, 29.9, 0.0, false), step(29.0, 28.9, 0.0, true));
        let f = Facts {
            server: "s".into(),
            alone: Some(&alone),
            load: Some(&load),
            quickack: Some(&qa),
            ..Facts::default()
        };
        let v = conclude(&f);
        assert_eq!(v.cause, "app_latency");
        assert!(v.summary.contains("under concurrency"));
    }

    #[test]
    fn fast_everywhere_is_none_and_refused_is_closed() {
        let (alone, load) = (step(0.15, 0.14, 0.0, false), step(0.3, 0.2, 0.0, false));
        let f = Facts { server: "s".into(), alone: Some(&alone), load: Some(&load), ..Facts::default() };
        assert_eq!(conclude(&f).cause, "none");
        let dead = LoadStep::empty(1, false, false);
        let f = Facts {
            server: "s".into(),
            alone: Some(&dead),
            alone_error: Some((NoAnswer::Refused, "connection refused")),
            ..Facts::default()
        };
        let v = conclude(&f);
        assert_eq!(v.cause, "closed");
        assert!(v.evidence.iter().any(|e| e.contains("connection refused")), "{:?}", v.evidence);
    }

    fn capture_with_loss(lost_ms: f64) -> CaptureStep {
        let f = crate::record::RetransFinding {
            summary: "Retransmission: 3 segments re-sent".into(),
            server: "s".into(),
            sender: "server",
            retransmissions: 3,
            timeouts: 0,
            spurious: 0,
            connections: 3,
            delay_ms: Default::default(),
            time_lost_ms: lost_ms,
            example_frames: vec![],
        };
        CaptureStep {
            interface: "lo".into(),
            packets: 1000,
            kernel_drops: 0,
            truncated: false,
            findings: vec![Finding::Retransmission(f)],
            breakdown: vec![],
            stalled_exchanges: vec![],
            slowest_exchanges: vec![],
            connections: vec![],
        }
    }

    #[test]
    fn loss_is_the_cause_only_when_it_costs_the_requests_something() {
        let (alone, load) = (step(0.15, 0.14, 0.0, false), step(0.3, 0.2, 0.0, false));
        // 100 requests: 12.5 ms of loss in all is 0.125 ms per request, noise.
        let rare = capture_with_loss(12.5);
        let f = Facts {
            server: "s".into(),
            alone: Some(&alone),
            load: Some(&load),
            capture: Some(&rare),
            ..Facts::default()
        };
        let v = conclude(&f);
        assert_eq!(v.cause, "none");
        assert!(v.evidence.iter().any(|e| e.contains("too rare to matter")), "{:?}", v.evidence);
        // Two 200 ms timeouts in 100 requests: 4 ms per request.
        let costly = capture_with_loss(400.0);
        let f = Facts { capture: Some(&costly), ..f };
        assert_eq!(conclude(&f).cause, "retransmission");
    }

    #[test]
    fn a_long_round_trip_is_network() {
        let (r, alone, load) = (rtt(20.0), step(21.0, 20.9, 0.0, false), step(21.5, 21.4, 0.0, false));
        let f = Facts { server: "s".into(), rtt: Some(&r), alone: Some(&alone), load: Some(&load), ..Facts::default() };
        assert_eq!(conclude(&f).cause, "network");
    }
}
