//! pcapng: several sections and interfaces, per-interface `if_tsresol` and `if_tsoffset`.

use super::{Damage, LinkType, OpenError, Record};
use pcap_parser::pcapng::{Block, parse_block_be, parse_block_le, parse_sectionheaderblock};

struct Interface {
    link: LinkType,
    /// Timestamp units per second.
    units_per_sec: u64,
    offset_s: i64,
}

pub(crate) struct Reader<'a> {
    rest: &'a [u8],
    offset: u64,
    big_endian: bool,
    interfaces: Vec<Interface>,
    last_ts_ns: i64,
    done: bool,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Result<Reader<'a>, OpenError> {
        let (_, shb) = parse_sectionheaderblock(bytes)
            .map_err(|_| OpenError::at(0, "pcapng section header block is damaged or cut short"))?;
        Ok(Reader {
            rest: bytes,
            offset: 0,
            big_endian: shb.big_endian(),
            interfaces: Vec::new(),
            last_ts_ns: 0,
            done: false,
        })
    }

    fn damage(&mut self, what: String) -> Option<Result<Record<'a>, Damage>> {
        self.done = true;
        Some(Err(Damage { offset: self.offset, what }))
    }

    /// The next record; on damage, sets `damage` and ends.
    pub(crate) fn next(&mut self, damage: &mut Option<Damage>) -> Option<Record<'a>> {
        match self.next_block()? {
            Ok(r) => Some(r),
            Err(d) => {
                *damage = Some(d);
                None
            }
        }
    }

    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    fn next_block(&mut self) -> Option<Result<Record<'a>, Damage>> {
        if self.done || self.rest.is_empty() {
            return None;
        }
        // A new section may switch byte order: peek at its byte-order magic.
        if self.rest.len() >= 12 && self.rest[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
            match parse_sectionheaderblock(self.rest) {
                Ok((_, shb)) => {
                    self.big_endian = shb.big_endian();
                    self.interfaces.clear();
                }
                Err(_) => return self.damage("pcapng section header block is damaged".into()),
            }
        }
        let parsed = if self.big_endian { parse_block_be(self.rest) } else { parse_block_le(self.rest) };
        let (rest, block) = match parsed {
            Ok(x) => x,
            Err(pcap_parser::nom::Err::Incomplete(_)) => {
                let what = format!(
                    "pcapng block cut short ({} bytes left); the capture was probably interrupted",
                    self.rest.len()
                );
                return self.damage(what);
            }
            Err(_) => {
                return self.damage("pcapng block is damaged (bad length or contents)".into());
            }
        };
        let rec = match block {
            Block::InterfaceDescription(idb) => {
                let units_per_sec = match units_per_sec(idb.if_tsresol) {
                    Some(r) => r,
                    None => {
                        return self.damage(format!("interface has an invalid if_tsresol ({:#x})", idb.if_tsresol));
                    }
                };
                self.interfaces.push(Interface {
                    link: LinkType(u32::from(idb.linktype.0 as u16)),
                    units_per_sec,
                    offset_s: idb.if_tsoffset,
                });
                Record::Skip
            }
            Block::EnhancedPacket(epb) => {
                let Some(iface) = self.interfaces.get(epb.if_id as usize) else {
                    let what = format!("packet refers to interface {} which was never described", epb.if_id);
                    return self.damage(what);
                };
                let units = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
                let ns = (u128::from(units) * 1_000_000_000 / u128::from(iface.units_per_sec)) as i64;
                let ts_ns = ns.saturating_add(iface.offset_s.saturating_mul(1_000_000_000));
                self.last_ts_ns = ts_ns;
                let data = &epb.data[..(epb.caplen as usize).min(epb.data.len())];
                Record::Packet { ts_ns, link: iface.link, data, orig_len: epb.origlen }
            }
            Block::SimplePacket(spb) => {
                let Some(iface) = self.interfaces.first() else {
                    return self.damage("simple packet block before any interface description".into());
                };
                // SPBs carry no timestamp: keep time from the previous packet.
                Record::Packet {
                    ts_ns: self.last_ts_ns,
                    link: iface.link,
                    data: &spb.data[..(spb.origlen as usize).min(spb.data.len())],
                    orig_len: spb.origlen,
                }
            }
            _ => Record::Skip,
        };
        self.offset += (self.rest.len() - rest.len()) as u64;
        self.rest = rest;
        Some(Ok(rec))
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
    #[test]
    fn decimal_and_binary_resolutions() {
        use super::units_per_sec;
        assert_eq!(units_per_sec(6), Some(1_000_000));
        assert_eq!(units_per_sec(9), Some(1_000_000_000));
        assert_eq!(units_per_sec(0x80 | 20), Some(1 << 20));
        assert_eq!(units_per_sec(20), None);
        assert_eq!(units_per_sec(0x80 | 64), None);
    }
}
