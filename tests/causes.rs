//! Causes that are not Nagle alone: loss mixed with Nagle (real captures with
//! 3 % random loss between namespaces, tests/data/loss_nagle_*.pcap), and
//! curl's `Expect: 100-continue` against real servers on loopback, captured
//! with `tcpdoctor capture` (root). Traffic goes only to loopback.

mod common;

use common::{Proc, data, kinds, nagle, require, require_root, run, run_bounded};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;
use tcpdoctor::record::{Finding, Report};

fn retransmissions(r: &Report) -> u64 {
    r.findings
        .iter()
        .filter_map(|f| match f {
            Finding::Retransmission(x) => Some(x.retransmissions - x.spurious),
            _ => None,
        })
        .sum()
}

/// 3 % loss on a path where the server also runs Nagle: the held bodies the
/// server's loss timer had to send (a lost delayed ACK or a lost header) are
/// Nagle + loss, counted apart from the plain stalls and from the re-sent
/// segments, and none of it is server think time: no app_latency at either end.
#[test]
fn loss_and_nagle_are_both_found_and_neither_is_application_time() {
    for (name, with_loss) in [("loss_nagle_srv.pcap", 7), ("loss_nagle_cli.pcap", 5)] {
        let r = run(name);
        let k = kinds(&r);
        assert!(k.contains(&"nagle_delayed_ack") && k.contains(&"retransmission"), "{name}: {k:?}");
        assert!(!k.contains(&"app_latency"), "{name}: {:#?}", r.findings);
        let n = nagle(&r);
        assert_eq!(n.len(), 1, "{name}");
        let f = n[0];
        assert_eq!((f.nagle_side.endpoint.as_str(), f.nagle_side.role), ("10.98.1.1:28121", "server"), "{name}");
        assert!((45..=55).contains(&f.stalls) && (40.0..50.0).contains(&f.stall_ms.p50), "{name}: {f:?}");
        assert_eq!(f.with_loss, with_loss, "{name}: {f:?}");
        // Released by the loss timer: 200 ms at least, srtt and jiffies on top.
        assert!((200.0..400.0).contains(&f.with_loss_ms.p50) && f.with_loss_ms.max < 450.0, "{name}: {f:?}");
        assert_eq!(f.with_loss_frames.len() as u64, 2 * with_loss.min(5), "{name}");
        assert!(f.summary.contains("Nagle + loss"), "{name}: {}", f.summary);
        assert!(f.time_lost_ms > f.with_loss_time_ms + 40.0 * f.stalls as f64, "{name}: both counted in the total");
        assert!(retransmissions(&r) >= 2, "{name}: the re-sent segments keep their own finding");
        let b = &r.breakdown[0];
        assert!(b.loss_ms * 60.0 > f.with_loss_time_ms, "{name}: the timer's holds are loss time: {b:?}");
        assert!(b.client_wait_ms == 0.0, "{name}: {b:?}");
    }
    // At the server's end every late segment is explained: think time is the server's sub-ms.
    let b = &run("loss_nagle_srv.pcap").breakdown[0];
    assert!(b.think_ms < 1.0, "{b:?}");
    // At the client's end re-sent bodies look new; their IP IDs skip the lost copy.
    let b = &run("loss_nagle_cli.pcap").breakdown[0];
    assert!(b.think_ms < 3.0, "{b:?}");
}

