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

/// Stalled-exchange ladders kept for the report.
pub(crate) const STALLED_LADDERS: usize = 20;
/// Stalled exchanges a connection offers: its worst few.
pub(crate) const STALLED_PER_CONN: usize = 3;
/// Ladders kept of the slowest exchange of connections that did not stall.
pub(crate) const SLOWEST_LADDERS: usize = 10;

/// Where a ladder ranks, best first: (its rank within its connection, minus its
/// stall or total time, ns). Each connection's worst stalled exchange thus comes
/// before any connection's second worst.
pub(crate) type Rank = (usize, i64);

/// The `N` best-ranked ladders (earlier first on ties).
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

#[derive(Default)]
pub(crate) struct NagleAgg {
    /// The role most of its stalls gave it (a connection whose roles were
    /// guessed wrong must not flip the finding).
    pub(crate) side: Option<Side>,
    /// Stalls by the role it had on their connection.
    pub(crate) votes: [u64; 2],
    pub(crate) peer: Option<IpAddr>,
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
    pub(crate) examples: Vec<u64>,
    /// Nagle + loss: holds released by the sender's loss timer.
    pub(crate) with_loss: Dist,
    pub(crate) with_loss_ns: i64,
    pub(crate) with_loss_examples: Vec<u64>,
    /// Plain stalls over TLS: between two records, and behind a session ticket.
    pub(crate) tls_records: u64,
    pub(crate) tls_ticket: u64,
}

#[derive(Default)]
pub(crate) struct ServerAgg {
    pub(crate) exchanges: u64,
    pub(crate) total: Dist,
    pub(crate) think: Dist,
    pub(crate) sum_total: i64,
    pub(crate) sum_network: i64,
    pub(crate) sum_think: i64,
    pub(crate) sum_client: i64,
    pub(crate) sum_transfer: i64,
    pub(crate) sum_stall: i64,
    pub(crate) sum_loss: i64,
    /// Round trips per exchange, each times the exchange's RTT, summed.
    pub(crate) sum_path: i64,
    pub(crate) rounds: u64,
    /// The exchanges' client ↔ server round trip (each connection's last
    /// estimate, once per exchange: recorded as the connection closes).
    pub(crate) rtt: Dist,
    pub(crate) path_examples: Vec<u64>,
    pub(crate) slow: u64,
    pub(crate) slow_think_ns: i64,
    pub(crate) slow_examples: Vec<u64>,
    pub(crate) software: Option<String>,
    /// Slow windows and exchange spans for the upstream test (this file only).
    pub(crate) windows: Windows,
    /// TLS server names (SNI) its clients asked for, the first few.
    pub(crate) names: Vec<Box<str>>,
    pub(crate) more_names: bool,
}

/// Server names kept per server.
const NAMES: usize = 4;

impl ServerAgg {
    /// Adds a server name (SNI) a client asked for.
    pub(crate) fn add_name(&mut self, name: Box<str>) {
        if self.names.len() < NAMES && !self.names.contains(&name) {
            self.names.push(name);
        } else if !self.names.contains(&name) {
            self.more_names = true;
        }
    }

