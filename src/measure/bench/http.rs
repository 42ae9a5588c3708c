//! HTTP/1.1 on the client side: the request bytes, built once, and a
//! streaming response reader that only finds where each response ends.

/// Response heads larger than this are treated as malformed.
const MAX_HEAD: usize = 64 * 1024;
/// Most header lines parsed in a response head.
const MAX_HEADERS: usize = 64;

/// The request a benchmark sends, built once.
#[derive(Clone, Debug)]
pub struct Request {
    /// Request line and headers, ending with the empty line.
    pub head: Vec<u8>,
    /// Body (may be empty).
    pub body: Vec<u8>,
    /// Whole request (`head` + `body`), for the single write.
    pub whole: Vec<u8>,
    /// A HEAD request: responses carry no body whatever their headers say.
    pub is_head: bool,
}

impl Request {
    /// Builds the request. `host` is the Host header value; `headers` are
    /// `Name: value` lines given by the user (a user Host replaces ours).
    pub fn new(method: &str, host: &str, path: &str, headers: &[String], body: &[u8], close: bool) -> Request {
        let mut head = format!("{method} {path} HTTP/1.1\r\n");
        let has = |name: &str| {
            headers.iter().any(|h| h.split(':').next().is_some_and(|n| n.trim().eq_ignore_ascii_case(name)))
        };
        if !has("host") {
            head.push_str(&format!("Host: {host}\r\n"));
        }
        for h in headers {
            head.push_str(h.trim());
            head.push_str("\r\n");
        }
        if (!body.is_empty() || method.eq_ignore_ascii_case("POST") || method.eq_ignore_ascii_case("PUT"))
            && !has("content-length")
        {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        if close && !has("connection") {
            head.push_str("Connection: close\r\n");
        }
        head.push_str("\r\n");
        let head = head.into_bytes();
        let mut whole = head.clone();
        whole.extend_from_slice(body);
        Request { head, body: body.to_vec(), whole, is_head: method.eq_ignore_ascii_case("HEAD") }
    }
}

/// Why a response could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// The head is not HTTP (httparse's verdict).
    Head,
    /// The head is larger than 64 KiB.
    HeadTooLarge,
    /// A bad chunk size line or chunk terminator.
    Chunk,
    /// Bytes arrived after a complete response, before any request asked for them.
    Unsolicited,
    /// A Content-Length that is not a number.
    Length,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Malformed::Head => "response head is not HTTP",
            Malformed::HeadTooLarge => "response head larger than 64 KiB",
            Malformed::Chunk => "bad chunked encoding",
            Malformed::Unsolicited => "bytes after a complete response",
            Malformed::Length => "bad Content-Length",
        })
    }
}

/// A response that has been read to its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// Status code.
    pub status: u16,
    /// Whether the connection may carry another request.
    pub keep_alive: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    /// Reading hex digits of a size line.
    Size { size: u64, digits: u8 },
    /// Skipping a chunk extension up to LF.
    Ext { size: u64 },
    /// Reading chunk data.
    Data { left: u64 },
    /// Expecting CR after data.
    DataCr,
    /// Expecting LF after data.
    DataLf,
    /// At the start of a trailer line (an empty one ends the body).
    TrailerStart,
    /// Expecting LF of the empty line that ends the body.
    TrailerEndLf,
    /// Inside a trailer line.
    Trailer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Body {
    /// Still reading the head.
    Head,
    /// `left` bytes of a Content-Length body to go.
    Length { left: u64 },
    /// A chunked body.
    Chunked(Chunk),
    /// The body ends when the server closes the connection.
    UntilClose,
}

/// Reads one response at a time from the bytes a connection receives.
#[derive(Debug)]
pub struct Reader {
    body: Body,
    head: Vec<u8>,
    status: u16,
    keep_alive: bool,
    /// Bytes of the current response seen so far.
    started: bool,
}

/// What one call to [`Reader::feed`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Fed {
    /// The response is not complete yet; all bytes were used.
    More,
    /// The response ended after `used` bytes of the input.
    Done(Done, usize),
}

impl Default for Reader {
    fn default() -> Self {
        Reader { body: Body::Head, head: Vec::with_capacity(1024), status: 0, keep_alive: false, started: false }
    }
}

impl Reader {
    /// Forgets any partial response (after a reconnect).
    pub fn reset(&mut self) {
        self.body = Body::Head;
        self.head.clear();
        self.started = false;
    }

