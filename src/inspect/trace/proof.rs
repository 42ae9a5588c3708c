//! The eBPF trace's own sections of the report: what the kernel says
//! happened to each write's bytes, and what the tracing cost.

use super::decode::Hold;
use super::ebpf::{Extra, Hooks};
use super::hold::Fate;
use crate::record::inspect::{TraceCost, TraceHold};
use std::time::Duration;

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn median(v: &mut [u64]) -> Option<u64> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

/// A write's fate in a few words, for the example's lines.
pub(super) fn fate_phrase(f: Fate) -> String {
    match f {
        Fate::AtOnce => "left the host during the call".into(),
        Fate::Nagle(ns) => format!("held {:.1} ms by Nagle, then sent", ms(ns)),
        Fate::Held(ns) => format!("held {:.1} ms in the send queue (cork or window), then sent", ms(ns)),
        Fate::Resent(ns) => format!("lost before it left the host, sent again {:.1} ms later: not a hold", ms(ns)),
        Fate::Queued(ns) => format!("left the device {:.3} ms after the call", ms(ns)),
        Fate::Unseen => "departure not seen".into(),
    }
}

/// The writes' fates, counted.
pub(super) fn holds(holds: &[Hold]) -> TraceHold {
    let mut t = TraceHold { writes: holds.len() as u64, ..TraceHold::default() };
    let (mut nagle, mut other) = (Vec::new(), Vec::new());
    for h in holds {
        match h.fate {
            Fate::AtOnce => t.at_once += 1,
            Fate::Nagle(ns) => nagle.push(ns),
            Fate::Held(ns) => other.push(ns),
            Fate::Resent(_) => t.resent += 1,
            Fate::Queued(_) => t.queued += 1,
            Fate::Unseen => t.unseen += 1,
        }
    }
    t.nagle = nagle.len() as u64;
    t.held_other = other.len() as u64;
    t.nagle_median_ms = median(&mut nagle).map(ms);
    t.nagle_max_ms = nagle.last().copied().map(ms);
    t.held_other_median_ms = median(&mut other).map(ms);
    // The example: a write held for the median time.
    if let Some(m) = t.nagle_median_ms
        && let Some(h) = holds.iter().find(|h| matches!(h.fate, Fate::Nagle(ns) if ms(ns) == m))
    {
        t.example = Some(format!(
            "this {}-byte write waited {:.1} ms inside the kernel until the peer's ACK released it",
            h.bytes, m
        ));
    }
    let mut rest = vec![format!("{} left the host during the call", t.at_once)];
    if t.held_other > 0 {
        rest.push(format!(
            "{} were held by TCP_CORK, MSG_MORE or a full window (median {:.1} ms)",
            t.held_other,
            t.held_other_median_ms.unwrap_or(0.0)
        ));
    }
    if t.resent > 0 {
        rest.push(format!(
            "{} were lost before they left the host (dropped below TCP) and left in a re-send: not held",
            t.resent
        ));
    }
    if t.queued > 0 {
        rest.push(format!("{} waited below TCP (a device queue)", t.queued));
    }
    if t.unseen > 0 {
        rest.push(format!("{} not seen leaving before the trace ended", t.unseen));
    }
    t.text = if t.writes == 0 {
        "kernel: no write on a TCP socket to follow".into()
    } else if t.nagle > 0 {
        format!(
            "kernel: {} of {} writes were held in the send queue by Nagle until the peer's ACK (median {:.1} ms, \
longest {:.1} ms){}; {}",
            t.nagle,
            t.writes,
            t.nagle_median_ms.unwrap_or(0.0),
            t.nagle_max_ms.unwrap_or(0.0),
            t.example.as_ref().map(|e| format!(": {e}")).unwrap_or_default(),
            rest.join(", ")
        )
    } else {
        format!("kernel: none of {} writes was held by Nagle: {}", t.writes, rest.join(", "))
    };
    t
}

/// Whether the kernel confirms a write-write-read finding as Nagle stalls:
/// it held by Nagle at least half as many writes as there were such
/// responses (each stalled response has one held piece). None without a
/// finding or without the kernel's account.
pub(super) fn confirms(write_write_read: u64, hold: Option<&TraceHold>) -> Option<bool> {
    let h = hold.filter(|h| h.writes > 0)?;
    (write_write_read > 0).then_some(h.nagle * 2 >= write_write_read)
}

