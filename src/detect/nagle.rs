//! Nagle + delayed ACK.
//!
//! Signature, for a sender A and its peer B (see KNOWLEDGE.md §1):
//! 1. A sends a small (sub-MSS) new segment S1;
//! 2. B sends no data, and its first ACK covering S1 is a pure ACK that comes
//!    late: at least [`LATE_NS`] beyond the round trip from the capture point to B;
//! 3. A's next new bytes continue right after S1 and leave as soon as that ACK
//!    reaches A: within about the round trip from the capture point to A
//!    (microseconds when captured on A, one RTT when captured on B).
//!
//! An application pause that merely overlaps a delayed ACK fails 3 (its data
//! comes well after the ACK); loss fails 2 or is excluded by the re-send; a
//! zero window is excluded because the ACK then opens a closed window.
//!
//! When B's ACK is lost, A's loss timer sends the held bytes instead: Nagle +
//! loss ([`super::timer`]), also judged here, as it follows the same segment
//! and its first ACK.

use super::Stall;
use super::timer::{self, AckSeen, Ids, Release};
use crate::tcp::{ConnInfo, DataClass, Event, EventKind};

/// Minimum ACK delay beyond the RTT to call it "delayed". Linux delays at
/// least 40 ms (HZ/25), macOS ~100 ms, Windows up to 200 ms.
pub const LATE_NS: i64 = 30_000_000;
/// Slack on "at once": scheduling and capture jitter.
pub const PROMPT_SLACK_NS: i64 = 1_000_000;

#[derive(Clone, Copy, Debug)]
struct Small {
    end: i64,
    ts: i64,
    frame: u64,
    len: u32,
}

#[derive(Clone, Copy, Debug)]
struct LateAck {
    ts: i64,
    frame: u64,
    /// As seen at the capture point.
    seen: i64,
    /// Less the round trip to the ACKer: its own timer.
    delay: i64,
}

/// `acked` and `late` are read only while `last` is set, and cleared
/// whenever it is set: a watch is reset by clearing `last` alone (one store,
/// where resetting all of it touched three cache lines on every data segment).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
struct Watch {
    /// A's last new segment.
    last: Option<Small>,
    /// Set when that first ACK was late (Nagle may be holding A's next bytes).
    late: Option<LateAck>,
    /// The first pure ACK of it seen here.
    acked: Option<AckSeen>,
}

/// Per-connection state: one watch and the IP IDs per sending side. In C
/// order, the IDs (read by every packet) last: next to what follows in
/// [`super::Detectors`].
#[derive(Debug, Default)]
#[repr(C)]
pub struct Nagle {
    watch: [Watch; 2],
    ids: [Ids; 2],
    /// What the loss timer and the IDs said of the last event.
    release: Release,
}

impl Nagle {
    /// Feeds one event with its segment's timestamps (TSval, TSecr) and IPv4
    /// ID; returns a stall when this event is a held segment (plain, or sent
    /// by the loss timer). [`Nagle::release`] then says what the loss timer
    /// and the IDs tell of it.
    /// `ts` gives the segment's timestamps when asked (few events need them).
    #[inline]
    pub fn step(
        &mut self,
        info: &ConnInfo,
        ev: &Event,
        ts: impl Fn() -> Option<(u32, u32)>,
        ip_id: Option<u16>,
    ) -> Option<Stall> {
        let a = ev.from;
        let len = match ev.kind {
            EventKind::Data { len, class: DataClass::New, .. } => len,
            _ => 0,
        };
        let missed = self.ids[a.idx()].step(ip_id, len, info.mss[a.idx()]);
        let release = &mut self.release;
        *release = Release { probe: false, missed };
        match ev.kind {
            EventKind::Data { seq, len, class: DataClass::New } => {
                // B's data (piggybacking its ACK) ends any stall A could be in.
                self.watch[a.other().idx()].last = None;
                let w = &mut self.watch[a.idx()];
                let found = match (w.last, w.late) {
                    (Some(s), Some(l)) if s.end == seq && ev.ts_ns - l.ts <= 2 * info.rtt_to(a) + PROMPT_SLACK_NS => {
                        Some(Stall {
                            nagle: a,
                            small_frame: s.frame,
                            ack_frame: l.frame,
                            held_frame: ev.frame,
                            ack_delay_ns: l.delay,
                            ack_seen_ns: l.seen,
                            stall_ns: ev.ts_ns - s.ts,
                            timer: false,
                            tls: super::tls::TlsHold::None,
                        })
                    }
                    (Some(s), _) if s.end == seq && ev.ts_ns - s.ts >= timer::LOSS_TIMER_MIN_NS => {
                        Self::by_timer(info, ev, &s, w.acked, ts(), release)
                    }
                    _ => None,
                };
                *w = Watch {
                    last: Some(Small { end: seq + i64::from(len), ts: ev.ts_ns, frame: ev.frame, len }),
                    acked: None,
                    late: None,
                };
                found
            }
            EventKind::Data { .. } => {
                // A re-send or probe: whatever A waits for now is not Nagle's doing.
                self.watch[a.idx()].last = None;
                None
            }
            EventKind::Ack => {
                let w = &mut self.watch[a.other().idx()];
                if let (Some(s), Some(ack), None) = (w.last, ev.ack, w.acked)
                    && ack >= s.end
                {
                    w.acked = Some((ev.frame, ev.ts_ns, ts().map(|t| t.0)));
                    let seen = ev.ts_ns - s.ts;
                    // The small segment reached the ACKer half a round trip after
                    // the capture point saw it, the ACK came back half one later.
                    let delay = seen - info.rtt_to(a);
                    let small = info.mss[a.other().idx()].is_none_or(|m| s.len < m);
                    if delay >= LATE_NS && small && ev.window > 0 {
                        w.late = Some(LateAck { ts: ev.ts_ns, frame: ev.frame, seen, delay });
                    }
                }
                None
            }
            EventKind::Syn { .. } | EventKind::Fin | EventKind::Rst => {
                self.watch[0].last = None;
                self.watch[1].last = None;
                None
            }
        }
    }

