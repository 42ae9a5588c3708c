//! Packets and sockets shared by `probe` and `trace`: the TCP checksum, the
//! hand-built SYN, parsers for replies and ICMP errors (pure functions over
//! bytes), and thin wrappers over raw sockets, kernel timestamps and
//! non-blocking connects.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// TCP flag bits.
pub(crate) const FIN: u8 = 0x01;
pub(crate) const SYN: u8 = 0x02;
pub(crate) const RST: u8 = 0x04;
pub(crate) const PSH: u8 = 0x08;
pub(crate) const ACK: u8 = 0x10;
pub(crate) const URG: u8 = 0x20;

/// Length of the SYN we send: a 20-byte header and one MSS option.
pub(crate) const SYN_LEN: usize = 24;

/// MSS we announce; irrelevant to the measurement (the connection is never
/// completed) but a SYN without one looks odd to middleboxes.
const SYN_MSS: u16 = 1460;

/// Receive window we announce (what hping3 and most stacks send in a SYN).
const SYN_WINDOW: u16 = 64240;

// ---------------------------------------------------------------- checksums

/// Adds `data` as big-endian 16-bit words to a running one's-complement sum.
pub(crate) fn sum_words(data: &[u8], mut sum: u64) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        sum += u64::from(*b) << 8;
    }
    sum
}

/// Folds a running sum into the final Internet checksum (RFC 1071).
pub(crate) fn fold(mut sum: u64) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// TCP checksum of `segment` (header with its checksum field as given, plus
/// payload) between `src` and `dst`, over the IPv4 or IPv6 pseudo-header.
/// A segment whose checksum field is already right sums to 0.
pub(crate) fn tcp_checksum(src: IpAddr, dst: IpAddr, segment: &[u8]) -> u16 {
    let len = segment.len() as u64;
    let mut sum = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            sum_words(&d.octets(), sum_words(&s.octets(), 0)) + u64::from(libc::IPPROTO_TCP as u8) + len
        }
        _ => {
            let s = to_v6(src);
            let d = to_v6(dst);
            sum_words(&d.octets(), sum_words(&s.octets(), 0)) + u64::from(libc::IPPROTO_TCP as u8) + len
        }
    };
    sum = sum_words(segment, sum);
    fold(sum)
}

fn to_v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

// ---------------------------------------------------------------- the SYN

/// A TCP SYN from `sport` to `dport` with sequence number `seq` and an MSS
/// option. The checksum is filled for IPv4; for IPv6 it is left 0 because the
/// kernel fills it (`IPV6_CHECKSUM`).
pub(crate) fn build_syn(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, seq: u32) -> [u8; SYN_LEN] {
    let mut b = [0u8; SYN_LEN];
    b[0..2].copy_from_slice(&sport.to_be_bytes());
    b[2..4].copy_from_slice(&dport.to_be_bytes());
    b[4..8].copy_from_slice(&seq.to_be_bytes());
    // ack 0 (8..12)
    b[12] = ((SYN_LEN / 4) as u8) << 4;
    b[13] = SYN;
    b[14..16].copy_from_slice(&SYN_WINDOW.to_be_bytes());
    // checksum (16..18) and urgent pointer (18..20) 0
    b[20] = 2; // MSS option: kind 2, length 4
    b[21] = 4;
    b[22..24].copy_from_slice(&SYN_MSS.to_be_bytes());
    if src.is_ipv4() && dst.is_ipv4() {
        let c = tcp_checksum(src, dst, &b);
        b[16..18].copy_from_slice(&c.to_be_bytes());
    }
    b
}

// ---------------------------------------------------------------- parsers

/// The fields of a TCP header that a reply is judged by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TcpHdr {
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
}

/// Parses a TCP header; `None` when cut short or its data offset is impossible.
pub(crate) fn parse_tcp(b: &[u8]) -> Option<TcpHdr> {
    if b.len() < 20 {
        return None;
    }
    let off = usize::from(b[12] >> 4) * 4;
    if off < 20 || off > b.len() {
        return None;
    }
    Some(TcpHdr {
        sport: u16::from_be_bytes([b[0], b[1]]),
        dport: u16::from_be_bytes([b[2], b[3]]),
        seq: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        ack: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
        flags: b[13],
        window: u16::from_be_bytes([b[14], b[15]]),
    })
}

