//! All detectors together on hand-built sequences: where a gap's time goes
//! when loss, Nagle and the applications mix.

use super::build::{MS, Seq, US, info};
use super::{Detectors, Exchange, Observation, Stall, Times};
use crate::tcp::ConnInfo;
use crate::tcp::Side::{Client, Server};
use crate::wire::{Endpoint, Flags, Segment, TcpOptions};

/// Runs every detector; `ts[k]` is event k's (TSval, TSecr), `payload[k]` its payload.
fn run(s: &Seq, rtt: i64, ts: &[Option<(u32, u32)>], payload: &[&'static [u8]]) -> Vec<Observation> {
    run_with(&info(rtt / 2, rtt / 2), s, ts, payload, &[])
}

/// As [`run`], with event k's IPv4 ID `ids[k]`.
fn run_with(
    i: &ConnInfo,
    s: &Seq,
    ts: &[Option<(u32, u32)>],
    payload: &[&'static [u8]],
    ids: &[Option<u16>],
) -> Vec<Observation> {
    let mut d = Detectors::default();
    let mut out = Vec::new();
    for (k, ev) in s.events.iter().enumerate() {
        let ep = Endpoint { ip: [127, 0, 0, 1].into(), port: 1 };
        let seg = Segment {
            frame: ev.frame,
            ts_ns: ev.ts_ns,
            src: ep,
            dst: ep,
            seq: 0,
            ack: 0,
            flags: Flags(Flags::ACK),
            window: 0,
            len: 0,
            options: TcpOptions { timestamps: ts.get(k).copied().flatten(), ..TcpOptions::default() },
            payload: payload.get(k).copied().unwrap_or(&[]),
            ip_id: ids.get(k).copied().flatten(),
            tcp_options: &[],
        };
        d.step(i, ev, &seg, &mut |o| out.push(o));
    }
    d.finish(s.events.last().map_or(0, |e| e.ts_ns), &mut |o| out.push(o));
    out
}

/// The exchanges and their times, for a capture `rtt_to_client` from the client and `rtt - rtt_to_client` from the server.
fn exchanges_at(o: &[Observation], rtt_to_client: i64, rtt: i64) -> Vec<(Exchange, Times)> {
    o.iter()
        .filter_map(|o| match o {
            Observation::Exchange(x) => Some((*x, x.times(rtt_to_client, rtt - rtt_to_client))),
            _ => None,
        })
        .collect()
}

fn exchanges(o: &[Observation], rtt: i64) -> Vec<(Exchange, Times)> {
    o.iter()
        .filter_map(|o| match o {
            Observation::Exchange(x) => Some((*x, x.times(rtt / 2, rtt / 2))),
            _ => None,
        })
        .collect()
}

fn stalls(o: &[Observation]) -> Vec<Stall> {
    o.iter()
        .filter_map(|o| match o {
            Observation::Stall(s) => Some(*s),
            _ => None,
        })
        .collect()
}

/// Captured at the Nagle server: the client's delayed ACK is lost, so the held
/// body waits for the server's tail-loss probe, 232 ms after the header. Loss
/// (Nagle + loss), not 232 ms of server think time.
#[test]
fn a_lost_delayed_ack_is_nagle_plus_loss_not_think_time() {
    let mut s = Seq::new();
    s.data(0, Client, 68);
    let small = s.data(40 * US, Server, 106);
    let held = s.data(232 * MS, Server, 600);
    s.data(233 * MS, Client, 68);
    let o = run(&s, 20 * US, &[], &[]);
    let st = stalls(&o);
    assert_eq!(st.len(), 1);
    assert!(st[0].timer && st[0].nagle == Server);
    assert_eq!((st[0].small_frame, st[0].ack_frame, st[0].held_frame), (small, 0, held));
    let x = exchanges(&o, 20 * US);
    let (_, t) = x[0];
    assert!(t.think < MS, "{t:?}");
    assert_eq!((t.loss, t.stall), (232 * MS - 40 * US, 0));
}

/// The same stall captured at the client: its ACK is seen, but the server's body
/// echoes the request's TSval, not the ACK's: the ACK never arrived.
#[test]
fn a_lost_delayed_ack_seen_at_the_client_is_told_by_the_timestamp_echo() {
    let mut s = Seq::new();
    s.data(0, Client, 68);
    s.data(40 * US, Server, 106);
    let ack = s.ack(44 * MS, Client);
    s.data(232 * MS, Server, 600);
    s.data(233 * MS, Client, 68);
    let ts = [Some((1000, 9)), Some((10, 1000)), Some((1044, 10)), Some((202, 1000)), Some((1233, 202))];
    let o = run(&s, 20 * US, &ts, &[]);
    let st = stalls(&o);
    assert!(st.len() == 1 && st[0].timer && st[0].ack_frame == ack, "{st:?}");
    let (_, t) = exchanges(&o, 20 * US)[0];
    assert!(t.think < MS && t.loss > 200 * MS, "{t:?}");
    // The ACK echoed: the server got it and wrote its body late. Application time.
    let mut echoed = ts;
    echoed[3] = Some((202, 1044));
    let o = run(&s, 20 * US, &echoed, &[]);
    assert!(stalls(&o).is_empty());
    let (_, t) = exchanges(&o, 20 * US)[0];
    assert!(t.think > 180 * MS && t.loss == 0, "{t:?}");
}

/// Captured at the client: the body left after the delayed ACK reached the
/// server, was lost before the capture point, and its re-send came 230 ms
/// later. The server's IP IDs, one apart so far, skip one: loss, not think time.
#[test]
fn a_segment_re_sent_after_a_loss_before_the_capture_point_is_loss() {
    let mut s = Seq::new();
    let mut ids = Vec::new();
    let mut id = 500u16;
    let mut server = |ids: &mut Vec<Option<u16>>, step: u16| {
        id += step;
        ids.push(Some(id));
    };
    for k in 0..3 {
        let t = k * 50 * MS;
        s.data(t, Client, 68);
        ids.push(Some(9));
        s.data(t + 40 * US, Server, 106);
        server(&mut ids, 1);
        s.ack(t + 44 * MS, Client);
        ids.push(Some(9));
        s.data(t + 44 * MS + 40 * US, Server, 600);
        server(&mut ids, 1);
    }
    s.data(150 * MS, Client, 68);
    ids.push(Some(9));
    s.data(150 * MS + 40 * US, Server, 106);
    server(&mut ids, 1);
    s.ack(194 * MS, Client);
    ids.push(Some(9));
    s.data(424 * MS, Server, 600);
    server(&mut ids, 2);
    s.data(425 * MS, Client, 68);
    ids.push(Some(9));
    let i = info(20 * US, 20 * US);
    let last = exchanges(&run_with(&i, &s, &[], &[], &ids), 40 * US)[3];
    assert!(last.1.think < MS && last.1.loss >= 230 * MS, "{last:?}");
    // Without IDs (IPv6) the late body stays the server's pause: nothing tells it apart.
    let last = exchanges(&run_with(&i, &s, &[], &[], &[]), 40 * US)[3];
    assert!(last.1.think >= 229 * MS, "{last:?}");
}

/// A response segment lost after the capture point and re-sent by the RTO: loss.
#[test]
fn a_lost_response_segment_re_sent_by_rto_is_loss() {
    let mut s = Seq::new();
    s.data(0, Client, 68);
    s.data(40 * US, Server, 706);
    s.resend(212 * MS, Server, 706, 212 * MS);
    s.data(213 * MS, Client, 68);
    let (_, t) = exchanges(&run(&s, 20 * US, &[], &[]), 20 * US)[0];
    assert!(t.think < MS && t.loss > 211 * MS, "{t:?}");
}

/// Captured at the client: the response's first segment was lost before it and
/// the next one, sent by the probe, arrives first, skipping the missing bytes
/// (filled an instant later). The wait was for the loss, not the server.
#[test]
fn a_response_that_starts_past_missing_bytes_after_a_loss_timer_is_loss() {
    let mut t = Seq::new();
    t.data(0, Client, 68);
    t.skip(Server, 106); // the header, never seen here
    t.data(380 * MS, Server, 600);
    t.data(381 * MS, Client, 68);
    let (x, times) = exchanges(&run(&t, 20 * US, &[], &[]), 20 * US)[0];
    assert_eq!(x.first_loss, 380 * MS);
    assert!(times.think == 0 && times.loss > 379 * MS, "{times:?}");
    // Missing bytes after a short wait are reordering: the wait stays the server's.
    let mut r = Seq::new();
    r.data(0, Client, 68);
    r.skip(Server, 106);
    r.data(30 * MS, Server, 600);
    r.data(31 * MS, Client, 68);
    let (_, times) = exchanges(&run(&r, 20 * US, &[], &[]), 20 * US)[0];
    assert!(times.think > 29 * MS && times.loss == 0, "{times:?}");
}

/// A client that sends its head, waits a second for 100 Continue, then the body:
/// the wait is the client's, never the server's think time.
#[test]
fn a_wait_inside_the_request_is_the_clients() {
    const HEAD: &[u8] = b"PUT /f HTTP/1.1\r\nHost: h\r\nContent-Length: 2000\r\nExpect: 100-continue\r\n\r\n";
    let mut s = Seq::new();
    s.data(0, Client, HEAD.len() as u32);
    s.ack(40 * MS, Server);
    s.data(1000 * MS, Client, 1448);
    s.data(1000 * MS + 10 * US, Client, 552);
    s.data(1001 * MS, Server, 100);
    s.data(1100 * MS, Client, 68);
    let o = run(&s, 20 * US, &[], &[HEAD]);
    let (_, t) = exchanges(&o, 20 * US)[0];
    assert_eq!(t.client, 1000 * MS);
    assert!(t.think < 2 * MS && t.transfer < MS, "{t:?}");
    assert!(
        o.iter()
            .any(|o| matches!(o, Observation::ExpectWait { wait_ns, header_seen: true, .. } if *wait_ns == 1000 * MS))
    );
}

/// A response three windows long on a 10 ms path: each wait for the client's
/// ACK is a round trip, counted.
#[test]
fn round_trips_are_counted_from_waits_for_acks() {
    let rtt = 10 * MS;
    let mut s = Seq::new();
    s.data(0, Client, 68); // seen at the server: the path is on the client's side
    for round in 0..3 {
        let t = 100 * US + round * rtt;
        s.data(t, Server, 1448);
        s.data(t + 10 * US, Server, 1448);
        if round < 2 {
            s.ack(t + rtt - 20 * US, Client);
        }
    }
    s.data(100 * MS, Client, 68);
    let (x, t) = exchanges_at(&run_with(&info(rtt, 0), &s, &[], &[], &[]), rtt, rtt)[0];
    assert_eq!(x.rounds, 3);
    assert_eq!((t.stall, t.loss, t.client), (0, 0, 0), "{t:?}");
    assert!(t.think <= 100 * US, "{t:?}");
}
