//! The connection table.

mod conns;
mod settle;

#[cfg(test)]
mod roles_tests;

use super::book::{Book, Shared};
use super::half::{Half, Sample};
use super::roles::{Ephemeral, Roles};
use super::{ConnId, ConnInfo, Event, EventKind, RoleSource, Side};
use crate::wire::Segment;
use conns::{Conns, Key, key};
use settle::{Settle, settle};

/// Closed connections stay this long to absorb late retransmitted FINs/ACKs.
const LINGER_NS: i64 = 2_000_000_000;
/// Connections silent this long are finished (their summaries freed).
const IDLE_NS: i64 = 600_000_000_000;
/// Packets between sweeps of the table.
pub const SWEEP_EVERY: u32 = 1 << 16;
/// Boxes of closed connections kept to hold new ones, at least (see `Tracker::spare`).
const SPARE_MIN: usize = 256;

/// Receives the tracker's events. `T` is per-connection state owned by the sink.
pub trait Sink<T> {
    /// A segment's event, in capture order. `seg` is the segment it came from.
    fn event(&mut self, info: &ConnInfo, state: &mut T, ev: &Event, seg: &Segment<'_>);
    /// The connection ended (closed, idle, or end of capture).
    fn close(&mut self, info: &ConnInfo, state: T, totals: &Totals);
    /// The tracker swapped the connection's client and server (`info` has
    /// the new roles): `state` saw its events so far in the old ones. A sink
    /// that keeps them must turn them round; by default `state` starts afresh.
    fn swapped(&mut self, _info: &ConnInfo, state: &mut T)
    where
        T: Default,
    {
        *state = T::default();
    }
}

/// Counters kept for every connection.
#[derive(Clone, Copy, Debug, Default)]
pub struct Totals {
    /// Packets seen.
    pub packets: u64,
    /// Payload bytes sent by [client, server].
    pub bytes: [u64; 2],
    /// First and last packet time, ns.
    pub first_ts: i64,
    /// Last packet time, ns.
    pub last_ts: i64,
    /// Frame of the first packet.
    pub first_frame: u64,
}

/// In C order: the fields every packet touches first, in as few cache lines
/// as they fit (aligned to one), the sink's state last.
#[repr(C, align(64))]
struct Conn<T> {
    half: [Half; 2],
    totals: Totals,
    /// The client is the key's lower end: a segment's side follows from its
    /// key's orientation, without comparing endpoints.
    client_lo: bool,
    closed: bool,
    settle: Settle,
    info: ConnInfo,
    state: T,
}

/// Tracks every connection in a capture.
pub struct Tracker<T> {
    map: Conns<Conn<T>>,
    /// Boxes of closed connections, with their queues' buffers: a capture of
    /// many short connections otherwise pays, for each, an aligned allocation
    /// and the growth of the queues (bench/RESULTS.md). A sweep closes
    /// thousands at once, so up to as many as are open are kept: no more
    /// memory than the table held a moment before.
    spare: Vec<Box<Conn<T>>>,
    next_id: ConnId,
    since_sweep: u32,
    idle_ns: i64,
    max_conns: usize,
    evicted: u64,
    /// The caller sweeps (with [`Tracker::expire`]) instead of every [`SWEEP_EVERY`] segments.
    manual_sweeps: bool,
    roles: Book,
}

impl<T: Default> Default for Tracker<T> {
    fn default() -> Self {
        Tracker::with_limits(IDLE_NS, usize::MAX)
    }
}

impl<T: Default> Tracker<T> {
    /// A tracker that finishes connections silent for `idle_ns` and never
    /// holds more than `max_conns` (at least 1): a long-running capture
    /// (`watch`) must not grow with what passes.
    pub fn with_limits(idle_ns: i64, max_conns: usize) -> Self {
        Tracker {
            map: Conns::default(),
            spare: Vec::new(),
            next_id: 1,
            since_sweep: 0,
            idle_ns: idle_ns.max(1),
            max_conns: max_conns.max(1),
            evicted: 0,
            manual_sweeps: false,
            roles: Book::Own(Roles::new(Ephemeral::host())),
        }
    }

    /// The same tracker, taking ports in `e` as clients' (the default is
    /// [`Ephemeral::host`]).
    pub fn ephemeral(mut self, e: Ephemeral) -> Self {
        self.roles = Book::Own(Roles::new(e));
        self
    }

