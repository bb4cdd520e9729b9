"""UD apps by virtual IP: address handles created through masqd (translated
and admitted by the security groups, tracked per destination), received
GRHs named in virtual terms, privileged Q_Keys refused."""
import json
import os
import re
import time

import pytest

from masq_testbed import finish, parse_bw, parse_lat, parse_pingpong, rdma_moved
from test_backstop import counters
from test_masq import MASQCTL, PERF, PHYSICAL, pair

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CONFIG = os.path.join(HERE, "configs", "masq")
POLICY_DIR = os.path.join(HERE, "configs", "policy")
UD_PROBE = os.path.join(REPO, "integration", "build", "ud_probe")
RX_PACKETS = "/sys/class/net/eth0/statistics/rx_packets"
# ibv_ud_pingpong's messages must fit rxe's 1024-byte active MTU.
UD_PINGPONG = ["ibv_ud_pingpong", "-d", "vrdma0", "-g", "1", "-s", "512"]


@pytest.fixture(scope="module")
def ud(testbed):
    with testbed.masq_running(CONFIG):
        yield testbed


def conntrack(tb, host, *filters):
    r = tb.run(host, MASQCTL, "-o", "json", "conntrack", "-L", *filters)
    return json.loads(r.stdout)["entries"]


def probe(tb, host, endpoint, *args):
    r = tb.tenant_run(host, endpoint, UD_PROBE, "vrdma0", "1", *args, check=False)
    return r.returncode, r.stdout + r.stderr


def test_ud_pingpong_across_hosts_by_virtual_ip(ud):
    argv = [*UD_PINGPONG, "-n", "100"]
    with rdma_moved(ud, "host2", 512, 100), rdma_moved(ud, "host1", 512, 100):
        srv, cli = pair(ud, ("host2", "acme-b"), ("host1", "acme-a"), argv, 18751, "10.0.0.2")
    for out in (srv, cli):
        r = parse_pingpong(out)
        assert r["iters"] == 100, out
        assert not PHYSICAL.search(out), out
    assert "GID ::ffff:10.0.0.2" in cli and "GID ::ffff:10.0.0.1" in srv


@pytest.mark.extended
def test_ud_pingpong_between_endpoints_on_one_host(ud):
    argv = [*UD_PINGPONG, "-n", "50"]
    srv, cli = pair(ud, ("host1", "acme-c"), ("host1", "acme-a"), argv, 18752, "10.0.0.3")
    assert parse_pingpong(cli)["iters"] == 50 and parse_pingpong(srv)["iters"] == 50
    assert "GID ::ffff:10.0.0.3" in cli


@pytest.mark.extended
def test_perftest_ud_send_bandwidth_by_virtual_ip(ud):
    # Completion counts, never perftest's rates (its clock is miscalibrated
    # under emulation). perftest's server wants every datagram, and UD
    # drops what finds no receive posted: twice, 34 of 200 sent in bursts
    # of 128 were lost under TCG (no backstop drop counted), so the bursts
    # are kept small and the receive queue deep.
    argv = ["ib_send_bw", *PERF, "-c", "UD", "-s", "512", "-n", "200", "-t", "16", "-r", "256"]
    with rdma_moved(ud, "host2", 512, 200):
        srv, cli = pair(ud, ("host2", "acme-b"), ("host1", "acme-a"), argv, 18753, "10.0.0.2")
    r = parse_bw(cli)
    assert r["bytes"] == 512 and r["iterations"] == 200, cli
    assert not PHYSICAL.search(cli + srv), cli + srv


@pytest.mark.extended
def test_perftest_ud_send_latency_by_virtual_ip(ud):
    argv = ["ib_send_lat", *PERF, "-c", "UD", "-s", "64", "-n", "200"]
    with rdma_moved(ud, "host1", 64, 200), rdma_moved(ud, "host2", 64, 200):
        _, cli = pair(ud, ("host2", "acme-b"), ("host1", "acme-a"), argv, 18754, "10.0.0.2")
    assert parse_lat(cli)["iterations"] == 200, cli


