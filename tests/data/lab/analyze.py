#!/usr/bin/env python3
"""Independent (tshark-based) stall counter used to write EXPECTED.md.

For every TCP connection it reports, per direction (sender endpoint):
  responses   - number of data "bursts" (runs of data segments from one side)
  nagle       - Nagle+delayed-ACK stalls: sender A sent data d1, the peer B
                answered with a PURE ACK covering d1 more than 30 ms later (no
                data from B in between), and A's next new data segment
                followed that ACK within 5 ms
  retrans     - data segments that start below the highest sequence number
                already seen from that side, or that tshark flags as
                retransmission (SYNs counted separately)
  syn_retrans - retransmitted SYNs
and per connection: app_gaps - data from a side > 30 ms after the previous
packet of the peer that was data (request->response think time).
Usage: analyze.py FILE [--verbose] [--json]
"""
import subprocess, sys, collections

f = sys.argv[1]
verbose = "--verbose" in sys.argv
fields = ["frame.number", "frame.time_epoch", "tcp.stream", "ip.src", "ipv6.src",
          "tcp.srcport", "ip.dst", "ipv6.dst", "tcp.dstport", "tcp.len",
          "tcp.flags.syn", "tcp.flags.ack", "tcp.flags.fin", "tcp.flags.reset", "tcp.seq_raw", "tcp.ack_raw",
          "tcp.analysis.retransmission", "tcp.analysis.fast_retransmission",
          "tcp.analysis.spurious_retransmission"]
cmd = ["tshark", "-n", "-r", f, "-Y", "tcp", "-T", "fields", "-E", "separator=|", "-E", "occurrence=f"]
for x in fields:
    cmd += ["-e", x]
out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout

conns = collections.OrderedDict()
for line in out.splitlines():
    v = line.split("|")
    d = dict(zip(fields, v))
    src = (d["ip.src"] or d["ipv6.src"])
    dst = (d["ip.dst"] or d["ipv6.dst"])
    fmt = lambda a, p: ("[%s]:%s" % (a, p)) if ":" in a else ("%s:%s" % (a, p))
    pkt = dict(no=int(d["frame.number"]), t=float(d["frame.time_epoch"]),
               src=fmt(src, d["tcp.srcport"]), dst=fmt(dst, d["tcp.dstport"]),
               len=int(d["tcp.len"] or 0), syn=d["tcp.flags.syn"] in ("1", "True"),
               ackf=d["tcp.flags.ack"] in ("1", "True"), fin=d["tcp.flags.fin"] in ("1", "True"),
               rst=d["tcp.flags.reset"] in ("1", "True"),
               seq=int(d["tcp.seq_raw"] or 0), ack=int(d["tcp.ack_raw"] or 0),
               rtx=bool(d["tcp.analysis.retransmission"] or d["tcp.analysis.fast_retransmission"]
                        or d["tcp.analysis.spurious_retransmission"]))
    conns.setdefault(d["tcp.stream"], []).append(pkt)

tot = collections.Counter()
as_json = "--json" in sys.argv
jout = []
for sid, pk in conns.items():
    syn = next((p for p in pk if p["syn"] and not p["ackf"]), None)
    client = syn["src"] if syn else pk[0]["src"]
    server = syn["dst"] if syn else pk[0]["dst"]
    stats = {client: collections.Counter(), server: collections.Counter()}
    examples = []
    synseen = set()
    last_data = {}          # endpoint -> last data pkt
    prev_pkt_from = None
    last_data_src = None
    high = {}
    for i, p in enumerate(pk):
        s = stats.setdefault(p["src"], collections.Counter())
        if p["syn"]:
            key = (p["src"], p["seq"])
            if key in synseen:
                s["syn_retrans"] += 1
                examples.append("syn retrans frame %d" % p["no"])
            synseen.add(key)
            continue
        if p["len"] > 0:
            hi = high.get(p["src"])
            end = p["seq"] + p["len"]
            if hi is not None and (hi - p["seq"]) % (1 << 32) < (1 << 31) and hi != p["seq"]:
                p["rtx"] = True      # starts below the highest byte already seen
            if hi is None or (end - hi) % (1 << 32) < (1 << 31):
                high[p["src"]] = end
            if p["rtx"]:
                s["retrans"] += 1
                pr = last_data.get(p["src"])
                examples.append("retrans frame %d from %s seq_raw %d len %d (%.1f ms after previous data from it)"
                                % (p["no"], p["src"], p["seq"], p["len"], (p["t"] - pr["t"]) * 1000 if pr else 0))
            if last_data_src != p["src"]:
                s["responses"] += 1
                pd = last_data.get(p["dst"])
                if pd is not None and p["t"] - pd["t"] > 0.030 and not p["rtx"]:
                    s["slow_bursts"] += 1
            last_data_src = p["src"]
            prev_pkt_from = ("data", p["src"])
            last_data[p["src"]] = p
        elif not (p["fin"] or p["rst"]):
            # pure ACK from p["src"] ; check nagle pattern for the peer
            peer = p["dst"]
            d1 = last_data.get(peer)
            if d1 is None or prev_pkt_from != ("data", peer):
                continue
            if p["t"] - d1["t"] <= 0.030:
                continue
            if (p["ack"] - (d1["seq"] + d1["len"])) % (1 << 32) > (1 << 31):
                continue   # does not cover d1
            # next packet from peer must be new data soon after
            nxt = next((q for q in pk[i + 1:] if q["src"] == peer), None)
            if nxt and nxt["len"] > 0 and not nxt["rtx"] and nxt["t"] - p["t"] < 0.005:
                # and no data from p["src"] in between
                between = [q for q in pk[i + 1:] if q["no"] < nxt["no"] and q["src"] == p["src"] and q["len"] > 0]
                if not between:
                    stats[peer]["nagle"] += 1
                    examples.append("nagle stall: %s data frame %d -> late ack frame %d (+%.1f ms) -> data frame %d (+%.3f ms)"
                                    % (peer, d1["no"], p["no"], (p["t"] - d1["t"]) * 1000, nxt["no"], (nxt["t"] - p["t"]) * 1000))
            prev_pkt_from = ("ack", p["src"])
    if as_json:
        jout.append({"stream": int(sid), "client": client, "server": server, "packets": len(pk),
                     "endpoints": {ep: {k: v for k, v in stats.get(ep, {}).items()} for ep in (client, server)},
                     "examples": examples})
        continue
    print("stream %s  client %s  server %s  packets %d" % (sid, client, server, len(pk)))
    for ep in (server, client):
        c = stats.get(ep, collections.Counter())
        print("   %-28s %-6s bursts=%d slow_bursts(>30ms after peer data)=%d nagle_stalls=%d retrans=%d syn_retrans=%d" %
              (ep, "server" if ep == server else "client", c["responses"], c["slow_bursts"], c["nagle"], c["retrans"], c["syn_retrans"]))
        tot[(ep, "nagle")] += c["nagle"]
        tot[("all", "retrans")] += c["retrans"]
        tot[("all", "syn_retrans")] += c["syn_retrans"]
    shown = examples if verbose else examples[:3]
    for e in shown:
        print("      " + e)
    if len(examples) > len(shown):
        print("      ... %d more" % (len(examples) - len(shown)))
if as_json:
    import json
    print(json.dumps(jout))
    sys.exit(0)
print("TOTAL nagle per endpoint:", {k[0]: v for k, v in tot.items() if k[1] == "nagle" and v},
      "retrans:", tot[("all", "retrans")], "syn_retrans:", tot[("all", "syn_retrans")])
