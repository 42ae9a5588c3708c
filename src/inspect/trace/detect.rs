//! Write-write-read, found in recorded calls: a pure function of the events
//! and sockets, so it is tested on hand-built sequences.
//!
//! A response is the run of successful writes on one socket with no read on
//! that socket between them; it ends at the next read on the socket (the
//! server waits for the next request). Write-write-read is a response of two
//! or more writes smaller than the MSS: with Nagle on, the second waits for
//! the ACK of the first, which a peer with nothing to send delays ~40 ms.

use super::events::{Dir, Event, Nagle, Role, Sock};
use std::collections::{BTreeMap, HashSet};

/// Send MSS assumed when tcp_info could not tell (Ethernet, IPv4, timestamps).
pub(crate) const DEFAULT_MSS: u32 = 1448;

/// Responses of one kind of socket (its role and Nagle state at the writes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Kind {
    /// Server or client side.
    pub role: Option<Role>,
    /// Nagle on, off, corked or unknown.
    pub nagle: Option<Nagle>,
    /// Sockets with a response of this kind.
    pub sockets: u32,
    /// Finished responses.
    pub responses: u64,
    /// Written in one piece.
    pub single: u64,
    /// Written in two or more pieces.
    pub in_pieces: u64,
    /// In two or more pieces smaller than the MSS, then a read.
    pub write_write_read: u64,
}

/// One response picked to show the pattern.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Example {
    /// Its socket (index into the socket table).
    pub sock: u32,
    /// Nagle state at its writes.
    pub nagle: Nagle,
    /// Indices (into the events) of its writes and what followed on that
    /// socket and in the writing thread, up to the read that returned data.
    pub events: Vec<usize>,
    /// Events left out of the middle of a long sequence.
    pub elided: usize,
    /// Last write → the next read returning data, ns.
    pub gap_ns: Option<u64>,
}

/// What the recorded calls show.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Detection {
    /// Counts per kind of socket, server side first.
    pub kinds: Vec<Kind>,
    /// Finished responses, all kinds.
    pub responses: u64,
    /// Responses still being written (or not followed by a read) when the trace
    /// ended, or when the programs were detached for a gap. (Writes on a
    /// socket before its first read in the window, or after a gap, are no
    /// response at all: the response may have begun before.)
    pub unfinished: u64,
    /// Responses on Nagle sockets.
    pub nagle_responses: u64,
    /// Of those, written in two or more pieces.
    pub nagle_in_pieces: u64,
    /// Write-write-read on Nagle sockets: the stall's shape.
    pub write_write_read: u64,
    /// Write-write-read on Nagle sockets that were a new connection's first
    /// response: not counted, as a new connection's peer ACKs at once (quick-ACK mode).
    pub first_responses: u64,
    /// Median of last write → next request's data, over write-write-read on Nagle sockets, ns.
    pub gap_wwr_ns: Option<u64>,
    /// The same over every other finished response, ns.
    pub gap_other_ns: Option<u64>,
    /// Sockets with writes whose MSS was not known ([`DEFAULT_MSS`] used).
    pub mss_defaulted: u32,
    /// One sequence to show.
    pub example: Option<Example>,
}

/// Most lines in an example.
const EXAMPLE_LINES: usize = 12;

struct Response {
    sock: u32,
    writes: Vec<usize>,
    small: usize,
    nagle: Nagle,
    first: bool,
    /// The read that returned the next request's data.
    data_read: Option<usize>,
}

impl Response {
    fn in_pieces(&self) -> bool {
        self.writes.len() >= 2
    }

    fn wwr(&self) -> bool {
        self.in_pieces() && self.small >= 2
    }

    fn counted_wwr(&self) -> bool {
        self.wwr() && self.nagle == Nagle::On && !self.first
    }

    fn gap(&self, ev: &[Event]) -> Option<u64> {
        let last = *self.writes.last()?;
        Some(ev[self.data_read?].end_ns.saturating_sub(ev[last].t_ns))
    }
}

