# Process helpers shared by the capture scripts (sourced, not run). They use the
# caller's WORK (a private directory), PIDS (every PID started), NETNS (the network
# namespaces the script makes) and ONLY (a case filter). Sourcing sets the traps.

log() { printf '\n=== %s\n' "$*"; }

# On exit, also on failure: every process started is stopped and reaped, the
# namespaces deleted and WORK removed.
cleanup() {
    local rc=$? p n
    set +e
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    for n in "${NETNS[@]}"; do ip netns del "$n" 2>/dev/null; done
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# want NAME : whether case NAME is to be made (ONLY empty, or a part of NAME)
want() { [ -z "$ONLY" ] || [[ "$1" == *"$ONLY"* ]]; }

# bg NAME CMD... : start CMD in the background under its own log, remember PID in BGPID
bg() {
    local name=$1; shift
    "$@" >"$WORK/$name.out" 2>&1 &
    BGPID=$!
    PIDS+=("$BGPID")
}

# stop PID : TERM one process we started and reap it
stop() {
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# wait_for FILE PATTERN : wait (max 15 s) until a background log shows PATTERN
wait_for() {
    local i
    for i in $(seq 150); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "timeout waiting for '$2' in $1:" >&2
    cat "$1" >&2 || true
    return 1
}

# wait_port [NS] PORT : wait until something listens on PORT
wait_port() {
    local ns=() port i
    if [ $# = 2 ]; then ns=(ip netns exec "$1"); port=$2; else port=$1; fi
    for i in $(seq 150); do
        "${ns[@]}" ss -Hltn "sport = :$port" | grep -q . && return 0
        sleep 0.1
    done
    echo "nothing listens on port $port" >&2
    return 1
}
