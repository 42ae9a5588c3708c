//! One pcap file on several threads, each record read once: the file is
//! read in windows (capture/windows.rs), each window by whichever thread is
//! free, which sorts its frames by connection (the shard of split.rs);
//! then every shard analyses its own frames of each window, in file order.
//! The threads share the reading of the file instead of each walking all of
//! it, which is what kept shards.rs from two cores' worth (bench/RESULTS.md).
//!
//! A window is analysed only once it is known to start where the one before
//! it ended (a window read early guesses its start, and is read again when
//! the guess was wrong). A damaged record ends every shard's walk where it
//! ends one thread's; a file that shrank under the reads goes back to one
//! thread, which reports it.

use super::Options;
use super::split::{PASS_EVERY, merge, shard_of};
use super::walk::{Analyser, Ending, Reading, Walked, sweep_due};
use crate::capture::windows::{Spare, Window, Windows};
use crate::capture::{Capture, Damage};
use crate::tcp::book::{Hub, Shared};
use crate::tcp::roles::Ephemeral;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Bytes of a window: a few of them stay in the shared cache between their
/// sorting and the shards' analysis. Read in place, 2 MiB did better than 1
/// (copied, 1 MiB had; bench/RESULTS.md).
const WINDOW: u64 = 2 << 20;
/// Windows read but not yet analysed by every shard.
const AHEAD: u64 = 6;
/// Bytes of windows every shard is done with that are dropped from the
/// mapping at once: each drop makes the other core flush its TLB (an
/// interrupt, dearer in a VM); dropped a window (2 MiB) at a time, the
/// flushes cost two threads ~2 % of their CPU (bench/RESULTS.md), and 8 MiB
/// is what one thread's walk drops at once.
const RELEASE_EVERY: u64 = 8 << 20;
/// Records asked for ahead of the one analysed.
const AHEAD_RECORDS: usize = 12;
/// Test knob: the window size in bytes (small ones make many windows guess their start).
const WINDOW_ENV: &str = "TCPDOCTOR_ANALYZE_WINDOW";

/// The windows read and waiting, and where each shard is.
struct State {
    /// The next window nobody has started reading.
    next: u64,
    read: HashMap<u64, Arc<Window>>,
    /// Per shard: the window it analyses now (all before it are done).
    at: Vec<u64>,
    spares: Vec<Spare>,
    /// A window could not be read whole: one thread takes the file.
    failed: bool,
    /// After Ctrl-C: the last window any shard analyses.
    last: Option<u64>,
    /// Where the windows done with but still mapped start (`None`: none are).
    unreleased: Option<u64>,
    /// Counts the changes a waiting shard may be waiting for.
    changes: u64,
}

/// The state, and the shards waiting for it to change.
struct Schedule {
    state: Mutex<State>,
    moved: Condvar,
}

impl Schedule {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells the waiting shards that `s` changed.
    fn changed(&self, mut s: MutexGuard<'_, State>) {
        s.changes += 1;
        drop(s);
        self.moved.notify_all();
    }

    /// Waits until the state changes from `seen`.
    fn wait(&self, seen: u64) {
        let mut s = self.lock();
        while s.changes == seen {
            s = self.moved.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Held by a shard while it works: a shard that panics fails the file, so
/// that no other waits for a window it was reading (the panic is then
/// raised again where the threads are joined).
struct Leave<'a>(&'a Schedule);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut s = self.0.lock();
            s.failed = true;
            self.0.changed(s);
        }
    }
}

/// What a shard does next.
enum Next {
    Analyse(Arc<Window>),
    Read(u64, Option<u64>, Spare),
    /// Nothing to do until the state changes from this count.
    Wait(u64),
    Done,
    Fail,
}

/// `cap` in windows, when it can be read so (a pcap file of a supported link type).
pub(super) fn windows(cap: &Capture) -> Option<Windows<'_>> {
    let size = std::env::var(WINDOW_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(WINDOW);
    Windows::new(cap, size)
}

