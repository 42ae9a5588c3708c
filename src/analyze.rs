//! The `analyze` pipeline: capture → wire → tcp → detect → report, one file
//! per thread, results merged.

use crate::capture::{self, Capture, Format, LinkType};
use crate::detect::{Detectors, Exchange, Observation, Stall};
use crate::dist::Dist;
use crate::filter::Filter;
use crate::report::{self, Ladder, Mark, Report, Row, RowKind};
use crate::tcp::table::Totals;
use crate::tcp::{ConnInfo, DataClass, Event, EventKind, RoleSource, Side, Sink, Tracker};
use crate::wire::{self, Endpoint, Segment};
use rustc_hash::FxHashMap;
use std::net::IpAddr;

/// What to analyse and how.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Keep only matching segments.
    pub filter: Option<Filter>,
    /// Draw this connection (`N`, or `F:N` with several files).
    pub flow: Option<String>,
    /// Most rows a ladder shows.
    pub ladder_rows: usize,
}

/// Rows kept for the worst-exchange ladder of each connection.
const EXCHANGE_ROWS: usize = 48;
/// Example frames kept per finding.
const EXAMPLES: usize = 5;
/// Think time at or above which an exchange counts as slow.
pub const SLOW_THINK_NS: i64 = 10_000_000;
/// Connection rows kept before trimming to the costliest.
const CONN_ROWS_MAX: usize = 4096;
const CONN_ROWS_KEEP: usize = 1024;
/// Timestamps further than this from a file's first packet (~13 days) are
/// clamped: a damaged or stepped clock must not overflow the arithmetic
/// (differences and sums of a few of them stay far below `i64::MAX`).
pub const TS_SPAN_NS: i64 = 1 << 50;
/// Re-send delay that marks a retransmission timeout (Linux RTO minimum is 200 ms).
pub const RTO_NS: i64 = 180_000_000;

/// Per-connection state held while the connection is open.
#[derive(Default)]
pub struct ConnState {
    det: Detectors,
    acc: Acc,
}

/// What the collector accumulates per connection.
#[derive(Default)]
struct Acc {
    /// Index of this connection's server in `Collector::slots` (looked up once).
    server_slot: Option<usize>,
    exchanges: u64,
    stalls: [u64; 2],
    retrans: u64,
    lost_ns: i64,
    cur: Vec<Row>,
    cur_stall: i64,
    worst: Option<(i64, Vec<Row>)>,
    flow: Option<Vec<Row>>,
    flow_truncated: bool,
    flow_checked: bool,
}

#[derive(Default)]
pub(crate) struct NagleAgg {
    pub(crate) side: Option<Side>,
    pub(crate) peer: Option<IpAddr>,
    pub(crate) stalls: Dist,
    pub(crate) acks: Dist,
    pub(crate) lost_ns: i64,
    pub(crate) exchanges: u64,
    pub(crate) connections: u64,
    pub(crate) examples: Vec<u64>,
}

#[derive(Default)]
pub(crate) struct ServerAgg {
    pub(crate) exchanges: u64,
    pub(crate) total: Dist,
    pub(crate) think: Dist,
    pub(crate) sum_total: i64,
    pub(crate) sum_network: i64,
    pub(crate) sum_think: i64,
    pub(crate) sum_transfer: i64,
    pub(crate) sum_stall: i64,
    pub(crate) slow: u64,
    pub(crate) slow_think_ns: i64,
    pub(crate) slow_examples: Vec<u64>,
    pub(crate) software: Option<String>,
}

#[derive(Default)]
pub(crate) struct CountAgg {
    pub(crate) events: u64,
    pub(crate) timeouts: u64,
    pub(crate) unanswered: u64,
    pub(crate) retries: u64,
    pub(crate) connections: u64,
    pub(crate) dist: Dist,
    pub(crate) lost_ns: i64,
    pub(crate) examples: Vec<u64>,
}

