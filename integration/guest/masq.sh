#!/bin/bash
# Start and stop masqd inside a testbed host (run by `integration/testbed masq`).
#   masq.sh up CONFIG    start masqd --config CONFIG, wait until it serves
#   masq.sh down         stop it
#   masq.sh kill         SIGKILL it, as a crash (sockets and nftables stay)
#   masq.sh start        start it again on the config it last ran with
#   masq.sh status       exit 0 if it runs
set -euo pipefail
. /run/masq-host.env
RUN=/run/masq-testbed
PIDFILE=$RUN/masqd.pid
LOG=$RUN/masqd.log
MASQD=$MASQ_REPO/target/release/masqd
mkdir -p "$RUN"

running() { [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

up() {
    local config=$1
    if running; then
        if [ "$(cat "$RUN/masqd.config" 2>/dev/null)" = "$config" ]; then
            echo "$MASQ_HOST: masqd already runs (pid $(cat "$PIDFILE"))"
            return 0
        fi
        down  # running with another configuration
    fi
    [ -x "$MASQD" ] || { echo "masq: $MASQD is not built; run make" >&2; exit 2; }
    # The log is appended across runs: only lines after this point count.
    local from
    from=$(( $( { wc -l <"$LOG"; } 2>/dev/null || echo 0) + 1 ))
    setsid "$MASQD" --config "$config" >>"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    echo "$config" >"$RUN/masqd.config"
    for _ in $(seq 600); do
        if ! running; then
            echo "masq: masqd exited on $MASQ_HOST:" >&2
            tail -n +"$from" "$LOG" | tail -n 20 >&2
            exit 1
        fi
        tail -n +"$from" "$LOG" | grep -q "masqd ready" && break
        sleep 0.1
    done
    tail -n +"$from" "$LOG" | grep -q "masqd ready" ||
        { echo "masq: masqd did not get ready" >&2; tail -n 20 "$LOG" >&2; exit 1; }
    echo "$MASQ_HOST: masqd up (pid $(cat "$PIDFILE")), log $LOG"
}

down() {
    # Every run starts from a clean host: endpoints added at run time
    # (which masqd keeps across its restarts) go with the run.
    rm -f /run/masq/runtime-endpoints.yaml
    running || { rm -f "$PIDFILE"; return 0; }
    local pid; pid=$(cat "$PIDFILE")
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
    # masqd leaves its RoCE backstop in place when it stops (so a stopped
    # masqd fails closed); the testbed starts every run from a clean host.
    nft delete table inet masq_backstop 2>/dev/null || true
    # ...and its eBPF maps (the next masqd starts empty ones and replaces
    # the programs that read these).
    rm -rf /sys/fs/bpf/masq
    echo "$MASQ_HOST: masqd stopped"
}

crash() {
    running || { echo "masq: masqd does not run on $MASQ_HOST" >&2; exit 1; }
    local pid; pid=$(cat "$PIDFILE")
    kill -KILL "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$PIDFILE"
    echo "$MASQ_HOST: masqd (pid $pid) killed with SIGKILL"
}

case "${1:-}" in
    up) [ $# -eq 2 ] || { echo "usage: masq.sh up CONFIG" >&2; exit 2; }; up "$2" ;;
    down) down ;;
    kill) crash ;;
    start) [ -s "$RUN/masqd.config" ] || { echo "masq: no earlier run" >&2; exit 1; }
           up "$(cat "$RUN/masqd.config")" ;;
    status) running ;;
    *) echo "usage: masq.sh up CONFIG | down | kill | start | status" >&2; exit 2 ;;
esac