/// Analyses a file's `windows` in `of` shards; `None` when one thread must
/// (the file shrank under the reads, or the parts cannot merge exactly).
pub(super) fn run(windows: &Windows<'_>, tag: Option<usize>, opts: &Options, of: usize) -> Option<Walked> {
    let count = windows.count();
    let shared = Schedule {
        state: Mutex::new(State {
            next: 0,
            read: HashMap::new(),
            at: vec![0; of],
            spares: Vec::new(),
            failed: false,
            last: None,
            unreleased: None,
            changes: 0,
        }),
        moved: Condvar::new(),
    };
    let hub = Hub::new(of, Ephemeral::host());
    let (shared, hub) = (&shared, &hub);
    let walk = |index: usize| {
        let part = Part { index, of, count, windows, shared };
        part.walk(Analyser::new(tag, opts, Some(Shared::new(hub.clone(), index))), opts)
    };
    let parts: Vec<Option<Walked>> = std::thread::scope(|s| {
        let others: Vec<_> = (1..of).map(|i| s.spawn(move || walk(i))).collect();
        let first = walk(0);
        std::iter::once(first).chain(others.into_iter().map(|h| h.join().expect("shard thread panicked"))).collect()
    });
    // Records read after the file shrank were zeros: one thread reads it again, and says so.
    if windows.cut() {
        return None;
    }
    merge(parts.into_iter().collect::<Option<Vec<_>>>()?, tag)
}

/// One shard's share of the work.
struct Part<'a, 'c> {
    index: usize,
    of: usize,
    count: u64,
    windows: &'a Windows<'c>,
    shared: &'a Schedule,
}

impl Part<'_, '_> {
    /// Analyses this shard's frames of every window: `None` if the file
    /// goes back to one thread.
    fn walk(&self, mut a: Analyser<'_>, opts: &Options) -> Option<Walked> {
        let _leave = Leave(self.shared);
        let mut reading = Reading::default();
        // Frames before the window at hand, and where its first must start.
        let (mut frames, mut end, mut stopped, mut damage) = (0u64, 24u64, false, None);
        let mut k = 0;
        loop {
            match self.next(k, end, opts, &mut stopped) {
                Next::Analyse(w) => {
                    self.analyse(&w, frames, &mut a, &mut reading);
                    if self.index == 0
                        && let Some(p) = &opts.progress
                    {
                        p.fetch_add(w.bytes(), Ordering::Relaxed);
                    }
                    frames += w.len() as u64;
                    end = w.end;
                    // The walk ends at damage, as one thread's does.
                    damage = w.damage.clone().map(|what| Damage { offset: end, what }.to_string());
                    drop(w);
                    k += 1;
                    self.done_with(k);
                    if damage.is_some() {
                        break;
                    }
                }
                Next::Read(r, from, spare) => {
                    let (of, link) = (self.of, self.windows.link());
                    let w = self.windows.read(r, from, spare, of, |data| shard_of(link, data, of));
                    let mut s = self.shared.lock();
                    s.read.insert(r, Arc::new(w));
                    self.shared.changed(s);
                }
                Next::Wait(seen) => {
                    // Nobody may wait for this shard meanwhile (the role book).
                    a.passed(frames, true);
                    self.shared.wait(seen);
                }
                Next::Done => break,
                Next::Fail => return None,
            }
        }
        reading.n = frames;
        let end = Ending { format: "pcap", damage, stopped, offset: end, skipped: None };
        let (tcp, filtered) = (a.tcp, a.filtered);
        Some(Walked { r: a.finish(), reading, tcp, filtered, end })
    }

