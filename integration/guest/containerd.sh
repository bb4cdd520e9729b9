#!/bin/bash
# containerd 2 inside a testbed host, driven through CRI by crictl as a
# kubelet drives it (run by the Kubernetes tests, `make test-k8s`): CDI and
# NRI on, runc (Debian's: its crun 1.8 refuses the OCI spec version
# containerd 2.4 writes), cgroupfs, pods' networks from the
# CNI conflists in $NETDIR (the bridge plugin chained with masq-cni, as
# Multus would call a NetworkAttachmentDefinition's), images imported from
# local files (no registry is reachable): the pod sandbox's (pause) and a
# tenant image of stock RDMA tools (podman.sh's rootfs).
#   containerd.sh start BIN_DIR    start containerd (binaries in BIN_DIR, from
#                                  integration/k8s/tools), import the images
#   containerd.sh net NAME VNI TENANT SUBNET FIRST LAST
#                                  the pods' network (one conflist: containerd
#                                  uses the first)
#   containerd.sh nri BIN          run the NRI plugin BIN (masq-nri) against it
#   containerd.sh image NAME ARCHIVE
#                                  import image NAME from an OCI archive
#   containerd.sh stop             stop the NRI plugin, every pod and containerd
set -euo pipefail
. /run/masq-host.env
RUN=/run/masq-testbed
NETDIR=/etc/cni/k8s.d
SOCK=/run/containerd/containerd.sock   # containerd's default
PAUSE_IMAGE=masq.test/pause:1
TENANT_IMAGE=masq.test/tenant:1
ROOTFS=/var/lib/masq-rootfs   # podman.sh's
HERE=$(dirname "$(readlink -f "$0")")
mkdir -p "$RUN"

die() { echo "containerd.sh: $*" >&2; exit 2; }
. "$HERE/pids.sh"   # running, stop_pid

