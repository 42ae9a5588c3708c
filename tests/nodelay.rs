//! `nodelay` and `diagnose --try-nodelay` against real servers started here on
//! loopback (as root): Debian's nginx with `tcp_nodelay off` and `on`, the JDK
//! HttpServer by default, Python's http.server speaking HTTP/1.1, the lab's
//! Nagle server, and a Python server that sets TCP_NODELAY off itself before
//! every response. Load comes from `tcpdoctor bench`; the sockets' values are
//! read back with `tcpdoctor inspect`. Every process is stopped by its PID.

mod common;

use common::{Proc, free_port, lab, port_of, require, require_root, tmpdir, url_of};
use serde_json::Value;
use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Tests that put load on a server run one at a time: two cores are shared.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A finished run: exit code, stdout, stderr.
struct Run {
    code: i32,
    out: String,
    err: String,
}

fn run(mut c: Command) -> Run {
    c.env_remove("RUST_BACKTRACE");
    let (o, _) = common::run_bounded(c, Duration::from_secs(60));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Run { code: o.status.code().unwrap_or(-1), out: text(&o.stdout), err: text(&o.stderr) }
}

/// `tcpdoctor nodelay ARGS…`.
fn nodelay(args: &[&str]) -> Run {
    let mut c = common::tcpdoctor();
    c.arg("nodelay").args(args);
    run(c)
}

/// `tcpdoctor nodelay ARGS… --json`, which must succeed.
fn nodelay_json(args: &[&str]) -> Value {
    let r = nodelay(&[args, &["--json"]].concat());
    assert_eq!(r.code, 0, "nodelay {args:?}: {}", r.err);
    assert!(r.err.is_empty(), "nodelay {args:?} wrote to stderr: {}", r.err);
    serde_json::from_str(&r.out).unwrap_or_else(|e| panic!("{e}: {}", r.out))
}

/// The rows of a nodelay report with this role and outcome.
fn rows<'a>(v: &'a Value, role: &str, outcome: &str) -> Vec<&'a Value> {
    v["sockets"].as_array().unwrap().iter().filter(|s| s["role"] == role && s["outcome"] == outcome).collect()
}

/// `tcpdoctor bench --json` to completion.
fn bench_now(url: &str, c: u32, d: &str) -> Value {
    bench_with(url, c, d, &[])
}

/// The same with more options (`-R`).
fn bench_with(url: &str, c: u32, d: &str, more: &[&str]) -> Value {
    let mut cmd = common::tcpdoctor();
    cmd.args(["bench", "--json", "-t1", "--timeout", "2s", "-c", &c.to_string(), "-d", d]).args(more).arg(url);
    let r = run(cmd);
    assert_eq!(r.code, 0, "bench: {}", r.err);
    serde_json::from_str(&r.out).unwrap_or_else(|e| panic!("{e}: {}", r.out))
}

/// The same on another thread.
fn bench(url: &str, c: u32, d: &str) -> JoinHandle<Value> {
    let (url, d) = (url.to_string(), d.to_string());
    std::thread::spawn(move || bench_now(&url, c, &d))
}

fn p50(b: &Value) -> f64 {
    b["latency"]["p50"].as_f64().unwrap()
}

/// Not one request of the run failed.
fn assert_no_errors(b: &Value) {
    assert!(b["requests"].as_u64().unwrap() > 10, "{b:#}");
    for (kind, n) in b["errors"].as_object().unwrap() {
        assert_eq!(n, 0, "{kind} errors: {b:#}");
    }
}

/// The median of the run's second starting at `t` s.
fn p50_at(b: &Value, t: u64) -> f64 {
    let p = b["timeline"].as_array().unwrap().iter().find(|p| p["t_s"].as_f64() == Some(t as f64));
    p.unwrap_or_else(|| panic!("no second {t}: {:#}", b["timeline"]))["p50_ms"].as_f64().unwrap()
}

/// `inspect :PORT --json`: the listening socket's TCP_NODELAY.
fn listening_nodelay(port: u16) -> bool {
    let mut c = common::tcpdoctor();
    c.args(["inspect", &format!(":{port}"), "--json", "--window", "0"]);
    let r = run(c);
    assert_eq!(r.code, 0, "{}", r.err);
    let v: Value = serde_json::from_str(&r.out).unwrap();
    let l = v["sockets"].as_array().unwrap().iter().find(|s| s["role"] == "listening").cloned();
    l.unwrap_or_else(|| panic!("no listening socket: {v:#}"))["nodelay"].as_bool().unwrap()
}

/// Sleeps until `secs` after `t`.
fn at(t: Instant, secs: f64) {
    if let Some(rest) = Duration::from_secs_f64(secs).checked_sub(t.elapsed()) {
        std::thread::sleep(rest);
    }
}

/// The state files saved for `pid` in root's state directory.
fn state_files(pid: u32) -> Vec<PathBuf> {
    let Ok(d) = std::fs::read_dir("/run/tcpdoctor") else { return Vec::new() };
    let prefix = format!("{pid}-");
    d.map(|e| e.unwrap().path()).filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&prefix)).collect()
}

