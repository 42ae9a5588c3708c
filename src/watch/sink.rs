//! The watch [`Sink`]: runs the same detectors as `analyze` on each
//! connection and turns what they observe into live [`Finding`]s, per
//! server-endpoint counts for the periodic summary, Prometheus metrics and the
//! aggregates `analyze`'s verdict sentences are built from.
//!
//! Memory is bounded whatever passes: at most [`Limits::max_endpoints`]
//! server endpoints are named; when the table is full a new endpoint takes
//! the slot of the one silent longest if that one has been silent for
//! [`Limits::endpoint_idle`] (and has no tracked connection), else it is
//! counted in the `other` slot; finding lines are rate-limited per endpoint,
//! kind and role (the rest are counted); the verdict aggregates are kept for
//! named endpoints only.

use super::finding::finding;
use super::metrics::Metrics;
use super::slots::{Counts, Slots};
use crate::analyze::{ARRIVAL, FileResult, RTO_NS};
use crate::detect::{Detectors, Exchange, Observation, Observer};
use crate::record::watch::{Finding, Kind};
use crate::tcp::table::Totals;
use crate::tcp::{ConnInfo, Event, Side, Sink};
use crate::wire::{Endpoint, Segment};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// Bounds on what the sink keeps.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Server endpoints counted by name; connections to more share the `other` slot.
    pub max_endpoints: usize,
    /// Finding lines per endpoint, kind and role in one summary interval; more are counted, not printed.
    pub lines_per_interval: u32,
    /// A named endpoint silent this long (by packet time), with no tracked
    /// connection, gives its slot to a new endpoint when the table is full.
    pub endpoint_idle: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_endpoints: 256, lines_per_interval: 5, endpoint_idle: Duration::from_secs(600) }
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
    slots: Slots,
    pending: VecDeque<Finding>,
    /// What `analyze`'s verdict is built from, for named endpoints.
    agg: FileResult,
}

impl WatchSink {
    /// A sink with these bounds, updating `metrics` if given.
    pub fn new(limits: Limits, metrics: Option<Arc<Metrics>>) -> WatchSink {
        let idle_ns = i64::try_from(limits.endpoint_idle.as_nanos()).unwrap_or(i64::MAX);
        WatchSink {
            limits,
            slots: Slots::new(limits.max_endpoints, idle_ns, metrics),
            pending: VecDeque::new(),
            agg: FileResult::default(),
        }
    }

    /// Connections whose server went to the `other` slot because the table was full.
    pub fn folded(&self) -> u64 {
        self.slots.folded
    }

    /// Slots given to a new endpoint after their endpoint fell silent.
    pub fn recycled(&self) -> u64 {
        self.slots.recycled
    }

    /// The slot of `server`; a recycled slot's old endpoint leaves the verdict's aggregates.
    fn slot_for(&mut self, server: Endpoint, now_ns: i64) -> u32 {
        let (i, gone) = self.slots.slot_for(server, now_ns);
        if let Some(old) = gone {
            self.agg.forget_server(old);
        }
        i
    }