/// The count agrees with an independent one: tshark's view of the server's
/// data segments sent ≥ 190 ms after the previous one with no ACK of it in between.
#[test]
fn nagle_plus_loss_count_matches_tshark() {
    if !require("tshark") {
        return;
    }
    let mut c = Command::new("python3");
    c.arg(data("lab/timer_gaps.py")).arg(data("loss_nagle_srv.pcap")).arg("28121");
    let (out, _) = run_bounded(c, Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let gaps: u64 = text.split_whitespace().next().unwrap().parse().unwrap();
    assert!(text.split_whitespace().count() == 3, "{text}");
    assert_eq!(nagle(&run("loss_nagle_srv.pcap"))[0].with_loss, gaps);
}

/// Captures one curl upload (two requests on one connection, each with
/// `Expect: 100-continue` and a 100 KB body) to the lab's upload server,
/// answering `100 Continue` or not; returns `analyze --json`.
fn curl_upload(answer_continue: bool) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body.bin");
    std::fs::write(&body, vec![b'x'; 100_000]).unwrap();
    let pcap = dir.path().join("expect.pcap");
    let port = common::free_port();
    let mut srv = Command::new("python3");
    srv.arg(data("lab/expect_server.py")).args(["--port", &port.to_string(), "--max-seconds", "30"]);
    if answer_continue {
        srv.arg("--continue");
    }
    let (mut server, line) = Proc::started(srv);
    assert!(line.starts_with("listening"), "{line}");
    common::wait_listening(port, &mut server);
    let mut cap = common::tcpdoctor();
    cap.args(["capture", "-i", "lo", &format!("tcp port {port}"), "-w"]).arg(&pcap).args(["--duration", "20s"]);
    let (capture, line) = Proc::started_on(cap, true);
    assert!(line.contains("capturing on lo"), "{line}");
    let url = format!("http://127.0.0.1:{port}/upload");
    let mut curl = Command::new("curl");
    curl.args(["-sS", "-o", "/dev/null", "-H", "Expect: 100-continue", "--data-binary"])
        .arg(format!("@{}", body.display()))
        .args([&url, &url]);
    let (out, took) = run_bounded(curl, Duration::from_secs(20));
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    // curl waits its 1 s expect timeout per request only when nobody answers.
    assert_eq!(took >= Duration::from_millis(1900), !answer_continue, "curl took {took:?}");
    std::thread::sleep(Duration::from_millis(200));
    assert!(capture.interrupt(Duration::from_secs(10)).success());
    let (out, _) = run_bounded(
        {
            let mut a = common::tcpdoctor();
            a.args(["analyze", "--json"]).arg(&pcap);
            a
        },
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    drop(server);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// curl asks `Expect: 100-continue`; the server never answers it, so each
/// body waits curl's 1 s timeout. One finding for the client host, the wait
/// the client's (not the server's think time), and both fixes.
#[test]
fn expect_100_continue_without_an_answer_is_the_clients_wait() {
    if !require_root() || !require("curl") || !require("python3") {
        return;
    }
    let v = curl_upload(false);
    let f: Vec<&Value> =
        v["findings"].as_array().unwrap().iter().filter(|f| f["kind"] == "expect_100_continue").collect();
    assert_eq!(f.len(), 1, "{:#}", v["findings"]);
    let f = f[0];
    assert_eq!((f["client"]["host"].as_str(), f["client"]["role"].as_str()), (Some("127.0.0.1"), Some("client")));
    assert_eq!((f["requests"].as_u64(), f["connections"].as_u64()), (Some(2), Some(1)));
    let wait = f["wait_ms"]["p50"].as_f64().unwrap();
    assert!((950.0..1100.0).contains(&wait), "{f:#}");
    assert!(f["time_lost_ms"].as_f64().unwrap() > 1900.0, "{f:#}");
    assert_eq!(f["example_frames"].as_array().unwrap().len(), 4);
    assert!(f["fix"][1].as_str().unwrap().contains("-H 'Expect:'"), "{f:#}");
    assert!(f["summary"].as_str().unwrap().contains("not the server's think time"), "{f:#}");
    let b = &v["breakdown"][0];
    assert!((950.0..1100.0).contains(&b["client_wait_ms"].as_f64().unwrap()), "{b:#}");
    assert!(b["think_ms"].as_f64().unwrap() < 20.0 && b["transfer_ms"].as_f64().unwrap() < 20.0, "{b:#}");
    let k: Vec<&str> = v["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert!(!k.contains(&"app_latency") && !k.contains(&"nagle_delayed_ack"), "{k:?}");
}

/// The same upload to a server that answers `100 Continue` at once: nothing to find.
#[test]
fn expect_100_continue_answered_is_nothing() {
    if !require_root() || !require("curl") || !require("python3") {
        return;
    }
    let v = curl_upload(true);
    // Only the Python server's own time may show, when a loaded machine slows it.
    let kinds: Vec<&str> = v["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert!(kinds.iter().all(|k| *k == "app_latency"), "{:#}", v["findings"]);
    assert!(v["breakdown"][0]["client_wait_ms"].as_f64().unwrap() < 5.0, "{:#}", v["breakdown"]);
}

/// TCP_NODELAY across a real 10 ms round trip (tests/data/rtt, the delay
/// bridge): each exchange is one round trip and under 1 ms of server time.
/// "TCP is fine, the path costs 10 ms" is said as `network_latency`; with
/// Nagle on the same path the Nagle finding stays and the path is not the story.
#[test]
fn a_path_that_is_the_exchange_time_is_network_latency() {
    let r = run("rtt/nodelay_5ms_client.pcap");
    assert_eq!(kinds(&r), ["network_latency"], "{:#?}", r.findings);
    let Finding::NetworkLatency(f) = &r.findings[0] else { unreachable!() };
    assert_eq!((f.server.as_str(), f.exchanges), ("198.18.0.2:8080", 30));
    assert!((9.8..10.8).contains(&f.rtt_ms.p50), "{f:?}");
    assert!(f.rtt_share > 0.9 && (1.0..1.1).contains(&f.round_trips_per_exchange), "{f:?}");
    assert!(f.summary.contains("the path costs the time") && f.fix[0].contains("closer"), "{f:?}");
    assert!((f.time_lost_ms - 30.0 * f.rtt_ms.p50).abs() < 10.0, "{f:?}");
    for name in ["nagle_5ms_client", "nagle_5ms_server", "nagle_40ms_client", "nagle_40ms_server"] {
        let r = run(&format!("rtt/{name}.pcap"));
        assert!(!kinds(&r).contains(&"network_latency") && nagle(&r).len() == 1, "{name}: {:#?}", r.findings);
    }
}

/// `name` with every frame cut to `snap` bytes, as `tcpdump -s SNAP` keeps it (pcap, µs).
fn cut_to(dir: &std::path::Path, name: &str, snap: usize) -> std::path::PathBuf {
    let bytes = std::fs::read(data(name)).unwrap();
    let (packets, _) = tcpdoctor::capture::all_packets(&bytes).unwrap();
    let mut out = Vec::new();
    for v in [0xa1b2_c3d4_u32, 0x0004_0002, 0, 0, snap as u32, packets[0].link.0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for p in &packets {
        let data = &p.data[..p.data.len().min(snap)];
        let (s, us) = (p.ts_ns / 1_000_000_000, p.ts_ns % 1_000_000_000 / 1000);
        for v in [s as u32, us as u32, data.len() as u32, p.orig_len] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(data);
    }
    let path = dir.join(format!("{snap}-{}", name.replace('/', "-")));
    std::fs::write(&path, out).unwrap();
    path
}

/// Cut to 68 bytes a frame (`tcpdump -s 68`), curl's heads keep 2 bytes of
/// their request line: whether they asked `Expect: 100-continue` cannot be
/// read, so no finding, and a warning says so (at 96 bytes the request line
/// is whole and the wait is inferred from the head's shape). GETs cut as
/// short warn of nothing: they have no body to wait for.
#[test]
fn a_snap_length_that_hides_the_request_line_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let says = |r: &Report| r.warnings.iter().any(|w| w.contains("cut by the capture's snap length"));
    let r = common::run_path(&cut_to(dir.path(), "rtt/expect_100.pcap", 68));
    assert!(kinds(&r).is_empty(), "{:#?}", r.findings);
    let w: Vec<&String> = r.warnings.iter().filter(|w| w.contains("snap length")).collect();
    assert_eq!(w.len(), 1, "{:?}", r.warnings);
    assert!(
        w[0].contains("5 requests were cut")
            && w[0].contains("at most 2 bytes")
            && w[0].contains("Expect: 100-continue"),
        "{}",
        w[0]
    );
    let r = common::run_path(&cut_to(dir.path(), "rtt/expect_100.pcap", 96));
    assert_eq!(kinds(&r), ["expect_100_continue"], "{:#?}", r.findings);
    assert!(!says(&r), "{:?}", r.warnings);
    let r = common::run_path(&cut_to(dir.path(), "wwr_nagle.pcap", 68));
    assert_eq!(nagle(&r).len(), 1, "{:#?}", r.findings);
    assert!(!says(&r), "{:?}", r.warnings);
}

/// The same causes across the delay bridge, 5 ms each way: curl's unanswered
/// Expect (its head cut by the snap length after the header) and 3 % loss
/// with Nagle captured at both ends.
#[test]
fn expect_and_loss_across_a_real_round_trip() {
    let r = run("rtt/expect_100.pcap");
    assert_eq!(kinds(&r), ["expect_100_continue"], "{:#?}", r.findings);
    let Finding::Expect100Continue(f) = &r.findings[0] else { unreachable!() };
    assert_eq!((f.client.host.as_str(), f.requests, f.connections), ("198.18.0.1", 5, 2));
    assert!((990.0..1100.0).contains(&f.wait_ms.p50), "{f:?}");
    assert!(r.breakdown[0].think_ms < 5.0, "{:?}", r.breakdown);
    for name in ["loss_nagle.pcap", "loss_nagle_client.pcap"] {
        let r = run(&format!("rtt/{name}"));
        let k = kinds(&r);
        assert!(k.contains(&"retransmission") && !k.contains(&"app_latency"), "{name}: {k:?}");
        assert!(nagle(&r)[0].with_loss >= 5, "{name}: {:?}", nagle(&r)[0]);
        assert!(r.breakdown[0].think_ms < 1.0, "{name}: {:?}", r.breakdown);
    }
}
