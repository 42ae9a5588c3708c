//! Reproduction servers for the seed cases, run in-process on loopback.
//!
//! - [`Mode::Nagle`]: keep-alive HTTP/1.1, each response written as header
//!   then body (two `write`s) with Nagle on: the write-write-read stall.
//! - [`Mode::NoDelay`]: the same writes with `TCP_NODELAY` (the control).
//! - [`Mode::Think`]: waits, then writes the whole response at once:
//!   application latency that must not be blamed on Nagle.
//!
//! [`nginx`] starts Debian's nginx with generated configs beside them; any
//! server can speak HTTPS with a certificate from [`tls`] (each write a record).
//! [`link`] puts a real round trip between two network namespaces (or a
//! namespace and the host): TAP devices ([`tap`]) joined by the delay
//! [`bridge`], in namespaces made by [`netns`].

pub mod bridge;
pub mod link;
pub mod netns;
pub mod nginx;
pub mod rtt;
pub mod tap;
pub mod tls;

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How a lab server writes its responses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Header, then body, in two writes, Nagle on.
    Nagle,
    /// Header, then body, in two writes, TCP_NODELAY on.
    NoDelay,
    /// Sleeps this long, then writes header and body in one write.
    Think(Duration),
}

impl Mode {
    /// A short name for lists and URLs.
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Nagle => "nagle",
            Mode::NoDelay => "nodelay",
            Mode::Think(_) => "think",
        }
    }

    /// What the server does, in a few words.
    pub fn describe(&self) -> String {
        match self {
            Mode::Nagle => "keep-alive, header then body in two writes, Nagle on (the stall)".into(),
            Mode::NoDelay => "the same two writes with TCP_NODELAY (the control)".into(),
            Mode::Think(d) => format!("thinks {} ms, then one write (application latency)", d.as_millis()),
        }
    }
}

/// Most connections a lab server serves at once; more are closed at accept.
const MAX_CONNECTIONS: usize = 512;
/// Largest request (header + body) a lab server reads.
const MAX_REQUEST: usize = 64 << 10;
/// Response body: the size of a small page.
const BODY: &[u8] = &[b'x'; 600];

struct Shared {
    mode: Mode,
    nodelay: AtomicBool,
    stop: AtomicBool,
    open: AtomicUsize,
    /// HTTPS: the server's TLS configuration.
    tls: Option<Arc<rustls::ServerConfig>>,
}

