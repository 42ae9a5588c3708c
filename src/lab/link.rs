//! A path with a real round trip on one host: two TAP devices, each in a
//! network namespace (a named one, or this host's own), joined by the delay
//! [`Bridge`]. The ends get the two addresses of one /30 and static
//! neighbour entries for each other, so no ARP or ND crosses the bridge (a
//! dropped ARP would add seconds) and IPv6 stays off the TAPs.
//!
//! Dropping a [`Link`] stops the bridge, closes the TAPs (the devices
//! vanish with their descriptors) and deletes the namespaces it made.

use super::bridge::{Bridge, Dropped, Shape, Stats};
use super::netns::{self, Netns};
use super::tap::Tap;
use std::net::Ipv4Addr;
use std::time::Instant;

/// Where one end of the link lives.
pub enum Place {
    /// This process's own network namespace (the host's).
    Host,
    /// A named namespace, which the link deletes when dropped.
    Namespace(Netns),
}

/// One end: its namespace (None: the host's), its TAP and its address.
#[derive(Clone, Debug)]
pub struct End {
    pub namespace: Option<String>,
    pub interface: String,
    pub addr: Ipv4Addr,
}

/// Two ends joined by the delay bridge.
pub struct Link {
    // Field order is drop order: the bridge (and with it the TAPs) goes
    // before the namespaces are deleted.
    bridge: Bridge,
    ends: [End; 2],
    spaces: Vec<Netns>,
}

/// MAC address of end `i` (locally administered; each TAP is a segment of its own).
fn mac(i: usize) -> String {
    format!("02:74:64:00:00:{:02x}", i + 1)
}

/// The name a TAP gets inside a namespace of its own; in the host's, the kernel numbers it.
pub const NS_INTERFACE: &str = "rtt0";
const HOST_INTERFACE: &str = "tdrtt%d";

impl Link {
    /// Joins `a` (address NET+1) and `b` (NET+2) through a bridge shaped by
    /// `shape`, which stops by itself at `deadline`. `net` is a /30's first address.
    pub fn new(a: Place, b: Place, net: Ipv4Addr, shape: Shape, deadline: Option<Instant>) -> Result<Link, String> {
        let base = u32::from(net) & !3;
        let addrs = [Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2)];
        let mut spaces = Vec::new();
        let mut taps = Vec::new();
        let mut ends = Vec::new();
        for (i, place) in [a, b].into_iter().enumerate() {
            let tap = match &place {
                Place::Host => Tap::create(HOST_INTERFACE),
                Place::Namespace(ns) => ns.run(|| Tap::create(NS_INTERFACE))?,
            }
            .map_err(|e| format!("{e} (TAP devices need root and /dev/net/tun)"))?;
            let namespace = match place {
                Place::Host => None,
                Place::Namespace(ns) => {
                    let name = ns.name().to_string();
                    spaces.push(ns);
                    Some(name)
                }
            };
            ends.push(End { namespace, interface: tap.name().to_string(), addr: addrs[i] });
            taps.push(tap);
        }
        for i in 0..2 {
            let (me, peer) = (&ends[i], &ends[1 - i]);
            let ip = |args: &[&str]| match &me.namespace {
                Some(ns) => netns::ip(&[&["-n", ns.as_str()], args].concat()),
                None => netns::ip(args),
            };
            let dev = me.interface.as_str();
            // A long transmit queue: the kernel drops what a full TAP queue cannot hold.
            ip(&["link", "set", "dev", dev, "address", &mac(i), "txqueuelen", "10000", "addrgenmode", "none"])?;
            ip(&["addr", "add", &format!("{}/30", me.addr), "dev", dev])?;
            ip(&["link", "set", "dev", dev, "up"])?;
            let (peer_addr, peer_mac) = (peer.addr.to_string(), mac(1 - i));
            ip(&["neigh", "replace", &peer_addr, "lladdr", &peer_mac, "dev", dev, "nud", "permanent"])?;
        }
        let (b_tap, a_tap) = (taps.pop().expect("two"), taps.pop().expect("two"));
        let bridge =
            Bridge::start(a_tap, b_tap, shape, deadline).map_err(|e| format!("cannot start the bridge: {e}"))?;
        let ends = [ends[0].clone(), ends[1].clone()];
        Ok(Link { bridge, ends, spaces })
    }

    /// Two new namespaces `PREFIX-c` (the client, first end) and `PREFIX-s` (the server).
    pub fn pair(prefix: &str, net: Ipv4Addr, shape: Shape, deadline: Option<Instant>) -> Result<Link, String> {
        let c = Netns::create(&format!("{prefix}-c"))?;
        let s = Netns::create(&format!("{prefix}-s"))?;
        Link::new(Place::Namespace(c), Place::Namespace(s), net, shape, deadline)
    }

    /// End 0 or 1.
    pub fn end(&self, i: usize) -> &End {
        &self.ends[i]
    }

    /// The namespace of end `i`, when it has one of its own.
    pub fn namespace(&self, i: usize) -> Option<&Netns> {
        let name = self.ends[i].namespace.as_deref()?;
        self.spaces.iter().find(|n| n.name() == name)
    }

    /// Counters of each direction (0: end 0 to end 1).
    pub fn stats(&self) -> [Stats; 2] {
        self.bridge.stats()
    }

    /// Frames the loss dropped.
    pub fn dropped(&self) -> Vec<Dropped> {
        self.bridge.dropped()
    }

    /// Whether the bridge runs at real-time priority; why not, when not.
    pub fn realtime(&self) -> Result<(), String> {
        self.bridge.realtime()
    }

    /// Stops forwarding now (the namespaces stay until drop).
    pub fn stop(&mut self) {
        self.bridge.stop();
    }
}

