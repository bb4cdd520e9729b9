"""Security groups enforced by masqd: admission at RTR, the RConntrack
table, and policy changes with reset/keep semantics."""
import json
import os
import time

import pytest

from masq_testbed import finish, parse_bw, scrape, value
from test_faults import assert_still_moving, long_run, stop
from test_masq import MASQCTL, PERF, PINGPONG, QP_PROBE, _wait_connected

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "configs", "policy")
POLICY = os.path.join(CONFIG, "policy.yaml")


@pytest.fixture(scope="module")
def secured(testbed):
    with testbed.masq_running(CONFIG):
        yield testbed


@pytest.fixture
def policy(secured):
    """Each test starts from policy.yaml on both hosts."""
    apply(secured, POLICY)
    yield secured
    apply(secured, POLICY)


def masqctl(tb, host, *args, check=True):
    return tb.run(host, MASQCTL, *args, check=check)


def apply(tb, path):
    out = {}
    for host in ("host2", "host1"):
        r = masqctl(tb, host, "-o", "json", "policy", "apply", os.path.join(CONFIG, path))
        out[host] = json.loads(r.stdout)
    return out


def probe(tb, endpoint, dest, host="host1"):
    r = tb.tenant_run(host, endpoint, QP_PROBE, "vrdma0", "1", dest, check=False)
    return r.returncode, r.stdout


def conntrack(tb, host, *filters):
    r = masqctl(tb, host, "-o", "json", "conntrack", "-L", *filters)
    return json.loads(r.stdout)["entries"]


def test_allowed_pair_is_admitted_and_denied_pair_gets_eacces(policy):
    rc, out = probe(policy, "acme-a", "10.0.0.2")
    assert rc == 0 and "state=2" in out, out
    rc, out = probe(policy, "acme-a", "10.0.0.3")  # acme-c: in no group
    assert rc == 3 and "modify_qp_rtr: errno=13" in out, out
    assert "state_after_failure=1" in out  # the QP stayed in INIT
    log = policy.masqd_log("host1")
    assert "security groups deny 10.0.0.1 -> 10.0.0.3" in log
    assert "ingress default-deny" in log


@pytest.mark.extended
def test_overlapping_vips_follow_their_own_vpc_groups(policy):
    # globex allows 10.0.0.0/24 <-> 10.0.0.0/24; acme denies acme-c.
    assert probe(policy, "globex-a", "10.0.0.2")[0] == 0
    rc, out = probe(policy, "acme-c", "10.0.0.1")
    assert rc == 3 and "errno=13" in out


def _bw_run(tb, tenant, port, n=4000):
    argv = ["ib_write_bw", *PERF, "-s", "65536", "-n", str(n)]
    srv = tb.tenant_spawn("host2", f"{tenant}-b", *argv, "-p", str(port))
    tb.wait_listening("host2", port, tenant=f"{tenant}-b")
    cli = tb.tenant_spawn("host1", f"{tenant}-a", *argv, "-p", str(port), "10.0.0.2")
    _wait_connected(tb, "host1", f"{tenant}-a", procs=(srv, cli))
    _wait_connected(tb, "host2", f"{tenant}-b", procs=(srv, cli))
    return srv, cli


@pytest.mark.extended
def test_connections_are_tracked_on_both_hosts(policy):
    # Long enough to still run when the table is listed a third time.
    srv, cli = _bw_run(policy, "acme", 18901)
    try:
        a = conntrack(policy, "host1", "-t", "acme", "-d", "10.0.0.2")
        b = conntrack(policy, "host2", "-t", "acme", "-s", "10.0.0.2")
        assert len(a) == 1 and len(b) == 1, (a, b)
        assert a[0]["local_qpn"] == b[0]["remote_qpn"] and a[0]["remote_qpn"] == b[0]["local_qpn"]
        assert a[0]["rule"] == "acme/web/egress(all)+acme/db/ingress[0]"
        assert a[0]["state"] == "ESTABLISHED" and a[0]["vni"] == 100
        table = masqctl(policy, "host1", "conntrack", "-L").stdout
        assert "rdma rc tenant=acme vni=100 src=10.0.0.1" in table
        assert conntrack(policy, "host1", "-t", "globex") == []
    finally:
        for p in (cli, srv):
            rc, out, err = finish(p)
            assert rc == 0, out + err
    # The apps are gone: so are their entries.
    assert conntrack(policy, "host1", "-t", "acme") == []


