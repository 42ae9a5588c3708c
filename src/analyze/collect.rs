//! The collector: receives each connection's events, runs the detectors and
//! folds what they observe into the file's aggregates, connection rows and ladders.

use super::Options;
use super::agg::{
    At, FileResult, HeadsUnread, MAX_ENDPOINTS, STALLED_LADDERS, STALLED_PER_CONN, ServerAgg, bounded_entry,
};
use super::conns::Row as ConnRow;
use crate::detect::{Detectors, Exchange, Observation, Observer, Stall, Times};
use crate::record::{self, ExchangeTimes, Ladder, Mark, Row};
use crate::tcp::table::Totals;
use crate::tcp::{ConnInfo, Event, RoleSource, RolesDoubt, Side, Sink};
use crate::wire::{Endpoint, Segment};
use rows::{Rows, row};
use rustc_hash::FxHashMap;

mod rows;

/// Rows kept for an exchange's ladder.
const EXCHANGE_ROWS: usize = 48;

/// Per-connection state held while the connection is open. In C order (see `Acc`).
#[derive(Default)]
#[repr(C)]
pub struct ConnState {
    det: Detectors,
    acc: Acc,
}

/// What the collector accumulates per connection. In C order: what every
/// packet reads (the rows, the flow check) first, in one cache line.
#[derive(Default)]
#[repr(C)]
struct Acc {
    /// The current exchange's first rows, and its stall so far.
    cur: Rows,
    flow: Option<Vec<Row>>,
    /// The connection's first frame (its order among connections, whatever shard holds it).
    first_frame: u64,
    cur_stall: i64,
    flow_checked: bool,
    flow_truncated: bool,
    /// Index of this connection's server in `Collector::slots` (looked up once).
    server_slot: Option<usize>,
    exchanges: u64,
    stalls: [u64; 2],
    /// Nagle + loss holds (the loss timer sent the held segment), per side.
    held_loss: [u64; 2],
    expect_waits: u64,
    retrans: u64,
    lost_ns: i64,
    /// An exchange of this connection ended stalled.
    stalled_exchange: bool,
    /// This connection's worst stalled exchanges (stall ns, rows, times), worst first.
    stalled: Vec<(i64, Vec<Row>, Times)>,
    /// Its slowest exchange (rows, times), while it has not stalled.
    slowest: Option<(Vec<Row>, Times)>,
    /// Its roles were swapped after something had been observed in the old ones.
    swapped_late: bool,
}

pub(super) struct Collector<'o> {
    file_tag: Option<usize>,
    opts: &'o Options,
    r: FileResult,
    /// Server aggregates while collecting; moved into `r.servers` at the end.
    slots: Vec<(Endpoint, ServerAgg)>,
    slot_of: FxHashMap<Endpoint, usize>,
    /// Connections with a stalled exchange so far, open or closed.
    stalled_conns: usize,
    /// When things are observed now: (frame << 1) | phase (see [`At`]).
    now: u64,
    /// Keep every connection's first frame (a shard: connections are numbered after the merge).
    numbering: bool,
}

