//! Verdicts on the captures taken across the delay bridge (tests/data/rtt,
//! made by tests/data/rtt/make.sh): each as tests/data/rtt/TRUTH.md says it is.
//! The same stalls seen from both ends of a path give the same verdict and
//! the same peer ACK timer; a proxy's wait for its upstream is the upstream's.

mod common;

use common::{kinds, nagle, run};
use tcpdoctor::record::{Connection, Finding, NagleFinding, Report};

fn rtt(name: &str) -> Report {
    run(&format!("rtt/{name}.pcap"))
}

fn the_nagle(r: &Report, name: &str) -> NagleFinding {
    let n = nagle(r);
    assert_eq!(n.len(), 1, "{name}: {:#?}", r.findings);
    n[0].clone()
}

fn roles_from(r: &Report) -> Vec<&str> {
    r.connections.iter().map(|c: &Connection| c.roles_from).collect()
}

/// One run captured at both ends at once: the server's Nagle, the client's
/// Linux timer (~43.4 ms) from either file, the capture point and its round
/// trip, and no other cause (the server's think time is under 1 ms).
#[test]
fn both_ends_of_a_real_path_report_the_peers_ack_timer() {
    for (delay, rtt_ms, stalls) in [("5ms", 10.2, 29), ("40ms", 80.3, 28)] {
        let mut timers = Vec::new();
        for (end, point, seen) in [("client", "near_client", 0.0), ("server", "near_server", rtt_ms)] {
            let name = format!("nagle_{delay}_{end}");
            let r = rtt(&name);
            assert_eq!(kinds(&r), ["nagle_delayed_ack"], "{name}: {:#?}", r.findings);
            let f = the_nagle(&r, &name);
            assert_eq!((f.nagle_side.endpoint.as_str(), f.nagle_side.role), ("198.18.0.2:8080", "server"), "{name}");
            assert_eq!((f.delayed_ack_side.host.as_str(), f.stalls), ("198.18.0.1", stalls), "{name}");
            assert!(f.ack_timer.contains("Linux"), "{name}: {}", f.ack_timer);
            assert_eq!(f.capture_point, point, "{name}");
            let far = if end == "client" { f.rtt_to_server_ms } else { f.rtt_to_client_ms };
            assert!((far.unwrap() - rtt_ms).abs() < 1.0, "{name}: {far:?}");
            // What the capture point saw: the timer, plus the round trip when the ACKer is far.
            assert!((f.ack_seen_ms.p50 - f.ack_delay_ms.p50 - seen).abs() < 1.5, "{name}: {f:?}");
            assert_eq!(roles_from(&r), ["handshake"], "{name}");
            timers.push(f.ack_delay_ms.p50);
        }
        assert!((41.0..46.0).contains(&timers[0]), "{delay}: {timers:?}");
        assert!((timers[0] - timers[1]).abs() < 2.0, "{delay}: {timers:?}");
    }
}

/// tcpdump started after the load, server on 61000 above the client ports:
/// the roles come from the content, not from port order.
#[test]
fn a_mid_stream_capture_with_a_high_server_port_names_the_server() {
    let r = rtt("midstream_high_port");
    assert_eq!(kinds(&r), ["nagle_delayed_ack"], "{:#?}", r.findings);
    let f = the_nagle(&r, "midstream_high_port");
    assert_eq!((f.nagle_side.endpoint.as_str(), f.nagle_side.role), ("198.18.0.2:61000", "server"));
    assert_eq!((f.delayed_ack_side.host.as_str(), f.delayed_ack_side.role), ("198.18.0.1", "client"));
    assert!((41.0..46.0).contains(&f.ack_delay_ms.p50) && f.capture_point == "near_server", "{f:?}");
    assert!(f.fix[0].contains("server"), "{:?}", f.fix);
    assert!(roles_from(&r).iter().all(|&b| b == "content"), "{:?}", roles_from(&r));
}

