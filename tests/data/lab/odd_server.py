#!/usr/bin/env python3
"""HTTP servers that misbehave (or speak less common HTTP), for bench tests.

Modes:
  silent   - accept, read requests, never answer
  reset    - answer with half a response, then reset the connection (RST)
  garbage  - answer every request with bytes that are not HTTP
  chunked  - keep-alive, chunked responses written in several pieces
  http10   - HTTP/1.0: no Content-Length, body ends when the server closes

Exits after --max-seconds.
"""
import argparse, socket, struct, time

from httpmsg import read_message, serve

p = argparse.ArgumentParser()
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", type=int, required=True)
p.add_argument("--mode", choices=["silent", "reset", "garbage", "chunked", "http10"], required=True)
p.add_argument("--max-seconds", type=float, default=30.0)
a = p.parse_args()


def handle(conn):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    try:
        while True:
            req, buf = read_message(conn, buf)
            if req is None:
                break
            if a.mode == "silent":
                continue
            if a.mode == "reset":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
                time.sleep(0.005)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                break
            if a.mode == "garbage":
                conn.sendall(b"\x00\xffSSH-2.0-not-http\r\n\r\n")
                continue
            if a.mode == "chunked":
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                conn.sendall(b"5\r\nhello\r\n")
                conn.sendall(b"6;ext=1\r\n world\r\n0\r\n\r\n")
                continue
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nbody until close")
            break
    except OSError:
        pass
    finally:
        conn.close()


serve(a.host, a.port, handle, a.max_seconds, "listening %s:%d mode=%s" % (a.host, a.port, a.mode), backlog=128)
