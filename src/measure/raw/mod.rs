//! Packets and sockets shared by `probe` and `trace`: the TCP checksum, the
//! hand-built SYN, parsers for replies and ICMP errors (pure functions over
//! bytes), and thin wrappers over raw sockets, kernel timestamps and
//! non-blocking connects: [`packet`] (bytes), [`sys`] (system calls),
//! [`sockets`] (raw TCP and ICMP) and [`connect`] (unprivileged).

mod connect;
mod packet;
mod sockets;
mod sys;

pub(crate) use connect::*;
pub(crate) use packet::*;
pub(crate) use sockets::*;
pub(crate) use sys::*;