/// Flags as hping3 writes them: `SA` for SYN-ACK, `RA` for RST-ACK.
pub(crate) fn flag_letters(flags: u8) -> String {
    [(RST, 'R'), (SYN, 'S'), (ACK, 'A'), (FIN, 'F'), (PSH, 'P'), (URG, 'U')]
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, c)| *c)
        .collect()
}

/// An IPv4 header and what follows it.
#[derive(Debug)]
pub(crate) struct Ipv4<'a> {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub ttl: u8,
    pub proto: u8,
    /// Total length from the header (may exceed the bytes at hand in an ICMP quote).
    pub total_len: u16,
    /// The payload at hand: up to the total length, or what there is.
    pub payload: &'a [u8],
}

/// Parses an IPv4 header (as a raw socket delivers it, or as an ICMP error quotes it).
pub(crate) fn parse_ipv4(b: &[u8]) -> Option<Ipv4<'_>> {
    if b.len() < 20 || b[0] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(b[0] & 0x0f) * 4;
    if ihl < 20 || ihl > b.len() {
        return None;
    }
    let total_len = u16::from_be_bytes([b[2], b[3]]);
    let end = usize::from(total_len).clamp(ihl, b.len());
    Some(Ipv4 {
        src: Ipv4Addr::new(b[12], b[13], b[14], b[15]),
        dst: Ipv4Addr::new(b[16], b[17], b[18], b[19]),
        ttl: b[8],
        proto: b[9],
        total_len,
        payload: &b[ihl..end],
    })
}

/// What an ICMP error says happened to one of our SYNs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IcmpKind {
    /// TTL / hop limit ran out at a router.
    TimeExceeded,
    /// Destination unreachable, with its code (ICMPv4 type 3 or ICMPv6 type 1).
    Unreachable { v6: bool, code: u8 },
}

impl IcmpKind {
    /// traceroute's mark: `!N`, `!H`, `!P`, `!X`, `!F`, or `!<code>`.
    pub(crate) fn mark(self) -> String {
        match self {
            IcmpKind::TimeExceeded => String::new(),
            IcmpKind::Unreachable { v6: false, code } => match code {
                0 | 6 | 11 => "!N".into(),
                1 | 7 | 12 => "!H".into(),
                2 => "!P".into(),
                3 => "!p".into(),
                4 => "!F".into(),
                9 | 10 | 13 => "!X".into(),
                c => format!("!<{c}>"),
            },
            IcmpKind::Unreachable { v6: true, code } => match code {
                0 => "!N".into(),
                1 | 5 | 6 => "!X".into(),
                3 => "!H".into(),
                4 => "!p".into(),
                c => format!("!<{c}>"),
            },
        }
    }

    /// In words, for JSON and notes.
    pub(crate) fn describe(self) -> String {
        match self {
            IcmpKind::TimeExceeded => "time exceeded".into(),
            IcmpKind::Unreachable { v6, code } => {
                let what = match (v6, code) {
                    (false, 0) | (true, 0) => "network unreachable",
                    (false, 1) | (true, 3) => "host unreachable",
                    (false, 2) => "protocol unreachable",
                    (false, 3) | (true, 4) => "port unreachable",
                    (false, 4) => "fragmentation needed",
                    (false, 9 | 10 | 13) | (true, 1 | 5 | 6) => "administratively prohibited",
                    _ => "unreachable",
                };
                format!("{what} (ICMP{} code {code})", if v6 { "v6" } else { "" })
            }
        }
    }
}

/// An ICMP error about a TCP segment, with the quoted segment's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IcmpError {
    /// Who sent the error (the router, or the destination's host).
    pub from: IpAddr,
    pub kind: IcmpKind,
    /// Destination of the quoted (our) packet.
    pub quoted_dst: IpAddr,
    /// Ports and sequence number of the quoted TCP header (RFC 792 quotes at least 8 bytes).
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
}

