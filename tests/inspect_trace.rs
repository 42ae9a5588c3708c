//! `inspect --trace` against real servers started here on 127.0.0.1 under
//! `tcpdoctor bench` load: the Python lab server writing each response in
//! two pieces or one, with Nagle on or off; Debian's nginx (a master and a
//! worker) with `tcp_nodelay off`; a process that exits during the trace; a
//! process receiving signals and a job-control stop while traced; an
//! unprivileged run; a process that another tracer holds. After every
//! trace the process must run on untraced and unstopped. Every process is
//! stopped by its PID. These are the ptrace recorder's tests (`--method
//! ptrace`); tests/ebpf_trace.rs runs the eBPF one beside it.

mod common;

use common::traced::{BIN, Bench, assert_untraced, errors, n, nginx, parse, status_field, wwr_server};
use common::{Proc, free_port, run_bounded};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Traces under load share two cores: one at a time keeps their timing honest.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `tcpdoctor inspect ARGS… --json`, bounded: exit code, record (Null when none), stderr.
fn inspect(args: &[&str]) -> (i32, Value, String) {
    let mut c = Command::new(BIN);
    c.arg("inspect").args(args).arg("--json");
    let (out, _) = run_bounded(c, Duration::from_secs(40));
    parse(out)
}

/// The kind row for (role, nagle), if any.
fn kind<'a>(t: &'a Value, role: &str, nagle: &str) -> Option<&'a Value> {
    t["kinds"].as_array().unwrap().iter().find(|k| k["role"] == role && k["nagle"] == nagle)
}

/// A split-write response's shape, call by call.
fn example_calls(t: &Value) -> Vec<String> {
    t["example"]["lines"].as_array().unwrap().iter().map(|l| l["call"].as_str().unwrap().to_string()).collect()
}

#[test]
fn split_writes_with_nagle_are_write_write_read() {
    if !common::require_root() || !common::require("python3") {
        return;
    }
    let _g = serial();
    let (mut srv, port) = wwr_server("wwr", false, 30.0);
    let b = Bench::start(port, 3.5);
    let (code, v, err) = inspect(&[&format!(":{port}"), "--trace", "2s", "--method", "ptrace"]);
    assert_eq!(code, 0, "{err}");
    let t = &v["trace"];
    assert_eq!(t["found"], true, "{t:#}");
    assert!(n(&t["write_write_read"]) >= 10, "{t:#}");
    let k = kind(t, "accepted", "nagle").unwrap_or_else(|| panic!("{t:#}"));
    assert_eq!((n(&k["single"]), n(&k["in_pieces"])), (0, n(&k["responses"])), "{k:#}");
    assert_eq!(t["nagle_in_pieces_fraction"], 1.0);
    // Header and body (sendall → sendto), then the read that waits for the
    // next request: held ~40 ms by the client's delayed ACK.
    assert_eq!(example_calls(t), ["sendto", "sendto", "recvfrom"], "{:#}", t["example"]);
    let first = t["example"]["lines"][0]["text"].as_str().unwrap();
    assert!(first.starts_with("+0.000 sendto fd ") && first.ends_with(" B"), "{first}");
    assert_eq!(t["example"]["nagle"], "nagle");
    let gap = t["gap_wwr_ms"].as_f64().unwrap();
    assert!((25.0..150.0).contains(&gap), "gap {gap} ms");
    // The cost is measured and printed.
    let o = &t["overhead"];
    assert!(n(&o["stops"]) > 100 && o["calibrated_us_per_stop"].as_f64().unwrap() > 0.0, "{o:#}");
    assert!(o["us_per_stop"].as_f64().unwrap() > 0.0 && o["added_ms_per_response"].as_f64().unwrap() > 0.0);
    assert!(o["text"].as_str().unwrap().contains("µs"));
    let advice = v["advice"].as_array().unwrap();
    let first_advice = advice[0].as_str().unwrap();
    assert!(first_advice.contains("write-write-read") && first_advice.contains("Nagle + delayed-ACK"), "{advice:?}");
    assert!(advice[1].as_str().unwrap().contains("TCP_NODELAY"), "{advice:?}");
    // Served traffic kept flowing; the server runs on, untraced.
    let br = b.finish();
    assert_eq!(errors(&br), 0, "{br:#}");
    assert!(n(&br["requests"]) > 20);
    assert!(srv.0.try_wait().unwrap().is_none());
    assert_untraced(srv.0.id(), false);
}

