#!/usr/bin/env python3
"""Self instructions per packet of `tcpdoctor analyze`, grouped by layer.

    valgrind --tool=callgrind --callgrind-out-file=cg.out tcpdoctor analyze SLICE.pcap --json --threads 1 > /dev/null
    bench/callgrind_layers.py cg.out PACKETS

Each line of `callgrind_annotate` (file:function) goes to a layer by its source
file under src/ (the capture walk and analyze's loop: read; wire/ and
capture/link.rs: decode; Tracker::segment in tcp/table.rs: lookup; the rest of
tcp/: per-direction state; detect/: detectors; the collector, aggregates,
histograms and records: folding), and library code by the function it was
inlined into. When the compiler inlines `tcp::table::step` into
`Tracker::segment` (as it does from branch `back` on), step's lines count as
lookup: compare lookup + state then.
"""
import re, subprocess, sys
out = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", sys.argv[1]], capture_output=True, text=True).stdout
n = int(sys.argv[2])
L = ["read", "decode", "lookup", "state", "detectors", "folding", "other"]
tot = dict.fromkeys(L, 0); total = 0
def by_file(f, fn):
    # Paths are absolute, or relative to the crate (fat LTO builds).
    if "/src/" in f: p = f.split("/src/", 1)[1]
    elif f.startswith("src/"): p = f[4:]
    else: return None
    if p.startswith(("capture/walk", "capture/pcap", "capture/source", "analyze/walk", "analyze/mod", "analyze/shards", "capture/mod")): return "read"
    if p.startswith(("wire/", "capture/link")): return "decode"
    if p.startswith("tcp/table") and "Tracker" in fn and "segment" in fn: return "lookup"
    if p.startswith("tcp/"): return "state"
    if p.startswith("detect/"): return "detectors"
    if p.startswith(("analyze/collect", "analyze/agg", "dist", "record/")): return "folding"
    return None
def by_fn(fn):
    if "next_in" in fn or "shards::shard" in fn or "analyze::run" in fn: return "read"
    if "wire::" in fn or "link::" in fn: return "decode"
    if "Tracker" in fn and "segment" in fn: return "lookup"
    if "tcp::" in fn: return "state"
    if "detect::" in fn and "Collector" not in fn: return "detectors"
    if "Collector" in fn or "agg::" in fn or "dist::" in fn: return "folding"
    return "other"
for line in out.splitlines():
    m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S+?):(.*?)(?: \[.*\])?$", line)
    if not m or "PROGRAM TOTALS" in line: continue
    ir = int(m.group(1).replace(",", "")); f, fn = m.group(2), m.group(3)
    lay = by_file(f, fn) or by_fn(fn)
    tot[lay] += ir; total += ir
for k in L: print(f"{k:10s} {tot[k]/n:8.0f}")
print(f"{'total':10s} {total/n:8.0f}")
