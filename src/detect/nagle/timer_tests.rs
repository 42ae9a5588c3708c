//! Nagle + loss: the loss timer's probe sends the held bytes when the ACK
//! never came; how the Nagle detector tells it from loss and late writes.

use crate::detect::Stall;
use crate::detect::build::{MS, Seq, US, info};
use crate::detect::nagle::Nagle;
use crate::detect::timer::Release;
use crate::tcp::Side::{Client, Server};

/// The Nagle detector's stalls (plain and timer) and releases, with event k's timestamps `ts[k]`.
fn run(s: &Seq, ts: &[Option<(u32, u32)>], ids: &[Option<u16>]) -> Vec<(u64, Option<Stall>, Release)> {
    let i = info(20 * US, 20 * US);
    let mut n = Nagle::default();
    s.events
        .iter()
        .enumerate()
        .map(|(k, e)| {
            let st = n.step(&i, e, || ts.get(k).copied().flatten(), ids.get(k).copied().flatten());
            (e.frame, st, n.release())
        })
        .collect()
}

fn probes(s: &Seq, ts: &[Option<(u32, u32)>]) -> Vec<(u64, Option<Stall>)> {
    run(s, ts, &[]).into_iter().filter(|x| x.2.probe).map(|x| (x.0, x.1)).collect()
}

/// Captured at the server: the client's delayed ACK never arrives, the body leaves 232 ms after the header.
#[test]
fn held_segment_sent_by_the_probe_when_no_ack_came() {
    let mut s = Seq::new();
    s.data(0, Client, 68);
    let small = s.data(30 * US, Server, 106);
    let held = s.data(232 * MS, Server, 600);
    let got = probes(&s, &[]);
    assert_eq!(got.len(), 1);
    let st = got[0].1.expect("Nagle + loss");
    assert_eq!((got[0].0, st.small_frame, st.ack_frame, st.held_frame), (held, small, 0, held));
    assert!(st.timer && st.stall_ns == 232 * MS - 30 * US);
}

/// Captured at the client: its ACK is seen, but the server's next segment echoes an older
/// TSval, so the ACK was lost on the way.
#[test]
fn an_ack_seen_here_but_never_echoed_was_lost() {
    let mut s = Seq::new();
    s.data(0, Client, 68); // TSval 1000
    s.data(40 * US, Server, 106); // echoes 1000
    let ack = s.ack(44 * MS, Client); // TSval 1044
    s.data(232 * MS, Server, 600); // echoes 1000: never got 1044
    let ts = [Some((1000, 5)), Some((6, 1000)), Some((1044, 6)), Some((238, 1000))];
    let got = probes(&s, &ts);
    assert_eq!(got.len(), 1);
    let st = got[0].1.expect("Nagle + loss");
    assert_eq!((st.ack_frame, st.ack_seen_ns), (ack, 44 * MS - 40 * US));
    // The same with the ACK received (echoed): an application writing late, not a probe.
    let echoed = [Some((1000, 5)), Some((6, 1000)), Some((1044, 6)), Some((238, 1044))];
    assert!(probes(&s, &echoed).is_empty());
    // Without timestamps nothing can be told.
    assert!(probes(&s, &[]).is_empty());
}

/// Short gaps, re-sends and segments after an acknowledged one are not probes;
/// a probe after a full-sized segment is loss, not Nagle + loss.
#[test]
fn what_is_not_a_probe_and_what_is_not_nagle() {
    let mut s = Seq::new();
    s.data(0, Client, 68);
    s.data(40 * US, Server, 106);
    s.data(150 * MS, Server, 600); // too soon for a loss timer
    s.resend(400 * MS, Server, 600, 250 * MS); // a re-send: the tracker's retransmission
    s.data(700 * MS, Server, 600);
    s.ack(701 * MS, Client);
    s.data(1000 * MS, Server, 1448); // after an ACK that got through (no timestamps to doubt it)
    s.data(1300 * MS, Server, 600); // no ACK of the full-sized one: a probe, nothing held by Nagle
    let got = probes(&s, &[]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, None);
}

/// Captured at the client: the server's body was lost before it and re-sent by the
/// probe; the IDs of the server's packets, one apart so far, skip one.
#[test]
fn a_step_of_two_in_a_run_of_ids_is_a_packet_lost_before_the_capture_point() {
    let mut s = Seq::new();
    for k in 0..3 {
        s.data(k * 50 * MS, Client, 68);
        s.data(k * 50 * MS + 40 * US, Server, 106);
        s.ack(k * 50 * MS + 44 * MS, Client);
        s.data(k * 50 * MS + 44 * MS + 40 * US, Server, 600);
    }
    s.data(150 * MS, Client, 68);
    s.data(150 * MS + 40 * US, Server, 106);
    s.ack(194 * MS, Client);
    s.data(420 * MS, Server, 600); // the first copy, ID +1, never arrived
    let ids = |server: &[u16]| {
        let mut next = server.iter();
        let ids: Vec<Option<u16>> =
            s.events.iter().map(|e| if e.from == Server { next.next().copied() } else { Some(7) }).collect();
        run(&s, &[], &ids).into_iter().map(|x| x.2.missed).collect::<Vec<bool>>()
    };
    let last = s.events.len() - 1;
    // Linux: one apart, then two.
    let got = ids(&[101, 102, 103, 104, 105, 106, 107, 109]);
    assert!(got[last] && got.iter().filter(|m| **m).count() == 1, "{got:?}");
    // Random or global IDs never make a run: nothing is concluded.
    let got = ids(&[4711, 90, 3, 60001, 812, 9, 2000, 2002]);
    assert!(got.iter().all(|m| !m));
}
