//! Host settings that change the picture: TcpExt delayed-ACK counters (as
//! `nstat` reads them), the autocorking and pingpong sysctls, and the
//! `quickack`/`rto_min` metrics of the routes to the peers.

use super::bounded::run_bounded;
use crate::record::inspect::{Counter, Route};
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Where system tools are looked for: never PATH, which whoever started
/// tcpdoctor (as root) may have pointed anywhere.
pub(crate) const SYSTEM_DIRS: [&str; 4] = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/// The TcpExt counters worth watching during the window.
pub(crate) const COUNTERS: [&str; 4] = ["DelayedACKs", "DelayedACKLocked", "DelayedACKLost", "TCPAutoCorking"];

/// Most peers whose route is looked up (one `ip route get` each).
pub(crate) const MAX_ROUTES: usize = 8;

/// TcpExt counters from /proc/net/netstat text: a line of names, then a line of values.
pub(crate) fn parse_netstat(text: &str) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.windows(2) {
        let (Some(names), Some(values)) = (pair[0].strip_prefix("TcpExt:"), pair[1].strip_prefix("TcpExt:")) else {
            continue;
        };
        // The values line also starts with "TcpExt:"; only a names line is followed by numbers.
        if values.split_whitespace().next().is_none_or(|v| v.parse::<u64>().is_err()) {
            continue;
        }
        for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Ok(v) = v.parse() {
                out.insert(n.to_string(), v);
            }
        }
    }
    out
}

/// The TcpExt counters now, or None when /proc/net/netstat is unreadable.
pub(crate) fn tcp_ext() -> Option<HashMap<String, u64>> {
    std::fs::read_to_string("/proc/net/netstat").ok().map(|t| parse_netstat(&t)).filter(|m| !m.is_empty())
}

/// Increases of [`COUNTERS`] from `before` to `after` (a counter missing on this kernel is left out).
pub(crate) fn deltas(before: &HashMap<String, u64>, after: &HashMap<String, u64>) -> Vec<Counter> {
    COUNTERS
        .iter()
        .filter_map(|&n| Some(Counter { name: n.into(), delta: after.get(n)?.saturating_sub(*before.get(n)?) }))
        .collect()
}

/// An integer sysctl under net.ipv4 (None when this kernel has none).
pub(crate) fn sysctl(name: &str) -> Option<i64> {
    std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}")).ok()?.trim().parse().ok()
}

/// The route to `peer`, from `ip route get` (which prints the metrics of the
/// route found, e.g. `cache rto_min lock 5ms quickack 1`).
pub(crate) fn route(peer: IpAddr) -> Result<Route, String> {
    let ip = system_tool("ip", &SYSTEM_DIRS).ok_or_else(|| {
        format!("`ip route get {peer}`: no root-owned `ip` in {} (install iproute2)", SYSTEM_DIRS.join(", "))
    })?;
    let mut cmd = Command::new(ip);
    cmd.args(["route", "get", &peer.to_string()]).env_clear().env("LANG", "C");
    let (status, out, err) =
        run_bounded(&mut cmd, Duration::from_secs(3)).map_err(|e| format!("`ip route get {peer}`: {e}"))?;
    if !status.success() {
        return Err(format!("`ip route get {peer}`: {}", err.trim()));
    }
    Ok(parse_route(peer, &out))
}

/// `name` in the first of `dirs` where it is a file that only root can
/// change: owned by root, not writable by group or others, nor its directory.
pub(crate) fn system_tool(name: &str, dirs: &[&str]) -> Option<PathBuf> {
    let root_only = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0);
    dirs.iter().find_map(|d| {
        let real = std::fs::canonicalize(Path::new(d).join(name)).ok()?;
        let ok = real.is_file() && root_only(&real) && real.parent().is_some_and(root_only);
        ok.then_some(real)
    })
}

fn parse_route(peer: IpAddr, out: &str) -> Route {
    let words: Vec<&str> = out.split_whitespace().collect();
    let after = |key: &str| {
        let i = words.iter().position(|w| *w == key)?;
        // Metrics may be locked: `rto_min lock 5ms`.
        words[i + 1..].iter().find(|w| **w != "lock").copied()
    };
    Route {
        peer: peer.to_string(),
        route: out.lines().next().unwrap_or("").trim().to_string(),
        quickack: after("quickack").and_then(|v| v.parse().ok()),
        rto_min_ms: after("rto_min").and_then(ms),
    }
}

/// `5ms`, `1s`, `200us`, or a bare number of ms.
fn ms(v: &str) -> Option<f64> {
    let (num, scale) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e3)
    } else {
        (v, 1.0)
    };
    num.parse::<f64>().ok().map(|x| x * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netstat_pairs_and_deltas() {
        let t = "TcpExt: SyncookiesSent DelayedACKs DelayedACKLocked DelayedACKLost\n\
TcpExt: 0 10 2 1\n\
IpExt: InNoRoutes\n\
IpExt: 0\n";
        let a = parse_netstat(t);
        assert_eq!(a["DelayedACKs"], 10);
        let mut b = a.clone();
        b.insert("DelayedACKs".into(), 15);
        let d = deltas(&a, &b);
        assert_eq!(d[0], Counter { name: "DelayedACKs".into(), delta: 5 });
        assert_eq!(d.len(), 3, "TCPAutoCorking is not in this text: {d:?}");
        let live = tcp_ext().expect("/proc/net/netstat");
        assert!(live.contains_key("DelayedACKs"));
        assert_eq!(
            sysctl("tcp_autocorking").is_some(),
            std::path::Path::new("/proc/sys/net/ipv4/tcp_autocorking").exists()
        );
    }

    #[test]
    fn system_tools_only_from_root_owned_places() {
        let found = system_tool("ip", &SYSTEM_DIRS).expect("iproute2's ip");
        assert!(found.starts_with("/usr") || found.starts_with("/bin") || found.starts_with("/sbin"), "{found:?}");
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("ip");
        std::fs::write(&fake, "#!/bin/sh\n").unwrap();
        let d = dir.path().to_str().unwrap();
        // Root-owned but in a directory tempdir made 0700: fine; group-writable: refused.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o775)).unwrap();
        assert_eq!(system_tool("ip", &[d]), None, "a group-writable file");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        // SAFETY: getuid has no preconditions.
        let root = unsafe { libc::getuid() } == 0;
        assert_eq!(system_tool("ip", &[d]).is_some(), root, "a 0755 file in a 0700 directory, owned by us");
        std::os::unix::fs::lchown(&fake, Some(65534), None).unwrap_or(());
        if root {
            assert_eq!(system_tool("ip", &[d]), None, "a file owned by nobody");
        }
        assert_eq!(system_tool("no-such-tool", &SYSTEM_DIRS), None);
    }

    #[test]
    fn route_metrics() {
        let peer: IpAddr = "10.8.0.5".parse().unwrap();
        let r =
            parse_route(peer, "10.8.0.5 dev lo src 10.9.0.1 uid 0 \n    cache <local> rto_min lock 5ms quickack 1 \n");
        assert_eq!((r.quickack, r.rto_min_ms), (Some(1), Some(5.0)));
        assert_eq!(r.route, "10.8.0.5 dev lo src 10.9.0.1 uid 0");
        let r = parse_route(peer, "local 127.0.0.1 dev lo src 127.0.0.1 uid 0\n    cache <local>\n");
        assert_eq!((r.quickack, r.rto_min_ms), (None, None));
        assert_eq!(ms("1s"), Some(1000.0));
        assert_eq!(ms("200us"), Some(0.2));
    }
}
