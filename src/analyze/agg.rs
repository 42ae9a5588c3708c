//! Per-file aggregates (per Nagle endpoint, per server, per cause) and how
//! the results of several files merge.

use super::limits::{RTO_NS, SLOW_THINK_NS};
use super::upstream::{UpstreamWait, Windows};
use crate::detect::tls::TlsHold;
use crate::detect::{Exchange, Stall, Times};
use crate::dist::Dist;
use crate::record::{self, Ladder};
use crate::tcp::Side;
use crate::wire::Endpoint;
use rustc_hash::FxHashMap;
use std::net::IpAddr;

/// A sum of nanoseconds, exact: it takes 2⁶⁴ values to overflow 128 bits,
/// and adding to it is cheaper than a saturating add to an `i64` (one add
/// with carry, no overflow test). Read clamped to an `i64`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sum(i128);

impl Sum {
    #[inline(always)]
    pub(crate) fn add(&mut self, ns: i64) {
        self.0 += i128::from(ns);
    }

    /// Adds another part's sum (shards, files).
    pub(crate) fn merge(&mut self, o: Sum) {
        self.0 = self.0.saturating_add(o.0);
    }

    /// The sum, clamped to an `i64`.
    pub(crate) fn get(self) -> i64 {
        self.0.clamp(i64::MIN.into(), i64::MAX.into()) as i64
    }
}

/// A server's exchange times, summed. Their total is not summed apart: an
/// exchange's total is the sum of its parts ([`Times`]), so the sums' is too.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sums {
    pub(crate) network: Sum,
    pub(crate) think: Sum,
    pub(crate) client: Sum,
    pub(crate) transfer: Sum,
    pub(crate) stall: Sum,
    pub(crate) loss: Sum,
    /// Round trips per exchange, each times the exchange's RTT.
    pub(crate) path: Sum,
}

impl Sums {
    #[inline(always)]
    fn add(&mut self, t: &Times, path: i64) {
        let parts = [t.network, t.think, t.client, t.transfer, t.stall, t.loss, path];
        for (sum, ns) in self.all().into_iter().zip(parts) {
            sum.add(ns);
        }
    }

    /// Adds another part's sums (shards, files).
    pub(crate) fn merge(&mut self, o: &Sums) {
        let mut o = *o;
        for (sum, other) in self.all().into_iter().zip(o.all()) {
            sum.merge(*other);
        }
    }

    fn all(&mut self) -> [&mut Sum; 7] {
        let Sums { network, think, client, transfer, stall, loss, path } = self;
        [network, think, client, transfer, stall, loss, path]
    }

    /// The exchanges' total times, summed.
    pub(crate) fn total(&self) -> Sum {
        let parts = [self.network, self.think, self.client, self.transfer, self.stall, self.loss];
        Sum(parts.iter().fold(0i128, |a, p| a.saturating_add(p.0)))
    }
}

/// Stalled-exchange ladders kept for the report.
pub(crate) const STALLED_LADDERS: usize = 20;
/// Stalled exchanges a connection offers: its worst few.
pub(crate) const STALLED_PER_CONN: usize = 3;
/// Ladders kept of the slowest exchange of connections that did not stall.
pub(crate) const SLOWEST_LADDERS: usize = 10;

/// Where a ladder ranks, best first: (its rank within its connection, minus its
/// stall or total time, ns, its connection's first frame). Each connection's
/// worst stalled exchange thus comes before any connection's second worst;
/// on a tie the connection seen first wins, whatever order they closed in.
pub(crate) type Rank = (usize, i64, u64);

/// When something was observed, in the order one thread observes things:
/// ((frame << 1) | phase, the connection's first frame), where phase 0 is the
/// sweep of the table before the frame's packet and 1 the packet itself (see
/// [`super::collect::Collector::at_packet`]). Shards of one file observe
/// subsequences of that order, so "the first few" merge exactly.
pub(crate) type At = (u64, u64);

/// The `At` of observations that are never merged with another part's
/// (`watch`): their order of arrival is their order.
pub(crate) const ARRIVAL: At = (0, 0);

/// The `N` best-ranked ladders.
#[derive(Default)]
pub(crate) struct Kept<const N: usize>(pub(crate) Vec<(Rank, Ladder)>);