/// One file's results, before merging.
#[derive(Default)]
pub(crate) struct FileResult {
    pub(crate) input: report::Input,
    pub(crate) nagle: FxHashMap<Endpoint, NagleAgg>,
    pub(crate) servers: FxHashMap<Endpoint, ServerAgg>,
    pub(crate) retrans: FxHashMap<(Endpoint, Side), CountAgg>,
    pub(crate) syn: FxHashMap<(Endpoint, Side), CountAgg>,
    pub(crate) zero: FxHashMap<(Endpoint, Side), CountAgg>,
    pub(crate) conns: Vec<report::Connection>,
    pub(crate) conns_omitted: u64,
    pub(crate) guessed_roles: u64,
    pub(crate) worst: Option<(i64, Ladder)>,
    pub(crate) flow: Option<Ladder>,
    pub(crate) warnings: Vec<String>,
}

struct Collector<'o> {
    file_tag: Option<usize>,
    opts: &'o Options,
    r: FileResult,
    /// Server aggregates while collecting; moved into `r.servers` at the end.
    slots: Vec<(Endpoint, ServerAgg)>,
    slot_of: FxHashMap<Endpoint, usize>,
}

fn push_example(v: &mut Vec<u64>, frames: &[u64], per: usize) {
    if v.len() < EXAMPLES * per {
        v.extend_from_slice(frames);
    }
}

impl Collector<'_> {
    fn conn_id(&self, id: u32) -> String {
        match self.file_tag {
            Some(f) => format!("{f}:{id}"),
            None => id.to_string(),
        }
    }

    fn observe(&mut self, info: &ConnInfo, st: &mut Acc, o: Observation) {
        match o {
            Observation::Stall(s) => self.stall(info, st, s),
            Observation::Exchange(x) => self.exchange(info, st, x),
            Observation::Retransmission { from, frame, since_ns } => {
                st.retrans += 1;
                st.lost_ns = st.lost_ns.saturating_add(since_ns);
                let a = self.r.retrans.entry((info.server, from)).or_default();
                a.events += 1;
                a.timeouts += u64::from(since_ns >= RTO_NS);
                a.dist.record(since_ns);
                a.lost_ns = a.lost_ns.saturating_add(since_ns);
                if st.retrans == 1 {
                    a.connections += 1;
                }
                push_example(&mut a.examples, &[frame], 1);
            }
            Observation::SynRetry { from, retries, delay_ns, answered, frames } => {
                st.lost_ns = st.lost_ns.saturating_add(delay_ns);
                let a = self.r.syn.entry((info.server, from)).or_default();
                a.connections += 1;
                a.retries += u64::from(retries);
                a.unanswered += u64::from(!answered);
                a.dist.record(delay_ns);
                a.lost_ns = a.lost_ns.saturating_add(delay_ns);
                push_example(&mut a.examples, &frames, 2);
            }
            Observation::ZeroWindow { from, duration_ns, frames } => {
                st.lost_ns = st.lost_ns.saturating_add(duration_ns);
                let a = self.r.zero.entry((info.server, from)).or_default();
                a.events += 1;
                a.dist.record(duration_ns);
                a.lost_ns = a.lost_ns.saturating_add(duration_ns);
                push_example(&mut a.examples, &frames, 2);
            }
        }
    }

    fn stall(&mut self, info: &ConnInfo, st: &mut Acc, s: Stall) {
        st.stalls[s.nagle.idx()] += 1;
        st.lost_ns = st.lost_ns.saturating_add(s.stall_ns);
        st.cur_stall = st.cur_stall.saturating_add(s.stall_ns);
        let a = self.r.nagle.entry(info.endpoint(s.nagle)).or_default();
        a.side = Some(s.nagle);
        a.peer = Some(info.endpoint(s.nagle.other()).ip);
        a.stalls.record(s.stall_ns);
        a.acks.record(s.ack_delay_ns);
        a.lost_ns = a.lost_ns.saturating_add(s.stall_ns);
        push_example(&mut a.examples, &[s.small_frame, s.ack_frame, s.held_frame], 3);
        for rows in [Some(&mut st.cur), st.flow.as_mut()].into_iter().flatten() {
            for r in rows.iter_mut() {
                if r.frame == s.small_frame {
                    r.mark = Some(Mark::SmallUnacked);
                } else if r.frame == s.ack_frame {
                    r.mark = Some(Mark::LateAck);
                }
            }
        }
    }

    fn server_slot(&mut self, info: &ConnInfo, st: &mut Acc) -> usize {
        *st.server_slot.get_or_insert_with(|| {
            *self.slot_of.entry(info.server).or_insert_with(|| {
                self.slots.push((info.server, ServerAgg::default()));
                self.slots.len() - 1
            })
        })
    }

    fn exchange(&mut self, info: &ConnInfo, st: &mut Acc, x: Exchange) {
        st.exchanges += 1;
        let to_server = info.rtt_to(Side::Server);
        let to_client = info.rtt_to(Side::Client);
        // Application time: before the first response byte, plus pauses inside the response.
        let think = (x.resp_first - x.req_last - to_server).max(0) + x.resp_pause;
        let transfer = (x.req_last - x.req_first - x.req_stall).max(0)
            + (x.resp_last - x.resp_first - x.resp_stall - x.resp_pause).max(0);
        let stall = x.req_stall + x.resp_stall;
        let network = to_client + to_server;
        let total = network + think + transfer + stall;
        let slot = self.server_slot(info, st);
        let a = &mut self.slots[slot].1;
        a.exchanges += 1;
        a.total.record(total);
        a.think.record(think);
        a.sum_total = a.sum_total.saturating_add(total);
        a.sum_network = a.sum_network.saturating_add(network);
        a.sum_think = a.sum_think.saturating_add(think);
        a.sum_transfer = a.sum_transfer.saturating_add(transfer);
        a.sum_stall = a.sum_stall.saturating_add(stall);
        if think >= SLOW_THINK_NS {
            a.slow += 1;
            a.slow_think_ns = a.slow_think_ns.saturating_add(think);
            if a.slow_examples.len() < EXAMPLES * 2 {
                // The last request frame is not tracked; the first is close enough to find it.
                a.slow_examples.extend_from_slice(&[x.first_frame, x.last_frame]);
            }
        }
        // Close the ladder of the exchange that just ended.
        if st.cur_stall > 0 && st.worst.as_ref().is_none_or(|w| st.cur_stall > w.0) {
            st.worst = Some((st.cur_stall, std::mem::take(&mut st.cur)));
        }
        st.cur.clear();
        st.cur_stall = 0;
    }
}

