#!/usr/bin/env bash
# tcpdoctor bench vs wrk over HTTPS, side by side in one run, against Debian's nginx.
#
#   bench/bench_tls_vs_wrk.sh [ROUNDS] [DURATION]          (default 3 rounds of 5s)
#
# Makes a self-signed certificate (openssl), starts nginx on 127.0.0.1 with ssl
# (TLS 1.3 only, one worker, access_log off, `return 200 "hello"`, keep-alive)
# pinned to SERVER_CPUS (default 0), then runs `wrk -t1 -c50 -dD` and
# `tcpdoctor bench -k -t1 -c50 -dD` over https alternately, ROUNDS times each,
# both pinned to CLIENT_CPUS (default 1), each under /usr/bin/time for CPU
# seconds. Then handshakes/s: `tcpdoctor bench --no-keepalive` (a new connection,
# full or resumed handshake, per request) and `ab -c50` over https (ab also opens
# a connection per request; wrk has no such mode). Prints every run, the medians
# and the ratios. Traffic goes only to 127.0.0.1; nginx is stopped by PID.
set -euo pipefail

ROUNDS=${1:-3}
DUR=${2:-5s}
SERVER_CPUS=${SERVER_CPUS:-0}
CLIENT_CPUS=${CLIENT_CPUS:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

for t in nginx wrk ab openssl taskset ss; do
    command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || { echo "missing tool: $t (apt-get install nginx-light wrk apache2-utils openssl)" >&2; exit 1; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
TD="$ROOT/target/release/tcpdoctor"

. "$ROOT/bench/lib.sh"
PORT=$(free_port 18380)

WORK=$(mktemp -d /tmp/tcpdoctor-bench-tls.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
nginx_conf "$WORK" "$PORT" off ""
# The same server block, over TLS 1.3.
sed -i "s|listen 127.0.0.1:$PORT;|listen 127.0.0.1:$PORT ssl; ssl_certificate $WORK/cert.pem; ssl_certificate_key $WORK/key.pem; ssl_protocols TLSv1.3;|" "$WORK/nginx.conf"
start_pinned_nginx "$NGINX" "$WORK" "$PORT"
URL="https://127.0.0.1:$PORT/"
echo "nginx $("$NGINX" -v 2>&1 | sed 's/.*\///') with ssl (TLS 1.3) on $URL (cpus $SERVER_CPUS); clients on cpus $CLIENT_CPUS; $ROUNDS rounds of $DUR"

wrk_vs_bench "$ROUNDS" "$DUR" "$URL" 1.0 1.0 -k

# Handshakes/s: a new connection per request.
SECS=${DUR%s}
for r in $(seq "$ROUNDS"); do
    out=$( { /usr/bin/time -f "CPU %U %S" timeout 120 taskset -c "$CLIENT_CPUS" "$TD" bench -k -t1 -c50 -d"$DUR" --no-keepalive --json "$URL"; } 2>&1 )
    cpu=$(echo "$out" | awk '/^CPU/ {print $2 + $3}')
    echo "$out" | grep -v '^CPU' | python3 -c 'import json, sys
r = json.load(sys.stdin); t = r["tls"]; cpu = float(sys.argv[2])
print("round %s  tcpdoctor --no-keepalive  %.0f handshakes/s (%d handshakes, %d resumed), p50 handshake %.3f ms, %d errors, %.1f us CPU/request" % (sys.argv[1], t["handshakes"] / r["elapsed_s"], t["handshakes"], t["resumed"], t["handshake"]["p50"], sum(r["errors"].values()), cpu / max(r["requests"], 1) * 1e6))' "$r" "$cpu"
    n=$(awk -v s="$SECS" 'BEGIN {print int(s * 1500)}')
    out=$( { /usr/bin/time -f "CPU %U %S" timeout 120 taskset -c "$CLIENT_CPUS" ab -q -n "$n" -c 50 -f TLS1.3 "$URL"; } 2>&1 )
    echo "$out" | awk -v r="$r" '/^Requests per second:/ {rps = $4} /^Failed requests:/ {f = $3} /^Complete requests:/ {n = $3} /^CPU/ {cpu = $2 + $3} END {printf "round %s  ab -c50 (new connection each)  %s handshakes/s (%s requests, %s failed), %.1f us CPU/request\n", r, rps, n, f, cpu / n * 1e6}'
done
# nginx's own CPU decides the ceiling when it saturates its core.
NPID=$(pgrep -P "$NGINX_PID" | head -1)
echo "nginx CPU over the whole run: $(awk '{printf "%.1f s", ($14 + $15) / 100}' "/proc/$NPID/stat" 2>/dev/null || echo "?")"