fn quoted_tcp(b: &[u8]) -> Option<(u16, u16, u32)> {
    if b.len() < 8 {
        return None;
    }
    Some((
        u16::from_be_bytes([b[0], b[1]]),
        u16::from_be_bytes([b[2], b[3]]),
        u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
    ))
}

/// Parses an IPv4 packet from a raw ICMP socket (IP header included): a time
/// exceeded or destination unreachable quoting a TCP segment. Anything else
/// (echo replies, errors about UDP…) is `None`.
pub(crate) fn parse_icmp_v4(packet: &[u8]) -> Option<IcmpError> {
    let outer = parse_ipv4(packet)?;
    if outer.proto != libc::IPPROTO_ICMP as u8 {
        return None;
    }
    let icmp = outer.payload;
    if icmp.len() < 8 {
        return None;
    }
    let kind = match icmp[0] {
        11 => IcmpKind::TimeExceeded,
        3 => IcmpKind::Unreachable { v6: false, code: icmp[1] },
        _ => return None,
    };
    let inner = parse_ipv4(&icmp[8..])?;
    if inner.proto != libc::IPPROTO_TCP as u8 {
        return None;
    }
    let (sport, dport, seq) = quoted_tcp(inner.payload)?;
    Some(IcmpError { from: IpAddr::V4(outer.src), kind, quoted_dst: IpAddr::V4(inner.dst), sport, dport, seq })
}

/// Parses an ICMPv6 message (a raw ICMPv6 socket delivers no IPv6 header;
/// `from` is the sender's address): time exceeded (type 3) or destination
/// unreachable (type 1) quoting a TCP segment with no extension headers.
pub(crate) fn parse_icmp_v6(msg: &[u8], from: Ipv6Addr) -> Option<IcmpError> {
    if msg.len() < 8 + 40 + 8 {
        return None;
    }
    let kind = match msg[0] {
        3 => IcmpKind::TimeExceeded,
        1 => IcmpKind::Unreachable { v6: true, code: msg[1] },
        _ => return None,
    };
    let ip6 = &msg[8..48];
    // Our SYNs carry no extension headers, so the quoted next header is TCP.
    if ip6[0] >> 4 != 6 || ip6[6] != libc::IPPROTO_TCP as u8 {
        return None;
    }
    let mut d = [0u8; 16];
    d.copy_from_slice(&ip6[24..40]);
    let (sport, dport, seq) = quoted_tcp(&msg[48..])?;
    Some(IcmpError { from: IpAddr::V6(from), kind, quoted_dst: IpAddr::V6(Ipv6Addr::from(d)), sport, dport, seq })
}

// ---------------------------------------------------------------- syscalls

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

fn socket(domain: libc::c_int, ty: libc::c_int, proto: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; on success the fd is new and owned by nobody else.
    let fd = cvt(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, proto) })?;
    // SAFETY: fd was just returned by socket() and is valid.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: val points to a live T of the size passed.
    cvt(unsafe { libc::setsockopt(fd, level, name, (val as *const T).cast(), size_of::<T>() as libc::socklen_t) })
        .map(|_| ())
}

fn getsockopt<T: Copy>(fd: RawFd, level: libc::c_int, name: libc::c_int, val: &mut T) -> io::Result<usize> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: val points to a live, writable T of `len` bytes.
    cvt(unsafe { libc::getsockopt(fd, level, name, (val as *mut T).cast(), &mut len) })?;
    Ok(len as usize)
}