WIRE = "masqtest_dscp"


def _count_roce_dscp(tb, host):
    """An nft table counting this host's outgoing RoCE packets: DSCP 46,
    and all of them."""
    tb.run(host, "nft", "add", "table", "inet", WIRE)
    tb.run(host, "nft", "add", "chain", "inet", WIRE, "out",
           "{ type filter hook output priority 0 ; }")
    tb.run(host, "nft", "add", "rule", "inet", WIRE, "out", "udp", "dport", "4791",
           "ip", "dscp", "46", "counter")
    tb.run(host, "nft", "add", "rule", "inet", WIRE, "out", "udp", "dport", "4791", "counter")


def _roce_dscp_counts(tb, host):
    r = tb.run(host, "nft", "-j", "list", "chain", "inet", WIRE, "out")
    rules = [i["rule"] for i in json.loads(r.stdout)["nftables"] if "rule" in i]
    counts = [next(e["counter"]["packets"] for e in rl["expr"] if "counter" in e)
              for rl in rules]
    return counts[0], counts[1]  # (DSCP 46, all)


@pytest.mark.extended
def test_qos_marks_the_endpoints_roce_packets_on_the_wire(policy):
    # policy-qos.yaml: web (acme-a) is marked DSCP 46; db (acme-b) is not.
    apply(policy, "policy-qos.yaml")
    for h in ("host1", "host2"):
        _count_roce_dscp(policy, h)
    try:
        # A ping-pong that runs until stopped: it outlasts the listings
        # however loaded the host, where a bandwidth run of fixed length
        # either ended first or met rxe's status 9 (see test_faults).
        srv, cli = long_run(policy, "acme", 18905)
        try:
            table = masqctl(policy, "host1", "conntrack", "-L").stdout
            a = conntrack(policy, "host1", "-t", "acme", "-d", "10.0.0.2")
            b = conntrack(policy, "host2", "-t", "acme", "-s", "10.0.0.2")
            assert "dscp=46" in table, table
            assert [e.get("dscp") for e in a] == [46], a
            assert [e.get("dscp") for e in b] == [0], b
            assert_still_moving(policy, (srv, cli))
        finally:
            stop((cli, srv))
        marked, sent = _roce_dscp_counts(policy, "host1")
        assert sent > 0 and marked == sent, f"host1: {marked} of {sent} RoCE packets DSCP 46"
        marked, sent = _roce_dscp_counts(policy, "host2")
        assert sent > 0 and marked == 0, f"host2: {marked} of {sent} RoCE packets DSCP 46"
    finally:
        for h in ("host1", "host2"):
            policy.run(h, "nft", "delete", "table", "inet", WIRE, check=False)


def test_rule_removal_resets_a_live_connection(policy):
    srv, cli = _bw_run(policy, "acme", 18902)
    started = time.monotonic()
    out = apply(policy, "policy-revoked.yaml")
    assert out["host1"]["reset"] == 1 and out["host2"]["reset"] == 1, out
    rc, stdout, stderr = finish(cli, timeout=120)
    elapsed = time.monotonic() - started
    finish(srv, timeout=120)
    assert rc != 0, "the client should see its QP fail"
    assert elapsed < 30, f"reset took {elapsed:.1f}s (documented: about 2 s)"
    assert "completion" in (stdout + stderr).lower() or "failed" in (stdout + stderr).lower()
    print(f"apply -> client exit: {elapsed:.1f}s; masqd reset in "
          f"{out['host1']['elapsed_ms']:.2f} ms (host1)")
    assert conntrack(policy, "host1", "-t", "acme") == []
    # New connections are refused under the new rules.
    assert probe(policy, "acme-a", "10.0.0.2")[0] == 3


