//! `probe`: TCP round trips to one port, like `hping3 -S`.
//!
//! With CAP_NET_RAW: hand-built SYNs on a raw socket, the round trip from
//! the kernel's software TX timestamp to the kernel's RX timestamp of the
//! SYN-ACK (open) or RST (closed); silence or an ICMP error is `filtered`.
//! Without it: a timed non-blocking `connect()` per probe, plus the kernel's
//! `tcpi_rtt`.

use super::common::{self, Error, Family, net_error};
use super::raw::{self, ConnectEnd, Connecting, IcmpSocket, PortHold, SynSocket, flag_letters};
use crate::record::{ProbeReport, ProbeResult, ProbeSummary, SCHEMA_VERSION};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// What to probe and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Probes to send (at least 1).
    pub count: u32,
    /// Time between probe starts.
    pub interval: Duration,
    /// How long each probe waits for its answer.
    pub timeout: Duration,
    /// Address family, when forced.
    pub family: Option<Family>,
    /// Time `connect()` even when raw sockets are allowed.
    pub unprivileged: bool,
}

/// Progress, for printing as it happens.
pub enum Event<'a> {
    /// Method chosen, nothing sent yet (`probes` is empty).
    Start(&'a ProbeReport),
    /// A probe got its answer or timed out.
    Probe(&'a ProbeResult),
}

/// Runs the probes. Every wait is bounded: the run ends at the latest
/// `(count - 1) × interval + timeout` after it starts.
pub fn run(opts: &Options, mut on: impl FnMut(Event<'_>)) -> Result<ProbeReport, Error> {
    let dst = common::resolve(&opts.host, opts.family)?;
    let mut report = ProbeReport {
        schema: SCHEMA_VERSION,
        version: env!("CARGO_PKG_VERSION"),
        method: "connect",
        timestamps: String::new(),
        target: opts.host.clone(),
        address: dst.to_string(),
        port: opts.port,
        source: String::new(),
        count: opts.count,
        interval_ms: opts.interval.as_secs_f64() * 1e3,
        timeout_ms: opts.timeout.as_secs_f64() * 1e3,
        probes: Vec::new(),
        summary: ProbeSummary::default(),
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
            Err(e) if is_permission(&e) => report.notes.push(format!(
                "no CAP_NET_RAW (raw socket: {e}), so timing connect() instead; run as root for raw SYNs and kernel timestamps"
            )),
            Err(e) => return Err(net_error(&format!("raw socket towards {dst}"), &e)),
        }
    }
    let mut probes = match raw_setup {
        Some(s) => {
            report.method = "raw_syn";
            report.source = SocketAddr::new(s.src, s.hold.port).to_string();
            report.timestamps = match (s.syn.stamping.tx, s.syn.stamping.rx) {
                (true, true) => "kernel timestamps (software TX and RX)".into(),
                (false, true) => "kernel RX timestamps, clock read before sendto".into(),
                _ => "clock read before sendto and after recv (no kernel timestamps)".into(),
            };
            on(Event::Start(&report));
            run_raw(s, dst, opts, &mut on)?
        }
        None => {
            report.source = src.to_string();
            report.timestamps = "CLOCK_MONOTONIC around connect(), and tcpi_rtt".into();
            on(Event::Start(&report));
            run_connect(dst, opts, &mut on)?
        }
    };
    probes.sort_by_key(|p| p.seq);
    report.summary = ProbeSummary::of(&probes);
    report.probes = probes;
    Ok(report)
}

fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}

/// The raw sockets and the reserved port.
struct RawSetup {
    src: IpAddr,
    syn: SynSocket,
    icmp: Option<IcmpSocket>,
    hold: PortHold,
}

impl RawSetup {
    fn open(dst: IpAddr, src: IpAddr) -> io::Result<Self> {
        let syn = SynSocket::open(src)?;
        // ICMP errors are a bonus (filtered with a reason); without them silence still says filtered.
        let icmp = IcmpSocket::open(dst.is_ipv6()).ok();
        let hold = raw::hold_port(src)?;
        raw::settle_timestamping();
        Ok(RawSetup { src, syn, icmp, hold })
    }
}

/// A raw probe in flight.
struct Pending {
    seq: u32,
    isn: u32,
    key: u32,
    user_ns: i64,
    tx_ns: Option<i64>,
    deadline: Instant,
    done: bool,
}

