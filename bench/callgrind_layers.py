#!/usr/bin/env python3
"""Self instructions per packet of `tcpdoctor analyze`, grouped by layer.

    valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file=cg.out \\
        BINARY analyze SLICE.pcap --json --threads 1 > /dev/null
    bench/callgrind_layers.py cg.out PACKETS [BINARY]

Each instruction's cost goes to the innermost frame of its inline chain that
lies in this crate's src/ (the release build inlines the packet path into one
function, so the function a cost is booked under says little; the inline
chain from `llvm-addr2line -i` says which of our lines the instruction
belongs to), and that frame's file names the layer. Library code inlined into
ours counts with the line of ours it was inlined at; code with no frame of
ours at all (libc, the loader, std functions called out of line) is "other".
BINARY defaults to the command callgrind recorded; it must be the same file
(with its debug info: the release profile keeps line tables).
"""
import collections
import functools
import os
import shutil
import subprocess
import sys

# First match wins: the table's own map before the rest of tcp/.
LAYERS = [
    ("read", ("capture/walk", "capture/pcap", "capture/source", "capture/sigbus", "capture/windows",
              "capture/readers", "capture/mod", "analyze/walk", "analyze/mod", "analyze/shards", "prefetch")),
    ("split", ("analyze/split", "analyze/windowed", "tcp/book")),
    ("decode", ("wire/", "capture/link")),
    ("lookup", ("tcp/table/conns",)),
    ("state", ("tcp/",)),
    ("detectors", ("detect/",)),
    ("folding", ("analyze/collect", "analyze/agg", "analyze/upstream", "analyze/conns", "dist")),
    ("report", ("analyze/verdict", "analyze/merge", "record/", "report/", "escape", "output", "bin/")),
]
ORDER = [name for name, _ in LAYERS] + ["ours, other", "other"]


def die(msg):
    sys.exit(f"callgrind_layers.py: {msg}")


def costs_by_address(path):
    """Self cost per instruction address (calls' inclusive lines skipped)."""
    costs = collections.Counter()
    positions, prev, skip, cmd = None, [0, 0], False, None
    with open(path) as f:
        for line in f:
            if line.startswith("positions:"):
                positions = line.split()[1:]
                if positions[:1] != ["instr"]:
                    die(f"{path} has no instruction addresses: record it with --dump-instr=yes")
                continue
            if line.startswith("cmd:"):
                cmd = line[4:].strip()
                continue
            if line.startswith("calls="):
                skip = True
                continue
            if not line or not (line[0].isdigit() or line[0] in "+-*"):
                continue
            if positions is None:
                die(f"{path}: cost lines before a 'positions:' line; not a callgrind output file?")
            parts = line.split()
            pos = []
            for i in range(len(positions)):
                t = parts[i]
                if t == "*":
                    pos.append(prev[i])
                elif t[0] in "+-":
                    pos.append(prev[i] + int(t, 0))
                else:
                    pos.append(int(t, 0))
            prev[: len(pos)] = pos
            if skip:
                skip = False
                continue
            costs[pos[0]] += int(parts[len(positions)]) if len(parts) > len(positions) else 0
    return costs, cmd


def addr2line():
    rustc = lambda *a: subprocess.run(["rustc", *a], capture_output=True, text=True).stdout  # noqa: E731
    sysroot = rustc("--print", "sysroot").strip()
    host = next((l.split()[1] for l in rustc("-vV").splitlines() if l.startswith("host:")), "")
    for tool in [os.path.join(sysroot, "lib/rustlib", host, "bin/llvm-addr2line"),
                 shutil.which("llvm-addr2line"), shutil.which("addr2line")]:
        if tool and os.path.exists(tool):
            return tool
    die("no addr2line: rustup component add llvm-tools (or apt install binutils)")


@functools.cache
def ours(path):
    """Whether `path` (under some src/) is a file of this crate's src/."""
    return os.path.exists(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", path))


def layer_of(chain):
    """The layer of an instruction from its inline chain (innermost first)."""
    for func, loc in chain:
        if "/src/" not in loc:
            continue
        rel = loc.split("/src/", 1)[1]
        if not ours(rel.split(":")[0]):
            continue  # a dependency's src/
        if rel.startswith("tcp/table.rs") and "Tracker" in func and "segment" in func:
            return "lookup"
        for name, prefixes in LAYERS:
            if rel.startswith(prefixes):
                return name
        return "ours, other"
    return "other"


def main():
    if len(sys.argv) not in (3, 4):
        die("usage: callgrind_layers.py CALLGRIND.OUT PACKETS [BINARY]")
    if not sys.argv[2].isdigit() or int(sys.argv[2]) == 0:
        die(f"PACKETS must be the capture's packet count, not {sys.argv[2]!r}")
    packets = int(sys.argv[2])
    try:
        costs, cmd = costs_by_address(sys.argv[1])
    except OSError as e:
        die(f"{sys.argv[1]}: {e.strerror}")
    if len(sys.argv) == 4:
        binary = sys.argv[3]
    else:
        binary = cmd.split()[0] if cmd else None
    if not binary or not os.path.exists(binary):
        die(f"the profiled binary ({binary!r}) is not there; name it as the third argument")
    addrs = sorted(costs)
    out = subprocess.run([addr2line(), "-f", "-i", "-C", "-a", "-e", binary],
                         input="".join(f"{a:#x}\n" for a in addrs), capture_output=True, text=True, check=True)
    # For each address: its line, then pairs of lines (function, file:line),
    # innermost inline frame first.
    layers = collections.Counter()
    cur, frames = None, []
    for line in out.stdout.splitlines() + ["0x0"]:  # the last address's chain ends too
        if line.startswith("0x") and len(frames) % 2 == 0:
            if cur is not None:
                layers[layer_of(list(zip(frames[::2], frames[1::2])))] += costs.get(cur, 0)
            cur, frames = int(line, 16), []
            continue
        frames.append(line)
    total = sum(costs.values())
    if sum(layers.values()) != total:
        die("addr2line's output did not cover every address")
    for name in ORDER:
        if layers[name]:
            print(f"{name:12s} {layers[name] / packets:8.1f}")
    print(f"{'total':12s} {total / packets:8.1f}")


if __name__ == "__main__":
    main()
