#!/usr/bin/env bash
# What an eBPF `inspect --trace` adds to one call, in a process's own CPU time:
# a Python loop of non-blocking `recv` on a loopback TCP socket (EAGAIN: a
# socket read the programs see) and of `getppid` (a syscall they do not
# trace), 200,000 calls per sample, median of 3 samples, measured
#   none    with no trace running,
#   other   while tcpdoctor traces another process (the filter alone),
#   traced  while tcpdoctor traces this process,
# and with BEFORE=/path/to/tcpdoctor the same two for that build, interleaved,
# ROUNDS times (default 3).
#
#   bench/trace_call_cost.sh [ROUNDS]
#
# Traffic stays on 127.0.0.1; every process started here is stopped by PID.
set -euo pipefail

ROUNDS=${1:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
TD=$(tcpdoctor_bin "$ROOT")
WORK=$(mktemp -d)
mkfifo "$WORK/cmd"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# The loop: one line of results per "measure" read from the fifo.
python3 -u - "$WORK/cmd" >"$WORK/loop.out" <<'PY' &
import os, socket, statistics, sys, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
N = 200_000
def per_call(f):
    t = time.thread_time_ns()
    for _ in range(N):
        f()
    return (time.thread_time_ns() - t) / N
def recv():
    try:
        c.recv(1, socket.MSG_DONTWAIT)
    except BlockingIOError:
        pass
print("ready", os.getpid())
for line in open(sys.argv[1]):
    r = statistics.median(per_call(recv) for _ in range(3))
    g = statistics.median(per_call(os.getppid) for _ in range(3))
    print("%.0f %.0f" % (r, g))
PY
PIDS+=($!)
LOOP=$!
# Another process with a TCP socket, idle.
python3 -c 'import socket, time; l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(); time.sleep(3600)' &
PIDS+=($!)
OTHER=$!
exec 3>"$WORK/cmd"
for _ in $(seq 100); do grep -q ready "$WORK/loop.out" && break; sleep 0.1; done

measure() { # -> "recv_ns getppid_ns"
    local n
    n=$(wc -l <"$WORK/loop.out")
    echo measure >&3
    for _ in $(seq 1200); do
        [ "$(wc -l <"$WORK/loop.out")" -gt "$n" ] && break
        sleep 0.1
    done
    [ "$(wc -l <"$WORK/loop.out")" -gt "$n" ] || { echo "the measuring loop gave no result in 120 s" >&2; exit 1; }
    tail -1 "$WORK/loop.out"
}
traced_measure() { # BIN PID -> "recv_ns getppid_ns"
    local t out
    "$1" inspect "$2" --trace 60s --method ebpf --json >/dev/null 2>&1 &
    t=$!
    for _ in $(seq 500); do
        [ "$(grep -l '^prog_id:' /proc/"$t"/fdinfo/* 2>/dev/null | wc -l)" -ge 6 ] && break
        sleep 0.02
    done
    sleep 0.5 # its calibration runs after attaching
    out=$(measure)
    kill -INT "$t"
    wait "$t" || true
    echo "$out"
}

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$($TD --version) ($TD)${BEFORE:+; before: $BEFORE}"
printf '%-5s %-14s %9s %11s\n' round case recv_ns getppid_ns
for r in $(seq "$ROUNDS"); do
    printf '%-5s %-14s %9s %11s\n' "$r" none $(measure)
    for who in after ${BEFORE:+before}; do
        bin=$TD
        [ "$who" = before ] && bin=$BEFORE
        printf '%-5s %-14s %9s %11s\n' "$r" "$who:other" $(traced_measure "$bin" "$OTHER")
        printf '%-5s %-14s %9s %11s\n' "$r" "$who:traced" $(traced_measure "$bin" "$LOOP")
    done
done
