#!/usr/bin/env python3
"""Keep-alive HTTP/1.1 test client for tcpdoctor captures.

Sends -n requests on ONE connection (or --conns connections in sequence),
waits for each full response (Content-Length) before sending the next.
  default      GET, request sent with ONE send(); TCP_NODELAY off (irrelevant)
  --post-split POST sent as TWO send() calls (headers, then body), TCP_NODELAY
               OFF -> the client is the Nagle side.
Bounded by --timeout seconds overall.
"""
import argparse, socket, sys, time

from httpmsg import read_message

p = argparse.ArgumentParser()
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", type=int, required=True)
p.add_argument("-n", type=int, default=30)
p.add_argument("--conns", type=int, default=1)
p.add_argument("--post-split", action="store_true")
p.add_argument("--post-size", type=int, default=300)
p.add_argument("--nodelay", action="store_true")
p.add_argument("--timeout", type=float, default=30.0)
p.add_argument("--connect-timeout", type=float, default=5.0)
p.add_argument("--rcvbuf", type=int, default=0, help="SO_RCVBUF before connect (small: the window closes)")
p.add_argument("--read-delay-ms", type=float, default=0.0, help="sleep after sending each request before reading")
a = p.parse_args()

deadline = time.time() + a.timeout


def read_response(s, buf):
    head, rest = read_message(s, buf)
    if head is None:
        raise EOFError("server closed")
    return rest


def one_conn(nreq):
    fam = socket.AF_INET6 if ":" in a.host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if a.nodelay else 0)
    if a.rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, a.rcvbuf)
    s.settimeout(a.connect_timeout)
    t0 = time.time()
    s.connect((a.host, a.port))
    print("connect %.1f ms" % ((time.time() - t0) * 1000), flush=True)
    s.settimeout(max(1.0, deadline - time.time()))
    hosthdr = a.host if ":" not in a.host else "[%s]" % a.host
    buf = b""
    lat = []
    for i in range(nreq):
        if time.time() > deadline:
            break
        t = time.time()
        if a.post_split:
            body = b"k=" + b"v" * (a.post_size - 2)
            hdr = (b"POST /submit HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                   b"Content-Length: %d\r\nConnection: keep-alive\r\n\r\n" % (hosthdr.encode(), a.port, len(body)))
            s.sendall(hdr)
            s.sendall(body)
        else:
            s.sendall(b"GET /r%d HTTP/1.1\r\nHost: %s:%d\r\nConnection: keep-alive\r\n\r\n" % (i, hosthdr.encode(), a.port))
        if a.read_delay_ms:
            time.sleep(a.read_delay_ms / 1000.0)
        buf = read_response(s, buf)
        lat.append((time.time() - t) * 1000)
    s.close()
    return lat


all_lat = []
for c in range(a.conns):
    if time.time() > deadline:
        break
    all_lat += one_conn(a.n)
slow = sum(1 for x in all_lat if x > 30)
print("requests=%d slow(>30ms)=%d lat_ms=%s" % (len(all_lat), slow, " ".join("%.1f" % x for x in all_lat)), flush=True)