def _ud_admissions(tb, host, endpoint):
    """How many UD destinations to 10.0.0.2 masqd on host admitted for
    endpoint so far (its log lines carry the session's endpoint)."""
    return sum(1 for line in tb.masqd_log(host).splitlines()
               if f"endpoint={endpoint} " in line
               and "UD address handle 10.0.0.1 -> 10.0.0.2 admitted" in line)


@pytest.mark.extended
def test_two_vpcs_with_the_same_addresses_run_ud_at_once(ud):
    argv = [*UD_PINGPONG, "-n", "2000"]
    before = {t: _ud_admissions(ud, "host1", f"{t}-a") for t in ("acme", "globex")}
    runs = []
    for i, tenant in enumerate(("acme", "globex")):
        port = 18755 + i
        runs.append((tenant, port, ud.tenant_spawn("host2", f"{tenant}-b", *argv, "-p", str(port))))
    clients = []
    for tenant, port, _ in runs:
        ud.wait_listening("host2", port, tenant=f"{tenant}-b")
        clients.append(ud.tenant_spawn("host1", f"{tenant}-a", *argv, "-p", str(port), "10.0.0.2"))
    # While they run, host1 tracks each tenant's UD destination in its own
    # VNI. A pair can finish (2000 round trips) before a poll sees its
    # entry: then masqd's log must show the admission instead.
    seen = {"acme": [], "globex": []}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(seen.values()):
        for t in seen:
            seen[t] = seen[t] or conntrack(ud, "host1", "-p", "ud", "-t", t)
        if all(c.poll() is not None for c in clients):
            break
        time.sleep(0.2)
    for c, (_, _, srv) in zip(clients, runs):
        rc, out, err = finish(c)
        assert rc == 0, out + err
        assert parse_pingpong(out)["iters"] == 2000
        rc, sout, err = finish(srv)
        assert rc == 0, sout + err
    for (tenant, vni) in (("acme", 100), ("globex", 200)):
        if seen[tenant]:
            assert all(e["vni"] == vni and e["remote_vip"] == "10.0.0.2" for e in seen[tenant])
        else:
            after = _ud_admissions(ud, "host1", f"{tenant}-a")
            assert after > before[tenant], f"no UD admission for {tenant}: {seen}"
    assert conntrack(ud, "host1", "-p", "ud") == []  # gone with the apps


@pytest.mark.extended
def test_received_grh_names_the_sender_by_virtual_ip(ud):
    # Across hosts, and on one host (where the sender is found by its QPN).
    for server, client, dest, want in (
        (("host2", "acme-b"), ("host1", "acme-a"), "10.0.0.2", "10.0.0.1"),
        (("host1", "acme-c"), ("host1", "acme-a"), "10.0.0.3", "10.0.0.1"),
    ):
        srv = ud.tenant_spawn(*server, UD_PROBE, "vrdma0", "1", "serve")
        try:
            line = srv.stdout.readline()
            m = re.match(r"qpn=(0x[0-9a-f]+)", line)
            assert m, line + srv.stderr.read()
            rc, out = probe(ud, *client, "send", dest, m.group(1))
        except BaseException:
            srv.kill()
            raise
        rc_s, sout, serr = finish(srv)
        assert rc == 0, out
        assert rc_s == 0, sout + serr
        # The server saw the client's vIP; the client saw the server's.
        assert f"from=::ffff:{want} sgid_index=1" in sout, sout
        assert f"from=::ffff:{dest} sgid_index=1" in out, out
        assert "payload=ping" in sout and "payload=pong" in out
        assert "closing=done" in sout, sout
        assert not PHYSICAL.search(sout + out), sout + out


@pytest.mark.extended
def test_ud_destination_outside_the_vpc_is_unreachable(ud):
    rc, out = probe(ud, "host1", "acme-a", "ah", "10.0.0.99")
    assert rc == 3 and "create_ah_errno=113" in out, out
    # Another VPC's address is no address of this one.
    rc, out = probe(ud, "host1", "globex-a", "ah", "10.0.0.3")
    assert rc == 3 and "create_ah_errno=113" in out, out


