"""The testbed's rails (`make test-rails`: `testbed up --rails 2`): each
host has a NIC and an rxe device per rail (eth0/rxe0 on the default
underlay, eth1/rxe1 on a segment of its own), as a GPU node has an RDMA NIC
per rail network. These tests check the testbed itself, natively: RoCE
over rxe1 moves on rail 1's segment and not on rail 0's."""
import json
import os
import re

import pytest

from masq_testbed import CLI, finish, finish_pair, parse_bw, perftest_gid, wait_for
from test_backstop import set_elements
from test_cm import pair, perftest_pair, rping
from test_containers import cni

pytestmark = pytest.mark.rails

RAIL1 = {"host1": "203.0.113.1", "host2": "203.0.113.2"}
UNDERLAY_OF = {"rail0": {"host1": "198.18.0.1", "host2": "198.18.0.2"}, "rail1": RAIL1}


@pytest.fixture(scope="module", autouse=True)
def two_rails(testbed):
    """A testbed of another shape (one already up) boots again with two."""
    testbed.up(2, rails=2)


def link_bytes(tb, host):
    """Bytes each underlay NIC has received and sent: {netdev: (rx, tx)}."""
    out = {}
    for dev in ("eth0", "eth1"):
        stats = f"/sys/class/net/{dev}/statistics"
        rx, tx = tb.run(host, "cat", f"{stats}/rx_bytes", f"{stats}/tx_bytes").stdout.split()
        out[dev] = (int(rx), int(tx))
    return out


def test_each_host_has_an_rxe_device_per_rail(testbed):
    for host, ip in RAIL1.items():
        links = testbed.run(host, "rdma", "link", "show").stdout
        assert "link rxe0/1 state ACTIVE" in links and "netdev eth0" in links, links
        assert "link rxe1/1 state ACTIVE" in links and "netdev eth1" in links, links
        addr = testbed.run(host, "ip", "-4", "-o", "addr", "show", "dev", "eth1").stdout
        assert f"inet {ip}/24" in addr, addr
        # GID 1: the IPv4-mapped address, RoCE v2.
        gid = testbed.run(host, "cat", "/sys/class/infiniband/rxe1/ports/1/gids/1").stdout
        assert gid.strip() == "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}".format(
            *map(int, ip.split("."))), gid
        env = testbed.run(host, "cat", "/run/masq-host.env").stdout
        assert "MASQ_RAILS=2" in env and f"MASQ_UNDERLAY_IP1={ip}" in env, env


def test_roce_over_rail_1_stays_on_rail_1s_segment(testbed):
    size, iters = 65536, 100
    argv = ["ib_write_bw", "-d", "rxe1", "-x", "1", "-F", "-u", "18", "-s", str(size),
            "-n", str(iters), "-p", "18701"]
    before = link_bytes(testbed, "host2")
    srv = testbed.spawn("host2", *argv)
    try:
        testbed.wait_listening("host2", 18701)
        cli = testbed.run("host1", *argv, RAIL1["host2"], check=False)
    except BaseException:
        srv.kill()
        finish(srv)
        raise
    _, out = finish_pair(srv, cli)
    assert parse_bw(out)["iterations"] == iters
    after = link_bytes(testbed, "host2")
    moved = size * iters
    rail1_rx = after["eth1"][0] - before["eth1"][0]
    rail0_rx = after["eth0"][0] - before["eth0"][0]
    assert rail1_rx >= moved, (rail1_rx, moved)
    # Rail 0 carries only the suite's own control traffic meanwhile.
    assert rail0_rx < moved // 10, (rail0_rx, moved)


# masqd with two rails -------------------------------------------------------
# acme-a (host1) and acme-b (host2) each have vrdma0 on rail0 and vrdma1 on
# rail1 (their further devices acme-a1, acme-b1): configs/rails.
RAILS_CONFIG = os.path.join(os.path.dirname(__file__), "configs", "rails")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MASQCTL = os.path.join(REPO, "target", "release", "masqctl")
LIBMASQ = os.path.join(REPO, "frontend-provider", "build", "libmasq.so")
VIPS = {"vrdma0": {"host1": "10.0.0.1", "host2": "10.0.0.2"},
        "vrdma1": {"host1": "10.0.1.1", "host2": "10.0.1.2"}}
