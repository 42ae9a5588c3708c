//! One file on several threads: its connections are split between shards
//! by a hash of their endpoints; each shard analyses only its own, and the
//! parts merge into exactly the report one thread makes (tests/threads.rs
//! checks it on every capture; split.rs has the hash and the merge). A pcap
//! file is read once, in windows the shards share (windowed.rs); here every
//! shard walks the whole (mapped) file, passing over the other shards'
//! packets (reading only addresses and ports): what a pcapng file needs,
//! whose interfaces are declared in blocks met along the way.
//!
//! What crosses connections is made shard-safe: role evidence is shared in
//! frame order ([`crate::tcp::book`]); sweeps run on the frame count; every
//! "first" or "earliest" is compared by when it was observed ([`super::agg::At`]);
//! ladders and rows rank with a tie-break on the connection's first frame;
//! connections are numbered after the merge, by first frame. Where the parts
//! cannot merge exactly (an endpoint table filled up, or the file changed
//! under the walks), the file is analysed again on one thread.

use super::Options;
use super::split::{PASS_EVERY, merge, shard_of};
use super::walk::{Analyser, Ending, Reading, Walked, sweep_due};
use crate::capture::{Capture, LinkType, Packets};
use crate::tcp::book::{Hub, Shared};
use crate::tcp::roles::Ephemeral;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Packets between two looks at the stop flag (Ctrl-C) in a shard.
const CHECK_EVERY: u64 = 1 << 16;

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
            reading.begin(p.ts_ns);
            continue;
        }
        let Some(ts) = reading.time(&p) else { continue };
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