@pytest.mark.extended
def test_privileged_qkey_is_refused(ud):
    rc, out = probe(ud, "host1", "acme-a", "qkey", "0x80010000")
    assert rc == 3 and "modify_init_errno=1" in out, out
    rc, out = probe(ud, "host1", "acme-a", "qkey", "0x11111111")
    assert rc == 0, out
    assert "privileged Q_Key 0x80010000" in ud.masqd_log("host1")


def _drops(tb, host):
    """The backstop's drop counters, nftables' and the eBPF programs' (a
    UD datagram's at ingress is `ud_ingress_drop`, an eBPF program's)."""
    return counters(tb, host)


def _rogue_send(tb, where, qpn):
    """ud_probe around masq (rxe0, no LD_PRELOAD): a datagram to host2's
    QPN by its physical GID, as a tenant writing its own AV would aim it."""
    # No answer can come (the datagram is dropped): wait 5 s for one, not 60.
    argv = ["env", "-u", "LD_PRELOAD", UD_PROBE, "rxe0", "1", "send", "198.18.0.2", qpn, "5"]
    r = tb.tenant_run(*where, *argv, check=False) if len(where) == 2 else \
        tb.run(where[0], *argv, check=False)
    return r.returncode, r.stdout + r.stderr


def _serve_and_send(tb, server, send):
    """ud_probe serve in `server`; send(qpn) -> (rc, out); the server's
    output, once it is stopped (nothing is expected to reach it)."""
    srv = tb.tenant_spawn(*server, UD_PROBE, "vrdma0", "1", "serve")
    try:
        m = re.match(r"qpn=(0x[0-9a-f]+)", srv.stdout.readline())
        assert m, srv.stderr.read()
        rc, out = send(m.group(1))
    finally:
        srv.kill()  # it would wait 60 s for a datagram that never comes
    _, sout, serr = finish(srv)
    assert rc != 0, out  # no answer
    assert "payload=" not in sout and "init_ah" not in sout, sout + serr
    return sout


@pytest.mark.extended
def test_a_ud_sender_skipping_libmasq_reaches_no_unadmitted_host(ud):
    # acme-a has no address handle towards host2: its forged datagrams stop
    # at host1's backstop (egress). The same program run by host1 itself
    # (outside any tenant cgroup, which the egress filter does not see)
    # leaves host1, and stops at host2's (ingress): its QP is no UD QP
    # announced in acme's VNI. Each drop is counted where it happens, so
    # the silence comes from the backstop, not from the tool.
    for sender, host, counter in ((("host1", "acme-a"), "host1", "drop_acme_a"),
                                  (("host1",), "host2", "ud_ingress_drop")):
        before = _drops(ud, host)[counter]
        _serve_and_send(ud, ("host2", "acme-b"), lambda qpn: _rogue_send(ud, sender, qpn))
        assert _drops(ud, host)[counter] > before, (sender, counter)


def test_a_ud_datagram_reaches_no_other_vnis_qp(ud):
    # globex-a may send to host2 (an admitted address handle to its own
    # 10.0.0.2, globex-b), and names acme-b's UD QP there, with the same
    # Q_Key: host2's backstop lets datagrams of globex's UD QPs in only to
    # globex's. Through libmasq, as any app could.
    before = _drops(ud, "host2")["ud_ingress_drop"]
    _serve_and_send(ud, ("host2", "acme-b"),
                    lambda qpn: probe(ud, "host1", "globex-a", "send", "10.0.0.2", qpn, "5"))
    assert _drops(ud, "host2")["ud_ingress_drop"] > before
    # The same datagram from acme-a, acme-b's own VNI, is answered.
    srv = ud.tenant_spawn("host2", "acme-b", UD_PROBE, "vrdma0", "1", "serve")
    try:
        qpn = re.match(r"qpn=(0x[0-9a-f]+)", srv.stdout.readline()).group(1)
        rc, out = probe(ud, "host1", "acme-a", "send", "10.0.0.2", qpn)
    finally:
        rc_s, sout, serr = finish(srv)
    assert rc == 0 and "payload=pong" in out, out
    assert rc_s == 0 and "payload=ping" in sout, sout + serr


