//! `probe` and `trace` against real sockets: listeners on loopback, and
//! network namespaces this test creates (a client, two routers and a server
//! joined by veth pairs; nft rules for filtered ports and silent routers).
//! Traffic goes only to loopback or to addresses inside those namespaces.
//! Most tests need root (raw sockets, namespaces); they skip without it
//! locally and fail with CI=true (see tests/common).

mod common;

use common::{Namespaces, Proc, run_bounded, sh};
use serde_json::Value;
use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tcpdoctor");

/// Runs tcpdoctor with `args` (inside namespace `ns` when given), bounded.
fn tcpdoctor(ns: Option<&str>, args: &[&str], limit: Duration) -> (i32, String, String, Duration) {
    let cmd = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, BIN]).args(args);
            c
        }
        None => {
            let mut c = Command::new(BIN);
            c.args(args);
            c
        }
    };
    let (out, took) = run_bounded(cmd, limit);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr), took)
}

fn json(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"))
}

/// Starts a TCP listener on port 80 inside `ns` (python3, bounded by its own
/// 60 s sleep) and waits until it listens.
fn listen_in(ns: &str) -> Proc {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "python3", "-c"]).arg(
        "import socket, sys, time\n\
         s = socket.socket(); s.bind(('0.0.0.0', 80)); s.listen(64)\n\
         print('ready', flush=True); time.sleep(60)",
    );
    let (p, line) = Proc::started(c);
    assert_eq!(line.trim(), "ready");
    p
}

/// A port on 127.0.0.1 (or ::1) that nothing listens on: bound, then released.
fn closed_port(addr: &str) -> u16 {
    TcpListener::bind((addr, 0)).unwrap().local_addr().unwrap().port()
}

fn probes(v: &Value) -> &Vec<Value> {
    v["probes"].as_array().expect("probes[]")
}

// ---------------------------------------------------------------- probe

