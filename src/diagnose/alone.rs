//! Step 2a: requests one at a time, each on a fresh connection. A new
//! connection starts in quick-ACK mode, so this is the latency without any
//! Nagle + delayed-ACK interplay: the baseline the load is compared with.
//! Over TLS each connection does its own (full or resumed) handshake, timed
//! apart; the request's times start after it, on decrypted data.

use super::facts::NoAnswer;
use crate::dist::Dist;
use crate::measure::bench::http::{Fed, Reader, Request};
use crate::measure::tls::{self, Negotiated, Target};
use crate::record::bench::TlsReport;
use crate::record::diagnose::LoadStep;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// What the fresh-connection requests found.
pub struct Alone {
    /// Latency and first-byte time of the requests that completed.
    pub step: LoadStep,
    /// `Server:` header of the first response.
    pub server_header: Option<String>,
    /// HTTP status of the first response.
    pub status: Option<u16>,
    /// Why the first failed request failed (refused, timed out, not HTTP…).
    pub first_error: Option<(NoAnswer, String)>,
    /// The server's certificate was refused: why (no request can succeed).
    pub certificate: Option<String>,
}

/// A connection, plain or TLS.
enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => &s.sock,
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            // A TCP end without close_notify ends a body-until-close response as well.
            Conn::Tls(s) => match s.read(buf) {
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => Ok(0),
                r => r,
            },
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// Sends up to `count` requests, each on its own connection, stopping
/// early once `budget` is spent.
pub fn run(
    addr: SocketAddr,
    tls: Option<&Target>,
    req: &Request,
    count: u32,
    timeout: Duration,
    budget: Duration,
) -> Alone {
    let start = Instant::now();
    let (mut lat, mut ttfb, mut gap, mut hs) = (Dist::default(), Dist::default(), Dist::default(), Dist::default());
    let mut out = Alone {
        step: LoadStep::empty(1, false, false),
        server_header: None,
        status: None,
        first_error: None,
        certificate: None,
    };
    let (mut errors, mut resumed, mut negotiated) = (0u64, 0u64, None);
    for _ in 0..count {
        if start.elapsed() >= budget || crate::interrupt::requested() {
            break;
        }
        let conn = match connect(addr, tls, timeout) {
            Ok(c) => c,
            Err(Failed::Certificate(why)) => {
                out.certificate = Some(why);
                break;
            }
            Err(Failed::Other(e)) => {
                errors += 1;
                out.first_error.get_or_insert(e);
                if errors >= 3 {
                    break;
                }
                continue;
            }
        };
        if let (Conn::Tls(s), Some(took)) = (&conn.0, conn.1) {
            hs.record(took.as_nanos() as i64);
            resumed += u64::from(tls::resumed(&s.conn));
            negotiated.get_or_insert_with(|| Negotiated::of(&s.conn));
        }
        match one(conn.0, addr, req, timeout, out.server_header.is_none()) {
            Ok(r) => {
                lat.record(r.last.as_nanos() as i64);
                ttfb.record(r.first.as_nanos() as i64);
                gap.record(r.gap.as_nanos() as i64);
                out.status.get_or_insert(r.status);
                if r.server.is_some() {
                    out.server_header = r.server;
                }
            }
            Err(e) => {
                errors += 1;
                out.first_error.get_or_insert(e);
                if errors >= 3 {
                    break; // a dead or broken server: do not wait out every request
                }
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    out.step.elapsed_s = elapsed;
    out.step.requests = lat.count();
    out.step.requests_per_s = if elapsed > 0.0 { lat.count() as f64 / elapsed } else { 0.0 };
    out.step.latency = crate::measure::bench::distribution(&lat);
    out.step.time_to_first_byte = crate::measure::bench::distribution(&ttfb);
    out.step.max_read_gap = crate::measure::bench::distribution(&gap);
    out.step.latency_histogram = crate::record::Histogram::from(&lat);
    out.step.errors = errors;
    out.step.tls = tls.map(|t| {
        let n: Negotiated = negotiated.unwrap_or_default();
        TlsReport {
            version: n.version,
            cipher_suite: n.cipher_suite,
            alpn: n.alpn,
            handshakes: hs.count(),
            resumed,
            handshake: crate::measure::bench::distribution(&hs),
            certificate: t.trust,
        }
    });
    out
}

/// Why a connection could not be set up.
enum Failed {
    /// The certificate was refused: no retry helps.
    Certificate(String),
    /// Refused, unreachable, not TLS…
    Other((NoAnswer, String)),
}

/// Connects and, for https, completes the handshake; returns the connection
/// and how long the handshake took.
fn connect(addr: SocketAddr, tls: Option<&Target>, timeout: Duration) -> Result<(Conn, Option<Duration>), Failed> {
    let c = TcpStream::connect_timeout(&addr, timeout).map_err(|e| {
        let kind = if e.kind() == ErrorKind::ConnectionRefused { NoAnswer::Refused } else { NoAnswer::Unreachable };
        Failed::Other((kind, format!("connect to {addr}: {e}")))
    })?;
    let _ = c.set_nodelay(true);
    let Some(t) = tls else { return Ok((Conn::Plain(c), None)) };
    let start = Instant::now();
    let deadline = start + timeout;
    let host = &t.host;
    let silent =
        || Failed::Other((NoAnswer::Silent, format!("no TLS handshake with {addr} within {} ms", timeout.as_millis())));
    let mut s = rustls::StreamOwned::new(
        t.connect().map_err(|e| Failed::Other((NoAnswer::NotHttp, format!("TLS set-up: {e}"))))?,
        c,
    );
    while s.conn.is_handshaking() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(silent());
        }
        let _ = s.sock.set_read_timeout(Some(left));
        let _ = s.sock.set_write_timeout(Some(left));
        match s.conn.complete_io(&mut s.sock) {
            Ok((0, 0)) if s.conn.is_handshaking() => {
                return Err(Failed::Other((
                    NoAnswer::Closed,
                    format!("{addr} closed the connection during the TLS handshake"),
                )));
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(e) => {
                return Err(match tls::from_io(&e) {
                    Some(te) if tls::is_certificate(te) => Failed::Certificate(tls::describe(te, host)),
                    Some(te) => Failed::Other((NoAnswer::NotHttp, format!("{addr}: {}", tls::describe(te, host)))),
                    None => Failed::Other((NoAnswer::Closed, format!("TLS handshake with {addr}: {e}"))),
                });
            }
        }
    }
    Ok((Conn::Tls(Box::new(s)), Some(start.elapsed())))
}

struct One {
    first: Duration,
    last: Duration,
    gap: Duration,
    status: u16,
    server: Option<String>,
}

fn one(
    mut c: Conn,
    addr: SocketAddr,
    req: &Request,
    timeout: Duration,
    want_header: bool,
) -> Result<One, (NoAnswer, String)> {
    let deadline = Instant::now() + timeout;
    let t0 = Instant::now();
    let closed = |what: &str, e: std::io::Error| (NoAnswer::Closed, format!("{what} {addr}: {e}"));
    c.write_all(&req.whole).map_err(|e| closed("write to", e))?;
    let mut reader = Reader::default();
    let mut buf = [0u8; 16 << 10];
    let (mut first, mut prev, mut gap) = (None, t0, Duration::ZERO);
    let mut head = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err((
                NoAnswer::Silent,
                format!("no complete response from {addr} within {} ms", timeout.as_millis()),
            ));
        }
        c.tcp().set_read_timeout(Some(left)).map_err(|e| closed("read from", e))?;
        let n = match c.read(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
            Err(e) => return Err(closed("read from", e)),
        };
        let now = Instant::now();
        if n == 0 {
            return match reader.eof() {
                Some(d) => Ok(One {
                    first: first.unwrap_or(now - t0),
                    last: now - t0,
                    gap,
                    status: d.status,
                    server: server_header(&head),
                }),
                None => Err((NoAnswer::Closed, format!("{addr} closed the connection before a complete response"))),
            };
        }
        if first.is_some() {
            gap = gap.max(now - prev);
        }
        first.get_or_insert(now - t0);
        prev = now;
        if want_header && head.len() < 8192 {
            head.extend_from_slice(&buf[..n.min(8192)]);
        }
        match reader.feed(&buf[..n], req.is_head) {
            Ok(Fed::More) => {}
            Ok(Fed::Done(d, _)) => {
                return Ok(One {
                    first: first.unwrap_or_default(),
                    last: now - t0,
                    gap,
                    status: d.status,
                    server: server_header(&head),
                });
            }
            Err(e) => return Err((NoAnswer::NotHttp, format!("{addr} did not answer in HTTP/1.x: {e}"))),
        }
    }
}

fn server_header(head: &[u8]) -> Option<String> {
    let mut h = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut h);
    resp.parse(head).ok()?;
    resp.headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("server"))
        .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
}