    /// What to do before window `k` (which must start at `from`) can be analysed.
    fn next(&self, k: u64, from: u64, opts: &Options, stopped: &mut bool) -> Next {
        let mut s = self.shared.lock();
        if s.failed {
            return Next::Fail;
        }
        if let Some(f) = opts.stop
            && f.load(Ordering::Relaxed)
            && s.last.is_none()
        {
            // Every shard finishes the window it is in (none is past it).
            s.last = Some(s.at.iter().copied().max().unwrap_or(0));
        }
        if k >= self.count || s.last.is_some_and(|l| k > l) {
            *stopped = k < self.count;
            return Next::Done;
        }
        if let Some(w) = s.read.get(&k) {
            if w.start == Some(from) && (!w.bad || w.damage.is_some()) {
                return Next::Analyse(w.clone());
            }
            if w.start == Some(from) {
                // Read from where it must start and still not whole (the
                // file shrank, or changed under the reads).
                s.failed = true;
                self.shared.changed(s);
                return Next::Fail;
            }
            // Read from a guess (or from the end of a window read from one)
            // that was wrong: read it again from the start now known.
            let w = s.read.remove(&k).expect("just found");
            let spare = Arc::try_unwrap(w).map(Window::spare).unwrap_or_default();
            return Next::Read(k, Some(from), spare);
        }
        // Window k is being read (or read again): read ahead meanwhile.
        let oldest = s.at.iter().copied().min().unwrap_or(0);
        if s.next < self.count && s.next < oldest + AHEAD && s.last.is_none_or(|l| s.next <= l) {
            let r = s.next;
            s.next += 1;
            let from = if r == k { Some(from) } else { r.checked_sub(1).and_then(|p| s.read.get(&p)).map(|w| w.end) };
            let spare = s.spares.pop().unwrap_or_default();
            return Next::Read(r, from, spare);
        }
        Next::Wait(s.changes)
    }

    /// This shard is done with the windows before `k`: those every shard is
    /// done with give their buffers back.
    fn done_with(&self, k: u64) {
        let mut s = self.shared.lock();
        s.at[self.index] = k;
        let oldest = s.at.iter().copied().min().unwrap_or(0);
        let mut release = None;
        if oldest == k {
            let gone = oldest.saturating_sub(1);
            if let Some(w) = s.read.remove(&gone)
                && let Ok(w) = Arc::try_unwrap(w)
            {
                let from = *s.unreleased.get_or_insert(w.base());
                if w.end - from >= RELEASE_EVERY {
                    release = Some((from, w.end));
                    s.unreleased = None;
                }
                s.spares.push(w.spare());
            }
        }
        self.shared.changed(s);
        // Out of the lock: the drop takes a system call and the other core's
        // TLB flush, and a shard that found the lock taken slept (its vCPU
        // then halts, and waking it took this VM 0.1-0.3 ms each time).
        if let Some((from, to)) = release {
            self.windows.release(from, to);
        }
    }

    /// This shard's frames of window `w`, whose first is frame `frames + 1`;
    /// between them, what every shard does at given frame numbers.
    fn analyse(&self, w: &Window, frames: u64, a: &mut Analyser<'_>, reading: &mut Reading) {
        if frames == 0
            && let Some(p) = self.windows.packet(w, 0, 1)
        {
            // Every shard clamps to the file's first time.
            reading.begin(p.ts_ns);
        }
        let (mine, records) = (w.sorted(self.index), self.windows.records(w));
        // The next frame at which every shard reports its progress.
        let mut every = (frames / PASS_EVERY + 1) * PASS_EVERY;
        for (j, &r) in mine.iter().enumerate() {
            // The records are in the shared cache, not this core's: ask ahead.
            if let Some(&ahead) = mine.get(j + AHEAD_RECORDS) {
                records.prefetch(ahead);
            }
            let frame = frames + u64::from(r.index) + 1;
            while every <= frame {
                self.at_every(w, frames, every, a, reading);
                every += PASS_EVERY;
            }
            if let Some(p) = records.packet(r, frame)
                && let Some(ts) = reading.time(&p)
            {
                a.frame(&p, ts, reading);
            }
        }
        let last = frames + w.len() as u64;
        while every <= last {
            self.at_every(w, frames, every, a, reading);
            every += PASS_EVERY;
        }
    }

