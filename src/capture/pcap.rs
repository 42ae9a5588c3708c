//! Classic pcap: µs or ns magic, either byte order, and the "modified" variant.

use super::{Damage, LinkType, OpenError, Record};
use pcap_parser::pcap::{
    LegacyPcapBlock, parse_pcap_frame, parse_pcap_frame_be, parse_pcap_frame_modified, parse_pcap_header,
};
use pcap_parser::{PcapError, nom};

type FrameParser = for<'b> fn(&'b [u8]) -> nom::IResult<&'b [u8], LegacyPcapBlock<'b>, PcapError<&'b [u8]>>;

pub(crate) struct Reader<'a> {
    rest: &'a [u8],
    offset: u64,
    parse: FrameParser,
    link: LinkType,
    /// Multiplier from the fractional field to nanoseconds (1000 for µs files).
    frac_ns: i64,
    big_endian: bool,
    /// Record header size: 16, or 24 for the "modified" format.
    record_header: usize,
    done: bool,
}

/// libpcap's largest snap length: a record claiming more is damage, not a big packet.
const MAX_CAPLEN: u32 = 262_144;

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Result<Reader<'a>, OpenError> {
        let (rest, hdr) = parse_pcap_header(bytes).map_err(|_| {
            OpenError::at(0, format!("pcap file header is cut short ({} of 24 bytes)", bytes.len().min(24)))
        })?;
        let parse: FrameParser = if hdr.is_modified_format() {
            parse_pcap_frame_modified
        } else if hdr.is_bigendian() {
            parse_pcap_frame_be
        } else {
            parse_pcap_frame
        };
        let frac_ns = if hdr.is_nanosecond_precision() { 1 } else { 1000 };
        Ok(Reader {
            rest,
            offset: 24,
            parse,
            // The upper bits carry FCS information, not the link type.
            link: LinkType(hdr.network.0 as u32 & 0xffff),
            frac_ns,
            big_endian: hdr.is_bigendian(),
            record_header: if hdr.is_modified_format() { 24 } else { 16 },
            done: false,
        })
    }

    #[inline]
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    pub(crate) fn next(&mut self) -> Option<Result<Record<'a>, Damage>> {
        if self.done || self.rest.is_empty() {
            return None;
        }
        match (self.parse)(self.rest) {
            Ok((rest, b)) => {
                let used = self.rest.len() - rest.len();
                self.offset += used as u64;
                self.rest = rest;
                let ts_ns = i64::from(b.ts_sec) * 1_000_000_000 + i64::from(b.ts_usec) * self.frac_ns;
                Some(Ok(Record::Packet { ts_ns, link: self.link, data: b.data, orig_len: b.origlen }))
            }
            Err(_) => {
                self.done = true;
                Some(Err(Damage {
                    offset: self.offset,
                    what: truncated_what(self.rest, self.big_endian, self.record_header),
                }))
            }
        }
    }
}

fn truncated_what(rest: &[u8], big_endian: bool, header: usize) -> String {
    if rest.len() < header {
        return format!(
            "packet record header cut short ({} of {header} bytes); the capture was probably interrupted",
            rest.len()
        );
    }
    let raw = [rest[8], rest[9], rest[10], rest[11]];
    let caplen = if big_endian { u32::from_be_bytes(raw) } else { u32::from_le_bytes(raw) };
    if caplen > MAX_CAPLEN {
        format!(
            "packet record claims {caplen} bytes (more than the {MAX_CAPLEN}-byte maximum): the file is damaged here"
        )
    } else {
        format!(
            "packet record cut short ({} of {} bytes); the capture was probably interrupted",
            rest.len() - header,
            caplen
        )
    }
}