fn ms_between(from_ns: i64, to_ns: i64) -> f64 {
    // Clock steps could make it negative; a round trip is never below 0.
    ((to_ns - from_ns).max(0) as f64 / 1e3).round() / 1e3
}

fn run_raw(
    mut s: RawSetup,
    dst: IpAddr,
    opts: &Options,
    on: &mut impl FnMut(Event<'_>),
) -> Result<Vec<ProbeResult>, Error> {
    let sport = s.hold.port;
    let mut pending: Vec<Pending> = Vec::with_capacity(opts.count as usize);
    // Probes awaiting an answer, by the ack number that answers them (ISN + 1): a lookup per
    // segment read, so thousands of probes in flight (`-i 0`) cost no more than one.
    let mut by_ack: HashMap<u32, usize> = HashMap::new();
    // Deadlines grow in send order: everything before `oldest` is done.
    let mut oldest = 0usize;
    let mut results: Vec<ProbeResult> = Vec::with_capacity(opts.count as usize);
    let start = Instant::now();
    let blank = |seq: u32| ProbeResult {
        seq,
        state: "filtered",
        rtt_ms: None,
        tcpi_rtt_ms: None,
        kernel_timestamps: false,
        from: None,
        local_port: sport,
        ttl: None,
        flags: None,
        window: None,
        len: None,
        icmp: None,
    };
    loop {
        let now = Instant::now();
        let sent = pending.len() as u32;
        if sent < opts.count && now >= start + opts.interval * sent {
            // A random ISN per probe: a late answer can only match its own probe.
            let mut isn = raw::random_u32();
            while by_ack.contains_key(&isn.wrapping_add(1)) {
                isn = raw::random_u32();
            }
            let out =
                s.syn.send(dst, sport, opts.port, isn, None).map_err(|e| net_error(&format!("sendto {dst}"), &e))?;
            by_ack.insert(isn.wrapping_add(1), pending.len());
            pending.push(Pending {
                seq: sent,
                isn,
                key: out.key,
                user_ns: out.user_ns,
                tx_ns: None,
                deadline: Instant::now() + opts.timeout,
                done: false,
            });
            // No `continue`: read what has arrived between sends, or a fast run (`-i 0`)
            // overflows the raw socket's buffer with its own SYNs and their answers.
        }
        let next_send = (pending.len() as u32) < opts.count;
        let mut wake = pending[oldest..].iter().find(|p| !p.done).map(|p| p.deadline);
        if next_send {
            let t = start + opts.interval * pending.len() as u32;
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
        let wait = wake.map_or(Duration::ZERO, |w| w.saturating_duration_since(Instant::now()));
        let mut fds = vec![raw::pollfd(s.syn.fd(), libc::POLLIN)];
        if let Some(i) = &s.icmp {
            fds.push(raw::pollfd(i.fd(), libc::POLLIN));
        }
        raw::poll(&mut fds, wait).map_err(|e| net_error("poll", &e))?;
        // TX stamps first, so an answer read below finds its probe's stamp.
        s.syn.drain_tx(|key, ns| {
            // One send per probe, so the kernel's key is the probe's index.
            if let Some(p) = pending.get_mut(key as usize)
                && p.key == key
            {
                p.tx_ns = Some(ns);
            }
        });
        let timeout_ms = opts.timeout.as_secs_f64() * 1e3;
        s.syn
            .drain(|r| {
                // Answers come from the target's port to ours; our own kernel's RST to a
                // SYN-ACK goes the other way and is skipped here.
                if r.from != dst || r.tcp.sport != opts.port || r.tcp.dport != sport || r.tcp.flags & raw::ACK == 0 {
                    return;
                }
                let Some(&i) = by_ack.get(&r.tcp.ack) else { return };
                let p = &mut pending[i];
                let state = if r.tcp.flags & raw::RST != 0 {
                    "closed"
                } else if r.tcp.flags & raw::SYN != 0 {
                    "open"
                } else {
                    return;
                };
                let sent_ns = p.tx_ns.unwrap_or(p.user_ns);
                let rtt = ms_between(sent_ns, r.rx_ns);
                if rtt > timeout_ms {
                    // Arrived after the timeout (read late): lost, as with any late answer.
                    return;
                }
                p.done = true;
                by_ack.remove(&r.tcp.ack);
                let res = ProbeResult {
                    state,
                    rtt_ms: Some(rtt),
                    kernel_timestamps: p.tx_ns.is_some() && r.kernel_stamp,
                    from: Some(r.from.to_string()),
                    ttl: r.ttl,
                    flags: Some(flag_letters(r.tcp.flags)),
                    window: Some(r.tcp.window),
                    len: Some(r.len),
                    ..blank(p.seq)
                };
                on(Event::Probe(&res));
                results.push(res);
            })
            .map_err(|e| net_error("recvmsg (raw TCP)", &e))?;
        if let Some(i) = &mut s.icmp {
            i.drain(|e, _rx| {
                if e.quoted_dst != dst || e.sport != sport || e.dport != opts.port {
                    return;
                }
                let Some(i) = by_ack.remove(&e.seq.wrapping_add(1)) else { return };
                let p = &mut pending[i];
                p.done = true;
                let res = ProbeResult { from: Some(e.from.to_string()), icmp: Some(e.kind.describe()), ..blank(p.seq) };
                on(Event::Probe(&res));
                results.push(res);
            })
            .map_err(|e| net_error("recvmsg (raw ICMP)", &e))?;
        }
        // Time out what is due, after reading what had arrived.
        let now = Instant::now();
        while let Some(p) = pending.get_mut(oldest) {
            if !p.done {
                if now < p.deadline {
                    break;
                }
                p.done = true;
                by_ack.remove(&p.isn.wrapping_add(1));
                let r = blank(p.seq);
                on(Event::Probe(&r));
                results.push(r);
            }
            oldest += 1;
        }
        if pending.len() as u32 == opts.count && oldest == pending.len() {
            break;
        }
    }
    Ok(results)
}

fn run_connect(dst: IpAddr, opts: &Options, on: &mut impl FnMut(Event<'_>)) -> Result<Vec<ProbeResult>, Error> {
    let target = SocketAddr::new(dst, opts.port);
    let start = Instant::now();
    let mut results = Vec::with_capacity(opts.count as usize);
    for seq in 0..opts.count {
        let at = start + opts.interval * seq;
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        let c = Connecting::start(target, None).map_err(|e| net_error(&format!("connect {target}"), &e))?;
        let deadline = c.started + opts.timeout;
        let mut end = None;
        let mut ended_at = Instant::now();
        while end.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let mut fds = [raw::pollfd(c.fd(), libc::POLLOUT)];
            raw::poll(&mut fds, left).map_err(|e| net_error("poll", &e))?;
            ended_at = Instant::now();
            if fds[0].revents != 0 {
                end = c.end();
                if end.is_none() {
                    // Woken without a result (a soft error); do not spin.
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        let took = ((ended_at - c.started).as_nanos() as f64 / 1e3).round() / 1e3;
        let mut r = ProbeResult {
            seq,
            state: "filtered",
            rtt_ms: None,
            tcpi_rtt_ms: None,
            kernel_timestamps: false,
            from: None,
            local_port: 0,
            ttl: None,
            flags: None,
            window: None,
            len: None,
            icmp: None,
        };
        match end {
            Some(ConnectEnd::Open { tcpi_rtt_us, sport }) => {
                r.state = "open";
                r.rtt_ms = Some(took);
                r.tcpi_rtt_ms = Some(f64::from(tcpi_rtt_us) / 1e3);
                r.local_port = sport;
                r.from = Some(dst.to_string());
            }
            Some(ConnectEnd::Refused) => {
                r.state = "closed";
                r.rtt_ms = Some(took);
                r.from = Some(dst.to_string());
            }
            Some(ConnectEnd::Icmp { from, kind }) => {
                r.from = from.map(|a| a.to_string());
                r.icmp = Some(kind.describe());
            }
            Some(ConnectEnd::Failed(errno)) => {
                let e = io::Error::from_raw_os_error(errno);
                match errno {
                    libc::EHOSTUNREACH | libc::ENETUNREACH => r.icmp = Some(e.to_string()),
                    _ => return Err(net_error(&format!("connect {target}"), &e)),
                }
            }
            None => {}
        }
        drop(c);
        on(Event::Probe(&r));
        results.push(r);
    }
    Ok(results)
}
