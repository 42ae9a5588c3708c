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

/// Whether the payload starts with an HTTP/1.1 request line (`METHOD target HTTP/1.1`).
pub fn is_request(payload: &[u8]) -> bool {
    let line = payload.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    payload.len() > line.len() && line.first().is_some_and(u8::is_ascii_uppercase) && line.ends_with(b" HTTP/1.1")
}

/// Whether a request's first segment, cut by the snap length to `payload`,
/// kept too little to read its request line: nothing, or text with no line
/// break yet, unless its first letter already makes it a GET or HEAD (no
/// body, nothing to wait for). (A TLS record starts with a byte below `A`:
/// its own reader says what it could read.)
#[cold]
pub fn head_unread(payload: &[u8]) -> bool {
    match payload.first() {
        None => true,
        Some(b'G' | b'H') => false,
        Some(b) => b.is_ascii_uppercase() && !payload.contains(&b'\n'),
    }
}

/// Whether a request's first segment (`wire_len` bytes, of which `payload`
/// was captured) is a head that may wait for `100 Continue` before its body:
/// `Some(true)` when the head is whole, asks `Expect: 100-continue` and
/// nothing follows it in the segment; `Some(false)` when the capture's snap
/// length cut the head before its end and the lines seen do not rule it out
/// (the header may be among the lines cut off); `None` otherwise.
pub fn expect_continue(payload: &[u8], wire_len: u32) -> Option<bool> {
    // Most requests carry no body: skip them without reading further (this runs on every request).
    if payload.starts_with(b"GET ") || payload.starts_with(b"HEAD ") || !is_request(payload) {
        return None;
    }
    let head = &payload[..payload.len().min(HEAD_MAX)];
    let end = head.windows(4).position(|w| w == b"\r\n\r\n");
    let cut = end.is_none() && payload.len() < wire_len as usize && payload.len() < HEAD_MAX;
    if end.is_none() && !cut {
        return None;
    }
    // The whole lines: up to the blank line, or up to the last line break captured.
    let upto = end.unwrap_or_else(|| head.iter().rposition(|&b| b == b'\n').unwrap_or(0));
    let mut asks = false;
    for line in head[..upto].split(|&b| b == b'\n').skip(1).map(|l| l.strip_suffix(b"\r").unwrap_or(l)) {
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"expect") {
            asks = value.eq_ignore_ascii_case(b"100-continue");
            if !asks {
                return None;
            }
        }
        if name.eq_ignore_ascii_case(b"content-length") && value == b"0" {
            return None; // no body to wait for
        }
    }
    match end {
        Some(e) if asks && e + 4 >= wire_len as usize => Some(true),
        Some(_) => None,
        None => Some(asks),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_cut_before_its_request_line_ends_is_unread() {
        assert!(head_unread(b""));
        assert!(head_unread(b"PO"));
        assert!(head_unread(b"POST /upload HTTP/1."));
        assert!(!head_unread(b"POST /upload HTTP/1.1\r\nHo"), "the line is whole");
        assert!(!head_unread(b"GE"), "a GET has no body to wait for");
        assert!(!head_unread(b"HE"));
        assert!(!head_unread(&[0x16, 0x03, 0x01]), "TLS");
    }

    #[test]
    fn finds_expect_100_continue_in_a_whole_request_head() {
        let head = b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nexpect:  100-Continue \r\n\r\n";
        let n = head.len() as u32;
        assert_eq!(expect_continue(head, n), Some(true));
        // The body in the same segment: nothing waits.
        assert_eq!(expect_continue(head, n + 5), None);
        // Not asked, empty, not a request, after the head.
        assert_eq!(expect_continue(b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\n", 40), None);
        assert_eq!(expect_continue(b"POST / HTTP/1.1\r\nExpect:\r\n\r\n", 29), None);
        assert_eq!(expect_continue(b"HTTP/1.1 100 Continue\r\nExpect: 100-continue\r\n\r\n", 48), None);
        assert_eq!(expect_continue(b"POST / HTTP/1.1\r\n\r\nExpect: 100-continue\r\n\r\n", 45), None);
    }

    /// curl's head cut at 134 bytes by `tcpdump -s 200`: its `Expect:` (the
    /// last line) is not captured, but nothing seen rules it out.
    #[test]
    fn a_head_cut_by_the_snap_length_may_ask() {
        let head = b"POST /upload HTTP/1.1\r\nHost: 198.18.0.2:8080\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\nContent-Length: 4000\r\nContent-Type: application/x-www-for";
        assert_eq!(expect_continue(head, 174), Some(false));
        // Cut after the header itself: seen.
        assert_eq!(expect_continue(b"PUT /f HTTP/1.1\r\nExpect: 100-continue\r\nHost: h", 80), Some(true));
        // Cut, but no body or another Expect: ruled out. Whole but short of 8 KiB with no end: not a head.
        assert_eq!(expect_continue(b"PUT /f HTTP/1.1\r\nContent-Length: 0\r\nHo", 80), None);
        assert_eq!(expect_continue(b"PUT /f HTTP/1.1\r\nExpect: nothing\r\nHo", 80), None);
        assert_eq!(expect_continue(b"PUT /f HTTP/1.1\r\nHost: h\r\n", 25), None);
        assert!(is_request(b"GET / HTTP/1.1\r\n") && !is_request(b"GET / HTTP/1.1") && !is_request(b"\x16\x03\x01"));
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
