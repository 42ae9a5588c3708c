//! `trace`: the routers on the way to a TCP port, like
//! `traceroute --tcp -p PORT -n HOST`.
//!
//! For TTL 1, 2, … a few SYNs leave with that TTL (hop limit); a router
//! where it runs out answers ICMP time exceeded, quoting our SYN (ports and
//! sequence number tell which probe it was); the destination answers SYN-ACK
//! (`open`) or RST (`closed`), which ends the trace, as does an ICMP
//! destination unreachable. With CAP_NET_RAW the SYNs are hand-built on a raw
//! socket and the ICMP errors read on a raw ICMP socket, with kernel
//! timestamps; without it each probe is a TTL-limited non-blocking
//! `connect()` whose ICMP error (and the router that sent it) comes from the
//! socket's error queue (IP_RECVERR).
//!
//! Addresses are always printed numerically; `-n` is accepted for
//! compatibility with traceroute (no reverse DNS: it would add seconds per
//! silent hop and leak queries to resolvers).

use super::common::{self, Error, Family, net_error};
use super::raw::{self, ConnectEnd, Connecting, IcmpKind, IcmpSocket, PortHold, SynSocket};
use crate::record::{SCHEMA_VERSION, TraceHop, TraceProbe, TraceReport};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// What to trace and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Largest TTL to try (1–255).
    pub max_hops: u8,
    /// Probes per hop (at least 1).
    pub queries: u32,
    /// How long a hop waits for its answers.
    pub wait: Duration,
    /// Address family, when forced.
    pub family: Option<Family>,
    /// Use TTL-limited `connect()` even when raw sockets are allowed.
    pub unprivileged: bool,
}

/// Progress, for printing as it happens.
pub enum Event<'a> {
    /// Method chosen, nothing sent yet (`hops` is empty).
    Start(&'a TraceReport),
    /// A hop is done.
    Hop(&'a TraceHop),
}

/// Runs the trace. Bounded: at most `max_hops` hops of at most `wait` each
/// (plus the time to send).
pub fn run(opts: &Options, mut on: impl FnMut(Event<'_>)) -> Result<TraceReport, Error> {
    let dst = common::resolve(&opts.host, opts.family)?;
    let mut report = TraceReport {
        schema: SCHEMA_VERSION,
        version: env!("CARGO_PKG_VERSION"),
        method: "connect",
        timestamps: String::new(),
        target: opts.host.clone(),
        address: dst.to_string(),
        port: opts.port,
        source: String::new(),
        max_hops: opts.max_hops,
        queries: opts.queries,
        wait_ms: opts.wait.as_secs_f64() * 1e3,
        hops: Vec::new(),
        reached: false,
        final_state: None,
        notes: Vec::new(),
    };
    // The routing decision first: without a route there is nothing to measure, privileged or not.
    let src = raw::source_for(dst).map_err(|e| {
        Error::Net(format!("no route to {dst} ({e}); check `ip route get {dst}` (a blackhole or prohibit route?)"))
    })?;
    let mut raw_setup = None;
    if !opts.unprivileged {
        match RawSetup::open(dst, src) {
            Ok(s) => raw_setup = Some(s),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) => report.notes.push(format!(
                "no CAP_NET_RAW (raw socket: {e}), so using TTL-limited connect() with IP_RECVERR; run as root for raw SYNs and kernel timestamps"
            )),
            Err(e) => return Err(net_error(&format!("raw socket towards {dst}"), &e)),
        }
    }
    let mut raw_setup = raw_setup;
    if let Some(s) = &raw_setup {
        report.method = "raw_syn";
        report.source = SocketAddr::new(s.src, s.hold.port).to_string();
        report.timestamps = if s.syn.stamping.tx && s.syn.stamping.rx {
            "kernel timestamps (software TX and RX)".into()
        } else {
            "partly user-space clock (kernel timestamps unavailable)".into()
        };
    } else {
        report.source = src.to_string();
        report.timestamps = "CLOCK_MONOTONIC around connect()".into();
    }
    on(Event::Start(&report));
    for ttl in 1..=opts.max_hops {
        let hop = match &mut raw_setup {
            Some(s) => raw_hop(s, dst, ttl, opts)?,
            None => connect_hop(dst, ttl, opts)?,
        };
        on(Event::Hop(&hop));
        let end = hop.probes.iter().find(|p| p.reply == "open" || p.reply == "closed").map(|p| p.reply);
        let unreachable = hop.probes.iter().any(|p| p.reply == "unreachable");
        report.hops.push(hop);
        if let Some(state) = end {
            report.reached = true;
            report.final_state = Some(state);
            break;
        }
        if unreachable {
            break;
        }
    }
    Ok(report)
}

/// The raw sockets and the reserved source port.
struct RawSetup {
    src: IpAddr,
    syn: SynSocket,
    icmp: IcmpSocket,
    hold: PortHold,
}

impl RawSetup {
    fn open(dst: IpAddr, src: IpAddr) -> io::Result<Self> {
        let syn = SynSocket::open(src)?;
        let icmp = IcmpSocket::open(dst.is_ipv6())?;
        let hold = raw::hold_port(src)?;
        raw::settle_timestamping();
        Ok(RawSetup { src, syn, icmp, hold })
    }
}

struct Pending {
    isn: u32,
    key: u32,
    user_ns: i64,
    tx_ns: Option<i64>,
    answer: Option<TraceProbe>,
}

fn silent() -> TraceProbe {
    TraceProbe { reply: "none", from: None, rtt_ms: None, mark: None, icmp: None }
}

fn ms_between(from_ns: i64, to_ns: i64) -> f64 {
    ((to_ns - from_ns).max(0) as f64 / 1e3).round() / 1e3
}

fn raw_hop(s: &mut RawSetup, dst: IpAddr, ttl: u8, opts: &Options) -> Result<TraceHop, Error> {
    let sport = s.hold.port;
    let mut pending: Vec<Pending> = Vec::with_capacity(opts.queries as usize);
    for _ in 0..opts.queries {
        let mut isn = raw::random_u32();
        while pending.iter().any(|p| p.isn == isn) {
            isn = raw::random_u32();
        }
        let out =
            s.syn.send(dst, sport, opts.port, isn, Some(ttl)).map_err(|e| net_error(&format!("sendto {dst}"), &e))?;
        pending.push(Pending { isn, key: out.key, user_ns: out.user_ns, tx_ns: None, answer: None });
    }
    let deadline = Instant::now() + opts.wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || pending.iter().all(|p| p.answer.is_some()) {
            break;
        }
        let mut fds = [raw::pollfd(s.syn.fd(), libc::POLLIN), raw::pollfd(s.icmp.fd(), libc::POLLIN)];
        raw::poll(&mut fds, left).map_err(|e| net_error("poll", &e))?;
        s.syn.drain_tx(|key, ns| {
            if let Some(p) = pending.iter_mut().find(|p| p.key == key) {
                p.tx_ns = Some(ns);
            }
        });
        s.syn
            .drain(|r| {
                // The destination's answer: from its port to ours, acknowledging our ISN.
                if r.from != dst || r.tcp.sport != opts.port || r.tcp.dport != sport || r.tcp.flags & raw::ACK == 0 {
                    return;
                }
                let Some(p) = pending.iter_mut().find(|p| p.answer.is_none() && r.tcp.ack == p.isn.wrapping_add(1))
                else {
                    return;
                };
                let reply = if r.tcp.flags & raw::RST != 0 {
                    "closed"
                } else if r.tcp.flags & raw::SYN != 0 {
                    "open"
                } else {
                    return;
                };
                let rtt = ms_between(p.tx_ns.unwrap_or(p.user_ns), r.rx_ns);
                p.answer = Some(TraceProbe { reply, from: Some(r.from.to_string()), rtt_ms: Some(rtt), ..silent() });
            })
            .map_err(|e| net_error("recvmsg (raw TCP)", &e))?;
        s.icmp
            .drain(|e, rx_ns| {
                if e.quoted_dst != dst || e.sport != sport || e.dport != opts.port {
                    return;
                }
                let Some(p) = pending.iter_mut().find(|p| p.answer.is_none() && p.isn == e.seq) else { return };
                let rtt = Some(ms_between(p.tx_ns.unwrap_or(p.user_ns), rx_ns));
                p.answer = Some(icmp_answer(e.from, e.kind, rtt));
            })
            .map_err(|e| net_error("recvmsg (raw ICMP)", &e))?;
    }
    Ok(TraceHop { ttl, probes: pending.into_iter().map(|p| p.answer.unwrap_or_else(silent)).collect() })
}

