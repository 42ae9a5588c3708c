# Helpers shared by the bench scripts (sourced, not run).

# free_port FROM: the first port in FROM..FROM+100 nothing listens on.
free_port() {
    for p in $(seq "$1" "$(($1 + 100))"); do
        if ! ss -Htln "sport = :$p" | grep -q .; then echo "$p"; return; fi
    done
    echo "no free port from $1" >&2; exit 1
}

# nginx_conf DIR PORT MASTER EXTRA: writes DIR/nginx.conf for a keep-alive nginx on
# 127.0.0.1:PORT answering "hello" (one worker; MASTER is on or off; EXTRA goes into
# the http block). Logs and temp files stay under DIR.
nginx_conf() {
    mkdir -p "$1/logs" "$1/tmp"
    cat > "$1/nginx.conf" <<CONF
daemon off;
master_process $3;
worker_processes 1;
pid $1/nginx.pid;
error_log $1/logs/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    $4
    keepalive_timeout 65;
    keepalive_requests 1000000;
    client_body_temp_path $1/tmp/body;
    proxy_temp_path $1/tmp/proxy;
    fastcgi_temp_path $1/tmp/fastcgi;
    uwsgi_temp_path $1/tmp/uwsgi;
    scgi_temp_path $1/tmp/scgi;
    server {
        listen 127.0.0.1:$2;
        location / { return 200 "hello"; }
    }
}
CONF
}

# One run of CMD… URL pinned to CLIENT_CPUS under /usr/bin/time, for wrk's layout
# (tcpdoctor bench prints the same): prints "REQ_PER_S REQUESTS CPU_SECONDS".
timed_run() {
    local url=$1 out cpu
    shift
    out=$( { /usr/bin/time -f "CPU %U %S" timeout 120 taskset -c "$CLIENT_CPUS" "$@" "$url"; } 2>&1 )
    cpu=$(echo "$out" | awk '/^CPU/ {print $2 + $3}')
    echo "$out" | awk -v cpu="$cpu" '
        /Requests\/sec:/ {rps = $2}
        / requests in / {n = $1}
        END {print rps, n, cpu}'
}

# need_timer: sets TIMER to the benches' timer, examples/timed.rs (wait4's
# rusage: "wall_s cpu_s peak_kb user_s"), building it on first use into
# CARGO_TARGET_DIR (default /tmp/bench-target); TIMER=/path/timed uses that one.
need_timer() {
    [ -n "${TIMER:-}" ] && return
    local root target
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    target=${CARGO_TARGET_DIR:-/tmp/bench-target}
    if ! (cd "$root" && CARGO_TARGET_DIR=$target timeout 900 cargo build --release --quiet --example timed) >&2; then
        echo "cannot build the timer: (cd $root && cargo build --release --example timed)" >&2
        exit 1
    fi
    TIMER=$target/release/examples/timed
}

# timed DIR NAME CMD…: one run of CMD under the timer (need_timer), its "wall_s cpu_s
# peak_kb user_s" appended to DIR/NAME and printed. Exit 4 (tcpdoctor's "partial": a
# packet cut at the end) is still a valid timing; any other failure ends the script.
timed() {
    local dir=$1 name=$2 rc=0
    shift 2
    need_timer
    timeout 600 "$TIMER" "$dir/time" "$@" > /dev/null 2> "$dir/stderr" || rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 4 ]; then
        echo "command failed (exit $rc): $*" >&2; cat "$dir/stderr" >&2; exit 1
    fi
    cat "$dir/time" >> "$dir/$name"
    tail -n 1 "$dir/$name" | awk -v n="$name" '{printf "   %-14s %7.3f s wall %7.3f s CPU %8d KB peak RSS\n", n, $1, $2, $3}'
}