/// Finds write-write-read in `events` (in entry order) on `socks`. `gaps`
/// (ns since the window began, from, to; in order) are times when calls were
/// not seen: each is taken as a new start of the trace, and the calls
/// recorded inside one (made as the programs came off) are left out.
pub(crate) fn detect(events: &[Event], socks: &[Sock], gaps: &[(u64, u64)]) -> Detection {
    let mut d = Detection::default();
    let mss = |s: u32| socks.get(s as usize).and_then(|s| s.mss).unwrap_or(DEFAULT_MSS);
    let mut open: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    let mut done_on: BTreeMap<u32, u64> = BTreeMap::new();
    // Finished responses on a socket whose next request's data is not read yet.
    let mut awaiting: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    let mut resps: Vec<Response> = Vec::new();
    // Sockets whose writes can start a response: accepted in the window, or
    // read from in it. On any other, the first writes seen may be the end of a
    // response begun before the trace attached (one piece of two looks single).
    let mut known: HashSet<u32> =
        socks.iter().enumerate().filter(|(_, k)| k.accepted_in_window).map(|(s, _)| s as u32).collect();
    // The next gap, and whether the state was already cut for it.
    let (mut g, mut cut) = (0, usize::MAX);
    for (i, e) in events.iter().enumerate() {
        while g < gaps.len() && e.t_ns >= gaps[g].0 {
            if cut != g {
                // Unseen calls follow: what was open cannot be finished.
                cut = g;
                d.unfinished += open.values().filter(|w| !w.is_empty()).count() as u64;
                open.clear();
                awaiting.clear();
                known.clear();
            }
            if e.t_ns < gaps[g].1 {
                break;
            }
            g += 1;
        }
        if g < gaps.len() && e.t_ns >= gaps[g].0 {
            continue;
        }
        let Some(s) = e.sock else { continue };
        match e.dir {
            Dir::Write if e.ret > 0 && known.contains(&s) => open.entry(s).or_default().push(i),
            Dir::Read => {
                known.insert(s);
                if let Some(writes) = open.remove(&s).filter(|w| !w.is_empty()) {
                    let n = done_on.entry(s).or_insert(0);
                    let first = *n == 0 && socks.get(s as usize).is_some_and(|k| k.accepted_in_window);
                    *n += 1;
                    let small = writes
                        .iter()
                        .filter(|&&w| !events[w].call.counts_messages() && (events[w].ret as u64) < u64::from(mss(s)))
                        .count();
                    let nagle = if writes.iter().any(|&w| events[w].nagle == Nagle::Corked) {
                        Nagle::Corked
                    } else {
                        events[*writes.last().unwrap_or(&i)].nagle
                    };
                    awaiting.entry(s).or_default().push(resps.len());
                    resps.push(Response { sock: s, writes, small, nagle, first, data_read: None });
                }
                if e.ret >= 0
                    && let Some(waiting) = awaiting.remove(&s)
                {
                    // Data (or the end of the stream: no gap then).
                    for r in waiting {
                        resps[r].data_read = (e.ret > 0).then_some(i);
                    }
                }
            }
            _ => {}
        }
    }
    d.unfinished += open.values().filter(|w| !w.is_empty()).count() as u64;

    let mut kinds: BTreeMap<(Role, Nagle), (Kind, HashSet<u32>)> = BTreeMap::new();
    let (mut gaps_wwr, mut gaps_other) = (Vec::new(), Vec::new());
    for r in &resps {
        let role = socks.get(r.sock as usize).map_or(Role::Unknown, |s| s.role);
        let (k, set) = kinds.entry((role, r.nagle)).or_default();
        set.insert(r.sock);
        k.responses += 1;
        if r.in_pieces() {
            k.in_pieces += 1;
        } else {
            k.single += 1;
        }
        k.write_write_read += u64::from(r.wwr());
        d.responses += 1;
        if r.nagle == Nagle::On {
            d.nagle_responses += 1;
            d.nagle_in_pieces += u64::from(r.in_pieces());
            if r.wwr() && r.first {
                d.first_responses += 1;
            }
        }
        if r.counted_wwr() {
            d.write_write_read += 1;
            gaps_wwr.extend(r.gap(events));
        } else if !r.first {
            gaps_other.extend(r.gap(events));
        }
    }
    d.kinds = kinds
        .into_iter()
        .map(|((role, nagle), (mut k, set))| {
            k.role = Some(role);
            k.nagle = Some(nagle);
            k.sockets = set.len() as u32;
            k
        })
        .collect();
    d.gap_wwr_ns = median(&mut gaps_wwr);
    d.gap_other_ns = median(&mut gaps_other);
    let written: HashSet<u32> = resps.iter().map(|r| r.sock).collect();
    d.mss_defaulted = written.iter().filter(|&&s| socks.get(s as usize).is_none_or(|k| k.mss.is_none())).count() as u32;
    d.example = pick_example(events, &resps, d.gap_wwr_ns);
    d
}

