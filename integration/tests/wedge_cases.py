"""Hosts wedged on purpose, to show the harness going on after them. Run
only by test_testbed.py's test_a_wedged_host_fails_its_test_and_the_run_goes_on
in a pytest run of its own (the file is not named test_*, so the suite does
not collect it): the wedging tests are meant to fail."""
import os
import subprocess

import pytest

from masq_testbed import tbcli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples")
MASQ_SH = os.path.join(REPO, "integration", "guest", "masq.sh")


@pytest.fixture(scope="module")
def masq(testbed):
    with testbed.masq_running(EXAMPLES):
        yield testbed


def serves_again(tb, host):
    """masqd runs on host and its endpoints are back."""
    tb.run(host, MASQ_SH, "status")
    names = tb._run([tb.cli, "tenant", "list", host], True, 60).stdout.split()
    assert {"acme-a", "globex-a"} <= set(names) or {"acme-b", "globex-b"} <= set(names), names


def test_1_host2_panics(masq):
    # The agent's connection dies with the guest (panic=-1: it stops).
    masq.run("host2", "sh", "-c", "echo c >/proc/sysrq-trigger", timeout=120)


def test_2_host2_is_back_with_masqd_and_its_endpoints(masq):
    serves_again(masq, "host2")


def test_3_host1_stops_answering(masq):
    # A paused guest: its console says nothing, its agent never answers.
    subprocess.run(["virsh", "-q", "-c", tbcli.LIBVIRT_URI, "suspend", tbcli.domain("host1")],
                   check=True, capture_output=True)
    masq.run("host1", "true", timeout=20)


def test_4_host1_is_back_with_masqd_and_its_endpoints(masq):
    serves_again(masq, "host1")
