#!/usr/bin/env bash
# The same packets as pcap and as pcapng: `analyze --threads 1` and
# `--threads 2` on each, interleaved in one run, and the pcapng/pcap ratio
# (what reading pcapng's blocks costs over pcap's records). With BEFORE=binary,
# that build runs the pcapng file too, in the same rounds.
#
#   bench/analyze_formats.sh [BIG.pcap]      (default bench/out/big.pcap)
#
# Environment:
#   TCPDOCTOR=/path/bin   use this binary instead of building one
#   BEFORE=/path/bin      also time this build on the pcapng file
#   RUNS=5                rounds (medians are reported)
#
# The pcapng copy is made with `editcap -F pcapng` (Wireshark's tools) in a
# private temporary directory, then page-cached with the pcap file.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/.." && pwd)
BIG=${1:-$HERE/out/big.pcap}
RUNS=${RUNS:-5}

need_capture "$BIG"
command -v editcap > /dev/null || { echo "editcap not found (apt install wireshark-common)" >&2; exit 1; }
if [ -z "${TCPDOCTOR:-}" ]; then
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/bench-target}
    echo "== build: (cd $ROOT && CARGO_TARGET_DIR=$CARGO_TARGET_DIR cargo build --release --bin tcpdoctor)"
    (cd "$ROOT" && timeout 900 cargo build --release --quiet --bin tcpdoctor)
    TCPDOCTOR=$CARGO_TARGET_DIR/release/tcpdoctor
fi
for b in "$TCPDOCTOR" ${BEFORE:+"$BEFORE"}; do [ -x "$b" ] || { echo "no binary at $b" >&2; exit 1; }; done
check_fresh "$TCPDOCTOR" "$HERE/.."

TMP=$(mktemp -d /tmp/tcpdoctor-formats.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
NG=$TMP/big.pcapng
editcap -F pcapng "$BIG" "$NG"

# run NAME CMD… and median NAME COLUMN: bench/lib.sh's, on this script's directory.
run() { timed "$TMP" "$@"; }
median() { column_median "$TMP/$1" "$2"; }

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(uname -r)"
echo "== binary: $TCPDOCTOR${BEFORE:+ (before: $BEFORE)}"
echo "== files: $BIG ($(stat -c %s "$BIG") bytes), its pcapng copy ($(stat -c %s "$NG") bytes)"
cat "$BIG" "$NG" > /dev/null
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
NAMES="pcap1 pcapng1 pcap2 pcapng2${BEFORE:+ before1 before2}"
for i in $(seq "$RUNS"); do
    echo "-- round $i (load $(cut -d' ' -f1 /proc/loadavg))"
    for t in 1 2; do
        run "pcap$t" "$TCPDOCTOR" analyze "$BIG" --json --threads "$t"
        run "pcapng$t" "$TCPDOCTOR" analyze "$NG" --json --threads "$t"
        if [ -n "${BEFORE:-}" ]; then run "before$t" "$BEFORE" analyze "$NG" --json --threads "$t"; fi
    done
done
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== medians (wall s, CPU s, peak RSS KB)"
for n in $NAMES; do
    printf "   %-8s %s s  %s s CPU  %s KB\n" "$n" "$(median "$n" 1)" "$(median "$n" 2)" "$(median "$n" 3)"
done
for t in 1 2; do
    paste "$TMP/pcap$t" "$TMP/pcapng$t" | awk '{print $5 / $1, $6 / $2}' > "$TMP/ratio$t"
    C=$(sort -g -k2 "$TMP/ratio$t" | awk '{v[NR] = $2} END {print v[int((NR + 1) / 2)]}')
    sort -g -k1 "$TMP/ratio$t" |
        awk -v t="$t" -v c="$C" '{w[NR] = $1} END {printf "== %s thread(s): pcapng = %.2fx pcap (wall, median of rounds; %.2f-%.2f), %.2fx (CPU)\n", t, w[int((NR + 1) / 2)], w[1], w[NR], c}'
    if [ -n "${BEFORE:-}" ]; then
        paste "$TMP/pcapng$t" "$TMP/before$t" | awk '{print $1 / $5}' | sort -g |
            awk -v t="$t" '{v[NR] = $1} END {printf "== %s thread(s): pcapng, this build = %.2fx before (wall, median of rounds; %.2f-%.2f)\n", t, v[int((NR + 1) / 2)], v[1], v[NR]}'
    fi
done
