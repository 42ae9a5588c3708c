//! Heap allocations per request in `bench`'s loop, counted by a global
//! allocator in this test process while `bench::run` loads the lab's servers
//! (run by `tcpdoctor lab` in another process, so theirs are not counted).
//! A run of 1 s and one of 3 s: the difference in allocations over the
//! difference in requests is the steady state, set-up cancelled out.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tcpdoctor::measure::bench;
use tcpdoctor::measure::tls::Trust;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Allocations and requests of one run.
fn counted(url: &str, secs: u64) -> (u64, u64) {
    let o = bench::Options {
        url: url.into(),
        threads: 1,
        connections: 4,
        duration: Duration::from_secs(secs),
        trust: Trust::Insecure,
        ..bench::Options::default()
    };
    let before = ALLOCS.load(Ordering::Relaxed);
    let r = bench::run(&o, &mut |_, _| {}).unwrap_or_else(|e| panic!("{url}: {e}"));
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert!(r.requests > 1000 && r.errors.total() == 0, "{url}: {r:#?}");
    (allocs, r.requests)
}

/// Steady-state allocations per keep-alive request.
fn per_request(url: &str) -> f64 {
    let (a1, r1) = counted(url, 1);
    let (a3, r3) = counted(url, 3);
    let per = a3.saturating_sub(a1) as f64 / (r3 - r1) as f64;
    eprintln!("{url}: {per:.4} allocations per request ({a1} in {r1} requests, {a3} in {r3})");
    per
}

#[test]
fn allocations_per_keepalive_request_plain_and_tls() {
    let (_lab, rows) = common::lab_rows(&[]);
    let url = |name: &str| rows.iter().find(|r| r["name"] == name).unwrap()["url"].as_str().unwrap().to_string();
    // Plain HTTP: nothing per request.
    assert!(per_request(&url("nodelay")) < 0.01);
    // TLS: rustls builds each sent record in a fresh Vec and queues each received
    // record's plaintext in another; one request record, two response records.
    let tls = per_request(&url("nodelay-tls"));
    assert!((1.0..=4.0).contains(&tls), "{tls} allocations per request over TLS");
}
