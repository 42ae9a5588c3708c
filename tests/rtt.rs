//! The delay bridge (`tcpdoctor::lab::link`) checked before anything is
//! trusted to it, and `lab --rtt` end to end (root):
//! - ping across 5 ms each way takes 10 ms ± 1 ms, across 40 ms 80 ms ± 1 ms,
//!   and only the pings cross (no ARP, no IPv6 chatter); the namespaces and
//!   TAPs are gone after the link is dropped;
//! - 20 MB over TCP between the namespaces: no retransmission without loss;
//!   with 3 % loss, about 3 % of IP frames dropped and the sender retransmits;
//! - how late releases are, at SCHED_FIFO and without, while two threads keep
//!   both cores busy (printed for bench/RESULTS.md; bounded at SCHED_FIFO;
//!   the bulk transfer prints its own, where frames wait behind each other);
//! - `lab --rtt 8ms`: the URLs it prints answer through the bridge with the
//!   round trip, its namespace is removed on SIGTERM and on the next start
//!   after SIGKILL; without root it exits 5 with one line.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tcpdoctor::lab::bridge::{Shape, Stats};
use tcpdoctor::lab::link::Link;

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A fresh pair of namespaces joined by the bridge, stopping by itself within 2 minutes.
fn pair(shape: Shape) -> Link {
    let name = format!("tdrtt{}x{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let deadline = Some(Instant::now() + Duration::from_secs(120));
    Link::pair(&name, Ipv4Addr::new(198, 18, 0, 0), shape, deadline).expect("a link")
}

/// `ping` from end 0 to end 1: (average ms, received).
fn ping(link: &Link, count: u32, interval: &str) -> (f64, u32) {
    let mut c = link.namespace(0).unwrap().command("ping").unwrap();
    c.args(["-q", "-n", "-c", &count.to_string(), "-i", interval, &link.end(1).addr.to_string()]);
    let (out, _) = run_bounded(c, Duration::from_secs(60));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let received = text.split(", ").find_map(|p| p.strip_suffix(" received")?.parse().ok()).unwrap_or(0);
    // rtt min/avg/max/mdev = 10.210/10.259/10.481/0.061 ms
    let avg = text.lines().find_map(|l| l.split(" = ").nth(1)?.split('/').nth(1)?.parse().ok());
    (avg.unwrap_or_else(|| panic!("no average in {text}")), received)
}

/// The `Tcp: RetransSegs` counter of end `i`'s namespace.
fn retrans_segs(link: &Link, i: usize) -> u64 {
    let snmp = link.namespace(i).unwrap().run(|| std::fs::read_to_string("/proc/thread-self/net/snmp")).unwrap();
    let snmp = snmp.unwrap();
    let tcp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Tcp:")).collect();
    let at = tcp[0].split_whitespace().position(|w| w == "RetransSegs").unwrap();
    tcp[1].split_whitespace().nth(at).unwrap().parse().unwrap()
}

/// Sends `bytes` over TCP from end 0 to end 1; returns how long it took.
fn bulk(link: &Link, bytes: usize) -> Duration {
    let server = link.namespace(1).unwrap();
    let listener = server.run(|| TcpListener::bind((link.end(1).addr, 0))).unwrap().unwrap();
    let addr = listener.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut got = 0;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match c.read(&mut buf).unwrap() {
                0 => break,
                n => got += n,
            }
        }
        c.write_all(b"k").unwrap();
        got
    });
    let client = link.namespace(0).unwrap();
    let mut s = client.run(|| TcpStream::connect_timeout(&addr, Duration::from_secs(5))).unwrap().unwrap();
    s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let t = Instant::now();
    let chunk = vec![b'x'; 1 << 16];
    let mut sent = 0;
    while sent < bytes {
        let n = chunk.len().min(bytes - sent);
        s.write_all(&chunk[..n]).unwrap();
        sent += n;
    }
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut k = [0u8; 1];
    s.read_exact(&mut k).unwrap();
    let took = t.elapsed();
    assert_eq!(reader.join().unwrap(), bytes);
    took
}