impl<const N: usize> Kept<N> {
    /// Whether a ladder ranked `r` would be kept (so its rows are worth holding on to).
    pub(crate) fn worth(&self, r: Rank) -> bool {
        self.0.len() < N || self.0.last().is_some_and(|w| r < w.0)
    }

    /// Keeps `l` if it ranks among the `N` best.
    pub(crate) fn keep(&mut self, r: Rank, l: Ladder) {
        if !self.worth(r) {
            return;
        }
        let at = self.0.partition_point(|w| w.0 <= r);
        self.0.insert(at, (r, l));
        self.0.truncate(N);
    }

    /// The ladders, best first.
    pub(crate) fn into_ladders(self) -> Vec<Ladder> {
        self.0.into_iter().map(|w| w.1).collect()
    }
}

/// Endpoints (or endpoint and side) each per-file map keeps aggregates for.
/// Each costs one to four histograms (13 KiB each), so a stream of endless
/// distinct servers, or of client-side Nagle stalls from endless client ports,
/// stays within ~75 MiB in all; observations of further endpoints are counted
/// and dropped.
pub(crate) const MAX_ENDPOINTS: usize = 512;

/// The entry for `k`, or `None` when the map is full and `k` not in it.
pub(crate) fn bounded_entry<K: std::hash::Hash + Eq, V: Default>(m: &mut FxHashMap<K, V>, k: K) -> Option<&mut V> {
    if m.len() >= MAX_ENDPOINTS && !m.contains_key(&k) {
        return None;
    }
    Some(m.entry(k).or_default())
}

/// Example frames kept per finding.
pub(crate) const EXAMPLES: usize = 5;

/// A finding's example frames: the first [`EXAMPLES`] groups observed (each
/// group the frames of one event), with when they were observed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Examples(Vec<(At, u64)>);

impl Examples {
    /// Adds one event's frames, if fewer than [`EXAMPLES`] events are kept.
    pub(crate) fn push(&mut self, at: At, frames: &[u64]) {
        if self.0.len() < EXAMPLES * frames.len() {
            self.0.extend(frames.iter().map(|&f| (at, f)));
        }
    }

    /// The frames, in the order observed.
    pub(crate) fn frames(&self) -> Vec<u64> {
        self.0.iter().map(|e| e.1).collect()
    }

    /// Adds another input's examples (`per` frames an event): after these,
    /// as frames of different files are not ordered, or (`shard`: another
    /// part of the same file) in the order observed.
    pub(crate) fn merge(&mut self, o: Examples, per: usize, shard: bool) {
        let cap = EXAMPLES * per.max(1);
        if shard {
            // Groups of two shards never share a connection, so never an `At`.
            let mut all = std::mem::take(&mut self.0);
            all.extend(o.0);
            all.sort_by_key(|e| e.0);
            all.truncate(cap);
            self.0 = all;
        } else {
            for g in o.0.chunks(per.max(1)) {
                if self.0.len() < cap {
                    self.0.extend_from_slice(g);
                }
            }
        }
    }
}

#[derive(Default)]
pub(crate) struct NagleAgg {
    /// The role most of its stalls gave it (a connection whose roles were
    /// guessed wrong must not flip the finding).
    pub(crate) side: Option<Side>,
    /// Stalls by the role it had on their connection.
    pub(crate) votes: [u64; 2],
    /// The ACKer of its last stall, and when that stall was observed.
    pub(crate) peer: Option<IpAddr>,
    pub(crate) peer_at: At,
    pub(crate) stalls: Dist,
    /// The ACKer's own delay (round trip removed), and as seen at the capture point.
    pub(crate) acks: Dist,
    pub(crate) seen: Dist,
    /// Round trips from the capture point to [client, server] of its stalled
    /// connections (as measured by their end), weighted by their stalls.
    pub(crate) rtt_sum: [i64; 2],
    pub(crate) rtt_n: [u64; 2],
    pub(crate) lost_ns: i64,
    /// Exchanges on the connections that stalled.
    pub(crate) exchanges: u64,
    pub(crate) connections: u64,
    pub(crate) examples: Examples,
    /// Nagle + loss: holds released by the sender's loss timer.
    pub(crate) with_loss: Dist,
    pub(crate) with_loss_ns: i64,
    pub(crate) with_loss_examples: Examples,
    /// Plain stalls over TLS: between two records, and behind a session ticket.
    pub(crate) tls_records: u64,
    pub(crate) tls_ticket: u64,
}