    /// Findings printed since the last call, oldest first.
    pub fn take_findings(&mut self) -> impl Iterator<Item = Finding> + '_ {
        self.pending.drain(..)
    }

    /// Server endpoints tracked by name (not counting `other`).
    pub fn endpoints(&self) -> usize {
        self.slots.named()
    }

    /// The interval's rows (active endpoints only, `other` last), and starts a new interval.
    pub fn interval(&mut self) -> Vec<Row> {
        let mut rows = Vec::new();
        for s in &mut self.slots.list {
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
            .list
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
            let ep = self.slots.list.iter().find(|s| s.label == r.server).and_then(|s| s.ep);
            r.software = ep.and_then(|e| self.agg.servers.get(&e)).and_then(|a| a.software.clone());
        }
    }

    /// `analyze`'s verdict sentences over the whole run (named endpoints).
    pub fn verdict(self) -> Vec<String> {
        let r = crate::analyze::verdict::build(self.agg, Vec::new());
        r.findings.iter().map(|f| f.summary().to_string()).collect()
    }

    /// A completed exchange: counted, timed, and added to the verdict's aggregates.
    fn exchange(&mut self, info: &ConnInfo, slot: u32, x: &Exchange) {
        let t = x.times(info.rtt_to(Side::Client), info.rtt_to(Side::Server));
        let s = &mut self.slots.list[slot as usize];
        for c in [&mut s.win, &mut s.all] {
            c.exchanges += 1;
            c.latency.record(t.total);
        }
        if let Some(m) = &s.m {
            m.latency.observe(t.total.max(0) as f64 / 1e9);
        }
        if s.ep.is_some() {
            let s = self.agg.servers.entry(info.server).or_default();
            s.add_exchange(ARRIVAL, &t, x);
            s.rtt.record(t.network);
        }
    }

    /// Anything else the detectors observed: counted, and a line unless over the rate limit.
    fn observe(&mut self, info: &ConnInfo, c: &mut (u32, u32), slot: u32, o: Observation) {
        let named = self.slots.list[slot as usize].ep.is_some();
        let (kind, from, ns) = match o {
            Observation::Exchange(x) => return self.exchange(info, slot, &x),
            // analyze only: a request's head and body are not live lines yet;
            // a live capture keeps whole frames.
            Observation::ExpectWait { .. } | Observation::HeadUnread { .. } => return,
            Observation::Stall(s) => {
                // Client endpoints come and go with their ports: only servers are kept by name.
                if named && s.nagle == Side::Server {
                    c.1 += 1;
                    self.agg.nagle.entry(info.server).or_default().add(ARRIVAL, info.client.ip, &s);
                }
                (Kind::NagleDelayedAck, s.nagle, s.stall_ns)
            }
            Observation::Retransmission { from, spurious, frame, since_ns } => {
                c.0 += 1;
                if named {
                    let a = self.agg.retrans.entry((info.server, from)).or_default();
                    a.add_retrans(ARRIVAL, spurious, frame, since_ns, c.0 == 1);
                }
                if spurious || since_ns < RTO_NS {
                    return; // fast retransmits and lost ACKs are not timeouts
                }
                (Kind::RetransmissionTimeout, from, since_ns)
            }
            Observation::SynRetry { from, retries, delay_ns, answered, frames } => {
                if named {
                    self.agg
                        .syn
                        .entry((info.server, from))
                        .or_default()
                        .add_syn(ARRIVAL, retries, delay_ns, answered, frames);
                }
                (Kind::SynRetransmission, from, delay_ns)
            }
            Observation::ZeroWindow { from, duration_ns, frames } => {
                if named {
                    self.agg.zero.entry((info.server, from)).or_default().add_zero(ARRIVAL, duration_ns, frames);
                }
                (Kind::ZeroWindow, from, duration_ns)
            }
        };
        let ns = ns.max(0);
        let s = &mut self.slots.list[slot as usize];
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

/// Where the detectors' observations on one connection go: exchanges by
/// reference (see [`Observer`]), with the connection's counts of re-sends
/// and server stalls.
struct To<'a> {
    sink: &'a mut WatchSink,
    info: &'a ConnInfo,
    counts: (u32, u32),
    slot: u32,
}