fn median(v: &mut [u64]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[v.len() / 2])
}

/// The counted write-write-read whose gap is nearest the median (the typical
/// one, not an outlier); else any response in small pieces; else any in pieces.
fn pick_example(ev: &[Event], resps: &[Response], median_gap: Option<u64>) -> Option<Example> {
    let typical = resps.iter().filter(|r| r.counted_wwr()).min_by_key(|r| match (r.gap(ev), median_gap) {
        (Some(g), Some(m)) => g.abs_diff(m),
        _ => u64::MAX,
    });
    let r = typical
        .or_else(|| resps.iter().find(|r| r.wwr() && r.nagle == Nagle::On))
        .or_else(|| resps.iter().find(|r| r.wwr()))
        .or_else(|| resps.iter().find(|r| r.in_pieces()))?;
    let from = r.writes[0];
    let to = r.data_read.unwrap_or(*r.writes.last()?);
    let writers: HashSet<u32> = r.writes.iter().map(|&w| ev[w].tid).collect();
    let mut idx: Vec<usize> = (from..=to)
        .filter(|&i| ev[i].sock == Some(r.sock) || (ev[i].dir == Dir::Wait && writers.contains(&ev[i].tid)))
        .collect();
    let mut elided = 0;
    if idx.len() > EXAMPLE_LINES {
        elided = idx.len() - EXAMPLE_LINES;
        let tail = idx.split_off(idx.len() - EXAMPLE_LINES / 2);
        idx.truncate(EXAMPLE_LINES - tail.len());
        idx.extend(tail);
    }
    Some(Example { sock: r.sock, nagle: r.nagle, events: idx, elided, gap_ns: r.gap(ev) })
}

#[cfg(test)]
mod tests {
    use super::super::events::Call;
    use super::*;

    const MS: u64 = 1_000_000;

    fn sock(accepted_in_window: bool) -> Sock {
        Sock {
            pid: 10,
            fd: 7,
            inode: 99,
            role: Role::Accepted,
            local: Some("127.0.0.1:80".into()),
            port: Some(80),
            peer: Some("127.0.0.1:5000".into()),
            mss: Some(1448),
            accepted_in_window,
        }
    }

    /// Builds events: `t` in ms; `dur` in ms; a wait has no socket.
    struct B(Vec<Event>);

    impl B {
        /// Starting with a request read on socket 0 (the writes that follow
        /// can then start a response: see [`detect`]).
        fn new() -> B {
            B(Vec::new()).r(-1.0, 0.01, 78)
        }
        fn ev(mut self, t: f64, dur: f64, call: Call, sock: Option<u32>, ret: i64, nagle: Nagle) -> B {
            let t_ns = (t * MS as f64) as u64;
            self.0.push(Event {
                t_ns,
                end_ns: t_ns + (dur * MS as f64) as u64,
                tid: 10,
                call,
                dir: call.dir(),
                sock,
                fd: if sock.is_some() { 7 } else { -1 },
                ret,
                nagle,
            });
            self
        }
        fn w(self, t: f64, call: Call, n: i64, nagle: Nagle) -> B {
            self.ev(t, 0.01, call, Some(0), n, nagle)
        }
        fn r(self, t: f64, dur: f64, n: i64) -> B {
            self.ev(t, dur, Call::Recvfrom, Some(0), n, Nagle::Unknown)
        }
        fn wait(self, t: f64, dur: f64) -> B {
            self.ev(t, dur, Call::EpollWait, None, 1, Nagle::Unknown)
        }
    }

    /// nginx-like: request read, writev header + sendfile body, EAGAIN, epoll
    /// wait ~40 ms (the held body), the next request; `n` times, every 45 ms.
    fn nginx(n: usize, nagle: Nagle, split: bool) -> Vec<Event> {
        let mut b = B(Vec::new());
        for k in 0..n {
            let t = k as f64 * 45.0;
            b = b.r(t, 0.01, 78);
            b = if split {
                b.w(t + 0.1, Call::Writev, 212, nagle).w(t + 0.2, Call::Sendfile, 600, nagle)
            } else {
                b.w(t + 0.1, Call::Writev, 812, nagle)
            };
            b = b.r(t + 0.3, 0.01, -libc::EAGAIN as i64).wait(t + 0.4, 44.0);
        }
        b.r(n as f64 * 45.0, 0.01, 78).0
    }

