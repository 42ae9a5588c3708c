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

use super::decode::{Decoder, Hold};
use super::hold::Fate;
use super::records::{self, Record, Stage};
use super::{Recording, Request};
use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use aya::programs::BtfTracePoint;
use aya::programs::tp_btf::BtfTracePointLinkId;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Set in the environment (to anything but empty or `0`), the syscall
/// tracepoints are used even where the socket ones load: for tests of that fallback.
pub(crate) const FORCE_SYSCALLS: &str = "TCPDOCTOR_TRACE_SYSCALLS";
/// Set likewise, the programs are attached but return at once and record
/// nothing: the floor of bench/inspect_trace.sh (what being attached costs).
pub(crate) const EMPTY: &str = "TCPDOCTOR_TRACE_EMPTY";

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

    /// The programs attached for the whole trace and the tracepoints they
    /// attach to ([`XMIT`] comes and goes).
    fn programs(self) -> [(&'static str, &'static str); 5] {
        let calls = match self {
            Hooks::Sock => [("trace_send", "sock_send_length"), ("trace_recv", "sock_recv_length")],
            Hooks::Syscalls => [("trace_enter", "sys_enter"), ("trace_exit", "sys_exit")],
        };
        [
            calls[0],
            calls[1],
            ("trace_fork", "sched_process_fork"),
            ("trace_retransmit", "tcp_retransmit_skb"),
            ("trace_drop", "kfree_skb"),
        ]
    }
}

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
}

/// Loads and attaches the programs, on the socket tracepoints where they
/// load; Err says why eBPF cannot be used at all.
pub(super) fn start() -> Result<Session, String> {
    if env_set(FORCE_SYSCALLS) {
        return start_with(Hooks::Syscalls, Some(format!("{FORCE_SYSCALLS} is set")));
    }
    match start_with(Hooks::Sock, None) {
        Ok(s) => Ok(s),
        Err(why) => start_with(Hooks::Syscalls, Some(why)),
    }
}

fn start_with(hooks: Hooks, not_sock: Option<String>) -> Result<Session, String> {
    let consts = [("syscalls", u8::from(hooks == Hooks::Syscalls)), ("empty", u8::from(env_set(EMPTY)))];
    let mut bpf = crate::ebpf::load_with(crate::ebpf::TRACE_OBJ, &consts, &hooks.programs(), &[XMIT])?;
    let take =
        |bpf: &mut aya::Ebpf, name: &str| bpf.take_map(name).ok_or_else(|| format!("the BPF object has no map {name}"));
    let map_err = |e: aya::maps::MapError| format!("BPF map: {e}");
    let mut calls: Array<MapData, u8> = Array::try_from(take(&mut bpf, "calls")?).map_err(map_err)?;
    for nr in 0..512u32 {
        let code = records::code(nr, hooks == Hooks::Sock);
        if code != 0 {
            calls.set(nr, code, 0).map_err(map_err)?;
        }
    }
    Ok(Session {
        traced: Array::try_from(take(&mut bpf, "traced")?).map_err(map_err)?,
        ring: RingBuf::try_from(take(&mut bpf, "events")?).map_err(map_err)?,
        counts: PerCpuArray::try_from(take(&mut bpf, "counts")?).map_err(map_err)?,
        stages: PerCpuArray::try_from(take(&mut bpf, "stages")?).map_err(map_err)?,
        want_xmit: Array::try_from(take(&mut bpf, "want_xmit")?).map_err(map_err)?,
        xmit: None,
        xmit_off: Vec::new(),
        hooks,
        not_sock,
        _calls: calls,
        bpf: Some(bpf),
    })
}

/// Loaded and attached programs: dropping it detaches them.
pub(super) struct Session {
    /// One bit per traced process id (`traced` in trace.bpf.c).
    traced: Array<MapData, u64>,
    ring: RingBuf<MapData>,
    counts: PerCpuArray<MapData, u64>,
    /// Each CPU's records not yet sent to the ring.
    stages: PerCpuArray<MapData, Stage>,
    want_xmit: Array<MapData, u32>,
    /// The transmit program's link while it is attached.
    xmit: Option<BtfTracePointLinkId>,
    /// When it was off during the window: (from, to) in monotonic ns, `to`
    /// 0 while still off.
    xmit_off: Vec<(u64, u64)>,
    hooks: Hooks,
    not_sock: Option<String>,
    _calls: Array<MapData, u8>,
    /// The programs: None once detached (the maps above stay readable).
    bpf: Option<aya::Ebpf>,
}

/// Ring items as read (a record, or a CPU's stage of them), each after its
/// length as 4 bytes: copied while the trace runs, parsed after it. Kept in
/// chunks that are never moved (a growing `Vec` copies all it holds at each
/// doubling, while the traced server needs the CPU).
#[derive(Default)]
struct Raw {
    chunks: Vec<Vec<u8>>,
    len: usize,
}

/// A chunk's size (an item larger than this gets a chunk of its own).
const RAW_CHUNK: usize = 4 << 20;