fn row(ev: &Event) -> Row {
    let (kind, seq, len) = match ev.kind {
        EventKind::Syn { .. } => (RowKind::Syn, 0, 0),
        EventKind::Data { seq, len, class } => (
            match class {
                DataClass::New => RowKind::Data,
                DataClass::Retransmission { .. } => RowKind::Retransmission,
                DataClass::OutOfOrder => RowKind::OutOfOrder,
                DataClass::Probe => RowKind::Probe,
            },
            seq,
            len,
        ),
        EventKind::Ack => (RowKind::Ack, 0, 0),
        EventKind::Fin => (RowKind::Fin, 0, 0),
        EventKind::Rst => (RowKind::Rst, 0, 0),
    };
    Row {
        frame: ev.frame,
        ts_ns: ev.ts_ns,
        t_ms: 0.0,
        from: ev.from,
        kind,
        seq,
        len,
        ack: ev.ack,
        window: ev.window,
        mark: None,
    }
}

impl Sink<ConnState> for Collector<'_> {
    #[inline]
    fn event(&mut self, info: &ConnInfo, state: &mut ConnState, ev: &Event, seg: &Segment<'_>) {
        let ConnState { det, acc: st } = state;
        if !st.flow_checked {
            st.flow_checked = true;
            if let Some(f) = &self.opts.flow
                && (*f == self.conn_id(info.id) || *f == info.id.to_string())
            {
                st.flow = Some(Vec::new());
            }
        }
        let mut held = false;
        det.step(info, ev, seg.payload, &mut |o| {
            held |= matches!(o, Observation::Stall(_));
            self.observe(info, st, o);
        });
        if st.cur.len() < EXCHANGE_ROWS || st.flow.is_some() {
            let mut r = row(ev);
            if held {
                r.mark = Some(Mark::Held);
            }
            if st.cur.len() < EXCHANGE_ROWS {
                st.cur.push(r);
            }
            if let Some(rows) = &mut st.flow {
                if rows.len() < self.opts.ladder_rows.max(1) {
                    rows.push(r);
                } else {
                    st.flow_truncated = true;
                }
            }
        }
    }

    fn close(&mut self, info: &ConnInfo, state: ConnState, totals: &Totals) {
        let ConnState { mut det, acc: mut st } = state;
        det.finish(totals.last_ts, &mut |o| self.observe(info, &mut st, o));
        if info.roles == RoleSource::LowerPort {
            self.r.guessed_roles += 1;
        }
        let id = self.conn_id(info.id);
        let slot = self.server_slot(info, &mut st);
        let server = &mut self.slots[slot].1;
        if server.software.is_none() {
            server.software = det.server_software.take();
        }
        for side in [Side::Client, Side::Server] {
            if st.stalls[side.idx()] > 0
                && let Some(a) = self.r.nagle.get_mut(&info.endpoint(side))
            {
                a.exchanges += st.exchanges;
                a.connections += 1;
            }
        }
        if let Some((stall, rows)) = st.worst.take()
            && self.r.worst.as_ref().is_none_or(|w| stall > w.0)
        {
            let mut l = Ladder {
                connection: id.clone(),
                title: format!("Worst stalled exchange: connection {id}, {} lost", crate::report::text::dur(stall)),
                client: info.client.to_string(),
                server: info.server.to_string(),
                rows,
                truncated: false,
            };
            l.finish_times();
            self.r.worst = Some((stall, l));
        }
        if let Some(rows) = st.flow.take() {
            let mut l = Ladder {
                connection: id.clone(),
                title: format!("Connection {id}: {} → {}", info.client, info.server),
                client: info.client.to_string(),
                server: info.server.to_string(),
                rows,
                truncated: st.flow_truncated,
            };
            l.finish_times();
            self.r.flow = Some(l);
        }
        let rtt = match (info.rtt_to[0], info.rtt_to[1]) {
            (Some(a), Some(b)) => Some(report::ms(a + b)),
            _ => None,
        };
        self.r.conns.push(report::Connection {
            id,
            client: info.client.to_string(),
            server: info.server.to_string(),
            roles_from: match info.roles {
                RoleSource::Handshake => "handshake",
                RoleSource::LowerPort => "lower_port",
            },
            packets: totals.packets,
            bytes_to_server: totals.bytes[0],
            bytes_to_client: totals.bytes[1],
            exchanges: st.exchanges,
            stalls: st.stalls[0] + st.stalls[1],
            retransmissions: st.retrans,
            time_lost_ms: report::ms(st.lost_ns),
            rtt_ms: rtt,
            first_frame: totals.first_frame,
            duration_ms: report::ms(totals.last_ts - totals.first_ts),
        });
        if self.r.conns.len() >= CONN_ROWS_MAX {
            sort_conns(&mut self.r.conns);
            self.r.conns_omitted += (self.r.conns.len() - CONN_ROWS_KEEP) as u64;
            self.r.conns.truncate(CONN_ROWS_KEEP);
        }
    }
}

