//! `bench` and `diagnose` over https against real servers started here:
//! the lab's HTTPS twins (rustls), Python's ssl module writing header and
//! body as two records, the JDK's HttpsServer, Debian's nginx with ssl
//! (`tcp_nodelay off` and `on`); certificates refused for each reason.
//! Every server listens on 127.0.0.1 and is stopped by its PID.

mod common;

use common::{Proc, free_port, tmpdir, wait_listening};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

/// Runs measure latency: two at once on two cores would disturb each other.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn run(args: &[&str]) -> Output {
    common::tcpdoctor().args(args).output().unwrap()
}

/// `bench --json ARGS`, which must measure something.
fn bench(args: &[&str]) -> Value {
    let out = run(&[&["bench", "--json"], args].concat());
    assert!(out.status.success(), "bench {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// `diagnose --json ARGS`: the exit code and the record.
fn diagnose(args: &[&str]) -> (i32, Value) {
    let out = run(&[&["diagnose", "--json"], args].concat());
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code().unwrap_or(-1), v)
}

/// A run that must fail in one line on stderr with `code`, containing every needle.
fn fails(args: &[&str], code: i32, needles: &[&str]) {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: {n:?} missing in {err}");
    }
}

fn f(v: &Value, path: &str) -> f64 {
    path.split('.').fold(v, |v, k| &v[k]).as_f64().unwrap_or_else(|| panic!("{path} missing in {v:#}"))
}

fn text(v: &Value) -> String {
    v.to_string()
}

/// A Nagle stall seen by bench over TLS: ~40 ms per keep-alive request, the
/// header's record at once and the body's held; TLS 1.3 negotiated.
fn assert_bench_stall(r: &Value) {
    let p50 = f(r, "latency.p50");
    assert!((36.0..=60.0).contains(&p50), "p50 {p50} ms: {r:#}");
    assert!(f(r, "max_read_gap.p50") >= 30.0, "{r:#}");
    assert!(text(&r["notes"]).contains("separate TLS records"), "{:#}", r["notes"]);
    assert_tls(r);
}

fn assert_bench_fast(r: &Value) {
    assert!(f(r, "latency.p50") < 10.0, "{r:#}");
    assert!(f(r, "requests") > 100.0, "{r:#}");
    assert_eq!(f(r, "errors.read") + f(r, "errors.timeout") + f(r, "errors.malformed"), 0.0, "{r:#}");
    assert_tls(r);
}

/// The run's TLS block: the version and suite negotiated, one handshake per connection made.
fn assert_tls(r: &Value) {
    let t = &r["tls"];
    assert_eq!(t["version"], "TLSv1.3", "{t:#}");
    assert!(t["cipher_suite"].as_str().unwrap().starts_with("TLS13_"), "{t:#}");
    assert_eq!(f(t, "handshakes"), f(r, "connect.count"), "{r:#}");
    assert_eq!(f(t, "handshake.count"), f(t, "handshakes"), "{t:#}");
    assert!(f(t, "handshake.p50") > 0.0, "{t:#}");
}

fn cause(v: &Value) -> &str {
    v["verdict"]["cause"].as_str().unwrap()
}