#[derive(Default)]
pub(crate) struct ServerAgg {
    pub(crate) exchanges: u64,
    pub(crate) total: Dist,
    pub(crate) think: Dist,
    /// The exchanges' times, summed.
    pub(crate) sums: Sums,
    pub(crate) rounds: u64,
    /// The exchanges' client ↔ server round trip (each connection's last
    /// estimate, once per exchange: recorded as the connection closes).
    pub(crate) rtt: Dist,
    pub(crate) path_examples: Examples,
    pub(crate) slow: u64,
    pub(crate) slow_think_ns: i64,
    pub(crate) slow_examples: Examples,
    /// The `Server:` header of the first connection to close with one, and when it closed.
    pub(crate) software: Option<String>,
    pub(crate) software_at: At,
    /// Slow windows and exchange spans for the upstream test (this file only).
    pub(crate) windows: Windows,
    /// TLS server names (SNI) its clients asked for, the first few, with when each was first seen.
    pub(crate) names: Vec<(At, Box<str>)>,
    pub(crate) more_names: bool,
}

/// Server names kept per server.
const NAMES: usize = 4;

impl ServerAgg {
    /// Adds a server name (SNI) a client asked for, seen at `at`.
    pub(crate) fn add_name(&mut self, at: At, name: Box<str>) {
        if let Some(n) = self.names.iter_mut().find(|n| n.1 == name) {
            n.0 = n.0.min(at);
            return;
        }
        self.names.push((at, name));
        // The first seen are kept, whatever order they come in (shards merge so).
        self.names.sort_by_key(|n| n.0);
        if self.names.len() > NAMES {
            self.names.truncate(NAMES);
            self.more_names = true;
        }
    }

    /// The server software of the connection that closed first with one.
    pub(crate) fn add_software(&mut self, at: At, software: String) {
        if self.software.is_none() || at < self.software_at {
            (self.software, self.software_at) = (Some(software), at);
        }
    }

    /// Its server names, for output: "a.test, b.test, …".
    pub(crate) fn name(&self) -> Option<String> {
        let more = if self.more_names { ", …" } else { "" };
        let names: Vec<&str> = self.names.iter().map(|n| &*n.1).collect();
        (!names.is_empty()).then(|| format!("{}{more}", names.join(", ")))
    }
}

#[derive(Default)]
pub(crate) struct CountAgg {
    pub(crate) events: u64,
    pub(crate) spurious: u64,
    pub(crate) timeouts: u64,
    pub(crate) unanswered: u64,
    pub(crate) retries: u64,
    pub(crate) connections: u64,
    /// `Expect` waits whose head the snap length cut before the header.
    pub(crate) inferred: u64,
    pub(crate) dist: Dist,
    pub(crate) lost_ns: i64,
    pub(crate) examples: Examples,
}

/// Requests whose head the snap length cut before their request line ended:
/// (how many, the first one's frame, the most payload bytes kept of one).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HeadsUnread(pub(crate) u64, pub(crate) u64, pub(crate) u32);

impl HeadsUnread {
    /// Adds `o` (one head, or another shard's count): counts sum, the first frame is the least.
    pub(crate) fn add(&mut self, o: HeadsUnread) {
        if o.0 > 0 {
            let first = if self.0 == 0 { o.1 } else { self.1.min(o.1) };
            *self = HeadsUnread(self.0 + o.0, first, self.2.max(o.2));
        }
    }
}

