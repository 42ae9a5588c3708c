//! What the user asked of `bench`, checked before any traffic: the URL, the
//! counts, the request's method and headers. The checks are public so the
//! command line rejects the same things at parse time.

use super::http;
use crate::measure::tls::{Target, Trust};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// The largest `--body-file`: the body is held in memory and sent with every request.
pub const MAX_BODY_FILE: u64 = 64 << 20;

/// What the user asked for.
#[derive(Clone, Debug)]
pub struct Options {
    /// `http[s]://host[:port][/path]`.
    pub url: String,
    /// Worker threads.
    pub threads: usize,
    /// Connections (spread over the threads; all are used).
    pub connections: usize,
    /// How long to run.
    pub duration: Duration,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Request method.
    pub method: String,
    /// Extra header lines (`Name: value`).
    pub headers: Vec<String>,
    /// Request body.
    pub body: Vec<u8>,
    /// Fixed total request rate, requests/s.
    pub rate: Option<f64>,
    /// Reuse connections.
    pub keepalive: bool,
    /// TCP_NODELAY on client sockets.
    pub nodelay: bool,
    /// TCP_QUICKACK after every read.
    pub quickack: bool,
    /// Write the request header and body separately.
    pub split_writes: bool,
    /// Which certificates an https server may present.
    pub trust: Trust,
    /// A fixed number of requests (ab's `-n`): the run ends when they are done
    /// (completed or failed), or at `duration`. A request sent on a new
    /// connection then counts from the connect's start, as ab counts.
    pub requests: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            url: String::new(),
            threads: 2,
            connections: 10,
            duration: Duration::from_secs(10),
            timeout: Duration::from_secs(2),
            method: "GET".into(),
            headers: Vec::new(),
            body: Vec::new(),
            rate: None,
            keepalive: true,
            nodelay: true,
            quickack: false,
            split_writes: false,
            trust: Trust::System,
            requests: None,
        }
    }
}

/// Why a run gave no report, or no report worth a number; the message says
/// what to change.
#[derive(Debug)]
pub enum BenchError {
    /// The options or the URL cannot be used as written.
    Usage(String),
    /// The run could not start: the host does not resolve, too few open files.
    Start(String),
    /// The run started but measured nothing it can stand behind: why.
    NotMeasured(String),
    /// The server's TLS certificate was refused: why, in words (no retry fixes it).
    Certificate(String),
}

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BenchError::Usage(m) | BenchError::Start(m) | BenchError::NotMeasured(m) | BenchError::Certificate(m) => {
                f.write_str(m)
            }
        }
    }
}

impl std::error::Error for BenchError {}

/// A validated run.
#[derive(Debug)]
pub(crate) struct Config {
    pub(super) url: String,
    pub(super) addr: SocketAddr,
    pub(super) threads: usize,
    pub(super) connections: usize,
    pub(super) duration: Duration,
    pub(super) timeout: Duration,
    pub(super) request: http::Request,
    pub(super) method: String,
    pub(super) rate: Option<f64>,
    pub(super) keepalive: bool,
    pub(super) nodelay: bool,
    pub(super) quickack: bool,
    pub(super) split_writes: bool,
    /// TLS, for an https URL.
    pub(super) tls: Option<Target>,
    /// The host as written in the URL (for certificate messages).
    pub(super) host: String,
    /// Width of one point of latency over time (1 s, or longer to keep ≤ 600 points).
    pub(super) step: Duration,
    /// `-n`: how many requests in all.
    pub(super) requests: Option<u64>,
    /// `-n`: requests handed out so far (to connections of every worker).
    pub(super) issued: std::sync::atomic::AtomicU64,
    pub(super) notes: Vec<String>,
}

/// A URL as bench and diagnose use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// `https://`: the connection speaks TLS.
    pub https: bool,
    /// `host[:port]` as written (the Host header).
    pub authority: String,
    /// The host, without brackets for IPv6.
    pub host: String,
    /// The port (80 or 443 when none is written).
    pub port: u16,
    /// The path and query, starting with `/`.
    pub path: String,
}

