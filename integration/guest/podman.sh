#!/bin/bash
# podman inside a testbed host (run by `integration/testbed podman`): Debian's
# podman with the CNI backend, containers from a local rootfs (no registry is
# reachable), networks whose conflist chains the bridge plugin (into the
# VNI's bridge and VXLAN, as tenant.sh's endpoints) with masq-cni.
#   podman.sh setup                 configure podman, build the rootfs (idempotent)
#   podman.sh net NAME VNI TENANT SUBNET FIRST LAST [new-vpc]
#                                   network NAME: VNI's bridge, addresses FIRST..LAST;
#                                   new-vpc: masq-cni's "newVpc" (the VNI's first endpoint)
#   podman.sh netdel NAME           remove that network's conflist
set -euo pipefail
. /run/masq-host.env
ROOTFS=/var/lib/masq-rootfs
NETDIR=${NETDIR:-/etc/cni/net.d}   # containerd.sh's pods: their own
VNIC_MTU=1450   # as tenant.sh: the underlay's 1500 minus VXLAN's 50 bytes

die() { echo "podman.sh: $*" >&2; exit 2; }

# The libraries a program loads, as ldd lists them (absolute paths only).
libs_of() { ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | sort -u; }

build_rootfs() {
    [ -e "$ROOTFS/.ready" ] && return 0
    rm -rf "$ROOTFS"
    mkdir -p "$ROOTFS"/{bin,etc,proc,sys,dev,run,tmp}
    # A tenant image with stock RDMA tools and rdma-core's userland; masq
    # itself (libmasq) is not in it: the CDI device brings it.
    # socat and rping: TCP on the masq network beside RDMA, and the RDMA
    # CM (NetworkPolicy's test).
    # The host's tools, copied to the same paths; the suite's own programs
    # go to /bin below, their libraries with the tools'.
    local tools=(/usr/bin/ib_write_bw /usr/bin/ibv_devinfo /usr/bin/ibv_devices
                 /usr/bin/ibv_rc_pingpong /usr/bin/socat /usr/bin/rping)
    local providers=(/usr/lib/x86_64-linux-gnu/libibverbs/librxe-*.so)
    # libmasq's own dependencies too (libdl.so.2, libpthread.so.0): every
    # image with glibc has them, and the CDI device brings only libmasq.
    # libgcc_s: glibc loads it at pthread_exit (rping's threads), which ldd
    # does not list.
    local f
    for f in "${tools[@]}" "${providers[@]}" /usr/lib/x86_64-linux-gnu/libgcc_s.so.1 \
            $(libs_of "${tools[@]}" "$MASQ_REPO/integration/build/qp_probe" "${providers[@]}" \
            /usr/lib/x86_64-linux-gnu/librdmacm.so.1 /usr/lib/x86_64-linux-gnu/libnl-route-3.so.200 \
            "$MASQ_REPO/frontend-provider/build/libmasq.so"); do
        mkdir -p "$ROOTFS$(dirname "$f")"
        cp -L "$f" "$ROOTFS$f"
    done
    # ld.so resolves through /lib64 -> /usr/lib64 on Debian; keep the layout.
    [ -e "$ROOTFS/lib64" ] || ln -s usr/lib64 "$ROOTFS/lib64"
    [ -e "$ROOTFS/lib" ] || ln -s usr/lib "$ROOTFS/lib"
    mkdir -p "$ROOTFS/etc/libibverbs.d"
    cp /etc/libibverbs.d/rxe.driver "$ROOTFS/etc/libibverbs.d/"
    cp /bin/busybox "$ROOTFS/bin/busybox"
    # The suite's probe (plain libibverbs): what a denied connect returns;
    # and a tenant program that skips libmasq (the backstop's tests).
    cp "$MASQ_REPO/integration/build/qp_probe" "$ROOTFS/bin/qp_probe"
    cp "$MASQ_REPO/integration/build/rogue_qp" "$ROOTFS/bin/rogue_qp"
    for f in sh cat ls sleep grep ip; do ln -sf busybox "$ROOTFS/bin/$f"; done
    touch "$ROOTFS/.ready"
}

setup() {
    [ -x /usr/bin/podman ] || die "podman is not installed on the machine (scripts/install-deps)"
    mkdir -p /etc/containers "$NETDIR" /var/lib/containers
    # Container storage on a tmpfs: the guest's root is an overlay, and
    # an overlay's upper directory cannot live on one.
    mountpoint -q /var/lib/containers || mount -t tmpfs -o mode=700 tmpfs /var/lib/containers
    # The guests run no systemd (no journald, no cgroup manager service).
    cat >/etc/containers/containers.conf <<CONF
[network]
network_backend = "cni"
cni_plugin_dirs = ["/usr/lib/cni", "$MASQ_REPO/target/release"]
network_config_dir = "$NETDIR"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "crun"
CONF
    cat >/etc/containers/storage.conf <<CONF
[storage]
driver = "vfs"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
CONF
    build_rootfs
    echo "$MASQ_HOST: podman ready, rootfs $ROOTFS"
}

net() {
    local name=$1 vni=$2 tenant=$3 subnet=$4 first=$5 last=$6 new_vpc=false
    [ "${7:-}" = new-vpc ] && new_vpc=true
    "$(dirname "$0")/tenant.sh" vni "$vni"
    cat >"$NETDIR/$name.conflist" <<CONF
{
  "cniVersion": "1.0.0",
  "name": "$name",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "mbr$vni",
      "isGateway": false,
      "ipMasq": false,
      "mtu": $VNIC_MTU,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$subnet", "rangeStart": "$first", "rangeEnd": "$last" }]]
      }
    },
    { "type": "masq-cni", "tenant": "$tenant", "vni": $vni, "newVpc": $new_vpc }
  ]
}
CONF
    echo "$MASQ_HOST: network $name: VNI $vni ($tenant), $first..$last"
}

case "${1:-}" in
    setup) setup ;;
    net) [ $# -eq 7 ] || [ $# -eq 8 ] || die "usage: net NAME VNI TENANT SUBNET FIRST LAST [new-vpc]"
         shift; net "$@" ;;
    netdel) [ $# -eq 2 ] || die "usage: netdel NAME"; rm -f "$NETDIR/$2.conflist" ;;
    *) die "unknown command '${1:-}' (setup, net, netdel)" ;;
esac
