#!/usr/bin/env bash
# Time tcpdoctor against tshark on one big, page-cached capture.
#
#   bench/analyze_vs_tshark.sh [BIG.pcap]      (default bench/out/big.pcap)
#
# Environment:
#   TCPDOCTOR=/path/bin   use this binary instead of building one
#   RUNS=3                tcpdoctor runs per measurement (median is reported)
#   PARTS=2               number of files for the multi-file run (editcap -F pcap -c: same format as the single file)
#   SKIP_TSHARK=1         skip the two (slow) tshark runs
#
# Builds the release binary into /tmp/bench-target, warms the page cache, then
# measures wall time and peak RSS (/usr/bin/time -f '%e %M') of
#   (a) tcpdoctor analyze BIG --json            (RUNS runs, median)
#   (b) tshark -r BIG -q -z conv,tcp            (1 run)
#   (c) tshark -r BIG -Y 'tcp.analysis.ack_rtt > 0.03'   (1 run)
#   (d) tcpdoctor analyze part*.pcap --json     (BIG split in PARTS files; RUNS runs, median)
# and `perf stat -e instructions,cycles` of (a) when perf works.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BIG=${1:-$HERE/out/big.pcap}
RUNS=${RUNS:-3}
PARTS=${PARTS:-2}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/bench-target}
TIME=/usr/bin/time

[ -f "$BIG" ] || { echo "no capture $BIG (make one with bench/make_big_capture.sh)" >&2; exit 1; }
[ -x "$TIME" ] || { echo "missing /usr/bin/time (apt-get install -y time)" >&2; exit 1; }
for t in tshark capinfos editcap; do
    command -v "$t" >/dev/null || { echo "missing tool: $t" >&2; exit 1; }
done

if [ -z "${TCPDOCTOR:-}" ]; then
    echo "== build: (cd $ROOT && CARGO_TARGET_DIR=$CARGO_TARGET_DIR cargo build --release)"
    (cd "$ROOT" && timeout 900 cargo build --release --quiet)
    TCPDOCTOR=$CARGO_TARGET_DIR/release/tcpdoctor
