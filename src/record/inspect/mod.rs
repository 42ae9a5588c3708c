//! `inspect`'s record: the process, its software and knobs, its sockets,
//! the host's counters and routes, and (`--trace`) the write pattern.

mod pattern;

pub use pattern::{Trace, TraceCost, TraceExample, TraceHold, TraceKind, TraceLine, TraceOverhead};

use crate::words::plural_s;
use serde::Serialize;
use std::fmt::Write;

/// What `tcpdoctor inspect` found about one process.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct InspectReport {
    /// Schema version (`SCHEMA_VERSION`).
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
                plural_s(s.established),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sock(state: &str, nodelay: Option<bool>) -> Socket {
        Socket { state: state.into(), nodelay, ..Socket::default() }
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