@pytest.mark.extended
def test_keep_leaves_live_connections_alone(policy):
    srv, cli = _bw_run(policy, "acme", 18903, n=800)
    out = apply(policy, "policy-revoked-keep.yaml")
    assert out["host1"]["reset"] == 0 and out["host1"]["keep"] is True
    rc, stdout, stderr = finish(cli)
    assert rc == 0, stdout + stderr
    assert parse_bw(stdout)["iterations"] == 800
    rc, stdout, stderr = finish(srv)
    assert rc == 0, stdout + stderr
    # ...but new connections follow the new rules.
    assert probe(policy, "acme-a", "10.0.0.2")[0] == 3


@pytest.mark.extended
def test_invalid_policy_changes_nothing(policy):
    before = json.loads(masqctl(policy, "host1", "-o", "json", "policy", "show").stdout)
    r = masqctl(policy, "host1", "policy", "apply", os.path.join(CONFIG, "policy-invalid.yaml"),
                check=False)
    assert r.returncode == 1
    assert "policy-invalid.yaml:8:27:" in r.stderr and "invalid CIDR" in r.stderr
    after = json.loads(masqctl(policy, "host1", "-o", "json", "policy", "show").stdout)
    assert after["version"] == before["version"]
    assert probe(policy, "acme-a", "10.0.0.2")[0] == 0


@pytest.mark.extended
def test_operator_delete_resets_matching_connections(policy):
    srv, cli = _bw_run(policy, "globex", 18904)
    r = masqctl(policy, "host1", "-o", "json", "conntrack", "-D", "-t", "globex")
    assert json.loads(r.stdout)["reset"] == 1
    rc, *_ = finish(cli, timeout=120)
    srv.kill()
    finish(srv)
    assert rc != 0
    assert conntrack(policy, "host1", "-t", "globex") == []


def _tcp_reaches(tb, host, endpoint, port):
    r = tb.tenant_run(host, endpoint, "socat", "-t5", "-T5", "-",
                      f"TCP:10.0.0.2:{port},connect-timeout=5", check=False, timeout=60)
    return r.returncode == 0 and r.stdout.strip() == "db"


@pytest.mark.extended
def test_tcp_rules_guard_the_qp_info_exchange(policy):
    port = 18950
    srv = policy.tenant_spawn("host2", "acme-b", "socat", f"TCP-LISTEN:{port},reuseaddr,fork",
                              "SYSTEM:echo db")
    try:
        policy.wait_listening("host2", port, tenant="acme-b")
        assert _tcp_reaches(policy, "host1", "acme-a", port)      # web -> db tcp allowed
        assert not _tcp_reaches(policy, "host1", "acme-c", port)  # in no group: dropped
        assert not _tcp_reaches(policy, "host1", "acme-a", 7)     # outside the port range
        tables = policy.run("host2", "nft", "list", "tables").stdout
        assert "table bridge masq_acme-b" in tables, tables
    finally:
        srv.kill()
        finish(srv)


@pytest.mark.extended
def test_an_endpoint_added_at_run_time_gets_the_policys_tcp_rules(policy):
    tb = policy
    tb.tenant_add("host2", "acme-d", 100, "10.0.0.4/24")
    try:
        tb.run("host2", MASQCTL, "endpoint", "add", "acme-d", "--tenant", "acme", "--vni", "100",
               "--vip", "10.0.0.4", "--netns", "/run/netns/acme-d",
               "--host-if", "ve-acme-d", "--bridge", "mbr100")
        table = tb.run("host2", "nft", "list", "table", "bridge", "masq_acme-d").stdout
        assert "ve-acme-d" in table, table
        tb.run("host2", MASQCTL, "endpoint", "del", "acme-d")
        r = tb.run("host2", "nft", "list", "table", "bridge", "masq_acme-d", check=False)
        assert r.returncode != 0, r.stdout
    finally:
        tb.run("host2", MASQCTL, "endpoint", "del", "acme-d", check=False)
        tb.tenant_del("host2", "acme-d", check=False)


# A tcp client that keeps one connection and wants an echo every 0.3 s.
ECHO_CLIENT = r"""
import socket, sys, time
s = socket.create_connection(("10.0.0.2", int(sys.argv[1])), timeout=5)
s.settimeout(3)
for n in range(1, 400):
    s.sendall(b"ping\n")
    try:
        if not s.recv(64):
            print("closed", flush=True)
            sys.exit(2)
    except socket.timeout:
        print("no echo", flush=True)
        sys.exit(1)
    print("echo", n, flush=True)
    time.sleep(0.3)
"""


