//! What `inspect --trace` recorded: the write pattern, an example, the
//! kernel's hold and what tracing cost.

use serde::Serialize;

/// What `inspect --trace` recorded (with eBPF or ptrace) and what it shows.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct Trace {
    /// The window asked for, ms.
    pub requested_ms: f64,
    /// How long the process was traced, ms.
    pub traced_ms: f64,
    /// Stopped early by Ctrl-C (or SIGTERM).
    pub interrupted: bool,
    /// The process exited during the trace: the results cover the time before.
    pub exited: bool,
    /// Processes traced: the process and the workers sharing its listening sockets.
    pub processes: Vec<u32>,
    /// Threads traced, those started during the trace included.
    pub threads: u32,
    /// Threads started during the trace.
    pub new_threads: u32,
    /// TCP sockets with recorded calls.
    pub sockets: u32,
    /// Calls recorded: reads and writes on TCP sockets, and waits (epoll, poll, select).
    pub calls: u64,
    /// Responses seen whole: writes on a socket, then a read on it.
    pub responses: u64,
    /// Counts per kind of socket (its role and whether Nagle could hold its writes).
    pub kinds: Vec<TraceKind>,
    /// Responses on sockets with Nagle on (TCP_NODELAY off, not corked).
    pub nagle_responses: u64,
    /// Of those, the fraction written in two or more pieces.
    pub nagle_in_pieces_fraction: Option<f64>,
    /// Responses on Nagle sockets written in two or more pieces smaller than the
    /// MSS and followed by a read: write-write-read, the stall's shape.
    pub write_write_read: u64,
    /// Write-write-read responses left out of that count because each was a new
    /// connection's first (its peer ACKs at once then, in quick-ACK mode).
    pub first_responses: u64,
    /// Write-write-read was found on a Nagle socket.
    pub found: bool,
    /// Median time from a write-write-read response's last write to the next
    /// request's data, ms (~40 when each response waits for a delayed ACK).
    pub gap_wwr_ms: Option<f64>,
    /// The same over the other responses, ms.
    pub gap_other_ms: Option<f64>,
    /// Sockets whose MSS tcp_info could not give (closed before the end): 1448 assumed.
    pub mss_default_sockets: u32,
    /// One response shown call by call.
    pub example: Option<TraceExample>,
    /// `ebpf` or `ptrace`.
    pub method: &'static str,
    /// Why eBPF was not used, when it was tried and ptrace used instead.
    pub fallback: Option<String>,
    /// What ptrace cost the process (absent with eBPF).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead: Option<TraceOverhead>,
    /// What the eBPF programs cost (absent with ptrace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<TraceCost>,
    /// eBPF only: when each write's bytes left the host, as the kernel saw it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_hold: Option<TraceHold>,
    /// eBPF only, when write-write-read was found: whether the kernel held
    /// by Nagle at least half as many writes as there were write-write-read
    /// responses. false: the pieces left as they were written, so the time
    /// between them was the application's, not a Nagle stall.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_confirms: Option<bool>,
    /// The finding in one sentence.
    pub text: String,
    /// What could not be traced, and why.
    pub notes: Vec<String>,
}

/// Responses on one kind of socket.
#[derive(Clone, Debug, Serialize, Default, PartialEq, Eq, schemars::JsonSchema)]
pub struct TraceKind {
    /// `accepted` (server side), `outgoing` (client side), `listening` or `unknown`.
    pub role: &'static str,
    /// `nagle` (TCP_NODELAY off), `nodelay`, `corked` (TCP_CORK or MSG_MORE) or `unknown`, at the writes.
    pub nagle: &'static str,
    /// Sockets.
    pub sockets: u32,
    /// Responses.
    pub responses: u64,
    /// Written in one piece.
    pub single: u64,
    /// Written in two or more pieces.
    pub in_pieces: u64,
    /// In two or more pieces smaller than the MSS, then a read.
    pub write_write_read: u64,
}

/// One response and what followed it, call by call.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct TraceExample {
    /// Process holding the socket.
    pub pid: u32,
    /// Its descriptor.
    pub fd: i32,
    /// Local `ip:port`, when known.
    pub local: Option<String>,
    /// Peer `ip:port`, when known.
    pub peer: Option<String>,
    /// Nagle state at the writes: `nagle`, `nodelay`, `corked` or `unknown`, as in `kinds`.
    pub nagle: &'static str,
    /// Last write → the next request's data, ms.
    pub gap_ms: Option<f64>,
    /// The calls, from the first write.
    pub lines: Vec<TraceLine>,
    /// Calls left out of the middle.
    pub elided: usize,
}