/// A running lab server; stopped when dropped.
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// The listening socket's descriptor, owned by the accept thread.
    listener: std::os::fd::RawFd,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    /// Starts a server on `bind` (port 0 picks a free port).
    pub fn start(mode: Mode, bind: SocketAddr) -> io::Result<Server> {
        Server::start_with(mode, bind, None)
    }

    /// Starts an HTTPS server presenting `cert`: the same writes, each one TLS record.
    pub fn start_tls(mode: Mode, bind: SocketAddr, cert: &tls::Cert) -> io::Result<Server> {
        Server::start_with(mode, bind, Some(cert.config()))
    }

    fn start_with(mode: Mode, bind: SocketAddr, tls: Option<Arc<rustls::ServerConfig>>) -> io::Result<Server> {
        let listener = TcpListener::bind(bind)?;
        let addr = listener.local_addr()?;
        let fd = listener.as_raw_fd();
        let shared = Arc::new(Shared {
            mode,
            nodelay: AtomicBool::new(mode == Mode::NoDelay),
            stop: AtomicBool::new(false),
            open: AtomicUsize::new(0),
            tls,
        });
        let s = shared.clone();
        let accept =
            std::thread::Builder::new().name(format!("lab-{}", mode.name())).spawn(move || accept_loop(listener, s))?;
        Ok(Server { addr, shared, listener: fd, accept: Some(accept) })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR/`, or `https://ADDR/`.
    pub fn url(&self) -> String {
        format!("{}://{}/", if self.shared.tls.is_some() { "https" } else { "http" }, self.addr)
    }

    /// `nagle`, `nodelay`, `think`; `nagle-tls`… for HTTPS.
    pub fn name(&self) -> String {
        let tls = if self.shared.tls.is_some() { "-tls" } else { "" };
        format!("{}{tls}", self.shared.mode.name())
    }

    /// What it does, in a few words.
    pub fn describe(&self) -> String {
        let what = self.shared.mode.describe();
        if self.shared.tls.is_none() {
            return what;
        }
        // "header then body in two writes" is now two TLS records.
        format!("HTTPS: {}", what.replace("two writes", "two TLS records"))
    }

    /// How it writes.
    pub fn mode(&self) -> Mode {
        self.shared.mode
    }

    /// Turns TCP_NODELAY on or off for every response from now on, on open
    /// connections too: the fix, applied live.
    pub fn set_nodelay(&self, on: bool) {
        self.shared.nodelay.store(on, Ordering::Relaxed);
    }

    /// Whether responses are written with TCP_NODELAY.
    pub fn nodelay(&self) -> bool {
        self.shared.nodelay.load(Ordering::Relaxed)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Wake the blocking accept (it fails from now on); the loop sees the
        // flag and returns. A connect would not do for a server in another
        // network namespace, or behind a bridge already stopped.
        // SAFETY: the accept thread owns the descriptor and is still running
        // (joined below), so it is open and still the listener.
        unsafe { libc::shutdown(self.listener, libc::SHUT_RDWR) };
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, s: Arc<Shared>) {
    for conn in listener.incoming() {
        if s.stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(conn) = conn else {
            // EMFILE and friends: back off instead of spinning.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if s.open.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            continue; // dropped: closed at once
        }
        s.open.fetch_add(1, Ordering::Relaxed);
        let s2 = s.clone();
        let spawned = std::thread::Builder::new().name("lab-conn".into()).spawn(move || {
            let _ = serve(conn, &s2);
            s2.open.fetch_sub(1, Ordering::Relaxed);
        });
        if spawned.is_err() {
            s.open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// One parsed request: how many bytes it used and whether to close after it.
struct Parsed {
    len: usize,
    close: bool,
}

fn parse(buf: &[u8]) -> Result<Option<Parsed>, ()> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let head = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(()),
    };
    let mut body = 0usize;
    let mut close = req.version == Some(0);
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            body = std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse().ok()).ok_or(())?;
        } else if h.name.eq_ignore_ascii_case("connection") {
            let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
            if v.contains("close") {
                close = true;
            } else if v.contains("keep-alive") {
                close = false;
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(()); // chunked requests are not needed by any lab case
        }
    }
    if head + body > MAX_REQUEST {
        return Err(());
    }
    Ok((buf.len() >= head + body).then_some(Parsed { len: head + body, close }))
}

fn header(mode: Mode, close: bool, nodelay: bool) -> Vec<u8> {
    // The mode as it is now: the Nagle server switched to TCP_NODELAY says so.
    let name = if mode == Mode::Nagle && nodelay { "nagle, switched to nodelay" } else { mode.name() };
    format!(
        "HTTP/1.1 200 OK\r\nServer: tcpdoctor-lab/{} ({name})\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n",
        env!("CARGO_PKG_VERSION"),
        BODY.len(),
        if close { "Connection: close\r\n" } else { "" }
    )
    .into_bytes()
}

