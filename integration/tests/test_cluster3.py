"""Cluster mode on three hosts (`make test-cluster`): etcd as a three-member
cluster, one member per host, masqd on each host talking to its own member.
A host whose plug is pulled (virsh destroy) leaves the others serving and
its endpoints leave their maps; it comes back and rejoins. An endpoint that
moves to another host (a rescheduled container) is reachable there."""
import json
import os
import time

import pytest

from masq_testbed import UNDERLAY
from test_cluster import (MASQCTL, ETCD, apply_policy, ctl, etcd_with_roles, eventually,
                          pingpong, run_testbed, vpc)

pytestmark = pytest.mark.three_hosts

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "configs", "cluster3")
HOSTS = ("host1", "host2", "host3")
MEMBERS = ",".join(f"{h}=https://{UNDERLAY[h]}:2380" for h in HOSTS)
LEASE_S = 4  # leaseSeconds in the configs


def etcdctl(tb, host, *args, check=True):
    """etcdctl on `host` to its member, as etcd's root user: with roles on,
    only root may change the members."""
    pki = "/run/masq-pki"
    return tb.run(host, "etcdctl", "--endpoints", f"https://{UNDERLAY[host]}:2379",
                  "--cacert", f"{pki}/ca.pem", "--cert", f"{pki}/root.pem",
                  "--key", f"{pki}/root-key.pem", *args,
                  check=check)


@pytest.fixture(scope="module")
def cluster3(testbed):
    if len(testbed.hosts()) < 3:
        testbed.up(3)
    for h in HOSTS:
        testbed.run(h, ETCD, "wipe")
    # No member is healthy before a quorum runs: start all, then wait.
    for h in HOSTS:
        testbed.run(h, ETCD, "member", MEMBERS, "new")
    for h in HOSTS:
        testbed.run(h, ETCD, "wait")
    etcd_with_roles(testbed, "host1", "/masq-test3", HOSTS, start=False)
    try:
        with testbed.masq_running(CONFIG):
            apply_policy(testbed, "host1", os.path.join(CONFIG, "policy.yaml"))
            yield testbed
    finally:
        for h in HOSTS:
            testbed.run(h, ETCD, "wipe", check=False)


def test_three_hosts_one_etcd_cluster_one_map(cluster3):
    tb = cluster3
    members = json.loads(etcdctl(tb, "host2", "member", "list", "-w", "json").stdout)["members"]
    assert sorted(m["name"] for m in members) == list(HOSTS), members
    for h in HOSTS:
        assert ctl(tb, h, "status")["cluster"]["state"] == "connected"
        eventually(f"{h} maps every endpoint", lambda h=h: all(
            (100, f"10.0.0.{i}") in vpc(tb, h) for i in (1, 2, 3)))
        m = vpc(tb, h)
        assert [m[(100, f"10.0.0.{i}")]["host"] for i in (1, 2, 3)] == [
            UNDERLAY[x] for x in HOSTS], m
    pingpong(tb, 19701, ("host3", "acme-c"), ("host1", "acme-a"), "10.0.0.3")


def bring_back_host3(tb):
    """Power host3 on and rejoin it: it boots fresh (its etcd data was on
    tmpfs), so the cluster forgets its old member and adds it again, as an
    operator replaces a lost member; then masqd and its endpoint start."""
    members = json.loads(etcdctl(tb, "host1", "member", "list", "-w", "json").stdout)["members"]
    for m in members:
        if m.get("name") == "host3" or f"https://{UNDERLAY['host3']}:2380" in m.get("peerURLs", []):
            etcdctl(tb, "host1", "member", "remove", format(m["ID"], "x"))
    etcdctl(tb, "host1", "member", "add", "host3", f"--peer-urls=https://{UNDERLAY['host3']}:2380")
    tb.poweron("host3")
    tb.run("host3", ETCD, "member", MEMBERS, "existing")
    tb.run("host3", ETCD, "wait")
    # Creates host3's endpoint again and starts its masqd (the others run).
    run_testbed("masq", "up", "--config", CONFIG)


