#!/usr/bin/env bash
# What `inspect --trace` costs a busy server, next to strace, in one run:
# requests/s of `tcpdoctor bench` (keep-alive, 10 connections, 2 threads)
# against Debian's nginx (started by `tcpdoctor lab --nginx`: one process,
# sendfile on) with
#   (a) nothing attached,
#   (b) `tcpdoctor inspect :PORT --trace` attached for the whole run,
#   (c) `strace -f -e trace=network,read,write -o /dev/null -p PID` attached
#       (if strace is installed; as root the script installs it with apt-get),
# interleaved RUNS times, on nginx with `tcp_nodelay on` (CPU-bound: the cost
# shows) and `tcp_nodelay off` (each response waits ~40 ms: the cost hides).
# Prints each run, the medians, the ratios to (a), and inspect's own estimate
# of its cost (from its JSON) to set beside the measured slowdown.
#
#   bench/inspect_trace.sh [RUNS] [SECONDS]     (default 3 runs of 5 s)
#
# Traffic goes only to 127.0.0.1; every process started here is stopped by PID.
set -euo pipefail

RUNS=${1:-3}
SECS=${2:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
TD="$ROOT/target/release/tcpdoctor"

if ! command -v strace >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get install -y -q strace >/dev/null 2>&1 || true
fi
HAVE_STRACE=$(command -v strace >/dev/null && echo 1 || echo 0)

WORK=$(mktemp -d)
"$TD" lab --nginx --json -d 1800s >"$WORK/lab.json" &
LAB=$!
TRACER=""
cleanup() {
    [ -n "$TRACER" ] && kill "$TRACER" 2>/dev/null || true
    kill "$LAB" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 100); do grep -q '^]' "$WORK/lab.json" && break; sleep 0.1; done
server() { # NAME FIELD
    python3 -c 'import json,sys; print([s[sys.argv[3]] for s in json.load(open(sys.argv[1])) if s["name"] == sys.argv[2]][0])' \
        "$WORK/lab.json" "$1" "$2"
}

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

bench() { # URL -> "requests_per_s p50_ms errors"
    "$TD" bench -c 10 -t 2 -d "${SECS}s" --json "$1" | python3 -c '
import json, sys
b = json.load(sys.stdin)
print("%.0f %.2f %d" % (b["requests_per_s"], b["latency"]["p50"], sum(b["errors"].values())))'
}

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); kernel $(uname -r); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$($TD --version); $(/usr/sbin/nginx -v 2>&1); $( [ "$HAVE_STRACE" = 1 ] && strace -V | head -1 || echo 'strace: not installed')"
echo "bench: tcpdoctor bench -c 10 -t 2 -d ${SECS}s (keep-alive); $RUNS runs per case, interleaved"
echo

for name in nginx-nodelay-on nginx-nodelay-off; do
    URL=$(server "$name" url)
    PID=$(server "$name" pid)
    PORT=${URL##*:}
    PORT=${PORT%/}
    echo "== $name: $URL (pid $PID)"
    printf '%-4s %-8s %10s %9s %7s\n' run case req_per_s p50_ms errors
    : >"$WORK/$name.rows"
    for r in $(seq "$RUNS"); do
        read -r rps p50 err < <(bench "$URL")
        printf '%-4s %-8s %10s %9s %7s\n' "$r" none "$rps" "$p50" "$err"
        echo "none $rps $p50 $err" >>"$WORK/$name.rows"

        # (b) inspect --trace for longer than the run; Ctrl-C (SIGINT) ends it after.
        "$TD" inspect ":$PORT" --trace "$((SECS + 10))s" --json >"$WORK/trace.json" &
        TRACER=$!
        wait_tracer "$PID" attached
        read -r rps p50 err < <(bench "$URL")
        kill -INT "$TRACER"
        wait "$TRACER"
        TRACER=""
        wait_tracer "$PID" detached
        est=$(python3 -c '
import json, sys
o = json.load(open(sys.argv[1]))["trace"]["overhead"]
print("%.0f %.1f %.1f %.0f %.3f" % (o["stops_per_s"], o["calibrated_us_per_stop"] or 0, o["us_per_stop"],
      o["held_share"] * 100, o["added_ms_per_response"] or 0))' "$WORK/trace.json")
        printf '%-4s %-8s %10s %9s %7s   inspect says: stops/s, calibrated µs/stop, µs/stop, %% held, ms/response = %s\n' \
            "$r" trace "$rps" "$p50" "$err" "$est"
        echo "trace $rps $p50 $err $est" >>"$WORK/$name.rows"

        if [ "$HAVE_STRACE" = 1 ]; then
            strace -f -e trace=network,read,write -o /dev/null -p "$PID" 2>/dev/null &
            TRACER=$!
            wait_tracer "$PID" attached
            read -r rps p50 err < <(bench "$URL")
            kill -INT "$TRACER"
            wait "$TRACER" || true
            TRACER=""
            wait_tracer "$PID" detached
            printf '%-4s %-8s %10s %9s %7s\n' "$r" strace "$rps" "$p50" "$err"
            echo "strace $rps $p50 $err" >>"$WORK/$name.rows"
        fi
    done
    python3 - "$WORK/$name.rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for case in ("none", "trace", "strace"):
    r = [x for x in rows if x[0] == case]
    if r:
        med[case] = (statistics.median(float(x[1]) for x in r), statistics.median(float(x[2]) for x in r),
                     sum(int(x[3]) for x in r))
for case, (rps, p50, err) in med.items():
    ratio = rps / med["none"][0] if med["none"][0] else float("nan")
    print(f"median {case:<7} {rps:>9.0f} req/s  p50 {p50:6.2f} ms  errors {err}  ratio to none {ratio:.2f}")
PY
    echo
done
