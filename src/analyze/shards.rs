//! One file on several threads: its connections are split between shards
//! by a hash of their endpoints; each shard analyses only its own, and the
//! parts merge into exactly the report one thread makes (tests/threads.rs
//! checks it on every capture). A pcap file is read once, in windows the
//! shards share (windowed.rs); here every shard walks the whole (mapped)
//! file, passing over the other shards' packets (reading only addresses and
//! ports): what a pcapng file needs, whose interfaces are declared in blocks
//! met along the way.
//!
//! What crosses connections is made shard-safe: role evidence is shared in
//! frame order ([`crate::tcp::book`]); sweeps run on the frame count; every
//! "first" or "earliest" is compared by when it was observed ([`super::agg::At`]);
//! ladders and rows rank with a tie-break on the connection's first frame;
//! connections are numbered after the merge, by first frame. Where the parts
//! cannot merge exactly (an endpoint table filled up, or the file changed
//! under the walks), the file is analysed again on one thread.

use super::agg::{FileResult, MAX_ENDPOINTS};
use super::walk::{Analyser, Ending, Reading, Walked, sweep_due};
use super::{Options, conn_label};
use crate::capture::{Capture, LinkType, Network, Packets, network_layer};
use crate::tcp::book::{Hub, Shared};
use crate::tcp::roles::Ephemeral;
use crate::wire::{self, Endpoint, Ipv4Header};
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Packets between two looks at the stop flag (Ctrl-C) in a shard.
const CHECK_EVERY: u64 = 1 << 16;
/// Packets between two reports of a shard's progress to the role book (it
/// publishes every 256 frames; a judging shard waits for the others' reports).
const PASS_EVERY: u64 = 64;