impl Observer for To<'_> {
    fn observe(&mut self, o: Observation) {
        self.sink.observe(self.info, &mut self.counts, self.slot, o);
    }

    fn exchange(&mut self, x: &Exchange) {
        self.sink.exchange(self.info, self.slot, x);
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

/// Boxed, so the tracker's table holds a pointer per connection, not the
/// detectors' ~500 bytes: a table sized for the connection cap stays small
/// while few connections are open.
impl Sink<Box<ConnState>> for WatchSink {
    fn event(&mut self, info: &ConnInfo, st: &mut Box<ConnState>, ev: &Event, seg: &Segment<'_>) {
        if info.roles_open {
            // A connection from before the start whose roles may still swap:
            // a slot named after its client would stay. Soon settled (its
            // first data each way), or a guess looked at for a few segments.
            return;
        }
        let slot = match st.slot {
            Some(s) => s,
            None => {
                let s = self.slot_for(info.server, ev.ts_ns);
                self.slots.list[s as usize].live += 1;
                *st.slot.insert(s)
            }
        };
        let last = &mut self.slots.list[slot as usize].last_ns;
        *last = (*last).max(ev.ts_ns);
        let ConnState { det, retrans, server_stalls, .. } = &mut **st;
        let start = self.pending.len();
        let mut to = To { sink: self, info, counts: (*retrans, *server_stalls), slot };
        det.step(info, ev, seg, &mut to);
        (*retrans, *server_stalls) = to.counts;
        for f in self.pending.range_mut(start..) {
            f.ts_ns = ev.ts_ns;
        }
        if let Some(sw) = det.server_software.take()
            && let Some(ep) = self.slots.list[slot as usize].ep
        {
            let a = self.agg.servers.entry(ep).or_default();
            if a.software.is_none() {
                a.software = Some(sw);
            }
        }
    }

    /// The connection's first data swapped its roles: its slot was its client's.
    fn swapped(&mut self, _info: &ConnInfo, st: &mut Box<ConnState>) {
        if let Some(s) = st.slot {
            let live = &mut self.slots.list[s as usize].live;
            *live = live.saturating_sub(1);
        }
        **st = ConnState::default();
    }

    fn close(&mut self, info: &ConnInfo, mut st: Box<ConnState>, totals: &Totals) {
        let slot = match st.slot {
            Some(s) => {
                let live = &mut self.slots.list[s as usize].live;
                *live = live.saturating_sub(1);
                s
            }
            None if info.roles_open => return, // saw nothing (see `event`)
            None => self.slot_for(info.server, totals.last_ts),
        };
        let start = self.pending.len();
        let mut to = To { sink: self, info, counts: (st.retrans, st.server_stalls), slot };
        st.det.finish(totals.last_ts, &mut to);
        let c = to.counts;
        for f in self.pending.range_mut(start..) {
            f.ts_ns = totals.last_ts;
        }
        if c.1 > 0
            && let Some(a) = self.agg.nagle.get_mut(&info.server)
        {
            a.connections += 1;
            a.add_rtt(info.rtt_to, u64::from(c.1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::build::{MS, Seq, US, info};
    use crate::tcp::Side::{Client, Server};
    use crate::wire::{Flags, TcpOptions};

    fn seg() -> Segment<'static> {
        let e = Endpoint { ip: [127, 0, 0, 1].into(), port: 1 };
        Segment {
            frame: 0,
            ts_ns: 0,
            src: e,
            dst: e,
            seq: 0,
            ack: 0,
            flags: Flags(0),
            window: 0,
            len: 0,
            options: TcpOptions::default(),
            payload: &[],
            ip_id: None,
            tcp_options: &[],
        }
    }

    /// Feeds a connection's events; it stays tracked until [`end`].
    fn start(sink: &mut WatchSink, info: &ConnInfo, s: &Seq) -> Box<ConnState> {
        let mut st = Box::<ConnState>::default();
        for e in &s.events {
            sink.event(info, &mut st, e, &seg());
        }
        st
    }

    fn end(sink: &mut WatchSink, info: &ConnInfo, st: Box<ConnState>, s: &Seq) {
        let last_ts = s.events.last().map_or(0, |e| e.ts_ns);
        sink.close(info, st, &Totals { last_ts, ..Totals::default() });
    }

    /// Feeds a whole connection (events, then its end) to the sink.
    fn feed(sink: &mut WatchSink, info: &ConnInfo, s: &Seq) {
        let st = start(sink, info, s);
        end(sink, info, st, s);
    }

    fn names(rows: &[Row]) -> Vec<&str> {
        let mut n: Vec<&str> = rows.iter().map(|r| r.server.as_str()).collect();
        n.sort();
        n
    }

    /// `n` keep-alive exchanges whose responses are held ~44 ms by the server's Nagle, starting at `t0`.
    fn stalling(n: i64, t0: i64) -> Seq {
        let mut s = Seq::new();
        for i in 0..n {
            let t = t0 + i * 50 * MS;
            s.data(t, Client, 80);
            s.data(t + 30 * US, Server, 120);
            s.ack(t + 44 * MS, Client);
            s.data(t + 44 * MS + 15 * US, Server, 600);
        }
        s
    }

    fn server(port: u16) -> ConnInfo {
        let mut i = info(20 * US, 0);
        i.server.port = port;
        i
    }

    #[test]
    fn a_nagle_stall_is_a_finding_with_both_sides_named() {
        let mut sink = WatchSink::new(Limits::default(), None);
        feed(&mut sink, &server(8080), &stalling(1, 0));
        let f: Vec<Finding> = sink.take_findings().collect();
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].kind, f[0].role, f[0].server.as_str()), (Kind::NagleDelayedAck, "server", "127.0.0.1:8080"));
        assert!((f[0].ms - 43.985).abs() < 0.01, "{}", f[0].ms);
        assert_eq!(f[0].ts_ns, 44 * MS + 15 * US, "stamped with the held segment");
        assert!(f[0].summary.contains("the server 127.0.0.1:8080 held part of a response 44.0 ms"), "{}", f[0].summary);
        assert!(f[0].summary.contains("until the client 127.0.0.1 sent a delayed ACK (Linux delayed ACK"));
        assert_eq!(f[0].ack_timer.as_deref(), Some("Linux delayed ACK, 40 ms minimum (HZ/25)"));
        let rows = sink.interval();
        assert_eq!(rows.len(), 1);
        let c = &rows[0].counts;
        assert_eq!((c.exchanges, c.found, c.suppressed), (1, [1, 0, 0, 0], 0));
        assert!((c.latency.quantile_ms(0.5) - 44.0).abs() < 0.5);
        assert!(sink.interval().is_empty(), "a new interval starts empty");
        assert_eq!(sink.totals()[0].counts.found, [1, 0, 0, 0], "the whole run keeps it");
        let v = sink.verdict();
        assert_eq!(v.len(), 1);
        assert!(v[0].starts_with("Nagle + delayed ACK: 1 of 1 responses from 127.0.0.1:8080 (server)"), "{v:?}");
    }

    #[test]
    fn lines_are_rate_limited_per_interval_and_the_rest_counted() {
        let mut sink = WatchSink::new(Limits { max_endpoints: 10, lines_per_interval: 3, ..Limits::default() }, None);
        feed(&mut sink, &server(8080), &stalling(20, 0));
        assert_eq!(sink.take_findings().count(), 3);
        let rows = sink.interval();
        assert_eq!((rows[0].counts.found[0], rows[0].counts.suppressed), (20, 17));
        feed(&mut sink, &server(8080), &stalling(2, 10_000 * MS));
        assert_eq!(sink.take_findings().count(), 2, "a new interval prints again");
        assert_eq!(sink.totals()[0].counts.suppressed, 17);
        let mut none = WatchSink::new(Limits { max_endpoints: 10, lines_per_interval: 0, ..Limits::default() }, None);
        feed(&mut none, &server(8080), &stalling(2, 0));
        assert_eq!(none.take_findings().count(), 0, "0 lines: summaries only");
    }

    #[test]
    fn endpoints_beyond_the_cap_fold_into_other() {
        let mut sink = WatchSink::new(Limits { max_endpoints: 2, ..Limits::default() }, None);
        for port in [8080, 8081, 8082, 8083, 8080] {
            feed(&mut sink, &server(port), &stalling(1, 0));
        }
        assert_eq!((sink.endpoints(), sink.folded()), (2, 2));
        let rows = sink.interval();
        let names: Vec<&str> = rows.iter().map(|r| r.server.as_str()).collect();
        assert_eq!(names, ["127.0.0.1:8080", "127.0.0.1:8081", "other"]);
        assert_eq!(rows[0].counts.exchanges, 2);
        assert_eq!(rows[2].counts.found[0], 2);
        let f: Vec<Finding> = sink.take_findings().collect();
        assert_eq!(f.len(), 5, "findings on folded endpoints still name their real server");
        assert_eq!(f[2].server, "127.0.0.1:8082");
        assert_eq!(sink.verdict().len(), 2, "the verdict covers named endpoints only");
    }

    const MIN: i64 = 60_000 * MS;

    #[test]
    fn a_new_endpoint_takes_the_slot_of_one_silent_for_endpoint_idle() {
        let m = Arc::new(Metrics::new());
        let limits = Limits { max_endpoints: 2, endpoint_idle: Duration::from_secs(600), ..Limits::default() };
        let mut sink = WatchSink::new(limits, Some(m.clone()));
        feed(&mut sink, &server(8080), &stalling(1, 0));
        feed(&mut sink, &server(8081), &stalling(1, 0));
        feed(&mut sink, &server(8082), &stalling(1, 5 * MIN));
        assert_eq!((sink.folded(), sink.recycled()), (1, 0), "nobody silent 10 min yet: other");
        feed(&mut sink, &server(8081), &stalling(1, 9 * MIN));
        feed(&mut sink, &server(8083), &stalling(2, 11 * MIN));
        assert_eq!((sink.endpoints(), sink.folded(), sink.recycled()), (2, 1, 1), "8080, silent 11 min, gave its slot");
        let text = m.encode();
        let line = |l: &str| text.lines().any(|x| x == l);
        assert!(!text.contains("127.0.0.1:8080"), "the recycled endpoint's series are removed:\n{text}");
        assert!(line(r#"tcpdoctor_stalls_total{kind="nagle_delayed_ack",endpoint="127.0.0.1:8083",role="server"} 2"#));
        assert!(line(r#"tcpdoctor_stalls_total{kind="zero_window",endpoint="127.0.0.1:8083",role="client"} 0"#));
        assert!(line(r#"tcpdoctor_stalls_total{kind="nagle_delayed_ack",endpoint="127.0.0.1:8081",role="server"} 2"#));
        assert!(line(r#"tcpdoctor_stalls_total{kind="nagle_delayed_ack",endpoint="other",role="server"} 1"#));
        assert!(line("tcpdoctor_recycled_endpoints_total 1"), "{text}");
        assert!(line("tcpdoctor_folded_connections_total 1"), "{text}");
        assert_eq!(names(&sink.totals()), ["127.0.0.1:8081", "127.0.0.1:8083", "other"], "8080's counts left with it");
        let v = sink.verdict();
        assert!(v.iter().all(|s| !s.contains("8080")) && v.iter().any(|s| s.contains("127.0.0.1:8083")), "{v:?}");
    }

    #[test]
    fn a_slot_is_not_recycled_while_a_connection_to_it_is_tracked() {
        let limits = Limits { max_endpoints: 1, endpoint_idle: Duration::from_secs(60), ..Limits::default() };
        let mut sink = WatchSink::new(limits, None);
        let held = stalling(1, 0);
        let st = start(&mut sink, &server(8080), &held);
        feed(&mut sink, &server(8081), &stalling(1, 2 * MIN));
        assert_eq!((sink.folded(), sink.recycled()), (1, 0), "8080 is silent 2 min but its connection is tracked");
        end(&mut sink, &server(8080), st, &held);
        feed(&mut sink, &server(8082), &stalling(1, 2 * MIN + 2_000 * MS));
        assert_eq!((sink.folded(), sink.recycled()), (1, 1), "free once the connection is finished");
        assert_eq!(names(&sink.totals()), ["127.0.0.1:8082", "other"]);
    }

    #[test]
    fn a_retransmission_timeout_is_a_finding_a_fast_retransmit_is_not() {
        let mut sink = WatchSink::new(Limits::default(), None);
        let mut s = Seq::new();
        s.data(0, Client, 80);
        s.data(30 * US, Server, 1000);
        s.resend(5 * MS, Server, 1000, 5 * MS);
        s.data(10 * MS, Server, 1000);
        s.resend(220 * MS, Server, 1000, 210 * MS);
        feed(&mut sink, &server(8080), &s);
        let f: Vec<Finding> = sink.take_findings().collect();
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].kind, f[0].role), (Kind::RetransmissionTimeout, "server"));
        assert!(
            f[0].summary.starts_with("Retransmission timeout: the server 127.0.0.1:8080 re-sent bytes 210.0 ms"),
            "{}",
            f[0].summary
        );
        assert_eq!(sink.interval()[0].counts.found, [0, 1, 0, 0]);
        let v = sink.verdict();
        assert!(v[0].starts_with("Retransmission: 2 segments re-sent"), "both in the verdict: {v:?}");
    }

    #[test]
    fn syn_retries_and_zero_windows_are_findings() {
        let mut sink = WatchSink::new(Limits::default(), None);
        let mut s = Seq::new();
        s.syn(0, Client, false);
        s.syn(1000 * MS, Client, true);
        s.syn(1000 * MS + 50 * US, Server, false);
        s.ack(1000 * MS + 60 * US, Client);
        s.data(1001 * MS, Client, 80);
        s.data(1002 * MS, Server, 1000);
        s.ack_window(1003 * MS, Client, 0);
        s.ack_window(1303 * MS, Client, 65535);
        feed(&mut sink, &server(8080), &s);
        let f: Vec<Finding> = sink.take_findings().collect();
        let kinds: Vec<(Kind, &str)> = f.iter().map(|f| (f.kind, f.role)).collect();
        assert_eq!(kinds, [(Kind::SynRetransmission, "client"), (Kind::ZeroWindow, "client")]);
        assert!(f[0].summary.contains("sent its SYN 2 times"), "{}", f[0].summary);
        assert!((f[1].ms - 300.0).abs() < 0.01);
        // Unanswered SYNs are reported when the connection is finished.
        let mut s = Seq::new();
        s.syn(0, Client, false);
        s.syn(1000 * MS, Client, true);
        s.syn(3000 * MS, Client, true);
        feed(&mut sink, &server(9090), &s);
        let f: Vec<Finding> = sink.take_findings().collect();
        assert_eq!(f.len(), 1);
        assert!(f[0].summary.contains("never answered, given up after 3.00 s"), "{}", f[0].summary);
        assert_eq!(f[0].ts_ns, 3000 * MS);
    }

    #[test]
    fn metrics_count_per_endpoint_and_role() {
        let m = Arc::new(Metrics::new());
        let mut sink = WatchSink::new(Limits::default(), Some(m.clone()));
        feed(&mut sink, &server(8080), &stalling(3, 0));
        feed(&mut sink, &server(8081), &Seq::new());
        let text = m.encode();
        let line = |l: &str| text.lines().any(|x| x == l);
        assert!(line(r#"tcpdoctor_stalls_total{kind="nagle_delayed_ack",endpoint="127.0.0.1:8080",role="server"} 3"#));
        assert!(line(r#"tcpdoctor_stalls_total{kind="nagle_delayed_ack",endpoint="127.0.0.1:8080",role="client"} 0"#));
        assert!(line(r#"tcpdoctor_stalls_total{kind="nagle_delayed_ack",endpoint="127.0.0.1:8081",role="server"} 0"#));
        assert!(line(r#"tcpdoctor_exchange_latency_seconds_count{endpoint="127.0.0.1:8080"} 3"#), "{text}");
        assert!(line(r#"tcpdoctor_stall_seconds_bucket{le="0.04",kind="nagle_delayed_ack"} 0"#), "{text}");
        assert!(line(r#"tcpdoctor_stall_seconds_bucket{le="0.045",kind="nagle_delayed_ack"} 3"#), "{text}");
    }
}