    /// What the loss timer and the IDs said of the last event.
    #[inline]
    pub fn release(&self) -> Release {
        self.release
    }

    /// A's segment `ev` continues `s` with no plain stall: was it sent by A's
    /// loss timer? Then it is loss, and Nagle + loss when `s` was small.
    #[cold]
    fn by_timer(
        info: &ConnInfo,
        ev: &Event,
        s: &Small,
        acked: Option<AckSeen>,
        ts: Option<(u32, u32)>,
        release: &mut Release,
    ) -> Option<Stall> {
        let lost_ack = timer::by_timer(ev.ts_ns - s.ts, acked, ts)?;
        release.probe = true;
        let a = ev.from;
        if info.mss[a.idx()].is_some_and(|m| s.len >= m) {
            return None; // nothing waits behind a full-sized segment for Nagle's sake
        }
        let (ack_frame, ack_at) = lost_ack.map_or((0, s.ts), |l| (l.0, l.1));
        let seen = ack_at - s.ts;
        Some(Stall {
            nagle: a,
            small_frame: s.frame,
            ack_frame,
            held_frame: ev.frame,
            ack_delay_ns: if ack_frame == 0 { 0 } else { (seen - info.rtt_to(a.other())).max(0) },
            ack_seen_ns: seen,
            stall_ns: ev.ts_ns - s.ts,
            timer: true,
            tls: super::tls::TlsHold::None,
        })
    }
}