impl<'o> Collector<'o> {
    /// A collector; `numbering`: keep each connection's first frame, to number them after a merge.
    pub(super) fn new(file_tag: Option<usize>, opts: &'o Options, numbering: bool) -> Collector<'o> {
        Collector {
            file_tag,
            opts,
            r: FileResult::default(),
            slots: Vec::new(),
            slot_of: FxHashMap::default(),
            stalled_conns: 0,
            now: 0,
            numbering,
        }
    }

    /// What follows is the sweep of the table before `frame`'s packet.
    #[inline]
    pub(super) fn at_sweep(&mut self, frame: u64) {
        self.now = frame << 1;
    }

    /// What follows is `frame`'s packet.
    #[inline]
    pub(super) fn at_packet(&mut self, frame: u64) {
        self.now = (frame << 1) | 1;
    }

    /// What follows is the end of the capture.
    pub(super) fn at_end(&mut self) {
        self.now = u64::MAX;
    }

    fn at(&self, st: &Acc) -> At {
        (self.now, st.first_frame)
    }

    /// The file's results (or this shard's part of them), once every connection is closed.
    pub(super) fn finish(mut self) -> FileResult {
        self.r.servers = self.slots.drain(..).collect();
        self.r
    }

    fn conn_id(&self, id: u32) -> String {
        super::conn_label(self.file_tag, id)
    }

    fn observe(&mut self, info: &ConnInfo, st: &mut Acc, o: Observation) {
        let at = self.at(st);
        match o {
            Observation::Stall(s) => self.stall(info, st, s),
            Observation::Exchange(x) => self.exchange(info, st, &x),
            Observation::Retransmission { from, spurious, frame, since_ns } => {
                st.retrans += 1;
                st.lost_ns = st.lost_ns.saturating_add(since_ns);
                match bounded_entry(&mut self.r.retrans, (info.server, from)) {
                    Some(a) => a.add_retrans(at, spurious, frame, since_ns, st.retrans == 1),
                    None => self.r.dropped += 1,
                }
            }
            Observation::SynRetry { from, retries, delay_ns, answered, frames } => {
                st.lost_ns = st.lost_ns.saturating_add(delay_ns);
                match bounded_entry(&mut self.r.syn, (info.server, from)) {
                    Some(a) => a.add_syn(at, retries, delay_ns, answered, frames),
                    None => self.r.dropped += 1,
                }
            }
            Observation::ExpectWait { wait_ns, frames, header_seen } => {
                st.expect_waits += 1;
                st.lost_ns = st.lost_ns.saturating_add(wait_ns);
                match bounded_entry(&mut self.r.expect, (info.client.ip, info.server)) {
                    Some(a) => a.add_expect(at, wait_ns, frames, st.expect_waits == 1, header_seen),
                    None => self.r.dropped += 1,
                }
            }
            Observation::HeadUnread { frame, kept } => self.r.heads_unread.add(HeadsUnread(1, frame, kept)),
            Observation::ZeroWindow { from, duration_ns, frames } => {
                st.lost_ns = st.lost_ns.saturating_add(duration_ns);
                match bounded_entry(&mut self.r.zero, (info.server, from)) {
                    Some(a) => a.add_zero(at, duration_ns, frames),
                    None => self.r.dropped += 1,
                }
            }
        }
    }

    fn stall(&mut self, info: &ConnInfo, st: &mut Acc, s: Stall) {
        st.lost_ns = st.lost_ns.saturating_add(s.stall_ns);
        // Only connections that never stalled offer their slowest exchange.
        st.slowest = None;
        let at = self.at(st);
        match bounded_entry(&mut self.r.nagle, info.endpoint(s.nagle)) {
            Some(a) => a.add(at, info.endpoint(s.nagle.other()).ip, &s),
            None => self.r.dropped += 1,
        }
        if s.timer {
            // Counted apart; the stalled-exchange ladders show plain stalls.
            st.held_loss[s.nagle.idx()] += 1;
            return;
        }
        st.stalls[s.nagle.idx()] += 1;
        st.cur_stall = st.cur_stall.saturating_add(s.stall_ns);
        st.cur.mark_stall(s.small_frame, s.ack_frame);
        for r in st.flow.iter_mut().flatten() {
            if r.frame == s.small_frame {
                r.mark = Some(Mark::SmallUnacked);
            } else if r.frame == s.ack_frame {
                r.mark = Some(Mark::LateAck);
            }
        }
    }

    /// This connection's server's aggregates; `None` when [`MAX_ENDPOINTS`]
    /// other servers have them.
    fn server_slot(&mut self, info: &ConnInfo, st: &mut Acc) -> Option<usize> {
        if st.server_slot.is_none() {
            st.server_slot = match self.slot_of.get(&info.server) {
                Some(&i) => Some(i),
                None if self.slots.len() >= MAX_ENDPOINTS => None,
                None => {
                    self.slots.push((info.server, ServerAgg::default()));
                    self.slot_of.insert(info.server, self.slots.len() - 1);
                    Some(self.slots.len() - 1)
                }
            };
        }
        st.server_slot
    }

    fn exchange(&mut self, info: &ConnInfo, st: &mut Acc, x: &Exchange) {
        st.exchanges += 1;
        let times = x.times(info.rtt_to(Side::Client), info.rtt_to(Side::Server));
        let at = self.at(st);
        match self.server_slot(info, st) {
            Some(slot) => {
                let s = &mut self.slots[slot].1;
                s.add_exchange(at, &times, x);
                s.windows.add(x, &times);
            }
            None => self.r.dropped += 1,
        }
        // The exchange that just ended keeps its rows only if its ladder could make the
        // report: ranks only worsen as the connection goes on, so this check is safe.
        // A replaced exchange's buffer takes the next exchange's rows.
        if st.cur_stall > 0 {
            self.stalled_conns += usize::from(!std::mem::replace(&mut st.stalled_exchange, true));
            // Once enough connections have a stalled exchange, each one's worst fills the report.
            let per_conn = if self.stalled_conns >= STALLED_LADDERS { 1 } else { STALLED_PER_CONN };
            let at = st.stalled.partition_point(|w| w.0 >= st.cur_stall);
            if at < per_conn && self.r.stalled.worth((at, -st.cur_stall, st.first_frame)) {
                let spare = if st.stalled.len() >= per_conn { st.stalled.pop() } else { None };
                let mut rows = spare.map(|w| w.1).unwrap_or_default();
                st.cur.write(&mut rows);
                st.stalled.insert(at, (st.cur_stall, rows, times));
                st.stalled.truncate(per_conn);
            }
        } else if st.stalls == [0, 0]
            && st.slowest.as_ref().is_none_or(|w| times.total > w.1.total)
            && self.r.slowest.worth((0, -times.total, st.first_frame))
        {
            let mut rows = st.slowest.take().map(|w| w.0).unwrap_or_default();
            st.cur.write(&mut rows);
            st.slowest = Some((rows, times));
        }
        st.cur.clear();
        st.cur_stall = 0;
    }

    /// A ladder of `rows` of this connection.
    fn ladder(info: &ConnInfo, id: &str, title: String, rows: Vec<Row>, times: Option<ExchangeTimes>) -> Ladder {
        let mut l = Ladder {
            connection: id.to_string(),
            title,
            client: info.client.to_string(),
            server: info.server.to_string(),
            rows,
            truncated: false,
            times,
        };
        l.finish_times();
        l
    }
}

fn exchange_times(t: &Times) -> ExchangeTimes {
    ExchangeTimes {
        total_ms: record::ms(t.total),
        network_ms: record::ms(t.network),
        think_ms: record::ms(t.think),
        upstream_ms: 0.0,
        client_wait_ms: record::ms(t.client),
        transfer_ms: record::ms(t.transfer),
        stall_ms: record::ms(t.stall),
        loss_ms: record::ms(t.loss),
    }
}

/// One event's observations into the collector, exchanges by reference.
struct To<'a, 'o> {
    c: &'a mut Collector<'o>,
    info: &'a ConnInfo,
    st: &'a mut Acc,
    /// A segment was held by Nagle (not released by a loss timer).
    held: bool,
}

impl Observer for To<'_, '_> {
    #[inline]
    fn observe(&mut self, o: Observation) {
        self.held |= matches!(o, Observation::Stall(s) if !s.timer);
        self.c.observe(self.info, self.st, o);
    }

