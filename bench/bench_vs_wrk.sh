#!/usr/bin/env bash
# tcpdoctor bench vs wrk, side by side in one run, against Debian's nginx.
#
#   bench/bench_vs_wrk.sh [ROUNDS] [DURATION]          (default 3 rounds of 5s)
#
# Starts nginx on 127.0.0.1 with its own config (one worker, access_log off,
# `return 200 "hello"`, keep-alive) pinned to SERVER_CPUS (default 0), then
# runs `wrk -t1 -c50 -dD` and `tcpdoctor bench -t1 -c50 -dD` alternately,
# ROUNDS times each, both pinned to CLIENT_CPUS (default 1), each under
# /usr/bin/time for CPU seconds. Prints every run, the medians and the ratios
# (req/s: tcpdoctor ÷ wrk; CPU per request: tcpdoctor ÷ wrk).
# Traffic goes only to 127.0.0.1; nginx is stopped by PID.
set -euo pipefail

ROUNDS=${1:-3}
DUR=${2:-5s}
SERVER_CPUS=${SERVER_CPUS:-0}
CLIENT_CPUS=${CLIENT_CPUS:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

for t in nginx wrk taskset ss; do
    command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || { echo "missing tool: $t (apt-get install nginx-light wrk)" >&2; exit 1; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
TD="$ROOT/target/release/tcpdoctor"

. "$ROOT/bench/lib.sh"
PORT=$(free_port 18280)

WORK=$(mktemp -d /tmp/tcpdoctor-bench-wrk.XXXXXX)
nginx_conf "$WORK" "$PORT" off ""
NGINX_PID=""
cleanup() {
    [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null && wait "$NGINX_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
timeout 900 taskset -c "$SERVER_CPUS" "$NGINX" -c "$WORK/nginx.conf" -p "$WORK" &
NGINX_PID=$!
for _ in $(seq 100); do
    ss -Htln "sport = :$PORT" | grep -q . && break
    sleep 0.05
done
URL="http://127.0.0.1:$PORT/"
echo "nginx $("$NGINX" -v 2>&1 | sed 's/.*\///') on $URL (cpus $SERVER_CPUS); clients on cpus $CLIENT_CPUS; $ROUNDS rounds of $DUR"

# One run: prints "REQ_PER_S REQUESTS CPU_SECONDS".
run() {
    local out cpu
    out=$( { /usr/bin/time -f "CPU %U %S" timeout 120 taskset -c "$CLIENT_CPUS" "$@" "$URL"; } 2>&1 )
    cpu=$(echo "$out" | awk '/^CPU/ {print $2 + $3}')
    echo "$out" | awk -v cpu="$cpu" '
        /Requests\/sec:/ {rps = $2}
        / requests in / {n = $1}
        END {print rps, n, cpu}'
}

declare -a W_RPS T_RPS W_CPR T_CPR
for r in $(seq "$ROUNDS"); do
    read -r rps n cpu < <(run wrk -t1 -c50 -d"$DUR")
    W_RPS+=("$rps"); W_CPR+=("$(awk -v c="$cpu" -v n="$n" 'BEGIN {printf "%.3f", c / n * 1e6}')")
    echo "round $r  wrk        $rps req/s  $n requests  $cpu CPU s  ${W_CPR[-1]} us CPU/request"
    read -r rps n cpu < <(run "$TD" bench -t1 -c50 -d"$DUR")
    T_RPS+=("$rps"); T_CPR+=("$(awk -v c="$cpu" -v n="$n" 'BEGIN {printf "%.3f", c / n * 1e6}')")
    echo "round $r  tcpdoctor  $rps req/s  $n requests  $cpu CPU s  ${T_CPR[-1]} us CPU/request"
done

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
WR=$(median "${W_RPS[@]}"); TR=$(median "${T_RPS[@]}")
WC=$(median "${W_CPR[@]}"); TC=$(median "${T_CPR[@]}")
echo "median req/s:       wrk $WR  tcpdoctor $TR  ratio $(awk -v a="$TR" -v b="$WR" 'BEGIN {printf "%.2f", a / b}')x  (target >= 1.15x)"
echo "median CPU/request: wrk ${WC}us  tcpdoctor ${TC}us  ratio $(awk -v a="$TC" -v b="$WC" 'BEGIN {printf "%.2f", a / b}')x  (target <= 0.90x)"
# nginx's own CPU decides the ceiling when it saturates its core.
# nginx runs under `timeout`: its PID is that process's child.
NPID=$(pgrep -P "$NGINX_PID" | head -1)
echo "nginx CPU over the whole run: $(awk '{printf "%.1f s", ($14 + $15) / 100}' "/proc/$NPID/stat" 2>/dev/null || echo "?") (of $(awk -v r="$ROUNDS" -v d="${DUR%s}" 'BEGIN {print 2 * r * d}') s of load)"