#[cfg(test)]
mod timer_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::build::{MS, Seq, US, info};
    use crate::tcp::Side::{Client, Server};

    fn stalls(info: &ConnInfo, s: &Seq) -> Vec<Stall> {
        let mut n = Nagle::default();
        s.events.iter().filter_map(|e| n.step(info, e, || None, None)).filter(|s| !s.timer).collect()
    }

    /// Write-write-read server captured on the server: header, 44 ms late ACK, body.
    #[test]
    fn server_held_body_captured_at_server() {
        let mut s = Seq::new();
        s.data(0, Client, 80);
        let small = s.data(30 * US, Server, 120);
        let ack = s.ack(44 * MS, Client);
        let held = s.data(44 * MS + 15 * US, Server, 600);
        let got = stalls(&info(20 * US, 0), &s);
        assert_eq!(got.len(), 1);
        let st = got[0];
        assert_eq!((st.nagle, st.small_frame, st.ack_frame, st.held_frame), (Server, small, ack, held));
        assert_eq!(st.stall_ns, 44 * MS + 15 * US - 30 * US);
    }

    /// Same stall captured at the client over a 10 ms path: the body trails the ACK by one RTT.
    #[test]
    fn server_held_body_captured_at_client() {
        let mut s = Seq::new();
        s.data(0, Client, 80);
        s.data(10 * MS, Server, 120);
        s.ack(50 * MS, Client);
        s.data(60 * MS + 200 * US, Server, 600);
        assert_eq!(stalls(&info(0, 10 * MS), &s).len(), 1);
    }

    /// Client-side Nagle: a POST written as header then body; the server delays its ACK.
    #[test]
    fn client_held_request_body() {
        let mut s = Seq::new();
        s.data(0, Client, 150);
        s.ack(40 * MS, Server);
        s.data(40 * MS + 10 * US, Client, 20);
        let got = stalls(&info(0, 20 * US), &s);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].nagle, Client);
    }

    /// One server-held stall, the client's timer `timer`, a path of round
    /// trip `path`, captured next to the server or next to the client (whose
    /// stacks answer in 20 µs): the ACK seen at the capture point, and the
    /// ACKing client's own delay.
    fn at(near_server: bool, path: i64, timer: i64) -> (i64, i64) {
        let mut s = Seq::new();
        s.data(0, Client, 80);
        let (info, ack) = if near_server {
            s.data(20 * US, Server, 120);
            // To the client, its timer, back.
            s.ack(20 * US + path + timer, Client);
            s.data(40 * US + path + timer, Server, 600);
            (info(path, 20 * US), path + timer)
        } else {
            s.data(path + 20 * US, Server, 120);
            s.ack(path + 40 * US + timer, Client);
            s.data(2 * path + 60 * US + timer, Server, 600);
            (info(20 * US, path), timer + 20 * US)
        };
        let got = stalls(&info, &s);
        assert_eq!(got.len(), 1, "near server {near_server}, path {path}");
        assert_eq!(got[0].ack_seen_ns, ack);
        (got[0].ack_seen_ns, got[0].ack_delay_ns)
    }

    #[test]
    fn both_capture_points_report_the_ackers_own_timer() {
        for path in [10 * MS, 80 * MS] {
            let timer = 42 * MS;
            let (seen_server, at_server) = at(true, path, timer);
            let (seen_client, at_client) = at(false, path, timer);
            assert_eq!((seen_server, seen_client), (path + timer, timer + 20 * US), "seen: timer + the path, or not");
            assert_eq!((at_server, at_client), (timer, timer), "path {path}");
        }
    }

    /// App with TCP_NODELAY pausing 45 ms mid-response: the data comes 5 ms after the ACK.
    #[test]
    fn a_pause_that_overlaps_a_delayed_ack_is_not_nagle() {
        let mut s = Seq::new();
        s.data(0, Client, 80);
        s.data(30 * US, Server, 120);
        s.ack(40 * MS, Client);
        s.data(45 * MS, Server, 600);
        assert!(stalls(&info(20 * US, 0), &s).is_empty());
    }

    /// A server that thinks 45 ms then writes once: the late ACK is the server's, and the
    /// client's next bytes come only after the response.
    #[test]
    fn think_time_is_not_nagle() {
        let mut s = Seq::new();
        for i in 0..3 {
            let t = i * 50 * MS;
            s.data(t, Client, 80);
            s.ack(t + 40 * MS, Server);
            s.data(t + 45 * MS, Server, 700);
        }
        assert!(stalls(&info(20 * US, 20 * US), &s).is_empty());
    }

    /// The small segment is lost and re-sent after an RTO: not a stall.
    #[test]
    fn loss_is_not_nagle() {
        let mut s = Seq::new();
        s.data(0, Client, 80);
        s.data(30 * US, Server, 120);
        s.resend(210 * MS, Server, 120, 210 * MS);
        s.ack(210 * MS + 30 * US, Client);
        s.data(210 * MS + 40 * US, Server, 600);
        assert!(stalls(&info(20 * US, 0), &s).is_empty());
    }

    /// The ACK that reopens a zero window is late for flow control, not Nagle.
    #[test]
    fn zero_window_reopening_is_not_nagle() {
        let mut s = Seq::new();
        s.data(0, Server, 120);
        s.ack_window(100 * MS, Client, 0);
        s.ack(150 * MS, Client);
        s.data(150 * MS + 10 * US, Server, 600);
        assert!(stalls(&info(20 * US, 0), &s).is_empty());
    }

    /// A prompt ACK means nothing was held.
    #[test]
    fn quick_ack_then_next_write_is_not_a_stall() {
        let mut s = Seq::new();
        s.data(0, Server, 120);
        s.ack(50 * US, Client);
        s.data(45 * MS, Server, 600);
        assert!(stalls(&info(20 * US, 0), &s).is_empty());
    }

    /// A full-sized first segment cannot make Nagle wait.
    #[test]
    fn full_sized_segment_is_not_small() {
        let mut s = Seq::new();
        s.data(0, Server, 1448);
        s.ack(40 * MS, Client);
        s.data(40 * MS + 10 * US, Server, 600);
        assert!(stalls(&info(20 * US, 0), &s).is_empty());
    }
}
