//! The few socket calls the load loop makes, over libc, without allocation.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// A socket address in the kernel's layout.
#[derive(Clone, Copy)]
pub struct Addr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
    family: libc::c_int,
}

impl Addr {
    /// Converts a std address.
    pub fn new(a: SocketAddr) -> Addr {
        let (storage, len) = crate::measure::raw::to_sockaddr(a);
        let family = if a.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
        Addr { storage, len, family }
    }
}

fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its size.
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            std::ptr::addr_of!(v).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Opens a non-blocking TCP socket and starts connecting. Returns the fd and
/// whether the connection is already complete.
pub fn connect(addr: &Addr, nodelay: bool) -> io::Result<(RawFd, bool)> {
    // SAFETY: plain syscall.
    let fd =
        check(unsafe { libc::socket(addr.family, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })?;
    let setup = set_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, i32::from(nodelay));
    if let Err(e) = setup {
        close(fd);
        return Err(e);
    }
    // SAFETY: addr.storage holds a valid sockaddr of length addr.len.
    let r = unsafe { libc::connect(fd, std::ptr::addr_of!(addr.storage).cast(), addr.len) };
    if r == 0 {
        return Ok((fd, true));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINPROGRESS) {
        return Ok((fd, false));
    }
    close(fd);
    Err(e)
}

/// The outcome of a non-blocking connect (SO_ERROR).
pub fn connect_result(fd: RawFd) -> io::Result<()> {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: err and len are live and sized for SO_ERROR.
    check(unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_ERROR, std::ptr::addr_of_mut!(err).cast(), &mut len)
    })?;
    if err == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(err)) }
}

/// Asks the kernel to ACK at once (TCP_QUICKACK lasts only until the next
/// delayed-ACK decision, so it is set after every read).
pub fn quickack(fd: RawFd) {
    let _ = set_int(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1);
}

/// Non-blocking read; `Ok(0)` is end of stream.
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for writes of buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

/// Non-blocking write (no SIGPIPE).
pub fn write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for reads of buf.len() bytes.
    let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

/// Non-blocking gathered write (no SIGPIPE): TLS records queued by rustls go out in one call.
pub fn write_vectored(fd: RawFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: msghdr is plain data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is ABI-compatible with iovec (std guarantees it on Unix).
    msg.msg_iov = bufs.as_ptr().cast_mut().cast();
    msg.msg_iovlen = bufs.len().min(libc::c_int::MAX as usize) as _;
    // SAFETY: msg points at bufs.len() live iovecs; no address, no control data.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

/// A socket we own, as `Read` and `Write` for rustls's `read_tls`/`write_tls`.
pub struct Fd(pub RawFd);

impl io::Read for Fd {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read(self.0, buf)
    }
}

impl io::Write for Fd {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        write(self.0, buf)
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        write_vectored(self.0, bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Closes a file descriptor we own.
pub fn close(fd: RawFd) {
    // SAFETY: the caller owns fd and never uses it again.
    unsafe { libc::close(fd) };
}

/// An epoll instance.
pub struct Epoll(RawFd);

impl Epoll {
    /// Creates one.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall.
        Ok(Epoll(check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?))
    }
    /// Watches `fd` edge-triggered for input and output; `token` comes back with its events.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: token,
        };
        // SAFETY: ev is a live epoll_event.
        check(unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_ADD, fd, &mut ev) }).map(drop)
    }
    /// Waits up to `timeout` for events: epoll_pwait2 (ns timeout, Linux >= 5.11)
    /// where the kernel has it, else epoll_pwait with the timeout rounded up to
    /// whole ms (rounding down would wake early and spin).
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout: Duration) -> io::Result<usize> {
        let max = events.len().min(libc::c_int::MAX as usize) as libc::c_int;
        let n = if PWAIT2_MISSING.load(Ordering::Relaxed) {
            self.wait_ms(events, max, timeout)
        } else {
            match self.wait_ns(events, max, timeout) {
                // Missing (old kernel) or refused by a seccomp profile that predates it:
                // the syscall has no other reason to fail this way. Remembered once for all threads.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                    PWAIT2_MISSING.store(true, Ordering::Relaxed);
                    self.wait_ms(events, max, timeout)
                }
                r => r,
            }
        };
        match n {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            r => r,
        }
    }

    /// epoll_pwait2 through syscall(2): glibc's wrapper needs glibc 2.35.
    fn wait_ns(&self, events: &mut [libc::epoll_event], max: libc::c_int, timeout: Duration) -> io::Result<usize> {
        let ts = KernelTimespec { tv_sec: timeout.as_secs() as i64, tv_nsec: i64::from(timeout.subsec_nanos()) };
        // SAFETY: events is valid for `max` entries; ts is live; a null signal mask needs no size.
        let n = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                self.0,
                events.as_mut_ptr(),
                max,
                std::ptr::addr_of!(ts),
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        };
        if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
    }

    fn wait_ms(&self, events: &mut [libc::epoll_event], max: libc::c_int, timeout: Duration) -> io::Result<usize> {
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(libc::c_int::MAX as u128) as libc::c_int;
        // SAFETY: events is valid for `max` entries; no signal mask.
        let n = unsafe { libc::epoll_pwait(self.0, events.as_mut_ptr(), max, ms, std::ptr::null()) };
        check(n).map(|n| n as usize)
    }
}

/// Set once epoll_pwait2 answered ENOSYS (or EPERM): every wait then uses epoll_pwait.
static PWAIT2_MISSING: AtomicBool = AtomicBool::new(false);

/// The kernel's `struct __kernel_timespec`: 64-bit fields on every architecture.
#[repr(C)]
struct KernelTimespec {
    tv_sec: i64,
    tv_nsec: i64,
}

impl Drop for Epoll {
    fn drop(&mut self) {
        close(self.0);
    }
}
