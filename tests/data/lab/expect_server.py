#!/usr/bin/env python3
"""Keep-alive HTTP/1.1 upload server for the Expect: 100-continue case.

Reads each request head; when it carries `Expect: 100-continue`, answers
`100 Continue` at once with --continue, or never (the client waits for its own
timeout, curl: 1 s). Then reads the Content-Length body and answers 200 with a
short body in one write, TCP_NODELAY on (no Nagle in this case). Prints
"listening" when ready; exits after --max-seconds.
"""
import argparse, socket

from httpmsg import serve

p = argparse.ArgumentParser()
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", type=int, required=True)
p.add_argument("--continue", dest="cont", action="store_true", help="answer 100 Continue")
p.add_argument("--max-seconds", type=float, default=60.0)
a = p.parse_args()


def handle(conn):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                d = conn.recv(65536)
                if not d:
                    return
                buf += d
            head, buf = buf.split(b"\r\n\r\n", 1)
            clen, expect = 0, False
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                k, v = k.strip().lower(), v.strip().lower()
                if k == b"content-length":
                    clen = int(v)
                elif k == b"expect" and v == b"100-continue":
                    expect = True
            if expect and a.cont:
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            while len(buf) < clen:
                d = conn.recv(65536)
                if not d:
                    return
                buf += d
            buf = buf[clen:]
            body = b"got %d bytes\n" % clen
            conn.sendall(b"HTTP/1.1 200 OK\r\nServer: expect-lab\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    except OSError:
        pass
    finally:
        conn.close()


serve(a.host, a.port, handle, a.max_seconds, "listening")