#[test]
fn probe_raw_loopback_open_and_closed() {
    if !common::require_root() {
        return;
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let (code, out, err, _) = tcpdoctor(
        None,
        &["probe", "127.0.0.1", "-p", &port, "-c", "3", "-i", "0.05", "--json"],
        Duration::from_secs(10),
    );
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["schema"], tcpdoctor::record::SCHEMA_VERSION);
    assert_eq!(v["method"], "raw_syn");
    assert_eq!(v["port"].as_u64(), Some(port.parse().unwrap()));
    assert_eq!(probes(&v).len(), 3);
    for (i, p) in probes(&v).iter().enumerate() {
        assert_eq!(p["seq"].as_u64(), Some(i as u64));
        assert_eq!(p["state"], "open", "{p}");
        assert_eq!(p["flags"], "SA");
        assert_eq!(p["ttl"], 64);
        assert_eq!(p["kernel_timestamps"], true, "{p}");
        let rtt = p["rtt_ms"].as_f64().expect("rtt");
        assert!(rtt > 0.0 && rtt < 20.0, "loopback RTT {rtt} ms");
    }
    let s = &v["summary"];
    assert_eq!((s["sent"].as_u64(), s["received"].as_u64(), s["loss_pct"].as_f64()), (Some(3), Some(3), Some(0.0)));
    assert!(s["min_ms"].as_f64().unwrap() <= s["avg_ms"].as_f64().unwrap());
    assert!(s["avg_ms"].as_f64().unwrap() <= s["max_ms"].as_f64().unwrap());

    // The text form: one hping3-like line per probe and the statistics.
    let (code, out, _, _) =
        tcpdoctor(None, &["probe", "127.0.0.1", "-p", &port, "-c", "2", "-i", "50ms"], Duration::from_secs(10));
    assert_eq!(code, 0);
    assert!(out.starts_with(&format!("PROBE 127.0.0.1 (127.0.0.1) port {port}: raw TCP SYN")), "{out}");
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("state=open")).collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with(&format!("len=44 ip=127.0.0.1 ttl=64 sport={port} flags=SA seq=0 win=")), "{out}");
    assert!(out.contains("--- 127.0.0.1 tcpdoctor probe statistic ---\n2 probes sent, 2 replies, 0% loss\n"), "{out}");
    let rt = out.lines().find(|l| l.starts_with("round-trip min/avg/max = ")).expect("round-trip line");
    let nums: Vec<&str> =
        rt.trim_start_matches("round-trip min/avg/max = ").trim_end_matches(" ms").split('/').collect();
    assert_eq!(nums.len(), 3, "{rt}");
    assert!(nums.iter().all(|n| n.split('.').nth(1).is_some_and(|d| d.len() == 3)), "µs decimals: {rt}");
    assert!(out.contains("method: raw SYN + kernel timestamps"), "{out}");
    drop(l);

    let closed = closed_port("127.0.0.1").to_string();
    let (code, out, err, _) = tcpdoctor(
        None,
        &["probe", "127.0.0.1", "-p", &closed, "-c", "2", "-i", "0.05", "--json"],
        Duration::from_secs(10),
    );
    assert_eq!(code, 0, "a RST is an answer: {err}");
    let v = json(&out);
    for p in probes(&v) {
        assert_eq!(p["state"], "closed", "{p}");
        assert_eq!(p["flags"], "RA");
        assert!(p["rtt_ms"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn probe_raw_ipv6_loopback() {
    if !common::require_root() {
        return;
    }
    let l = TcpListener::bind("[::1]:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let (code, out, err, _) = tcpdoctor(
        None,
        &["probe", "::1", "-p", &port, "-c", "2", "-i", "0.05", "-6", "--json"],
        Duration::from_secs(10),
    );
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["method"], "raw_syn");
    assert_eq!(v["address"], "::1");
    for p in probes(&v) {
        assert_eq!(p["state"], "open", "{p}");
        assert_eq!(p["from"], "::1");
        assert_eq!(p["flags"], "SA");
        assert!(p["ttl"].as_u64().is_some(), "hop limit read: {p}");
        assert!(p["rtt_ms"].as_f64().unwrap() > 0.0);
    }
    drop(l);
    let closed = closed_port("::1").to_string();
    let (_, out, _, _) =
        tcpdoctor(None, &["probe", "::1", "-p", &closed, "-c", "1", "--json"], Duration::from_secs(10));
    assert_eq!(probes(&json(&out))[0]["state"], "closed");
}

#[test]
fn probe_connect_loopback_without_privileges() {
    // --unprivileged needs no root.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let args = ["probe", "127.0.0.1", "-p", &port, "-c", "3", "-i", "0.05", "--unprivileged", "--json"];
    let (code, out, err, _) = tcpdoctor(None, &args, Duration::from_secs(10));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["method"], "connect");
    assert_eq!(probes(&v).len(), 3);
    for p in probes(&v) {
        assert_eq!(p["state"], "open", "{p}");
        assert!(p["rtt_ms"].as_f64().unwrap() > 0.0);
        assert!(p["tcpi_rtt_ms"].as_f64().unwrap() > 0.0, "tcpi_rtt read: {p}");
        assert!(p["local_port"].as_u64().unwrap() > 0);
    }
    // Each connect is closed with a RST (SO_LINGER 0): nothing left in TIME_WAIT towards the port.
    let ss = Command::new("ss").args(["-tan", "state", "time-wait", "dport", "=", &format!(":{port}")]).output();
    if let Ok(ss) = ss {
        let text = String::from_utf8_lossy(&ss.stdout);
        assert!(text.lines().skip(1).all(|l| l.trim().is_empty()), "TIME_WAIT left:\n{text}");
    }
    let (code, out, _, _) =
        tcpdoctor(None, &["probe", "127.0.0.1", "-p", &port, "-c", "1", "--unprivileged"], Duration::from_secs(10));
    assert_eq!(code, 0);
    assert!(out.contains("state=open connect="), "{out}");
    assert!(out.contains("tcpi_rtt="), "{out}");
    assert!(out.contains("method: connect()"), "{out}");
    drop(l);

    let closed = closed_port("127.0.0.1").to_string();
    let args = ["probe", "127.0.0.1", "-p", &closed, "-c", "2", "-i", "0.05", "--unprivileged", "--json"];
    let (code, out, _, _) = tcpdoctor(None, &args, Duration::from_secs(10));
    assert_eq!(code, 0);
    assert!(probes(&json(&out)).iter().all(|p| p["state"] == "closed"), "{out}");
}

#[test]
fn probe_falls_back_to_connect_without_cap_net_raw() {
    if !common::require_root() || !common::require("setpriv") {
        return;
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    // Root without CAP_NET_RAW in its bounding set: raw sockets get EPERM.
    let mut c = Command::new("setpriv");
    c.args(["--bounding-set", "-net_raw", BIN, "probe", "127.0.0.1", "-p", &port, "-c", "1", "--json"]);
    let (out, _) = run_bounded(c, Duration::from_secs(10));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one note line: {stderr}");
    assert!(stderr.starts_with("tcpdoctor: note: no CAP_NET_RAW"), "{stderr}");
    let v = json(&stdout);
    assert_eq!(v["method"], "connect");
    assert_eq!(probes(&v)[0]["state"], "open");
    assert!(v["notes"][0].as_str().unwrap().contains("CAP_NET_RAW"));
}

#[test]
fn probe_filtered_port_in_a_namespace() {
    if !common::require_root() || !common::require("nft") || !common::require("ip") {
        return;
    }
    let ns = Namespaces::new(&["f"]);
    let n = ns.get(0);
    for rule in [
        "add table inet t",
        "add chain inet t in { type filter hook input priority 0; }",
        "add rule inet t in tcp dport 9 drop",
    ] {
        let mut args = vec!["ip", "netns", "exec", n, "nft"];
        args.extend(rule.split(' '));
        sh(&args);
    }
    let (count, timeout) = (3.0, 0.5);
    for extra in [None, Some("--unprivileged")] {
        let mut args = vec!["probe", "127.0.0.1", "-p", "9", "-c", "3", "-i", "0.2", "--timeout", "0.5", "--json"];
        args.extend(extra);
        let (code, out, err, took) = tcpdoctor(Some(n), &args, Duration::from_secs(10));
        assert_eq!(code, 1, "no answer at all is exit 1 ({extra:?}): {err}");
        let v = json(&out);
        assert_eq!(probes(&v).len(), 3);
        for p in probes(&v) {
            assert_eq!(p["state"], "filtered", "{p}");
            assert!(p["rtt_ms"].is_null());
        }
        assert_eq!(v["summary"]["loss_pct"].as_f64(), Some(100.0));
        assert!(v["summary"]["min_ms"].is_null());
        // Bounded: the last probe leaves at 0.4 s and waits 0.5 s.
        assert!(took.as_secs_f64() < count * timeout + 0.5, "{extra:?} took {took:?}");
        assert!(took.as_secs_f64() >= 0.4 + timeout, "{extra:?} returned early: {took:?}");
    }
    // A port the rule does not cover is still answered in the same namespace.
    let (code, out, _, _) =
        tcpdoctor(Some(n), &["probe", "127.0.0.1", "-p", "10", "-c", "1", "--json"], Duration::from_secs(10));
    assert_eq!(code, 0);
    assert_eq!(probes(&json(&out))[0]["state"], "closed");
}

// ---------------------------------------------------------------- trace

/// client (10.77.1.2) — r1 (10.77.1.1 | 10.77.2.1) — r2 (10.77.2.2 | 10.77.3.1) — server (10.77.3.2)
fn chain() -> Namespaces {
    let ns = Namespaces::new(&["c", "r1", "r2", "s"]);
    let (c, r1, r2, s) = (ns.get(0), ns.get(1), ns.get(2), ns.get(3));
    for (a, ia, b, ib) in [(c, "a0", r1, "a1"), (r1, "b0", r2, "b1"), (r2, "c0", s, "c1")] {
        sh(&["ip", "link", "add", ia, "netns", a, "type", "veth", "peer", "name", ib, "netns", b]);
    }
    for (n, dev, addr) in [
        (c, "a0", "10.77.1.2/24"),
        (r1, "a1", "10.77.1.1/24"),
        (r1, "b0", "10.77.2.1/24"),
        (r2, "b1", "10.77.2.2/24"),
        (r2, "c0", "10.77.3.1/24"),
        (s, "c1", "10.77.3.2/24"),
    ] {
        sh(&["ip", "-n", n, "addr", "add", addr, "dev", dev]);
        sh(&["ip", "-n", n, "link", "set", dev, "up"]);
    }
    sh(&["ip", "-n", c, "route", "add", "default", "via", "10.77.1.1"]);
    sh(&["ip", "-n", r1, "route", "add", "10.77.3.0/24", "via", "10.77.2.2"]);
    sh(&["ip", "-n", r2, "route", "add", "10.77.1.0/24", "via", "10.77.2.1"]);
    sh(&["ip", "-n", s, "route", "add", "default", "via", "10.77.3.1"]);
    for r in [r1, r2] {
        sh(&["ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        // Linux sends at most ~6 ICMP errors in a burst per peer, then 1/s; this test
        // traces several times in a row, so lift the limit rather than sleep.
        sh(&["ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.icmp_ratelimit=0"]);
    }
    ns
}

/// `(ttl, [reply or "none"], [from])` of each hop.
fn hops(v: &Value) -> Vec<(u64, Vec<String>, Vec<String>)> {
    v["hops"]
        .as_array()
        .expect("hops[]")
        .iter()
        .map(|h| {
            let ps = h["probes"].as_array().unwrap();
            let replies = ps.iter().map(|p| p["reply"].as_str().unwrap().to_string()).collect();
            let from = ps.iter().filter_map(|p| p["from"].as_str().map(String::from)).collect();
            (h["ttl"].as_u64().unwrap(), replies, from)
        })
        .collect()
}

fn assert_path(v: &Value, last: &str, hop2_silent: bool) {
    let h = hops(v);
    assert_eq!(h.len(), 3, "{v:#}");
    assert_eq!(h[0].0, 1);
    assert_eq!(h[0].1, ["time_exceeded"; 3], "{v:#}");
    assert_eq!(h[0].2, ["10.77.1.1"; 3]);
    if hop2_silent {
        assert_eq!(h[1].1, ["none"; 3], "{v:#}");
        assert!(h[1].2.is_empty());
    } else {
        assert_eq!(h[1].1, ["time_exceeded"; 3], "{v:#}");
        assert_eq!(h[1].2, ["10.77.2.2"; 3]);
    }
    assert_eq!(h[2].1, [last; 3], "{v:#}");
    assert_eq!(h[2].2, ["10.77.3.2"; 3]);
    assert_eq!(v["reached"], true);
    assert_eq!(v["final_state"], last);
    for hop in v["hops"].as_array().unwrap() {
        for p in hop["probes"].as_array().unwrap() {
            let answered = p["reply"] != "none";
            assert_eq!(p["rtt_ms"].is_number(), answered, "{p}");
            if answered {
                let rtt = p["rtt_ms"].as_f64().unwrap();
                assert!(rtt > 0.0 && rtt < 100.0, "{p}");
            }
        }
    }
}

#[test]
fn trace_through_two_routers() {
    for t in ["ip", "nft", "python3", "setpriv"] {
        if !common::require(t) {
            return;
        }
    }
    if !common::require_root() {
        return;
    }
    let ns = chain();
    let (c, r2, s) = (ns.get(0), ns.get(2), ns.get(3));
    let limit = Duration::from_secs(20);

    // Nothing listens on the server: the last hop answers RST.
    let (code, out, err, _) = tcpdoctor(Some(c), &["trace", "10.77.3.2", "-p", "80", "-w", "0.5", "--json"], limit);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["method"], "raw_syn");
    assert_eq!(v["schema"], tcpdoctor::record::SCHEMA_VERSION);
    assert_path(&v, "closed", false);

    // The text form, traceroute-like.
    let (code, out, _, _) = tcpdoctor(Some(c), &["trace", "10.77.3.2", "-n", "-w", "0.5"], limit);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("trace to 10.77.3.2 (10.77.3.2) port 80, 30 hops max, 3 probes per hop"), "{out}");
    assert!(lines[1].starts_with(" 1  10.77.1.1  ") && lines[1].matches(" ms").count() == 3, "{out}");
    assert!(lines[2].starts_with(" 2  10.77.2.2  "), "{out}");
    assert!(lines[3].starts_with(" 3  10.77.3.2  ") && lines[3].ends_with("  [closed]"), "{out}");
    assert_eq!(lines[4], "10.77.3.2 port 80 reached in 3 hops: closed", "{out}");

    // A listener on the server: the last hop answers SYN-ACK.
    let listener = listen_in(s);
    let (code, out, err, _) = tcpdoctor(Some(c), &["trace", "10.77.3.2", "-p", "80", "-w", "0.5", "--json"], limit);
    assert_eq!(code, 0, "{err}");
    assert_path(&json(&out), "open", false);

    // Without raw sockets: TTL-limited connect() and the error queue find the same path.
    let args = ["trace", "10.77.3.2", "-w", "0.5", "--unprivileged", "--json"];
    let (code, out, err, _) = tcpdoctor(Some(c), &args, limit);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["method"], "connect");
    assert_path(&v, "open", false);
    // …and that is what a process without CAP_NET_RAW gets, with a note.
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", c, "setpriv", "--bounding-set", "-net_raw", BIN, "trace", "10.77.3.2", "-w", "0.5"]);
    cmd.arg("--json");
    let (o, _) = run_bounded(cmd, limit);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("tcpdoctor: note: no CAP_NET_RAW"));
    assert_path(&json(&String::from_utf8_lossy(&o.stdout)), "open", false);
    drop(listener);

    // r2 stops sending time-exceeded: hop 2 is `* * *`, the trace goes on past it.
    for rule in [
        "add table inet t",
        "add chain inet t out { type filter hook output priority 0; }",
        "add rule inet t out icmp type time-exceeded drop",
    ] {
        let mut args = vec!["ip", "netns", "exec", r2, "nft"];
        args.extend(rule.split(' '));
        sh(&args);
    }
    let (code, out, err, took) = tcpdoctor(Some(c), &["trace", "10.77.3.2", "-w", "0.5", "--json"], limit);
    assert_eq!(code, 0, "{err}");
    assert_path(&json(&out), "closed", true);
    assert!(took < Duration::from_secs(3), "one silent hop costs one wait: {took:?}");
    let (_, out, _, _) = tcpdoctor(Some(c), &["trace", "10.77.3.2", "-w", "0.5"], limit);
    assert!(out.lines().any(|l| l == " 2  * * *"), "{out}");
    let (code, out, _, _) = tcpdoctor(Some(c), &["trace", "10.77.3.2", "-w", "0.5", "--unprivileged", "--json"], limit);
    assert_eq!(code, 0);
    assert_path(&json(&out), "closed", true);

    // r2 rejects the port with admin-prohibited: the trace stops there, `!X`, exit 1.
    for rule in [
        "add chain inet t forw { type filter hook forward priority 0; }",
        "add rule inet t forw tcp dport 81 reject with icmp type admin-prohibited",
    ] {
        let mut args = vec!["ip", "netns", "exec", r2, "nft"];
        args.extend(rule.split(' '));
        sh(&args);
    }
    let (code, out, _, _) = tcpdoctor(Some(c), &["trace", "10.77.3.2", "-p", "81", "-w", "0.5"], limit);
    assert_eq!(code, 1, "{out}");
    assert!(out.lines().any(|l| l.starts_with(" 3  10.77.2.2  ") && l.ends_with(" !X")), "{out}");
    assert!(out.contains("not reached: unreachable (ICMP) after 3 hops"), "{out}");
}