fn sort_conns(v: &mut [report::Connection]) {
    v.sort_by(|a, b| b.time_lost_ms.total_cmp(&a.time_lost_ms).then(a.first_frame.cmp(&b.first_frame)));
}

/// Error for an input that gave nothing to analyse.
#[derive(Debug)]
pub struct InputError {
    /// File name.
    pub file: String,
    /// Offset and what.
    pub detail: String,
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file, self.detail)
    }
}

fn analyze_file(cap: &Capture, file_tag: Option<usize>, opts: &Options) -> Result<FileResult, InputError> {
    let err = |detail: String| InputError { file: cap.name.clone(), detail };
    let mut packets = cap.packets().map_err(|e| err(e.to_string()))?;
    let mut c =
        Collector { file_tag, opts, r: FileResult::default(), slots: Vec::new(), slot_of: FxHashMap::default() };
    let mut tracker: Tracker<ConnState> = Tracker::default();
    let (mut n, mut tcp, mut other, mut bad) = (0u64, 0u64, 0u64, 0u64);
    let (mut first_ts, mut last_ts) = (None, i64::MIN);
    let mut clamped = 0u64;
    let mut unsupported: Vec<(LinkType, u64)> = Vec::new();
    let mut first_bad: Option<(u64, String)> = None;
    // Map the first window now that this file's thread has started on it.
    cap.window(0);
    let mut next_window = capture::WINDOW as u64;
    while let Some(p) = packets.next() {
        n += 1;
        let t0 = *first_ts.get_or_insert(p.ts_ns);
        let ts = p.ts_ns.clamp(t0.saturating_sub(TS_SPAN_NS), t0.saturating_add(TS_SPAN_NS));
        clamped += u64::from(ts != p.ts_ns);
        if packets.offset() >= next_window {
            cap.window(packets.offset() as usize);
            next_window += capture::WINDOW as u64;
        }
        last_ts = last_ts.max(ts);
        if !p.link.supported() {
            match unsupported.iter_mut().find(|(l, _)| *l == p.link) {
                Some((_, k)) => *k += 1,
                None => unsupported.push((p.link, 1)),
            }
            continue;
        }
        match wire::decode(p.frame, ts, p.link, p.data, p.orig_len) {
            Ok(Some(seg)) => {
                if opts.filter.as_ref().is_some_and(|f| !f.matches(&seg)) {
                    other += 1;
                    continue;
                }
                tcp += 1;
                tracker.segment(&seg, &mut c);
            }
            Ok(None) => other += 1,
            Err(e) => {
                bad += 1;
                first_bad.get_or_insert((p.frame, e.to_string()));
            }
        }
    }
    tracker.finish(&mut c);
    c.r.servers = c.slots.drain(..).collect();
    let format = match packets.format() {
        Format::Pcap => "pcap",
        Format::PcapNg => "pcapng",
    };
    let damage = packets.damage().map(|d| d.to_string());
    let r = &mut c.r;
    if let Some(d) = &damage {
        r.warnings.push(format!("{}: {d}; analysed the {n} packets before it", cap.name));
    }
    for (l, k) in &unsupported {
        r.warnings.push(format!(
            "{}: link type {l} is not supported; skipped {k} packets (supported: Ethernet, Linux cooked SLL/SLL2, NULL/LOOP, raw IP)",
            cap.name
        ));
    }
    if clamped > 0 {
        r.warnings.push(format!(
            "{}: {clamped} packets have timestamps more than 13 days from the first packet (a damaged or stepped clock); they were clamped",
            cap.name
        ));
    }
    if let Some((frame, what)) = &first_bad {
        r.warnings.push(format!("{}: {bad} malformed packets skipped (first: frame {frame}, {what})", cap.name));
    }
    if r.guessed_roles > 0 {
        r.warnings.push(format!(
            "{}: {} connections started before the capture; their server was taken to be the end with the lower port",
            cap.name, r.guessed_roles
        ));
    }
    if tcp == 0 && other == 0 && bad == 0 && !unsupported.is_empty() {
        let links: Vec<String> = unsupported.iter().map(|(l, _)| l.to_string()).collect();
        return Err(err(format!(
            "link type {} is not supported (supported: Ethernet, Linux cooked SLL/SLL2, NULL/LOOP, raw IP)",
            links.join(", ")
        )));
    }
    if n == 0 && damage.is_some() {
        return Err(err(packets.damage().map(|d| d.to_string()).unwrap_or_default()));
    }
    r.input = report::Input {
        file: cap.name.clone(),
        format: format.into(),
        packets: n,
        tcp_segments: tcp,
        other_packets: other,
        malformed_packets: bad,
        connections: r.conns.len() as u64 + r.conns_omitted,
        start_s: first_ts.unwrap_or(0) as f64 / 1e9,
        duration_ms: report::ms(last_ts - first_ts.unwrap_or(last_ts)),
        damage,
    };
    Ok(c.r)
}

