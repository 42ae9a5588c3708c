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
start_pinned_nginx "$NGINX" "$WORK" "$PORT"
URL="http://127.0.0.1:$PORT/"
echo "nginx $("$NGINX" -v 2>&1 | sed 's/.*\///') on $URL (cpus $SERVER_CPUS); clients on cpus $CLIENT_CPUS; $ROUNDS rounds of $DUR"

wrk_vs_bench "$ROUNDS" "$DUR" "$URL" 1.15 0.90
# nginx's own CPU decides the ceiling when it saturates its core.
# nginx runs under `timeout`: its PID is that process's child.
NPID=$(pgrep -P "$NGINX_PID" | head -1)
echo "nginx CPU over the whole run: $(awk '{printf "%.1f s", ($14 + $15) / 100}' "/proc/$NPID/stat" 2>/dev/null || echo "?") (of $(awk -v r="$ROUNDS" -v d="${DUR%s}" 'BEGIN {print 2 * r * d}') s of load)"
