//! pcapng: several sections and interfaces, per-interface `if_tsresol` and `if_tsoffset`.

use super::{Head, LinkType, OpenError, Record, Step};
use pcap_parser::pcapng::{Block, parse_block_be, parse_block_le, parse_sectionheaderblock};

struct Interface {
    link: LinkType,
    /// Timestamp units per second.
    units_per_sec: u64,
    offset_s: i64,
}

/// The state a section carries from block to block.
pub(crate) struct Parser {
    big_endian: bool,
    interfaces: Vec<Interface>,
    last_ts_ns: i64,
}

const SHB: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];
/// Type, length, and the trailing length: the smallest block.
const MIN_BLOCK: usize = 12;
/// Interfaces a section may describe: more is damage (each costs memory, and
/// an endless stream of descriptions must not grow it without bound).
const MAX_INTERFACES: usize = 1 << 16;
/// libpcap's largest block: a block claiming more is damage. It also bounds
/// what a streamed block can make the reader buffer.
pub(crate) const MAX_BLOCK: u32 = 16 << 20;

/// Byte order of the section header at the start of `b` (at least 12 bytes),
/// or `None` when its byte-order magic is neither.
fn section_big_endian(b: &[u8]) -> Option<bool> {
    match b[8..12] {
        [0x1a, 0x2b, 0x3c, 0x4d] => Some(true),
        [0x4d, 0x3c, 0x2b, 0x1a] => Some(false),
        _ => None,
    }
}

fn read_u32(b: &[u8], big_endian: bool) -> u32 {
    let raw = [b[0], b[1], b[2], b[3]];
    if big_endian { u32::from_be_bytes(raw) } else { u32::from_le_bytes(raw) }
}

impl Parser {
    /// Checks the first section header (it is read again as the first block).
    pub(crate) fn header(buf: &[u8], eof: bool) -> Head<Parser> {
        let bad = || Head::Bad(OpenError::at(0, "pcapng section header block is damaged or cut short"));
        if buf.len() < MIN_BLOCK {
            return if eof { bad() } else { Head::Need(MIN_BLOCK) };
        }
        let Some(big_endian) = section_big_endian(buf) else { return bad() };
        let len = read_u32(&buf[4..], big_endian);
        if !(MIN_BLOCK as u32..=MAX_BLOCK).contains(&len) {
            return bad();
        }
        if buf.len() < len as usize {
            return if eof { bad() } else { Head::Need(len as usize) };
        }
        match parse_sectionheaderblock(&buf[..len as usize]) {
            Ok(_) => Head::Ready(Parser { big_endian, interfaces: Vec::new(), last_ts_ns: 0 }, 0),
            Err(_) => bad(),
        }
    }

    /// The block at the start of `buf`.
    pub(crate) fn record<'b>(&mut self, buf: &'b [u8], eof: bool) -> Step<'b> {
        let cut = |n: usize| {
            Step::Damage(format!("pcapng block cut short ({n} bytes left); the capture was probably interrupted"))
        };
        if buf.len() < MIN_BLOCK {
            return if eof { cut(buf.len()) } else { Step::Need(MIN_BLOCK) };
        }
        // A new section may switch byte order.
        let shb = buf[..4] == SHB;
        let big_endian = if shb {
            match section_big_endian(buf) {
                Some(b) => b,
                None => return Step::Damage("pcapng section header block is damaged".into()),
            }
        } else {
            self.big_endian
        };
        let len = read_u32(&buf[4..], big_endian);
        if len < MIN_BLOCK as u32 {
            return Step::Damage("pcapng block is damaged (bad length or contents)".into());
        }
        if len > MAX_BLOCK {
            return Step::Damage(format!(
                "pcapng block claims {len} bytes (more than the {}-MiB maximum): the file is damaged here",
                MAX_BLOCK >> 20
            ));
        }
        let used = len as usize;
        if buf.len() < used {
            return if eof { cut(buf.len()) } else { Step::Need(used) };
        }
        let block = &buf[..used];
        if shb {
            if parse_sectionheaderblock(block).is_err() {
                return Step::Damage("pcapng section header block is damaged".into());
            }
            self.big_endian = big_endian;
            self.interfaces.clear();
        }
        let parsed = if big_endian { parse_block_be(block) } else { parse_block_le(block) };
        let Ok((_, block)) = parsed else {
            return Step::Damage("pcapng block is damaged (bad length or contents)".into());
        };
        let rec = match block {
            Block::InterfaceDescription(idb) => {
                let Some(units_per_sec) = units_per_sec(idb.if_tsresol) else {
                    return Step::Damage(format!("interface has an invalid if_tsresol ({:#x})", idb.if_tsresol));
                };
                if self.interfaces.len() >= MAX_INTERFACES {
                    return Step::Damage(format!(
                        "the section describes more than {MAX_INTERFACES} interfaces: the file is damaged here"
                    ));
                }
                self.interfaces.push(Interface {
                    link: LinkType(u32::from(idb.linktype.0 as u16)),
                    units_per_sec,
                    offset_s: idb.if_tsoffset,
                });
                Record::Skip
            }
            Block::EnhancedPacket(epb) => match self.interfaces.get(epb.if_id as usize) {
                Some(iface) => {
                    let units = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
                    let ns = (u128::from(units) * 1_000_000_000 / u128::from(iface.units_per_sec)) as i64;
                    let ts_ns = ns.saturating_add(iface.offset_s.saturating_mul(1_000_000_000));
                    self.last_ts_ns = ts_ns;
                    let data = &epb.data[..(epb.caplen as usize).min(epb.data.len())];
                    Record::Packet { ts_ns, link: iface.link, data, orig_len: epb.origlen }
                }
                // Its link type is unknown, so it cannot be decoded; the blocks after it can.
                None => Record::Undeclared,
            },
            Block::SimplePacket(spb) => match self.interfaces.first() {
                // SPBs carry no timestamp: keep time from the previous packet.
                Some(iface) => Record::Packet {
                    ts_ns: self.last_ts_ns,
                    link: iface.link,
                    data: &spb.data[..(spb.origlen as usize).min(spb.data.len())],
                    orig_len: spb.origlen,
                },
                None => Record::Undeclared,
            },
            _ => Record::Skip,
        };
        Step::Record(used, rec)
    }
}

