//! The raw sockets a probe sends its SYNs on and reads the replies and ICMP
//! errors from.

use super::packet::{IcmpError, TcpHdr, build_syn, parse_icmp_v4, parse_icmp_v6, parse_ipv4, parse_tcp};
use super::sys::{Stamping, bind, enable_stamps, realtime_ns, recv_msg, setsockopt, socket, to_sockaddr};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

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