#[test]
fn trace_max_hops_bounds_a_silent_path() {
    if !common::require_root() || !common::require("ip") || !common::require("nft") {
        return;
    }
    // x (10.78.0.1) — y (10.78.0.2), routed to 10.78.9.0/24 via y, which drops every IP
    // packet on arrival (ARP still works): every probe vanishes.
    let ns = Namespaces::new(&["x", "y"]);
    let (n, y) = (ns.get(0), ns.get(1));
    sh(&["ip", "link", "add", "x0", "netns", n, "type", "veth", "peer", "name", "y0", "netns", y]);
    sh(&["ip", "-n", n, "addr", "add", "10.78.0.1/24", "dev", "x0"]);
    sh(&["ip", "-n", y, "addr", "add", "10.78.0.2/24", "dev", "y0"]);
    sh(&["ip", "-n", n, "link", "set", "x0", "up"]);
    sh(&["ip", "-n", y, "link", "set", "y0", "up"]);
    sh(&["ip", "-n", n, "route", "add", "10.78.9.0/24", "via", "10.78.0.2"]);
    for rule in [
        "add table inet t",
        "add chain inet t pre { type filter hook prerouting priority -300; }",
        "add rule inet t pre drop",
    ] {
        let mut args = vec!["ip", "netns", "exec", y, "nft"];
        args.extend(rule.split(' '));
        sh(&args);
    }
    let (code, out, err, took) = tcpdoctor(
        Some(n),
        &["trace", "10.78.9.9", "-m", "3", "-q", "2", "-w", "0.3", "--json"],
        Duration::from_secs(10),
    );
    assert_eq!(code, 1, "{err}");
    let v = json(&out);
    assert_eq!(v["reached"], false);
    let h = hops(&v);
    assert_eq!(h.len(), 3);
    assert!(h.iter().all(|(_, r, _)| r == &["none"; 2]), "{v:#}");
    assert!(took < Duration::from_secs_f64(3.0 * 0.3 + 1.0), "{took:?}");

    // No route at all: nothing to measure, one line, exit 5, raw or not.
    for verb in [
        &["probe", "10.79.0.9", "-p", "80"][..],
        &["trace", "10.79.0.9"],
        &["probe", "10.79.0.9", "-p", "80", "--unprivileged"],
    ] {
        let (code, out, err, _) = tcpdoctor(Some(n), verb, Duration::from_secs(10));
        assert_eq!(code, 5, "{verb:?}: {out}{err}");
        assert!(
            err.starts_with("tcpdoctor: no route to 10.79.0.9 (") && err.contains("ip route get 10.79.0.9"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn trace_loopback_v4_and_v6() {
    if !common::require_root() {
        return;
    }
    let closed = closed_port("127.0.0.1").to_string();
    let (code, out, err, _) =
        tcpdoctor(None, &["trace", "127.0.0.1", "-p", &closed, "--json"], Duration::from_secs(10));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(hops(&v), vec![(1, vec!["closed".to_string(); 3], vec!["127.0.0.1".to_string(); 3])]);
    let l = TcpListener::bind("[::1]:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    for extra in [None, Some("--unprivileged")] {
        let mut args = vec!["trace", "::1", "-p", &port, "--json"];
        args.extend(extra);
        let (code, out, err, _) = tcpdoctor(None, &args, Duration::from_secs(10));
        assert_eq!(code, 0, "{err}");
        let v = json(&out);
        assert_eq!(hops(&v), vec![(1, vec!["open".to_string(); 3], vec!["::1".to_string(); 3])], "{extra:?}");
        assert_eq!(v["final_state"], "open");
    }
}

#[test]
fn bad_arguments_are_usage_errors() {
    for args in [
        &["probe", "127.0.0.1"][..],
        &["probe", "127.0.0.1", "-p", "0"],
        &["probe", "127.0.0.1", "-p", "80", "-i", "fast"],
        &["probe", "127.0.0.1", "-p", "80", "--timeout", "0"],
        &["probe", "127.0.0.1", "-p", "80", "-c", "0"],
        &["probe", "127.0.0.1", "-p", "80", "-4", "-6"],
        &["trace", "127.0.0.1", "--max-hops", "0"],
        &["trace", "127.0.0.1", "-q", "0"],
        &["trace", "127.0.0.1", "-w", "-1"],
    ] {
        let (code, _, err, _) = tcpdoctor(None, args, Duration::from_secs(10));
        assert_eq!(code, 2, "{args:?}: {err}");
    }
    let (code, _, err, _) =
        tcpdoctor(None, &["probe", "no-such-host.invalid", "-p", "80", "--unprivileged"], Duration::from_secs(30));
    assert_eq!(code, 3, "{err}");
    assert!(err.starts_with("tcpdoctor: no-such-host.invalid: cannot resolve"), "{err}");
    assert_eq!(err.lines().count(), 1);
    let (code, _, err, _) = tcpdoctor(None, &["trace", "127.0.0.1", "-6"], Duration::from_secs(10));
    assert_eq!(code, 3, "{err}");
}
