//! The AF_PACKET socket and its TPACKET_V3 receive ring. Every system call
//! and every access to memory shared with the kernel is in this file; the
//! frames of a block are then read with ordinary bounds-checked slices.
//!
//! Layouts are linux/if_packet.h's: a block starts with `tpacket_block_desc`
//! (status at byte 8, packet count at 12, first packet's offset at 16); a
//! packet with `tpacket3_hdr` (48 bytes) followed by a `sockaddr_ll`.

use super::bpf::Insn;
use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

const TPACKET_V3: libc::c_int = 2;
/// Offset of `hdr.bh1.block_status` in a block.
const BLOCK_STATUS: usize = 8;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// A packet socket that receives nothing until [`bind`] names a protocol,
/// so no packet gets in before the filter and the ring are in place.
pub(crate) fn packet_socket(dgram: bool) -> io::Result<OwnedFd> {
    let ty = if dgram { libc::SOCK_DGRAM } else { libc::SOCK_RAW };
    // SAFETY: a plain system call without pointers.
    let fd = cvt(unsafe { libc::socket(libc::AF_PACKET, ty | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: socket() just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt<T>(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live T and its exact size is passed; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(fd.as_raw_fd(), level, name, (value as *const T).cast(), size_of::<T>() as libc::socklen_t)
    };
    cvt(r).map(drop)
}

fn getsockopt<T: Copy>(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int, mut value: T) -> io::Result<T> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a live T and `len` its size; the kernel writes at most `len` bytes into it.
    let r = unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, (&mut value as *mut T).cast(), &mut len) };
    cvt(r).map(|_| value)
}

/// Attaches a classic BPF program (`SO_ATTACH_FILTER`); the kernel checks it.
pub(crate) fn attach_filter(fd: BorrowedFd<'_>, prog: &[Insn]) -> io::Result<()> {
    let len = u16::try_from(prog.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // The kernel copies the program; the pointer is only read during the call.
    let fprog = libc::sock_fprog { len, filter: prog.as_ptr().cast_mut() };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
}

/// Selects TPACKET_V3 (nanosecond timestamps, variable-size frames in blocks).
pub(crate) fn use_v3(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VERSION, &TPACKET_V3)
}

/// The interface's index, `None` when there is no such interface.
pub(crate) fn if_index(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

/// The interface's ARPHRD_ type (SIOCGIFHWADDR), in this network namespace.
pub(crate) fn hw_type(fd: BorrowedFd<'_>, name: &str) -> io::Result<u16> {
    // SAFETY: ifreq is plain old data, for which all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= req.ifr_name.len() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: `req` is a live ifreq with a NUL-terminated name; the ioctl writes only into it.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR as _, &mut req) })?;
    // SAFETY: SIOCGIFHWADDR filled the `ifru_hwaddr` member, and any bytes are a valid sockaddr.
    Ok(unsafe { req.ifr_ifru.ifru_hwaddr.sa_family })
}

/// Starts receiving every protocol on `ifindex` (0: all interfaces).
pub(crate) fn bind(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    let sa = libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as u16,
        sll_protocol: (libc::ETH_P_ALL as u16).to_be(),
        sll_ifindex: ifindex as libc::c_int,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    };
    let len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: `sa` is a live sockaddr_ll and its size is passed.
    cvt(unsafe { libc::bind(fd.as_raw_fd(), (&sa as *const libc::sockaddr_ll).cast(), len) }).map(drop)
}

/// The socket's pending error (SO_ERROR, which clears it), if any.
pub(crate) fn pending_error(fd: BorrowedFd<'_>) -> Option<io::Error> {
    match getsockopt(fd, libc::SOL_SOCKET, libc::SO_ERROR, 0 as libc::c_int) {
        Ok(0) => None,
        Ok(e) => Some(io::Error::from_raw_os_error(e)),
        Err(e) => Some(e),
    }
}

/// (packets passed by the filter, packets dropped) since the last call: the
/// kernel resets its counters when they are read.
pub(crate) fn take_stats(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    let st = libc::tpacket_stats_v3 { tp_packets: 0, tp_drops: 0, tp_freeze_q_cnt: 0 };
    let st = getsockopt(fd, libc::SOL_PACKET, libc::PACKET_STATISTICS, st)?;
    Ok((u64::from(st.tp_packets), u64::from(st.tp_drops)))
}