#[test]
fn ping_takes_twice_the_one_way_delay_and_nothing_else_crosses() {
    if !require_root() || !require("ping") {
        return;
    }
    for (one_way, count, interval) in [(5, 20, "0.05"), (40, 10, "0.1")] {
        let link = pair(Shape::delay(Duration::from_millis(one_way)));
        link.realtime().expect("SCHED_FIFO as root");
        let (avg, received) = ping(&link, count, interval);
        let want = 2.0 * one_way as f64;
        eprintln!("one way {one_way} ms: ping average {avg:.3} ms; {:?}", link.stats());
        assert_eq!(received, count);
        assert!((avg - want).abs() <= 1.0, "ping average {avg} ms, expected {want} ± 1 ms");
        // Exactly the echo requests and replies: no ARP, ND or router solicitation crossed.
        let [up, down] = link.stats();
        assert_eq!((up.frames, down.frames), (count as u64, count as u64), "{:?}", link.stats());
        let names: Vec<String> = (0..2).map(|i| link.end(i).namespace.clone().unwrap()).collect();
        drop(link);
        for n in names {
            assert!(!std::path::Path::new("/run/netns").join(&n).exists(), "{n} left behind");
        }
    }
}

#[test]
fn twenty_megabytes_cross_without_retransmission_and_loss_drops_its_share() {
    if !require_root() {
        return;
    }
    let link = pair(Shape::delay(Duration::from_millis(5)));
    let before = retrans_segs(&link, 0);
    let took = bulk(&link, 20 << 20);
    let retrans = retrans_segs(&link, 0) - before;
    let [up, down] = link.stats();
    eprintln!("20 MB across 5 ms each way in {took:?}: {retrans} retransmitted; {up:?} {down:?}");
    assert_eq!(retrans, 0, "segments retransmitted without loss");
    assert_eq!(up.dropped + up.overflow + down.dropped + down.overflow, 0);
    assert!(up.bytes > 20 << 20);
    // The largest frame is wire-sized: no offload super-segments reach the bridge.
    assert!(up.bytes / up.frames <= 1514);
    drop(link);

    let shape = Shape { loss: 0.03, seed: 7, ..Shape::delay(Duration::from_millis(1)) };
    let link = pair(shape);
    let before = retrans_segs(&link, 0);
    bulk(&link, 4 << 20);
    let retrans = retrans_segs(&link, 0) - before;
    let [up, down] = link.stats();
    let rate = |s: &Stats| s.dropped as f64 / (s.dropped + s.frames) as f64;
    eprintln!(
        "3 % loss: dropped {:.2} % / {:.2} %, {retrans} retransmitted; {up:?} {down:?}",
        rate(&up) * 1e2,
        rate(&down) * 1e2
    );
    for s in [&up, &down] {
        assert!(s.frames > 1000, "{s:?}");
        assert!((0.02..0.04).contains(&rate(s)), "{s:?}");
    }
    // Every lost data segment was sent again (and perhaps a few that were not lost).
    let data_dropped = link.dropped().iter().filter(|d| d.direction == 0 && d.len > 100).count() as u64;
    assert!(data_dropped > 0 && retrans >= data_dropped, "{data_dropped} data frames dropped, {retrans} retransmitted");
    assert_eq!(link.dropped().len() as u64, up.dropped + down.dropped);
}

