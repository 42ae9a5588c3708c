#!/usr/bin/env bash
# What `inspect --trace` costs a busy server, next to strace, in one run:
# requests/s of wrk (keep-alive, 10 connections, 2 threads; `tcpdoctor bench`
# with the same shape when wrk is missing) against Debian's nginx (started by
# `tcpdoctor lab --nginx`: one process, sendfile on) with
#   (a) nothing attached,
#   (b) `tcpdoctor inspect :PORT --trace --method ebpf` for the whole run,
#   (b') the same with TCPDOCTOR_TRACE_EMPTY=1 (case `empty`): the programs
#       attached to the same hooks but returning at once, the floor of any
#       trace at these hooks,
#   (c) `tcpdoctor inspect :PORT --trace --method ptrace` for the whole run,
#   (d) `strace -f -e trace=network,read,write -o /dev/null -p PID` attached
#       (if strace is installed; as root the script installs it with apt-get),
# interleaved RUNS times, on nginx with `tcp_nodelay on` (CPU-bound: the cost
# shows) and `tcp_nodelay off` (each response waits ~40 ms: the cost hides).
# Prints each run, the medians, the ratios to (a), nginx's CPU time per
# request (user + system, from /proc: steadier than requests/s when other work
# shares the cores), each trace's own estimate of its cost and its finding
# (from its JSON): eBPF's and ptrace's must match. wrk starts once the trace's
# window has begun (the tracer's "tracing pid …" line on stderr), so its
# measure is the trace's running cost; the start-up (loading, calibrating,
# attaching) is reported beside it: wall time and the tracer's CPU, and the
# tracer's CPU during wrk.
#
#   bench/inspect_trace.sh [RUNS] [SECONDS]     (default 3 runs of 5 s)
#   TCPDOCTOR=/path/to/tcpdoctor bench/inspect_trace.sh …   (another build instead of this tree's)
#   BEFORE=/path/to/tcpdoctor bench/inspect_trace.sh …      (adds case `before`: that build's eBPF
#                                                            trace, interleaved with the others)
#
# Traffic goes only to 127.0.0.1; every process started here is stopped by PID.
set -euo pipefail

RUNS=${1:-3}
SECS=${2:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
TD=$(tcpdoctor_bin "$ROOT")

if ! command -v strace >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get install -y -q strace >/dev/null 2>&1 || true
fi
HAVE_STRACE=$(command -v strace >/dev/null && echo 1 || echo 0)

WORK=$(mktemp -d)
LAB=""
TRACER=""
cleanup() {
    [ -n "$TRACER" ] && kill "$TRACER" 2>/dev/null || true
    [ -n "$LAB" ] && kill "$LAB" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
start_lab "$TD" "$WORK" 1800
server() { lab_server "$WORK" "$1" "$2"; } # NAME FIELD

tracer_pid() { awk '/^TracerPid:/ {print $2}' "/proc/$1/status"; }
wait_tracer() { # PID WANT(attached|detached)
    for _ in $(seq 500); do
        t=$(tracer_pid "$1")
        if [ "$2" = attached ] && [ "$t" != 0 ]; then return 0; fi
        if [ "$2" = detached ] && [ "$t" = 0 ]; then return 0; fi
        sleep 0.02
    done
    echo "pid $1 not $2 after 10 s" >&2
    exit 1
}

HAVE_WRK=$(command -v wrk >/dev/null && echo 1 || echo 0)
bench() { # URL -> "requests_per_s p50_ms errors nginx_cpu_us_per_request"
    local c0 out
    c0=$(cpu_ticks "$PID")
    if [ "$HAVE_WRK" = 1 ]; then
        out=$(wrk -t 2 -c 10 -d "${SECS}s" --latency "$1")
        echo "$out" | python3 -c '
import re, sys
ticks = int(sys.argv[1]) - int(sys.argv[2])
t = sys.stdin.read()
total = int(re.search(r"(\d+) requests in", t).group(1))
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
m = re.search(r"50%\s+([\d.]+)(us|ms|s)\b", t)
p50 = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
e = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", t)
n = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
err = (sum(int(x) for x in e.groups()) if e else 0) + (int(n.group(1)) if n else 0)
print("%.0f %.2f %d %.2f" % (rps, p50, err, ticks * 1e4 / max(total, 1)))' "$(cpu_ticks "$PID")" "$c0"
    else
        out=$("$TD" bench -c 10 -t 2 -d "${SECS}s" --json "$1")
        echo "$out" | python3 -c '
import json, sys
ticks = int(sys.argv[1]) - int(sys.argv[2])
b = json.load(sys.stdin)
print("%.0f %.2f %d %.2f" % (b["requests_per_s"], b["latency"]["p50"], sum(b["errors"].values()),
                             ticks * 1e4 / max(b["requests"], 1)))' "$(cpu_ticks "$PID")" "$c0"
    fi
}
bpf_attached() { # PID: its six programs are held (fdinfo prog_id)
    for _ in $(seq 500); do
        [ "$(grep -l '^prog_id:' /proc/"$1"/fdinfo/* 2>/dev/null | wc -l)" -ge 6 ] && return 0
        sleep 0.02
    done
    echo "tcpdoctor $1: eBPF programs not attached after 10 s" >&2
    exit 1
}
# A trace's finding and its cost, from its JSON.
said() {
    python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))["trace"]
h = t.get("kernel_hold") or {}
hold = ("kernel hold median %.1f ms (%d of %d writes)" % (h["nagle_median_ms"], h["nagle"], h["writes"])
        if h.get("nagle_median_ms") is not None else ("kernel: no Nagle hold in %d writes" % h["writes"] if h else ""))
frac = t["nagle_in_pieces_fraction"]
print("%s: found %s, wwr %d of %d Nagle responses, in pieces %s, gap %s ms; %s | %s" % (
    t["method"], t["found"], t["write_write_read"], t["nagle_responses"],
    "-" if frac is None else "%.2f" % frac, "-" if t["gap_wwr_ms"] is None else "%.1f" % t["gap_wwr_ms"],
    hold, (t.get("overhead") or t.get("cost"))["text"]))' "$1"
}

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); kernel $(uname -r); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$($TD --version) ($TD); $(/usr/sbin/nginx -v 2>&1); $( [ "$HAVE_STRACE" = 1 ] && strace -V | head -1 || echo 'strace: not installed')"
if [ "$HAVE_WRK" = 1 ]; then
    echo "load: wrk -t 2 -c 10 -d ${SECS}s (keep-alive); $RUNS runs per case, interleaved"
