"""Shared fixtures: the testbed is booted once per pytest session, with
MASQ_TESTBED_HOSTS hosts (run-tests sets it: 2, or 3 with --cluster).
Tests marked `three_hosts` need three; run-tests selects them only with
--cluster (`make test-cluster`)."""
import os
import signal
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from masq_testbed import Testbed  # noqa: E402


def _sigterm(_signo, _frame):
    # Turn SIGTERM into the KeyboardInterrupt pytest already cleans up after,
    # so a killed test run still takes the guests down.
    raise KeyboardInterrupt


signal.signal(signal.SIGTERM, _sigterm)


def pytest_configure(config):
    config.addinivalue_line("markers", "three_hosts: needs a three-host testbed (make test-cluster)")


@pytest.fixture(scope="session")
def testbed():
    tb = Testbed()
    was_up = tb.is_up()
    if not was_up:
        hosts = os.environ.get("MASQ_TESTBED_HOSTS", "2")
        subprocess.run([tb.cli, "up", "--hosts", hosts], check=True)
    try:
        yield tb
    finally:
        if not was_up and os.environ.get("MASQ_TESTBED_KEEP") != "1":
            subprocess.run([tb.cli, "down"], check=False)
