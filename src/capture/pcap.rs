//! Classic pcap: µs or ns magic, either byte order, and the "modified" variant.

use super::{Head, LinkType, OpenError, Record, Step};
use pcap_parser::pcap::parse_pcap_header;

/// What the file header says about every record.
#[derive(Clone, Copy)]
pub(crate) struct Parser {
    link: LinkType,
    /// Multiplier from the fractional field to nanoseconds (1000 for µs files).
    frac_ns: i64,
    /// Record headers are big-endian (the "modified" format is always little-endian).
    big_endian: bool,
    /// Record header size: 16, or 24 for the "modified" format.
    record_header: usize,
}

/// libpcap's largest snap length: a record claiming more is damage, not a big
/// packet. It also bounds what a streamed record can make the reader buffer.
pub(crate) const MAX_CAPLEN: u32 = 262_144;

const FILE_HEADER: usize = 24;

impl Parser {
    /// The file header at the start of `buf` (`eof`: no more bytes will come).
    pub(crate) fn header(buf: &[u8], eof: bool) -> Head<Parser> {
        if buf.len() < FILE_HEADER {
            if !eof {
                return Head::Need(FILE_HEADER);
            }
            return Head::Bad(OpenError::at(
                0,
                format!("pcap file header is cut short ({} of {FILE_HEADER} bytes)", buf.len()),
            ));
        }
        let Ok((_, hdr)) = parse_pcap_header(buf) else {
            return Head::Bad(OpenError::at(0, "pcap file header is damaged"));
        };
        let frac_ns = if hdr.is_nanosecond_precision() { 1 } else { 1000 };
        Head::Ready(
            Parser {
                // The upper bits carry FCS information, not the link type.
                link: LinkType(hdr.network.0 as u32 & 0xffff),
                frac_ns,
                big_endian: hdr.is_bigendian() && !hdr.is_modified_format(),
                record_header: if hdr.is_modified_format() { 24 } else { 16 },
            },
            FILE_HEADER,
        )
    }

    /// The record at `at` of a file in memory, when it is whole and sound:
    /// (time, data range, packet length). `None` leaves it to [`Parser::record`],
    /// which says what is wrong; the checks are the same.
    #[inline(always)]
    pub(crate) fn whole(&self, bytes: &[u8], at: usize) -> Option<(i64, std::ops::Range<usize>, u32)> {
        let fields: &[u8; 16] = bytes.get(at..at + 16)?.try_into().ok()?;
        let le = |i: usize| u32::from_le_bytes([fields[i], fields[i + 1], fields[i + 2], fields[i + 3]]);
        // One branch on the byte order for all four fields.
        let mut f = [le(0), le(4), le(8), le(12)];
        if self.big_endian {
            f = f.map(u32::swap_bytes);
        }
        let [secs, frac, caplen, orig_len] = f;
        let from = at + self.record_header;
        let end = from + caplen as usize;
        if caplen > MAX_CAPLEN || end > bytes.len() || orig_len == 0 {
            return None;
        }
        let ts_ns = i64::from(secs) * 1_000_000_000 + i64::from(frac) * self.frac_ns;
        Some((ts_ns, from..end, orig_len))
    }

    /// Whether the file's records have the usual layout: little-endian
    /// 16-byte record headers.
    #[inline]
    pub(crate) fn usual(&self) -> bool {
        !self.big_endian && self.record_header == 16
    }

    /// This parser of a file whose records have the usual layout
    /// ([`Parser::usual`]), with that layout's fields as constants: a loop
    /// over records that uses it is compiled for that layout alone.
    #[inline(always)]
    pub(crate) fn as_usual(self) -> Parser {
        debug_assert!(self.usual());
        Parser { big_endian: false, record_header: 16, ..self }
    }

    /// The link type of every record.
    #[inline(always)]
    pub(crate) fn link(&self) -> LinkType {
        self.link
    }

    /// The record at the start of `buf`.
    #[inline(always)]
    pub(crate) fn record<'b>(&self, buf: &'b [u8], eof: bool) -> Step<'b> {
        let h = self.record_header;
        if buf.len() < h {
            return if eof {
                Step::Damage(format!(
                    "packet record header cut short ({} of {h} bytes); the capture was probably interrupted",
                    buf.len()
                ))
            } else {
                Step::Need(h)
            };
        }
        // The four fields every layout starts with (one bounds check for all).
        let fields: &[u8; 16] = buf[..16].try_into().expect("16 bytes");
        let field = |at: usize| {
            let raw = [fields[at], fields[at + 1], fields[at + 2], fields[at + 3]];
            if self.big_endian { u32::from_be_bytes(raw) } else { u32::from_le_bytes(raw) }
        };
        let caplen = field(8);
        if caplen > MAX_CAPLEN {
            return Step::Damage(format!(
                "packet record claims {caplen} bytes (more than the {MAX_CAPLEN}-byte maximum): the file is damaged here"
            ));
        }
        let used = h + caplen as usize;
        if buf.len() < used {
            return if eof {
                Step::Damage(format!(
                    "packet record cut short ({} of {caplen} bytes); the capture was probably interrupted",
                    buf.len() - h
                ))
            } else {
                Step::Need(used)
            };
        }
        let orig_len = field(12);
        if orig_len == 0 {
            // No link has 0-byte packets: this is zeros (or garbage) where a record should be.
            return Step::Damage("packet record says the packet was 0 bytes long: the file is damaged here".into());
        }
        let ts_ns = i64::from(field(0)) * 1_000_000_000 + i64::from(field(4)) * self.frac_ns;
        Step::Record(used, Record::Packet { ts_ns, link: self.link, data: &buf[h..used], orig_len })
    }
}
