//! `inspect`'s JSON schema and its text.

use super::escape::clean;
use super::units::ms;
use serde::Serialize;
use std::fmt::Write;

/// What `tcpdoctor inspect` found about one process.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct InspectReport {
    /// Schema version ([`super::SCHEMA_VERSION`]).
    pub schema: u32,
    /// tcpdoctor's version.
    pub version: &'static str,
    /// The process inspected.
    pub process: Process,
    /// Only sockets on this local port are listed (`inspect :PORT`).
    pub port: Option<u16>,
    /// The server software and its own TCP knobs.
    pub software: Software,
    /// TCP sockets of the process (and its workers): listening first, then by local and peer address.
    pub sockets: Vec<Socket>,
    /// Counts over `sockets`.
    pub summary: Summary,
    /// Host settings and counters that change the picture.
    pub host: Host,
    /// What to change, most direct first (empty when nothing is wrong).
    pub advice: Vec<String>,
    /// Things worth knowing about this run (what could not be read, and why).
    pub notes: Vec<String>,
    /// The write pattern recorded with `--trace` (absent without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<Trace>,
}

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
    /// Nagle state at the writes (as in [`TraceKind::nagle`]).
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

/// The process and the workers inspected with it.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct Process {
    /// Process id.
    pub pid: u32,
    /// Short name (`/proc/PID/comm`).
    pub comm: String,
    /// Command line, arguments joined by spaces.
    pub cmdline: String,
    /// Executable (`/proc/PID/exe`), when readable.
    pub exe: Option<String>,
    /// Real user id.
    pub uid: Option<u32>,
    /// Child processes that share its listening sockets (e.g. nginx workers); their sockets are included.
    pub workers: Vec<u32>,
    /// The process exited before the inspection window ended.
    pub exited: bool,
}

/// The server software, recognised from the process, and its own knobs.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct Software {
    /// `nginx`, `jdk-httpserver`, `java`, `python`, `node`, `go` or `other`.
    pub kind: &'static str,
    /// A readable name, with the version when known (`nginx 1.22.1`, `Go go1.22.1`).
    pub name: String,
    /// The software's own TCP_NODELAY setting (nginx `tcp_nodelay`, the JDK's
    /// `sun.net.httpserver.nodelay`, Go's default), when known.
    pub nodelay_setting: Option<bool>,
    /// Where `nodelay_setting` comes from (`nginx -T`, `command line`, `default`…).
    pub setting_source: Option<String>,
    /// Other settings that matter, as read (e.g. nginx `sendfile`, `tcp_nopush`, `keepalive_timeout`).
    pub settings: Vec<Setting>,
    /// How this software sets TCP_NODELAY, and what else is worth knowing.
    pub notes: Vec<String>,
}

/// One named setting and its effective value.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Setting {
    /// Name as the software spells it.
    pub name: String,
    /// Effective value.
    pub value: String,
    /// `config` (set explicitly) or `default`.
    pub source: &'static str,
}

/// One TCP socket of the process.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct Socket {
    /// Process holding it.
    pub pid: u32,
    /// Its file descriptor in that process.
    pub fd: i32,
    /// Socket inode.
    pub inode: u64,
    /// `listen`, `established`, `close_wait`… (lower case, as in `ss`).
    pub state: String,
    /// `listening`, `accepted` (local port is one the process listens on) or `outgoing`.
    pub role: &'static str,
    /// Local `ip:port` (IPv6 as `[addr]:port`).
    pub local: String,
    /// Peer `ip:port` (`*:*` when listening).
    pub peer: String,
    /// TCP_NODELAY (Nagle off); null when it could not be read.
    pub nodelay: Option<bool>,
    /// TCP_CORK.
    pub cork: Option<bool>,
    /// `getsockopt(TCP_QUICKACK)`: true when the socket is not in delayed-ACK (pingpong) mode now.
    pub quickack: Option<bool>,
    /// Delayed-ACK (interactive, pingpong) mode, from /proc/net/tcp.
    pub pingpong: Option<bool>,
    /// Quick ACKs left before delayed ACKs start, from /proc/net/tcp.
    pub quick_acks_left: Option<u32>,
    /// Kernel TCP state (`tcp_info` from sock_diag); null when the socket was gone.
    pub info: Option<TcpInfo>,
    /// A segment is held right now: small unsent bytes wait behind unacknowledged data
    /// with Nagle on (TCP_NODELAY and TCP_CORK off) — a live Nagle stall.
    pub held_now: bool,
}