fn icmp_answer(from: IpAddr, kind: IcmpKind, rtt_ms: Option<f64>) -> TraceProbe {
    match kind {
        IcmpKind::TimeExceeded => {
            TraceProbe { reply: "time_exceeded", from: Some(from.to_string()), rtt_ms, mark: None, icmp: None }
        }
        IcmpKind::Unreachable { .. } => TraceProbe {
            reply: "unreachable",
            from: Some(from.to_string()),
            rtt_ms,
            mark: Some(kind.mark()),
            icmp: Some(kind.describe()),
        },
    }
}

fn connect_hop(dst: IpAddr, ttl: u8, opts: &Options) -> Result<TraceHop, Error> {
    let target = SocketAddr::new(dst, opts.port);
    let mut conns = Vec::with_capacity(opts.queries as usize);
    for _ in 0..opts.queries {
        conns.push(Connecting::start(target, Some(ttl)).map_err(|e| net_error(&format!("connect {target}"), &e))?);
    }
    let mut answers: Vec<Option<TraceProbe>> = vec![None; conns.len()];
    let deadline = Instant::now() + opts.wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || answers.iter().all(Option::is_some) {
            break;
        }
        // Answered sockets stay ready; a negative fd makes poll skip them.
        let mut fds: Vec<libc::pollfd> = conns
            .iter()
            .zip(&answers)
            .map(|(c, a)| raw::pollfd(if a.is_some() { -1 } else { c.fd() }, libc::POLLOUT))
            .collect();
        raw::poll(&mut fds, left).map_err(|e| net_error("poll", &e))?;
        let now = Instant::now();
        let mut woke_idle = false;
        for (i, f) in fds.iter().enumerate() {
            if f.revents == 0 || answers[i].is_some() {
                continue;
            }
            let rtt = Some(((now - conns[i].started).as_nanos() as f64 / 1e3).round() / 1e3);
            let from = Some(dst.to_string());
            answers[i] = match conns[i].end() {
                Some(ConnectEnd::Open { .. }) => Some(TraceProbe { reply: "open", from, rtt_ms: rtt, ..silent() }),
                Some(ConnectEnd::Refused) => Some(TraceProbe { reply: "closed", from, rtt_ms: rtt, ..silent() }),
                Some(ConnectEnd::Icmp { from: Some(f), kind }) => Some(icmp_answer(f, kind, rtt)),
                // An ICMP error without its sender, or another error: nothing to show but `*`.
                Some(ConnectEnd::Icmp { from: None, .. }) | Some(ConnectEnd::Failed(_)) => Some(silent()),
                None => {
                    woke_idle = true;
                    None
                }
            };
        }
        if woke_idle {
            // Ready without a result (a soft error the kernel retries past): do not spin.
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    drop(conns);
    Ok(TraceHop { ttl, probes: answers.into_iter().map(|a| a.unwrap_or_else(silent)).collect() })
}
