"""Podman 5 and Docker 26, the releases Debian 13 ships, each running a stock
RDMA app through masq by the route docs/containers.md gives for it: neither
speaks masq's CNI plugin, so the network namespace and its vNIC are made
by hand and added with `masqctl endpoint add`; the app gets masq from the
CDI device (`--device masq.io/endpoint=NAME`) the engine resolves itself.
Podman 5 joins the namespace by path (`--network ns:`); Docker joins a
holder container's (`--network container:`), whose namespace the endpoint
was added around.

The engines run from a Debian 13 root (debootstrap, cached) chrooted on
the Debian 12 hosts, with the hosts' /proc, /sys, /dev and /run (see
integration/guest/engines.sh); masqd, the cluster and the policy are
test_containers' (cluster mode, acme's clients and servers)."""
import json
import os
import subprocess

import pytest

from masq_testbed import finish, finish_pair, parse_bw, rdma_moved
from test_cluster import cluster_running
from test_containers import (CDI_DIR, CONFIG, MASQCTL, REPO, ROOTFS, ctl, endpoint, eventually,
                             run_testbed, wait_listening)

pytestmark = pytest.mark.engines

# The containers' config, masqctl and the checkout are test_containers'.
ENGINES = os.path.join(REPO, "integration", "guest", "engines.sh")
ENGINES_ROOT = os.path.join(REPO, "integration", "engines-root")
HOSTS = ("host1", "host2")
IMAGE = "localhost/masq-tenant:test"
VNI, TENANT = 100, "acme"


