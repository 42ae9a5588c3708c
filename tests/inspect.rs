//! `inspect` against real processes started here on 127.0.0.1: the lab's
//! write-write-read server with Nagle on and with TCP_NODELAY, `tcpdoctor lab`
//! (both in one process), Debian's nginx (master and worker) with
//! `tcp_nodelay off` and `on`, the JDK HttpServer by default and with its flag,
//! a process that exits during the window, a segment held right now (made to
//! last by dropping the peer's ACKs in a network namespace), and the failures:
//! no such process, nothing on the port, bad arguments, no ptrace permission.
//! Load comes from `tcpdoctor bench` running beside the inspection. Every
//! process is stopped by its PID.

mod common;

use common::{Namespaces, Proc, free_port, javac, jdk, lab, port_of, require, require_root, tmpdir, url_of};
use serde_json::Value;
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Tests that put load on a server run one at a time: two cores are shared.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

/// A finished run: exit code, stdout, stderr.
struct Run {
    code: i32,
    out: String,
    err: String,
}

fn finished(o: Output) -> Run {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Run { code: o.status.code().unwrap_or(-1), out: text(&o.stdout), err: text(&o.stderr) }
}

fn run(mut c: Command) -> Run {
    c.env_remove("RUST_BACKTRACE");
    finished(common::run_bounded(c, Duration::from_secs(30)).0)
}

/// `tcpdoctor inspect ARGS…`, bounded.
fn inspect(args: &[&str]) -> Run {
    let mut c = common::tcpdoctor();
    c.arg("inspect").args(args);
    run(c)
}

/// `tcpdoctor inspect ARGS… --json`, which must succeed.
fn inspect_json(args: &[&str]) -> Value {
    let r = inspect(&[args, &["--json"]].concat());
    assert_eq!(r.code, 0, "inspect {args:?}: {}", r.err);
    assert!(r.err.is_empty(), "inspect {args:?} wrote to stderr: {}", r.err);
    serde_json::from_str(&r.out).unwrap_or_else(|e| panic!("{e}: {}", r.out))
}

