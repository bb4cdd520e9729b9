"""Which apps work: stock programs that load verbs in every way people's
apps do, each run through only the standard preload (`tenant exec`), list
only the virtual device with virtual GIDs and connect to a peer by vIP.

The peer is always stock `ibv_rc_pingpong`; the clients speak its exchange:
- dlopen_pingpong: dlopen("libibverbs.so") + dlvsym on the handle, as
  NCCL's IB transport loads verbs (not linked against libibverbs);
- ctypes_pingpong.py: ctypes.CDLL("libibverbs.so.1") in plain Python;
- pyverbs_pingpong.py: rdma-core's Python bindings, whose extension
  modules bring libibverbs in long after libmasq started.
UCX (libuct's IB transport is a plugin UCX dlopens) runs its own perftest
over RC verbs between the hosts.
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


@pytest.mark.parametrize("kind,port", [
    ("dlopen", 18801),
    pytest.param("ctypes", 18802, marks=pytest.mark.extended),
    pytest.param("pyverbs", 18803, marks=pytest.mark.extended),
])
def test_app_lists_the_virtual_device_and_connects_by_virtual_ip(masq, kind, port):
    out = run_client(masq, ("host1", "acme-a", CLIENTS[kind]), ("host2", "acme-b"), port,
                     "10.0.0.2")
    assert re.findall(r"^device (\S+)$", out, re.M) == ["vrdma0"], out
    assert re.search(r"^gid 1 ::ffff:10\.0\.0\.1$", out, re.M), out
    assert re.search(r"^peer ::ffff:10\.0\.0\.2$", out, re.M), out
    assert f"{ITERS} iters of {SIZE} bytes done" in out
    assert not PHYSICAL.search(out), out


@pytest.mark.extended
def test_dlopen_app_between_endpoints_on_one_host(masq):
    out = run_client(masq, ("host1", "acme-a", CLIENTS["dlopen"]), ("host1", "acme-c"), 18804,
                     "10.0.0.3")
    assert re.search(r"^peer ::ffff:10\.0\.0\.3$", out, re.M), out
    assert f"{ITERS} iters of {SIZE} bytes done" in out


# UCX probes each GID with ibv_create_ah and, since masq does not create
# UD address handles yet (issue 15), would fall back to GID 0 (the vNIC's
# link-local address, which masqd refuses): the index is given, as NCCL's
# NCCL_IB_GID_INDEX is.
UCX_ENV = ["env", "UCX_NET_DEVICES=vrdma0:1", "UCX_IB_GID_INDEX=1"]
UCX_SIZE, UCX_ITERS = 4096, 1000


@pytest.mark.extended
def test_ucx_perftest_over_rc_verbs_by_virtual_ip(masq):
    port = 18805
    srv = masq.tenant_spawn("host2", "acme-b", *UCX_ENV, "ucx_perftest", "-p", str(port))
    try:
        masq.wait_listening("host2", port, tenant="acme-b")
        with rdma_moved(masq, "host2", UCX_SIZE, UCX_ITERS):
            cli = masq.tenant_run("host1", "acme-a", *UCX_ENV, "ucx_perftest", "10.0.0.2", "-p",
                                  str(port), "-t", "put_bw", "-x", "rc_verbs", "-d", "vrdma0:1",
                                  "-D", "zcopy", "-s", str(UCX_SIZE), "-n", str(UCX_ITERS),
                                  check=False)
    except BaseException:
        srv.kill()
        finish(srv)
        raise
    finish_pair(srv, cli)
    # The last report counts the iterations done (its rates use UCX's clock).
    assert re.search(rf"^Final:\s+{UCX_ITERS}\s", cli.stdout, re.M), cli.stdout + cli.stderr
    assert "UCX  ERROR" not in cli.stdout + cli.stderr
