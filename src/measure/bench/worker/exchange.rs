//! One request and its response on a worker's connection: writing the
//! request, reading (through TLS if on), completing the response, and the
//! peer closing the connection.

use super::*;

impl Worker<'_> {
    /// Starts writing a request.
    pub(super) fn send(&mut self, i: usize, now: Instant) -> Step {
        if !self.take_ticket(i) {
            return self.park(i, now);
        }
        let c = &mut self.conns[i];
        // With -R the latency counts from when the request was due, not from when
        // a late connection got round to it (coordinated omission); with -n from the
        // start of the connect that made a new connection for it (as ab).
        c.origin = if self.interval.is_some() { c.next_at.min(now) } else { now };
        match c.connect_start.take() {
            Some(t) if self.cfg.requests.is_some() => c.origin = c.origin.min(t),
            Some(_) => {}
            None => c.connect_time = Duration::ZERO,
        }
        c.phase_start = now;
        c.first_byte = None;
        c.max_gap = Duration::ZERO;
        c.state = State::Writing(0, 0);
        self.write_more(i)
    }

    pub(super) fn write_more(&mut self, i: usize) -> Step {
        let req = &self.cfg.request;
        let pieces: [&[u8]; 2] = if self.cfg.split_writes { [&req.head, &req.body] } else { [&req.whole, &[]] };
        let c = &mut self.conns[i];
        while let State::Writing(p, off) = c.state {
            if let Some(t) = c.tls.as_deref_mut() {
                // Each piece becomes its own record(s), sent before the next is queued.
                match tls::flush(t, c.fd) {
                    Ok(true) => {}
                    Ok(false) => return Step::Continue,
                    Err(e) => {
                        self.stats.write_error(&e);
                        return Step::Reconnect(Duration::ZERO);
                    }
                }
            }
            let piece = pieces[usize::from(p)];
            if off >= piece.len() {
                c.state = if p == 0 && !pieces[1].is_empty() { State::Writing(1, 0) } else { State::Reading };
                c.written = Instant::now();
                continue;
            }
            let written = match c.tls.as_deref_mut() {
                Some(t) => t.writer().write(&piece[off..]),
                None => sock::write(c.fd, &piece[off..]),
            };
            match written {
                Ok(n) => c.state = State::Writing(p, off + n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.stats.write_error(&e);
                    return Step::Reconnect(Duration::ZERO);
                }
            }
        }
        Step::Continue
    }

    /// Reads everything available and completes responses.
    pub(super) fn read(&mut self, i: usize, now: Instant, flags: u32) -> Step {
        if self.conns[i].tls.is_some() {
            return self.read_tls(i, now);
        }
        // The peer's FIN raises no new edge if it came with the data: read to the end.
        let hangup = flags & (libc::EPOLLRDHUP | libc::EPOLLHUP) as u32 != 0;
        loop {
            let fd = self.conns[i].fd;
            let n = match sock::read(fd, &mut self.buf) {
                Ok(0) => return self.closed_by_peer(i, now),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.stats.read_error(&e);
                    return Step::Reconnect(Duration::ZERO);
                }
            };
            if self.cfg.quickack {
                sock::quickack(fd);
            }
            if let Some(step) = self.received(i, now, n) {
                return step;
            }
            if n < self.buf.len() && !hangup {
                // A short read drained the socket; the next arrival raises a new edge.
                return Step::Continue;
            }
        }
    }

    /// Reads TLS records until the socket is drained or a response ends.
    fn read_tls(&mut self, i: usize, now: Instant) -> Step {
        loop {
            let c = &mut self.conns[i];
            let Some(t) = c.tls.as_deref_mut() else { return Step::Reconnect(Duration::ZERO) };
            let eof = match tls::fill(t, c.fd) {
                Io::Done => false,
                Io::Closed => true,
                Io::Blocked => return Step::Continue,
                Io::Failed(e) => {
                    self.stats.read_error(&e);
                    return Step::Reconnect(Duration::ZERO);
                }
                Io::Tls(e) => {
                    self.stats.read_error(&format!("TLS: {}", describe(&e, &self.cfg.host)));
                    return Step::Reconnect(Duration::ZERO);
                }
            };
            if self.cfg.quickack && !eof {
                sock::quickack(c.fd);
            }
            loop {
                let Some(t) = self.conns[i].tls.as_deref_mut() else { return Step::Reconnect(Duration::ZERO) };
                match t.reader().read(&mut self.buf) {
                    // close_notify, or the TCP end without it.
                    Ok(0) => return self.closed_by_peer(i, now),
                    Ok(n) => {
                        if let Some(step) = self.received(i, now, n) {
                            return step;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => return self.closed_by_peer(i, now),
                }
            }
            if eof {
                return self.closed_by_peer(i, now);
            }
        }
    }

    /// Takes `n` bytes of response in `buf`; the step when the connection's
    /// turn is over (a response ended, or it went wrong).
    fn received(&mut self, i: usize, now: Instant, n: usize) -> Option<Step> {
        self.stats.bytes += n as u64;
        let c = &mut self.conns[i];
        if c.state != State::Reading {
            // Nothing was asked: bytes the server sent on its own.
            self.stats.errors.malformed += 1;
            return Some(Step::Reconnect(Duration::ZERO));
        }
        match c.first_byte {
            None => c.first_byte = Some(now),
            Some(_) => c.max_gap = c.max_gap.max(now - c.last_read),
        }
        c.last_read = now;
        match c.reader.feed(&self.buf[..n], self.cfg.request.is_head) {
            Ok(Fed::More) => None,
            Ok(Fed::Done(done, used)) => {
                if used < n {
                    // A second response nobody asked for.
                    self.stats.errors.malformed += 1;
                    return Some(Step::Reconnect(Duration::ZERO));
                }
                Some(self.complete(i, now, done.status, done.keep_alive))
            }
            Err(_) => {
                self.stats.errors.malformed += 1;
                Some(Step::Reconnect(Duration::ZERO))
            }
        }
    }

    /// The server closed the connection.
    fn closed_by_peer(&mut self, i: usize, now: Instant) -> Step {
        let c = &mut self.conns[i];
        if c.state == State::Reading {
            if let Some(done) = c.reader.eof() {
                let s = self.complete(i, now, done.status, false);
                return match s {
                    Step::Continue => Step::Reconnect(Duration::ZERO),
                    s => s,
                };
            }
            // Closed before or in the middle of the response.
            self.stats.read_error(&"the server closed the connection before the response ended");
        }
        // An idle keep-alive connection closed by the server is normal.
        Step::Reconnect(Duration::ZERO)
    }

    fn complete(&mut self, i: usize, now: Instant, status: u16, keep_alive: bool) -> Step {
        let c = &mut self.conns[i];
        let st = &mut self.stats;
        let ns = |d: Duration| d.as_nanos() as i64;
        st.latency.record(ns(now - c.origin));
        let slot = ((now - self.start).as_nanos() / self.cfg.step.as_nanos()) as usize;
        if st.timeline.len() <= slot {
            st.timeline.resize_with(slot + 1, Default::default);
        }
        st.timeline[slot].record(ns(now - c.origin));
        st.ttfb.record(ns(c.first_byte.unwrap_or(now) - c.origin));
        st.gap.record(ns(c.max_gap));
        // ab's Total runs from the connect's start: wrk's latency leaves the connect out.
        let total = now - c.origin + if self.cfg.requests.is_some() { Duration::ZERO } else { c.connect_time };
        st.times.record(c.connect_time, total, c.first_byte.unwrap_or(now).saturating_duration_since(c.written));
        c.ticket = false;
        st.requests += 1;
        st.status(status);
        c.state = State::Idle;
        if let Some(iv) = self.interval {
            c.next_at += iv;
        }
        if !keep_alive || !self.cfg.keepalive {
            // The next request goes on a new connection.
            return Step::Reconnect(Duration::ZERO);
        }
        if self.interval.is_none() || now >= c.next_at {
            return self.send(i, now);
        }
        Step::Continue
    }
}
