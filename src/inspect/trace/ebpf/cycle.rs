//! The call programs attached in slices on a busy server whose sockets all
//! have TCP_NODELAY. Sampling sockets (sample.rs) cuts what the traced
//! calls cost, but while the programs are attached every socket read and
//! write on the host still pays the tracepoint's dispatch into them, and on
//! such a server that is most of what is left (bench/RESULTS.md). Nagle can
//! hold nothing there, so the trace needs a sample of the calls, not all of
//! them: from then on the programs are attached [`ON`] of every [`ON`] +
//! [`OFF`]. A call on a socket with Nagle on (or corked) seen in a slice
//! ends the slicing: such sockets are always traced whole. (Past the
//! socket's first response: that one its peer ACKs at once, so Nagle cannot
//! stall it, and nginx writes every first response with Nagle on.)

use super::session::Session;
use std::time::Duration;

/// How long the call programs stay attached in a slice, and detached between.
pub(super) const ON: Duration = Duration::from_millis(250);
pub(super) const OFF: Duration = Duration::from_millis(500);

/// What slicing did during a trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Sliced {
    /// Seconds into the window when the programs were first detached.
    pub from_s: f64,
    /// Seconds the call programs were attached, of `window_s`.
    pub on_s: f64,
    pub window_s: f64,
    /// Seconds into the window when a socket with Nagle on was seen and
    /// the programs stayed attached from then on.
    pub ended_s: Option<f64>,
}

/// The slices while they last.
pub(super) struct Cycle {
    pub from: Duration,
    /// When the programs are switched next (window time).
    next: Duration,
    /// Calls on other than TCP_NODELAY sockets when the window began.
    nagle0: u64,
    pub ended: Option<Duration>,
}

impl Cycle {
    /// Starts the slices at `now` (window time), detaching the programs.
    pub(super) fn start(s: &mut Session, now: Duration, nagle0: u64) -> Result<Cycle, String> {
        s.set_calls(false)?;
        Ok(Cycle { from: now, next: now + OFF, nagle0, ended: None })
    }

    /// Whether the slices go on.
    pub(super) fn running(&self) -> bool {
        self.ended.is_none()
    }

    /// How long until the next switch (zero when due).
    pub(super) fn until(&self, now: Duration) -> Duration {
        self.next.saturating_sub(now)
    }

    /// Switches the programs when due. Err: they could not be attached again
    /// (the calls are no longer seen: the window must end).
    pub(super) fn step(&mut self, s: &mut Session, now: Duration) -> Result<(), String> {
        if !self.running() || now < self.next {
            return Ok(());
        }
        if !s.calls.is_on() {
            s.set_calls(true)?;
            self.next = now + ON;
        } else if s.nagle_calls() > self.nagle0 {
            // A socket that Nagle may hold: traced whole from here on.
            self.ended = Some(now);
        } else {
            s.set_calls(false)?;
            self.next = now + OFF;
        }
        Ok(())
    }
}

/// What slicing did, in words (a note of the trace).
pub(super) fn note(s: &Sliced) -> String {
    let end = match s.ended_s {
        Some(t) => format!(
            " until {t:.2} s, when a socket with Nagle on (or corked) was seen past its first response: attached \
from then on (such sockets are always traced whole)"
        ),
        None => String::new(),
    };
    format!(
        "every traced socket had TCP_NODELAY and their calls came fast: from {:.2} s on the call programs were \
attached {:.2} s of every {:.2} s{end}, {:.1} of {:.1} s in all, since while attached they slow every socket read and \
write on the host; the calls made while they were detached are not seen, and a response cut by such a gap is not \
counted (`--sample all` keeps them attached)",
        s.from_s,
        ON.as_secs_f64(),
        (ON + OFF).as_secs_f64(),
        s.on_s,
        s.window_s
    )
}
