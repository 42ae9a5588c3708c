//! Loaded and attached programs: the maps the recorder reads and writes,
//! the ring, the CPUs' stages, and the programs attached and detached while
//! it runs (the transmit program on demand, the call programs in slices).

use super::super::records::{self, Stage};
use super::raw::{Raw, keep};
use super::{ALWAYS, EMPTY, FORCE_SYSCALLS, Hooks, XMIT, env_set};
use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use aya::programs::BtfTracePoint;
use aya::programs::tp_btf::BtfTracePointLinkId;
use std::time::Duration;

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
    // The socket tracepoints' call programs are attached here, not at load,
    // so that they can be detached and attached again (`set_calls`).
    let (now, later): (Vec<_>, Vec<_>) = match hooks {
        Hooks::Sock => (ALWAYS.to_vec(), [XMIT].into_iter().chain(hooks.calls()).collect()),
        Hooks::Syscalls => (hooks.calls().into_iter().chain(ALWAYS).collect(), vec![XMIT]),
    };
    let mut bpf = crate::ebpf::load_with(crate::ebpf::TRACE_OBJ, &consts, &now, &later)?;
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
    let sock_calls = hooks.calls();
    let mut s = Session {
        traced: Array::try_from(take(&mut bpf, "traced")?).map_err(map_err)?,
        ring: RingBuf::try_from(take(&mut bpf, "events")?).map_err(map_err)?,
        counts: PerCpuArray::try_from(take(&mut bpf, "counts")?).map_err(map_err)?,
        stages: PerCpuArray::try_from(take(&mut bpf, "stages")?).map_err(map_err)?,
        want_xmit: Array::try_from(take(&mut bpf, "want_xmit")?).map_err(map_err)?,
        sampling: Array::try_from(take(&mut bpf, "sampling")?).map_err(map_err)?,
        xmit: Switch::new(&[XMIT]),
        calls: Switch::new(if hooks == Hooks::Sock { &sock_calls } else { &[] }),
        hooks,
        not_sock,
        _calls: calls,
        bpf: Some(bpf),
    };
    s.set_calls(true)?;
    s.calls.off.clear();
    Ok(s)
}

/// BTF tracepoint programs attached and detached together while the rest
/// stay attached, and when they were off.
pub(super) struct Switch {
    progs: Vec<(&'static str, &'static str)>,
    links: Vec<BtfTracePointLinkId>,
    /// (from, to) in monotonic ns, `to` 0 while still off; `from` is taken
    /// before detaching and `to` before attaching, so that every record made
    /// in between (a program still running as it was detached) falls inside.
    pub(super) off: Vec<(u64, u64)>,
}

impl Switch {
    fn new(progs: &[(&'static str, &'static str)]) -> Switch {
        Switch { progs: progs.to_vec(), links: Vec::new(), off: Vec::new() }
    }

    pub(super) fn is_on(&self) -> bool {
        !self.links.is_empty()
    }

    /// Attaches (`on`) or detaches the programs; nothing when they already are.
    fn set(&mut self, bpf: &mut aya::Ebpf, on: bool) -> Result<(), String> {
        if on == self.is_on() || self.progs.is_empty() {
            return Ok(());
        }
        let now = crate::ebpf::monotonic_ns();
        if on {
            if let Some(off) = self.off.last_mut().filter(|o| o.1 == 0) {
                off.1 = now;
            }
        } else {
            self.off.push((now, 0));
        }
        let mut links = std::mem::take(&mut self.links).into_iter();
        for &(name, tp) in &self.progs {
            let p: &mut BtfTracePoint = bpf
                .program_mut(name)
                .and_then(|p| p.try_into().ok())
                .ok_or_else(|| format!("the BPF object has no BTF tracepoint program {name}"))?;
            if on {
                self.links.push(p.attach().map_err(|e| format!("attaching {name} to {tp}: {e}"))?);
            } else if let Some(link) = links.next() {
                p.detach(link).map_err(|e| format!("detaching {name}: {e}"))?;
            }
        }
        Ok(())
    }
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
    /// Which TCP_NODELAY sockets are traced: a mask (low half; 0: all) and
    /// the value a socket's hash under it must have (high half).
    sampling: Array<MapData, u64>,
    /// The transmit program, attached while some socket needs it.
    pub(super) xmit: Switch,
    /// The call programs at the socket tracepoints (none with the syscall
    /// ones), attached in slices on a busy TCP_NODELAY-only server.
    pub(super) calls: Switch,
    pub(super) hooks: Hooks,
    pub(super) not_sock: Option<String>,
    _calls: Array<MapData, u8>,
    /// The programs: None once detached (the maps above stay readable).
    bpf: Option<aya::Ebpf>,
}

impl Session {
    /// Traces process `pid` (`on`) or stops tracing it.
    pub(super) fn mark(&mut self, pid: u32, on: bool) -> Result<(), String> {
        let (w, bit) = (pid >> 6, 1u64 << (pid & 63));
        let err = |e: aya::maps::MapError| format!("BPF map: {e}");
        let word = self.traced.get(&w, 0).map_err(err)?;
        self.traced.set(w, if on { word | bit } else { word & !bit }, 0).map_err(err)
    }

    /// Records the ring had no room for.
    pub(super) fn lost(&self) -> u64 {
        self.counts.get(&0, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }

    /// Calls seen so far on TCP_NODELAY sockets of the traced processes.
    pub(super) fn nodelay_calls(&self) -> u64 {
        self.counts.get(&1, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }

    /// Calls seen so far on the traced processes' other sockets (Nagle on, or
    /// corked) once past their first response (two reads of data).
    pub(super) fn nagle_calls(&self) -> u64 {
        self.counts.get(&2, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }

    /// From now on, traces the TCP_NODELAY sockets whose hash is `pick` in
    /// its low bits, one in `one_in` (a power of two).
    pub(super) fn sample(&mut self, one_in: u32, pick: u32) -> Result<(), String> {
        let mask = one_in.saturating_sub(1);
        let value = u64::from(mask) | u64::from(pick & mask) << 32;
        self.sampling.set(0, value, 0).map_err(|e| format!("BPF map: {e}"))
    }

    /// Reads every waiting item into `into` while it holds less than `room`
    /// bytes (the records of the rest are counted in `overflow`); returns the bytes read.
    pub(super) fn drain(&mut self, into: &mut Raw, room: usize, overflow: &mut u64) -> usize {
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
    pub(super) fn leftovers(&mut self, into: &mut Raw, room: usize, overflow: &mut u64) {
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
    pub(super) fn set_xmit(&mut self, on: bool) -> Result<(), String> {
        let bpf = self.bpf.as_mut().ok_or("the programs are detached")?;
        self.xmit.set(bpf, on)
    }

    /// Attaches (`on`) or detaches the call programs (socket tracepoints only).
    pub(super) fn set_calls(&mut self, on: bool) -> Result<(), String> {
        let bpf = self.bpf.as_mut().ok_or("the programs are detached")?;
        self.calls.set(bpf, on)
    }

    /// Whether a program asked for the transmit program.
    pub(super) fn xmit_wanted(&self) -> bool {
        self.want_xmit.get(&0, 0).is_ok_and(|w| w != 0)
    }

    /// Detaches the programs; the maps stay readable.
    pub(super) fn detach(&mut self) {
        self.bpf = None;
        self.xmit.links.clear();
        self.calls.links.clear();
    }
}
