"""Shared fixtures: the rxe pair is booted once per pytest session."""
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


@pytest.fixture(scope="session")
def testbed():
    tb = Testbed()
    was_up = tb.is_up()
    if not was_up:
        subprocess.run([tb.cli, "up"], check=True)
    try:
        yield tb
    finally:
        if not was_up and os.environ.get("MASQ_TESTBED_KEEP") != "1":
            subprocess.run([tb.cli, "down"], check=False)
