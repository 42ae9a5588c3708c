#!/usr/bin/env bash
# What `inspect --trace --method ebpf` costs a busy server, measured in pairs
# under ONE continuous load, so that the load's drift cancels: bench/inspect_trace.sh
# compares separate 5 s wrk runs, whose untraced rounds alone spread by ±15 % on
# this VM, more than the cost it looks for.
#
# One `wrk -t 2 -c 10` (keep-alive) runs against the lab's nginx (`tcp_nodelay on`,
# one CPU-bound worker) for the whole script. Meanwhile phases of SECONDS follow
# each other: nothing attached, then an eBPF trace as run by default (`ebpf`:
# busy TCP_NODELAY sockets sampled after its first 0.25 s, and the call
# programs attached in slices), nothing, an eBPF trace of every socket (`all`:
# --sample all), nothing, the empty programs (TCPDOCTOR_TRACE_EMPTY=1:
# attached, returning at once; the floor of any trace at these hooks),
# nothing, … PAIRS times. CASES="ebpf noslices" (say) picks the cases;
# `noslices` is the default trace with TCPDOCTOR_TRACE_NO_SLICES=1 (sampled,
# attached all the time). A traced phase is the trace's own
# window: from its "tracing pid" line to the SIGINT that ends it (its start-up
# and its analysis after are outside every phase: the next untraced phase starts
# 0.3 s after it exited). nginx's throughput in a phase is its write calls
# (`syscw` of /proc/PID/io: one `writev` a response here, checked against
# wrk's count at the end) over the phase's length. Each traced phase is
# compared with the mean of the untraced phases either side of it; the
# medians of those ratios are the result. nginx's CPU per response
# (/proc/PID/stat) is compared the same way.
#
#   bench/inspect_trace_paired.sh [PAIRS] [SECONDS]     (default 8 pairs of 2 s)
#   TCPDOCTOR=/path/to/tcpdoctor bench/inspect_trace_paired.sh …
#   CASES="ebpf noslices" bench/inspect_trace_paired.sh …   (default: ebpf all empty)
#
# Traffic goes only to 127.0.0.1; every process started here is stopped by PID,
# and wrk ends by itself (-d) even if the script is killed.
set -euo pipefail

PAIRS=${1:-8}
SECS=${2:-2}
read -r -a CASES <<<"${CASES:-ebpf all empty}"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
TD=$(tcpdoctor_bin "$ROOT")
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk)" >&2; exit 1; }