/// One file's results, before merging.
#[derive(Default)]
pub(crate) struct FileResult {
    pub(crate) input: record::Input,
    pub(crate) nagle: FxHashMap<Endpoint, NagleAgg>,
    pub(crate) servers: FxHashMap<Endpoint, ServerAgg>,
    pub(crate) retrans: FxHashMap<(Endpoint, Side), CountAgg>,
    pub(crate) syn: FxHashMap<(Endpoint, Side), CountAgg>,
    pub(crate) zero: FxHashMap<(Endpoint, Side), CountAgg>,
    /// `Expect: 100-continue` waits, per (client host, server).
    pub(crate) expect: FxHashMap<(IpAddr, Endpoint), CountAgg>,
    /// Servers whose slow answers waited for another server's exchanges (a proxy and its upstream).
    pub(crate) upstream: FxHashMap<Endpoint, UpstreamWait>,
    pub(crate) conns: super::conns::Rows,
    pub(crate) guessed_roles: u64,
    pub(crate) heads_unread: HeadsUnread,
    /// Connections whose roles were swapped by later evidence after something
    /// was observed, or contradicted by content; the first to close of each
    /// (when it closed, its id, the frame).
    pub(crate) roles_corrected: (u64, Option<(At, String, u64)>),
    pub(crate) roles_contradicted: (u64, Option<(At, String, u64)>),
    /// Ladders of the worst stalled exchanges, at most [`STALLED_PER_CONN`] per connection.
    pub(crate) stalled: Kept<STALLED_LADDERS>,
    /// Ladders of the slowest exchange of connections without a stall.
    pub(crate) slowest: Kept<SLOWEST_LADDERS>,
    pub(crate) flow: Option<Ladder>,
    pub(crate) warnings: Vec<String>,
    /// Observations dropped because their endpoint's map was full ([`MAX_ENDPOINTS`]).
    pub(crate) dropped: u64,
    /// First frame of each connection, in order (kept by shards, to number
    /// the connections as one thread does).
    pub(crate) created: Vec<u64>,
}

impl NagleAgg {
    /// Adds a stall held by this endpoint, observed at `at`; `peer` delayed its ACK.
    pub(crate) fn add(&mut self, at: At, peer: IpAddr, s: &Stall) {
        self.votes[s.nagle.idx()] += 1;
        self.side = Some(self.majority());
        if self.peer.is_none() || at >= self.peer_at {
            (self.peer, self.peer_at) = (Some(peer), at);
        }
        if s.timer {
            self.with_loss.record(s.stall_ns);
            self.with_loss_ns = self.with_loss_ns.saturating_add(s.stall_ns);
            self.with_loss_examples.push(at, &[s.small_frame, s.held_frame]);
            return;
        }
        self.stalls.record(s.stall_ns);
        match s.tls {
            TlsHold::Records => self.tls_records += 1,
            TlsHold::Ticket => self.tls_ticket += 1,
            TlsHold::None => {}
        }
        self.acks.record(s.ack_delay_ns);
        self.seen.record(s.ack_seen_ns);
        self.lost_ns = self.lost_ns.saturating_add(s.stall_ns);
        self.examples.push(at, &[s.small_frame, s.ack_frame, s.held_frame]);
    }

    pub(crate) fn majority(&self) -> Side {
        if self.votes[Side::Client.idx()] > self.votes[Side::Server.idx()] { Side::Client } else { Side::Server }
    }

    /// Adds a connection that stalled `stalls` times, with its round trips
    /// from the capture point to [client, server].
    pub(crate) fn add_rtt(&mut self, rtt_to: [Option<i64>; 2], stalls: u64) {
        for (i, rtt) in rtt_to.iter().enumerate() {
            if let Some(r) = rtt {
                self.rtt_sum[i] = self.rtt_sum[i].saturating_add(r.saturating_mul(stalls as i64));
                self.rtt_n[i] += stalls;
            }
        }
    }

    /// Mean round trip from the capture point to `side` over the stalls, ns.
    pub(crate) fn rtt_to(&self, side: Side) -> Option<i64> {
        let n = self.rtt_n[side.idx()];
        (n > 0).then(|| self.rtt_sum[side.idx()] / n as i64)
    }
}

impl ServerAgg {
    /// Adds one exchange and its split, observed at `at`.
    pub(crate) fn add_exchange(&mut self, at: At, t: &Times, x: &Exchange) {
        self.exchanges += 1;
        self.total.record(t.total);
        self.think.record(t.think);
        // Round trips cannot take longer than the exchange did.
        let path = t.network.saturating_mul(i64::from(x.rounds.max(1))).min(t.total);
        self.sums.add(t, path);
        self.rounds += u64::from(x.rounds.max(1));
        self.path_examples.push(at, &[x.first_frame, x.last_frame]);
        if t.think >= SLOW_THINK_NS {
            self.slow += 1;
            self.slow_think_ns = self.slow_think_ns.saturating_add(t.think);
            // The last request frame is not tracked; the first is close enough to find it.
            self.slow_examples.push(at, &[x.first_frame, x.last_frame]);
        }
    }
}

