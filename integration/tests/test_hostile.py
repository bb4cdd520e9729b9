"""A hostile tenant against masqd itself (issue 51): root in a container
whose socket directory is mounted read-write (an operator's own mount;
masq's CDI spec and `tenant exec` mount it read-only) plants a link in
masqd's sysfs view. Nothing masqd does as root follows it: the host's
directory it names keeps its files, and the endpoint whose view cannot be
made is refused, not served with the host's sysfs, while the host's other
endpoints are served. A name with control characters a tenant gives in
HELLO reaches masqd's log and masqctl escaped. And a tenant that opens
sessions and event channels until masqd refuses is refused EMFILE at its
endpoint's limits, while another tenant on the host is served. An app
whose cgroup the backstop cannot adopt (the root cgroup, or one it shares
with a host process) is refused at its HELLO with EPERM, masqd saying
why, and the host's other apps are served."""
import errno
import json
import os
import time

import pytest

from masq_testbed import finish
from test_endpoints import (ADD, CONFIG, NAME, REPO, acme_d, listed,  # noqa: F401 (acme_d: a fixture)
                            masqctl, subprocess_ok)

SOCKDIR = "/run/masq/endpoints"
# A directory of the host's, outside every socket directory, with one file:
# what the tenant's link points at (issue 51 pointed it at /etc).
TARGET = "/root/hostile-target"


@pytest.fixture(scope="module")
def masq(testbed):
    with testbed.masq_running(CONFIG):
        yield testbed


@pytest.fixture
def target(masq):
    masq.run("host2", "sh", "-c", f"mkdir -p {TARGET} && echo 'root:x:0:0' >{TARGET}/passwd")
    try:
        yield TARGET
    finally:
        masq.run("host2", "rm", "-rf", TARGET, check=False)


def untouched(tb, host):
    """The target directory holds its one file, as it was."""
    r = tb.run(host, "sh", "-c", f"ls -A {TARGET}; cat {TARGET}/passwd", check=False)
    assert r.stdout.split() == ["passwd", "root:x:0:0"], r.stdout + r.stderr


def plant(tb, host, endpoint, link_to):
    """What the tenant runs in /run/masq: `mv sysfs x; mkdir -p
    sysfs/class; ln -s TARGET sysfs/class/infiniband` (on the host, the
    same directory)."""
    d = f"{SOCKDIR}/{endpoint}"
    tb.run(host, "sh", "-c", f"cd {d} && rm -rf x && mv sysfs x && mkdir -p sysfs/class && "
           f"ln -sfn {link_to} sysfs/class/infiniband")


def restart(host):
    subprocess_ok(["masq", "kill", host])
    subprocess_ok(["masq", "start", host])


def test_the_tenants_mount_of_its_socket_directory_is_read_only(masq):
    r = masq.tenant_run("host2", "acme-b", "sh", "-c",
                        "ln -s /etc /run/masq/sysfs/class/infiniband/x", check=False)
    assert r.returncode != 0 and "Read-only file system" in r.stderr, r.stdout + r.stderr
    r = masq.tenant_run("host2", "acme-b", "ibv_devices")
    assert "vrdma0" in r.stdout, r.stdout


def test_a_link_in_the_view_is_not_followed_at_start_and_the_endpoint_is_refused(masq, target):
    tb = masq
    plant(tb, "host2", "acme-b", target)
    try:
        restart("host2")
        untouched(tb, "host2")
        eps = listed(tb, "host2")
        why = eps["acme-b"].get("not_served", "")
        assert "sysfs/class/infiniband" in why and "symbolic link" in why, eps["acme-b"]
        r = tb.run("host2", "test", "-e", f"{SOCKDIR}/acme-b/masq.sock", check=False)
        assert r.returncode != 0, "a refused endpoint has no socket"
        assert "endpoint not served" in tb.masqd_log("host2")
        # Its apps find no masqd (and no view of the host's GIDs from it).
        r = tb.tenant_run("host2", "acme-b", "ibv_devices", check=False)
        assert "vrdma0" not in r.stdout, r.stdout
        # The host's other endpoint is served as before.
        assert "not_served" not in eps["globex-b"], eps["globex-b"]
        r = tb.tenant_run("host2", "globex-b", "ibv_devices")
        assert "vrdma0" in r.stdout, r.stdout

        # Left dangling (the target gone): refused all the same.
        plant(tb, "host2", "acme-b", "/nonexistent")
        restart("host2")
        assert "symbolic link" in listed(tb, "host2")["acme-b"].get("not_served", "")
    finally:
        tb.run("host2", "sh", "-c", f"cd {SOCKDIR}/acme-b && rm -rf sysfs x", check=False)
        restart("host2")
    assert "not_served" not in listed(tb, "host2")["acme-b"]


