#!/usr/bin/env bash
# `tcpdoctor analyze` against the floor program (examples/floor.rs) on the same
# page-cached captures, interleaved so that both see the same machine load.
#
#   bench/analyze_floor.sh FILE.pcap...
#
# Environment:
#   RUNS=5                 rounds per file (each round: floor, analyze[, base])
#   TCPDOCTOR=/path/bin    use this binary instead of building one
#   FLOOR=/path/floor      likewise for the floor program
#   BASE=/path/bin         a second tcpdoctor (e.g. an older build) run in the same rounds
#
# Builds (unless given) with `cargo build --release --bin tcpdoctor --example floor`,
# reads each file once to warm the page cache, then times whole processes (wall,
# bash's $EPOCHREALTIME): `floor FILE` and `tcpdoctor analyze FILE --json > /dev/null`.
# Prints each run, then per file and binary the median (min-max), and the
# analyze/floor ratio of the medians with the spread of the per-round ratios.
# The load average is printed before and after: compare runs made when it is low.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 FILE.pcap... (a capture to analyse, e.g. from bench/make_big_capture.sh)" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${RUNS:-5}
if [ -z "${TCPDOCTOR:-}" ] || [ -z "${FLOOR:-}" ]; then
    (cd "$ROOT" && timeout 1800 cargo build --release --quiet --bin tcpdoctor --example floor)
    DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    TCPDOCTOR=${TCPDOCTOR:-$DIR/release/tcpdoctor}
    FLOOR=${FLOOR:-$DIR/release/examples/floor}
fi
for b in "$TCPDOCTOR" "$FLOOR" ${BASE:+"$BASE"}; do
    [ -x "$b" ] || { echo "no binary at $b" >&2; exit 1; }
done
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
check_fresh "$TCPDOCTOR" "$ROOT"
check_fresh "$FLOOR" "$ROOT" examples/floor.rs

# wall SECONDS-VAR CMD...: runs CMD (stdout to /dev/null, bounded by timeout), stores its wall time.
wall() {
    local -n out=$1; shift
    local t0=$EPOCHREALTIME rc=0
    timeout 300 "$@" > /dev/null || rc=$?
    local t1=$EPOCHREALTIME
    # analyze exits 4 when the input is partial (a packet cut by tcpdump -c): still timed.
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 4 ]; then echo "$* failed (exit $rc)" >&2; exit 1; fi
    out=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
}

# stats [DIGITS]: reads numbers, prints "median (min-max)" with DIGITS decimals (4).
stats() { sort -g | awk -v d="${1:-4}" '{ v[NR] = $1 } END { f = "%." d "f"; printf f " (" f "-" f ")", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR] }'; }

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for f in "$@"; do
    [ -f "$f" ] || { echo "no capture $f" >&2; exit 1; }
    cat "$f" > /dev/null
    fl=(); an=(); ba=(); ra=()
    for i in $(seq "$RUNS"); do
        wall tf "$FLOOR" "$f"
        wall ta "$TCPDOCTOR" analyze "$f" --json
        fl+=("$tf"); an+=("$ta")
        ra+=("$(awk -v a="$ta" -v b="$tf" 'BEGIN { printf "%.2f", a / b }')")
        line="run $i: floor $tf s, analyze $ta s"
        if [ -n "${BASE:-}" ]; then
            wall tb "$BASE" analyze "$f" --json
            ba+=("$tb"); line="$line, base $tb s"
        fi
        echo "$line"
    done
    echo "== $f ($RUNS rounds)"
    echo "floor:   $(printf '%s\n' "${fl[@]}" | stats) s"
    echo "analyze: $(printf '%s\n' "${an[@]}" | stats) s"
    [ -n "${BASE:-}" ] && echo "base:    $(printf '%s\n' "${ba[@]}" | stats) s"
    fm=$(printf '%s\n' "${fl[@]}" | stats | cut -d' ' -f1)
    am=$(printf '%s\n' "${an[@]}" | stats | cut -d' ' -f1)
    echo "analyze / floor: $(awk -v a="$am" -v b="$fm" 'BEGIN { printf "%.2f", a / b }') (per round: $(printf '%s\n' "${ra[@]}" | stats 2))"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
