//! Servers, load and checks shared by the trace tests (tests/inspect_trace.rs
//! for ptrace, tests/ebpf_trace.rs for eBPF).

use super::{Proc, free_port};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_tcpdoctor");

pub fn lab_script(name: &str) -> PathBuf {
    super::data("lab").join(name)
}

/// The Python lab server (tests/data/lab/wwr_server.py) on a free port.
pub fn wwr_server(mode: &str, nodelay: bool, max_seconds: f64) -> (Proc, u16) {
    wwr_server_with(mode, nodelay, max_seconds, &[])
}

/// The same with more arguments (`--think-ms 80`…).
pub fn wwr_server_with(mode: &str, nodelay: bool, max_seconds: f64, more: &[&str]) -> (Proc, u16) {
    let port = free_port();
    let mut c = Command::new("python3");
    c.arg(lab_script("wwr_server.py")).args([
        "--port",
        &port.to_string(),
        "--mode",
        mode,
        "--max-seconds",
        &max_seconds.to_string(),
    ]);
    if nodelay {
        c.arg("--nodelay");
    }
    c.args(more);
    let (p, line) = Proc::started(c);
    assert!(line.starts_with("listening"), "{line}");
    (p, port)
}

/// `tcpdoctor bench` running in the background, bounded by `-d`.
pub struct Bench(pub Option<Child>);

impl Bench {
    pub fn start(port: u16, secs: f64) -> Bench {
        let c = Command::new(BIN)
            .args(["bench", "-c", "4", "-t", "1", "--timeout", "2s", "--json", "-d"])
            .arg(format!("{secs}s"))
            .arg(format!("http://127.0.0.1:{port}/"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Its keep-alive connections exist before the trace starts.
        std::thread::sleep(Duration::from_millis(400));
        Bench(Some(c))
    }

    /// Its JSON record (killed by PID, on drop, if it runs 20 s past its end).
    pub fn finish(mut self) -> Value {
        let until = Instant::now() + Duration::from_secs(20);
        let c = self.0.as_mut().unwrap();
        while c.try_wait().unwrap().is_none() {
            assert!(Instant::now() < until, "bench still running");
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = self.0.take().unwrap().wait_with_output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn errors(b: &Value) -> u64 {
    b["errors"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum()
}

pub fn parse(out: Output) -> (i32, Value, String) {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = if out.stdout.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{err}", String::from_utf8_lossy(&out.stdout)))
    };
    (out.status.code().unwrap_or(-1), v, err)
}

pub fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

pub fn status_field(pid: u32, tid: &str, name: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix(name)).unwrap_or("").trim().to_string()
}

/// Every thread of `pid`: not traced, and stopped only if `stopped`.
pub fn assert_untraced(pid: u32, stopped: bool) {
    let tasks: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap_or_else(|e| panic!("pid {pid} is gone: {e}"))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for tid in &tasks {
        let state = status_field(pid, tid, "State:");
        assert_eq!(status_field(pid, tid, "TracerPid:"), "0", "pid {pid} thread {tid} still traced");
        let want = if stopped { 'T' } else { 'S' };
        let ok = if stopped { state.starts_with('T') } else { state.starts_with(['S', 'R', 'D']) };
        assert!(ok, "pid {pid} thread {tid}: state {state}, want {want}");
    }
}

pub fn nginx(dir: &std::path::Path, port: u16, nodelay: bool) -> Proc {
    nginx_with(dir, port, nodelay, "")
}

/// The same with more parameters of `listen` (`sndbuf=4m`…).
pub fn nginx_with(dir: &std::path::Path, port: u16, nodelay: bool, listen: &str) -> Proc {
    std::fs::create_dir_all(dir.join("www")).unwrap();
    let page = format!("<html><body>{}</body></html>\n", "tcpdoctor trace page. ".repeat(25));
    std::fs::write(dir.join("www/index.html"), page).unwrap();
    let d = dir.display();
    let conf = format!(
        "worker_processes 1;\ndaemon off;\nmaster_process on;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
events {{ worker_connections 256; }}\nhttp {{\n default_type text/html;\n access_log off;\n\
 client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n fastcgi_temp_path {d}/fastcgi;\n\
 uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n sendfile on;\n tcp_nopush off;\n tcp_nodelay {on};\n\
 keepalive_timeout 65;\n keepalive_requests 100000;\n\
 server {{ listen 127.0.0.1:{port} {listen}; root {d}/www; location / {{ index index.html; }} }}\n}}\n",
        on = if nodelay { "on" } else { "off" }
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let mut c =
        Command::new(if std::path::Path::new("/usr/sbin/nginx").exists() { "/usr/sbin/nginx" } else { "nginx" });
    c.arg("-p").arg(dir).arg("-c").arg(dir.join("nginx.conf")).arg("-e").arg(dir.join("error.log"));
    let mut p = Proc(c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
    super::wait_listening(port, &mut p);
    p
}
