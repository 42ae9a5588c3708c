#!/usr/bin/env python3
"""split_by_connection.py IN.pcap OUT0.pcap OUT1.pcap: writes the records of
IN (classic pcap, little-endian, Ethernet + IPv4 + TCP, as
bench/make_big_capture.sh makes it) to two files, each connection whole in
one of them, the connections dealt so that the two hold as many packets as
can be (the busiest first, each to the lighter file). For
bench/analyze_split_ceiling.sh: two analyses of the halves side by side are the
most two cores can give one file's analysis, with no record read twice."""
import collections
import struct
import sys


def records(d):
    """(offset, record bytes, connection key) of each record."""
    pos = 24
    while pos + 16 <= len(d):
        caplen = struct.unpack_from("<I", d, pos + 8)[0]
        frame = d[pos + 16:pos + 16 + caplen]
        key = None
        if len(frame) >= 38 and frame[12:14] == b"\x08\x00" and frame[23] == 6:
            ihl = (frame[14] & 15) * 4
            if len(frame) >= 14 + ihl + 4:
                sp, dp = struct.unpack_from(">HH", frame, 14 + ihl)
                a, b = (frame[26:30], sp), (frame[30:34], dp)
                key = (min(a, b), max(a, b))
        yield pos, pos + 16 + caplen, key
        pos += 16 + caplen


def main():
    src, out0, out1 = sys.argv[1:4]
    d = open(src, "rb").read()
    if d[:4] != b"\xd4\xc3\xb2\xa1":
        sys.exit(f"{src}: not a little-endian microsecond pcap")
    count = collections.Counter(key for _, _, key in records(d))
    side, load = {}, [0, 0]
    for key, n in count.most_common():
        i = 0 if load[0] <= load[1] else 1
        side[key] = i
        load[i] += n
    outs = [open(out0, "wb"), open(out1, "wb")]
    for f in outs:
        f.write(d[:24])
    for start, end, key in records(d):
        outs[side[key]].write(d[start:end])
    print(f"{len(count)} connections, packets {load[0]} + {load[1]}")


main()
