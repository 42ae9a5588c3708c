//! pcapng: several sections and interfaces, per-interface `if_tsresol` and `if_tsoffset`.

use super::{Head, LinkType, OpenError, Record, Step};
use pcap_parser::pcapng::{Block, parse_block_be, parse_block_le, parse_sectionheaderblock};

struct Interface {
    link: LinkType,
    /// Timestamp units per second.
    units_per_sec: u64,
    /// Nanoseconds a unit, when whole (seconds to nanoseconds): a multiply
    /// instead of a 128-bit division on every packet.
    ns_per_unit: Option<u64>,
    offset_s: i64,
}

impl Interface {
    #[inline(always)]
    fn ts_ns(&self, high: u32, low: u32) -> i64 {
        let units = (u64::from(high) << 32) | u64::from(low);
        let ns = match self.ns_per_unit {
            // units × 10⁹ / u is units × (10⁹ / u) when u divides 10⁹: the same value.
            Some(k) => (u128::from(units) * u128::from(k)) as i64,
            None => (u128::from(units) * 1_000_000_000 / u128::from(self.units_per_sec)) as i64,
        };
        ns.saturating_add(self.offset_s.saturating_mul(1_000_000_000))
    }
}

/// The state a section carries from block to block.
pub(crate) struct Parser {
    big_endian: bool,
    interfaces: Vec<Interface>,
    last_ts_ns: i64,
}

