#!/usr/bin/env bash
# Re-creates every test capture in tests/data/ from scratch with REAL traffic.
#
# Needs root, tcpdump, tshark/editcap/mergecap/capinfos, nginx (Debian binary),
# java 17 (javac), python3, ab, nft, ip.  Traffic goes only to loopback or to
# addresses inside two network namespaces this script creates (tcpdoc-a /
# tcpdoc-b) and deletes again (trap, also on failure).  Every process it
# starts runs under `timeout` and is stopped by PID.
#
# Usage: sudo tests/data/make_captures.sh            (all captures)
#        sudo tests/data/make_captures.sh wwr_nagle  (only cases whose name matches)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB=$HERE/lab
# TCPDOCTOR_CAPTURE_DIR: write elsewhere (the live test uses a temp dir).
OUT=${TCPDOCTOR_CAPTURE_DIR:-$HERE}
ONLY=${1:-}

[ "$(id -u)" = 0 ] || { echo "must run as root" >&2; exit 1; }
for t in tcpdump tshark editcap mergecap capinfos nginx java javac python3 ab nft ip timeout ss; do
    command -v "$t" >/dev/null || { echo "missing tool: $t" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/tcpdoctor-lab.XXXXXX)
chmod 755 "$WORK"
NS_A=tcpdoc-a
NS_B=tcpdoc-b
NS_R=tcpdoc-r
# the loss + Nagle case's own path: server -- router (drops) -- client
NS_LA=tcpdoc-la
NS_LB=tcpdoc-lb
NS_LR=tcpdoc-lr
PIDS=()

NETNS=("$NS_A" "$NS_B" "$NS_R" "$NS_LA" "$NS_LB" "$NS_LR")

# log, cleanup (trapped), want, bg, stop, wait_for, wait_port
. "$LAB/procs.sh"

# cap_start NAME [ip netns exec NS] tcpdump-args... : start tcpdump -> $WORK/NAME
# (tcpdump runs as root (-Z root) and flushes every packet (-U)).
cap_start() {
    local name=$1; shift
    local pre=()
    if [ "$1" = ip ]; then pre=("$1" "$2" "$3" "$4"); shift 4; fi
    bg "cap-$name" "${pre[@]}" timeout 120 tcpdump -Z root -n -U --immediate-mode -B 8192 -w "$WORK/$name" "$@"
    wait_for "$WORK/cap-$name.out" "listening on"
    CAPPID=$BGPID
}

cap_stop() {
    sleep 1
    stop "$1"
}

# publish NAME : move a finished capture into tests/data
publish() {
    local f
    for f in "$WORK"/cap-"${1%.*}"*.out "$WORK/cap-$1.out"; do
        [ -f "$f" ] || continue
        if grep -q 'packets dropped by kernel' "$f" && ! grep -q '^0 packets dropped by kernel' "$f"; then
            echo "WARNING: $1: tcpdump reports kernel drops:" >&2
            cat "$f" >&2
        fi
    done
    mv -f "$WORK/$1" "$OUT/$1"
    chmod 644 "$OUT/$1"
    echo "--> $1: $(capinfos -c -M "$OUT/$1" | awk -F: '/Number of packets/{gsub(/ /,"",$2); print $2}') packets, $(stat -c %s "$OUT/$1") bytes"
}

PY=(python3 -u)
SERVER=(timeout 90 "${PY[@]}" "$LAB/wwr_server.py" --max-seconds 80)
CLIENT=(timeout 60 "${PY[@]}" "$LAB/client.py" --timeout 50)

# py_case NAME PORT "server args" "client args" [extra tcpdump filter/args]
# generic loopback case: tcpdump on lo, python server, python client
py_case() {
    local name=$1 port=$2 sargs=$3 cargs=$4 host=${5:-127.0.0.1}
    log "$name (port $port)"
    cap_start "$name" -i lo "tcp port $port"
    local cap=$CAPPID
    # shellcheck disable=SC2086
    bg "srv-$name" "${SERVER[@]}" --host "$host" --port "$port" $sargs
    local srv=$BGPID
    wait_for "$WORK/srv-$name.out" listening
    # shellcheck disable=SC2086
    "${CLIENT[@]}" --host "$host" --port "$port" $cargs
    stop "$srv"
    cap_stop "$cap"
    publish "$name"
}