config() {
    local bin=$1
    mkdir -p /etc/containerd "$NETDIR"
    cat >/etc/containerd/config.toml <<CONF
version = 4
root = '/var/lib/containerd'
state = '/run/containerd'

[plugins.'io.containerd.cri.v1.images']
  # overlayfs, as on a real node: /var/lib/containerd is a tmpfs (the
  # guest's root, an overlay itself, could not hold an upper directory).
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '$PAUSE_IMAGE'

[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ['/etc/cdi', '/var/run/cdi']
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '/usr/sbin/runc'
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    # /opt/cni/bin: Multus (kube.sh) and what the DaemonSet's init container
    # installs (masq-cni).
    bin_dirs = ['/usr/lib/cni', '$MASQ_REPO/target/release', '/opt/cni/bin']
    conf_dir = '$NETDIR'
    max_conf_num = 1

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = '/var/run/nri/nri.sock'
  # A loaded emulated guest can take longer than NRI's default 2 s; masq-nri
  # is given 10 s for masqd (its --timeout, below this one: `nri` below).
  plugin_request_timeout = '15s'
CONF
    cat >/etc/crictl.yaml <<CONF
runtime-endpoint: unix://$SOCK
image-endpoint: unix://$SOCK
timeout: 60
CONF
}

# An image from a directory, through podman (the guests' image builder).
import_image() {  # NAME DIR ENTRYPOINT
    local name=$1 dir=$2 entry=$3 tar
    "$BIN/ctr" -a "$SOCK" -n k8s.io images ls -q | grep -qx "$name" && return 0
    tar=$(mktemp /tmp/image.XXXXXX)
    tar -C "$dir" -c . | podman import --change "ENTRYPOINT [\"$entry\"]" - "$name" >/dev/null
    podman save --format oci-archive -o "$tar" "$name" >/dev/null
    podman rmi "$name" >/dev/null   # containerd holds it now
    import_archive "$name" "$tar"
    rm -f "$tar"
}

# An image from an OCI archive (`podman save --format oci-archive`).
import_archive() {  # NAME ARCHIVE
    local name=$1 archive=$2 out
    # Kept while it is the archive's (same manifest): an image rebuilt
    # under the same name is imported again.
    local want
    want=$(tar -xOf "$archive" index.json | grep -o 'sha256:[0-9a-f]\{64\}' | head -1)
    "$BIN/ctr" -a "$SOCK" -n k8s.io images ls | awk -v n="$name" '$1 == n {print $3}' \
        | grep -qx "$want" && return 0
    out=$("$BIN/ctr" -a "$SOCK" -n k8s.io images import --base-name "${name%:*}" "$archive" 2>&1) \
        || die "image $name: ctr images import: $out"
    # The CRI plugin lists an image once its event is handled.
    for _ in $(seq 100); do
        "$BIN/ctr" -a "$SOCK" -n k8s.io images ls -q | grep -qx "$name" && return 0
        sleep 0.1
    done
    die "image $name: imported ($out), but containerd does not list it"
}

start() {
    BIN=$1
    [ -x "$BIN/containerd" ] || die "no containerd in $BIN (integration/k8s/tools builds it)"
    echo "$BIN" >"$RUN/containerd.bin"
    "$HERE/podman.sh" setup >/dev/null   # the tenant rootfs and podman
    if ! running containerd; then
        config "$BIN"
        # Its state on tmpfs, as podman's: the guest's root is an overlay.
        for d in /var/lib/containerd /run/containerd; do
            mkdir -p "$d"
            mountpoint -q "$d" || mount -t tmpfs -o mode=711 tmpfs "$d"
        done
        PATH=$BIN:$PATH setsid "$BIN/containerd" --config /etc/containerd/config.toml \
            >>"$RUN/containerd.log" 2>&1 </dev/null &
        echo $! >"$RUN/containerd.pid"
        for _ in $(seq 300); do
            [ -S "$SOCK" ] && "$BIN/ctr" -a "$SOCK" version >/dev/null 2>&1 && break
            running containerd || { tail -n 20 "$RUN/containerd.log" >&2; die "containerd exited"; }
            sleep 0.1
        done
    fi
    local pause
    pause=$(mktemp -d)
    cp "$MASQ_REPO/integration/build/pause" "$pause/pause"
    import_image "$PAUSE_IMAGE" "$pause" /pause
    rm -rf "$pause"
    import_image "$TENANT_IMAGE" "$ROOTFS" /bin/sh
    echo "$MASQ_HOST: containerd $("$BIN/containerd" --version | awk '{print $3}') up, CDI and NRI on"
}

nri() {
    local bin=$1
    running masq-nri && return 0
    # Its deadline for masqd below the runtime's for it (config's 15 s).
    setsid "$bin" --timeout 10s >>"$RUN/masq-nri.log" 2>&1 </dev/null &
    echo $! >"$RUN/masq-nri.pid"
    for _ in $(seq 100); do
        grep -q "connecting to" "$RUN/masq-nri.log" 2>/dev/null && sleep 0.5 && running masq-nri && return 0
        running masq-nri || break
        sleep 0.1
    done
    tail -n 20 "$RUN/masq-nri.log" >&2
    die "masq-nri did not start"
}

stop() {
    stop_pid masq-nri
    if running containerd; then
        "$(cat "$RUN/containerd.bin")/crictl" rmp -af >/dev/null 2>&1 || true
    fi
    stop_pid containerd
    pkill -x containerd-shim-runc-v2 2>/dev/null || true
    echo "$MASQ_HOST: containerd stopped"
}

case "${1:-}" in
    start) [ $# -eq 2 ] || die "usage: start BIN_DIR"; start "$2" ;;
    net) [ $# -eq 7 ] || die "usage: net NAME VNI TENANT SUBNET FIRST LAST"
         shift; NETDIR=$NETDIR "$HERE/podman.sh" net "$@" ;;
    nri) [ $# -eq 2 ] || die "usage: nri BIN"; nri "$2" ;;
    image) [ $# -eq 3 ] || die "usage: image NAME ARCHIVE"
           [ -s "$RUN/containerd.bin" ] || die "containerd was not started"
           BIN=$(cat "$RUN/containerd.bin"); import_archive "$2" "$3" ;;
    stop) stop ;;
    *) die "unknown command '${1:-}' (start, net, nri, image, stop)" ;;
esac
