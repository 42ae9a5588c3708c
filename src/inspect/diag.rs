//! `tcp_info` of sockets by inode, from a NETLINK_SOCK_DIAG dump (what `ss -ti`
//! reads). Needs no permission over the process, only the same network namespace.

use crate::record::inspect::TcpInfo;
use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const INET_DIAG_INFO: u16 = 2;
/// `struct inet_diag_msg`: family, state, timer, retrans, 48-byte sockid, 5 × u32.
const DIAG_MSG_LEN: usize = 72;
const INODE_AT: usize = 68;

/// The `tcp_info` of every socket in `inodes` that the kernel still has.
pub(crate) fn tcp_infos(inodes: &HashSet<u64>) -> io::Result<HashMap<u64, TcpInfo>> {
    // SAFETY: plain socket(2) call; the result is checked before use.
    let raw = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, libc::NETLINK_SOCK_DIAG) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: raw is a new descriptor owned by nothing else.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // A dump that never ends must not hang the inspection.
    let tv = libc::timeval { tv_sec: 2, tv_usec: 0 };
    // SAFETY: tv is a live timeval and its size is passed.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const tv).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    let mut out = HashMap::new();
    for (seq, family) in [(1u32, libc::AF_INET), (2, libc::AF_INET6)] {
        send(&sock, &request(family as u8, seq))?;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: buf is valid for writes of buf.len() bytes.
            let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if parse_dump(&buf[..n as usize], inodes, &mut out)? {
                break;
            }
        }
    }
    Ok(out)
}

fn send(sock: &OwnedFd, msg: &[u8]) -> io::Result<()> {
    // SAFETY: msg is valid for reads of msg.len() bytes; netlink needs no address to reach the kernel.
    let n = unsafe { libc::send(sock.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// nlmsghdr + inet_diag_req_v2: dump every TCP socket of `family`, with INET_DIAG_INFO.
fn request(family: u8, seq: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(16 + 56);
    m.extend_from_slice(&(16u32 + 56).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.push(family);
    m.push(libc::IPPROTO_TCP as u8);
    m.push(1 << (INET_DIAG_INFO - 1));
    m.push(0);
    m.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    m.resize(16 + 56, 0); // sockid: all zero, no filter
    m
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Folds one datagram of a dump into `out`; true when the dump is done.
fn parse_dump(mut b: &[u8], inodes: &HashSet<u64>, out: &mut HashMap<u64, TcpInfo>) -> io::Result<bool> {
    while b.len() >= 16 {
        let len = u32_at(b, 0).unwrap_or(0) as usize;
        let kind = u16::from_ne_bytes([b[4], b[5]]);
        if len < 16 || len > b.len() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "truncated sock_diag message"));
        }
        let body = &b[16..len];
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = u32_at(body, 0).map_or(0, |e| -(e as i32));
                if errno != 0 {
                    return Err(io::Error::from_raw_os_error(errno));
                }
            }
            SOCK_DIAG_BY_FAMILY if body.len() >= DIAG_MSG_LEN => {
                let inode = u64::from(u32_at(body, INODE_AT).unwrap_or(0));
                if inodes.contains(&inode)
                    && let Some(info) = attr(&body[DIAG_MSG_LEN..], INET_DIAG_INFO).and_then(tcp_info)
                {
                    out.insert(inode, info);
                }
            }
            _ => {}
        }
        b = &b[len.next_multiple_of(4).min(b.len())..];
    }
    Ok(false)
}

/// The payload of the first rtattr of type `want`.
fn attr(mut b: &[u8], want: u16) -> Option<&[u8]> {
    while b.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([b[0], b[1]]));
        let kind = u16::from_ne_bytes([b[2], b[3]]);
        if len < 4 || len > b.len() {
            return None;
        }
        if kind == want {
            return Some(&b[4..len]);
        }
        b = &b[len.next_multiple_of(4).min(b.len())..];
    }
    None
}

/// The fields of `struct tcp_info` (include/uapi/linux/tcp.h) we show; None
/// when it is shorter than `tcpi_total_retrans` (kernels before 2.6.x).
fn tcp_info(b: &[u8]) -> Option<TcpInfo> {
    let u = |at| u32_at(b, at);
    let ms = |us: u32| f64::from(us) / 1e3;
    Some(TcpInfo {
        retransmits: u32::from(*b.get(2)?),
        rto_ms: ms(u(8)?),
        ato_ms: ms(u(12)?),
        mss: u(16)?,
        rcv_mss: u(20)?,
        unacked: u(24)?,
        last_data_sent_ms: u(44)?,
        last_data_recv_ms: u(52)?,
        rtt_ms: ms(u(68)?),
        rttvar_ms: ms(u(72)?),
        total_retrans: u(100)?,
        notsent: u(144),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;

    fn inode(fd: i32) -> u64 {
        std::fs::metadata(format!("/proc/self/fd/{fd}")).unwrap().ino()
    }

    #[test]
    fn reads_tcp_info_of_live_sockets() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(b"ping").unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).unwrap();
        let want = HashSet::from([inode(s.as_raw_fd()), inode(l.as_raw_fd())]);
        let got = tcp_infos(&want).unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        let i = &got[&inode(s.as_raw_fd())];
        // Loopback: MSS 65483 (or so), a positive RTT well under a second, nothing in flight.
        assert!(i.mss > 1000 && i.rcv_mss > 0 && i.rtt_ms > 0.0 && i.rtt_ms < 1000.0, "{i:?}");
        assert_eq!((i.unacked, i.notsent), (0, Some(0)));
    }

    #[test]
    fn malformed_dumps_are_errors_not_panics() {
        let mut out = HashMap::new();
        let none = HashSet::new();
        // Length field larger than the datagram.
        let mut m = vec![0u8; 20];
        m[..4].copy_from_slice(&100u32.to_ne_bytes());
        assert!(parse_dump(&m, &none, &mut out).is_err());
        // An error message carrying -EPERM.
        let mut e = vec![0u8; 20];
        e[..4].copy_from_slice(&20u32.to_ne_bytes());
        e[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        e[16..20].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
        assert_eq!(parse_dump(&e, &none, &mut out).unwrap_err().raw_os_error(), Some(libc::EPERM));
        assert!(tcp_info(&[0u8; 50]).is_none());
        assert_eq!(attr(&[8, 0, 2, 0, 1, 2, 3, 4], 2), Some(&[1u8, 2, 3, 4][..]));
        assert_eq!(attr(&[200, 0, 2, 0], 2), None);
    }
}