############################################################################
# (a) + (l, ns magic) write-write-read server, Nagle on, port 28101.
#     wwr_nagle.pcap (usec) and wwr_nagle_ns.pcap (nsec magic) are two
#     tcpdumps of the SAME run.  Then derived: big-endian, DLT_NULL, RAW.
if want wwr_nagle; then
    log "wwr_nagle + wwr_nagle_ns (port 28101)"
    cap_start wwr_nagle.pcap -i lo "tcp port 28101"
    c1=$CAPPID
    cap_start wwr_nagle_ns.pcap -i lo --time-stamp-precision=nano "tcp port 28101"
    c2=$CAPPID
    bg srv-a "${SERVER[@]}" --port 28101 --mode wwr
    srv=$BGPID
    wait_for "$WORK/srv-a.out" listening
    "${CLIENT[@]}" --port 28101 -n 30
    stop "$srv"
    cap_stop "$c1"; stop "$c2"
    publish wwr_nagle.pcap
    publish wwr_nagle_ns.pcap
    n1=$(tcpdump -nr "$OUT/wwr_nagle.pcap" 2>/dev/null | wc -l)
    n2=$(tcpdump -nr "$OUT/wwr_nagle_ns.pcap" 2>/dev/null | wc -l)
    if [ "$n1" != "$n2" ]; then
        echo "ERROR: the two concurrent captures differ ($n1 vs $n2 packets); re-run" >&2
        exit 1
    fi
    python3 "$LAB/to_big_endian.py" "$OUT/wwr_nagle.pcap" "$OUT/wwr_nagle_be.pcap"
    python3 "$LAB/relink.py" null "$OUT/wwr_nagle.pcap" "$OUT/wwr_nagle_null.pcap"
    python3 "$LAB/relink.py" raw "$OUT/wwr_nagle.pcap" "$OUT/wwr_nagle_raw.pcap"
fi

# (b) same server with TCP_NODELAY on, port 28102
if want wwr_nodelay; then py_case wwr_nodelay.pcap 28102 "--mode wwr --nodelay" "-n 30"; fi

# (k) (a) over IPv6 loopback, port 28112
# (k2) the same, as `tcpdump -s 128` would have kept it: frames cut by the snap length
if want ipv6; then
    py_case wwr_nagle_ipv6.pcap 28112 "--mode wwr" "-n 30" ::1
    editcap -F pcap -s 128 "$OUT/wwr_nagle_ipv6.pcap" "$OUT/wwr_nagle_ipv6_snap128.pcap"
fi

# (e) think 45 ms, then ONE send(); TCP_NODELAY off; port 28107
if want think45; then py_case think45.pcap 28107 "--mode think --think-ms 45" "-n 30"; fi

# pause: headers, 60 ms pause, body, TCP_NODELAY ON; port 28119. The client's
# delayed ACK (40 ms) comes first, the body 20 ms after it: application, not Nagle.
if want pause60; then py_case pause60_nodelay.pcap 28119 "--mode pause --think-ms 60 --nodelay" "-n 30"; fi

# zero window: a client with a small receive buffer that reads each 200 KB
# response only 300 ms after asking; the server (TCP_NODELAY on) must wait.
# Headers only (-s 96) to keep the file small; port 28120.
if want zero_window; then
    log "zero_window.pcap (port 28120)"
    cap_start zero_window.pcap -i lo -s 96 "tcp port 28120"
    cz=$CAPPID
    bg srv-zw "${SERVER[@]}" --port 28120 --mode single --nodelay --body-size 200000
    szw=$BGPID
    wait_for "$WORK/srv-zw.out" listening
    "${CLIENT[@]}" --port 28120 -n 3 --rcvbuf 4096 --read-delay-ms 300
    stop "$szw"
    cap_stop "$cz"
    publish zero_window.pcap
fi

# (f) client-side Nagle: POST in two writes, client TCP_NODELAY off;
#     server TCP_NODELAY on, one-write responses; port 28108
if want post_split; then py_case post_split_client.pcap 28108 "--mode single --nodelay --body-size 200" "-n 30 --post-split --post-size 300"; fi

