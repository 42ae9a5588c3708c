//! The trace's report: the detection's findings, the example's lines, the
//! kernel's holds, and what tracing cost the process.

use super::super::{diag, procfs};
use super::events::{Dir, Event, Nagle, Role, Sock};
use super::{MAX_EVENTS, Recording, decode, detect, ebpf, hold, proof};
use crate::record::inspect::{Trace, TraceExample, TraceKind, TraceLine, TraceOverhead};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// The report: MSS from tcp_info for the sockets still open, the detection, the cost.
pub(super) fn report(
    mut rec: Recording,
    extra: Option<ebpf::Extra>,
    requested: Duration,
    interrupted: bool,
    port: Option<u16>,
) -> Trace {
    let inodes: HashSet<u64> = rec.socks.iter().filter(|s| s.mss.is_none()).map(|s| s.inode).collect();
    if !inodes.is_empty() {
        match diag::tcp_infos(&inodes) {
            Ok(infos) => {
                for s in &mut rec.socks {
                    if let Some(i) = infos.get(&s.inode).filter(|i| i.mss > 0) {
                        s.mss = Some(i.mss);
                    }
                }
            }
            Err(e) => rec.notes.push(format!("sock_diag (tcp_info, for the MSS) failed: {e}")),
        }
    }
    if let Some(port) = port {
        // `inspect :PORT`: other ports' sockets are left out (waits stay: they show the thread's state).
        let other: HashSet<u32> =
            (0..rec.socks.len() as u32).filter(|&s| rec.socks[s as usize].port.is_some_and(|p| p != port)).collect();
        let n = rec.events.len();
        rec.events.retain(|e| e.sock.is_none_or(|s| !other.contains(&s)));
        if rec.events.len() < n {
            rec.notes.push(format!(
                "{} calls on other local ports left out (`inspect PID` keeps them)",
                n - rec.events.len()
            ));
        }
    }
    // Entry order, so that a call that blocked sorts where it began.
    rec.events.sort_by_key(|e| e.t_ns);
    let d = detect::detect(&rec.events, &rec.socks, &rec.gaps);
    let ms = |ns: u64| ns as f64 / 1e6;
    let kinds = d
        .kinds
        .iter()
        .map(|k| TraceKind {
            role: k.role.map_or("unknown", Role::name),
            nagle: k.nagle.map_or("unknown", Nagle::name),
            sockets: k.sockets,
            responses: k.responses,
            single: k.single,
            in_pieces: k.in_pieces,
            write_write_read: k.write_write_read,
        })
        .collect();
    let holds: Vec<decode::Hold> = extra
        .as_ref()
        .map(|x| x.holds.iter().filter(|h| port.is_none_or(|p| h.port == p)).copied().collect())
        .unwrap_or_default();
    let fates: HashMap<(u32, u64), hold::Fate> = holds.iter().map(|h| ((h.tid, h.t_ns), h.fate)).collect();
    let example = d.example.as_ref().map(|ex| example(&rec.events, &rec.socks, ex, &fates, rec.untimed));
    let mut notes = std::mem::take(&mut rec.notes);
    if rec.dropped > 0 {
        notes.push(format!(
            "{} calls after the first {MAX_EVENTS} were counted but not analysed (a shorter --trace keeps all)",
            rec.dropped
        ));
    }
    if d.mss_defaulted > 0 {
        notes.push(format!(
            "MSS unknown for {} socket(s) closed before the end (tcp_info gone): {} B assumed",
            d.mss_defaulted,
            detect::DEFAULT_MSS
        ));
    }
    if d.first_responses > 0 {
        notes.push(format!(
            "{} write-write-read response(s) were the first on a new connection and are not counted: a new \
connection's peer ACKs at once (quick-ACK mode), so they do not stall",
            d.first_responses
        ));
    }
    if d.unfinished > 0 {
        let when =
            if rec.gaps.is_empty() { "the trace ended" } else { "the trace ended or the call programs were detached" };
        notes.push(format!("{} response(s) were still open when {when} (not counted)", d.unfinished));
    }
    if extra.is_none() {
        notes.push(
            "ptrace stops the process at every syscall (like strace); a thread waiting in epoll_wait may see one \
EINTR when tracing starts and when it ends, which servers retry"
                .into(),
        );
    }
    let calls = rec.events.len() as u64 + rec.dropped;
    let (overhead, cost, kernel_hold) = match &extra {
        None => (Some(overhead(&rec, d.responses)), None, None),
        Some(x) => (None, Some(proof::cost(x, calls, rec.traced, d.responses)), Some(proof::holds(&holds))),
    };
    let kernel_confirms = proof::confirms(d.write_write_read, kernel_hold.as_ref());
    let nagle_fraction = (d.nagle_responses > 0).then(|| d.nagle_in_pieces as f64 / d.nagle_responses as f64);
    let text = if d.responses == 0 {
        "no complete response was seen on a TCP socket (no traffic in the window?)".to_string()
    } else if d.write_write_read > 0 {
        format!(
            "write-write-read: {} of {} responses on Nagle sockets were written in small pieces and then the \
process waited for the next request{}",
            d.write_write_read,
            d.nagle_responses,
            d.gap_wwr_ns
                .map(|g| format!(" (median {:.1} ms from the last piece to the next request)", ms(g)))
                .unwrap_or_default()
        ) + &kernel_hold.as_ref().filter(|_| kernel_confirms == Some(false)).map(proof::not_held).unwrap_or_default()
    } else if d.nagle_responses > 0 {
        format!(
            "no write-write-read on Nagle sockets: {} of {} responses there were written in one piece",
            d.nagle_responses - d.nagle_in_pieces,
            d.nagle_responses
        )
    } else {
        let pieces: u64 = d.kinds.iter().map(|k| k.in_pieces).sum();
        format!(
            "no response was written with Nagle on ({} of {} responses in pieces, all with TCP_NODELAY or TCP_CORK): \
no stall shape",
            pieces, d.responses
        )
    };
    Trace {
        requested_ms: requested.as_secs_f64() * 1e3,
        traced_ms: rec.traced.as_secs_f64() * 1e3,
        interrupted,
        exited: rec.exited,
        processes: Vec::new(),
        threads: rec.threads,
        new_threads: rec.new_threads,
        sockets: rec.events.iter().filter_map(|e| e.sock).collect::<HashSet<u32>>().len() as u32,
        calls,
        responses: d.responses,
        kinds,
        nagle_responses: d.nagle_responses,
        nagle_in_pieces_fraction: nagle_fraction,
        write_write_read: d.write_write_read,
        first_responses: d.first_responses,
        found: d.write_write_read > 0,
        gap_wwr_ms: d.gap_wwr_ns.map(ms),
        gap_other_ms: d.gap_other_ns.map(ms),
        mss_default_sockets: d.mss_defaulted,
        example,
        method: if extra.is_some() { "ebpf" } else { "ptrace" },
        fallback: None,
        overhead,
        cost,
        kernel_hold,
        kernel_confirms,
        text,
        notes,
    }
}