@pytest.mark.extended
def test_a_ud_qp_gets_no_other_vnis_datagram_from_its_first_moment(ud):
    # globex-a floods the QPN host2 will give next (rxe numbers QPs in
    # order) with datagrams, through an admitted address handle to its own
    # 10.0.0.2 there and with the right Q_Key, while acme-b makes a UD QP
    # with a receive posted in INIT: from its RTR on, the QP takes any
    # datagram the backstop lets through. The backstop must hold from that
    # first moment: nothing from globex reaches it, though the flood hits
    # its QPN (host2 counts the drops).
    rc, out = probe(ud, "host2", "acme-b", "listen", "1")
    m = re.search(r"qpn=(0x[0-9a-f]+)", out)
    assert m and rc != 0 and "payload=" not in out, out
    nxt, hits = int(m.group(1), 16) + 1, 0

    def received():
        # Packets host2's NIC received (rxe counts only those to a QP).
        return int(ud.run("host2", "cat", RX_PACKETS).stdout)

    before = _drops(ud, "host2")["ud_ingress_drop"]
    for _ in range(4):
        flood = ud.tenant_spawn("host1", "globex-a", UD_PROBE, "vrdma0", "1", "flood", "10.0.0.2",
                                hex(nxt), "60")
        try:
            # Under way once host2's NIC sees it (to a QPN no QP has yet,
            # it passes the backstop and rxe drops it).
            start, deadline = received(), time.monotonic() + 60
            while received() < start + 1000:
                assert time.monotonic() < deadline, "the flood does not reach host2"
                time.sleep(0.5)
            rc, out = probe(ud, "host2", "acme-b", "listen", "2")
        finally:
            flood.kill()
            finish(flood)
        m = re.search(r"qpn=(0x[0-9a-f]+)", out)
        assert m, out
        assert rc != 0 and "payload=" not in out, out
        hits += int(m.group(1), 16) == nxt
        nxt = int(m.group(1), 16) + 1
    assert hits, "no QP of acme-b got the QPN the flood aimed at"
    assert _drops(ud, "host2")["ud_ingress_drop"] > before


def _ud_set(tb, host, endpoint):
    """The backstop's set of hosts the endpoint may send UD datagrams to."""
    return tb.run(host, "nft", "list", "set", "inet", "masq_backstop", f"ud_{endpoint}").stdout


def _apply(tb, path):
    for host in ("host2", "host1"):
        tb.run(host, MASQCTL, "policy", "apply", os.path.join(POLICY_DIR, path))


@pytest.mark.extended
def test_denied_ud_pair_gets_eacces_and_rule_change_untracks_the_ah(ud):
    # Last in the module: it leaves a policy in force.
    _apply(ud, "policy.yaml")
    rc, out = probe(ud, "host1", "acme-c", "ah", "10.0.0.1")  # acme-c: in no group
    assert rc == 3 and "create_ah_errno=13" in out, out
    assert "security groups deny UD 10.0.0.3 -> 10.0.0.1" in ud.masqd_log("host1")
    # An admitted AH is tracked until the rule that admitted it goes.
    holder = ud.tenant_spawn("host1", "acme-a", UD_PROBE, "vrdma0", "1", "ah", "10.0.0.2", "60")
    try:
        assert holder.stdout.readline().strip() == "create_ah=ok"
        entries = conntrack(ud, "host1", "-p", "ud", "-t", "acme")
        assert len(entries) == 1, entries
        e = entries[0]
        assert e["local_vip"] == "10.0.0.1" and e["remote_vip"] == "10.0.0.2"
        assert e["peer_host"] == "198.18.0.2" and e["qp_type"] == "ud"
        text = ud.run("host1", MASQCTL, "conntrack", "-L", "-p", "ud").stdout
        assert "rdma ud tenant=acme" in text and " ah=" in text, text
        # The backstop lets acme-a's datagrams out to host2 for that AH ...
        assert "198.18.0.2" in _ud_set(ud, "host1", "acme_a")
        _apply(ud, "policy-revoked.yaml")
        assert conntrack(ud, "host1", "-p", "ud", "-t", "acme") == []
        # ... and no longer once the rule that admitted it is gone.
        assert "198.18.0.2" not in _ud_set(ud, "host1", "acme_a")
    finally:
        holder.kill()
        finish(holder)
