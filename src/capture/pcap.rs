//! Classic pcap: µs or ns magic, either byte order, and the "modified" variant.

use super::{Damage, LinkType, OpenError, Record};
use pcap_parser::pcap::{
    LegacyPcapBlock, parse_pcap_frame, parse_pcap_frame_be, parse_pcap_frame_modified, parse_pcap_header,
};
use pcap_parser::{PcapError, nom};

/// Record layout: chosen once from the file header; matched (not called
/// through a pointer) so the per-record parse inlines.
#[derive(Clone, Copy)]
enum Layout {
    Le,
    Be,
    Modified,
}

#[inline(always)]
fn parse(layout: Layout, i: &[u8]) -> nom::IResult<&[u8], LegacyPcapBlock<'_>, PcapError<&[u8]>> {
    match layout {
        Layout::Le => parse_pcap_frame(i),
        Layout::Be => parse_pcap_frame_be(i),
        Layout::Modified => parse_pcap_frame_modified(i),
    }
}

pub(crate) struct Reader<'a> {
    rest: &'a [u8],
    offset: u64,
    layout: Layout,
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
        let layout = if hdr.is_modified_format() {
            Layout::Modified
        } else if hdr.is_bigendian() {
            Layout::Be
        } else {
            Layout::Le
        };
        let frac_ns = if hdr.is_nanosecond_precision() { 1 } else { 1000 };
        Ok(Reader {
            rest,
            offset: 24,
            layout,
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

    /// The next record; on damage, sets `damage` and ends.
    #[inline]
    pub(crate) fn next(&mut self, damage: &mut Option<Damage>) -> Option<Record<'a>> {
        if self.done || self.rest.is_empty() {
            return None;
        }
        match parse(self.layout, self.rest) {
            Ok((rest, b)) => {
                let used = self.rest.len() - rest.len();
                self.offset += used as u64;
                self.rest = rest;
                let ts_ns = i64::from(b.ts_sec) * 1_000_000_000 + i64::from(b.ts_usec) * self.frac_ns;
                Some(Record::Packet { ts_ns, link: self.link, data: b.data, orig_len: b.origlen })
            }
            Err(_) => {
                self.done = true;
                *damage = Some(Damage {
                    offset: self.offset,
                    what: truncated_what(self.rest, self.big_endian, self.record_header),
                });
                None
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
