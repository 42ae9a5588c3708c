//! A reverse proxy and its upstream in one capture: a server whose slow
//! answers each contain a whole exchange of another server (its request sent
//! after the proxy's request ended, its response over before the proxy began
//! answering) is waiting for that upstream, not thinking. Matched by time
//! nesting, per file (timestamps of different files do not compare).

use super::SLOW_THINK_NS;
use crate::detect::{Exchange, Times};
use crate::dist::Dist;
use crate::wire::Endpoint;

/// Slow think windows kept per server: the earliest ones, enough to judge by.
const MAX_WAITS: usize = 1024;
/// Exchange spans kept per server: the earliest starting.
const MAX_SPANS: usize = 8192;
/// A window is the upstream's when its nested exchanges fill at least this share of it.
const FILL_MIN: f64 = 0.5;
/// Windows that must match before anything is said.
const MATCHED_MIN: u64 = 3;

/// What one server's exchanges leave for the nesting test. Each list keeps
/// its earliest entries (by time, not by arrival), so the lists of shards
/// that each saw some of the connections merge into what one thread keeps.
#[derive(Clone, Debug, Default)]
pub(crate) struct Windows {
    /// Slow think windows: request end → first response byte, ns.
    waits: Vec<(i64, i64)>,
    /// Whole exchanges: first request byte → last response byte, ns.
    spans: Vec<(i64, i64)>,
    spans_full: bool,
    /// Once a list was cut, its largest kept entry: later ones not below it are dropped at once
    /// (exchanges mostly come in time order, so most are).
    cut: [Option<(i64, i64)>; 2],
}

/// Keeps the `cap` smallest of `v` (sorted if `sort`); says whether any were dropped.
fn earliest(v: &mut Vec<(i64, i64)>, cap: usize, sort: bool) -> bool {
    let dropped = v.len() > cap;
    if dropped {
        v.select_nth_unstable(cap);
        v.truncate(cap);
    }
    if sort {
        v.sort_unstable();
    }
    dropped
}

/// Adds `e` to `v`, which keeps its `cap` smallest; `cut` is the largest kept
/// once `v` was cut. Says whether anything was dropped.
fn add_earliest(v: &mut Vec<(i64, i64)>, cut: &mut Option<(i64, i64)>, cap: usize, e: (i64, i64)) -> bool {
    if cut.is_some_and(|c| e >= c) {
        return true;
    }
    v.push(e);
    // A quarter past the cap the list is cut back to it: amortised O(1) per entry.
    if v.len() >= cap + cap / 4 {
        earliest(v, cap, false);
        *cut = v.iter().max().copied();
        return true;
    }
    false
}

impl Windows {
    /// Keeps what the nesting test needs of one exchange.
    pub(crate) fn add(&mut self, x: &Exchange, t: &Times) {
        self.add_span(x.req_first, x.resp_last);
        if t.think >= SLOW_THINK_NS {
            self.add_wait(x.req_last, x.resp_first);
        }
    }

    fn add_span(&mut self, first: i64, last: i64) {
        self.spans_full |= add_earliest(&mut self.spans, &mut self.cut[0], MAX_SPANS, (first, last));
    }

    fn add_wait(&mut self, from: i64, to: i64) {
        if to > from {
            add_earliest(&mut self.waits, &mut self.cut[1], MAX_WAITS, (from, to));
        }
    }

    /// Adds another shard's windows of the same server.
    pub(crate) fn merge(&mut self, o: Windows) {
        self.spans.extend(o.spans);
        self.waits.extend(o.waits);
        self.spans_full |= o.spans_full | earliest(&mut self.spans, MAX_SPANS, false);
        let waits_cut = earliest(&mut self.waits, MAX_WAITS, false) || self.cut[1].is_some() || o.cut[1].is_some();
        let max = |v: &[(i64, i64)], cut: bool| if cut { v.iter().max().copied() } else { None };
        self.cut = [max(&self.spans, self.spans_full), max(&self.waits, waits_cut)];
    }
}

/// A server found waiting for an upstream.
#[derive(Clone, Debug, Default)]
pub(crate) struct UpstreamWait {
    pub(crate) upstream: Option<Endpoint>,
    /// Slow windows that could be judged (within the upstream's kept spans).
    pub(crate) judged: u64,
    /// Of those, windows filled by the upstream's exchanges.
    pub(crate) matched: u64,
    /// The matched windows' lengths.
    pub(crate) wait: Dist,
    /// Time inside matched windows spent on the upstream's exchanges, ns.
    pub(crate) nested_ns: i64,
}

impl UpstreamWait {
    pub(crate) fn merge(&mut self, b: &UpstreamWait) {
        if self.upstream.is_none() {
            self.upstream = b.upstream;
        }
        if self.upstream != b.upstream {
            return;
        }
        self.judged += b.judged;
        self.matched += b.matched;
        self.wait.merge(&b.wait);
        self.nested_ns = self.nested_ns.saturating_add(b.nested_ns);
    }

    /// Most of the slow windows judged were the upstream's.
    pub(crate) fn holds(&self) -> bool {
        self.matched >= MATCHED_MIN && self.matched * 2 >= self.judged
    }
}

