//! Active measurements: instruments that send packets and time the answers.
//!
//! - [`probe`]: TCP round trips to one port (`hping3 -S`), raw SYNs with
//!   kernel timestamps, or timed `connect()` without CAP_NET_RAW.
//! - [`trace`]: the routers on the way to a TCP port (`traceroute --tcp`).
//!
//! `raw` holds what both share: the SYN, checksums, parsers for replies and
//! ICMP errors, and the socket plumbing.

pub mod common;
pub mod probe;
mod raw;
pub mod trace;
