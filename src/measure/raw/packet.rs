//! Packets as bytes (pure functions): the TCP checksum, the hand-built SYN,
//! and parsers for replies and ICMP errors.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// TCP flag bits.
pub(crate) const FIN: u8 = 0x01;
pub(crate) const SYN: u8 = 0x02;
pub(crate) const RST: u8 = 0x04;
pub(crate) const PSH: u8 = 0x08;
pub(crate) const ACK: u8 = 0x10;
pub(crate) const URG: u8 = 0x20;

/// Length of the SYN we send: a 20-byte header and one MSS option.
pub(crate) const SYN_LEN: usize = 24;

/// MSS we announce; irrelevant to the measurement (the connection is never
/// completed) but a SYN without one looks odd to middleboxes.
const SYN_MSS: u16 = 1460;

/// Receive window we announce (what hping3 and most stacks send in a SYN).
const SYN_WINDOW: u16 = 64240;

// ---------------------------------------------------------------- checksums

/// Adds `data` as big-endian 16-bit words to a running one's-complement sum.
pub(crate) fn sum_words(data: &[u8], mut sum: u64) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        sum += u64::from(*b) << 8;
    }
    sum
}

/// Folds a running sum into the final Internet checksum (RFC 1071).
pub(crate) fn fold(mut sum: u64) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// TCP checksum of `segment` (header with its checksum field as given, plus
/// payload) between `src` and `dst`, over the IPv4 or IPv6 pseudo-header.
/// A segment whose checksum field is already right sums to 0.
pub(crate) fn tcp_checksum(src: IpAddr, dst: IpAddr, segment: &[u8]) -> u16 {
    let len = segment.len() as u64;
    let mut sum = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            sum_words(&d.octets(), sum_words(&s.octets(), 0)) + u64::from(libc::IPPROTO_TCP as u8) + len
        }
        _ => {
            let s = to_v6(src);
            let d = to_v6(dst);
            sum_words(&d.octets(), sum_words(&s.octets(), 0)) + u64::from(libc::IPPROTO_TCP as u8) + len
        }
    };
    sum = sum_words(segment, sum);
    fold(sum)
}

fn to_v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

// ---------------------------------------------------------------- the SYN

/// A TCP SYN from `sport` to `dport` with sequence number `seq` and an MSS
/// option. The checksum is filled for IPv4; for IPv6 it is left 0 because the
/// kernel fills it (`IPV6_CHECKSUM`).
pub(crate) fn build_syn(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, seq: u32) -> [u8; SYN_LEN] {
    let mut b = [0u8; SYN_LEN];
    b[0..2].copy_from_slice(&sport.to_be_bytes());
    b[2..4].copy_from_slice(&dport.to_be_bytes());
    b[4..8].copy_from_slice(&seq.to_be_bytes());
    // ack 0 (8..12)
    b[12] = ((SYN_LEN / 4) as u8) << 4;
    b[13] = SYN;
    b[14..16].copy_from_slice(&SYN_WINDOW.to_be_bytes());
    // checksum (16..18) and urgent pointer (18..20) 0
    b[20] = 2; // MSS option: kind 2, length 4
    b[21] = 4;
    b[22..24].copy_from_slice(&SYN_MSS.to_be_bytes());
    if src.is_ipv4() && dst.is_ipv4() {
        let c = tcp_checksum(src, dst, &b);
        b[16..18].copy_from_slice(&c.to_be_bytes());
    }
    b
}

// ---------------------------------------------------------------- parsers

/// The fields of a TCP header that a reply is judged by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TcpHdr {
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
}

/// Parses a TCP header; `None` when cut short or its data offset is impossible.
pub(crate) fn parse_tcp(b: &[u8]) -> Option<TcpHdr> {
    if b.len() < 20 {
        return None;
    }
    let off = usize::from(b[12] >> 4) * 4;
    if off < 20 || off > b.len() {
        return None;
    }
    Some(TcpHdr {
        sport: u16::from_be_bytes([b[0], b[1]]),
        dport: u16::from_be_bytes([b[2], b[3]]),
        seq: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        ack: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
        flags: b[13],
        window: u16::from_be_bytes([b[14], b[15]]),
    })
}

/// Flags as hping3 writes them: `SA` for SYN-ACK, `RA` for RST-ACK.
pub(crate) fn flag_letters(flags: u8) -> String {
    [(RST, 'R'), (SYN, 'S'), (ACK, 'A'), (FIN, 'F'), (PSH, 'P'), (URG, 'U')]
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, c)| *c)
        .collect()
}

/// An IPv4 header and what follows it.
#[derive(Debug)]
pub(crate) struct Ipv4<'a> {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub ttl: u8,
    pub proto: u8,
    /// Total length from the header (may exceed the bytes at hand in an ICMP quote).
    pub total_len: u16,
    /// The payload at hand: up to the total length, or what there is.
    pub payload: &'a [u8],
}

