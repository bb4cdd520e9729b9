"""The testbed CLI itself: exit statuses, streams and input checks."""
import os
import re
import subprocess
import sys

import pytest

from masq_testbed import CLI

HERE = os.path.dirname(os.path.abspath(__file__))


def cli(*args, **kw):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120, **kw)


def test_exec_returns_the_command_status_and_streams(testbed):
    r = cli("exec", "host1", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert (r.returncode, r.stdout, r.stderr) == (7, "out\n", "err\n")


def test_exec_of_a_missing_program_is_127(testbed):
    r = cli("exec", "host2", "--", "/nonexistent/program")
    assert r.returncode == 127
    assert "nonexistent" in r.stderr


def test_exec_forwards_stdin_when_asked(testbed):
    r = cli("exec", "-i", "host1", "--", "wc", "-c", input="12345")
    assert r.returncode == 0 and r.stdout.strip() == "5"


def test_hosts_are_distinct_and_have_rxe(testbed):
    for host, ip in (("host1", "198.18.0.1"), ("host2", "198.18.0.2")):
        r = cli("exec", host, "--", "sh", "-c", "hostname; rdma link show rxe0/1; ip -4 -br addr show eth0")
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(host + "\n")
        assert "state ACTIVE" in r.stdout and "netdev eth0" in r.stdout
        assert f"{ip}/15" in r.stdout


def test_tenant_add_rejects_bad_input_by_name(testbed):
    r = cli("tenant", "add", "host1", "Bad_Name", "--vni", "5", "--vip", "10.0.0.1/24")
    assert r.returncode == 2 and "Bad_Name" in r.stderr
    r = cli("tenant", "add", "host1", "ok", "--vni", "0", "--vip", "10.0.0.1/24")
    assert r.returncode == 2 and "--vni" in r.stderr
    r = cli("tenant", "add", "host1", "ok", "--vni", "5", "--vip", "10.0.0.1")
    assert r.returncode == 2 and "--vip" in r.stderr


def test_tenant_exec_of_unknown_endpoint_fails(testbed):
    r = cli("tenant", "exec", "host1", "nobody", "--", "true")
    assert r.returncode == 2 and "no endpoint nobody" in r.stderr


@pytest.mark.long
def test_a_wedged_host_fails_its_test_and_the_run_goes_on(testbed):
    """A pytest run of its own on this testbed (wedge_cases.py): host2's
    kernel panics in one test, host1 is paused in another. Each of those
    tests fails with the host's console in its message, the host is booted
    again with masqd and its endpoints, and the test after it passes."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
                        os.path.join(HERE, "wedge_cases.py")],
                       capture_output=True, text=True, timeout=1800)
    out = r.stdout + r.stderr
    # This run's own watch saw host2's panic too; the inner run handled it.
    for host in testbed.known_hosts():
        testbed.watch.take(host)
    outcomes = dict(re.findall(r"::(test_\w+) (PASSED|FAILED|ERROR)", out))
    assert outcomes == {
        "test_1_host2_panics": "FAILED",
        "test_2_host2_is_back_with_masqd_and_its_endpoints": "PASSED",
        "test_3_host1_stops_answering": "FAILED",
        "test_4_host1_is_back_with_masqd_and_its_endpoints": "PASSED",
    }, out
    assert re.search(r"host2 was not fit to go on: its domain is shut off; its console shows: "
                     r"[^\n]*Kernel panic", out), out
    assert "--- host2's console, last lines ---" in out, out
    assert "host1 was not fit to go on: its domain is paused" in out, out
    assert "hosts booted again during the run" in out, out
    r = cli("status")
    assert r.returncode == 0, r.stdout
