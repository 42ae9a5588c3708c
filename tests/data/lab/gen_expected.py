#!/usr/bin/env python3
"""Write tests/data/expected.json from ground truth + counted stalls.

Ground truth (which endpoint is the Nagle side, which other findings exist)
is known by construction (see make_captures.sh / EXPECTED.md) and listed in
TRUTH below.  Stall counts come from lab/analyze.py (tshark based); the
min/max range is a tolerance around the count.  Ephemeral client ports are
read from the capture, so re-running make_captures.sh keeps this in sync.
Usage: gen_expected.py DATA_DIR
"""
import json, os, subprocess, sys

D = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))

# file -> (list of (server_port, nagle_role)), other_kinds
WWR = ([(28101, "server")], [])
TRUTH = {
    "wwr_nagle.pcap": WWR,
    "wwr_nagle_ns.pcap": WWR,
    "wwr_nagle_be.pcap": WWR,
    "wwr_nagle_null.pcap": WWR,
    "wwr_nagle_raw.pcap": WWR,
    "wwr_nodelay.pcap": ([], []),
    "wwr_nagle_ipv6.pcap": ([(28112, "server")], []),
    "wwr_nagle_ipv6_snap128.pcap": ([(28112, "server")], []),
    "think45.pcap": ([], ["app_latency"]),
    "pause60_nodelay.pcap": ([], ["app_latency"]),
    "zero_window.pcap": ([], ["zero_window"]),
    "post_split_client.pcap": ([(28108, "client")], []),
    "any_sll2.pcap": ([(28113, "server")], []),
    "any_sll.pcap": ([(28118, "server")], []),
    "nginx_nodelay_off.pcap": ([(28103, "server")], []),
    "nginx_nodelay_on.pcap": ([], []),
    "jdk_default.pcap": ([(28105, "server")], []),
    "jdk_nodelay.pcap": ([], []),
    "loss_netns.pcap": ([], ["retransmission", "syn_retransmission"]),
    "syn_retry.pcap": ([], ["syn_retransmission"]),
    "veth_nagle.pcap": ([(28111, "server")], []),
    "nagle_ns.pcapng": ([(28114, "server")], []),
    "midstream_port61000.pcap": ([(61000, "server")], []),
    # 3 % loss + Nagle: both causes, and no app_latency (kinds that must be absent, third)
    "loss_nagle_srv.pcap": ([(28121, "server")], ["retransmission"], ["app_latency"]),
    "loss_nagle_cli.pcap": ([(28121, "server")], ["retransmission"], ["app_latency"]),
}


def port_of(ep):
    return int(ep.rsplit(":", 1)[1])


out = {}
for name, truth in TRUTH.items():
    nagle, kinds = truth[:2]
    path = os.path.join(D, name)
    if not os.path.exists(path):
        continue
    streams = json.loads(subprocess.run([sys.executable, os.path.join(HERE, "analyze.py"), path, "--json"],
                                        capture_output=True, text=True, check=True).stdout)
    entry = {"nagle": [], "must_not_blame": [], "other_kinds": kinds}
    if len(truth) > 2:
        entry["absent_kinds"] = truth[2]
    blamed = set()
    for sport, role in nagle:
        # analyze.py names the SYN's sender the client, or the first packet's
        # when the handshake was not captured: find the listening end by its
        # port. A server's stalls are summed over its connections.
        mine = []
        for s in streams:
            srv, cli = (s["server"], s["client"]) if port_of(s["server"]) == sport else (s["client"], s["server"])
            if port_of(srv) == sport:
                mine.append((srv, cli, s))
        if role == "client" and len(mine) != 1:
            sys.exit("%s: expected one connection to port %d" % (name, sport))
        ep = mine[0][0] if role == "server" else mine[0][1]
        peer = mine[0][1] if role == "server" else mine[0][0]
        n = sum(s["endpoints"][ep].get("nagle", 0) for _, _, s in mine)
        responses = sum(s["endpoints"][ep].get("responses", 0) for _, _, s in mine)
        if n == 0:
            sys.exit("%s: expected Nagle stalls at %s but counted none" % (name, ep))
        entry["nagle"].append({"endpoint": ep, "role": role,
                               "min_stalls": n - max(2, n // 10), "max_stalls": responses or n,
                               "counted_stalls": n, "delayed_ack_endpoint": peer,
                               "responses": responses})
        blamed.add(ep)
    for s in streams:
        for ep in (s["server"], s["client"]):
            if ep not in blamed and ep not in entry["must_not_blame"]:
                entry["must_not_blame"].append(ep)
            if ep not in blamed and s["endpoints"][ep].get("nagle", 0):
                sys.exit("%s: analyzer counted Nagle stalls at %s, ground truth says none" % (name, ep))
    entry["connections"] = len(streams)
    out[name] = entry

with open(os.path.join(D, "expected.json"), "w") as f:
    json.dump(out, f, indent=2, sort_keys=True)
    f.write("\n")
print("expected.json: %d files" % len(out))
