#!/usr/bin/env python3
"""Where `tcpdoctor analyze`'s CPU time goes, by layer, from perf's samples
(the time, where bench/callgrind_layers.py counts instructions):

    perf record -e cpu-clock -F 2000 -o run1.data -- tcpdoctor analyze big.pcap --json --threads 1 > /dev/null
    bench/perf_layers.py target/.../tcpdoctor RULES run1.data [run2.data ...]

RULES is a comma-separated list of NAME=SYMBOL: a sample in the binary goes
to the first rule whose SYMBOL is in the chain of functions inlined at its
address (addr2line -i), e.g.
`state=tcp::table,decode=wire::decode,walk=Packets::next` for one thread and
`sort=Windows::read,wait=Schedule::wait,state=tcp::table,decode=wire::decode,access=Part::analyse`
for two. Everything in the profile-guided build is inlined into a few
functions, so perf's own symbols say little. Samples in the kernel and in
libraries are counted apart. Prints samples, their share and the
milliseconds a run (at the sampling rate given to -F: FREQ=2000 by default)."""
import collections
import os
import re
import subprocess
import sys


def segments(binary):
    """(file offset, virtual address, size) of the binary's LOAD segments."""
    out = subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True, check=True).stdout
    segs = []
    for line in out.splitlines():
        p = line.split()
        if p and p[0] == "LOAD":
            segs.append((int(p[1], 16), int(p[2], 16), int(p[4], 16)))
    return segs


def vaddr(segs, off):
    for o, v, size in segs:
        if o <= off < o + size:
            return off - o + v
    return off


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    binary, rules, files = sys.argv[1], [r.split("=", 1) for r in sys.argv[2].split(",")], sys.argv[3:]
    freq = int(os.environ.get("FREQ", "2000"))
    segs = segments(binary)
    chains = {}
    tot = collections.Counter()
    n = 0
    for data in files:
        mm = subprocess.run(["perf", "script", "-i", data, "--show-mmap-events"], capture_output=True, text=True).stdout
        m = re.search(r"\[(0x[0-9a-f]+)\(0x[0-9a-f]+\) @ (0x[0-9a-f]+) [^\]]*\]: r-xp " + re.escape(binary), mm)
        if not m:
            sys.exit(f"perf_layers: {data} has no executable mapping of {binary}")
        base, off = int(m.group(1), 16), int(m.group(2), 16)
        out = subprocess.run(["perf", "script", "-i", data, "-G", "-F", "ip,dso"], capture_output=True, text=True).stdout
        ips = collections.Counter()
        for line in out.splitlines():
            p = line.split()
            if len(p) < 2:
                continue
            if binary in p[1]:
                ips[vaddr(segs, int(p[0], 16) - base + off)] += 1
            else:
                tot["kernel" if "kernel" in p[1] else "libraries"] += 1
        need = [a for a in ips if a not in chains]
        if need:
            res = subprocess.run(["addr2line", "-f", "-i", "-C", "-e", binary, "-a"] + [hex(a) for a in need],
                                 capture_output=True, text=True).stdout
            cur = None
            for line in res.splitlines():
                if line.startswith("0x"):
                    cur = int(line, 16)
                    chains[cur] = []
                else:
                    chains[cur].append(line)
        for a, c in ips.items():
            ch = " ".join(chains.get(a, []))
            tot[next((name for name, sym in rules if sym in ch), "rest")] += c
        n += sum(ips.values())
    n += tot["kernel"] + tot["libraries"]
    runs = len(files)
    for k, v in tot.most_common():
        print(f"{k:12s} {v:7d} {100 * v / n:5.1f} %  {v / runs / freq * 1e3:7.1f} ms a run")
    print(f"{'total':12s} {n:7d}          {n / runs / freq * 1e3:7.1f} ms a run ({runs} runs)")


main()
