//! The kernel's own proof of a hold: for each write on a TCP socket, when
//! its bytes were handed to TCP (the call's exit) and when the last of them
//! left the host (a device's transmit), joined by sequence number. A pure
//! function of what the eBPF programs recorded, so it is tested on
//! hand-built records.
//!
//! It tells apart what the wire cannot: a Nagle hold (the bytes sat in the
//! send queue behind unacknowledged data until an ACK released them), an
//! application that writes late (its bytes left during the call: 0 ms held),
//! and bytes dropped before they left the host (netfilter, a qdisc), which
//! TCP keeps and sends again on the next ACK or timer.

use super::events::Nagle;
use std::collections::HashMap;

/// A write as the kernel saw it at the call's exit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Write {
    /// The socket (an id).
    pub sk: u64,
    /// Call entry (or a time before it: on the socket tracepoints, the
    /// thread's previous record) and exit, ns.
    pub t_enter: u64,
    pub t_exit: u64,
    /// Bytes handed to TCP.
    pub bytes: u32,
    /// `write_seq` after the call: the end of its bytes.
    pub end: u32,
    /// `snd_nxt` after the call: what TCP had sent by then.
    pub snd_nxt: u32,
    /// Segments sent and not yet acknowledged, after the call.
    pub in_flight: bool,
    /// Send MSS.
    pub mss: u32,
    /// Nagle state at the write.
    pub nagle: Nagle,
    /// A device sent its last byte during the call.
    pub left: bool,
}

/// What happened to a segment of a watched socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Handed to a device (`net_dev_start_xmit`).
    Out,
    /// Re-sent by TCP (`tcp_retransmit_skb`).
    Again,
    /// Dropped before a device had it (`kfree_skb`: netfilter, a qdisc).
    Dropped,
}

/// A segment of a watched socket handed to a device, re-sent or dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Xmit {
    pub sk: u64,
    pub t: u64,
    /// First byte and end.
    pub seq: u32,
    pub end: u32,
    pub what: Sent,
}

/// What happened to a write's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Left the host during the call.
    AtOnce,
    /// Held by Nagle (small, unacknowledged data in flight, TCP_NODELAY off)
    /// this long after the call, then sent.
    Nagle(u64),
    /// Held in the send queue for another reason (TCP_CORK, MSG_MORE, the
    /// congestion or receive window) this long.
    Held(u64),
    /// Lost before it left the host (dropped below TCP, or sent and re-sent);
    /// it left this long after the call, in a re-send. Not a hold.
    Resent(u64),
    /// TCP sent it at once; a device sent it this long after (queued below TCP).
    Queued(u64),
    /// Its departure was not seen (the trace ended first, or records were lost).
    Unseen,
}

/// Whether `a` comes at or after `b` in sequence space.
fn after_eq(a: u32, b: u32) -> bool {
    a.wrapping_sub(b) as i32 >= 0
}

/// A re-send is matched to the transmit it caused within this long.
const RESEND_MATCH_NS: u64 = 1_000_000;

/// The fate of each write (`xmits` in time order).
pub(crate) fn join(writes: &[Write], xmits: &[Xmit]) -> Vec<Fate> {
    // Each write looks only at its socket's segments, from its call on: a
    // busy trace has hundreds of thousands of each.
    let mut by_sock: HashMap<u64, Vec<&Xmit>> = HashMap::new();
    for x in xmits {
        by_sock.entry(x.sk).or_default().push(x);
    }
    writes.iter().map(|w| fate(w, by_sock.get(&w.sk).map_or(&[][..], Vec::as_slice))).collect()
}

