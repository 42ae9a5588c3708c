//! The watch [`Sink`]: runs the same detectors as `analyze` on each
//! connection and turns what they observe into live [`Finding`]s, per
//! server-endpoint counts for the periodic summary, Prometheus metrics and the
//! aggregates `analyze`'s verdict sentences are built from.
//!
//! Memory is bounded whatever passes: server endpoints beyond
//! [`Limits::max_endpoints`] share one `other` slot; finding lines are
//! rate-limited per endpoint, kind and role (the rest are counted); the
//! verdict aggregates are kept for named endpoints only.

use super::metrics::{Metrics, SlotMetrics};
use crate::analyze::{FileResult, RTO_NS};
use crate::detect::{Detectors, Observation};
use crate::dist::Dist;
use crate::report::text::dur;
use crate::tcp::table::Totals;
use crate::tcp::{ConnInfo, Event, Side, Sink};
use crate::wire::{Endpoint, Segment};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::Arc;

/// What kind of trouble a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A segment held by Nagle until the peer's delayed ACK.
    NagleDelayedAck,
    /// Bytes re-sent after a retransmission timeout (≥ 180 ms after the first copy).
    RetransmissionTimeout,
    /// A SYN or SYN-ACK sent more than once (a 1 s / 3 s connect).
    SynRetransmission,
    /// A receiver closed its window; its peer had to wait.
    ZeroWindow,
}

impl Kind {
    /// Every kind, in the order of [`Kind::idx`].
    pub const ALL: [Kind; 4] =
        [Kind::NagleDelayedAck, Kind::RetransmissionTimeout, Kind::SynRetransmission, Kind::ZeroWindow];

    /// The name used in JSON and in metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Kind::NagleDelayedAck => "nagle_delayed_ack",
            Kind::RetransmissionTimeout => "retransmission_timeout",
            Kind::SynRetransmission => "syn_retransmission",
            Kind::ZeroWindow => "zero_window",
        }
    }

    /// Index for per-kind arrays.
    pub fn idx(self) -> usize {
        self as usize
    }
}

/// One finding, as it happens.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Finding {
    /// When the finding became certain (the held segment, the re-send, the answer…), ns since the epoch.
    pub ts_ns: i64,
    /// What it is.
    pub kind: Kind,
    /// The connection's server endpoint.
    pub server: String,
    /// The connection's client endpoint.
    pub client: String,
    /// The side at fault: Nagle's, the re-sender's, the SYN's sender's, the one that closed its window.
    pub role: &'static str,
    /// Time it cost, ms: the stall, the wait for the re-send, the connect, the closed window.
    pub ms: f64,
    /// Nagle only: the late ACK came this long after the small segment, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_delay_ms: Option<f64>,
    /// Nagle only: which ACK timer that delay looks like.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_timer: Option<String>,
    /// The finding in words.
    pub summary: String,
}

/// Bounds on what the sink keeps.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Server endpoints counted by name; connections to more share the `other` slot.
    pub max_endpoints: usize,
    /// Finding lines per endpoint, kind and role in one summary interval; more are counted, not printed.
    pub lines_per_interval: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_endpoints: 256, lines_per_interval: 5 }
    }
}

/// Per-connection state: the detectors and the connection's server slot.
#[derive(Debug, Default)]
pub struct ConnState {
    det: Detectors,
    slot: Option<u32>,
    /// Re-sends seen on this connection.
    retrans: u32,
    /// Server-held Nagle stalls on this connection.
    server_stalls: u32,
}

/// Counts over one interval (or the whole run).
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Completed exchanges.
    pub exchanges: u64,
    /// Findings by [`Kind::idx`].
    pub found: [u64; 4],
    /// Time the findings cost, ns.
    pub lost_ns: i64,
    /// Finding lines not printed (over the rate limit).
    pub suppressed: u64,
    /// Exchange latency (request start → last response byte).
    pub latency: Dist,
}

