//! What /proc tells about a process and its TCP sockets: /proc/net/tcp{,6}
//! rows, socket inodes behind file descriptors, command line and names.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

/// `TCP_LISTEN` in the kernel's state numbering.
pub(crate) const LISTEN: u8 = 10;

/// One row of /proc/net/tcp or tcp6.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TcpEntry {
    pub local: SocketAddr,
    pub peer: SocketAddr,
    pub state: u8,
    pub inode: u64,
    /// Delayed-ACK mode (`inet_csk_in_pingpong_mode`); absent on TIME_WAIT and request rows.
    pub pingpong: Option<bool>,
    /// Quick ACKs left (`icsk_ack.quick`).
    pub quick: Option<u32>,
}

/// State name as `ss` prints it, lower case.
pub(crate) fn state_name(st: u8) -> &'static str {
    match st {
        1 => "established",
        2 => "syn_sent",
        3 => "syn_recv",
        4 => "fin_wait1",
        5 => "fin_wait2",
        6 => "time_wait",
        7 => "close",
        8 => "close_wait",
        9 => "last_ack",
        10 => "listen",
        11 => "closing",
        12 => "new_syn_recv",
        _ => "unknown",
    }
}

/// `ADDR:PORT` as the kernel prints it: the address as 32-bit words in host
/// byte order, the port already in host order.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (a, p) = s.split_once(':')?;
    let port = u16::from_str_radix(p, 16).ok()?;
    let word = |i: usize| u32::from_str_radix(a.get(i * 8..i * 8 + 8)?, 16).ok().map(u32::to_ne_bytes);
    let ip = match a.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Rows of /proc/net/tcp or tcp6 text; malformed rows are skipped.
pub(crate) fn parse_net_tcp(text: &str) -> Vec<TcpEntry> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let state = u8::from_str_radix(f.get(3)?, 16).ok()?;
            // Full socket rows carry rto, ato and (quick << 1) | pingpong at 12..=14.
            let qp = f.get(14).and_then(|v| v.parse::<u32>().ok());
            Some(TcpEntry {
                local: parse_addr(f.get(1)?)?,
                peer: parse_addr(f.get(2)?)?,
                state,
                inode: f.get(9)?.parse().ok()?,
                pingpong: qp.map(|v| v & 1 == 1),
                quick: qp.map(|v| v >> 1),
            })
        })
        .collect()
}

