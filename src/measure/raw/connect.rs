//! The unprivileged way: a non-blocking connect and what tcp_info says of it.

use super::packet::IcmpKind;
use super::sys::{getsockopt, local_addr, recv_msg, setsockopt, socket, to_sockaddr};
use std::io;
use std::mem::zeroed;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Instant;

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