impl Counts {
    fn active(&self) -> bool {
        self.exchanges > 0 || self.found.iter().any(|&n| n > 0)
    }
}

/// One server endpoint (or `other`).
struct Slot {
    label: String,
    /// `None` for the `other` slot.
    ep: Option<Endpoint>,
    win: Counts,
    all: Counts,
    /// Lines printed this interval, by kind and role.
    printed: [[u32; 2]; 4],
    m: Option<SlotMetrics>,
}

/// One row of a summary.
#[derive(Clone, Debug)]
pub struct Row {
    /// Server endpoint, or `other`.
    pub server: String,
    /// HTTP `Server:` header, if one was seen.
    pub software: Option<String>,
    /// The counts.
    pub counts: Counts,
}

/// The watch sink. Feed it through a [`crate::tcp::Tracker`].
pub struct WatchSink {
    limits: Limits,
    slots: Vec<Slot>,
    slot_of: FxHashMap<Endpoint, u32>,
    /// Connections whose server went to the `other` slot because the table was full.
    pub folded: u64,
    pending: VecDeque<Finding>,
    /// What `analyze`'s verdict is built from, for named endpoints.
    agg: FileResult,
    metrics: Option<Arc<Metrics>>,
}

/// Index of the `other` slot.
const OTHER: u32 = 0;

impl WatchSink {
    /// A sink with these bounds, updating `metrics` if given.
    pub fn new(limits: Limits, metrics: Option<Arc<Metrics>>) -> WatchSink {
        let mut s = WatchSink {
            limits: Limits { max_endpoints: limits.max_endpoints.max(1), ..limits },
            slots: Vec::new(),
            slot_of: FxHashMap::default(),
            folded: 0,
            pending: VecDeque::new(),
            agg: FileResult::default(),
            metrics,
        };
        s.push_slot("other".into(), None);
        s
    }

    fn push_slot(&mut self, label: String, ep: Option<Endpoint>) -> u32 {
        let m = self.metrics.as_ref().map(|m| m.slot(&label));
        self.slots.push(Slot { label, ep, win: Counts::default(), all: Counts::default(), printed: [[0; 2]; 4], m });
        (self.slots.len() - 1) as u32
    }

    fn slot_for(&mut self, server: Endpoint) -> u32 {
        if let Some(&i) = self.slot_of.get(&server) {
            return i;
        }
        if self.slot_of.len() >= self.limits.max_endpoints {
            self.folded += 1;
            if let Some(m) = &self.metrics {
                m.folded.inc();
            }
            return OTHER;
        }
        let i = self.push_slot(server.to_string(), Some(server));
        self.slot_of.insert(server, i);
        i
    }