else
    echo "load: tcpdoctor bench -c 10 -t 2 -d ${SECS}s (keep-alive; wrk not installed); $RUNS runs per case, interleaved"
fi
echo

for name in nginx-nodelay-on nginx-nodelay-off; do
    URL=$(server "$name" url)
    PID=$(server "$name" pid)
    PORT=${URL##*:}
    PORT=${PORT%/}
    echo "== $name: $URL (pid $PID)"
    printf '%-4s %-8s %10s %9s %7s %8s\n' run case req_per_s p50_ms errors cpu_us
    : >"$WORK/$name.rows"
    : >"$WORK/$name.tracer"
    for r in $(seq "$RUNS"); do
        read -r rps p50 err cpu < <(bench "$URL")
        printf '%-4s %-8s %10s %9s %7s %8s\n' "$r" none "$rps" "$p50" "$err" "$cpu"
        echo "none $rps $p50 $err $cpu" >>"$WORK/$name.rows"

        # (b) and (c): inspect --trace for longer than the run; Ctrl-C (SIGINT) ends it after.
        for method in ebpf empty ${BEFORE:+before} ptrace; do
            bin=$TD m=$method empty=0
            [ "$method" = before ] && bin=$BEFORE m=ebpf
            [ "$method" = empty ] && m=ebpf empty=1
            : >"$WORK/$method.err"
            t0=$(date +%s.%N)
            TCPDOCTOR_TRACE_EMPTY=$empty "$bin" inspect ":$PORT" --trace "$((SECS + 10))s" --method "$m" --json \
                >"$WORK/$method.json" 2>"$WORK/$method.err" &
            TRACER=$!
            if [ "$method" = before ]; then
                # A build from before the line: its programs attached, then 1 s for its calibration.
                bpf_attached "$TRACER"
                for _ in $(seq 100); do grep -q '^tcpdoctor: tracing pid ' "$WORK/$method.err" && break; sleep 0.01; done
            else
                trace_started "$TRACER" "$WORK/$method.err"
            fi
            up=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
            c_up=$(cpu_ticks "$TRACER")
            read -r rps p50 err cpu < <(bench "$URL")
            c_run=$(( $(cpu_ticks "$TRACER") - c_up ))
            echo "$method start-up ${up}s, tracer CPU $((c_up * 10)) ms; during wrk $((c_run * 10)) ms" >>"$WORK/$name.tracer"
            kill -INT "$TRACER"
            # The floor's trace saw nothing, which tcpdoctor reports as such (exit 5).
            wait "$TRACER" || [ "$method" = empty ]
            TRACER=""
            wait_tracer "$PID" detached
            what=$([ "$method" = empty ] && echo "the programs attached, empty (the floor)" || said "$WORK/$method.json")
            printf '%-4s %-8s %10s %9s %7s %8s   %s\n' "$r" "$method" "$rps" "$p50" "$err" "$cpu" "$what"
            echo "$method $rps $p50 $err $cpu" >>"$WORK/$name.rows"
        done

        if [ "$HAVE_STRACE" = 1 ]; then
            strace -f -e trace=network,read,write -o /dev/null -p "$PID" 2>/dev/null &
            TRACER=$!
            wait_tracer "$PID" attached
            read -r rps p50 err cpu < <(bench "$URL")
            kill -INT "$TRACER"
            wait "$TRACER" || true
            TRACER=""
            wait_tracer "$PID" detached
            printf '%-4s %-8s %10s %9s %7s %8s\n' "$r" strace "$rps" "$p50" "$err" "$cpu"
            echo "strace $rps $p50 $err $cpu" >>"$WORK/$name.rows"
        fi
    done
    python3 - "$WORK/$name.rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for case in ("none", "ebpf", "empty", "before", "ptrace", "strace"):
    r = [x for x in rows if x[0] == case]
    if r:
        med[case] = (statistics.median(float(x[1]) for x in r), statistics.median(float(x[2]) for x in r),
                     sum(int(x[3]) for x in r), statistics.median(float(x[4]) for x in r))
for case, (rps, p50, err, cpu) in med.items():
    ratio = rps / med["none"][0] if med["none"][0] else float("nan")
    print(f"median {case:<7} {rps:>9.0f} req/s  p50 {p50:6.2f} ms  errors {err}  ratio to none {ratio:.2f}"
          f"  nginx CPU {cpu:.2f} us/request ({cpu / med['none'][3]:.2f}x)")
PY
    sed 's/^/tracer: /' "$WORK/$name.tracer"
    echo
done
