//! The open connections, for the cap, and which one goes when it is full.
//!
//! When the table is full, a new connection takes the place of the one
//! that has waited longest for a request: its phase (opened, or its last
//! answer written) began first. A scrape sends its request as soon as it
//! has connected, so it is waiting for only a moment and is never the
//! oldest; idle or slow-dripping connections are, so a flood of them cannot
//! lock scrapes out. Only when every connection is being answered (clients
//! that do not read their answers) does the one answered longest go.
//! Turning new connections away instead would let that flood keep every
//! scrape out.

use hyper::rt::{Read, ReadBufCursor, Write};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::task::AbortHandle;

/// A connection's phase: bit 0 set while a request is being answered, the
/// bits above it the clock's tick when that phase began.
#[derive(Clone)]
pub struct Phase {
    word: Arc<AtomicU64>,
    clock: Arc<AtomicU64>,
}

impl Phase {
    /// Starts a phase: waiting for a request, or answering one.
    pub fn set(&self, answering: bool) {
        let tick = self.clock.fetch_add(1, Ordering::Relaxed);
        self.word.store(tick << 1 | u64::from(answering), Ordering::Relaxed);
    }

    /// Eviction order: waiting before answering, then the oldest first.
    fn rank(&self) -> (bool, u64) {
        let w = self.word.load(Ordering::Relaxed);
        (w & 1 == 1, w >> 1)
    }
}

struct Conn {
    phase: Phase,
    task: AbortHandle,
}

/// The connections being served, at most `cap`.
pub struct Conns {
    cap: usize,
    clock: Arc<AtomicU64>,
    open: Vec<Conn>,
}

impl Conns {
    pub fn new(cap: usize) -> Conns {
        Conns { cap, clock: Arc::default(), open: Vec::with_capacity(cap) }
    }

    /// The phase of a new connection, waiting from now.
    pub fn phase(&self) -> Phase {
        let p = Phase { word: Arc::default(), clock: self.clock.clone() };
        p.set(false);
        p
    }

    /// Counts a connection whose task serves it.
    pub fn add(&mut self, phase: Phase, task: AbortHandle) {
        self.open.push(Conn { phase, task });
    }

    /// Makes room for one more connection: forgets the finished ones, and
    /// evicts one if the table is still full.
    pub fn make_room(&mut self) {
        if self.open.len() < self.cap {
            return;
        }
        self.open.retain(|c| !c.task.is_finished());
        if self.open.len() >= self.cap {
            self.evict();
        }
    }

    /// Closes the connection first in the eviction order; false if none is open.
    pub fn evict(&mut self) -> bool {
        let Some(i) = (0..self.open.len()).min_by_key(|&i| self.open[i].phase.rank()) else {
            return false;
        };
        // Dropping the task closes its socket (the next time the runtime runs).
        self.open.swap_remove(i).task.abort();
        true
    }
}

/// A connection's socket, marking its phase waiting again once hyper has
/// flushed an answer (hyper flushes after writing the whole response).
pub struct Tracked<T> {
    pub io: T,
    pub phase: Phase,
}

impl<T: Read + Unpin> Read for Tracked<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for Tracked<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.io).poll_flush(cx);
        if matches!(r, Poll::Ready(Ok(()))) && me.phase.rank().0 {
            me.phase.set(false);
        }
        r
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}