############################################################################
# (j) tcpdump -i any: LINUX_SLL2 (default, port 28113) and LINUX_SLL
#     (-y LINUX_SLL, port 28118), wwr server with Nagle on.  Two separate runs
#     (two concurrent tcpdumps on "any" once lost a packet).
any_case() {
    local name=$1 port=$2; shift 2
    local try
    for try in 1 2 3; do
        log "$name (tcpdump -i any $*, port $port, attempt $try)"
        cap_start "$name" -i any "$@" "tcp port $port"
        local cap=$CAPPID
        bg "srv-$name" "${SERVER[@]}" --port "$port" --mode wwr
        local srv=$BGPID
        wait_for "$WORK/srv-$name.out" listening
        "${CLIENT[@]}" --port "$port" -n 30
        stop "$srv"
        cap_stop "$cap"
        # "any" sees loopback packets twice and has lost packets in the kernel
        # here now and then: retry until the capture is complete
        if grep -q '^0 packets dropped by kernel' "$WORK/cap-$name.out"; then
            break
        fi
        echo "kernel dropped packets, retrying" >&2
        sleep 1
    done
    publish "$name"
}
if want any_sll; then
    any_case any_sll2.pcap 28113
    any_case any_sll.pcap 28118 -y LINUX_SLL
fi

############################################################################
# (c) Debian nginx, own config, sendfile on, tcp_nodelay off/on, ab -k
nginx_case() {
    local name=$1 port=$2 nodelay=$3
    log "$name (nginx tcp_nodelay $nodelay, port $port)"
    local pfx=$WORK/nginx-$port
    mkdir -p "$pfx/www"
    chmod 755 "$pfx" "$pfx/www"
    python3 - "$pfx/www/index.html" <<'EOF'
import sys
body = "<!DOCTYPE html>\n<html><head><title>tcpdoctor lab</title></head><body>\n"
body += "<p>" + "static page for the nagle lab. " * 16 + "</p>\n"
body += "</body></html>\n"
body = body[:590] + "\n" * max(0, 600 - len(body[:590]))
open(sys.argv[1], "w").write(body)
EOF
    sed -e "s|@PREFIX@|$pfx|g" -e "s|@ROOT@|$pfx/www|g" -e "s|@PORT@|$port|g" \
        -e "s|@NODELAY@|$nodelay|g" "$LAB/nginx.conf.template" >"$pfx/nginx.conf"
    cap_start "$name" -i lo "tcp port $port"
    local cap=$CAPPID
    bg "nginx-$port" timeout 90 nginx -c "$pfx/nginx.conf" -p "$pfx"
    local srv=$BGPID
    wait_port "$port"
    timeout 60 ab -k -c 1 -n 40 "http://127.0.0.1:$port/index.html" >"$WORK/ab-$port.out" 2>&1 || { cat "$WORK/ab-$port.out"; return 1; }
    grep -E 'Complete requests|Keep-Alive requests|Time per request.*mean\)|Document Length' "$WORK/ab-$port.out"
    stop "$srv"
    cap_stop "$cap"
    publish "$name"
}
if want nginx_nodelay_off; then nginx_case nginx_nodelay_off.pcap 28103 off; fi
if want nginx_nodelay_on; then nginx_case nginx_nodelay_on.pcap 28104 on; fi

############################################################################
# (d) JDK com.sun.net.httpserver, default vs -Dsun.net.httpserver.nodelay=true
jdk_case() {
    local name=$1 port=$2; shift 2
    log "$name (JDK httpserver, port $port, $*)"
    bg "jdk-$port" timeout 90 java "$@" -cp "$WORK/java" HttpServerDemo "$port" 300 80
    local srv=$BGPID
    wait_for "$WORK/jdk-$port.out" listening
    # warm the JVM up (class loading/JIT made the first response ~65 ms slow)
    # on a connection that is NOT captured
    timeout 60 ab -k -c 1 -n 50 "http://127.0.0.1:$port/" >/dev/null 2>&1
    cap_start "$name" -i lo "tcp port $port"
    local cap=$CAPPID
    timeout 60 ab -k -c 1 -n 30 "http://127.0.0.1:$port/" >"$WORK/ab-$port.out" 2>&1 || { cat "$WORK/ab-$port.out"; return 1; }
    grep -E 'Complete requests|Keep-Alive requests|Time per request.*mean\)|Document Length' "$WORK/ab-$port.out"
    stop "$srv"
    cap_stop "$cap"
    publish "$name"
}
if want jdk; then
    mkdir -p "$WORK/java"
    javac -d "$WORK/java" "$LAB/HttpServerDemo.java"
    jdk_case jdk_default.pcap 28105 -Dtcpdoctor.lab=1
    jdk_case jdk_nodelay.pcap 28106 -Dsun.net.httpserver.nodelay=true
