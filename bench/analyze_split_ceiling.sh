#!/usr/bin/env bash
# The most two cores can give one file's analysis on this machine: the file
# split by connection into two halves of equal packets
# (bench/split_by_connection.py), each analysed by its own `analyze --threads 1`
# process side by side, against `--threads 1` and `--threads 2` on the whole
# file, interleaved in one run. The halves' analyses share nothing and read no
# record twice, so their wall time (the later of the two) is the ceiling of any
# split of the work; `--threads 2` reaches it only as far as its shards' pass
# over each other's records allows (bench/RESULTS.md).
#
#   bench/analyze_split_ceiling.sh [BIG.pcap]      (default bench/out/big.pcap)
#
# Environment: TCPDOCTOR=/path/bin (else built), TIMER=/path/timed (else
# built: examples/timed.rs), RUNS=7, HOLD=1 (the captures held in the page
# cache meanwhile: bench/page_cache.py --hold; 0 leaves them to the host).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
BIG=${1:-$HERE/out/big.pcap}
need_capture "$BIG"
TCPDOCTOR=$(tcpdoctor_bin "$HERE/..")
RUNS=${RUNS:-7}
need_timer
TMP=$(mktemp -d /tmp/tcpdoctor-ceiling.XXXXXX)
trap 'stop_holding; rm -rf "$TMP"' EXIT
echo "== split: $(python3 "$HERE/split_by_connection.py" "$BIG" "$TMP/h0.pcap" "$TMP/h1.pcap")"
cat "$BIG" "$TMP/h0.pcap" "$TMP/h1.pcap" > /dev/null    # in the page cache
# And held there (HOLD=0: left to the host), as analyze_threads.sh does.
if [ "${HOLD:-1}" != 0 ]; then for f in "$BIG" "$TMP/h0.pcap" "$TMP/h1.pcap"; do hold_capture "$f"; done; fi

for r in $(seq "$RUNS"); do
    echo "== round $r"
    timed "$TMP" one "$TCPDOCTOR" analyze "$BIG" --json --threads 1
    timed "$TMP" two "$TCPDOCTOR" analyze "$BIG" --json --threads 2
    "$TIMER" "$TMP/t0" "$TCPDOCTOR" analyze "$TMP/h0.pcap" --json --threads 1 > /dev/null &
    p0=$!
    "$TIMER" "$TMP/t1" "$TCPDOCTOR" analyze "$TMP/h1.pcap" --json --threads 1 > /dev/null &
    p1=$!
    # These two only: the page-cache holders run in the background too.
    wait "$p0" "$p1"
    # The pair's wall: the later half; its CPU: both.
    paste "$TMP/t0" "$TMP/t1" | awk '{w = $1 > $5 ? $1 : $5; printf "%.4f %.4f %d %.4f\n", w, $2 + $6, $3 + $7, $4 + $8}' >> "$TMP/halves"
    tail -n 1 "$TMP/halves" | awk '{printf "   %-14s %7.3f s wall %7.3f s CPU\n", "halves", $1, $2}'
done
one=$(column_median "$TMP/one" 1) two=$(column_median "$TMP/two" 1) halves=$(column_median "$TMP/halves" 1)
echo "== medians of $RUNS: --threads 1 ${one} s, --threads 2 ${two} s, halves side by side ${halves} s"
awk -v a="$one" -v b="$two" -v c="$halves" 'BEGIN {
    printf "speed-up on 2 cores: --threads 2 %.2fx, the ceiling (halves side by side) %.2fx; --threads 2 reaches %.0f %% of it\n",
        a / b, a / c, 100 * (a / b) / (a / c) }'
