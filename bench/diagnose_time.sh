#!/usr/bin/env bash
# Time to verdict of `tcpdoctor diagnose` against Debian's nginx with
# `tcp_nodelay off` (started by `tcpdoctor lab --nginx`, keep-alive, sendfile on).
#
#   bench/diagnose_time.sh [RUNS]          (default 5)
#
# Runs `tcpdoctor diagnose URL --json` RUNS times with its defaults and prints,
# per run, the wall time (from the shell, start to exit), the verdict, the
# time lost per request and the confidence; then the median wall time.
# Run as root to include the capture and process steps.
# Traffic goes only to 127.0.0.1; lab (and its nginx) is stopped by PID.
set -euo pipefail

RUNS=${1:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
TD="$ROOT/target/release/tcpdoctor"

OUT=$(mktemp)
"$TD" lab --nginx --json -d 600s >"$OUT" &
LAB=$!
trap 'kill $LAB 2>/dev/null || true; wait $LAB 2>/dev/null || true; rm -f "$OUT"' EXIT
for _ in $(seq 100); do grep -q '^]' "$OUT" && break; sleep 0.1; done
URL=$(python3 -c 'import json,sys; print([s["url"] for s in json.load(open(sys.argv[1])) if s["name"] == "nginx-nodelay-off"][0])' "$OUT")

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); kernel $(uname -r); $(nproc) cores; $($TD --version); $(/usr/sbin/nginx -v 2>&1); uid $(id -u)"
echo "target: $URL (nginx, tcp_nodelay off)"
printf '%-4s %8s  %-18s %10s  %s\n' run wall_s verdict lost_ms confidence
times=()
for r in $(seq "$RUNS"); do
    t0=$(date +%s.%N)
    "$TD" diagnose "$URL" --json >"$OUT.json" || true
    t1=$(date +%s.%N)
    wall=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
    read -r cause lost conf < <(python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))["verdict"]; print(v["cause"], v["lost_per_request_ms"], v["confidence"])' "$OUT.json")
    printf '%-4s %8s  %-18s %10s  %s\n' "$r" "$wall" "$cause" "$lost" "$conf"
    times+=("$wall")
done
rm -f "$OUT.json"
python3 - "${times[@]}" <<'PY'
import statistics, sys
t = sorted(float(x) for x in sys.argv[1:])
print(f"time to verdict: median {statistics.median(t):.2f} s, min {t[0]:.2f} s, max {t[-1]:.2f} s over {len(t)} runs")
PY