fi

############################################################################
# Network namespaces (created here, deleted by the EXIT trap):
#   tcpdoc-a (server)  vA   10.99.0.1/24  <->  vB   10.99.0.2/24   tcpdoc-b (client)
#   tcpdoc-a           vA10 10.99.10.1/24 <->  vR1 [tcpdoc-r relay] vT1 <=802.1Q VLAN 10=> vT2 [relay] vR2 <-> vB10 10.99.10.2/24 tcpdoc-b
# This kernel has no 8021q/bridge/tc-vlan support, so lab/vlan_relay.py (an
# AF_PACKET relay in tcpdoc-r) pushes/pops the 802.1Q tag; the vT1<->vT2 veth
# pair is a real tagged trunk.
# gso_max_segs 1 so that TCP hands one MSS per skb to the veth (no 64 KB
# GSO super-packets in captures or in nft rules).
veth() { # NS1 DEV1 NS2 DEV2
    ip -n "$1" link add "$2" type veth peer name "$4" netns "$3"
    ip -n "$1" link set "$2" gso_max_segs 1
    ip -n "$3" link set "$4" gso_max_segs 1
    ip -n "$1" link set "$2" up
    ip -n "$3" link set "$4" up
}
ns_setup() {
    local n
    for n in "$NS_A" "$NS_B" "$NS_R"; do
        ip netns del "$n" 2>/dev/null || true
        ip netns add "$n"
        ip -n "$n" link set lo up
    done
    veth "$NS_A" vA "$NS_B" vB
    ip -n "$NS_A" addr add 10.99.0.1/24 dev vA
    ip -n "$NS_B" addr add 10.99.0.2/24 dev vB
    veth "$NS_A" vA10 "$NS_R" vR1
    veth "$NS_R" vT1 "$NS_R" vT2
    veth "$NS_R" vR2 "$NS_B" vB10
    ip -n "$NS_A" addr add 10.99.10.1/24 dev vA10
    ip -n "$NS_B" addr add 10.99.10.2/24 dev vB10
    for n in "$NS_A" "$NS_B" "$NS_R"; do
        ip netns exec "$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    done
    bg relay ip netns exec "$NS_R" timeout 300 python3 -u "$LAB/vlan_relay.py" vR1 vT1 vT2 vR2 10 290
    RELAYPID=$BGPID
    wait_for "$WORK/relay.out" "relay up"
}
INA=(ip netns exec "$NS_A")
INB=(ip netns exec "$NS_B")

if want loss || want syn_retry || want veth_nagle || want nagle_ns || want midstream; then
    log "network namespaces"
    ns_setup
fi

# (g) loss_netns.pcap + syn_retry.pcap (tcpdoc-a server, tcpdoc-b client)
#   port 28109: TCP_NODELAY on, ONE write per 12000-B response, 12 requests;
#       nft in tcpdoc-b prerouting drops 3 full-size data segments (numgen
#       counter) -> fast retransmissions (SACK/RACK, sub-ms).
#   port 28116: TCP_NODELAY on, one write per 600-B response (one segment),
#       20 requests; nft drops the 6th response segment -> tail loss,
#       retransmitted by the ~200 ms probe/RTO; and the 14th response segment
#       AND its first retransmission -> second retransmission after backoff.
#   port 28110: the FIRST SYN is dropped (nft in tcpdoc-a prerouting) ->
#       connect() retransmits the SYN after ~1 s; then 5 fast requests.
#   Capture point: vA in tcpdoc-a (server side).  Data drops happen at the
#   receiver, so the capture holds the original AND the retransmission.
#   snaplen 128 to keep the file small (use the IP total length).
if want loss || want syn_retry; then
    log "loss_netns + syn_retry (netns, ports 28109/28116/28110)"
    "${INB[@]}" nft -f - <<'EOF'