fn fixes(v: &Value) -> Vec<String> {
    v["verdict"]["fix"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

/// diagnose found the server at `port` holding its second TLS record.
fn assert_nagle(code: i32, v: &Value, port: u16) {
    assert_eq!((code, cause(v)), (1, "nagle_delayed_ack"), "{v:#}");
    let lost = f(v, "verdict.lost_per_request_ms");
    assert!((30.0..60.0).contains(&lost), "lost {lost} ms");
    assert!(v["verdict"]["nagle_side"].as_str().unwrap().contains(&format!(":{port} (server)")), "{v:#}");
    assert!(v["verdict"]["summary"].as_str().unwrap().contains("TLS records"), "{:#}", v["verdict"]);
    assert!(text(&v["verdict"]["evidence"]).contains("arrived in two TLS records"), "{:#}", v["verdict"]);
    assert!(f(v, "alone.latency.p50") < 10.0 && f(v, "quickack.latency.p50") < 10.0, "{v:#}");
    // Each request alone had its own handshake; the load's connections one each.
    assert_eq!(f(v, "alone.tls.handshakes"), f(v, "alone.requests"), "{:#}", v["alone"]);
    assert_eq!(v["load"]["tls"]["version"], "TLSv1.3", "{:#}", v["load"]);
    if root() {
        // The packets agree: TLS is TCP underneath.
        let n = v["capture"]["findings"].as_array().unwrap().iter().find(|x| x["kind"] == "nagle_delayed_ack");
        let n = n.unwrap_or_else(|| panic!("no Nagle finding in the capture: {:#}", v["capture"]));
        assert!(n["nagle_side"]["endpoint"].as_str().unwrap().ends_with(&format!(":{port}")), "{n:#}");
        assert!(f(&v["server"], "nagle_on") >= 1.0, "{:#}", v["server"]);
        assert_eq!(v["verdict"]["confidence"], "high");
    }
}

fn assert_healthy(code: i32, v: &Value) {
    assert_eq!((code, cause(v)), (0, "none"), "{v:#}");
    assert!(f(v, "load.latency.p50") < 10.0, "{v:#}");
    assert!(v["quickack"].is_null(), "{v:#}");
    assert_eq!(v["load"]["tls"]["version"], "TLSv1.3", "{:#}", v["load"]);
    if root() {
        assert!(f(&v["capture"], "packets") > 100.0, "{:#}", v["capture"]);
        assert_eq!(f(&v["server"], "nagle_on"), 0.0, "{:#}", v["server"]);
    }
}

/// `lab --json`: the process, the nagle-tls and nodelay-tls URLs, the certificate file.
fn lab() -> (Proc, String, String, String) {
    let (p, rows) = common::lab_rows(&[]);
    let row = |name: &str| rows.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("no {name}: {rows:?}"));
    let url = |name: &str| row(name)["url"].as_str().unwrap().to_string();
    let cacert = row("nagle-tls")["cacert"].as_str().unwrap().to_string();
    (p, url("nagle-tls"), url("nodelay-tls"), cacert)
}

fn port_of(url: &str) -> u16 {
    common::port_of(url)
}

/// A certificate and key written as PEM files NAME.pem and NAME.key in `dir`.
fn cert(dir: &Path, name: &str, names: &[&str], expired: bool) -> (PathBuf, PathBuf) {
    let mut params = rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    if expired {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    let key = rcgen::KeyPair::generate().unwrap();
    let c = params.self_signed(&key).unwrap();
    let (cp, kp) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
    std::fs::write(&cp, c.pem()).unwrap();
    std::fs::write(&kp, key.serialize_pem()).unwrap();
    (cp, kp)
}

/// tests/data/lab/wwr_server.py with `--tls CERT KEY` on a free port.
fn python_tls(mode: &str, nodelay: bool, (c, k): &(PathBuf, PathBuf)) -> (Proc, String) {
    let port = free_port();
    let mut cmd = Command::new("python3");
    cmd.arg(common::data("lab/wwr_server.py"))
        .args(["--port", &port.to_string(), "--mode", mode, "--max-seconds", "120", "--tls"])
        .args([c, k])
        .stdout(Stdio::null());
    if nodelay {
        cmd.arg("--nodelay");
    }
    let mut p = Proc(cmd.spawn().unwrap());
    wait_listening(port, &mut p);
    (p, format!("https://127.0.0.1:{port}/"))
}

#[test]
fn lab_https_servers_bench_and_diagnose() {
    let _g = serial();
    let (_p, nagle, nodelay, cacert) = lab();
    let r = bench(&["-t1", "-c4", "-d2s", "--cacert", &cacert, &nagle]);
    assert_bench_stall(&r);
    assert_eq!(r["tls"]["alpn"], "http/1.1");
    assert_eq!(r["tls"]["certificate"], "checked against --cacert");
    assert!(f(&r, "time_to_first_byte.p50") < 5.0, "the header's record comes at once: {r:#}");
    // The client that never delays an ACK: the stall is gone.
    let q = bench(&["-t1", "-c4", "-d1s", "-k", "--quickack", &nagle]);
    assert!(f(&q, "latency.p50") < 5.0, "{q:#}");
    assert_eq!(q["tls"]["certificate"], "not checked (-k)");
    assert_bench_fast(&bench(&["-t1", "-c2", "-d1s", "--cacert", &cacert, &nodelay]));

    // A new connection per request: a handshake each, most of them resumed sessions.
    let r = bench(&["-t1", "-c2", "-d1s", "--no-keepalive", "--cacert", &cacert, &nodelay]);
    let (n, hs, resumed) = (f(&r, "requests"), f(&r, "tls.handshakes"), f(&r, "tls.resumed"));
    assert!(n > 50.0 && (hs - n).abs() <= 2.0, "{r:#}");
    assert!(resumed >= hs * 0.5 && resumed < hs, "{resumed} of {hs} resumed: {r:#}");
    let out = run(&["bench", "-t1", "-c2", "-d1s", "--no-keepalive", "-k", &nodelay]);
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("  Handshake ") && t.contains("TLS: TLSv1.3 TLS13_") && t.contains(" resumed;"), "{t}");

    let (code, v) = diagnose(&["--cacert", &cacert, &nagle]);
    assert_nagle(code, &v, port_of(&nagle));
    let (code, v) = diagnose(&["--cacert", &cacert, &nodelay]);
    assert_healthy(code, &v);
    // The lab's certificate is in no system store.
    fails(&["bench", "-d1s", &nagle], 3, &["unknown issuer", "--cacert", "-k"]);
}

#[test]
fn python_ssl_server_writing_header_and_body_apart() {
    if !common::require("python3") {
        return;
    }
    let _g = serial();
    let dir = tmpdir("py-tls");
    let pair = cert(&dir, "server", &["localhost", "127.0.0.1"], false);
    let (_p, url) = python_tls("wwr", false, &pair);
    assert_bench_stall(&bench(&["-t1", "-c4", "-d2s", "-k", &url]));
    let cacert = pair.0.to_str().unwrap();
    let (code, v) = diagnose(&["--cacert", cacert, &url]);
    assert_nagle(code, &v, port_of(&url));
    if root() {
        // Found by its process: Python's own knob, then where it goes on an ssl socket.
        assert_eq!(v["server"]["software"], "python", "{:#}", v["server"]);
        let fx = fixes(&v);
        assert!(fx[0].contains("disable_nagle_algorithm") && fx[1].contains("wrap_socket"), "{fx:#?}");
    }
    let (_q, fixed) = python_tls("wwr", true, &pair);
    assert_bench_fast(&bench(&["-t1", "-c2", "-d1s", "-k", &fixed]));
    let (code, v) = diagnose(&["--cacert", cacert, &fixed]);
    assert_healthy(code, &v);
    let _ = std::fs::remove_dir_all(dir);
}

/// The JDK's HttpsServer on 127.0.0.1:`port` with the keystore in `dir`.
fn jdk_https(dir: &Path, port: u16, flag: bool) -> Proc {
    let mut c = Command::new("java");
    if flag {
        c.arg("-Dsun.net.httpserver.nodelay=true");
    }
    c.arg("-cp").arg(dir).args(["HttpsServerDemo", &port.to_string()]).arg(dir.join("ks.p12"));
    c.args(["labpass", "300", "120"]).stdout(Stdio::null());
    let mut p = Proc(c.spawn().unwrap());
    wait_listening(port, &mut p);
    p
}

#[test]
fn jdk_httpsserver_default_stalls_and_the_flag_fixes_it() {
    if !common::require("javac") || !common::require("keytool") {
        return;
    }
    let _g = serial();
    let dir = tmpdir("jdk-tls");
    let ok = Command::new("javac").arg("-d").arg(&dir).arg(common::data("lab/HttpsServerDemo.java")).status();
    assert!(ok.unwrap().success(), "javac");
    let ks = dir.join("ks.p12");
    let ok = Command::new("keytool")
        .args(["-genkeypair", "-alias", "lab", "-keyalg", "EC", "-groupname", "secp256r1", "-dname", "CN=localhost"])
        .args(["-ext", "SAN=dns:localhost,ip:127.0.0.1", "-validity", "2", "-storetype", "PKCS12"])
        .args(["-storepass", "labpass", "-keystore"])
        .arg(&ks)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(ok.unwrap().success(), "keytool");
    let port = free_port();
    let p = jdk_https(&dir, port, false);
    let url = format!("https://127.0.0.1:{port}/");
    assert_bench_stall(&bench(&["-t1", "-c4", "-d2s", "-k", &url]));
    let (code, v) = diagnose(&["-k", &url]);
    assert_nagle(code, &v, port);
    assert!(fixes(&v).join("\n").contains("-Dsun.net.httpserver.nodelay=true"), "{:#?}", fixes(&v));
    if root() {
        assert_eq!(v["server"]["software"], "jdk-httpserver", "{:#}", v["server"]);
        assert!(fixes(&v)[1].contains("HttpsServer"), "{:#?}", fixes(&v));
    }
    drop(p);
    let port = free_port();
    let _p = jdk_https(&dir, port, true);
    let url = format!("https://127.0.0.1:{port}/");
    assert_bench_fast(&bench(&["-t1", "-c2", "-d1s", "-k", &url]));
    let (code, v) = diagnose(&["-k", &url]);
    assert_healthy(code, &v);
    let _ = std::fs::remove_dir_all(dir);
}

/// Debian's nginx with ssl (TLS 1.3, one process) on 127.0.0.1:`port`: a 20 KB page is
/// more than one `ssl_buffer_size` (16k), so it goes out as two records.
fn nginx_ssl(dir: &Path, port: u16, nodelay: bool, (c, k): &(PathBuf, PathBuf)) -> Proc {
    let d = dir.join(format!("n{port}"));
    std::fs::create_dir_all(d.join("www")).unwrap();
    std::fs::write(d.join("www/index.html"), "x".repeat(20_000)).unwrap();
    let conf = format!(
        "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;
events {{ worker_connections 256; }}
http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;
uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi; keepalive_requests 100000; tcp_nodelay {};
server {{ listen 127.0.0.1:{port} ssl; ssl_certificate {}; ssl_certificate_key {}; ssl_protocols TLSv1.3;
root {d}/www; location / {{ index index.html; }} }} }}",
        if nodelay { "on" } else { "off" },
        c.display(),
        k.display(),
        d = d.display()
    );
    std::fs::write(d.join("nginx.conf"), conf).unwrap();
    let nginx = if Path::new("/usr/sbin/nginx").exists() { "/usr/sbin/nginx" } else { "nginx" };
    let mut child = Command::new(nginx);
    child.arg("-c").arg(d.join("nginx.conf")).arg("-p").arg(&d).stderr(Stdio::null());
    let mut p = Proc(child.spawn().unwrap());
    wait_listening(port, &mut p);
    p
}