const SHB: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];
/// The Enhanced Packet Block's type, and its fixed part (type, length,
/// interface, time, lengths and the trailing length).
const EPB: u32 = 6;
const EPB_FRAME: usize = 32;
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

    /// The Enhanced Packet Block at `at` of bytes in memory (what capture
    /// tools write for every packet), when it is whole and sound and names a
    /// described interface: (time, link type, data range, packet length, block
    /// end). `None` leaves the block to [`Parser::record`], which reads every
    /// kind and says what is wrong; for a block this takes, it finds the same.
    #[inline(always)]
    pub(crate) fn whole(
        &mut self,
        bytes: &[u8],
        at: usize,
    ) -> Option<(i64, LinkType, std::ops::Range<usize>, u32, usize)> {
        let h: &[u8; 28] = bytes.get(at..at + 28)?.try_into().ok()?;
        let le = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        // One branch on the byte order for all seven fields.
        let mut f = [le(0), le(4), le(8), le(12), le(16), le(20), le(24)];
        if self.big_endian {
            f = f.map(u32::swap_bytes);
        }
        let [kind, len, iface, ts_high, ts_low, caplen, orig_len] = f;
        // The fixed part, the data padded to 4 bytes, then options (which
        // pcap-parser reads without ever failing, and the walk does not use).
        if kind != EPB || len > MAX_BLOCK || u64::from(len) < EPB_FRAME as u64 + u64::from(caplen).next_multiple_of(4) {
            return None;
        }
        let end = at + len as usize;
        if read_u32(bytes.get(end - 4..end)?, self.big_endian) != len {
            return None;
        }
        let iface = self.interfaces.get(iface as usize)?;
        let ts_ns = iface.ts_ns(ts_high, ts_low);
        self.last_ts_ns = ts_ns;
        let from = at + 28;
        Some((ts_ns, iface.link, from..from + caplen as usize, orig_len, end))
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
                    ns_per_unit: (1_000_000_000 % units_per_sec == 0).then(|| 1_000_000_000 / units_per_sec),
                    // pcap-parser reads the offset little-endian whatever the section's order.
                    offset_s: if self.big_endian { idb.if_tsoffset.swap_bytes() } else { idb.if_tsoffset },
                });
                Record::Skip
            }
            Block::EnhancedPacket(epb) => match self.interfaces.get(epb.if_id as usize) {
                Some(iface) => {
                    let ts_ns = iface.ts_ns(epb.ts_high, epb.ts_low);
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

    /// A section in either byte order: interface 0 in µs, interface 1 in
    /// 2⁻²⁰ s with a time offset; packets on both, one cut short by the
    /// snap length, one with an option, one with a damaged option, one naming
    /// interface 7, a simple packet; then a section in the other order.
    fn sections(big_endian: bool) -> Vec<u8> {
        let mut out = Vec::new();
        for be in [big_endian, !big_endian] {
            let u16b = |v: u16| if be { v.to_be_bytes() } else { v.to_le_bytes() };
            let u32b = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
            let block = |out: &mut Vec<u8>, kind: u32, body: &[u8]| {
                let len = (body.len().next_multiple_of(4) + 12) as u32;
                out.extend_from_slice(&u32b(kind));
                out.extend_from_slice(&u32b(len));
                out.extend_from_slice(body);
                out.resize(out.len() + body.len().next_multiple_of(4) - body.len(), 0);
                out.extend_from_slice(&u32b(len));
            };
            let mut shb = u32b(0x1a2b_3c4d).to_vec();
            shb.extend_from_slice(&u16b(1));
            shb.extend_from_slice(&u16b(0));
            shb.extend_from_slice(&(-1i64).to_le_bytes());
            block(&mut out, 0x0a0d_0d0a, &shb);
            let idb = |opts: &[u8]| [&u16b(1)[..], &[0, 0], &u32b(65535), opts].concat();
            block(&mut out, 1, &idb(&[]));
            let offset = [&u16b(14)[..], &u16b(8), &if be { 7i64.to_be_bytes() } else { 7i64.to_le_bytes() }].concat();
            block(&mut out, 1, &idb(&[&u16b(9)[..], &u16b(1), &[0x80 | 20, 0, 0, 0], &offset, &[0; 4]].concat()));
            let epb = |out: &mut Vec<u8>, iface: u32, ts: u32, data: &[u8], orig: u32, opts: &[u8]| {
                let mut b = Vec::new();
                for v in [iface, 1, ts, data.len() as u32, orig] {
                    b.extend_from_slice(&u32b(v));
                }
                b.extend_from_slice(data);
                b.resize(b.len().next_multiple_of(4), 0);
                b.extend_from_slice(opts);
                block(out, 6, &b);
            };
            epb(&mut out, 0, 1_000_001, b"first packet", 12, &[]);
            epb(&mut out, 1, 3 << 20, b"on the binary clock", 19, &[]);
            epb(&mut out, 0, 1_000_003, b"cut by the snap length", 1500, &[]);
            epb(&mut out, 0, 1_000_004, b"flags", 5, &[&u16b(2)[..], &u16b(4), &u32b(1), &[0; 4]].concat());
            // An option claiming more bytes than the block has: pcap-parser stops reading options there.
            epb(&mut out, 0, 1_000_005, b"bad option", 10, &[&u16b(2)[..], &u16b(200), &u32b(1)].concat());
            epb(&mut out, 7, 1_000_005, b"names interface 7", 17, &[]);
            block(&mut out, 3, &[&u32b(6)[..], b"simple"].concat());
            epb(&mut out, 1, 5 << 20, b"last", 4, &[]);
        }
        out
    }

    /// A walk's packets, damage and skipped blocks, by the quick path where it
    /// applies or by the general walk alone.
    fn walked(bytes: &[u8], quick: bool) -> Result<String, String> {
        let mut p = Packets::new(bytes).map_err(|e| e.to_string())?;
        let mut out = String::new();
        loop {
            let pkt = if quick { p.next() } else { p.next_general() };
            let Some(pkt) = pkt else { break };
            out += &format!("{} {} {} {:?} {}\n", pkt.frame, pkt.ts_ns, pkt.link.0, pkt.data, pkt.orig_len);
        }
        Ok(format!("{out}{:?} {:?} {}", p.damage().map(|d| (d.offset, &d.what)), p.undeclared(), p.offset()))
    }

    /// The quick path for enhanced packet blocks finds what the general walk
    /// finds, for files in both byte orders with any byte changed, and cut anywhere.
    #[test]
    fn the_quick_block_is_the_general_one() {
        for big_endian in [false, true] {
            let file = sections(big_endian);
            let whole = walked(&file, true).unwrap();
            assert_eq!(whole.lines().count(), 15, "14 packets, then the ending: {whole}");
            // 2³² + 3 × 2²⁰ units of 2⁻²⁰ s, 7 s later: in both byte orders.
            assert_eq!(whole.matches(" 4106000000000 ").count(), 2, "{whole}");
            let mut variants = Vec::new();
            for at in 0..file.len() {
                for x in [0, 1, 0x20, 0xff, file[at] ^ 4] {
                    let mut v = file.clone();
                    v[at] = x;
                    variants.push(v);
                }
                variants.push(file[..at].to_vec());
            }
            for v in &variants {
                assert_eq!(walked(v, true), walked(v, false));
            }
        }
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
