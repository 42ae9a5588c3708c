#!/usr/bin/env bash
# One file on all cores: the floor program, `analyze --threads 1`, `analyze
# --threads 2` and `analyze -` (the file streamed through a pipe) on one big,
# page-cached capture, interleaved in one run, so that the ratios compare
# runs made under the same load.
#
#   bench/analyze_threads.sh [BIG.pcap]      (default bench/out/big.pcap)
#
# Environment:
#   TCPDOCTOR=/path/bin   use this binary instead of building one
#   FLOOR=/path/floor     use this floor program instead of building it (examples/floor.rs)
#   TIMER=/path/timed     use this timer instead of building it (examples/timed.rs)
#   RUNS=3                runs of each (medians are reported)
#   PAGE_CACHE=as-is      how the capture sits in the page cache (see below):
#                         as-is (warmed by reading it), small (a copy written
#                         4 KiB at a time: small folios, as tcpdump leaves a
#                         file) or large (a copy evicted and read back: large
#                         folios); the copies go to the run's private directory
#   HOLD=1                keep the capture in the page cache for the whole run
#                         (mlock by bench/page_cache.py --hold; needs root or a
#                         large RLIMIT_MEMLOCK); HOLD=0 leaves it to the host
#
# Each run is timed by the benches' timer, examples/timed.rs (wait4's rusage):
# wall seconds, CPU seconds (user + sys) to 0.1 ms, peak RSS and user CPU.
# (/usr/bin/time prints hundredths, too coarse for runs of 0.03-0.2 s.) Prints every run, the
# medians, and the ratios: the speed-up of 2 threads over 1 (wall), each against
# the floor (wall), and the stream against the named file, which one thread
# maps (CPU and user CPU per packet: reading a pipe costs the kernel a copy that
# a mapped file does not; RSS).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/.." && pwd)
BIG=${1:-$HERE/out/big.pcap}
RUNS=${RUNS:-3}
if [ -n "${DROP_CACHES:-}" ]; then
    echo "analyze_threads.sh: DROP_CACHES is gone; PAGE_CACHE=large reads a copy of the capture back in large folios without dropping the host's cache" >&2
    exit 2
fi
case "${PAGE_CACHE:=as-is}" in
    as-is | small | large) ;;
    *) echo "analyze_threads.sh: PAGE_CACHE must be as-is, small or large (not '$PAGE_CACHE')" >&2; exit 2 ;;
esac

need_capture "$BIG"

if [ -z "${TCPDOCTOR:-}" ] || [ -z "${FLOOR:-}" ]; then
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/bench-target}
    echo "== build: (cd $ROOT && CARGO_TARGET_DIR=$CARGO_TARGET_DIR cargo build --release --bin tcpdoctor --example floor --example timed)"
    (cd "$ROOT" && timeout 900 cargo build --release --quiet --bin tcpdoctor --example floor --example timed)
    TCPDOCTOR=${TCPDOCTOR:-$CARGO_TARGET_DIR/release/tcpdoctor}
    FLOOR=${FLOOR:-$CARGO_TARGET_DIR/release/examples/floor}
fi
for b in "$TCPDOCTOR" "$FLOOR"; do [ -x "$b" ] || { echo "no binary at $b" >&2; exit 1; }; done
check_fresh "$TCPDOCTOR" "$ROOT"
check_fresh "$FLOOR" "$ROOT" examples/floor.rs

TMP=$(mktemp -d /tmp/tcpdoctor-threads.XXXXXX)
trap 'stop_holding; rm -rf "$TMP"' EXIT

# run NAME CMD… and median NAME COLUMN: bench/lib.sh's, on this script's directory.
run() { timed "$TMP" "$@"; }
median() { column_median "$TMP/$1" "$2"; }

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(uname -r)"
echo "== binary: $TCPDOCTOR"
echo "== source: $(git -C "$ROOT" log -1 --format='%h %s' 2>/dev/null | cut -c1-100)$(git -C "$ROOT" diff --quiet HEAD -- src 2>/dev/null || echo ' + uncommitted changes in src/')"
PACKETS=$("$TCPDOCTOR" analyze "$BIG" --json --threads 1 | awk -F: '/"packets"/ {gsub(/[ ,]/, "", $2); print $2; exit}')
echo "== capture: $BIG ($PACKETS packets, $(stat -c %s "$BIG") bytes); warming the page cache"
# How the file entered the page cache changes what mapping it costs: pages
# written in small pieces (as tcpdump writes) are small folios, pages read back
# are large ones; the floor took 90 ms on the first and 50 ms on the second
# here, so every ratio to it depends on which. PAGE_CACHE=small or large runs
# on a copy put in that state (bench/page_cache.py touches only the copy, not
# the rest of the host's cache); the share of large folios is printed (root).
case "$PAGE_CACHE" in
    as-is) cat "$BIG" > /dev/null ;;
    small) python3 "$HERE/page_cache.py" --small "$BIG" "$TMP/capture.pcap"; BIG=$TMP/capture.pcap ;;
    large) cp "$BIG" "$TMP/capture.pcap"; BIG=$TMP/capture.pcap; python3 "$HERE/page_cache.py" --large "$BIG" ;;
