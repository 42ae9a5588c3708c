//! IPv4 and IPv6 header views.

use super::WireError;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A checked view of an IPv4 header.
#[derive(Clone, Copy, Debug)]
pub struct Ipv4Header<'a>(&'a [u8]);

impl<'a> Ipv4Header<'a> {
    /// Checks version, header length and that the header is captured.
    #[inline]
    pub fn parse(p: &'a [u8]) -> Result<Self, WireError> {
        if p.len() < 20 {
            return Err(WireError::Truncated("IPv4 header"));
        }
        if p[0] >> 4 != 4 {
            return Err(WireError::Malformed("IPv4 version"));
        }
        let hl = usize::from(p[0] & 0x0f) * 4;
        if hl < 20 {
            return Err(WireError::Malformed("IPv4 header length"));
        }
        if p.len() < hl {
            return Err(WireError::Truncated("IPv4 options"));
        }
        Ok(Ipv4Header(p))
    }
    /// Header length in bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.0[0] & 0x0f) * 4
    }
    /// Total length field.
    #[inline]
    pub fn total_len(&self) -> u16 {
        u16::from_be_bytes([self.0[2], self.0[3]])
    }
    /// Identification field.
    #[inline]
    pub fn id(&self) -> u16 {
        u16::from_be_bytes([self.0[4], self.0[5]])
    }
    /// More-fragments set or a non-zero fragment offset.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        u16::from_be_bytes([self.0[6], self.0[7]]) & 0x3fff != 0
    }
    /// Protocol number.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.0[9]
    }
    /// Source address.
    #[inline]
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.0[12], self.0[13], self.0[14], self.0[15])
    }
    /// Destination address.
    #[inline]
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.0[16], self.0[17], self.0[18], self.0[19])
    }
}

/// A checked view of an IPv6 fixed header.
#[derive(Clone, Copy, Debug)]
pub struct Ipv6Header<'a>(&'a [u8]);

impl<'a> Ipv6Header<'a> {
    /// Checks version and that the fixed header is captured.
    #[inline]
    pub fn parse(p: &'a [u8]) -> Result<Self, WireError> {
        if p.len() < 40 {
            return Err(WireError::Truncated("IPv6 header"));
        }
        if p[0] >> 4 != 6 {
            return Err(WireError::Malformed("IPv6 version"));
        }
        Ok(Ipv6Header(p))
    }
    /// Payload length field (0 for jumbograms and some offloaded frames).
    #[inline]
    pub fn payload_len(&self) -> u16 {
        u16::from_be_bytes([self.0[4], self.0[5]])
    }
    /// Source address.
    #[inline]
    pub fn src(&self) -> Ipv6Addr {
        Ipv6Addr::from(<[u8; 16]>::try_from(&self.0[8..24]).unwrap_or_default())
    }
    /// Destination address.
    #[inline]
    pub fn dst(&self) -> Ipv6Addr {
        Ipv6Addr::from(<[u8; 16]>::try_from(&self.0[24..40]).unwrap_or_default())
    }
    /// Walks extension headers to the upper-layer protocol and its offset.
    /// `None` for non-first fragments, ESP and "no next header".
    pub fn upper_layer(&self, p: &[u8]) -> Result<Option<(u8, usize)>, WireError> {
        let mut next = p[6];
        let mut off = 40;
        // Bounded: a chain longer than this is hostile, not real traffic.
        for _ in 0..16 {
            match next {
                0 | 43 | 60 | 135 | 139 | 140 => {
                    let h = p.get(off..off + 2).ok_or(WireError::Truncated("IPv6 extension header"))?;
                    next = h[0];
                    off += (usize::from(h[1]) + 1) * 8;
                }
                44 => {
                    let h = p.get(off..off + 8).ok_or(WireError::Truncated("IPv6 fragment header"))?;
                    let frag = u16::from_be_bytes([h[2], h[3]]);
                    if frag & 0xfff9 != 0 {
                        return Ok(None); // a fragment: its TCP header is not reassembled here
                    }
                    next = h[0];
                    off += 8;
                }
                51 => {
                    let h = p.get(off..off + 2).ok_or(WireError::Truncated("IPv6 AH header"))?;
                    next = h[0];
                    off += (usize::from(h[1]) + 2) * 4;
                }
                50 | 59 => return Ok(None),
                proto => {
                    if off > p.len() {
                        return Err(WireError::Truncated("IPv6 extension header"));
                    }
                    return Ok(Some((proto, off)));
                }
            }
        }
        Err(WireError::Malformed("IPv6 extension header chain (too long)"))
    }
}