/// The example's lines, timed from its first write.
fn example(
    ev: &[Event],
    socks: &[Sock],
    ex: &detect::Example,
    fates: &HashMap<(u32, u64), hold::Fate>,
    untimed: bool,
) -> TraceExample {
    let sock = &socks[ex.sock as usize];
    // Accepted during the trace: its peer is in the table if it is still open.
    let row = if sock.peer.is_none() {
        procfs::net_tcp(&format!("/proc/{}/net", sock.pid))
            .ok()
            .and_then(|r| r.into_iter().find(|r| r.inode == sock.inode))
    } else {
        None
    };
    let t0 = ex.events.first().map_or(0, |&i| ev[i].t_ns);
    let lines = ex
        .events
        .iter()
        .map(|&i| {
            let e = &ev[i];
            let t_ms = e.t_ns.saturating_sub(t0) as f64 / 1e6;
            let took_ms = (!untimed).then(|| e.end_ns.saturating_sub(e.t_ns) as f64 / 1e6);
            let result = match e.ret {
                r if r < 0 => errno_name(-r),
                r if e.dir == Dir::Wait => format!("→ {r}"),
                r if e.call.counts_messages() => format!("{r} msg"),
                r => format!("{r} B"),
            };
            // A call outside a socket syscall (io_uring) names no descriptor.
            let mut text = match e.sock {
                Some(_) if e.fd >= 0 => format!("+{:.3} {} fd {} {result}", t_ms / 1e3, e.call.name(), e.fd),
                _ => format!("+{:.3} {} {result}", t_ms / 1e3, e.call.name()),
            };
            if let Some(took) = took_ms.filter(|&t| t >= 1.0) {
                text.push_str(&format!(" (waited {took:.1} ms)"));
            }
            if let Some(f) = fates.get(&(e.tid, e.t_ns)) {
                text.push_str(&format!(" [kernel: {}]", proof::fate_phrase(*f)));
            }
            TraceLine {
                t_ms,
                took_ms,
                tid: e.tid,
                call: e.call.name(),
                kind: match e.dir {
                    Dir::Write => "write",
                    Dir::Read => "read",
                    Dir::Wait => "wait",
                },
                fd: e.sock.map(|_| e.fd).filter(|&fd| fd >= 0),
                ret: e.ret,
                text,
            }
        })
        .collect();
    TraceExample {
        pid: sock.pid,
        fd: sock.fd,
        local: sock.local.clone().or_else(|| row.as_ref().map(|r| r.local.to_string())),
        peer: sock.peer.clone().or_else(|| row.as_ref().map(|r| r.peer.to_string())),
        nagle: ex.nagle.name(),
        gap_ms: ex.gap_ns.map(|g| g as f64 / 1e6),
        lines,
        elided: ex.elided,
    }
}