/// Waits until the kernel hands over a block, `timeout` passes or a signal
/// arrives. A socket error (the interface went down) is returned.
pub(crate) fn wait(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<()> {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ms = timeout.as_millis().min(60_000) as libc::c_int;
    // SAFETY: `p` is one live pollfd, and 1 is the count passed.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok(()) } else { Err(e) };
    }
    if p.revents & libc::POLLERR != 0
        && let Some(e) = pending_error(fd)
    {
        return Err(e);
    }
    Ok(())
}

/// The memory-mapped receive ring: `blocks` blocks of `block_size` bytes.
pub(crate) struct Ring {
    map: memmap2::MmapRaw,
    block_size: usize,
    blocks: usize,
}

impl Ring {
    /// Asks the kernel for the ring (PACKET_RX_RING) and maps it. A block is
    /// handed over when full, or within `timeout_ms` once it holds a packet.
    pub(crate) fn new(fd: BorrowedFd<'_>, block_size: u32, blocks: u32, timeout_ms: u32) -> io::Result<Ring> {
        // TPACKET_V3 packs variable-size frames into blocks; the frame size
        // only has to divide the block size.
        let frame_size = 2048;
        let req = libc::tpacket_req3 {
            tp_block_size: block_size,
            tp_block_nr: blocks,
            tp_frame_size: frame_size,
            tp_frame_nr: block_size / frame_size * blocks,
            tp_retire_blk_tov: timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;
        let len = block_size as usize * blocks as usize;
        let map = memmap2::MmapOptions::new().len(len).map_raw(fd.as_raw_fd())?;
        Ok(Ring { map, block_size: block_size as usize, blocks: blocks as usize })
    }

    /// How many blocks the ring has.
    pub(crate) fn blocks(&self) -> usize {
        self.blocks
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        assert!(i < self.blocks);
        let p = self.map.as_mut_ptr().wrapping_add(i * self.block_size + BLOCK_STATUS);
        // SAFETY: `p` is inside the mapping (i < blocks), 4-aligned (blocks are
        // page-aligned), and valid while `self` is. The kernel writes the word
        // concurrently, so it is only accessed atomically.
        unsafe { AtomicU32::from_ptr(p.cast()) }
    }

    /// Block `i`, if the kernel has handed it to user space.
    pub(crate) fn block(&self, i: usize) -> Option<&[u8]> {
        if self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            return None;
        }
        let p = self.map.as_ptr().wrapping_add(i * self.block_size);
        // SAFETY: the block is inside the mapping, and while its status says
        // TP_STATUS_USER the kernel leaves it alone; `release` (which needs
        // `&mut self`, so no slice of it is alive) gives it back.
        Some(unsafe { std::slice::from_raw_parts(p, self.block_size) })
    }

    /// Gives block `i` back to the kernel.
    pub(crate) fn release(&mut self, i: usize) {
        self.status(i).store(libc::TP_STATUS_KERNEL, Ordering::Release);
    }
}

/// One packet of a block.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(test, derive(Default))]
pub(crate) struct Frame<'a> {
    pub(crate) sec: u32,
    pub(crate) nsec: u32,
    /// Length on the wire (from the link header for SOCK_RAW, the network header for SOCK_DGRAM).
    pub(crate) len: u32,
    pub(crate) status: u32,
    pub(crate) vlan_tci: u16,
    pub(crate) vlan_tpid: u16,
    /// EtherType, network order as in sockaddr_ll.
    pub(crate) protocol: [u8; 2],
    pub(crate) hatype: u16,
    pub(crate) pkttype: u8,
    /// Link-layer address (the sender's), `halen` bytes of it.
    pub(crate) addr: [u8; 8],
    pub(crate) halen: u8,
    /// The captured bytes.
    pub(crate) data: &'a [u8],
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

/// The packets of a block handed over by the kernel; stops at anything out of bounds.
pub(crate) fn frames(block: &[u8]) -> impl Iterator<Item = Frame<'_>> {
    let mut left = u32_at(block, 12).unwrap_or(0);
    let mut at = u32_at(block, 16).unwrap_or(0) as usize;
    std::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        left -= 1;
        let f = frame(block, at);
        let next = u32_at(block, at).unwrap_or(0) as usize;
        at = if next == 0 { block.len() } else { at.saturating_add(next) };
        if f.is_none() {
            left = 0;
        }
        f
    })
}