    /// Findings printed since the last call, oldest first.
    pub fn take_findings(&mut self) -> impl Iterator<Item = Finding> + '_ {
        self.pending.drain(..)
    }

    /// Server endpoints tracked by name (not counting `other`).
    pub fn endpoints(&self) -> usize {
        self.slot_of.len()
    }

    /// The interval's rows (active endpoints only, `other` last), and starts a new interval.
    pub fn interval(&mut self) -> Vec<Row> {
        let mut rows = Vec::new();
        for s in &mut self.slots {
            let c = std::mem::take(&mut s.win);
            s.printed = [[0; 2]; 4];
            if c.active() || c.suppressed > 0 {
                rows.push(Row { server: s.label.clone(), software: None, counts: c });
            }
        }
        self.name_software(&mut rows);
        order(&mut rows);
        rows
    }

    /// The whole run's rows (active endpoints only, `other` last).
    pub fn totals(&self) -> Vec<Row> {
        let mut rows: Vec<Row> = self
            .slots
            .iter()
            .filter(|s| s.all.active())
            .map(|s| Row { server: s.label.clone(), software: None, counts: s.all.clone() })
            .collect();
        self.name_software(&mut rows);
        order(&mut rows);
        rows
    }

    fn name_software(&self, rows: &mut [Row]) {
        for r in rows {
            let ep = self.slots.iter().find(|s| s.label == r.server).and_then(|s| s.ep);
            r.software = ep.and_then(|e| self.agg.servers.get(&e)).and_then(|a| a.software.clone());
        }
    }

    /// `analyze`'s verdict sentences over the whole run (named endpoints).
    pub fn verdict(self) -> Vec<String> {
        let r = crate::verdict::build(self.agg, Vec::new());
        r.findings.iter().map(|f| f.summary().to_string()).collect()
    }

    fn observe(&mut self, info: &ConnInfo, c: &mut (u32, u32), slot: u32, o: Observation) {
        let named = self.slots[slot as usize].ep.is_some();
        let (kind, from, ns) = match o {
            Observation::Exchange(x) => {
                let t = x.times(info.rtt_to(Side::Client), info.rtt_to(Side::Server));
                let s = &mut self.slots[slot as usize];
                for c in [&mut s.win, &mut s.all] {
                    c.exchanges += 1;
                    c.latency.record(t.total);
                }
                if let Some(m) = &s.m {
                    m.latency.observe(t.total.max(0) as f64 / 1e9);
                }
                if named {
                    self.agg.servers.entry(info.server).or_default().add_exchange(&t, &x);
                }
                return;
            }
            Observation::Stall(s) => {
                // Client endpoints come and go with their ports: only servers are kept by name.
                if named && s.nagle == Side::Server {
                    c.1 += 1;
                    self.agg.nagle.entry(info.server).or_default().add(info.client.ip, &s);
                }
                (Kind::NagleDelayedAck, s.nagle, s.stall_ns)
            }
            Observation::Retransmission { from, spurious, frame, since_ns } => {
                c.0 += 1;
                if named {
                    let a = self.agg.retrans.entry((info.server, from)).or_default();
                    a.add_retrans(spurious, frame, since_ns, c.0 == 1);
                }
                if spurious || since_ns < RTO_NS {
                    return; // fast retransmits and lost ACKs are not timeouts
                }
                (Kind::RetransmissionTimeout, from, since_ns)
            }
            Observation::SynRetry { from, retries, delay_ns, answered, frames } => {
                if named {
                    self.agg.syn.entry((info.server, from)).or_default().add_syn(retries, delay_ns, answered, frames);
                }
                (Kind::SynRetransmission, from, delay_ns)
            }
            Observation::ZeroWindow { from, duration_ns, frames } => {
                if named {
                    self.agg.zero.entry((info.server, from)).or_default().add_zero(duration_ns, frames);
                }
                (Kind::ZeroWindow, from, duration_ns)
            }
        };
        let ns = ns.max(0);
        let s = &mut self.slots[slot as usize];
        for c in [&mut s.win, &mut s.all] {
            c.found[kind.idx()] += 1;
            c.lost_ns = c.lost_ns.saturating_add(ns);
        }
        if let Some(m) = &s.m {
            m.found(kind, from, ns);
        }
        let printed = &mut s.printed[kind.idx()][from.idx()];
        if *printed >= self.limits.lines_per_interval {
            s.win.suppressed += 1;
            s.all.suppressed += 1;
            return;
        }
        *printed += 1;
        let f = finding(info, kind, from, ns, o);
        self.pending.push_back(f);
    }
}

/// Busiest first, `other` last.
fn order(rows: &mut [Row]) {
    rows.sort_by(|a, b| {
        (a.server == "other")
            .cmp(&(b.server == "other"))
            .then(b.counts.lost_ns.cmp(&a.counts.lost_ns))
            .then(b.counts.exchanges.cmp(&a.counts.exchanges))
            .then(a.server.cmp(&b.server))
    });
}

