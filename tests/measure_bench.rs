//! `tcpdoctor bench` against real servers started here: the lab's
//! write-write-read server with and without TCP_NODELAY, Debian's nginx, and
//! servers that never answer, reset, send garbage, chunk, speak HTTP/1.0 or die.

mod common;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Proc, free_port, wait_listening};

/// A server process, stopped by PID when dropped.
struct Server {
    p: Proc,
    port: u16,
}

/// Starts a lab script (tests/data/lab) with its arguments; the port is added.
fn lab(script: &str, args: &[&str]) -> Server {
    let port = free_port();
    let child = Command::new("python3")
        .arg(common::data("lab").join(script))
        .args(["--port", &port.to_string(), "--max-seconds", "60"])
        .args(args)
        .stdout(Stdio::null())
        .spawn()
        .expect("python3");
    let mut p = Proc(child);
    wait_listening(port, &mut p);
    Server { p, port }
}

/// Runs `tcpdoctor bench ARGS --json URL`, which must measure something; returns the report and the wall time.
fn bench(port: u16, args: &[&str]) -> (Value, Duration) {
    let (out, took) = bench_run(port, args);
    assert!(out.status.success(), "bench {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    (serde_json::from_slice(&out.stdout).expect("JSON"), took)
}

/// Runs `tcpdoctor bench ARGS --json URL` that measures nothing: exit 5, the report still
/// printed, and one line on stderr that says why; returns the report, that line and the wall time.
fn bench_nothing(port: u16, args: &[&str]) -> (Value, String, Duration) {
    let (out, took) = bench_run(port, args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(5), "bench {args:?}: {err}");
    assert!(err.starts_with("tcpdoctor: nothing measured: ") && err.lines().count() == 1, "{err}");
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(r["requests"], 0, "{r:#}");
    assert_eq!(r["nothing_measured"].as_str(), err.trim_end().strip_prefix("tcpdoctor: nothing measured: "));
    (r, err, took)
}

fn bench_run(port: u16, args: &[&str]) -> (std::process::Output, Duration) {
    let url = format!("http://127.0.0.1:{port}/");
    let t = Instant::now();
    let out =
        Command::new(env!("CARGO_BIN_EXE_tcpdoctor")).arg("bench").args(args).args(["--json", &url]).output().unwrap();
    (out, t.elapsed())
}

fn f(v: &Value, path: &str) -> f64 {
    path.split('.').fold(v, |v, k| &v[k]).as_f64().unwrap_or_else(|| panic!("{path} missing in {v:#}"))
}

fn notes(v: &Value) -> String {
    v["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect::<Vec<_>>().join("\n")
}

#[test]
fn nagle_server_stalls_about_40ms_and_quickack_removes_it() {
    let s = lab("wwr_server.py", &["--mode", "wwr"]);
    let (r, _) = bench(s.port, &["-t1", "-c4", "-d2s"]);
    let p50 = f(&r, "latency.p50");
    assert!((38.0..=52.0).contains(&p50), "p50 {p50} ms: {r:#}");
    assert!(f(&r, "max_read_gap.p50") >= 35.0, "{r:#}");
    assert!(f(&r, "time_to_first_byte.p50") < 5.0, "header should come at once: {r:#}");
    let n = notes(&r);
    assert!(n.contains("delayed-ACK") && n.contains("TCP_NODELAY on the server"), "{n}");

    let (q, _) = bench(s.port, &["-t1", "-c4", "-d2s", "--quickack"]);
    let p50 = f(&q, "latency.p50");
    assert!(p50 < 1.0, "with --quickack p50 is {p50} ms: {q:#}");
    assert!(notes(&q).is_empty(), "{}", notes(&q));
}

#[test]
fn nodelay_server_answers_in_under_a_millisecond() {
    let s = lab("wwr_server.py", &["--mode", "wwr", "--nodelay"]);
    let (r, _) = bench(s.port, &["-t1", "-c2", "-d2s"]);
    assert!(f(&r, "latency.p50") < 1.0, "{r:#}");
    assert!(f(&r, "requests") > 500.0, "{r:#}");
    assert_eq!(f(&r, "errors.read") + f(&r, "errors.timeout") + f(&r, "errors.malformed"), 0.0, "{r:#}");
    assert_eq!(r["status_codes"]["200"].as_u64(), r["requests"].as_u64());
}

#[test]
fn every_connection_is_used_when_c_is_not_a_multiple_of_t() {
    let s = lab("wwr_server.py", &["--mode", "single", "--nodelay"]);
    let (r, _) = bench(s.port, &["-t3", "-c5", "-d1s"]);
    // Keep-alive: each connection connects once.
    assert_eq!(f(&r, "connect.count"), 5.0, "{r:#}");
    assert_eq!(f(&r, "threads"), 3.0);
}

#[test]
fn fixed_rate_sends_that_many_requests() {
    let s = lab("wwr_server.py", &["--mode", "single", "--nodelay"]);
    let (r, _) = bench(s.port, &["-t1", "-c4", "-d2s", "-R", "200"]);
    let n = f(&r, "requests");
    // Never more than the rate; fewer only when a loaded machine slows the Python server.
    assert!((300.0..=404.0).contains(&n), "{n} requests at 200/s for 2 s");
    // Each connection sends every 20 ms; a server that keeps up answers well within that, so
    // latency (counted from when each request was due) stays below it. A loaded machine slows
    // the Python server to a few ms, never to 20.
    assert!(f(&r, "latency.p50") < 20.0, "{r:#}");
}

#[test]
fn fixed_rate_counts_time_waiting_behind_a_slow_server() {
    // 45 ms think time, 1 connection asked for 100 requests/s: the server can do ~22/s,
    // so with coordinated-omission correction latency grows far past the think time.
    let s = lab("wwr_server.py", &["--mode", "think", "--nodelay"]);
    let (r, _) = bench(s.port, &["-t1", "-c1", "-d2s", "-R", "100"]);
    assert!(f(&r, "latency.max") > 400.0, "{r:#}");
    assert!(f(&r, "time_to_first_byte.p50") > 45.0, "{r:#}");
}

#[test]
fn client_side_nagle_with_split_writes() {
    let s = lab("wwr_server.py", &["--mode", "single", "--nodelay"]);
    let body = "x".repeat(200);
    let (r, _) = bench(
        s.port,
        &["-t1", "-c2", "-d2s", "--method", "POST", "--body", &body, "--split-writes", "--nodelay", "off"],
    );
    assert!(f(&r, "latency.p50") >= 35.0, "{r:#}");
    assert!(notes(&r).contains("client-side Nagle"), "{}", notes(&r));
    let (ok, _) = bench(s.port, &["-t1", "-c2", "-d1s", "--method", "POST", "--body", &body, "--split-writes"]);
    assert!(f(&ok, "latency.p50") < 5.0, "with TCP_NODELAY on the client: {ok:#}");
}

#[test]
fn silent_server_gives_counted_timeouts_exit_5_and_the_run_ends_on_time() {
    let s = lab("odd_server.py", &["--mode", "silent"]);
    let (r, err, took) = bench_nothing(s.port, &["-t1", "-c3", "-d2s", "--timeout", "500ms"]);
    assert!(f(&r, "errors.timeout") >= 6.0, "{r:#}");
    assert!(notes(&r).contains("never answered"), "{}", notes(&r));
    // Connections were made: the line says the server took them and never answered, not "unable to connect".
    let accepted = f(&r, "connect.count");
    assert!(accepted >= 3.0, "{r:#}");
    let want = format!("accepted {accepted} connections but sent no complete response within 500 ms");
    assert!(err.contains(&want), "{err}");
    assert!(took < Duration::from_millis(2500 + 500), "took {took:?}");
}

#[test]
fn resets_garbage_chunked_and_http10() {
    let reset = lab("odd_server.py", &["--mode", "reset"]);
    let (r, err, _) = bench_nothing(reset.port, &["-t1", "-c2", "-d1s"]);
    assert!(f(&r, "errors.read") > 0.0, "{r:#}");
    assert!(err.contains("before a complete response"), "{err}");

    let garbage = lab("odd_server.py", &["--mode", "garbage"]);
    let (r, err, _) = bench_nothing(garbage.port, &["-t1", "-c2", "-d1s"]);
    assert!(f(&r, "errors.malformed") > 0.0, "{r:#}");
    assert!(err.contains("no valid HTTP/1.x response"), "{err}");

    let chunked = lab("odd_server.py", &["--mode", "chunked"]);
    let (r, _) = bench(chunked.port, &["-t1", "-c2", "-d1s"]);
    assert!(f(&r, "requests") > 100.0, "{r:#}");
    assert_eq!(f(&r, "errors.malformed") + f(&r, "errors.read") + f(&r, "errors.timeout"), 0.0, "{r:#}");

    let old = lab("odd_server.py", &["--mode", "http10"]);
    let (r, _) = bench(old.port, &["-t1", "-c2", "-d1s"]);
    let n = f(&r, "requests");
    assert!(n > 50.0, "{r:#}");
    assert_eq!(f(&r, "errors.read") + f(&r, "errors.timeout"), 0.0, "{r:#}");
    // The server closes after every response: one connection per request (± the ones open at the end).
    assert!((f(&r, "connect.count") - n).abs() <= 2.0, "{r:#}");
}

#[test]
fn no_keepalive_opens_a_connection_per_request() {
    let s = lab("wwr_server.py", &["--mode", "single", "--nodelay"]);
    let (r, _) = bench(s.port, &["-t1", "-c2", "-d1s", "--no-keepalive"]);
    let n = f(&r, "requests");
    assert!(n > 50.0, "{r:#}");
    assert!((f(&r, "connect.count") - n).abs() <= 2.0, "{r:#}");
    assert_eq!(r["options"]["keepalive"], Value::Bool(false));
}

#[test]
fn server_killed_during_the_run() {
    let mut s = lab("wwr_server.py", &["--mode", "single", "--nodelay"]);
    let pid = s.p.0.id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        // By PID: the server this test started.
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    });
    let (r, took) = bench(s.port, &["-t1", "-c4", "-d2s", "--timeout", "1s"]);
    killer.join().unwrap();
    let _ = s.p.0.wait();
    assert!(f(&r, "requests") > 10.0, "{r:#}");
    assert!(f(&r, "errors.connect") + f(&r, "errors.read") > 0.0, "{r:#}");
    assert!(took < Duration::from_secs(3) + Duration::from_millis(500), "took {took:?}");
}

