//! Link layers: strip the frame header down to the IP packet.

use std::fmt;

/// A pcap LINKTYPE_ value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LinkType(pub u32);

impl LinkType {
    /// BSD loopback, host-order address family.
    pub const NULL: LinkType = LinkType(0);
    /// Ethernet II, with optional 802.1Q / 802.1ad tags.
    pub const ETHERNET: LinkType = LinkType(1);
    /// Raw IP (v4 or v6 by version nibble).
    pub const RAW: LinkType = LinkType(101);
    /// OpenBSD loopback, network-order address family.
    pub const LOOP: LinkType = LinkType(108);
    /// Linux cooked capture v1 (`tcpdump -i any`, older libpcap).
    pub const LINUX_SLL: LinkType = LinkType(113);
    /// Raw IPv4.
    pub const IPV4: LinkType = LinkType(228);
    /// Raw IPv6.
    pub const IPV6: LinkType = LinkType(229);
    /// Linux cooked capture v2 (`tcpdump -i any`, libpcap ≥ 1.10).
    pub const LINUX_SLL2: LinkType = LinkType(276);

    /// Whether this reader understands the link type.
    pub fn supported(self) -> bool {
        matches!(self.0, 0 | 1 | 12 | 14 | 101 | 108 | 113 | 228 | 229 | 276)
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            0 => "NULL",
            1 => "ETHERNET",
            12 | 14 | 101 => "RAW",
            108 => "LOOP",
            113 => "LINUX_SLL",
            228 => "IPV4",
            229 => "IPV6",
            276 => "LINUX_SLL2",
            _ => return write!(f, "{}", self.0),
        };
        write!(f, "{name} ({})", self.0)
    }
}

/// The network-layer payload of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network<'a> {
    /// An IPv4 packet (starting at its header).
    Ipv4(&'a [u8]),
    /// An IPv6 packet (starting at its header).
    Ipv6(&'a [u8]),
    /// Anything else (ARP, LLDP, …): not ours to look at.
    Other,
    /// The frame is too short for its own link header.
    Truncated,
}

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;

#[inline]
fn by_ethertype(ethertype: u16, rest: &[u8]) -> Network<'_> {
    match ethertype {
        ETH_IPV4 => Network::Ipv4(rest),
        ETH_IPV6 => Network::Ipv6(rest),
        _ => Network::Other,
    }
}

#[inline]
fn by_version(data: &[u8]) -> Network<'_> {
    match data.first().map(|b| b >> 4) {
        Some(4) => Network::Ipv4(data),
        Some(6) => Network::Ipv6(data),
        Some(_) => Network::Other,
        None => Network::Truncated,
    }
}

#[inline]
fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

/// Finds the IP packet inside a frame of the given link type.
/// Unsupported link types give [`Network::Other`]; callers check
/// [`LinkType::supported`] once per interface to warn.
#[inline]
pub fn network_layer(link: LinkType, data: &[u8]) -> Network<'_> {
    match link.0 {
        1 => {
            if data.len() < 14 {
                return Network::Truncated;
            }
            let mut ethertype = be16(data, 12);
            let mut at = 14;
            // 802.1Q, 802.1ad and the old QinQ tag values: skip up to two tags.
            for _ in 0..2 {
                if !matches!(ethertype, 0x8100 | 0x88a8 | 0x9100) {
                    break;
                }
                if data.len() < at + 4 {
                    return Network::Truncated;
                }
                ethertype = be16(data, at + 2);
                at += 4;
            }
            by_ethertype(ethertype, &data[at..])
        }
        113 => {
            if data.len() < 16 {
                return Network::Truncated;
            }
            by_ethertype(be16(data, 14), &data[16..])
        }
        276 => {
            if data.len() < 20 {
                return Network::Truncated;
            }
            by_ethertype(be16(data, 0), &data[20..])
        }
        0 | 108 => {
            if data.len() < 4 {
                return Network::Truncated;
            }
            let raw = [data[0], data[1], data[2], data[3]];
            // DLT_NULL is in the capturing host's order: accept either.
            let family = if link.0 == 108 {
                u32::from_be_bytes(raw)
            } else if raw[0] != 0 {
                u32::from_le_bytes(raw)
            } else {
                u32::from_be_bytes(raw)
            };
            match family {
                2 => Network::Ipv4(&data[4..]),
                10 | 24 | 28 | 30 => Network::Ipv6(&data[4..]),
                _ => Network::Other,
            }
        }
        12 | 14 | 101 => by_version(data),
        228 => Network::Ipv4(data),
        229 => Network::Ipv6(data),
        _ => Network::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethernet_with_two_vlan_tags() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x88, 0xa8, 0, 10, 0x81, 0x00, 0, 20, 0x08, 0x00, 0x45]);
        assert_eq!(network_layer(LinkType::ETHERNET, &f), Network::Ipv4(&[0x45]));
        assert_eq!(network_layer(LinkType::ETHERNET, &f[..17]), Network::Truncated);
    }

    #[test]
    fn null_in_either_order() {
        assert_eq!(network_layer(LinkType::NULL, &[2, 0, 0, 0, 0x45]), Network::Ipv4(&[0x45]));
        assert_eq!(network_layer(LinkType::NULL, &[0, 0, 0, 30, 0x60]), Network::Ipv6(&[0x60]));
        assert_eq!(network_layer(LinkType::LOOP, &[0, 0, 0, 2, 0x45]), Network::Ipv4(&[0x45]));
    }

    #[test]
    fn cooked_captures() {
        let mut sll2 = vec![0x86, 0xdd];
        sll2.resize(20, 0);
        sll2.push(0x60);
        assert_eq!(network_layer(LinkType::LINUX_SLL2, &sll2), Network::Ipv6(&[0x60]));
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00, 0x45]);
        assert_eq!(network_layer(LinkType::LINUX_SLL, &sll), Network::Ipv4(&[0x45]));
        assert_eq!(network_layer(LinkType(147), &sll), Network::Other);
        assert_eq!(network_layer(LinkType::RAW, &[]), Network::Truncated);
    }
}