SEGMENT = {"vrdma0": "eth0", "vrdma1": "eth1"}
SERVER, CLIENT = ("host2", "acme-b"), ("host1", "acme-a")


@pytest.fixture(scope="module")
def masq(testbed):
    with testbed.masq_running(RAILS_CONFIG) as tb:
        yield tb


def test_a_tenant_sees_a_device_per_rail(masq):
    out = masq.tenant_run("host1", "acme-a", "ibv_devices").stdout
    names = [line.split()[0] for line in out.splitlines()[2:] if line.strip()]
    assert names == ["vrdma0", "vrdma1"], out
    for dev, vips in VIPS.items():
        info = masq.tenant_run("host1", "acme-a", "ibv_devinfo", "-v", "-d", dev).stdout
        assert f"::ffff:{vips['host1']}" in info, info
        assert "rxe" not in info, info
    # acme-a1's rdma limits are rxe1's line of the apps' cgroup.
    limits = masq.run("host1", "cat", "/sys/fs/cgroup/tenants/acme-a/rdma.max").stdout
    assert "rxe1 hca_handle=max hca_object=4096" in limits, limits
    # The sysfs view shows both devices too, each with its vIP's GID.
    ls = masq.tenant_run("host1", "acme-a", "ls", "/sys/class/infiniband").stdout.split()
    assert ls == ["vrdma0", "vrdma1"], ls
    for n, (dev, vips) in enumerate(VIPS.items()):
        gid = masq.tenant_run("host1", "acme-a", "cat",
                              f"/sys/class/infiniband/{dev}/ports/1/gids/1").stdout
        assert gid.strip().endswith("{:02x}{:02x}:{:02x}{:02x}".format(
            *map(int, vips["host1"].split(".")))), (dev, gid)
        ibdev = masq.tenant_run("host1", "acme-a", "cat",
                                f"/sys/class/infiniband_verbs/uverbs{n}/ibdev").stdout
        assert ibdev.strip() == dev, ibdev


def write_bw(tb, dev, server_vip, port, size, iters, client_dev=None):
    """ib_write_bw from acme-a's `client_dev` (default `dev`) to acme-b's
    `dev` at `server_vip`: (server, client) processes, both finished."""
    argv = ["ib_write_bw", "-x", "1", "-F", "-s", str(size), "-n", str(iters), "-p", str(port)]
    srv = tb.tenant_spawn("host2", "acme-b", *argv, "-d", dev)
    try:
        tb.wait_listening("host2", port, tenant="acme-b")
        cli = tb.tenant_run("host1", "acme-a", *argv, "-d", client_dev or dev, server_vip,
                            check=False, timeout=120)
    except BaseException:
        srv.kill()
        finish(srv)
        raise
    if cli.returncode != 0:
        srv.kill()
    return finish(srv), cli


@pytest.mark.parametrize("dev", ["vrdma0", "vrdma1"])
def test_ib_write_bw_over_each_rail_moves_on_that_rails_segment(masq, dev):
    size, iters = 65536, 100
    other = "eth1" if dev == "vrdma0" else "eth0"
    before = link_bytes(masq, "host2")
    srv, cli = write_bw(masq, dev, VIPS[dev]["host2"], 18710, size, iters)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert parse_bw(cli.stdout)["iterations"] == iters
    # perftest's GIDs are the devices' vIPs on that rail.
    for vip in VIPS[dev].values():
        assert perftest_gid(vip) in cli.stdout, cli.stdout
    after = link_bytes(masq, "host2")
    moved = size * iters
    on_rail = after[SEGMENT[dev]][0] - before[SEGMENT[dev]][0]
    off_rail = after[other][0] - before[other][0]
    assert on_rail >= moved, (dev, on_rail, moved)
    assert off_rail < moved // 10, (dev, off_rail, moved)