    /// Whether any byte of the current response has arrived.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Feeds received bytes. `head_request` says the request was HEAD.
    pub fn feed(&mut self, mut input: &[u8], head_request: bool) -> Result<Fed, Malformed> {
        let total = input.len();
        if !input.is_empty() {
            self.started = true;
        }
        loop {
            match self.body {
                Body::Head => {
                    let used = match self.parse_head(input, head_request)? {
                        Some(used) => used,
                        None => return Ok(Fed::More),
                    };
                    input = &input[used..];
                }
                Body::Length { left } => {
                    let take = (input.len() as u64).min(left);
                    input = &input[take as usize..];
                    if take == left {
                        return Ok(self.finish(total - input.len()));
                    }
                    self.body = Body::Length { left: left - take };
                    return Ok(Fed::More);
                }
                Body::Chunked(state) => {
                    let (state, used) = chunked(state, input)?;
                    input = &input[used..];
                    match state {
                        Some(s) => {
                            self.body = Body::Chunked(s);
                            return Ok(Fed::More);
                        }
                        None => return Ok(self.finish(total - input.len())),
                    }
                }
                Body::UntilClose => return Ok(Fed::More),
            }
            if matches!(self.body, Body::Head) && input.is_empty() {
                return Ok(Fed::More);
            }
        }
    }

    /// The server closed the connection: completes a response whose body
    /// runs until close; `None` if a response was cut short.
    pub fn eof(&mut self) -> Option<Done> {
        if self.body == Body::UntilClose {
            self.body = Body::Head;
            self.started = false;
            return Some(Done { status: self.status, keep_alive: false });
        }
        None
    }

    fn finish(&mut self, used: usize) -> Fed {
        self.body = Body::Head;
        self.head.clear();
        self.started = false;
        Fed::Done(Done { status: self.status, keep_alive: self.keep_alive }, used)
    }

    /// Parses the head from `input` (plus bytes kept from earlier reads).
    /// Returns the bytes of `input` used, or `None` when more are needed.
    fn parse_head(&mut self, input: &[u8], head_request: bool) -> Result<Option<usize>, Malformed> {
        // Fast path: the whole head is in this read, nothing kept.
        let kept = self.head.len();
        let buf: &[u8] = if kept == 0 {
            input
        } else {
            self.head.extend_from_slice(input);
            &self.head
        };
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        let n = match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                if buf.len() > MAX_HEAD {
                    return Err(Malformed::HeadTooLarge);
                }
                if kept == 0 {
                    self.head.extend_from_slice(input);
                }
                return Ok(None);
            }
            Err(_) => return Err(Malformed::Head),
        };
        let status = resp.code.unwrap_or(0);
        let http10 = resp.version == Some(0);
        let (mut length, mut chunked, mut close, mut keep) = (None, false, false, false);
        for h in resp.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let v = std::str::from_utf8(h.value).ok().and_then(|s| s.trim().parse::<u64>().ok());
                length = Some(v.ok_or(Malformed::Length)?);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = h.value.split(|&b| b == b',').next_back().is_some_and(|t| t.trim_ascii() == b"chunked");
            } else if h.name.eq_ignore_ascii_case("connection") {
                for t in h.value.split(|&b| b == b',') {
                    close |= t.trim_ascii().eq_ignore_ascii_case(b"close");
                    keep |= t.trim_ascii().eq_ignore_ascii_case(b"keep-alive");
                }
            }
        }
        let used = n - kept;
        self.head.clear();
        if (100..200).contains(&status) {
            // An interim response (100 Continue): the real one follows.
            return Ok(Some(used));
        }
        self.status = status;
        self.keep_alive = if http10 { keep && !close } else { !close };
        self.body = if head_request || status == 204 || status == 304 {
            Body::Length { left: 0 }
        } else if chunked {
            Body::Chunked(Chunk::Size { size: 0, digits: 0 })
        } else if let Some(left) = length {
            Body::Length { left }
        } else {
            self.keep_alive = false;
            Body::UntilClose
        };
        Ok(Some(used))
    }
}

/// Advances the chunked-body state over `input`; `None` state = body done.
fn chunked(mut s: Chunk, input: &[u8]) -> Result<(Option<Chunk>, usize), Malformed> {
    let mut i = 0;
    while i < input.len() {
        let b = input[i];
        s = match s {
            Chunk::Size { size, digits } => match (b as char).to_digit(16) {
                Some(d) if digits < 15 => Chunk::Size { size: size * 16 + u64::from(d), digits: digits + 1 },
                Some(_) => return Err(Malformed::Chunk),
                None if digits == 0 => return Err(Malformed::Chunk),
                None if b == b';' || b == b' ' || b == b'\t' || b == b'\r' => Chunk::Ext { size },
                None if b == b'\n' => after_size(size),
                None => return Err(Malformed::Chunk),
            },
            Chunk::Ext { size } => {
                if b == b'\n' {
                    after_size(size)
                } else {
                    Chunk::Ext { size }
                }
            }
            Chunk::Data { left } => {
                let take = ((input.len() - i) as u64).min(left);
                i += take as usize;
                s = if take == left { Chunk::DataCr } else { Chunk::Data { left: left - take } };
                continue;
            }
            Chunk::DataCr if b == b'\r' => Chunk::DataLf,
            Chunk::DataLf | Chunk::DataCr if b == b'\n' => Chunk::Size { size: 0, digits: 0 },
            Chunk::DataCr | Chunk::DataLf => return Err(Malformed::Chunk),
            Chunk::TrailerStart if b == b'\r' => Chunk::TrailerEndLf,
            Chunk::TrailerStart | Chunk::TrailerEndLf if b == b'\n' => return Ok((None, i + 1)),
            Chunk::TrailerEndLf => return Err(Malformed::Chunk),
            Chunk::TrailerStart | Chunk::Trailer => {
                if b == b'\n' {
                    Chunk::TrailerStart
                } else {
                    Chunk::Trailer
                }
            }
        };
        i += 1;
    }
    Ok((Some(s), i))
}

