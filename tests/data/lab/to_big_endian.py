#!/usr/bin/env python3
"""Rewrite a little-endian classic pcap (usec or nsec magic) as big-endian.

Only the global header and the 16-byte record headers are byte-swapped; packet
bytes are copied unchanged (fine for Ethernet/raw/SLL link types, whose
headers are network byte order).  Usage: to_big_endian.py IN.pcap OUT.pcap
"""
import struct, sys

src, dst = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
magic = struct.unpack("<I", data[:4])[0]
if magic not in (0xA1B2C3D4, 0xA1B23C4D):
    sys.exit("input is not a little-endian pcap (magic %08x)" % magic)
vmaj, vmin, tz, sigfigs, snaplen, network = struct.unpack("<HHiIII", data[4:24])
if network == 0:
    sys.exit("DLT_NULL has a host-order header in the payload; not supported")
out = [struct.pack(">IHHiIII", magic, vmaj, vmin, tz, sigfigs, snaplen, network)]
off, n = 24, 0
while off + 16 <= len(data):
    s, frac, incl, orig = struct.unpack("<IIII", data[off:off + 16])
    out.append(struct.pack(">IIII", s, frac, incl, orig))
    out.append(data[off + 16:off + 16 + incl])
    off += 16 + incl
    n += 1
if off != len(data):
    sys.exit("trailing garbage at offset %d" % off)
open(dst, "wb").write(b"".join(out))
print("%s: %d packets, big-endian" % (dst, n))