def test_a_connection_across_rails_is_refused(masq):
    # acme-a's vrdma0 (rail0) to acme-b's vrdma1 (rail1): the same VPC, but
    # rails that are not joined.
    _, cli = write_bw(masq, "vrdma1", VIPS["vrdma1"]["host2"], 18712, 4096, 10,
                      client_dev="vrdma0")
    assert cli.returncode != 0, cli.stdout
    log = masq.masqd_log("host1")
    assert "10.0.1.2 is on rail rail1, which rail rail0 does not reach" in log, log[-3000:]


def test_ucx_stripes_over_both_rails(masq):
    # UCX's UD (its wireup) checks a datagram's GRH destination against its
    # own GID; the GRH is the wire's, physical (docs/apps.md, "Received
    # datagrams"): the check is turned off, as for any UCX app over masq.
    env = ["env", "UCX_NET_DEVICES=vrdma0:1,vrdma1:1", "UCX_IB_GID_INDEX=1",
           "UCX_TLS=rc_verbs,ud_verbs,self", "UCX_UD_VERBS_ETH_DGID_CHECK=n"]
    port, size, iters = 18714, 1 << 20, 50
    before = link_bytes(masq, "host2")
    srv = masq.tenant_spawn("host2", "acme-b", *env, "ucx_perftest", "-p", str(port))
    try:
        masq.wait_listening("host2", port, tenant="acme-b")
        cli = masq.tenant_run("host1", "acme-a", *env, "ucx_perftest", "10.0.0.2", "-p",
                              str(port), "-t", "tag_bw", "-s", str(size), "-n", str(iters),
                              check=False, timeout=300)
    except BaseException:
        srv.kill()
        finish(srv)
        raise
    finish_pair(srv, cli)
    assert re.search(rf"^Final:\s+{iters}\s", cli.stdout, re.M), cli.stdout + cli.stderr
    assert "UCX  ERROR" not in cli.stdout + cli.stderr, cli.stdout + cli.stderr
    after = link_bytes(masq, "host2")
    # The receiver gets the data over both rails, each at least a quarter.
    moved = {dev: after[dev][0] - before[dev][0] for dev in ("eth0", "eth1")}
    total = size * iters
    assert moved["eth0"] > total // 4 and moved["eth1"] > total // 4, (moved, total)


def masqctl_json(tb, host, *args):
    return json.loads(tb.run(host, MASQCTL, "-o", "json", *args).stdout)


def rails_tracked(tb, host):
    """The rails of the host's tracked connections, with their peers."""
    entries = masqctl_json(tb, host, "conntrack", "-L")["entries"]
    return sorted((e.get("rail"), e["local_vip"], e["remote_vip"], e["local_qpn"])
                  for e in entries)


def both_tracked(tb, procs):
    """host1's connections once there are two (one per rail), else None;
    fails if an app exited."""
    for p in procs:
        if p.poll() is not None:
            raise AssertionError(f"app exited: {finish(p)}")
    tracked = rails_tracked(tb, "host1")
    return tracked if len(tracked) == 2 else None


def rcvd(tb, host, dev):
    path = f"/sys/class/infiniband/{dev}/ports/1/hw_counters/rcvd_pkts"
    return int(tb.run(host, "cat", path).stdout)


def test_a_masqd_restart_recovers_both_rails_connections(masq):
    # A ping-pong per rail that lasts until stopped (test_faults' LONG_RUN).
    argv = ["ibv_rc_pingpong", "-g", "1", "-s", "1024", "-n", "100000000"]
    procs = []
    try:
        for dev, port in (("vrdma0", 18730), ("vrdma1", 18731)):
            srv = masq.tenant_spawn("host2", "acme-b", *argv, "-d", dev, "-p", str(port))
            procs.append(srv)
            masq.wait_listening("host2", port, tenant="acme-b")
            procs.append(masq.tenant_spawn("host1", "acme-a", *argv, "-d", dev, "-p", str(port),
                                           VIPS[dev]["host2"]))
        before = wait_for("both rails' connections tracked",
                          lambda: both_tracked(masq, procs), timeout=120)
        assert [t[0] for t in before] == ["rail0", "rail1"], before
        # The backstop lets each peer in to its QP at the address of that
        # QP's rail (conn_to: peer host, local address, local QPN).
        conn_to = set_elements(masq, "host1", "conn_to")
        for rail, _, _, qpn in before:
            addrs = UNDERLAY_OF[rail]
            assert [addrs["host2"], addrs["host1"], qpn] in conn_to, (rail, qpn, conn_to)
        masq._run([CLI, "masq", "kill"], True, 120)
        masq._run([CLI, "masq", "start"], True, 300)
        after = wait_for("both rails' connections tracked again",
                         lambda: both_tracked(masq, procs), timeout=120)
        assert after == before, (before, after)
        for p in procs:
            assert p.poll() is None, finish(p)
        for dev in ("rxe0", "rxe1"):
            n = rcvd(masq, "host2", dev)
            wait_for(f"{dev}: data still arriving", lambda: rcvd(masq, "host2", dev) > n, 30)
    finally:
        for p in procs:
            p.kill()
            finish(p)


