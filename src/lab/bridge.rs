//! The delay bridge: each frame read from one TAP is written to the other a
//! fixed one-way delay after it was read, in order (one FIFO per direction,
//! so nothing is reordered), and IP frames may be dropped at random with a
//! seeded generator (the same seed drops the same frame numbers).
//!
//! Each direction is one thread at real-time priority (SCHED_FIFO): on a busy
//! machine an ordinary thread is woken tens of milliseconds late, which turns
//! into jitter and spurious retransmissions. A thread sleeps in `ppoll` until
//! the next release or the next frame, and looks at its stop flag and
//! deadline at least every [`IDLE`].

use super::tap::Tap;
use rand_core::{Rng, SeedableRng};
use rand_xorshift::XorShiftRng;
use serde::Serialize;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// Longest sleep between looks at the stop flag.
pub const IDLE: Duration = Duration::from_millis(50);
/// Most bytes held per direction (a router's queue); frames beyond are dropped and counted.
pub const MAX_QUEUED: usize = 64 << 20;
/// Most dropped frames remembered (their first bytes), for the record of what was lost.
pub const MAX_LOGGED: usize = 100_000;
/// Bytes kept of each dropped frame: Ethernet, IP and TCP headers.
const LOGGED_BYTES: usize = 128;
/// Frames read in one go before looking at the releases again.
const READ_BATCH: usize = 256;
/// SCHED_FIFO priority of the forwarding threads (above ordinary work, below the kernel's own).
const RT_PRIORITY: i32 = 20;

/// What the path does to frames.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Delay of every frame, each way.
    pub one_way: Duration,
    /// Share of IP frames dropped, 0 to 1 (each direction on its own).
    pub loss: f64,
    /// Seed of the drop decisions.
    pub seed: u64,
    /// Run the forwarding threads at SCHED_FIFO priority.
    pub realtime: bool,
}

impl Shape {
    /// A delay, no loss, at real-time priority.
    pub fn delay(one_way: Duration) -> Shape {
        Shape { one_way, loss: 0.0, seed: 1, realtime: true }
    }
}

/// What one direction did.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Stats {
    /// Frames written to the far side.
    pub frames: u64,
    /// Their bytes.
    pub bytes: u64,
    /// IP frames dropped by the random loss.
    pub dropped: u64,
    /// Frames dropped because [`MAX_QUEUED`] bytes were waiting.
    pub overflow: u64,
    /// Frames the far TAP refused (it was down).
    pub write_errors: u64,
    /// How late releases were, on average and at worst (µs after their time).
    pub late_mean_us: f64,
    pub late_max_us: f64,
}

/// A frame the loss dropped.
#[derive(Clone, Debug)]
pub struct Dropped {
    /// When it was read (ns since the epoch, the clock captures use).
    pub unix_ns: i64,
    /// 0: from the first TAP to the second; 1: back.
    pub direction: usize,
    /// Its length on the wire.
    pub len: usize,
    /// Its first bytes (Ethernet, IP and TCP headers).
    pub head: Vec<u8>,
}

#[derive(Default)]
struct Counters {
    frames: AtomicU64,
    bytes: AtomicU64,
    dropped: AtomicU64,
    overflow: AtomicU64,
    write_errors: AtomicU64,
    releases: AtomicU64,
    late_sum_ns: AtomicU64,
    late_max_ns: AtomicU64,
}

impl Counters {
    fn stats(&self) -> Stats {
        let n = self.releases.load(Ordering::Relaxed);
        let sum = self.late_sum_ns.load(Ordering::Relaxed);
        Stats {
            frames: self.frames.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            overflow: self.overflow.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
            late_mean_us: if n == 0 { 0.0 } else { sum as f64 / n as f64 / 1e3 },
            late_max_us: self.late_max_ns.load(Ordering::Relaxed) as f64 / 1e3,
        }
    }
}

struct Shared {
    stop: AtomicBool,
    deadline: Option<Instant>,
    dirs: [Counters; 2],
    log: Mutex<Vec<Dropped>>,
}

/// Two forwarding threads between two TAPs; stopped when dropped.
pub struct Bridge {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    realtime: Result<(), String>,
}

impl Bridge {
    /// Starts forwarding between `a` and `b` until [`Bridge::stop`], drop, or `deadline`.
    pub fn start(a: Tap, b: Tap, shape: Shape, deadline: Option<Instant>) -> io::Result<Bridge> {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            deadline,
            dirs: Default::default(),
            log: Mutex::new(Vec::new()),
        });
        let (a, b) = (Arc::new(a), Arc::new(b));
        let (tx, rx) = mpsc::channel();
        let mut bridge = Bridge { shared: shared.clone(), threads: Vec::new(), realtime: Ok(()) };
        for (dir, from, to) in [(0, a.clone(), b.clone()), (1, b, a)] {
            let (s, tx) = (shared.clone(), tx.clone());
            let t = std::thread::Builder::new().name(format!("rtt-bridge-{dir}")).spawn(move || {
                let rt = if shape.realtime { go_realtime() } else { Ok(()) };
                let _ = tx.send(rt);
                drop(tx);
                forward(&from, &to, dir, shape, &s);
            })?;
            bridge.threads.push(t);
        }
        drop(tx);
        // Both threads say whether they got real-time priority before we return.
        bridge.realtime = (0..2).try_for_each(|_| rx.recv().unwrap_or(Ok(())));
        Ok(bridge)
    }

    /// Whether the forwarding threads run at real-time priority; the reason when not.
    pub fn realtime(&self) -> Result<(), String> {
        self.realtime.clone()
    }

    /// Counters of each direction so far (0: first TAP to second; 1: back).
    pub fn stats(&self) -> [Stats; 2] {
        [self.shared.dirs[0].stats(), self.shared.dirs[1].stats()]
    }

    /// The frames the loss dropped so far (at most [`MAX_LOGGED`]).
    pub fn dropped(&self) -> Vec<Dropped> {
        self.shared.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Stops both threads and waits for them; frames still held are discarded.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stop();
    }
}