def _kernel_entries(tb, host, port):
    """ESTABLISHED kernel conntrack entries to acme's port in VNI 100's zone."""
    r = tb.run(host, "conntrack", "-L", "-w", "101", "-p", "tcp", "--dport", str(port),
               check=False)
    return [l for l in r.stdout.splitlines() if "ESTABLISHED" in l]


@pytest.mark.extended
def test_a_narrowed_tcp_rule_ends_established_flows(policy):
    """The vNIC rules accept established flows first: without deleting the
    kernel's conntrack entry, a flow the new policy denies would go on."""
    port = 18960
    srv = policy.tenant_spawn("host2", "acme-b", "socat", f"TCP-LISTEN:{port},reuseaddr,fork",
                              "PIPE")
    cli = None
    try:
        policy.wait_listening("host2", port, tenant="acme-b")
        cli = policy.tenant_spawn("host1", "acme-a", "python3", "-c", ECHO_CLIENT, str(port))
        for _ in range(3):
            line = cli.stdout.readline()
            assert line.startswith("echo"), line + cli.stderr.read()
        assert _kernel_entries(policy, "host2", port), "the flow should be tracked"
        out = apply(policy, "policy-tcp-narrowed.yaml")
        assert out["host2"]["flows_reset"] >= 1, out
        assert out["host2"]["reset"] == 0, "RDMA rules did not change"
        rc, stdout, stderr = finish(cli, timeout=60)
        assert rc == 1 and "no echo" in stdout, (rc, stdout, stderr)
        assert _kernel_entries(policy, "host2", port) == []
        assert f"10.0.0.2:{port} is no longer allowed" in policy.masqd_log("host2")
    finally:
        if cli and cli.poll() is None:
            cli.kill()
            finish(cli)
        srv.kill()
        finish(srv)


@pytest.mark.extended
def test_sighup_rereads_the_configured_policy(policy):
    configured = json.loads(masqctl(policy, "host1", "-o", "json", "policy", "show").stdout)
    apply(policy, "policy-revoked.yaml")
    assert probe(policy, "acme-a", "10.0.0.2")[0] == 3
    policy.run("host1", "pkill", "-HUP", "-x", "masqd")
    deadline = time.monotonic() + 30
    while json.loads(masqctl(policy, "host1", "-o", "json", "policy", "show").stdout)[
            "version"] != configured["version"]:
        assert time.monotonic() < deadline, "SIGHUP did not reload policy.yaml"
        time.sleep(0.5)
    assert probe(policy, "acme-a", "10.0.0.2")[0] == 0


@pytest.mark.extended
def test_conntrack_events_stream_new_and_destroy(policy):
    events = policy.spawn("host1", MASQCTL, "-o", "json", "conntrack", "-E", "-t", "acme")
    try:
        time.sleep(2)  # subscribed
        rc, out = probe(policy, "acme-a", "10.0.0.2")
        assert rc == 0, out
        qpn = int(dict(line.split("=", 1) for line in out.split())["qpn"])
        time.sleep(2)
    finally:
        events.kill()
        _, stream, _ = finish(events)
    seen = [json.loads(line) for line in stream.splitlines() if line.strip()]
    kinds = [e["event"] for e in seen if e["local_qpn"] == qpn]
    assert kinds[0] == "NEW" and kinds[-1] == "DESTROY", seen


# Metrics ---------------------------------------------------------------------