table inet tcpdoc_loss {
    chain pre {
        type filter hook prerouting priority -300; policy accept;
        # count data segments (>1000 B IP) of the bulk connection, drop a few
        ip saddr 10.99.0.1 tcp sport 28109 ip length > 1000 numgen inc mod 100000 { 5, 40, 80 } counter drop
        # count response segments of the small-response connection
        ip saddr 10.99.0.1 tcp sport 28116 ip length > 500 numgen inc mod 100000 { 5, 13, 14 } counter drop
    }
}
EOF
    "${INA[@]}" nft -f - <<'EOF'
table inet tcpdoc_syn {
    chain pre {
        type filter hook prerouting priority -300; policy accept;
        # the very first SYN to port 28110 only
        tcp dport 28110 tcp flags & (syn | ack) == syn numgen inc mod 1000000 == 0 counter drop
    }
}
EOF
    cap_start loss_netns.pcap ip netns exec "$NS_A" -i vA -s 128 "tcp port 28109 or tcp port 28116 or tcp port 28110"
    c1=$CAPPID
    cap_start syn_retry.pcap ip netns exec "$NS_A" -i vA "tcp port 28110"
    c2=$CAPPID
    bg srv-g1 "${INA[@]}" "${SERVER[@]}" --host 10.99.0.1 --port 28109 --mode single --nodelay --body-size 12000
    s1=$BGPID
    bg srv-g2 "${INA[@]}" "${SERVER[@]}" --host 10.99.0.1 --port 28116 --mode single --nodelay --body-size 600
    s2=$BGPID
    bg srv-g3 "${INA[@]}" "${SERVER[@]}" --host 10.99.0.1 --port 28110 --mode single --nodelay --body-size 600
    s3=$BGPID
    wait_for "$WORK/srv-g1.out" listening
    wait_for "$WORK/srv-g2.out" listening
    wait_for "$WORK/srv-g3.out" listening
    "${INB[@]}" "${CLIENT[@]}" --host 10.99.0.1 --port 28109 -n 12
    "${INB[@]}" "${CLIENT[@]}" --host 10.99.0.1 --port 28116 -n 20
    "${INB[@]}" "${CLIENT[@]}" --host 10.99.0.1 --port 28110 -n 5
    stop "$s1"; stop "$s2"; stop "$s3"
    cap_stop "$c1"; stop "$c2"
    "${INB[@]}" nft list table inet tcpdoc_loss | grep counter
    "${INA[@]}" nft list table inet tcpdoc_syn | grep counter
    "${INB[@]}" nft delete table inet tcpdoc_loss
    "${INA[@]}" nft delete table inet tcpdoc_syn
    publish loss_netns.pcap
    publish syn_retry.pcap
fi

# (h) veth_nagle.pcap: wwr server (Nagle on) in tcpdoc-a at 10.99.10.1:28111,
#     client in tcpdoc-b (10.99.10.2) over the VLAN-10 trunk.  Capture on
#     vT2, the trunk end next to the CLIENT (delayed-ACK side), so every
#     frame carries an 802.1Q tag.
if want veth_nagle; then
    log "veth_nagle (netns + VLAN 10 trunk, port 28111)"
    cap_start veth_nagle.pcap ip netns exec "$NS_R" -i vT2 "vlan and tcp port 28111"
    c1=$CAPPID
    bg srv-h "${INA[@]}" "${SERVER[@]}" --host 10.99.10.1 --port 28111 --mode wwr
    s1=$BGPID
    wait_for "$WORK/srv-h.out" listening
    "${INB[@]}" "${CLIENT[@]}" --host 10.99.10.1 --port 28111 -n 30
    stop "$s1"
    cap_stop "$c1"
    publish veth_nagle.pcap
    tcpdump -e -n -r "$OUT/veth_nagle.pcap" -c 2 2>/dev/null
fi