def endpoints(tb, host):
    return {e["name"]: e for e in masqctl_json(tb, host, "endpoints")["endpoints"]}


def test_a_pods_second_masq_network_is_its_device_on_that_rail(masq):
    # As Multus drives a pod with two rail networks: each network's main
    # plugin (bridge), then masq-cni; the second names rail1.
    tb, netns, ctr = masq, "/run/netns/cnirail", "crail"
    plugin = os.path.join(os.path.dirname(MASQCTL), "masq-cni")
    tb.run("host1", "ip", "netns", "add", "cnirail")

    def bridge(ifname, ip):
        return {"cniVersion": "1.0.0", "name": f"net-{ifname}", "type": "bridge",
                "bridge": "mbr100", "mtu": 1450,
                "ipam": {"type": "host-local", "dataDir": f"/run/cnirail-ipam-{ifname}",
                         "ranges": [[{"subnet": ip.rsplit(".", 1)[0] + ".0/24", "rangeStart": ip,
                                      "rangeEnd": ip}]]}}

    def masq_conf(ifname, prev, **extra):
        return {"cniVersion": "1.1.0", "name": f"net-{ifname}", "type": "masq-cni",
                "tenant": "acme", "vni": 100, "prevResult": prev, **extra}

    nets = [("eth0", "10.0.0.60", {}), ("eth1", "10.0.1.60", {"rail": "rail1"})]
    try:
        for ifname, ip, extra in nets:
            rc, prev = cni(tb, "/usr/lib/cni/bridge", "ADD", bridge(ifname, ip), container=ctr,
                           netns=netns, ifname=ifname)
            assert rc == 0, prev
            rc, out = cni(tb, plugin, "ADD", masq_conf(ifname, prev, **extra), container=ctr,
                          netns=netns, ifname=ifname)
            assert rc == 0, out
        eps = endpoints(tb, "host1")
        first, second = eps[ctr], eps[f"{ctr}-eth1"]
        assert (first["vdev"], first["rail"], first["vip"]) == ("vrdma0", "rail0", "10.0.0.60")
        assert (second["vdev"], second["rail"], second["vip"]) == ("vrdma1", "rail1",
                                                                    "10.0.1.60")
        assert second["device_of"] == ctr and second["socket"] == first["socket"], second
        # The pod's apps see both devices on its one socket. They run in a
        # cgroup of their own, as a container's do: masqd refuses an app in
        # the root cgroup, whose packets the backstop cannot tell apart.
        tb.run("host1", "mkdir", "-p", "/sys/fs/cgroup/crail")
        out = tb.run("host1", "sh", "-c",
                     "echo $$ > /sys/fs/cgroup/crail/cgroup.procs && exec \"$@\"", "sh",
                     "ip", "netns", "exec", "cnirail", "env",
                     f"MASQ_SOCKET={first['socket']}", f"LD_PRELOAD={LIBMASQ}",
                     "ibv_devices").stdout
        assert [line.split()[0] for line in out.splitlines()[2:]] == ["vrdma0", "vrdma1"], out
        # DEL as Multus does, the last network first; each takes its own.
        for ifname, _, extra in reversed(nets):
            rc, out = cni(tb, plugin, "DEL", masq_conf(ifname, None, **extra), container=ctr,
                          netns=netns, ifname=ifname)
            assert rc == 0, out
            assert ctr + ("-eth1" if ifname == "eth1" else "") not in endpoints(tb, "host1")
        assert ctr not in endpoints(tb, "host1")
    finally:
        for ifname, ip, _ in nets:
            cni(tb, "/usr/lib/cni/bridge", "DEL", bridge(ifname, ip), container=ctr,
                netns=netns, ifname=ifname)
        tb.run("host1", "ip", "netns", "del", "cnirail", check=False)
        tb.run("host1", "rmdir", "/sys/fs/cgroup/crail", check=False)


