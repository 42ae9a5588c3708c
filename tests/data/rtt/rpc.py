#!/usr/bin/env python3
"""A length-prefixed RPC (not HTTP) for tcpdoctor's rtt captures.

  rpc.py server --host H --port P   answers each request at once, in ONE
                                    write: 4-byte big-endian length, payload
  rpc.py client --host H --port P -n N
                                    one connection, N requests, each written
                                    as TWO writes (the 4-byte length, then a
                                    200-byte payload) with TCP_NODELAY off:
                                    the client is the Nagle side
"""
import argparse, os, socket, struct, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lab"))
from httpmsg import serve  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("role", choices=["server", "client"])
p.add_argument("--host", required=True)
p.add_argument("--port", type=int, required=True)
p.add_argument("-n", type=int, default=30)
p.add_argument("--size", type=int, default=200)
p.add_argument("--max-seconds", type=float, default=60.0)
a = p.parse_args()


def read_exact(s, n):
    buf = b""
    while len(buf) < n:
        d = s.recv(n - len(buf))
        if not d:
            return None
        buf += d
    return buf


def read_frame(s):
    head = read_exact(s, 4)
    if head is None:
        return None
    return read_exact(s, struct.unpack(">I", head)[0])


def handle(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
    try:
        while True:
            req = read_frame(c)
            if req is None:
                break
            answer = b"ok:" + req[:61]
            c.sendall(struct.pack(">I", len(answer)) + answer)
    except OSError:
        pass
    finally:
        c.close()


if a.role == "server":
    serve(a.host, a.port, handle, a.max_seconds, "listening %s:%d rpc" % (a.host, a.port))
else:
    s = socket.create_connection((a.host, a.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
    lat = []
    for i in range(a.n):
        payload = (b"call %d " % i).ljust(a.size, b"p")
        t = time.time()
        s.sendall(struct.pack(">I", len(payload)))  # write 1: the length
        s.sendall(payload)                          # write 2: held until write 1 is ACKed
        if read_frame(s) is None:
            sys.exit("server closed")
        lat.append((time.time() - t) * 1000)
    s.close()
    print("requests=%d lat_ms=%s" % (len(lat), " ".join("%.1f" % x for x in lat)), flush=True)