# (i) nagle_ns.pcapng: nanosecond pcapng with TWO interfaces, merged by
#     mergecap -I none from two tcpdumps in tcpdoc-a:
#       if 0 = lo  : wwr server Nagle ON  127.0.0.1:28114 <- client in tcpdoc-a
#       if 1 = vA  : wwr server NODELAY   10.99.0.1:28115 <- client in tcpdoc-b
#     (both run at the same time, so the packets interleave)
if want nagle_ns; then
    log "nagle_ns.pcapng (two interfaces, ports 28114/28115)"
    cap_start ns_lo.pcap ip netns exec "$NS_A" -i lo --time-stamp-precision=nano "tcp port 28114"
    c1=$CAPPID
    cap_start ns_veth.pcap ip netns exec "$NS_A" -i vA --time-stamp-precision=nano "tcp port 28115"
    c2=$CAPPID
    bg srv-i1 "${INA[@]}" "${SERVER[@]}" --host 127.0.0.1 --port 28114 --mode wwr
    s1=$BGPID
    bg srv-i2 "${INA[@]}" "${SERVER[@]}" --host 10.99.0.1 --port 28115 --mode wwr --nodelay
    s2=$BGPID
    wait_for "$WORK/srv-i1.out" listening
    wait_for "$WORK/srv-i2.out" listening
    bg cli-i2 "${INB[@]}" "${CLIENT[@]}" --host 10.99.0.1 --port 28115 -n 20
    k2=$BGPID
    "${INA[@]}" "${CLIENT[@]}" --host 127.0.0.1 --port 28114 -n 20
    wait "$k2"
    cat "$WORK/cli-i2.out"
    stop "$s1"; stop "$s2"
    cap_stop "$c1"; stop "$c2"
    mergecap -I none -F pcapng -w "$WORK/nagle_ns.pcapng" "$WORK/ns_lo.pcap" "$WORK/ns_veth.pcap"
    publish nagle_ns.pcapng
fi

# midstream_port61000.pcap: a capture started after the load, the server's
#   port above the clients' (port order names the wrong side): wwr server
#   (Nagle on) in tcpdoc-a at 10.99.0.1:61000; four keep-alive clients in
#   tcpdoc-b, whose net.ipv4.ip_local_port_range is 20000-30000, 40 requests
#   each, all at once.  tcpdump on vA (next to the server) starts 0.5 s into
#   the load and stops 1 s later: no handshake, no FIN in the file.
if want midstream; then
    log "midstream_port61000.pcap (netns, server port 61000, client ports 20000-30000)"
    "${INB[@]}" sysctl -qw net.ipv4.ip_local_port_range="20000 30000"
    bg srv-m "${INA[@]}" "${SERVER[@]}" --host 10.99.0.1 --port 61000 --mode wwr
    sm=$BGPID
    wait_for "$WORK/srv-m.out" listening
    clients=()
    for k in 1 2 3 4; do
        bg "cli-m$k" "${INB[@]}" "${CLIENT[@]}" --host 10.99.0.1 --port 61000 -n 40
        clients+=("$BGPID")
    done
    sleep 0.5
    cap_start midstream_port61000.pcap ip netns exec "$NS_A" -i vA "tcp port 61000"
    cm=$CAPPID
    cap_stop "$cm"
    for k in "${clients[@]}"; do wait "$k"; done
    stop "$sm"
    publish midstream_port61000.pcap
fi

if [ -n "${RELAYPID:-}" ]; then stop "$RELAYPID"; fi
ip netns del "$NS_A" 2>/dev/null || true
ip netns del "$NS_B" 2>/dev/null || true
ip netns del "$NS_R" 2>/dev/null || true

