//! How a file's connections are split between shard threads and their
//! parts merged, whichever way the shards read the file (shards.rs walks it
//! whole in each, windowed.rs reads it once): the shard of a frame, by a
//! hash of its connection's endpoints, and the merge into exactly the
//! report one thread makes.

use super::agg::{FileResult, MAX_ENDPOINTS};
use super::conn_label;
use super::walk::Walked;
use crate::capture::{LinkType, Network, network_layer};
use crate::wire::{self, Endpoint, Ipv4Header};
use std::net::IpAddr;

/// Frames between two reports of a shard's progress to the role book (it
/// publishes every 256 frames; a judging shard waits for the others' reports),
/// whichever way the shards read the file.
pub(super) const PASS_EVERY: u64 = 64;

/// An address as a number: its bytes in the order they are on the wire,
/// read as little-endian (whatever the host's order), so that one read from
/// a frame is the number an `IpAddr` gives; IPv6's halves folded.
#[inline]
fn ip_number(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(v) => u64::from(u32::from_le_bytes(v.octets())),
        IpAddr::V6(v) => {
            let x = u128::from_le_bytes(v.octets());
            (x as u64) ^ ((x >> 64) as u64)
        }
    }
}

/// A port as a number, as [`ip_number`] reads an address.
#[inline]
fn port_number(port: u16) -> u64 {
    u64::from(u16::from_le_bytes(port.to_be_bytes()))
}

/// The shard (of `of`) that owns the connection whose ends' addresses sum
/// to `ips` and ports to `ports` ([`ip_number`], [`port_number`]): sums, so
/// the same whichever end sent the frame, mixed by a multiply.
#[inline(always)]
fn owner(ips: u64, ports: u64, of: usize) -> usize {
    let h = ips.wrapping_add(ports << 40).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((u128::from(h ^ (h >> 29)) * of as u128) >> 64) as usize
}

#[inline]
fn endpoints_owner(a: Endpoint, b: Endpoint, of: usize) -> usize {
    owner(ip_number(a.ip).wrapping_add(ip_number(b.ip)), port_number(a.port) + port_number(b.port), of)
}

/// The shard that owns a frame: its connection's, or the first for a frame
/// of no connection (so the first owns every frame of a link type it cannot
/// read, and counts them in the order met). IPv4 is read as far as the
/// ports only; other frames are decoded. A frame that decodes to a segment
/// always gets its connection's shard (the same endpoints are read either way).
#[inline(always)]
pub(super) fn shard_of(link: LinkType, data: &[u8], of: usize) -> usize {
    // Most frames: untagged Ethernet, IPv4 without options, TCP, not a
    // fragment: the ends read at fixed offsets (every frame of a split file
    // costs this once more, in the sort).
    if link == LinkType::ETHERNET
        && let Some(h) = data.get(..38)
        && wire::plain_ipv4_tcp(h)
    {
        return ends_owner(&h[14..34], &h[34..38], of);
    }
    other_shard_of(link, data, of)
}

/// [`shard_of`] for the frames it does not read at fixed offsets.
#[inline(never)]
fn other_shard_of(link: LinkType, data: &[u8], of: usize) -> usize {
    match data.get(12..14) {
        Some([8, 0]) if link == LinkType::ETHERNET => ipv4_owner(&data[14..], of),
        _ => slow_shard_of(link, data, of),
    }
}

/// The owner of the connection of an IPv4 header `ip` (its first 20 bytes)
/// and the first 4 bytes `t` of its TCP header: both addresses and ports.
#[inline(always)]
fn ends_owner(ip: &[u8], t: &[u8], of: usize) -> usize {
    let word = |i: usize| u64::from(u32::from_le_bytes([ip[i], ip[i + 1], ip[i + 2], ip[i + 3]]));
    let port = |i: usize| u64::from(u16::from_le_bytes([t[i], t[i + 1]]));
    owner(word(12) + word(16), port(0) + port(2), of)
}

/// The owner of an IPv4 packet `p`: its connection's shard when its header
/// is sound (as [`Ipv4Header::parse`] checks it) and it carries the ports of
/// a TCP segment that is not a fragment, else the first.
fn ipv4_owner(p: &[u8], of: usize) -> usize {
    let Some(h) = p.get(..20) else { return 0 };
    let hl = usize::from(h[0] & 0x0f) * 4;
    let tcp = h[0] >> 4 == 4 && hl >= 20 && h[9] == 6 && u16::from_be_bytes([h[6], h[7]]) & 0x3fff == 0;
    match p.get(hl..hl + 4) {
        Some(t) if tcp => ends_owner(h, t, of),
        _ => 0,
    }
}

