//! Zero-copy views of IPv4, IPv6, TCP and TLS record headers, and [`decode`], which turns
//! a captured frame into the [`Segment`] the connection tracker needs.

mod ip;
mod tcp;
pub mod tls;

pub use ip::{Ipv4Header, Ipv6Header};
pub use tcp::{Flags, TcpHeader, TcpOptions};

use crate::capture::{LinkType, Network, network_layer};
use std::fmt;
use std::net::IpAddr;

/// An IP address and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    /// Address.
    pub ip: IpAddr,
    /// TCP port.
    pub port: u16,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            IpAddr::V4(a) => write!(f, "{a}:{}", self.port),
            IpAddr::V6(a) => write!(f, "[{a}]:{}", self.port),
        }
    }
}

/// The facts about one TCP segment that the rest of the pipeline uses.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'a> {
    /// 1-based frame number in its capture.
    pub frame: u64,
    /// Capture time, ns since the epoch.
    pub ts_ns: i64,
    /// Sender.
    pub src: Endpoint,
    /// Receiver.
    pub dst: Endpoint,
    /// Sequence number of the first byte (or of the SYN).
    pub seq: u32,
    /// Acknowledgement number (meaningful when `flags.ack()`).
    pub ack: u32,
    /// TCP flags.
    pub flags: Flags,
    /// Raw (unscaled) receive window.
    pub window: u16,
    /// Payload length on the wire, from the IP length (not cut by the snap length).
    pub len: u32,
    /// Options the tracker uses; parsed on SYN segments only, default elsewhere
    /// (see [`Segment::timestamps`]).
    pub options: TcpOptions,
    /// The captured TCP option bytes, read only when asked.
    pub tcp_options: &'a [u8],
    /// The captured part of the payload (may be shorter than `len`).
    pub payload: &'a [u8],
    /// IPv4 identification (Linux numbers each socket's packets in turn, so a
    /// gap says one went missing before the capture point); `None` for IPv6.
    pub ip_id: Option<u16>,
}

impl Segment<'_> {
    /// The timestamp option (TSval, TSecr), parsed now: only a few segments need it.
    pub fn timestamps(&self) -> Option<(u32, u32)> {
        if self.options.timestamps.is_some() {
            return self.options.timestamps;
        }
        tcp::timestamps(self.tcp_options)
    }
}

/// Why a frame could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The frame ends inside a header.
    Truncated(&'static str),
    /// A header field is impossible (bad version, lengths out of range).
    Malformed(&'static str),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated(w) => write!(f, "{w} cut short"),
            WireError::Malformed(w) => write!(f, "malformed {w}"),
        }
    }
}

/// Decodes a frame down to its TCP segment. `Ok(None)` means "not TCP over IP"
/// (ARP, UDP, non-first IP fragments…), which is not an error.
#[inline]
pub fn decode(
    frame: u64,
    ts_ns: i64,
    link: LinkType,
    data: &[u8],
    orig_len: u32,
) -> Result<Option<Segment<'_>>, WireError> {
    // Most frames: untagged Ethernet, IPv4 without options carrying TCP, not
    // a fragment, the TCP header's first 20 bytes captured. Every check the
    // general path makes on those bytes passes, so they are made once here;
    // the segment is the one the general path builds (tests below).
    if link == LinkType::ETHERNET
        && let Some(h) = data.get(..54)
        && plain_ipv4_tcp(h)
    {
        let total = usize::from(u16::from_be_bytes([h[16], h[17]]));
        let wire_len = ip_wire_len(total, data.len() - 14, data.len(), orig_len)
            .ok_or(WireError::Malformed("IPv4 total length (longer than the frame)"))?;
        if wire_len < 20 {
            return Err(WireError::Malformed("IPv4 total length"));
        }
        let v4 = |i: usize| IpAddr::V4(std::net::Ipv4Addr::new(h[i], h[i + 1], h[i + 2], h[i + 3]));
        let id = u16::from_be_bytes([h[18], h[19]]);
        return tcp_segment(frame, ts_ns, (v4(26), v4(30)), &data[34..], wire_len - 20, Some(id));
    }
    general(frame, ts_ns, link, data, orig_len)
}

/// Whether an Ethernet frame (its first 24 bytes at least) is untagged IPv4
/// without options, carrying TCP, and not a fragment: most frames, whose
/// headers then lie at fixed offsets.
#[inline(always)]
pub(crate) fn plain_ipv4_tcp(h: &[u8]) -> bool {
    h.len() >= 24 && h[12..14] == [8, 0] && h[14] == 0x45 && h[23] == 6 && h[20] & 0x3f | h[21] == 0
}

