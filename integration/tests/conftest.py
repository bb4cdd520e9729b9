"""Shared fixtures: the testbed is booted once per pytest session, with
MASQ_TESTBED_HOSTS hosts (run-tests sets it: 2, or 3 with --cluster).
Tests marked `three_hosts` need three; run-tests selects them only with
--cluster (`make test-cluster`). Tests marked `long` run for minutes by
design; run-tests selects them only with --long (`make test-long`). Tests
marked `stress` loop until they find trouble; only `run-tests --stress`
runs them. Tests marked `k8s` need containerd 2 and crictl; only
`run-tests --k8s` (`make test-k8s`) runs them. Tests marked `rails` need
hosts with two rails (MASQ_TESTBED_RAILS=2); only `run-tests --rails`
(`make test-rails`) runs them."""
import os
import signal
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from masq_testbed import Testbed, tbcli  # noqa: E402


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


def pytest_configure(config):
    config.addinivalue_line("markers", "three_hosts: needs a three-host testbed (make test-cluster)")
    config.addinivalue_line("markers", "long: runs for minutes by design, a soak or a wedged "
                            "guest; kept out of make test's budget (make test-long)")
    config.addinivalue_line("markers", "k8s: Kubernetes' runtime path, containerd 2 and crictl "
                            "built from the Go module proxy (make test-k8s)")
    config.addinivalue_line("markers", "rails: needs hosts with two rails, `testbed up "
                            "--rails 2` (make test-rails)")
    config.addinivalue_line("markers", "stress: a loop run by hand to reproduce a rare fault "
                            "(integration/run-tests --stress)")


# The testbed of this run, once a test asked for it: the hooks below check
# its hosts between tests.
ACTIVE = None
# (host, why, evidence) of each host booted again, for the run's summary.
RECOVERED = []
# Seconds spent per test file (setup, call and teardown), for the summary:
# where the run's time goes, to keep `make test` within its budget.
FILE_SECONDS = {}


@pytest.fixture(scope="session")
def testbed():
    global ACTIVE
    tb = Testbed()
    was_up = tb.is_up()
    if not was_up:
        hosts = os.environ.get("MASQ_TESTBED_HOSTS", "2")
        rails = os.environ.get("MASQ_TESTBED_RAILS", "1")
        subprocess.run([tb.cli, "up", "--hosts", hosts, "--rails", rails], check=True)
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
        RECOVERED.append((host, "; ".join(why), record))
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
    path = item.nodeid.split("::")[0]
    FILE_SECONDS[path] = FILE_SECONDS.get(path, 0.0) + rep.duration
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


def pytest_terminal_summary(terminalreporter):
    if FILE_SECONDS:
        terminalreporter.section("time per test file")
        for path, secs in sorted(FILE_SECONDS.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{secs:8.1f}s  {path}")
    if RECOVERED:
        terminalreporter.section("hosts booted again during the run")
        for host, why, record in RECOVERED:
            terminalreporter.write_line(f"{host}: {why}" + (f" ({record})" if record else ""))