fn after_size(size: u64) -> Chunk {
    if size == 0 { Chunk::TrailerStart } else { Chunk::Data { left: size } }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `bytes` cut into pieces of `step`, returns the responses found.
    fn read_all(bytes: &[u8], step: usize, head_req: bool) -> Result<Vec<Done>, Malformed> {
        let mut r = Reader::default();
        let mut out = Vec::new();
        for piece in bytes.chunks(step) {
            let mut p = piece;
            while !p.is_empty() {
                match r.feed(p, head_req)? {
                    Fed::More => break,
                    Fed::Done(d, used) => {
                        out.push(d);
                        p = &p[used..];
                    }
                }
            }
        }
        if let Some(d) = r.eof() {
            out.push(d);
        }
        Ok(out)
    }

    const KA: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
    const CHUNKED: &[u8] =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n";

    #[test]
    fn content_length_and_chunked_at_every_split() {
        let mut two = KA.to_vec();
        two.extend_from_slice(CHUNKED);
        two.extend_from_slice(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        for step in 1..=two.len() {
            let got = read_all(&two, step, false).unwrap();
            assert_eq!(
                got,
                vec![
                    Done { status: 200, keep_alive: true },
                    Done { status: 200, keep_alive: true },
                    Done { status: 404, keep_alive: false }
                ],
                "step {step}"
            );
        }
    }

    #[test]
    fn http10_and_close_delimited() {
        let r = read_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", 7, false).unwrap();
        assert_eq!(r, vec![Done { status: 200, keep_alive: false }]);
        let r = read_all(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi", 3, false);
        assert_eq!(r.unwrap(), vec![Done { status: 200, keep_alive: true }]);
        // No length: the body runs to the close.
        let r = read_all(b"HTTP/1.1 200 OK\r\n\r\nsome body bytes", 4, false).unwrap();
        assert_eq!(r, vec![Done { status: 200, keep_alive: false }]);
        // Cut short: no response.
        let mut rd = Reader::default();
        assert_eq!(rd.feed(&KA[..KA.len() - 1], false), Ok(Fed::More));
        assert_eq!(rd.eof(), None);
    }

    #[test]
    fn interim_head_and_no_body_statuses() {
        let r = read_all(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", 1, false).unwrap();
        assert_eq!(r, vec![Done { status: 204, keep_alive: true }]);
        let r = read_all(b"HTTP/1.1 200 OK\r\nContent-Length: 900\r\n\r\n", 5, true).unwrap();
        assert_eq!(r, vec![Done { status: 200, keep_alive: true }]);
    }

    #[test]
    fn garbage_is_malformed() {
        assert_eq!(read_all(b"\x16\x03\x01\x02\x00garbage\r\n\r\n", 3, false), Err(Malformed::Head));
        let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert_eq!(read_all(bad, 100, false), Err(Malformed::Chunk));
        let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n";
        assert_eq!(read_all(bad, 1, false), Err(Malformed::Chunk));
        let bad = b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n";
        assert_eq!(read_all(bad, 100, false), Err(Malformed::Length));
        let huge = [b"HTTP/1.1 200 OK\r\nX: ".as_slice(), &[b'a'; 70_000]].concat();
        assert_eq!(read_all(&huge, 4096, false), Err(Malformed::HeadTooLarge));
        let long = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1234567890ABCDEF0\r\n";
        assert_eq!(read_all(long, 100, false), Err(Malformed::Chunk));
    }

    #[test]
    fn request_bytes() {
        let r = Request::new("GET", "127.0.0.1:8080", "/x?y=1", &["X-A: b".into()], b"", false);
        assert_eq!(r.whole, b"GET /x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nX-A: b\r\n\r\n");
        let r = Request::new("POST", "h", "/", &["host: other".into()], b"abc", true);
        assert_eq!(r.head, b"POST / HTTP/1.1\r\nhost: other\r\nContent-Length: 3\r\nConnection: close\r\n\r\n");
        assert_eq!(r.whole.len(), r.head.len() + 3);
    }
}