impl CountAgg {
    /// Adds a re-sent segment (`first`: the first on its connection), observed at `at`.
    pub(crate) fn add_retrans(&mut self, at: At, spurious: bool, frame: u64, since_ns: i64, first: bool) {
        self.events += 1;
        self.spurious += u64::from(spurious);
        if !spurious {
            self.timeouts += u64::from(since_ns >= RTO_NS);
            self.dist.record(since_ns);
        }
        self.lost_ns = self.lost_ns.saturating_add(since_ns);
        self.connections += u64::from(first);
        self.examples.push(at, &[frame]);
    }

    /// Adds a connection whose SYN (or SYN-ACK) was re-sent.
    pub(crate) fn add_syn(&mut self, at: At, retries: u32, delay_ns: i64, answered: bool, frames: [u64; 2]) {
        self.connections += 1;
        self.retries += u64::from(retries);
        self.unanswered += u64::from(!answered);
        self.dist.record(delay_ns);
        self.lost_ns = self.lost_ns.saturating_add(delay_ns);
        self.examples.push(at, &frames);
    }

    /// Adds a request body that waited `wait_ns` for `100 Continue` (`first`: the first on its connection).
    pub(crate) fn add_expect(&mut self, at: At, wait_ns: i64, frames: [u64; 2], first: bool, header_seen: bool) {
        self.events += 1;
        self.inferred += u64::from(!header_seen);
        self.connections += u64::from(first);
        self.dist.record(wait_ns);
        self.lost_ns = self.lost_ns.saturating_add(wait_ns);
        self.examples.push(at, &frames);
    }

    /// Adds a window closed for `duration_ns`.
    pub(crate) fn add_zero(&mut self, at: At, duration_ns: i64, frames: [u64; 2]) {
        self.events += 1;
        self.dist.record(duration_ns);
        self.lost_ns = self.lost_ns.saturating_add(duration_ns);
        self.examples.push(at, &frames);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ladder(title: &str) -> Ladder {
        Ladder {
            connection: String::new(),
            title: title.into(),
            client: String::new(),
            server: String::new(),
            rows: vec![],
            truncated: false,
            times: None,
        }
    }

    #[test]
    fn sums_past_an_i64_read_as_its_largest_and_come_back_exactly() {
        let mut s = Sum::default();
        s.add(i64::MAX);
        s.add(5);
        assert_eq!(s.get(), i64::MAX);
        let mut parts = s;
        parts.merge(s);
        // Exact underneath: what went past the top comes off again.
        s.add(-i64::MAX);
        assert_eq!(s.get(), 5);
        parts.add(-i64::MAX);
        assert_eq!(parts.get(), i64::MAX);
        parts.add(-i64::MAX);
        assert_eq!(parts.get(), 10);
    }

    #[test]
    fn shards_examples_merge_into_the_first_observed() {
        // One thread observes (frame 10, conn 1), (11, 2), (12, 1), (13, 3) … in that order.
        let (mut one, mut a, mut b) = (Examples::default(), Examples::default(), Examples::default());
        for k in 0..8u64 {
            let at = (10 + k, k % 3);
            one.push(at, &[k, k + 100]);
            if k % 3 == 1 { &mut b } else { &mut a }.push(at, &[k, k + 100]);
        }
        a.merge(b, 2, true);
        assert_eq!(a.frames(), one.frames());
        assert_eq!(one.frames(), [0, 100, 1, 101, 2, 102, 3, 103, 4, 104]);
    }

    #[test]
    fn every_connection_s_worst_comes_before_any_second_worst() {
        // Connections a, b, c first seen at frames 1, 2, 3; c closes before b.
        let mut k = Kept::<3>::default();
        k.keep((1, -90, 1), ladder("a #2"));
        k.keep((0, -40, 3), ladder("c #1, tied with b: after it"));
        k.keep((0, -50, 1), ladder("a #1"));
        k.keep((0, -40, 2), ladder("b #1"));
        assert!(!k.worth((1, -1000, 0)) && !k.worth((0, -40, 4)) && k.worth((0, -40, 1)) && k.worth((0, -41, 9)));
        k.keep((2, -500, 0), ladder("not kept"));
        let titles: Vec<String> = k.into_ladders().into_iter().map(|l| l.title).collect();
        assert_eq!(titles, ["a #1", "b #1", "c #1, tied with b: after it"]);
    }
}