fn frame(b: &[u8], at: usize) -> Option<Frame<'_>> {
    let mac = usize::from(u16_at(b, at + 24)?);
    let caplen = u32_at(b, at + 12)? as usize;
    let start = at.checked_add(mac)?;
    let sll = at + 48; // TPACKET_ALIGN(sizeof(struct tpacket3_hdr))
    Some(Frame {
        sec: u32_at(b, at + 4)?,
        nsec: u32_at(b, at + 8)?,
        len: u32_at(b, at + 16)?,
        status: u32_at(b, at + 20)?,
        vlan_tci: u32_at(b, at + 32)? as u16,
        vlan_tpid: u16_at(b, at + 36)?,
        protocol: b.get(sll + 2..sll + 4)?.try_into().ok()?,
        hatype: u16_at(b, sll + 8)?,
        pkttype: *b.get(sll + 10)?,
        halen: *b.get(sll + 11)?,
        addr: b.get(sll + 12..sll + 20)?.try_into().ok()?,
        data: b.get(start..start.checked_add(caplen)?)?,
    })
}

/// A block laid out as the kernel hands one over.
#[cfg(test)]
pub(crate) fn test_block(frames: &[Frame<'_>]) -> Vec<u8> {
    let put = |b: &mut Vec<u8>, at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
    let mut b = vec![0u8; 48];
    put(&mut b, 8, &libc::TP_STATUS_USER.to_ne_bytes());
    put(&mut b, 12, &(frames.len() as u32).to_ne_bytes());
    put(&mut b, 16, &48u32.to_ne_bytes());
    for (i, f) in frames.iter().enumerate() {
        let at = b.len();
        let size = (80 + f.data.len()).next_multiple_of(16);
        b.resize(at + size, 0);
        let next = if i + 1 == frames.len() { 0 } else { size as u32 };
        put(&mut b, at, &next.to_ne_bytes());
        put(&mut b, at + 4, &f.sec.to_ne_bytes());
        put(&mut b, at + 8, &f.nsec.to_ne_bytes());
        put(&mut b, at + 12, &(f.data.len() as u32).to_ne_bytes());
        put(&mut b, at + 16, &f.len.to_ne_bytes());
        put(&mut b, at + 20, &f.status.to_ne_bytes());
        put(&mut b, at + 24, &80u16.to_ne_bytes());
        put(&mut b, at + 32, &u32::from(f.vlan_tci).to_ne_bytes());
        put(&mut b, at + 36, &f.vlan_tpid.to_ne_bytes());
        put(&mut b, at + 50, &f.protocol);
        put(&mut b, at + 56, &f.hatype.to_ne_bytes());
        b[at + 58] = f.pkttype;
        b[at + 59] = f.halen;
        put(&mut b, at + 60, &f.addr);
        put(&mut b, at + 80, f.data);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two packets: one sent on loopback, one received.
    fn block() -> Vec<u8> {
        let f = Frame { sec: 7, nsec: 999_999_999, len: 100, hatype: 772, halen: 6, ..Frame::default() };
        let f = Frame { addr: [2, 0, 0, 0, 0, 9, 0, 0], ..f };
        test_block(&[Frame { pkttype: 4, data: b"abcd", ..f }, Frame { data: b"xyz", ..f }])
    }

    #[test]
    fn frames_of_a_block() {
        let b = block();
        let f: Vec<Frame<'_>> = frames(&b).collect();
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].sec, f[0].nsec, f[0].len, f[0].pkttype, f[0].data), (7, 999_999_999, 100, 4, &b"abcd"[..]));
        assert_eq!((f[1].hatype, f[1].pkttype, f[1].halen, f[1].data), (772, 0, 6, &b"xyz"[..]));
        assert_eq!(f[1].addr, [2, 0, 0, 0, 0, 9, 0, 0]);
    }

    #[test]
    fn damaged_blocks_end_early_without_panicking() {
        let mut b = block();
        b[48 + 12..48 + 16].copy_from_slice(&100_000u32.to_ne_bytes()); // caplen past the block
        assert_eq!(frames(&b).count(), 0);
        let mut b = block();
        b[12..16].copy_from_slice(&1000u32.to_ne_bytes()); // more packets than there are
        assert_eq!(frames(&b).count(), 2);
        assert_eq!(frames(&b[..100]).count(), 0);
        assert_eq!(frames(&[]).count(), 0);
    }
}
