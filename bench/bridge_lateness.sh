#!/usr/bin/env bash
# How late the delay bridge releases frames, at SCHED_FIFO and at normal priority,
# on a quiet machine and with two busy loops keeping both cores busy (root).
# Each run: examples/rtt_pair (release) with 5 ms each way between two namespaces
# it creates, then 200 pings 20 ms apart, then 20 MB over TCP; the bridge's own
# counters (mean and max lateness of a release, per direction) and ping's average.
# Usage: sudo bench/bridge_lateness.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-1}
[ "$(id -u)" = 0 ] || { echo "must run as root" >&2; exit 1; }
cargo build --release --quiet --example rtt_pair
NS=tdbench$$
OUT=$(mktemp -d /tmp/tcpdoctor-bridge.XXXXXX)
PIDS=()
cleanup() {
    set +e
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    ip netns del "$NS-c" 2>/dev/null; ip netns del "$NS-s" 2>/dev/null
    rm -rf "$OUT"
}
trap cleanup EXIT

bulk_server='import socket
s=socket.socket(); s.bind(("198.18.0.2",9000)); s.listen(1); print("ready", flush=True)
c,_=s.accept()
while c.recv(1<<16): pass
c.send(b"k")'
bulk_client='import socket,time
s=socket.create_connection(("198.18.0.2",9000)); t=time.time(); s.sendall(b"x"*(20<<20)); s.shutdown(socket.SHUT_WR); s.recv(1)
print("20 MB in %.2f s" % (time.time()-t))'

# one LOAD PRIO WHAT: a fresh bridge, then WHAT (ping or bulk) under LOAD; prints a line.
one() {
    local load=$1 prio=$2 what=$3 result
    local args=(--name "$NS" --one-way 5ms -d 120s)
    [ "$prio" = normal ] && args+=(--no-rt)
    target/release/examples/rtt_pair "${args[@]}" >"$OUT/pair" 2>&1 &
    local pair=$!; PIDS+=("$pair")
    for _ in $(seq 100); do grep -q "^ready" "$OUT/pair" && break; sleep 0.1; done
    grep -q "^ready" "$OUT/pair" || { cat "$OUT/pair" >&2; exit 1; }
    local busy=()
    if [ "$load" = busy ]; then
        for _ in 1 2; do timeout 60 sh -c 'while :; do :; done' & busy+=($!); PIDS+=("$!"); done
    fi
    if [ "$what" = ping ]; then
        result="ping avg $(ip netns exec "$NS-c" ping -q -c 200 -i 0.02 198.18.0.2 | tail -1 | cut -d/ -f5) ms"
    else
        ip netns exec "$NS-s" timeout 60 python3 -c "$bulk_server" >"$OUT/srv" &
        local srv=$!; PIDS+=("$srv")
        for _ in $(seq 50); do grep -q ready "$OUT/srv" && break; sleep 0.1; done
        result=$(ip netns exec "$NS-c" timeout 60 python3 -c "$bulk_client")
        wait "$srv" || true
    fi
    for b in "${busy[@]}"; do kill "$b" 2>/dev/null || true; wait "$b" 2>/dev/null || true; done
    kill "$pair"; wait "$pair" || true
    python3 - "$load" "$prio" "$what" "$result" "$(grep '^{' "$OUT/pair")" <<'PY'
import json, sys
load, prio, what, result, stats = sys.argv[1:]
s = json.loads(stats)
u, d = s["client_to_server"], s["server_to_client"]
mean = (u["late_mean_us"] * u["frames"] + d["late_mean_us"] * d["frames"]) / (u["frames"] + d["frames"])
print("%-5s %-6s %-4s %6d frames  late mean %6.0f us  max %7.0f us  %s" %
      (load, prio, what, u["frames"] + d["frames"], mean, max(u["late_max_us"], d["late_max_us"]), result))
PY
}

for run in $(seq "$RUNS"); do
    echo "run $run"
    for load in quiet busy; do
        for prio in rt normal; do
            for what in ping bulk; do one "$load" "$prio" "$what"; done
        done
    done
done