/// [`decode`] for any frame.
#[inline]
fn general(frame: u64, ts: i64, link: LinkType, data: &[u8], orig_len: u32) -> Result<Option<Segment<'_>>, WireError> {
    // Untagged Ethernet with IPv4, found without the general link walk.
    let network = match data.get(12..14) {
        Some([8, 0]) if link == LinkType::ETHERNET => Network::Ipv4(&data[14..]),
        _ => network_layer(link, data),
    };
    match network {
        Network::Ipv4(p) => {
            let ip = Ipv4Header::parse(p)?;
            if ip.protocol() != 6 || ip.is_fragment() {
                return Ok(None);
            }
            let wire_len = ip_wire_len(ip.total_len() as usize, p.len(), data.len(), orig_len)
                .ok_or(WireError::Malformed("IPv4 total length (longer than the frame)"))?;
            let hl = ip.header_len();
            if wire_len < hl {
                return Err(WireError::Malformed("IPv4 total length"));
            }
            let ends = (IpAddr::V4(ip.src()), IpAddr::V4(ip.dst()));
            tcp_segment(frame, ts, ends, &p[hl..], wire_len - hl, Some(ip.id()))
        }
        Network::Ipv6(p) => {
            let ip = Ipv6Header::parse(p)?;
            let Some((proto, off)) = ip.upper_layer(p)? else {
                return Ok(None);
            };
            if proto != 6 {
                return Ok(None);
            }
            let plen = ip.payload_len() as usize;
            let total = if plen == 0 { 0 } else { plen + 40 };
            let wire_len = ip_wire_len(total, p.len(), data.len(), orig_len)
                .ok_or(WireError::Malformed("IPv6 payload length (longer than the frame)"))?;
            if wire_len < off {
                return Err(WireError::Malformed("IPv6 payload length"));
            }
            tcp_segment(frame, ts, (IpAddr::V6(ip.src()), IpAddr::V6(ip.dst())), &p[off..], wire_len - off, None)
        }
        Network::Other => Ok(None),
        Network::Truncated => Err(WireError::Truncated("link-layer header")),
    }
}

/// The segment in `l4` (the IP payload as captured; `l4_wire_len` bytes on
/// the wire) between the addresses `ends`. Inlined into each IP version's
/// branch: built after the branches met, the segment's addresses were
/// written whole (an IPv6 address's 16 bytes for every IPv4 packet).
#[inline(always)]
fn tcp_segment(
    frame: u64,
    ts_ns: i64,
    ends: (IpAddr, IpAddr),
    l4: &[u8],
    l4_wire_len: usize,
    ip_id: Option<u16>,
) -> Result<Option<Segment<'_>>, WireError> {
    let tcp = TcpHeader::parse(l4)?;
    let hl = tcp.header_len();
    if l4_wire_len < hl {
        return Err(WireError::Malformed("TCP length (IP length shorter than the TCP header)"));
    }
    let len = l4_wire_len - hl;
    let payload = l4.get(hl..).unwrap_or(&[]);
    // The options are set afterwards, on SYNs only: chosen inside the literal,
    // they were built on the stack and copied in, which stalled on every packet.
    let mut out = Ok(Some(Segment {
        frame,
        ts_ns,
        src: Endpoint { ip: ends.0, port: tcp.src_port() },
        dst: Endpoint { ip: ends.1, port: tcp.dst_port() },
        seq: tcp.seq(),
        ack: tcp.ack(),
        flags: tcp.flags(),
        window: tcp.window(),
        len: len as u32,
        options: TcpOptions::default(),
        tcp_options: tcp.option_bytes(),
        payload: &payload[..payload.len().min(len)],
        ip_id,
    }));
    if let Ok(Some(seg)) = &mut out
        && seg.flags.syn()
    {
        seg.options = tcp.options();
    }
    out
}