/// Parses an IPv4 header (as a raw socket delivers it, or as an ICMP error quotes it).
pub(crate) fn parse_ipv4(b: &[u8]) -> Option<Ipv4<'_>> {
    if b.len() < 20 || b[0] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(b[0] & 0x0f) * 4;
    if ihl < 20 || ihl > b.len() {
        return None;
    }
    let total_len = u16::from_be_bytes([b[2], b[3]]);
    let end = usize::from(total_len).clamp(ihl, b.len());
    Some(Ipv4 {
        src: Ipv4Addr::new(b[12], b[13], b[14], b[15]),
        dst: Ipv4Addr::new(b[16], b[17], b[18], b[19]),
        ttl: b[8],
        proto: b[9],
        total_len,
        payload: &b[ihl..end],
    })
}

/// What an ICMP error says happened to one of our SYNs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IcmpKind {
    /// TTL / hop limit ran out at a router.
    TimeExceeded,
    /// Destination unreachable, with its code (ICMPv4 type 3 or ICMPv6 type 1).
    Unreachable { v6: bool, code: u8 },
}

impl IcmpKind {
    /// traceroute's mark: `!N`, `!H`, `!P`, `!X`, `!F`, or `!<code>`.
    pub(crate) fn mark(self) -> String {
        match self {
            IcmpKind::TimeExceeded => String::new(),
            IcmpKind::Unreachable { v6: false, code } => match code {
                0 | 6 | 11 => "!N".into(),
                1 | 7 | 12 => "!H".into(),
                2 => "!P".into(),
                3 => "!p".into(),
                4 => "!F".into(),
                9 | 10 | 13 => "!X".into(),
                c => format!("!<{c}>"),
            },
            IcmpKind::Unreachable { v6: true, code } => match code {
                0 => "!N".into(),
                1 | 5 | 6 => "!X".into(),
                3 => "!H".into(),
                4 => "!p".into(),
                c => format!("!<{c}>"),
            },
        }
    }

    /// In words, for JSON and notes.
    pub(crate) fn describe(self) -> String {
        match self {
            IcmpKind::TimeExceeded => "time exceeded".into(),
            IcmpKind::Unreachable { v6, code } => {
                let what = match (v6, code) {
                    (false, 0) | (true, 0) => "network unreachable",
                    (false, 1) | (true, 3) => "host unreachable",
                    (false, 2) => "protocol unreachable",
                    (false, 3) | (true, 4) => "port unreachable",
                    (false, 4) => "fragmentation needed",
                    (false, 9 | 10 | 13) | (true, 1 | 5 | 6) => "administratively prohibited",
                    _ => "unreachable",
                };
                format!("{what} (ICMP{} code {code})", if v6 { "v6" } else { "" })
            }
        }
    }
}

/// An ICMP error about a TCP segment, with the quoted segment's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IcmpError {
    /// Who sent the error (the router, or the destination's host).
    pub from: IpAddr,
    pub kind: IcmpKind,
    /// Destination of the quoted (our) packet.
    pub quoted_dst: IpAddr,
    /// Ports and sequence number of the quoted TCP header (RFC 792 quotes at least 8 bytes).
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
}

fn quoted_tcp(b: &[u8]) -> Option<(u16, u16, u32)> {
    if b.len() < 8 {
        return None;
    }
    Some((
        u16::from_be_bytes([b[0], b[1]]),
        u16::from_be_bytes([b[2], b[3]]),
        u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
    ))
}

/// Parses an IPv4 packet from a raw ICMP socket (IP header included): a time
/// exceeded or destination unreachable quoting a TCP segment. Anything else
/// (echo replies, errors about UDP…) is `None`.
pub(crate) fn parse_icmp_v4(packet: &[u8]) -> Option<IcmpError> {
    let outer = parse_ipv4(packet)?;
    if outer.proto != libc::IPPROTO_ICMP as u8 {
        return None;
    }
    let icmp = outer.payload;
    if icmp.len() < 8 {
        return None;
    }
    let kind = match icmp[0] {
        11 => IcmpKind::TimeExceeded,
        3 => IcmpKind::Unreachable { v6: false, code: icmp[1] },
        _ => return None,
    };
    let inner = parse_ipv4(&icmp[8..])?;
    if inner.proto != libc::IPPROTO_TCP as u8 {
        return None;
    }
    let (sport, dport, seq) = quoted_tcp(inner.payload)?;
    Some(IcmpError { from: IpAddr::V4(outer.src), kind, quoted_dst: IpAddr::V4(inner.dst), sport, dport, seq })
}