esac
echo "== page cache ($PAGE_CACHE): $BIG: $(python3 "$HERE/page_cache.py" "$BIG")"
# Held there for the whole run: a host that pages cold cache out would
# otherwise make runs wait on the disk (HOLD=0: not held).
[ "${HOLD:-1}" = 0 ] || hold_capture "$BIG"
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== $RUNS rounds of: floor BIG | analyze BIG --json --threads 1 | --threads 2 | analyze - --json < pipe (each round starting one further on)"
one() {
    case $1 in
        0) run floor "$FLOOR" "$BIG" ;;
        1) run threads1 "$TCPDOCTOR" analyze "$BIG" --json --threads 1 ;;
        2) run threads2 "$TCPDOCTOR" analyze "$BIG" --json --threads 2 ;;
        # Through a pipe: not mappable, read once as a stream (cat's own CPU is not counted).
        3) run stream "$TCPDOCTOR" analyze - --json < <(cat "$BIG") ;;
    esac
}
for i in $(seq "$RUNS"); do
    echo "-- round $i (load $(cut -d' ' -f1 /proc/loadavg))"
    # Each round starts one run further on: in a fixed order the first run of
    # a round was up to ~1.4 % faster (an A/A control, bench/RESULTS.md).
    for j in 0 1 2 3; do one $(((j + i) % 4)); done
done
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# The state drifts (here DAMON pages cold page cache out, and faults bring it
# back in small folios): say where it ended.
echo "== page cache after: $(python3 "$HERE/page_cache.py" "$BIG")"

F=$(median floor 1); T1=$(median threads1 1); T2=$(median threads2 1); S=$(median stream 1)
T1C=$(median threads1 2); T2C=$(median threads2 2); SC=$(median stream 2)
T1K=$(median threads1 3); T2K=$(median threads2 3); SK=$(median stream 3)
T1U=$(median threads1 4); SU=$(median stream 4)
echo "== medians (wall s, CPU s, peak RSS KB)"
printf "   floor      %s s\n" "$F"
printf "   threads 1  %s s  %s s CPU  %s KB\n" "$T1" "$T1C" "$T1K"
printf "   threads 2  %s s  %s s CPU  %s KB\n" "$T2" "$T2C" "$T2K"
printf "   stream     %s s  %s s CPU  %s KB\n" "$S" "$SC" "$SK"
awk -v f="$F" -v t1="$T1" -v t2="$T2" -v t1c="$T1C" -v sc="$SC" -v t1u="$T1U" -v su="$SU" -v n="$PACKETS" 'BEGIN {
    printf "== ratios: threads-2 speed-up %.2fx (wall); threads 1 = %.2fx the floor, threads 2 = %.2fx the floor (wall)\n", t1 / t2, t1 / f, t2 / f
    printf "== per packet (CPU): the file, 1 thread %.0f ns; stream %.0f ns (%.2fx)\n", t1c / n * 1e9, sc / n * 1e9, sc / t1c
    printf "== per packet (user CPU, the analysis itself): the file %.0f ns; stream %.0f ns (%.2fx); the rest of the stream CPU is the kernel copying it out of the pipe\n", t1u / n * 1e9, su / n * 1e9, su / t1u
}'
# The same ratios within each round (its runs seconds apart), then their
# medians and spread: the floor itself moves by a third between rounds here.
paste "$TMP/floor" "$TMP/threads1" "$TMP/threads2" | awk '{print $5 / $1, $5 / $9}' >"$TMP/paired"
sort -g -k1 "$TMP/paired" | awk '{v[NR] = $1} END {printf "== per round: threads 1 = %.2fx the floor (median; %.2f-%.2f)", v[int((NR + 1) / 2)], v[1], v[NR]}'
sort -g -k2 "$TMP/paired" | awk '{v[NR] = $2} END {printf "; threads-2 speed-up %.2fx (%.2f-%.2f)\n", v[int((NR + 1) / 2)], v[1], v[NR]}'