/// The finding's sentence: who did what, for how long.
fn finding(info: &ConnInfo, kind: Kind, from: Side, ns: i64, o: Observation) -> Finding {
    let (client, server) = (info.client.to_string(), info.server.to_string());
    let who = |side: Side| match side {
        Side::Server => format!("the server {server}"),
        Side::Client => format!("the client {client}"),
    };
    let mut ack_delay_ms = None;
    let mut ack_timer = None;
    let summary = match o {
        Observation::Stall(s) => {
            let what = if s.nagle == Side::Server { "a response" } else { "a request" };
            let timer = crate::verdict::ack_timer(crate::report::ms(s.ack_delay_ns));
            let peer = info.endpoint(s.nagle.other()).ip;
            let text = format!(
                "Nagle + delayed ACK: {} held part of {what} {} until the {} {peer} sent a delayed ACK ({timer}); fix: TCP_NODELAY on {}",
                who(s.nagle),
                dur(ns),
                s.nagle.other().name(),
                info.endpoint(s.nagle),
            );
            ack_delay_ms = Some(crate::report::ms(s.ack_delay_ns));
            ack_timer = Some(timer);
            text
        }
        Observation::Retransmission { .. } => format!(
            "Retransmission timeout: {} re-sent bytes {} after the first copy (to the {} {}); loss, not Nagle",
            who(from),
            dur(ns),
            from.other().name(),
            info.endpoint(from.other()),
        ),
        Observation::SynRetry { retries, answered, .. } => {
            let what = if from == Side::Client { "SYN" } else { "SYN-ACK" };
            let end = if answered { "connecting took" } else { "never answered, given up after" };
            format!(
                "Slow connect: {} sent its {what} {} times ({client} → {server}); {end} {} (the 1 s SYN timer: a dropped SYN, full accept queue or firewall)",
                who(from),
                retries + 1,
                dur(ns)
            )
        }
        Observation::ZeroWindow { .. } => format!(
            "Zero window: {} closed its receive window for {}; the {} had to wait (the {} application is not reading fast enough)",
            who(from),
            dur(ns),
            from.other().name(),
            from.name(),
        ),
        Observation::Exchange(_) => String::new(),
    };
    Finding {
        ts_ns: 0,
        kind,
        server,
        client,
        role: from.name(),
        ms: crate::report::ms(ns),
        ack_delay_ms,
        ack_timer,
        summary,
    }
}

impl Sink<ConnState> for WatchSink {
    fn event(&mut self, info: &ConnInfo, st: &mut ConnState, ev: &Event, seg: &Segment<'_>) {
        let slot = match st.slot {
            Some(s) => s,
            None => *st.slot.insert(self.slot_for(info.server)),
        };
        let ConnState { det, retrans, server_stalls, .. } = st;
        let mut c = (*retrans, *server_stalls);
        let start = self.pending.len();
        det.step(info, ev, seg.payload, &mut |o| self.observe(info, &mut c, slot, o));
        (*retrans, *server_stalls) = c;
        for f in self.pending.range_mut(start..) {
            f.ts_ns = ev.ts_ns;
        }
        if let Some(sw) = det.server_software.take()
            && let Some(ep) = self.slots[slot as usize].ep
        {
            let a = self.agg.servers.entry(ep).or_default();
            if a.software.is_none() {
                a.software = Some(sw);
            }
        }
    }

    fn close(&mut self, info: &ConnInfo, mut st: ConnState, totals: &Totals) {
        let slot = match st.slot {
            Some(s) => s,
            None => self.slot_for(info.server),
        };
        let mut c = (st.retrans, st.server_stalls);
        let start = self.pending.len();
        st.det.finish(totals.last_ts, &mut |o| self.observe(info, &mut c, slot, o));
        for f in self.pending.range_mut(start..) {
            f.ts_ns = totals.last_ts;
        }
        if c.1 > 0
            && let Some(a) = self.agg.nagle.get_mut(&info.server)
        {
            a.connections += 1;
        }
    }
}