    #[test]
    fn split_responses_on_a_nagle_socket_are_write_write_read() {
        let ev = nginx(10, Nagle::On, true);
        let d = detect(&ev, &[sock(false)], &[]);
        assert_eq!((d.responses, d.nagle_responses, d.nagle_in_pieces, d.write_write_read), (10, 10, 10, 10));
        assert_eq!(d.unfinished, 0);
        let k = &d.kinds[0];
        assert_eq!(
            (k.role, k.nagle, k.sockets, k.single, k.in_pieces),
            (Some(Role::Accepted), Some(Nagle::On), 1, 0, 10)
        );
        // Last write at +0.2 ms, next request's data read at 45.01 ms.
        let gap = d.gap_wwr_ns.unwrap();
        assert!((44 * MS..46 * MS).contains(&gap), "{gap}");
        let ex = d.example.unwrap();
        let calls: Vec<&str> = ex.events.iter().map(|&i| ev[i].call.name()).collect();
        assert_eq!(calls, ["writev", "sendfile", "recvfrom", "epoll_wait", "recvfrom"]);
        assert_eq!(ev[*ex.events.last().unwrap()].ret, 78);
        assert_eq!(d.mss_defaulted, 0);
    }

    #[test]
    fn single_writes_are_counted_and_not_blamed() {
        let ev = nginx(10, Nagle::On, false);
        let d = detect(&ev, &[sock(false)], &[]);
        assert_eq!((d.responses, d.nagle_in_pieces, d.write_write_read), (10, 0, 0));
        assert_eq!(d.kinds[0].single, 10);
        assert!(d.example.is_none());
        assert!(d.gap_wwr_ns.is_none() && d.gap_other_ns.is_some());
    }

    #[test]
    fn pieces_with_nodelay_or_cork_are_not_the_stall() {
        for nagle in [Nagle::Off, Nagle::Corked] {
            let d = detect(&nginx(5, nagle, true), &[sock(false)], &[]);
            assert_eq!((d.responses, d.nagle_responses, d.write_write_read), (5, 0, 0), "{nagle:?}");
            assert_eq!((d.kinds[0].nagle, d.kinds[0].in_pieces, d.kinds[0].write_write_read), (Some(nagle), 5, 5));
            // The pieces are still shown.
            assert_eq!(d.example.unwrap().nagle, nagle);
        }
        // One corked piece makes the whole response corked (MSG_MORE on the header).
        let ev =
            B::new().w(0.0, Call::Sendto, 100, Nagle::Corked).w(0.1, Call::Sendto, 100, Nagle::On).r(0.2, 1.0, 50).0;
        assert_eq!(detect(&ev, &[sock(false)], &[]).kinds[0].nagle, Some(Nagle::Corked));
    }

    #[test]
    fn full_segments_are_not_small_pieces() {
        let ev = B::new().w(0.0, Call::Write, 200, Nagle::On).w(0.1, Call::Write, 64_000, Nagle::On).r(0.2, 1.0, 50).0;
        let d = detect(&ev, &[sock(false)], &[]);
        assert_eq!((d.nagle_in_pieces, d.write_write_read), (1, 0));
        // Without tcp_info's MSS, 1448 is assumed, and counted.
        let mut s = sock(false);
        s.mss = None;
        assert_eq!(detect(&ev, &[s], &[]).mss_defaulted, 1);
        // With loopback's MSS both pieces are small.
        let mut s = sock(false);
        s.mss = Some(65_483);
        assert_eq!(detect(&ev, &[s], &[]).write_write_read, 1);
    }

    #[test]
    fn a_new_connections_first_response_and_unfinished_ones_are_not_counted() {
        let ev = nginx(3, Nagle::On, true);
        let d = detect(&ev, &[sock(true)], &[]);
        assert_eq!((d.responses, d.write_write_read, d.first_responses), (3, 2, 1));
        // The trace ends between the writes and the next read.
        let ev = B::new().w(0.0, Call::Write, 200, Nagle::On).w(0.1, Call::Write, 200, Nagle::On).0;
        let d = detect(&ev, &[sock(false)], &[]);
        assert_eq!((d.responses, d.unfinished, d.write_write_read), (0, 1, 0));
        assert!(d.example.is_none());
    }

