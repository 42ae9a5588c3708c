//! `upstream_wait`: a reverse proxy whose slow answers are its upstream's time.

use super::{dur_ms, ms};
use crate::analyze::agg::ServerAgg;
use crate::analyze::upstream::UpstreamWait;
use crate::record::{Finding, UpstreamWaitFinding};
use crate::wire::Endpoint;

/// The finding for `server` when most of its slow windows held whole exchanges
/// of one upstream; `findings` so far name the upstream's own causes.
pub(super) fn upstream_finding(
    server: Endpoint,
    s: &ServerAgg,
    w: &UpstreamWait,
    findings: &[Finding],
) -> Option<UpstreamWaitFinding> {
    let up = w.upstream.filter(|_| w.holds())?;
    let wait = w.wait.spread();
    let named = up.to_string();
    let cause = findings.iter().find_map(|f| match f {
        Finding::NagleDelayedAck(n) if n.nagle_side.endpoint == named => {
            Some(("Nagle + delayed ACK", n.fix.first().cloned()))
        }
        Finding::Retransmission(r) if r.server == named => Some(("loss", None)),
        Finding::AppLatency(a) if a.server == named => Some(("its own application time", None)),
        _ => None,
    });
    let why = match cause {
        Some((c, _)) => format!("the upstream's time is explained by its own finding ({c} on {up})"),
        None => format!("the time is {up}'s, see its row in the breakdown"),
    };
    let mut fix =
        vec![format!("Change the upstream {up}, not the proxy {server}: the proxy only waits for its answers.")];
    if let Some((_, Some(f))) = cause {
        fix.push(format!("On {up}: {f}"));
    }
    Some(UpstreamWaitFinding {
        summary: format!(
            "Waiting for the upstream: {server} answered {} of {} slow exchanges only after its own request to {up} was answered (wait p50 {}; {} of {} exchanges slow): a proxy waiting for its upstream, not its own slowness; {why}.",
            w.matched,
            w.judged,
            dur_ms(wait.p50),
            s.slow,
            s.exchanges,
        ),
        server: server.to_string(),
        upstream: named,
        exchanges: s.exchanges,
        slow_exchanges: s.slow,
        waits_judged: w.judged,
        waits_matched: w.matched,
        wait_ms: wait,
        time_lost_ms: ms(upstream_ns(s, w)),
        example_frames: s.slow_examples.frames(),
        fix,
    })
}

/// Time the server's exchanges spent inside the upstream's, ns: measured over
/// the windows judged, scaled to all slow exchanges, never more than the think time.
pub(super) fn upstream_ns(s: &ServerAgg, w: &UpstreamWait) -> i64 {
    if !w.holds() {
        return 0;
    }
    let scaled = w.nested_ns as f64 * s.slow as f64 / w.judged.max(1) as f64;
    (scaled as i64).min(s.sums.think.get())
}
