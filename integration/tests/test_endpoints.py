"""Endpoints that come and go while masqd runs (`masqctl endpoint add/del`):
a container started after masqd is reachable by its vIP at once, survives a
masqd restart, and when deleted loses its QPs, sessions, connections,
socket and kernel rules, while other endpoints' apps notice nothing."""
import json
import os
import subprocess
import time

import pytest

from masq_testbed import finish
from test_masq import pair

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CONFIG = os.path.join(HERE, "configs", "masq")
MASQCTL = os.path.join(REPO, "target", "release", "masqctl")
TESTBED = os.path.join(REPO, "integration", "testbed")
# host2's config lists no endpoint acme-d; both hosts' VPC maps place
# 10.0.0.4 (VNI 100) on host2, as an operator's map would before it starts.
NAME, VIP = "acme-d", "10.0.0.4"
ADD = ["endpoint", "add", NAME, "--tenant", "acme", "--vni", "100", "--vip", VIP,
       "--netns", f"/run/netns/{NAME}", "--host-if", f"ve-{NAME}", "--bridge", "mbr100"]
PINGPONG = ["ibv_rc_pingpong", "-d", "vrdma0", "-g", "1", "-s", "1024"]


@pytest.fixture(scope="module")
def masq(testbed):
    with testbed.masq_running(CONFIG):
        yield testbed


@pytest.fixture
def acme_d(masq):
    """The namespace, vNIC and cgroup of a container on host2 that masqd
    does not serve yet."""
    masq.tenant_add("host2", NAME, 100, f"{VIP}/24")
    try:
        yield masq
    finally:
        masq.run("host2", MASQCTL, "endpoint", "del", NAME, check=False)
        masq.tenant_del("host2", NAME, check=False)


def masqctl(tb, host, *args, check=True):
    return tb.run(host, MASQCTL, *args, check=check)


def listed(tb, host):
    out = masqctl(tb, host, "-o", "json", "endpoint", "list").stdout
    return {e["name"]: e for e in json.loads(out)["endpoints"]}


def entries(tb, host, vip):
    out = masqctl(tb, host, "-o", "json", "conntrack", "-L", "-s", vip).stdout
    return json.loads(out)["entries"]


def pingpong(tb, port, iters=50, server=("host2", NAME), client=("host1", "acme-a"),
             dest=VIP):
    return pair(tb, server, client, [*PINGPONG, "-n", str(iters)], port, dest)


def chain_exists(tb, host):
    r = tb.run(host, "nft", "list", "chain", "inet", "masq_backstop", "ep_acme_d", check=False)
    return r.returncode == 0


@pytest.mark.extended
def test_an_endpoint_added_at_run_time_is_served_until_deleted(acme_d):
    tb = acme_d
    assert NAME not in listed(tb, "host2")
    r = masqctl(tb, "host2", *ADD)
    assert f"endpoint {NAME} added" in r.stdout, r.stdout
    eps = listed(tb, "host2")
    assert eps[NAME]["origin"] == "command" and eps["acme-b"]["origin"] == "file", eps
    assert any(g["gid"] == f"::ffff:{VIP}" for g in eps[NAME]["gids"]), eps[NAME]
    assert chain_exists(tb, "host2")
    # Its tcp/udp table is there, as for the file's endpoints.
    tb.run("host2", "nft", "list", "tables", "bridge")

    # Reachable by vIP from the other host at once: no restart anywhere.
    pingpong(tb, 19501)
    assert not entries(tb, "host2", VIP), "a finished app leaves nothing tracked"

    # masqd restarts serving it (kept in the runtime file).
    subprocess_ok(["masq", "kill", "host2"])
    subprocess_ok(["masq", "start", "host2"])
    assert listed(tb, "host2")[NAME]["origin"] == "command"
    pingpong(tb, 19502)

    # Deleted under a running app: its QPs go to ERROR (the app sees its
    # work requests fail), while another endpoint's app runs on unharmed.
    long_argv = [*PINGPONG, "-n", "1000000", "-p", "19503"]
    srv = tb.tenant_spawn("host2", NAME, *long_argv)
    other_srv = tb.tenant_spawn("host2", "acme-b", *PINGPONG, "-n", "10000", "-p", "19504")
    cli = other_cli = None
    try:
        tb.wait_listening("host2", 19503, tenant=NAME)
        tb.wait_listening("host2", 19504, tenant="acme-b")
        cli = tb.tenant_spawn("host1", "acme-a", *long_argv, VIP)
        other_cli = tb.tenant_spawn("host1", "acme-a", *PINGPONG, "-n", "10000", "-p", "19504",
                                    "10.0.0.2")
        deadline = time.monotonic() + 120
        while not entries(tb, "host2", VIP):
            assert time.monotonic() < deadline, "the long pingpong never connected"
            assert srv.poll() is None, finish(srv)
            time.sleep(0.5)
        r = masqctl(tb, "host2", "-o", "json", "endpoint", "del", NAME)
        gone = json.loads(r.stdout)
        assert gone["sessions"] >= 1 and gone["qps_reset"] >= 1, gone
        rc, out, err = finish(srv, timeout=120)
        assert rc != 0 and "Failed status" in out + err, (rc, out, err)
    finally:
        for p in (srv, cli):
            if p is not None and p.poll() is None:
                p.kill()
            if p is not None:
                finish(p)
    rc, out, err = finish(other_cli)
    assert rc == 0, f"acme-a -> acme-b failed while acme-d was deleted:\n{out}\n{err}"
    rc, out, err = finish(other_srv)
    assert rc == 0, f"acme-b failed while acme-d was deleted:\n{out}\n{err}"

    # Nothing of it is left: listing, tracking, socket, backstop chain,
    # tcp/udp table, runtime file.
    assert NAME not in listed(tb, "host2")
    assert not entries(tb, "host2", VIP)
    assert not chain_exists(tb, "host2")
    r = tb.run("host2", "test", "-e", f"/run/masq/endpoints/{NAME}/masq.sock", check=False)
    assert r.returncode != 0, "the socket outlived its endpoint"
    tables = tb.run("host2", "nft", "list", "tables", "bridge").stdout
    assert "acme_d" not in tables.replace("-", "_"), tables
    runtime = tb.run("host2", "cat", "/run/masq/runtime-endpoints.yaml").stdout
    assert NAME not in runtime, runtime
    # An app started in its namespace now finds no masqd to serve it.
    r = tb.tenant_run("host2", NAME, "ibv_devices", check=False)
    assert "vrdma0" not in r.stdout, r.stdout


