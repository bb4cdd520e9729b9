"""Shared fixtures: the testbed is booted once per pytest session, with
MASQ_TESTBED_HOSTS hosts (run-tests sets it: 2, or 3 with --cluster).
Tests marked `three_hosts` need three; run-tests selects them only with
--cluster (`make test-cluster`). Tests marked `long` run for minutes by
design; run-tests selects them only with --long (`make test-long`). Tests
marked `stress` loop until they find trouble; only `run-tests --stress`
runs them. Tests marked `k8s` need containerd 2 and crictl; only
`run-tests --k8s` (`make test-k8s`) runs them; those also marked
`k8s_cluster` run a real control plane and kubelets, and only `run-tests
--k8s-cluster` (`make test-k8s-cluster`) runs them. Tests marked `rails` need
hosts with two rails (MASQ_TESTBED_RAILS=2); only `run-tests --rails`
(`make test-rails`) runs them. Tests marked `extended` are the further
cases of a layer whose main case make test runs: make test's budget
(docs/testbed.md#the-budget) leaves them to `make test-long` with the
long ones.

Under pytest-xdist (run-tests -n N: `--dist loadfile`, a file stays on one
worker) each worker boots a testbed of its own, with its own state
directory and ports (MASQ_TESTBED_STATE, MASQ_TESTBED_PORT_BASE), so the
files run on N testbeds side by side: a testbed's guests wait on their
network, timers and the harness for about half of a run, time that another
testbed's guests use."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... under xdist
if _WORKER:
    # Before masq_testbed reads them: this worker's testbed, apart from the
    # others' (and from a developer's default one).
    _n = int(_WORKER.removeprefix("gw"))
    os.environ["MASQ_TESTBED_STATE"] = f"/run/masq-testbed-{_WORKER}"
    os.environ["MASQ_TESTBED_PORT_BASE"] = str(47200 + 200 * _n)
from masq_testbed import Testbed, tbcli  # noqa: E402
from test_times import RunTimes  # noqa: E402


def _sigterm(_signo, _frame):
    # Turn SIGTERM into the KeyboardInterrupt pytest already cleans up after,
    # so a killed test run still takes the guests down.
    raise KeyboardInterrupt


signal.signal(signal.SIGTERM, _sigterm)


@pytest.fixture
def masq_round(request):
    """Which of MASQ_TEST_ROUNDS rounds this is (see pytest_generate_tests)."""
    return request.param


def pytest_generate_tests(metafunc):
    # integration/repeat --rounds N: every test N times over (test[round-1]
    # .. test[round-N]) in this one session: one boot, module fixtures set
    # up once.
    rounds = int(os.environ.get("MASQ_TEST_ROUNDS", "1"))
    if rounds > 1:
        metafunc.fixturenames.append("masq_round")
        metafunc.parametrize("masq_round", range(1, rounds + 1), indirect=True,
                             ids=[f"round-{i}" for i in range(1, rounds + 1)])


def pytest_collection_modifyitems(session, config, items):
    """Under xdist, the costliest files first, so that the last file to run
    is a short one and no testbed waits long for another at the end: the
    cost each took in the last run of this suite (MASQ_TEST_TIMES), else
    in the cold run recorded in file-costs.json (a fresh clone has no last
    run; ordered by size, its two testbeds ended 105 s apart), else its
    size. Within a file, the order stays as written."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    cost = {}
    try:
        with open(os.path.join(os.path.dirname(__file__), "file-costs.json")) as f:
            cost = dict(json.load(f)["files"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        with open(os.environ.get("MASQ_TEST_TIMES", "")) as f:
            cost.update({e["file"]: e["seconds"] for e in json.load(f)["files"]})
    except (OSError, ValueError, KeyError, TypeError):
        pass
    rank = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        if path not in rank:
            rank[path] = cost.get(path, os.path.getsize(str(item.path)) / 100)
    items.sort(key=lambda item: -rank[item.nodeid.split("::")[0]])


def pytest_configure(config):
    config.addinivalue_line("markers", "three_hosts: needs a three-host testbed (make test-cluster)")
    config.addinivalue_line("markers", "long: runs for minutes by design, a soak or a wedged "
                            "guest; kept out of make test's budget (make test-long)")
    config.addinivalue_line("markers", "extended: a further case of a layer whose main case "
                            "make test runs; past make test's budget (make test-long)")
    config.addinivalue_line("markers", "k8s: Kubernetes' runtime path, containerd 2 and crictl "
                            "built from the Go module proxy (make test-k8s)")
    config.addinivalue_line("markers", "k8s_cluster: a real Kubernetes control plane and "
                            "kubelets built from the Go module proxy (make test-k8s-cluster)")
    config.addinivalue_line("markers", "rails: needs hosts with two rails, `testbed up "
                            "--rails 2` (make test-rails)")
    config.addinivalue_line("markers", "engines: Podman 5 and Docker 26 from a Debian 13 root "
                            "made by debootstrap (make test-engines)")
    config.addinivalue_line("markers", "stress: a loop run by hand to reproduce a rare fault "
                            "(integration/run-tests --stress)")


# The testbed of this run, once a test asked for it: the hooks below check
# its hosts between tests.
ACTIVE = None
# (host, why, evidence) of each host booted again, for the run's summary.
RECOVERED = []
# What this process saw that the next test report carries to the summary
# (under xdist the summary is the controller's: reports are its only news).
_NEWS = []
# Where the run's time goes (per file: fixtures, tests; the boot apart), for
# the summary and for scripts/test-budget (MASQ_TEST_TIMES names the file).
TIMES = RunTimes()


@pytest.fixture(scope="session")
def testbed():
    global ACTIVE
    tb = Testbed()
    was_up = tb.is_up()
    if not was_up:
        hosts = os.environ.get("MASQ_TESTBED_HOSTS", "2")
        rails = os.environ.get("MASQ_TESTBED_RAILS", "1")
        started = time.monotonic()
        subprocess.run([tb.cli, "up", "--hosts", hosts, "--rails", rails], check=True)
        # All of `up` is the testbed's, not the first file's; the guests'
        # boot alone (as `up` timed it: no kernel fetched) is the probe.
        _NEWS.append(("masq_up", (time.monotonic() - started,
                                  (tbcli.read_meta() or {}).get("boot_seconds"))))
    tb.start_watching()
    ACTIVE = tb
    try:
        yield tb
    finally:
        ACTIVE = None
        if not was_up and os.environ.get("MASQ_TESTBED_KEEP") != "1":
            subprocess.run([tb.cli, "down"], check=False)


def _recover(tb, trouble):
    """Boot each troubled host again; the text a failed test carries."""
    text = []
    for host, (why, record) in trouble.items():
        tail = tbcli.console_tail(host, 40)
        failed = tb.recover(host)
        _NEWS.append(("masq_recovered", (host, "; ".join(why), record)))
        text.append(f"testbed: {host} was not fit to go on: {'; '.join(why)}"
                    + (f"\n(evidence kept in {record})" if record else "")
                    + f"\n--- {host}'s console, last lines ---\n{tail}\n"
                    + f"--- {host} booted again"
                    + (", but restoring failed: " + "; ".join(failed) if failed else
                       " with what the running fixtures had made") + " ---")
    return "\n".join(text)


def pytest_runtest_setup(item):
    # A host that died after the last check (in a fixture's teardown, say)
    # is booted again before the next test, which should not pay for it.
    if ACTIVE is not None:
        trouble = ACTIVE.trouble(probe_agents=False)
        if trouble:
            print(_recover(ACTIVE, trouble), file=sys.stderr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    _check_hosts(rep)
    # Whatever this process saw (a boot, a host booted again) rides on the
    # report to the process that prints the summary.
    rep.user_properties = [*rep.user_properties, *_NEWS]
    _NEWS.clear()


def _check_hosts(rep):
    tb = ACTIVE
    # After each test, and after a failed setup or teardown: is every host
    # still fit? If not, the test fails with its console and the host is
    # booted again, so the rest of the run still means something.
    if tb is None or not (rep.when == "call" or rep.failed):
        return
    trouble = tb.trouble()
    if not trouble:
        return
    note = _recover(tb, trouble)
    rep.outcome = "failed"
    rep.longrepr = f"{rep.longrepr}\n\n{note}" if rep.longrepr else note


def pytest_runtest_logreport(report):
    # In the process that prints the summary: xdist's controller, or the run.
    up = None
    for key, value in report.user_properties:
        if key == "masq_up":
            up = value
        elif key == "masq_recovered" and value not in RECOVERED:
            RECOVERED.append(value)
    TIMES.record(report.nodeid, report.when, report.duration, up)


def pytest_terminal_summary(terminalreporter):
    if TIMES.files:
        terminalreporter.section("where the time went (fixtures: setup and teardown)")
        for line in TIMES.table():
            terminalreporter.write_line(line)
        if os.environ.get("MASQ_TEST_TIMES"):
            TIMES.write(os.environ["MASQ_TEST_TIMES"])
    if RECOVERED:
        terminalreporter.section("hosts booted again during the run")
        for host, why, record in RECOVERED:
            terminalreporter.write_line(f"{host}: {why}" + (f" ({record})" if record else ""))