/// The `tcp_info` fields that tell a Nagle or delayed-ACK story.
#[derive(Clone, Debug, Serialize, Default, PartialEq, schemars::JsonSchema)]
pub struct TcpInfo {
    /// Smoothed round trip, ms.
    pub rtt_ms: f64,
    /// Round-trip variation, ms.
    pub rttvar_ms: f64,
    /// Delayed-ACK timeout, ms (40 when it delays ACKs at the minimum).
    pub ato_ms: f64,
    /// Retransmission timeout, ms.
    pub rto_ms: f64,
    /// Send MSS, bytes.
    pub mss: u32,
    /// Receive MSS estimate, bytes.
    pub rcv_mss: u32,
    /// Segments sent and not yet acknowledged (listening: accept queue length).
    pub unacked: u32,
    /// Bytes written by the application and not sent yet.
    pub notsent: Option<u32>,
    /// Retransmission timeouts in a row now.
    pub retransmits: u32,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Time since the last data was sent, ms.
    pub last_data_sent_ms: u32,
    /// Time since the last data was received, ms.
    pub last_data_recv_ms: u32,
}

/// Counts over the sockets.
#[derive(Clone, Debug, Serialize, Default, PartialEq, Eq, schemars::JsonSchema)]
pub struct Summary {
    /// Sockets listed.
    pub sockets: u32,
    /// Listening sockets.
    pub listening: u32,
    /// Established connections.
    pub established: u32,
    /// Established connections with TCP_NODELAY off (Nagle on).
    pub nagle_on: u32,
    /// Established connections whose TCP_NODELAY could not be read.
    pub nodelay_unknown: u32,
    /// Established connections with TCP_CORK on.
    pub corked: u32,
    /// Connections holding a segment right now (see `Socket::held_now`).
    pub held_now: u32,
    /// The sentence, e.g. "12 of 12 established connections have Nagle on (TCP_NODELAY off)".
    pub text: String,
}

