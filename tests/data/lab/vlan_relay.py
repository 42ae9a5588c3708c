#!/usr/bin/env python3
"""User-space 802.1Q "trunk" relay (this kernel has no 8021q/bridge modules).

  vlan_relay.py ACCESS1 TRUNK1 TRUNK2 ACCESS2 VID MAX_SECONDS

Copies Ethernet frames ACCESS1 -> TRUNK1 pushing an 802.1Q tag (VID) and
TRUNK1 -> ACCESS1 popping it; likewise ACCESS2 <-> TRUNK2.  TRUNK1 and TRUNK2
are the two ends of one veth pair, so everything that crosses the trunk is
tagged and a tcpdump on TRUNK1/TRUNK2 shows real 802.1Q frames.  IPv4 TCP/UDP
checksums are recomputed on the way in (veth hands over CHECKSUM_PARTIAL
frames whose checksum field is not final).  Runs at most MAX_SECONDS.
"""
import socket, select, struct, sys, time

a1, t1, t2, a2, vid, maxs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6])
ETH_P_ALL = 3
PACKET_OUTGOING = 4


def sock(ifname):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((ifname, 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    return s


def csum(b):
    if len(b) & 1:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def fix_l4(frame, off):
    """Recompute the TCP/UDP checksum of the IPv4 packet at frame[off:]."""
    if len(frame) < off + 20 or struct.unpack("!H", frame[off - 2:off])[0] != 0x0800:
        return frame
    ihl = (frame[off] & 0x0F) * 4
    tot = struct.unpack("!H", frame[off + 2:off + 4])[0]
    proto = frame[off + 9]
    if proto not in (6, 17) or struct.unpack("!H", frame[off + 6:off + 8])[0] & 0x3FFF:
        return frame
    l4 = bytearray(frame[off + ihl:off + tot])
    cpos = 16 if proto == 6 else 6
    if len(l4) < cpos + 2:
        return frame
    l4[cpos:cpos + 2] = b"\0\0"
    pseudo = frame[off + 12:off + 20] + struct.pack("!BBH", 0, proto, len(l4))
    c = csum(bytes(pseudo) + bytes(l4))
    if proto == 17 and c == 0:
        c = 0xFFFF
    l4[cpos:cpos + 2] = struct.pack("!H", c)
    return frame[:off + ihl] + bytes(l4) + frame[off + tot:]


def push(frame):
    frame = fix_l4(frame, 14)
    return frame[:12] + struct.pack("!HH", 0x8100, vid & 0x0FFF) + frame[12:]


def pop(frame):
    # the receiving kernel usually has already moved the tag into skb
    # metadata (skb_vlan_untag) before AF_PACKET sees the frame
    if len(frame) >= 18 and frame[12:14] == b"\x81\x00":
        return frame[:12] + frame[16:]
    return frame


socks = {n: sock(n) for n in (a1, t1, t2, a2)}
route = {a1: (t1, push), t1: (a1, pop), a2: (t2, push), t2: (a2, pop)}
byfd = {s.fileno(): n for n, s in socks.items()}
print("relay up", flush=True)
deadline = time.time() + maxs
while time.time() < deadline:
    r, _, _ = select.select(list(socks.values()), [], [], 0.5)
    for s in r:
        name = byfd[s.fileno()]
        data, addr = s.recvfrom(65535)
        if addr[2] == PACKET_OUTGOING:
            continue
        dst, fn = route[name]
        out = fn(data)
        if out is not None:
            socks[dst].send(out)
