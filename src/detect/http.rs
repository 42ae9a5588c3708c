//! Just enough HTTP/1 reading to name the server software in advice.

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

#[cfg(test)]
mod tests {
    use super::*;

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
