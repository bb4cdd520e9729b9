#!/bin/bash
# etcd for masq's cluster mode inside a testbed host, serving clients on
# the host's underlay address (run by the tests): a one-member cluster, or
# one member of a cluster spread over several hosts. Clients and members
# speak TLS and must show a certificate of the testbed's CA (/run/masq-pki,
# made by integration/make-pki); this host's serves both.
#   etcd.sh start    start a one-member cluster (idempotent), wait until healthy
#   etcd.sh member CLUSTER new|existing
#                    start this host's member of CLUSTER (NAME=PEER_URL,...;
#                    peers talk on the underlay, port 2380) without waiting:
#                    it is healthy only once a quorum of members runs.
#                    `existing`: join a cluster that already added it
#                    (etcdctl member add) with an empty data dir.
#   etcd.sh wait     wait until this host's member is healthy
#   etcd.sh roles PREFIX NAME=IP...
#                    etcd's users and roles for masq's keys under PREFIX
#                    (masqctl cluster init-auth as etcd's root user): each
#                    host NAME writes only its own keys, the operator the
#                    policy; authentication on. Idempotent.
#   etcd.sh stop     stop it; its data stays, so `start`/`member` resumes it
#   etcd.sh wipe     stop it and remove its data
#   etcd.sh status   exit 0 if it runs
set -euo pipefail
. /run/masq-host.env
RUN=/run/masq-testbed
PIDFILE=$RUN/etcd.pid
LOG=$RUN/etcd.log
DATA=$RUN/etcd
URL=https://$MASQ_UNDERLAY_IP:2379
PEER=https://127.0.0.1:2380
PKI=/run/masq-pki
TLS=(--cert-file "$PKI/$MASQ_HOST.pem" --key-file "$PKI/$MASQ_HOST-key.pem"
     --trusted-ca-file "$PKI/ca.pem" --client-cert-auth
     --peer-cert-file "$PKI/$MASQ_HOST.pem" --peer-key-file "$PKI/$MASQ_HOST-key.pem"
     --peer-trusted-ca-file "$PKI/ca.pem" --peer-client-cert-auth)
# etcdctl as this host.
CTL=(etcdctl --endpoints "$URL" --cacert "$PKI/ca.pem" --cert "$PKI/$MASQ_HOST.pem"
     --key "$PKI/$MASQ_HOST-key.pem")
MASQCTL=$(dirname "$(readlink -f "$0")")/../../target/release/masqctl
mkdir -p "$RUN"

running() { [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

launch() {  # PEER_URL CLUSTER STATE
    running && return 0
    # Raft timing for emulated hosts (TCG, shared cores): with etcd's 100 ms
    # heartbeat and 1 s election timeout, a busy guest misses heartbeats
    # and members keep electing new leaders.
    setsid etcd --name "$MASQ_HOST" --data-dir "$DATA" \
        --heartbeat-interval 300 --election-timeout 3000 "${TLS[@]}" \
        --listen-client-urls "$URL" --advertise-client-urls "$URL" \
        --listen-peer-urls "$1" --initial-advertise-peer-urls "$1" \
        --initial-cluster "$2" --initial-cluster-state "$3" >>"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
}

start() {
    launch "$PEER" "$MASQ_HOST=$PEER" new
    wait_healthy 300
}

member() {
    local cluster=$1 state=$2
    case "$state" in new|existing) ;; *) echo "etcd: state must be new or existing" >&2; exit 2 ;; esac
    launch "https://$MASQ_UNDERLAY_IP:2380" "$cluster" "$state"
    echo "$MASQ_HOST: etcd member started ($state cluster $cluster)"
}

wait_healthy() {  # TENTHS_OF_A_SECOND
    for _ in $(seq "$1"); do
        if "${CTL[@]}" endpoint health >/dev/null 2>&1; then
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
    member) [ $# -eq 3 ] || { echo "usage: etcd.sh member CLUSTER new|existing" >&2; exit 2; }
            member "$2" "$3" ;;
    wait) wait_healthy 1200 ;;
    roles) [ $# -ge 3 ] || { echo "usage: etcd.sh roles PREFIX NAME=IP..." >&2; exit 2; }
           prefix=$2; shift 2
           "$MASQCTL" cluster init-auth --etcd "$URL" --ca "$PKI/ca.pem" --cert "$PKI/root.pem" \
               --key "$PKI/root-key.pem" --prefix "$prefix" "$@" ;;
    stop) stop ;;
    wipe) stop; rm -rf "$DATA" ;;
    status) running ;;
    *) echo "usage: etcd.sh start | member CLUSTER new|existing | wait | roles PREFIX NAME=IP... | stop | wipe | status" >&2
       exit 2 ;;
esac
