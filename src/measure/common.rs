//! What the instruments share on the command-line side: durations,
//! resolving the target, errors, Ctrl-C.

use std::fmt;
use std::net::{IpAddr, ToSocketAddrs};
use std::time::Duration;

/// Longest duration accepted for an interval or timeout: beyond it a typo
/// (`-i 1000` meaning ms) would hang the run for a quarter hour.
const MAX_DURATION: Duration = Duration::from_secs(600);

/// Parses a duration: a number of seconds (`0.2`, `1`), or a number with a
/// unit: `200ms`, `1s`, `500us` (also `µs`), `2m`, `1h`. Negative, NaN and over 600 s are refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_up_to(s, MAX_DURATION)
}

/// How long a load run (`bench -d`) may last.
const MAX_RUN: Duration = Duration::from_secs(7 * 24 * 3600);

/// A run length (`bench -d 30s`, `-d 2m`): like [`parse_duration`], more than 0, up to a week.
pub fn parse_run_length(s: &str) -> Result<Duration, String> {
    let d = parse_up_to(s, MAX_RUN)?;
    if d.is_zero() {
        return Err(format!("`{s}`: must be more than 0"));
    }
    Ok(d)
}

fn parse_up_to(s: &str, max: Duration) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let x: f64 = num.trim().parse().map_err(|_| {
        format!("`{s}` is not a duration; write seconds (`0.2`) or a unit (`200ms`, `1s`, `500us`, `2m`, `1h`)")
    })?;
    if !x.is_finite() || x < 0.0 {
        return Err(format!("`{s}`: a duration must be a non-negative number"));
    }
    let secs = x * scale;
    if secs > max.as_secs_f64() {
        return Err(format!("`{s}`: at most {} s", max.as_secs()));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Like [`parse_duration`] but zero is refused (a timeout of 0 would report everything lost).
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("`{s}`: must be more than 0"));
    }
    Ok(d)
}

/// Which address family to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// IPv4 only (`-4`).
    V4,
    /// IPv6 only (`-6`).
    V6,
}

/// Why a measurement could not run.
#[derive(Debug)]
pub enum Error {
    /// The host did not resolve, or not to an address of the family asked for.
    Resolve(String),
    /// Sockets or the network refused: no permission, no route…
    Net(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Resolve(s) | Error::Net(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for Error {}

/// Resolves `host` (an address or a name) to one address, of `family` when given.
/// The first address the resolver returns wins, as with ping.
pub fn resolve(host: &str, family: Option<Family>) -> Result<IpAddr, Error> {
    let want = |a: &IpAddr| match family {
        None => true,
        Some(Family::V4) => a.is_ipv4(),
        Some(Family::V6) => a.is_ipv6(),
    };
    // Literal addresses (IPv6 ones too, which `(host, 0)` would handle, but without brackets in errors).
    if let Ok(a) = host.parse::<IpAddr>() {
        return if want(&a) {
            Ok(a)
        } else {
            Err(Error::Resolve(format!("{host}: not an {} address; drop -4/-6", fam_name(family))))
        };
    }
    let addrs: Vec<IpAddr> = (host, 0)
        .to_socket_addrs()
        .map_err(|e| Error::Resolve(format!("{host}: cannot resolve ({e}); give an IP address or check DNS")))?
        .map(|a| a.ip())
        .collect();
    addrs.iter().copied().find(want).ok_or_else(|| {
        Error::Resolve(format!("{host}: no {} address (it resolves to {addrs:?}); drop -4/-6", fam_name(family)))
    })
}

fn fam_name(f: Option<Family>) -> &'static str {
    match f {
        Some(Family::V6) => "IPv6",
        _ => "IPv4",
    }
}

/// A one-line error for a socket call that failed, with what to do.
pub(crate) fn net_error(what: &str, e: &std::io::Error) -> Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            "; run as root, give the binary CAP_NET_RAW (`setcap cap_net_raw+ep tcpdoctor`), or use --unprivileged"
        }
        Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH) => "; check `ip route get ADDRESS`",
        Some(libc::EADDRNOTAVAIL) => "; the source address is gone (interface down?)",
        _ => "",
    };
    Error::Net(format!("{what}: {e}{hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0.2"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_duration("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("1"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_duration("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration(" 0.5 s "), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "ms", "-1", "1h", "abc", "NaN", "inf", "1e9", "601", "0x10"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_positive_duration("0").is_err());
        assert!(parse_positive_duration("0ms").is_err());
        assert_eq!(parse_positive_duration("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_run_length("1h"), Ok(Duration::from_secs(3600)));
        assert!(
            parse_run_length("0s").is_err() && parse_run_length("8d").is_err() && parse_run_length("200h").is_err()
        );
    }

    #[test]
    fn literal_addresses_and_families() {
        assert_eq!(resolve("127.0.0.1", None).unwrap(), "127.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(resolve("::1", Some(Family::V6)).unwrap(), "::1".parse::<IpAddr>().unwrap());
        assert!(matches!(resolve("::1", Some(Family::V4)), Err(Error::Resolve(_))));
        assert!(matches!(resolve("127.0.0.1", Some(Family::V6)), Err(Error::Resolve(_))));
        // .invalid never resolves (RFC 2606).
        assert!(matches!(resolve("no-such-host.invalid", None), Err(Error::Resolve(_))));
    }
}