#[test]
fn threads_and_connections_started_during_the_trace_are_followed() {
    if !common::require_root() || !common::require("python3") {
        return;
    }
    let _g = serial();
    // No connection yet: the server starts a thread per connection once the trace runs.
    let (srv, port) = wwr_server("wwr", false, 30.0);
    let pid = srv.0.id();
    let mut ins = Command::new(BIN);
    ins.args(["inspect", &format!(":{port}"), "--trace", "2.5s", "--method", "ptrace", "--json"]);
    let tracer = std::thread::spawn(move || parse(run_bounded(ins, Duration::from_secs(30)).0));
    let t = Instant::now();
    while status_field(pid, &pid.to_string(), "TracerPid:") == "0" {
        assert!(t.elapsed() < Duration::from_secs(10), "not traced");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Bounded well inside the trace: the connections close and their threads exit while traced.
    let b = Bench::start(port, 1.2);
    let br = b.finish();
    let (code, v, err) = tracer.join().unwrap();
    assert_eq!(code, 0, "{err}");
    let t = &v["trace"];
    assert!(n(&t["new_threads"]) >= 4, "{t:#}");
    assert_eq!(t["found"], true, "{t:#}");
    // Each connection's first response is left out (its peer ACKs at once then).
    assert!(n(&t["first_responses"]) >= 4, "{t:#}");
    assert!(t["notes"].to_string().contains("first on a new connection"), "{:#}", t["notes"]);
    assert_eq!(errors(&br), 0, "{br:#}");
    assert_untraced(pid, false);
}

#[test]
fn single_writes_are_not_write_write_read_and_no_trace_without_the_flag() {
    if !common::require_root() || !common::require("python3") {
        return;
    }
    let _g = serial();
    let (srv, port) = wwr_server("single", false, 30.0);
    let b = Bench::start(port, 3.0);
    let (code, v, err) = inspect(&[&srv.0.id().to_string(), "--trace", "1.5s", "--method", "ptrace"]);
    assert_eq!(code, 0, "{err}");
    let t = &v["trace"];
    assert_eq!((t["found"].as_bool(), n(&t["write_write_read"])), (Some(false), 0), "{t:#}");
    let k = kind(t, "accepted", "nagle").unwrap_or_else(|| panic!("{t:#}"));
    assert!(n(&k["single"]) >= 10 && n(&k["in_pieces"]) == 0, "{k:#}");
    assert!(t["text"].as_str().unwrap().contains("one piece"), "{}", t["text"]);
    assert!(t["example"].is_null());
    // Nagle is on, but the trace says it costs nothing with these writes.
    let advice = v["advice"].to_string();
    assert!(!advice.contains("write-write-read") && advice.contains("written in one piece"), "{advice}");
    // Without --trace, no `trace` key at all.
    let (code, v, _) = inspect(&[&srv.0.id().to_string(), "--window", "0"]);
    assert_eq!(code, 0);
    assert!(v.get("trace").is_none(), "{v:#}");
    assert_eq!(errors(&b.finish()), 0);
    assert_untraced(srv.0.id(), false);
}

#[test]
fn split_writes_with_nodelay_are_pieces_but_not_the_stall() {
    if !common::require_root() || !common::require("python3") {
        return;
    }
    let _g = serial();
    let (srv, port) = wwr_server("wwr", true, 30.0);
    let b = Bench::start(port, 3.0);
    let (code, v, err) = inspect(&[&format!(":{port}"), "--trace", "1.5s", "--method", "ptrace"]);
    assert_eq!(code, 0, "{err}");
    let t = &v["trace"];
    assert_eq!((t["found"].as_bool(), n(&t["nagle_responses"])), (Some(false), 0), "{t:#}");
    let k = kind(t, "accepted", "nodelay").unwrap_or_else(|| panic!("{t:#}"));
    // The same two small writes, on sockets with TCP_NODELAY: the shape without the stall.
    assert!(n(&k["in_pieces"]) >= 10 && n(&k["write_write_read"]) == n(&k["in_pieces"]), "{k:#}");
    assert!(kind(t, "accepted", "nagle").is_none(), "{t:#}");
    assert_eq!(t["example"]["nagle"], "nodelay");
    assert_eq!(example_calls(t), ["sendto", "sendto", "recvfrom"]);
    // And nothing waits: the next request follows at once.
    assert!(t["gap_other_ms"].as_f64().unwrap() < 20.0, "{t:#}");
    assert!(t["text"].as_str().unwrap().contains("no response was written with Nagle on"));
    assert!(v["advice"].as_array().unwrap().is_empty(), "{:#}", v["advice"]);
    assert_eq!(errors(&b.finish()), 0);
    assert_untraced(srv.0.id(), false);
}

/// nginx with a master and one worker, `tcp_nodelay on|off`, `sendfile on`.
#[test]
fn nginx_tcp_nodelay_off_master_and_worker_keep_serving() {
    if !common::require_root() || !common::require("nginx") {
        return;
    }
    let _g = serial();
    let dir = common::tmpdir("trace-nginx");
    let port = free_port();
    let master = nginx(&dir, port, false);
    let mpid = master.0.id();
    // A bench run that spans the whole trace, before and after it.
    let b = Bench::start(port, 4.0);
    let (code, v, err) = inspect(&[&format!(":{port}"), "--trace", "2s", "--method", "ptrace"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["process"]["pid"], mpid);
    let workers: Vec<u64> = v["process"]["workers"].as_array().unwrap().iter().map(n).collect();
    assert_eq!(workers.len(), 1, "{:#}", v["process"]);
    let t = &v["trace"];
    let procs: Vec<u64> = t["processes"].as_array().unwrap().iter().map(n).collect();
    assert_eq!(procs, [u64::from(mpid), workers[0]]);
    assert_eq!(t["found"], true, "{t:#}");
    assert!(n(&t["write_write_read"]) >= 10, "{t:#}");
    // nginx: the header with writev, the file with sendfile, then epoll_wait for the next request.
    let calls = example_calls(t);
    assert_eq!(&calls[..2], ["writev", "sendfile"], "{:#}", t["example"]);
    assert!(calls.contains(&"epoll_wait".to_string()), "{calls:?}");
    assert_eq!(n(&t["example"]["pid"]), workers[0]);
    assert!(v["advice"][1].as_str().unwrap().contains("tcp_nodelay on;"), "{:#}", v["advice"]);
    // 0 failed requests during the trace, and it keeps serving after.
    let br = b.finish();
    assert_eq!(errors(&br), 0, "{br:#}");
    for pid in [u64::from(mpid), workers[0]] {
        assert_untraced(pid as u32, false);
    }
    let after = Bench::start(port, 1.0).finish();
    assert!(errors(&after) == 0 && n(&after["requests"]) > 10, "{after:#}");
    drop(master);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tcp_nodelay on`: the same two writes, sent at once, so no stall shape;
/// the text report, and nginx serves on, untraced.
#[test]
fn nginx_tcp_nodelay_on_is_pieces_without_the_stall_in_text() {
    if !common::require_root() || !common::require("nginx") {
        return;
    }
    let _g = serial();
    let dir = common::tmpdir("trace-nginx-on");
    let port = free_port();
    let master = nginx(&dir, port, true);
    let b = Bench::start(port, 4.0);
    let out = Command::new(BIN)
        .args(["inspect", &format!(":{port}"), "--trace", "2s", "--method", "ptrace"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("SUMMARY 0 of "), "{text}");
    let pattern = text.split("WRITE PATTERN traced ").nth(1).unwrap_or_else(|| panic!("no trace section: {text}"));
    assert!(pattern.starts_with("2.0 s with ptrace: "), "{text}");
    assert!(pattern.contains("accepted, TCP_NODELAY:"), "{text}");
    assert!(pattern.contains("no response was written with Nagle on") && pattern.contains("no stall shape"), "{text}");
    assert!(pattern.contains("\n    +0.000 writev fd ") && pattern.contains(" sendfile fd "), "{text}");
    assert!(pattern.contains("\n  cost (ptrace): ") && pattern.contains(" stops ("), "{text}");
    assert!(!text.contains("the trace saw write-write-read"), "{text}");
    let br = b.finish();
    assert_eq!(errors(&br), 0, "{br:#}");
    let v: Value = serde_json::from_slice(
        &Command::new(BIN).args(["inspect", &format!(":{port}"), "--json", "--window", "0"]).output().unwrap().stdout,
    )
    .unwrap();
    for pid in std::iter::once(&v["process"]["pid"]).chain(v["process"]["workers"].as_array().unwrap()) {
        assert_untraced(n(pid) as u32, false);
    }
    let after = Bench::start(port, 1.0).finish();
    assert!(errors(&after) == 0 && n(&after["requests"]) > 10, "{after:#}");
    drop(master);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_process_that_exits_during_the_trace_gives_partial_results() {
    if !common::require_root() || !common::require("python3") {
        return;
    }
    let _g = serial();
    // The server lives 3 s: enough for inspect to find it on a loaded machine.
    let (mut srv, port) = wwr_server("wwr", false, 3.0);
    let b = Bench::start(port, 3.5);
    let t0 = Instant::now();
    let (code, v, err) = inspect(&[&format!(":{port}"), "--trace", "8s", "--method", "ptrace"]);
    assert_eq!(code, 0, "{err}");
    // It returned when the process exited, not after 8 s.
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    let t = &v["trace"];
    assert_eq!((t["exited"].as_bool(), v["process"]["exited"].as_bool()), (Some(true), Some(true)), "{t:#}");
    assert!(t["notes"].to_string().contains("exited"), "{:#}", t["notes"]);
    assert!(n(&t["responses"]) > 0 && t["found"] == true, "{t:#}");
    assert!(t["traced_ms"].as_f64().unwrap() < 6000.0);
    let _ = b.finish();
    assert!(srv.0.try_wait().unwrap().is_some());
}

/// A Python process with a SIGUSR1 handler that counts into a file.
const COUNTER: &str = "import signal, sys, time
n = 0
def h(s, f):
    global n
    n += 1
    open(sys.argv[1], 'w').write(str(n))
signal.signal(signal.SIGUSR1, h)
print('ready', flush=True)
end = time.time() + 30
while time.time() < end:
    time.sleep(0.002)
";

#[test]
fn signals_reach_the_process_and_a_job_control_stop_stays() {
    if !common::require_root() || !common::require("python3") {
        return;
    }
    let _g = serial();
    let file = std::env::temp_dir().join(format!("tcpdoctor-trace-signals-{}", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let mut c = Command::new("python3");
    c.args(["-c", COUNTER]).arg(&file);
    let (p, _) = Proc::started(c);
    let pid = p.0.id();
    let mut ins = Command::new(BIN);
    ins.args(["inspect", &pid.to_string(), "--trace", "2s", "--method", "ptrace", "--json"]);
    let tracer = std::thread::spawn(move || parse(run_bounded(ins, Duration::from_secs(30)).0));
    let t = Instant::now();
    while status_field(pid, &pid.to_string(), "TracerPid:") == "0" {
        assert!(t.elapsed() < Duration::from_secs(10), "not traced");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
    let kill = |sig| {
        // SAFETY: kill(2) on the PID of the child this test started.
        assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0);
    };
    for _ in 0..3 {
        kill(libc::SIGUSR1);
        std::thread::sleep(Duration::from_millis(100));
    }
    kill(libc::SIGSTOP);
    let (code, v, err) = tracer.join().unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(n(&v["trace"]["overhead"]["signals_passed"]) >= 4, "{:#}", v["trace"]);
    assert!(n(&v["trace"]["overhead"]["stops"]) > 100);
    // Stopped by SIGSTOP, as it would be untraced; SIGCONT resumes it.
    assert_untraced(pid, true);
    kill(libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(200));
    assert_untraced(pid, false);
    // Every SIGUSR1 was handled: none lost.
    assert_eq!(std::fs::read_to_string(&file).unwrap_or_default(), "3");
    drop(p);
    let _ = std::fs::remove_file(&file);
}

#[test]
fn unprivileged_runs_fail_with_the_permission_message() {
    if !common::require_root() || !common::require("setpriv") || !common::require("python3") {
        return;
    }
    let (srv, _) = wwr_server("wwr", false, 30.0);
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]).arg(BIN).args([
        "inspect",
        &srv.0.id().to_string(),
        "--trace",
        "1s",
    ]);
    let (code, _, err) = parse(run_bounded(c, Duration::from_secs(20)).0);
    assert_eq!(code, 5, "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("needs ptrace permission") && err.contains("CAP_SYS_PTRACE"), "{err}");
    assert_untraced(srv.0.id(), false);
}

#[test]
fn a_process_already_traced_is_refused_naming_the_tracer() {
    if !common::require_root() || !common::require("strace") || !common::require("python3") {
        return;
    }
    let (srv, _) = wwr_server("single", false, 30.0);
    let pid = srv.0.id();
    let strace = Proc(
        Command::new("strace")
            .args(["-f", "-o", "/dev/null", "-p", &pid.to_string()])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t = Instant::now();
    while status_field(pid, &pid.to_string(), "TracerPid:") == "0" {
        assert!(t.elapsed() < Duration::from_secs(10), "strace did not attach");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, v, err) = inspect(&[&pid.to_string(), "--trace", "1s", "--method", "ptrace"]);
    assert_eq!(code, 5, "{err}");
    assert!(v.is_null());
    let want = format!("already traced by pid {} (strace)", strace.0.id());
    assert!(err.contains(&want) && err.trim_end().lines().count() == 1, "{err}");
    drop(strace);
    // strace detaches when stopped; the server runs on.
    let t = Instant::now();
    while status_field(pid, &pid.to_string(), "TracerPid:") != "0" {
        assert!(t.elapsed() < Duration::from_secs(10), "strace did not detach");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_untraced(pid, false);
}

#[test]
fn traces_longer_than_a_minute_are_refused() {
    let (out, _) = run_bounded(
        {
            let mut c = Command::new(BIN);
            c.args(["inspect", "1", "--trace", "61s", "--method", "ptrace"]);
            c
        },
        Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at most 60 s"), "{err}");
}
