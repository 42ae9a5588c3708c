//! What a run means, in words: the NOTE lines on its distributions, and why
//! a run that completed no response measured nothing.

use super::Stats;
use super::config::Config;
use std::time::Duration;

/// Delayed-ACK timers and other kernel "magic numbers", ms: (low, high, what).
const CLUSTERS: [(f64, f64, &str); 2] = [
    (36.0, 52.0, "Linux's delayed-ACK timer (40 ms minimum)"),
    (185.0, 230.0, "a 200 ms timer: Windows' delayed ACK, or Linux's minimum retransmission timeout"),
];
/// Share of responses in a band that makes it worth a note.
const CLUSTER_SHARE: f64 = 0.2;

/// Plain-language observations on the distributions.
pub(super) fn notes(cfg: &Config, s: &Stats) -> Vec<String> {
    let mut out = cfg.notes.clone();
    let pct = |x: f64| (x * 100.0).round();
    for (lo, hi, what) in CLUSTERS {
        let share = s.latency.share_between(lo, hi);
        if share < CLUSTER_SHARE {
            continue;
        }
        let gap_share = s.gap.share_between(lo * 0.8, hi);
        let mut n = format!("{}% of responses took {lo:.0}-{hi:.0} ms: {what}.", pct(share));
        if gap_share >= CLUSTER_SHARE {
            n.push_str(&format!(
                " In {}% the first bytes came at once and the rest {:.0} ms later (largest read gap p50): \
the server writes its response in pieces{} with Nagle on, and the last piece waits for this client's delayed ACK. \
Fix: TCP_NODELAY on the server (nginx: `tcp_nodelay on;`); confirm with `--quickack`, which should remove the stall.",
                pct(gap_share),
                s.gap.quantile_ms(0.5),
                if cfg.tls.is_some() { " (separate TLS records)" } else { "" }
            ));
        } else if cfg.split_writes && !cfg.nodelay {
            n.push_str(
                " This client wrote the request header and body separately with Nagle on (--split-writes \
--nodelay off): the body waited for the server's delayed ACK (client-side Nagle). Fix: TCP_NODELAY on the \
client, or one write per request.",
            );
        } else if cfg.quickack && lo < 100.0 {
            n.push_str(" With --quickack on, this is not this client delaying ACKs: look at the server's think time.");
        } else {
            n.push_str(
                " Whole responses arrived late (no gap inside them): the server took that long, or the request \
was held before it reached the server. `tcpdoctor analyze` on a capture tells which.",
            );
        }
        out.push(n);
    }
    for (lo, hi, what) in [(900.0, 1300.0, "1 s"), (2900.0, 3500.0, "3 s")] {
        let share = s.connect.share_between(lo, hi);
        if share >= CLUSTER_SHARE {
            out.push(format!(
                "{}% of connects took ~{what}: SYN retransmissions (the first SYN or SYN-ACK was lost, the kernel \
retried after its {what} timer). Look for a full accept queue or packet loss on the server's side.",
                pct(share)
            ));
        }
    }
    for ((kind, n), why) in
        [("connect", s.errors.connect), ("read", s.errors.read), ("write", s.errors.write)].iter().zip(&s.first_errors)
    {
        if let (true, Some(why)) = (*n > 0, why) {
            out.push(format!("{n} {kind} errors; the first: {why}."));
        }
    }
    if s.requests == 0 && s.errors.timeout > 0 {
        out.push(format!(
            "The server accepted connections but never answered within {}: {} timeouts.",
            crate::words::time_ms(cfg.timeout.as_secs_f64() * 1e3),
            s.errors.timeout
        ));
    }
    out
}

/// Why a run completed no response, in one sentence (wrk's "unable to
/// connect"); `None` when something was measured.
pub(super) fn nothing_measured(cfg: &Config, s: &Stats, interrupted: bool) -> Option<String> {
    if s.requests > 0 {
        return None;
    }
    let e = &s.errors;
    let accepted = s.connect.count();
    if interrupted && e.total() == 0 {
        return Some("interrupted before any response completed".into());
    }
    if accepted == 0 {
        return Some(match &s.first_errors[0] {
            Some(first) => format!("unable to connect to {}: {first} ({} attempts)", cfg.addr, e.connect),
            None => format!("no connection to {} was set up within the {} run", cfg.addr, words(cfg.duration)),
        });
    }
    let conns = if accepted == 1 { "1 connection".to_string() } else { format!("{accepted} connections") };
    let head = format!("the server at {} accepted {conns} but", cfg.addr);
    let first = |i: usize| s.first_errors[i].as_deref().unwrap_or("unknown");
    if cfg.tls.is_some() && s.handshakes == 0 && e.connect > 0 {
        return Some(format!("{head} no TLS handshake completed ({} failed): {}", e.connect, first(0)));
    }
    let most = e.timeout.max(e.read).max(e.write).max(e.malformed);
    Some(match most {
        0 => format!(
            "{head} no response completed within the {} run (--timeout {})",
            words(cfg.duration),
            words(cfg.timeout)
        ),
        m if m == e.malformed => format!("{head} sent no valid HTTP/1.x response ({m} malformed)"),
        m if m == e.read => format!("{head} closed or reset them before a complete response: {}", first(1)),
        m if m == e.write => format!("{head} the requests could not be sent: {}", first(2)),
        m => format!("{head} sent no complete response within {} ({m} timeouts)", words(cfg.timeout)),
    })
}

/// `2 s`, `500 ms`.
fn words(d: Duration) -> String {
    if d >= Duration::from_secs(1) && d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}