impl Raw {
    fn push(&mut self, item: &[u8]) {
        let need = 4 + item.len();
        let last = match self.chunks.last_mut() {
            Some(c) if c.capacity() - c.len() >= need => c,
            _ => {
                self.chunks.push(Vec::with_capacity(RAW_CHUNK.max(need)));
                self.chunks.last_mut().expect("just pushed")
            }
        };
        last.extend_from_slice(&(item.len() as u32).to_ne_bytes());
        last.extend_from_slice(item);
        self.len += need;
    }

    /// The records of every item, in the order read.
    fn records(&self) -> Vec<Record> {
        let mut out = Vec::with_capacity(self.len / 56);
        for chunk in &self.chunks {
            let mut b = &chunk[..];
            while let Some((len, rest)) = b.split_first_chunk::<4>() {
                let n = (u32::from_ne_bytes(*len) as usize).min(rest.len());
                out.extend(records::records_in(&rest[..n]));
                b = &rest[n..];
            }
        }
        out
    }
}

impl Session {
    /// Traces process `pid` (`on`) or stops tracing it.
    fn mark(&mut self, pid: u32, on: bool) -> Result<(), String> {
        let (w, bit) = (pid >> 6, 1u64 << (pid & 63));
        let err = |e: aya::maps::MapError| format!("BPF map: {e}");
        let word = self.traced.get(&w, 0).map_err(err)?;
        self.traced.set(w, if on { word | bit } else { word & !bit }, 0).map_err(err)
    }

    /// Records the ring had no room for.
    fn lost(&self) -> u64 {
        self.counts.get(&0, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }

    /// Reads every waiting item into `into` while it holds less than `room`
    /// bytes (the records of the rest are counted in `overflow`); returns the bytes read.
    fn drain(&mut self, into: &mut Raw, room: usize, overflow: &mut u64) -> usize {
        let mut bytes = 0;
        while let Some(item) = self.ring.next() {
            bytes += item.len();
            keep(into, &item, room, overflow);
        }
        bytes
    }

    /// Reads the records the CPUs still hold in their stages, once the
    /// programs are detached. A program that was already running when they
    /// were detached may still be filling one (its `busy` is set): that stage
    /// is read again a moment later (up to 20 ms).
    fn leftovers(&mut self, into: &mut Raw, room: usize, overflow: &mut u64) {
        for tries in (0..20).rev() {
            match self.stages.get(&0, 0) {
                Ok(per_cpu) if tries > 0 && per_cpu.iter().any(|st| st.busy != 0) => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(per_cpu) => {
                    for st in per_cpu.iter() {
                        keep(into, st.used(), room, overflow);
                    }
                    return;
                }
                Err(_) => return,
            }
        }
    }

    /// Attaches (`on`) or detaches the transmit program.
    fn set_xmit(&mut self, on: bool) -> Result<(), String> {
        let bpf = self.bpf.as_mut().ok_or("the programs are detached")?;
        let p: &mut BtfTracePoint = bpf
            .program_mut(XMIT.0)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| format!("the BPF object has no BTF tracepoint program {}", XMIT.0))?;
        match (on, self.xmit.take()) {
            (true, None) => {
                self.xmit = Some(p.attach().map_err(|e| format!("attaching {} to {}: {e}", XMIT.0, XMIT.1))?);
                if let Some(off) = self.xmit_off.last_mut().filter(|o| o.1 == 0) {
                    off.1 = crate::ebpf::monotonic_ns();
                }
            }
            (false, Some(link)) => {
                p.detach(link).map_err(|e| format!("detaching {}: {e}", XMIT.0))?;
                self.xmit_off.push((crate::ebpf::monotonic_ns(), 0));
            }
            (_, link) => self.xmit = link,
        }
        Ok(())
    }

    /// Whether a program asked for the transmit program.
    fn xmit_wanted(&self) -> bool {
        self.want_xmit.get(&0, 0).is_ok_and(|w| w != 0)
    }

