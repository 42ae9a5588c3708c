#!/usr/bin/env python3
"""TLS 1.3 client for tls/make.sh: two keep-alive connections to HOST:PORT
with SNI NAME; the second resumes the first's session (a ticket). Each GET is
one write; the next only after the whole response. Prints one line per
connection: how many requests, and whether the session was resumed."""
import socket, ssl, sys, os

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lab"))
from httpmsg import read_message  # noqa: E402

host, port, name, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
session = None
for conn in range(2):
    raw = socket.create_connection((host, port), timeout=10)
    s = ctx.wrap_socket(raw, server_hostname=name, session=session)
    buf = b""
    for i in range(n):
        s.sendall(b"GET /c%dr%d HTTP/1.1\r\nHost: %s\r\n\r\n" % (conn, i, name.encode()))
        head, buf = read_message(s, buf)
        assert head and head.startswith(b"HTTP/1.1 200"), head
    session = s.session
    print("connection %d: %d requests, resumed=%s" % (conn + 1, n, s.session_reused), flush=True)
    s.close()