    #[inline]
    fn exchange(&mut self, x: &Exchange) {
        self.c.exchange(self.info, self.st, x);
    }
}

impl Sink<ConnState> for Collector<'_> {
    #[inline]
    fn event(&mut self, info: &ConnInfo, state: &mut ConnState, ev: &Event, seg: &Segment<'_>) {
        let ConnState { det, acc: st } = state;
        if !st.flow_checked {
            st.flow_checked = true;
            st.first_frame = ev.frame;
            if self.numbering {
                self.r.created.push(ev.frame);
            }
            if let Some(f) = &self.opts.flow
                && (*f == self.conn_id(info.id) || *f == info.id.to_string())
            {
                st.flow = Some(Vec::new());
            }
        }
        let mut to = To { c: self, info, st, held: false };
        det.step(info, ev, seg, &mut to);
        let held = to.held;
        if let Some(frames) = det.take_confirmed_tickets() {
            confirm_tickets(st, frames);
        }
        let mark = held.then_some(Mark::Held);
        if st.cur.len() < EXCHANGE_ROWS {
            st.cur.push(ev, seg.flags.0, det.tls_segment.as_ref(), mark);
        }
        if let Some(rows) = &mut st.flow {
            if rows.len() < self.opts.ladder_rows.max(1) {
                rows.push(Row { mark, tls: det.tls_segment, ..row(ev, seg.flags.0) });
            } else {
                st.flow_truncated = true;
            }
        }
    }

    /// Before a swap the detectors saw only events without payload, or one
    /// direction's first message: they start over; the rows are kept, turned round.
    fn swapped(&mut self, _info: &ConnInfo, state: &mut ConnState) {
        state.det = Detectors::default();
        let st = &mut state.acc;
        st.swapped_late |= st.exchanges > 0 || st.stalls != [0, 0] || st.retrans > 0 || st.lost_ns > 0;
        st.stalls.swap(0, 1);
        st.server_slot = None;
        st.cur.turn();
        let kept = st.stalled.iter_mut().map(|w| &mut w.1).chain(st.slowest.as_mut().map(|w| &mut w.0));
        for rows in st.flow.as_mut().into_iter().chain(kept) {
            for r in rows.iter_mut() {
                r.from = r.from.other();
            }
        }
    }