fn go_realtime() -> Result<(), String> {
    // musl's sched_param has more (unused) fields than glibc's: zero them all.
    // SAFETY: sched_param is plain integers, for which all zeroes is valid.
    let mut p: libc::sched_param = unsafe { std::mem::zeroed() };
    p.sched_priority = RT_PRIORITY;
    // SAFETY: changes only the calling thread's scheduling, with a valid param.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &p) };
    if rc != 0 {
        return Err(format!(
            "SCHED_FIFO refused ({}): releases may be late by milliseconds on a busy machine",
            io::Error::from_raw_os_error(rc)
        ));
    }
    Ok(())
}

/// Whether to drop the next IP frame: `loss` of the generator's range.
fn lose(rng: &mut XorShiftRng, loss: f64) -> bool {
    loss > 0.0 && (rng.next_u32() as f64) < loss * 4_294_967_296.0
}

fn is_ip(frame: &[u8]) -> bool {
    matches!(frame.get(12..14), Some([0x08, 0x00]) | Some([0x86, 0xdd]))
}

fn unix_ns() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// The generator of one direction: the seed, told apart per direction.
fn generator(seed: u64, dir: usize) -> XorShiftRng {
    XorShiftRng::seed_from_u64(seed ^ (dir as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

fn forward(from: &Tap, to: &Tap, dir: usize, shape: Shape, s: &Shared) {
    let c = &s.dirs[dir];
    let mut rng = generator(shape.seed, dir);
    let mut held: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut queued = 0usize;
    let mut buf = vec![0u8; 65536];
    while !s.stop.load(Ordering::Relaxed) && s.deadline.is_none_or(|d| Instant::now() < d) {
        while let Some((due, _)) = held.front() {
            let now = Instant::now();
            if *due > now {
                break;
            }
            let Some((due, frame)) = held.pop_front() else { break };
            queued -= frame.len();
            let late = now.duration_since(due).as_nanos() as u64;
            c.releases.fetch_add(1, Ordering::Relaxed);
            c.late_sum_ns.fetch_add(late, Ordering::Relaxed);
            c.late_max_ns.fetch_max(late, Ordering::Relaxed);
            // SAFETY: writes `frame` (a live buffer of that length) to our own descriptor.
            let n = unsafe { libc::write(to.fd(), frame.as_ptr().cast(), frame.len()) };
            if n < 0 {
                c.write_errors.fetch_add(1, Ordering::Relaxed);
            } else {
                c.frames.fetch_add(1, Ordering::Relaxed);
                c.bytes.fetch_add(frame.len() as u64, Ordering::Relaxed);
            }
        }
        let wait = held.front().map_or(IDLE, |(due, _)| due.saturating_duration_since(Instant::now())).min(IDLE);
        let mut p = libc::pollfd { fd: from.fd(), events: libc::POLLIN, revents: 0 };
        let ts = libc::timespec { tv_sec: wait.as_secs() as _, tv_nsec: wait.subsec_nanos() as libc::c_long };
        // SAFETY: one live pollfd and a valid timespec; no signal mask change.
        let n = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
        if n <= 0 || p.revents & libc::POLLIN == 0 {
            if n > 0 {
                // An error condition on the TAP: do not spin on it.
                std::thread::sleep(Duration::from_millis(1));
            }
            continue;
        }
        for _ in 0..READ_BATCH {
            // SAFETY: reads into `buf`, a live buffer of that length, from our own descriptor.
            let n = unsafe { libc::read(from.fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break; // EAGAIN: all read (an error: tried again after the next wait)
            }
            let frame = &buf[..n as usize];
            let due = Instant::now() + shape.one_way;
            if is_ip(frame) && lose(&mut rng, shape.loss) {
                c.dropped.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut log) = s.log.lock()
                    && log.len() < MAX_LOGGED
                {
                    let head = frame[..frame.len().min(LOGGED_BYTES)].to_vec();
                    log.push(Dropped { unix_ns: unix_ns(), direction: dir, len: frame.len(), head });
                }
                continue;
            }
            if queued + frame.len() > MAX_QUEUED {
                c.overflow.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            queued += frame.len();
            held.push_back((due, frame.to_vec()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_drops_the_same_frames_and_the_rate_is_the_one_asked() {
        let picks = |seed, dir| {
            let mut r = generator(seed, dir);
            (0..100_000).map(|_| lose(&mut r, 0.03)).collect::<Vec<_>>()
        };
        let a = picks(7, 0);
        assert_eq!(a, picks(7, 0));
        assert_ne!(a, picks(8, 0));
        assert_ne!(a, picks(7, 1), "each direction has its own sequence");
        let rate = a.iter().filter(|&&d| d).count() as f64 / a.len() as f64;
        assert!((0.027..0.033).contains(&rate), "{rate}");
        let mut r = generator(7, 0);
        assert!((0..10_000).all(|_| !lose(&mut r, 0.0)));
        assert!((0..10_000).all(|_| lose(&mut r, 1.0)));
    }

    #[test]
    fn only_ip_frames_are_candidates() {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&[0x08, 0x06]); // ARP
        assert!(!is_ip(&f));
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        assert!(is_ip(&f));
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert!(is_ip(&f));
        assert!(!is_ip(&f[..12]));
    }
}
