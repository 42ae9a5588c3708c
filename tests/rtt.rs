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
//! - `lab --rtt 8ms --nginx`: the URLs it prints (nginx's too) answer through
//!   the bridge with the round trip, its namespace is removed on SIGTERM and on the next start
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

/// Held by every test that measures time or loads the machine: a test that
/// keeps both cores busy must not run beside one that reads ping's average.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

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
    let _alone = alone();
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
    let _alone = alone();
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
    // Both directions lose frames; together (some 4000 frames) about 3 % of them.
    assert!(up.dropped > 0 && down.dropped > 0, "{up:?} {down:?}");
    let both = Stats { frames: up.frames + down.frames, dropped: up.dropped + down.dropped, ..up };
    assert!(both.frames > 2500, "{both:?}");
    assert!((0.02..0.04).contains(&rate(&both)), "{both:?}");
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
    let _alone = alone();
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
    if !require_root() || !require("nginx") {
        return;
    }
    let _alone = alone();
    let (p, servers) = lab_rtt(&["8ms", "--nginx"]);
    let pid = p.0.id();
    let ns = format!("tcpdoctor-lab-{pid}");
    assert!(lab_namespaces().contains(&ns), "{:?}", lab_namespaces());
    for name in ["nagle", "nodelay", "think", "nginx-nodelay-off", "nginx-nodelay-on"] {
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

/// A TCP segment of a fixture capture, decoded without the detectors.
struct Seg {
    ts_ms: f64,
    src: String,
    dst: String,
    seq: u32,
    ack: u32,
    syn: bool,
    fin: bool,
    ack_flag: bool,
    len: u32,
    payload: Vec<u8>,
}

fn segments(name: &str) -> Vec<Seg> {
    let cap = tcpdoctor::capture::Capture::open(&data(&format!("rtt/{name}"))).expect("opens");
    let mut packets = cap.packets().expect("a capture");
    let mut out = Vec::new();
    while let Some(p) = packets.next() {
        let s = tcpdoctor::wire::decode(p.frame, p.ts_ns, p.link, p.data, p.orig_len).expect("decodes").expect("TCP");
        out.push(Seg {
            ts_ms: s.ts_ns as f64 / 1e6,
            src: format!("{}:{}", s.src.ip, s.src.port),
            dst: format!("{}:{}", s.dst.ip, s.dst.port),
            seq: s.seq,
            ack: s.ack,
            syn: s.flags.syn(),
            fin: s.flags.fin(),
            ack_flag: s.flags.ack(),
            len: s.len,
            payload: s.payload.to_vec(),
        });
    }
    assert!(packets.damage().is_none(), "{name}: damaged");
    out
}

/// (SYN → SYN-ACK, SYN-ACK → ACK) of the first handshake, ms.
fn handshake(segs: &[Seg]) -> (f64, f64) {
    let syn = segs.iter().position(|s| s.syn && !s.ack_flag).expect("a SYN");
    let synack = segs.iter().position(|s| s.syn && s.ack_flag).expect("a SYN-ACK");
    let ack = segs[synack..].iter().find(|s| !s.syn && s.src == segs[syn].src).expect("the handshake's ACK");
    (segs[synack].ts_ms - segs[syn].ts_ms, ack.ts_ms - segs[synack].ts_ms)
}

#[test]
fn the_fixture_captures_hold_what_truth_md_says() {
    let names: Vec<String> = std::fs::read_dir(data("rtt"))
        .unwrap()
        .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.ends_with(".pcap"))
        .collect();
    assert_eq!(names.len(), 12, "{names:?}");
    for n in &names {
        let segs = segments(n);
        assert!(segs.len() > 50, "{n}");
        // Wire-sized: no offload super-segment reached the captures.
        assert!(segs.iter().all(|s| s.len <= 1448), "{n}");
        assert!(std::fs::metadata(data(&format!("rtt/{n}"))).unwrap().len() < 300_000, "{n}");
    }
    // The round trip is the bridge's: SYN to SYN-ACK at the client, SYN-ACK to ACK at the server.
    let near =
        |got: f64, want: f64, what: &str| assert!((got - want).abs() <= 1.0, "{what}: {got} ms, want {want} ± 1");
    for (n, rtt) in [("nagle_5ms_client", 10.0), ("nagle_40ms_client", 80.0), ("nodelay_5ms_client", 10.0)] {
        near(handshake(&segments(&format!("{n}.pcap"))).0, rtt, n);
    }
    for (n, rtt) in [("nagle_5ms_server", 10.0), ("nagle_40ms_server", 80.0), ("tls_two_records", 10.0)] {
        near(handshake(&segments(&format!("{n}.pcap"))).1, rtt, n);
    }
    // Both ends of one run: the same packets, the server's SYN one one-way delay after the client's.
    for (n, one_way) in [("nagle_5ms", 5.0), ("nagle_40ms", 40.0), ("loss_nagle", 5.0)] {
        let client_file = if n == "loss_nagle" { "loss_nagle_client.pcap".into() } else { format!("{n}_client.pcap") };
        let server_file = if n == "loss_nagle" { "loss_nagle.pcap".into() } else { format!("{n}_server.pcap") };
        let (c, s) = (segments(&client_file), segments(&server_file));
        near(s[0].ts_ms - c[0].ts_ms, one_way, n);
        assert_eq!((c[0].src.as_str(), c[0].dst.as_str()), (s[0].src.as_str(), s[0].dst.as_str()));
    }
    // Mid-stream at a high server port: no handshake, no close, four clients inside 20000-30000.
    let m = segments("midstream_high_port.pcap");
    assert!(m.iter().all(|s| !s.syn && !s.fin));
    let mut clients: Vec<u16> = m
        .iter()
        .filter(|s| s.dst == "198.18.0.2:61000")
        .map(|s| s.src.rsplit(':').next().unwrap().parse().unwrap())
        .collect();
    clients.sort();
    clients.dedup();
    assert_eq!(clients.len(), 4, "{clients:?}");
    assert!(clients.iter().all(|p| (20000..=30000).contains(p)), "{clients:?}");
    assert!(m.iter().all(|s| s.src == "198.18.0.2:61000" || s.dst == "198.18.0.2:61000"));
    // Loss: the log names every frame the bridge dropped; each was captured at its sender and never at its receiver.
    let log = std::fs::read_to_string(data("rtt/bridge.log")).unwrap();
    let line = log.lines().find_map(|l| l.strip_prefix("loss_nagle ")).expect("loss_nagle's counters");
    let counters: serde_json::Value = serde_json::from_str(line).unwrap();
    let dropped = counters["client_to_server"]["dropped"].as_u64().unwrap()
        + counters["server_to_client"]["dropped"].as_u64().unwrap();
    let drops = std::fs::read_to_string(data("rtt/loss_nagle.drops")).unwrap();
    assert_eq!(drops.lines().count() as u64, dropped);
    assert!(dropped >= 20, "{dropped}");
    let (at_client, at_server) = (segments("loss_nagle_client.pcap"), segments("loss_nagle.pcap"));
    let mut lost: std::collections::HashMap<(String, u32, u32, u32), usize> = Default::default();
    for d in drops.lines() {
        let w: Vec<&str> = d.split_whitespace().collect();
        let field = |k: &str| w[w.iter().position(|x| *x == k).unwrap() + 1].parse::<u64>().unwrap();
        *lost
            .entry((w[1].to_string() + " " + w[2], field("seq") as u32, field("ack") as u32, field("len") as u32))
            .or_default() += 1;
    }
    // A segment sent n times and dropped k times was captured n times at its sender, n - k at its receiver.
    for ((way, seq, ack, len), k) in lost {
        let (dir, src) = way.split_once(' ').unwrap();
        let count =
            |segs: &[Seg]| segs.iter().filter(|s| (s.seq, s.ack, s.len) == (seq, ack, len) && s.src == src).count();
        let (sender, receiver) =
            if dir == "client->server" { (&at_client, &at_server) } else { (&at_server, &at_client) };
        assert!(count(sender) >= k, "{way} seq {seq}: captured {} times at its sender", count(sender));
        assert_eq!(count(sender) - count(receiver), k, "{way} seq {seq} ack {ack} len {len}");
    }
    // Expect: 100-continue: five POSTs, each body sent about 1 s after its headers.
    let e = segments("expect_100.pcap");
    let posts: Vec<usize> = (0..e.len()).filter(|&i| e[i].payload.starts_with(b"POST ")).collect();
    assert_eq!(posts.len(), 5);
    for &i in &posts {
        let text = String::from_utf8_lossy(&e[i].payload).to_ascii_lowercase();
        assert!(text.contains("expect: 100-continue"), "{text}");
        let body = e[i + 1..].iter().find(|s| s.src == e[i].src && s.len > 0).expect("a body");
        let wait = body.ts_ms - e[i].ts_ms;
        assert!((950.0..1100.0).contains(&wait), "body {wait} ms after the headers");
        assert!(e[i..].iter().take_while(|s| s.ts_ms < body.ts_ms).all(|s| !s.payload.starts_with(b"HTTP/1.1 100")));
    }
}
