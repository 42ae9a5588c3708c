//! Socket options of another process's sockets, on a duplicate:
//! `pidfd_open` + `pidfd_getfd` (Linux ≥ 5.6, ptrace permission), then
//! `getsockopt`. The duplicate shares the socket: `inspect` only reads and
//! closes it at once, so the target is not disturbed; `nodelay` sets
//! TCP_NODELAY through it ([`set_nodelay`]), which changes the target's socket.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A pidfd: a handle on one process that cannot be confused with a later
/// process reusing the pid.
pub(crate) struct Pidfd(OwnedFd);

/// The options that decide when the kernel sends a small segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Opts {
    pub nodelay: bool,
    pub cork: bool,
    /// Not in delayed-ACK (pingpong) mode: what `getsockopt(TCP_QUICKACK)` reports.
    pub quickack: bool,
}

fn fd_result(r: libc::c_long) -> io::Result<OwnedFd> {
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

impl Pidfd {
    /// Opens a pidfd on `pid` (ESRCH: no such process).
    pub fn open(pid: u32) -> io::Result<Pidfd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0 as libc::c_uint) };
        fd_result(r).map(Pidfd)
    }

    /// A duplicate of the process's descriptor `fd`, which must still be
    /// socket `inode` (EBADF otherwise: it was closed or reused meanwhile).
    /// EPERM means no ptrace permission; ESRCH that the process exited.
    pub fn getfd(&self, fd: i32, inode: u64) -> io::Result<OwnedFd> {
        // SAFETY: pidfd_getfd takes a pidfd, a descriptor number of that process
        // and flags (0); it returns a new descriptor in this process or -1.
        let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, self.0.as_raw_fd(), fd, 0 as libc::c_uint) };
        let dup = fd_result(r)?;
        if ino(&dup)? != inode {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        Ok(dup)
    }

    /// Reads the options of the process's descriptor `fd` (see [`Pidfd::getfd`]).
    pub fn sockopts(&self, fd: i32, inode: u64) -> io::Result<Opts> {
        let dup = self.getfd(fd, inode)?;
        Ok(Opts {
            nodelay: get_int(&dup, libc::TCP_NODELAY)? != 0,
            cork: get_int(&dup, libc::TCP_CORK)? != 0,
            quickack: get_int(&dup, libc::TCP_QUICKACK)? != 0,
        })
        // `dup` is closed here.
    }

    /// Whether the process has exited (a zombie counts).
    pub fn exited(&self) -> bool {
        let mut p = libc::pollfd { fd: self.0.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one live pollfd, no wait.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r > 0 && p.revents & libc::POLLIN != 0
    }
}

fn ino(fd: &OwnedFd) -> io::Result<u64> {
    // SAFETY: all-zero is a valid `stat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a live, writable stat struct.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_ino)
}

/// TCP_NODELAY of a socket.
pub(crate) fn nodelay(fd: &OwnedFd) -> io::Result<bool> {
    Ok(get_int(fd, libc::TCP_NODELAY)? != 0)
}

/// Sets TCP_NODELAY. On a duplicate from [`Pidfd::getfd`] this changes the
/// other process's socket: the duplicate is the same socket.
pub(crate) fn set_nodelay(fd: &OwnedFd, on: bool) -> io::Result<()> {
    let v = libc::c_int::from(on);
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v is a live int and len its size.
    let r =
        unsafe { libc::setsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, (&raw const v).cast(), len) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

fn get_int(fd: &OwnedFd, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are live and len is v's size.
    let r = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, name, (&raw mut v).cast(), &mut len) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(v) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn reads_own_socket_options_through_a_duplicate() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let inode = std::fs::metadata(format!("/proc/self/fd/{}", s.as_raw_fd())).unwrap().ino();
        let me = Pidfd::open(std::process::id()).unwrap();
        assert!(!me.sockopts(s.as_raw_fd(), inode).unwrap().nodelay);
        s.set_nodelay(true).unwrap();
        let o = me.sockopts(s.as_raw_fd(), inode).unwrap();
        assert!(o.nodelay && !o.cork);
        // A descriptor that is not that socket any more.
        let e = me.sockopts(s.as_raw_fd(), inode + 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        assert!(!me.exited());
    }

    #[test]
    fn a_duplicate_sets_the_option_on_the_shared_socket() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let inode = std::fs::metadata(format!("/proc/self/fd/{}", s.as_raw_fd())).unwrap().ino();
        let dup = Pidfd::open(std::process::id()).unwrap().getfd(s.as_raw_fd(), inode).unwrap();
        set_nodelay(&dup, true).unwrap();
        drop(dup);
        // Seen on the original descriptor: one socket, two descriptors.
        assert!(s.nodelay().unwrap());
        // A listening socket's value is what its accepted sockets start with.
        let linode = std::fs::metadata(format!("/proc/self/fd/{}", l.as_raw_fd())).unwrap().ino();
        let ldup = Pidfd::open(std::process::id()).unwrap().getfd(l.as_raw_fd(), linode).unwrap();
        assert!(!nodelay(&ldup).unwrap());
        set_nodelay(&ldup, true).unwrap();
        // The first connection waited in the accept queue from before the change:
        // its socket was made then, with the old value.
        let (queued, _) = l.accept().unwrap();
        assert!(!queued.nodelay().unwrap());
        let _c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (accepted, _) = l.accept().unwrap();
        assert!(accepted.nodelay().unwrap(), "accepted sockets inherit TCP_NODELAY from the listener");
    }
}