/// Python's http.server speaking HTTP/1.1 (Nagle on: it never sets TCP_NODELAY) on `port`.
fn python_http_server(dir: &Path, port: u16) -> Proc {
    std::fs::write(dir.join("index.html"), "x".repeat(600)).unwrap();
    let code = "import functools, http.server as h, sys\n\
                h.SimpleHTTPRequestHandler.protocol_version = 'HTTP/1.1'\n\
                h.SimpleHTTPRequestHandler.log_message = lambda *a: None\n\
                handler = functools.partial(h.SimpleHTTPRequestHandler, directory=sys.argv[2])\n\
                h.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), handler).serve_forever()\n";
    let mut c = Command::new("timeout");
    c.args(["120", "python3", "-c", code, &port.to_string()]).arg(dir);
    common::serving(c, port)
}

/// [`python_http_server`] in a fresh directory (removed when dropped).
struct Py {
    _proc: Proc,
    dir: PathBuf,
    port: u16,
    /// The process `nodelay :PORT` acts on (python3 under `timeout`).
    pid: u32,
    url: String,
}

fn py(name: &str) -> Py {
    let dir = tmpdir(name);
    let port = free_port();
    let _proc = python_http_server(&dir, port);
    let url = format!("http://127.0.0.1:{port}/index.html");
    Py { _proc, dir, port, pid: listener(port), url }
}

impl Drop for Py {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The pid of the process `nodelay :PORT` acts on (nginx's master, python under `timeout`).
fn listener(port: u16) -> u32 {
    tcpdoctor::inspect::find_listener(port).unwrap().expect("something listens")
}

/// The live switch on a Nagle server at `url`: a bench spanning both switches
/// (on at 2 s, restore at 5.5 s) has its own connections switched and put back
/// and loses no request; connections opened while it is on inherit it (sub-ms);
/// the stall is back after restore; the state file exists only in between.
fn switched_live_and_restored(url: &str, port: u16) {
    let pid = listener(port);
    assert!(!listening_nodelay(port));
    let t = Instant::now();
    let load = bench(url, 4, "8s");
    at(t, 2.0);
    let on = nodelay_json(&[&format!(":{port}"), "on"]);
    assert_eq!(on["action"], "on");
    assert_eq!(on["process"]["pid"], pid, "{on:#}");
    let l = rows(&on, "listening", "switched");
    assert_eq!(l.len(), 1, "{on:#}");
    assert_eq!((&l[0]["before"], &l[0]["after"]), (&Value::Bool(false), &Value::Bool(true)));
    // The bench's four keep-alive connections, opened before the switch (nginx: held by its worker).
    let est = rows(&on, "accepted", "switched");
    assert_eq!(est.len(), 4, "{:#}", on["sockets"]);
    let holder = on["process"]["workers"].get(0).unwrap_or(&on["process"]["pid"]).clone();
    assert!(est.iter().all(|s| s["pid"] == holder), "{est:#?}");
    assert!(est.iter().all(|s| s["before"] == false && s["after"] == true), "{est:#?}");
    // Saved before the change, in root's private directory, named by pid and start time.
    let file = PathBuf::from(on["state_file"].as_str().unwrap());
    assert_eq!(file, Path::new("/run/tcpdoctor").join(format!("{pid}-{}.json", on["process"]["start_time"])));
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved["sockets"].as_array().unwrap().len(), 5, "{saved:#}");
    assert!(saved["sockets"].as_array().unwrap().iter().all(|s| s["previous"] == false && s["applied"] == true));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata("/run/tcpdoctor").unwrap().mode() & 0o777, 0o700);
    assert!(listening_nodelay(port));
    // New connections start with it on: no stall.
    let fresh = bench_now(url, 2, "1s");
    // Python answers in about a millisecond under this load; a stall would be ~40 ms.
    assert!(p50(&fresh) < 10.0, "fresh connections with TCP_NODELAY inherited: p50 {} ms", p50(&fresh));
    at(t, 5.5);
    let back = nodelay_json(&[&format!(":{port}"), "restore"]);
    assert_eq!(rows(&back, "listening", "restored").len(), 1, "{:#}", back["sockets"]);
    // The bench's connections are put back, or closed since: nginx closes a
    // connection after 1000 requests (keepalive_requests), and the bench opens
    // another, which inherits TCP_NODELAY on and keeps it (counted, not touched).
    let (restored, closed) = (rows(&back, "accepted", "restored"), rows(&back, "accepted", "closed"));
    assert_eq!(restored.len() + closed.len(), 4, "{:#}", back["sockets"]);
    assert!(restored.iter().all(|s| s["before"] == true && s["after"] == false), "{back:#}");
    assert!(back["accepted_since"].as_u64().unwrap() <= closed.len() as u64, "{back:#}");
    assert!(!file.exists(), "the state file is removed once restored");
    let b = load.join().unwrap();
    assert_no_errors(&b);
    // The spanning run: stalled, then not, then stalled again. Not second 6:
    // nginx's connections inherited TCP_NODELAY on when they replaced one that
    // reached keepalive_requests, and keep it until they reach it in turn.
    // During: a tenth of the stall at most (Python's server answers in 1.5 ms
    // under this load on a slow Zen 3 VM, in under 1 ms on faster ones).
    let (before, during, after) = (p50_at(&b, 0), p50_at(&b, 4), p50_at(&b, 7));
    assert!(before > 30.0 && during < before / 10.0 && after > 30.0, "p50 {before} → {during} → {after} ms");
    assert!(!listening_nodelay(port));
    assert!(p50(&bench_now(url, 2, "1s")) > 30.0, "the stall is back for new connections");
}

