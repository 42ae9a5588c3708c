//! TCP header view and the options the analysis uses.

use super::WireError;

/// TCP flags byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Flags(pub u8);

impl Flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
    /// FIN set.
    #[inline]
    pub fn fin(self) -> bool {
        self.0 & Self::FIN != 0
    }
    /// SYN set.
    #[inline]
    pub fn syn(self) -> bool {
        self.0 & Self::SYN != 0
    }
    /// RST set.
    #[inline]
    pub fn rst(self) -> bool {
        self.0 & Self::RST != 0
    }
    /// ACK set.
    #[inline]
    pub fn ack(self) -> bool {
        self.0 & Self::ACK != 0
    }
}

/// The TCP options tcpdoctor reads. Absent options are `None`/`false`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpOptions {
    /// Maximum segment size (SYN only).
    pub mss: Option<u16>,
    /// Window scale shift (SYN only).
    pub wscale: Option<u8>,
    /// SACK permitted (SYN only).
    pub sack_permitted: bool,
    /// Number of SACK blocks.
    pub sack_blocks: u8,
    /// Timestamps (TSval, TSecr).
    pub timestamps: Option<(u32, u32)>,
}

/// A checked view of a TCP header.
#[derive(Clone, Copy, Debug)]
pub struct TcpHeader<'a>(&'a [u8]);

impl<'a> TcpHeader<'a> {
    /// Checks the fixed header is captured and the data offset is sane.
    /// Options cut by the snap length are read as far as captured.
    #[inline]
    pub fn parse(p: &'a [u8]) -> Result<Self, WireError> {
        if p.len() < 20 {
            return Err(WireError::Truncated("TCP header"));
        }
        if p[12] >> 4 < 5 {
            return Err(WireError::Malformed("TCP data offset"));
        }
        Ok(TcpHeader(p))
    }
    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.0[0], self.0[1]])
    }
    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.0[2], self.0[3]])
    }
    /// Sequence number.
    #[inline]
    pub fn seq(&self) -> u32 {
        u32::from_be_bytes([self.0[4], self.0[5], self.0[6], self.0[7]])
    }
    /// Acknowledgement number.
    #[inline]
    pub fn ack(&self) -> u32 {
        u32::from_be_bytes([self.0[8], self.0[9], self.0[10], self.0[11]])
    }
    /// Header length including options.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.0[12] >> 4) * 4
    }
    /// Flags.
    #[inline]
    pub fn flags(&self) -> Flags {
        Flags(self.0[13])
    }
    /// Raw window field.
    #[inline]
    pub fn window(&self) -> u16 {
        u16::from_be_bytes([self.0[14], self.0[15]])
    }
    /// The captured option bytes (empty without options).
    #[inline]
    pub fn option_bytes(&self) -> &'a [u8] {
        let end = self.header_len().min(self.0.len());
        &self.0[20.min(end)..end]
    }
    /// Parses the options that are captured; malformed lengths end the walk.
    #[inline]
    pub fn options(&self) -> TcpOptions {
        let end = self.header_len().min(self.0.len());
        parse_options(&self.0[20.min(end)..end])
    }
}

/// The timestamp option (TSval, TSecr) in captured option bytes. Linux and
/// the BSDs put it first, after two NOPs: that layout is read directly, any
/// other by walking the options.
pub fn timestamps(o: &[u8]) -> Option<(u32, u32)> {
    match o.get(..12) {
        Some(o) if o[..4] == [1, 1, 8, 10] => {
            Some((u32::from_be_bytes([o[4], o[5], o[6], o[7]]), u32::from_be_bytes([o[8], o[9], o[10], o[11]])))
        }
        _ if !o.is_empty() => parse_options(o).timestamps,
        _ => None,
    }
}

fn parse_options(mut o: &[u8]) -> TcpOptions {
    let mut out = TcpOptions::default();
    while let Some(&kind) = o.first() {
        match kind {
            0 => break,
            1 => {
                o = &o[1..];
                continue;
            }
            _ => {}
        }
        let Some(&len) = o.get(1) else { break };
        let len = usize::from(len);
        if len < 2 || len > o.len() {
            break;
        }
        let body = &o[2..len];
        match (kind, body.len()) {
            (2, 2) => out.mss = Some(u16::from_be_bytes([body[0], body[1]])),
            (3, 1) => out.wscale = Some(body[0].min(14)),
            (4, 0) => out.sack_permitted = true,
            (5, n) => out.sack_blocks = (n / 8) as u8,
            (8, 8) => {
                let val = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                let ecr = u32::from_be_bytes([body[4], body[5], body[6], body[7]]);
                out.timestamps = Some((val, ecr));
            }
            _ => {}
        }
        o = &o[len..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_of_a_linux_syn() {
        // MSS 65495, SACK-permitted, timestamps, NOP, wscale 7.
        let o = [2, 4, 0xff, 0xd7, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7];
        let p = parse_options(&o);
        assert_eq!(p.mss, Some(65495));
        assert!(p.sack_permitted);
        assert_eq!(p.timestamps, Some((1, 0)));
        assert_eq!(p.wscale, Some(7));
    }

    #[test]
    fn bad_option_lengths_stop_the_walk() {
        assert_eq!(parse_options(&[2, 0, 1, 1]), TcpOptions::default());
        assert_eq!(parse_options(&[2, 40, 1]), TcpOptions::default());
        assert_eq!(parse_options(&[5, 10, 0, 0, 0, 0, 0, 0, 0, 0]).sack_blocks, 1);
    }

    fn header(opts: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; 20];
        h[12] = (((20 + opts.len()) / 4) << 4) as u8;
        h.extend_from_slice(opts);
        h
    }

    #[test]
    fn timestamps_of_any_segment_in_either_layout() {
        // Linux: NOP, NOP, TS.
        let h = header(&[1, 1, 8, 10, 0, 0, 1, 0, 0, 0, 0, 7]);
        assert_eq!(timestamps(TcpHeader::parse(&h).unwrap().option_bytes()), Some((256, 7)));
        // Another order: SACK block first, then TS, then padding.
        let mut o = vec![1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2, 8, 10, 0, 0, 0, 9, 0, 0, 0, 3];
        o.extend([1, 1]);
        let h = header(&o);
        assert_eq!(timestamps(TcpHeader::parse(&h).unwrap().option_bytes()), Some((9, 3)));
        // None, and cut short by the snap length.
        assert_eq!(timestamps(TcpHeader::parse(&header(&[])).unwrap().option_bytes()), None);
        let h = header(&[1, 1, 8, 10, 0, 0, 1, 0, 0, 0, 0, 7]);
        assert_eq!(timestamps(TcpHeader::parse(&h[..28]).unwrap().option_bytes()), None);
    }
}