impl Summary {
    /// Counts over `sockets`.
    pub fn of(sockets: &[Socket]) -> Summary {
        let est: Vec<&Socket> = sockets.iter().filter(|s| s.state == "established").collect();
        let n = |f: &dyn Fn(&Socket) -> bool| est.iter().filter(|s| f(s)).count() as u32;
        let mut s = Summary {
            sockets: sockets.len() as u32,
            listening: sockets.iter().filter(|s| s.state == "listen").count() as u32,
            established: est.len() as u32,
            nagle_on: n(&|s| s.nodelay == Some(false)),
            nodelay_unknown: n(&|s| s.nodelay.is_none()),
            corked: n(&|s| s.cork == Some(true)),
            held_now: sockets.iter().filter(|s| s.held_now).count() as u32,
            text: String::new(),
        };
        s.text = if s.established == 0 {
            "no established connections".to_string()
        } else {
            let mut t = format!(
                "{} of {} established connection{} {} Nagle on (TCP_NODELAY off)",
                s.nagle_on,
                s.established,
                plural(s.established),
                if s.established == 1 { "has" } else { "have" }
            );
            if s.nodelay_unknown > 0 {
                let _ = write!(t, "; {} unreadable", s.nodelay_unknown);
            }
            if s.held_now > 0 {
                let _ = write!(t, "; {} holding a segment right now", s.held_now);
            }
            t
        };
        s
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Host settings and counters.
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct Host {
    /// How long the counters were watched, ms.
    pub window_ms: f64,
    /// TcpExt counter increases over the window (host-wide, all processes).
    pub counters: Vec<Counter>,
    /// `net.ipv4.tcp_autocorking`.
    pub tcp_autocorking: Option<i64>,
    /// `net.ipv4.tcp_pingpong_thresh` (absent on older kernels).
    pub tcp_pingpong_thresh: Option<i64>,
    /// Routes to the peers of established connections.
    pub routes: Vec<Route>,
}

/// One TcpExt counter's increase.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Counter {
    /// Name as in /proc/net/netstat (`DelayedACKs`…).
    pub name: String,
    /// Increase over the window.
    pub delta: u64,
}

/// The route to one peer and its ACK-related metrics.
#[derive(Clone, Debug, Serialize, Default, PartialEq, schemars::JsonSchema)]
pub struct Route {
    /// Peer address.
    pub peer: String,
    /// The route, as `ip route get` prints it (first line).
    pub route: String,
    /// `quickack` route metric (1: this host never delays ACKs to this peer).
    pub quickack: Option<u32>,
    /// `rto_min` route metric, ms (since Linux 6.7 it also caps the delayed-ACK timeout).
    pub rto_min_ms: Option<f64>,
}

/// Most connections listed in the text (listening sockets are always listed); `--json` has all.
const TEXT_ROWS: usize = 24;

/// The whole report as text: the process, the summary sentence, then the
/// details (software, sockets, host), then what to change.
pub fn render(r: &InspectReport) -> String {
    let mut o = String::new();
    let p = &r.process;
    // The command line and the name are the process's own to set: shown escaped.
    let _ = write!(o, "PROCESS {} {}", p.pid, clean(if p.cmdline.is_empty() { &p.comm } else { &p.cmdline }));
    if let Some(uid) = p.uid {
        let _ = write!(o, " (uid {uid})");
    }
    o.push('\n');
    if !p.workers.is_empty() {
        let w: Vec<String> = p.workers.iter().map(u32::to_string).collect();
        let _ = writeln!(o, "  workers sharing its listening sockets: {}", w.join(" "));
    }
    if p.exited {
        o.push_str("  exited during the inspection: its sockets are shown as they were before\n");
    }
    let _ = writeln!(o, "SUMMARY {}", r.summary.text);
    if let Some(port) = r.port {
        let _ = writeln!(o, "  sockets on local port {port} only");
    }
    render_software(&mut o, &r.software);
    render_sockets(&mut o, r);
    render_host(&mut o, &r.host);
    if let Some(t) = &r.trace {
        render_trace(&mut o, t);
    }
    if !r.advice.is_empty() {
        o.push_str("\nADVICE\n");
        for a in &r.advice {
            let _ = writeln!(o, "  - {a}");
        }
    }
    if !r.notes.is_empty() {
        o.push_str("\nNOTES\n");
        for n in &r.notes {
            let _ = writeln!(o, "  - {n}");
        }
    }
    o
}

fn render_software(o: &mut String, s: &Software) {
    let _ = write!(o, "\nSOFTWARE {}", clean(&s.name));
    if s.kind == "other" {
        o.push_str(" (no server software tcpdoctor knows)");
    }
    o.push('\n');
    if let Some(v) = s.nodelay_setting {
        let _ = write!(o, "  its own setting: TCP_NODELAY {}", on_off(v));
        if let Some(src) = &s.setting_source {
            let _ = write!(o, "; source: {}", clean(src));
        }
        o.push('\n');
    }
    if !s.settings.is_empty() {
        let v: Vec<String> = s
            .settings
            .iter()
            .map(|x| {
                if x.source == "default" {
                    format!("{} {} (default)", x.name, clean(&x.value))
                } else {
                    format!("{} {}", x.name, clean(&x.value))
                }
            })
            .collect();
        let _ = writeln!(o, "  {}", v.join(", "));
    }
    // Notes may quote a helper's error output (`nginx -T` failed: …).
    for n in &s.notes {
        let _ = writeln!(o, "  {}", clean(n));
    }
}

fn on_off(v: bool) -> &'static str {
    if v { "on" } else { "off" }
}

fn opt_flag(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "on",
        Some(false) => "off",
        None => "?",
    }
}

