//! The seed article's commands typed as written: `probe -S`, `trace -T` and
//! `--tcp`, `capture -n`/`-nn` without `-i` (the interface chosen as tcpdump
//! would) writing pcapng that tshark reads, and ab's habits in `bench`
//! (`-n`, `-k`, connect counted in each request's time, "Connection Times").
//! Real servers on loopback, in network namespaces this test creates, or
//! behind `lab --rtt`'s delay bridge. Root and tools: skipped locally
//! without them, failed with CI=true.

mod common;

use common::{Namespaces, Proc, lab, require, require_root, run_bounded, sh, tcpdoctor, url_of};
use serde_json::Value;
use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

/// `tcpdoctor ARGS` (in namespace `ns` when given): exit code, stdout, stderr.
fn run(ns: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut c = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_tcpdoctor")]);
            c
        }
        None => tcpdoctor(),
    };
    c.args(args);
    let (out, _) = run_bounded(c, Duration::from_secs(60));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[test]
fn probe_dash_s_and_trace_dash_t_are_accepted() {
    if !require_root() {
        return;
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let (code, out, err) = run(None, &["probe", "127.0.0.1", "-S", "-p", &port, "-c", "2", "-i", "0.1", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"]["received"], 2, "{v}");
    assert_eq!(v["probes"][0]["state"], "open");
    for flag in ["-T", "--tcp"] {
        let (code, out, err) = run(None, &["trace", flag, "-n", "127.0.0.1", "-p", &port, "-q", "1", "--json"]);
        assert_eq!(code, 0, "trace {flag}: {err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!((v["reached"].as_bool(), v["final_state"].as_str()), (Some(true), Some("open")), "{v}");
    }
}

/// The first line on stderr: which interface capture chose, and why.
fn chosen(err: &str) -> &str {
    err.lines().next().unwrap_or("")
}

#[test]
fn capture_without_dash_i_picks_the_route_and_writes_pcapng() {
    if !require_root() || !require("ip") || !require("tshark") || !require("capinfos") {
        return;
    }
    let ns = Namespaces::new(&["sa", "sb"]);
    let (a, b) = (ns.get(0), ns.get(1));
    // A down interface first (lower index), then the veth pair that is up.
    sh(&["ip", "-n", a, "link", "add", "sdown", "type", "veth", "peer", "name", "sdown2"]);
    sh(&["ip", "link", "add", "sva", "netns", a, "type", "veth", "peer", "name", "svb", "netns", b]);
    for (n, dev, addr) in [(a, "sva", "10.81.0.1/24"), (b, "svb", "10.81.0.2/24")] {
        sh(&["ip", "-n", n, "addr", "add", addr, "dev", dev]);
        sh(&["ip", "-n", n, "link", "set", dev, "up"]);
    }
    let mut server = Command::new("ip");
    server.args(["netns", "exec", b, "python3"]).arg(common::data("lab/wwr_server.py"));
    server.args(["--host", "10.81.0.2", "--port", "8080", "--mode", "wwr", "--max-seconds", "60"]);
    let (_server, line) = Proc::started(server);
    assert!(line.starts_with("listening"), "{line}");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seed.pcapng").display().to_string();
    let args = ["capture", "-nn", "host", "10.81.0.2", "and", "port", "8080", "-w", &path, "--duration", "3s"];
    let mut cap = Command::new("ip");
    cap.args(["netns", "exec", a, env!("CARGO_BIN_EXE_tcpdoctor")]).args(args);
    let capture = std::thread::spawn(move || run_bounded(cap, Duration::from_secs(20)).0);
    std::thread::sleep(Duration::from_millis(800));
    let (code, _, err) = run(Some(a), &["bench", "-n", "20", "-c", "1", "http://10.81.0.2:8080/"]);
    assert_eq!(code, 0, "{err}");
    let out = capture.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(chosen(&err), "tcpdoctor: no -i given: capturing on sva (the route to 10.81.0.2)", "{err}");
    let n: u64 = err.lines().last().unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(n >= 20 * 7, "20 requests on new connections are at least 7 packets each: {err}");

    // pcapng, nanosecond resolution, every packet readable by tshark.
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..4], &[0x0a, 0x0d, 0x0d, 0x0a], "a pcapng section header first");
    let info = Command::new("capinfos").args(["-t", "-i", "-c", "-M", &path]).output().unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("pcapng"), "{info}");
    assert!(
        info.contains(&format!("Number of packets:   {n}")) || info.contains(&format!("Number of packets: {n}")),
        "{info}"
    );
    let t = Command::new("tshark")
        .args(["-r", &path, "-T", "fields", "-e", "frame.time_epoch", "-e", "tcp.srcport"])
        .output()
        .unwrap();
    let complaints = String::from_utf8_lossy(&t.stderr);
    // tshark run as root says so on stderr; anything else is a complaint about the file.
    assert!(t.status.success() && complaints.lines().all(|l| l.starts_with("Running as user")), "{complaints}");
    let rows: Vec<String> = String::from_utf8_lossy(&t.stdout).lines().map(str::to_string).collect();
    assert_eq!(rows.len() as u64, n);
    // Nanoseconds survive: at least one stamp has a non-zero digit past the microseconds.
    assert!(
        rows.iter().any(|r| r
            .split('\t')
            .next()
            .unwrap()
            .split('.')
            .nth(1)
            .is_some_and(|f| f.len() == 9 && !f.ends_with("000"))),
        "{rows:?}"
    );
    let (code, out, err) = run(None, &["analyze", &path, "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["inputs"][0]["format"], "pcapng");

    // A filter host of this host goes through loopback; no filter: the first interface up, not loopback.
    let (code, _, err) = run(Some(a), &["capture", "-n", "host", "10.81.0.1", "-w", &path, "--duration", "0.2s"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(chosen(&err), "tcpdoctor: no -i given: capturing on lo (the route to 10.81.0.1)");
    let (code, _, err) = run(Some(a), &["capture", "-w", &path, "--duration", "0.2s"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(chosen(&err), "tcpdoctor: no -i given: capturing on sva (the first interface up, not loopback)");
    // No route at all to the filter's host: one line, exit 3.
    let (code, _, err) = run(Some(a), &["capture", "host", "192.0.2.1", "-w", &path, "--duration", "0.2s"]);
    assert_eq!(code, 3, "{err}");
    assert_eq!(err.trim(), "tcpdoctor: no route to 192.0.2.1 here to choose an interface by; name one with -i");
}

/// `bench ARGS --json URL` run here: the report.
fn bench(args: &[&str], url: &str) -> Value {
    let mut all = vec!["bench", "--json"];
    all.extend_from_slice(args);
    all.push(url);
    let (code, out, err) = run(None, &all);
    assert_eq!(code, 0, "{all:?}: {err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn bench_n_counts_connect_as_ab_and_k_keeps_alive() {
    if !require_root() {
        return;
    }
    // 20 ms round trip: a request on a new connection takes two (SYN, then the request).
    let (_lab, servers) = lab(&["--rtt", "20ms"]);
    let url = url_of(&servers, "nodelay");
    let fresh = bench(&["-n", "12", "-c", "2", "-t", "1"], url);
    assert_eq!(fresh["requests"], 12, "exactly -n requests: {fresh}");
    assert_eq!(fresh["connect"]["count"], 12, "a new connection for each: {fresh}");
    assert_eq!(fresh["options"]["requests"], 12);
    assert_eq!(fresh["options"]["keepalive"], false);
    let p50 = fresh["latency"]["p50"].as_f64().unwrap();
    assert!((39.0..60.0).contains(&p50), "connect + request = two round trips: {p50} ms");
    let t = &fresh["connection_times"];
    let connect = t["connect"]["median_ms"].as_f64().unwrap();
    assert!((19.0..30.0).contains(&connect), "{t}");
    assert!((t["total"]["median_ms"].as_f64().unwrap() - p50).abs() < 1.0, "Total is the latency: {t}");

    let kept = bench(&["-n", "12", "-c", "2", "-t", "1", "-k"], url);
    assert_eq!(kept["requests"], 12, "{kept}");
    assert_eq!(kept["connect"]["count"], 2, "-k: one connection each: {kept}");
    assert_eq!(kept["options"]["keepalive"], true);
    let p50 = kept["latency"]["p50"].as_f64().unwrap();
    assert!((19.0..30.0).contains(&p50), "reused connections: one round trip: {p50} ms");
    // The first request of each connection still counts its connect (ab does too).
    let max = kept["latency"]["max"].as_f64().unwrap();
    assert!(max >= 39.0, "{kept}");
    assert_eq!(kept["connection_times"]["connect"]["median_ms"], 0.0);

    // The text: ab's block with --latency.
    let (code, out, err) = run(None, &["bench", "-n", "4", "-c", "1", "--latency", url]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(&format!("Running 4 requests @ {url}\n")), "{out}");
    let block: Vec<&str> = out.lines().skip_while(|l| *l != "Connection Times (ms)").take(6).collect();
    assert_eq!(block.len(), 6, "{out}");
    assert!(block[1].contains("min") && block[1].contains("mean[+/-sd]") && block[1].contains("median"));
    for (line, name) in block[2..].iter().zip(["Connect:", "Processing:", "Waiting:", "Total:"]) {
        let n: Vec<f64> = line.split_whitespace().skip(1).map(|w| w.parse().unwrap()).collect();
        assert!(line.starts_with(name) && n.len() == 5, "{line}");
        assert!(n[0] <= n[3] && n[3] <= n[4], "min <= median <= max: {line}");
    }
    // -n 0 and -k with --cacert: one line, exit 2.
    let (code, _, err) = run(None, &["bench", "-n", "0", url]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(None, &["bench", "-k", "--cacert", "/etc/hostname", url]);
    assert_eq!((code, err.lines().count()), (2, 1), "{err}");
}
