//! The measuring instruments of the method: instruments that send traffic and
//! time the answers.
//!
//! - [`bench`](mod@bench): HTTP/1.1 load under concurrency (`wrk`), with the client-side
//!   signature of a Nagle stall.
//! - [`probe`]: TCP round trips to one port (`hping3 -S`), raw SYNs with
//!   kernel timestamps, or timed `connect()` without CAP_NET_RAW.
//! - [`trace`]: the routers on the way to a TCP port (`traceroute --tcp`).
//! - [`tls`]: the TLS client side of `bench` and `diagnose` (rustls).
//!
//! `raw` holds what probe and trace share: the SYN, checksums, parsers for
//! replies and ICMP errors, and the socket plumbing; `common` the
//! command-line side (durations, resolving, errors).

pub mod bench;
pub mod common;
pub mod probe;
mod raw;
pub mod tls;
pub mod trace;
