#!/usr/bin/env python3
"""Counts, with tshark, the server data segments a loss timer released.

A server data segment (not flagged as a retransmission by tshark) that comes
at least 190 ms after the server's previous data segment, with no client
segment acknowledging that previous one in between, was sent by the server's
tail-loss probe: the ACK that would have released it was lost before the
capture point (or the previous segment was). Read at the server's end of the
path. Prints "TIMER_GAPS RESPONSES RETRANSMISSIONS" (responses = runs of
server data; retransmissions = data segments tshark flags, either side).
Usage: timer_gaps.py FILE SERVER_PORT
"""
import subprocess, sys

f, port = sys.argv[1], sys.argv[2]
fields = ["frame.time_epoch", "tcp.srcport", "tcp.seq_raw", "tcp.ack_raw", "tcp.len", "tcp.analysis.retransmission",
          "tcp.analysis.fast_retransmission", "tcp.analysis.spurious_retransmission"]
cmd = ["tshark", "-n", "-r", f, "-Y", "tcp", "-T", "fields", "-E", "separator=|", "-E", "occurrence=f"]
for x in fields:
    cmd += ["-e", x]
out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout

gaps = responses = resent = 0
prev = None           # (time, end seq) of the server's last new data segment
acked = False         # the client acknowledged it since
last_from_server = False
for line in out.splitlines():
    t, sport, seq, ack, ln, r1, r2, r3 = line.split("|")
    t, seq, ack, ln = float(t), int(seq or 0), int(ack or 0), int(ln or 0)
    rtx = bool(r1 or r2 or r3)
    resent += rtx and ln > 0
    if sport == port:
        if ln == 0 or rtx:
            continue
        if not last_from_server:
            responses += 1
        last_from_server = True
        if prev and not acked and t - prev[0] >= 0.190 and seq == prev[1]:
            gaps += 1
        prev, acked = (t, (seq + ln) % 2**32), False
    else:
        if prev and ack and (ack - prev[1]) % 2**32 < 2**31:
            acked = True
        if ln > 0:
            last_from_server = False
print(gaps, responses, resent)
