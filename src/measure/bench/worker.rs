//! One worker thread: an edge-triggered epoll loop over its connections.
//!
//! Each fd is registered once for input and output; a request is written as
//! soon as the previous response ends, so a keep-alive request costs one
//! write and one read (wrk also re-arms epoll twice per request). Over TLS
//! the same loop carries the records (see `tls.rs`); times are taken when
//! decrypted data arrives, which is what an application sees.

use super::http::{Fed, Reader};
use super::sock::{self, Addr, Epoll};
use super::tls::{self, Io};
use super::{Config, Stats};
use crate::measure::tls::{Negotiated, describe, is_certificate, resumed};
use std::io::{self, Read, Write};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod exchange;

/// Read buffer per worker.
const READ_BUF: usize = 64 * 1024;
/// How often rates are sampled and timeouts checked.
const TICK: Duration = Duration::from_millis(10);
/// Rate sample period (as wrk).
const SAMPLE: Duration = Duration::from_millis(100);
/// Wait before reconnecting after a failed connect, so a dead server is not hammered.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// No socket; (re)connect at `next_at`.
    Closed,
    /// connect() in progress.
    Connecting,
    /// TCP connected, TLS handshake in progress.
    Handshaking,
    /// Connected; the next request is due at `next_at`.
    Idle,
    /// Writing the request: piece and offset.
    Writing(u8, usize),
    /// Request written, reading the response.
    Reading,
}

struct Conn {
    fd: RawFd,
    state: State,
    /// The TLS session of an https connection.
    tls: Option<Box<rustls::ClientConnection>>,
    reader: Reader,
    /// When the next request (or reconnect) is due.
    next_at: Instant,
    /// Latency origin of the request in flight (its due time with `-R`).
    origin: Instant,
    /// When the current phase (connect or request) started, for the timeout.
    phase_start: Instant,
    first_byte: Option<Instant>,
    last_read: Instant,
    max_gap: Duration,
    /// With `-n`: this connection holds one of the run's requests (taken when it
    /// connects or sends, given back done when the request completes or fails).
    ticket: bool,
    /// Start of the connect that made this connection, until its first request is sent.
    connect_start: Option<Instant>,
    /// Connect time of the request in flight (zero on a reused connection).
    connect_time: Duration,
    /// When the request's last byte was written (ab's "Waiting" counts from here).
    written: Instant,
}

/// The loop's outcome for one connection after an event.
enum Step {
    Continue,
    /// Close the socket and reconnect after this delay.
    Reconnect(Duration),
}

pub(super) struct Worker<'a> {
    cfg: &'a Config,
    addr: Addr,
    epoll: Epoll,
    conns: Vec<Conn>,
    buf: Vec<u8>,
    stats: Stats,
    /// Per-connection request interval with `-R`.
    interval: Option<Duration>,
    /// When the run started (latency over time counts from here).
    start: Instant,
}