def test_rdma_cm_apps_use_the_device_of_their_address(masq):
    # rping by rail1's vIP: the server binds it (its id is acme-b1's), the
    # client's id takes the source on the destination's rail (10.0.1.1).
    port = 7190
    srv, cli = pair(masq, SERVER, CLIENT, rping("s", "10.0.1.2", port, 5),
                    rping("c", "10.0.1.2", port, 5), port, listener="acme-b1")
    assert cli.count("ping data: rdma-ping-") == 5, cli
    log = masq.masqd_log("host1")
    assert "CM connect 10.0.1.1:" in log and f"-> 10.0.1.2:{port}" in log, log[-2000:]
    # perftest -R: its server listens on any address (acme-b's id), and a
    # request to rail1's vIP reaches it, on vrdma1.
    port = 18740
    argv = ["ib_write_bw", "-R", "-d", "vrdma1", "-F", "-s", "65536", "-n", "50", "-p",
            str(port)]
    srv, cli = perftest_pair(masq, SERVER, CLIENT, argv, [*argv, "10.0.1.2"], port)
    assert parse_bw(cli)["iterations"] == 50, cli


def test_a_rate_limit_shapes_the_netdev_of_its_devices_rail(masq):
    """acme-a1 (acme-a's vrdma1, rail1) re-added with a rate limit: its RoCE
    leaves host1's eth1 through a class of that rate. acme-a's own device
    has no limit: its packets carry the same mark (the apps' cgroup is one),
    but eth0 has no class for it and they leave unshaped."""
    tb, name = masq, "acme-a1"
    add = ["endpoint", "add", name, "--tenant", "acme", "--vni", "100", "--vip",
           VIPS["vrdma1"]["host1"], "--netns", "/run/netns/acme-a", "--vnic", "eth1",
           "--rail", "rail1", "--device-of", "acme-a", "--max-objects", "4096"]
    size, iters = 65536, 60
    tb.run("host1", MASQCTL, "endpoint", "del", name)
    try:
        tb.run("host1", MASQCTL, *add, "--max-rate-mbps", "24")
        _, cli = write_bw(tb, "vrdma1", VIPS["vrdma1"]["host2"], 18744, size, iters)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        shaped = endpoints(tb, "host1")[name]["rate"]
        assert shaped["netdev"] == "eth1" and shaped["mbps"] == 24, shaped
        assert shaped["bytes"] >= size * iters, shaped
        assert shaped["overlimits"] > 0, shaped  # held back, not just counted
        for dev, ours in (("eth1", True), ("eth0", False)):
            qdisc = tb.run("host1", "tc", "qdisc", "show", "dev", dev, "root").stdout
            assert ("htb 4d51:" in qdisc) == ours, (dev, qdisc)
        _, cli = write_bw(tb, "vrdma0", VIPS["vrdma0"]["host2"], 18745, size, iters)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert endpoints(tb, "host1")[name]["rate"]["bytes"] == shaped["bytes"]
    finally:
        tb.run("host1", MASQCTL, "endpoint", "del", name, check=False)
        tb.run("host1", MASQCTL, *add)
    # No limited device left: eth1's qdisc and the marks are gone.
    qdisc = tb.run("host1", "tc", "qdisc", "show", "dev", "eth1", "root").stdout
    assert "4d51:" not in qdisc, qdisc
    assert tb.run("host1", "nft", "list", "table", "inet", "masq_rate", check=False).returncode != 0