# column_median FILE COLUMN: the median of one column of FILE's lines.
column_median() {
    sort -g -k"$2" "$1" | awk -v c="$2" '{v[NR]=$c} END {print v[int((NR+1)/2)]}'
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# wrk_vs_bench ROUNDS DUR URL RPS_TARGET CPU_TARGET [BENCH_ARGS…]: `wrk -t1 -c50` and
# `tcpdoctor bench -t1 -c50 BENCH_ARGS` ($TD) alternately, ROUNDS times each; prints
# every run, the medians and the ratios against the targets.
wrk_vs_bench() {
    local rounds=$1 dur=$2 url=$3 rps_target=$4 cpu_target=$5 r rps n cpu
    shift 5
    local -a w_rps t_rps w_cpr t_cpr
    for r in $(seq "$rounds"); do
        read -r rps n cpu < <(timed_run "$url" wrk -t1 -c50 -d"$dur")
        w_rps+=("$rps"); w_cpr+=("$(awk -v c="$cpu" -v n="$n" 'BEGIN {printf "%.3f", c / n * 1e6}')")
        echo "round $r  wrk        $rps req/s  $n requests  $cpu CPU s  ${w_cpr[-1]} us CPU/request"
        read -r rps n cpu < <(timed_run "$url" "$TD" bench "$@" -t1 -c50 -d"$dur")
        t_rps+=("$rps"); t_cpr+=("$(awk -v c="$cpu" -v n="$n" 'BEGIN {printf "%.3f", c / n * 1e6}')")
        echo "round $r  tcpdoctor  $rps req/s  $n requests  $cpu CPU s  ${t_cpr[-1]} us CPU/request"
    done
    local wr tr wc tc
    wr=$(median "${w_rps[@]}"); tr=$(median "${t_rps[@]}")
    wc=$(median "${w_cpr[@]}"); tc=$(median "${t_cpr[@]}")
    echo "median req/s:       wrk $wr  tcpdoctor $tr  ratio $(awk -v a="$tr" -v b="$wr" 'BEGIN {printf "%.2f", a / b}')x  (target >= ${rps_target}x)"
    echo "median CPU/request: wrk ${wc}us  tcpdoctor ${tc}us  ratio $(awk -v a="$tc" -v b="$wc" 'BEGIN {printf "%.2f", a / b}')x  (target <= ${cpu_target}x)"
}

# start_pinned_nginx NGINX WORK PORT: runs NGINX -c WORK/nginx.conf pinned to
# SERVER_CPUS (at most 15 minutes) and returns once it listens on PORT; when the
# script exits, nginx is stopped by its PID and WORK is removed.
start_pinned_nginx() {
    PINNED_WORK=$2
    NGINX_PID=""
    trap stop_pinned_nginx EXIT
    timeout 900 taskset -c "$SERVER_CPUS" "$1" -c "$2/nginx.conf" -p "$2" &
    NGINX_PID=$!
    for _ in $(seq 100); do
        ss -Htln "sport = :$3" | grep -q . && break
        sleep 0.05
    done
}

stop_pinned_nginx() {
    if [ -n "$NGINX_PID" ]; then kill "$NGINX_PID" 2>/dev/null && wait "$NGINX_PID" 2>/dev/null; fi
    rm -rf "$PINNED_WORK"
}

# The tcpdoctor binary to measure: $TCPDOCTOR, else this tree's release build
# (built now). Usage: TD=$(tcpdoctor_bin "$ROOT")
# need_capture FILE: exits with a hint when the benchmark's capture is missing.
need_capture() {
    [ -f "$1" ] || { echo "no capture $1 (make one with bench/make_big_capture.sh)" >&2; exit 1; }
}

# What a tcpdoctor binary is built from: check_fresh's and
# source_fingerprint's paths when none are given.
TCPDOCTOR_SOURCES=(src Cargo.toml Cargo.lock build.rs)

# source_fingerprint ROOT [PATH…]: a short hash of the contents of the files
# under PATH… (default: TCPDOCTOR_SOURCES) in ROOT's git work tree (tracked
# or not, ignored ones left out); nothing outside a git work tree.
source_fingerprint() {
    local root=$1
    shift
    [ "$#" -gt 0 ] || set -- "${TCPDOCTOR_SOURCES[@]}"
    git -C "$root" rev-parse --is-inside-work-tree > /dev/null 2>&1 || return 0
    (cd "$root" && git ls-files -co --exclude-standard -- "$@" | LC_ALL=C sort \
        | git hash-object --stdin-paths | sha256sum | cut -c1-16)
}

# check_fresh BINARY ROOT [PATH…]: exits with a hint when the sources under
# PATH… (default: TCPDOCTOR_SOURCES) in ROOT are not what BINARY was built from: a figure taken with a
# binary the tree has moved past is not the tree's (a stale experiment build
# once stood in for the real one for a whole session's figures). A binary
# with a BINARY.source stamp (scripts/pgo.sh writes one: the fingerprint of
# src, Cargo.toml, Cargo.lock and build.rs when it started) is compared by
# contents; any other by time, as cargo does. STALE_OK=1 takes it anyway,
# and says so.
check_fresh() {
    local bin=$1 root=$2 why newer
    shift 2
    [ "$#" -gt 0 ] || set -- "${TCPDOCTOR_SOURCES[@]}"
    if [ -s "$bin.source" ]; then
        [ "$(cat "$bin.source")" = "$(source_fingerprint "$root" "$@")" ] && return
        why="was built from other sources than $* in $root now hold"
    else
        newer=$(cd "$root" && find "$@" -newer "$bin" -type f 2>/dev/null | head -3 | tr '\n' ' ')
        [ -z "$newer" ] && return
        why="is older than ${newer}in $root"
    fi
    if [ "${STALE_OK:-}" = 1 ]; then
        echo "== warning: $bin $why (measured anyway: STALE_OK=1)" >&2
        return
    fi
    echo "$bin $why: rebuild it (or set STALE_OK=1 to measure it anyway)" >&2
    exit 1
}

tcpdoctor_bin() {
    if [ -n "${TCPDOCTOR:-}" ]; then
        check_fresh "$TCPDOCTOR" "$1"
        echo "$TCPDOCTOR"
    else
        cargo build --release --quiet --manifest-path "$1/Cargo.toml" >&2
        echo "$1/target/release/tcpdoctor"
    fi
}

# start_lab TD WORK SECONDS: runs `TD lab --nginx --json` for SECONDS in the
# background (its PID in LAB) and returns once WORK/lab.json lists its servers.
start_lab() {
    "$1" lab --nginx --json -d "${3}s" >"$2/lab.json" &
    LAB=$!
    for _ in $(seq 100); do grep -q '^]' "$2/lab.json" && break; sleep 0.1; done
}

# lab_server WORK NAME FIELD: a field (url, pid…) of the lab server NAME.
lab_server() {
    python3 -c 'import json,sys; print([s[sys.argv[3]] for s in json.load(open(sys.argv[1])) if s["name"] == sys.argv[2]][0])' \
        "$1/lab.json" "$2" "$3"
}

# cpu_ticks PID: the process's CPU time so far (user + system), in 1/100 s.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# trace_started PID ERRFILE: waits until `tcpdoctor inspect --trace` (PID, its
# stderr in ERRFILE) says its window began ("tracing pid …"); exits the script
# if it ended before, or said nothing within 10 s.
trace_started() {
    for _ in $(seq 1000); do
        grep -q '^tcpdoctor: tracing pid ' "$2" && return 0
        kill -0 "$1" 2>/dev/null || { echo "tracer $1 ended before its window: $(cat "$2")" >&2; exit 1; }
        sleep 0.01
    done
    echo "tracer $1: no 'tracing pid' line after 10 s" >&2
    exit 1
}

# hold_capture FILE: keeps FILE in the page cache (locked by a helper,
# bench/page_cache.py --hold) until the calling script ends; prints what it
# held. The helper ends with its parent (and is killed at exit by PID): call
# this from the script itself, not from a subshell.
hold_capture() {
    local out
    out=$(mktemp /tmp/tcpdoctor-hold.XXXXXX)
    python3 "$(dirname "${BASH_SOURCE[0]}")/page_cache.py" --hold "$1" >"$out" 2>&1 &
    HOLDERS+=("$!")
    for _ in $(seq 300); do
        [ -s "$out" ] && break
        kill -0 "$!" 2>/dev/null || break
        sleep 0.1
    done
    echo "== page cache: $(cat "$out")"
    rm -f "$out"
}

# stop_holding: ends hold_capture's helpers (for an EXIT trap).
stop_holding() {
    local p
    for p in "${HOLDERS[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    HOLDERS=()
}
HOLDERS=()
