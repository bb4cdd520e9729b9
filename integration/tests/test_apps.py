"""Which apps work: stock programs that load verbs in every way people's
apps do, each run through only the standard preload (`tenant exec`), list
only the virtual device with virtual GIDs and connect to a peer by vIP.

The peer is always stock `ibv_rc_pingpong`; the clients speak its exchange:
- dlopen_pingpong: dlopen("libibverbs.so") + dlvsym on the handle, as
  NCCL's IB transport loads verbs (not linked against libibverbs);
- ctypes_pingpong.py: ctypes.CDLL("libibverbs.so.1") in plain Python;
- pyverbs_pingpong.py: rdma-core's Python bindings, whose extension
  modules bring libibverbs in long after libmasq started.
"""
import os
import re

import pytest

from masq_testbed import finish, finish_pair, rdma_moved

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CONFIG = os.path.join(HERE, "configs", "masq")
TOOLS = os.path.join(REPO, "integration", "tools")
DLOPEN = os.path.join(REPO, "integration", "build", "dlopen_pingpong")
PYTHON = "/usr/bin/python3"  # Debian's, which has python3-pyverbs
PHYSICAL = re.compile(r"198\.18\.|c612:|rxe0")  # underlay addresses or the device
SIZE, ITERS = 4096, 50

CLIENTS = {
    "dlopen": [DLOPEN],
    "ctypes": [PYTHON, os.path.join(TOOLS, "ctypes_pingpong.py")],
    "pyverbs": [PYTHON, os.path.join(TOOLS, "pyverbs_pingpong.py")],
}


@pytest.fixture(scope="module")
def masq(testbed):
    with testbed.masq_running(CONFIG):
        yield testbed


def pingpong_server(tb, host, endpoint, port):
    srv = tb.tenant_spawn(host, endpoint, "ibv_rc_pingpong", "-d", "vrdma0", "-g", "1",
                          "-s", str(SIZE), "-n", str(ITERS), "-p", str(port))
    try:
        tb.wait_listening(host, port, tenant=endpoint)
    except BaseException:
        srv.kill()
        finish(srv)
        raise
    return srv


def run_client(tb, client, server, port, vip):
    """client (host, endpoint) runs against an ibv_rc_pingpong server
    (host, endpoint) at vip; returns the client's output."""
    srv = pingpong_server(tb, *server, port)
    try:
        with rdma_moved(tb, server[0], SIZE, ITERS):
            cli = tb.tenant_run(*client[:2], *client[2], "vrdma0", "1", vip, str(port), str(SIZE),
                                str(ITERS), check=False)
    except BaseException:
        srv.kill()
        finish(srv)
        raise
    _, out = finish_pair(srv, cli)
    return out


@pytest.mark.parametrize("kind,port", [("dlopen", 18801), ("ctypes", 18802), ("pyverbs", 18803)])
def test_app_lists_the_virtual_device_and_connects_by_virtual_ip(masq, kind, port):
    out = run_client(masq, ("host1", "acme-a", CLIENTS[kind]), ("host2", "acme-b"), port,
                     "10.0.0.2")
    assert re.findall(r"^device (\S+)$", out, re.M) == ["vrdma0"], out
    assert re.search(r"^gid 1 ::ffff:10\.0\.0\.1$", out, re.M), out
    assert re.search(r"^peer ::ffff:10\.0\.0\.2$", out, re.M), out
    assert f"{ITERS} iters of {SIZE} bytes done" in out
    assert not PHYSICAL.search(out), out


def test_dlopen_app_between_endpoints_on_one_host(masq):
    out = run_client(masq, ("host1", "acme-a", CLIENTS["dlopen"]), ("host1", "acme-c"), 18804,
                     "10.0.0.3")
    assert re.search(r"^peer ::ffff:10\.0\.0\.3$", out, re.M), out
    assert f"{ITERS} iters of {SIZE} bytes done" in out
