//! The roles as the connection table settles them: first guesses swapped
//! or kept as each side's data arrives.

use super::{Sink, Totals, Tracker};
use crate::tcp::roles::Ephemeral;
use crate::tcp::{ConnInfo, Event, EventKind, RolesDoubt};
use crate::tcp::{RoleSource, Side};
use crate::wire::{Endpoint, Flags, Segment, TcpOptions};

fn ep(last: u8, port: u16) -> Endpoint {
    Endpoint { ip: [10, 0, 0, last].into(), port }
}

/// Every event with the roles it came with; the per-connection state
/// counts events since the last swap (the default `swapped` resets it).
#[derive(Default)]
struct Log {
    events: Vec<(ConnInfo, Event, u32)>,
    closed: Vec<ConnInfo>,
}

impl Sink<u32> for Log {
    fn event(&mut self, info: &ConnInfo, seen: &mut u32, ev: &Event, _: &Segment<'_>) {
        *seen += 1;
        self.events.push((info.clone(), *ev, *seen));
    }
    fn close(&mut self, info: &ConnInfo, _: u32, _: &Totals) {
        self.closed.push(info.clone());
    }
}

const SERVER: (u8, u16) = (1, 61000);
const CLIENT: (u8, u16) = (2, 20001);

/// (from, to, flags, seq, ack, payload)
type Seg<'a> = ((u8, u16), (u8, u16), u8, u32, u32, &'a [u8]);

