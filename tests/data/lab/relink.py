#!/usr/bin/env python3
"""Rewrite the link layer of an Ethernet (DLT_EN10MB) little-endian pcap.

  relink.py null IN OUT   -> LINKTYPE_NULL (0): 4-byte AF family in the
                             file's (host, little-endian) byte order:
                             AF_INET=2, AF_INET6=30 (BSD/macOS value)
  relink.py raw  IN OUT   -> LINKTYPE_RAW (101): bare IPv4/IPv6 packet
Only untagged Ethernet frames carrying IPv4/IPv6 are kept.
"""
import struct, sys

mode, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
data = open(src, "rb").read()
magic = struct.unpack("<I", data[:4])[0]
if magic not in (0xA1B2C3D4, 0xA1B23C4D):
    sys.exit("input is not a little-endian pcap")
vmaj, vmin, tz, sigfigs, snaplen, network = struct.unpack("<HHiIII", data[4:24])
if network != 1:
    sys.exit("input link type %d is not Ethernet" % network)
newlt = {"null": 0, "raw": 101}[mode]
hdrlen = 4 if mode == "null" else 0
out = [struct.pack("<IHHiIII", magic, vmaj, vmin, tz, sigfigs, snaplen, newlt)]
off, n = 24, 0
while off + 16 <= len(data):
    s, frac, incl, orig = struct.unpack("<IIII", data[off:off + 16])
    pkt = data[off + 16:off + 16 + incl]
    off += 16 + incl
    if len(pkt) < 14:
        continue
    etype = struct.unpack(">H", pkt[12:14])[0]
    if etype == 0x0800:
        af = 2
    elif etype == 0x86DD:
        af = 30
    else:
        continue
    body = pkt[14:]
    lh = struct.pack("<I", af) if mode == "null" else b""
    out.append(struct.pack("<IIII", s, frac, len(body) + hdrlen, orig - 14 + hdrlen))
    out.append(lh + body)
    n += 1
open(dst, "wb").write(b"".join(out))
print("%s: %d packets, linktype %d" % (dst, n, newlt))