/// Debian's nginx with a config of our own on a free port.
#[test]
fn debian_nginx() {
    if !common::require("nginx") {
        return;
    }
    let dir = tempdir();
    let port = free_port();
    let conf = dir.join("nginx.conf");
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    std::fs::write(
        &conf,
        format!(
            "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/logs/error.log;
events {{ worker_connections 256; }}
http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;
uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"hello\"; }} location /missing {{ return 404; }} }} }}",
            d = dir.display()
        ),
    )
    .unwrap();
    let nginx = if Path::new("/usr/sbin/nginx").exists() { "/usr/sbin/nginx" } else { "nginx" };
    let child = Command::new(nginx)
        .args(["-c", conf.to_str().unwrap(), "-p", dir.to_str().unwrap()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut s = Server { p: Proc(child), port };
    wait_listening(port, &mut s.p);
    let (r, _) = bench(s.port, &["-t2", "-c10", "-d1s", "--latency"]);
    assert!(f(&r, "requests") > 1000.0, "{r:#}");
    assert_eq!(f(&r, "errors.connect") + f(&r, "errors.read") + f(&r, "errors.malformed"), 0.0, "{r:#}");
    assert!(f(&r, "latency.p50") < 5.0, "{r:#}");
    let out = Command::new(env!("CARGO_BIN_EXE_tcpdoctor"))
        .args(["bench", "-t1", "-c2", "-d500ms", &format!("http://127.0.0.1:{port}/missing")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Non-2xx or 3xx responses:") && text.contains("Requests/sec:"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tcpdoctor-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn bad_urls_fail_with_one_line_code_2_and_unknown_hosts_3() {
    for (url, what, code) in [
        ("ftp://127.0.0.1/", "unknown scheme", 2),
        ("http://127.0.0.1:0/", "port 0", 2),
        ("http://127.0.0.1:http/", "bad port", 2),
        ("http://no.such.host.invalid/", "resolve", 3),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tcpdoctor")).args(["bench", "-d1s", url]).output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{url}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(what) && err.lines().count() == 1, "{err}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tcpdoctor")).args(["bench", "-d", "5 parsecs", "http://x/"]).output();
    assert_eq!(out.unwrap().status.code(), Some(2));
}

#[test]
fn ctrl_c_prints_the_results_so_far_and_nothing_goes_to_a_pipe_meanwhile() {
    let s = lab("wwr_server.py", &["--mode", "single", "--nodelay"]);
    let url = format!("http://127.0.0.1:{}/", s.port);
    let t = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_tcpdoctor"))
        .args(["bench", "-t1", "-c2", "-d20s", "--json", &url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    // SIGINT to the bench we started, by PID (what Ctrl-C sends).
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "no progress line when stderr is not a terminal: {:?}", out.stderr);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["interrupted"], Value::Bool(true));
    assert!(f(&r, "requests") > 10.0 && f(&r, "elapsed_s") < 3.0, "{r:#}");
}

#[test]
fn progress_line_on_a_terminal() {
    if !common::require("script") {
        return;
    }
    let s = lab("wwr_server.py", &["--mode", "single", "--nodelay"]);
    let cmd = format!("{} bench -t1 -c1 -d2200ms http://127.0.0.1:{}/", env!("CARGO_BIN_EXE_tcpdoctor"), s.port);
    // `script` gives the command a pseudo-terminal.
    let out = Command::new("script").args(["-qec", &cmd, "/dev/null"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1s/2s  ") && text.contains(" requests  ") && text.contains("req/s"), "{text:?}");
    assert!(text.contains("Requests/sec:"), "{text:?}");
}

#[test]
fn refused_connects_are_counted_with_their_reason_and_exit_5() {
    let port = free_port(); // nothing listens there
    let (r, err, took) = bench_nothing(port, &["-t1", "-c2", "-d1s"]);
    assert!(f(&r, "errors.connect") > 10.0, "{r:#}");
    assert!(notes(&r).contains("Connection refused"), "{}", notes(&r));
    // As wrk's "unable to connect", with the first connect error.
    assert!(err.contains(&format!("unable to connect to 127.0.0.1:{port}: Connection refused")), "{err}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // The text report is printed too, before that line.
    let out = Command::new(env!("CARGO_BIN_EXE_tcpdoctor"))
        .args(["bench", "-t1", "-c1", "-d300ms", &format!("http://127.0.0.1:{port}/")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 requests in"), "{out:?}");
}

/// `strace -e inject=…:error=ENOSYS` makes the kernel seem to lack a call: bench
/// falls back from epoll_pwait2 (Linux >= 5.11) to epoll_pwait and measures as
/// usual; when every epoll wait fails it measures nothing and says so (exit 5).
#[test]
fn without_epoll_pwait2_bench_falls_back_and_without_any_wait_exits_5() {
    if !common::require("strace") {
        return;
    }
    let s = lab("wwr_server.py", &["--mode", "wwr"]);
    let url = format!("http://127.0.0.1:{}/", s.port);
    let strace = |inject: &str| {
        let mut c = Command::new("strace");
        c.args(["-f", "-qq", "-o", "/dev/null", "-e", &format!("inject={inject}:error=ENOSYS")])
            .arg(env!("CARGO_BIN_EXE_tcpdoctor"))
            .args(["bench", "-t1", "-c2", "-d2s", "--json", &url]);
        common::run_bounded(c, Duration::from_secs(20)).0
    };
    let out = strace("epoll_pwait2");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let p50 = f(&r, "latency.p50");
    assert!((38.0..=52.0).contains(&p50) && f(&r, "requests") > 20.0, "p50 {p50} ms: {r:#}");

    let out = strace("epoll_pwait2,epoll_pwait,epoll_wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.lines().count() == 1 && err.contains("nothing measured") && err.contains("epoll"), "{err}");
    assert!(out.stdout.is_empty(), "no report of a run that could not count: {:?}", out.stdout);
}

#[test]
fn too_few_file_descriptors_is_one_line_with_what_to_do() {
    let cmd =
        format!("ulimit -n 64 && exec {} bench -t1 -c500 -d1s http://127.0.0.1:9/", env!("CARGO_BIN_EXE_tcpdoctor"));
    let out = Command::new("sh").args(["-c", &cmd]).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ulimit -n 564") && err.lines().count() == 1, "{err}");
}