/// The IP packet's length on the wire. A zero length field (TSO/GSO frames
/// captured on the sending host) falls back to the frame's original length.
/// `None` when the field claims more than the frame held on the wire.
#[inline]
fn ip_wire_len(field: usize, ip_caplen: usize, frame_caplen: usize, orig_len: u32) -> Option<usize> {
    let link_hdr = frame_caplen - ip_caplen;
    let on_wire = (orig_len as usize).saturating_sub(link_hdr).max(ip_caplen);
    match field {
        0 => Some(on_wire),
        f if f <= on_wire => Some(f),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every frame of every capture in tests/data, with bytes changed where
    /// the quick path reads them and cut as a snap length cuts it, decodes
    /// to the same segment (or error) by [`decode`] as by the general path.
    #[test]
    fn the_quick_path_is_the_general_one() {
        use crate::capture::test_files::{captures, variants};
        let (mut frames, mut quick) = (0, 0);
        for (p, bytes) in captures() {
            let (packets, _) = crate::capture::all_packets(&bytes).unwrap();
            for pk in packets {
                let changes = [
                    (12, 0x81),
                    (14, 0x46),
                    (14, 0x55),
                    (16, 0),
                    (17, 0),
                    (16, 0xff),
                    (20, 0x20),
                    (20, 0x40),
                    (21, 1),
                    (23, 17),
                    (46, 0x40),
                    (46, 0xf0),
                ];
                for d in &variants(pk.data, &changes, &[34, 53, 54, 60, 66, 74, 80]) {
                    for len in [d.len() as u32, pk.orig_len, 0, 40] {
                        let a = format!("{:?}", decode(pk.frame, pk.ts_ns, pk.link, d, len));
                        let b = format!("{:?}", general(pk.frame, pk.ts_ns, pk.link, d, len));
                        assert_eq!(a, b, "{}: frame {}, {} bytes of {len}", p.display(), pk.frame, d.len());
                    }
                    frames += 1;
                    quick += usize::from(pk.link == LinkType::ETHERNET && d.len() >= 54 && plain_ipv4_tcp(d));
                }
            }
        }
        assert!(frames > 10_000 && quick > 5_000, "{frames} frames, {quick} on the quick path");
    }

    /// An IPv6/TCP packet with the given extension headers (next-header chain) and payload.
    fn v6(exts: &[(u8, Vec<u8>)], payload: usize) -> Vec<u8> {
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = Flags::ACK;
        tcp.extend(std::iter::repeat_n(0xab, payload));
        let mut body = Vec::new();
        let first = exts.first().map_or(6, |e| e.0);
        for (i, (_, h)) in exts.iter().enumerate() {
            let mut h = h.clone();
            h[0] = exts.get(i + 1).map_or(6, |e| e.0);
            body.extend(h);
        }
        body.extend(tcp);
        let mut p = vec![0x60, 0, 0, 0];
        p.extend((body.len() as u16).to_be_bytes());
        p.extend([first, 64]);
        p.extend([0u8; 15]);
        p.push(1);
        p.extend([0u8; 15]);
        p.push(2);
        p.extend(body);
        p
    }

    #[test]
    fn ipv6_extension_headers_are_walked() {
        let hop = vec![0, 0, 1, 4, 0, 0, 0, 0]; // 8 bytes
        let dst = vec![0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]; // 16 bytes
        let atomic = vec![0, 0, 0, 0, 0, 0, 0, 7]; // offset 0, no more fragments
        let p = v6(&[(0, hop.clone()), (60, dst), (44, atomic)], 10);
        let s = decode(1, 0, LinkType::RAW, &p, p.len() as u32).unwrap().unwrap();
        assert_eq!((s.src.port, s.dst.port, s.len), (40000, 80, 10));
        // Real fragments (first or later) are skipped, as for IPv4: the TCP
        // length of a fragment is not the segment's.
        for frag in [[0, 0, 0, 1, 0, 0, 0, 7], [0, 0, 0, 0x10, 0, 0, 0, 7]] {
            let p = v6(&[(44, frag.to_vec())], 10);
            assert!(decode(1, 0, LinkType::RAW, &p, p.len() as u32).unwrap().is_none());
        }
        // A chain that runs past the packet is an error, not a panic.
        let p = v6(&[(0, hop)], 0);
        let cut = &p[..44];
        assert!(decode(1, 0, LinkType::RAW, cut, cut.len() as u32).is_err());
    }

    #[test]
    fn snaplen_cut_payload_keeps_its_wire_length() {
        let p = v6(&[], 1000);
        let cut = &p[..40 + 20 + 16];
        let s = decode(1, 0, LinkType::RAW, cut, p.len() as u32).unwrap().unwrap();
        assert_eq!(s.len, 1000);
        assert_eq!(s.payload.len(), 16);
        // Not cut, yet the IP length claims more than the frame: malformed.
        let mut bad = p.clone();
        bad[4..6].copy_from_slice(&5000u16.to_be_bytes());
        assert!(matches!(decode(1, 0, LinkType::RAW, &bad, bad.len() as u32), Err(WireError::Malformed(_))));
    }

    #[test]
    fn zero_ip_length_from_segmentation_offload_uses_the_frame_length() {
        let mut p = v6(&[], 3000);
        p[4..6].copy_from_slice(&[0, 0]);
        let s = decode(1, 0, LinkType::RAW, &p, p.len() as u32).unwrap().unwrap();
        assert_eq!(s.len, 3000);
    }

    #[test]
    fn bad_tcp_data_offset_is_malformed() {
        let mut p = v6(&[], 0);
        p[40 + 12] = 4 << 4;
        assert!(matches!(decode(1, 0, LinkType::RAW, &p, p.len() as u32), Err(WireError::Malformed(_))));
        p[40 + 12] = 15 << 4; // 60-byte header in a 20-byte segment
        assert!(decode(1, 0, LinkType::RAW, &p, p.len() as u32).is_err());
    }
}