/// Parses an ICMPv6 message (a raw ICMPv6 socket delivers no IPv6 header;
/// `from` is the sender's address): time exceeded (type 3) or destination
/// unreachable (type 1) quoting a TCP segment with no extension headers.
pub(crate) fn parse_icmp_v6(msg: &[u8], from: Ipv6Addr) -> Option<IcmpError> {
    if msg.len() < 8 + 40 + 8 {
        return None;
    }
    let kind = match msg[0] {
        3 => IcmpKind::TimeExceeded,
        1 => IcmpKind::Unreachable { v6: true, code: msg[1] },
        _ => return None,
    };
    let ip6 = &msg[8..48];
    // Our SYNs carry no extension headers, so the quoted next header is TCP.
    if ip6[0] >> 4 != 6 || ip6[6] != libc::IPPROTO_TCP as u8 {
        return None;
    }
    let mut d = [0u8; 16];
    d.copy_from_slice(&ip6[24..40]);
    let (sport, dport, seq) = quoted_tcp(&msg[48..])?;
    Some(IcmpError { from: IpAddr::V6(from), kind, quoted_dst: IpAddr::V6(Ipv6Addr::from(d)), sport, dport, seq })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A RST that Linux sent from 10.99.0.2:8080 to 10.99.0.1:47448 over a
    /// veth pair (the whole IPv4 packet, captured with tcpdump); tshark
    /// `-o tcp.check_checksum:TRUE`: "Checksum: 0x0aaa [correct]".
    const LINUX_RST: [u8; 40] = [
        0x45, 0x00, 0x00, 0x28, 0x00, 0x00, 0x40, 0x00, 0x40, 0x06, 0x26, 0x08, 0x0a, 0x63, 0x00, 0x02, 0x0a, 0x63,
        0x00, 0x01, 0x1f, 0x90, 0xb9, 0x58, 0x00, 0x00, 0x00, 0x00, 0x4f, 0xce, 0x67, 0xa7, 0x50, 0x14, 0x00, 0x00,
        0x0a, 0xaa, 0x00, 0x00,
    ];

    #[test]
    fn checksum_of_a_kernel_validated_segment() {
        let ip = parse_ipv4(&LINUX_RST).unwrap();
        assert_eq!(
            (ip.src, ip.dst, ip.ttl, ip.proto, ip.total_len),
            ("10.99.0.2".parse().unwrap(), "10.99.0.1".parse().unwrap(), 64, 6, 40)
        );
        let (src, dst) = (IpAddr::V4(ip.src), IpAddr::V4(ip.dst));
        // A correct segment sums to zero with its checksum in place…
        assert_eq!(tcp_checksum(src, dst, ip.payload), 0);
        // …and recomputing with the field zeroed gives the captured value.
        let mut seg = ip.payload.to_vec();
        seg[16] = 0;
        seg[17] = 0;
        assert_eq!(tcp_checksum(src, dst, &seg), 0x0aaa);
        let h = parse_tcp(ip.payload).unwrap();
        assert_eq!((h.sport, h.dport, h.seq, h.ack, h.flags, h.window), (8080, 47448, 0, 0x4fce_67a7, RST | ACK, 0));
        // One bit off and it no longer sums to zero.
        seg[16] = 0x0a;
        seg[17] = 0xab;
        assert_ne!(tcp_checksum(src, dst, &seg), 0);
    }

    #[test]
    fn checksum_rfc1071_example_and_odd_length() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to 0xddf2 (checksum = !0xddf2).
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum_words(&d, 0)), !0xddf2);
        // An odd trailing byte is the high half of a last word.
        assert_eq!(sum_words(&[0x12], 0), 0x1200);
    }

    #[test]
    fn syn_layout() {
        let src: IpAddr = "10.0.0.1".parse().unwrap();
        let dst: IpAddr = "10.0.0.2".parse().unwrap();
        let s = build_syn(src, dst, 40000, 80, 0xdead_beef);
        assert_eq!(&s[0..2], &40000u16.to_be_bytes());
        assert_eq!(&s[2..4], &80u16.to_be_bytes());
        assert_eq!(&s[4..8], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&s[8..12], &[0, 0, 0, 0]);
        assert_eq!(s[12], 0x60, "data offset 6 words");
        assert_eq!(s[13], SYN);
        assert_eq!(&s[20..24], &[2, 4, 0x05, 0xb4], "MSS 1460");
        assert_eq!(tcp_checksum(src, dst, &s), 0, "checksum valid over the pseudo-header");
        let h = parse_tcp(&s).unwrap();
        assert_eq!((h.sport, h.dport, h.seq, h.ack, h.flags), (40000, 80, 0xdead_beef, 0, SYN));
        // IPv6: the kernel fills the checksum.
        let s6 = build_syn("::1".parse().unwrap(), "::1".parse().unwrap(), 1, 2, 3);
        assert_eq!(&s6[16..18], &[0, 0]);
    }

    #[test]
    fn tcp_parse_rejects_short_and_bad_offsets() {
        let seg = &LINUX_RST[20..];
        assert!(parse_tcp(&seg[..19]).is_none());
        let mut s = [0u8; 20];
        s.copy_from_slice(seg);
        s[12] = 0x40; // 16 bytes: less than a header
        assert!(parse_tcp(&s).is_none());
        s[12] = 0x60; // 24 bytes: more than there is
        assert!(parse_tcp(&s).is_none());
        assert_eq!(flag_letters(SYN | ACK), "SA");
        assert_eq!(flag_letters(RST | ACK), "RA");
    }

    /// ICMP time exceeded from 10.77.1.1 about our SYN 10.77.1.2:40000 →
    /// 10.77.3.2:80 seq 0x01020304, quoting the IP header and 8 TCP bytes.
    fn time_exceeded_v4(icmp_type: u8, code: u8) -> Vec<u8> {
        let mut quoted_ip = vec![
            0x45, 0, 0, 44, 0, 0, 0x40, 0, 1, 6, 0, 0, 10, 77, 1, 2, 10, 77, 3, 2, // TTL 1, proto TCP
        ];
        quoted_ip.extend_from_slice(&[0x9c, 0x40, 0x00, 0x50, 1, 2, 3, 4]);
        let mut icmp = vec![icmp_type, code, 0, 0, 0, 0, 0, 0];
        icmp.extend_from_slice(&quoted_ip);
        let total = 20 + icmp.len();
        let mut outer = vec![0x45, 0xc0, 0, total as u8, 0, 0, 0, 0, 64, 1, 0, 0, 10, 77, 1, 1, 10, 77, 1, 2];
        outer.extend_from_slice(&icmp);
        outer
    }

    #[test]
    fn icmp_v4_quote() {
        let e = parse_icmp_v4(&time_exceeded_v4(11, 0)).unwrap();
        assert_eq!(e.from, "10.77.1.1".parse::<IpAddr>().unwrap());
        assert_eq!(e.kind, IcmpKind::TimeExceeded);
        assert_eq!(e.quoted_dst, "10.77.3.2".parse::<IpAddr>().unwrap());
        assert_eq!((e.sport, e.dport, e.seq), (40000, 80, 0x0102_0304));
        let u = parse_icmp_v4(&time_exceeded_v4(3, 13)).unwrap();
        assert_eq!(u.kind, IcmpKind::Unreachable { v6: false, code: 13 });
        assert_eq!(u.kind.mark(), "!X");
        // Echo reply, or a quote cut before the TCP ports: not ours.
        assert!(parse_icmp_v4(&time_exceeded_v4(0, 0)).is_none());
        let p = time_exceeded_v4(11, 0);
        assert!(parse_icmp_v4(&p[..p.len() - 1]).is_none());
        // Every truncation is handled without panicking.
        for n in 0..p.len() {
            let _ = parse_icmp_v4(&p[..n]);
        }
        // A quote of a UDP packet is not ours.
        let mut udp = time_exceeded_v4(11, 0);
        udp[20 + 8 + 9] = 17;
        assert!(parse_icmp_v4(&udp).is_none());
    }

    #[test]
    fn icmp_v6_quote() {
        let mut m = vec![3, 0, 0, 0, 0, 0, 0, 0];
        let mut ip6 = vec![0x60, 0, 0, 0, 0, 24, 6, 1];
        ip6.extend_from_slice(&"fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        ip6.extend_from_slice(&"fd00:3::2".parse::<Ipv6Addr>().unwrap().octets());
        m.extend_from_slice(&ip6);
        m.extend_from_slice(&[0x9c, 0x40, 0x01, 0xbb, 0xaa, 0xbb, 0xcc, 0xdd]);
        let from: Ipv6Addr = "fd00:1::1".parse().unwrap();
        let e = parse_icmp_v6(&m, from).unwrap();
        assert_eq!(e.kind, IcmpKind::TimeExceeded);
        assert_eq!(e.quoted_dst, "fd00:3::2".parse::<IpAddr>().unwrap());
        assert_eq!((e.sport, e.dport, e.seq), (40000, 443, 0xaabb_ccdd));
        m[0] = 1;
        m[1] = 1;
        assert_eq!(parse_icmp_v6(&m, from).unwrap().kind.mark(), "!X");
        m[0] = 129; // echo reply
        assert!(parse_icmp_v6(&m, from).is_none());
        for n in 0..m.len() {
            let _ = parse_icmp_v6(&m[..n], from);
        }
    }
}