impl<'a> Worker<'a> {
    pub(super) fn new(cfg: &'a Config, n: usize, start: Instant, first_conn: usize) -> io::Result<Worker<'a>> {
        let interval = cfg.rate.map(|r| Duration::from_secs_f64(cfg.connections as f64 / r));
        let conns = (0..n)
            .map(|i| {
                // Stagger paced connections so the total rate is even.
                let offset = cfg.rate.map_or(Duration::ZERO, |r| Duration::from_secs_f64((first_conn + i) as f64 / r));
                Conn {
                    fd: -1,
                    state: State::Closed,
                    tls: None,
                    reader: Reader::default(),
                    next_at: start + offset,
                    origin: start,
                    phase_start: start,
                    first_byte: None,
                    last_read: start,
                    max_gap: Duration::ZERO,
                    ticket: false,
                    connect_start: None,
                    connect_time: Duration::ZERO,
                    written: start,
                }
            })
            .collect();
        Ok(Worker {
            cfg,
            addr: Addr::new(cfg.addr),
            epoll: Epoll::new()?,
            conns,
            buf: vec![0; READ_BUF],
            stats: Stats::new(),
            interval,
            start,
        })
    }

    /// Runs until `deadline` or until `stop` says so; returns the statistics, or
    /// why the loop could not go on (then nothing it counted can be trusted).
    /// A refused certificate sets `fatal`, which stops every worker.
    pub(super) fn run(
        mut self,
        deadline: Instant,
        stop: &dyn Fn() -> bool,
        fatal: &AtomicBool,
        progress: &AtomicU64,
    ) -> Result<Stats, String> {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        let mut failed = None;
        let start = Instant::now();
        let (mut next_tick, mut next_sample, mut sampled) = (start, start + SAMPLE, 0u64);
        loop {
            let now = Instant::now();
            if now >= deadline || stop() || fatal.load(Ordering::Relaxed) || self.all_done() {
                break;
            }
            if now >= next_tick {
                self.tick(now);
                next_tick = now + TICK;
            }
            if now >= next_sample {
                let period = SAMPLE + (now - next_sample);
                let done = self.stats.requests;
                self.stats.rate_samples.push((done - sampled) as f64 / period.as_secs_f64());
                sampled = done;
                progress.store(done, Ordering::Relaxed);
                next_sample = now + SAMPLE;
            }
            let mut wake = next_tick.min(next_sample).min(deadline);
            if self.interval.is_some() {
                for c in &self.conns {
                    if matches!(c.state, State::Idle | State::Closed) {
                        wake = wake.min(c.next_at);
                    }
                }
            }
            let n = match self.epoll.wait(&mut events, wake.saturating_duration_since(now)) {
                Ok(n) => n,
                Err(e) => {
                    failed = Some(format!("waiting for socket events failed (epoll: {e})"));
                    break;
                }
            };
            for ev in &events[..n] {
                let (i, flags) = (ev.u64 as usize, ev.events);
                self.event(i, flags);
            }
            if self.stats.cert_error.is_some() {
                fatal.store(true, Ordering::Relaxed);
            }
        }
        if self.stats.rate_samples.is_empty() && self.stats.requests > 0 {
            // A run shorter than one sample (-n): its one rate.
            self.stats.rate_samples.push(self.stats.requests as f64 / start.elapsed().as_secs_f64());
        }
        for c in &mut self.conns {
            if c.fd >= 0 {
                sock::close(c.fd);
                c.fd = -1;
            }
        }
        progress.store(self.stats.requests, Ordering::Relaxed);
        match failed {
            Some(why) => Err(why),
            None => Ok(self.stats),
        }
    }

    /// With `-n`: takes one of the run's requests for connection `i`; false when none is left.
    fn take_ticket(&mut self, i: usize) -> bool {
        let Some(n) = self.cfg.requests else { return true };
        let c = &mut self.conns[i];
        if !c.ticket {
            c.ticket = self.cfg.issued.fetch_add(1, Ordering::Relaxed) < n;
        }
        c.ticket
    }

    /// With `-n`: every request handed out and none in flight here.
    fn all_done(&self) -> bool {
        self.cfg
            .requests
            .is_some_and(|n| self.cfg.issued.load(Ordering::Relaxed) >= n && self.conns.iter().all(|c| !c.ticket))
    }

    /// Parks connection `i` for the rest of the run: the `-n` requests are all handed out.
    fn park(&mut self, i: usize, now: Instant) -> Step {
        let c = &mut self.conns[i];
        c.state = if c.fd >= 0 { State::Idle } else { State::Closed };
        c.next_at = now + Duration::from_secs(365 * 24 * 3600);
        Step::Continue
    }

    /// Timeouts, paced sends and reconnects that are due.
    fn tick(&mut self, now: Instant) {
        let timeout = self.cfg.timeout;
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            let step = match c.state {
                State::Connecting if now - c.phase_start >= timeout => {
                    self.stats.connect_error(&"no answer to the SYN within --timeout");
                    Step::Reconnect(Duration::ZERO)
                }
                State::Handshaking if now - c.phase_start >= timeout => {
                    self.stats.connect_error(&"no TLS handshake within --timeout");
                    Step::Reconnect(Duration::ZERO)
                }
                State::Writing(..) | State::Reading if now - c.phase_start >= timeout => {
                    self.stats.errors.timeout += 1;
                    Step::Reconnect(Duration::ZERO)
                }
                State::Closed if now >= c.next_at => self.open(i, now),
                State::Idle if now >= c.next_at => self.send(i, now),
                _ => Step::Continue,
            };
            self.apply(i, step, now);
        }
    }

    fn apply(&mut self, i: usize, step: Step, now: Instant) {
        if let Step::Reconnect(after) = step {
            let c = &mut self.conns[i];
            // A request that failed is done (ab counts it among -n).
            c.ticket = false;
            if c.fd >= 0 {
                sock::close(c.fd);
                c.fd = -1;
            }
            c.state = State::Closed;
            c.tls = None;
            c.reader.reset();
            c.next_at = c.next_at.max(now + after);
            if after.is_zero() {
                let s = self.open(i, now);
                self.apply(i, s, now);
            }
        }
    }

