//! TAP devices: Ethernet frames to and from a file descriptor. The device
//! lives in the network namespace of the thread that creates it and
//! vanishes when its descriptor is closed.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

/// An open TAP device (non-blocking; no packet-info header and no vnet
/// header, so each read is one frame as it would be on the wire).
#[derive(Debug)]
pub struct Tap {
    file: File,
    name: String,
}

impl Tap {
    /// Creates a TAP device named `name` (`%d` lets the kernel pick a free
    /// number) in the calling thread's network namespace.
    pub fn create(name: &str) -> io::Result<Tap> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('/') {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{name:?}: not an interface name")));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|e| io::Error::new(e.kind(), format!("/dev/net/tun: {e}")))?;
        // SAFETY: ifreq is plain data; all zeros is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes the ifreq we pass, on our own descriptor.
        if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req) } != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("cannot create TAP device {name}: {e}")));
        }
        let len = req.ifr_name.iter().position(|&c| c == 0).unwrap_or(req.ifr_name.len());
        let name = req.ifr_name[..len].iter().map(|&c| c as u8 as char).collect();
        Ok(Tap { file, name })
    }

    /// The device's name, as the kernel gave it.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}
