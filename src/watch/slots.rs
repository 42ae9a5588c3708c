//! The watch sink's server endpoints: a bounded table of named slots and
//! one `other`. When the table is full a new endpoint takes the slot of the
//! one silent longest, if that one has been silent long enough and no
//! tracked connection points at it; otherwise it is folded into `other`.

use super::metrics::{Metrics, SlotMetrics};
use crate::dist::Dist;
use crate::wire::Endpoint;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Index of the `other` slot.
pub(super) const OTHER: u32 = 0;

/// Counts over one interval (or the whole run).
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Completed exchanges.
    pub exchanges: u64,
    /// Findings by [`crate::record::watch::Kind::idx`].
    pub found: [u64; 4],
    /// Time the findings cost, ns.
    pub lost_ns: i64,
    /// Finding lines not printed (over the rate limit).
    pub suppressed: u64,
    /// Exchange latency (request start → last response byte).
    pub latency: Dist,
}

impl Counts {
    pub(super) fn active(&self) -> bool {
        self.exchanges > 0 || self.found.iter().any(|&n| n > 0)
    }
}

/// One server endpoint (or `other`).
pub(super) struct Slot {
    pub(super) label: String,
    /// `None` for the `other` slot.
    pub(super) ep: Option<Endpoint>,
    pub(super) win: Counts,
    pub(super) all: Counts,
    /// Lines printed this interval, by kind and role.
    pub(super) printed: [[u32; 2]; 4],
    pub(super) m: Option<SlotMetrics>,
    /// Last packet of a connection to it, ns.
    pub(super) last_ns: i64,
    /// Tracked connections that point at this slot: it is not recycled under them.
    pub(super) live: u32,
}

/// The table.
pub(super) struct Slots {
    /// `other` first, then the named ones.
    pub(super) list: Vec<Slot>,
    by_ep: FxHashMap<Endpoint, u32>,
    max_named: usize,
    /// Connections whose server went to `other` because the table was full.
    pub(super) folded: u64,
    /// Slots given to a new endpoint after their endpoint fell silent.
    pub(super) recycled: u64,
    /// Packet time before which no slot can be recycled (saves a scan per folded connection).
    recycle_check_ns: i64,
    idle_ns: i64,
    metrics: Option<Arc<Metrics>>,
}

impl Slots {
    /// At most `max_named` named slots (at least 1); a slot silent `idle_ns` may be recycled.
    pub(super) fn new(max_named: usize, idle_ns: i64, metrics: Option<Arc<Metrics>>) -> Slots {
        let mut s = Slots {
            list: Vec::new(),
            by_ep: FxHashMap::default(),
            max_named: max_named.max(1),
            folded: 0,
            recycled: 0,
            recycle_check_ns: i64::MIN,
            idle_ns,
            metrics,
        };
        let other = s.fresh(None, 0);
        s.list.push(other);
        s
    }

    /// Server endpoints held by name.
    pub(super) fn named(&self) -> usize {
        self.by_ep.len()
    }

    /// A slot whose metric series start at 0, so the first stalls are a visible step.
    fn fresh(&self, ep: Option<Endpoint>, now_ns: i64) -> Slot {
        let label = ep.map_or_else(|| "other".to_string(), |e| e.to_string());
        let m = self.metrics.as_ref().map(|m| m.slot(&label));
        let (win, all) = (Counts::default(), Counts::default());
        Slot { label, ep, win, all, printed: [[0; 2]; 4], m, last_ns: now_ns, live: 0 }
    }

    /// The slot of `server`, made or recycled if need be; and the endpoint
    /// whose slot was recycled for it, if one was (its aggregates must go).
    pub(super) fn slot_for(&mut self, server: Endpoint, now_ns: i64) -> (u32, Option<Endpoint>) {
        if let Some(&i) = self.by_ep.get(&server) {
            return (i, None);
        }
        let mut gone = None;
        let i = if self.by_ep.len() < self.max_named {
            self.list.push(self.fresh(Some(server), now_ns));
            self.list.len() - 1
        } else if let Some(i) = self.silent(now_ns) {
            gone = self.recycle(i, server, now_ns);
            i
        } else {
            self.folded += 1;
            if let Some(m) = &self.metrics {
                m.folded.inc();
            }
            return (OTHER, None);
        };
        self.by_ep.insert(server, i as u32);
        (i as u32, gone)
    }

    /// The named slot silent longest, if silent for `idle_ns` with no tracked connection.
    fn silent(&mut self, now_ns: i64) -> Option<usize> {
        if now_ns < self.recycle_check_ns {
            return None;
        }
        let oldest = self.list.iter().enumerate().skip(1).filter(|(_, s)| s.live == 0).min_by_key(|(_, s)| s.last_ns);
        let free_at = oldest.map_or(i64::MAX, |(_, s)| s.last_ns.saturating_add(self.idle_ns));
        if free_at <= now_ns {
            return oldest.map(|(i, _)| i);
        }
        // A slot whose last connection ends later can qualify sooner: look again within a second.
        self.recycle_check_ns = free_at.min(now_ns.saturating_add(1_000_000_000));
        None
    }

    /// Gives slot `i` to `server`: the old endpoint's counts and metric
    /// series go (Prometheus has kept its history). Returns the old endpoint.
    fn recycle(&mut self, i: usize, server: Endpoint, now_ns: i64) -> Option<Endpoint> {
        let fresh = self.fresh(Some(server), now_ns);
        let slot = std::mem::replace(&mut self.list[i], fresh);
        if let Some(old) = slot.ep {
            self.by_ep.remove(&old);
        }
        self.recycled += 1;
        if let Some(m) = &self.metrics {
            m.remove_endpoint(&slot.label);
            m.recycled.inc();
        }
        slot.ep
    }
}
