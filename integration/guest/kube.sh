#!/bin/bash
# A real Kubernetes control plane and kubelets inside the testbed's hosts
# (make test-k8s-cluster): binaries from integration/k8s/control-plane,
# certificates and kubeconfigs from integration/k8s/pki in $PKI (the
# testbed's state dir, shared with the guests uncached at /run/masq-pki),
# containerd 2 started first by containerd.sh.
#   kube.sh control-plane BIN
#       (host1) an etcd of its own (Debian's, 127.0.0.1:2479, plain HTTP on
#       the loopback: not masq's etcd, which has authentication on and
#       which the masq fixtures wipe), kube-apiserver on the underlay
#       (:6443), kube-controller-manager, kube-scheduler; then the
#       NetworkAttachmentDefinition CRD and Multus' RBAC
#   kube.sh node BIN INDEX PEER_INDEX...
#       a kubelet against containerd, its pods' network Multus' thin plugin
#       delegating to the bridge plugin (pods 10.244.INDEX.0/24, routes to
#       each peer's pods through 198.18.0.PEER_INDEX)
#   kube.sh kubectl BIN ARGS...   kubectl as the cluster's admin
#   kube.sh stop                  stop the kubelet and the control plane
#
# Emulated guests are slow: the kubelet's runtime requests may take
# 10 minutes, a node is NotReady only after 3 minutes without a status
# (kube-controller-manager's --node-monitor-grace-period, the kubelet's
# lease 120 s), and no component elects a leader (one of each).
set -euo pipefail
. /run/masq-host.env
RUN=/run/masq-testbed
PKI=/run/masq-pki/k8s
NETDIR=/etc/cni/k8s.d    # containerd.sh's conf_dir
CNI_BIN=/opt/cni/bin     # in containerd.sh's bin_dirs; where the DaemonSet installs masq-cni
SOCK=/run/containerd/containerd.sock
ETCD_URL=http://127.0.0.1:2479
HERE=$(dirname "$(readlink -f "$0")")
mkdir -p "$RUN"

die() { echo "kube.sh: $*" >&2; exit 2; }
. "$HERE/pids.sh"   # running, stop_pid

launch() {  # NAME ARGV...
    local name=$1
    shift
    running "$name" && return 0
    setsid "$@" >>"$RUN/$name.log" 2>&1 </dev/null &
    echo $! >"$RUN/$name.pid"
}

wait_for() {  # WHAT NAME TENTHS CMD...: until CMD succeeds while NAME runs
    local what=$1 name=$2 tenths=$3
    shift 3
    for _ in $(seq "$tenths"); do
        "$@" >/dev/null 2>&1 && return 0
        running "$name" || break
        sleep 0.1
    done
    tail -n 30 "$RUN/$name.log" >&2
    die "$what"
}

kubectl() { "$BIN/kubectl" --kubeconfig "$PKI/admin.kubeconfig" --request-timeout 60s "$@"; }

control_plane() {
    [ -s "$PKI/admin.kubeconfig" ] || die "no $PKI/admin.kubeconfig (integration/k8s/pki)"
    for d in "$RUN/kube-etcd" /var/run/kubernetes; do mkdir -p "$d"; done
    launch kube-etcd etcd --name kube --data-dir "$RUN/kube-etcd" \
        --heartbeat-interval 300 --election-timeout 3000 \
        --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
        --listen-peer-urls http://127.0.0.1:2480 --initial-advertise-peer-urls http://127.0.0.1:2480 \
        --initial-cluster kube=http://127.0.0.1:2480
    wait_for "etcd did not get healthy" kube-etcd 600 etcdctl --endpoints "$ETCD_URL" endpoint health
    launch kube-apiserver "$BIN/kube-apiserver" \
        --etcd-servers "$ETCD_URL" \
        --advertise-address "$MASQ_UNDERLAY_IP" --bind-address 0.0.0.0 --secure-port 6443 \
        --tls-cert-file "$PKI/apiserver.pem" --tls-private-key-file "$PKI/apiserver-key.pem" \
        --client-ca-file "$PKI/ca.pem" \
        --kubelet-client-certificate "$PKI/apiserver-kubelet-client.pem" \
        --kubelet-client-key "$PKI/apiserver-kubelet-client-key.pem" \
        --kubelet-preferred-address-types InternalIP \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --service-account-key-file "$PKI/sa.pem" \
        --service-account-signing-key-file "$PKI/sa-key.pem" \
        --service-cluster-ip-range 10.96.0.0/16 \
        --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
        --allow-privileged=true --anonymous-auth=false
    wait_for "kube-apiserver did not get ready" kube-apiserver 3000 kubectl get --raw /readyz
    local kc=$PKI/controller-manager.kubeconfig
    launch kube-controller-manager "$BIN/kube-controller-manager" \
        --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
        --bind-address 127.0.0.1 --leader-elect=false \
        --use-service-account-credentials=true \
        --service-account-private-key-file "$PKI/sa-key.pem" --root-ca-file "$PKI/ca.pem" \
        --cluster-signing-cert-file "$PKI/ca.pem" --cluster-signing-key-file "$PKI/ca-key.pem" \
        --service-cluster-ip-range 10.96.0.0/16 \
        --node-monitor-grace-period 180s
    kc=$PKI/scheduler.kubeconfig
    launch kube-scheduler "$BIN/kube-scheduler" \
        --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
        --bind-address 127.0.0.1 --leader-elect=false
    # The CRD Multus reads, and what its thin plugin may read and write.
    kubectl apply -f "$BIN/networks-crd.yaml" -f "$HERE/../k8s/cluster.yaml" >/dev/null
    echo "$MASQ_HOST: Kubernetes control plane up ($("$BIN/kube-apiserver" --version))"
}