    /// Detaches the programs; the maps stay readable.
    fn detach(&mut self) {
        self.bpf = None;
        self.xmit = None;
    }
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

/// Appends `item` to `into` while it holds less than `room` bytes, else
/// counts its records in `overflow`.
fn keep(into: &mut Raw, item: &[u8], room: usize, overflow: &mut u64) {
    if into.len < room {
        into.push(item);
    } else {
        *overflow += records::records_in(item).count() as u64;
    }
}

/// This thread's CPU time, ns: unlike the wall clock, not inflated when
/// other work on the host takes the CPU away mid-loop.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime with a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `n` non-blocking reads on a connected loopback TCP socket, CPU ns per call
/// (the programs run in the calling thread, so their time is counted).
fn read_loop(n: u32) -> Option<f64> {
    use std::os::fd::AsRawFd;
    let l = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
    let c = std::net::TcpStream::connect(l.local_addr().ok()?).ok()?;
    let _peer = l.accept().ok()?;
    let fd = c.as_raw_fd();
    let mut b = [0u8; 1];
    let t = thread_cpu_ns();
    for _ in 0..n {
        // SAFETY: recv into a valid buffer on our own socket; EAGAIN expected.
        unsafe { libc::recv(fd, b.as_mut_ptr().cast(), 1, libc::MSG_DONTWAIT) };
    }
    Some(thread_cpu_ns().saturating_sub(t) as f64 / f64::from(n))
}

fn median3(f: &mut dyn FnMut() -> Option<f64>) -> Option<f64> {
    let mut v: Vec<f64> = (0..3).filter_map(|_| f()).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Measures a traced and an untraced call: `base` was measured before the
/// programs were attached; the calibration's own records are thrown away.
fn calibrate(s: &mut Session, base: Option<f64>) -> Option<Calibration> {
    let me = std::process::id();
    let other = median3(&mut || read_loop(CAL_CALLS))?;
    s.mark(me, true).ok()?;
    let mut junk = 0;
    let traced = median3(&mut || {
        let r = read_loop(CAL_CALLS);
        s.drain(&mut Raw::default(), 0, &mut junk);
        r
    });
    let _ = s.mark(me, false);
    s.drain(&mut Raw::default(), 0, &mut junk);
    let base = base?;
    Some(Calibration { traced_ns: (traced? - base).max(0.0), other_ns: (other - base).max(0.0) })
}

/// Traces `req.pids` with the programs in a fresh [`Session`] until the
/// window ends, `stop` is set or the process exits; Err when eBPF cannot be used.
pub(super) fn record(req: &Request, stop: &AtomicBool) -> Result<(Recording, Extra), String> {
    let base = median3(&mut || read_loop(CAL_CALLS));
    let mut s = start()?;
    let calibration = calibrate(&mut s, base);
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
    while started.elapsed() < req.duration && !stop.load(Ordering::Relaxed) {
        // While the transmit program is off, the flag is read more often than the ring.
        let nap = if s.xmit.is_none() { every.min(XMIT_POLL) } else { every };
        std::thread::sleep(nap.min(req.duration.saturating_sub(started.elapsed())));
        if drained.elapsed() >= every {
            let read = s.drain(&mut raw, room, &mut overflow);
            every = if read >= BUSY_BYTES { DRAIN_BUSY } else { DRAIN_EVERY };
            drained = Instant::now();
        }
        wanted = wanted || s.xmit_wanted();
        let switch = match (wanted, s.xmit.is_some()) {
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
    // When the transmit program was off, relative to the window's start.
    let xmit_off: Vec<(u64, u64)> = s
        .xmit_off
        .iter()
        .map(|&(a, b)| (a.saturating_sub(t0), if b == 0 { t_end } else { b }.saturating_sub(t0)))
        .collect();
    drop(s);
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
        notes,
    };
    Ok((rec, Extra { lost, sent, calibration, holds, hooks }))
}

#[cfg(test)]
mod tests {
    use super::super::records::{CallRec, EV_CALL, EV_SOCK, EV_XMIT, SegRec, SockRec};
    use super::*;

    fn bytes<T: Copy>(v: &T) -> Vec<u8> {
        // SAFETY: the record types are plain integers, read as bytes.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }

    #[test]
    fn items_copied_while_tracing_are_the_records_after() {
        let call = |t| CallRec { kind: EV_CALL, t, ino: 3, ..CallRec::default() };
        let sock = SockRec { kind: EV_SOCK, ino: 3, lport: 80, ..SockRec::default() };
        let seg = SegRec { kind: EV_XMIT, ino: 3, t: 5, seq: 1, end: 9, ..SegRec::default() };
        let mut raw = Raw::default();
        raw.push(&bytes(&sock));
        raw.push(&bytes(&call(1)));
        // A stage: several records in one item.
        raw.push(&[bytes(&seg), bytes(&call(7)), bytes(&call(8))].concat());
        raw.push(&bytes(&call(9)));
        assert_eq!(
            raw.records(),
            [
                Record::Sock(sock),
                Record::Call(call(1)),
                Record::Segment(seg),
                Record::Call(call(7)),
                Record::Call(call(8)),
                Record::Call(call(9))
            ]
        );
    }

    #[test]
    fn items_spread_over_several_chunks_come_back_in_order() {
        let mut raw = Raw::default();
        let n = RAW_CHUNK / 50;
        for t in 0..n as u64 {
            raw.push(&bytes(&CallRec { kind: EV_CALL, t, ino: 3, ..CallRec::default() }));
        }
        assert!(raw.chunks.len() >= 2, "{} chunks", raw.chunks.len());
        let ts: Vec<u64> = raw.records().iter().map(Record::t).collect();
        assert_eq!(ts, (0..n as u64).collect::<Vec<_>>());
    }

    #[test]
    fn items_past_the_room_are_counted_not_kept() {
        let call = CallRec { kind: EV_CALL, t: 1, ino: 3, ..CallRec::default() };
        let stage = [bytes(&call), bytes(&call), bytes(&call)].concat();
        let (mut raw, mut over) = (Raw::default(), 0);
        keep(&mut raw, &stage, 100, &mut over);
        keep(&mut raw, &stage, 100, &mut over);
        assert_eq!((raw.records().len(), over), (3, 3));
    }
}
