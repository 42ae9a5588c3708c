//! `diagnose`, `lab` and `demo` against real servers started here on
//! loopback: our lab servers, Debian's nginx (`tcp_nodelay off`/`on`), the
//! JDK HttpServer (default and with its flag), Python's http.server speaking
//! HTTP/1.1, and a Go net/http server. Every process is stopped by its PID.

mod common;

use common::{Proc, free_port, javac, jdk, lab, port_of, tmpdir, url_of, wait_listening};
use serde_json::Value;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Duration;

/// Diagnoses measure latency: two at once on two cores would disturb each other.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn bin() -> Command {
    common::tcpdoctor()
}

/// Runs `diagnose URL --json ARGS…`; returns the exit code and the record.
fn diagnose(url: &str, args: &[&str]) -> (i32, Value) {
    let out = bin().args(["diagnose", url, "--json"]).args(args).output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code().unwrap_or(-1), v)
}

fn cause(v: &Value) -> &str {
    v["verdict"]["cause"].as_str().unwrap()
}

fn fixes(v: &Value) -> String {
    v["verdict"]["fix"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect::<Vec<_>>().join("\n")
}

/// A Nagle verdict on the server at `port`, ~40 ms lost per request; as
/// root, confirmed by the capture.
fn assert_nagle(code: i32, v: &Value, port: u16) {
    assert_nagle_as(code, v, port, root());
}

fn assert_nagle_as(code: i32, v: &Value, port: u16, captured: bool) {
    assert_eq!(cause(v), "nagle_delayed_ack", "{v:#}");
    assert_eq!(code, 1);
    let lost = v["verdict"]["lost_per_request_ms"].as_f64().unwrap();
    assert!((30.0..60.0).contains(&lost), "lost {lost} ms");
    assert!(v["verdict"]["nagle_side"].as_str().unwrap().contains(&format!(":{port} (server)")), "{v:#}");
    assert!(v["verdict"]["delayed_ack_side"].as_str().unwrap().contains("client"));
    let load = v["load"]["latency"]["p50"].as_f64().unwrap();
    let alone = v["alone"]["latency"]["p50"].as_f64().unwrap();
    assert!(load > 30.0 && alone < 10.0, "load {load} ms, alone {alone} ms");
    assert!(v["quickack"]["latency"]["p50"].as_f64().unwrap() < 10.0, "quick-ACK run still slow");
    if captured {
        // The packets confirm it: held segments of that server, delayed ACKs of the client.
        let n = nagle_in_capture(v).unwrap_or_else(|| panic!("no Nagle finding in the capture: {:#}", v["capture"]));
        assert!(n["stalls"].as_u64().unwrap() >= 10, "{n:#}");
        assert!(n["nagle_side"]["endpoint"].as_str().unwrap().ends_with(&format!(":{port}")));
        assert_eq!(n["nagle_side"]["role"], "server");
        assert_eq!(v["verdict"]["confidence"], "high");
        // And the server's own sockets: Nagle on.
        assert!(v["server"]["nagle_on"].as_u64().unwrap() >= 1, "{:#}", v["server"]);
        assert!(v["verdict"]["evidence"].to_string().contains("step 5"));
        // And its own calls, traced beside the load: write-write-read.
        let t = &v["server"]["trace"];
        assert_eq!(t["found"], true, "{t:#}");
        assert!(v["verdict"]["evidence"].to_string().contains("write-write-read"), "{:#}", v["verdict"]);
        // With eBPF (chosen when it loads), the kernel's own account: the pieces held by Nagle.
        assert_eq!(t["method"], "ebpf", "{t:#}");
        assert!(t["overhead"].is_null() && t["cost"]["records"].as_u64().unwrap() > 0, "{t:#}");
        assert_eq!(t["kernel_confirms"], true, "{t:#}");
        let held = t["kernel_hold"]["nagle_median_ms"].as_f64().unwrap_or_else(|| panic!("{t:#}"));
        assert!((30.0..60.0).contains(&held), "{t:#}");
        assert!(v["verdict"]["evidence"].to_string().contains("by Nagle until the peer's ACK (median "), "{v:#}");
    }
}

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn nagle_in_capture(v: &Value) -> Option<&Value> {
    v["capture"]["findings"].as_array()?.iter().find(|f| f["kind"] == "nagle_delayed_ack")
}

fn assert_healthy(code: i32, v: &Value) {
    assert_eq!(cause(v), "none", "{v:#}");
    assert_eq!(code, 0);
    assert!(v["verdict"]["fix"].as_array().unwrap().is_empty());
    assert!(v["load"]["latency"]["p50"].as_f64().unwrap() < 10.0);
    if root() {
        assert!(v["capture"]["packets"].as_u64().unwrap() > 100, "{:#}", v["capture"]);
        assert!(nagle_in_capture(v).is_none(), "{:#}", v["capture"]);
        assert_eq!(v["server"]["nagle_on"], 0, "{:#}", v["server"]);
        assert!(v["server"]["established"].as_u64().unwrap() >= 1, "{:#}", v["server"]);
        // Traced: responses seen, none with the stall's shape.
        let t = &v["server"]["trace"];
        assert!(t["found"] == false && t["responses"].as_u64().unwrap() > 0, "{t:#}");
        // And by the kernel's account no write waited for an ACK.
        assert_eq!(t["method"], "ebpf", "{t:#}");
        assert_eq!(t["kernel_hold"]["nagle"], 0, "{t:#}");
    }
}

#[test]
fn lab_servers_nagle_control_and_think_decoy() {
    let _g = serial();
    let (p, servers) = lab(&[]);
    let nagle = url_of(&servers, "nagle");
    let (code, v) = diagnose(nagle, &[]);
    assert_nagle(code, &v, port_of(nagle));
    // Two independent experiments agree at least.
    assert!(v["verdict"]["evidence"].as_array().unwrap().len() >= 2, "{v:#}");

    // The text: a line per step in the method's order, then the verdict, evidence and fix.
    let out = bin().args(["diagnose", nagle]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let mut want = vec!["[1/6] TCP round trip", "[2/6] Alone", "[2/6] Under load", "[3/6] Quick-ACK A/B"];
    if root() {
        want.extend(["[4/6] Capture", "[5/6] Server process"]);
    }
    want.extend(["VERDICT (", "Nagle + delayed ACK", "Lost per request:", "EVIDENCE", "FIX"]);
    let mut at = 0;
    for w in want {
        let i = text[at..].find(w).unwrap_or_else(|| panic!("{w:?} missing or out of order in:\n{text}"));
        at += i + w.len();
    }

    let (code, v) = diagnose(url_of(&servers, "nodelay"), &[]);
    assert_healthy(code, &v);

    // 45 ms of think time is application latency, never Nagle.
    let (code, v) = diagnose(url_of(&servers, "think"), &[]);
    assert_eq!(cause(&v), "app_latency", "{v:#}");
    assert_eq!(code, 1);
    let lost = v["verdict"]["lost_per_request_ms"].as_f64().unwrap();
    assert!((40.0..60.0).contains(&lost), "{lost}");
    assert!(v["quickack"].is_null(), "the experiment is not needed when alone is as slow as load");

    // Ctrl-C stops lab, and its servers with it.
    let ports: Vec<u16> = servers.iter().map(|(_, u)| port_of(u)).collect();
    assert!(p.interrupt(Duration::from_secs(5)).success());
    for port in ports {
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "port {port} still open");
    }
}

/// Whether `s` has an SGR (colour or weight) escape: ESC [ digits and `;` then `m`.
fn has_sgr(s: &str) -> bool {
    s.split("\x1b[").skip(1).any(|rest| {
        let end = rest.find(|c: char| !c.is_ascii_digit() && c != ';');
        end.is_some_and(|i| rest[i..].starts_with('m'))
    })
}

/// On a terminal the load steps draw bench's progress bar on stderr, in no colour under
/// `NO_COLOR`; into a pipe there is none.
#[test]
fn load_steps_show_a_progress_bar_on_a_terminal_only() {
    if !common::require("script") {
        return;
    }
    assert!(has_sgr("a\x1b[1;31mb") && !has_sgr("\x1b[2K\x1b[1A"), "the SGR check itself");
    let _g = serial();
    let (_p, servers) = lab(&[]);
    let nagle = url_of(&servers, "nagle");
    let cmd = format!("{} diagnose {nagle} --no-capture --no-inspect", env!("CARGO_BIN_EXE_tcpdoctor"));
    // `script` gives the command a pseudo-terminal; its stdout and stderr both land in the output.
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("TERM", "xterm")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // The 2 s load and the 1.5 s quick-ACK run, each with its bar, then the step lines.
    // (`░` is indicatif's empty bar.)
    assert!(text.contains("  load ░") && text.contains("1s/2s  ") && text.contains(" req/s"), "{text:?}");
    assert!(text.contains("  quick-ACK ░"), "{text:?}");
    assert!(text.contains("[2/6] Under load") && text.contains("[3/6] Quick-ACK A/B"), "{text:?}");
    assert!(!has_sgr(&text), "NO_COLOR: cursor moves only, no colour: {text:?}");
    let piped = bin().args(["diagnose", nagle, "--no-capture", "--no-inspect"]).output().unwrap();
    let err = String::from_utf8_lossy(&piped.stderr);
    assert!(!err.contains("req/s") && !err.contains('\x1b'), "no bar into a pipe: {err:?}");
}

#[test]
fn nginx_tcp_nodelay_off_stalls_and_on_does_not() {
    if !common::require("nginx") {
        return;
    }
    let _g = serial();
    let (p, servers) = lab(&["--nginx"]);
    let (off, on) = (url_of(&servers, "nginx-nodelay-off"), url_of(&servers, "nginx-nodelay-on"));
    let pids: Vec<u32> = ["nginx-nodelay-off", "nginx-nodelay-on"].iter().map(|n| nginx_pid(n, off, on)).collect();
    let out = bin().args(["diagnose", off, "--json"]).output().unwrap();
    let dir = tmpdir("nginx");
    let saved = dir.join("before.json");
    std::fs::write(&saved, &out.stdout).unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_nagle(out.status.code().unwrap(), &v, port_of(off));
    assert!(v["server_header"].as_str().unwrap().starts_with("nginx"));
    assert!(fixes(&v).lines().next().unwrap().contains("tcp_nodelay on;"), "{}", fixes(&v));
    if root() {
        assert_eq!(v["server"]["software"], "nginx");
        assert_eq!(v["server"]["nodelay_setting"], false, "nginx -T read: {:#}", v["server"]);
    }
    let (code, v) = diagnose(on, &[]);
    assert_healthy(code, &v);

    // --verify: before and after side by side, exit 0 when fixed.
    let out = bin().args(["diagnose", off, "--verify", on]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("BEFORE / AFTER") && text.contains("FIXED: median latency under load"), "{text}");

    // Re-run after a fix, against the record saved before it.
    let (code, v) = diagnose(on, &["--before", saved.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["comparison"]["fixed"], true);
    assert_eq!(v["comparison"]["before"]["cause"], "nagle_delayed_ack");
    assert!(v["comparison"]["speedup_p50"].as_f64().unwrap() > 10.0);
    // The same file compared with itself (still broken) is not fixed.
    let (code, v) = diagnose(off, &["--before", saved.to_str().unwrap()]);
    assert_eq!((code, &v["comparison"]["fixed"]), (1, &Value::Bool(false)));
    let _ = std::fs::remove_dir_all(dir);

    // SIGTERM to lab (what Proc's drop sends) stops its nginx processes too.
    drop(p);
    for pid in pids {
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "nginx {pid} outlived lab");
    }
}

/// The PID of the nginx serving `name`'s URL: the process listening on its port.
fn nginx_pid(name: &str, off: &str, on: &str) -> u32 {
    let port = port_of(if name.ends_with("off") { off } else { on });
    let out = Command::new("ss").args(["-Hltnp", &format!("sport = :{port}")]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let pid = text.split("pid=").nth(1).and_then(|t| t.split(',').next()).and_then(|p| p.parse().ok());
    pid.unwrap_or_else(|| panic!("no pid in {text:?}"))
}

#[test]
fn jdk_httpserver_default_stalls_and_the_flag_fixes_it() {
    if !common::require("javac") {
        return;
    }
    let _g = serial();
    let dir = tmpdir("jdk");
    javac(&dir);
    let port = free_port();
    let p = jdk(&dir, port, false);
    let url = format!("http://127.0.0.1:{port}/");
    let (code, v) = diagnose(&url, &[]);
    assert_nagle(code, &v, port);
    assert!(fixes(&v).contains("-Dsun.net.httpserver.nodelay=true"), "{}", fixes(&v));
    if root() {
        // Found by its process: the JDK's own knob comes first.
        assert_eq!(v["server"]["software"], "jdk-httpserver", "{:#}", v["server"]);
        assert_eq!(v["server"]["nodelay_setting"], false);
        assert!(fixes(&v).lines().next().unwrap().contains("-Dsun.net.httpserver.nodelay=true"));
    }
    drop(p);
    let port = free_port();
    let _p = jdk(&dir, port, true);
    let (code, v) = diagnose(&format!("http://127.0.0.1:{port}/"), &[]);
    assert_healthy(code, &v);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn python_http_server_with_http11_stalls() {
    if !common::require("python3") {
        return;
    }
    let _g = serial();
    let dir = tmpdir("py");
    std::fs::write(dir.join("index.html"), "x".repeat(600)).unwrap();
    let port = free_port();
    let code = "import functools, http.server as h, sys\n\
                h.SimpleHTTPRequestHandler.protocol_version = 'HTTP/1.1'\n\
                handler = functools.partial(h.SimpleHTTPRequestHandler, directory=sys.argv[2])\n\
                h.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), handler).serve_forever()\n";
    let c = Command::new("timeout")
        .args(["120", "python3", "-c", code, &port.to_string()])
        .arg(&dir)
        .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let mut p = Proc(c);
    wait_listening(port, &mut p);
    let (code, v) = diagnose(&format!("http://127.0.0.1:{port}/index.html"), &[]);
    if cause(&v) == "unreachable" {
        let log = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
        panic!("the server stopped answering (exit status {:?}); its stderr:\n{log}", p.0.try_wait());
    }
    assert_nagle(code, &v, port);
    assert!(v["server_header"].as_str().unwrap().contains("Python"));
    assert!(fixes(&v).lines().next().unwrap().contains("disable_nagle_algorithm = True"), "{}", fixes(&v));
    let _ = std::fs::remove_dir_all(dir);
}

fn go() -> Option<PathBuf> {
    let on_path = Command::new("sh").args(["-c", "command -v go"]).output().ok().filter(|o| o.status.success());
    if let Some(o) = on_path {
        return Some(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    }
    let local = PathBuf::from("/usr/local/go/bin/go");
    if local.is_file() {
        return Some(local);
    }
    common::require("go");
    None
}

#[test]
fn go_net_http_has_nothing_to_find() {
    let Some(go) = go() else { return };
    let _g = serial();
    let dir = tmpdir("go");
    let exe = dir.join("goserver");
    let built = Command::new(&go)
        .arg("build")
        .arg("-o")
        .arg(&exe)
        .arg(common::data("lab/goserver.go"))
        .env("GOFLAGS", "-mod=mod")
        .env("GO111MODULE", "off")
        .env("GOCACHE", dir.join("cache"))
        .env("HOME", &dir)
        .output()
        .unwrap();
    assert!(built.status.success(), "go build: {}", String::from_utf8_lossy(&built.stderr));
    let port = free_port();
    let c = Command::new(&exe).args([&format!("127.0.0.1:{port}"), "120"]).spawn().unwrap();
    let mut p = Proc(c);
    wait_listening(port, &mut p);
    let (code, v) = diagnose(&format!("http://127.0.0.1:{port}/"), &[]);
    assert_healthy(code, &v);
    if root() {
        // Found by its process, and recognised from the binary's Go build info.
        assert_eq!(v["server"]["software"], "go", "{:#}", v["server"]);
        assert_eq!(v["server"]["nagle_on"], 0, "{:#}", v["server"]);
    }
    drop(p);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_port_nobody_listens_on_is_closed() {
    let _g = serial();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/");
    let (code, v) = diagnose(&url, &[]);
    assert_eq!(cause(&v), "closed", "{v:#}");
    assert_eq!(code, 5);
    assert!(v["verdict"]["summary"].as_str().unwrap().starts_with("Nothing listens on"), "{v:#}");
    assert!(v["verdict"]["evidence"].to_string().contains("Connection refused"), "{v:#}");
    // Step 1: RSTs are no answer from a server, they say the port is closed.
    assert_eq!((v["rtt"]["open"].as_u64(), v["rtt"]["closed"].as_u64()), (Some(0), Some(5)), "{:#}", v["rtt"]);
    assert!(v["load"].is_null());
    let out = bin().args(["diagnose", &url]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "{text}");
    let step1 = text.lines().find(|l| l.starts_with("[1/6]")).unwrap_or_else(|| panic!("{text}"));
    assert!(step1.contains("port closed: 5 of 5 probes answered with RST"), "{step1}");
    assert!(!step1.contains("answered)"), "RSTs counted as answers: {step1}");
}

/// A server that accepts connections and never answers is not "down": the
/// verdict says it accepted and did not answer, and sends nobody to check that it runs.
#[test]
fn a_server_that_accepts_and_never_answers_is_no_response() {
    let _g = serial();
    let port = free_port();
    let c = Command::new("python3")
        .arg(common::data("lab/odd_server.py"))
        .args(["--port", &port.to_string(), "--mode", "silent", "--max-seconds", "60"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut p = Proc(c);
    wait_listening(port, &mut p);
    let (code, v) = diagnose(&format!("http://127.0.0.1:{port}/"), &[]);
    assert_eq!((code, cause(&v)), (5, "no_response"), "{v:#}");
    let summary = v["verdict"]["summary"].as_str().unwrap();
    assert!(summary.contains("accepts connections") && summary.contains("no complete response"), "{summary}");
    assert_eq!(v["rtt"]["open"].as_u64(), Some(5), "{:#}", v["rtt"]);
    let all = format!("{summary}\n{}", fixes(&v));
    assert!(!all.contains("runs and listens") && !all.contains("Start the server"), "{all}");
    assert!(fixes(&v).contains("stuck") || summary.contains("stuck"), "{all}");
}

/// bench's loop waits with epoll_pwait2, which an old kernel or a seccomp profile
/// may lack (`strace -e inject` makes it so): diagnose still finds the stall; and
/// when no epoll wait works at all, the load measured nothing, so there is no
/// verdict: exit 5 and one line saying which step and why.
#[test]
fn without_epoll_pwait2_the_stall_is_still_found_and_without_epoll_there_is_no_verdict() {
    if !common::require("strace") {
        return;
    }
    let _g = serial();
    let (_p, servers) = lab(&[]);
    let nagle = url_of(&servers, "nagle");
    let strace = |inject: &str, json: bool| {
        let mut c = Command::new("strace");
        c.args(["-f", "-qq", "-o", "/dev/null", "-e", &format!("inject={inject}:error=ENOSYS")])
            .arg(env!("CARGO_BIN_EXE_tcpdoctor"))
            .args(["diagnose", "--no-inspect", nagle]);
        if json {
            c.arg("--json");
        }
        common::run_bounded(c, Duration::from_secs(60)).0
    };
    let out = strace("epoll_pwait2", true);
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!((out.status.code(), cause(&v)), (Some(1), "nagle_delayed_ack"), "{v:#}");
    let load = v["load"]["latency"]["p50"].as_f64().unwrap();
    assert!((38.0..52.0).contains(&load), "load p50 {load} ms");

    let out = strace("epoll_pwait2,epoll_pwait,epoll_wait", false);
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(5), "{text}{err}");
    assert!(!text.contains("VERDICT") && !text.contains("No latency problem"), "{text}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("tcpdoctor: step 2 (under load): nothing measured: ") && err.contains("epoll"), "{err}");
    let out = strace("epoll_pwait2,epoll_pwait,epoll_wait", true);
    assert_eq!(out.status.code(), Some(5));
    assert!(out.stdout.is_empty(), "no record without a verdict: {}", String::from_utf8_lossy(&out.stdout));
}

/// A server that stalls under load, then stops answering new connections: the
/// quick-ACK experiment (step 3) gets no response, so it cannot say what the load's
/// excess was. No verdict from the rest: exit 5 and one line naming step 3.
#[test]
fn a_quickack_experiment_that_measured_nothing_gives_no_verdict() {
    if !common::require_root() || !common::require("python3") {
        return;
    }
    let _g = serial();
    let port = free_port();
    // 10 connections for the requests alone and 8 for the load are answered (as root,
    // step 1's raw SYNs are never accepted); the experiment's are not.
    let c = Command::new("python3")
        .arg(common::data("lab/wwr_server.py"))
        .args(["--port", &port.to_string(), "--mode", "wwr", "--answer-connections", "18", "--max-seconds", "60"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut p = Proc(c);
    wait_listening(port, &mut p);
    let url = format!("http://127.0.0.1:{port}/");
    let out = bin().args(["diagnose", &url, "-c", "8", "--no-capture", "--no-inspect"]).output().unwrap();
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(5), "{text}{err}");
    assert!(text.contains("[2/6] Under load      median 4") && !text.contains("VERDICT"), "{text}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let want = "tcpdoctor: step 3 (quick-ACK A/B): nothing measured: the server at";
    assert!(err.starts_with(want) && err.contains("sent no complete response within 1 s"), "{err}");
}

/// A capture on an interface the traffic does not take sees none of the load. Zero
/// packets are no evidence: the capture is left out and NOT CHECKED says why, rather
/// than a "high confidence" verdict leaning on it.
#[test]
fn a_capture_that_saw_none_of_the_load_is_left_out() {
    if !common::require_root() || !common::require("python3") {
        return;
    }
    let _g = serial();
    // A namespace of our own, with its loopback and an idle veth pair.
    let ns = common::Namespaces::new(&["cap"]);
    let n = ns.get(0);
    common::sh(&["ip", "-n", n, "link", "add", "quiet0", "type", "veth", "peer", "name", "quiet1"]);
    common::sh(&["ip", "-n", n, "link", "set", "quiet0", "up"]);
    common::sh(&["ip", "-n", n, "link", "set", "quiet1", "up"]);
    let mut c = Command::new("ip");
    c.args(["netns", "exec", n, "python3"]).arg(common::data("lab/wwr_server.py"));
    c.args(["--port", "18080", "--mode", "wwr", "--nodelay", "--max-seconds", "60"]);
    let (_server, _) = Proc::started(c);
    let out = Command::new("ip")
        .args(["netns", "exec", n])
        .arg(env!("CARGO_BIN_EXE_tcpdoctor"))
        .args(["diagnose", "http://127.0.0.1:18080/", "-i", "quiet0", "--no-inspect", "--json"])
        .output()
        .unwrap();
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!((out.status.code(), cause(&v)), (Some(0), "none"), "{v:#}");
    assert!(v["capture"].is_null(), "{:#}", v["capture"]);
    assert_eq!(v["verdict"]["confidence"], "medium", "{:#}", v["verdict"]);
    let missing = v["missing"].to_string();
    assert!(missing.contains("step 4: no packet of the load was seen on quiet0"), "{missing}");
}

/// Without root the verdict still comes from steps 1-3, and the record says
/// which evidence is missing and why.
#[test]
fn unprivileged_runs_still_conclude_and_say_what_is_missing() {
    if !common::require_root() || !common::require("setpriv") {
        return;
    }
    let _g = serial();
    let (_p, servers) = lab(&[]);
    let nagle = url_of(&servers, "nagle");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(env!("CARGO_BIN_EXE_tcpdoctor"))
        .args(["diagnose", nagle, "--json"])
        .output()
        .unwrap();
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_nagle_as(out.status.code().unwrap(), &v, port_of(nagle), false);
    assert_eq!(v["rtt"]["method"], "connect");
    assert!(v["capture"].is_null() && v["server"].is_null());
    let missing = v["missing"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect::<Vec<_>>().join("\n");
    assert!(missing.contains("step 1") && missing.contains("raw SYN"), "{missing}");
    assert!(missing.contains("step 4: no packet capture") && missing.contains("CAP_NET_RAW"), "{missing}");
    assert!(missing.contains("step 5") && missing.contains("needs ptrace permission"), "{missing}");
}

#[test]
fn lab_on_a_taken_port_fails_in_one_line() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = bin().args(["lab", "-d", "1s", "-p", &port.to_string()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")) && err.contains("in use") && err.lines().count() == 1, "{err}");
}

#[test]
fn lab_without_nginx_says_what_to_do_in_one_line() {
    let out = bin().args(["lab", "--nginx", "--nginx-bin", "/nonexistent/nginx", "-d", "1s"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("/nonexistent/nginx: no such file") && err.lines().count() == 1, "{err}");
    assert!(out.stdout.is_empty(), "no server may be announced: {}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn before_must_be_a_diagnose_record() {
    let dir = tmpdir("before");
    let f = dir.join("x.json");
    std::fs::write(&f, "{\"schema\": 1}").unwrap();
    for (path, want) in [(f.as_path(), "not the output of `diagnose --json`"), (&dir.join("missing"), "No such file")] {
        let out = bin().args(["diagnose", "http://127.0.0.1:9/", "--before"]).arg(path).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want) && err.lines().count() == 1, "{err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_urls_fail_in_one_line() {
    for (args, want, code) in [
        (&["gopher://127.0.0.1/"][..], "unknown scheme", 2),
        (&["http://127.0.0.1:0/"], "port 0", 2),
        (&["http://127.0.0.1:9/", "--verify", "ftp://127.0.0.1/"], "unknown scheme", 2),
        (&["http://no-such-host.invalid/"], "cannot resolve", 3),
    ] {
        let out: Output = bin().arg("diagnose").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(want) && err.lines().count() == 1, "{err}");
    }
}

/// The quick start's first command: (a) stalls, (b) does not, (c) is think
/// time, (d) stalls over HTTPS, and switching (a) to TCP_NODELAY fixes it.
#[test]
fn demo_diagnoses_the_lab_and_verifies_the_fix() {
    let _g = serial();
    let out = bin().args(["demo", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let causes: Vec<&str> = v["cases"].as_array().unwrap().iter().map(|c| cause(&c["diagnosis"])).collect();
    assert_eq!(causes, ["nagle_delayed_ack", "none", "app_latency", "nagle_delayed_ack"]);
    // (d) is (a) over HTTPS: the same stall, between TLS records.
    let d = &v["cases"][3]["diagnosis"];
    assert!(d["url"].as_str().unwrap().starts_with("https://"), "{d:#}");
    assert_eq!(d["load"]["tls"]["version"], "TLSv1.3", "{:#}", d["load"]);
    assert!(d["verdict"]["summary"].as_str().unwrap().contains("TLS records"), "{:#}", d["verdict"]);
    let lost = v["cases"][0]["diagnosis"]["verdict"]["lost_per_request_ms"].as_f64().unwrap();
    assert!((35.0..60.0).contains(&lost), "(a) lost {lost} ms per request");
    assert_eq!(v["fix"]["fixed"], true);
    assert!(v["fix"]["speedup_p50"].as_f64().unwrap() > 10.0, "{}", v["fix"]);
    assert_eq!(v["fix"]["after"]["cause"], "none");
    assert_eq!(cause(&v["after_fix"]), "none");
}
