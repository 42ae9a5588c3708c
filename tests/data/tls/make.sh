#!/bin/bash
# Makes tls_resume.pcap: a real TLS 1.3 server and client on loopback, as
# root (tcpdump). The server is ../rtt/tls_server.py (Python ssl, header and
# body as two TLS records, Nagle on); the client ./client.py asks for the
# name tls.test (SNI; no name is resolved) on two keep-alive connections, 5
# GETs each, the second resuming the first's session. What is true: EXPECTED.md.
# Usage: sudo tests/data/tls/make.sh [OUTPUT_DIR]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$HERE}
PORT=${TLS_PORT:-18443}
WORK=$(mktemp -d)
SRV_PID= CAP_PID=
cleanup() {
    [ -n "$CAP_PID" ] && kill "$CAP_PID" 2>/dev/null && wait "$CAP_PID" 2>/dev/null || true
    [ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null && wait "$SRV_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=tls.test \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
timeout 120 python3 -u "$HERE/../rtt/tls_server.py" --host 127.0.0.1 --port "$PORT" \
    --cert "$WORK/cert.pem" --key "$WORK/key.pem" --max-seconds 60 >"$WORK/server.out" 2>&1 &
SRV_PID=$!
for _ in $(seq 50); do grep -q listening "$WORK/server.out" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$WORK/server.out" || { echo "server did not start" >&2; exit 1; }
tcpdump -i lo -s 0 -U -w "$WORK/cap.pcap" "tcp port $PORT" 2>"$WORK/tcpdump.err" &
CAP_PID=$!
for _ in $(seq 50); do grep -q listening "$WORK/tcpdump.err" 2>/dev/null && break; sleep 0.1; done
timeout 60 python3 -u "$HERE/client.py" 127.0.0.1 "$PORT" tls.test 5
sleep 1
kill "$CAP_PID"; wait "$CAP_PID" 2>/dev/null || true; CAP_PID=
mv "$WORK/cap.pcap" "$OUT/tls_resume.pcap.tmp" && mv "$OUT/tls_resume.pcap.tmp" "$OUT/tls_resume.pcap"
echo "wrote $OUT/tls_resume.pcap"
