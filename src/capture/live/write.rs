//! Frames as they are written: pcap records (nanosecond timestamps) or
//! pcapng blocks, with a VLAN tag the kernel took out put back, or a Linux
//! cooked header in front (`any`), cut to the snap length.

use super::{FileFormat, LiveError, LiveStats, pcapng, ring};
use crate::capture::LinkType;
use std::io::{self, Write};

/// How frames are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Output {
    /// As captured, with a VLAN tag the kernel removed put back.
    Ethernet,
    /// A 16-byte Linux cooked header, then the network header on (`any`).
    Cooked,
    /// The network header on (interfaces without an Ethernet header).
    Raw,
}

pub(super) fn write_error(e: io::Error) -> LiveError {
    LiveError::Write(format!("cannot write the capture: {e}"))
}

/// Writes what `buf` holds and flushes, so a reader of a pipe sees each
/// block as it comes (standard output is line-buffered).
pub(super) fn flush(out: &mut dyn Write, buf: &mut Vec<u8>) -> Result<(), LiveError> {
    if !buf.is_empty() {
        out.write_all(buf).and_then(|()| out.flush()).map_err(write_error)?;
        buf.clear();
    }
    Ok(())
}

/// The pcap file header: nanosecond magic, version 2.4, little-endian.
pub(super) fn pcap_header(snaplen: u32, link: LinkType) -> Vec<u8> {
    let mut h = Vec::with_capacity(64 << 10);
    for w in [0xa1b2_3c4d, 0x0004_0002, 0, 0, snaplen, link.0] {
        h.extend_from_slice(&u32::to_le_bytes(w));
    }
    h
}

/// A frame's bytes as they are written, and its length on the wire: the
/// frame itself, or rebuilt in `scratch` when a VLAN tag goes back in or a
/// cooked header goes in front. Cut to `snaplen`.
pub(super) fn framed<'a>(
    f: &ring::Frame<'a>,
    output: Output,
    snaplen: u32,
    scratch: &'a mut Vec<u8>,
) -> (&'a [u8], u32) {
    let (data, added): (&[u8], u32) = match output {
        Output::Ethernet if f.status & libc::TP_STATUS_VLAN_VALID != 0 && f.data.len() >= 12 => {
            let tpid = if f.status & libc::TP_STATUS_VLAN_TPID_VALID != 0 { f.vlan_tpid } else { 0x8100 };
            scratch.extend_from_slice(&f.data[..12]);
            scratch.extend_from_slice(&tpid.to_be_bytes());
            scratch.extend_from_slice(&f.vlan_tci.to_be_bytes());
            scratch.extend_from_slice(&f.data[12..]);
            (scratch, 4)
        }
        Output::Ethernet | Output::Raw => (f.data, 0),
        Output::Cooked => {
            // Linux cooked header v1: packet type, ARPHRD type, address length, 8 address bytes, EtherType.
            scratch.extend_from_slice(&u16::from(f.pkttype).to_be_bytes());
            scratch.extend_from_slice(&f.hatype.to_be_bytes());
            scratch.extend_from_slice(&u16::from(f.halen.min(8)).to_be_bytes());
            scratch.extend_from_slice(&f.addr);
            scratch.extend_from_slice(&f.protocol);
            scratch.extend_from_slice(f.data);
            (scratch, 16)
        }
    };
    let caplen = data.len().min(snaplen as usize);
    let orig = f.len.saturating_add(added).max(caplen as u32);
    (&data[..caplen], orig)
}

/// Appends a frame as a pcap record or pcapng block to `buf` (`scratch`: reused room for rebuilt frames).
pub(super) fn append(
    f: &ring::Frame<'_>,
    output: Output,
    snaplen: u32,
    format: FileFormat,
    buf: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    stats: &mut LiveStats,
) {
    scratch.clear();
    let (data, orig) = framed(f, output, snaplen, scratch);
    let caplen = data.len() as u32;
    match format {
        FileFormat::Pcap => {
            for w in [f.sec, f.nsec, caplen, orig] {
                buf.extend_from_slice(&w.to_le_bytes());
            }
            buf.extend_from_slice(data);
        }
        FileFormat::Pcapng => {
            pcapng::packet(buf, u64::from(f.sec) * 1_000_000_000 + u64::from(f.nsec), data, orig);
        }
    }
    stats.bytes += u64::from(caplen);
}