/// Timestamp units per second for an `if_tsresol` value: 10^n, or 2^n when
/// the top bit is set. (pcap-parser 0.17 rejects every binary resolution: it
/// range-checks the exponent with the flag bit still set.)
fn units_per_sec(tsresol: u8) -> Option<u64> {
    let n = u32::from(tsresol & 0x7f);
    if tsresol & 0x80 == 0 { 10u64.checked_pow(n) } else { 1u64.checked_shl(n).filter(|_| n < 64) }
}

#[cfg(test)]
mod tests {
    use crate::capture::{LinkType, Packets};

    #[test]
    fn decimal_and_binary_resolutions() {
        use super::units_per_sec;
        assert_eq!(units_per_sec(6), Some(1_000_000));
        assert_eq!(units_per_sec(9), Some(1_000_000_000));
        assert_eq!(units_per_sec(0x80 | 20), Some(1 << 20));
        assert_eq!(units_per_sec(20), None);
        assert_eq!(units_per_sec(0x80 | 64), None);
    }

    fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
        let len = (body.len().next_multiple_of(4) + 12) as u32;
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(body);
        out.resize(out.len() + body.len().next_multiple_of(4) - body.len(), 0);
        out.extend_from_slice(&len.to_le_bytes());
    }

    fn epb(out: &mut Vec<u8>, if_id: u32, ts: u32, data: &[u8]) {
        let mut b = Vec::new();
        for v in [if_id, 0, ts, data.len() as u32, data.len() as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(data);
        block(out, 6, &b);
    }

    /// SHB, one Ethernet interface, then packets, one naming interface 7 and
    /// one simple packet before the interface.
    fn file() -> (Vec<u8>, u64, u64) {
        let mut b = Vec::new();
        let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
        shb.extend_from_slice(&[1, 0, 0, 0]);
        shb.extend_from_slice(&(-1i64).to_le_bytes());
        block(&mut b, 0x0a0d_0d0a, &shb);
        let spb_at = b.len() as u64;
        block(&mut b, 3, &[4, 0, 0, 0, 0xaa, 0xbb, 0xcc, 0xdd]);
        let mut idb = 1u16.to_le_bytes().to_vec();
        idb.extend_from_slice(&[0, 0, 0, 0, 4, 0]);
        block(&mut b, 1, &idb);
        epb(&mut b, 0, 1, b"first");
        let bad_at = b.len() as u64;
        epb(&mut b, 7, 2, b"names interface 7");
        epb(&mut b, 0, 3, b"second");
        epb(&mut b, 0, 4, b"third");
        (b, spb_at, bad_at)
    }

    #[test]
    fn endless_interface_descriptions_are_damage() {
        let (mut bytes, _, _) = file();
        let idb_at = bytes.len();
        let mut idb = 1u16.to_le_bytes().to_vec();
        idb.extend_from_slice(&[0, 0, 0, 0, 4, 0]);
        for _ in 0..super::MAX_INTERFACES {
            block(&mut bytes, 1, &idb);
        }
        let (p, d) = crate::capture::all_packets(&bytes).unwrap();
        assert_eq!(p.len(), 3);
        let d = d.expect("damage");
        // One interface was described before: the last description is one too many.
        assert_eq!(d.offset as usize, idb_at + (super::MAX_INTERFACES - 1) * 20, "{d}");
        assert!(d.what.contains("more than 65536 interfaces"), "{d}");
    }

    #[test]
    fn a_packet_naming_an_undeclared_interface_is_skipped_and_the_walk_goes_on() {
        let (bytes, spb_at, _) = file();
        let mut p = Packets::new(&bytes).unwrap();
        let mut got = Vec::new();
        while let Some(pkt) = p.next() {
            assert_eq!(pkt.link, LinkType::ETHERNET);
            got.push((pkt.frame, pkt.data.to_vec()));
        }
        assert_eq!(got, [(1, b"first".to_vec()), (2, b"second".to_vec()), (3, b"third".to_vec())]);
        assert!(p.damage().is_none(), "{:?}", p.damage());
        assert_eq!(p.undeclared(), Some((2, spb_at)), "the SPB before any interface and the EPB naming 7");
    }
}
