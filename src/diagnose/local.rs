//! The steps that need the server's host: the live capture (4) and the
//! server process (5). Both run beside the load of step 2.

use super::Options;
use crate::report::diagnose::{CaptureStep, ServerStep};
use std::net::{IpAddr, SocketAddr};

/// Whether `ip` is one of this host's addresses.
pub fn is_local(ip: IpAddr) -> bool {
    if ip.is_loopback() {
        return true;
    }
    interfaces().iter().any(|(_, a)| *a == ip)
}

/// (interface name, address) of every configured address.
fn interfaces() -> Vec<(String, IpAddr)> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below; every pointer is checked
    // for null and read only while the list is alive.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut p = head;
        while !p.is_null() {
            let ifa = &*p;
            if !ifa.ifa_addr.is_null() && !ifa.ifa_name.is_null() {
                let name = std::ffi::CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned();
                match i32::from((*ifa.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        out.push((name, IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes())));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        out.push((name, IpAddr::from(sin6.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            p = ifa.ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out
}

/// The interface packets to `dst` leave by: `lo` for this host's own
/// addresses, else the one holding the source address the kernel picks.
#[allow(dead_code)] // used by the capture step, merged next
pub fn interface_for(dst: IpAddr) -> Option<String> {
    if is_local(dst) {
        return Some("lo".into());
    }
    let bind: SocketAddr = if dst.is_ipv4() { "0.0.0.0:0".parse().ok()? } else { "[::]:0".parse().ok()? };
    let s = std::net::UdpSocket::bind(bind).ok()?;
    s.connect((dst, 9)).ok()?;
    let src = s.local_addr().ok()?.ip();
    interfaces().into_iter().find(|(_, a)| *a == src).map(|(n, _)| n)
}

/// A capture running beside the load.
pub struct Running;

/// Starts the capture; says in `missing` why not when it cannot.
pub fn start_capture(_o: &Options, _addr: SocketAddr, missing: &mut Vec<String>) -> Option<Running> {
    missing.push("step 4: live capture is not built yet".into());
    None
}

/// Stops the capture and analyses it.
pub fn finish_capture(_c: Running, _addr: SocketAddr, _missing: &mut Vec<String>) -> Option<CaptureStep> {
    None
}

/// Step 4's line.
pub fn capture_line(c: &CaptureStep) -> String {
    format!("{}: {} packets, {} dropped", c.interface, c.packets, c.kernel_drops)
}

/// An inspection running beside the load.
pub struct Inspecting;

/// Starts inspecting the process listening on `port`.
pub fn start_inspect(_port: u16) -> Inspecting {
    Inspecting
}

/// Waits for the inspection.
pub fn finish_inspect(_i: Inspecting, missing: &mut Vec<String>) -> Option<ServerStep> {
    missing.push("step 5: process inspection is not built yet".into());
    None
}

/// Step 5's line.
pub fn server_line(s: &ServerStep) -> String {
    format!(
        "pid {} {} ({}): {} of {} established connections have Nagle on",
        s.pid, s.name, s.software, s.nagle_on, s.established
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_local_and_routes_by_lo() {
        assert!(is_local("127.0.0.1".parse().unwrap()));
        assert!(is_local("::1".parse().unwrap()));
        assert_eq!(interface_for("127.0.0.5".parse().unwrap()).as_deref(), Some("lo"));
        assert!(!is_local("192.0.2.1".parse().unwrap())); // TEST-NET-1, never assigned
    }
}