def subprocess_ok(args):
    r = subprocess.run([TESTBED, *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"testbed {' '.join(args)}:\n{r.stdout}\n{r.stderr}"


@pytest.mark.extended
def test_bad_endpoint_changes_are_refused_and_change_nothing(acme_d):
    tb = acme_d
    before = listed(tb, "host2")
    chains = tb.run("host2", "nft", "list", "chains", "inet").stdout
    bad = {
        # VNI 100 is acme's.
        "belongs to tenant \"acme\"": ["--tenant", "globex"],
        # The VPC map places 10.0.0.1 in VNI 100 on host1.
        "on host 198.18.0.1": ["--vip", "10.0.0.1"],
        # acme-b is taken on this host.
        "an endpoint of that name exists": ["--name", "acme-b"],
        "vni: 0 is not a VNI": ["--vni", "0"],
        "eth0.1234567890123": ["--vnic", "eth0.1234567890123"],
    }
    for want, change in bad.items():
        argv = list(ADD)
        key, value = change
        if key == "--name":
            argv[2] = value
        elif key in argv:
            argv[argv.index(key) + 1] = value
        else:
            argv += [key, value]
        r = masqctl(tb, "host2", *argv, check=False)
        assert r.returncode == 1, (argv, r.stdout, r.stderr)
        assert want in r.stderr and "nothing changed" in r.stderr, (want, r.stderr)
    r = masqctl(tb, "host2", "endpoint", "del", "no-such", check=False)
    assert r.returncode == 1 and "no endpoint \"no-such\"" in r.stderr, r.stderr
    # Usage errors never reach masqd.
    r = masqctl(tb, "host2", "endpoint", "add", NAME, "--tenant", "acme", "--vni", "100",
                "--vip", VIP, "--netns", "/run/netns/x", "--host-if", "ve-x", check=False)
    assert r.returncode == 2, r.stderr
    assert listed(tb, "host2").keys() == before.keys()
    assert tb.run("host2", "nft", "list", "chains", "inet").stdout == chains


QP_BENCH = os.path.join(REPO, "integration", "build", "qp_connect_bench")


@pytest.mark.extended
def test_a_connection_quota_refuses_the_next_and_frees_with_the_app(acme_d):
    tb = acme_d
    masqctl(tb, "host2", *ADD, "--max-connections", "2")
    assert listed(tb, "host2")[NAME]["max_connections"] == 2

    def connect(endpoint, n, dest):
        # RTR towards placeholder QPNs of dest: connections as masqd counts them.
        return tb.tenant_run("host2", endpoint, QP_BENCH, "--placeholder", "-d", "vrdma0",
                             "-x", "1", "-n", str(n), dest, check=False, timeout=120)

    r = connect(NAME, 2, "10.0.0.2")
    assert r.returncode == 0, r.stderr
    r = connect(NAME, 3, "10.0.0.2")
    assert r.returncode == 1 and "Disk quota exceeded" in r.stderr, r.stderr
    assert "connection quota of endpoint acme-d reached (2 of 2)" in tb.masqd_log("host2")
    # The app that held them is gone: its slots are free again.
    r = connect(NAME, 2, "10.0.0.2")
    assert r.returncode == 0, r.stderr
    # Another endpoint has no quota and does not share this one's.
    r = connect("acme-b", 3, VIP)
    assert r.returncode == 0, r.stderr


@pytest.mark.extended
def test_rdma_cgroup_limits_refuse_the_next_object_and_free_with_the_app(acme_d):
    tb = acme_d
    # PD + CQ + 4 QPs: six verbs objects; the seventh is refused by the kernel.
    masqctl(tb, "host2", *ADD, "--max-objects", "6", "--max-handles", "2")
    assert listed(tb, "host2")[NAME]["rdma_limits"] == {"handles": 2, "objects": 6}
    rdma_max = tb.run("host2", "cat", f"/sys/fs/cgroup/tenants/{NAME}/rdma.max").stdout
    assert "rxe0 hca_handle=2 hca_object=6" in rdma_max, rdma_max

    def qps(endpoint, n):
        return tb.tenant_run("host2", endpoint, QP_BENCH, "--placeholder", "-d", "vrdma0",
                             "-x", "1", "-n", str(n), "10.0.0.1", check=False, timeout=120)

    r = qps(NAME, 4)
    assert r.returncode == 0, r.stderr
    r = qps(NAME, 5)
    assert r.returncode == 1 and "ibv_create_qp 5 of 5: Resource temporarily unavailable" \
        in r.stderr, r.stderr
    # Another endpoint's apps are not limited by this one's cgroup.
    r = qps("acme-b", 5)
    assert r.returncode == 0, r.stderr
    # An app holding PD, CQ, QP and MR leaves room for no QP of another...
    holder = tb.tenant_spawn("host2", NAME, *PINGPONG, "-p", "18807")
    try:
        tb.wait_listening("host2", 18807, tenant=NAME)
        held = listed(tb, "host2")[NAME]["rdma_current"]
        assert held["handles"] == 1 and held["objects"] >= 4, held
        r = qps(NAME, 1)
        assert r.returncode == 1 and "Resource temporarily unavailable" in r.stderr, r.stderr
    finally:
        holder.kill()
        finish(holder)
    # ...until it is gone.
    r = qps(NAME, 1)
    assert r.returncode == 0, r.stderr
    assert listed(tb, "host2")[NAME]["rdma_current"] in (None, {"handles": 0, "objects": 0})
    # Deleted, the endpoint's cgroup is not limited any more.
    masqctl(tb, "host2", "endpoint", "del", NAME)
    rdma_max = tb.run("host2", "cat", f"/sys/fs/cgroup/tenants/{NAME}/rdma.max").stdout
    assert "rxe0 hca_handle=max hca_object=max" in rdma_max, rdma_max


@pytest.mark.extended
def test_bad_rdma_limits_are_refused_by_name(acme_d):
    r = masqctl(acme_d, "host2", *ADD, "--max-objects", "0", check=False)
    assert r.returncode == 1 and "rdmaLimits.objects: 0 would refuse" in r.stderr, r.stderr
    assert NAME not in listed(acme_d, "host2")


@pytest.mark.extended
def test_a_rate_limit_shapes_the_endpoints_roce_egress(acme_d):
    tb = acme_d
    masqctl(tb, "host2", *ADD, "--max-rate-mbps", "24")
    assert listed(tb, "host2")[NAME]["max_rate_mbps"] == 24
    size, n = 65536, 60
    argv = ["ib_write_bw", "-d", "vrdma0", "-x", "1", "-F", "-u", "18", "-s", str(size), "-n", str(n)]
    # acme-d (host2) writes to acme-a (host1): its packets leave host2
    # through its HTB class; the run completes, only slower.
    pair(tb, ("host1", "acme-a"), ("host2", NAME), argv, 18811, "10.0.0.1")
    shaped = listed(tb, "host2")[NAME]["rate"]
    assert shaped["mbps"] == 24 and shaped["bytes"] >= size * n, shaped
    assert shaped["overlimits"] > 0, shaped  # it was held back, not just counted
    qdisc = tb.run("host2", "tc", "qdisc", "show", "dev", "eth0", "root").stdout
    assert "htb 4d51:" in qdisc, qdisc
    # acme-b has no limit: its traffic is not classified.
    pair(tb, ("host1", "acme-a"), ("host2", "acme-b"), argv, 18812, "10.0.0.1")
    assert listed(tb, "host2")[NAME]["rate"]["bytes"] == shaped["bytes"]
    # The last limited endpoint gone, the qdisc and marks go too.
    masqctl(tb, "host2", "endpoint", "del", NAME)
    qdisc = tb.run("host2", "tc", "qdisc", "show", "dev", "eth0", "root").stdout
    assert "4d51:" not in qdisc, qdisc
    assert tb.run("host2", "nft", "list", "table", "inet", "masq_rate", check=False).returncode != 0


@pytest.mark.extended
def test_a_rate_limit_of_zero_is_refused_by_name(acme_d):
    r = masqctl(acme_d, "host2", *ADD, "--max-rate-mbps", "0", check=False)
    assert r.returncode == 1 and "maxRateMbps: 0 would stop" in r.stderr, r.stderr
