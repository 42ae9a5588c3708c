#!/usr/bin/env bash
# Re-creates the captures in tests/data/rtt/ with real traffic across a real
# round trip: two network namespaces (tdrttfix-c, the client, 198.18.0.1, and
# tdrttfix-s, the server, 198.18.0.2) joined by tcpdoctor's userspace delay
# bridge (examples/rtt_pair.rs: TAP devices, a fixed one-way delay, optional
# seeded loss, SCHED_FIFO). Ground truth for each file: TRUTH.md.
#
# Needs root, cargo, tcpdump, ip, Debian's python3 (/usr/bin/python3), nginx,
# java/javac, curl, openssl. Traffic stays inside the two namespaces, which
# the script creates and deletes (trap, also on failure; a run that was killed
# leaves them to the next run, which deletes them first: idempotent). Every
# process it starts runs under `timeout` and is stopped by its PID.
#
# Usage: sudo tests/data/rtt/make.sh          (all captures, about 2 minutes)
#        sudo tests/data/rtt/make.sh nagle_5  (only cases whose name contains it)
#        TCPDOCTOR_CAPTURE_DIR=DIR ...        (write the files into DIR instead)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
LAB=$REPO/tests/data/lab
# TCPDOCTOR_CAPTURE_DIR: write the captures elsewhere (to try the script without changing the committed files).
OUT=${TCPDOCTOR_CAPTURE_DIR:-$HERE}
ONLY=${1:-}
PY=/usr/bin/python3
NS=tdrttfix
C=(ip netns exec "$NS-c")
S=(ip netns exec "$NS-s")
SRV=198.18.0.2

[ "$(id -u)" = 0 ] || { echo "must run as root" >&2; exit 1; }
for t in cargo tcpdump ip nginx java javac curl openssl timeout ss "$PY"; do
    command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || { echo "missing tool: $t" >&2; exit 1; }
done

(cd "$REPO" && cargo build --release --quiet --example rtt_pair)
PAIR=$REPO/target/release/examples/rtt_pair

WORK=$(mktemp -d /tmp/tcpdoctor-rtt.XXXXXX)
chmod 755 "$WORK"
PIDS=()
BRIDGE=""

NETNS=("$NS-c" "$NS-s")

# log, cleanup (trapped), want, bg, stop, wait_for, wait_port
. "$LAB/procs.sh"

# bridge_up NAME ONE_WAY [rtt_pair args...] : the namespaces and the bridge
bridge_up() {
    local name=$1 delay=$2; shift 2
    ip netns del "$NS-c" 2>/dev/null || true # left by a killed run
    ip netns del "$NS-s" 2>/dev/null || true
    bg "bridge-$name" "$PAIR" --name "$NS" --one-way "$delay" -d 10m "$@"
    BRIDGE=$BGPID
    wait_for "$WORK/bridge-$name.out" '^ready'
    "${C[@]}" ping -q -c 3 -i 0.2 "$SRV" | tail -1
}

# bridge_down NAME : stop it; its counters go to bridge.log
bridge_down() {
    stop "$BRIDGE"
    grep '^{' "$WORK/bridge-$1.out" | sed "s/^/$1 /" >>"$WORK/bridge.log"
}

# cap_start NAME SIDE(c|s) [-i IFACE] : tcpdump in that namespace into $WORK/NAME.pcap
cap_start() {
    local name=$1 side=$2 iface=${3:-rtt0}
    local ns=("${C[@]}")
    [ "$side" = s ] && ns=("${S[@]}")
    bg "cap-$name" "${ns[@]}" timeout 300 tcpdump -Z root -n -U -s 200 -i "$iface" -w "$WORK/$name.pcap" tcp
    wait_for "$WORK/cap-$name.out" "listening on"
    CAPPID=$BGPID
}

# publish NAME... : move the finished captures into tests/data/rtt (or TCPDOCTOR_CAPTURE_DIR)
publish() {
    local n
    for n in "$@"; do
        if grep -q 'dropped by kernel' "$WORK/cap-$n.out" && ! grep -q '^0 packets dropped by kernel' "$WORK/cap-$n.out"; then
            echo "WARNING: $n: tcpdump reports kernel drops" >&2
        fi
        mv -f "$WORK/$n.pcap" "$OUT/$n.pcap"
        chmod 644 "$OUT/$n.pcap"
        echo "--> $n.pcap: $(stat -c %s "$OUT/$n.pcap") bytes"
    done
}

