//! pcapng as `capture -w FILE.pcapng` writes it: one section header, one
//! interface description with nanosecond resolution (`if_tsresol` 9) and the
//! interface's name, then an enhanced packet block per packet. Little-endian.

use crate::capture::LinkType;

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 1;
const EPB: u32 = 6;
const OPT_END: u16 = 0;
const IF_NAME: u16 = 2;
const IF_TSRESOL: u16 = 9;

/// Appends a block of `kind` holding `body` (already a multiple of 4 bytes).
fn block(buf: &mut Vec<u8>, kind: u32, body: &[u8]) {
    let len = (12 + body.len()) as u32;
    buf.extend_from_slice(&kind.to_le_bytes());
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(body);
    buf.extend_from_slice(&len.to_le_bytes());
}

/// `bytes` then zeros up to a multiple of 4.
fn padded(body: &mut Vec<u8>, bytes: &[u8]) {
    body.extend_from_slice(bytes);
    body.resize(body.len().next_multiple_of(4), 0);
}

fn option(body: &mut Vec<u8>, code: u16, value: &[u8]) {
    body.extend_from_slice(&code.to_le_bytes());
    body.extend_from_slice(&(value.len() as u16).to_le_bytes());
    padded(body, value);
}

/// The section header and the one interface's description.
pub(super) fn header(snaplen: u32, link: LinkType, iface: &str) -> Vec<u8> {
    let mut h = Vec::with_capacity(64 << 10);
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    // Section length unknown (-1): the file is written as it goes.
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    block(&mut h, SHB, &shb);
    let mut idb = Vec::new();
    idb.extend_from_slice(&(link.0 as u16).to_le_bytes());
    idb.extend_from_slice(&0u16.to_le_bytes());
    idb.extend_from_slice(&snaplen.to_le_bytes());
    option(&mut idb, IF_NAME, iface.as_bytes());
    // Timestamps in 10^-9 s: the kernel's nanoseconds unchanged.
    option(&mut idb, IF_TSRESOL, &[9]);
    option(&mut idb, OPT_END, &[]);
    block(&mut h, IDB, &idb);
    h
}

/// Appends one packet of interface 0, stamped `ts_ns` since the epoch.
pub(super) fn packet(buf: &mut Vec<u8>, ts_ns: u64, data: &[u8], orig_len: u32) {
    let len = (32 + data.len().next_multiple_of(4)) as u32;
    buf.extend_from_slice(&EPB.to_le_bytes());
    buf.extend_from_slice(&len.to_le_bytes());
    for w in [0, (ts_ns >> 32) as u32, ts_ns as u32, data.len() as u32, orig_len] {
        buf.extend_from_slice(&w.to_le_bytes());
    }
    padded(buf, data);
    buf.extend_from_slice(&len.to_le_bytes());
}
