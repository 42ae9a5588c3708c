//! How results merge: several files' into one report, and the shards of one
//! file (each held some of its connections) into exactly what one thread finds.

use super::agg::{CountAgg, FileResult};
use crate::record;
use crate::tcp::Side;
use crate::wire::Endpoint;
use rustc_hash::FxHashMap;

fn merge_map<K: std::hash::Hash + Eq, V: Default>(
    into: &mut FxHashMap<K, V>,
    from: FxHashMap<K, V>,
    mut f: impl FnMut(&mut V, V),
) {
    for (k, v) in from {
        f(into.entry(k).or_default(), v);
    }
}

impl CountAgg {
    fn absorb(&mut self, o: CountAgg, per: usize, shard: bool) {
        self.events += o.events;
        self.spurious += o.spurious;
        self.timeouts += o.timeouts;
        self.unanswered += o.unanswered;
        self.retries += o.retries;
        self.connections += o.connections;
        self.inferred += o.inferred;
        self.dist.merge(&o.dist);
        self.lost_ns = self.lost_ns.saturating_add(o.lost_ns);
        self.examples.merge(o.examples, per, shard);
    }
}

/// The earlier (by `At`) of two "first" records, or the first file's.
fn first<T: Ord>(a: &mut Option<T>, b: Option<T>, shard: bool) {
    *a = match (a.take(), b) {
        (Some(x), Some(y)) if shard => Some(x.min(y)),
        (x, y) => x.or(y),
    };
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
    pub(crate) fn merge(&mut self, mut f: FileResult, inputs: &mut Vec<record::Input>) {
        inputs.push(std::mem::take(&mut f.input));
        self.merge_with(f, false);
    }

    /// Adds another shard's results of the same file: what each kept "first"
    /// is compared by when it was observed, so the merge is what one thread
    /// keeps. Input summaries, warnings and upstream links are made after.
    pub(crate) fn merge_shard(&mut self, f: FileResult) {
        self.merge_with(f, true);
    }

    fn merge_with(&mut self, f: FileResult, shard: bool) {
        merge_map(&mut self.nagle, f.nagle, |a, b| {
            a.votes = [a.votes[0] + b.votes[0], a.votes[1] + b.votes[1]];
            if a.side.or(b.side).is_some() {
                a.side = Some(a.majority());
            }
            if a.peer.is_none() || (shard && b.peer.is_some() && b.peer_at > a.peer_at) {
                (a.peer, a.peer_at) = (b.peer, b.peer_at);
            }
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
            a.examples.merge(b.examples, 3, shard);
            a.with_loss.merge(&b.with_loss);
            a.with_loss_ns = a.with_loss_ns.saturating_add(b.with_loss_ns);
            a.with_loss_examples.merge(b.with_loss_examples, 2, shard);
            a.tls_records += b.tls_records;
            a.tls_ticket += b.tls_ticket;
        });
        merge_map(&mut self.servers, f.servers, |a, b| {
            a.exchanges += b.exchanges;
            a.total.merge(&b.total);
            a.think.merge(&b.think);
            a.sums.merge(&b.sums);
            a.rounds += b.rounds;
            a.rtt.merge(&b.rtt);
            a.path_examples.merge(b.path_examples, 2, shard);
            a.slow += b.slow;
            a.slow_think_ns = a.slow_think_ns.saturating_add(b.slow_think_ns);
            a.slow_examples.merge(b.slow_examples, 2, shard);
            if let Some(s) = b.software
                && (a.software.is_none() || shard)
            {
                a.add_software(if shard { b.software_at } else { a.software_at }, s);
            }
            a.more_names |= b.more_names;
            for (at, n) in b.names {
                // Another file's names come after this one's.
                let at = if shard { at } else { (u64::MAX, u64::MAX) };
                a.add_name(at, n);
            }
            a.windows.merge(b.windows);
        });
        for (into, from, per) in
            [(&mut self.retrans, f.retrans, 1), (&mut self.syn, f.syn, 2), (&mut self.zero, f.zero, 2)]
        {
            merge_map(into, from, |a, b| a.absorb(b, per, shard));
        }
        merge_map(&mut self.upstream, f.upstream, |a, b| a.merge(&b));
        merge_map(&mut self.expect, f.expect, |a, b| a.absorb(b, 2, shard));
        self.conns.extend(f.conns);
        for (r, l) in f.stalled.0 {
            self.stalled.keep(r, l);
        }
        for (r, l) in f.slowest.0 {
            self.slowest.keep(r, l);
        }
        self.flow = self.flow.take().or(f.flow);
        self.guessed_roles += f.guessed_roles;
        self.heads_unread.add(f.heads_unread);
        for (a, b) in
            [(&mut self.roles_corrected, f.roles_corrected), (&mut self.roles_contradicted, f.roles_contradicted)]
        {
            a.0 += b.0;
            first(&mut a.1, b.1, shard);
        }
        self.warnings.extend(f.warnings);
        self.dropped += f.dropped;
        self.created.extend(f.created);
    }
}