/// Analyses each capture (in parallel, one thread per file up to the core
/// count) and merges the results. Fails only if no input could be read at all.
pub fn analyze(captures: &[Capture], opts: &Options) -> Result<Report, InputError> {
    let tag = |i: usize| (captures.len() > 1).then_some(i + 1);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(captures.len()).max(1);
    let mut results: Vec<Option<Result<FileResult, InputError>>> = (0..captures.len()).map(|_| None).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= captures.len() {
                            break mine;
                        }
                        mine.push((i, analyze_file(&captures[i], tag(i), opts)));
                    }
                })
            })
            .collect();
        for h in handles {
            for (i, r) in h.join().expect("analysis thread panicked") {
                results[i] = Some(r);
            }
        }
    });
    let mut ok = Vec::new();
    let mut errors = Vec::new();
    for r in results.into_iter().flatten() {
        match r {
            Ok(f) => ok.push(f),
            Err(e) => errors.push(e),
        }
    }
    if ok.is_empty() {
        // Name every file, on one line.
        let mut e = errors.into_iter();
        let mut first = e.next().expect("at least one input");
        for more in e {
            first.detail = format!("{}; {more}", first.detail);
        }
        return Err(first);
    }
    let mut merged = FileResult::default();
    let mut inputs = Vec::new();
    for f in ok {
        merged.merge(f, &mut inputs);
    }
    let mut report = crate::verdict::build(merged, inputs);
    for e in errors {
        report.warnings.insert(0, format!("{e} (file skipped)"));
    }
    Ok(report)
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
        self.timeouts += o.timeouts;
        self.unanswered += o.unanswered;
        self.retries += o.retries;
        self.connections += o.connections;
        self.dist.merge(&o.dist);
        self.lost_ns = self.lost_ns.saturating_add(o.lost_ns);
    }
}

