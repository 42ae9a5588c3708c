//! Shared helpers for integration tests.
#![allow(dead_code)]

pub mod traced;

use serde_json::Value;
use std::io::BufRead;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tcpdoctor::analyze::{Options, analyze};
use tcpdoctor::capture::Capture;
use tcpdoctor::record::{Finding, NagleFinding, Report};

/// Path of a file in tests/data.
pub fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// Every capture (pcap or pcapng) under tests/data.
pub fn captures() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "pcap" || x == "pcapng") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&data(""), &mut out);
    out
}

/// Analyses one capture, which must be undamaged.
pub fn run_path(path: &Path) -> Report {
    let cap = Capture::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let r = analyze(&[cap], &Options { ladder_rows: 60, ..Options::default() }).expect("analysable");
    assert!(r.inputs[0].damage.is_none(), "{}: damaged: {:?}", path.display(), r.inputs[0].damage);
    assert_eq!(r.inputs[0].malformed_packets, 0, "{}: malformed packets", path.display());
    r
}

/// Analyses one capture in tests/data.
pub fn run(name: &str) -> Report {
    run_path(&data(name))
}

/// The Nagle findings.
pub fn nagle(r: &Report) -> Vec<&NagleFinding> {
    r.findings
        .iter()
        .filter_map(|f| match f {
            Finding::NagleDelayedAck(n) => Some(n),
            _ => None,
        })
        .collect()
}

/// The kinds of finding, sorted, once each.
pub fn kinds(r: &Report) -> Vec<&'static str> {
    let mut k: Vec<_> = r
        .findings
        .iter()
        .map(|f| match f {
            Finding::NagleDelayedAck(_) => "nagle_delayed_ack",
            Finding::Retransmission(_) => "retransmission",
            Finding::SynRetransmission(_) => "syn_retransmission",
            Finding::ZeroWindow(_) => "zero_window",
            Finding::AppLatency(_) => "app_latency",
            Finding::Expect100Continue(_) => "expect_100_continue",
            Finding::NetworkLatency(_) => "network_latency",
            Finding::UpstreamWait(_) => "upstream_wait",
        })
        .collect();
    k.sort();
    k.dedup();
    k
}

/// Checks every capture listed in `dir/expected.json` against it; returns how many.
pub fn check_against_oracle(dir: &Path) -> usize {
    let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
    let expected: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    for (name, want) in &expected {
        let r = run_path(&dir.join(name));
        let got = nagle(&r);
        let want_nagle = want["nagle"].as_array().unwrap();
        assert_eq!(got.len(), want_nagle.len(), "{name}: {:#?}", r.findings);
        for w in want_nagle {
            let f = got
                .iter()
                .find(|f| f.nagle_side.endpoint == w["endpoint"].as_str().unwrap())
                .unwrap_or_else(|| panic!("{name}: no Nagle finding for {}", w["endpoint"]));
            assert_eq!(f.nagle_side.role, w["role"].as_str().unwrap(), "{name}");
            let (lo, hi) = (w["min_stalls"].as_u64().unwrap(), w["max_stalls"].as_u64().unwrap());
            assert!((lo..=hi).contains(&f.stalls), "{name}: {} stalls, expected {lo}..={hi}", f.stalls);
        }
        for ep in want["must_not_blame"].as_array().unwrap() {
            assert!(got.iter().all(|f| f.nagle_side.endpoint != ep.as_str().unwrap()), "{name}: {ep} blamed");
        }
        let k = kinds(&r);
        for other in want["other_kinds"].as_array().unwrap() {
            assert!(k.contains(&other.as_str().unwrap()), "{name}: {other} missing from {k:?}");
        }
        for absent in want["absent_kinds"].as_array().into_iter().flatten() {
            assert!(!k.contains(&absent.as_str().unwrap()), "{name}: {absent} found: {:#?}", r.findings);
        }
    }
    expected.len()
}

/// Whether an external tool the test needs is installed. Outside CI a missing
/// tool skips the test (with a note); with `CI=true` it fails it, so CI never
/// passes by skipping. `scripts/test.sh` installs every tool.
pub fn require(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool} || test -x /usr/sbin/{tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{tool} is missing; run scripts/test.sh, which installs it");
        }
        eprintln!("SKIPPED: {tool} is not installed (scripts/test.sh installs it)");
    }
    found
}

/// Whether the tests may create network namespaces and capture (root).
pub fn require_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc_geteuid() } == 0;
    if !root {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("these tests need root (network namespaces, packet capture)");
        }
        eprintln!("SKIPPED: not root");
    }
    root
}

