"""Reads one HTTP/1.1 message (head + Content-Length body) from a socket.
Shared by the lab client and server."""


def read_message(sock, buf):
    """Return (head, rest_after_message), or (None, buf) if the peer closed."""
    while b"\r\n\r\n" not in buf:
        d = sock.recv(65536)
        if not d:
            return None, buf
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    clen = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            clen = int(v.strip())
    while len(rest) < clen:
        d = sock.recv(65536)
        if not d:
            return None, rest
        rest += d
    return head, rest[clen:]


def serve(host, port, handle, max_seconds, banner, backlog=16):
    """Accept connections on host:port for max_seconds, one thread each."""
    import socket, threading, time
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(backlog)
    s.settimeout(0.2)
    deadline = time.time() + max_seconds
    print(banner, flush=True)
    while time.time() < deadline:
        try:
            c, _ = s.accept()
        except socket.timeout:
            continue
        threading.Thread(target=handle, args=(c,), daemon=True).start()
    s.close()
