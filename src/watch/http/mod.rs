//! The `/metrics` HTTP server (hyper), on its own thread with a
//! single-threaded tokio runtime, so the capture loop never waits for it.
//!
//! Connections are served concurrently, each bounded in time (the request
//! head within [`MetricsServer::HEAD_DEADLINE`] of the connection opening or
//! of the previous answer; the whole connection within
//! [`MetricsServer::LIFETIME`]) and in number ([`MetricsServer::MAX_CONNECTIONS`],
//! see [`conns`] for who goes when full), so slow or idle clients cannot
//! keep a scrape out.

mod conns;
mod route;

use super::metrics::Metrics;
use conns::{Conns, Tracked};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;

/// The running server; stops (and joins its thread) when dropped.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Most connections open at once. Watch's own descriptors and these fit
    /// under the usual soft limit of 1024 open files.
    pub const MAX_CONNECTIONS: usize = 512;
    /// Time for a request head to arrive, from the connection opening or the
    /// previous answer; then the connection is closed.
    pub const HEAD_DEADLINE: Duration = Duration::from_secs(2);
    /// Time a connection may live; then it is closed after the answer in
    /// progress (at most [`Self::HEAD_DEADLINE`] more).
    pub const LIFETIME: Duration = Duration::from_secs(10);
    /// Largest request head; a longer one gets 431.
    pub const MAX_HEAD: usize = 8 << 10;

    /// Binds `addr` and serves `metrics` on `GET /metrics` until dropped.
    pub fn start(addr: SocketAddr, metrics: Arc<Metrics>) -> io::Result<MetricsServer> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
        let listener = rt.block_on(async { listen(addr) })?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || rt.block_on(accept(listener, metrics, stopped)))?;
        Ok(MetricsServer { addr, stop: Some(stop), thread: Some(thread) })
    }

    /// The address bound (with the port the kernel chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        // The accept loop ends when the sender goes; the runtime, dropped
        // with the thread's closure, closes every connection.
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A listening socket on `addr` with a long queue of connections not yet
/// accepted (the kernel caps it at `net.core.somaxconn`): SYNs beyond the
/// queue are dropped, and a scrape caught in a burst would wait a second
/// for its retransmission.
fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let s = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    s.listen(4096)
}

/// Accepts connections until `stopped`, each served by its own task.
async fn accept(listener: TcpListener, metrics: Arc<Metrics>, mut stopped: oneshot::Receiver<()>) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(MetricsServer::HEAD_DEADLINE)
        .max_header_size(MetricsServer::MAX_HEAD)
        .keep_alive(true);
    let mut conns = Conns::new(MetricsServer::MAX_CONNECTIONS);
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, _)) => {
                conns.make_room();
                let phase = conns.phase();
                let task = tokio::spawn(serve(stream, http.clone(), phase.clone(), metrics.clone()));
                conns.add(phase, task.abort_handle());
                // Lets the new connection read its request (and an evicted one
                // close) before the next accept.
                tokio::task::yield_now().await;
            }
            // Reset before it was accepted: nothing to serve.
            Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset) => {}
            Err(e) => {
                // Out of descriptors (EMFILE, ENFILE) or memory: free a
                // descriptor by evicting, or wait a little, rather than spin.
                let out_of_fds = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                if out_of_fds && conns.evict() {
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
}

/// Serves one connection until it closes, its head deadline passes, or its lifetime ends.
async fn serve(stream: TcpStream, http: http1::Builder, phase: conns::Phase, metrics: Arc<Metrics>) {
    // Each answer is one write, but a tool that names Nagle stalls should not risk one.
    let _ = stream.set_nodelay(true);
    let io = Tracked { io: TokioIo::new(stream), phase: phase.clone() };
    let svc = service_fn(move |req| {
        phase.set(true);
        std::future::ready(Ok::<_, Infallible>(route::answer(&req, &metrics)))
    });
    let mut conn = std::pin::pin!(http.serve_connection(io, svc));
    if tokio::time::timeout(MetricsServer::LIFETIME, conn.as_mut()).await.is_err() {
        conn.as_mut().graceful_shutdown();
        let _ = tokio::time::timeout(MetricsServer::HEAD_DEADLINE, conn).await;
    }
}
