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