/// Runs `cmd` to completion, killing it (by PID) if it outlives `limit`.
pub fn run_bounded(mut cmd: Command, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawns");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => (out.expect("waits"), start.elapsed()),
        Err(_) => {
            // SAFETY: kill(2) on the PID of the child this test started.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{cmd:?} still running after {limit:?}; killed");
        }
    }
}

/// Runs a setup command that must work.
pub fn sh(args: &[&str]) {
    let mut c = Command::new(args[0]);
    c.args(&args[1..]);
    let (out, _) = run_bounded(c, Duration::from_secs(20));
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Network namespaces made by this test; deleted on drop, even after a panic.
pub struct Namespaces(pub Vec<String>);

impl Namespaces {
    /// Creates `tcpd{pid}{suffix}` for each suffix, each with `lo` up.
    pub fn new(suffixes: &[&str]) -> Namespaces {
        let pid = std::process::id();
        let mut all = Namespaces(Vec::new());
        for s in suffixes {
            let name = format!("tcpd{pid}{s}");
            sh(&["ip", "netns", "add", &name]);
            all.0.push(name.clone());
            sh(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        }
        all
    }
    pub fn get(&self, i: usize) -> &str {
        &self.0[i]
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// A process this test started; killed by PID on drop.
pub struct Proc(pub Child);

impl Proc {
    /// Spawns `cmd` and waits up to 10 s for its first line on stdout, the
    /// sign that it is ready (a server listening).
    pub fn started(cmd: Command) -> (Proc, String) {
        Proc::started_on(cmd, false)
    }

    /// As [`Proc::started`], the first line read from stderr when `stderr`.
    /// The rest of that stream is read and dropped.
    pub fn started_on(mut cmd: Command, stderr: bool) -> (Proc, String) {
        cmd.stdin(Stdio::null());
        if stderr {
            cmd.stderr(Stdio::piped());
        } else {
            cmd.stdout(Stdio::piped());
        }
        let mut c = cmd.spawn().expect("spawns");
        let out: Box<dyn std::io::Read + Send> =
            if stderr { Box::new(c.stderr.take().expect("piped")) } else { Box::new(c.stdout.take().expect("piped")) };
        let p = Proc(c);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = std::io::BufReader::new(out);
            let mut line = String::new();
            let _ = std::io::BufRead::read_line(&mut r, &mut line);
            let _ = tx.send(line);
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        });
        let line = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| panic!("{cmd:?}: no line in 10 s"));
        (p, line)
    }

    /// Sends SIGINT (what Ctrl-C sends) and waits, at most `limit`, for the exit.
    pub fn interrupt(mut self, limit: Duration) -> std::process::ExitStatus {
        // SAFETY: kill(2) on the PID of the child this test started.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGINT) };
        let until = Instant::now() + limit;
        loop {
            if let Some(s) = self.0.try_wait().expect("waits") {
                return s;
            }
            assert!(Instant::now() < until, "still running {limit:?} after SIGINT");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    /// SIGTERM first, so a process that owns others (lab's nginx) can stop
    /// them; SIGKILL if it is still there after 3 s.
    fn drop(&mut self) {
        // Once reaped, the PID may belong to someone else: leave it alone.
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        // SAFETY: kill(2) on the PID of the child this test started, not yet reaped.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `tcpdoctor` binary under test.
pub fn tcpdoctor() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tcpdoctor"))
}

/// A port free on 127.0.0.1 a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits (at most 30 s) until `p` or one of its descendants listens on TCP
/// `port`; fails if `p` exits first or another process holds the port. It
/// looks at /proc instead of connecting: a probing connect() can meet a
/// stranger's listener, or connect to itself, and be taken for the server.
pub fn wait_listening(port: u16, p: &mut Proc) {
    let t = Instant::now();
    let me = p.0.id();
    loop {
        assert!(p.0.try_wait().unwrap().is_none(), "server exited before listening on {port}");
        match tcpdoctor::inspect::find_listener(port) {
            Ok(Some(pid)) if descends_from(pid, me) => return,
            Ok(Some(pid)) => panic!("port {port} is held by PID {pid}, not by the server (PID {me})"),
            Ok(None) => {}
            // Without /proc access to the holder, a connect is the only test left.
            Err(_) if TcpStream::connect(("127.0.0.1", port)).is_ok() => return,
            Err(_) => {}
        }
        assert!(t.elapsed() < Duration::from_secs(30), "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `pid` is `ancestor` or a descendant of it.
fn descends_from(mut pid: u32, ancestor: u32) -> bool {
    for _ in 0..64 {
        if pid == ancestor {
            return true;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The parent is the second field after the command name, which may hold spaces.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok());
        match ppid {
            Some(pp) if pp != 0 => pid = pp,
            _ => return false,
        }
    }
    false
}

/// A fresh directory under the system temp dir, named for this test binary and `name`.
pub fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tcpdoctor-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles the lab's JDK HttpServer (tests/data/lab/HttpServerDemo.java) into `dir`.
pub fn javac(dir: &Path) {
    let src = data("lab/HttpServerDemo.java");
    let ok = Command::new("javac").arg("-d").arg(dir).arg(src).status().unwrap();
    assert!(ok.success(), "javac failed");
}

/// The JDK HttpServer compiled in `dir`, on 127.0.0.1:`port` for at most 120 s,
/// with `-Dsun.net.httpserver.nodelay=true` when `flag`; listening when this returns.
pub fn jdk(dir: &Path, port: u16, flag: bool) -> Proc {
    let mut c = Command::new("java");
    if flag {
        c.arg("-Dsun.net.httpserver.nodelay=true");
    }
    let c = c
        .arg("-cp")
        .arg(dir)
        .args(["HttpServerDemo", &port.to_string(), "300", "120"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut p = Proc(c);
    wait_listening(port, &mut p);
    p
}

/// Debian's nginx (master + worker) serving a small page, config from
/// tests/data/lab/nginx.conf.template with `tcp_nodelay` on or off; `off` is
/// set in the server block, where `inspect PID` (no port given) must find it too.
pub fn nginx(dir: &Path, port: u16, nodelay: bool) -> Proc {
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::write(dir.join("www/index.html"), format!("<html>{}</html>\n", "tcpdoctor inspect test. ".repeat(24)))
        .unwrap();
    let d = dir.display().to_string();
    let mut conf = std::fs::read_to_string(data("lab/nginx.conf.template"))
        .unwrap()
        .replace("@PREFIX@", &d)
        .replace("@ROOT@", &format!("{d}/www"))
        .replace("@PORT@", &port.to_string())
        .replace("@NODELAY@", if nodelay { "on" } else { "off" });
    if !nodelay {
        conf = conf
            .replace("    tcp_nodelay off;\n", "")
            .replace("    server {\n", "    server {\n        tcp_nodelay off;\n");
        assert!(conf.contains("server {\n        tcp_nodelay off;\n"), "{conf}");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        conf = conf.replace("user root;", "");
    }
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let bin = if Path::new("/usr/sbin/nginx").exists() { "/usr/sbin/nginx" } else { "nginx" };
    let mut c = Command::new(bin);
    c.arg("-p").arg(dir).arg("-c").arg(dir.join("nginx.conf")).arg("-e").arg(dir.join("error.log"));
    serving(c, port)
}

/// Starts the server `cmd` (its output dropped) and waits until it listens on `port`.
pub fn serving(mut cmd: Command, port: u16) -> Proc {
    let c = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawns");
    let mut p = Proc(c);
    wait_listening(port, &mut p);
    p
}

/// `tcpdoctor lab --json -d 300s ARGS…`: the process and the servers it printed, by name → URL.
pub fn lab(args: &[&str]) -> (Proc, Vec<(String, String)>) {
    let (p, rows) = lab_rows(args);
    let servers = rows
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_string(), s["url"].as_str().unwrap().to_string()))
        .collect();
    (p, servers)
}

/// `tcpdoctor lab --json -d 300s ARGS…`: the process and the rows it printed, whole.
pub fn lab_rows(args: &[&str]) -> (Proc, Vec<Value>) {
    let mut c = tcpdoctor();
    c.args(["lab", "--json", "-d", "300s"]).args(args);
    lab_rows_of(c)
}

/// `cmd` (a `tcpdoctor lab --json` command line, perhaps behind `setpriv`): the
/// process and the rows it printed, whole.
pub fn lab_rows_of(mut cmd: Command) -> (Proc, Vec<Value>) {
    let mut c = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let out = c.stdout.take().unwrap();
    let p = Proc(c);
    let mut text = String::new();
    for line in std::io::BufReader::new(out).lines() {
        let line = line.unwrap();
        let end = line == "]";
        text.push_str(&line);
        if end {
            break;
        }
    }
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (p, v.as_array().unwrap().clone())
}

/// The URL of lab server `name`.
pub fn url_of<'a>(servers: &'a [(String, String)], name: &str) -> &'a str {
    &servers.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name} in {servers:?}")).1
}

/// The port of `http://HOST:PORT/`.
pub fn port_of(url: &str) -> u16 {
    url.trim_end_matches('/').rsplit(':').next().unwrap().parse().unwrap()
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}
