//! Just enough HTTP/1 reading to name the server software in advice and to
//! see a request that waits for `100 Continue`.

/// The `Server:` header value of an HTTP/1 response head, if the captured
/// payload holds it.
pub fn server_header(payload: &[u8]) -> Option<&str> {
    if !payload.starts_with(b"HTTP/1.") {
        return None;
    }
    let head = &payload[..payload.len().min(2048)];
    let mut lines =
        head.split(|&b| b == b'\n').skip(1).map(|l| l.strip_suffix(b"\r").unwrap_or(l)).take_while(|l| !l.is_empty()); // the head ends at the blank line
    lines.find_map(|line| {
        let (name, value) = line.split_at(line.iter().position(|&b| b == b':')?);
        if !name.eq_ignore_ascii_case(b"server") {
            return None;
        }
        let v = std::str::from_utf8(&value[1..]).ok()?.trim();
        (!v.is_empty()).then_some(v)
    })
}

/// Bytes of a request's first segment searched for its head.
const HEAD_MAX: usize = 8192;

/// Length of an HTTP/1 request head that asks `Expect: 100-continue`, when
/// the payload holds the whole head (within its first 8 KiB).
pub fn expect_continue(payload: &[u8]) -> Option<usize> {
    let head = &payload[..payload.len().min(HEAD_MAX)];
    let len = head.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let mut lines = head[..len - 4].split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let request_line = lines.next()?;
    if !request_line.first().is_some_and(u8::is_ascii_uppercase) || !request_line.ends_with(b" HTTP/1.1") {
        return None;
    }
    let asks = lines.any(|line| {
        let Some(colon) = line.iter().position(|&b| b == b':') else { return false };
        line[..colon].eq_ignore_ascii_case(b"expect")
            && line[colon + 1..].trim_ascii().eq_ignore_ascii_case(b"100-continue")
    });
    asks.then_some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_expect_100_continue_in_a_whole_request_head() {
        let head = b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nexpect:  100-Continue \r\n\r\n";
        assert_eq!(expect_continue(head), Some(head.len()));
        let mut with_body = head.to_vec();
        with_body.extend_from_slice(b"hello");
        assert_eq!(expect_continue(&with_body), Some(head.len()));
        // Not asked, not whole, not a request, or after the head.
        assert_eq!(expect_continue(b"POST / HTTP/1.1\r\nExpect:\r\n\r\n"), None);
        assert_eq!(expect_continue(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\n"), None);
        assert_eq!(expect_continue(b"HTTP/1.1 100 Continue\r\nExpect: 100-continue\r\n\r\n"), None);
        assert_eq!(expect_continue(b"POST / HTTP/1.1\r\n\r\nExpect: 100-continue\r\n\r\n"), None);
    }

    #[test]
    fn finds_the_server_header() {
        let r = b"HTTP/1.1 200 OK\r\nDate: x\r\nserver: nginx/1.22.1\r\n\r\nbody";
        assert_eq!(server_header(r), Some("nginx/1.22.1"));
        assert_eq!(server_header(b"HTTP/1.1 200 OK\r\nDate: x\r\n\r\nServer: no"), None);
        assert_eq!(server_header(b"GET / HTTP/1.1\r\nServer: x\r\n"), None);
        assert_eq!(
            server_header(b"HTTP/1.0 200 OK\r\nServer: BaseHTTP/0.6 Python/3.11.7\r"),
            Some("BaseHTTP/0.6 Python/3.11.7")
        );
    }
}