WORK=$(mktemp -d)
LAB="" TRACER="" WRK=""
cleanup() {
    for p in "$TRACER" "$WRK" "$LAB"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
start_lab "$TD" "$WORK" 1800
URL=$(lab_server "$WORK" nginx-nodelay-on url)
PID=$(lab_server "$WORK" nginx-nodelay-on pid)
PORT=${URL##*:}
PORT=${PORT%/}

# "SECONDS WRITES CPU_TICKS" of nginx now.
sample() {
    local w c
    w=$(awk '/^syscw:/ {print $2}' "/proc/$PID/io")
    c=$(cpu_ticks "$PID")
    echo "$(date +%s.%N) $w $c"
}

# Phases: none, then (ebpf|empty), none, … ; generous wrk duration (each traced
# phase also waits for the tracer's start-up, ~0.2 s, and its exit).
PHASES=$((2 * ${#CASES[@]} * PAIRS + 1))
DUR=$((PHASES * (SECS + 3) + 10))
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); kernel $(uname -r); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$($TD --version) ($TD); $(/usr/sbin/nginx -v 2>&1); nginx pid $PID at $URL"
echo "load: one wrk -t 2 -c 10 (keep-alive) for at most ${DUR}s; $PAIRS pairs of each case (${CASES[*]}), phases of ${SECS}s"
read -r _ w_start _ < <(sample)
wrk -t 2 -c 10 -d "${DUR}s" "$URL" >"$WORK/wrk.out" &
WRK=$!
sleep 1 # wrk's connections up

: >"$WORK/phases"
: >"$WORK/tracer"
untraced() {
    local a b
    a=$(sample)
    sleep "$SECS"
    b=$(sample)
    echo "none $a $b" >>"$WORK/phases"
}
traced() { # CASE
    local empty=0 sample=auto noslices=0 a b
    [ "$1" = empty ] && empty=1
    [ "$1" = all ] && sample=all
    [ "$1" = noslices ] && noslices=1
    : >"$WORK/err"
    TCPDOCTOR_TRACE_EMPTY=$empty TCPDOCTOR_TRACE_NO_SLICES=$noslices "$TD" inspect ":$PORT" --trace "$((SECS + 20))s" --method ebpf --sample "$sample" --json \
        >"$WORK/trace.json" 2>"$WORK/err" &
    TRACER=$!
    trace_started "$TRACER" "$WORK/err"
    a=$(sample)
    t_a=$(cpu_ticks "$TRACER")
    sleep "$SECS"
    b=$(sample)
    local ticks=$(( $(cpu_ticks "$TRACER") - t_a ))
    kill -INT "$TRACER"
    # The empty programs' trace saw nothing, which tcpdoctor reports as such (exit 5).
    wait "$TRACER" || [ "$1" = empty ]
    TRACER=""
    # With it, the share of the window the call programs were attached (slices) and the socket sample.
    echo "$1 $ticks $(python3 -c 'import json, sys
try:
    c = json.load(open(sys.argv[1]))["trace"]["cost"]
    print(c.get("calls_attached_share", 1), c.get("sampled_one_in", 1))
except Exception:
    print("- -")' "$WORK/trace.json")" >>"$WORK/tracer"
    echo "$1 $a $b" >>"$WORK/phases"
    sleep 0.3
}

untraced
for _ in $(seq "$PAIRS"); do
    for case in "${CASES[@]}"; do
        traced "$case"
        untraced
    done
done
kill -0 "$WRK" 2>/dev/null || { echo "wrk ended before the phases did (its -d was too short for this machine)" >&2; exit 1; }
kill -INT "$WRK"
wait "$WRK" || true
WRK=""
read -r _ w_end _ < <(sample)

python3 - "$WORK/phases" "$WORK/wrk.out" "$w_start" "$w_end" "$WORK/tracer" "$SECS" <<'PY'
import re, statistics, sys
t = open(sys.argv[2]).read()
m = re.search(r"(\d+) requests in", t)
if not m:
    sys.exit("wrk printed no request count: " + t[-300:])
writes = int(sys.argv[4]) - int(sys.argv[3])
per = writes / int(m.group(1))
print(f"check: nginx wrote {writes} times while wrk ran and counted {m.group(1)} responses: {per:.3f} writes a response")
rows = []
for line in open(sys.argv[1]):
    case, t0, w0, c0, t1, w1, c1 = line.split()
    dt, w, c = float(t1) - float(t0), int(w1) - int(w0), int(c1) - int(c0)
    rows.append((case, w / per / dt, c * 1e4 * per / max(w, 1)))  # responses/s, CPU µs a response
for case, rate, cpu in rows:
    print(f"  {case:<6} {rate:9.0f} responses/s   nginx CPU {cpu:5.2f} µs a response")
out = {}
for i, (case, rate, cpu) in enumerate(rows):
    if case == "none":
        continue
    before, after = rows[i - 1], rows[i + 1]
    out.setdefault(case, []).append((rate / ((before[1] + after[1]) / 2), cpu / ((before[2] + after[2]) / 2)))
for case, r in out.items():
    th = sorted(x[0] for x in r)
    cp = sorted(x[1] for x in r)
    q = lambda v, f: v[min(len(v) - 1, int(f * len(v)))]
    print(f"{case:<6} throughput {statistics.median(th):.3f}x untraced (pairs {th[0]:.3f}-{th[-1]:.3f}, "
          f"quartiles {q(th, .25):.3f}-{q(th, .75):.3f}); nginx CPU a response {statistics.median(cp):.3f}x "
          f"({cp[0]:.3f}-{cp[-1]:.3f})")
own, shares = {}, {}
for line in open(sys.argv[5]):
    case, ticks, share, one_in = line.split()
    own.setdefault(case, []).append(int(ticks) * 10 / float(sys.argv[6]))
    if share != "-":
        shares.setdefault(case, []).append((float(share), int(one_in)))
for case, v in shares.items():
    print(f"{case:<6} call programs attached {min(s for s, _ in v):.2f}-{max(s for s, _ in v):.2f} of the window "
          f"(1: no slices); one TCP_NODELAY socket in {min(o for _, o in v)}-{max(o for _, o in v)} traced")
for case, v in own.items():
    print(f"{case:<6} tcpdoctor's own CPU in its window: median {statistics.median(v):.0f} ms a second "
          f"({min(v):.0f}-{max(v):.0f}; /proc ticks of 10 ms)")
PY
