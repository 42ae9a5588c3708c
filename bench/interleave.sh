#!/usr/bin/env bash
# Times several commands in turn, round after round, so that each round's
# runs share the machine's state (load, page cache), and prints each one's
# median wall, CPU and user CPU seconds and peak RSS: for before/after
# comparisons of two builds. Then each command's time against the first's in
# the same round: the median of those ratios and their range (on a noisy VM
# the medians of whole runs move between batches, the ratios much less).
#
#   bench/interleave.sh RUNS LABEL='CMD ARGS…' [LABEL='CMD ARGS…' …]
#
# e.g. bench/interleave.sh 11 old="/tmp/old analyze big.pcap --json" new="target/release/tcpdoctor analyze big.pcap --json"
# Each command runs once unmeasured, then under the benches' timer
# (examples/timed.rs: wait4's rusage; TIMER=/path/timed, else built), in every
# round, each round starting one command further on; its output is
# discarded. A CMD may start with VAR=value words (it runs under env).
# Medians of RUNS rounds. A command that fails (any exit but 0, or
# tcpdoctor's 4: partial input) ends the script, since its time would not be
# the work's. HOLD="FILE…" keeps those files in the page cache meanwhile
# (bench/page_cache.py --hold), as analyze_threads.sh does its capture.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
need_timer
RUNS=${1:?usage: $0 RUNS LABEL=CMD…}
shift
[ "$#" -ge 1 ] || { echo "usage: $0 RUNS LABEL=CMD…" >&2; exit 2; }
TMP=$(mktemp -d /tmp/tcpdoctor-interleave.XXXXXX)
trap 'stop_holding; rm -rf "$TMP"' EXIT
# HOLD="FILE…": files kept in the page cache for the whole run (see
# bench/page_cache.py --hold): captures the commands read.
for f in ${HOLD:-}; do hold_capture "$f"; done

specs=("$@")
n=${#specs[@]}
for round in $(seq 0 $((RUNS - 1))); do
    # Each round starts one command further on: a fixed order favoured the
    # first command by up to ~1.4 % (an A/A control, bench/RESULTS.md).
    for j in $(seq 0 $((n - 1))); do
        i=$(((j + round) % n))
        spec=${specs[$i]}
        cmd=${spec#*=}
        # shellcheck disable=SC2086 # the command's words, split as written
        timeout 600 env $cmd > /dev/null 2>&1 < /dev/null || true
        rc=0
        # shellcheck disable=SC2086
        timeout 600 "$TIMER" "$TMP/t" env $cmd > /dev/null 2> "$TMP/err" < /dev/null || rc=$?
        if [ "$rc" != 0 ] && [ "$rc" != 4 ]; then
            echo "interleave.sh: '${spec%%=*}' exited $rc: $(head -c 300 "$TMP/err")" >&2
            exit 1
        fi
        # Line r of each command's file is round r, whatever the order within it.
        cat "$TMP/t" >> "$TMP/$i"
    done
done

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
i=0
for spec in "$@"; do
    printf '%-12s wall %s s  CPU %s s  user %s s  peak RSS %s KB\n' "${spec%%=*}" \
        "$(cut -d' ' -f1 "$TMP/$i" | median)" "$(cut -d' ' -f2 "$TMP/$i" | median)" \
        "$(cut -d' ' -f4 "$TMP/$i" | median)" "$(cut -d' ' -f3 "$TMP/$i" | median)"
    i=$((i + 1))
done

# Per-round ratios against the first command: wall and CPU (seconds / first's).
[ "$#" -ge 2 ] || exit 0
# ratio K: command i's column K (1 wall, 2 CPU) over the first's, a line a round.
ratio() { paste -d' ' "$TMP/$i" "$TMP/0" | awk -v k="$1" '$(k + 4) > 0 { printf "%.6f\n", $k / $(k + 4); next } { print "zero" }'; }
i=1
for spec in "${@:2}"; do
    label=${spec%%=*} first=${1%%=*}
    if [[ "$(ratio 1; ratio 2)" == *zero* ]]; then
        printf '%-12s / %-12s no ratio: the first took 0 s in a round\n' "$label" "$first"
    else
        w=$(ratio 1 | sort -n)
        printf '%-12s / %-12s wall x%.3f (rounds %.3f-%.3f)  CPU x%.3f\n' "$label" "$first" \
            "$(median <<< "$w")" "$(head -1 <<< "$w")" "$(tail -1 <<< "$w")" "$(ratio 2 | median)"
    fi
    i=$((i + 1))
done
