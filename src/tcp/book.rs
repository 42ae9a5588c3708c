//! Where a tracker learns and asks about endpoints' roles: its own
//! `Roles`, or one shared by the trackers that split a file between
//! threads ("shards", each holding only its own connections).
//!
//! A handshake-less connection's roles are judged on what the capture taught
//! before its packet, from every connection. So a shard queues what its
//! connections teach, with the frame; a judgement at frame F waits until
//! every other shard has queued everything before F, then applies the queues
//! in frame order: the same lessons, in the same order, as one thread learns
//! them. Judgements are rare (connections that started before the capture),
//! so the waiting is too.

use super::RoleSource;
use super::roles::{Ephemeral, Roles};
use crate::wire::Endpoint;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Frames between two publications of a shard's lessons and progress while
/// it works: a judging shard waits for at most about this many of another's.
const PUBLISH_EVERY: u64 = 256;

#[derive(Clone, Copy, Debug)]
enum Lesson {
    Met(Endpoint, Endpoint),
    Server(Endpoint),
}

impl Lesson {
    fn teach(self, r: &mut Roles) {
        match self {
            Lesson::Met(a, b) => r.met(a, b),
            Lesson::Server(e) => r.server(e),
        }
    }
}

struct State {
    roles: Roles,
    /// Per shard, its published lessons not yet applied, in frame order.
    queues: Vec<VecDeque<(u64, Lesson)>>,
}

/// The evidence shared by the shards of one file.
pub struct Hub {
    state: Mutex<State>,
    /// Per shard: every lesson of a frame below this is queued.
    below: Vec<Mark>,
}

/// A shard's mark, on lines of its own: each shard writes its own every
/// few hundred frames, and on a shared line every write would first take
/// the line back from the other core (128 bytes: the line and the one the
/// adjacent-line prefetcher pairs with it).
#[repr(align(128))]
struct Mark(AtomicU64);

impl Hub {
    /// A hub for `shards` trackers, taking ports in `e` as clients'.
    pub fn new(shards: usize, e: Ephemeral) -> Arc<Hub> {
        Arc::new(Hub {
            state: Mutex::new(State { roles: Roles::new(e), queues: vec![VecDeque::new(); shards] }),
            below: (0..shards).map(|_| Mark(AtomicU64::new(0))).collect(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A shard that panicked leaves whole lessons behind: still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies, in frame order, queued lessons of frames up to `until`.
    fn apply(s: &mut State, until: u64) {
        loop {
            let next = s.queues.iter().enumerate().filter_map(|(i, q)| q.front().map(|l| (l.0, i))).min();
            match next {
                Some((frame, i)) if frame <= until => {
                    if let Some((_, l)) = s.queues[i].pop_front() {
                        l.teach(&mut s.roles);
                    }
                }
                _ => return,
            }
        }
    }
}

/// One shard's handle on a [`Hub`].
pub struct Shared {
    hub: Arc<Hub>,
    me: usize,
    pending: Vec<(u64, Lesson)>,
    /// The last mark published.
    published: u64,
}

impl Shared {
    /// Shard `me` of `hub`.
    pub fn new(hub: Arc<Hub>, me: usize) -> Shared {
        Shared { hub, me, pending: Vec::new(), published: 0 }
    }

    /// Queues the lessons so far and says every later one is of frame `below` or later.
    fn publish(&mut self, below: u64) {
        if !self.pending.is_empty() {
            let mut s = self.hub.lock();
            s.queues[self.me].extend(self.pending.drain(..));
            // Lessons below every shard's mark can no longer be overtaken: apply them (bounds the queues).
            let all = self.hub.below.iter().map(|b| b.0.load(Ordering::Acquire)).min().unwrap_or(0);
            Hub::apply(&mut s, all.min(below).saturating_sub(1));
        }
        self.published = below;
        self.hub.below[self.me].0.store(below, Ordering::Release);
    }

    fn judge(&mut self, frame: u64, a: Endpoint, b: Endpoint) -> (Endpoint, RoleSource) {
        self.publish(frame);
        let mut spins = 0u32;
        while self.hub.below.iter().enumerate().any(|(i, b)| i != self.me && b.0.load(Ordering::Acquire) < frame) {
            spins += 1;
            if spins < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
        }
        let mut s = self.hub.lock();
        Hub::apply(&mut s, frame);
        s.roles.judge(a, b)
    }
}

impl Drop for Shared {
    /// Done (or panicking): nobody waits for this shard any more.
    fn drop(&mut self) {
        self.publish(u64::MAX);
    }
}

/// A tracker's source of role evidence.
pub(crate) enum Book {
    Own(Roles),
    Shared(Shared),
}

impl Book {
    /// A new connection between `a` and `b`, at `frame`.
    #[inline]
    pub(crate) fn met(&mut self, frame: u64, a: Endpoint, b: Endpoint) {
        match self {
            Book::Own(r) => r.met(a, b),
            Book::Shared(s) => s.pending.push((frame, Lesson::Met(a, b))),
        }
    }

    /// `e` is a server (it answered a SYN, or content said so), at `frame`.
    #[inline]
    pub(crate) fn server(&mut self, frame: u64, e: Endpoint) {
        match self {
            Book::Own(r) => r.server(e),
            Book::Shared(s) => s.pending.push((frame, Lesson::Server(e))),
        }
    }

    /// Which of `a` and `b` is the server, judged at `frame`.
    pub(crate) fn judge(&mut self, frame: u64, a: Endpoint, b: Endpoint) -> (Endpoint, RoleSource) {
        match self {
            Book::Own(r) => r.judge(a, b),
            Book::Shared(s) => s.judge(frame, a, b),
        }
    }

    /// Every packet of this tracker up to `frame` was fed: publishes now and
    /// then, and always when `all` (it waits for more: nobody must wait for it).
    #[inline]
    pub(crate) fn passed(&mut self, frame: u64, all: bool) {
        if let Book::Shared(s) = self
            && (all || frame >= s.published + PUBLISH_EVERY)
        {
            s.publish(frame + 1);
        }
    }
}