fi
[ -x "$TCPDOCTOR" ] || { echo "no binary at $TCPDOCTOR" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
check_fresh "$TCPDOCTOR" "$ROOT"

TMP=$(mktemp -d /tmp/tcpdoctor-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# measure CMD...: one run under /usr/bin/time; prints "secs peak_rss_kb cpu% cpu_secs(user+sys)", stdout to /dev/null.
# tcpdoctor exits 4 for "partial" input (e.g. a packet cut by -c): still a valid timing.
measure() {
    local out="$TMP/time.$RANDOM"
    local rc=0
    timeout 1800 "$TIME" -f '%e %M %P %U %S' -o "$out" "$@" > /dev/null 2> "$TMP/stderr" || rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 4 ]; then
        echo "command failed (exit $rc): $*" >&2; cat "$TMP/stderr" >&2; return 1
    fi
    tail -n 1 "$out" | tr -d '%' | awk '{print $1, $2, $3, $4 + $5}'
}

# median_of N CMD...: runs N times, prints "median_secs max_kb cpu%_of_median_run min_secs median_cpu_secs",
# each run on stderr. CPU seconds are less disturbed than wall time when other work shares the cores.
median_of() {
    local n=$1; shift
    local r
    : > "$TMP/runs"
    for _ in $(seq "$n"); do
        r=$(measure "$@")
        echo "   run: $(echo "$r" | awk '{printf "%s s wall, %.2f s CPU, %d KB peak RSS, %s%% CPU", $1, $4, $2, $3}')" >&2
        echo "$r" >> "$TMP/runs"
    done
    sort -g -k4 "$TMP/runs" | awk '{u[NR]=$4} END {print u[int((NR+1)/2)]}' > "$TMP/cpu_median"
    sort -g "$TMP/runs" | awk -v u="$(cat "$TMP/cpu_median")" '{t[NR]=$1; c[NR]=$3; if ($2 > kb) kb = $2} END {m = int((NR+1)/2); print t[m], kb, c[m], t[1], u}'
}

# rss_split CMD...: peak RssAnon / RssFile in KB (sampled from /proc every 2 ms).
# Peak RSS from /usr/bin/time counts the pages of an mmap()ed input file too;
# this shows how much is the program's own (anonymous) memory.
rss_split() {
    "$@" > /dev/null 2>&1 &
    local pid=$! anon=0 file=0 a f
    while kill -0 "$pid" 2>/dev/null; do
        read -r a f < <(awk '/^RssAnon:/ {a=$2} /^RssFile:/ {f=$2} END {print a+0, f+0}' "/proc/$pid/status" 2>/dev/null || echo "0 0")
        [ "$a" -gt "$anon" ] && anon=$a
        [ "$f" -gt "$file" ] && file=$f
        sleep 0.002
    done
    wait "$pid" 2>/dev/null || true
    echo "$anon $file"
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(uname -r)"
echo "== binary: $TCPDOCTOR"
echo "== source: $(git -C "$ROOT" log -1 --format='%h %s' 2>/dev/null | cut -c1-100)$(git -C "$ROOT" diff --quiet HEAD -- src 2>/dev/null || echo ' + uncommitted changes in src/')"
echo "== tshark: $(tshark -v 2>/dev/null | head -n1)"

PACKETS=$(capinfos -c -M -T -r "$BIG" | awk -F'\t' '{print $2}')
BYTES=$(stat -c %s "$BIG")
echo "== capture: $BIG  ($PACKETS packets, $BYTES bytes)"

echo "== warm page cache: cat $BIG > /dev/null"
cat "$BIG" > /dev/null

echo "== load average before runs: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== (a) $TCPDOCTOR analyze $BIG --json > /dev/null   [$RUNS runs]"
read -r TD_S TD_KB TD_CPU TD_MIN TD_U < <(median_of "$RUNS" "$TCPDOCTOR" analyze "$BIG" --json)
read -r TD_ANON TD_FILE < <(rss_split "$TCPDOCTOR" analyze "$BIG" --json)
echo "   peak RssAnon $TD_ANON KB, peak RssFile $TD_FILE KB (sampled)"

if [ -z "${SKIP_TSHARK:-}" ]; then
    echo "== (b) tshark -r $BIG -q -z conv,tcp > /dev/null"
    read -r TS1_S TS1_KB _ TS1_U < <(measure tshark -r "$BIG" -q -z conv,tcp)
    echo "   run: $TS1_S s wall, $TS1_U s CPU, $TS1_KB KB peak RSS"
    echo "== (c) tshark -r $BIG -Y 'tcp.analysis.ack_rtt > 0.03' > /dev/null"
    read -r TS2_S TS2_KB _ TS2_U < <(measure tshark -r "$BIG" -Y 'tcp.analysis.ack_rtt > 0.03')
    echo "   run: $TS2_S s wall, $TS2_U s CPU, $TS2_KB KB peak RSS"
else
    TS1_S=NA TS1_KB=NA TS2_S=NA TS2_KB=NA TS1_U=NA TS2_U=NA
fi

echo "== (d) split into $PARTS files: editcap -F pcap -c $(( (PACKETS + PARTS - 1) / PARTS )) $BIG $TMP/part.pcap"
editcap -F pcap -c $(( (PACKETS + PARTS - 1) / PARTS )) "$BIG" "$TMP/part.pcap"
PART_FILES=("$TMP"/part_*.pcap)
echo "   ${#PART_FILES[@]} files: $(cd "$TMP" && ls part_*.pcap | tr '\n' ' ')"
cat "${PART_FILES[@]}" > /dev/null
echo "== (d) $TCPDOCTOR analyze part_*.pcap --json > /dev/null   [$RUNS runs]"
read -r MF_S MF_KB MF_CPU MF_MIN MF_U < <(median_of "$RUNS" "$TCPDOCTOR" analyze "${PART_FILES[@]}" --json)
echo "== (d') $TCPDOCTOR analyze ${PART_FILES[0]##*/} --json (one part alone)   [$RUNS runs]"
read -r P1_S P1_KB _ P1_MIN P1_U < <(median_of "$RUNS" "$TCPDOCTOR" analyze "${PART_FILES[0]}" --json)

PERF_LINE=""
if command -v perf >/dev/null && perf stat -e instructions true >/dev/null 2>&1; then
    echo "== perf stat -e instructions,cycles $TCPDOCTOR analyze $BIG --json"
    perf stat -x, -e instructions,cycles -o "$TMP/perf" "$TCPDOCTOR" analyze "$BIG" --json > /dev/null 2>&1 || true
    INS=$(awk -F, '$3=="instructions" || $3 ~ /^instructions/ {print $1; exit}' "$TMP/perf")
    CYC=$(awk -F, '$3=="cycles" || $3 ~ /^cycles/ {print $1; exit}' "$TMP/perf")
    if [ -n "$INS" ] && [ "$INS" != "<not supported>" ] && [ "$INS" != "<not counted>" ]; then
        PERF_LINE=$(awk -v i="$INS" -v c="$CYC" -v p="$PACKETS" 'BEGIN {
            s = sprintf("instructions %d (%.1f/packet)", i, i / p);
            if (c + 0 > 0) s = s sprintf(", cycles %d (%.1f/packet), IPC %.2f", c, c / p, i / c);
            print s }')
    else
        PERF_LINE="perf counters not available here (instructions: ${INS:-none})"
    fi
fi

echo
echo "================ summary ================"
echo "load average after runs: $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v p="$PACKETS" -v b="$BYTES" -v td="$TD_S" -v tdu="$TD_U" -v t1u="$TS1_U" -v t2u="$TS2_U" -v mfu="$MF_U" -v p1u="$P1_U" -v tdmin="$TD_MIN" -v mfmin="$MF_MIN" -v p1min="$P1_MIN" -v tdkb="$TD_KB" -v tdcpu="$TD_CPU" -v tdanon="$TD_ANON" -v tdfile="$TD_FILE" \
    -v t1="$TS1_S" -v t1kb="$TS1_KB" -v t2="$TS2_S" -v t2kb="$TS2_KB" \
    -v mf="$MF_S" -v mfkb="$MF_KB" -v p1="$P1_S" -v parts="${#PART_FILES[@]}" -v cpu="$MF_CPU" \
    -v cores="$(nproc)" 'function rate(n, s) { return s > 0 ? sprintf("%.2f M packets/s", n / s / 1e6) : "inf (under timer resolution)" }
    function ratio(a, b) { return (a == "NA") ? "NA" : (b > 0 ? sprintf("%.0fx", a / b) : "inf") }
    BEGIN {
    printf "packets                         %d (%.1f MB)\n", p, b / 1e6
    printf "tcpdoctor single file           %s s (median)  -> %s  peak RSS %.1f MB  CPU %s%%\n", td, rate(p, td), tdkb / 1024, tdcpu
    printf "  best run                      %s s -> %s\n", tdmin, rate(p, tdmin)
    printf "  CPU time (user+sys, median)   %s s -> %s per CPU-second\n", tdu, rate(p, tdu)
    printf "  of which (sampled peaks)      anonymous %.1f MB, file-backed (mmap of the capture) %.1f MB\n", tdanon / 1024, tdfile / 1024
    printf "tshark -z conv,tcp              %s s  peak RSS %s MB  -> tshark/tcpdoctor = %s\n", t1, (t1kb == "NA" ? "NA" : sprintf("%.1f", t1kb / 1024)), ratio(t1, td)
    printf "tshark -Y ack_rtt>0.03          %s s  peak RSS %s MB  -> tshark/tcpdoctor = %s\n", t2, (t2kb == "NA" ? "NA" : sprintf("%.1f", t2kb / 1024)), ratio(t2, td)
    printf "tcpdoctor %d files (%d cores)    %s s (median)  -> %s  peak RSS %.1f MB  CPU %s%%\n", parts, cores, mf, rate(p, mf), mfkb / 1024, cpu
    printf "  best run                      %s s -> %s\n", mfmin, rate(p, mfmin)
    printf "tcpdoctor one part alone        %s s (median), best %s s\n", p1, p1min
    printf "CPU-time ratios                 tshark conv/tcpdoctor = %s, tshark ack_rtt/tcpdoctor = %s\n", ratio(t1u, tdu), ratio(t2u, tdu)
    printf "multi-file CPU time (median)    %s s (single file %s s, one part alone %s s)\n", mfu, tdu, p1u
    if (mf > 0) printf "speed-up single -> %d files     %.2fx (ideal %dx)\n", parts, td / mf, (parts < cores ? parts : cores)
    }'
[ -n "$PERF_LINE" ] && echo "perf stat (single file)         $PERF_LINE"
exit 0
