#!/bin/bash
# etcd for masq's cluster mode inside a testbed host: a one-member cluster
# serving clients on the host's underlay address (run by the tests).
#   etcd.sh start    start it (idempotent) and wait until it is healthy
#   etcd.sh stop     stop it; its data stays, so `start` resumes it
#   etcd.sh wipe     stop it and remove its data
#   etcd.sh status   exit 0 if it runs
set -euo pipefail
. /run/masq-host.env
RUN=/run/masq-testbed
PIDFILE=$RUN/etcd.pid
LOG=$RUN/etcd.log
DATA=$RUN/etcd
URL=http://$MASQ_UNDERLAY_IP:2379
PEER=http://127.0.0.1:2380
mkdir -p "$RUN"

running() { [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

start() {
    if ! running; then
        setsid etcd --name "$MASQ_HOST" --data-dir "$DATA" \
            --listen-client-urls "$URL" --advertise-client-urls "$URL" \
            --listen-peer-urls "$PEER" --initial-advertise-peer-urls "$PEER" \
            --initial-cluster "$MASQ_HOST=$PEER" >>"$LOG" 2>&1 </dev/null &
        echo $! >"$PIDFILE"
    fi
    for _ in $(seq 300); do
        if etcdctl --endpoints "$URL" endpoint health >/dev/null 2>&1; then
            echo "$MASQ_HOST: etcd up at $URL (pid $(cat "$PIDFILE"))"
            return 0
        fi
        running || break
        sleep 0.1
    done
    echo "etcd: did not get healthy on $MASQ_HOST:" >&2
    tail -n 20 "$LOG" >&2
    exit 1
}

stop() {
    running || { rm -f "$PIDFILE"; return 0; }
    local pid; pid=$(cat "$PIDFILE")
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
    echo "$MASQ_HOST: etcd stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    wipe) stop; rm -rf "$DATA" ;;
    status) running ;;
    *) echo "usage: etcd.sh start | stop | wipe | status" >&2; exit 2 ;;
esac