    /// The same tracker, learning and judging roles with the other shards of
    /// its file (see [`super::book`]); the caller then sweeps with
    /// [`Tracker::expire`] on a clock every shard shares, and tells
    /// [`Tracker::passed`] how far it got, so that no shard waits long for it.
    pub fn shard(mut self, s: Shared) -> Self {
        self.roles = Book::Shared(s);
        self.manual_sweeps = true;
        self
    }

    /// The same tracker, swept only by the caller (with [`Tracker::expire`]).
    pub fn manual_sweeps(mut self) -> Self {
        self.manual_sweeps = true;
        self
    }

    /// Every segment of this tracker up to `frame` was fed (`all`: and it
    /// waits for more; see [`super::book`]).
    #[inline]
    pub fn passed(&mut self, frame: u64, all: bool) {
        self.roles.passed(frame, all);
    }

    /// Connections held now.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no connection is held.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Connections finished early to stay within the cap, so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Finishes connections closed more than 2 s ago or idle longer than the
    /// idle limit at time `now` (ns); `segment` does this every 65536 packets,
    /// a live capture also on its clock.
    pub fn expire<S: Sink<T>>(&mut self, now: i64, sink: &mut S) {
        self.since_sweep = 0;
        self.sweep(now, sink);
    }

    /// Makes room under the cap: finishes an eighth of it (so the scan is
    /// paid once per many new connections), closed ones first, then the
    /// longest silent.
    fn evict<S: Sink<T>>(&mut self, sink: &mut S) {
        let n = (self.max_conns / 8).max(1).min(self.map.len());
        let mut all: Vec<(bool, i64, Key)> = self.map.iter().map(|(k, c)| (!c.closed, c.totals.last_ts, k)).collect();
        if n < all.len() {
            all.select_nth_unstable_by_key(n - 1, |&(open, ts, _)| (open, ts));
        }
        for (_, _, k) in all.into_iter().take(n) {
            if let Some(c) = self.map.remove(&k) {
                self.evicted += 1;
                self.retire(c, sink);
            }
        }
    }
}

impl<T: Default> Tracker<T> {
    /// Feeds one segment (in capture order).
    pub fn segment<S: Sink<T>>(&mut self, seg: &Segment<'_>, sink: &mut S) {
        if !self.manual_sweeps {
            self.since_sweep += 1;
            if self.since_sweep >= SWEEP_EVERY {
                self.since_sweep = 0;
                self.sweep(seg.ts_ns, sink);
            }
        }
        let (k, src_lo) = key(&seg.src, &seg.dst);
        // One hash lookup on the common path: the connection exists and is not being reused.
        if let Some(c) = self.map.get_mut(&k) {
            let reused = seg.flags.syn() && !seg.flags.ack() && {
                let h = &c.half[Side::Client.idx()];
                (c.closed || h.fin) && h.isn != Some(seg.seq)
            };
            if !reused {
                step(c, seg, src_lo, sink, &mut self.roles);
                return;
            }
            if let Some(old) = self.map.remove(&k) {
                self.retire(old, sink);
            }
        }
        if self.map.len() >= self.max_conns {
            self.evict(sink);
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.roles.met(seg.frame, seg.src, seg.dst);
        let fresh = new_conn(id, seg, src_lo, &mut self.roles);
        let boxed = match self.spare.pop() {
            Some(mut b) => {
                b.renew(fresh);
                b
            }
            None => Box::new(fresh),
        };
        let conn = self.map.insert(k, boxed);
        step(conn, seg, src_lo, sink, &mut self.roles);
    }

    /// Finishes every connection still open (end of capture), in order of
    /// their first frame (the same order whichever shard holds them).
    pub fn finish<S: Sink<T>>(&mut self, sink: &mut S) {
        let mut rest: Vec<Box<Conn<T>>> = self.map.drain().collect();
        rest.sort_by_key(|c| c.totals.first_frame);
        for c in rest {
            sink.close(&c.info, c.state, &c.totals);
        }
    }

    fn sweep<S: Sink<T>>(&mut self, now: i64, sink: &mut S) {
        let mut done: Vec<(u64, Key)> = self
            .map
            .iter()
            .filter(|(_, c)| {
                let quiet = now - c.totals.last_ts;
                (c.closed && quiet > LINGER_NS) || quiet > self.idle_ns
            })
            .map(|(k, c)| (c.totals.first_frame, k))
            .collect();
        // By first frame, not the map's order: the same order whichever shard holds them.
        done.sort_unstable_by_key(|d| d.0);
        for (_, k) in done {
            if let Some(c) = self.map.remove(&k) {
                self.retire(c, sink);
            }
        }
        // Once the traffic calms down, the boxes kept go with it: never more
        // than are open (a long `watch` must not keep a burst's worth).
        self.spare.truncate(self.map.len().max(SPARE_MIN));
    }

    /// Closes a connection, keeping its box for a new one.
    fn retire<S: Sink<T>>(&mut self, mut c: Box<Conn<T>>, sink: &mut S) {
        sink.close(&c.info, std::mem::take(&mut c.state), &c.totals);
        if self.spare.len() < self.map.len().max(SPARE_MIN) {
            self.spare.push(c);
        }
    }
}

impl<T> Conn<T> {
    /// Becomes `fresh`, keeping only its queues' buffers (emptied).
    fn renew(&mut self, mut fresh: Conn<T>) {
        for (new, old) in fresh.half.iter_mut().zip(&mut self.half) {
            new.keep_buffers(old);
        }
        *self = fresh;
    }
}

fn new_conn<T: Default>(id: ConnId, seg: &Segment<'_>, src_lo: bool, roles: &mut Book) -> Conn<T> {
    let (server, roles, settle) = if seg.flags.syn() {
        (if seg.flags.ack() { seg.src } else { seg.dst }, RoleSource::Handshake, Settle::Done)
    } else {
        let (server, basis) = roles.judge(seg.frame, seg.src, seg.dst);
        (server, basis, Settle::Open)
    };
    let client = if server == seg.src { seg.dst } else { seg.src };
    Conn {
        info: ConnInfo {
            id,
            client,
            server,
            roles,
            roles_open: settle == Settle::Open,
            roles_doubt: None,
            mss: [None; 2],
            rtt_to: [None; 2],
        },
        half: [Half::default(), Half::default()],
        state: T::default(),
        totals: Totals { first_ts: seg.ts_ns, first_frame: seg.frame, ..Totals::default() },
        closed: false,
        settle,
        client_lo: (client == seg.src) == src_lo,
    }
}

/// Whether an ACK's RTT sample is free of the ACKer's delayed-ACK timer:
/// a handshake, an ACK riding on data or a FIN (sent when the application
/// wrote, not by the timer), an ACK of more than one segment's worth (Linux
/// ACKs at once then: more than `rcv_mss`, which is the largest segment
/// received but at least 536 bytes), or one too quick to hold any timer.
/// Otherwise the first samples of a connection without a handshake would be
/// its delayed ACKs, the round trip to the ACKer would read ~40 ms too long,
/// and the ACKs of a Nagle stall would no longer look late.
fn prompt(s: &Sample, seg: &Segment<'_>, max_len: u32) -> bool {
    const RCV_MSS_MIN: u32 = 536;
    s.syn
        || seg.len > 0
        || seg.flags.fin()
        || s.bytes > i64::from(max_len.max(RCV_MSS_MIN))
        || s.ns < crate::detect::nagle::LATE_NS
}

fn step<T: Default, S: Sink<T>>(c: &mut Conn<T>, seg: &Segment<'_>, src_lo: bool, sink: &mut S, roles: &mut Book) {
    // The tracker's part and the first lines of the sink's (see `Conn`): a
    // packet touches most of them, and with many connections taking turns
    // they are rarely in the L1 cache; asked for at once, the misses overlap.
    crate::prefetch::first(c, std::mem::offset_of!(Conn<T>, state) + 128);
    if c.settle != Settle::Done && (seg.len > 0 || seg.flags.syn()) {
        settle(c, seg, sink, roles);
    }
    let from = if src_lo == c.client_lo { Side::Client } else { Side::Server };
    let (me, peer) = {
        let [a, b] = &mut c.half;
        if from == Side::Client { (a, b) } else { (b, a) }
    };
    c.totals.packets += 1;
    c.totals.last_ts = seg.ts_ns;
    c.totals.bytes[from.idx()] += u64::from(seg.len);

    let f = seg.flags;
    // Acknowledgement: frees the peer's in-flight data and samples the RTT to us.
    let ack = if f.ack() { peer.rel_ack(seg.ack) } else { None };
    if let Some(a) = ack
        && let Some(sample) = peer.acked(a, seg.ts_ns)
        && prompt(&sample, seg, peer.max_len)
    {
        let slot = &mut c.info.rtt_to[from.idx()];
        *slot = Some(slot.map_or(sample.ns, |s| s.min(sample.ns)));
    }
    let scale = match (me.wscale, peer.wscale) {
        (Some(s), Some(_)) if !f.syn() => s,
        _ => 0,
    };
    let window = u64::from(seg.window) << scale;
    // One event, built as a reset's; its kind is set before each other
    // hand-over (a segment with payload and a FIN makes two).
    let mut ev = Event { ts_ns: seg.ts_ns, frame: seg.frame, from, kind: EventKind::Rst, ack, window };

    if f.rst() {
        c.closed = true;
        sink.event(&c.info, &mut c.state, &ev, seg);
        return;
    }
    if f.syn() {
        if f.ack() {
            roles.server(seg.frame, seg.src);
        }
        me.wscale = seg.options.wscale;
        me.mss = seg.options.mss;
        me.timestamps = seg.options.timestamps.is_some();
        // What each side may send is bounded by its peer's MSS, less the 12
        // bytes of timestamps when both SYNs agreed on them (1460 → 1448).
        let ts = if me.timestamps && peer.timestamps { 12 } else { 0 };
        for (side, half) in [(from, &*peer), (from.other(), &*me)] {
            c.info.mss[side.idx()] = half.mss.map(|m| u32::from(m).saturating_sub(ts));
        }
        let retransmit = me.syn(seg.seq, seg.ts_ns, seg.frame);
        ev.kind = EventKind::Syn { retransmit };
        sink.event(&c.info, &mut c.state, &ev, seg);
        return;
    }
    let start = me.rel(seg.seq);
    if seg.len > 0 {
        let class = me.data(start, seg.len, seg.ts_ns, seg.frame);
        ev.kind = EventKind::Data { seq: start, len: seg.len, class };
        sink.event(&c.info, &mut c.state, &ev, seg);
    }
    if f.fin() {
        me.fin(start + i64::from(seg.len));
        if me.fin && peer.fin {
            c.closed = true;
        }
        ev.kind = EventKind::Fin;
        sink.event(&c.info, &mut c.state, &ev, seg);
    } else if seg.len == 0 {
        ev.kind = EventKind::Ack;
        sink.event(&c.info, &mut c.state, &ev, seg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Endpoint, Flags, TcpOptions};

    #[derive(Default)]
    struct Last(Option<ConnInfo>);

    impl Sink<()> for Last {
        fn event(&mut self, info: &ConnInfo, _: &mut (), _: &Event, _: &Segment<'_>) {
            self.0 = Some(info.clone());
        }
        fn close(&mut self, _: &ConnInfo, _: (), _: &Totals) {}
    }

    fn syn(from_client: bool, ack: bool, timestamps: bool) -> Segment<'static> {
        let (c, s) =
            (Endpoint { ip: [10, 0, 0, 2].into(), port: 40000 }, Endpoint { ip: [10, 0, 0, 1].into(), port: 80 });
        let (src, dst) = if from_client { (c, s) } else { (s, c) };
        Segment {
            frame: 1,
            ts_ns: 0,
            src,
            dst,
            seq: 7,
            ack: 0,
            flags: Flags(Flags::SYN | if ack { Flags::ACK } else { 0 }),
            window: 65535,
            len: 0,
            options: TcpOptions { mss: Some(1460), timestamps: timestamps.then_some((1, 0)), ..TcpOptions::default() },
            payload: &[],
            ip_id: None,
            tcp_options: &[],
        }
    }

    #[test]
    fn effective_mss_takes_timestamps_off_when_both_sides_use_them() {
        for (client_ts, server_ts, want) in [(true, true, 1448), (true, false, 1460), (false, false, 1460)] {
            let mut t: Tracker<()> = Tracker::default();
            let mut sink = Last::default();
            t.segment(&syn(true, false, client_ts), &mut sink);
            t.segment(&syn(false, true, server_ts), &mut sink);
            let info = sink.0.expect("events");
            assert_eq!(info.mss, [Some(want), Some(want)], "client ts {client_ts}, server ts {server_ts}");
            assert_eq!((info.client.port, info.roles), (40000, RoleSource::Handshake));
        }
    }

    /// Round trips to [client, server] after each segment.
    #[derive(Default)]
    struct Rtts(Vec<[Option<i64>; 2]>);

    impl Sink<()> for Rtts {
        fn event(&mut self, info: &ConnInfo, _: &mut (), _: &Event, _: &Segment<'_>) {
            self.0.push(info.rtt_to);
        }
        fn close(&mut self, _: &ConnInfo, _: (), _: &Totals) {}
    }

    #[test]
    fn delayed_acks_do_not_make_the_round_trip() {
        // No handshake; captured at the server (port 8080), 80 ms from the client.
        let (c, s) =
            (Endpoint { ip: [10, 0, 0, 2].into(), port: 40000 }, Endpoint { ip: [10, 0, 0, 1].into(), port: 8080 });
        const US: i64 = 1_000;
        const MS: i64 = 1_000_000;
        let mut t: Tracker<()> = Tracker::default();
        let mut sink = Rtts::default();
        let mut at = |ts_ns: i64, from_server: bool, seq: u32, ack: u32, len: u32| {
            let (src, dst) = if from_server { (s, c) } else { (c, s) };
            let flags = Flags(Flags::ACK | if len > 0 { Flags::PSH } else { 0 });
            let options = TcpOptions::default();
            let seg = Segment {
                frame: 0,
                ts_ns,
                src,
                dst,
                seq,
                ack,
                flags,
                window: 1000,
                len,
                options,
                payload: &[],
                ip_id: None,
                tcp_options: &[],
            };
            t.segment(&seg, &mut sink);
            *sink.0.last().unwrap()
        };
        at(0, false, 1, 5001, 80); // a request
        assert_eq!(at(50 * US, true, 5001, 81, 100), [None, Some(50 * US)], "a response: sent when the server wrote");
        // The client's delayed ACK, 42 ms timer + 80 ms: no round trip from it.
        assert_eq!(at(122 * MS, false, 81, 5101, 0)[0], None);
        at(122 * MS + 20 * US, true, 5101, 81, 600);
        // The next request carries the ACK of the rest: sent when the client wrote.
        assert_eq!(at(202 * MS + 520 * US, false, 81, 5701, 80)[0], Some(80 * MS + 500 * US));
        // Two full segments: Linux ACKs them at once.
        at(203 * MS, true, 5701, 161, 1448);
        at(203 * MS, true, 7149, 161, 1448);
        assert_eq!(at(283 * MS, false, 161, 8597, 0)[0], Some(80 * MS));
        // One small segment ACKed 79 ms later: a quick ACK or a timer, who knows; left out.
        at(300 * MS, true, 8597, 161, 100);
        assert_eq!(at(379 * MS, false, 161, 8697, 0)[0], Some(80 * MS));
    }

    #[derive(Default)]
    struct Closed(Vec<u16>);

    impl Sink<()> for Closed {
        fn event(&mut self, _: &ConnInfo, _: &mut (), _: &Event, _: &Segment<'_>) {}
        fn close(&mut self, info: &ConnInfo, _: (), _: &Totals) {
            self.0.push(info.client.port);
        }
    }

    /// A SYN from client port `port` at `t`.
    fn syn_from(port: u16, t: i64) -> Segment<'static> {
        let mut s = syn(true, false, false);
        s.src.port = port;
        s.ts_ns = t;
        s
    }

    #[test]
    fn the_cap_evicts_the_longest_silent_and_counts_them() {
        let mut t: Tracker<()> = Tracker::with_limits(1_000_000_000_000, 16);
        let mut sink = Closed::default();
        for i in 0..16u16 {
            t.segment(&syn_from(1000 + i, i64::from(i)), &mut sink);
        }
        assert_eq!((t.len(), t.evicted()), (16, 0));
        // Port 1000 speaks again: now the most recent, so ports 1001 and 1002 go first.
        t.segment(&syn_from(1000, 100), &mut sink);
        t.segment(&syn_from(2000, 101), &mut sink);
        sink.0.sort();
        assert_eq!(sink.0, vec![1001, 1002], "an eighth of the cap, longest silent first");
        assert_eq!((t.len(), t.evicted()), (15, 2));
        for i in 0..1000u16 {
            t.segment(&syn_from(3000 + i, 200 + i64::from(i)), &mut sink);
            assert!(t.len() <= 16);
        }
        assert_eq!(t.evicted() as usize, sink.0.len());
    }

    #[test]
    fn expire_finishes_idle_connections_on_the_callers_clock() {
        let mut t: Tracker<()> = Tracker::with_limits(5_000, 100);
        let mut sink = Closed::default();
        t.segment(&syn_from(1000, 0), &mut sink);
        t.segment(&syn_from(1001, 4_000), &mut sink);
        t.expire(6_000, &mut sink);
        assert_eq!((sink.0.clone(), t.len(), t.evicted()), (vec![1000], 1, 0), "idle, not evicted");
    }

    /// A connection in a box a closed one left starts afresh: nothing of
    /// the old one's flight (here a segment never acknowledged) reaches it.
    #[test]
    fn a_spare_box_holds_nothing_of_its_last_connection() {
        const MS: i64 = 1_000_000;
        let mut t: Tracker<()> = Tracker::with_limits(1_000_000_000_000, 100).manual_sweeps();
        let mut sink = Rtts::default();
        let server = Endpoint { ip: [10, 0, 0, 1].into(), port: 80 };
        let mk = |port: u16, ts_ms: i64, from_client: bool, flags: u8, seq: u32, ack: u32, len: u32| {
            let client = Endpoint { ip: [10, 0, 0, 2].into(), port };
            let (src, dst) = if from_client { (client, server) } else { (server, client) };
            Segment {
                frame: 0,
                ts_ns: ts_ms * MS,
                src,
                dst,
                seq,
                ack,
                flags: Flags(flags),
                window: 1000,
                len,
                options: TcpOptions::default(),
                payload: &[],
                ip_id: None,
                tcp_options: &[],
            }
        };
        let seg = |t: &mut Tracker<()>, sink: &mut Rtts, port, ts_ms, from_client, flags, seq, ack, len| {
            t.segment(&mk(port, ts_ms, from_client, flags, seq, ack, len), sink);
            sink.0.last().copied().unwrap()
        };
        let (syn, syn_ack, ack, rst) = (Flags::SYN, Flags::SYN | Flags::ACK, Flags::ACK, Flags::RST);
        // The first connection: 1,000 bytes from the server never acknowledged, then a reset.
        seg(&mut t, &mut sink, 40000, 0, true, syn, 100, 0, 0);
        seg(&mut t, &mut sink, 40000, 1, false, syn_ack, 500, 101, 0);
        seg(&mut t, &mut sink, 40000, 2, true, ack, 101, 501, 0);
        seg(&mut t, &mut sink, 40000, 3, false, ack, 501, 101, 1000);
        seg(&mut t, &mut sink, 40000, 4, true, rst, 101, 0, 0);
        t.expire(10_000 * MS, &mut sink);
        assert_eq!((t.len(), t.spare.len()), (0, 1));
        // The next takes its box, met mid-stream (no SYN starts its queues
        // afresh): 100 bytes from the server, acknowledged 5 ms later.
        seg(&mut t, &mut sink, 40001, 20_000, false, ack, 501, 101, 100);
        assert_eq!(t.spare.len(), 0, "the box was taken");
        let rtt = seg(&mut t, &mut sink, 40001, 20_005, true, ack, 101, 601, 0);
        assert_eq!(rtt, [Some(5 * MS), None], "the round trip of this connection's own segment");
    }

    /// The boxes kept for new connections follow the open ones down.
    #[test]
    fn spare_boxes_never_outnumber_the_open_connections() {
        let mut t: Tracker<()> = Tracker::with_limits(1_000, 100_000).manual_sweeps();
        let mut sink = Closed::default();
        for i in 0..2_000u16 {
            t.segment(&syn_from(1000 + i, 0), &mut sink);
        }
        // Half go idle first, then the rest.
        for i in 0..1_000u16 {
            t.segment(&syn_from(1000 + i, 500), &mut sink);
        }
        t.expire(1_200, &mut sink);
        assert_eq!((t.len(), t.spare.len()), (1_000, 1_000));
        t.expire(2_000, &mut sink);
        assert_eq!((t.len(), t.spare.len()), (0, SPARE_MIN));
        assert_eq!(sink.0.len(), 2_000);
    }
}
