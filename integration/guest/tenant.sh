#!/bin/bash
# Tenant endpoints inside a testbed host (run by `integration/testbed tenant`).
#   tenant.sh add NAME VNI VIP/NN   netns NAME, veth eth0 in it on bridge mbrVNI,
#                                   VXLAN VNI to the other hosts, cgroup tenants/NAME
#   tenant.sh attach NAME VNI VIP/NN IFNAME
#                                   a further vNIC IFNAME in NAME's netns on
#                                   bridge mbrVNI (a second rail's device)
#   tenant.sh del NAME
#   tenant.sh list
#   tenant.sh exec NAME -- CMD...   run CMD in the endpoint's netns and cgroup
#                                   (through masq when masqd serves NAME)
#   tenant.sh vni VNI               the VNI's bridge and VXLAN (for podman networks)
set -euo pipefail
. /run/masq-host.env
STATE=/run/masq-testbed/tenants
CG=/sys/fs/cgroup/tenants
VNIC_MTU=1450   # 1500 underlay minus the VXLAN encapsulation (50 bytes)
VXLAN_GROUP=239.1.1.1   # on the underlay segment only (the guests' eth0)
mkdir -p "$STATE"

die() { echo "tenant: $*" >&2; exit 2; }

ensure_vni() {
    local vni=$1 vx="mvx$1" br="mbr$1"
    ip link show "$br" >/dev/null 2>&1 && return 0
    # Any number of hosts: broadcasts and unknown destinations go to a
    # multicast group every host's VXLAN joins on the underlay; the rest
    # goes to the host a MAC was learned from (so an endpoint that moved to
    # another host is found there once it speaks).
    ip link add "$vx" type vxlan id "$vni" local "$MASQ_UNDERLAY_IP" group "$VXLAN_GROUP" \
        dev eth0 dstport 4789
    ip link add "$br" type bridge
    ip link set "$vx" master "$br"
    ip link set "$vx" up
    ip link set "$br" up
}

drop_vni_if_unused() {
    local vni=$1
    grep -qx "VNI=$vni" "$STATE"/* 2>/dev/null && return 0
    # Containers (podman.sh's networks) may still be ports of the bridge.
    ls "/sys/class/net/mbr$vni/brif" 2>/dev/null | grep -qv "^mvx$vni\$" && return 0
    ip link del "mvx$vni" 2>/dev/null || true
    ip link del "mbr$vni" 2>/dev/null || true
}

add() {
    local name=$1 vni=$2 vip=$3 hostif="ve-$1"
    [ -e "$STATE/$name" ] && die "endpoint $name already exists on $MASQ_HOST"
    ensure_vni "$vni"
    ip netns add "$name"
    ip link add "$hostif" mtu $VNIC_MTU type veth peer name eth0 netns "$name"
    ip link set "$hostif" master "mbr$vni" up
    ip -n "$name" link set lo up
    ip -n "$name" link set eth0 mtu $VNIC_MTU up
    ip -n "$name" addr add "$vip" dev eth0
    mkdir -p "$CG/$name"
    printf 'VNI=%s\nVIP=%s\nHOSTIF=%s\n' "$vni" "$vip" "$hostif" >"$STATE/$name"
    echo "$MASQ_HOST: endpoint $name vni $vni vip $vip (vNIC $hostif)"
}

attach() {
    local name=$1 vni=$2 vip=$3 ifname=$4 hostif="v${4#eth}-$1"
    [ -e "$STATE/$name" ] || die "no endpoint $name on $MASQ_HOST"
    ip -n "$name" link show "$ifname" >/dev/null 2>&1 && return 0
    ensure_vni "$vni"
    ip link add "$hostif" mtu $VNIC_MTU type veth peer name "$ifname" netns "$name"
    ip link set "$hostif" master "mbr$vni" up
    ip -n "$name" link set "$ifname" mtu $VNIC_MTU up
    ip -n "$name" addr add "$vip" dev "$ifname"
    printf 'ATTACHED_VNI=%s\n' "$vni" >>"$STATE/$name"
    echo "$MASQ_HOST: endpoint $name: $ifname vni $vni vip $vip (vNIC $hostif)"
}

del() {
    local name=$1
    [ -e "$STATE/$name" ] || die "no endpoint $name on $MASQ_HOST"
    . "$STATE/$name"
    # Kill until the group can be removed: a command that was just starting
    # may join the group after the first kill.
    local _
    for _ in $(seq 100); do
        [ -d "$CG/$name" ] || break
        echo 1 >"$CG/$name/cgroup.kill"
        rmdir "$CG/$name" 2>/dev/null || sleep 0.1
    done
    [ ! -d "$CG/$name" ] || die "cannot empty cgroup $CG/$name"
    ip netns del "$name" 2>/dev/null || true
    ip link del "$HOSTIF" 2>/dev/null || true
    local attached
    attached=$(sed -n 's/^ATTACHED_VNI=//p' "$STATE/$name")
    rm -f "$STATE/$name"
    for vni in $VNI $attached; do
        drop_vni_if_unused "$vni"
    done
}

list() {
    local f
    for f in "$STATE"/*; do
        [ -e "$f" ] || continue
        ( . "$f"; printf '%s vni=%s vip=%s vnic=%s\n' "$(basename "$f")" "$VNI" "$VIP" "$HOSTIF" )
    done
}

run_in() {
    local name=$1; shift
    [ "${1:-}" = "--" ] && shift
    [ -e "$STATE/$name" ] || die "no endpoint $name on $MASQ_HOST"
    [ $# -gt 0 ] || die "exec: no command"
    echo $$ >"$CG/$name/cgroup.procs"
    local sockdir=/run/masq/endpoints/$name
    if [ -S "$sockdir/masq.sock" ]; then
        # masqd serves this endpoint: like a container runtime, mount its
        # socket directory at /run/masq, read-only as masq's CDI spec does
        # (ip netns exec gives us a private mount namespace), and preload
        # the frontend. Where masqd wrote a
        # sysfs view, the real sysfs goes to /run/masq/phys-sys for libmasq
        # (it sets SYSFS_PATH) and the view over the RDMA classes in /sys
        # (a fresh sysfs mount here) for everything else.
        exec ip netns exec "$name" env LD_PRELOAD="$MASQ_REPO/frontend-provider/build/libmasq.so" \
            /bin/sh -c '
                mount --bind "$0" /run/masq &&
                    mount -o remount,bind,ro /run/masq || exit 125
                v=/run/masq/sysfs/class
                if [ -d /run/masq/phys-sys ] && [ -d $v/infiniband ]; then
                    mount --bind /sys /run/masq/phys-sys &&
                        mount --bind $v/infiniband /sys/class/infiniband &&
                        mount --bind $v/infiniband_verbs /sys/class/infiniband_verbs ||
                        exit 125
                fi
                exec "$@"' "$sockdir" "$@"
    fi
    exec ip netns exec "$name" "$@"
}

cmd=${1:-}; shift || true
case "$cmd" in
    add) [ $# -eq 3 ] || die "usage: add NAME VNI VIP/NN"; add "$@" ;;
    attach) [ $# -eq 4 ] || die "usage: attach NAME VNI VIP/NN IFNAME"; attach "$@" ;;
    del) [ $# -eq 1 ] || die "usage: del NAME"; del "$1" ;;
    list) list ;;
    vni) [ $# -eq 1 ] || die "usage: vni VNI"; ensure_vni "$1" ;;
    exec) [ $# -ge 1 ] || die "usage: exec NAME -- CMD..."; run_in "$@" ;;
    *) die "unknown command '$cmd' (add, attach, del, list, exec)" ;;
esac