/// The first /30 of 198.18.0.0/15 (RFC 2544's benchmarking range) that no
/// route of this host's main table covers or lies in (the default route
/// aside), from /proc/net/route; None when every one is taken.
pub fn free_net() -> Option<Ipv4Addr> {
    let text = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    first_free(&routes(&text))
}

/// (destination, mask) of each route in /proc/net/route text (little-endian hex).
fn routes(text: &str) -> Vec<(u32, u32)> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // The kernel prints the address's bytes as a native-endian number.
            let hex = |s: &str| u32::from_str_radix(s, 16).ok().map(|v| u32::from_be_bytes(v.to_ne_bytes()));
            Some((hex(f.get(1)?)?, hex(f.get(7)?)?))
        })
        .filter(|&(_, mask)| mask != 0)
        .collect()
}

fn first_free(routes: &[(u32, u32)]) -> Option<Ipv4Addr> {
    let start = u32::from(Ipv4Addr::new(198, 18, 0, 0));
    (0..(1u32 << 17) / 4).map(|i| start + i * 4).map(Ipv4Addr::from).find(|&n| {
        let (net, mask) = (u32::from(n), !3u32);
        // Two prefixes overlap when each agrees with the other under the shorter mask.
        routes.iter().all(|&(dst, m)| {
            let shorter = m & mask;
            dst & shorter != net & shorter
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTE: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t0000000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
tdrtt0\t000012C6\t00000000\t0001\t0\t0\t0\tFCFFFFFF\t0\t0\t0
";

    #[test]
    fn routes_are_read_in_host_order_and_the_default_is_left_out() {
        let r = routes(ROUTE);
        assert_eq!(r.len(), 2);
        assert_eq!(Ipv4Addr::from(r[0].0), Ipv4Addr::new(10, 0, 0, 0));
        assert_eq!(Ipv4Addr::from(r[0].1), Ipv4Addr::new(255, 255, 255, 0));
        assert_eq!(Ipv4Addr::from(r[1].0), Ipv4Addr::new(198, 18, 0, 0));
    }

    #[test]
    fn the_first_free_slash_30_skips_taken_and_covering_routes() {
        assert_eq!(first_free(&routes(ROUTE)), Some(Ipv4Addr::new(198, 18, 0, 4)));
        assert_eq!(first_free(&[]), Some(Ipv4Addr::new(198, 18, 0, 0)));
        // A /16 over the first half: the first free one is in 198.19.
        let wide = (u32::from(Ipv4Addr::new(198, 18, 0, 0)), u32::from(Ipv4Addr::new(255, 255, 0, 0)));
        assert_eq!(first_free(&[wide]), Some(Ipv4Addr::new(198, 19, 0, 0)));
        // A /15 over all of it: none.
        let all = (wide.0, u32::from(Ipv4Addr::new(255, 254, 0, 0)));
        assert_eq!(first_free(&[all]), None);
        // A host route inside a /30 takes that /30 only.
        let host = (u32::from(Ipv4Addr::new(198, 18, 0, 1)), u32::MAX);
        assert_eq!(first_free(&[host]), Some(Ipv4Addr::new(198, 18, 0, 4)));
    }
}
