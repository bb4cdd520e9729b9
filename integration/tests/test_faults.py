"""Faults: masqd killed and restarted under running tenants, apps killed
mid-operation, policy applied during connection churn. The RConntrack
table must end up matching the live QPs and the policy in force."""
import json
import os
import time

import pytest

from masq_testbed import CLI, finish, rxe_counters, wait_for
from test_masq import MASQCTL, PERF, QP_PROBE, _wait_connected

HERE = os.path.dirname(os.path.abspath(__file__))
POLICY_CONFIG = os.path.join(HERE, "configs", "policy")
REVOKED_CONFIG = os.path.join(HERE, "configs", "faults")  # starts on policy-revoked.yaml
CM_PDATA = os.path.join(os.path.dirname(HERE), "build", "cm_pdata")
HOSTS = ("host1", "host2")
# What identifies a connection across a masqd restart (session ids change).
CONN = ("tenant", "vni", "local_vip", "local_qpn", "remote_vip", "remote_qpn", "qp_type",
        "state", "rule")


def masq_cmd(tb, *args, timeout=300):
    return tb._run([CLI, "masq", *args], True, timeout)


@pytest.fixture(scope="module")
def faults(testbed):
    with testbed.masq_running(POLICY_CONFIG):
        yield testbed


@pytest.fixture
def tb(faults):
    """Each test starts with masqd running on policy.yaml on both hosts."""
    masq_cmd(faults, "up", "--config", POLICY_CONFIG)
    for host in HOSTS:
        faults.run(host, MASQCTL, "policy", "apply", os.path.join(POLICY_CONFIG, "policy.yaml"))
    yield faults
    masq_cmd(faults, "up", "--config", POLICY_CONFIG)


def masqctl_json(tb, host, *args):
    return json.loads(tb.run(host, MASQCTL, "-o", "json", *args).stdout)


def conntrack(tb, host, *filters):
    return masqctl_json(tb, host, "conntrack", "-L", *filters)["entries"]


def conns(entries):
    return sorted(tuple(e[k] for k in CONN) for e in entries)


def apply(tb, name):
    for host in ("host2", "host1"):
        out = masqctl_json(tb, host, "policy", "apply", os.path.join(POLICY_CONFIG, name))
        assert "error" not in out, out


def sent_packets(tb, host):
    path = "/sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts"
    return int(tb.run(host, "cat", path).stdout)


# Connections that last until the test stops them. Not perftest's -D: its
# duration is counted with its cycle clock, whose calibration fails under
# emulation load (a "60 s" run ended after 1.4 s). And a ping-pong, one
# message in flight, not a bandwidth run: a long ib_write_bw between the
# hosts under load fails with completion status 9 (remote invalid request)
# within a minute even natively, without masq (rxe 6.1 retransmitting what
# the loaded guest's NIC queue dropped); ibv_rc_pingpong runs on.
LONG_RUN = ["ibv_rc_pingpong", "-d", "vrdma0", "-g", "1", "-s", "1024", "-n", "100000000"]
# A bandwidth run long enough to be killed while it transfers.
BW_RUN = ["ib_write_bw", *PERF, "-s", "65536", "-n", "200000"]


def long_run(tb, tenant, port):
    """A LONG_RUN from TENANT-a on host1 to TENANT-b on host2, once both
    QPs are connected."""
    argv = LONG_RUN
    srv = tb.tenant_spawn("host2", f"{tenant}-b", *argv, "-p", str(port))
    tb.wait_listening("host2", port, tenant=f"{tenant}-b")
    cli = tb.tenant_spawn("host1", f"{tenant}-a", *argv, "-p", str(port), "10.0.0.2")
    _wait_connected(tb, "host1", f"{tenant}-a", procs=(srv, cli))
    _wait_connected(tb, "host2", f"{tenant}-b", procs=(srv, cli))
    return srv, cli


def assert_still_moving(tb, procs, receiver="host2"):
    """The apps are running and RDMA data still arrives at `receiver`."""
    for p in procs:
        if p.poll() is not None:
            rc, out, err = finish(p)
            raise AssertionError(f"app exited ({rc}):\n{out}\n{err}")
    before = rxe_counters(tb, receiver)["rcvd_pkts"]
    wait_for(f"{receiver}: RDMA data still arriving",
             lambda: rxe_counters(tb, receiver)["rcvd_pkts"] > before, timeout=30)


