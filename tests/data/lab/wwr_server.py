#!/usr/bin/env python3
"""Tiny keep-alive HTTP/1.1 test server for tcpdoctor captures.

Modes:
  wwr    - answer each request with TWO send() calls (headers, then body),
           then read the next request (write-write-read: Nagle+delayed-ACK bait)
  single - answer with ONE send() (headers+body)
  think  - sleep --think-ms, then answer with ONE send()
  pause  - send the headers, sleep --think-ms, then send the body (an
           application pausing mid-response; with --nodelay, not Nagle)

TCP_NODELAY is OFF unless --nodelay is given.  With --tls CERT KEY it speaks
HTTPS (Python's ssl module): each send() is then one TLS record, so wwr
sends header and body as two records.  With --answer-connections N,
connections after the first N are accepted and read but never answered (a
server that stops answering).  Exits after --max-seconds.
"""
import argparse, itertools, socket, time

from httpmsg import read_message, serve

p = argparse.ArgumentParser()
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", type=int, required=True)
p.add_argument("--mode", choices=["wwr", "single", "think", "pause"], default="wwr")
p.add_argument("--nodelay", action="store_true")
p.add_argument("--body-size", type=int, default=600)
p.add_argument("--think-ms", type=float, default=45.0)
p.add_argument("--max-seconds", type=float, default=60.0)
p.add_argument("--server", default="wwr-lab", help="the Server header's value (bytes as given, control characters too)")
p.add_argument("--answer-connections", type=int, default=0, help="0: all")
p.add_argument("--nagle-after", type=int, default=0,
               help="with --nodelay: connections accepted after this many keep Nagle on (0: none)")
p.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"), help="speak HTTPS with this PEM certificate and key")
a = p.parse_args()
TLS = None
if a.tls:
    import ssl
    TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    TLS.load_cert_chain(a.tls[0], a.tls[1])
    TLS.set_alpn_protocols(["http/1.1"])
SERVER = a.server.encode("utf-8", "surrogateescape")
ACCEPTED = itertools.count(1)

BODY = (b"<html><body>" + b"x" * max(0, a.body_size - 27) + b"</body></html>\n")[: a.body_size]


def headers(n):
    return (b"HTTP/1.1 200 OK\r\nServer: " + SERVER + b"\r\nContent-Type: text/html\r\n"
            b"Content-Length: %d\r\nConnection: keep-alive\r\n\r\n" % n)


def read_request(conn, buf):
    """Return (request_head, rest) or (None, buf) on EOF."""
    return read_message(conn, buf)


def handle(conn):
    n = next(ACCEPTED)
    nodelay = a.nodelay and (a.nagle_after == 0 or n <= a.nagle_after)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if nodelay else 0)
    answer = a.answer_connections == 0 or n <= a.answer_connections
    buf = b""
    try:
        if TLS:
            conn.settimeout(10)
            conn = TLS.wrap_socket(conn, server_side=True)
        while True:
            req, buf = read_request(conn, buf)
            if req is None:
                break
            if not answer:
                continue
            if a.mode == "wwr":
                conn.sendall(headers(len(BODY)))
                conn.sendall(BODY)
            elif a.mode == "pause":
                conn.sendall(headers(len(BODY)))
                time.sleep(a.think_ms / 1000.0)
                conn.sendall(BODY)
            elif a.mode == "single":
                conn.sendall(headers(len(BODY)) + BODY)
            else:
                time.sleep(a.think_ms / 1000.0)
                conn.sendall(headers(len(BODY)) + BODY)
            if b"connection: close" in req.lower():
                break
    except OSError:
        pass
    finally:
        conn.close()


def main():
    serve(a.host, a.port, handle, a.max_seconds,
          "listening %s:%d mode=%s nodelay=%s" % (a.host, a.port, a.mode, a.nodelay))


if __name__ == "__main__":
    main()