/// A length-prefixed RPC client writes prefix and payload apart: the client
/// runs Nagle and the server delays its ACKs.
#[test]
fn a_non_http_client_writing_in_two_pieces_is_client_side_nagle() {
    let r = rtt("rpc_client_nagle");
    assert_eq!(kinds(&r), ["nagle_delayed_ack"], "{:#?}", r.findings);
    let f = the_nagle(&r, "rpc_client_nagle");
    assert_eq!(f.nagle_side.role, "client", "{f:?}");
    assert!(f.nagle_side.endpoint.starts_with("198.18.0.1:"), "{f:?}");
    assert_eq!((f.delayed_ack_side.host.as_str(), f.delayed_ack_side.role), ("198.18.0.2", "server"));
    assert!(f.stalls >= 28 && (41.0..46.0).contains(&f.ack_delay_ms.p50), "{f:?}");
}

/// Header and body as two TLS records with Nagle on: the server's Nagle.
#[test]
fn two_tls_records_with_nagle_are_the_servers_nagle() {
    let r = rtt("tls_two_records");
    assert_eq!(kinds(&r), ["nagle_delayed_ack"], "{:#?}", r.findings);
    let f = the_nagle(&r, "tls_two_records");
    assert_eq!((f.nagle_side.endpoint.as_str(), f.nagle_side.role), ("198.18.0.2:8443", "server"));
    assert!(f.stalls >= 29 && (41.0..46.0).contains(&f.ack_delay_ms.p50), "{f:?}");
}

/// nginx in front of the JDK's HttpServer, both legs in one file: only the
/// backend runs Nagle; the front leg's ~43 ms is waiting for the upstream,
/// not nginx's own time, and the breakdown moves it out of nginx's think time.
#[test]
fn a_proxy_waiting_for_its_nagle_upstream_blames_only_the_upstream() {
    let r = rtt("proxy_jdk");
    let k = kinds(&r);
    let f = the_nagle(&r, "proxy_jdk");
    assert_eq!((f.nagle_side.endpoint.as_str(), f.nagle_side.role), ("127.0.0.1:8081", "server"));
    assert_eq!(f.delayed_ack_side.host, "127.0.0.1");
    let front_is_slow = r.findings.iter().any(|x| matches!(x, Finding::AppLatency(a) if a.server == "198.18.0.2:8080"));
    assert!(!front_is_slow, "{:#?}", r.findings);
    let w = r
        .findings
        .iter()
        .find_map(|x| match x {
            Finding::UpstreamWait(w) => Some(w),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no upstream_wait: {k:?}"));
    assert_eq!((w.server.as_str(), w.upstream.as_str()), ("198.18.0.2:8080", "127.0.0.1:8081"));
    assert!(w.waits_matched >= 25 && w.waits_matched * 10 >= w.waits_judged * 9, "{w:?}");
    assert!((40.0..50.0).contains(&w.wait_ms.p50), "{w:?}");
    assert!(w.fix[0].contains("127.0.0.1:8081") && w.fix[1].contains("TCP_NODELAY"), "{:?}", w.fix);
    // The upstream's cause comes before its proxy's wait.
    let at = |kind: &str| k.iter().position(|x| *x == kind).unwrap();
    assert!(at("nagle_delayed_ack") < at("upstream_wait"), "{k:?}");
    let front = r.breakdown.iter().find(|b| b.server == "198.18.0.2:8080").unwrap();
    assert!(front.upstream_ms > 35.0 && front.think_ms < front.upstream_ms / 3.0, "{front:?}");
    let out = common::tcpdoctor().arg("analyze").arg(common::data("rtt/proxy_jdk.pcap")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("* Waiting for the upstream: 198.18.0.2:8080") && text.contains(" upstream "), "{text}");
}

/// The same proxy without its upstream's leg in the capture (only the front
/// leg): nothing to nest, so the front's time stays its own.
#[test]
fn without_the_upstream_leg_a_slow_proxy_is_application_latency() {
    let out = common::tcpdoctor()
        .args(["analyze", "--json", "--filter", "port 8080"])
        .arg(common::data("rtt/proxy_jdk.pcap"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let k: Vec<&str> = v["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert_eq!(k, ["app_latency"], "{:#}", v["findings"]);
}

/// TCP_NODELAY across a 10 ms round trip: the path, no Nagle.
#[test]
fn nodelay_across_a_real_round_trip_is_the_path() {
    let r = rtt("nodelay_5ms_client");
    assert_eq!(kinds(&r), ["network_latency"], "{:#?}", r.findings);
}
