#!/usr/bin/env python3
"""Keep-alive HTTP/1.1 server that never answers `Expect: 100-continue`: it
reads the header block, then waits for the whole body (Content-Length), then
answers 200 in one write (TCP_NODELAY on, so nothing of its own is held).
A client that sent `Expect: 100-continue` waits for a 100 that never comes
(curl: 1 s) before it sends the body. Exits after --max-seconds.
"""
import argparse, os, socket, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lab"))
from httpmsg import read_message, serve  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--host", required=True)
p.add_argument("--port", type=int, required=True)
p.add_argument("--max-seconds", type=float, default=60.0)
a = p.parse_args()
BODY = b"stored\n"


def handle(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    try:
        while True:
            head, buf = read_message(c, buf)  # header and body, whatever Expect says
            if head is None:
                break
            c.sendall(b"HTTP/1.1 200 OK\r\nServer: rtt-expect-lab\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)
    except OSError:
        pass
    finally:
        c.close()


serve(a.host, a.port, handle, a.max_seconds, "listening %s:%d expect-100 never answered" % (a.host, a.port))
