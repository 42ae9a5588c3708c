#!/usr/bin/env bash
# tcpdoctor watch at the highest packet rate a local load produces, beside
# tcpdump on the same traffic in the same run; then RSS over a churn of
# synthetic short connections.
#
#   bench/watch_rate.sh [ROUNDS] [DURATION] [CONNECTIONS]   (default 3 rounds of 5s; 1000000)
#
# Needs root (both captures), nginx, and wrk (or falls back to tcpdoctor bench).
# Each round: Debian's nginx on 127.0.0.1 (tcp_nodelay on, keep-alive, one
# worker, `return 200 "hello"`), `tcpdoctor watch -i lo 'tcp port P'` with
# --metrics and `tcpdump -i lo -w /dev/null tcp port P` both capturing, then
# `wrk -t1 -c50 -dD` (or `tcpdoctor bench -t1 -c50 -dD`). Prints per round:
# requests/s, watch's packets, packets/s and kernel drops (from its final
# summary and from /metrics), its CPU seconds and peak RSS, and tcpdump's
# captured / received by filter / dropped by kernel counts.
# Then `examples/watch_churn.rs` feeds CONNECTIONS synthetic short connections
# through watch's analysis and prints RSS as it goes (no traffic).
# Traffic goes only to 127.0.0.1; every process is stopped by PID.
set -euo pipefail

ROUNDS=${1:-3}
DUR=${2:-5s}
CONNS=${3:-1000000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

[ "$(id -u)" = 0 ] || { echo "run as root (packet capture)" >&2; exit 1; }
for t in nginx tcpdump ss timeout; do
    command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || { echo "missing tool: $t (apt-get install nginx-light tcpdump)" >&2; exit 1; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" --example watch_churn
TD="$ROOT/target/release/tcpdoctor"
if command -v wrk >/dev/null; then LOAD="wrk"; else LOAD="tcpdoctor bench"; fi

. "$ROOT/bench/lib.sh"
PORT=$(free_port 18480)
MPORT=$(free_port 19480)

WORK=$(mktemp -d /tmp/tcpdoctor-bench-watch.XXXXXX)
nginx_conf "$WORK" "$PORT" off "tcp_nodelay on;"
NGINX_PID=""
cleanup() {
    [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null && wait "$NGINX_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
"$NGINX" -c "$WORK/nginx.conf" -p "$WORK" &
NGINX_PID=$!
for _ in $(seq 50); do
    ss -Htln "sport = :$PORT" | grep -q . && break
    sleep 0.1
done

secs=${DUR%s}
echo "load: $LOAD -t1 -c50 -d$DUR against nginx on 127.0.0.1:$PORT (tcp_nodelay on, keep-alive); $(nproc) cores"
printf '%-5s %9s | %10s %10s %8s %8s %7s %8s | %10s %10s %8s\n' round "req/s" "watch pkts" "pkts/s" drops "drops/m" "cpu s" "RSS MiB" "tcpdump" "received" dropped
for r in $(seq "$ROUNDS"); do
    /usr/bin/time -f "%U %S %M" -o "$WORK/time.$r" \
        "$TD" watch -i lo "tcp port $PORT" --metrics "127.0.0.1:$MPORT" --summary-every 600s \
        --duration "$((secs + 3))s" > "$WORK/watch.$r" 2> "$WORK/watch.err.$r" &
    WATCH=$!
    timeout -s INT "$((secs + 2))" tcpdump -i lo -n -w /dev/null "tcp port $PORT" 2> "$WORK/tcpdump.$r" &
    TCPDUMP=$!
    sleep 1
    if [ "$LOAD" = wrk ]; then
        rps=$(wrk -t1 -c50 -d"$DUR" "http://127.0.0.1:$PORT/" | awk '/Requests\/sec/ {print $2}')
    else
        rps=$("$TD" bench -t1 -c50 -d"$DUR" "http://127.0.0.1:$PORT/" | awk '/Requests\/sec/ {print $2}')
    fi
    # /metrics while the capture still runs: the same counters Prometheus would read.
    mdrops=$(exec 3<>"/dev/tcp/127.0.0.1/$MPORT"; printf 'GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3; awk '/^tcpdoctor_capture_drops_total/ {print $2}' <&3)
    wait "$TCPDUMP" || true
    wait "$WATCH"
    line=$(grep 'FINAL SUMMARY' "$WORK/watch.$r")
    pkts=$(sed -E 's/.*: ([0-9]+) packets, ([0-9]+) dropped.*/\1/' <<<"$line")
    drops=$(sed -E 's/.*: ([0-9]+) packets, ([0-9]+) dropped.*/\2/' <<<"$line")
    read -r user sys rss < "$WORK/time.$r"
    cap=$(awk '/packets captured/ {print $1}' "$WORK/tcpdump.$r")
    recv=$(awk '/packets received by filter/ {print $1}' "$WORK/tcpdump.$r")
    tdrop=$(awk '/packets dropped by kernel/ {print $1}' "$WORK/tcpdump.$r")
    printf '%-5s %9s | %10s %10.0f %8s %8s %7.2f %8.1f | %10s %10s %8s\n' "$r" "$rps" "$pkts" \
        "$(echo "$pkts / $secs" | bc -l)" "$drops" "$mdrops" "$(echo "$user + $sys" | bc -l)" "$(echo "$rss / 1024" | bc -l)" \
        "$cap" "$recv" "$tdrop"
done
echo "(watch pkts/drops: its final summary; drops/m: tcpdoctor_capture_drops_total scraped just after the load; pkts/s over the load's $DUR)"
echo
echo "churn: $CONNS synthetic short connections through watch's analysis (--max-connections 100000)"
"$ROOT/target/release/examples/watch_churn" "$CONNS"