def stop(procs):
    """Stop long runs; their (returncode, stdout, stderr)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    return [finish(p) for p in procs]


def session_keys(tb, host):
    """(session id, QP handle) of every QP masqd knows on host."""
    return {(s["id"], q["handle"])
            for s in masqctl_json(tb, host, "sessions")["sessions"] for q in s["qps"]}


def assert_table_matches_sessions(tb, host):
    """Every entry is a QP of a live session (no stale entry). Under churn
    the table and the session list are read at different moments (and a
    session's list is published after its request is answered), so an
    entry missing from the list only counts if it is still there, and
    still missing, a second later."""
    def strays():
        entries = conntrack(tb, host)
        keys = session_keys(tb, host)
        return {(e["session"], e["qp_handle"]): e for e in entries
                if (e["session"], e["qp_handle"]) not in keys}
    first = strays()
    if first:
        time.sleep(1)
        stale = [e for k, e in strays().items() if k in first]
        assert not stale, stale


def test_masqd_restart_keeps_the_data_path_and_recovers_the_table(tb):
    srv, cli = long_run(tb, "acme", 18960)
    try:
        before = {h: conns(conntrack(tb, h, "-t", "acme")) for h in HOSTS}
        assert len(before["host1"]) == 1 and len(before["host2"]) == 1, before
        masq_cmd(tb, "kill")
        # No masqd anywhere: the QPs keep moving data on the NIC.
        pkts = sent_packets(tb, "host1")
        time.sleep(3)
        assert sent_packets(tb, "host1") > pkts, "the data path stopped without masqd"
        assert cli.poll() is None and srv.poll() is None, "an app noticed masqd's death"
        started = time.monotonic()
        masq_cmd(tb, "start")
        restarted = time.monotonic()
        # libmasq's watchers re-register the QPs: the same connections,
        # same state and rule, within 30 s of the restart.
        after = {}
        for h in HOSTS:
            after[h] = wait_for(f"{h}: connections tracked again",
                                lambda h=h: conns(conntrack(tb, h, "-t", "acme")), timeout=30)
        recovered = time.monotonic()
        assert after == before, (before, after)
        for h in HOSTS:
            assert_table_matches_sessions(tb, h)
        log = tb.masqd_log("host1")
        assert "tracked again" in log
        for line in log.splitlines()[-40:]:
            if "masqd ready" in line or "tracked again" in line:
                print(line)
        print(f"masq start on both hosts took {restarted - started:.1f}s; entries back "
              f"{recovered - restarted:.1f}s after it returned")
        # New connections work with the new masqd.
        r = tb.tenant_run("host1", "acme-a", QP_PROBE, "vrdma0", "1", "10.0.0.2", check=False)
        assert r.returncode == 0 and "state=2" in r.stdout, r.stdout + r.stderr
        # The stock app saw nothing: it still moves data.
        assert_still_moving(tb, (cli, srv))
    finally:
        results = stop((cli, srv))
    # ...and never complained.
    for _, _, err in results:
        assert "libmasq" not in err, err
    for h in HOSTS:
        wait_for(f"{h}: entries gone with the apps",
                 lambda h=h: conntrack(tb, h, "-t", "acme") == [], timeout=60)


def cm_ids(tb, host):
    """masqd's CM ids on host, as compared across a restart."""
    return {(i["id"], i["state"], i["side"], i["local"].rsplit(":", 1)[1], i["peer"], i["qpn"],
             i["peer_qpn"]) for i in masqctl_json(tb, host, "cm")["ids"]}


@pytest.mark.extended
def test_cm_ids_survive_a_masqd_restart(tb):
    """Listeners keep listening, an established connection keeps its ids
    and still gets DISCONNECTED, rdma_get_cm_event carries on."""
    srv = tb.tenant_spawn("host2", "acme-b", CM_PDATA, "server", "7480", "2")
    procs = [srv]
    try:
        wait_for("host2: listening on 7480",
                 lambda: any(i[1] == "listening" and i[3] == "7480" for i in cm_ids(tb, "host2")))
        held = tb.tenant_spawn("host1", "acme-a", CM_PDATA, "client", "10.0.0.2", "7480", "held",
                               "hold")
        procs.append(held)
        wait_for("both ends established",
                 lambda: all(any(i[1] == "established" for i in cm_ids(tb, h)) for h in HOSTS))
        before = {h: cm_ids(tb, h) for h in HOSTS}
        masq_cmd(tb, "kill")
        masq_cmd(tb, "start")
        # libmasq gives the new masqd every id again, under its number.
        for h in HOSTS:
            try:
                wait_for(f"{h}: CM ids restored", lambda h=h: cm_ids(tb, h) >= before[h],
                         timeout=60)
            except AssertionError as e:
                raise AssertionError(f"{e}\nbefore: {sorted(before[h])}\n"
                                     f"now: {sorted(cm_ids(tb, h))}\n"
                                     f"{tb.masqd_log(h)[-4000:]}") from None
        # The held client disconnects through the new masqds: it and the
        # server (which ends after its second connection) see DISCONNECTED.
        tb.run("host1", "pkill", "-USR1", "-f", "cm_pdata client 10.0.0.2 7480 held hold")
        rc, out, err = finish(held, timeout=120)
        assert rc == 0 and "welcome:held" in out, out + err
        # The restored listener takes a new connection.
        r = tb.tenant_run("host1", "acme-a", CM_PDATA, "client", "10.0.0.2", "7480", "again",
                          check=False)
        assert r.returncode == 0 and "welcome:again" in r.stdout, r.stdout + r.stderr
        rc, out, err = finish(srv, timeout=120)
        assert rc == 0 and out.count("RDMA_CM_EVENT_DISCONNECTED") == 2, out + err
        assert "not restored" not in err
    finally:
        stop(procs)


@pytest.mark.extended
def test_restart_under_a_stricter_policy_resets_what_it_denies(tb):
    srv, cli = long_run(tb, "acme", 18961)
    g_srv, g_cli = long_run(tb, "globex", 18962)
    try:
        masq_cmd(tb, "kill")
        # Back on policy-revoked.yaml: acme's connection is no longer allowed.
        started = time.monotonic()
        masq_cmd(tb, "up", "--config", REVOKED_CONFIG)
        # globex is still allowed: re-registered and tracked again.
        for h in HOSTS:
            wait_for(f"{h}: globex tracked again",
                     lambda h=h: conntrack(tb, h, "-t", "globex"), timeout=30)
        rc, out, err = finish(cli, timeout=180)
        elapsed = time.monotonic() - started
        assert rc != 0, "the client's QP should have been moved to ERROR"
        print(f"restart on the stricter policy -> client exit: {elapsed:.1f}s")
        finish(srv, timeout=180)
        for h in HOSTS:
            assert conntrack(tb, h, "-t", "acme") == []
        log = tb.masqd_log("host1")
        assert "QP moved to ERROR on resync: security groups deny" in log
        # ...and globex runs on.
        assert_still_moving(tb, (g_cli, g_srv))
    finally:
        stop((cli, srv, g_cli, g_srv))


def _pid_of(tb, host, endpoint, app):
    for s in masqctl_json(tb, host, "sessions")["sessions"]:
        if s["endpoint"] == endpoint and s["app"] == app:
            return s["pid"]
    return None


@pytest.mark.extended
@pytest.mark.parametrize("when", ["transferring", "connecting"])
def test_a_killed_app_leaves_no_entry_on_either_host(tb, when):
    port = 18963 if when == "transferring" else 18964
    argv = BW_RUN
    srv = tb.tenant_spawn("host2", "acme-b", *argv, "-p", str(port))
    tb.wait_listening("host2", port, tenant="acme-b")
    cli = tb.tenant_spawn("host1", "acme-a", *argv, "-p", str(port), "10.0.0.2")
    try:
        if when == "transferring":
            _wait_connected(tb, "host1", "acme-a", procs=(srv, cli))
            _wait_connected(tb, "host2", "acme-b", procs=(srv, cli))
            assert len(conntrack(tb, "host1", "-t", "acme")) == 1
        # The client's pid, from its masqd session (as soon as it has one).
        pid = wait_for("client session", lambda: _pid_of(tb, "host1", "acme-a", "ib_write_bw"),
                       interval=0.1)
        tb.run("host1", "kill", "-9", str(pid))
        rc, *_ = finish(cli, timeout=60)
        assert rc != 0
        # The server notices its peer is gone (TCP) and exits; one still
        # waiting for a client that never came is stopped.
        finish(srv, timeout=90 if when == "transferring" else 20)
        for h in HOSTS:
            wait_for(f"{h}: no entry left", lambda h=h: conntrack(tb, h, "-t", "acme") == [],
                     timeout=60)
            wait_for(f"{h}: no session left",
                     lambda h=h: not [s for s in masqctl_json(tb, h, "sessions")["sessions"]
                                      if s["tenant"] == "acme"], timeout=60)
    finally:
        for p in (cli, srv):
            if p.poll() is None:
                p.kill()
                finish(p)


@pytest.mark.long
def test_policy_applied_during_connection_churn_leaves_a_consistent_table(tb):
    # A long globex connection, allowed by both policies, must survive.
    g_srv, g_cli = long_run(tb, "globex", 18965)
    loop = f"for i in $(seq 30); do {QP_PROBE} vrdma0 1 10.0.0.2 >/dev/null; done; true"
    churn = [tb.tenant_spawn("host1", "acme-a", "sh", "-c", loop) for _ in range(3)]
    churn.append(tb.tenant_spawn("host2", "acme-b", "sh", "-c",
                                 loop.replace("10.0.0.2", "10.0.0.1")))
    rounds = 0
    try:
        while any(p.poll() is None for p in churn) and rounds < 12:
            rounds += 1
            apply(tb, "policy-revoked.yaml")
            # Revoked on both hosts: no acme connection may be tracked,
            # whatever was being admitted while it was applied.
            for h in HOSTS:
                assert conntrack(tb, h, "-t", "acme") == [], f"{h}: round {rounds}"
            apply(tb, "policy.yaml")
            for h in HOSTS:
                assert_table_matches_sessions(tb, h)
                assert conntrack(tb, h, "-t", "globex"), f"{h}: globex untracked, round {rounds}"
        for p in churn:
            rc, out, err = finish(p, timeout=300)
            assert rc == 0, out + err
        assert rounds >= 2, "the churn ended before two policy changes"
        # Churn over, policy.yaml in force: no acme entry is left, on either
        # host, and what is left are live QPs: the globex connection.
        for h in HOSTS:
            wait_for(f"{h}: acme entries gone",
                     lambda h=h: not conntrack(tb, h, "-t", "acme"), timeout=60)
            left = conntrack(tb, h)
            assert [e["tenant"] for e in left] == ["globex"], left
            assert_table_matches_sessions(tb, h)
        # The globex connection survived every change: it still moves data
        # (a reset QP would have ended the run with an error).
        assert_still_moving(tb, (g_cli, g_srv))
        print(f"{rounds} policy changes during the churn")
    finally:
        stop((*churn, g_cli, g_srv))
    for h in HOSTS:
        wait_for(f"{h}: empty at the end", lambda h=h: conntrack(tb, h) == [], timeout=60)


UD_PROBE = os.path.join(os.path.dirname(HERE), "build", "ud_probe")


def ud_entries(tb, host):
    return sorted((e["local_vip"], e["remote_vip"], e["peer_host"], e["rule"])
                  for e in conntrack(tb, host, "-p", "ud", "-t", "acme"))


@pytest.mark.extended
def test_ud_state_survives_a_masqd_restart(tb):
    """An address handle is tracked again (RESYNC_AH); a restarted masqd
    asks the other hosts for their UD QPs (PEER_UD_QUERY) and names their
    datagrams' senders again; a UD CM listener keeps listening."""
    server = tb.tenant_spawn("host2", "acme-b", UD_PROBE, "vrdma0", "1", "serve")
    holder = tb.tenant_spawn("host1", "acme-a", UD_PROBE, "vrdma0", "1", "ah", "10.0.0.2", "300")
    listener = tb.tenant_spawn("host2", "acme-b", CM_PDATA, "udserver", "7482", "1")
    procs = [server, holder, listener]
    try:
        qpn = server.stdout.readline().strip().split("=")[1]
        assert holder.stdout.readline().strip() == "create_ah=ok"
        wait_for("host2: UD listener",
                 lambda: any(i[1] == "listening" and i[3] == "7482" for i in cm_ids(tb, "host2")))
        before = ud_entries(tb, "host1")
        assert len(before) == 1, before

        masq_cmd(tb, "kill", "host1")
        masq_cmd(tb, "start", "host1")
        after = wait_for("host1: the AH tracked again", lambda: ud_entries(tb, "host1"), timeout=30)
        assert after == before
        # host2 named its UD QP (the server's) to host1's new masqd again,
        # so host1 resolves the server's answer to its vIP.
        assert "UD QP(s) announced again at that host's request" in tb.masqd_log("host2")
        r = tb.tenant_run("host1", "acme-a", UD_PROBE, "vrdma0", "1", "send", "10.0.0.2", qpn,
                          check=False)
        assert r.returncode == 0 and "from=::ffff:10.0.0.2" in r.stdout, r.stdout + r.stderr

        masq_cmd(tb, "kill", "host2")
        masq_cmd(tb, "start", "host2")
        wait_for("host2: UD listener restored",
                 lambda: any(i[1] == "listening" and i[3] == "7482" for i in cm_ids(tb, "host2")),
                 timeout=60)
        r = tb.tenant_run("host1", "acme-a", CM_PDATA, "udclient", "10.0.0.2", "7482", "again",
                          check=False)
        assert r.returncode == 0 and "welcome:again" in r.stdout, r.stdout + r.stderr
        rc, out, err = finish(listener, timeout=60)
        assert rc == 0 and "request private_data=again" in out, out + err
        assert "not restored" not in err
    finally:
        stop(procs)


# A real systemd for masqd's unit. The guests boot none, so one runs as PID
# 1 of a PID and mount namespace of its own on host1, on the guest's cgroup
# tree (masqd needs the tenants' cgroups there); it starts nothing but the
# unit. The unit is the package's [Service] section with this build's
# paths and a 6 s watchdog instead of 30 s.
UNIT_NAME = "masqd-under-test.service"
SYSTEMD_CGROUPS = ("system.slice/" + UNIT_NAME, "system.slice", "init.scope")


def _test_unit():
    text = open(os.path.join(os.path.dirname(os.path.dirname(HERE)), "packaging",
                             "masqd.service")).read()
    service = text.split("[Service]", 1)[1].split("[Install]", 1)[0]
    masqd = os.path.join(os.path.dirname(MASQCTL), "masqd")
    config = os.path.join(POLICY_CONFIG, "host1.yaml")
    service = (service.replace("@PREFIX@/sbin/masqd", masqd)
               .replace("/etc/masq/masqd.yaml", config)
               .replace("WatchdogSec=30s", "WatchdogSec=6s"))
    assert "Type=notify" in service and f"ExecStart={masqd} --config {config}" in service
    return "[Unit]\nDefaultDependencies=no\n[Service]" + service


def _unit(tb, pid1):
    out = tb.run("host1", "nsenter", "-t", pid1, "-m", "-p", "systemctl", "show", UNIT_NAME,
                 "-p", "ActiveState", "-p", "MainPID", "-p", "NRestarts", "-p", "StatusText",
                 check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@pytest.mark.extended
def test_systemd_sees_masqd_ready_and_restarts_it_when_it_stops_answering(tb):
    masq_cmd(tb, "kill", "host1")  # the testbed's masqd; endpoints and tenants stay
    tb.run("host1", "sh", "-c", f'mkdir -p /etc/systemd/system && printf "%s" "$1" '
           f'> /etc/systemd/system/{UNIT_NAME}', "sh", _test_unit())
    # Its own hostname (systemd sets it) and its own /run/systemd, so that
    # nothing of it stays in the guest but the cgroups removed below.
    systemd = tb.spawn("host1", "unshare", "--pid", "--fork", "--mount", "--mount-proc",
                       "--uts", "--ipc", "sh", "-c",
                       "mkdir -p /run/systemd && mount -t tmpfs tmpfs /run/systemd && "
                       'exec env container=masq-test /lib/systemd/systemd "$@"', "sh",
                       f"--unit={UNIT_NAME}", "--log-target=console")
    pid1 = None
    try:
        pid1 = wait_for("systemd as PID 1 of its namespace", lambda: tb.run(
            "host1", "pgrep", "-f", "-x", f"/lib/systemd/systemd --unit={UNIT_NAME}.*",
            check=False).stdout.split(), timeout=60)[0]
        # Type=notify: active only once masqd said READY=1, with its status.
        up = wait_for("the unit active", lambda: (lambda u: u.get("ActiveState") == "active"
                                                  and u)(_unit(tb, pid1)), timeout=120)
        assert up["StatusText"].startswith("serving 3 endpoint(s)"), up
        assert up["NRestarts"] == "0", up
        # masqd stopped: no watchdog pings; systemd kills and restarts it.
        tb.run("host1", "nsenter", "-t", pid1, "-m", "-p", "kill", "-STOP", up["MainPID"])
        again = wait_for("the unit restarted by its watchdog", lambda: (
            lambda u: u.get("NRestarts") == "1" and u.get("ActiveState") == "active" and u)(
            _unit(tb, pid1)), timeout=120)
        assert again["MainPID"] != up["MainPID"], again
        masqctl_json(tb, "host1", "daemon", "show")  # the new masqd answers
        assert tb.run("host1", "hostname").stdout.strip() == "host1"
    finally:
        if pid1:
            tb.run("host1", "kill", "-KILL", pid1, check=False)  # and with it masqd
        systemd.kill()
        finish(systemd)
        tb.run("host1", "rm", "-f", f"/etc/systemd/system/{UNIT_NAME}", check=False)
        wait_for("systemd's processes gone", lambda: not tb.run(
            "host1", "pgrep", "-f", f"--unit={UNIT_NAME}", check=False).stdout.strip(),
            timeout=30)
        for cg in SYSTEMD_CGROUPS:
            tb.run("host1", "rmdir", f"/sys/fs/cgroup/{cg}", check=False)