/// For each server with slow windows, the other server whose exchanges fill
/// most of them (if any fills at least one). Frees the kept windows.
pub(crate) fn link(servers: &mut [(Endpoint, Windows)]) -> Vec<(Endpoint, UpstreamWait)> {
    for (_, w) in servers.iter_mut() {
        w.spans_full |= earliest(&mut w.spans, MAX_SPANS, true);
        earliest(&mut w.waits, MAX_WAITS, true);
    }
    let mut out = Vec::new();
    for (i, (front, fw)) in servers.iter().enumerate() {
        if (fw.waits.len() as u64) < MATCHED_MIN {
            continue;
        }
        let best = servers
            .iter()
            .enumerate()
            .filter(|(j, (up, _))| *j != i && up != front)
            .map(|(_, (up, uw))| judge(&fw.waits, uw, *up))
            .max_by_key(|w| (w.matched, std::cmp::Reverse(w.judged)));
        if let Some(w) = best.filter(|w| w.matched > 0) {
            out.push((*front, w));
        }
    }
    for (_, w) in servers.iter_mut() {
        *w = Windows::default();
    }
    out
}

fn judge(waits: &[(i64, i64)], up: &Windows, upstream: Endpoint) -> UpstreamWait {
    let mut r = UpstreamWait { upstream: Some(upstream), ..Default::default() };
    // Spans starting after the last kept one's start were dropped: windows ending later are not judged.
    let known_until = if up.spans_full { up.spans.last().map_or(i64::MIN, |s| s.0) } else { i64::MAX };
    for &(a, b) in waits.iter().filter(|w| w.1 <= known_until) {
        r.judged += 1;
        let start = up.spans.partition_point(|s| s.0 < a);
        let nested: i64 =
            up.spans[start..].iter().take_while(|s| s.0 < b).filter(|s| s.1 <= b).map(|s| s.1 - s.0).sum();
        if nested as f64 >= FILL_MIN * (b - a) as f64 {
            r.matched += 1;
            r.wait.record(b - a);
            r.nested_ns = r.nested_ns.saturating_add(nested.min(b - a));
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(port: u16) -> Endpoint {
        Endpoint { ip: std::net::Ipv4Addr::LOCALHOST.into(), port }
    }

    fn windows(waits: &[(i64, i64)], spans: &[(i64, i64)]) -> Windows {
        let mut w = Windows::default();
        waits.iter().for_each(|&(a, b)| w.add_wait(a, b));
        spans.iter().for_each(|&(a, b)| w.add_span(a, b));
        w
    }

    #[test]
    fn a_proxy_whose_waits_hold_the_upstreams_exchanges_waits_for_it() {
        let front = windows(&[(0, 50), (100, 150), (200, 250), (300, 350)], &[]);
        // Three of four windows hold one upstream exchange each; one is the proxy's own.
        let up = windows(&[], &[(2, 45), (101, 149), (210, 248), (400, 420)]);
        let other = windows(&[], &[(0, 10), (100, 110), (500, 600)]);
        let mut s = vec![(ep(80), front), (ep(8081), up), (ep(9000), other)];
        let links = link(&mut s);
        assert_eq!(links.len(), 1);
        let (f, w) = &links[0];
        assert_eq!((*f, w.upstream, w.judged, w.matched), (ep(80), Some(ep(8081)), 4, 3));
        assert!(w.holds());
        assert_eq!(w.nested_ns, 43 + 48 + 38);
    }

    #[test]
    fn exchanges_that_overlap_the_window_edges_do_not_count() {
        // Upstream requests sent before the proxy's request ended: concurrent, not nested.
        let front = windows(&[(0, 50), (100, 150), (200, 250)], &[]);
        let up = windows(&[], &[(-5, 45), (90, 149), (199, 251)]);
        let mut s = vec![(ep(80), front), (ep(8081), up)];
        assert!(link(&mut s).is_empty());
    }

    #[test]
    fn the_earliest_spans_are_kept_whatever_order_they_come_in() {
        let n = MAX_SPANS as i64 + 500;
        let (mut backwards, mut halves) = (Windows::default(), [Windows::default(), Windows::default()]);
        for i in (0..n).rev() {
            backwards.add_span(i * 10, i * 10 + 5);
            halves[(i % 2) as usize].add_span(i * 10, i * 10 + 5);
        }
        let [a, b] = halves;
        let mut merged = a;
        merged.merge(b);
        let last = (MAX_SPANS as i64 - 1) * 10;
        for w in [&mut backwards, &mut merged] {
            w.spans_full |= earliest(&mut w.spans, MAX_SPANS, true);
            assert!(w.spans_full);
            assert_eq!((w.spans.len(), w.spans[0], w.spans[MAX_SPANS - 1]), (MAX_SPANS, (0, 5), (last, last + 5)));
        }
    }

    #[test]
    fn windows_past_the_kept_spans_are_not_judged() {
        let front = windows(&[(0, 50), (100, 150), (200, 250), (1_000_000, 1_000_050)], &[]);
        let mut up = windows(&[], &[(2, 45), (101, 149), (210, 248), (300, 400)]);
        up.spans_full = true;
        let mut s = vec![(ep(80), front), (ep(8081), up)];
        let w = &link(&mut s)[0].1;
        assert_eq!((w.judged, w.matched), (3, 3));
    }
}
