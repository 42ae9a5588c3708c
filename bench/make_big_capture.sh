#!/usr/bin/env bash
# Make a big, realistic loopback capture for benchmarking tcpdoctor.
#
#   bench/make_big_capture.sh OUT.pcap [PACKETS]      (default 2000000 packets)
#
# Starts Debian's nginx on 127.0.0.1 with its own config (one worker,
# access_log off, keepalive, `return 200 "hello"`), captures with
#   tcpdump -i lo -s 200 -w OUT.pcap -c PACKETS 'tcp port PORT'
# while `wrk -t2 -c50 -d30s` loads nginx, then stops everything by PID.
# Traffic goes only to 127.0.0.1. Every step is bounded by `timeout`.
# Needs root (tcpdump on lo) and nginx, wrk, tcpdump, capinfos.
#
# CLOSE=1: wrk sends `Connection: close`, so every request opens a connection
# of its own (a capture of many short connections, ~10 packets each).
# CONNS=N: wrk keeps N connections open instead of 50 (one wrk thread when
# N is 1), e.g. CONNS=1 for a capture whose one connection's state stays in L1.
set -euo pipefail

OUT=${1:?usage: $0 OUT.pcap [PACKETS]}
PACKETS=${2:-2000000}
MAX_WRK_ROUNDS=${MAX_WRK_ROUNDS:-4}   # 30 s each; more rounds only if 30 s was not enough
WRK_HEADER=()
if [ "${CLOSE:-0}" = 1 ]; then WRK_HEADER=(-H "Connection: close"); fi
CONNS=${CONNS:-50}
case "$CONNS" in
    '' | *[!0-9]*) CONNS_OK=0 ;;
    *) CONNS_OK=$((10#$CONNS >= 1)) ;;
esac
if [ "$CONNS_OK" != 1 ]; then
    echo "make_big_capture.sh: CONNS must be a number of connections, 1 or more (not '$CONNS')" >&2
    exit 2
fi
CONNS=$((10#$CONNS))
THREADS=$((CONNS < 2 ? 1 : 2))

for t in nginx wrk tcpdump capinfos ss; do
    command -v "$t" >/dev/null || { echo "missing tool: $t" >&2; exit 1; }
done

mkdir -p "$(dirname "$OUT")"
OUT=$(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")

. "$(dirname "$0")/lib.sh"
PORT=$(free_port 18080)

WORK=$(mktemp -d /tmp/tcpdoctor-bench-nginx.XXXXXX)
nginx_conf "$WORK" "$PORT" on ""
CONF="$WORK/nginx.conf"

NGINX_PID=""; TCPDUMP_PID=""; WRK_PID=""
cleanup() {
    for pid in $WRK_PID $TCPDUMP_PID $NGINX_PID; do
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill "$pid" 2>/dev/null || true; fi
    done
    for pid in $WRK_PID $TCPDUMP_PID $NGINX_PID; do
        [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

echo "nginx on 127.0.0.1:$PORT (config $CONF)"
timeout 300 nginx -c "$CONF" -p "$WORK" &
NGINX_PID=$!
for _ in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$PORT/" 2>/dev/null && break
    sleep 0.1
done
curl -sf "http://127.0.0.1:$PORT/" | grep -q hello || { echo "nginx did not come up" >&2; cat "$WORK/logs/error.log" >&2; exit 1; }

rm -f "$OUT"
echo "tcpdump -i lo -s 200 -w $OUT -c $PACKETS 'tcp port $PORT'"
# -B: a big kernel buffer so the capture keeps up with loopback at full speed.
timeout 300 tcpdump -i lo -n -s 200 -B 262144 -w "$OUT" -c "$PACKETS" "tcp port $PORT" 2> "$WORK/tcpdump.err" &
TCPDUMP_PID=$!
sleep 1   # let tcpdump attach its filter before load starts

round=0
while kill -0 "$TCPDUMP_PID" 2>/dev/null && [ "$round" -lt "$MAX_WRK_ROUNDS" ]; do
    round=$((round + 1))
    echo "wrk round $round: wrk -t$THREADS -c$CONNS -d30s ${WRK_HEADER[*]} http://127.0.0.1:$PORT/"
    timeout 45 wrk -t"$THREADS" -c"$CONNS" -d30s "${WRK_HEADER[@]}" "http://127.0.0.1:$PORT/" > "$WORK/wrk.out" 2>&1 &
    WRK_PID=$!
    # Stop the load as soon as tcpdump has its packets.
    while kill -0 "$WRK_PID" 2>/dev/null; do
        if ! kill -0 "$TCPDUMP_PID" 2>/dev/null; then kill "$WRK_PID" 2>/dev/null || true; break; fi
        sleep 0.2
    done
    wait "$WRK_PID" 2>/dev/null || true
    WRK_PID=""
    grep -E 'Requests/sec|requests in' "$WORK/wrk.out" || true
done

if kill -0 "$TCPDUMP_PID" 2>/dev/null; then
    echo "tcpdump did not reach $PACKETS packets after $round wrk rounds; stopping it" >&2
    kill "$TCPDUMP_PID" 2>/dev/null || true
fi
wait "$TCPDUMP_PID" 2>/dev/null || true
TCPDUMP_PID=""
cat "$WORK/tcpdump.err" >&2

kill "$NGINX_PID" 2>/dev/null || true
wait "$NGINX_PID" 2>/dev/null || true
NGINX_PID=""

echo
capinfos -c -l -s -u -M "$OUT"
count=$(capinfos -c -M -T -r "$OUT" | awk -F'\t' '{print $2}')
snap=$(capinfos -l -T -r "$OUT" | awk -F'\t' '{print $2}')
ok=1
[ "$count" -ge "$PACKETS" ] || { echo "FAIL: $count packets < $PACKETS" >&2; ok=0; }
[ "$snap" = 200 ] || { echo "FAIL: snaplen $snap != 200" >&2; ok=0; }
[ "$ok" = 1 ] && echo "OK: $count packets, snaplen $snap -> $OUT"
[ "$ok" = 1 ]