/// The sentence added to a write-write-read finding the kernel does not confirm.
pub(super) fn not_held(h: &TraceHold) -> String {
    format!(
        "; but the kernel held only {} of {} writes by Nagle{}: the pieces left the host as they were written, so \
the time between them was the application's, not a Nagle stall",
        h.nagle,
        h.writes,
        h.nagle_median_ms.map(|m| format!(" (median {m:.1} ms)")).unwrap_or_default()
    )
}

/// What the programs cost: records per second, and per call as calibrated at start.
pub(super) fn cost(x: &Extra, calls: u64, traced: Duration, responses: u64) -> TraceCost {
    let secs = traced.as_secs_f64().max(1e-6);
    let cal = x.calibration;
    let per_call_us = cal.map(|c| c.traced_ns / 1e3);
    let held_share = per_call_us.map(|us| calls as f64 / secs * us / 1e6);
    let added_ms = per_call_us.filter(|_| responses > 0).map(|us| calls as f64 / responses as f64 * us / 1e3);
    let (at, other) = match x.hooks {
        Hooks::Sock => ("the socket tracepoints", "another process's socket read or write"),
        Hooks::Syscalls => ("the syscall tracepoints", "any other syscall on the host"),
    };
    let mut text = format!(
        "eBPF at {at}, the process never stopped: {} records ({:.0}/s, {} lost)",
        x.sent,
        x.sent as f64 / secs,
        x.lost
    );
    match cal {
        Some(c) => text.push_str(&format!(
            "; each traced call cost ≈ {:.2} µs more CPU (measured at start), {other} ≈ {:.0} ns; the process's \
threads lost {:.2} % of their time{}",
            c.traced_ns / 1e3,
            c.other_ns,
            held_share.unwrap_or(0.0) * 100.0,
            added_ms.map(|a| format!(", ≈ {a:.4} ms per response")).unwrap_or_default()
        )),
        None => text.push_str("; the cost per call could not be measured at start"),
    }
    if let Some(s) = x.sampled {
        text.push_str(&format!("; from {:.2} s on, one TCP_NODELAY socket in {} was traced", s.from_s, s.one_in));
    }
    let share = x.sliced.map_or(1.0, |s| (s.on_s / s.window_s.max(1e-9)).min(1.0));
    if let Some(s) = x.sliced {
        text.push_str(&format!(
            ", and the call programs were attached in slices, {:.1} of {:.1} s",
            s.on_s, s.window_s
        ));
    }
    TraceCost {
        tracepoints: x.hooks.name(),
        records: x.sent,
        records_per_s: x.sent as f64 / secs,
        lost: x.lost,
        calls_per_s: calls as f64 / secs,
        calibrated_us_per_call: per_call_us,
        calibrated_ns_other_syscall: cal.map(|c| c.other_ns),
        held_share,
        added_ms_per_response: added_ms,
        sampled_one_in: x.sampled.map_or(1, |s| s.one_in),
        sampled_from_s: x.sampled.map(|s| s.from_s),
        calls_attached_share: share,
        sliced_from_s: x.sliced.map(|s| s.from_s),
        text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_confirms_a_finding_only_with_a_hold_per_second_response() {
        let h = |nagle, writes| TraceHold { nagle, writes, ..TraceHold::default() };
        // 170 write-write-read responses: 160 held pieces confirm, 24 do not.
        assert_eq!(confirms(170, Some(&h(160, 340))), Some(true));
        assert_eq!(confirms(170, Some(&h(85, 340))), Some(true));
        assert_eq!(confirms(170, Some(&h(24, 348))), Some(false));
        // No finding, no kernel account (ptrace), or no write followed: nothing to say.
        assert_eq!(confirms(0, Some(&h(0, 340))), None);
        assert_eq!(confirms(170, None), None);
        assert_eq!(confirms(170, Some(&h(0, 0))), None);
        assert!(not_held(&h(0, 348)).starts_with("; but the kernel held only 0 of 348 writes by Nagle: "));
    }
}