node() {
    local index=$1 peer
    shift
    [ -s "$PKI/node-$MASQ_HOST.kubeconfig" ] || die "no $PKI/node-$MASQ_HOST.kubeconfig (integration/k8s/pki)"
    [ -S "$SOCK" ] || die "containerd is not running (containerd.sh start)"
    mkdir -p "$CNI_BIN" "$NETDIR" /etc/kubernetes /var/lib/cni/multus
    cp "$BIN/multus" "$CNI_BIN/multus"
    cat >"$NETDIR/00-multus.conf" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "multus-cni-network",
  "type": "multus",
  "kubeconfig": "$PKI/multus.kubeconfig",
  "cniDir": "/var/lib/cni/multus",
  "binDir": "$CNI_BIN",
  "logFile": "$RUN/multus.log",
  "logLevel": "verbose",
  "delegates": [{
    "cniVersion": "1.0.0",
    "name": "pods",
    "plugins": [{
      "type": "bridge", "bridge": "cni-pods", "isGateway": true, "ipMasq": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.$index.0/24"}]],
               "routes": [{"dst": "0.0.0.0/0"}]}
    }]
  }]
}
EOF
    # Mounts shared, as systemd leaves them on a real node: the DaemonSet
    # mounts /run/masq with Bidirectional propagation, which containerd
    # refuses on a private /run ("is not a shared mount").
    mount --make-rshared /
    for peer in "$@"; do
        ip route replace "10.244.$peer.0/24" via "198.18.0.$peer"
    done
    # The `kubernetes` Service (10.96.0.1:443) to the API server, the one
    # rule of kube-proxy's that in-cluster clients (masq-signer's join and
    # controller, in the host's network) need; the testbed runs no
    # kube-proxy.
    local apiserver
    apiserver=$(sed -n 's|^ *server: https://\(.*\):6443$|\1|p' "$PKI/node-$MASQ_HOST.kubeconfig")
    # A route to the Service range, or a local connect fails before the
    # nat hook (the guests have no default route).
    ip route replace 10.96.0.0/16 dev eth0
    nft -f - <<EOF
table ip masq-kube-service {}
delete table ip masq-kube-service
table ip masq-kube-service {
    chain output { type nat hook output priority -100; ip daddr 10.96.0.1 tcp dport 443 dnat to $apiserver:6443; }
    chain prerouting { type nat hook prerouting priority -100; ip daddr 10.96.0.1 tcp dport 443 dnat to $apiserver:6443; }
}
EOF
    # The kubelet's state on tmpfs, as containerd's: the guest's root is an
    # overlay.
    mkdir -p /var/lib/kubelet
    mountpoint -q /var/lib/kubelet || mount -t tmpfs -o mode=755 tmpfs /var/lib/kubelet
    cat >/etc/kubernetes/kubelet.yaml <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.pem}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
failSwapOn: false
clusterDomain: cluster.local
runtimeRequestTimeout: 10m
nodeLeaseDurationSeconds: 120
# tmpfs everywhere: the guest's memory is its disk.
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
    launch kubelet "$BIN/kubelet" --config /etc/kubernetes/kubelet.yaml \
        --kubeconfig "$PKI/node-$MASQ_HOST.kubeconfig" \
        --hostname-override "$MASQ_HOST" --node-ip "$MASQ_UNDERLAY_IP" \
        --root-dir /var/lib/kubelet
    wait_for "the kubelet did not start" kubelet 600 sh -c "grep -q 'Started kubelet' $RUN/kubelet.log"
    echo "$MASQ_HOST: kubelet up ($("$BIN/kubelet" --version)), pods 10.244.$index.0/24"
}

stop() {
    for p in kubelet kube-scheduler kube-controller-manager kube-apiserver kube-etcd; do
        stop_pid "$p"
    done
    nft delete table ip masq-kube-service 2>/dev/null || true
    ip route del 10.96.0.0/16 dev eth0 2>/dev/null || true
    rm -rf "$RUN/kube-etcd" "$NETDIR/00-multus.conf"
    mountpoint -q /var/lib/kubelet && umount -l /var/lib/kubelet
    echo "$MASQ_HOST: Kubernetes stopped"
}

case "${1:-}" in
    control-plane) [ $# -eq 2 ] || die "usage: control-plane BIN"; BIN=$2; control_plane ;;
    node) [ $# -ge 3 ] || die "usage: node BIN INDEX PEER_INDEX..."; BIN=$2; shift 2; node "$@" ;;
    kubectl) [ $# -ge 2 ] || die "usage: kubectl BIN ARGS..."; BIN=$2; shift 2; kubectl "$@" ;;
    stop) stop ;;
    *) die "unknown command '${1:-}' (control-plane, node, kubectl, stop)" ;;
esac
