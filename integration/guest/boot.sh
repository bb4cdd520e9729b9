#!/bin/bash
# PID 1 of a testbed host after switch_root: the machine's userland, the
# Debian kernel's modules, one rxe device on the underlay NIC, and the
# command agent that `integration/testbed exec` talks to.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
arg() { sed -n "s/.*\bmasq\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
host=$(arg host) ip=$(arg ip) repo=$(arg repo)
ul_mac=$(arg ulmac) ctl_mac=$(arg ctlmac) ctl_ip=$(arg ctlip) agent_port=$(arg agentport)

log() { echo "masq-boot[$host]: $*" >/dev/console; }

# Messages without a level (a lockup's or oops's backtrace, dump_stack)
# are printed as errors, which a `quiet` console shows; warnings stay off it.
echo "4 3 1 7" >/proc/sys/kernel/printk
mount -t tmpfs -o mode=755 tmpfs /run
# The cluster's certificates (the testbed's ensure_pki).
mkdir -p /run/masq-pki
mount -t 9p -o ro,trans=virtio,version=9p2000.L,cache=none pki /run/masq-pki \
    || log "cannot mount the certificates at /run/masq-pki"
# /tmp stays the overlay's (writable, private to this guest): a tmpfs there
# would hide a checkout that lives under /tmp, which the initramfs mounted.
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t cgroup2 cgroup2 /sys/fs/cgroup
# bpffs, as systemd mounts it: masqd pins the backstop's eBPF maps there.
mount -t bpf bpf /sys/fs/bpf
hostname "$host"
echo "$host" >/run/hostname

# crc32_generic: without it `rdma link add` fails with ENOENT on this kernel;
# crc32c_generic must precede the nf_tables modules that pull libcrc32c.
for m in virtio_net crc32_generic crc32c_generic rdma_rxe ib_uverbs rdma_ucm veth vxlan bridge \
         nf_tables nft_socket nft_ct nf_conntrack_netlink nft_reject_inet nft_chain_nat \
         nf_conntrack_bridge nft_meta_bridge sch_htb cls_fw; do
    modprobe "$m" 2>/dev/null || log "modprobe $m failed"
done

nic_by_mac() {
    local d
    for d in /sys/class/net/*; do
        [ "$(cat "$d/address")" = "$1" ] && basename "$d" && return 0
    done
    return 1
}
ip link set lo up
ul=$(nic_by_mac "$ul_mac") || log "no underlay NIC with MAC $ul_mac"
ctl=$(nic_by_mac "$ctl_mac") || log "no control NIC with MAC $ctl_mac"
# Fixed names make every later script simpler: eth0 underlay, ctl0 control.
ip link set "$ctl" name ctl0
[ "$ul" = eth0 ] || ip link set "$ul" name eth0
ip link set eth0 up
ip addr add "$ip" dev eth0
ip link set ctl0 up
ip addr add "$ctl_ip" dev ctl0
rdma link add rxe0 type rxe netdev eth0 || log "rdma link add failed"
# Further rails (`testbed up --rails N`): eth<r> and rxe<r> on segment r.
rails=1 rail_env=""
while mac=$(arg "ul${rails}mac") && [ -n "$mac" ]; do
    r=$rails ipr=$(arg "ip$rails")
    nic=$(nic_by_mac "$mac") || { log "no rail $r NIC with MAC $mac"; break; }
    [ "$nic" = "eth$r" ] || ip link set "$nic" name "eth$r"
    ip link set "eth$r" up
    ip addr add "$ipr" dev "eth$r"
    rdma link add "rxe$r" type rxe netdev "eth$r" || log "rdma link add rxe$r failed"
    rail_env+="MASQ_UNDERLAY_IP$r=${ipr%/*}"$'\n'
    rails=$((r + 1))
done

{
    echo "MASQ_HOST=$host"
    echo "MASQ_UNDERLAY_IP=${ip%/*}"
    echo "MASQ_REPO=$repo"
    echo "MASQ_RAILS=$rails"
    printf '%s' "$rail_env"
} >/run/masq-host.env
mkdir -p /sys/fs/cgroup/tenants

/usr/bin/python3 "$repo/integration/guest/agent.py" --listen "${ctl_ip%/*}" --port "$agent_port" \
    >/dev/console 2>&1 &
log "up: underlay eth0 $ip, rxe0, $rails rail(s), agent on port $agent_port"

# As PID 1, reap every orphan; bash's wait collects any child, not only jobs.
trap '' TERM INT
while :; do
    wait
    sleep 1
done
