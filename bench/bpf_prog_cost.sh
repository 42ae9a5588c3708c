#!/usr/bin/env bash
# What each eBPF trace program costs per run, from the kernel's own accounting
# (`sysctl kernel.bpf_stats_enabled=1`, `bpftool -j prog show`: run count and
# run time per program), during one wrk run against a CPU-bound nginx that
# `tcpdoctor inspect --trace --method ebpf` traces. The accounting itself adds
# ~60 ns a run: the `empty` build of the same programs shows it.
#
#   bench/bpf_prog_cost.sh [SECONDS]        (default 5)
#   TCPDOCTOR=/path/to/tcpdoctor bench/bpf_prog_cost.sh …
#   TCPDOCTOR_TRACE_EMPTY=1 bench/bpf_prog_cost.sh …     (the programs attached, empty)
#
# Root, wrk and bpftool (Debian: apt-get install wrk bpftool). Traffic goes only
# to 127.0.0.1; every process started here is stopped by PID; the accounting is
# switched back off at the end.
set -euo pipefail
SECS=${1:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
TD=$(tcpdoctor_bin "$ROOT")
for t in wrk bpftool; do command -v "$t" >/dev/null || { echo "bpf_prog_cost.sh: needs $t" >&2; exit 1; }; done

WORK=$(mktemp -d)
LAB=""
TRACER=""
cleanup() {
    echo 0 >/proc/sys/kernel/bpf_stats_enabled
    [ -n "$TRACER" ] && kill "$TRACER" 2>/dev/null || true
    [ -n "$LAB" ] && kill "$LAB" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
start_lab "$TD" "$WORK" "$((SECS + 60))"
URL=$(lab_server "$WORK" nginx-nodelay-on url)
PORT=${URL##*:}
PORT=${PORT%/}

echo 1 >/proc/sys/kernel/bpf_stats_enabled
"$TD" inspect ":$PORT" --trace "$((SECS + 5))s" --method ebpf --json >"$WORK/trace.json" 2>"$WORK/trace.err" &
TRACER=$!
for _ in $(seq 400); do grep -q '^tcpdoctor: tracing pid ' "$WORK/trace.err" && break; sleep 0.05; done
grep -q '^tcpdoctor: tracing pid ' "$WORK/trace.err" || { echo "no tracing line in 20 s" >&2; cat "$WORK/trace.err" >&2; exit 1; }
echo "load $(cut -d' ' -f1-3 /proc/loadavg); TCPDOCTOR_TRACE_EMPTY=${TCPDOCTOR_TRACE_EMPTY:-0}"
wrk -t 2 -c 10 -d "${SECS}s" "$URL" | grep 'Requests/sec'
bpftool -j prog show | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p.get("name", "").startswith("trace_") and p.get("run_cnt", 0):
        print("  %-17s runs %9d  mean %6.1f ns" % (p["name"], p["run_cnt"], p["run_time_ns"] / p["run_cnt"]))'
kill -INT "$TRACER"
wait "$TRACER" || true
TRACER=""
