"""The kernel backstop on software RoCE: a tenant that skips libmasq and
drives rxe0 with plain libibverbs moves no data, and masqd counts it.

integration/tools/rogue_qp is the tenant program: one RC QP, connected to
whatever QPN and GID it is told, sending and receiving 8 messages."""
import json
import os
import re
import subprocess
import time

import pytest

from masq_testbed import CLI, UNDERLAY

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CONFIG = os.path.join(HERE, "configs", "backstop")
MASQCTL = os.path.join(REPO, "target", "release", "masqctl")
QP_BENCH = os.path.join(REPO, "integration", "build", "qp_connect_bench")
ROGUE = os.path.join(REPO, "integration", "build", "rogue_qp")
LIBMASQ = os.path.join(REPO, "frontend-provider", "build", "libmasq.so")
RESULT = re.compile(r"^sent (\d+) send_errors (\d+) \((.*)\) received (\d+)$", re.M)
COUNT = 8


@pytest.fixture(scope="module")
def masq(testbed):
    with testbed.masq_running(CONFIG):
        yield testbed


class Side:
    """rogue_qp in a host (tenant None) or an endpoint; through masq (the
    virtual device) or around it (rxe0, LD_PRELOAD removed)."""

    def __init__(self, host, tenant=None, via_masq=False):
        self.host, self.tenant = host, tenant
        if via_masq:
            argv = [ROGUE, "vrdma0", "1", str(COUNT)]
        else:
            argv = ["env", "-u", "LD_PRELOAD", ROGUE, "rxe0", "1", str(COUNT)]
        where = ["tenant", "exec", "-i", host, tenant] if tenant else ["exec", "-i", host]
        self.proc = subprocess.Popen([CLI, *where, "--", *argv], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        if line[:1] != ["QPN"]:
            self.proc.kill()
            raise AssertionError(f"rogue_qp did not start: {line} {self.proc.stderr.read()}")
        self.qpn, self.gid = int(line[1]), line[3]

    def connect(self, peer):
        self.proc.stdin.write(f"{peer.qpn} {peer.gid}\n")
        self.proc.stdin.flush()

    def result(self):
        """(sent, send_errors, first error, received); the QP stays alive."""
        line = self.proc.stdout.readline()
        m = RESULT.match(line.strip())
        if not m:
            self.close()
            raise AssertionError(f"rogue_qp: {line!r} {self.proc.stderr.read()}")
        return int(m[1]), int(m[2]), m[3], int(m[4])

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def exchange(a, b):
    a.connect(b)
    b.connect(a)
    return a.result(), b.result()


def counters(tb, host):
    """The drop counters as masqctl status shows them: nftables' and the
    eBPF programs' (an endpoint's RC drops are in its drop_<endpoint>)."""
    out = tb.run(host, MASQCTL, "-o", "json", "status").stdout
    return {c["counter"]: c["packets"] for c in json.loads(out)["backstop"]["drops"]}


# The per-connection elements live in eBPF maps pinned here (backstop.bpfDir).
BPF_DIR = "/sys/fs/bpf/masq"


def _bpf_keys(tb, host, name):
    """A pinned map's keys, as bytes."""
    out = tb.run(host, "bpftool", "-j", "map", "dump", "pinned", f"{BPF_DIR}/{name}").stdout
    return [bytes(int(b, 16) for b in e["key"]) for e in json.loads(out)]


def _ip(b):
    return ".".join(str(x) for x in b)


def _u32(b):
    return int.from_bytes(b, "little")


def set_elements(tb, host, name):
    """A set's elements as nft -j lists a concatenation: [address, ...,
    QPN]. conn_to, tenant_qps and eg_<endpoint> are the eBPF maps' (the
    same keys: peer, local address, QPN; local address, QPN; peer, QPN)."""
    if name == "conn_to":
        return [[_ip(k[0:4]), _ip(k[4:8]), _u32(k[8:12])] for k in _bpf_keys(tb, host, name)]
    if name == "tenant_qps":
        return [[_ip(k[0:4]), _u32(k[4:8])] for k in _bpf_keys(tb, host, name)]
    if name.startswith("eg_"):
        number = tb.run(host, "bpftool", "-j", "map", "lookup", "pinned",
                        f"{BPF_DIR}/endpoint_ids", "key", "hex",
                        *[f"{b:02x}" for b in name[3:].encode().ljust(256, b"\0")],
                        check=False)
        if number.returncode != 0:
            return []
        n = _u32(bytes(int(b, 16) for b in json.loads(number.stdout)["value"]))
        return [[_ip(k[4:8]), _u32(k[8:12])]
                for k in _bpf_keys(tb, host, "egress") if _u32(k[0:4]) == n]
    out = tb.run(host, "nft", "-j", "list", "set", "inet", "masq_backstop", name).stdout
    sets = [x["set"] for x in json.loads(out)["nftables"] if "set" in x]
    return [e["concat"] for e in sets[0].get("elem", [])]


@pytest.mark.extended
def test_the_tool_moves_data_where_nothing_filters(masq):
    # Host to host, outside any tenant cgroup: the path is open, so the
    # zeros below come from the backstop and not from the tool.
    a, b = Side("host1"), Side("host2")
    try:
        ra, rb = exchange(a, b)
    finally:
        a.close()
        b.close()
    assert ra == (COUNT, 0, "success", COUNT) and rb == ra, (ra, rb)


@pytest.mark.extended
def test_an_admitted_connection_passes_and_its_elements_come_and_go(masq):
    a = Side("host1", "acme-a", via_masq=True)
    b = Side("host2", "acme-b", via_masq=True)
    try:
        ra, rb = exchange(a, b)
        assert ra == (COUNT, 0, "success", COUNT) and rb == ra, (ra, rb)
        # While the QPs live: host1 lets acme-a send to (host2, b.qpn) and
        # lets host2 reach a.qpn at host1's address (conn_to: peer host,
        # local address, local QPN); and the other way round on host2.
        h1, h2 = UNDERLAY["host1"], UNDERLAY["host2"]
        assert [h2, b.qpn] in set_elements(masq, "host1", "eg_acme_a")
        assert [h2, h1, a.qpn] in set_elements(masq, "host1", "conn_to")
        assert [h1, a.qpn] in set_elements(masq, "host2", "eg_acme_b")
        assert [h1, h2, b.qpn] in set_elements(masq, "host2", "conn_to")
    finally:
        a.close()
        b.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not set_elements(masq, "host1", "eg_acme_a") and not set_elements(
                masq, "host2", "conn_to"):
            break
        time.sleep(0.5)
    assert set_elements(masq, "host1", "eg_acme_a") == []
    assert set_elements(masq, "host2", "conn_to") == []


HOG = "while :; do :; done"


@pytest.mark.extended
def test_no_first_packet_of_a_new_connection_is_dropped_under_load(masq):
    # qp_connect_bench's server sends on each of its QPs the moment it is
    # in RTS (--server-sends-first). RTR returns only once the connection's
    # elements are in the kernel, so the backstop drops none of those first
    # packets (RC would resend them, hiding a drop from the app: the
    # counters are the witness), even with both hosts' CPUs kept busy.
    port = 18830
    hogs = [masq.spawn(h, "timeout", "600", "sh", "-c", HOG) for h in ("host1", "host2")]
    srv = masq.tenant_spawn("host2", "acme-b", QP_BENCH, "--server", "-d", "vrdma0", "-x", "1",
                            "-p", str(port))
    try:
        masq.wait_listening("host2", port, tenant="acme-b")
        before = {h: counters(masq, h) for h in ("host1", "host2")}
        r = masq.tenant_run("host1", "acme-a", QP_BENCH, "-d", "vrdma0", "-x", "1", "-p", str(port),
                            "-n", "50", "-P", "4", "--server-sends-first", "10.0.0.2", check=False,
                            timeout=600)
        after = {h: counters(masq, h) for h in ("host1", "host2")}
    finally:
        srv.kill()
        for h in ("host1", "host2"):
            masq.run(h, "pkill", "-f", HOG, check=False)
        for p in hogs:
            p.wait()
        srv.wait()
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["procs"], out["qps_per_proc"]) == (4, 50), r.stdout
    assert after == before, (before, after)