    fn close(&mut self, info: &ConnInfo, state: ConnState, totals: &Totals) {
        let ConnState { mut det, acc: mut st } = state;
        det.finish(totals.last_ts, &mut |o| self.observe(info, &mut st, o));
        // Only the connections a ladder or a note names need their id as text.
        let tag = self.file_tag;
        let id = || super::conn_label(tag, info.id);
        let (at, ff) = ((self.now, totals.first_frame), totals.first_frame);
        if info.roles == RoleSource::LowerPort {
            self.r.guessed_roles += 1;
        }
        // A swap before anything was observed changed nothing that is reported.
        let doubt = match info.roles_doubt {
            Some(RolesDoubt::Corrected(f)) if st.swapped_late => Some((&mut self.r.roles_corrected, f)),
            Some(RolesDoubt::Contradicted(f)) => Some((&mut self.r.roles_contradicted, f)),
            _ => None,
        };
        if let Some(((count, first), frame)) = doubt {
            *count += 1;
            first.get_or_insert_with(|| (at, id(), frame));
        }
        if let Some(slot) = self.server_slot(info, &mut st) {
            let server = &mut self.slots[slot].1;
            if let Some(sw) = det.server_software.take() {
                server.add_software(at, sw);
            }
            if let Some(name) = det.server_name() {
                server.add_name(at, name.into());
            }
            server.rtt.record_n(info.rtt(), u32::try_from(st.exchanges).unwrap_or(u32::MAX));
        }
        for side in [Side::Client, Side::Server] {
            if st.stalls[side.idx()] + st.held_loss[side.idx()] > 0
                && let Some(a) = self.r.nagle.get_mut(&info.endpoint(side))
            {
                a.exchanges += st.exchanges;
                a.connections += 1;
                a.add_rtt(info.rtt_to, st.stalls[side.idx()]);
            }
        }
        let dur = crate::words::dur;
        let label = std::cell::OnceCell::new();
        for (rank, (stall, rows, times)) in std::mem::take(&mut st.stalled).into_iter().enumerate() {
            if !self.r.stalled.worth((rank, -stall, ff)) {
                break;
            }
            let id = label.get_or_init(id);
            let title = match rank {
                0 => format!("Worst stalled exchange: connection {id}, {} lost", dur(stall)),
                n => format!("Worst stalled exchange #{}: connection {id}, {} lost", n + 1, dur(stall)),
            };
            self.r.stalled.keep((rank, -stall, ff), Self::ladder(info, id, title, rows, Some(exchange_times(&times))));
        }
        if let Some((rows, times)) = st.slowest.take()
            && self.r.slowest.worth((0, -times.total, ff))
        {
            let id = label.get_or_init(id);
            let title = format!("Slowest exchange: connection {id}, {} (no stall)", dur(times.total));
            self.r
                .slowest
                .keep((0, -times.total, ff), Self::ladder(info, id, title, rows, Some(exchange_times(&times))));
        }
        if let Some(rows) = st.flow.take() {
            let id = label.get_or_init(id);
            let title = format!("Connection {id}: {} → {}", info.client, info.server);
            let mut l = Self::ladder(info, id, title, rows, None);
            l.truncated = st.flow_truncated;
            self.r.flow = Some(l);
        }
        let rtt = match (info.rtt_to[0], info.rtt_to[1]) {
            (Some(a), Some(b)) => Some(record::ms(a + b)),
            _ => None,
        };
        let [rtt_to_client_ms, rtt_to_server_ms] = info.rtt_to.map(|r| r.map(record::ms));
        self.r.conns.push(ConnRow {
            tag,
            id: info.id,
            client: info.client,
            server: info.server,
            rest: record::Connection {
                id: String::new(),
                client: String::new(),
                server: String::new(),
                server_name: det.server_name().map(str::to_string),
                roles_from: info.roles.name(),
                packets: totals.packets,
                bytes_to_server: totals.bytes[0],
                bytes_to_client: totals.bytes[1],
                exchanges: st.exchanges,
                stalls: st.stalls[0] + st.stalls[1],
                retransmissions: st.retrans,
                time_lost_ms: record::ms(st.lost_ns),
                rtt_ms: rtt,
                capture_point: info.capture_point().name(),
                rtt_to_client_ms,
                rtt_to_server_ms,
                first_frame: totals.first_frame,
                duration_ms: record::ms(totals.last_ts - totals.first_ts),
            },
        });
    }
}

/// Rows of segments now known to carry session tickets say so.
fn confirm_tickets(st: &mut Acc, [a, b]: [u64; 2]) {
    st.cur.confirm_tickets(a, b);
    for t in st.flow.iter_mut().flatten().filter(|r| (a..=b).contains(&r.frame)).filter_map(|r| r.tls.as_mut()) {
        t.confirm_tickets();
    }
}
