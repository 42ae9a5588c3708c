//! `tcpdoctor capture` on real traffic: the lab's write-write-read server on
//! loopback (compared with tcpdump and read back with tshark), and a veth
//! pair with a VLAN between two network namespaces this test creates.
//! Traffic goes only to loopback or inside those namespaces. Capturing
//! needs root; those tests skip without it locally and fail with CI=true.

mod common;

use common::{Namespaces, Proc, run_bounded, sh};
use serde_json::Value;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tcpdoctor::capture::{Capture, LinkType};
use tcpdoctor::wire;

const BIN: &str = env!("CARGO_BIN_EXE_tcpdoctor");

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A scratch directory for this test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("tcpdoctor-capture-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
    fn file(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A command for `program`, run inside namespace `ns` when given.
fn command(ns: Option<&str>, program: &str) -> Command {
    match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, program]);
            c
        }
        None => Command::new(program),
    }
}

/// The lab's write-write-read HTTP server (Nagle on), `ns` or here; killed on drop.
fn wwr_server(ns: Option<&str>, host: &str, port: u16, mode: &str) -> Proc {
    let mut c = command(ns, "python3");
    c.arg(common::data("lab/wwr_server.py"));
    c.args(["--host", host, "--port", &port.to_string(), "--mode", mode, "--max-seconds", "60"]);
    let (p, line) = Proc::started(c);
    assert!(line.starts_with("listening"), "{line}");
    p
}

/// Runs `tcpdoctor ARGS` (in `ns` when given) on another thread, bounded.
fn spawn_tcpdoctor(ns: Option<&str>, args: &[&str], limit: Duration) -> JoinHandle<(Output, Duration)> {
    let mut c = command(ns, BIN);
    c.args(args);
    std::thread::spawn(move || run_bounded(c, limit))
}

