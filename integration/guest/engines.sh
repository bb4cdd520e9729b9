#!/bin/bash
# Podman 5 and Docker as Debian 13 ships them, inside a testbed host (run by
# test_engines). The host stays Debian 12; the engines run chrooted in a
# Debian 13 root (debootstrap'd on the build machine, seen here through the
# shared root as the checkout is, its writes landing in this guest's tmpfs
# overlay) with the host's /proc, /sys, /dev and /run bound in: they see its
# network namespaces, cgroups, RDMA devices, masqd's sockets and the CDI
# specs masqd writes to /var/run/cdi, as engines installed on the host would.
#   engines.sh up ROOT              bind the host into ROOT, configure both
#                                   engines, start dockerd (idempotent)
#   engines.sh podman ROOT ARGS...  podman 5 in ROOT
#   engines.sh docker ROOT ARGS...  docker in ROOT
#   engines.sh image ROOT NAME      the tenant rootfs (podman.sh's) as docker image NAME
#   engines.sh down ROOT            stop dockerd, unbind ROOT
set -euo pipefail
. /run/masq-host.env
TENANT_ROOTFS=/var/lib/masq-rootfs
DOCKERD_LOG=/var/log/masq-dockerd.log

die() { echo "engines.sh: $*" >&2; exit 2; }

root_of() {
    local root=${1:-}
    [ -n "$root" ] || die "no ROOT given"
    [ -x "$root/usr/bin/podman" ] && [ -x "$root/usr/sbin/dockerd" ] \
        || die "$root: no Debian 13 root with podman and dockerd"
    echo "$root"
}

# bind SRC DIR: DIR shows SRC (once), and what is mounted under SRC later;
# a slave, so that nothing done under DIR (dockerd's mounts, down's
# unmount) reaches the host's own mounts.
bind() {
    mkdir -p "$2"
    mountpoint -q "$2" && return 0
    mount --rbind "$1" "$2"
    mount --make-rslave "$2"
}

# "${IN_ROOT[@]}" ROOT CMD...: CMD chrooted in ROOT, in a mount namespace of
# its own whose mounts are slaves of the host's: runc and crun pivot_root
# into a container's root, which fails while the mount above the chroot
# (the host's /) is shared. (An array, not a function: setsid runs it too.)
IN_ROOT=(unshare --mount --propagation slave chroot)

# Whether dockerd in ROOT answers its socket.
docker_answers() { chroot "$1" docker info >/dev/null 2>&1; }

configure() {
    local root=$1
    mkdir -p "$root/etc/containers" "$root/etc/docker"
    # The guests run no systemd: cgroupfs, events to a file.
    cat >"$root/etc/containers/containers.conf" <<CONF
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "crun"
CONF
    cat >"$root/etc/containers/storage.conf" <<CONF
[storage]
driver = "vfs"
runroot = "/run/containers/storage-engines"
graphroot = "/var/lib/containers/storage"
CONF
    # Docker touches no firewall and makes no bridge of its own (the
    # containers take masq's vNIC); CDI is a feature flag in Docker 26.
    cat >"$root/etc/docker/daemon.json" <<CONF
{
  "storage-driver": "vfs",
  "iptables": false,
  "ip6tables": false,
  "ip-forward": false,
  "ip-masq": false,
  "bridge": "none",
  "exec-root": "/run/docker-engines",
  "pidfile": "/run/docker-engines.pid",
  "features": { "cdi": true },
  "cdi-spec-dirs": ["/etc/cdi", "/var/run/cdi"]
}
CONF
}

up() {
    local root
    root=$(root_of "${1:-}")
    [ -e "$TENANT_ROOTFS/.ready" ] || die "no tenant rootfs (podman.sh setup first)"
    # Network namespaces made on the host after this (ip netns add, a
    # holder's namespace bound under /run/netns) must show in ROOT too:
    # the host's mounts shared, ROOT's binds their slaves.
    mount --make-rshared /
    # ROOT a mount of its own: dockerd remounts its chroot's / (to unpack
    # images), which fails on a directory that is no mountpoint.
    bind "$root" "$root"
    mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
    bind /sys "$root/sys"
    bind /dev "$root/dev"
    bind /run "$root/run"
    # libmasq: the CDI spec names it in the checkout.
    bind "$MASQ_REPO" "$root$MASQ_REPO"
    bind "$TENANT_ROOTFS" "$root$TENANT_ROOTFS"
    # Image storage off the overlay root (vfs copies every layer).
    for d in var/lib/containers var/lib/docker; do
        mkdir -p "$root/$d"
        mountpoint -q "$root/$d" || mount -t tmpfs -o mode=700 tmpfs "$root/$d"
    done
    configure "$root"
    if ! docker_answers "$root"; then
        setsid "${IN_ROOT[@]}" "$root" /usr/sbin/dockerd >"$DOCKERD_LOG" 2>&1 </dev/null &
        local i
        for i in $(seq 240); do
            docker_answers "$root" && break
            kill -0 $! 2>/dev/null || { tail -20 "$DOCKERD_LOG" >&2; die "dockerd exited"; }
            sleep 0.5
        done
        docker_answers "$root" || { tail -20 "$DOCKERD_LOG" >&2; die "dockerd did not answer in 120 s"; }
    fi
    echo "$MASQ_HOST: $(chroot "$root" podman --version), $(chroot "$root" docker --version)"
}

down() {
    local root
    root=$(root_of "${1:-}")
    if [ -s /run/docker-engines.pid ]; then
        local pid
        pid=$(cat /run/docker-engines.pid)
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    fi
    mountpoint -q "$root" && umount -R "$root"
    echo "$MASQ_HOST: engines down"
}

case "${1:-}" in
    up) up "${2:-}" ;;
    down) down "${2:-}" ;;
    podman | docker)
        cli=$1 root=$(root_of "${2:-}")
        shift 2
        "${IN_ROOT[@]}" "$root" "$cli" "$@" ;;
    image)
        [ $# -eq 3 ] || die "usage: image ROOT NAME"
        root=$(root_of "$2")
        tar -C "$TENANT_ROOTFS" -c . | chroot "$root" docker import - "$3" ;;
    *) die "unknown command '${1:-}' (up, podman, docker, image, down)" ;;
esac