/// The owner of any frame, as the walk reads it ([`shard_of`] must agree).
fn slow_shard_of(link: LinkType, data: &[u8], of: usize) -> usize {
    if let Network::Ipv4(p) = network_layer(link, data)
        && let Ok(ip) = Ipv4Header::parse(p)
    {
        let hl = ip.header_len();
        return match p.get(hl..hl + 4) {
            Some(t) if ip.protocol() == 6 && !ip.is_fragment() => {
                let port = |i: usize| u64::from(u16::from_le_bytes([t[i], t[i + 1]]));
                let ips = ip_number(IpAddr::V4(ip.src())) + ip_number(IpAddr::V4(ip.dst()));
                owner(ips, port(0) + port(2), of)
            }
            _ => 0,
        };
    }
    // The longest packet length: decoding then fails on no frame that the
    // walk (given its true length) decodes, so a frame cut by the snap
    // length still goes to its connection's shard.
    match wire::decode(0, 0, link, data, u32::MAX) {
        Ok(Some(seg)) => endpoints_owner(seg.src, seg.dst, of),
        _ => 0,
    }
}

/// The shards' parts merged into one thread's report; `None` when they
/// cannot be merged exactly (they read different packets, or a table one
/// thread keeps would have filled up).
pub(super) fn merge(parts: Vec<Walked>, tag: Option<usize>) -> Option<Walked> {
    let mut parts = parts.into_iter();
    let mut w = parts.next()?;
    for p in parts {
        if !same_walk(&w, &p) {
            return None;
        }
        w.reading.add_owned(&p.reading);
        (w.tcp, w.filtered) = (w.tcp + p.tcp, w.filtered + p.filtered);
        w.r.merge_shard(p.r);
    }
    if w.r.dropped > 0 || over_cap(&w.r) {
        return None;
    }
    number(&mut w.r, tag);
    Some(w)
}

/// Whether two shards read the same packets (a file that changed under the walks does not).
fn same_walk(a: &Walked, b: &Walked) -> bool {
    let key = |w: &Walked| {
        let (r, e) = (&w.reading, &w.end);
        (r.n, r.first_ts, e.damage.clone(), e.stopped, e.offset, e.skipped)
    };
    key(a) == key(b)
}

/// Whether one thread would have run out of room in an endpoint table (it
/// keeps the first [`MAX_ENDPOINTS`] it meets, which no shard can tell).
fn over_cap(r: &FileResult) -> bool {
    [r.nagle.len(), r.servers.len(), r.retrans.len(), r.syn.len(), r.zero.len(), r.expect.len()]
        .into_iter()
        .any(|n| n > MAX_ENDPOINTS)
}

/// Numbers the connections as one thread does: in order of first frame
/// (wrapping as [`crate::tcp::ConnId`] does); renames what names them.
fn number(r: &mut FileResult, tag: Option<usize>) {
    let mut created = std::mem::take(&mut r.created);
    created.sort_unstable();
    let number = |first_frame: u64| {
        let i = created.partition_point(|&f| f < first_frame) as u64;
        (i % u64::from(u32::MAX)) as u32 + 1
    };
    let label = |first_frame: u64| conn_label(tag, number(first_frame));
    for c in &mut r.conns.rows {
        c.id = number(c.rest.first_frame);
    }
    for (rank, l) in r.stalled.0.iter_mut().chain(r.slowest.0.iter_mut()) {
        let id = label(rank.2);
        l.title = l.title.replacen(&format!("connection {},", l.connection), &format!("connection {id},"), 1);
        l.connection = id;
    }
    for (at, id, _) in [&mut r.roles_corrected.1, &mut r.roles_contradicted.1].into_iter().flatten() {
        *id = label(at.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::all_packets;

    /// Every frame of every capture in tests/data, each with bytes changed
    /// where the owner is read, and each cut as a snap length cuts it: the
    /// fixed-offset owner is the general one, and a frame that decodes,
    /// with its own length or the length before the cut, gets its
    /// connection's shard.
    #[test]
    fn the_quick_owner_is_the_general_one() {
        use crate::capture::test_files::{captures, variants};
        let mut frames = 0;
        for (p, bytes) in captures() {
            let (packets, _) = all_packets(&bytes).unwrap();
            for pk in packets {
                let changes = [(12, 0x81), (14, 0x46), (14, 0x44), (14, 0x55), (20, 0x20), (23, 17)];
                for d in &variants(pk.data, &changes, &[37, 60, 66, 74, 80, 96, 128]) {
                    for of in 2..5 {
                        let quick = shard_of(pk.link, d, of);
                        assert_eq!(quick, slow_shard_of(pk.link, d, of), "{}: frame {}", p.display(), pk.frame);
                        for len in [d.len() as u32, pk.orig_len] {
                            if let Ok(Some(s)) = wire::decode(0, 0, pk.link, d, len) {
                                let frame = pk.frame;
                                let conn = endpoints_owner(s.src, s.dst, of);
                                assert_eq!(quick, conn, "{}: frame {frame} cut to {} of {len}", p.display(), d.len());
                            }
                        }
                    }
                    frames += 1;
                }
            }
        }
        assert!(frames > 10_000, "{frames} frames");
    }
}
