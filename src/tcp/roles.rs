//! Telling client from server when the handshake was not captured.
//!
//! Evidence, strongest first (the order of [`RoleSource`]): the handshake;
//! the content of a first payload (an HTTP request or status line, a TLS
//! ClientHello or ServerHello); an endpoint known as a server (it answered a
//! SYN, or content named it the server, on another connection) or shared by
//! more connections than the other end; exactly one port in an ephemeral
//! range; else the lower port.

use super::{RoleSource, Side};
use crate::wire::Endpoint;
use rustc_hash::FxHashMap;
use std::sync::OnceLock;

/// HTTP/1 methods whose request line makes its sender the client
/// (`PRI` opens HTTP/2's connection preface).
const METHODS: [&[u8]; 10] =
    [b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH", b"CONNECT", b"TRACE", b"PRI"];

/// The role of whoever sent `p`, the first payload of one direction, if its
/// first bytes say: a request line or TLS ClientHello → client; a status line
/// or TLS ServerHello → server. Looks at 14 bytes at most.
pub(crate) fn sender_of(p: &[u8]) -> Option<Side> {
    // A TLS handshake record (type 22, version 3.0–3.4) starting with a hello.
    if let [0x16, 3, 0..=4, _, _, kind, ..] = *p {
        return match kind {
            1 => Some(Side::Client),
            2 => Some(Side::Server),
            _ => None,
        };
    }
    if let Some(rest) = p.strip_prefix(b"HTTP/1.") {
        return matches!(rest, [b'0' | b'1', b' ', d, ..] if d.is_ascii_digit()).then_some(Side::Server);
    }
    let request = METHODS.iter().any(
        |m| matches!(p.strip_prefix(*m), Some([b' ', c, ..]) if *c == b'/' || *c == b'*' || c.is_ascii_alphanumeric()),
    );
    request.then_some(Side::Client)
}

/// Linux's default `net.ipv4.ip_local_port_range`.
const LINUX_EPHEMERAL: (u16, u16) = (32768, 60999);

/// Port ranges clients' ports are drawn from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ephemeral([(u16, u16); 2]);

impl Ephemeral {
    /// Linux's default range and `extra`.
    pub fn with(extra: Option<(u16, u16)>) -> Ephemeral {
        Ephemeral([LINUX_EPHEMERAL, extra.unwrap_or(LINUX_EPHEMERAL)])
    }

    /// Linux's default range, and this host's `net.ipv4.ip_local_port_range`
    /// when it differs. Both, because a capture is often analysed away from
    /// where it was taken (most Linux clients keep the default), while one
    /// taken here follows this host's setting. Read once.
    pub fn host() -> Ephemeral {
        static HOST: OnceLock<Ephemeral> = OnceLock::new();
        *HOST.get_or_init(|| {
            let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
            let mut ports = text.split_whitespace().map(str::parse::<u16>);
            let range = match (ports.next(), ports.next()) {
                (Some(Ok(lo)), Some(Ok(hi))) if lo <= hi => Some((lo, hi)),
                _ => None,
            };
            Ephemeral::with(range)
        })
    }

    fn contains(&self, port: u16) -> bool {
        self.0.iter().any(|&(lo, hi)| (lo..=hi).contains(&port))
    }
}

/// Endpoints remembered; when full, the least recently used half is forgotten.
const KNOWN_CAP: usize = 4096;

#[derive(Clone, Copy, Debug, Default)]
struct Known {
    /// Connections seen with this endpoint at one end.
    conns: u32,
    /// It answered a SYN, or a first payload's content made it the server.
    server: bool,
    /// Last use, for eviction.
    used: u64,
}

/// What the capture has taught about endpoints so far, for connections
/// whose handshake is missing. Bounded: a stream or a days-long `watch`
/// keeps at most [`KNOWN_CAP`] endpoints.
#[derive(Debug)]
pub(crate) struct Roles {
    known: FxHashMap<Endpoint, Known>,
    tick: u64,
    ephemeral: Ephemeral,
}

impl Roles {
    pub(crate) fn new(ephemeral: Ephemeral) -> Roles {
        Roles { known: FxHashMap::default(), tick: 0, ephemeral }
    }

    fn touch(&mut self, e: Endpoint) -> &mut Known {
        if self.known.len() >= KNOWN_CAP && !self.known.contains_key(&e) {
            let mut used: Vec<u64> = self.known.values().map(|k| k.used).collect();
            let mid = used.len() / 2;
            let (_, &mut cut, _) = used.select_nth_unstable(mid);
            self.known.retain(|_, k| k.used > cut);
        }
        self.tick += 1;
        let k = self.known.entry(e).or_default();
        k.used = self.tick;
        k
    }

    /// A new connection between `a` and `b`.
    pub(crate) fn met(&mut self, a: Endpoint, b: Endpoint) {
        for e in [a, b] {
            let k = self.touch(e);
            k.conns = k.conns.saturating_add(1);
        }
    }

    /// `e` is a server: it answered a SYN, or content said so.
    pub(crate) fn server(&mut self, e: Endpoint) {
        self.touch(e).server = true;
    }

    /// Which of `a` and `b` is the server, from what is known about the
    /// endpoints and their ports (everything but content).
    pub(crate) fn judge(&self, a: Endpoint, b: Endpoint) -> (Endpoint, RoleSource) {
        let (ka, kb) =
            (self.known.get(&a).copied().unwrap_or_default(), self.known.get(&b).copied().unwrap_or_default());
        match (ka.server, kb.server) {
            (true, false) => return (a, RoleSource::SharedEndpoint),
            (false, true) => return (b, RoleSource::SharedEndpoint),
            _ => {}
        }
        // Many clients, each on its own port, meet one server endpoint.
        if ka.conns >= 2 && ka.conns >= 2 * kb.conns {
            return (a, RoleSource::SharedEndpoint);
        }
        if kb.conns >= 2 && kb.conns >= 2 * ka.conns {
            return (b, RoleSource::SharedEndpoint);
        }
        match (self.ephemeral.contains(a.port), self.ephemeral.contains(b.port)) {
            (true, false) => return (b, RoleSource::EphemeralPort),
            (false, true) => return (a, RoleSource::EphemeralPort),
            _ => {}
        }
        (if a.port < b.port { a } else { b }, RoleSource::LowerPort)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(last: u8, port: u16) -> Endpoint {
        Endpoint { ip: [10, 0, 0, last].into(), port }
    }

    #[test]
    fn content_names_the_sender() {
        use Side::{Client, Server};
        for (p, want) in [
            (&b"GET /index.html HTTP/1.1\r\n"[..], Some(Client)),
            (b"POST /submit HTTP/1.1", Some(Client)),
            (b"OPTIONS * HTTP/1.1", Some(Client)),
            (b"CONNECT example.org:443 HTTP/1.1", Some(Client)),
            (b"PRI * HTTP/2.0\r\n", Some(Client)),
            (b"HTTP/1.1 200 OK\r\n", Some(Server)),
            (b"HTTP/1.0 404 Not Found", Some(Server)),
            (&[0x16, 3, 1, 0, 200, 1, 0, 0, 196, 3, 3], Some(Client)),
            (&[0x16, 3, 3, 0, 90, 2, 0, 0, 86, 3, 3], Some(Server)),
            // Not decisive: a body, a TLS record that is not a hello, a lowercase or glued method, too short.
            (b"<html><body>GET / HTTP/1.1", None),
            (&[0x17, 3, 3, 0, 40, 1], None),
            (&[0x16, 3, 3, 0, 40, 11], None),
            (b"get / HTTP/1.1", None),
            (b"GETTING", None),
            (b"GET ", None),
            (b"HTTP/1.1", None),
            (b"HTTP/2 200", None),
            (b"", None),
        ] {
            assert_eq!(sender_of(p), want, "{:?}", String::from_utf8_lossy(p));
        }
    }

    #[test]
    fn a_known_server_wins_over_ports() {
        let mut r = Roles::new(Ephemeral::with(None));
        let (server, client) = (ep(1, 61000), ep(2, 20001));
        assert_eq!(r.judge(server, client), (client, RoleSource::LowerPort), "nothing known: the lower port");
        r.server(server);
        assert_eq!(r.judge(server, client), (server, RoleSource::SharedEndpoint));
        assert_eq!(r.judge(client, server), (server, RoleSource::SharedEndpoint));
    }

    #[test]
    fn an_endpoint_shared_by_several_connections_is_the_server() {
        let mut r = Roles::new(Ephemeral::with(None));
        let server = ep(1, 61000);
        r.met(server, ep(2, 20001));
        assert_eq!(r.judge(server, ep(2, 20001)).1, RoleSource::LowerPort, "one connection proves nothing");
        r.met(server, ep(2, 20002));
        assert_eq!(r.judge(ep(2, 20002), server), (server, RoleSource::SharedEndpoint));
        // The same two ends meeting again (a reused port pair) is no evidence.
        let mut r = Roles::new(Ephemeral::with(None));
        r.met(server, ep(2, 20001));
        r.met(server, ep(2, 20001));
        assert_eq!(r.judge(server, ep(2, 20001)).1, RoleSource::LowerPort);
    }

    #[test]
    fn exactly_one_ephemeral_port_names_the_client() {
        let r = Roles::new(Ephemeral::with(Some((20000, 30000))));
        let (server, client) = (ep(1, 61000), ep(2, 20001));
        assert_eq!(r.judge(server, client), (server, RoleSource::EphemeralPort), "this host's range");
        assert_eq!(r.judge(ep(1, 8080), ep(2, 45000)), (ep(1, 8080), RoleSource::EphemeralPort), "Linux's default");
        assert_eq!(r.judge(ep(1, 40000), ep(2, 45000)).1, RoleSource::LowerPort, "both in range");
        let r = Roles::new(Ephemeral::with(None));
        assert_eq!(r.judge(server, client), (client, RoleSource::LowerPort), "neither in range: a guess");
    }

    use crate::tcp::table::{Sink, Totals, Tracker};
    use crate::tcp::{ConnInfo, Event, EventKind, RolesDoubt};
    use crate::wire::{Flags, Segment, TcpOptions};

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

    #[test]
    fn the_table_stays_bounded_and_keeps_what_is_used() {
        let mut r = Roles::new(Ephemeral::with(None));
        let server = ep(1, 61000);
        r.server(server);
        for i in 0..20_000u32 {
            let client = Endpoint { ip: std::net::Ipv4Addr::from(0x0b00_0000 + i).into(), port: 20000 };
            r.met(server, client);
            assert!(r.known.len() <= KNOWN_CAP);
        }
        assert!(r.known[&server].server, "a busy server is never the least recently used");
    }
}