    /// At frame `frame` (of window `w`, after `frames`), a multiple of
    /// [`PASS_EVERY`]: progress to the role book, and the table's sweep when due.
    #[inline(never)]
    fn at_every(&self, w: &Window, frames: u64, frame: u64, a: &mut Analyser<'_>, reading: &mut Reading) {
        a.passed(frame - 1, false);
        if sweep_due(frame)
            && let Some(p) = self.windows.packet(w, (frame - frames - 1) as usize, frame)
        {
            let ts = reading.clamp(p.ts_ns);
            a.sweep(frame, ts);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window read from the end of a window whose start was guessed wrong
    /// starts wrong too: it is read again from the start now known, not
    /// taken for a file that changed (which gives the file back to one
    /// thread). Before, whether that happened hung on which thread read what
    /// first, and the test below failed one run in three.
    #[test]
    fn a_window_read_from_a_wrong_start_is_read_again() {
        let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/wwr_nagle.pcap")).unwrap();
        let cap = Capture::from_bytes("w.pcap", bytes);
        let windows = Windows::new(&cap, 700).unwrap();
        let first = windows.read(0, Some(24), Spare::default(), 2, |_| 0);
        // Window 1 read from one byte past where it starts.
        let wrong = windows.read(1, Some(first.end + 1), Spare::default(), 2, |_| 0);
        let schedule = Schedule {
            state: Mutex::new(State {
                next: 2,
                read: HashMap::from([(1, Arc::new(wrong))]),
                at: vec![1, 1],
                spares: Vec::new(),
                failed: false,
                last: None,
                unreleased: None,
                changes: 0,
            }),
            moved: Condvar::new(),
        };
        let part = Part { index: 0, of: 2, count: windows.count(), windows: &windows, shared: &schedule };
        let mut stopped = false;
        match part.next(1, first.end, &Options::default(), &mut stopped) {
            Next::Read(1, Some(from), _) => assert_eq!(from, first.end),
            _ => panic!("not read again"),
        }
        assert!(!schedule.lock().failed);
    }

    /// Two shards through a file of 24 windows leave at most the last
    /// [`RELEASE_EVERY`] bytes of it mapped, and a window or two more: the
    /// rest was dropped from the mapping as they went.
    #[test]
    fn the_shards_drop_the_windows_behind_them() {
        use crate::capture::test_files::{resident_kb, zero_frames};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.pcap");
        zero_frames(&path, 24 * WINDOW as usize);
        let cap = Capture::open(&path).unwrap();
        let windows = Windows::new(&cap, WINDOW).unwrap();
        let split = run(&windows, None, &Options::default(), 2).expect("the shards' report");
        assert!(split.reading.n > 30_000);
        let kb = resident_kb(&path);
        assert!(kb <= (RELEASE_EVERY + 2 * WINDOW) / 1024, "{kb} KB of the file still mapped");
    }

    /// A file cut inside its last record is analysed by the shards to the
    /// damage, as one thread analyses it (not given back to one thread).
    #[test]
    fn the_shards_read_a_cut_file_to_its_damage() {
        let mut bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/wwr_nagle.pcap")).unwrap();
        bytes.truncate(bytes.len() - 5);
        let cap = Capture::from_bytes("cut.pcap", bytes);
        let opts = Options::default();
        let windows = Windows::new(&cap, 700).unwrap();
        assert!(windows.count() > 5);
        for of in [2, 3] {
            let split = run(&windows, None, &opts, of).expect("the shards' report");
            let one = super::super::walk::walk(&cap, None, &opts).unwrap();
            assert!(one.end.damage.is_some());
            assert_eq!(split.end.damage, one.end.damage);
            assert_eq!((split.reading.n, split.tcp, split.end.offset), (one.reading.n, one.tcp, one.end.offset));
        }
    }
}
