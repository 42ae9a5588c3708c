//! The fix for a Nagle + delayed-ACK stall, in the words of the server
//! software that has it.

/// Server software, as far as it can be told from the process or the
/// `Server:` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Software {
    /// nginx (`tcp_nodelay`).
    Nginx,
    /// The JDK's built-in `com.sun.net.httpserver`.
    JdkHttpServer,
    /// Another Java server.
    Java,
    /// Python (`http.server`, `socketserver`, raw sockets).
    Python,
    /// Node.js.
    Node,
    /// Go (`net` sets TCP_NODELAY by default).
    Go,
    /// Rust (std, tokio, hyper: Nagle on unless `set_nodelay(true)`).
    Rust,
    /// tcpdoctor's own lab server.
    Lab,
    /// Unknown.
    Other,
}

impl Software {
    /// From an inspected process's kind (`nginx`, `jdk-httpserver`, …).
    pub fn from_kind(kind: &str) -> Software {
        match kind {
            "nginx" => Software::Nginx,
            "jdk-httpserver" => Software::JdkHttpServer,
            "java" => Software::Java,
            "python" => Software::Python,
            "node" => Software::Node,
            "go" => Software::Go,
            "rust" => Software::Rust,
            "tcpdoctor-lab" => Software::Lab,
            _ => Software::Other,
        }
    }

    /// From an HTTP `Server:` header.
    pub fn from_header(h: &str) -> Software {
        let h = h.to_ascii_lowercase();
        if h.starts_with("nginx") || h.starts_with("openresty") {
            Software::Nginx
        } else if h.starts_with("tcpdoctor-lab") {
            Software::Lab
        } else if h.contains("python") || h.starts_with("basehttp") || h.starts_with("simplehttp") {
            Software::Python
        } else if h.starts_with("jetty") || h.contains("tomcat") || h.contains("java") {
            Software::Java
        } else if h.contains("hyper") || h.contains("actix") || h.contains("axum") {
            Software::Rust
        } else {
            Software::Other
        }
    }

    /// Name for sentences.
    pub fn name(self) -> &'static str {
        match self {
            Software::Nginx => "nginx",
            Software::JdkHttpServer => "the JDK's com.sun.net.httpserver",
            Software::Java => "a Java server",
            Software::Python => "Python",
            Software::Node => "Node.js",
            Software::Go => "Go",
            Software::Rust => "Rust",
            Software::Lab => "tcpdoctor's lab server",
            Software::Other => "the server",
        }
    }
}

/// How to turn Nagle off in this software.
pub fn server_nodelay(sw: Software) -> &'static str {
    match sw {
        Software::Nginx => {
            "nginx: `tcp_nodelay on;` (the default) in the http, server or location block; find the `tcp_nodelay off` with `nginx -T | grep tcp_nodelay`, then `nginx -s reload`."
        }
        Software::JdkHttpServer => {
            "JDK com.sun.net.httpserver: start the JVM with `-Dsun.net.httpserver.nodelay=true` (its default is false)."
        }
        Software::Java => {
            "Java: `socket.setTcpNoDelay(true)` on every accepted Socket (or the framework's tcpNoDelay option)."
        }
        Software::Python => {
            "Python http.server / socketserver: `disable_nagle_algorithm = True` on the request handler class; plain sockets: `sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)`."
        }
        Software::Node => "Node.js: `socket.setNoDelay(true)` on net sockets (`http.createServer({ noDelay: true })`).",
        Software::Go => "Go: net sets TCP_NODELAY by default; look for a `SetNoDelay(false)` in the code.",
        Software::Rust => "Rust: `stream.set_nodelay(true)` on every accepted TcpStream (std, tokio, hyper).",
        Software::Lab => {
            "tcpdoctor lab: this is the reproduction server; its `nodelay` twin shows the fixed behaviour."
        }
        Software::Other => {
            "Set TCP_NODELAY on the server's sockets. Where it is off by default: JDK com.sun.net.httpserver `-Dsun.net.httpserver.nodelay=true`; Java `socket.setTcpNoDelay(true)`; Python `disable_nagle_algorithm = True` or `setsockopt(IPPROTO_TCP, TCP_NODELAY, 1)`; Node net `socket.setNoDelay(true)`; Rust `set_nodelay(true)`; nginx `tcp_nodelay on;`."
        }
    }
}

/// The whole fix list for a server-side Nagle stall, most direct first.
pub fn for_server_nagle(sw: Software, server: &str, client: &str) -> Vec<String> {
    let mut v = vec![server_nodelay(sw).to_string()];
    if sw != Software::Other {
        v.push(format!(
            "Any server ({server}): TCP_NODELAY on its sockets: `setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, 1)`."
        ));
    }
    v.push(
        "Better still: write each response in one call (writev/sendmsg, or one buffered flush), so no small second segment waits."
            .into(),
    );
    v.push(workaround(client));
    v
}

