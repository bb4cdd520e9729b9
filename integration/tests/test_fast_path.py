"""QP changes that carry no address run on the app's own fd: libmasq moves
a QP to INIT and RTS itself and posts QP_MOVED to masqd, which reads the
QP's state from the kernel. Only RTR (and any change with an address)
waits for masqd. These tests show that masqd still knows every state the
table shows, that a masqd restart still recovers such QPs, and that a
hostile app gains nothing from moving its own QPs and telling masqd so.

Runs on the backstop test config (the audit only logs, so rogue QPs live
until they are checked)."""
import json
import re
import subprocess

import pytest

from masq_testbed import CLI, UNDERLAY, wait_for
from test_backstop import CONFIG, COUNT, ROGUE, Side, counters, exchange, set_elements
from test_masq import MASQCTL

# Inside an endpoint its socket directory is mounted at /run/masq.
SOCKET = "/run/masq/masq.sock"
BYPASS = re.compile(r"audit: bypass: RC QP (0x[0-9a-f]+) of pid \d+ in (\S+) is (\w+)")


@pytest.fixture(scope="module")
def masq(testbed):
    with testbed.masq_running(CONFIG):
        yield testbed


def masqctl_json(tb, host, *args):
    return json.loads(tb.run(host, MASQCTL, "-o", "json", *args).stdout)


def entry_of(tb, host, qpn):
    """The RConntrack entry whose local QPN is qpn, or None."""
    found = [e for e in masqctl_json(tb, host, "conntrack", "-L")["entries"]
             if e["local_qpn"] == qpn]
    assert len(found) <= 1, found
    return found[0] if found else None


def qp_record(tb, host, qpn):
    """What masqd's sessions show of QPN qpn, or None."""
    for s in masqctl_json(tb, host, "sessions")["sessions"]:
        for q in s["qps"]:
            if q["qpn"] == qpn:
                return q
    return None


def tenant_qps(tb, host):
    """The backstop's guarded QPs on host: (local address, QPN) pairs."""
    return {tuple(e) for e in set_elements(tb, host, "tenant_qps")}


@pytest.mark.extended
def test_masqd_learns_the_states_its_table_shows_and_recovers_them_after_a_restart(masq):
    a = Side("host1", "acme-a", via_masq=True)
    b = Side("host2", "acme-b", via_masq=True)
    try:
        ra, rb = exchange(a, b)
        assert ra == (COUNT, 0, "success", COUNT) and rb == ra, (ra, rb)
        # RTS ran on the apps' own fds: masqd heard of it (QP_MOVED) and
        # shows what the kernel says.
        for host, side in (("host1", a), ("host2", b)):
            e = wait_for(f"{host}: QP {side.qpn:#x} ESTABLISHED",
                         lambda h=host, s=side: (entry_of(masq, h, s.qpn) or {}).get(
                             "state") == "ESTABLISHED" and entry_of(masq, h, s.qpn))
            assert e["remote_vip"] in ("10.0.0.1", "10.0.0.2"), e
            assert qp_record(masq, host, side.qpn)["state"] == "RTS"
        assert (UNDERLAY["host1"], a.qpn) in tenant_qps(masq, "host1")
        before = entry_of(masq, "host1", a.qpn)
        # masqd restarts: libmasq names the QP again (RESYNC_QP) and the
        # kernel's word puts it back in the table, in the same state.
        masq._run([CLI, "masq", "kill"], True, 300)
        masq._run([CLI, "masq", "start"], True, 300)
        after = wait_for("host1: QP tracked again", lambda: entry_of(masq, "host1", a.qpn),
                         timeout=60)
        keys = ("local_qpn", "remote_vip", "remote_qpn", "state", "rule")
        assert {k: after[k] for k in keys} == {k: before[k] for k in keys}, (before, after)
        assert qp_record(masq, "host1", a.qpn)["state"] == "RTS"
    finally:
        a.close()
        b.close()
    # Destroy is posted too: the entries go without a reply to wait for.
    wait_for("entries gone with the QPs",
             lambda: entry_of(masq, "host1", a.qpn) is None
             and entry_of(masq, "host2", b.qpn) is None, timeout=60)
    wait_for("host1: the QP's backstop element gone",
             lambda: (UNDERLAY["host1"], a.qpn) not in tenant_qps(masq, "host1"), timeout=30)


class Hostile(Side):
    """rogue_qp around libmasq (rxe0, its own INIT/RTR/RTS) that also opens
    a masqd session with its uverbs fd and posts QP_MOVED for INIT and RTS,
    as libmasq does after moving a QP on its own fd."""

    def __init__(self, host, tenant):  # pylint: disable=super-init-not-called
        self.host, self.tenant = host, tenant
        argv = ["env", "-u", "LD_PRELOAD", f"ROGUE_TELL_MASQD={SOCKET}", ROGUE, "rxe0", "1",
                str(COUNT)]
        self.proc = subprocess.Popen([CLI, "tenant", "exec", "-i", host, tenant, "--", *argv],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        if line[:1] != ["QPN"]:
            self.proc.kill()
            raise AssertionError(f"rogue_qp did not start: {line} {self.proc.stderr.read()}")
        self.qpn, self.gid = int(line[1]), line[3]

    def result(self):
        told = self.proc.stdout.readline().strip()
        if told != "told masqd":
            self.close()
            raise AssertionError(f"rogue_qp: {told!r} {self.proc.stderr.read()}")
        return super().result()


def test_a_hostile_apps_own_init_and_rts_and_its_notices_give_it_nothing(masq):
    before = counters(masq, "host1")
    a = Hostile("host1", "acme-a")
    b = Side("host2", "acme-b")  # its peer skips libmasq too
    try:
        ra, rb = exchange(a, b)
        # No data either way: nothing admitted the pair.
        assert ra[0] == 0 and ra[3] == 0, ra
        assert rb[0] == 0 and rb[3] == 0, rb
        assert counters(masq, "host1")["drop_acme_a"] > before["drop_acme_a"]
        # masqd read the QP's state from the kernel (RTS) and recorded it...
        q = qp_record(masq, "host1", a.qpn)
        assert q is not None and q["state"] == "RTS", q
        # ...and nothing else: no tracked connection, no backstop element
        # (egress to the peer, ingress to the QP), no voucher for the audit.
        assert entry_of(masq, "host1", a.qpn) is None
        assert [UNDERLAY["host2"], b.qpn] not in set_elements(masq, "host1", "eg_acme_a")
        assert (UNDERLAY["host1"], a.qpn) not in tenant_qps(masq, "host1")

        def flagged():
            log = masq.masqd_log("host1").rsplit("QP audit running", 1)[-1]
            return any(int(m[1], 16) == a.qpn and m[2] == "acme-a"
                       for m in BYPASS.finditer(log))
        wait_for("the audit flags the hostile QP", flagged, timeout=30)
    finally:
        a.close()
        b.close()