    /// Starts a connection.
    fn open(&mut self, i: usize, now: Instant) -> Step {
        if !self.take_ticket(i) {
            return self.park(i, now);
        }
        match sock::connect(&self.addr, self.cfg.nodelay) {
            Ok((fd, done)) => {
                let c = &mut self.conns[i];
                c.fd = fd;
                c.phase_start = now;
                c.connect_start = Some(now);
                c.state = State::Connecting;
                if self.epoll.add(fd, i as u64).is_err() {
                    self.stats.connect_error(&"epoll_ctl failed");
                    return Step::Reconnect(RECONNECT_BACKOFF);
                }
                if done { self.connected(i, now) } else { Step::Continue }
            }
            Err(e) => {
                self.stats.connect_error(&e);
                Step::Reconnect(RECONNECT_BACKOFF)
            }
        }
    }

    fn connected(&mut self, i: usize, now: Instant) -> Step {
        let c = &mut self.conns[i];
        c.connect_time = now - c.phase_start;
        self.stats.connect.record(c.connect_time.as_nanos() as i64);
        if let Some(t) = &self.cfg.tls {
            match t.connect() {
                Ok(tls) => c.tls = Some(Box::new(tls)),
                Err(e) => {
                    self.stats.connect_error(&format!("TLS set-up: {e}"));
                    return Step::Reconnect(RECONNECT_BACKOFF);
                }
            }
            c.state = State::Handshaking;
            c.phase_start = now;
            return self.handshake(i);
        }
        self.ready(i, now)
    }

    /// The connection can carry requests: send the first when it is due.
    fn ready(&mut self, i: usize, now: Instant) -> Step {
        self.conns[i].state = State::Idle;
        if self.interval.is_none() || now >= self.conns[i].next_at {
            return self.send(i, now);
        }
        Step::Continue
    }

    /// Moves the TLS handshake on; when it completes, counts it and sends.
    fn handshake(&mut self, i: usize) -> Step {
        let c = &mut self.conns[i];
        let Some(conn) = c.tls.as_deref_mut() else { return Step::Reconnect(Duration::ZERO) };
        match tls::handshake(conn, c.fd) {
            Io::Done => {}
            Io::Blocked => return Step::Continue,
            Io::Closed => {
                self.stats.connect_error(&"the server closed the connection during the TLS handshake");
                return Step::Reconnect(RECONNECT_BACKOFF);
            }
            Io::Failed(e) => {
                self.stats.connect_error(&format!("TLS handshake: {e}"));
                return Step::Reconnect(RECONNECT_BACKOFF);
            }
            Io::Tls(e) => {
                let why = describe(&e, &self.cfg.host);
                if is_certificate(&e) {
                    self.stats.cert_error.get_or_insert(why);
                } else {
                    self.stats.connect_error(&format!("TLS handshake: {why}"));
                }
                return Step::Reconnect(RECONNECT_BACKOFF);
            }
        }
        let st = &mut self.stats;
        // Read the clock again: the server's flight may have come within this very call.
        let done = Instant::now();
        st.handshake.record((done - c.phase_start).as_nanos() as i64);
        st.handshakes += 1;
        st.resumed += u64::from(resumed(conn));
        if st.negotiated.is_none() {
            st.negotiated = Some(Negotiated::of(conn));
        }
        self.ready(i, done)
    }

    fn event(&mut self, i: usize, flags: u32) {
        let now = Instant::now();
        let Some(c) = self.conns.get(i) else { return };
        let step = match c.state {
            State::Connecting => {
                if flags & (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLHUP) as u32 == 0 {
                    return;
                }
                match sock::connect_result(c.fd) {
                    Ok(()) => self.connected(i, now),
                    Err(e) => {
                        self.stats.connect_error(&e);
                        Step::Reconnect(RECONNECT_BACKOFF)
                    }
                }
            }
            State::Writing(..) => {
                let s = self.write_more(i);
                if matches!(s, Step::Continue) && self.conns[i].state == State::Reading {
                    // A clock read after the write: the answer cannot predate it.
                    self.read(i, Instant::now(), flags)
                } else {
                    s
                }
            }
            State::Handshaking => self.handshake(i),
            State::Reading | State::Idle => self.read(i, now, flags),
            State::Closed => Step::Continue,
        };
        self.apply(i, step, now);
    }
}