impl FileResult {
    fn merge(&mut self, f: FileResult, inputs: &mut Vec<report::Input>) {
        inputs.push(f.input);
        merge_map(&mut self.nagle, f.nagle, |a, b| {
            a.side = a.side.or(b.side);
            a.peer = a.peer.or(b.peer);
            a.stalls.merge(&b.stalls);
            a.acks.merge(&b.acks);
            a.lost_ns = a.lost_ns.saturating_add(b.lost_ns);
            a.exchanges += b.exchanges;
            a.connections += b.connections;
            merge_examples(&mut a.examples, &b.examples, 3);
        });
        merge_map(&mut self.servers, f.servers, |a, b| {
            a.exchanges += b.exchanges;
            a.total.merge(&b.total);
            a.think.merge(&b.think);
            a.sum_total = a.sum_total.saturating_add(b.sum_total);
            a.sum_network = a.sum_network.saturating_add(b.sum_network);
            a.sum_think = a.sum_think.saturating_add(b.sum_think);
            a.sum_transfer = a.sum_transfer.saturating_add(b.sum_transfer);
            a.sum_stall = a.sum_stall.saturating_add(b.sum_stall);
            a.slow += b.slow;
            a.slow_think_ns = a.slow_think_ns.saturating_add(b.slow_think_ns);
            merge_examples(&mut a.slow_examples, &b.slow_examples, 2);
            if a.software.is_none() {
                a.software = b.software;
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
        self.conns.extend(f.conns);
        self.conns_omitted += f.conns_omitted;
        if let Some(w) = f.worst
            && self.worst.as_ref().is_none_or(|m| w.0 > m.0)
        {
            self.worst = Some(w);
        }
        self.flow = self.flow.take().or(f.flow);
        self.warnings.extend(f.warnings);
    }
}