/// A connection's end, hashed: the same for an address read as an `IpAddr`
/// or straight from the frame's bytes.
#[inline(always)]
fn mix(ip: u64, port: u16) -> u64 {
    (ip ^ u64::from(port) << 48).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The shard (of `of`) that owns the connection whose ends hash to `a` and
/// `b` ([`mix`]): a sum, so the same whichever end sent the frame.
#[inline(always)]
fn owner(a: u64, b: u64, of: usize) -> usize {
    let h = a.wrapping_add(b);
    ((u128::from(h ^ (h >> 29)) * of as u128) >> 64) as usize
}

#[inline]
fn mix_endpoint(e: Endpoint) -> u64 {
    let ip = match e.ip {
        IpAddr::V4(v) => u64::from(u32::from(v)),
        IpAddr::V6(v) => {
            let x = u128::from(v);
            (x as u64) ^ ((x >> 64) as u64)
        }
    };
    mix(ip, e.port)
}

/// The shard that owns a frame: its connection's, or the first for a frame
/// of no connection (so the first owns every frame of a link type it cannot
/// read, and counts them in the order met). IPv4 is read as far as the
/// ports only; other frames are decoded. A frame that decodes to a segment
/// always gets its connection's shard (the same endpoints are read either way).
#[inline(always)]
pub(super) fn shard_of(link: LinkType, data: &[u8], of: usize) -> usize {
    // Most frames: untagged Ethernet with IPv4, read at fixed offsets (the
    // other shards' frames cost only this).
    if link == LinkType::ETHERNET
        && let Some(h) = data.get(..34)
        && h[12..14] == [8, 0]
    {
        return ipv4_owner(&data[14..], of);
    }
    slow_shard_of(link, data, of)
}

/// The owner of an IPv4 packet `p`: its connection's shard when its header
/// is sound (as [`Ipv4Header::parse`] checks it) and it carries the ports of
/// a TCP segment that is not a fragment, else the first.
#[inline(always)]
fn ipv4_owner(p: &[u8], of: usize) -> usize {
    let Some(h) = p.get(..20) else { return 0 };
    let hl = usize::from(h[0] & 0x0f) * 4;
    let tcp = h[0] >> 4 == 4 && hl >= 20 && h[9] == 6 && u16::from_be_bytes([h[6], h[7]]) & 0x3fff == 0;
    match p.get(hl..hl + 4) {
        Some(t) if tcp => {
            let word = |i: usize| u64::from(u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
            let port = |i: usize| u16::from_be_bytes([t[i], t[i + 1]]);
            owner(mix(word(12), port(0)), mix(word(16), port(2)), of)
        }
        _ => 0,
    }
}

#[inline(never)]
fn slow_shard_of(link: LinkType, data: &[u8], of: usize) -> usize {
    if let Network::Ipv4(p) = network_layer(link, data)
        && let Ok(ip) = Ipv4Header::parse(p)
    {
        let hl = ip.header_len();
        return match p.get(hl..hl + 4) {
            Some(t) if ip.protocol() == 6 && !ip.is_fragment() => {
                let port = |i: usize| u16::from_be_bytes([t[i], t[i + 1]]);
                let end = |a: std::net::Ipv4Addr, port: u16| mix(u64::from(u32::from(a)), port);
                owner(end(ip.src(), port(0)), end(ip.dst(), port(2)), of)
            }
            _ => 0,
        };
    }
    // The longest packet length: decoding then fails on no frame that the
    // walk (given its true length) decodes, so a frame cut by the snap
    // length still goes to its connection's shard.
    match wire::decode(0, 0, link, data, u32::MAX) {
        Ok(Some(seg)) => owner(mix_endpoint(seg.src), mix_endpoint(seg.dst), of),
        _ => 0,
    }
}

/// Where the shards of a file stop after Ctrl-C: each notices the flag at a
/// checkpoint and, until all have, may walk through its next one; then all
/// walk through the furthest frame any may have reached, so that they cover
/// the same packets and stop at the same offset.
struct Agreement {
    flag: Option<&'static AtomicBool>,
    /// (shards that noticed the flag or their end, last frame any may walk).
    state: Mutex<(usize, u64)>,
    of: usize,
}

impl Agreement {
    /// At the checkpoint `frame` (which the shard walks through), or at its
    /// end (`done`: `frame` is the last it walked): the last frame to walk,
    /// once every shard has noticed. A shard is never past that frame when
    /// it learns it.
    fn check(&self, noticed: &mut bool, frame: u64, done: bool) -> Option<u64> {
        let raised = self.flag.is_some_and(|f| f.load(Ordering::Relaxed));
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !*noticed && (raised || done) {
            *noticed = true;
            s.0 += 1;
        }
        if !*noticed {
            return None;
        }
        if s.0 == self.of {
            s.1 = s.1.max(frame);
            return Some(s.1);
        }
        // Others have yet to notice: this shard may walk through its next checkpoint.
        s.1 = s.1.max(if done { frame } else { frame + CHECK_EVERY });
        None
    }
}

/// Which shard a walk is, of how many, and what it shares with the others.
struct Part<'a> {
    index: usize,
    of: usize,
    roles: Shared,
    stop: &'a Agreement,
}

/// One shard's walk over the whole file, analysing its own connections.
fn shard(packets: Packets<'_>, tag: Option<usize>, opts: &Options, part: Part<'_>) -> Result<Walked, String> {
    let Part { index, of, roles, stop } = part;
    let mut packets = packets;
    if index == 0
        && let Some(p) = &opts.progress
    {
        packets.count_into(p.clone());
    }
    let mut a = Analyser::new(tag, opts, Some(roles));
    let mut reading = Reading::default();
    let (mut noticed, mut last, mut stopped) = (false, u64::MAX, false);
    loop {
        if packets.frames() >= last {
            stopped = true;
            break;
        }
        // Frames of other shards are passed over in the walk itself (never
        // the last one to walk, so that every shard stops right after it).
        let skip = |link: LinkType, data: &[u8]| shard_of(link, data, of) != index;
        let Some((p, mine)) = packets.next_unless(PASS_EVERY, last, skip) else { break };
        if p.frame.is_multiple_of(CHECK_EVERY)
            && last == u64::MAX
            && let Some(l) = stop.check(&mut noticed, p.frame, false)
        {
            last = l;
        }
        if p.frame.is_multiple_of(PASS_EVERY) {
            a.passed(p.frame - 1, false);
        }
        if sweep_due(p.frame) && p.link.supported() {
            let ts = reading.clamp(p.ts_ns);
            a.sweep(p.frame, ts);
        }
        if !mine && shard_of(p.link, p.data, of) != index {
            // Every shard clamps to the file's first time, owned or not.
            reading.first_ts.get_or_insert(p.ts_ns);
            continue;
        }
        let Some(ts) = reading.count(&p) else { continue };
        a.frame(&p, ts, &mut reading);
    }
    // Every frame walked, passed over or not.
    reading.n = packets.frames();
    if !stopped {
        // At its end: the others walk to it too.
        stop.check(&mut noticed, reading.n, true);
    }
    let mut end = Ending::of(&packets);
    end.stopped |= stopped;
    let (tcp, filtered) = (a.tcp, a.filtered);
    Ok(Walked { r: a.finish(), reading, tcp, filtered, end })
}

/// Analyses `cap` in `of` shards; `None` when it cannot be (a stream) or
/// when the parts cannot merge exactly.
pub(super) fn run(cap: &Capture, tag: Option<usize>, opts: &Options, of: usize) -> Result<Option<Walked>, String> {
    if cap.bytes().is_none() {
        return Ok(None);
    }
    // A pcap file is read once, in windows shared by the shards (windowed.rs).
    if let Some(windows) = super::windowed::windows(cap) {
        return Ok(super::windowed::run(&windows, tag, opts, of));
    }
    let hub = Hub::new(of, Ephemeral::host());
    let stop = Agreement { flag: opts.stop, state: Mutex::new((0, 0)), of };
    let (hub, stop) = (&hub, &stop);
    let walk = |index: usize, packets| {
        shard(packets, tag, opts, Part { index, of, roles: Shared::new(hub.clone(), index), stop })
    };
    // Every walk starts here, before any thread reads: the mapping then
    // drops no page that a shard yet to start still has to read.
    let mut walks =
        (0..of).map(|_| cap.packets_until(None)).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
    let parts: Vec<Result<Walked, String>> = std::thread::scope(|s| {
        let others: Vec<_> = walks.drain(1..).enumerate().map(|(i, p)| s.spawn(move || walk(i + 1, p))).collect();
        let first = walk(0, walks.pop().expect("the first shard's walk"));
        std::iter::once(first).chain(others.into_iter().map(|h| h.join().expect("shard thread panicked"))).collect()
    });
    Ok(merge(parts.into_iter().collect::<Result<Vec<_>, _>>()?, tag))
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
    let label = |first_frame: u64| {
        let i = created.partition_point(|&f| f < first_frame) as u64;
        conn_label(tag, (i % u64::from(u32::MAX)) as u32 + 1)
    };
    for c in &mut r.conns {
        c.id = label(c.first_frame);
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

    /// The last frame agreed after a stop is never behind a shard when it
    /// learns it: the first to notice may walk through its next checkpoint.
    #[test]
    fn no_shard_is_past_the_agreed_last_frame() {
        static RAISED: AtomicBool = AtomicBool::new(true);
        static CALM: AtomicBool = AtomicBool::new(false);
        let agree = |flag: &'static AtomicBool| Agreement { flag: Some(flag), state: Mutex::new((0, 0)), of: 2 };
        let c = CHECK_EVERY;
        let (a, mut n) = (agree(&RAISED), [false; 2]);
        assert_eq!(a.check(&mut n[0], c, false), None, "the other has yet to notice");
        assert_eq!(a.check(&mut n[1], c, false), Some(2 * c));
        assert_eq!(a.check(&mut n[0], 2 * c, false), Some(2 * c));
        // A shard at its end counts as having noticed: the other walks to that end.
        let (a, mut n) = (agree(&CALM), [false; 2]);
        assert_eq!(a.check(&mut n[0], c, false), None);
        assert_eq!(a.check(&mut n[1], c + 5, true), None);
        assert_eq!(a.check(&mut n[0], c + 5, true), Some(c + 5));
    }

    /// Every frame of every capture in tests/data, each with bytes changed
    /// where the owner is read, and each cut as a snap length cuts it: the
    /// fixed-offset owner is the general one, and a frame that decodes,
    /// with its own length or the length before the cut, gets its
    /// connection's shard.
    #[test]
    fn the_quick_owner_is_the_general_one() {
        let mut files = vec![std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data"))];
        let mut frames = 0;
        while let Some(p) = files.pop() {
            if p.is_dir() {
                files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            if !p.extension().is_some_and(|x| x == "pcap" || x == "pcapng") {
                continue;
            }
            let bytes = std::fs::read(&p).unwrap();
            let (packets, _) = all_packets(&bytes).unwrap();
            for pk in packets {
                let mut variants = vec![pk.data.to_vec()];
                for (at, x) in [(12, 0x81), (14, 0x46), (14, 0x44), (14, 0x55), (20, 0x20), (23, 17)] {
                    let mut d = pk.data.to_vec();
                    if let Some(b) = d.get_mut(at) {
                        *b = x;
                        variants.push(d);
                    }
                }
                for cut in [37, 60, 66, 74, 80, 96, 128] {
                    variants.push(pk.data[..pk.data.len().min(cut)].to_vec());
                }
                for d in &variants {
                    for of in 2..5 {
                        let quick = shard_of(pk.link, d, of);
                        assert_eq!(quick, slow_shard_of(pk.link, d, of), "{}: frame {}", p.display(), pk.frame);
                        for len in [d.len() as u32, pk.orig_len] {
                            if let Ok(Some(s)) = wire::decode(0, 0, pk.link, d, len) {
                                let frame = pk.frame;
                                let conn = owner(mix_endpoint(s.src), mix_endpoint(s.dst), of);
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