#[test]
fn nginx_ssl_tcp_nodelay_off_stalls_and_on_does_not() {
    if !common::require("nginx") {
        return;
    }
    let _g = serial();
    let dir = tmpdir("nginx-tls");
    let pair = cert(&dir, "server", &["localhost", "127.0.0.1"], false);
    let cacert = pair.0.to_str().unwrap().to_string();
    let (off, on) = (free_port(), free_port());
    let _a = nginx_ssl(&dir, off, false, &pair);
    let _b = nginx_ssl(&dir, on, true, &pair);
    let (off_url, on_url) = (format!("https://localhost:{off}/"), format!("https://localhost:{on}/"));
    // By name: SNI and the certificate's DNS name.
    assert_bench_stall(&bench(&["-t1", "-c4", "-d2s", "--cacert", &cacert, &off_url]));
    assert_bench_fast(&bench(&["-t1", "-c4", "-d1s", "--cacert", &cacert, &on_url]));
    let (code, v) = diagnose(&["--cacert", &cacert, &off_url]);
    assert_nagle(code, &v, off);
    let fx = fixes(&v);
    assert!(fx[0].contains("tcp_nodelay on;") && fx[1].contains("ssl_buffer_size"), "{fx:#?}");
    let (code, v) = diagnose(&["--cacert", &cacert, &on_url]);
    assert_healthy(code, &v);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn refused_certificates_are_one_line_exit_3_and_k_goes_on() {
    if !common::require("python3") {
        return;
    }
    let _g = serial();
    let dir = tmpdir("certs");
    let own = cert(&dir, "own", &["localhost", "127.0.0.1"], false);
    let other = cert(&dir, "other", &["other.test"], false);
    let old = cert(&dir, "old", &["localhost", "127.0.0.1"], true);
    let (_a, own_url) = python_tls("single", true, &own);
    let (_b, other_url) = python_tls("single", true, &other);
    let (_c, old_url) = python_tls("single", true, &old);
    let pem = |p: &(PathBuf, PathBuf)| p.0.to_str().unwrap().to_string();
    for verb in ["bench", "diagnose"] {
        // Self-signed, not trusted: the issuer is unknown. The line says what to do.
        fails(&[verb, "--json", &own_url], 3, &[&own_url, "unknown issuer", "--cacert", "-k"]);
        // Trusted, but made for another name.
        fails(&[verb, "--json", "--cacert", &pem(&other), &other_url], 3, &["wrong name", "other.test", "127.0.0.1"]);
        // Trusted, right name, out of date.
        fails(&[verb, "--json", "--cacert", &pem(&old), &old_url], 3, &["expired", "days ago"]);
    }
    // Nothing on standard output when diagnose stops there.
    let out = run(&["diagnose", "--json", &own_url]);
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    // -k: encrypted, unchecked, measured.
    let r = bench(&["-t1", "-c2", "-d1s", "-k", &own_url]);
    assert_bench_fast(&r);
    let (code, v) = diagnose(&["-k", &old_url, "--no-capture", "--no-inspect"]);
    assert_eq!((code, cause(&v)), (0, "none"), "{v:#}");
    // Trusted with its own file: measured too.
    assert_bench_fast(&bench(&["-t1", "-c2", "-d1s", "--cacert", &pem(&own), &own_url]));

    // --cacert itself: unreadable (3), not PEM (2), with -k (2); nothing is sent.
    let missing = dir.join("missing.pem");
    fails(&["bench", "--cacert", missing.to_str().unwrap(), &own_url], 3, &["--cacert", "No such file"]);
    let junk = dir.join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    for verb in ["bench", "diagnose"] {
        fails(&[verb, "--cacert", junk.to_str().unwrap(), &own_url], 2, &["--cacert", "no PEM certificate"]);
    }
    let out = run(&["bench", "-k", "--cacert", &pem(&own), &own_url]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    // TLS to a port that answers in something else says so.
    let plain = free_port();
    // As a plain HTTP server answers a ClientHello: 400, then close.
    let code = "import socket, sys, time\n\
                s = socket.create_server(('127.0.0.1', int(sys.argv[1])))\n\
                s.settimeout(0.2)\n\
                end = time.time() + 60\n\
                while time.time() < end:\n\
                \x20   try: c, _ = s.accept()\n\
                \x20   except OSError: continue\n\
                \x20   c.recv(65536); c.sendall(b'HTTP/1.1 400 Bad Request\\r\\nConnection: close\\r\\n\\r\\n'); c.close()\n";
    let mut c = Command::new("python3");
    c.args(["-c", code, &plain.to_string()]);
    let mut p = Proc(c.stdout(Stdio::null()).spawn().unwrap());
    wait_listening(plain, &mut p);
    let out = run(&["bench", "-t1", "-c1", "-d500ms", "-k", &format!("https://127.0.0.1:{plain}/")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("did not answer in TLS (is this port HTTPS?"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Behind `lab --rtt`, the HTTPS twins listen in the namespace, and their
/// certificate names that address too: `--cacert` works across the bridge.
#[test]
fn lab_rtt_https_twins_across_the_bridge() {
    if !common::require_root() {
        return;
    }
    let _g = serial();
    let (_p, rows) = common::lab_rows(&["--rtt", "8ms"]);
    let row = |name: &str| rows.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("no {name}: {rows:?}"));
    let (url, cacert) = (row("nodelay-tls")["url"].as_str().unwrap(), row("nodelay-tls")["cacert"].as_str().unwrap());
    assert!(url.starts_with("https://198.1"), "{url}");
    let r = bench(&["-t1", "-c2", "-d1s", "--cacert", cacert, url]);
    // One round trip per request; the handshake of TLS 1.3 is one more.
    let (lat, hs) = (f(&r, "latency.p50"), f(&r, "tls.handshake.p50"));
    assert!((7.0..20.0).contains(&lat) && (7.0..40.0).contains(&hs), "latency {lat} ms, handshake {hs} ms: {r:#}");
    assert_eq!(r["tls"]["version"], "TLSv1.3");
}