/// The fix list when the response travels as TLS records: the same knob
/// first, then what the software does over TLS, and one record per response.
pub fn for_tls_server_nagle(sw: Software, server: &str, client: &str) -> Vec<String> {
    let mut v = for_server_nagle(sw, server, client);
    if let Some(t) = over_tls(sw) {
        v.insert(1, t.to_string());
    }
    if let Some(better) = v.iter_mut().find(|f| f.starts_with("Better still")) {
        *better = "Better still: hand each response to TLS in one write (header and body together: one SSL_write, one record), so no small second record waits."
            .into();
    }
    v
}

/// Where the software's TLS layer splits a response, and its knob there.
fn over_tls(sw: Software) -> Option<&'static str> {
    Some(match sw {
        Software::Nginx => {
            "nginx over TLS: a response goes out in records of `ssl_buffer_size` (default 16k), each written at once, so one larger than that is several writes; with `tcp_nodelay on;` none waits. Changing `ssl_buffer_size` only moves the split (4k gives a faster first byte, with tcp_nodelay on)."
        }
        Software::JdkHttpServer => {
            "JDK HttpsServer: the same `-Dsun.net.httpserver.nodelay=true` covers HTTPS (sendResponseHeaders sends the headers as one TLS record, the body follows in another)."
        }
        Software::Java => "Java over TLS: `setTcpNoDelay(true)` on the SSLSocket (or on the socket it is layered on).",
        Software::Python => {
            "Python ssl: TCP_NODELAY is set on the socket under the SSLSocket, before or after `wrap_socket` (`sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)`; http.server's `disable_nagle_algorithm = True` works over ssl too); or `sendall(header + body)` once: one record."
        }
        Software::Node => {
            "Node.js https: `https.createServer({ noDelay: true }, …)` (the default since v18), or `socket.setNoDelay(true)` on the TLSSocket."
        }
        Software::Go => {
            "Go crypto/tls: the TCP connection under tls.Conn has TCP_NODELAY on by default; look for `SetNoDelay(false)` on it."
        }
        Software::Rust => "Rust TLS (rustls, native-tls): `set_nodelay(true)` on the TcpStream before wrapping it.",
        Software::Lab | Software::Other => return None,
    })
}

/// What the delayed-ACK side can do when the Nagle side cannot be changed.
pub fn workaround(ack_side: &str) -> String {
    format!(
        "Only hides it: on {ack_side} (the delayed-ACK side), TCP_QUICKACK after every read, or `ip route change ROUTE quickack 1`."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_from_headers_and_kinds() {
        assert_eq!(Software::from_header("nginx/1.22.1"), Software::Nginx);
        assert_eq!(Software::from_header("SimpleHTTP/0.6 Python/3.11.7"), Software::Python);
        assert_eq!(Software::from_header("BaseHTTP/0.6 Python/3.11.7"), Software::Python);
        assert_eq!(Software::from_header("tcpdoctor-lab/0.1.0 (nagle)"), Software::Lab);
        assert_eq!(Software::from_header("Jetty(9.4)"), Software::Java);
        assert_eq!(Software::from_header("Apache"), Software::Other);
        assert_eq!(Software::from_kind("jdk-httpserver"), Software::JdkHttpServer);
        assert_eq!(Software::from_kind("go"), Software::Go);
    }

    #[test]
    fn fixes_name_the_knob() {
        let f = for_server_nagle(Software::JdkHttpServer, "127.0.0.1:8080", "10.0.0.1");
        assert!(f[0].contains("-Dsun.net.httpserver.nodelay=true"));
        assert!(f.last().unwrap().contains("quickack"));
        assert!(for_server_nagle(Software::Nginx, "s", "c")[0].contains("tcp_nodelay on;"));
        assert_eq!(for_server_nagle(Software::Other, "s", "c").len(), 3);
    }

    #[test]
    fn tls_fixes_name_the_record_split() {
        let f = for_tls_server_nagle(Software::Nginx, "s", "c");
        assert!(f[0].contains("tcp_nodelay on;") && f[1].contains("ssl_buffer_size"), "{f:#?}");
        assert!(f.iter().any(|x| x.contains("one SSL_write, one record")), "{f:#?}");
        let f = for_tls_server_nagle(Software::Python, "s", "c");
        assert!(f[1].contains("wrap_socket"), "{f:#?}");
        assert!(for_tls_server_nagle(Software::JdkHttpServer, "s", "c")[1].contains("HttpsServer"));
        assert!(for_tls_server_nagle(Software::Node, "s", "c")[1].contains("https.createServer"));
        assert!(for_tls_server_nagle(Software::Go, "s", "c")[1].contains("crypto/tls"));
        assert_eq!(for_tls_server_nagle(Software::Other, "s", "c").len(), 3);
    }
}