fn set_nodelay(fd: RawFd, on: bool) {
    let v: libc::c_int = on.into();
    // SAFETY: plain setsockopt on a socket this thread owns, with an int option.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// A connection's end: a TCP shutdown, after close_notify over TLS.
trait End {
    fn end(&mut self, how: Shutdown) -> io::Result<()>;
}

impl End for TcpStream {
    fn end(&mut self, how: Shutdown) -> io::Result<()> {
        self.shutdown(how)
    }
}

impl End for rustls::StreamOwned<rustls::ServerConnection, TcpStream> {
    fn end(&mut self, how: Shutdown) -> io::Result<()> {
        self.conn.send_close_notify();
        let _ = self.flush();
        self.sock.shutdown(how)
    }
}

fn serve(conn: TcpStream, s: &Shared) -> io::Result<()> {
    // A short timeout so a stopped server's threads notice and end.
    conn.set_read_timeout(Some(Duration::from_millis(200)))?;
    let fd = conn.as_raw_fd();
    match &s.tls {
        None => serve_on(conn, fd, s),
        Some(cfg) => {
            let tls = rustls::ServerConnection::new(cfg.clone()).map_err(io::Error::other)?;
            serve_on(rustls::StreamOwned::new(tls, conn), fd, s)
        }
    }
}

fn serve_on<S: Read + Write + End>(mut conn: S, fd: RawFd, s: &Shared) -> io::Result<()> {
    let mut nodelay = s.nodelay.load(Ordering::Relaxed);
    set_nodelay(fd, nodelay);
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 16 << 10];
    loop {
        if s.stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        match parse(&buf) {
            Err(()) => {
                let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                return conn.end(Shutdown::Both);
            }
            Ok(Some(p)) => {
                buf.drain(..p.len);
                let want = s.nodelay.load(Ordering::Relaxed);
                if want != nodelay {
                    set_nodelay(fd, want);
                    nodelay = want;
                }
                let head = header(s.mode, p.close, nodelay);
                match s.mode {
                    Mode::Think(d) => {
                        std::thread::sleep(d);
                        conn.write_all(&[head.as_slice(), BODY].concat())?;
                    }
                    Mode::Nagle | Mode::NoDelay => {
                        conn.write_all(&head)?;
                        conn.write_all(BODY)?;
                    }
                }
                if p.close {
                    return conn.end(Shutdown::Write);
                }
                continue;
            }
            Ok(None) if buf.len() >= MAX_REQUEST => return Ok(()),
            Ok(None) => {}
        }
        match conn.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_handles_partial_bodies_and_close() {
        assert!(parse(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap().is_none());
        let p = parse(b"GET / HTTP/1.1\r\n\r\nGET").unwrap().unwrap();
        assert_eq!((p.len, p.close), (18, false));
        assert!(parse(b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nab").unwrap().is_none());
        let post = b"POST / HTTP/1.1\r\nContent-Length: 4\r\nConnection: close\r\n\r\nabcd";
        let p = parse(post).unwrap().unwrap();
        assert_eq!((p.len, p.close), (post.len(), true));
        assert!(parse(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap().close);
        assert!(!parse(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap().unwrap().close);
        assert!(parse(b"\x00\x01garbage\r\n\r\n").is_err());
        assert!(parse(b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n").is_err());
    }

    #[test]
    fn nagle_server_stalls_and_the_switch_fixes_it() {
        let srv = Server::start(Mode::Nagle, "127.0.0.1:0".parse().unwrap()).unwrap();
        let mut c = TcpStream::connect(srv.addr()).unwrap();
        c.set_nodelay(true).unwrap();
        let slowest = |c: &mut TcpStream, nodelay: bool| {
            let mut worst = Duration::ZERO;
            for _ in 0..6 {
                let t = std::time::Instant::now();
                c.write_all(b"GET / HTTP/1.1\r\nHost: lab\r\n\r\n").unwrap();
                let mut got = 0;
                let mut b = [0u8; 4096];
                let want = header(Mode::Nagle, false, nodelay).len() + BODY.len();
                while got < want {
                    got += c.read(&mut b).unwrap();
                }
                worst = worst.max(t.elapsed());
            }
            worst
        };
        // Keep-alive requests after the first are held by Nagle ~40 ms.
        assert!(slowest(&mut c, false) >= Duration::from_millis(30));
        // The switch takes effect from the next response, on this open connection.
        srv.set_nodelay(true);
        assert!(slowest(&mut c, true) < Duration::from_millis(30));
        let mut rest = [0u8; 1];
        c.set_nonblocking(true).unwrap();
        assert!(c.read(&mut rest).is_err(), "every response was read whole");
    }
}