    /// Its server names, for output: "a.test, b.test, …".
    pub(crate) fn name(&self) -> Option<String> {
        let more = if self.more_names { ", …" } else { "" };
        (!self.names.is_empty()).then(|| format!("{}{more}", self.names.join(", ")))
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
    pub(crate) examples: Vec<u64>,
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
    pub(crate) conns: Vec<record::Connection>,
    pub(crate) conns_omitted: u64,
    pub(crate) guessed_roles: u64,
    /// Connections whose roles were swapped by later evidence after something
    /// was observed, or contradicted by content; the first of each (connection id, frame).
    pub(crate) roles_corrected: (u64, Option<(String, u64)>),
    pub(crate) roles_contradicted: (u64, Option<(String, u64)>),
    /// Ladders of the worst stalled exchanges, at most [`STALLED_PER_CONN`] per connection.
    pub(crate) stalled: Kept<STALLED_LADDERS>,
    /// Ladders of the slowest exchange of connections without a stall.
    pub(crate) slowest: Kept<SLOWEST_LADDERS>,
    pub(crate) flow: Option<Ladder>,
    pub(crate) warnings: Vec<String>,
    /// Observations dropped because their endpoint's map was full ([`MAX_ENDPOINTS`]).
    pub(crate) dropped: u64,
}

pub(crate) fn push_example(v: &mut Vec<u64>, frames: &[u64], per: usize) {
    if v.len() < EXAMPLES * per {
        v.extend_from_slice(frames);
    }
}

impl NagleAgg {
    /// Adds a stall held by this endpoint; `peer` delayed its ACK.
    pub(crate) fn add(&mut self, peer: IpAddr, s: &Stall) {
        self.votes[s.nagle.idx()] += 1;
        self.side = Some(self.majority());
        self.peer = Some(peer);
        if s.timer {
            self.with_loss.record(s.stall_ns);
            self.with_loss_ns = self.with_loss_ns.saturating_add(s.stall_ns);
            push_example(&mut self.with_loss_examples, &[s.small_frame, s.held_frame], 2);
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
        push_example(&mut self.examples, &[s.small_frame, s.ack_frame, s.held_frame], 3);
    }

    fn majority(&self) -> Side {
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
    /// Adds one exchange and its split.
    pub(crate) fn add_exchange(&mut self, t: &Times, x: &Exchange) {
        self.exchanges += 1;
        self.total.record(t.total);
        self.think.record(t.think);
        self.sum_total = self.sum_total.saturating_add(t.total);
        self.sum_network = self.sum_network.saturating_add(t.network);
        self.sum_think = self.sum_think.saturating_add(t.think);
        self.sum_client = self.sum_client.saturating_add(t.client);
        self.sum_transfer = self.sum_transfer.saturating_add(t.transfer);
        self.sum_stall = self.sum_stall.saturating_add(t.stall);
        self.sum_loss = self.sum_loss.saturating_add(t.loss);
        // Round trips cannot take longer than the exchange did.
        let path = t.network.saturating_mul(i64::from(x.rounds.max(1))).min(t.total);
        self.sum_path = self.sum_path.saturating_add(path);
        self.rounds += u64::from(x.rounds.max(1));
        push_example(&mut self.path_examples, &[x.first_frame, x.last_frame], 2);
        if t.think >= SLOW_THINK_NS {
            self.slow += 1;
            self.slow_think_ns = self.slow_think_ns.saturating_add(t.think);
            if self.slow_examples.len() < EXAMPLES * 2 {
                // The last request frame is not tracked; the first is close enough to find it.
                self.slow_examples.extend_from_slice(&[x.first_frame, x.last_frame]);
            }
        }
    }
}

impl CountAgg {
    /// Adds a re-sent segment (`first`: the first on its connection).
    pub(crate) fn add_retrans(&mut self, spurious: bool, frame: u64, since_ns: i64, first: bool) {
        self.events += 1;
        self.spurious += u64::from(spurious);
        if !spurious {
            self.timeouts += u64::from(since_ns >= RTO_NS);
            self.dist.record(since_ns);
        }
        self.lost_ns = self.lost_ns.saturating_add(since_ns);
        self.connections += u64::from(first);
        push_example(&mut self.examples, &[frame], 1);
    }

    /// Adds a connection whose SYN (or SYN-ACK) was re-sent.
    pub(crate) fn add_syn(&mut self, retries: u32, delay_ns: i64, answered: bool, frames: [u64; 2]) {
        self.connections += 1;
        self.retries += u64::from(retries);
        self.unanswered += u64::from(!answered);
        self.dist.record(delay_ns);
        self.lost_ns = self.lost_ns.saturating_add(delay_ns);
        push_example(&mut self.examples, &frames, 2);
    }

    /// Adds a request body that waited `wait_ns` for `100 Continue` (`first`: the first on its connection).
    pub(crate) fn add_expect(&mut self, wait_ns: i64, frames: [u64; 2], first: bool, header_seen: bool) {
        self.events += 1;
        self.inferred += u64::from(!header_seen);
        self.connections += u64::from(first);
        self.dist.record(wait_ns);
        self.lost_ns = self.lost_ns.saturating_add(wait_ns);
        push_example(&mut self.examples, &frames, 2);
    }

    /// Adds a window closed for `duration_ns`.
    pub(crate) fn add_zero(&mut self, duration_ns: i64, frames: [u64; 2]) {
        self.events += 1;
        self.dist.record(duration_ns);
        self.lost_ns = self.lost_ns.saturating_add(duration_ns);
        push_example(&mut self.examples, &frames, 2);
    }
}

fn merge_map<K: std::hash::Hash + Eq, V: Default>(
    into: &mut FxHashMap<K, V>,
    from: FxHashMap<K, V>,
    f: impl Fn(&mut V, V),
) {
    for (k, v) in from {
        f(into.entry(k).or_default(), v);
    }
}

fn merge_examples(into: &mut Vec<u64>, from: &[u64], per: usize) {
    for chunk in from.chunks(per) {
        push_example(into, chunk, per);
    }
}

impl CountAgg {
    fn absorb(&mut self, o: CountAgg) {
        self.events += o.events;
        self.spurious += o.spurious;
        self.timeouts += o.timeouts;
        self.unanswered += o.unanswered;
        self.retries += o.retries;
        self.connections += o.connections;
        self.inferred += o.inferred;
        self.dist.merge(&o.dist);
        self.lost_ns = self.lost_ns.saturating_add(o.lost_ns);
    }
}

impl FileResult {
    /// Drops everything kept about one server endpoint (`watch` reuses its slot).
    pub(crate) fn forget_server(&mut self, server: Endpoint) {
        self.nagle.remove(&server);
        self.servers.remove(&server);
        for side in [Side::Client, Side::Server] {
            for m in [&mut self.retrans, &mut self.syn, &mut self.zero] {
                m.remove(&(server, side));
            }
        }
        self.expect.retain(|k, _| k.1 != server);
        self.upstream.remove(&server);
    }

    /// Adds another file's results (its input summary goes to `inputs`).
    pub(crate) fn merge(&mut self, f: FileResult, inputs: &mut Vec<record::Input>) {
        inputs.push(f.input);
        merge_map(&mut self.nagle, f.nagle, |a, b| {
            a.votes = [a.votes[0] + b.votes[0], a.votes[1] + b.votes[1]];
            if a.side.or(b.side).is_some() {
                a.side = Some(a.majority());
            }
            a.peer = a.peer.or(b.peer);
            a.stalls.merge(&b.stalls);
            a.acks.merge(&b.acks);
            a.seen.merge(&b.seen);
            for i in 0..2 {
                a.rtt_sum[i] = a.rtt_sum[i].saturating_add(b.rtt_sum[i]);
                a.rtt_n[i] += b.rtt_n[i];
            }
            a.lost_ns = a.lost_ns.saturating_add(b.lost_ns);
            a.exchanges += b.exchanges;
            a.connections += b.connections;
            merge_examples(&mut a.examples, &b.examples, 3);
            a.with_loss.merge(&b.with_loss);
            a.with_loss_ns = a.with_loss_ns.saturating_add(b.with_loss_ns);
            merge_examples(&mut a.with_loss_examples, &b.with_loss_examples, 2);
            a.tls_records += b.tls_records;
            a.tls_ticket += b.tls_ticket;
        });
        merge_map(&mut self.servers, f.servers, |a, b| {
            a.exchanges += b.exchanges;
            a.total.merge(&b.total);
            a.think.merge(&b.think);
            a.sum_total = a.sum_total.saturating_add(b.sum_total);
            a.sum_network = a.sum_network.saturating_add(b.sum_network);
            a.sum_think = a.sum_think.saturating_add(b.sum_think);
            a.sum_client = a.sum_client.saturating_add(b.sum_client);
            a.sum_transfer = a.sum_transfer.saturating_add(b.sum_transfer);
            a.sum_stall = a.sum_stall.saturating_add(b.sum_stall);
            a.sum_loss = a.sum_loss.saturating_add(b.sum_loss);
            a.sum_path = a.sum_path.saturating_add(b.sum_path);
            a.rounds += b.rounds;
            a.rtt.merge(&b.rtt);
            merge_examples(&mut a.path_examples, &b.path_examples, 2);
            a.slow += b.slow;
            a.slow_think_ns = a.slow_think_ns.saturating_add(b.slow_think_ns);
            merge_examples(&mut a.slow_examples, &b.slow_examples, 2);
            if a.software.is_none() {
                a.software = b.software;
            }
            a.more_names |= b.more_names;
            for n in b.names {
                a.add_name(n);
            }
        });
        for (into, from, per) in
            [(&mut self.retrans, f.retrans, 1), (&mut self.syn, f.syn, 2), (&mut self.zero, f.zero, 2)]
        {
            merge_map(into, from, |a, b| {
                merge_examples(&mut a.examples, &b.examples, per);
                a.absorb(b);
            });
        }
        merge_map(&mut self.upstream, f.upstream, |a, b| a.merge(&b));
        merge_map(&mut self.expect, f.expect, |a, b| {
            merge_examples(&mut a.examples, &b.examples, 2);
            a.absorb(b);
        });
        self.conns.extend(f.conns);
        self.conns_omitted += f.conns_omitted;
        for (r, l) in f.stalled.0 {
            self.stalled.keep(r, l);
        }
        for (r, l) in f.slowest.0 {
            self.slowest.keep(r, l);
        }
        self.flow = self.flow.take().or(f.flow);
        self.warnings.extend(f.warnings);
        self.dropped += f.dropped;
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
    fn every_connection_s_worst_comes_before_any_second_worst() {
        let mut k = Kept::<3>::default();
        k.keep((1, -90), ladder("a #2"));
        k.keep((0, -40), ladder("b #1"));
        k.keep((0, -50), ladder("a #1"));
        k.keep((0, -40), ladder("c #1, tied with b: after it"));
        assert!(!k.worth((1, -1000)) && !k.worth((0, -40)) && k.worth((0, -41)));
        k.keep((2, -500), ladder("not kept"));
        let titles: Vec<String> = k.into_ladders().into_iter().map(|l| l.title).collect();
        assert_eq!(titles, ["a #1", "b #1", "c #1, tied with b: after it"]);
    }
}