def test_a_powered_off_host_leaves_the_map_the_others_serve_it_rejoins(cluster3):
    tb = cluster3
    tb.poweroff("host3")
    try:
        t0 = time.monotonic()
        for h in ("host1", "host2"):
            eventually(f"{h} forgets acme-c", lambda h=h: (100, "10.0.0.3") not in vpc(tb, h),
                       LEASE_S + 30)
        print(f"host3 powered off -> its endpoint gone from both maps: "
              f"{time.monotonic() - t0:.2f} s (lease {LEASE_S} s)")
        # Two of three etcd members are a quorum: nothing degrades.
        for h in ("host1", "host2"):
            assert ctl(tb, h, "status")["cluster"]["state"] == "connected"
        # New connections are admitted...
        pingpong(tb, 19702, ("host2", "acme-b"), ("host1", "acme-a"), "10.0.0.2")
        # ...and policy is applied, on both hosts, from either.
        applied = apply_policy(tb, "host2", os.path.join(CONFIG, "policy-revoked.yaml"))
        eventually("host1 runs the revoking policy",
                   lambda: ctl(tb, "host1", "policy", "show")["version"] == applied["version"])
        r = tb.tenant_run("host1", "acme-a", "ibv_rc_pingpong", "-d", "vrdma0", "-g", "1",
                          "-n", "5", "-p", "19703", "10.0.0.2", check=False, timeout=60)
        assert r.returncode != 0, r.stdout
        applied = apply_policy(tb, "host1", os.path.join(CONFIG, "policy.yaml"))
        eventually("host2 runs the allowing policy",
                   lambda: ctl(tb, "host2", "policy", "show")["version"] == applied["version"])
        pingpong(tb, 19704, ("host2", "acme-b"), ("host1", "acme-a"), "10.0.0.2")
    finally:
        t1 = time.monotonic()
        bring_back_host3(tb)
    for h in ("host1", "host2"):
        eventually(f"{h} maps acme-c again", lambda h=h: (100, "10.0.0.3") in vpc(tb, h), 60)
    print(f"host3 powered on -> rejoined and mapped: {time.monotonic() - t1:.2f} s")
    members = json.loads(etcdctl(tb, "host3", "member", "list", "-w", "json").stdout)["members"]
    assert sorted(m["name"] for m in members) == list(HOSTS), members
    assert ctl(tb, "host3", "status")["cluster"]["state"] == "connected"
    # It runs the policy the cluster has now, not the one it booted with.
    assert ctl(tb, "host3", "policy", "show")["version"] == applied["version"]
    pingpong(tb, 19705, ("host3", "acme-c"), ("host1", "acme-a"), "10.0.0.3")


def add_endpoint(tb, host, name, vip):
    tb.tenant_add(host, name, 100, f"{vip}/24")
    tb.run(host, MASQCTL, "endpoint", "add", name, "--tenant", "acme", "--vni", "100",
           "--vip", vip, "--netns", f"/run/netns/{name}")


def del_endpoint(tb, host, name, check=True):
    tb.run(host, MASQCTL, "endpoint", "del", name, check=check)
    tb.tenant_del(host, name, check=check)


def test_an_endpoint_that_moved_to_another_host_is_reachable_there(cluster3):
    tb = cluster3
    vip = "10.0.0.9"
    add_endpoint(tb, "host1", "acme-m", vip)
    try:
        eventually("host2 maps acme-m on host1",
                   lambda: vpc(tb, "host2").get((100, vip), {}).get("host") == UNDERLAY["host1"])
        pingpong(tb, 19706, ("host1", "acme-m"), ("host2", "acme-b"), vip)
        # The container moves: gone from host1, started on host3, same vIP.
        t0 = time.monotonic()
        del_endpoint(tb, "host1", "acme-m")
        add_endpoint(tb, "host3", "acme-m", vip)
        t1 = eventually("host2 maps acme-m on host3",
                        lambda: vpc(tb, "host2").get((100, vip), {}).get("host") == UNDERLAY["host3"])
        print(f"endpoint moved host1 -> host3: in host2's map after {t1 - t0:.2f} s")
        assert vpc(tb, "host1")[(100, vip)]["host"] == UNDERLAY["host3"]
        pingpong(tb, 19707, ("host3", "acme-m"), ("host2", "acme-b"), vip)
    finally:
        del_endpoint(tb, "host1", "acme-m", check=False)
        del_endpoint(tb, "host3", "acme-m", check=False)