def debian13_root():
    """The Debian 13 root the engines run from (integration/engines-root:
    debootstrap's tarball, unpacked, cached). The guests see it through the
    shared root only if it was there when they booted: `make test-engines`
    makes it first."""
    r = subprocess.run([ENGINES_ROOT], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def engines_up(tb, host, root):
    run_testbed(tb, "podman", "setup", host)   # the tenant rootfs
    tb.run(host, os.path.join(REPO, "integration", "guest", "tenant.sh"), "vni", str(VNI))
    r = tb.run(host, ENGINES, "up", root, timeout=600, check=False)
    assert r.returncode == 0, (f"{host}: {r.stderr}(a root made after the guests booted is "
                               "not seen there: `make test-engines` makes it first)")
    if host == "host2":
        tb.run(host, ENGINES, "image", root, IMAGE, timeout=600)


@pytest.fixture(scope="module")
def engines(testbed):
    tb = testbed
    root = debian13_root()
    with cluster_running(tb, CONFIG, "/masq-containers", HOSTS):
        try:
            with tb.restorable("the Debian 13 engines", lambda h: engines_up(tb, h, root)):
                for host in HOSTS:
                    engines_up(tb, host, root)
                yield tb, root
        finally:
            # dockerd stops its containers as it goes.
            for host in HOSTS:
                tb.run(host, ENGINES, "down", root, check=False, timeout=120)


def vnic_and_endpoint(tb, host, name, vip):
    """docs/containers.md's recipe: a vNIC into netns NAME (which exists)
    on the VNI's bridge, and the endpoint added around it."""
    veth = f"ve-{name}"
    for cmd in (["ip", "link", "add", veth, "mtu", "1450", "type", "veth", "peer", "name",
                 "eth0", "netns", name],
                ["ip", "link", "set", veth, "master", f"mbr{VNI}", "up"],
                ["ip", "-n", name, "link", "set", "lo", "up"],
                ["ip", "-n", name, "link", "set", "eth0", "mtu", "1450", "up"],
                ["ip", "-n", name, "addr", "add", f"{vip}/24", "dev", "eth0"]):
        tb.run(host, *cmd)
    tb.run(host, MASQCTL, "endpoint", "add", name, "--tenant", TENANT, "--vni", str(VNI),
           "--vip", vip, "--netns", f"/run/netns/{name}", "--host-if", veth,
           "--bridge", f"mbr{VNI}")


def remove_endpoint(tb, host, name):
    tb.run(host, MASQCTL, "endpoint", "delete", name, check=False)
    tb.run(host, "ip", "netns", "del", name, check=False)


def podman5_argv(root, name, *cmd):
    """Podman 5's route: endpoint NAME's namespace joined by path, its CDI
    device, the tenant rootfs."""
    return [ENGINES, "podman", root, "run", "--rm", "--name", name, "--network",
            f"ns:/run/netns/{name}", "--device", f"masq.io/endpoint={name}", "--rootfs",
            ROOTFS, *cmd]


BW = ["ib_write_bw", "-d", "vrdma0", "-x", "1", "-F", "-u", "18", "-s", "65536", "-n", "100",
      "-p", "18950"]


def test_podman5_and_docker26_run_ib_write_bw_by_vip_and_obey_the_groups(engines):
    tb, root = engines
    docker = lambda *a, **kw: tb.run("host2", ENGINES, "docker", root, *a, **kw)
    podman_version = tb.run("host1", ENGINES, "podman", root, "--version").stdout
    assert podman_version.startswith("podman version 5."), podman_version
    assert docker("--version").stdout.startswith("Docker version 26."), docker("--version")
    srv_vip, cli_vip, deny_vip = "10.0.0.35", "10.0.0.25", "10.0.0.26"
    try:
        # Docker (host2): a holder container makes the namespace; it gets
        # a name under /run/netns, and the vNIC and endpoint around it.
        docker("run", "-d", "--name", "ct-srv-net", "--network", "none", IMAGE, "sleep", "900")
        pid = docker("inspect", "-f", "{{.State.Pid}}", "ct-srv-net").stdout.strip()
        tb.run("host2", "sh", "-c", "mkdir -p /run/netns && touch /run/netns/ct-srv && "
               f"mount --bind /proc/{pid}/ns/net /run/netns/ct-srv")
        vnic_and_endpoint(tb, "host2", "ct-srv", srv_vip)
        spec = json.loads(tb.run("host2", "cat", f"{CDI_DIR}/masq-endpoint-ct-srv.json").stdout)
        assert spec["devices"][0]["name"] == "ct-srv", spec
        # Docker resolves the CDI device itself (its CDI feature on).
        srv = tb.spawn("host2", ENGINES, "docker", root, "run", "--rm", "--name", "ct-srv",
                       "--network", "container:ct-srv-net", "--device",
                       "masq.io/endpoint=ct-srv", IMAGE, *BW)
        # The backstop adopts the cgroup Docker gave the app's container.
        cid = eventually("docker runs ct-srv", lambda: srv.poll() is None and docker(
            "inspect", "-f", "{{.Id}}", "ct-srv", check=False).stdout.strip()
            or (srv.poll() is not None and pytest.fail(f"ct-srv exited: {finish(srv)}")))
        cg = eventually("masqd adopts ct-srv's cgroup", lambda: next(
            (c for c in endpoint(tb, "host2", "ct-srv")["cgroups"] if cid in c), None))
        wait_listening(tb, "host2", "/run/netns/ct-srv", 18950)
        # Podman 5 (host1): the namespace first, joined by path.
        tb.run("host1", "ip", "netns", "add", "ct-cli")
        vnic_and_endpoint(tb, "host1", "ct-cli", cli_vip)
        eventually("host1 knows ct-srv", lambda: any(
            e["vip"] == srv_vip and e["vni"] == VNI for e in ctl(tb, "host1", "vpc")["vpc"]))
        # ct-deny is in no group: its QP to ct-srv is refused at RTR.
        tb.run("host1", "ip", "netns", "add", "ct-deny")
        vnic_and_endpoint(tb, "host1", "ct-deny", deny_vip)
        r = tb.run("host1", *podman5_argv(root, "ct-deny", "qp_probe", "vrdma0", "1", srv_vip),
                   check=False, timeout=600)
        assert r.returncode == 3 and "modify_qp_rtr: errno=13" in r.stdout, r
        with rdma_moved(tb, "host2", 65536, 100):
            cli = tb.run("host1", *podman5_argv(root, "ct-cli", *BW, srv_vip), check=False,
                         timeout=600)
        # Docker's server and Podman 5's client both succeeded.
        out, cli_out = finish_pair(srv, cli)
        assert parse_bw(cli_out)["iterations"] == 100
        assert parse_bw(out)["iterations"] == 100
        assert cg == f"/docker/{cid}", cg   # dockerd's cgroupfs driver
    finally:
        docker("rm", "-f", "ct-srv", "ct-srv-net", check=False)
        tb.run("host2", "umount", "/run/netns/ct-srv", check=False)
        remove_endpoint(tb, "host2", "ct-srv")
        for name in ("ct-cli", "ct-deny"):
            remove_endpoint(tb, "host1", name)

