//! The same trace with eBPF (`src/ebpf/trace.bpf.c`): programs in the
//! kernel keep the calls of the traced processes on TCP sockets (filtered by
//! tgid) and send them through a ring buffer; nothing stops the process.
//! [`decode`](super::decode) turns the records into the recorder's [`Event`]s and
//! [`Sock`]s, so the same detector judges them; writes also carry their
//! sequence numbers, joined with the device transmits in [`hold`](super::hold).
//!
//! The calls come from the socket tracepoints (`sock_send_length`,
//! `sock_recv_length`: only socket I/O runs a program), or, where those do
//! not load, from the syscall tracepoints, which slow every syscall on the
//! host but also see waits and when each call began ([`Hooks`]).
//!
//! [`Event`]: super::events::Event
//! [`Sock`]: super::events::Sock

mod calibrate;
mod cycle;
mod raw;
mod sample;
mod session;

use super::decode::{Decoder, Hold};
use super::hold::Fate;
use super::records::{self, Record};
use super::{Recording, Request};
use calibrate::{calibrate, least, read_loop};
use cycle::Cycle;
pub(crate) use cycle::Sliced;
use raw::Raw;
pub(crate) use sample::Sampled;
use session::start;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Set in the environment (to anything but empty or `0`), the syscall
/// tracepoints are used even where the socket ones load: for tests of that fallback.
pub(crate) const FORCE_SYSCALLS: &str = "TCPDOCTOR_TRACE_SYSCALLS";
/// Set likewise, the programs are attached but return at once and record
/// nothing: the floor of bench/inspect_trace.sh (what being attached costs).
pub(crate) const EMPTY: &str = "TCPDOCTOR_TRACE_EMPTY";
/// Set likewise, busy TCP_NODELAY sockets are sampled but the call programs
/// never attached in slices: for bench/inspect_trace_paired.sh's comparison.
pub(crate) const NO_SLICES: &str = "TCPDOCTOR_TRACE_NO_SLICES";

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Where the programs see the calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hooks {
    /// `sock_send_length`/`sock_recv_length`, at the end of each socket read or write.
    Sock,
    /// `sys_enter`/`sys_exit`: every syscall on the host passes through them.
    Syscalls,
}

impl Hooks {
    /// As the JSON names it.
    pub fn name(self) -> &'static str {
        match self {
            Hooks::Sock => "sock",
            Hooks::Syscalls => "syscalls",
        }
    }

    /// The programs that see the calls, and the tracepoints they attach to.
    fn calls(self) -> [(&'static str, &'static str); 2] {
        match self {
            Hooks::Sock => [("trace_send", "sock_send_length"), ("trace_recv", "sock_recv_length")],
            Hooks::Syscalls => [("trace_enter", "sys_enter"), ("trace_exit", "sys_exit")],
        }
    }
}

/// The programs attached for the whole trace, beside the call programs
/// ([`XMIT`] comes and goes, and so do the call programs in [`cycle`]).
const ALWAYS: [(&str, &str); 3] =
    [("trace_fork", "sched_process_fork"), ("trace_retransmit", "tcp_retransmit_skb"), ("trace_drop", "kfree_skb")];

/// The transmit program: it runs for every packet the host sends, so it is
/// attached only while some socket needs its packets read (a write not out
/// when its call returned, or a route that may queue below TCP: the
/// `want_xmit` flag the programs set); from the window's start for
/// [`XMIT_GRACE`], and once wanted, for the rest of the trace.
const XMIT: (&str, &str) = ("trace_xmit", "net_dev_start_xmit");
const XMIT_GRACE: Duration = Duration::from_millis(200);
/// How often the flag is read while the transmit program is off.
const XMIT_POLL: Duration = Duration::from_millis(10);
/// How often the traced process is checked for having exited.
const EXIT_CHECK: Duration = Duration::from_millis(100);

/// Calls per calibration round (each makes a record: the ring holds them).
const CAL_CALLS: u32 = 5_000;

