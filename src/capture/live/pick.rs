//! `capture` without `-i`: the interface tcpdump would use. When the filter
//! names a host, the interface the kernel routes that host through (read
//! from /proc/net/route and /proc/net/ipv6_route; an address of this host
//! goes through loopback, as the kernel sends it); otherwise the first
//! interface that is up and not loopback, in the kernel's order.

use super::LiveError;
use crate::filter::{Expr, Filter};
use nix::ifaddrs::getifaddrs;
use nix::net::if_::InterfaceFlags;
use std::net::{IpAddr, Ipv4Addr};

/// The interface chosen and why, in words (for the line on standard error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Picked {
    pub iface: String,
    pub why: String,
}

/// Picks the interface to capture on for `filter`.
pub fn pick_interface(filter: Option<&Filter>) -> Result<Picked, LiveError> {
    let io = |e: std::io::Error| LiveError::Io(format!("cannot choose an interface ({e}); name one with -i"));
    if let Some(host) = filter.and_then(|f| first_host(f.expr())) {
        let locals = local_addresses().map_err(io)?;
        let iface = if host.is_loopback() || locals.contains(&host) {
            loopback_name().map_err(io)?
        } else {
            let table = match host {
                IpAddr::V4(_) => std::fs::read_to_string("/proc/net/route"),
                IpAddr::V6(_) => std::fs::read_to_string("/proc/net/ipv6_route"),
            }
            .map_err(io)?;
            route_to(&table, host).ok_or_else(|| {
                LiveError::NoInterface(format!("no route to {host} here to choose an interface by; name one with -i"))
            })?
        };
        return Ok(Picked { why: format!("the route to {host}"), iface });
    }
    let iface = first_up().map_err(io)?.ok_or_else(|| {
        LiveError::NoInterface("no interface is up besides loopback; name one with -i (e.g. -i lo or -i any)".into())
    })?;
    Ok(Picked { iface, why: "the first interface up, not loopback".into() })
}

/// The first host address the filter asks for (a `host` or a full-length
/// `net`), not under a `not`: the packets it wants pass where that host is routed.
fn first_host(e: &Expr) -> Option<IpAddr> {
    match e {
        Expr::Net(_, a @ IpAddr::V4(_), 32) | Expr::Net(_, a @ IpAddr::V6(_), 128) => Some(*a),
        Expr::And(l, r) | Expr::Or(l, r) => first_host(l).or_else(|| first_host(r)),
        _ => None,
    }
}

fn local_addresses() -> std::io::Result<Vec<IpAddr>> {
    let mut all = Vec::new();
    for a in getifaddrs()? {
        let Some(s) = a.address else { continue };
        if let Some(v4) = s.as_sockaddr_in() {
            all.push(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = s.as_sockaddr_in6() {
            all.push(IpAddr::V6(v6.ip()));
        }
    }
    Ok(all)
}

fn loopback_name() -> std::io::Result<String> {
    Ok(getifaddrs()?
        .find(|a| a.flags.contains(InterfaceFlags::IFF_LOOPBACK))
        .map_or_else(|| "lo".to_string(), |a| a.interface_name))
}

/// The first interface up and not loopback, in the kernel's (index) order.
fn first_up() -> std::io::Result<Option<String>> {
    Ok(getifaddrs()?
        .find(|a| a.flags.contains(InterfaceFlags::IFF_UP) && !a.flags.contains(InterfaceFlags::IFF_LOOPBACK))
        .map(|a| a.interface_name))
}

/// The interface of the longest matching prefix (then the lowest metric) in
/// the text of /proc/net/route (IPv4) or /proc/net/ipv6_route (IPv6).
fn route_to(table: &str, host: IpAddr) -> Option<String> {
    const RTF_UP: u32 = 0x1;
    const RTF_REJECT: u32 = 0x200;
    let mut best: Option<(u32, u32, &str)> = None;
    for line in table.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let hex = |i: usize| f.get(i).and_then(|s| u32::from_str_radix(s, 16).ok());
        let (iface, len, metric, flags, matches) = match host {
            IpAddr::V4(h) => {
                // Iface Destination Gateway Flags RefCnt Use Metric Mask …, addresses in host byte order.
                let (Some(dst), Some(flags), Some(metric), Some(mask)) = (hex(1), hex(3), hex(6), hex(7)) else {
                    continue;
                };
                let ip = |v: u32| u32::from(Ipv4Addr::from(v.to_le_bytes()));
                let (dst, mask) = (ip(dst), ip(mask));
                (f[0], mask.count_ones(), metric, flags, u32::from(h) & mask == dst & mask)
            }
            IpAddr::V6(h) => {
                // dst len src srclen nexthop metric refcnt use flags iface.
                let (Some(dst), Some(len), Some(metric), Some(flags), Some(iface)) =
                    (f.first().and_then(|s| u128::from_str_radix(s, 16).ok()), hex(1), hex(5), hex(8), f.get(9))
                else {
                    continue;
                };
                let mask = if len == 0 { 0 } else { u128::MAX << (128 - len.min(128)) };
                (*iface, len, metric, flags, u128::from(h) & mask == dst & mask)
            }
        };
        if !matches || flags & RTF_UP == 0 || flags & RTF_REJECT != 0 {
            continue;
        }
        if best.is_none_or(|(l, m, _)| len > l || len == l && metric < m) {
            best = Some((len, metric, iface));
        }
    }
    best.map(|(_, _, i)| i.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const V4: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
        eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
        eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
        wg0\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
        bad0\t0003000A\t00000000\t0201\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
    const V6: &str = "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n\
        00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000003 00000000 00000003     eth1\n";

    #[test]
    fn longest_prefix_then_default_route() {
        let r = |a: &str| route_to(V4, a.parse().unwrap());
        assert_eq!(r("192.0.2.7").as_deref(), Some("eth0"));
        assert_eq!(r("10.0.2.9").as_deref(), Some("wg0"));
        assert_eq!(r("198.51.100.1").as_deref(), Some("eth0"), "the default route");
        assert_eq!(r("10.0.3.1").as_deref(), Some("eth0"), "a reject route is not taken");
        let r6 = |a: &str| route_to(V6, a.parse().unwrap());
        assert_eq!(r6("fd00::5").as_deref(), Some("eth0"));
        assert_eq!(r6("2001:db8::1").as_deref(), Some("eth1"));
        assert_eq!(route_to("", "10.0.0.1".parse().unwrap()), None);
    }

    #[test]
    fn the_filter_host_is_the_first_not_negated() {
        let h = |f: &str| first_host(Filter::parse(f).unwrap().expr());
        assert_eq!(h("port 80 and host 10.1.2.3"), Some("10.1.2.3".parse().unwrap()));
        assert_eq!(h("not host 10.1.2.3 and port 80"), None);
        assert_eq!(h("net 10.0.0.0/8"), None);
        assert_eq!(h("dst host ::1 or port 9"), Some("::1".parse().unwrap()));
    }
}