/// Splits `http[s]://host[:port][/path]`.
pub fn split_url(url: &str) -> Result<Url, BenchError> {
    let bad = |why: &str| BenchError::Usage(format!("URL {url:?}: {why} (expected http[s]://HOST[:PORT][/PATH])"));
    let (https, rest) = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => (false, rest),
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => (true, rest),
        Some(_) => return Err(bad("unknown scheme")),
        None => (false, url),
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    if authority.is_empty() {
        return Err(bad("no host"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, tail) = v6.split_once(']').ok_or_else(|| bad("unclosed ["))?;
        (h, tail.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    let port = match port.map(str::parse::<u16>) {
        Some(Ok(0)) => return Err(bad("port 0 cannot be connected to (a port is 1 to 65535)")),
        Some(Ok(p)) => p,
        Some(Err(_)) => return Err(bad("bad port (a port is 1 to 65535)")),
        None if https => 443,
        None => 80,
    };
    if path.contains(|c: char| c.is_ascii_control() || c == ' ') {
        return Err(bad("the path has a space or a control character (percent-encode it)"));
    }
    Ok(Url { https, authority: authority.to_string(), host: host.to_string(), port, path })
}

/// A character HTTP allows in a method or a header name (RFC 9110 `tchar`).
fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

const TOKEN_CHARS: &str = "letters, digits and !#$%&'*+-.^_`|~";

/// Checks a request method; returns it in capitals (`post` means POST).
pub fn check_method(m: &str) -> Result<String, String> {
    if m.is_empty() {
        return Err("the method is empty (e.g. GET, POST)".into());
    }
    if !m.bytes().all(is_token_char) {
        return Err(format!("`{m}` is not an HTTP method ({TOKEN_CHARS} only)"));
    }
    Ok(m.to_ascii_uppercase())
}

/// Checks a `Name: value` header line.
pub fn check_header(h: &str) -> Result<(), String> {
    let Some((name, value)) = h.split_once(':') else {
        return Err(format!("`{h}`: no colon; a header is 'Name: value'"));
    };
    if name.is_empty() {
        return Err(format!("`{h}`: the header name before ':' is empty; a header is 'Name: value'"));
    }
    if !name.bytes().all(is_token_char) {
        return Err(format!("`{h}`: the header name `{name}` may hold {TOKEN_CHARS} only (no spaces)"));
    }
    if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
        return Err(format!("`{}`: the value has a line break or another control character", h.escape_debug()));
    }
    Ok(())
}

/// Checks a `-R` rate.
pub fn check_rate(r: f64) -> Result<f64, String> {
    if r.is_finite() && r > 0.0 {
        Ok(r)
    } else {
        Err("the rate must be a positive, finite number of requests/s".into())
    }
}

impl Config {
    /// Checks the options and resolves the host.
    pub(crate) fn new(o: &Options) -> Result<Config, BenchError> {
        let usage = |m: String| BenchError::Usage(m);
        let Url { https, authority, host, port, path } = split_url(&o.url)?;
        if o.connections == 0 {
            return Err(usage("-c must be at least 1".into()));
        }
        if o.threads == 0 {
            return Err(usage("-t must be at least 1".into()));
        }
        if o.requests == Some(0) {
            return Err(usage("-n must be at least 1".into()));
        }
        if o.duration.is_zero() || o.timeout.is_zero() {
            return Err(usage("-d and --timeout must be longer than 0".into()));
        }
        if let Some(r) = o.rate {
            check_rate(r).map_err(|e| usage(format!("-R {r}: {e}")))?;
        }
        if o.split_writes && o.body.is_empty() {
            return Err(usage(
                "--split-writes writes the request header, then the body: give a body with --body or --body-file"
                    .into(),
            ));
        }
        let method = check_method(&o.method).map_err(|e| usage(format!("--method: {e}")))?;
        for h in &o.headers {
            check_header(h).map_err(|e| usage(format!("-H {e}")))?;
        }
        let addr = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| BenchError::Start(format!("URL {:?}: cannot resolve {host}: {e}", o.url)))?
            .next()
            .ok_or_else(|| BenchError::Start(format!("URL {:?}: {host} has no address", o.url)))?;
        let mut notes = Vec::new();
        let threads = if o.threads > o.connections {
            notes.push(format!(
                "{} threads for {} connections: using {} threads",
                o.threads, o.connections, o.connections
            ));
            o.connections
        } else {
            o.threads
        };
        let request = http::Request::new(&method, &authority, &path, &o.headers, &o.body, !o.keepalive);
        let tls = match https {
            true => Some(Target::new(&host, &o.trust).map_err(|e| BenchError::Start(format!("URL {:?}: {e}", o.url)))?),
            false => None,
        };
        Ok(Config {
            url: o.url.clone(),
            addr,
            threads,
            connections: o.connections,
            duration: o.duration,
            timeout: o.timeout,
            request,
            method,
            rate: o.rate,
            keepalive: o.keepalive,
            nodelay: o.nodelay,
            quickack: o.quickack,
            split_writes: o.split_writes,
            tls,
            host,
            step: (o.duration / 600).max(Duration::from_secs(1)),
            requests: o.requests,
            issued: std::sync::atomic::AtomicU64::new(0),
            notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = split_url("http://127.0.0.1:8080/a/b?c").unwrap();
        let want = |https, a: &str, h: &str, port, p: &str| Url {
            https,
            authority: a.into(),
            host: h.into(),
            port,
            path: p.into(),
        };
        assert_eq!(u, want(false, "127.0.0.1:8080", "127.0.0.1", 8080, "/a/b?c"));
        assert_eq!(split_url("http://[::1]/").unwrap(), want(false, "[::1]", "::1", 80, "/"));
        assert_eq!(split_url("localhost:81?x=1").unwrap(), want(false, "localhost:81", "localhost", 81, "/?x=1"));
        assert_eq!(split_url("HTTPS://example.test/x").unwrap(), want(true, "example.test", "example.test", 443, "/x"));
        assert_eq!(split_url("https://[::1]:8443").unwrap(), want(true, "[::1]:8443", "::1", 8443, "/"));
        let err = |u: &str| split_url(u).unwrap_err().to_string();
        assert!(err("ftp://x/").contains("unknown scheme"));
        assert!(err("http://x:0/").contains("port 0"));
        assert!(err("http://x:99999/").contains("bad port"));
        assert!(err("http://:80/").contains("no host"));
        assert!(err("http://x/a b").contains("space"));
        assert!(matches!(split_url("http:///"), Err(BenchError::Usage(_))));
    }

    #[test]
    fn methods_and_headers_are_http_tokens() {
        assert_eq!(check_method("post").unwrap(), "POST");
        assert_eq!(check_method("M-SEARCH").unwrap(), "M-SEARCH");
        assert!(check_method("").unwrap_err().contains("empty"));
        assert!(check_method("GET /").is_err());
        assert!(check_method("G\u{e9}T").is_err());
        assert!(check_header("Accept: */*").is_ok());
        assert!(check_header("X-Empty:").is_ok());
        assert!(check_header("no colon").unwrap_err().contains("no colon"));
        assert!(check_header(": v").unwrap_err().contains("empty"));
        assert!(check_header("Bad Name: v").unwrap_err().contains("no spaces"));
        assert!(check_header("A: b\r\nEvil: 1").unwrap_err().contains("line break"));
        assert!(check_rate(0.0).is_err() && check_rate(-1.0).is_err() && check_rate(f64::NAN).is_err());
        assert!(check_rate(f64::INFINITY).is_err() && check_rate(0.5).is_ok());
    }

    #[test]
    fn options_are_checked() {
        let o = |f: &dyn Fn(&mut Options)| {
            let mut o = Options { url: "http://127.0.0.1:1/".into(), ..Options::default() };
            f(&mut o);
            Config::new(&o)
        };
        assert!(o(&|_| {}).is_ok());
        assert!(matches!(o(&|o| o.connections = 0), Err(BenchError::Usage(_))));
        assert!(matches!(o(&|o| o.threads = 0), Err(BenchError::Usage(_))));
        assert!(o(&|o| o.split_writes = true).unwrap_err().to_string().contains("--body"));
        assert!(matches!(o(&|o| o.rate = Some(0.0)), Err(BenchError::Usage(_))));
        assert!(matches!(o(&|o| o.headers = vec!["no colon".into()]), Err(BenchError::Usage(_))));
        assert!(matches!(o(&|o| o.method = String::new()), Err(BenchError::Usage(_))));
        let c = o(&|o| {
            o.threads = 8;
            o.connections = 3
        })
        .unwrap();
        assert_eq!(c.threads, 3);
        assert_eq!(c.notes.len(), 1);
    }
}