def test_a_link_in_the_view_is_not_followed_when_the_endpoint_goes(acme_d, target):
    tb = acme_d
    masqctl(tb, "host2", *ADD)
    d = f"{SOCKDIR}/{NAME}"
    try:
        # Planted while it is served: its deletion empties and removes the
        # view without going through the link.
        plant(tb, "host2", NAME, target)
        masqctl(tb, "host2", "endpoint", "del", NAME)
        untouched(tb, "host2")
        # Added again with the link still there, dangling: refused, the
        # link named, nothing changed.
        tb.run("host2", "ln", "-sfn", "/nonexistent", f"{d}/sysfs/class/infiniband")
        r = masqctl(tb, "host2", *ADD, check=False)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "not served" in r.stderr and "sysfs/class/infiniband" in r.stderr, r.stderr
        assert NAME not in listed(tb, "host2")
        untouched(tb, "host2")
    finally:
        tb.run("host2", "rm", "-rf", d, check=False)


RAW_CLIENT = os.path.join(REPO, "integration", "tools", "masq_raw_client.py")
# A name with a forged log line, a terminal escape and a bidi override, as
# a tenant's own client sends it (libmasq itself sends printable ASCII).
HOSTILE_NAME = "x\nINFO fake\x1b[2J\u202e"
HELLO_AND_WAIT = f"""
import sys, time
sys.path.insert(0, {os.path.dirname(RAW_CLIENT)!r})
import masq_raw_client as c
s = c.connect()
print(c.exchange(s, c.hello({HOSTILE_NAME.encode()!r})), flush=True)
time.sleep(6)
"""


@pytest.mark.extended
def test_a_name_with_control_characters_reaches_the_log_and_masqctl_escaped(masq):
    app = masq.tenant_spawn("host2", "acme-b", "python3", "-c", HELLO_AND_WAIT)
    try:
        shown = None
        for _ in range(20):
            r = masqctl(masq, "host2", "-o", "json", "sessions")
            apps = [s["app"] for s in json.loads(r.stdout)["sessions"]]
            shown = next((a for a in apps if a.startswith("x")), None)
            if shown:
                break
            time.sleep(0.25)
        assert shown == "x\\nINFO fake\\u{1b}[2J\\u{202e}", apps
        table = masqctl(masq, "host2", "sessions").stdout
        assert "\x1b" not in table and "\u202e" not in table and "INFO fake" in table, table
    finally:
        finish(app, timeout=30)
    log = masq.masqd_log("host2")
    assert "x\\nINFO fake\\u{1b}[2J" in log
    assert "\x1b[2J" not in log and not any(l.startswith("INFO fake") for l in log.splitlines())


def test_a_tenant_that_hoards_sessions_and_channels_is_refused_emfile_and_another_is_served(masq):
    """Issue 51 held 992 channels over 4 sessions of acme-a: masqd ran out
    of descriptors and globex-a's ibv_devinfo failed. Now acme-a stops at
    its endpoint's limits (tenantLimits: 256 sessions, 1024 channels, or
    masqd's descriptor reserve first on a host with a small limit), with
    EMFILE, while globex-a on the same host is served."""
    tb = masq
    pid = tb.run("host1", "pgrep", "-x", "masqd").stdout.strip()
    hoarder = tb.tenant_spawn("host1", "acme-a", "python3", RAW_CLIENT,
                              "--hoard", "300", "1100", "60")
    try:
        got = json.loads(hoarder.stdout.readline() or "{}")
        assert got, hoarder.stderr.read() if hoarder.poll() is not None else "no answer"
        refused = [got["session_refused"], got["channel_refused"]]
        assert -errno.EMFILE in refused, got
        assert got["sessions"] <= 256 and got["channels"] <= 1024, got
        # While acme-a holds all it got: another tenant is served.
        r = tb.tenant_run("host1", "globex-a", "ibv_devinfo", "-d", "vrdma0")
        assert "vrdma0" in r.stdout and "PORT_ACTIVE" in r.stdout, r.stdout + r.stderr
        # And acme-a's own next app is refused, not masqd broken.
        r = tb.tenant_run("host1", "acme-a", "ibv_devinfo", "-d", "vrdma0", check=False)
        if got["session_refused"] is not None:
            assert r.returncode != 0, r.stdout
        log = tb.masqd_log("host1")
        assert "session refused" in log or "event_channels limit reached" in log, log[-2000:]
    finally:
        hoarder.kill()
        finish(hoarder, timeout=60)
    assert tb.run("host1", "pgrep", "-x", "masqd").stdout.strip() == pid
    # What acme-a held is given back (as masqd reads the hang-ups): its
    # next app is served.
    for _ in range(20):
        r = tb.tenant_run("host1", "acme-a", "ibv_devinfo", "-d", "vrdma0", check=False)
        if r.returncode == 0:
            break
        time.sleep(0.5)
    assert "vrdma0" in r.stdout, r.stdout + r.stderr