wwr_server() { # PORT [args] : the lab's write-write-read server in the server namespace
    local port=$1; shift
    bg "srv-$port" "${S[@]}" timeout 300 "$PY" -u "$LAB/wwr_server.py" --host "$SRV" --port "$port" --max-seconds 280 "$@"
    SRVPID=$BGPID
    wait_for "$WORK/srv-$port.out" listening
}

client() { # PORT [args] : the lab's keep-alive client in the client namespace, in the foreground
    local port=$1; shift
    "${C[@]}" timeout 120 "$PY" -u "$LAB/client.py" --host "$SRV" --port "$port" --timeout 110 "$@"
}

# Nagle + delayed ACK, captured at both ends at once.
nagle_both_ends() { # NAME ONE_WAY
    local name=$1
    log "$name: Nagle server, keep-alive, $2 each way, captured at both ends"
    bridge_up "$name" "$2"
    wwr_server 8080 --mode wwr
    cap_start "${name}_client" c; local cc=$CAPPID
    cap_start "${name}_server" s; local cs=$CAPPID
    client 8080 -n 30
    sleep 1
    stop "$cc"; stop "$cs"; stop "$SRVPID"
    bridge_down "$name"
    publish "${name}_client" "${name}_server"
}

want nagle_5ms && nagle_both_ends nagle_5ms 5ms
want nagle_40ms && nagle_both_ends nagle_40ms 40ms

if want nodelay_5ms; then
    log "nodelay_5ms_client: the same server with TCP_NODELAY, 5 ms each way, captured at the client"
    bridge_up nodelay_5ms 5ms
    wwr_server 8080 --mode wwr --nodelay
    cap_start nodelay_5ms_client c
    cc=$CAPPID
    client 8080 -n 30
    sleep 1
    stop "$cc"; stop "$SRVPID"
    bridge_down nodelay_5ms
    publish nodelay_5ms_client
fi

if want midstream; then
    log "midstream_high_port: server on 61000, clients on 20000-30000, capture started after the load"
    bridge_up midstream 5ms
    "${C[@]}" sysctl -q -w net.ipv4.ip_local_port_range="20000 30000"
    wwr_server 61000 --mode wwr
    loads=()
    for i in 1 2 3 4; do
        bg "load-$i" "${C[@]}" timeout 60 "$PY" -u "$LAB/client.py" --host "$SRV" --port 61000 -n 100 --timeout 50
        loads+=("$BGPID")
    done
    sleep 1.5
    cap_start midstream_high_port s
    cs=$CAPPID
    sleep 2
    stop "$cs"
    for p in "${loads[@]}"; do stop "$p"; done
    stop "$SRVPID"
    bridge_down midstream
    publish midstream_high_port
fi

if want proxy_jdk; then
    log "proxy_jdk: nginx proxy_pass (upstream keepalive) in front of the JDK HttpServer (default Nagle), 5 ms each way"
    bridge_up proxy_jdk 5ms
    mkdir -p "$WORK/jdk" "$WORK/nginx"
    javac -d "$WORK/jdk" "$LAB/HttpServerDemo.java"
    bg jdk "${S[@]}" timeout 300 java -cp "$WORK/jdk" HttpServerDemo 8081 300 280
    JDK=$BGPID
    wait_port "$NS-s" 8081
    cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