fn render_sockets(o: &mut String, r: &InspectReport) {
    let _ = writeln!(o, "\nSOCKETS ({})", r.sockets.len());
    if r.sockets.is_empty() {
        return;
    }
    let multi = !r.process.workers.is_empty();
    // Listening sockets first (the list is sorted so), then the first connections.
    let listening = r.sockets.iter().take_while(|s| s.state == "listen").count();
    let shown = r.sockets.len().min(listening + TEXT_ROWS);
    let rows: Vec<Vec<String>> = r.sockets[..shown]
        .iter()
        .map(|s| {
            let mut row = Vec::new();
            if multi {
                row.push(s.pid.to_string());
            }
            row.push(s.fd.to_string());
            row.push(s.state.clone());
            row.push(s.local.clone());
            row.push(s.peer.clone());
            row.push(opt_flag(s.nodelay).into());
            row.push(opt_flag(s.cork).into());
            let listen = s.state == "listen";
            row.push(match s.pingpong {
                _ if listen => "-".into(),
                Some(true) => "delayed".into(),
                Some(false) => match s.quick_acks_left {
                    Some(q) if q > 0 => format!("quick({q})"),
                    _ => "quick".into(),
                },
                None => "?".into(),
            });
            match &s.info {
                Some(i) if !listen => {
                    row.push(format!("{:.3}", i.rtt_ms));
                    row.push(format!("{:.0}", i.ato_ms));
                    row.push(i.mss.to_string());
                    row.push(i.rcv_mss.to_string());
                    row.push(i.unacked.to_string());
                    row.push(i.notsent.map_or("?".into(), |n| n.to_string()));
                    row.push(i.total_retrans.to_string());
                }
                _ => row.extend(std::iter::repeat_n("-".to_string(), 7)),
            }
            if s.held_now {
                row.push("HELD".into());
            }
            row
        })
        .collect();
    let mut head: Vec<&str> = Vec::new();
    if multi {
        head.push("pid");
    }
    head.extend([
        "fd", "state", "local", "peer", "nodelay", "cork", "acks", "rtt_ms", "ato_ms", "mss", "rcvmss", "unacked",
        "notsent", "retrans",
    ]);
    let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |o: &mut String, cells: &[String]| {
        let mut l = String::from(" ");
        for (i, c) in cells.iter().enumerate() {
            let w = width.get(i).copied().unwrap_or(0);
            let _ = write!(l, " {c:<w$}");
        }
        let _ = writeln!(o, "{}", l.trim_end());
    };
    line(o, &head.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    for row in &rows {
        line(o, row);
    }
    let rest = &r.sockets[shown..];
    if !rest.is_empty() {
        let held = rest.iter().filter(|s| s.held_now).count();
        let nagle = rest.iter().filter(|s| s.state == "established" && s.nodelay == Some(false)).count();
        let _ = writeln!(
            o,
            "  … {} more not shown ({nagle} with Nagle on, {held} holding a segment); --json lists every socket",
            rest.len()
        );
    }
}

fn render_host(o: &mut String, h: &Host) {
    let _ = write!(o, "\nHOST over {:.1} s:", h.window_ms / 1e3);
    if h.counters.is_empty() {
        o.push_str(" TcpExt counters unreadable");
    }
    let c: Vec<String> = h.counters.iter().map(|c| format!("{} +{}", c.name, c.delta)).collect();
    let _ = writeln!(o, " {}", c.join(", "));
    let sysctl = |v: Option<i64>| v.map_or("absent".to_string(), |v| v.to_string());
    let _ = writeln!(
        o,
        "  tcp_autocorking {}, tcp_pingpong_thresh {}",
        sysctl(h.tcp_autocorking),
        sysctl(h.tcp_pingpong_thresh)
    );
    for r in &h.routes {
        let q = r.quickack.map_or("-".to_string(), |q| q.to_string());
        let m = r.rto_min_ms.map_or("-".to_string(), |m| {
            if m >= 1000.0 && m % 1000.0 == 0.0 { format!("{}s", m / 1000.0) } else { format!("{m}ms") }
        });
        let _ = writeln!(o, "  route to {}: quickack {q}, rto_min {m} ({})", r.peer, r.route);
    }
}

/// The `--trace` section: counts per kind, the fraction in pieces, one example, the cost.
pub fn render_trace(o: &mut String, t: &Trace) {
    let _ = writeln!(
        o,
        "\nWRITE PATTERN traced {:.1} s with {}{}: {} thread{} of {} process{}, {} TCP socket{}, {} calls",
        t.traced_ms / 1e3,
        t.method,
        if t.interrupted { " (stopped by Ctrl-C)" } else { "" },
        t.threads,
        plural(t.threads),
        t.processes.len(),
        if t.processes.len() == 1 { "" } else { "es" },
        t.sockets,
        plural(t.sockets),
        t.calls
    );
    for k in &t.kinds {
        let nagle = match k.nagle {
            "nagle" => "Nagle on",
            "nodelay" => "TCP_NODELAY",
            "corked" => "corked",
            _ => "options unknown",
        };
        // The shape is write-write-read only where Nagle can hold the second piece.
        let small = match k.nagle {
            "nagle" => format!("{} write-write-read", k.write_write_read),
            "nodelay" => format!("{} in small pieces, sent at once", k.write_write_read),
            "corked" => format!("{} in small pieces, sent together", k.write_write_read),
            _ => format!("{} in small pieces", k.write_write_read),
        };
        let _ = writeln!(
            o,
            "  {:<24} {:>6} response{}: {} in one piece, {} in pieces ({small}) on {} socket{}",
            format!("{}, {nagle}:", k.role),
            k.responses,
            if k.responses == 1 { " " } else { "s" },
            k.single,
            k.in_pieces,
            k.sockets,
            plural(k.sockets)
        );
    }
    if let Some(f) = t.nagle_in_pieces_fraction {
        let _ = write!(o, "  {:.0} % of responses on Nagle sockets were written in pieces", f * 100.0);
        match (t.gap_wwr_ms, t.gap_other_ms) {
            (Some(w), Some(x)) => {
                let _ = write!(o, "; last piece → next request: median {} (other responses {})", ms(w), ms(x));
            }
            (Some(w), None) => {
                let _ = write!(o, "; last piece → next request: median {}", ms(w));
            }
            _ => {}
        }
        o.push('\n');
    }
    let _ = writeln!(o, "  {}", t.text);
    if let Some(ex) = &t.example {
        let conn = match (&ex.local, &ex.peer) {
            (Some(l), Some(p)) => format!(", {l} ↔ {p}"),
            _ => String::new(),
        };
        let nagle = match ex.nagle {
            "nagle" => "Nagle on",
            "nodelay" => "TCP_NODELAY on",
            "corked" => "corked",
            _ => "options unknown",
        };
        let _ = writeln!(o, "  example: pid {} fd {}{conn}, {nagle}", ex.pid, ex.fd);
        let half = ex.lines.len() - ex.lines.len() / 2;
        for (i, l) in ex.lines.iter().enumerate() {
            if ex.elided > 0 && i == half {
                let _ = writeln!(o, "    … {} more calls", ex.elided);
            }
            let _ = writeln!(o, "    {}", l.text);
        }
        if let Some(g) = ex.gap_ms {
            let _ = writeln!(o, "    last write → next request's data: {}", ms(g));
        }
    }
    if let Some(h) = &t.kernel_hold {
        let _ = writeln!(o, "  {}", h.text);
    }
    let cost = t.overhead.as_ref().map(|c| &c.text).or(t.cost.as_ref().map(|c| &c.text));
    let _ = writeln!(o, "  cost ({}): {}", t.method, cost.map_or("", |s| s.as_str()));
    for n in &t.notes {
        let _ = writeln!(o, "  note: {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sock(state: &str, nodelay: Option<bool>) -> Socket {
        Socket { state: state.into(), nodelay, ..Socket::default() }
    }

    fn report(sockets: Vec<Socket>) -> InspectReport {
        InspectReport {
            schema: 1,
            version: "0",
            process: Process { pid: 42, comm: "srv".into(), uid: Some(0), ..Process::default() },
            port: None,
            software: Software { kind: "other", name: "srv".into(), ..Software::default() },
            summary: Summary::of(&sockets),
            sockets,
            host: Host::default(),
            advice: vec!["set TCP_NODELAY".into()],
            notes: Vec::new(),
            trace: None,
        }
    }

    #[test]
    fn text_leads_with_the_summary_and_lists_a_bounded_number_of_connections() {
        let mut socks = vec![sock("listen", Some(false))];
        for i in 0..30 {
            let mut s = sock("established", Some(false));
            s.fd = 10 + i;
            s.held_now = i >= 28;
            socks.push(s);
        }
        let t = render(&report(socks));
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "PROCESS 42 srv (uid 0)");
        assert_eq!(
            lines[1],
            "SUMMARY 30 of 30 established connections have Nagle on (TCP_NODELAY off); 2 holding a segment right now"
        );
        assert!(t.contains("SOFTWARE srv (no server software tcpdoctor knows)"), "{t}");
        // The listener and 24 connections, then a count of the rest.
        assert_eq!(t.lines().filter(|l| l.contains(" listen ")).count(), 1, "{t}");
        assert_eq!(t.lines().filter(|l| l.starts_with("  ") && l.contains(" established ")).count(), TEXT_ROWS, "{t}");
        assert!(
            t.contains("… 6 more not shown (6 with Nagle on, 2 holding a segment); --json lists every socket"),
            "{t}"
        );
        assert!(t.contains("\nADVICE\n  - set TCP_NODELAY\n"), "{t}");
        let few = render(&report(vec![sock("listen", Some(false)), sock("established", Some(true))]));
        assert!(!few.contains("more not shown"), "{few}");
        assert!(few.lines().nth(1).unwrap().starts_with("SUMMARY 0 of 1 established connection has Nagle on"));
    }

    #[test]
    fn summary_counts_only_established_connections() {
        let s = Summary::of(&[
            sock("listen", Some(false)),
            sock("established", Some(false)),
            sock("established", Some(true)),
            sock("established", None),
            sock("close_wait", Some(false)),
        ]);
        assert_eq!((s.listening, s.established, s.nagle_on, s.nodelay_unknown), (1, 3, 1, 1));
        assert_eq!(s.text, "1 of 3 established connections have Nagle on (TCP_NODELAY off); 1 unreadable");
        assert_eq!(
            Summary::of(&[sock("established", Some(false))]).text.split(';').next().unwrap(),
            "1 of 1 established connection has Nagle on (TCP_NODELAY off)"
        );
        assert_eq!(Summary::of(&[]).text, "no established connections");
    }
}
