#!/usr/bin/env python3
"""Keep-alive HTTPS server for tcpdoctor's rtt captures: each response is
written as TWO ssl writes (the header block, then the body), so it leaves as
two TLS records; TCP_NODELAY stays off (Nagle on), then it reads the next
request: write-write-read over TLS. Exits after --max-seconds.

Usage: tls_server.py --host H --port P --cert CERT --key KEY
"""
import argparse, os, socket, ssl, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lab"))
from httpmsg import read_message, serve  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--host", required=True)
p.add_argument("--port", type=int, required=True)
p.add_argument("--cert", required=True)
p.add_argument("--key", required=True)
p.add_argument("--body-size", type=int, default=600)
p.add_argument("--max-seconds", type=float, default=60.0)
a = p.parse_args()

ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(a.cert, a.key)
BODY = b"y" * a.body_size
HEAD = (b"HTTP/1.1 200 OK\r\nServer: rtt-tls-lab\r\nContent-Type: text/plain\r\n"
        b"Content-Length: %d\r\nConnection: keep-alive\r\n\r\n" % len(BODY))


def handle(raw):
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
    try:
        conn = ctx.wrap_socket(raw, server_side=True)
        buf = b""
        while True:
            req, buf = read_message(conn, buf)
            if req is None:
                break
            conn.sendall(HEAD)   # record 1
            conn.sendall(BODY)   # record 2: held by Nagle until record 1 is ACKed
    except (OSError, ssl.SSLError):
        pass
    finally:
        raw.close()


serve(a.host, a.port, handle, a.max_seconds, "listening %s:%d tls nodelay=False" % (a.host, a.port))
