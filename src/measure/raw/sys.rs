//! Thin wrappers over the system calls the probes need: sockets, options,
//! addresses, poll, recvmsg with kernel timestamps, and a held port.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- syscalls

pub(super) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

pub(super) fn socket(domain: libc::c_int, ty: libc::c_int, proto: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; on success the fd is new and owned by nobody else.
    let fd = cvt(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, proto) })?;
    // SAFETY: fd was just returned by socket() and is valid.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(super) fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: val points to a live T of the size passed.
    cvt(unsafe { libc::setsockopt(fd, level, name, (val as *const T).cast(), size_of::<T>() as libc::socklen_t) })
        .map(|_| ())
}

pub(super) fn getsockopt<T: Copy>(fd: RawFd, level: libc::c_int, name: libc::c_int, val: &mut T) -> io::Result<usize> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: val points to a live, writable T of `len` bytes.
    cvt(unsafe { libc::getsockopt(fd, level, name, (val as *mut T).cast(), &mut len) })?;
    Ok(len as usize)
}

/// `a` in the kernel's layout, and its length.
pub(crate) fn to_sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match a {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// Reads a sockaddr of `len` bytes at `p`.
///
/// # Safety
/// `p` must point to at least `len` readable bytes.
pub(super) unsafe fn from_sockaddr(p: *const u8, len: usize) -> Option<SocketAddr> {
    if len < size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY (all reads): the caller guarantees `len` bytes; sizes are checked before each read.
    let family = unsafe { std::ptr::read_unaligned(p.cast::<libc::sa_family_t>()) };
    match libc::c_int::from(family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            let sin = unsafe { std::ptr::read_unaligned(p.cast::<libc::sockaddr_in>()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            let sin6 = unsafe { std::ptr::read_unaligned(p.cast::<libc::sockaddr_in6>()) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(ip, u16::from_be(sin6.sin6_port), 0, sin6.sin6_scope_id)))
        }
        _ => None,
    }
}

pub(super) fn bind(fd: RawFd, a: SocketAddr) -> io::Result<()> {
    let (ss, len) = to_sockaddr(a);
    // SAFETY: ss holds a valid sockaddr of `len` bytes.
    cvt(unsafe { libc::bind(fd, (&ss as *const libc::sockaddr_storage).cast(), len) }).map(|_| ())
}

pub(super) fn local_addr(fd: RawFd) -> io::Result<SocketAddr> {
    // SAFETY: zeroed sockaddr_storage is valid; getsockname writes at most `len` bytes.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    cvt(unsafe { libc::getsockname(fd, (&mut ss as *mut libc::sockaddr_storage).cast(), &mut len) })?;
    // SAFETY: getsockname filled `len` bytes of ss.
    unsafe { from_sockaddr((&ss as *const libc::sockaddr_storage).cast(), len as usize) }
        .ok_or_else(|| io::Error::other("getsockname returned an unknown address family"))
}

/// Current CLOCK_REALTIME in ns: the clock kernel software timestamps use.
pub(crate) fn realtime_ns() -> i64 {
    // SAFETY: zeroed timespec is valid; clock_gettime writes into it.
    let mut ts: libc::timespec = unsafe { zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// A random 32-bit number from the kernel (for initial sequence numbers).
pub(crate) fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: b is 4 writable bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 4 {
        // Never expected on Linux ≥ 3.17; a clock-derived value still differs per probe.
        return (realtime_ns() as u32).wrapping_mul(2_654_435_761);
    }
    u32::from_ne_bytes(b)
}

/// Waits until one of `fds` is ready or `timeout` passes (EINTR is retried
/// with the time left). Returns the number ready.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let end = Instant::now() + timeout;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        // Round up so a 0.3 ms wait does not become a busy 0 ms poll.
        let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: fds is a live slice of pollfd.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A pollfd asking for input (errors are always reported).
pub(crate) fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd { fd, events, revents: 0 }
}

// ---------------------------------------------------------------- recvmsg

pub(super) const SO_TIMESTAMPING: libc::c_int = 37; // SO_TIMESTAMPING_OLD: 64-bit time_t, the struct timespec layout
pub(super) const SO_TIMESTAMPNS: libc::c_int = 35;

/// One message and what its control data said.
#[derive(Default)]
pub(crate) struct Msg {
    pub len: usize,
    pub from: Option<SocketAddr>,
    /// Kernel software timestamp (CLOCK_REALTIME ns).
    pub stamp_ns: Option<i64>,
    /// IPv6 hop limit of a received packet.
    pub hop_limit: Option<u8>,
    /// From the error queue: the extended error and its offender.
    pub ext_err: Option<(libc::sock_extended_err, Option<SocketAddr>)>,
}

/// `recvmsg` with room for timestamps, hop limits and extended errors.
/// `Ok(None)` when nothing is waiting.
pub(crate) fn recv_msg(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<Option<Msg>> {
    // u64 array: cmsg buffers must be aligned for cmsghdr.
    let mut control = [0u64; 64];
    // SAFETY: zeroed sockaddr_storage and msghdr are valid.
    let mut from: libc::sockaddr_storage = unsafe { zeroed() };
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut mh: libc::msghdr = unsafe { zeroed() };
    mh.msg_name = (&mut from as *mut libc::sockaddr_storage).cast();
    mh.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control.as_mut_ptr().cast();
    mh.msg_controllen = size_of::<[u64; 64]>() as _;
    // SAFETY: every pointer in mh refers to a live buffer of the stated size.
    let n = unsafe { libc::recvmsg(fd, &mut mh, flags | libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock { Ok(None) } else { Err(e) };
    }
    let mut m = Msg { len: n as usize, ..Msg::default() };
    // SAFETY: recvmsg wrote msg_namelen bytes of `from`.
    m.from = unsafe { from_sockaddr((&from as *const libc::sockaddr_storage).cast(), mh.msg_namelen as usize) };
    // SAFETY: the CMSG_* macros walk the control buffer recvmsg filled, within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&mh);
        while !c.is_null() {
            let (level, ty) = ((*c).cmsg_level, (*c).cmsg_type);
            let data = libc::CMSG_DATA(c);
            let dlen = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
            if level == libc::SOL_SOCKET && ty == SO_TIMESTAMPING && dlen >= size_of::<libc::timespec>() {
                // scm_timestamping: [software, deprecated, hardware]; only the first is used.
                let ts = std::ptr::read_unaligned(data.cast::<libc::timespec>());
                if ts.tv_sec != 0 || ts.tv_nsec != 0 {
                    m.stamp_ns = Some(ts.tv_sec * 1_000_000_000 + ts.tv_nsec);
                }
            } else if level == libc::SOL_SOCKET && ty == SO_TIMESTAMPNS && dlen >= size_of::<libc::timespec>() {
                let ts = std::ptr::read_unaligned(data.cast::<libc::timespec>());
                m.stamp_ns = Some(ts.tv_sec * 1_000_000_000 + ts.tv_nsec);
            } else if level == libc::IPPROTO_IPV6 && ty == libc::IPV6_HOPLIMIT && dlen >= size_of::<libc::c_int>() {
                let h = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                m.hop_limit = u8::try_from(h).ok();
            } else if ((level == libc::IPPROTO_IP && ty == libc::IP_RECVERR)
                || (level == libc::IPPROTO_IPV6 && ty == libc::IPV6_RECVERR))
                && dlen >= size_of::<libc::sock_extended_err>()
            {
                let ee = std::ptr::read_unaligned(data.cast::<libc::sock_extended_err>());
                let off = size_of::<libc::sock_extended_err>();
                let offender = from_sockaddr(data.add(off), dlen - off);
                m.ext_err = Some((ee, offender));
            }
            c = libc::CMSG_NXTHDR(&mh, c);
        }
    }
    Ok(Some(m))
}

/// Which kernel timestamps a socket delivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamping {
    /// Software TX timestamps on the error queue (SO_TIMESTAMPING).
    pub tx: bool,
    /// Software RX timestamps (SO_TIMESTAMPING, or SO_TIMESTAMPNS).
    pub rx: bool,
}

/// Asks for software RX (and, with `tx`, TX) timestamps; falls back to
/// SO_TIMESTAMPNS, then to none (the caller then reads the clock itself).
pub(super) fn enable_stamps(fd: RawFd, tx: bool) -> Stamping {
    let rx_flags = libc::SOF_TIMESTAMPING_SOFTWARE | libc::SOF_TIMESTAMPING_RX_SOFTWARE;
    if tx {
        // OPT_ID numbers the sends so a stamp is tied to its probe; OPT_TSONLY
        // keeps the kernel from looping the whole packet back with it.
        let flags = rx_flags
            | libc::SOF_TIMESTAMPING_TX_SOFTWARE
            | libc::SOF_TIMESTAMPING_OPT_ID
            | libc::SOF_TIMESTAMPING_OPT_TSONLY;
        if setsockopt(fd, libc::SOL_SOCKET, SO_TIMESTAMPING, &flags).is_ok() {
            return Stamping { tx: true, rx: true };
        }
    }
    if setsockopt(fd, libc::SOL_SOCKET, SO_TIMESTAMPING, &rx_flags).is_ok() {
        return Stamping { tx: false, rx: true };
    }
    let on: libc::c_int = 1;
    Stamping { tx: false, rx: setsockopt(fd, libc::SOL_SOCKET, SO_TIMESTAMPNS, &on).is_ok() }
}

/// Gives the kernel time to switch RX timestamping on. The first socket in
/// the system that asks for it only schedules the switch on a work queue
/// (`net_enable_timestamp`), so a reply arriving right after could come
/// without a stamp; 5 ms is ample and paid once per run.
pub(crate) fn settle_timestamping() {
    std::thread::sleep(Duration::from_millis(5));
}

// ---------------------------------------------------------------- addresses and ports

/// The source address the kernel would use towards `dst`: a connected UDP
/// socket sends nothing but makes the routing decision.
pub(crate) fn source_for(dst: IpAddr) -> io::Result<IpAddr> {
    let any: IpAddr = if dst.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
    let s = std::net::UdpSocket::bind((any, 0))?;
    s.connect((dst, 9))?;
    Ok(s.local_addr()?.ip())
}

/// A TCP socket bound (not listening, not connected) to an ephemeral port on
/// `src`: while it lives no other program gets that port, and the kernel
/// still answers a SYN-ACK to it with a RST, which closes the server's
/// half-open connection.
pub(crate) struct PortHold {
    _fd: OwnedFd,
    pub port: u16,
}

/// Reserves an ephemeral TCP port on `src`.
pub(crate) fn hold_port(src: IpAddr) -> io::Result<PortHold> {
    let domain = if src.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    let fd = socket(domain, libc::SOCK_STREAM, 0)?;
    bind(fd.as_raw_fd(), SocketAddr::new(src, 0))?;
    let port = local_addr(fd.as_raw_fd())?.port();
    Ok(PortHold { _fd: fd, port })
}