############################################################################
# (k) loss_nagle_{srv,cli}.pcap: 3 % random loss AND Nagle + delayed ACK on one
#     path. tcpdoc-la (wwr server, Nagle on, 10.98.1.1:28121) -- tcpdoc-lr
#     (router: nft forward chain drops 3 % of the segments without SYN/FIN/RST,
#     each direction, at random) -- tcpdoc-lb (client.py, 10.98.2.1).
#     Captured at both ends at once (vA at the server, vB at the client),
#     snaplen 200. A lost delayed ACK (or a lost small segment) leaves the
#     held body to the server's tail-loss probe, ~230 ms later: what an older
#     analyze took for server think time (app_latency, "not in TCP"). The run
#     is repeated (at most 10 times) until at least 3 responses have such a
#     probe-released segment at the server's end and some segment was re-sent
#     (lab/timer_gaps.py), and tshark sees a re-send at the client's end too,
#     so both captures show both causes.
if want loss_nagle; then
    log "loss_nagle (3 % random loss + Nagle, port 28121)"
    for n in "$NS_LA" "$NS_LB" "$NS_LR"; do
        ip netns del "$n" 2>/dev/null || true
        ip netns add "$n"
        ip -n "$n" link set lo up
    done
    ip -n "$NS_LA" link add vA type veth peer name vRa netns "$NS_LR"
    ip -n "$NS_LB" link add vB type veth peer name vRb netns "$NS_LR"
    for d in "$NS_LA vA" "$NS_LR vRa" "$NS_LR vRb" "$NS_LB vB"; do
        read -r ns dev <<<"$d"
        ip -n "$ns" link set "$dev" gso_max_segs 1
        ip -n "$ns" link set "$dev" up
    done
    ip -n "$NS_LA" addr add 10.98.1.1/24 dev vA
    ip -n "$NS_LR" addr add 10.98.1.2/24 dev vRa
    ip -n "$NS_LB" addr add 10.98.2.1/24 dev vB
    ip -n "$NS_LR" addr add 10.98.2.2/24 dev vRb
    ip -n "$NS_LA" route add default via 10.98.1.2
    ip -n "$NS_LB" route add default via 10.98.2.2
    ip netns exec "$NS_LR" sysctl -qw net.ipv4.ip_forward=1
    ip netns exec "$NS_LR" nft -f - <<'EOF'
table inet tcpdoc_loss3 {
    chain drops {
        type filter hook forward priority 0; policy accept;
        tcp flags & (syn | fin | rst) == 0 numgen random mod 100 < 3 counter drop
    }
}
EOF
    for try in $(seq 10); do
        cap_start loss_nagle_srv.pcap ip netns exec "$NS_LA" -i vA -s 200 "tcp port 28121"
        c1=$CAPPID
        cap_start loss_nagle_cli.pcap ip netns exec "$NS_LB" -i vB -s 200 "tcp port 28121"
        c2=$CAPPID
        bg srv-k ip netns exec "$NS_LA" "${SERVER[@]}" --host 10.98.1.1 --port 28121 --mode wwr
        s1=$BGPID
        wait_for "$WORK/srv-k.out" listening
        ip netns exec "$NS_LB" "${CLIENT[@]}" --host 10.98.1.1 --port 28121 -n 60
        stop "$s1"
        cap_stop "$c1"; stop "$c2"
        read -r gaps responses resent < <(python3 "$LAB/timer_gaps.py" "$WORK/loss_nagle_srv.pcap" 28121)
        # The client's end sees a re-send only when one of its own segments
        # was lost, or a server segment with later data behind it: a run
        # whose losses were all tails shows none there, so it is run again.
        cli_resent=$(tshark -r "$WORK/loss_nagle_cli.pcap" -Y tcp.analysis.retransmission 2>/dev/null | wc -l)
        echo "attempt $try: $gaps of $responses responses released by the loss timer, $resent segments re-sent ($cli_resent seen re-sent at the client)"
        if [ "$gaps" -ge 3 ] && [ "$resent" -ge 1 ] && [ "$cli_resent" -ge 1 ]; then break; fi
        [ "$try" -lt 10 ] || { echo "no run showed the case" >&2; exit 1; }
    done
    ip netns exec "$NS_LR" nft list table inet tcpdoc_loss3 | grep counter
    publish loss_nagle_srv.pcap
    publish loss_nagle_cli.pcap
    for n in "$NS_LA" "$NS_LB" "$NS_LR"; do ip netns del "$n"; done
fi

log "expected.json"
python3 "$LAB/gen_expected.py" "$OUT"

log "done"
ls -l "$OUT"/*.pcap "$OUT"/*.pcapng 2>/dev/null || true
