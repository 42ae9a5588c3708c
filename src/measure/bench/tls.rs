//! TLS records through the worker's non-blocking sockets: rustls's buffered
//! client connection, fed from and drained to the fd by the epoll loop.
//!
//! The buffered API allocates a little per record (rustls 0.23 builds each
//! encrypted record in a fresh `Vec`, and copies decrypted data into its own
//! queue); the unbuffered one would save the copy but not the first, so the
//! plain, well-trodden API is used. `bench/RESULTS.md` has the count.

use super::sock::Fd;
use rustls::ClientConnection;
use std::io::{self, ErrorKind};
use std::os::fd::RawFd;

/// What moving bytes between a socket and rustls came to.
pub(super) enum Io {
    /// Done: the handshake is complete, or bytes were read.
    Done,
    /// The socket would block; the next edge brings more.
    Blocked,
    /// The server closed the connection.
    Closed,
    /// The socket failed.
    Failed(io::Error),
    /// TLS failed (an alert was queued and sent where possible).
    Tls(rustls::Error),
}

/// Writes the records rustls has queued. `Ok(false)`: the socket is full.
pub(super) fn flush(c: &mut ClientConnection, fd: RawFd) -> io::Result<bool> {
    while c.wants_write() {
        match c.write_tls(&mut Fd(fd)) {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Reads what the socket holds into rustls and decrypts it (plaintext is
/// then in `c.reader()`).
pub(super) fn fill(c: &mut ClientConnection, fd: RawFd) -> Io {
    loop {
        match c.read_tls(&mut Fd(fd)) {
            Ok(0) => return Io::Closed,
            Ok(_) => break,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Io::Blocked,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Io::Failed(e),
        }
    }
    match c.process_new_packets() {
        Ok(_) => Io::Done,
        Err(e) => {
            // The alert tells the server why; it may not get through, which is fine.
            let _ = flush(c, fd);
            Io::Tls(e)
        }
    }
}

/// Drives the handshake as far as the socket allows.
pub(super) fn handshake(c: &mut ClientConnection, fd: RawFd) -> Io {
    loop {
        match flush(c, fd) {
            Ok(true) => {}
            Ok(false) => return Io::Blocked,
            Err(e) => return Io::Failed(e),
        }
        if !c.is_handshaking() {
            return Io::Done;
        }
        match fill(c, fd) {
            Io::Done => {}
            other => return other,
        }
    }
}