master_process off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $WORK/nginx/body;
    proxy_temp_path $WORK/nginx/proxy;
    fastcgi_temp_path $WORK/nginx/fastcgi;
    uwsgi_temp_path $WORK/nginx/uwsgi;
    scgi_temp_path $WORK/nginx/scgi;
    keepalive_timeout 65;
    upstream backend {
        server 127.0.0.1:8081;
        keepalive 4;
    }
    server {
        listen $SRV:8080;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
CONF
    bg nginx "${S[@]}" timeout 300 nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/error.log"
    NGINX=$BGPID
    wait_port "$NS-s" 8080
    cap_start proxy_jdk s any
    cs=$CAPPID
    client 8080 -n 30
    sleep 1
    stop "$cs"; stop "$NGINX"; stop "$JDK"
    bridge_down proxy_jdk
    publish proxy_jdk
fi

if want tls; then
    log "tls_two_records: Python ssl server, header and body as two records, Nagle on, 5 ms each way"
    bridge_up tls 5ms
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=rtt-lab \
        -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
    bg tls "${S[@]}" timeout 300 "$PY" -u "$HERE/tls_server.py" --host "$SRV" --port 8443 \
        --cert "$WORK/cert.pem" --key "$WORK/key.pem" --max-seconds 280
    TLS=$BGPID
    wait_for "$WORK/tls.out" listening
    cap_start tls_two_records s
    cs=$CAPPID
    # One connection, 30 requests (curl reuses it for the glob's URLs).
    "${C[@]}" timeout 60 curl -sk -o /dev/null -w '%{time_total}\n' "https://$SRV:8443/r[1-30]"
    sleep 1
    stop "$cs"; stop "$TLS"
    bridge_down tls
    publish tls_two_records
fi

if want rpc; then
    log "rpc_client_nagle: length-prefixed RPC, client writes length then payload (Nagle on), 5 ms each way"
    bridge_up rpc 5ms
    bg rpc "${S[@]}" timeout 300 "$PY" -u "$HERE/rpc.py" server --host "$SRV" --port 9000 --max-seconds 280
    RPC=$BGPID
    wait_for "$WORK/rpc.out" listening
    cap_start rpc_client_nagle s
    cs=$CAPPID
    "${C[@]}" timeout 60 "$PY" -u "$HERE/rpc.py" client --host "$SRV" --port 9000 -n 30
    sleep 1
    stop "$cs"; stop "$RPC"
    bridge_down rpc
    publish rpc_client_nagle
fi

if want loss; then
    log "loss_nagle: 3 % seeded loss each way plus the Nagle server, 5 ms each way, captured at both ends"
    bridge_up loss_nagle 5ms --loss 3 --seed 15 --drop-log "$WORK/loss_nagle.drops"
    wwr_server 8080 --mode wwr
    cap_start loss_nagle s; cs=$CAPPID
    cap_start loss_nagle_client c; cc=$CAPPID
    client 8080 -n 200
    sleep 1
    stop "$cs"; stop "$cc"; stop "$SRVPID"
    bridge_down loss_nagle
    cp "$WORK/loss_nagle.drops" "$OUT/loss_nagle.drops"
    chmod 644 "$OUT/loss_nagle.drops"
    publish loss_nagle loss_nagle_client
fi

if want expect; then
    log "expect_100: curl with Expect: 100-continue against a server that never sends 100, 5 ms each way"
    bridge_up expect 5ms
    head -c 4000 /dev/zero | tr '\0' 'b' >"$WORK/body.bin"
    bg expect "${S[@]}" timeout 300 "$PY" -u "$HERE/expect_server.py" --host "$SRV" --port 8080 --max-seconds 280
    EXP=$BGPID
    wait_for "$WORK/expect.out" listening
    cap_start expect_100 s
    cs=$CAPPID
    # Three POSTs on one connection, then two on another.
    for urls in "/a /b /c" "/d /e"; do
        set -- $urls
        "${C[@]}" timeout 60 curl -s -o /dev/null -w '%{time_total}\n' -H 'Expect: 100-continue' \
            --data-binary "@$WORK/body.bin" "${@/#/http://$SRV:8080}"
    done
    sleep 1
    stop "$cs"; stop "$EXP"
    bridge_down expect
    publish expect_100
fi

if [ -f "$WORK/bridge.log" ]; then
    # Keep the counters of the cases re-made now, and the others' from before.
    touch "$OUT/bridge.log"
    cut -d' ' -f1 "$WORK/bridge.log" | while read -r n; do sed -i "/^$n /d" "$OUT/bridge.log"; done
    cat "$WORK/bridge.log" >>"$OUT/bridge.log"
    sort -o "$OUT/bridge.log" "$OUT/bridge.log"
    chmod 644 "$OUT/bridge.log"
fi
echo done
