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
