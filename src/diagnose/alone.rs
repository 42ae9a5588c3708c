//! Step 2a: requests one at a time, each on a fresh connection. A new
//! connection starts in quick-ACK mode, so this is the latency without any
//! Nagle + delayed-ACK interplay: the baseline the load is compared with.

use super::conclude::NoAnswer;
use crate::dist::Dist;
use crate::measure::bench::http::{Fed, Reader, Request};
use crate::report::diagnose::LoadStep;
use std::io::{Read, Write};
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
}

/// Sends up to `count` requests, each on its own connection, stopping
/// early once `budget` is spent.
pub fn run(addr: SocketAddr, req: &Request, count: u32, timeout: Duration, budget: Duration) -> Alone {
    let start = Instant::now();
    let (mut lat, mut ttfb, mut gap) = (Dist::default(), Dist::default(), Dist::default());
    let mut out =
        Alone { step: LoadStep::empty(1, false, false), server_header: None, status: None, first_error: None };
    let mut errors = 0u64;
    for _ in 0..count {
        if start.elapsed() >= budget || crate::interrupt::requested() {
            break;
        }
        match one(addr, req, timeout, out.server_header.is_none()) {
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
    out.step.latency_histogram = crate::report::Histogram::from(&lat);
    out.step.errors = errors;
    out
}

struct One {
    first: Duration,
    last: Duration,
    gap: Duration,
    status: u16,
    server: Option<String>,
}

fn one(addr: SocketAddr, req: &Request, timeout: Duration, want_header: bool) -> Result<One, (NoAnswer, String)> {
    let mut c = TcpStream::connect_timeout(&addr, timeout).map_err(|e| {
        let kind =
            if e.kind() == std::io::ErrorKind::ConnectionRefused { NoAnswer::Refused } else { NoAnswer::Unreachable };
        (kind, format!("connect to {addr}: {e}"))
    })?;
    let _ = c.set_nodelay(true);
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
        c.set_read_timeout(Some(left)).map_err(|e| closed("read from", e))?;
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