/// One call of an example.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct TraceLine {
    /// Entry time, ms after the example's first write (with eBPF on the
    /// socket tracepoints: the time the call ended).
    pub t_ms: f64,
    /// Time in the call, ms; null when not known (eBPF on the socket
    /// tracepoints sees a call only as it ends).
    pub took_ms: Option<f64>,
    /// Thread.
    pub tid: u32,
    /// Syscall name.
    pub call: &'static str,
    /// `write`, `read` or `wait`.
    pub kind: &'static str,
    /// Descriptor (absent for waits, and for a call outside a socket syscall such as io_uring's).
    pub fd: Option<i32>,
    /// Return value: bytes, ready descriptors, or -errno.
    pub ret: i64,
    /// The line as printed, e.g. `+0.000 writev fd 7 212 B`.
    pub text: String,
}

/// The slowdown tracing caused.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct TraceOverhead {
    /// Syscall stops (two per traced syscall: entry and exit), and other stops.
    pub stops: u64,
    /// Stops per second: the traced process's syscall rate, doubled.
    pub stops_per_s: f64,
    /// Measured at start: what one stop costs a process (a child's getppid()
    /// loop, traced vs untraced), µs.
    pub calibrated_us_per_stop: Option<f64>,
    /// The tracer's own time per stop in this trace (wait return → resume), µs.
    pub tracer_us_per_stop: f64,
    /// The longest such time, µs (a new socket looked up in /proc).
    pub tracer_us_max: f64,
    /// The estimate used: calibrated cost plus the tracer's extra work here, µs.
    pub us_per_stop: f64,
    /// Added to each traced syscall (two stops), µs.
    pub added_us_per_syscall: f64,
    /// Thread time held in stops per second of trace, summed over threads
    /// (stops/s × cost; above 1 with several busy threads): a single-threaded
    /// server loses this share of its capacity.
    pub held_share: f64,
    /// Time added to the process per response, ms (stops per response × cost):
    /// the added latency of a response served alone; queued ones wait longer.
    pub added_ms_per_response: Option<f64>,
    /// Signals passed on to the process during the trace.
    pub signals_passed: u64,
    /// The estimate in words.
    pub text: String,
}

/// What the eBPF programs cost.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct TraceCost {
    /// Where the calls were seen: `sock` (the socket tracepoints, at the end
    /// of each socket read or write: no waits, no durations) or `syscalls`
    /// (the syscall tracepoints, the fallback: every syscall on the host passes them).
    pub tracepoints: &'static str,
    /// Records the programs sent (calls, and the transmits of watched bytes).
    pub records: u64,
    /// Per second of trace.
    pub records_per_s: f64,
    /// Records lost (the ring buffer was full).
    pub lost: u64,
    /// Traced calls per second.
    pub calls_per_s: f64,
    /// Measured at start: the CPU time the programs add to a traced call (a
    /// read on a TCP socket of a traced process), µs.
    pub calibrated_us_per_call: Option<f64>,
    /// Measured at start: the CPU time they add to another process's socket
    /// read (with `syscalls`: to any other syscall on the host), ns.
    pub calibrated_ns_other_syscall: Option<f64>,
    /// Thread time added per second of trace, summed over threads (calls/s × cost).
    pub held_share: Option<f64>,
    /// Time added to the process per response, ms.
    pub added_ms_per_response: Option<f64>,
    /// One socket with TCP_NODELAY (and no cork) in this many was traced
    /// from `sampled_from_s` on, because such sockets' calls came faster than
    /// a trace needs; 1: every socket was traced for the whole window.
    /// Sockets with Nagle on, and corked ones, are always all traced.
    pub sampled_one_in: u32,
    /// Seconds into the window when sampling began.
    pub sampled_from_s: Option<f64>,
    /// Share of the window the call programs were attached: 1 unless every
    /// traced socket had TCP_NODELAY and their calls came fast, when they are
    /// attached in slices from `sliced_from_s` on (the calls in between are
    /// not seen).
    pub calls_attached_share: f64,
    /// Seconds into the window when the slices began.
    pub sliced_from_s: Option<f64>,
    /// The cost in words.
    pub text: String,
}

/// When each write's bytes left the host (eBPF: the send queue's sequence
/// numbers at the write joined with the device transmits).
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct TraceHold {
    /// Writes followed.
    pub writes: u64,
    /// Left the host during the call (0 ms held: an application that writes late is seen here).
    pub at_once: u64,
    /// Held in the send queue by Nagle (small, data in flight, TCP_NODELAY off) until an ACK.
    pub nagle: u64,
    /// Median and longest Nagle hold, ms.
    pub nagle_median_ms: Option<f64>,
    pub nagle_max_ms: Option<f64>,
    /// Held for another reason (TCP_CORK, MSG_MORE, the congestion or receive window).
    pub held_other: u64,
    /// Their median hold, ms.
    pub held_other_median_ms: Option<f64>,
    /// Lost before they left the host (dropped below TCP by netfilter or a
    /// qdisc, or sent and re-sent) and left in a re-send: not held.
    pub resent: u64,
    /// Sent by TCP at once, left a device later (a queue below TCP).
    pub queued: u64,
    /// Not seen leaving before the trace ended.
    pub unseen: u64,
    /// One hold in words.
    pub example: Option<String>,
    /// The section in one line.
    pub text: String,
}