SHARED_CG = "/sys/fs/cgroup/masq-hostile-shared"
# What the tenant runs to put its app where the backstop cannot filter it
# (`tenant exec` remounts /sys, so it mounts the cgroup tree first).
INTO_CGROUP = ("mount -t cgroup2 none /sys/fs/cgroup && echo $$ >/sys/fs/cgroup/{}cgroup.procs "
               "&& exec ibv_devinfo -d vrdma0")


def test_an_app_whose_cgroup_cannot_be_adopted_is_refused_eperm_and_others_are_served(masq):
    """Issue 51 point 5: an app the backstop could not filter (its cgroup
    not adopted) was served, its RoCE packets unfiltered. Now its HELLO is
    refused with EPERM and masqd logs why: here an acme-a app moves itself
    to the root cgroup, then into a cgroup a host process (outside acme-a's
    namespace) lives in. The cgroup is not adopted (the host's process
    stays unfiltered), and acme-a's apps in its own cgroup and globex-a's
    are served."""
    tb = masq
    pid = tb.run("host1", "pgrep", "-x", "masqd").stdout.strip()
    host_proc = tb.spawn("host1", "sh", "-c",
                         f"mkdir -p {SHARED_CG} && echo $$ >{SHARED_CG}/cgroup.procs && "
                         "exec sleep 120")
    try:
        for _ in range(50):
            r = tb.run("host1", "cat", f"{SHARED_CG}/cgroup.procs", check=False)
            if r.stdout.strip():
                break
            time.sleep(0.2)
        assert r.stdout.strip(), "the host process is not in the shared cgroup"
        for cgroup, why in [("", "runs in the root cgroup"),
                            ("masq-hostile-shared/", "lives outside the endpoint's namespace")]:
            r = tb.tenant_run("host1", "acme-a", "sh", "-c", INTO_CGROUP.format(cgroup),
                              check=False)
            assert r.returncode != 0 and "PORT_ACTIVE" not in r.stdout, r.stdout + r.stderr
            # libmasq says masqd refused it (not that masqd is away).
            assert "refused this process: Operation not permitted" in r.stderr, r.stderr
            log = tb.masqd_log("host1")
            assert "the backstop cannot filter this app's RoCE packets" in log, log[-2000:]
            assert why in log, log[-2000:]
        cgroups = listed(tb, "host1")["acme-a"].get("cgroups", [])
        assert not any("masq-hostile" in c for c in cgroups), cgroups
        # The refused apps' neighbours are served: acme-a's own in its
        # cgroup, and another tenant's.
        for tenant in ("acme-a", "globex-a"):
            r = tb.tenant_run("host1", tenant, "ibv_devinfo", "-d", "vrdma0")
            assert "PORT_ACTIVE" in r.stdout, r.stdout + r.stderr
    finally:
        host_proc.kill()
        finish(host_proc, timeout=60)
        # The host process, by the cgroup it was put in; then the cgroup.
        tb.run("host1", "sh", "-c", f"kill $(cat {SHARED_CG}/cgroup.procs); sleep 0.5; "
               f"rmdir {SHARED_CG}", check=False)
    assert tb.run("host1", "pgrep", "-x", "masqd").stdout.strip() == pid