/// Feeds segments with 1 ms between them.
fn feed(t: &mut Tracker<u32>, segs: &[Seg<'_>]) -> Log {
    let mut log = Log::default();
    for (i, &(from, to, flags, seq, ack, payload)) in segs.iter().enumerate() {
        let seg = Segment {
            frame: i as u64 + 1,
            ts_ns: i as i64 * 1_000_000,
            src: ep(from.0, from.1),
            dst: ep(to.0, to.1),
            seq,
            ack,
            flags: Flags(flags),
            window: 1000,
            len: payload.len() as u32,
            options: TcpOptions::default(),
            payload,
            ip_id: None,
            tcp_options: &[],
        };
        t.segment(&seg, &mut log);
    }
    t.finish(&mut log);
    log
}

fn tracker(e: Ephemeral) -> Tracker<u32> {
    Tracker::default().ephemeral(e)
}

const OTHER: (u8, u16) = (3, 20002);
const ACK: u8 = Flags::ACK;
const PSH: u8 = Flags::ACK | Flags::PSH;
const SYN: u8 = Flags::SYN;
const SYNACK: u8 = Flags::SYN | Flags::ACK;
const BODY: &[u8] = b"<html>body bytes</html>";
const STATUS: &[u8] = b"HTTP/1.1 200 OK\r\n";
const GET: &[u8] = b"GET / HTTP/1.1\r\n";

#[test]
fn a_status_line_in_the_first_payload_swaps_a_wrong_first_guess() {
    // Server port above the client's, neither ephemeral: the first guess is wrong.
    let log = feed(
        &mut tracker(Ephemeral::with(None)),
        &[
            (CLIENT, SERVER, ACK, 500, 9000, b""),
            (SERVER, CLIENT, PSH, 9000, 500, STATUS),
            (CLIENT, SERVER, PSH, 500, 9017, GET),
        ],
    );
    let (first, ..) = &log.events[0];
    assert!(first.roles_open);
    assert!(!log.events[1].0.roles_open, "content settles them");
    assert_eq!((first.server, first.roles), (ep(2, 20001), RoleSource::LowerPort));
    let (info, ev, seen) = &log.events[1];
    assert_eq!(
        (info.server, info.client, info.roles, info.roles_open),
        (ep(1, 61000), ep(2, 20001), RoleSource::Content, false)
    );
    assert_eq!((ev.from, *seen), (Side::Server, 1), "the sink's state started afresh on the swap");
    assert!(matches!(ev.kind, EventKind::Data { seq: 1, len: 17, .. }));
    // Sequence state moved with the roles: the client's ACK acknowledges the status line.
    let (_, ev, _) = &log.events[2];
    assert_eq!((ev.from, ev.ack), (Side::Client, Some(18)));
    assert_eq!(log.closed[0].roles_doubt, None);
}

#[test]
fn the_other_sides_first_payload_corrects_a_guess_and_confirms_weaker_evidence() {
    // A body first (nothing to read in it), lower port: wrong; the request line corrects it.
    let log = feed(
        &mut tracker(Ephemeral::with(None)),
        &[(SERVER, CLIENT, PSH, 9000, 500, BODY), (CLIENT, SERVER, PSH, 500, 9023, GET)],
    );
    assert_eq!((log.events[0].0.server, log.events[0].0.roles), (ep(2, 20001), RoleSource::LowerPort));
    let (info, ev, seen) = &log.events[1];
    assert_eq!((info.server, info.roles, ev.from, *seen), (ep(1, 61000), RoleSource::Content, Side::Client, 1));
    assert_eq!(log.closed[0].roles_doubt, Some(RolesDoubt::Corrected(2)));
    // With the client's port in an ephemeral range the first decision was right: confirmed, not corrected.
    let log = feed(
        &mut tracker(Ephemeral::with(Some((20000, 30000)))),
        &[(SERVER, CLIENT, PSH, 9000, 500, BODY), (CLIENT, SERVER, PSH, 500, 9023, GET)],
    );
    assert_eq!((log.events[0].0.server, log.events[0].0.roles), (ep(1, 61000), RoleSource::EphemeralPort));
    assert_eq!((log.closed[0].roles, log.closed[0].roles_doubt), (RoleSource::Content, None));
    assert_eq!(log.events[1].2, 2, "no swap, no reset");
}

#[test]
fn a_guess_looks_again_at_later_data_and_yields_to_a_server_found_meanwhile() {
    let log = feed(
        &mut tracker(Ephemeral::with(None)),
        &[
            // Nothing to read in either direction's first data: the lower port, a guess.
            (SERVER, CLIENT, PSH, 9000, 500, BODY),
            (CLIENT, SERVER, PSH, 500, 9023, BODY),
            // Another client connects: the server answers its SYN.
            (OTHER, SERVER, SYN, 100, 0, b""),
            (SERVER, OTHER, SYNACK, 7000, 101, b""),
            (SERVER, CLIENT, PSH, 9023, 523, BODY),
        ],
    );
    let open: Vec<bool> = log.events.iter().filter(|e| e.0.id == 1).map(|e| e.0.roles_open).collect();
    assert_eq!(open, [true, true, false], "a guess stays open until evidence comes");
    let c = log.closed.iter().find(|c| c.id == 1).unwrap();
    assert_eq!(
        (c.server, c.roles, c.roles_doubt),
        (ep(1, 61000), RoleSource::SharedEndpoint, Some(RolesDoubt::Corrected(5)))
    );
}

#[test]
fn content_against_content_is_a_contradiction_and_keeps_the_roles() {
    let log = feed(
        &mut tracker(Ephemeral::with(None)),
        &[(SERVER, CLIENT, PSH, 9000, 500, GET), (CLIENT, SERVER, PSH, 500, 9017, GET)],
    );
    let c = &log.closed[0];
    assert_eq!(
        (c.server, c.roles, c.roles_doubt),
        (ep(2, 20001), RoleSource::Content, Some(RolesDoubt::Contradicted(2)))
    );
}

#[test]
fn a_server_seen_answering_a_syn_names_it_on_connections_without_one() {
    let log = feed(
        &mut tracker(Ephemeral::with(None)),
        &[
            (OTHER, SERVER, SYN, 100, 0, b""),
            (SERVER, OTHER, SYNACK, 7000, 101, b""),
            // Another client's connection, already running: a body, nothing to read in it.
            (SERVER, CLIENT, PSH, 9000, 500, BODY),
        ],
    );
    let (info, ev, _) = log.events.last().unwrap();
    assert_eq!((info.server, info.roles, ev.from), (ep(1, 61000), RoleSource::SharedEndpoint, Side::Server));
}
