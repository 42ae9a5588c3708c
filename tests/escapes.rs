//! Control characters from the network or from another process never reach a
//! terminal raw: a server whose `Server:` header retitles the window and
//! clears the screen (or carries C1 and bidi controls), and a process whose
//! command line does the same, are shown escaped by analyze (text and HTML),
//! watch, diagnose and inspect; JSON keeps the raw value, escaped as JSON.

mod common;

use common::{Proc, free_port, require, require_root, tcpdoctor, wait_listening};
use std::process::{Command, Stdio};
use std::time::Duration;

/// ESC ] 0 ; TITLE BEL (retitle), ESC [ 2 J (clear), CR.
const ESCAPES: &str = "x\x1b]0;TITLE\x07\x1b[2J\rnginx";
/// What HTTP parsers accept as header bytes: C1 CSI (U+009B, 0xC2 0x9B) and a bidi override.
const C1_BIDI: &str = "x\u{9b}2J\u{202e}xnign";

/// The lab's write-write-read server (Nagle on) answering with `server` as
/// its Server header, run by user nobody: the attacker is a local user.
fn server(port: u16, server: &str) -> Proc {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3"])
        .arg(common::data("lab/wwr_server.py"))
        .args(["--port", &port.to_string(), "--max-seconds", "60", "--server", server])
        .stdout(Stdio::null());
    let mut p = Proc(c.spawn().unwrap());
    wait_listening(port, &mut p);
    p
}

/// `n` keep-alive requests on one connection, each response read whole
/// (a client of our own: bench rejects a header with ESC in it as malformed).
fn requests(port: u16, n: u32) {
    let script = format!(
        "import socket\ns=socket.create_connection(('127.0.0.1',{port}))\nfor i in range({n}):\n \
s.sendall(b'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n b=b''\n while b'\\r\\n\\r\\n' not in b: b+=s.recv(65536)\n \
h,r=b.split(b'\\r\\n\\r\\n',1)\n n=int([l.split(b':')[1] for l in h.split(b'\\r\\n') if l.lower().startswith(b'content-length')][0])\n \
while len(r)<n: r+=s.recv(65536)\n"
    );
    let ok = Command::new("/usr/bin/python3").args(["-c", &script]).status().unwrap();
    assert!(ok.success(), "client failed");
}

/// No control character but newline and tab in `out` (run with NO_COLOR, so
/// tcpdoctor's own colours are off too), and `shown` appears escaped.
fn clean(what: &str, out: &str, shown: &str) {
    let raw: Vec<char> = out.chars().filter(|&c| c.is_control() && c != '\n' && c != '\t').collect();
    assert!(raw.is_empty(), "{what}: raw control characters {raw:?} in:\n{out}");
    assert!(!out.contains('\u{202e}'), "{what}: a raw bidi override in:\n{out}");
    assert!(out.contains(shown), "{what}: {shown:?} not shown in:\n{out}");
}

fn run(mut c: Command) -> String {
    let out = c.env("NO_COLOR", "1").stderr(Stdio::inherit()).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_hostile_server_header_is_shown_escaped_by_analyze_and_watch() {
    if !require_root() || !require("python3") || !require("setpriv") {
        return;
    }
    let port = free_port();
    let _srv = server(port, ESCAPES);
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("hostile.pcap");
    let filter = ["tcp", "port", &port.to_string()];
    let mut cap = tcpdoctor();
    cap.args(["capture", "-i", "lo", "-w"]).arg(&pcap).args(filter).args(["--duration", "4s"]);
    let mut watch = tcpdoctor();
    watch.env("NO_COLOR", "1").args(["watch", "-i", "lo", "--duration", "4s"]).args(filter);
    let mut watch_json = tcpdoctor();
    watch_json.args(["watch", "-i", "lo", "--duration", "4s", "--json"]).args(filter);
    let runs: Vec<_> = [cap, watch, watch_json]
        .into_iter()
        .map(|c| std::thread::spawn(move || common::run_bounded(c, Duration::from_secs(20)).0))
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    requests(port, 25);
    let outs: Vec<_> = runs.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(outs[0].status.success(), "capture: {}", String::from_utf8_lossy(&outs[0].stderr));

    let mut analyze = tcpdoctor();
    let html = dir.path().join("report.html");
    analyze.arg("analyze").arg(&pcap).arg("--html").arg(&html);
    let text = run(analyze);
    assert!(text.contains("Nagle + delayed ACK"), "{text}");
    clean("analyze", &text, "x\\x1b]0;TITLE\\x07\\x1b[2J\\x0dnginx");
    // The HTML report names the server by its header too (a file may be `cat`ed).
    clean("analyze --html", &std::fs::read_to_string(&html).unwrap(), "x\\x1b]0;TITLE\\x07\\x1b[2J\\x0dnginx");

    let watched = String::from_utf8_lossy(&outs[1].stdout);
    assert!(watched.contains("VERDICT (whole run)"), "{watched}");
    clean("watch", &watched, "x\\x1b]0;TITLE\\x07\\x1b[2J\\x0dnginx");

    // JSON lines keep the raw value, JSON-escaped.
    let lines = String::from_utf8_lossy(&outs[2].stdout).into_owned();
    let last: serde_json::Value = serde_json::from_str(lines.lines().last().expect("a final summary")).unwrap();
    let ep = last["endpoints"].as_array().unwrap().iter().find(|e| e["software"].is_string()).expect("software");
    assert_eq!(ep["software"], ESCAPES);
    assert!(!lines.contains('\x1b'), "{lines}");
}

#[test]
fn diagnose_and_inspect_show_c1_bidi_and_command_lines_escaped() {
    if !require_root() || !require("python3") || !require("setpriv") {
        return;
    }
    let port = free_port();
    let srv = server(port, C1_BIDI);
    let url = format!("http://127.0.0.1:{port}/");
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("diagnose.html");
    let mut d = tcpdoctor();
    d.args(["diagnose", &url, "-d", "1s", "--html"]).arg(&html);
    let text = run(d);
    assert!(text.contains("VERDICT"), "{text}");
    clean("diagnose", &text, "Server: x\\x9b2J\\u{202e}xnign");
    clean("diagnose --html", &std::fs::read_to_string(&html).unwrap(), "x\\x9b2J\\u{202e}xnign");

    let mut j = tcpdoctor();
    j.args(["diagnose", &url, "-d", "1s", "--json", "--no-inspect"]);
    let json = run(j);
    assert!(!json.contains('\u{9b}') && !json.contains('\u{202e}'), "{json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["server_header"], C1_BIDI);

    // The process's own command line carries the header too: inspect shows it escaped.
    let mut i = tcpdoctor();
    i.args(["inspect", &srv.0.id().to_string()]);
    let text = run(i);
    assert!(text.starts_with("PROCESS "), "{text}");
    clean("inspect", &text, "--server x\\x9b2J\\u{202e}xnign");
}
