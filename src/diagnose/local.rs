//! The steps that need the server's host: the live capture (4) and the
//! server process (5). Both run beside the load of step 2.

use super::Options;
use crate::analyze::{self, analyze};
use crate::capture::Capture;
use crate::capture::live::{LiveCapture, LiveError, LiveOptions, LiveStats};
use crate::escape::clean;
use crate::filter::Filter;
use crate::inspect::{self, InspectError};
use crate::record::Finding;
use crate::record::diagnose::{CaptureStep, ServerStep};
use crate::record::inspect::{InspectReport, Trace};
use crate::words::ms;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Whether `ip` is one of this host's addresses.
pub fn is_local(ip: IpAddr) -> bool {
    if ip.is_loopback() {
        return true;
    }
    interfaces().iter().any(|(_, a)| *a == ip)
}

/// (interface name, address) of every configured address.
fn interfaces() -> Vec<(String, IpAddr)> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below; every pointer is checked
    // for null and read only while the list is alive.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut p = head;
        while !p.is_null() {
            let ifa = &*p;
            if !ifa.ifa_addr.is_null() && !ifa.ifa_name.is_null() {
                let name = std::ffi::CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned();
                match i32::from((*ifa.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        out.push((name, IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes())));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        out.push((name, IpAddr::from(sin6.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            p = ifa.ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out
}

/// The interface packets to `dst` leave by: `lo` for this host's own
/// addresses, else the one holding the source address the kernel picks.
pub fn interface_for(dst: IpAddr) -> Option<String> {
    if is_local(dst) {
        return Some("lo".into());
    }
    let bind: SocketAddr = if dst.is_ipv4() { "0.0.0.0:0".parse().ok()? } else { "[::]:0".parse().ok()? };
    let s = std::net::UdpSocket::bind(bind).ok()?;
    s.connect((dst, 9)).ok()?;
    let src = s.local_addr().ok()?.ip();
    interfaces().into_iter().find(|(_, a)| *a == src).map(|(n, _)| n)
}

/// Bytes kept of each packet: every header, and the start of an HTTP head.
const SNAPLEN: u32 = 512;
/// Most packets kept: seconds of a stalled server, and a bounded amount of
/// memory (~100 MB) for a fast one.
const MAX_PACKETS: u64 = 200_000;

/// A capture running beside the load.
pub struct Running {
    iface: String,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<(Vec<u8>, LiveStats), LiveError>>,
}

/// Starts capturing the server's port; says in `missing` why not when it cannot.
pub fn start_capture(o: &Options, addr: SocketAddr, missing: &mut Vec<String>) -> Option<Running> {
    let Some(iface) = o.interface.clone().or_else(|| interface_for(addr.ip())) else {
        missing.push(format!("step 4: no interface found for the route to {} (name one with -i)", addr.ip()));
        return None;
    };
    let filter = Filter::parse(&format!("tcp port {} and host {}", addr.port(), addr.ip())).ok();
    let mut cap = match LiveCapture::open(&LiveOptions { iface: iface.clone(), filter, snaplen: SNAPLEN }) {
        Ok(c) => c,
        Err(e) => {
            missing.push(format!("step 4: no packet capture: {e}"));
            return None;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    // The deadline only bounds a capture whose stop never comes.
    let deadline = Instant::now() + o.load + Duration::from_secs(30);
    let thread = std::thread::Builder::new()
        .name("diagnose-capture".into())
        .spawn(move || {
            let mut out = Vec::new();
            let stats = cap.record(&mut out, &flag, Some(deadline), Some(MAX_PACKETS))?;
            Ok((out, stats))
        })
        .ok()?;
    Some(Running { iface, stop, thread })
}

/// Stops the capture and analyses it.
pub fn finish_capture(c: Running, missing: &mut Vec<String>) -> Option<CaptureStep> {
    c.stop.store(true, Ordering::Relaxed);
    let (bytes, stats) = match c.thread.join() {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            missing.push(format!("step 4: the capture failed: {e}"));
            return None;
        }
        Err(_) => {
            missing.push("step 4: the capture thread failed".into());
            return None;
        }
    };
    let cap = Capture::from_bytes(&format!("capture on {}", c.iface), bytes);
    let r = match analyze(&[cap], &analyze::Options::default()) {
        Ok(r) => r,
        Err(e) => {
            missing.push(format!("step 4: the capture could not be analysed: {e}"));
            return None;
        }
    };
    Some(CaptureStep {
        interface: c.iface,
        packets: stats.packets,
        kernel_drops: stats.kernel_drops,
        truncated: stats.packets >= MAX_PACKETS,
        findings: r.findings,
        breakdown: r.breakdown,
        stalled_exchanges: r.stalled_exchanges,
        slowest_exchanges: r.slowest_exchanges,
        connections: r.connections.into_iter().take(100).collect(),
    })
}

/// Step 4's line.
pub fn capture_line(c: &CaptureStep) -> String {
    let head = format!(
        "{}: {} packets{}, {} dropped by the kernel",
        c.interface,
        c.packets,
        if c.truncated { format!(" (the first {MAX_PACKETS} of the load)") } else { String::new() },
        c.kernel_drops
    );
    let nagle = c.findings.iter().find_map(|f| match f {
        Finding::NagleDelayedAck(n) => Some(n),
        _ => None,
    });
    match (nagle, c.findings.first()) {
        (Some(n), _) => format!(
            "{head}; {} of {} responses held: {} waits {} for {}'s delayed ACK",
            n.stalls,
            n.exchanges,
            n.nagle_side.endpoint,
            ms(n.stall_ms.p50),
            n.delayed_ack_side.host
        ),
        (None, Some(f)) => format!("{head}; {}", f.summary()),
        (None, None) => format!("{head}; no stall, retransmission or zero window"),
    }
}

/// An inspection running beside the load.
pub struct Inspecting(JoinHandle<Result<Option<InspectReport>, InspectError>>);

/// How long the load runs before the server's sockets are read, so that its
/// keep-alive connections exist.
const SETTLE: Duration = Duration::from_millis(300);

/// How long the server is inspected, and traced (eBPF or ptrace), beside the load:
/// long enough for dozens of responses even at 44 ms each on 8 connections,
/// short enough that the requests it slows are a few percent of the load's.
const TRACE: Duration = Duration::from_millis(500);

/// Starts inspecting the process listening on `port`, beside the load.
pub fn start_inspect(port: u16, trace_method: inspect::TraceMethod) -> Inspecting {
    Inspecting(std::thread::spawn(move || {
        let began = Instant::now();
        // The listener is there before the load's connections are.
        let Some(pid) = inspect::find_listener(port)? else { return Ok(None) };
        // The write pattern too, traced for the inspection window (not our
        // own process: the demo's lab servers run in it).
        let trace = (pid != std::process::id()).then_some(TRACE);
        // The eBPF programs are loaded and calibrated while the load settles:
        // done after it, on a slow host, they took so long that the trace's
        // window began after a short load had ended.
        let ready = (trace.is_some() && trace_method != inspect::TraceMethod::Ptrace).then(|| {
            let slot = inspect::TraceReady::default();
            slot.fill();
            slot
        });
        std::thread::sleep(SETTLE.saturating_sub(began.elapsed()));
        let o = inspect::Options {
            window: TRACE,
            port: Some(port),
            trace,
            trace_optional: true,
            trace_method,
            trace_sample: inspect::TraceSample::Auto,
            announce: false,
            trace_ready: ready,
        };
        inspect::inspect(pid, &o).map(Some)
    }))
}

/// Waits for the inspection; says in `missing` why there is none.
pub fn finish_inspect(i: Inspecting, port: u16, missing: &mut Vec<String>) -> Option<ServerStep> {
    let r = match i.0.join() {
        Ok(Ok(Some(r))) => r,
        Ok(Ok(None)) => {
            missing.push(format!(
                "step 5: no process in this host's network namespace listens on port {port} (a container? run tcpdoctor inspect inside it)"
            ));
            return None;
        }
        Ok(Err(e)) => {
            missing.push(format!("step 5: {e}"));
            return None;
        }
        Err(_) => {
            missing.push("step 5: the inspection thread failed".into());
            return None;
        }
    };
    if let Some(why) = r.notes.iter().find_map(|n| n.strip_prefix("not traced: ")) {
        missing.push(format!("step 5: the server's write pattern was not traced: {why}"));
    }
    if let Some(why) = r.trace.as_ref().and_then(|t| t.fallback.as_ref()) {
        missing.push(format!(
            "step 5: traced with ptrace, not eBPF ({why}): no kernel proof of the hold, and the server was slowed while traced"
        ));
    }
    Some(ServerStep {
        pid: r.process.pid,
        name: r.process.comm.clone(),
        software: r.software.kind.to_string(),
        software_name: r.software.name.clone(),
        nodelay_setting: r.software.nodelay_setting,
        setting_source: r.software.setting_source.clone(),
        established: r.summary.established as usize,
        nagle_on: r.summary.nagle_on as usize,
        unreadable: r.summary.nodelay_unknown as usize,
        trace: r.trace,
    })
}

/// Step 5's line.
pub fn server_line(s: &ServerStep) -> String {
    let setting = match s.nodelay_setting {
        Some(on) => format!(
            "; its own TCP_NODELAY setting is {}{}",
            if on { "on" } else { "off" },
            s.setting_source.as_deref().map(|src| format!(" ({})", short_source(src))).unwrap_or_default()
        ),
        None => String::new(),
    };
    let traced = s.trace.as_ref().map(|t| format!("; {}", trace_phrase(t))).unwrap_or_default();
    format!(
        "pid {} {} ({}){setting}; {} of {} established connections on the port have Nagle on{traced}",
        s.pid,
        clean(&s.name),
        clean(&s.software_name),
        s.nagle_on,
        s.established
    )
}

/// What the trace saw, in a phrase for step 5's line and the evidence.
pub fn trace_phrase(t: &Trace) -> String {
    let secs = t.traced_ms / 1e3;
    let how = t.method;
    // The kernel's own account of the held bytes, when eBPF saw it.
    let kernel = match &t.kernel_hold {
        Some(h) if t.kernel_confirms == Some(false) => format!(
            "; but the kernel held only {} of {} writes by Nagle: the pieces left as written, the time between them \
was the server's own",
            h.nagle, h.writes
        ),
        Some(h) if h.nagle > 0 => format!(
            "; the kernel held {} of {} writes by Nagle until the peer's ACK (median {})",
            h.nagle,
            h.writes,
            ms(h.nagle_median_ms.unwrap_or(0.0))
        ),
        Some(h) if h.writes > 0 => format!("; the kernel held none of {} writes by Nagle", h.writes),
        _ => String::new(),
    };
    if t.found {
        let lines = t.example.as_ref().map_or(&[][..], |e| &e.lines[..]);
        let writes: Vec<String> =
            lines.iter().take_while(|l| l.kind == "write").map(|l| format!("{} {} B", l.call, l.ret)).collect();
        let then = lines.iter().find(|l| l.kind != "write").map(|l| format!(", then {}", l.call)).unwrap_or_default();
        let example = if writes.is_empty() { String::new() } else { format!(": {}{then}", writes.join(" + ")) };
        format!(
            "traced {secs:.1} s with {how}: {} of {} responses on Nagle sockets were written in small pieces, then the \
server waited for the next request (write-write-read{}{}){kernel}",
            t.write_write_read,
            t.nagle_responses,
            t.gap_wwr_ms.map(|g| format!(", {} from the last piece to the next request", ms(g))).unwrap_or_default(),
            example
        )
    } else if t.responses == 0 {
        format!("traced {secs:.1} s with {how}: no complete response seen")
    } else {
        format!(
            "traced {secs:.1} s with {how}: no write-write-read on Nagle sockets in {} responses{kernel}",
            t.responses
        )
    }
}

/// `nginx -T` rather than the whole command that was run.
fn short_source(src: &str) -> &str {
    if src.contains("nginx") && src.contains(" -T") { "nginx -T" } else { src.trim_matches('`') }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_local_and_routes_by_lo() {
        assert!(is_local("127.0.0.1".parse().unwrap()));
        assert!(is_local("::1".parse().unwrap()));
        assert_eq!(interface_for("127.0.0.5".parse().unwrap()).as_deref(), Some("lo"));
        assert!(!is_local("192.0.2.1".parse().unwrap())); // TEST-NET-1, never assigned
    }
}