#[test]
fn releases_are_on_time_at_real_time_priority_on_a_busy_machine() {
    if !require_root() || !require("ping") {
        return;
    }
    let mut lines = Vec::new();
    for realtime in [true, false] {
        let busy = AtomicBool::new(true);
        let result = std::thread::scope(|s| {
            // Two spinning threads, bounded in time: both cores busy.
            for _ in 0..2 {
                s.spawn(|| {
                    let until = Instant::now() + Duration::from_secs(30);
                    while busy.load(Ordering::Relaxed) && Instant::now() < until {
                        std::hint::spin_loop();
                    }
                });
            }
            let link = pair(Shape { realtime, ..Shape::delay(Duration::from_millis(5)) });
            if realtime {
                link.realtime().expect("SCHED_FIFO as root");
            }
            let (avg, _) = ping(&link, 100, "0.02");
            busy.store(false, Ordering::Relaxed);
            (avg, link.stats())
        });
        let (avg, [up, down]) = result;
        let mean = (up.late_mean_us * up.frames as f64 + down.late_mean_us * down.frames as f64)
            / (up.frames + down.frames) as f64;
        let max = up.late_max_us.max(down.late_max_us);
        let line = format!(
            "{}: releases late by {mean:.0} µs on average, {max:.0} µs at most ({} frames); ping {avg:.2} ms",
            if realtime { "SCHED_FIFO" } else { "normal priority" },
            up.frames + down.frames
        );
        eprintln!("{line}");
        lines.push((realtime, mean, max, avg));
    }
    let (_, mean, max, avg) = lines[0];
    assert!(mean < 300.0 && max < 5_000.0, "at SCHED_FIFO: mean {mean} µs, max {max} µs");
    assert!((avg - 10.0).abs() <= 1.0, "ping {avg} ms at SCHED_FIFO with both cores busy");
}

/// `tcpdoctor lab --rtt ARGS…` as JSON: the process and its servers.
fn lab_rtt(args: &[&str]) -> (Proc, Vec<(String, String)>) {
    let mut all = vec!["--rtt"];
    all.extend_from_slice(args);
    lab(&all)
}

/// The lab's namespaces left in /run/netns.
fn lab_namespaces() -> Vec<String> {
    let Ok(d) = std::fs::read_dir("/run/netns") else { return Vec::new() };
    d.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("tcpdoctor-lab-"))
        .collect()
}

/// One GET on a fresh connection: (status line, time to the whole response).
fn get(url: &str) -> (String, Duration) {
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let t = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    (out.lines().next().unwrap_or("").to_string(), t.elapsed())
}

#[test]
fn lab_rtt_serves_through_the_bridge_and_cleans_up() {
    if !require_root() {
        return;
    }
    let (p, servers) = lab_rtt(&["8ms"]);
    let pid = p.0.id();
    let ns = format!("tcpdoctor-lab-{pid}");
    assert!(lab_namespaces().contains(&ns), "{:?}", lab_namespaces());
    for name in ["nagle", "nodelay", "think"] {
        let url = url_of(&servers, name);
        assert!(url.starts_with("http://198.1"), "{url}");
        // A fresh connection: handshake and request, two round trips of 8 ms.
        let (status, took) = get(url);
        assert_eq!(status, "HTTP/1.1 200 OK", "{name}");
        assert!(took >= Duration::from_millis(16), "{name}: {took:?} is less than two round trips");
    }
    // SIGTERM: the namespace goes with the process.
    drop(p);
    assert!(!lab_namespaces().contains(&ns), "{ns} left after SIGTERM");

    // SIGKILL leaves the namespace; the next start removes it and says so.
    let (mut p, _) = lab_rtt(&["8ms"]);
    let killed = format!("tcpdoctor-lab-{}", p.0.id());
    p.0.kill().unwrap();
    p.0.wait().unwrap();
    assert!(lab_namespaces().contains(&killed));
    let mut c = tcpdoctor();
    c.args(["lab", "--rtt", "8ms", "-d", "1s"]);
    let (out, _) = run_bounded(c, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&killed) && err.contains("removed"), "{err}");
    assert!(!lab_namespaces().contains(&killed));
}

#[test]
fn lab_rtt_needs_root_and_a_sane_delay() {
    if !require_root() || !require("setpriv") {
        return;
    }
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(env!("CARGO_BIN_EXE_tcpdoctor"));
    c.args(["lab", "--rtt", "8ms", "-d", "1s"]);
    let (out, _) = run_bounded(c, Duration::from_secs(20));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("root"), "{err}");
    for bad in ["0ms", "-1ms", "abc", "11m"] {
        let mut c = tcpdoctor();
        c.args(["lab", "--rtt", bad, "-d", "1s"]);
        let (out, _) = run_bounded(c, Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(2), "--rtt {bad}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut c = tcpdoctor();
    c.args(["lab", "--loss", "3", "-d", "1s"]);
    let (out, _) = run_bounded(c, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2), "--loss without --rtt");
}