fn to_sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
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
                sin6_flowinfo: 0,
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
unsafe fn from_sockaddr(p: *const u8, len: usize) -> Option<SocketAddr> {
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

fn bind(fd: RawFd, a: SocketAddr) -> io::Result<()> {
    let (ss, len) = to_sockaddr(a);
    // SAFETY: ss holds a valid sockaddr of `len` bytes.
    cvt(unsafe { libc::bind(fd, (&ss as *const libc::sockaddr_storage).cast(), len) }).map(|_| ())
}

fn local_addr(fd: RawFd) -> io::Result<SocketAddr> {
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

const SO_TIMESTAMPING: libc::c_int = 37; // SO_TIMESTAMPING_OLD: 64-bit time_t, the struct timespec layout
const SO_TIMESTAMPNS: libc::c_int = 35;

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
fn enable_stamps(fd: RawFd, tx: bool) -> Stamping {
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

// ---------------------------------------------------------------- raw TCP

/// A TCP reply read from the raw TCP socket.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TcpReply {
    pub from: IpAddr,
    pub ttl: Option<u8>,
    /// IP packet length (IPv6: 40-byte header + segment).
    pub len: usize,
    pub tcp: TcpHdr,
    /// Receive time, CLOCK_REALTIME ns (kernel when `kernel_stamp`).
    pub rx_ns: i64,
    pub kernel_stamp: bool,
}

/// A raw TCP socket: sends hand-built SYNs, sees every TCP segment arriving
/// for its address, and stamps both in the kernel where it can.
pub(crate) struct SynSocket {
    fd: OwnedFd,
    src: IpAddr,
    pub stamping: Stamping,
    /// Sends so far: the kernel numbers TX stamps the same way (OPT_ID).
    sends: u32,
    buf: Vec<u8>,
}

/// A SYN that left.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sent {
    /// Key of its TX timestamp.
    pub key: u32,
    /// CLOCK_REALTIME just before `sendto`, the fallback send time.
    pub user_ns: i64,
}

impl SynSocket {
    /// Opens the raw socket on `src`. Fails with `PermissionDenied` without CAP_NET_RAW.
    pub(crate) fn open(src: IpAddr) -> io::Result<Self> {
        let v6 = src.is_ipv6();
        let fd = socket(if v6 { libc::AF_INET6 } else { libc::AF_INET }, libc::SOCK_RAW, libc::IPPROTO_TCP)?;
        let raw = fd.as_raw_fd();
        if v6 {
            // Offset of the checksum in the TCP header: the kernel fills it (pseudo-header needs the
            // source it picks) and verifies it on the segments we read.
            let off: libc::c_int = 16;
            setsockopt(raw, libc::IPPROTO_IPV6, libc::IPV6_CHECKSUM, &off)?;
            let on: libc::c_int = 1;
            setsockopt(raw, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, &on)?;
        }
        // Only segments to our address; the kernel also uses it as the source.
        bind(raw, SocketAddr::new(src, 0))?;
        // Room for bursts of unrelated TCP traffic on a busy host.
        let rcvbuf: libc::c_int = 1 << 20;
        let _ = setsockopt(raw, libc::SOL_SOCKET, libc::SO_RCVBUF, &rcvbuf);
        let stamping = enable_stamps(raw, true);
        Ok(SynSocket { fd, src, stamping, sends: 0, buf: vec![0; 65536] })
    }

    /// The socket, for poll.
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Sends a SYN to `dst:dport` from our address's `sport` with `seq`,
    /// with `ttl` as TTL / hop limit when given.
    pub(crate) fn send(&mut self, dst: IpAddr, sport: u16, dport: u16, seq: u32, ttl: Option<u8>) -> io::Result<Sent> {
        let raw = self.fd.as_raw_fd();
        if let Some(t) = ttl {
            let t = libc::c_int::from(t);
            if dst.is_ipv4() {
                setsockopt(raw, libc::IPPROTO_IP, libc::IP_TTL, &t)?;
            } else {
                setsockopt(raw, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, &t)?;
            }
        }
        let syn = build_syn(self.src, dst, sport, dport, seq);
        // Raw IPv6 sockets want port 0 (or the protocol) in the address; IPv4 ignores it.
        let (ss, len) = to_sockaddr(SocketAddr::new(dst, 0));
        let user_ns = realtime_ns();
        // SAFETY: syn and ss are live buffers of the sizes passed.
        let n = unsafe {
            libc::sendto(raw, syn.as_ptr().cast(), syn.len(), 0, (&ss as *const libc::sockaddr_storage).cast(), len)
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let key = self.sends;
        self.sends = self.sends.wrapping_add(1);
        Ok(Sent { key, user_ns })
    }

    /// Reads every TX timestamp waiting on the error queue: (key, ns).
    pub(crate) fn drain_tx(&mut self, mut f: impl FnMut(u32, i64)) {
        let raw = self.fd.as_raw_fd();
        for _ in 0..1024 {
            match recv_msg(raw, &mut self.buf, libc::MSG_ERRQUEUE) {
                Ok(Some(m)) => {
                    if let (Some(ns), Some((ee, _))) = (m.stamp_ns, m.ext_err)
                        && ee.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING
                    {
                        f(ee.ee_data, ns);
                    }
                }
                _ => return,
            }
        }
    }

    /// Reads every TCP segment waiting (at most a bounded number per call).
    pub(crate) fn drain(&mut self, mut f: impl FnMut(TcpReply)) -> io::Result<()> {
        let raw = self.fd.as_raw_fd();
        for _ in 0..4096 {
            let Some(m) = recv_msg(raw, &mut self.buf, 0)? else { return Ok(()) };
            let (rx_ns, kernel_stamp) = match m.stamp_ns {
                Some(ns) => (ns, true),
                None => (realtime_ns(), false),
            };
            let b = &self.buf[..m.len.min(self.buf.len())];
            let reply = if self.src.is_ipv4() {
                // IPv4 raw sockets deliver the IP header too.
                parse_ipv4(b).and_then(|ip| {
                    let tcp = parse_tcp(ip.payload)?;
                    Some(TcpReply {
                        from: IpAddr::V4(ip.src),
                        ttl: Some(ip.ttl),
                        len: usize::from(ip.total_len),
                        tcp,
                        rx_ns,
                        kernel_stamp,
                    })
                })
            } else {
                let from = m.from.map(|a| a.ip());
                parse_tcp(b).zip(from).map(|(tcp, from)| TcpReply {
                    from,
                    ttl: m.hop_limit,
                    len: 40 + b.len(),
                    tcp,
                    rx_ns,
                    kernel_stamp,
                })
            };
            if let Some(r) = reply {
                f(r);
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- raw ICMP

/// A raw ICMP (or ICMPv6) socket reading errors about our SYNs.
pub(crate) struct IcmpSocket {
    fd: OwnedFd,
    v6: bool,
    buf: Vec<u8>,
}

impl IcmpSocket {
    /// Opens it for the family of `v6`. Needs CAP_NET_RAW.
    pub(crate) fn open(v6: bool) -> io::Result<Self> {
        let fd = if v6 {
            socket(libc::AF_INET6, libc::SOCK_RAW, libc::IPPROTO_ICMPV6)?
        } else {
            socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP)?
        };
        enable_stamps(fd.as_raw_fd(), false);
        Ok(IcmpSocket { fd, v6, buf: vec![0; 4096] })
    }

    /// The socket, for poll.
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Reads every ICMP message waiting; calls `f` with the errors about TCP
    /// segments and their receive time (CLOCK_REALTIME ns).
    pub(crate) fn drain(&mut self, mut f: impl FnMut(IcmpError, i64)) -> io::Result<()> {
        let raw = self.fd.as_raw_fd();
        for _ in 0..4096 {
            let Some(m) = recv_msg(raw, &mut self.buf, 0)? else { return Ok(()) };
            let rx = m.stamp_ns.unwrap_or_else(realtime_ns);
            let b = &self.buf[..m.len.min(self.buf.len())];
            let e = if self.v6 {
                match m.from {
                    Some(SocketAddr::V6(a)) => parse_icmp_v6(b, *a.ip()),
                    _ => None,
                }
            } else {
                parse_icmp_v4(b)
            };
            if let Some(e) = e {
                f(e, rx);
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- unprivileged connect

/// `tcpi_state` of an established connection (include/net/tcp_states.h).
const TCP_ESTABLISHED: u8 = 1;

/// How a non-blocking connect ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ConnectEnd {
    /// Connected. `tcpi_rtt` (µs) and our port.
    Open { tcpi_rtt_us: u32, sport: u16 },
    /// Refused (a RST).
    Refused,
    /// An ICMP error (read from the error queue with IP_RECVERR).
    Icmp { from: Option<IpAddr>, kind: IcmpKind },
    /// Any other error (errno).
    Failed(i32),
}

/// A non-blocking TCP connect in flight. Dropping it closes the socket with
/// SO_LINGER 0: a RST, so no TIME_WAIT is left behind.
pub(crate) struct Connecting {
    fd: OwnedFd,
    /// When `connect` was called (CLOCK_MONOTONIC).
    pub started: Instant,
    v6: bool,
}

impl Connecting {
    /// Starts connecting to `dst`, asking for ICMP errors on the error queue
    /// (they name the router that sent them); with `ttl`, sets the TTL / hop
    /// limit (what `trace` needs).
    pub(crate) fn start(dst: SocketAddr, ttl: Option<u8>) -> io::Result<Self> {
        let v6 = dst.is_ipv6();
        let fd = socket(if v6 { libc::AF_INET6 } else { libc::AF_INET }, libc::SOCK_STREAM, 0)?;
        let raw = fd.as_raw_fd();
        let linger = libc::linger { l_onoff: 1, l_linger: 0 };
        setsockopt(raw, libc::SOL_SOCKET, libc::SO_LINGER, &linger)?;
        let on: libc::c_int = 1;
        if v6 {
            setsockopt(raw, libc::IPPROTO_IPV6, libc::IPV6_RECVERR, &on)?;
        } else {
            setsockopt(raw, libc::IPPROTO_IP, libc::IP_RECVERR, &on)?;
        }
        if let Some(t) = ttl {
            let t = libc::c_int::from(t);
            if v6 {
                setsockopt(raw, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, &t)?;
            } else {
                setsockopt(raw, libc::IPPROTO_IP, libc::IP_TTL, &t)?;
            }
        }
        let (ss, len) = to_sockaddr(dst);
        let started = Instant::now();
        // SAFETY: ss holds a valid sockaddr of `len` bytes.
        let r = unsafe { libc::connect(raw, (&ss as *const libc::sockaddr_storage).cast(), len) };
        if r < 0 {
            let e = io::Error::last_os_error();
            // Refusals and unreachables on connect itself are results, read later via SO_ERROR.
            if e.raw_os_error() != Some(libc::EINPROGRESS) && e.raw_os_error() != Some(libc::ECONNREFUSED) {
                return Err(e);
            }
        }
        Ok(Connecting { fd, started, v6 })
    }

    /// The socket, for poll (POLLOUT).
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// After poll reported it ready: how the connect ended. `None` if it is
    /// still in progress (a soft error, e.g. an ICMP the kernel retries past).
    pub(crate) fn end(&self) -> Option<ConnectEnd> {
        let raw = self.fd.as_raw_fd();
        // The error queue first: it says who sent the ICMP error.
        let mut buf = [0u8; 512];
        if let Ok(Some(m)) = recv_msg(raw, &mut buf, libc::MSG_ERRQUEUE)
            && let Some((ee, offender)) = m.ext_err
            && (ee.ee_origin == libc::SO_EE_ORIGIN_ICMP || ee.ee_origin == libc::SO_EE_ORIGIN_ICMP6)
        {
            let kind = match (self.v6, ee.ee_type) {
                (false, 11) | (true, 3) => IcmpKind::TimeExceeded,
                (v6, _) => IcmpKind::Unreachable { v6, code: ee.ee_code },
            };
            return Some(ConnectEnd::Icmp { from: offender.map(|a| a.ip()), kind });
        }
        let mut err: libc::c_int = 0;
        if let Err(e) = getsockopt(raw, libc::SOL_SOCKET, libc::SO_ERROR, &mut err) {
            return Some(ConnectEnd::Failed(e.raw_os_error().unwrap_or(0)));
        }
        match err {
            0 => {
                // Writable without error: connected (or still connecting if polled early).
                // SAFETY: tcp_info is plain old data; all-zero is valid.
                let mut ti: libc::tcp_info = unsafe { zeroed() };
                if getsockopt(raw, libc::IPPROTO_TCP, libc::TCP_INFO, &mut ti).is_err()
                    || ti.tcpi_state != TCP_ESTABLISHED
                {
                    return None;
                }
                let sport = local_addr(raw).map_or(0, |a| a.port());
                Some(ConnectEnd::Open { tcpi_rtt_us: ti.tcpi_rtt, sport })
            }
            libc::ECONNREFUSED => Some(ConnectEnd::Refused),
            e => Some(ConnectEnd::Failed(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A RST that Linux sent from 10.99.0.2:8080 to 10.99.0.1:47448 over a
    /// veth pair (the whole IPv4 packet, captured with tcpdump); tshark
    /// `-o tcp.check_checksum:TRUE`: "Checksum: 0x0aaa [correct]".
    const LINUX_RST: [u8; 40] = [
        0x45, 0x00, 0x00, 0x28, 0x00, 0x00, 0x40, 0x00, 0x40, 0x06, 0x26, 0x08, 0x0a, 0x63, 0x00, 0x02, 0x0a, 0x63,
        0x00, 0x01, 0x1f, 0x90, 0xb9, 0x58, 0x00, 0x00, 0x00, 0x00, 0x4f, 0xce, 0x67, 0xa7, 0x50, 0x14, 0x00, 0x00,
        0x0a, 0xaa, 0x00, 0x00,
    ];

    #[test]
    fn checksum_of_a_kernel_validated_segment() {
        let ip = parse_ipv4(&LINUX_RST).unwrap();
        assert_eq!(
            (ip.src, ip.dst, ip.ttl, ip.proto, ip.total_len),
            ("10.99.0.2".parse().unwrap(), "10.99.0.1".parse().unwrap(), 64, 6, 40)
        );
        let (src, dst) = (IpAddr::V4(ip.src), IpAddr::V4(ip.dst));
        // A correct segment sums to zero with its checksum in place…
        assert_eq!(tcp_checksum(src, dst, ip.payload), 0);
        // …and recomputing with the field zeroed gives the captured value.
        let mut seg = ip.payload.to_vec();
        seg[16] = 0;
        seg[17] = 0;
        assert_eq!(tcp_checksum(src, dst, &seg), 0x0aaa);
        let h = parse_tcp(ip.payload).unwrap();
        assert_eq!((h.sport, h.dport, h.seq, h.ack, h.flags, h.window), (8080, 47448, 0, 0x4fce_67a7, RST | ACK, 0));
        // One bit off and it no longer sums to zero.
        seg[16] = 0x0a;
        seg[17] = 0xab;
        assert_ne!(tcp_checksum(src, dst, &seg), 0);
    }

    #[test]
    fn checksum_rfc1071_example_and_odd_length() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to 0xddf2 (checksum = !0xddf2).
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum_words(&d, 0)), !0xddf2);
        // An odd trailing byte is the high half of a last word.
        assert_eq!(sum_words(&[0x12], 0), 0x1200);
    }

    #[test]
    fn syn_layout() {
        let src: IpAddr = "10.0.0.1".parse().unwrap();
        let dst: IpAddr = "10.0.0.2".parse().unwrap();
        let s = build_syn(src, dst, 40000, 80, 0xdead_beef);
        assert_eq!(&s[0..2], &40000u16.to_be_bytes());
        assert_eq!(&s[2..4], &80u16.to_be_bytes());
        assert_eq!(&s[4..8], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&s[8..12], &[0, 0, 0, 0]);
        assert_eq!(s[12], 0x60, "data offset 6 words");
        assert_eq!(s[13], SYN);
        assert_eq!(&s[20..24], &[2, 4, 0x05, 0xb4], "MSS 1460");
        assert_eq!(tcp_checksum(src, dst, &s), 0, "checksum valid over the pseudo-header");
        let h = parse_tcp(&s).unwrap();
        assert_eq!((h.sport, h.dport, h.seq, h.ack, h.flags), (40000, 80, 0xdead_beef, 0, SYN));
        // IPv6: the kernel fills the checksum.
        let s6 = build_syn("::1".parse().unwrap(), "::1".parse().unwrap(), 1, 2, 3);
        assert_eq!(&s6[16..18], &[0, 0]);
    }

    #[test]
    fn tcp_parse_rejects_short_and_bad_offsets() {
        let seg = &LINUX_RST[20..];
        assert!(parse_tcp(&seg[..19]).is_none());
        let mut s = [0u8; 20];
        s.copy_from_slice(seg);
        s[12] = 0x40; // 16 bytes: less than a header
        assert!(parse_tcp(&s).is_none());
        s[12] = 0x60; // 24 bytes: more than there is
        assert!(parse_tcp(&s).is_none());
        assert_eq!(flag_letters(SYN | ACK), "SA");
        assert_eq!(flag_letters(RST | ACK), "RA");
    }

    /// ICMP time exceeded from 10.77.1.1 about our SYN 10.77.1.2:40000 →
    /// 10.77.3.2:80 seq 0x01020304, quoting the IP header and 8 TCP bytes.
    fn time_exceeded_v4(icmp_type: u8, code: u8) -> Vec<u8> {
        let mut quoted_ip = vec![
            0x45, 0, 0, 44, 0, 0, 0x40, 0, 1, 6, 0, 0, 10, 77, 1, 2, 10, 77, 3, 2, // TTL 1, proto TCP
        ];
        quoted_ip.extend_from_slice(&[0x9c, 0x40, 0x00, 0x50, 1, 2, 3, 4]);
        let mut icmp = vec![icmp_type, code, 0, 0, 0, 0, 0, 0];
        icmp.extend_from_slice(&quoted_ip);
        let total = 20 + icmp.len();
        let mut outer = vec![0x45, 0xc0, 0, total as u8, 0, 0, 0, 0, 64, 1, 0, 0, 10, 77, 1, 1, 10, 77, 1, 2];
        outer.extend_from_slice(&icmp);
        outer
    }

    #[test]
    fn icmp_v4_quote() {
        let e = parse_icmp_v4(&time_exceeded_v4(11, 0)).unwrap();
        assert_eq!(e.from, "10.77.1.1".parse::<IpAddr>().unwrap());
        assert_eq!(e.kind, IcmpKind::TimeExceeded);
        assert_eq!(e.quoted_dst, "10.77.3.2".parse::<IpAddr>().unwrap());
        assert_eq!((e.sport, e.dport, e.seq), (40000, 80, 0x0102_0304));
        let u = parse_icmp_v4(&time_exceeded_v4(3, 13)).unwrap();
        assert_eq!(u.kind, IcmpKind::Unreachable { v6: false, code: 13 });
        assert_eq!(u.kind.mark(), "!X");
        // Echo reply, or a quote cut before the TCP ports: not ours.
        assert!(parse_icmp_v4(&time_exceeded_v4(0, 0)).is_none());
        let p = time_exceeded_v4(11, 0);
        assert!(parse_icmp_v4(&p[..p.len() - 1]).is_none());
        // Every truncation is handled without panicking.
        for n in 0..p.len() {
            let _ = parse_icmp_v4(&p[..n]);
        }
        // A quote of a UDP packet is not ours.
        let mut udp = time_exceeded_v4(11, 0);
        udp[20 + 8 + 9] = 17;
        assert!(parse_icmp_v4(&udp).is_none());
    }

    #[test]
    fn icmp_v6_quote() {
        let mut m = vec![3, 0, 0, 0, 0, 0, 0, 0];
        let mut ip6 = vec![0x60, 0, 0, 0, 0, 24, 6, 1];
        ip6.extend_from_slice(&"fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        ip6.extend_from_slice(&"fd00:3::2".parse::<Ipv6Addr>().unwrap().octets());
        m.extend_from_slice(&ip6);
        m.extend_from_slice(&[0x9c, 0x40, 0x01, 0xbb, 0xaa, 0xbb, 0xcc, 0xdd]);
        let from: Ipv6Addr = "fd00:1::1".parse().unwrap();
        let e = parse_icmp_v6(&m, from).unwrap();
        assert_eq!(e.kind, IcmpKind::TimeExceeded);
        assert_eq!(e.quoted_dst, "fd00:3::2".parse::<IpAddr>().unwrap());
        assert_eq!((e.sport, e.dport, e.seq), (40000, 443, 0xaabb_ccdd));
        m[0] = 1;
        m[1] = 1;
        assert_eq!(parse_icmp_v6(&m, from).unwrap().kind.mark(), "!X");
        m[0] = 129; // echo reply
        assert!(parse_icmp_v6(&m, from).is_none());
        for n in 0..m.len() {
            let _ = parse_icmp_v6(&m[..n], from);
        }
    }
}