@pytest.mark.parametrize("target", [
    pytest.param("acme-b", id="same-vni"),
    pytest.param("globex-b", id="other-vni", marks=pytest.mark.extended),
])
def test_a_tenant_skipping_libmasq_moves_no_data(masq, target):
    before1, before2 = counters(masq, "host1"), counters(masq, "host2")
    a, b = Side("host1", "acme-a"), Side("host2", target)
    try:
        ra, rb = exchange(a, b)
    finally:
        a.close()
        b.close()
    # Nothing delivered either way; the sends never complete successfully.
    assert ra[0] == 0 and ra[3] == 0, ra
    assert rb[0] == 0 and rb[3] == 0, rb
    after1, after2 = counters(masq, "host1"), counters(masq, "host2")
    assert after1["drop_acme_a"] > before1["drop_acme_a"]
    drop_b = "drop_" + target.replace("-", "_")
    assert after2[drop_b] > before2[drop_b]
    # masqd reports the attempt in its log (it polls the counters).
    deadline = time.monotonic() + 30
    line = re.compile(r"backstop dropped \d+ RoCE packet\(s\) sent by acme-a to")
    while not line.search(masq.masqd_log("host1")):
        assert time.monotonic() < deadline, "no backstop line in host1's masqd log"
        time.sleep(1)


@pytest.mark.extended
def test_another_tenants_socket_is_refused_and_counted(masq):
    def refused():
        r = masq.run("host1", MASQCTL, "-o", "json", "endpoints")
        return {e["name"]: e["refused_connections"] for e in json.loads(r.stdout)["endpoints"]}

    before = refused()["acme-a"]
    # globex-a's network namespace knocking on acme-a's socket.
    r = masq.run("host1", "ip", "netns", "exec", "globex-a", "env",
                 "MASQ_SOCKET=/run/masq/endpoints/acme-a/masq.sock", f"LD_PRELOAD={LIBMASQ}",
                 "ibv_devices", check=False)
    assert "vrdma0" not in r.stdout
    assert refused()["acme-a"] == before + 1
