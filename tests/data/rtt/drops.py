#!/usr/bin/env python3
"""What the bridge dropped in loss_nagle, by kind, with the frame number of
each dropped frame in the capture taken at its sender (a frame is captured
on the sender's TAP before the bridge drops it; the receiver never sees it).

Usage: drops.py [DIR]   (reads DIR/loss_nagle.drops, loss_nagle_client.pcap
                         and loss_nagle.pcap; needs tshark)
"""
import collections, os, subprocess, sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
HEADER, BODY = 106, 600  # the lab server's header block and body


def packets(f):
    out = subprocess.run(["tshark", "-n", "-r", os.path.join(d, f), "-T", "fields", "-e", "frame.number",
                          "-e", "frame.time_epoch", "-e", "tcp.srcport", "-e", "tcp.seq_raw", "-e", "tcp.ack_raw",
                          "-e", "tcp.len"], capture_output=True, text=True, check=True).stdout
    return [(int(n), float(t), int(p), int(s), int(a), int(l)) for n, t, p, s, a, l in
            (line.split("\t") for line in out.splitlines())]


at = {"client->server": packets("loss_nagle_client.pcap"), "server->client": packets("loss_nagle.pcap")}
kinds = collections.OrderedDict()
for line in open(os.path.join(d, "loss_nagle.drops")):
    w = line.split()
    t, way = float(w[0]), w[1]
    seq, ack, ln = int(w[w.index("seq") + 1]), int(w[w.index("ack") + 1]), int(w[-1])
    pk = at[way]
    frame = next((p[0] for p in pk if (p[3], p[4], p[5]) == (seq, ack, ln) and abs(p[1] - t) < 0.01), None)
    if way == "server->client":
        kind = {HEADER: "response header", BODY: "response body"}.get(ln, "server data (%d B)" % ln)
    elif ln > 0:
        kind = "request"
    else:
        # The ACK that would have released a held body: it acknowledges exactly a header block.
        before = [p for p in pk if frame is not None and p[0] < frame and p[2] != pk[0][2] and p[5] > 0]
        released = before and before[-1][5] == HEADER and (before[-1][3] + HEADER) % 2**32 == ack
        kind = "delayed ACK of a header (the held body waits for it)" if released else "other ACK"
    kinds.setdefault((way, kind), []).append(frame)
for (way, kind), frames in kinds.items():
    print("%s %s: %d, frames %s" % (way, kind, len(frames), " ".join(str(f) for f in frames)))