fn errno_name(e: i64) -> String {
    match e as i32 {
        libc::EAGAIN => "EAGAIN".into(),
        libc::EINTR => "EINTR".into(),
        libc::ECONNRESET => "ECONNRESET".into(),
        libc::EPIPE => "EPIPE".into(),
        libc::EBADF => "EBADF".into(),
        // ERESTARTSYS and kin: interrupted, restarted by the kernel.
        512..=516 => "restarted".into(),
        n => format!("errno {n}"),
    }
}

/// The cost: stops × (the stop's cost measured at start + the tracer's extra work here).
fn overhead(rec: &Recording, responses: u64) -> TraceOverhead {
    let secs = rec.traced.as_secs_f64().max(1e-6);
    let stops_per_s = rec.stops as f64 / secs;
    let tracer_us = if rec.stops > 0 { rec.handling.as_secs_f64() * 1e6 / rec.stops as f64 } else { 0.0 };
    let calibrated = rec.calibration.map(|c| c.per_stop_us);
    // The calibration already includes a minimal handling; add what this trace's handling took beyond it.
    let us_per_stop = match rec.calibration {
        Some(c) => c.per_stop_us + (tracer_us - c.handling_us).max(0.0),
        None => tracer_us,
    };
    // Thread time spent held in stops per second, summed over threads (a
    // single-threaded server loses this share of its capacity).
    let held_share = stops_per_s * us_per_stop / 1e6;
    let added_ms = (responses > 0).then(|| rec.stops as f64 / responses as f64 * us_per_stop / 1e3);
    let mut text = format!(
        "{} stops ({:.0}/s); each cost the process ≈ {:.1} µs ({}tracer's own work {:.1} µs), so each traced \
syscall took ≈ {:.0} µs longer and its threads were held {:.0} % of the time (summed over threads)",
        rec.stops,
        stops_per_s,
        us_per_stop,
        calibrated.map(|c| format!("measured at start {c:.1} µs; ")).unwrap_or_default(),
        tracer_us,
        2.0 * us_per_stop,
        held_share * 100.0
    );
    if let Some(a) = added_ms {
        // The process's own time; requests queued behind a busy thread wait that much more each.
        text.push_str(&format!(
            "; ≈ {a:.3} ms of the process's time added per response (on a busy server, requests queued behind \
it wait longer still)"
        ));
    }
    TraceOverhead {
        stops: rec.stops,
        stops_per_s,
        calibrated_us_per_stop: calibrated,
        tracer_us_per_stop: tracer_us,
        tracer_us_max: rec.handling_max.as_secs_f64() * 1e6,
        us_per_stop,
        added_us_per_syscall: 2.0 * us_per_stop,
        held_share,
        added_ms_per_response: added_ms,
        signals_passed: rec.signals,
        text,
    }
}
