//! One file on several threads: this thread reads and decodes every packet
//! once and hands each segment to the shard that owns its connection (by a
//! hash of both endpoints); each shard thread tracks and analyses its
//! connections; the parts merge into exactly the report one thread makes
//! (tests/threads.rs checks it on every capture).
//!
//! What crosses connections is made shard-safe: role evidence is shared in
//! frame order ([`crate::tcp::book`]); sweeps run on the frame count; every
//! "first" or "earliest" is compared by when it was observed ([`super::agg::At`]);
//! ladders and rows rank with a tie-break on the connection's first frame;
//! connections are numbered after the merge, by first frame. Where the parts
//! cannot merge exactly (an endpoint table filled up), the file is analysed
//! again on one thread.

use super::agg::{FileResult, MAX_ENDPOINTS};
use super::walk::{Analyser, Ending, Reading, Walked, sweep_due};
use super::{Options, conn_label};
use crate::capture::Capture;
use crate::tcp::book::{Hub, Shared};
use crate::tcp::roles::Ephemeral;
use crate::wire::Segment;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

/// Packets per round handed to the shards.
const ROUND_PACKETS: usize = 4096;
/// Rounds a shard may lag behind the reader: bounds the memory in flight,
/// and keeps every shard within ~1 MB × this of the reader, inside the
/// window of the file the reader keeps mapped.
const ROUNDS_AHEAD: u64 = 4;
/// Bytes of packets that end a round early (large frames).
const ROUND_BYTES: usize = 1 << 20;

enum Item<'a> {
    Seg(Segment<'a>),
    /// Sweep the table before this frame, at this time.
    Sweep(u64, i64),
}

/// One round for one shard: its items, and the last frame read.
struct Round<'a> {
    items: Vec<Item<'a>>,
    upto: u64,
}

/// The shard (of `of`) that owns a segment's connection: the same for both directions.
#[inline]
fn owner(seg: &Segment<'_>, of: usize) -> usize {
    let ends = if seg.src <= seg.dst { (seg.src, seg.dst) } else { (seg.dst, seg.src) };
    let mut h = rustc_hash::FxHasher::default();
    ends.hash(&mut h);
    ((u128::from(h.finish()) * of as u128) >> 64) as usize
}

/// One shard: analyses the rounds it is handed until the reader is done;
/// its results, segments analysed and segments filtered out.
fn shard(
    rx: mpsc::Receiver<Round<'_>>,
    mut a: Analyser<'_>,
    done: &AtomicU64,
    reader: &std::thread::Thread,
) -> (FileResult, u64, u64) {
    for round in rx {
        for item in &round.items {
            match item {
                Item::Seg(seg) => {
                    a.segment(seg);
                    a.passed(seg.frame, false);
                }
                Item::Sweep(frame, ts) => a.sweep(*frame, *ts),
            }
        }
        a.passed(round.upto, true);
        done.fetch_add(1, Ordering::Release);
        reader.unpark();
    }
    let (tcp, filtered) = (a.tcp, a.filtered);
    (a.finish(), tcp, filtered)
}

/// Analyses `cap` in `of` shards; `None` when it cannot be (a stream) or
/// when the parts cannot merge exactly.
pub(super) fn run<'c>(
    cap: &'c Capture,
    tag: Option<usize>,
    opts: &Options,
    of: usize,
) -> Result<Option<Walked>, String> {
    let Some(base) = cap.bytes() else { return Ok(None) };
    let mut packets = cap.packets_until(opts.stop).map_err(|e| e.to_string())?;
    if let Some(p) = &opts.progress {
        packets.count_into(p.clone());
    }
    let hub = Hub::new(of, Ephemeral::host());
    let done: Vec<AtomicU64> = (0..of).map(|_| AtomicU64::new(0)).collect();
    let reader = std::thread::current();
    let mut reading = Reading::default();
    let parts: Vec<(FileResult, u64, u64)> = std::thread::scope(|s| {
        let (mut txs, mut handles) = (Vec::new(), Vec::new());
        for (i, done) in done.iter().enumerate() {
            let (tx, rx) = mpsc::channel::<Round<'c>>();
            let a = Analyser::new(tag, opts, Some(Shared::new(hub.clone(), i)));
            let reader = &reader;
            handles.push(s.spawn(move || shard(rx, a, done, reader)));
            txs.push(tx);
        }
        let mut batches: Vec<Vec<Item<'c>>> = (0..of).map(|_| Vec::with_capacity(ROUND_PACKETS)).collect();
        let (mut rounds, mut in_round, mut bytes) = (0u64, 0usize, 0usize);
        let mut send = |batches: &mut Vec<Vec<Item<'c>>>, upto: u64| {
            // Shards far behind: wait (they unpark this thread as they finish rounds).
            while done.iter().any(|d| d.load(Ordering::Acquire) + ROUNDS_AHEAD < rounds) {
                std::thread::park_timeout(std::time::Duration::from_millis(1));
            }
            for (tx, b) in txs.iter().zip(batches.iter_mut()) {
                let items = std::mem::replace(b, Vec::with_capacity(ROUND_PACKETS));
                // A shard that stopped (it panicked) is reported when joined.
                let _ = tx.send(Round { items, upto });
            }
            rounds += 1;
        };
        let mut last = 0;
        while let Some(p) = packets.next() {
            last = p.frame;
            let Some(ts) = reading.time(&p) else { continue };
            if sweep_due(p.frame) {
                batches.iter_mut().for_each(|b| b.push(Item::Sweep(p.frame, ts)));
            }
            // The packet lies in the capture's bytes, which outlive this walk.
            let at = (p.data.as_ptr() as usize).wrapping_sub(base.as_ptr() as usize);
            let data = base.get(at..at + p.data.len()).expect("a walk over bytes in memory lends from them");
            let decoded = crate::wire::decode(p.frame, ts, p.link, data, p.orig_len);
            if let Some(seg) = reading.segment(p.frame, decoded) {
                batches[owner(&seg, of)].push(Item::Seg(seg));
            }
            in_round += 1;
            bytes += data.len();
            if in_round >= ROUND_PACKETS || bytes >= ROUND_BYTES {
                send(&mut batches, last);
                (in_round, bytes) = (0, 0);
            }
        }
        send(&mut batches, last);
        drop(send);
        drop(txs);
        handles.into_iter().map(|h| h.join().expect("shard thread panicked")).collect()
    });
    let mut w = Walked { r: FileResult::default(), reading, tcp: 0, filtered: 0, end: Ending::of(&packets) };
    for (r, tcp, filtered) in parts {
        (w.tcp, w.filtered) = (w.tcp + tcp, w.filtered + filtered);
        w.r.merge_shard(r);
    }
    if w.r.dropped > 0 || over_cap(&w.r) {
        return Ok(None);
    }
    number(&mut w.r, tag);
    Ok(Some(w))
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