/// How often the ring is read; more often when a read found it filling
/// (at ~160,000 records/s, 50 ms is ~0.5 MB of the 8 MiB ring; the records
/// come a CPU's stage, ~70 of them, to an item).
const DRAIN_EVERY: Duration = Duration::from_millis(50);
const DRAIN_BUSY: Duration = Duration::from_millis(10);
/// A drain that read this much makes the next come sooner (a quarter of the ring).
const BUSY_BYTES: usize = 2 << 20;

/// What one call costs with the programs attached, measured before the trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Calibration {
    /// Added to a traced call (a read on a TCP socket of a traced process), ns.
    pub traced_ns: f64,
    /// Added to another process's socket read (any syscall with [`Hooks::Syscalls`]), ns.
    pub other_ns: f64,
}

/// What the eBPF trace adds to the recording.
pub(crate) struct Extra {
    /// Records the ring buffer had no room for.
    pub lost: u64,
    /// Records received.
    pub sent: u64,
    pub calibration: Option<Calibration>,
    /// Each write's fate, with its local port, thread and time (as in its [`Event`](super::events::Event)).
    pub holds: Vec<Hold>,
    pub hooks: Hooks,
    /// When busy TCP_NODELAY sockets were sampled.
    pub sampled: Option<Sampled>,
    /// When the call programs were attached in slices.
    pub sliced: Option<Sliced>,
}

/// What the transmit program's absence meant: how long it was off and how
/// many writes made then were not seen leaving (None when it never was).
fn xmit_note(off: &[(u64, u64)], holds: &[Hold], window_ns: u64) -> Option<String> {
    let total: u64 = off.iter().map(|&(a, b)| b.saturating_sub(a)).sum();
    if total == 0 {
        return None;
    }
    let unseen =
        holds.iter().filter(|h| h.fate == Fate::Unseen && off.iter().any(|&(a, b)| (a..b).contains(&h.t_ns))).count();
    let (off, window) = (total as f64 / 1e9, window_ns as f64 / 1e9);
    Some(if unseen == 0 {
        format!(
            "the transmit program (it runs for every packet the host sends) was detached for {off:.1} of {window:.1} s: \
meanwhile every write left during its call and no traced socket's route had a queue, so it had nothing to follow"
        )
    } else {
        format!(
            "the transmit program (it runs for every packet the host sends) was detached for {off:.1} of {window:.1} s, \
until a write was held or a route with a queue appeared: {unseen} writes made meanwhile were not seen leaving"
        )
    })
}

/// Programs loaded, attached and calibrated, no process marked yet: what a
/// trace's window waits for. Made ahead by [`ready`] (diagnose does it while
/// its load settles, so that a slow host's setup does not push the window
/// past the load), or by the trace itself.
pub(crate) struct Ready {
    s: session::Session,
    calibration: Option<Calibration>,
}

/// Loads, attaches and calibrates the programs; Err says why eBPF cannot be used.
pub(crate) fn ready() -> Result<Ready, String> {
    let base = least(&mut || read_loop(CAL_CALLS));
    let mut s = start()?;
    let calibration = calibrate(&mut s, base);
    Ok(Ready { s, calibration })
}