/// Polls `inspect ARGS --json --window 0` until it sees `n` established
/// connections (the load is connected), at most 10 s.
fn until_established(args: &[&str], n: u64) -> Value {
    let t = Instant::now();
    loop {
        let v = inspect_json(&[args, &["--window", "0"]].concat());
        if v["summary"]["established"] == n {
            return v;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "never {n} established connections: {:#}", v["sockets"]);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `tcpdoctor bench --json` against `url` on another thread: `c` keep-alive
/// connections for `secs`, at most `rate` requests/s (0: as fast as the server answers).
fn bench(url: &str, c: u32, secs: u32, rate: u32) -> JoinHandle<Value> {
    let mut cmd = common::tcpdoctor();
    cmd.args(["bench", "--json", "-t1", "--timeout", "2s"]).args(["-c", &c.to_string(), "-d", &format!("{secs}s")]);
    if rate > 0 {
        cmd.args(["-R", &rate.to_string()]);
    }
    cmd.arg(url);
    std::thread::spawn(move || {
        let r = run(cmd);
        assert_eq!(r.code, 0, "bench: {}", r.err);
        serde_json::from_str(&r.out).unwrap_or_else(|e| panic!("{e}: {}", r.out))
    })
}

/// The bench run served requests and not one failed.
fn assert_no_failures(b: &Value) {
    assert!(b["requests"].as_u64().unwrap() > 10, "{b:#}");
    for (kind, n) in b["errors"].as_object().unwrap() {
        assert_eq!(n, 0, "{kind} errors during the inspection: {b:#}");
    }
}

fn established(v: &Value) -> Vec<&Value> {
    v["sockets"].as_array().unwrap().iter().filter(|s| s["state"] == "established").collect()
}

fn listening(v: &Value) -> Vec<&Value> {
    v["sockets"].as_array().unwrap().iter().filter(|s| s["state"] == "listen").collect()
}

fn advice(v: &Value) -> String {
    v["advice"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect::<Vec<_>>().join("\n")
}

fn counter(v: &Value, name: &str) -> u64 {
    let c = v["host"]["counters"].as_array().unwrap().iter().find(|c| c["name"] == name);
    c.unwrap_or_else(|| panic!("no {name}: {:#}", v["host"]))["delta"].as_u64().unwrap()
}

/// Every established socket on `port` has TCP_NODELAY == `nodelay`, its tcp_info
/// and delayed-ACK state read; the sentence counts them.
fn assert_sockets(v: &Value, port: u16, n: u64, nodelay: bool) {
    let est = established(v);
    assert_eq!(est.len() as u64, n, "{:#}", v["sockets"]);
    for s in &est {
        assert!(s["local"].as_str().unwrap().ends_with(&format!(":{port}")), "{s:#}");
        assert_eq!(s["role"], "accepted", "{s:#}");
        assert_eq!((&s["nodelay"], &s["cork"]), (&Value::Bool(nodelay), &Value::Bool(false)), "{s:#}");
        assert!(s["pingpong"].is_boolean() && s["quick_acks_left"].is_u64(), "/proc/net/tcp not read: {s:#}");
        let i = &s["info"];
        assert!(i["mss"].as_u64().unwrap() > 500 && i["rcv_mss"].as_u64().unwrap() > 0, "tcp_info: {s:#}");
        assert!(i["rtt_ms"].as_f64().unwrap() > 0.0 && i["ato_ms"].as_f64().unwrap() > 0.0, "{s:#}");
        assert!(i["notsent"].is_u64() && i["unacked"].is_u64() && i["retransmits"].is_u64(), "{s:#}");
        if nodelay {
            assert_eq!(s["held_now"], false, "a TCP_NODELAY socket is never held: {s:#}");
        }
    }
    let sum = &v["summary"];
    let nagle = if nodelay { 0 } else { n };
    assert_eq!((&sum["established"], &sum["nagle_on"], &sum["nodelay_unknown"]), (&n.into(), &nagle.into(), &0.into()));
    let text = sum["text"].as_str().unwrap();
    let want = format!("{nagle} of {n} established connections have Nagle on (TCP_NODELAY off)");
    assert!(text.starts_with(&want), "{text:?}, expected {want:?}");
    if nodelay {
        assert!(v["advice"].as_array().unwrap().is_empty(), "nothing to advise: {:#}", v["advice"]);
    }
    // The peers are this host: the route to 127.0.0.1, looked up as IPv4.
    let routes = v["host"]["routes"].as_array().unwrap();
    assert!(routes.iter().any(|r| r["peer"] == "127.0.0.1"), "{:#}", v["host"]);
}

/// The lab's write-write-read server (tests/data/lab/wwr_server.py) on `port`, here.
fn wwr_server(port: u16, nodelay: bool) -> Proc {
    let mut c = Command::new("python3");
    c.arg(common::data("lab/wwr_server.py")).args(["--port", &port.to_string(), "--max-seconds", "60"]);
    if nodelay {
        c.arg("--nodelay");
    }
    let (p, line) = Proc::started(c);
    assert!(line.starts_with("listening"), "{line}");
    p
}

#[test]
fn python_server_nagle_on_and_tcp_nodelay() {
    if !require("python3") {
        return;
    }
    let _g = serial();
    for nodelay in [false, true] {
        let port = free_port();
        let p = wwr_server(port, nodelay);
        let url = format!("http://127.0.0.1:{port}/");
        let load = bench(&url, 4, 3, if nodelay { 300 } else { 0 });
        let target = format!(":{port}");
        until_established(&[&target], 4);
        let v = inspect_json(&[&target, "--window", "1s"]);
        assert_eq!(v["process"]["pid"], p.0.id(), "{:#}", v["process"]);
        assert_eq!(v["port"], port);
        assert_eq!(v["software"]["kind"], "python", "{:#}", v["software"]);
        assert_eq!(v["software"]["name"], "Python wwr_server.py");
        let l = listening(&v);
        assert_eq!(l.len(), 1);
        assert_eq!((&l[0]["role"], &l[0]["peer"]), (&"listening".into(), &"*:*".into()));
        assert_sockets(&v, port, 4, nodelay);
        assert!(v["host"]["window_ms"].as_f64().unwrap() >= 1000.0);
        if !nodelay {
            assert!(advice(&v).lines().next().unwrap().contains("TCP_NODELAY"), "{}", advice(&v));
            assert!(advice(&v).contains("disable_nagle_algorithm = True"), "{}", advice(&v));
            // Each request of the load waits for the client's delayed ACK: the host's timer fires.
            assert!(counter(&v, "DelayedACKs") >= 10, "{:#}", v["host"]);
            // The other counters and settings that change the picture are read too.
            for name in ["DelayedACKLocked", "DelayedACKLost", "TCPAutoCorking"] {
                counter(&v, name);
            }
            let sysctl = |name: &str| std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}")).ok();
            for name in ["tcp_autocorking", "tcp_pingpong_thresh"] {
                let want = sysctl(name).map(|t| Value::from(t.trim().parse::<i64>().unwrap()));
                assert_eq!(v["host"][name], want.unwrap_or(Value::Null), "{name}: {:#}", v["host"]);
            }
        }
        assert_no_failures(&load.join().unwrap());
        drop(p);
    }
}

/// `tcpdoctor lab` runs its Nagle and TCP_NODELAY servers in one process (five listening:
/// three over HTTP, two over HTTPS):
/// by PID both show, by :PORT one; the text leads with the sentence.
#[test]
fn lab_process_with_nagle_and_nodelay_servers_text() {
    let _g = serial();
    let (p, servers) = lab(&[]);
    let pid = p.0.id().to_string();
    let (nagle, nodelay) = (url_of(&servers, "nagle"), url_of(&servers, "nodelay"));
    let loads = [bench(nagle, 3, 3, 0), bench(nodelay, 3, 3, 200)];
    let v = until_established(&[&pid], 6);
    assert_eq!(v["summary"]["listening"], 5, "{:#}", v["sockets"]);
    for s in established(&v) {
        let on_nagle_port = s["local"].as_str().unwrap().ends_with(&format!(":{}", port_of(nagle)));
        assert_eq!(s["nodelay"], !on_nagle_port, "{s:#}");
    }
    let r = inspect(&[&pid, "--window", "0.2s"]);
    assert_eq!(r.code, 0, "{}", r.err);
    let lines: Vec<&str> = r.out.lines().collect();
    assert!(lines[0].starts_with(&format!("PROCESS {pid} ")) && lines[0].contains("tcpdoctor lab"), "{}", r.out);
    assert!(
        lines[1].starts_with("SUMMARY 3 of 6 established connections have Nagle on (TCP_NODELAY off)"),
        "the sentence comes second: {}",
        r.out
    );
    assert!(r.out.contains("\nSOFTWARE tcpdoctor (no server software tcpdoctor knows)\n"), "{}", r.out);
    assert!(r.out.contains("\nSOCKETS (11)\n") && r.out.contains("\nADVICE\n"), "{}", r.out);
    assert!(r.out.contains("set TCP_NODELAY on these sockets"), "{}", r.out);

    // By port: the Nagle server's sockets only, and a note on the others.
    let r = inspect(&[&format!(":{}", port_of(nagle)), "--window", "0"]);
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(r.out.lines().nth(1).unwrap().starts_with("SUMMARY 3 of 3 established"), "{}", r.out);
    assert!(r.out.contains(&format!("sockets on local port {} only", port_of(nagle))), "{}", r.out);
    assert!(r.out.contains("socket(s) on other local ports left out"), "{}", r.out);
    for l in loads {
        assert_no_failures(&l.join().unwrap());
    }
}

/// The children of `pid`, as the kernel lists them.
fn children(pid: u32) -> Vec<u64> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    t.split_whitespace().map(|c| c.parse().unwrap()).collect()
}

#[test]
fn nginx_tcp_nodelay_off_and_on_master_and_worker() {
    if !require("nginx") {
        return;
    }
    let _g = serial();
    for nodelay in [false, true] {
        let dir = tmpdir(&format!("nginx-{nodelay}"));
        let port = free_port();
        let p = common::nginx(&dir, port, nodelay);
        let master = p.0.id();
        let workers = children(master);
        assert_eq!(workers.len(), 1, "worker_processes 1");
        let url = format!("http://127.0.0.1:{port}/");
        // The load spans every inspection below and ends after them.
        let started = Instant::now();
        let load = bench(&url, 4, 4, if nodelay { 300 } else { 0 });
        let by_pid = until_established(&[&master.to_string()], 4);

        let v = inspect_json(&[&master.to_string(), "--window", "1s"]);
        let by_port = inspect_json(&[&format!(":{port}"), "--window", "0"]);
        let mut inspected = started.elapsed();
        for v in [&by_pid, &v, &by_port] {
            assert_eq!(v["process"]["pid"], master, "the master, found from the port too: {:#}", v["process"]);
            assert_eq!(v["process"]["workers"], Value::from(workers.clone()), "{:#}", v["process"]);
            // The worker holds the connections; the master the listening socket.
            assert!(established(v).iter().all(|s| s["pid"] == workers[0]), "{:#}", v["sockets"]);
            assert_eq!(listening(v)[0]["pid"], master);
            let sw = &v["software"];
            assert_eq!(sw["kind"], "nginx", "{sw:#}");
            assert!(sw["name"].as_str().unwrap().starts_with("nginx 1."), "{sw:#}");
            assert_eq!(sw["nodelay_setting"], nodelay, "effective tcp_nodelay from nginx -T: {sw:#}");
            assert!(sw["setting_source"].as_str().unwrap().contains(" -T "), "{sw:#}");
            let settings: Vec<String> = sw["settings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| format!("{} {} {}", s["name"].as_str().unwrap(), s["value"].as_str().unwrap(), s["source"]))
                .collect();
            let want = format!("tcp_nodelay {} \"config\"", if nodelay { "on" } else { "off" });
            assert!(settings.contains(&want), "{settings:?}");
            assert!(settings.contains(&"sendfile on \"config\"".to_string()), "{settings:?}");
            assert!(settings.contains(&"tcp_nopush off \"config\"".to_string()), "{settings:?}");
            assert_sockets(v, port, 4, nodelay);
        }
        if !nodelay {
            assert!(advice(&v).lines().next().unwrap().contains("`tcp_nodelay on;`"), "{}", advice(&v));
            assert!(counter(&v, "DelayedACKs") >= 10, "{:#}", v["host"]);
            let r = inspect(&[&format!(":{port}"), "--window", "0"]);
            assert_eq!(r.code, 0, "{}", r.err);
            let lines: Vec<&str> = r.out.lines().collect();
            assert!(lines[0].starts_with(&format!("PROCESS {master} nginx: master process")), "{}", r.out);
            assert_eq!(lines[1], format!("  workers sharing its listening sockets: {}", workers[0]));
            assert!(lines[2].starts_with("SUMMARY 4 of 4 established connections have Nagle on"), "{}", r.out);
            assert!(r.out.contains("\n  its own setting: TCP_NODELAY off; source: `"), "{}", r.out);
            assert!(r.out.contains("\n  tcp_nodelay off, sendfile on, tcp_nopush off, keepalive_timeout 65\n"));
            assert!(r.out.contains("\nADVICE\n  - set `tcp_nodelay on;`"), "{}", r.out);
            inspected = started.elapsed();
        }
        // The load (4 s) was still running when the inspections ended, and lost nothing.
        assert!(inspected < Duration::from_millis(3500), "inspections took until {inspected:?}");
        assert_no_failures(&load.join().unwrap());
        drop(p);
        assert!(!std::path::Path::new(&format!("/proc/{}", workers[0])).exists(), "worker outlived its master");
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn jdk_httpserver_default_and_with_the_flag() {
    if !require("javac") {
        return;
    }
    let _g = serial();
    let dir = tmpdir("jdk");
    javac(&dir);
    for flag in [false, true] {
        let port = free_port();
        let _p = jdk(&dir, port, flag);
        let load = bench(&format!("http://127.0.0.1:{port}/"), 3, 3, if flag { 300 } else { 0 });
        let target = format!(":{port}");
        until_established(&[&target], 3);
        let v = inspect_json(&[&target, "--window", "0.3s"]);
        let sw = &v["software"];
        assert_eq!(sw["kind"], "jdk-httpserver", "{sw:#}");
        assert_eq!(sw["name"], "Java HttpServerDemo (com.sun.net.httpserver)");
        assert_eq!(sw["nodelay_setting"], flag, "{sw:#}");
        let setting = &sw["settings"][0];
        assert_eq!(setting["name"], "sun.net.httpserver.nodelay");
        assert_eq!(setting["value"], flag.to_string());
        if flag {
            assert_eq!(setting["source"], "config");
            assert!(sw["setting_source"].as_str().unwrap().contains("on the command line"), "{sw:#}");
        } else {
            assert_eq!(setting["source"], "default");
            assert!(sw["setting_source"].as_str().unwrap().starts_with("JDK default"), "{sw:#}");
            assert!(advice(&v).lines().next().unwrap().contains("-Dsun.net.httpserver.nodelay=true"), "{}", advice(&v));
        }
        // The JDK listens on a dual-stack socket: IPv4 peers show as ::ffff:127.0.0.1.
        assert!(established(&v)[0]["peer"].as_str().unwrap().starts_with("[::ffff:127.0.0.1]:"));
        assert_sockets(&v, port, 3, flag);
        assert_no_failures(&load.join().unwrap());
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Node's http server sets TCP_NODELAY itself (noDelay defaults to true
/// since v18); a plain `net` server keeps Nagle on. Both are one Node process.
#[test]
fn node_http_and_net_servers() {
    if !require("node") {
        return;
    }
    let _g = serial();
    let (http, net) = (free_port(), free_port());
    let script = "const [http, net] = process.argv.slice(1).map(Number);\n\
        require('http').createServer((q, s) => s.end('x'.repeat(600))).listen(http, '127.0.0.1', () =>\n\
          require('net').createServer(c => c.on('data', () => { c.write('HTTP/1.1 200 OK\\r\\nContent-Length: 600\\r\\n\\r\\n'); c.write('x'.repeat(600)); }))\n\
            .listen(net, '127.0.0.1', () => console.log('listening')));\n\
        setTimeout(() => process.exit(0), 60000);\n";
    let mut c = Command::new("node");
    c.args(["-e", script, &http.to_string(), &net.to_string()]);
    let (p, line) = Proc::started(c);
    assert_eq!(line.trim(), "listening");
    for (port, nodelay) in [(http, true), (net, false)] {
        let load = bench(&format!("http://127.0.0.1:{port}/"), 2, 2, 200);
        let target = format!(":{port}");
        until_established(&[&target], 2);
        let v = inspect_json(&[&target, "--window", "0.3s"]);
        assert_eq!(v["process"]["pid"], p.0.id());
        let sw = &v["software"];
        assert_eq!(sw["kind"], "node", "{sw:#}");
        assert!(sw["name"].as_str().unwrap().starts_with("Node.js v"), "{sw:#}");
        assert_sockets(&v, port, 2, nodelay);
        if !nodelay {
            assert!(advice(&v).contains("setNoDelay(true)"), "{}", advice(&v));
        }
        assert_no_failures(&load.join().unwrap());
    }
}

/// The server is stopped (by PID) while a `--window 2s` inspection runs:
/// the report still comes, flagged `exited`, with the sockets as they were.
/// A process gone before its sockets are read is "no such process" (exit 3).
#[test]
fn a_process_that_exits_during_the_window() {
    if !require("python3") {
        return;
    }
    let _g = serial();
    for json in [true, false] {
        let port = free_port();
        let p = wwr_server(port, false);
        let pid = p.0.id().to_string();
        let _conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
        until_established(&[&pid], 1);
        let mut c = common::tcpdoctor();
        c.args(["inspect", &pid, "--window", "2s"]);
        if json {
            c.arg("--json");
        }
        let t = Instant::now();
        let running = std::thread::spawn(move || run(c));
        // Reading the sockets takes tens of ms; stop the server well after, well before the window ends.
        std::thread::sleep(Duration::from_millis(800));
        drop(p);
        let r = running.join().unwrap();
        assert!(t.elapsed() >= Duration::from_secs(2), "the window is kept");
        assert_eq!(r.code, 0, "{}", r.err);
        assert!(!r.err.contains("panicked"), "{}", r.err);
        if json {
            let v: Value = serde_json::from_str(&r.out).unwrap();
            assert_eq!(v["process"]["exited"], true, "{:#}", v["process"]);
            assert_eq!(v["process"]["uid"], uid(), "read before it exited");
            assert!(v["notes"].to_string().contains("exited during the inspection"), "{:#}", v["notes"]);
            assert_eq!(v["summary"]["established"], 1, "{:#}", v["sockets"]);
            assert_eq!(established(&v)[0]["nodelay"], false);
        } else {
            assert!(r.out.contains("\n  exited during the inspection: its sockets are shown as they were before\n"));
            assert!(r.out.contains("SUMMARY 1 of 1 established connection has Nagle on"), "{}", r.out);
        }
    }
    // Exited and reaped, or a zombie: no such process.
    let mut z = Command::new("true").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let zombie = z.id().to_string();
    assert!(std::fs::read_to_string(format!("/proc/{zombie}/stat")).unwrap().contains(") Z "), "a zombie");
    let r = inspect(&[&zombie]);
    assert_eq!(r.code, 3, "{}", r.err);
    assert_eq!(
        r.err.trim_end(),
        format!(
            "tcpdoctor: pid {zombie}: no such process (it may have exited; `ps -p {zombie}` shows whether it runs)"
        )
    );
    z.wait().unwrap();
    let r = inspect(&[&zombie]);
    assert_eq!((r.code, r.err.lines().count()), (3, 1), "{}", r.err);
}

#[test]
fn no_such_process_nothing_on_the_port_and_bad_arguments() {
    // pid_max is one above the largest pid the kernel hands out.
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().to_string();
    for json in [false, true] {
        let mut args = vec![pid_max.as_str()];
        if json {
            args.push("--json");
        }
        let r = inspect(&args);
        assert_eq!(r.code, 3, "{}", r.err);
        assert!(r.out.is_empty(), "nothing on stdout: {}", r.out);
        assert_eq!(r.err.lines().count(), 1, "{}", r.err);
        assert!(r.err.starts_with(&format!("tcpdoctor: pid {pid_max}: no such process")), "{}", r.err);
    }
    let port = free_port();
    for args in [&[format!(":{port}")][..], &[format!(":{port}"), "--json".into()]] {
        let r = inspect(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(r.code, 3, "{}", r.err);
        assert!(r.out.is_empty(), "nothing on stdout: {}", r.out);
        assert_eq!(r.err.lines().count(), 1, "{}", r.err);
        let nothing = format!("tcpdoctor: port {port}: nothing listens on it");
        assert!(r.err.starts_with(&nothing) && r.err.contains("ss -ltnp"), "{}", r.err);
    }

    for (args, want) in [
        (&["foo"][..], "neither a process id nor :PORT"),
        (&["0"], "neither a process id nor :PORT"),
        (&[":0"], "a port is 1 to 65535"),
        (&[":70000"], "a port is 1 to 65535"),
        (&["1", "--window", "soon"], "not a duration"),
        (&["1", "--trace-everything"], "unexpected argument"),
        (&[], "required"),
    ] {
        let r = inspect(args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.err);
        assert!(r.err.starts_with("error: ") && r.err.contains(want), "{args:?}: {}", r.err);
        assert!(!r.err.contains("panicked") && r.out.is_empty(), "{args:?}: {}", r.err);
    }
}

/// As user nobody against a root-owned server: the ptrace message, exit 5.
/// Against nobody's own server it works.
#[test]
fn unprivileged_runs_need_ptrace_permission() {
    if !require_root() || !require("setpriv") || !require("python3") {
        return;
    }
    let _g = serial();
    let nobody = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
            .arg(env!("CARGO_BIN_EXE_tcpdoctor"))
            .arg("inspect")
            .args(args);
        run(c)
    };
    let port = free_port();
    let p = wwr_server(port, false);
    let pid = p.0.id().to_string();
    let by_port = format!(":{port}");
    let runs = [
        &[pid.as_str()][..],
        &[pid.as_str(), "--json"],
        &[pid.as_str(), "--trace", "1s", "--json"],
        &[by_port.as_str()],
        &[by_port.as_str(), "--json"],
    ];
    for args in runs {
        let r = nobody(args);
        assert_eq!(r.code, 5, "{args:?}: {}", r.err);
        assert!(r.out.is_empty() && !r.err.contains("panicked"), "{args:?}: {}{}", r.out, r.err);
        assert_eq!(r.err.lines().count(), 1, "{}", r.err);
        assert!(r.err.contains("needs ptrace permission") && r.err.contains("CAP_SYS_PTRACE"), "{}", r.err);
        if args[0] == pid {
            assert!(r.err.starts_with(&format!("tcpdoctor: pid {pid}: cannot list its file descriptors")), "{}", r.err);
            assert!(r.err.contains("as its user (uid 0) or as root"), "{}", r.err);
        } else {
            assert!(r.err.starts_with(&format!("tcpdoctor: port {port}: cannot see which process")), "{}", r.err);
        }
    }
    drop(p);

    // The same user needs no privilege (no Yama restriction here, or scope 0).
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").unwrap_or_default();
    let python = std::path::Path::new("/usr/bin/python3");
    if scope.trim().parse::<u32>().unwrap_or(0) > 0 || !python.exists() {
        eprintln!("same-user case skipped: ptrace_scope {scope:?}, /usr/bin/python3 exists: {}", python.exists());
        return;
    }
    let port = free_port();
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(python)
        .arg(common::data("lab/wwr_server.py"))
        .args(["--port", &port.to_string(), "--max-seconds", "30"]);
    let (p, _) = Proc::started(c);
    let _conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let r = nobody(&[&p.0.id().to_string(), "--json", "--window", "0"]);
    assert_eq!(r.code, 0, "{}", r.err);
    let v: Value = serde_json::from_str(&r.out).unwrap();
    assert_eq!(v["process"]["uid"], 65534);
    assert_eq!(v["summary"]["established"], 1, "{:#}", v["sockets"]);
    assert_eq!(established(&v)[0]["nodelay"], false);
}

/// A segment held by Nagle right now, seen in tcp_info: in a network
/// namespace, nft drops the client's pure ACKs, so the server's first small
/// write (the header) stays unacknowledged and Nagle holds the body; the
/// route's `rto_min 20s` keeps the retransmission timer from ending it.
/// Its TCP_NODELAY twin sends the body at once.
#[test]
fn a_held_segment_shows_in_tcp_info() {
    if !require_root() || !require("nft") || !require("ip") || !require("python3") {
        return;
    }
    let _g = serial();
    let netns = Namespaces::new(&["held"]);
    let ns = netns.get(0).to_string();
    let in_ns = |program: &str| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &ns, program]);
        c
    };
    common::sh(&[
        "ip",
        "-n",
        &ns,
        "route",
        "replace",
        "local",
        "127.0.0.1",
        "dev",
        "lo",
        "table",
        "local",
        "proto",
        "kernel",
        "scope",
        "host",
        "src",
        "127.0.0.1",
        "rto_min",
        "20s",
        "quickack",
        "1",
    ]);
    let (nagle, nodelay) = (18431u16, 18432u16);
    // Pure ACKs (no SYN, FIN, RST or PSH) from the clients to the servers.
    let rules = format!(
        "table inet tcpd {{\n  chain out {{\n    type filter hook output priority 0;\n    \
         tcp dport {{ {nagle}, {nodelay} }} tcp flags == ack drop\n  }}\n}}\n"
    );
    let mut c = in_ns("nft");
    c.args(["-f", "-"]).stdin(Stdio::piped());
    let mut nft = c.spawn().unwrap();
    std::io::Write::write_all(&mut nft.stdin.take().unwrap(), rules.as_bytes()).unwrap();
    assert!(nft.wait().unwrap().success(), "nft rules");

    let server = |port: u16, nodelay: bool| {
        let mut c = in_ns("python3");
        c.arg(common::data("lab/wwr_server.py")).args(["--port", &port.to_string(), "--max-seconds", "30"]);
        if nodelay {
            c.arg("--nodelay");
        }
        Proc::started(c).0
    };
    let client = |port: u16| {
        let mut c = in_ns("python3");
        c.args([
            "-c",
            "import socket, sys, time\n\
             s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
             s.sendall(b'GET / HTTP/1.1\\r\\nHost: t\\r\\n\\r\\n')\n\
             print('sent', flush=True)\n\
             time.sleep(30)\n",
            &port.to_string(),
        ]);
        Proc::started(c).0
    };
    let servers = [server(nagle, false), server(nodelay, true)];
    let _clients = [client(nagle), client(nodelay)];
    let inspect_ns = |pid: u32, json: bool| {
        let mut c = in_ns(env!("CARGO_BIN_EXE_tcpdoctor"));
        c.args(["inspect", &pid.to_string(), "--window", "0"]);
        if json {
            c.arg("--json");
        }
        run(c)
    };
    // Once the server has answered (the header in flight), and its second write done.
    let answered = |pid: u32| {
        let t = Instant::now();
        loop {
            let r = inspect_ns(pid, true);
            assert_eq!(r.code, 0, "{}", r.err);
            let v: Value = serde_json::from_str(&r.out).unwrap();
            if established(&v).first().is_some_and(|s| s["info"]["unacked"].as_u64() > Some(0)) {
                std::thread::sleep(Duration::from_millis(100));
                let r = inspect_ns(pid, true);
                assert_eq!(r.code, 0, "{}", r.err);
                return serde_json::from_str::<Value>(&r.out).unwrap();
            }
            assert!(t.elapsed() < Duration::from_secs(5), "no answer in flight: {:#}", v["sockets"]);
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    let v = answered(servers[0].0.id());
    let s = established(&v)[0];
    let i = &s["info"];
    assert_eq!((&s["nodelay"], &s["held_now"]), (&false.into(), &true.into()), "{s:#}");
    assert_eq!(i["unacked"], 1, "the header, unacknowledged: {s:#}");
    assert_eq!(i["notsent"], 600, "the body, held: {s:#}");
    assert_eq!((&i["retransmits"], &i["total_retrans"]), (&0.into(), &0.into()), "no loss recovery: {s:#}");
    assert_eq!(v["summary"]["held_now"], 1);
    assert!(v["summary"]["text"].as_str().unwrap().ends_with("; 1 holding a segment right now"));
    let route = &v["host"]["routes"][0];
    assert_eq!((&route["peer"], &route["rto_min_ms"]), (&"127.0.0.1".into(), &20000.0.into()), "{route:#}");
    assert_eq!(route["quickack"], 1, "{route:#}");
    let r = inspect_ns(servers[0].0.id(), false);
    let row = r
        .out
        .lines()
        .find(|l| l.starts_with("  ") && l.contains(" established "))
        .unwrap_or_else(|| panic!("{}", r.out));
    assert!(row.trim_end().ends_with("HELD"), "{}", r.out);
    assert!(r.out.contains("route to 127.0.0.1: quickack 1, rto_min 20s"), "{}", r.out);

    let v = answered(servers[1].0.id());
    let s = established(&v)[0];
    assert_eq!((&s["nodelay"], &s["held_now"]), (&true.into(), &false.into()), "{s:#}");
    assert!(s["info"]["unacked"].as_u64().unwrap() >= 1, "{s:#}");
    assert_eq!(s["info"]["notsent"], 0, "both writes sent, unacknowledged: {s:#}");
    assert_eq!(v["summary"]["held_now"], 0);
}