    /// A gap (the programs detached) is a new start: the response it cuts is
    /// unfinished, the writes after it wait for the socket's next read, and a
    /// call recorded inside it (as the programs came off) is left out.
    /// Without the gap the cut response would count as one written whole.
    #[test]
    fn a_gap_in_the_calls_cuts_the_responses_around_it() {
        let (from, to) = ((3.0 * 45.0 + 0.15) * MS as f64, (5.0 * 45.0 + 0.05) * MS as f64);
        let ev: Vec<Event> = nginx(10, Nagle::On, true)
            .into_iter()
            .filter(|e| {
                let t = e.t_ns as f64;
                // Unseen while detached, but for one read made as they came off.
                t < from || t >= to || (e.dir == Dir::Read && e.ret < 0 && t < from + 0.2 * MS as f64)
            })
            .collect();
        assert!(ev.iter().any(|e| (from..to).contains(&(e.t_ns as f64))));
        let gap = [(from as u64, to as u64)];
        let d = detect(&ev, &[sock(false)], &gap);
        assert_eq!((d.responses, d.kinds[0].single, d.write_write_read, d.unfinished), (7, 0, 7, 1));
        let gap_ns = d.gap_wwr_ns.unwrap();
        assert!((44 * MS..46 * MS).contains(&gap_ns), "{gap_ns}");
        let blind = detect(&ev, &[sock(false)], &[]);
        assert_eq!((blind.responses, blind.kinds[0].single), (9, 1));
    }

    #[test]
    fn failed_writes_and_other_sockets_do_not_join_a_response() {
        let mut two = vec![sock(false), sock(false)];
        two[1].fd = 8;
        let ev = B::new()
            .ev(-0.5, 0.01, Call::Read, Some(1), 60, Nagle::Unknown)
            .w(0.0, Call::Write, 200, Nagle::On)
            .w(0.1, Call::Write, -libc::EAGAIN as i64, Nagle::On)
            .ev(0.2, 0.01, Call::Write, Some(1), 300, Nagle::On)
            .r(0.3, 0.01, 50)
            .ev(0.4, 0.01, Call::Read, Some(1), 0, Nagle::Unknown)
            .0;
        let d = detect(&ev, &two, &[]);
        assert_eq!((d.responses, d.nagle_in_pieces, d.write_write_read), (2, 0, 0));
        // The second socket's peer closed: no gap for it.
        assert_eq!(d.gap_other_ns, Some((0.3 * MS as f64) as u64 + 10_000));
    }

    #[test]
    fn nothing_recorded_is_nothing_found() {
        let d = detect(&[], &[], &[]);
        assert_eq!(d, Detection::default());
        // Waits alone, and events on a socket index with no table entry: no panic.
        let ev = B::new().wait(0.0, 1.0).w(1.0, Call::Write, 10, Nagle::On).w(2.0, Call::Write, 10, Nagle::On);
        let ev = ev.r(3.0, 1.0, 5).0;
        let d = detect(&ev, &[], &[]);
        assert_eq!((d.write_write_read, d.mss_defaulted), (1, 1));
        assert_eq!(d.kinds[0].role, Some(Role::Unknown));
    }

    #[test]
    fn long_examples_keep_their_start_and_end() {
        let mut b = B::new().w(0.0, Call::Write, 10, Nagle::On).w(0.1, Call::Write, 10, Nagle::On);
        for k in 0..30 {
            b = b.wait(0.2 + f64::from(k) * 0.1, 0.05);
        }
        let ev = b.r(5.0, 0.1, 20).0;
        let ex = detect(&ev, &[sock(false)], &[]).example.unwrap();
        assert_eq!((ex.events.len(), ex.elided), (EXAMPLE_LINES, 21));
        // The first write follows the request's read (event 0).
        assert_eq!((ex.events[0], *ex.events.last().unwrap()), (1, ev.len() - 1));
    }

    #[test]
    fn writes_before_a_sockets_first_read_in_the_window_are_no_response() {
        // Attached between a response's two pieces: the second looks like a
        // response of one write, and would be counted as single.
        let ev = B(Vec::new()).w(0.0, Call::Sendto, 300, Nagle::On).r(44.0, 0.01, 78);
        let ev = ev.w(44.1, Call::Sendto, 100, Nagle::On).w(44.2, Call::Sendto, 300, Nagle::On).r(88.0, 0.01, 78).0;
        let d = detect(&ev, &[sock(false)], &[]);
        assert_eq!((d.responses, d.kinds[0].single, d.kinds[0].in_pieces, d.write_write_read), (1, 0, 1, 1));
        // A connection accepted in the window has no response begun before it.
        let d = detect(&ev, &[sock(true)], &[]);
        assert_eq!((d.responses, d.kinds[0].single), (2, 1));
    }
}