/// The fate of write `w`, given its socket's segments in time order.
fn fate(w: &Write, xs: &[&Xmit]) -> Fate {
    let unsent = w.end.wrapping_sub(w.snd_nxt) as i32;
    if w.bytes == 0 {
        return Fate::Unseen;
    }
    if unsent <= 0 && w.left {
        return Fate::AtOnce;
    }
    // A re-send matched to the departure may precede it a little.
    let xs = &xs[xs.partition_point(|x| x.t < w.t_enter.saturating_sub(RESEND_MATCH_NS))..];
    let last = w.end.wrapping_sub(1);
    let covers = |x: &Xmit| after_eq(last, x.seq) && !after_eq(last, x.end);
    let Some(dep) = xs.iter().find(|x| x.what == Sent::Out && x.t >= w.t_enter && covers(x)) else {
        return match xs.iter().find(|x| x.what == Sent::Again && x.t >= w.t_enter && covers(x)) {
            Some(r) => Fate::Resent(r.t.saturating_sub(w.t_exit)),
            None => Fate::Unseen,
        };
    };
    let wait = dep.t.saturating_sub(w.t_exit);
    let resent = xs
        .iter()
        .take_while(|x| x.t <= dep.t + RESEND_MATCH_NS)
        .any(|x| x.what == Sent::Again && covers(x) && x.t.abs_diff(dep.t) <= RESEND_MATCH_NS);
    // Dropped on its way out after the call began: it waited for TCP to try again, not for Nagle.
    let dropped =
        xs.iter().take_while(|x| x.t <= dep.t).any(|x| x.what == Sent::Dropped && covers(x) && x.t >= w.t_enter);
    if resent || dropped {
        Fate::Resent(wait)
    } else if unsent <= 0 {
        Fate::Queued(wait)
    } else if w.nagle == Nagle::On && w.in_flight && (unsent as u32) < w.mss.max(1) {
        Fate::Nagle(wait)
    } else {
        Fate::Held(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn w(t: u64, end: u32, bytes: u32, snd_nxt: u32, left: bool) -> Write {
        Write {
            sk: 7,
            t_enter: t,
            t_exit: t + 10_000,
            bytes,
            end,
            snd_nxt,
            in_flight: true,
            mss: 1448,
            nagle: Nagle::On,
            left,
        }
    }

    fn x(t: u64, seq: u32, end: u32, retrans: bool) -> Xmit {
        Xmit { sk: 7, t, seq, end, what: if retrans { Sent::Again } else { Sent::Out } }
    }

    #[test]
    fn a_second_small_write_held_until_the_ack_is_a_nagle_hold() {
        // Header 238 B left at once; body 587 B queued behind it, sent 43.6 ms later.
        let writes = [w(0, 1238, 238, 1238, true), w(20_000, 1825, 587, 1238, false)];
        let xmits = [x(5_000, 1000, 1238, false), x(20_000 + 10_000 + 43_600_000, 1238, 1825, false)];
        assert_eq!(join(&writes, &xmits), vec![Fate::AtOnce, Fate::Nagle(43_600_000)]);
    }

    #[test]
    fn other_holds_are_not_called_nagle() {
        let mut corked = w(0, 1825, 587, 1238, false);
        corked.nagle = Nagle::Corked;
        let mut nothing_in_flight = w(0, 1825, 587, 1238, false);
        nothing_in_flight.in_flight = false;
        let xmits = [x(2 * MS, 1238, 1825, false)];
        let got = join(&[corked, nothing_in_flight], &xmits);
        assert_eq!(got, vec![Fate::Held(2 * MS - 10_000); 2]);
    }

    #[test]
    fn bytes_tcp_sent_at_once_that_leave_in_a_resend_are_not_a_hold() {
        // snd_nxt reached the end in the call, but no device sent it then: a
        // local drop. The next ACK showed it missing; the re-send left 41 ms later.
        let writes = [w(0, 1825, 587, 1825, false)];
        let resend = [x(41 * MS, 1238, 1825, false), x(41 * MS + 2_000, 1238, 1825, true)];
        assert_eq!(join(&writes, &resend), vec![Fate::Resent(41 * MS - 10_000)]);
        // Only the re-send was recorded.
        assert_eq!(join(&writes, &resend[1..]), vec![Fate::Resent(41 * MS + 2_000 - 10_000)]);
        // Without a re-send it was queued below TCP (a qdisc), not held by it.
        assert_eq!(join(&writes, &resend[..1]), vec![Fate::Queued(41 * MS - 10_000)]);
    }

    #[test]
    fn bytes_dropped_on_their_way_out_are_not_a_nagle_hold() {
        // Nagle on, data in flight, the piece unsent at the call's exit: it
        // looks like a Nagle hold, but its one try was dropped (netfilter) and
        // TCP sent it again when the ACK came 43 ms later.
        let writes = [w(0, 1825, 587, 1238, false)];
        let drop = Xmit { sk: 7, t: 15_000, seq: 1238, end: 1825, what: Sent::Dropped };
        let out = x(43 * MS, 1238, 1825, false);
        assert_eq!(join(&writes, &[drop, out]), vec![Fate::Resent(43 * MS - 10_000)]);
        // Without the drop it is the Nagle hold; a drop of another socket or other bytes changes nothing.
        assert_eq!(join(&writes, &[out]), vec![Fate::Nagle(43 * MS - 10_000)]);
        let other = Xmit { sk: 8, ..drop };
        let earlier = Xmit { seq: 1000, end: 1238, ..drop };
        assert_eq!(join(&writes, &[other, earlier, out]), vec![Fate::Nagle(43 * MS - 10_000)]);
        // A drop is never taken for the departure.
        assert_eq!(join(&writes, &[drop]), vec![Fate::Unseen]);
    }

    #[test]
    fn sequence_numbers_wrap_and_other_sockets_do_not_match() {
        let writes = [w(0, 100, 200, 0xFFFF_FFF0, false)];
        let mut other = x(MS, 0xFFFF_FFF0, 100, false);
        other.sk = 8;
        assert_eq!(join(&writes, &[other]), vec![Fate::Unseen]);
        let mine = x(MS, 0xFFFF_FFF0, 100, false);
        assert_eq!(join(&writes, &[other, mine]), vec![Fate::Nagle(MS - 10_000)]);
        // A transmit that ends before the write's last byte is not its departure.
        assert_eq!(join(&writes, &[x(MS, 0xFFFF_FFF0, 99, false)]), vec![Fate::Unseen]);
    }
}