/// TCP rows (IPv4 and IPv6) of the network namespace seen through `base`
/// (`/proc/net` or `/proc/PID/net`). A missing tcp6 (IPv6 disabled) is no error.
pub(crate) fn net_tcp(base: &str) -> io::Result<Vec<TcpEntry>> {
    let mut rows = parse_net_tcp(&fs::read_to_string(format!("{base}/tcp"))?);
    match fs::read_to_string(format!("{base}/tcp6")) {
        Ok(t) => rows.extend(parse_net_tcp(&t)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(rows)
}

/// `(fd, inode)` of every socket the process holds.
pub(crate) fn socket_fds(pid: u32) -> io::Result<Vec<(i32, u64)>> {
    let mut out = Vec::new();
    for e in fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(e) = e else { continue };
        // An fd closed between listing and readlink is simply gone.
        let Ok(target) = fs::read_link(e.path()) else { continue };
        let t = target.to_string_lossy();
        let inode = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')).and_then(|n| n.parse().ok());
        if let (Some(inode), Ok(fd)) = (inode, e.file_name().to_string_lossy().parse()) {
            out.push((fd, inode));
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Every process id in /proc.
pub(crate) fn pids() -> Vec<u32> {
    let Ok(d) = fs::read_dir("/proc") else { return Vec::new() };
    d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// The processes (among all) that hold one of `inodes`, and whether some
/// process's descriptors could not be read for lack of permission.
pub(crate) fn holders(inodes: &HashSet<u64>) -> (Vec<u32>, bool) {
    let mut found = Vec::new();
    let mut denied = false;
    for pid in pids() {
        match socket_fds(pid) {
            Ok(fds) if fds.iter().any(|(_, i)| inodes.contains(i)) => found.push(pid),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => denied = true,
            Err(_) => {}
        }
    }
    found.sort_unstable();
    (found, denied)
}

/// A field of /proc/PID/status (`Tgid`, `Uid`…): its first number.
pub(crate) fn status_field(pid: u32, name: &str) -> io::Result<Option<u32>> {
    let text = fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok()))
}

/// Parent process id, from /proc/PID/stat (the name may hold spaces and parentheses).
pub(crate) fn ppid(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// When the process started, in clock ticks after boot (field 22 of
/// /proc/PID/stat): with the pid, it names one process, never a later one
/// that reuses the pid.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields after the name start at 3 (state).
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Short name (`comm`).
pub(crate) fn comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim_end().to_string()).unwrap_or_default()
}

/// Command-line arguments (empty for kernel threads and zombies).
pub(crate) fn cmdline(pid: u32) -> Vec<String> {
    let Ok(raw) = fs::read(format!("/proc/{pid}/cmdline")) else { return Vec::new() };
    let args: Vec<String> =
        raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    // Processes that rewrite their title (nginx) leave one space-separated string.
    if args.len() == 1 { args[0].split(' ').filter(|a| !a.is_empty()).map(String::from).collect() } else { args }
}

/// The executable, when the link is readable (same permission as the fds).
pub(crate) fn exe(pid: u32) -> Option<PathBuf> {
    fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// Names of the process's threads (a JVM names its threads, e.g. `HTTP-Dispatcher`).
pub(crate) fn thread_names(pid: u32) -> Vec<String> {
    let Ok(d) = fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    d.filter_map(|e| {
        let p = e.ok()?.path().join("comm");
        fs::read_to_string(p).ok().map(|s| s.trim_end().to_string())
    })
    .collect()
}

/// Children of `pid` (by parent id).
pub(crate) fn children(pid: u32) -> Vec<u32> {
    let mut c: Vec<u32> = pids().into_iter().filter(|&p| p != pid && ppid(p) == Some(pid)).collect();
    c.sort_unstable();
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rows_of_both_families() {
        // Real rows (Linux 6.x): a listener, an established socket in pingpong
        // mode with no quick ACKs left, a TIME_WAIT row without the extra columns.
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123456 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 02:00000010 00000000     0        0 123457 2 0000000000000000 20 4 1 10 -1\n\
   2: 0100007F:1F90 0100007F:D432 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000\n\
   garbage\n";
        let rows = parse_net_tcp(v4);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!((rows[0].state, rows[0].inode), (LISTEN, 123456));
        assert_eq!(rows[1].peer, "127.0.0.1:54321".parse().unwrap());
        assert_eq!((rows[1].pingpong, rows[1].quick), (Some(true), Some(0)));
        assert_eq!((rows[2].state, rows[2].pingpong), (6, None));

        let v6 = "  sl  local_address                         remote_address                        st\n\
   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 4 10 0\n\
   1: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 778 1 0000000000000000 20 4 30 10 -1\n";
        let rows = parse_net_tcp(v6);
        assert_eq!(rows[0].local, "[::1]:8080".parse().unwrap());
        assert_eq!(rows[1].peer, "[::ffff:127.0.0.1]:54321".parse().unwrap());
        assert_eq!((rows[1].pingpong, rows[1].quick), (Some(false), Some(15)));
    }

    #[test]
    fn own_sockets_and_names_are_found() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let me = std::process::id();
        let rows = net_tcp("/proc/net").unwrap();
        let row = rows.iter().find(|r| r.state == LISTEN && r.local.port() == port).expect("our listener");
        let fds = socket_fds(me).unwrap();
        assert!(fds.iter().any(|&(_, i)| i == row.inode), "{fds:?}");
        let (h, _) = holders(&HashSet::from([row.inode]));
        assert_eq!(h, vec![me]);
        assert_eq!(status_field(me, "Tgid").unwrap(), Some(me));
        assert!(ppid(me).is_some());
        // Our start time: after boot, and before now.
        let ticks = start_time(me).expect("start time") as f64;
        let up: f64 = fs::read_to_string("/proc/uptime").unwrap().split_whitespace().next().unwrap().parse().unwrap();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        assert!(ticks > 0.0 && ticks / hz <= up + 1.0, "{ticks} ticks, up {up} s");
        assert!(!comm(me).is_empty() && !cmdline(me).is_empty() && exe(me).is_some());
    }
}