fn tcpdoctor(ns: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let (out, _) = spawn_tcpdoctor(ns, args, Duration::from_secs(20)).join().expect("bounded run");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// Waits until a capture has written its pcap header: it is capturing. The
/// header is in `.NAME.XXXXXX.tmp` beside `path` until the capture ends.
fn wait_capturing(path: &str) {
    let until = Instant::now() + Duration::from_secs(10);
    let p = std::path::Path::new(path);
    let (dir, name) = (p.parent().unwrap(), p.file_name().unwrap().to_str().unwrap());
    let header_written = || {
        std::fs::read_dir(dir).unwrap().flatten().any(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(&format!(".{name}.")) && n.ends_with(".tmp") && e.metadata().is_ok_and(|m| m.len() >= 24)
        })
    };
    while !header_written() {
        assert!(Instant::now() < until, "{path}: no pcap header after 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `tcpdoctor bench` for `d` against `url` (in `ns` when given); returns the requests made.
fn bench(ns: Option<&str>, url: &str, d: &str) -> u64 {
    let (code, out, err) = tcpdoctor(ns, &["bench", "-t1", "-c1", "-d", d, "--json", url]);
    assert_eq!(code, 0, "bench {url}: {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let n = v["requests"].as_u64().unwrap();
    assert!(n > 0, "no requests to {url}: {v:#}");
    n
}

/// (captured, dropped by kernel, loopback duplicates) from the last stderr line.
fn stats_line(stderr: &str) -> (u64, u64, u64) {
    let last = stderr.lines().last().unwrap_or("");
    let n: Vec<u64> = last.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
    assert!(
        last.ends_with(" loopback duplicates removed") && last.contains(" packets captured, ") && n.len() == 3,
        "{stderr}"
    );
    (n[0], n[1], n[2])
}

/// Frames tshark reads from `path`, which must open without complaint.
fn tshark_count(path: &str, display_filter: Option<&str>) -> usize {
    let mut c = Command::new("tshark");
    c.args(["-r", path, "-T", "fields", "-e", "frame.number"]);
    if let Some(f) = display_filter {
        c.args(["-Y", f]);
    }
    let (out, _) = run_bounded(c, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark -r {path}: {err}");
    // As root tshark warns that it runs as root; anything else is a problem with the file.
    assert!(err.lines().all(|l| l.contains("Running as user")), "tshark -r {path}: {err}");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// A capture's link type, timestamps and TCP ports, read with tcpdoctor's own reader.
struct Read {
    link: Option<LinkType>,
    ts_ns: Vec<i64>,
    ports: Vec<(u16, u16)>,
    caplens: Vec<(usize, u32)>,
}

fn read(bytes: Vec<u8>) -> Read {
    let cap = Capture::from_bytes("capture", bytes);
    let mut r = Read { link: None, ts_ns: vec![], ports: vec![], caplens: vec![] };
    let mut packets = cap.packets().expect("a pcap");
    while let Some(p) = packets.next() {
        r.link = Some(p.link);
        r.ts_ns.push(p.ts_ns);
        r.caplens.push((p.data.len(), p.orig_len));
        let seg = wire::decode(p.frame, p.ts_ns, p.link, p.data, p.orig_len).expect("decodes").expect("TCP");
        r.ports.push((seg.src.port, seg.dst.port));
    }
    assert!(packets.damage().is_none(), "{:?}", packets.damage());
    r
}

fn analyze_kinds(ns_path: &str) -> Vec<String> {
    let (code, out, err) = tcpdoctor(None, &["analyze", "--json", ns_path]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    v["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap().to_string()).collect()
}

#[test]
fn loopback_capture_matches_tcpdump_and_shows_the_nagle_stall() {
    if !common::require_root() || !common::require("tshark") || !common::require("tcpdump") {
        return;
    }
    let dir = TempDir::new("lo");
    let (port, other) = (free_port(), free_port());
    let _nagle = wwr_server(None, "127.0.0.1", port, "wwr");
    let _quiet = wwr_server(None, "127.0.0.1", other, "single");
    let (ours, any, theirs) = (dir.file("lo.pcap"), dir.file("any.pcap"), dir.file("tcpdump.pcap"));
    let filter = format!("tcp port {port}");

    let mut td = Command::new("tcpdump");
    td.args(["-i", "lo", "-w", &theirs, &filter]);
    let (tcpdump, line) = Proc::started_on(td, true);
    assert!(line.contains("listening on lo"), "{line}");
    let start = Instant::now();
    let lo = spawn_tcpdoctor(
        None,
        &["capture", "-i", "lo", "tcp", "port", &port.to_string(), "-w", &ours, "--duration", "3s"],
        Duration::from_secs(15),
    );
    let all = spawn_tcpdoctor(
        None,
        &["capture", "-i", "any", &filter, "-w", &any, "--duration", "3s"],
        Duration::from_secs(15),
    );
    wait_capturing(&ours);
    wait_capturing(&any);
    bench(None, &format!("http://127.0.0.1:{port}/"), "1s");
    bench(None, &format!("http://127.0.0.1:{other}/"), "300ms");

    let (out, took) = lo.join().expect("capture ran");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(start.elapsed() < Duration::from_secs(6) && took >= Duration::from_secs(3), "--duration: {took:?}");
    assert!(err.lines().next().unwrap().starts_with("tcpdoctor: capturing on lo, link-type ETHERNET (1)"), "{err}");
    let (n, dropped, dups) = stats_line(&err);
    assert!(n > 50, "{err}");
    assert_eq!(dropped, 0, "{err}");
    assert_eq!(dups, n, "on loopback each packet is seen twice: {err}");
    assert!(tcpdump.interrupt(Duration::from_secs(10)).success());

    // tshark opens it and counts what we said; tcpdump saw the same packets.
    assert_eq!(tshark_count(&ours, None) as u64, n);
    assert_eq!(tshark_count(&theirs, None) as u64, n, "tcpdump -i lo counted differently");
    let bytes = std::fs::read(&ours).unwrap();
    assert_eq!(&bytes[..4], &[0x4d, 0x3c, 0xb2, 0xa1], "nanosecond pcap magic");
    let r = read(bytes);
    assert_eq!(r.link, Some(LinkType::ETHERNET));
    assert!(r.ts_ns.windows(2).all(|w| w[0] <= w[1]), "timestamps go back");
    assert!(r.ts_ns.iter().any(|t| t % 1000 != 0), "nanosecond digits");
    assert!(r.ports.iter().all(|&(s, d)| s == port || d == port), "a packet of another port: {:?}", r.ports);
    assert!(analyze_kinds(&ours).contains(&"nagle_delayed_ack".to_string()));

    // -i any: the same packets, with Linux cooked headers.
    let (out, _) = all.join().expect("capture ran");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stats_line(&err), (n, 0, n), "{err}");
    assert_eq!(tshark_count(&any, Some("sll")) as u64, n);
    let r = read(std::fs::read(&any).unwrap());
    assert_eq!(r.link, Some(LinkType::LINUX_SLL));
    assert!(analyze_kinds(&any).contains(&"nagle_delayed_ack".to_string()));
}

#[test]
fn count_snaplen_standard_output_and_ipv6() {
    if !common::require_root() || !common::require("tshark") {
        return;
    }
    let port = free_port();
    let _server = wwr_server(None, "::1", port, "single");
    let f = format!("ip6 and dst port {port}");
    let cap =
        spawn_tcpdoctor(None, &["capture", "-i", "lo", &f, "-c", "10", "-s", "96", "-w", "-"], Duration::from_secs(20));
    // Nothing shows on standard output until packets come: give the socket time to open.
    std::thread::sleep(Duration::from_millis(500));
    let until = Instant::now() + Duration::from_secs(10);
    while !cap.is_finished() && Instant::now() < until {
        bench(None, &format!("http://[::1]:{port}/"), "200ms");
    }
    let (out, _) = cap.join().expect("capture ran");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stats_line(&err).0, 10, "{err}");
    let r = read(out.stdout);
    assert_eq!(r.ports.len(), 10);
    assert!(r.ports.iter().all(|&(_, d)| d == port), "{:?}", r.ports);
    assert!(r.caplens.iter().all(|&(c, _)| c <= 96), "{:?}", r.caplens);
    assert!(r.caplens.iter().any(|&(c, o)| o > c as u32), "a request is longer than 96 bytes: {:?}", r.caplens);
}

/// A reader that stops reading: the ring fills and the kernel drops packets.
/// The drops are counted and reported, and what was captured is a whole file.
#[test]
fn kernel_drops_are_counted_when_the_reader_falls_behind() {
    if !common::require_root() {
        return;
    }
    let (_lab, servers) = common::lab(&[]);
    let url = common::url_of(&servers, "nodelay").to_string();
    let port = common::port_of(&url).to_string();
    let dir = TempDir::new("drops");
    let log = dir.file("stderr");
    let mut c = Command::new(BIN);
    c.args(["capture", "-i", "lo", "tcp", "port", &port, "--duration", "3s", "-w", "-"]);
    c.stdout(Stdio::piped()).stderr(std::fs::File::create(&log).unwrap());
    let mut cap = Proc(c.spawn().unwrap());
    let until = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log).unwrap().starts_with("tcpdoctor: capturing on lo") {
        assert!(Instant::now() < until, "capture did not start: {}", std::fs::read_to_string(&log).unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Nobody reads the pipe while the load runs: the writer blocks, the 8 MiB ring fills.
    let (code, _, err) = tcpdoctor(None, &["bench", "-t1", "-c8", "-d", "2s", "--json", &url]);
    assert_eq!(code, 0, "{err}");
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(cap.0.stdout.as_mut().unwrap(), &mut bytes).unwrap();
    let status = cap.0.wait().unwrap();
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{err}");
    let (captured, dropped, _) = stats_line(&err);
    assert!(dropped > 0, "the ring never overflowed: {err}");
    assert_eq!(read(bytes).ports.len() as u64, captured, "{err}");
}

#[test]
fn ctrl_c_leaves_a_complete_file() {
    if !common::require_root() || !common::require("tshark") {
        return;
    }
    let dir = TempDir::new("int");
    let port = free_port();
    let _server = wwr_server(None, "127.0.0.1", port, "single");
    let path = dir.file("int.pcap");
    let mut c = Command::new(BIN);
    c.args(["capture", "-i", "lo", "port", &port.to_string(), "-w", &path]);
    let (cap, line) = Proc::started_on(c, true);
    assert!(line.starts_with("tcpdoctor: capturing on lo"), "{line}");
    bench(None, &format!("http://127.0.0.1:{port}/"), "300ms");
    let t = Instant::now();
    assert!(cap.interrupt(Duration::from_secs(5)).success());
    assert!(t.elapsed() < Duration::from_secs(1), "Ctrl-C took {:?}", t.elapsed());
    let n = tshark_count(&path, None);
    assert!(n > 10, "{n} packets");
    assert_eq!(read(std::fs::read(&path).unwrap()).ports.len(), n);
}

#[test]
fn veth_pair_with_a_vlan_in_namespaces() {
    if !common::require_root() || !common::require("tshark") || !common::require("ip") {
        return;
    }
    let ns = Namespaces::new(&["ca", "cb"]);
    let (a, b) = (ns.get(0), ns.get(1));
    sh(&["ip", "link", "add", "cva", "netns", a, "type", "veth", "peer", "name", "cvb", "netns", b]);
    let mut vlan = true;
    for (n, dev, addr) in [(a, "cva", "10.79.0.1/24"), (b, "cvb", "10.79.0.2/24")] {
        sh(&["ip", "-n", n, "addr", "add", addr, "dev", dev]);
        sh(&["ip", "-n", n, "link", "set", dev, "up"]);
        let sub = format!("{dev}.10");
        let made = Command::new("ip")
            .args(["-n", n, "link", "add", "link", dev, "name", &sub, "type", "vlan", "id", "10"])
            .output()
            .is_ok_and(|o| o.status.success());
        if made {
            sh(&["ip", "-n", n, "addr", "add", &addr.replace(".0.", ".10."), "dev", &sub]);
            sh(&["ip", "-n", n, "link", "set", &sub, "up"]);
        } else {
            // A kernel without 802.1Q; the unit tests still check the tag is put back.
            eprintln!("NOTE: no VLAN support in this kernel: the VLAN part of this test is skipped");
            vlan = false;
        }
    }
    let _server = wwr_server(Some(b), "0.0.0.0", 8080, "wwr");
    let dir = TempDir::new("veth");
    let path = dir.file("veth.pcap");
    let cap = spawn_tcpdoctor(
        Some(a),
        &["capture", "-i", "cva", "port", "8080", "-w", &path, "--duration", "3s"],
        Duration::from_secs(15),
    );
    wait_capturing(&path);
    bench(Some(a), "http://10.79.0.2:8080/", "600ms");
    if vlan {
        bench(Some(a), "http://10.79.10.2:8080/", "600ms");
    }
    let (out, _) = cap.join().expect("capture ran");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let (n, dropped, dups) = stats_line(&err);
    assert!(n > 20 && dropped == 0 && dups == 0, "{err}");
    assert_eq!(tshark_count(&path, None) as u64, n);
    if vlan {
        // The kernel took the tags out of the frames; they are written back.
        let tagged = tshark_count(&path, Some("vlan.id == 10"));
        assert!(tagged > 10 && (tagged as u64) < n, "{tagged} of {n} tagged");
    }
    let bytes = std::fs::read(&path).unwrap();
    assert_ne!(&bytes[24 + 16..24 + 28], &[0; 12], "real MAC addresses");
    let r = read(bytes);
    assert_eq!(r.link, Some(LinkType::ETHERNET));
    assert!(r.ports.iter().all(|&(s, d)| s == 8080 || d == 8080));
    assert!(analyze_kinds(&path).contains(&"nagle_delayed_ack".to_string()));

    // An interface that is down: one line, exit 5.
    sh(&["ip", "-n", a, "link", "add", "cdown", "type", "veth", "peer", "name", "cdown2"]);
    let (code, _, err) = tcpdoctor(Some(a), &["capture", "-i", "cdown", "-w", &dir.file("down.pcap")]);
    assert_eq!(code, 5, "{err}");
    assert_eq!(err.trim(), "tcpdoctor: cannot capture on cdown: it is down; bring it up (`ip link set cdown up`)");
}

#[test]
fn tun_device_gives_raw_ip() {
    if !common::require_root() || !common::require("tshark") || !common::require("ip") {
        return;
    }
    let ns = Namespaces::new(&["tun"]);
    let n = ns.get(0);
    // A tun device (ARPHRD_NONE, no link header) held open by a reader that drops everything.
    let mut c = command(Some(n), "python3");
    c.arg("-c").arg(
        "import fcntl, os, struct\n\
         fd = os.open('/dev/net/tun', os.O_RDWR)\n\
         fcntl.ioctl(fd, 0x400454ca, struct.pack('16sH', b'ctun', 0x1001))\n\
         print('ready', flush=True)\n\
         while True: os.read(fd, 65536)",
    );
    let (_reader, line) = Proc::started(c);
    assert_eq!(line.trim(), "ready");
    sh(&["ip", "-n", n, "addr", "add", "10.80.0.1/24", "dev", "ctun"]);
    sh(&["ip", "-n", n, "link", "set", "ctun", "up"]);
    let dir = TempDir::new("tun");
    let path = dir.file("tun.pcap");
    let cap = spawn_tcpdoctor(Some(n), &["capture", "-i", "ctun", "-w", &path, "-c", "2"], Duration::from_secs(15));
    wait_capturing(&path);
    // Two SYNs out of the tun device (nobody answers them).
    let (code, _, err) =
        tcpdoctor(Some(n), &["probe", "10.80.0.2", "-p", "80", "-c", "2", "-i", "0.1", "--timeout", "0.2"]);
    assert_eq!(code, 1, "{err}");
    let (out, _) = cap.join().expect("capture ran");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("link-type RAW (101)"), "{err}");
    assert_eq!(stats_line(&err), (2, 0, 0), "{err}");
    assert_eq!(tshark_count(&path, Some("tcp.flags.syn == 1 && ip.dst == 10.80.0.2")), 2);
    let r = read(std::fs::read(&path).unwrap());
    assert_eq!(r.link, Some(LinkType::RAW));
    assert!(r.ports.iter().all(|&(_, d)| d == 80));
}

#[test]
fn without_cap_net_raw_one_line_and_exit_5() {
    if !common::require_root() || !common::require("setpriv") {
        return;
    }
    let dir = TempDir::new("priv");
    let path = dir.file("x.pcap");
    for drop in [&["--reuid=65534", "--regid=65534", "--clear-groups"][..], &["--bounding-set", "-net_raw"][..]] {
        let mut c = Command::new("setpriv");
        c.args(drop).args([BIN, "capture", "-i", "lo", "-w", &path, "--duration", "1s"]);
        let (out, _) = run_bounded(c, Duration::from_secs(10));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{drop:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("needs CAP_NET_RAW: run as root or `setcap cap_net_raw+ep` on the binary"),
            "{drop:?}: {err}"
        );
    }
    assert!(!Path::new(&path).exists(), "no file is left behind");
}

#[test]
fn bad_interface_filter_or_file() {
    for (args, code, what) in [
        (&["-i", "nosuch0", "-w", "/dev/null"][..], 3, "no interface named 'nosuch0'"),
        (&["-i", "lo", "port", "http", "-w", "/dev/null"][..], 2, "'http' is not a port number"),
        (&["-i", "lo", "tcp", "and", "(", "port", "1", "-w", "/dev/null"][..], 2, "missing ')'"),
        (&["-i", "lo", "-w", "/dev/null", "--duration", "soon"][..], 2, "not a duration"),
    ] {
        let (c, _, err) = tcpdoctor(None, &[&["capture"][..], args].concat());
        assert_eq!(c, code, "{args:?}: {err}");
        assert!(err.contains(what), "{args:?}: {err}");
        if code == 3 || what.starts_with('\'') {
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.starts_with("tcpdoctor: "), "{err}");
        }
    }
    if common::require_root() {
        let (c, _, err) = tcpdoctor(None, &["capture", "-i", "lo", "-w", "/nonexistent-dir/x.pcap"]);
        assert_eq!(c, 3, "{err}");
        assert_eq!(
            err.trim(),
            "tcpdoctor: /nonexistent-dir/x.pcap: cannot write: No such file or directory (os error 2)"
        );
    }
}