@pytest.mark.extended
def test_metrics_move_with_admissions_requests_and_traffic(policy):
    before1, before2 = scrape(policy, "host1"), scrape(policy, "host2")
    assert probe(policy, "acme-a", "10.0.0.2")[0] == 0  # allowed
    assert probe(policy, "acme-a", "10.0.0.3")[0] == 3  # denied: EACCES
    port = 18760
    srv = policy.tenant_spawn("host2", "acme-b", *PINGPONG, "-p", str(port), "-n", "50")
    try:
        policy.wait_listening("host2", port, tenant="acme-b")
        mid2 = scrape(policy, "host2")
        cli = policy.tenant_run("host1", "acme-a", *PINGPONG, "-p", str(port), "-n", "50",
                                "10.0.0.2", check=False)
    finally:
        rc, out, err = finish(srv, timeout=120)
    assert cli.returncode == 0 and rc == 0, cli.stderr + err
    after1, after2 = scrape(policy, "host1"), scrape(policy, "host2")

    def grew(b, a, name, **labels):
        return value(a, name, **labels) - value(b, name, **labels)

    assert grew(before1, after1, "masq_admissions_total", tenant="acme", verdict="denied",
                rule="none") >= 1
    allowed = [ls for (n, ls), v in after1.items() if n == "masq_admissions_total"
               and ("verdict", "allowed") in ls and v > before1.get((n, ls), 0)]
    assert allowed and all(dict(ls)["rule"].startswith("acme/") for ls in allowed), allowed
    assert grew(before1, after1, "masq_refused_requests_total", endpoint="acme-a") >= 1
    # Three RTRs wait for masqd (two allowed, one refused); the moves that
    # carry no address are posted notices, one INIT each at least.
    assert grew(before1, after1, "masq_request_duration_seconds_count", op="ModifyQp") >= 3
    assert grew(before1, after1, "masq_request_duration_seconds_count", op="QpMoved") >= 3
    # The server's session and QP while it waited for its client.
    assert value(mid2, "masq_sessions", endpoint="acme-b") >= 1
    assert value(mid2, "masq_qps", endpoint="acme-b") >= 1
    assert grew(before2, after2, "masq_rnic_port_total", counter="rcvd_pkts") >= 50
    version = json.loads(masqctl(policy, "host1", "-o", "json", "policy", "show").stdout)
    assert value(after1, "masq_policy_info", version=version["version"]) == 1
    assert value(after1, "masq_policy_applied_timestamp_seconds") > 0
    r = policy.run("host1", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                   "http://127.0.0.1:9464/other", check=False)
    assert r.stdout == "404"


def _http(tb, host, path):
    """(status, body) of GET path on masqd's metrics listener; status "000"
    when nothing answers within 5 s (a probe's timeout)."""
    r = tb.run(host, "curl", "-s", "-m", "5", "-w", "\n%{http_code}",
               f"http://127.0.0.1:9464{path}", check=False)
    body, _, code = r.stdout.rpartition("\n")
    return code, body.strip()


@pytest.mark.extended
def test_health_and_readiness_probes_follow_what_masqd_can_serve(policy):
    assert _http(policy, "host2", "/healthz")[0] == "200"
    code, body = _http(policy, "host2", "/readyz")
    assert code == "200" and body.startswith("ready"), (code, body)
    eps = json.loads(masqctl(policy, "host2", "-o", "json", "endpoint", "list").stdout)
    sock = next(e["socket"] for e in eps["endpoints"] if e["name"] == "acme-b")
    # acme-b's socket gone: its apps cannot reach masqd. Not ready, the
    # state only for anyone; which socket with ?verbose (the metrics are
    # open here, so their details are too); still alive.
    policy.run("host2", "mv", sock, sock + ".away")
    try:
        code, body = _http(policy, "host2", "/readyz")
        assert (code, body) == ("503", "not ready: socket gone"), (code, body)
        code, body = _http(policy, "host2", "/readyz?verbose")
        assert code == "503" and body == f"not ready: socket gone: {sock}", (code, body)
        assert _http(policy, "host2", "/healthz")[0] == "200"
    finally:
        policy.run("host2", "mv", sock + ".away", sock)
    assert _http(policy, "host2", "/readyz")[0] == "200"
    # A stopped masqd answers no probe: the probe fails on its timeout.
    pid = policy.run("host2", "pidof", "masqd").stdout.split()[0]
    policy.run("host2", "kill", "-STOP", pid)
    try:
        assert _http(policy, "host2", "/healthz")[0] == "000"
    finally:
        policy.run("host2", "kill", "-CONT", pid)
    assert _http(policy, "host2", "/healthz")[0] == "200"