/// Traces `req.pids` with the programs made ready ahead (`req.ready`) or in a
/// fresh [`Session`](session::Session) until the window ends, `stop` is set or
/// the process exits; Err when eBPF cannot be used.
pub(super) fn record(req: &Request, stop: &AtomicBool) -> Result<(Recording, Extra), String> {
    let Ready { mut s, calibration } = match req.ready.as_ref().and_then(super::ReadySlot::take) {
        Some(r) => r?,
        None => ready()?,
    };
    let lost0 = s.lost();
    let mut notes = Vec::new();
    // The transmit program from the start, so that the first held writes are followed.
    if let Err(e) = s.set_xmit(true) {
        notes.push(format!("writes' departures were not followed: {e}"));
    }
    let mut initial: HashSet<u32> = HashSet::new();
    for &pid in &req.pids {
        s.mark(pid, true)?;
        initial.extend(super::tasks(pid));
    }
    let t0 = crate::ebpf::monotonic_ns();
    let started = Instant::now();
    let (nodelay0, nagle0) = (s.nodelay_calls(), s.nagle_calls());
    let mut judged = req.sample == super::Sample::All || s.hooks != Hooks::Sock;
    let mut sampled = None;
    super::announce(req, "eBPF");
    let main = req.pids.first().copied().unwrap_or(0);
    let mut raw = Raw::default();
    let mut exited = false;
    let mut overflow = 0u64;
    // Room for twice the events analysed, at the largest record's size.
    let room = super::MAX_EVENTS * 2 * size_of::<records::CallRec>();
    let mut every = DRAIN_EVERY;
    let mut drained = Instant::now();
    let mut looked = Instant::now();
    let mut wanted = false;
    let mut cycle: Option<Cycle> = None;
    while started.elapsed() < req.duration && !stop.load(Ordering::Relaxed) {
        // While the transmit program is off, the flag is read more often than the ring.
        let mut nap = if s.xmit.is_on() { every } else { every.min(XMIT_POLL) };
        if let Some(c) = cycle.as_ref().filter(|c| c.running()) {
            nap = nap.min(c.until(started.elapsed()));
        }
        std::thread::sleep(nap.min(req.duration.saturating_sub(started.elapsed())));
        if let Some(c) = cycle.as_mut()
            && let Err(e) = c.step(&mut s, started.elapsed())
        {
            notes.push(format!(
                "the trace ended at {:.1} s: the call programs could not be attached again ({e})",
                started.elapsed().as_secs_f64()
            ));
            break;
        }
        if drained.elapsed() >= every {
            let read = s.drain(&mut raw, room, &mut overflow);
            every = if read >= BUSY_BYTES { DRAIN_BUSY } else { DRAIN_EVERY };
            drained = Instant::now();
        }
        if !judged && started.elapsed() >= sample::LOOK_AFTER {
            judged = true;
            let from_s = started.elapsed().as_secs_f64();
            let (rate, keep) = ((s.nodelay_calls() - nodelay0) as f64 / from_s, sample::keep_per_s());
            let one_in = sample::one_in(rate, keep);
            if one_in > 1 {
                match s.sample(one_in, sample::pick(&req.known, one_in)) {
                    Ok(()) => sampled = Some(Sampled { one_in, from_s, rate, keep }),
                    Err(e) => notes.push(format!("every socket was traced: sampling could not be set ({e})")),
                }
                // Every socket so far had TCP_NODELAY: slices too.
                if sampled.is_some() && s.nagle_calls() == nagle0 && !env_set(NO_SLICES) {
                    match Cycle::start(&mut s, started.elapsed(), nagle0) {
                        Ok(c) => cycle = Some(c),
                        Err(e) => notes.push(format!("the call programs stayed attached: {e}")),
                    }
                }
            }
        }
        wanted = wanted || s.xmit_wanted();
        let switch = match (wanted, s.xmit.is_on()) {
            (true, false) => Some(true),
            (false, true) if started.elapsed() >= XMIT_GRACE => Some(false),
            _ => None,
        };
        if let Some(on) = switch
            && let Err(e) = s.set_xmit(on)
        {
            notes.push(format!(
                "writes' departures were not followed from {:.1} s on: {e}",
                started.elapsed().as_secs_f64()
            ));
            wanted = false;
        }
        // /proc is read at most every 100 ms: the loop wakes every 10 ms while
        // the transmit program is off, on a host whose cores the server needs.
        if looked.elapsed() >= EXIT_CHECK {
            looked = Instant::now();
            if super::exiting(main) {
                exited = true;
                break;
            }
        }
    }
    let traced = started.elapsed();
    let t_end = crate::ebpf::monotonic_ns();
    // Detach now: the programs stop running before the records are analysed.
    s.detach();
    s.drain(&mut raw, room, &mut overflow);
    s.leftovers(&mut raw, room, &mut overflow);
    let mut records = raw.records();
    drop(raw);
    // The calibration's records that stayed in a stage came before the window.
    records.retain(|r| !matches!(r, Record::Call(_) | Record::Segment(_)) || r.t() >= t0);
    let lost = s.lost() - lost0;
    let sent = records.len() as u64 + overflow;
    let (hooks, not_sock) = (s.hooks, s.not_sock.take());
    // When the transmit and the call programs were off, relative to the window's start.
    let relative = |off: &[(u64, u64)]| -> Vec<(u64, u64)> {
        off.iter().map(|&(a, b)| (a.saturating_sub(t0), if b == 0 { t_end } else { b }.saturating_sub(t0))).collect()
    };
    let (xmit_off, gaps) = (relative(&s.xmit.off), relative(&s.calls.off));
    drop(s);
    let window_ns = t_end.saturating_sub(t0);
    let sliced = cycle.map(|c| Sliced {
        from_s: c.from.as_secs_f64(),
        on_s: window_ns.saturating_sub(gaps.iter().map(|&(a, b)| b.saturating_sub(a)).sum()) as f64 / 1e9,
        window_s: window_ns as f64 / 1e9,
        ended_s: c.ended.map(|t| t.as_secs_f64()),
    });
    let mut dec = Decoder::new(&req.known, &req.listen_ports, t0, hooks == Hooks::Sock);
    dec.run(&mut records, t_end);
    dec.dropped += overflow;
    let holds = dec.holds();
    let tids = std::mem::take(&mut dec.tids);
    notes.insert(0, match (hooks, &not_sock) {
        (Hooks::Sock, _) => "calls seen at the socket tracepoints (sock_send_length, sock_recv_length): waits \
(epoll_wait, poll, select) are not seen, and each call is recorded as it ends, so no call has a duration"
            .to_string(),
        (Hooks::Syscalls, why) => format!(
            "calls seen at the syscall tracepoints, which slow every syscall on the host while attached: the socket \
tracepoints were not used ({})",
            why.as_deref().unwrap_or("unknown")
        ),
    });
    if let Some(s) = sampled {
        notes.push(sample::note(&s));
    }
    if let Some(s) = &sliced {
        notes.push(cycle::note(s));
    }
    if let Some(n) = xmit_note(&xmit_off, &holds, t_end.saturating_sub(t0)) {
        notes.push(n);
    }
    if env_set(EMPTY) {
        notes.push(format!("{EMPTY} is set: the programs were attached but recorded nothing (a benchmark's floor)"));
    }
    if lost > 0 {
        notes.push(format!(
            "{lost} records did not fit in the 8 MiB ring buffer and were lost: counts are lower bounds"
        ));
    }
    if exited {
        notes.push(format!(
            "the process exited {:.1} s into the trace: the results cover the time before",
            traced.as_secs_f64()
        ));
    }
    let forked: Vec<u32> = dec.tgids.iter().copied().filter(|t| !req.pids.contains(t)).collect();
    if !forked.is_empty() {
        notes.push(format!("{} process(es) forked during the trace were traced too", forked.len()));
    }
    let rec = Recording {
        events: dec.events,
        socks: dec.socks,
        dropped: dec.dropped,
        traced,
        exited,
        threads: initial.union(&tids).count() as u32,
        new_threads: tids.difference(&initial).count() as u32,
        stops: 0,
        handling: Duration::ZERO,
        handling_max: Duration::ZERO,
        signals: 0,
        calibration: None,
        untimed: hooks == Hooks::Sock,
        gaps,
        notes,
    };
    Ok((rec, Extra { lost, sent, calibration, holds, hooks, sampled, sliced }))
}
