//! A tiny HTTP/1.1 server for `/metrics`, on its own thread: one request
//! per connection, one connection at a time, requests bounded in size and
//! time, so a slow or hostile client costs at most a few seconds of scrapes.

use super::metrics::Metrics;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Largest request head read; a longer one gets 431.
const MAX_REQUEST: usize = 8 << 10;
/// How long a client may take to send its request or read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// OpenMetrics text, for clients that ask for it (Prometheus does).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The classic Prometheus text format, for everyone else (curl, promtool).
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The running server; stops (and joins its thread) when dropped.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr` and serves `metrics` on `GET /metrics` until dropped.
    pub fn start(addr: SocketAddr, metrics: Arc<Metrics>) -> io::Result<MetricsServer> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new().name("metrics".into()).spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                if !readable(&listener, 100) {
                    continue;
                }
                if let Ok((conn, _)) = listener.accept() {
                    // A client that misbehaves only loses its own answer.
                    let _ = answer(conn, &metrics);
                }
            }
        })?;
        Ok(MetricsServer { addr, stop, thread: Some(thread) })
    }

    /// The address bound (with the port the kernel chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Waits up to `ms` for a connection to accept, so the stop flag is seen.
fn readable(l: &TcpListener, ms: i32) -> bool {
    let mut p = libc::pollfd { fd: l.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: `p` is one live pollfd, and 1 is the count passed.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// Reads one request head and answers it; the connection is then closed.
fn answer(mut conn: TcpStream, metrics: &Metrics) -> io::Result<()> {
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut n = 0;
    let head_end = loop {
        if let Some(i) = buf[..n].windows(4).position(|w| w == b"\r\n\r\n") {
            break Some(i);
        }
        if n == buf.len() {
            break None;
        }
        match conn.read(&mut buf[n..])? {
            0 => return Ok(()), // closed before a whole request
            k => n += k,
        }
    };
    let (status, body, ctype, head_only) = match head_end {
        None => ("431 Request Header Fields Too Large", "request head over 8 KiB\n".to_string(), "text/plain", false),
        Some(end) => route(&buf[..end], metrics),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    conn.write_all(&out)?;
    conn.flush()
}

/// (status, body, content type, HEAD) for a request head.
fn route(head: &[u8], metrics: &Metrics) -> (&'static str, String, &'static str, bool) {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (method, target, version) = (words.next(), words.next(), words.next());
    if !version.is_some_and(|v| v.starts_with("HTTP/1.")) {
        return ("400 Bad Request", "not an HTTP/1 request\n".into(), "text/plain", false);
    }
    let path = target.unwrap_or("").split('?').next().unwrap_or("");
    let head_only = method == Some("HEAD");
    let openmetrics = String::from_utf8_lossy(head).lines().skip(1).any(|h| {
        h.split_once(':').is_some_and(|(name, v)| {
            name.trim().eq_ignore_ascii_case("accept") && v.contains("application/openmetrics-text")
        })
    });
    match (method, path) {
        (Some("GET" | "HEAD"), "/metrics") if openmetrics => ("200 OK", metrics.encode(), OPENMETRICS, head_only),
        (Some("GET" | "HEAD"), "/metrics") => {
            ("200 OK", prometheus_text(&metrics.encode()), PROMETHEUS_TEXT, head_only)
        }
        (Some("GET" | "HEAD"), _) => {
            ("404 Not Found", "not found; metrics are at /metrics\n".into(), "text/plain", head_only)
        }
        _ => ("405 Method Not Allowed", "only GET and HEAD\n".into(), "text/plain", false),
    }
}

/// OpenMetrics text rewritten in the classic Prometheus text format (0.0.4):
/// a counter's family is named with its `_total` suffix, and the `# UNIT`
/// and `# EOF` lines, which that format does not have, are left out.
pub fn prometheus_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut help: Option<&str> = None;
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if line.starts_with("# HELP ") {
            // Written once the TYPE line says whether the name needs `_total`.
            help = Some(line);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap_or((rest, ""));
            let full = if ty == "counter" { format!("{name}_total") } else { name.to_string() };
            let ty = if ty == "unknown" { "untyped" } else { ty };
            if let Some(h) = help.take() {
                let text = h.strip_prefix("# HELP ").and_then(|r| r.split_once(' ')).map_or("", |(_, t)| t);
                out.push_str(&format!("# HELP {full} {text}\n"));
            }
            out.push_str(&format!("# TYPE {full} {ty}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, req: &[u8]) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(req).unwrap();
        let mut s = String::new();
        let _ = c.read_to_string(&mut s);
        s
    }

    #[test]
    fn serves_metrics_404s_the_rest_and_bounds_requests() {
        let m = Arc::new(Metrics::new());
        m.packets.inc_by(7);
        let srv = MetricsServer::start("127.0.0.1:0".parse().unwrap(), m).unwrap();
        let a = srv.addr();
        let ok =
            get(a, b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("\n# TYPE tcpdoctor_capture_packets counter\ntcpdoctor_capture_packets_total 7\n"), "{ok}");
        assert!(ok.ends_with("# EOF\n"));
        let classic = get(a, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(classic.contains("Content-Type: text/plain; version=0.0.4"), "{classic}");
        assert!(
            classic.contains("\n# TYPE tcpdoctor_capture_packets_total counter\ntcpdoctor_capture_packets_total 7\n")
        );
        assert!(!classic.contains("# EOF") && !classic.contains("# UNIT"));
        assert!(get(a, b"GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        assert!(get(a, b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
        assert!(get(a, b"hello\r\n\r\n").starts_with("HTTP/1.1 400 "));
        let head = get(a, b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n"), "{head}");
        let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_REQUEST, b'a'); // all read by the server, so it closes with nothing unread
        assert!(get(a, &big).starts_with("HTTP/1.1 431 "));
        // A client that sends nothing is dropped after the timeout; the next is served.
        let _silent = TcpStream::connect(a).unwrap();
        assert!(get(a, b"GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 OK"));
        drop(srv);
        assert!(TcpStream::connect(a).is_err(), "stopped on drop");
    }
}
