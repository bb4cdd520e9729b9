"""Tenant endpoints: network namespaces with VXLAN vNICs and cgroups. Two
VNIs use the same virtual IPs and must never see each other."""
import time

import pytest

from masq_testbed import finish

ENDPOINTS = [
    ("host1", "acme-a", 100, "10.0.0.1/24"),
    ("host2", "acme-b", 100, "10.0.0.2/24"),
    ("host1", "globex-a", 200, "10.0.0.1/24"),
    ("host2", "globex-b", 200, "10.0.0.2/24"),
    ("host1", "lonely", 300, "10.0.0.1/24"),  # a VNI with nobody else in it
]
PORT = 7777


@pytest.fixture(scope="module")
def endpoints(testbed):
    for host, name, vni, vip in ENDPOINTS:
        testbed.tenant_add(host, name, vni, vip)
    servers = []
    try:
        # The same vIP:port in both VNIs, each answering with its tenant's name.
        for name in ("acme-b", "globex-b"):
            tenant = name.split("-")[0]
            servers.append(
                testbed.tenant_spawn(
                    "host2", name, "socat", f"TCP-LISTEN:{PORT},reuseaddr,fork",
                    f"SYSTEM:echo {tenant}",
                )
            )
            testbed.wait_listening("host2", PORT, tenant=name)
        yield testbed
    finally:
        for s in servers:
            s.kill()
            finish(s)
        for host, name, _, _ in ENDPOINTS:
            testbed.tenant_del(host, name, check=False)


def connect(tb, host, name, addr="10.0.0.2"):
    return tb.tenant_run(
        host, name, "socat", "-t5", "-T5", "-", f"TCP:{addr}:{PORT},connect-timeout=5",
        check=False, timeout=60,
    )


@pytest.mark.parametrize("tenant", ["acme", pytest.param("globex", marks=pytest.mark.extended)])
def test_same_vni_reaches_its_peer_by_virtual_ip(endpoints, tenant):
    r = connect(endpoints, "host1", f"{tenant}-a")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == tenant


def test_other_vni_with_same_addresses_is_unreachable(endpoints):
    r = connect(endpoints, "host1", "lonely")
    assert r.returncode != 0
    assert r.stdout == ""


@pytest.mark.extended
def test_endpoint_sees_only_its_vnic_and_sits_in_its_cgroup(endpoints):
    links = endpoints.tenant_run("host1", "acme-a", "ip", "-br", "link").stdout.split("\n")
    names = sorted(line.split()[0].split("@")[0] for line in links if line.strip())
    assert names == ["eth0", "lo"]
    addrs = endpoints.tenant_run("host1", "acme-a", "ip", "-4", "-br", "addr", "show", "eth0")
    assert "10.0.0.1/24" in addrs.stdout
    cg = endpoints.tenant_run("host1", "acme-a", "cat", "/proc/self/cgroup").stdout
    assert cg.strip() == "0::/tenants/acme-a"


@pytest.mark.extended
def test_neighbours_are_the_own_vni_peers(endpoints):
    def mac(host, name):
        out = endpoints.tenant_run(host, name, "cat", "/sys/class/net/eth0/address").stdout
        return out.strip()

    for tenant in ("acme", "globex"):
        connect(endpoints, "host1", f"{tenant}-a")
        neigh = endpoints.tenant_run("host1", f"{tenant}-a", "ip", "neigh", "show", "10.0.0.2")
        assert mac("host2", f"{tenant}-b") in neigh.stdout
        other = "globex" if tenant == "acme" else "acme"
        assert mac("host2", f"{other}-b") not in neigh.stdout


@pytest.mark.extended
def test_tenant_del_removes_everything(testbed):
    testbed.tenant_add("host1", "scratch", 400, "10.9.0.1/24")
    sleeper = testbed.tenant_spawn("host1", "scratch", "sleep", "600")
    deadline = time.monotonic() + 30
    while testbed.run("host1", "pgrep", "-x", "sleep", check=False).returncode != 0:
        assert time.monotonic() < deadline, "the tenant's command never started"
        time.sleep(0.2)
    testbed.tenant_del("host1", "scratch")
    finish(sleeper, timeout=30)
    assert "scratch" not in testbed.run("host1", "ip", "netns", "list").stdout
    r = testbed.run("host1", "sh", "-c", "ls /sys/fs/cgroup/tenants; ip -br link")
    assert "scratch" not in r.stdout and "ve-scratch" not in r.stdout
    assert "mbr400" not in r.stdout and "mvx400" not in r.stdout
    assert testbed.run("host1", "pgrep", "-x", "sleep", check=False).returncode == 1