/// nginx as a master (the listening socket) and a worker (that socket too, and the connections).
#[test]
fn nginx_tcp_nodelay_off_switched_live_and_restored() {
    if !require_root() || !require("nginx") {
        return;
    }
    let _g = serial();
    let dir = tmpdir("nodelay-nginx-off");
    let port = free_port();
    let master = common::nginx(&dir, port, false);
    switched_live_and_restored(&format!("http://127.0.0.1:{port}/"), port);
    assert_eq!(listener(port), master.0.id());
    drop(master);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn jdk_httpserver_default_switched_live_and_restored() {
    if !require_root() || !require("javac") {
        return;
    }
    let _g = serial();
    let dir = tmpdir("nodelay-jdk");
    common::javac(&dir);
    let port = free_port();
    let _p = common::jdk(&dir, port, false);
    switched_live_and_restored(&format!("http://127.0.0.1:{port}/"), port);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn python_http_server_switched_live_and_restored() {
    if !require_root() || !require("python3") {
        return;
    }
    let _g = serial();
    let dir = tmpdir("nodelay-py");
    let port = free_port();
    let _p = python_http_server(&dir, port);
    switched_live_and_restored(&format!("http://127.0.0.1:{port}/index.html"), port);
    let _ = std::fs::remove_dir_all(dir);
}

/// nginx with `tcp_nodelay on` sets the option itself on each keep-alive
/// connection; its listening socket has it off. The report says both, and what
/// that means; restore puts back the listening socket and leaves the rest.
#[test]
fn nginx_tcp_nodelay_on_is_reported_as_it_is() {
    if !require_root() || !require("nginx") {
        return;
    }
    let _g = serial();
    let dir = tmpdir("nodelay-nginx-on");
    let port = free_port();
    let master = common::nginx(&dir, port, true);
    let url = format!("http://127.0.0.1:{port}/");
    // Paced: unpaced, each connection reaches nginx's keepalive_requests (1000)
    // in a fraction of a second and is replaced, so the four seen by `on` may
    // be gone by `restore`.
    let paced = std::thread::spawn(move || bench_with(&url, 4, "3s", &["-R", "400"]));
    std::thread::sleep(Duration::from_millis(800));
    let on = nodelay_json(&[&format!(":{port}"), "on"]);
    let worker = on["process"]["workers"][0].as_u64().unwrap();
    assert_eq!(on["process"]["pid"], master.0.id(), "{on:#}");
    let l = rows(&on, "listening", "switched");
    assert_eq!((l.len(), &l[0]["before"], &l[0]["pid"]), (1, &Value::Bool(false), &master.0.id().into()), "{on:#}");
    let already = rows(&on, "accepted", "already");
    assert_eq!(already.len(), 4, "the bench's connections: {:#}", on["sockets"]);
    assert!(already.iter().all(|s| s["before"] == true && s["pid"] == worker), "{already:#?}");
    let note = on["notes"][0].as_str().unwrap();
    assert!(note.contains("all 4 established connections already had it on: the server sets it itself"), "{note}");
    let r = nodelay(&[&format!(":{port}"), "restore"]);
    assert_eq!(r.code, 0, "{}", r.err);
    let head = r.out.lines().next().unwrap();
    assert!(head.contains("1 socket restored") && head.ends_with("4 unchanged"), "{}", r.out);
    let unchanged = r.out.lines().filter(|l| l.starts_with("  ") && l.ends_with(" unchanged")).count();
    assert_eq!(unchanged, 4, "{}", r.out);
    assert!(!listening_nodelay(port));
    assert_no_errors(&paced.join().unwrap());
    drop(master);
    let _ = std::fs::remove_dir_all(dir);
}

/// A Python server that sets TCP_NODELAY off itself before every response,
/// then writes header and body apart (a stall with Nagle on).
const RESETTING_SERVER: &str = r#"
import socket, sys, threading, time
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(64)
body = b"x" * 600
def serve(c):
    buf = b""
    while True:
        while b"\r\n\r\n" not in buf:
            d = c.recv(65536)
            if not d:
                return
            buf += d
        buf = buf.split(b"\r\n\r\n", 1)[1]
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 600\r\n\r\n")
        c.sendall(body)
print("listening", flush=True)
end = time.time() + 60
while time.time() < end:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// restore reports the sockets that closed since the switch and those the
/// process set back itself (left as they are), and puts back the rest.
#[test]
fn restore_reports_closed_sockets_and_values_the_process_set_back() {
    if !require_root() || !require("python3") {
        return;
    }
    let _g = serial();
    let port = free_port();
    let mut c = Command::new("python3");
    c.args(["-c", RESETTING_SERVER, &port.to_string()]);
    let (_p, line) = Proc::started(c);
    assert!(line.starts_with("listening"));
    let url = format!("http://127.0.0.1:{port}/");
    // Two connections that outlive the change, one that closes before restore.
    let long = bench(&url, 2, "3s");
    let short = bench(&url, 1, "1s");
    std::thread::sleep(Duration::from_millis(500));
    let on = nodelay_json(&[&format!(":{port}"), "on"]);
    assert_eq!(rows(&on, "accepted", "switched").len(), 3, "{:#}", on["sockets"]);
    assert_no_errors(&short.join().unwrap());
    std::thread::sleep(Duration::from_millis(500));
    let back = nodelay_json(&[&format!(":{port}"), "restore"]);
    assert_eq!(rows(&back, "listening", "restored").len(), 1, "{back:#}");
    let set_back = rows(&back, "accepted", "changed_by_process");
    assert_eq!(set_back.len(), 2, "{:#}", back["sockets"]);
    assert!(set_back.iter().all(|s| s["before"] == false && s["after"] == false && s["previous"] == false));
    let closed = rows(&back, "accepted", "closed");
    assert_eq!(closed.len(), 1, "{:#}", back["sockets"]);
    assert!(closed[0]["before"].is_null() && closed[0]["after"].is_null());
    let notes = back["notes"].to_string();
    assert!(notes.contains("set back to the previous value by the process itself"), "{notes}");
    assert_no_errors(&long.join().unwrap());
}

/// `diagnose URL --try-nodelay --no-capture -d 5s` started, read until its line
/// saying it switched pid `pid` (so during its second load): the process, the
/// rest of its output, and the lines so far.
fn diagnose_until_switched(url: &str, pid: u32) -> (Proc, Lines<BufReader<ChildStdout>>, Vec<String>) {
    let mut d = common::tcpdoctor()
        .args(["diagnose", url, "--try-nodelay", "--no-capture", "-d", "5s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(d.stdout.take().unwrap()).lines();
    let diag = Proc(d);
    let mut seen = Vec::new();
    for line in out.by_ref() {
        let line = line.unwrap();
        let switched = line.starts_with(&format!("[try] TCP_NODELAY set live on pid {pid} "));
        seen.push(line);
        if switched {
            break;
        }
    }
    (diag, out, seen)
}

/// `diagnose --try-nodelay` killed (SIGKILL) during its second load leaves the
/// switch in place and the state file behind; `nodelay PID restore` puts it back.
#[test]
fn restore_after_a_killed_diagnose_works_from_the_state_file() {
    if !require_root() || !require("python3") {
        return;
    }
    let _g = serial();
    let server = py("nodelay-kill");
    let (port, pid, url) = (server.port, server.pid, server.url.clone());
    let (diag, _out, seen) = diagnose_until_switched(&url, pid);
    let last = seen.last().unwrap();
    assert!(last.contains(&format!("(if this run is killed: `tcpdoctor nodelay {pid} restore`)")), "{seen:#?}");
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on the PID of the child this test started, not yet reaped.
    unsafe { libc::kill(diag.0.id() as libc::pid_t, libc::SIGKILL) };
    drop(diag);
    assert!(listening_nodelay(port), "nobody put it back");
    assert_eq!(state_files(pid).len(), 1, "the state file stays");
    let back = nodelay_json(&[&pid.to_string(), "restore"]);
    assert_eq!(rows(&back, "listening", "restored").len(), 1, "{back:#}");
    assert!(state_files(pid).is_empty());
    assert!(!listening_nodelay(port));
    assert!(p50(&bench_now(&url, 2, "1s")) > 30.0, "the stall is back");
}

/// The whole method, then the fix tried live: against the lab's Nagle server
/// (which sets TCP_NODELAY off itself on each connection, so the load's
/// connections are switched while it runs) and nginx with `tcp_nodelay off`.
#[test]
fn diagnose_try_nodelay_proves_the_fix_live_and_restores() {
    if !require_root() || !require("nginx") {
        return;
    }
    let _g = serial();
    let (lab_proc, servers) = lab(&["--nginx"]);
    let nagle = url_of(&servers, "nagle");
    let out = common::tcpdoctor().args(["diagnose", nagle, "--try-nodelay", "--json"]).output().unwrap();
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(1), "the verdict's code: {v:#}");
    assert_eq!(v["verdict"]["cause"], "nagle_delayed_ack");
    let t = &v["try_nodelay"];
    let lab_pid = lab_proc.0.id();
    assert!(t["not_run"].is_null(), "{t:#}");
    assert_eq!((&t["pid"], &t["port"], &t["listening"]), (&lab_pid.into(), &port_of(nagle).into(), &1.into()));
    assert!(t["during_load"].as_u64().unwrap() >= 8, "the lab server sets TCP_NODELAY off on each: {t:#}");
    let (before, after) = (t["before"]["p50_ms"].as_f64().unwrap(), t["after"]["p50_ms"].as_f64().unwrap());
    assert!(before > 30.0 && after < 1.0, "p50 {before} → {after} ms");
    assert_eq!(t["before"]["p50_ms"], v["load"]["latency"]["p50"]);
    let (sb, sa) = (t["before"]["stalls"].as_u64().unwrap(), t["after"]["stalls"].as_u64().unwrap());
    // Per request: nearly every request stalled before; after, only while the
    // lab server (which sets TCP_NODELAY off again on each connection) waits
    // for the experiment to switch it back: a few hundred ms on a loaded machine,
    // longer on a slow one (1.2 % of requests on a Zen 3 VM): a twentieth at most.
    let per_request = |side: &str, stalls: u64| stalls as f64 / t[side]["requests"].as_u64().unwrap().max(1) as f64;
    let (rb, ra) = (per_request("before", sb), per_request("after", sa));
    assert!(sb > 100 && rb > 0.5 && ra * 20.0 < rb, "stalls captured {sb} → {sa}, per request {rb:.3} → {ra:.4}");
    assert_eq!((&t["restored"], &t["kept"], &t["after"]["errors"]), (&true.into(), &false.into(), &0.into()));
    let proof = t["proof"].as_str().unwrap();
    let want = format!("with TCP_NODELAY set live on pid {lab_pid} (tcpdoctor), the median under load fell from ");
    assert!(proof.starts_with(&want) && proof.ends_with("; restored"), "{proof}");
    assert!(!listening_nodelay(port_of(nagle)));
    assert!(state_files(lab_pid).is_empty());

    // nginx, as text: the verdict, then the experiment, BEFORE / AFTER and the proof.
    let off = url_of(&servers, "nginx-nodelay-off");
    let port = port_of(off);
    let master = listener(port);
    let html = tmpdir("nodelay-html").join("diagnose.html");
    let r = run({
        let mut c = common::tcpdoctor();
        c.args(["diagnose", off, "--try-nodelay", "--html"]).arg(&html);
        c
    });
    assert_eq!(r.code, 1, "{}{}", r.out, r.err);
    let mut pos = 0;
    for w in [
        "VERDICT (high confidence): Nagle + delayed ACK",
        "FIX",
        "TCP_NODELAY SET LIVE (--try-nodelay)",
        &format!("[try] TCP_NODELAY set live on pid {master} (nginx), port {port}: 1 listening"),
        "[try] Under load      median ",
        "[try] restored: 1 socket put back to TCP_NODELAY off",
        "BEFORE / AFTER",
        "median under load",
        "Nagle stalls captured",
        &format!("PROOF: with TCP_NODELAY set live on pid {master} (nginx), the median under load fell from 4"),
    ] {
        let i = r.out[pos..].find(w).unwrap_or_else(|| panic!("{w:?} missing or out of order:\n{}", r.out));
        pos += i + w.len();
    }
    let proof = r.out.lines().find(|l| l.starts_with("PROOF:")).unwrap();
    assert!(proof.ends_with(" µs; restored"), "sub-ms after: {proof}");
    assert!(!listening_nodelay(port));
    // The HTML report has the experiment too, after the verdict.
    let page = std::fs::read_to_string(&html).unwrap();
    let (verdict, section) =
        (page.find("Verdict (high confidence)").unwrap(), page.find("id=\"try-nodelay\"").unwrap());
    assert!(verdict < section, "the experiment after the verdict");
    let part = &page[section..];
    assert!(part.contains(&format!("{}</p>", proof.trim_start_matches("PROOF: "))), "{part}");
    assert!(part.contains("<td>Nagle stalls captured</td>") && part.contains("Restored: 1 put back."), "{part}");
    let _ = std::fs::remove_dir_all(html.parent().unwrap());
}

/// `--keep` leaves it set, and says how to put it back.
#[test]
fn diagnose_try_nodelay_keep_leaves_it_set() {
    if !require_root() || !require("python3") {
        return;
    }
    let _g = serial();
    let server = py("nodelay-keep");
    let (port, pid, url) = (server.port, server.pid, server.url.clone());
    let out = common::tcpdoctor()
        .args(["diagnose", &url, "--try-nodelay", "--keep", "--no-capture", "-d", "1s", "-c", "2", "--json"])
        .arg("--html")
        .arg(server.dir.join("d.html"))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &v["try_nodelay"];
    let page = std::fs::read_to_string(server.dir.join("d.html")).unwrap();
    let kept = format!("Kept: <code>tcpdoctor nodelay {pid} restore</code> puts it back.");
    assert!(page.contains(&kept) && page.contains(t["proof"].as_str().unwrap()), "{page}");
    assert_eq!((&t["kept"], &t["restored"]), (&true.into(), &false.into()), "{t:#}");
    assert!(t["proof"].as_str().unwrap().ends_with("; kept"), "{t:#}");
    let (before, after) = (t["before"]["p50_ms"].as_f64().unwrap(), t["after"]["p50_ms"].as_f64().unwrap());
    assert!(before > 30.0 && after < 5.0, "p50 {before} → {after} ms");
    assert!(t["restore"].as_array().unwrap().is_empty());
    assert!(listening_nodelay(port), "kept");
    assert_eq!(state_files(pid).len(), 1);
    // A second experiment would undo the operator's change when it restores: refused.
    let again = common::tcpdoctor()
        .args(["diagnose", &url, "--try-nodelay", "--no-capture", "-d", "1s", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&again.stdout).unwrap();
    let why = v["try_nodelay"]["not_run"].as_str().unwrap();
    assert!(why.contains("already has TCP_NODELAY changed by `tcpdoctor nodelay`") && why.contains("restore"), "{why}");
    assert!(listening_nodelay(port), "left as the operator had it");
    nodelay_json(&[&pid.to_string(), "restore"]);
    assert!(!listening_nodelay(port));
}

/// Without step 5 (another user's server) or off this host, the experiment
/// is not run, and one line says why; the verdict stands.
#[test]
fn diagnose_try_nodelay_says_why_it_cannot() {
    if !require_root() || !require("setpriv") || !require("python3") {
        return;
    }
    let _g = serial();
    let (_lab, servers) = lab(&[]);
    let nagle = url_of(&servers, "nagle");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(env!("CARGO_BIN_EXE_tcpdoctor"))
        .args(["diagnose", nagle, "--try-nodelay", "-d", "1s"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line = text.lines().find(|l| l.starts_with("[try] not run: ")).unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("step 5 did not find the server's process") && line.contains("needs ptrace permission"),
        "{line}"
    );
    assert!(!text.contains("BEFORE / AFTER") && !listening_nodelay(port_of(nagle)), "{text}");

    // A server in a network namespace of its own, reached over a veth from another.
    let ns = common::Namespaces::new(&["ndc", "nds"]);
    let (cn, sn) = (ns.get(0), ns.get(1));
    common::sh(&["ip", "-n", cn, "link", "add", "ndc0", "type", "veth", "peer", "name", "nds0", "netns", sn]);
    common::sh(&["ip", "-n", cn, "addr", "add", "10.231.7.1/30", "dev", "ndc0"]);
    common::sh(&["ip", "-n", sn, "addr", "add", "10.231.7.2/30", "dev", "nds0"]);
    common::sh(&["ip", "-n", cn, "link", "set", "ndc0", "up"]);
    common::sh(&["ip", "-n", sn, "link", "set", "nds0", "up"]);
    let mut c = Command::new("ip");
    c.args(["netns", "exec", sn, "python3"]).arg(common::data("lab/wwr_server.py"));
    c.args(["--host", "10.231.7.2", "--port", "18080", "--mode", "wwr", "--max-seconds", "60"]);
    let (_server, _) = Proc::started(c);
    let out = Command::new("ip")
        .args(["netns", "exec", cn])
        .arg(env!("CARGO_BIN_EXE_tcpdoctor"))
        .args(["diagnose", "http://10.231.7.2:18080/", "--try-nodelay", "--no-capture", "-d", "1s", "--json"])
        .output()
        .unwrap();
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!((out.status.code(), &v["verdict"]["cause"]), (Some(1), &Value::from("nagle_delayed_ack")), "{v:#}");
    let why = v["try_nodelay"]["not_run"].as_str().unwrap();
    assert!(why.starts_with("the server 10.231.7.2:18080 is not on this host"), "{why}");
    assert!(v["try_nodelay"]["after"].is_null());
}

/// Refusals, each in one line with its exit code, and nothing changed.
#[test]
fn refusals_are_one_line_and_change_nothing() {
    if !require_root() || !require("python3") || !require("strace") || !require("setpriv") {
        return;
    }
    let one_line = |r: &Run, code: i32, want: &str| {
        assert_eq!(r.code, code, "{}{}", r.out, r.err);
        assert!(r.err.starts_with("tcpdoctor: ") && r.err.contains(want), "{want:?} in {}", r.err);
        assert_eq!(r.err.lines().count(), 1, "{}", r.err);
        assert!(r.out.is_empty(), "{}", r.out);
    };
    for (args, want) in [
        (&["1", "maybe"][..], "invalid value 'maybe'"),
        (&[":0", "on"], "a port is 1 to 65535"),
        (&["abc", "on"], "neither a process id nor :PORT"),
    ] {
        let r = nodelay(args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.err);
        assert!(r.err.contains(want), "{args:?}: {}", r.err);
    }
    for args in [
        &["diagnose", "http://127.0.0.1:9/", "--keep"][..],
        &["diagnose", "http://127.0.0.1:9/", "--try-nodelay", "--verify", "http://127.0.0.1:9/"],
    ] {
        let r = run({
            let mut c = common::tcpdoctor();
            c.args(args);
            c
        });
        assert_eq!(r.code, 2, "{args:?}: {}", r.err);
    }
    let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
    one_line(&nodelay(&[&pid_max.to_string(), "on"]), 3, "no such process");
    one_line(&nodelay(&[&format!(":{}", free_port()), "on"]), 3, "nothing listens on it");
    // A process with no listening socket.
    let sleeper = Proc(Command::new("sleep").arg("30").spawn().unwrap());
    let r = nodelay(&[&sleeper.0.id().to_string(), "on"]);
    one_line(&r, 3, "(sleep): no listening TCP socket: `nodelay` switches a server's listening sockets");
    drop(sleeper);

    let dir = tmpdir("nodelay-refusals");
    let port = free_port();
    let server = python_http_server(&dir, port);
    let pid = listener(port).to_string();
    one_line(&nodelay(&[&pid, "restore"]), 3, "nothing to restore: no state saved for it in /run/tcpdoctor");
    // Another user has no ptrace permission over root's server, by pid or by port.
    let nobody = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]);
        c.arg(env!("CARGO_BIN_EXE_tcpdoctor")).arg("nodelay").args(args);
        run(c)
    };
    one_line(&nobody(&[&pid, "on"]), 5, "needs ptrace permission");
    one_line(&nobody(&[&format!(":{port}"), "on"]), 5, "needs ptrace permission");
    // A process another tracer holds.
    let strace = Proc(
        Command::new("strace")
            .args(["-f", "-o", "/dev/null", "-p", &pid])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t = Instant::now();
    while !std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .contains(&format!("TracerPid:\t{}", strace.0.id()))
    {
        assert!(t.elapsed() < Duration::from_secs(10), "strace did not attach");
        std::thread::sleep(Duration::from_millis(20));
    }
    let want = format!("already traced by pid {} (strace); tcpdoctor changes no socket", strace.0.id());
    one_line(&nodelay(&[&format!(":{port}"), "on"]), 5, &want);
    drop(strace);
    assert!(!listening_nodelay(port), "nothing changed");
    assert!(state_files(pid.parse().unwrap()).is_empty(), "nothing saved");
    // A process gone since its change: its state is removed, its sockets closed with it.
    nodelay_json(&[&pid, "on"]);
    assert_eq!(state_files(pid.parse().unwrap()).len(), 1);
    drop(server);
    let t = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(t.elapsed() < Duration::from_secs(10), "the server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    one_line(&nodelay(&[&pid, "restore"]), 3, "no such process; its sockets closed when it exited, so the saved state");
    assert!(state_files(pid.parse().unwrap()).is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

/// Another user keeps its state in $XDG_RUNTIME_DIR/tcpdoctor, which must be its own and private.
#[test]
fn a_user_switches_its_own_server_with_state_in_its_runtime_dir() {
    if !require_root() || !require("setpriv") {
        return;
    }
    let _g = serial();
    let as_nobody = |xdg: Option<&Path>| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]);
        c.env_remove("XDG_RUNTIME_DIR");
        if let Some(x) = xdg {
            c.env("XDG_RUNTIME_DIR", x);
        }
        c.arg(env!("CARGO_BIN_EXE_tcpdoctor"));
        c
    };
    let mut lab_cmd = as_nobody(None);
    lab_cmd.args(["lab", "--json", "-d", "60s"]);
    let (lab_proc, rows) = common::lab_rows_of(lab_cmd);
    let url = rows.iter().find(|r| r["name"] == "nagle").unwrap()["url"].as_str().unwrap().to_string();
    let port = port_of(&url);
    let runtime = tmpdir("nodelay-xdg");
    std::os::unix::fs::chown(&runtime, Some(65534), Some(65534)).unwrap();
    let nodelay_as = |xdg: Option<&Path>, action: &str| {
        let mut c = as_nobody(xdg);
        c.args(["nodelay", &format!(":{port}"), action]);
        run(c)
    };
    let r = nodelay_as(None, "on");
    assert_eq!(r.code, 6, "{}", r.err);
    assert!(r.err.contains("$XDG_RUNTIME_DIR is not set") && r.err.lines().count() == 1, "{}", r.err);
    assert!(!listening_nodelay(port), "nothing changed");
    let r = nodelay_as(Some(&runtime), "on");
    assert_eq!(r.code, 0, "{}", r.err);
    let file = runtime.join("tcpdoctor").join(format!("{}-", lab_proc.0.id()));
    assert!(r.out.contains(&format!("previous values saved in {}", file.display())), "{}", r.out);
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(runtime.join("tcpdoctor")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (65534, 0o700));
    assert!(listening_nodelay(port));
    let r = nodelay_as(Some(&runtime), "restore");
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(!listening_nodelay(port));
    // Its directory opened to others: refused before any change.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(runtime.join("tcpdoctor"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = nodelay_as(Some(&runtime), "on");
    assert_eq!(r.code, 6, "{}", r.err);
    assert!(r.err.contains("has mode 0755: others may enter it; `chmod 700"), "{}", r.err);
    assert!(!listening_nodelay(port), "nothing changed");
    drop(lab_proc);
    let _ = std::fs::remove_dir_all(runtime);
}

/// `off` on a server that sets TCP_NODELAY itself on each connection it
/// accepts (the JDK HttpServer with -Dsun.net.httpserver.nodelay=true): a
/// bench's connections get Nagle and stall, restore ends the stall, and the
/// text lists each socket with its before and after.
#[test]
fn off_brings_the_stall_to_a_nodelay_server_and_restore_ends_it() {
    if !require_root() || !require("javac") {
        return;
    }
    let _g = serial();
    let dir = tmpdir("nodelay-jdk-off");
    common::javac(&dir);
    let port = free_port();
    let _p = common::jdk(&dir, port, true);
    let pid = listener(port);
    let url = format!("http://127.0.0.1:{port}/");
    let t = Instant::now();
    let load = bench(&url, 4, "6s");
    at(t, 1.5);
    let r = nodelay(&[&pid.to_string(), "off"]);
    assert_eq!((r.code, r.err.as_str()), (0, ""), "{}", r.out);
    let head = r.out.lines().next().unwrap();
    let want = format!(
        "pid {pid} java: TCP_NODELAY off set live: 4 sockets switched (0 listening, 4 established), 1 already off"
    );
    assert_eq!(head, want, "{}", r.out);
    // Java listens on the IPv6 socket, 127.0.0.1 mapped: [::ffff:127.0.0.1]:PORT.
    let listen = format!("127.0.0.1]:{port} *:*");
    let is_listen = |l: &&str| l.contains(" listen ") && l.contains(&listen);
    assert!(r.out.lines().any(|l| is_listen(&l) && l.ends_with(" off    off    already")), "{}", r.out);
    let est = r.out.lines().filter(|l| l.contains(" established ") && l.ends_with(" on     off    switched")).count();
    assert_eq!(est, 4, "{}", r.out);
    assert!(r.out.contains(&format!("previous values saved in /run/tcpdoctor/{pid}-")), "{}", r.out);
    assert!(r.out.contains("unless the server sets the option itself on each connection"), "{}", r.out);
    at(t, 3.5);
    let back = nodelay_json(&[&pid.to_string(), "restore"]);
    let restored = rows(&back, "accepted", "restored");
    assert_eq!(restored.len(), 4, "{:#}", back["sockets"]);
    assert!(restored.iter().all(|s| s["before"] == false && s["after"] == true && s["previous"] == true));
    assert_eq!(rows(&back, "listening", "unchanged").len(), 1, "off → off: {:#}", back["sockets"]);
    let b = load.join().unwrap();
    assert_no_errors(&b);
    let (before, during, after) = (p50_at(&b, 0), p50_at(&b, 2), p50_at(&b, 4));
    assert!(before < 1.0 && during > 30.0 && after < 1.0, "p50 {before} → {during} → {after} ms");
    assert!(state_files(pid).is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

/// Over HTTPS the same experiment: the lab's Nagle server speaking TLS (header
/// and body as two records), its CA given with --cacert.
#[test]
fn diagnose_try_nodelay_over_https() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let (lab_proc, rows) = common::lab_rows(&[]);
    let row = rows.iter().find(|r| r["name"] == "nagle-tls").unwrap_or_else(|| panic!("{rows:#?}"));
    let (url, ca) = (row["url"].as_str().unwrap(), row["cacert"].as_str().unwrap());
    assert!(url.starts_with("https://"), "{url}");
    let out = common::tcpdoctor()
        .args(["diagnose", url, "--cacert", ca, "--try-nodelay", "-d", "1s", "--json"])
        .output()
        .unwrap();
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!((out.status.code(), &v["verdict"]["cause"]), (Some(1), &Value::from("nagle_delayed_ack")), "{v:#}");
    assert!(v["load"]["tls"]["version"].as_str().unwrap().starts_with("TLSv1."), "{:#}", v["load"]);
    let t = &v["try_nodelay"];
    assert!(t["not_run"].is_null(), "{t:#}");
    assert_eq!((&t["pid"], &t["port"], &t["listening"]), (&lab_proc.0.id().into(), &port_of(url).into(), &1.into()));
    let (before, after) = (t["before"]["p50_ms"].as_f64().unwrap(), t["after"]["p50_ms"].as_f64().unwrap());
    assert!(before > 30.0 && after < 1.0, "p50 {before} → {after} ms");
    assert_eq!(t["load"]["tls"]["version"], v["load"]["tls"]["version"], "the second load spoke TLS too");
    let (sb, sa) = (t["before"]["stalls"].as_u64().unwrap(), t["after"]["stalls"].as_u64().unwrap());
    // Per request, as above (the server resets the option on each connection).
    let per_request = |side: &str, stalls: u64| stalls as f64 / t[side]["requests"].as_u64().unwrap().max(1) as f64;
    let (rb, ra) = (per_request("before", sb), per_request("after", sa));
    assert!(sb > 50 && rb > 0.5 && ra * 20.0 < rb, "stalls captured {sb} → {sa}, per request {rb:.3} → {ra:.4}");
    assert_eq!((&t["restored"], &t["after"]["errors"]), (&true.into(), &0.into()), "{t:#}");
    assert!(t["proof"].as_str().unwrap().ends_with(" µs; restored"), "{t:#}");
    assert!(!listening_nodelay(port_of(url)));
    assert!(state_files(lab_proc.0.id()).is_empty());
}

/// `diagnose --try-nodelay` asked to stop (SIGTERM, as Ctrl-C's SIGINT)
/// during its second load ends that load early and still restores.
#[test]
fn diagnose_try_nodelay_stopped_by_sigterm_still_restores() {
    if !require_root() || !require("python3") {
        return;
    }
    let _g = serial();
    let server = py("nodelay-term");
    let (port, pid, url) = (server.port, server.pid, server.url.clone());
    let (mut diag, out, mut seen) = diagnose_until_switched(&url, pid);
    assert!(listening_nodelay(port), "{seen:#?}");
    let t = Instant::now();
    // SAFETY: kill(2) on the PID of the child this test started, not yet reaped.
    unsafe { libc::kill(diag.0.id() as libc::pid_t, libc::SIGTERM) };
    seen.extend(out.map(|l| l.unwrap()));
    let code = diag.0.wait().unwrap().code();
    let text = seen.join("\n");
    assert_eq!(code, Some(1), "the verdict's code: {text}");
    assert!(t.elapsed() < Duration::from_secs(3), "the second 5 s load was cut short: {:?}", t.elapsed());
    assert!(text.contains("\n[try] restored: 1 socket put back to TCP_NODELAY off"), "{text}");
    assert!(text.contains("interrupted (Ctrl-C, SIGTERM or SIGHUP): the load with TCP_NODELAY ran short"), "{text}");
    assert!(!listening_nodelay(port));
    assert!(state_files(pid).is_empty());
}
