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
over RC verbs between the hosts. Two stacks over the RDMA CM run as
test_native runs them between the hosts: rsockets (rstream, riostream, and
a standard-sockets app under librspreload.so) and libfabric's verbs
provider (fi_info, fi_pingpong with MSG endpoints). A librdmacm feature
masq does not serve (multicast) fails with an errno and a log line.
"""
import glob
import os
import re

import pytest

from masq_testbed import (
    fi_pingpong, finish, finish_pair, parse_fi_pingpong, parse_rstream, rdma_moved, rstream,
    wait_cm_listener,
)

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


# rsockets and libfabric ----------------------------------------------------
STACK_SIZE, STACK_COUNT = 4096, 20
RSPRELOAD = (glob.glob("/usr/lib/*/rsocket/librspreload.so") or ["librspreload.so"])[0]


def rstream_pair(tb, tool, port):
    """tool (rstream's or riostream's argv before its options) served in
    acme-b and run from acme-a by vIP. Returns both outputs."""
    def argv(*args):
        return rstream(*tool, *args, count=STACK_COUNT)

    srv = tb.tenant_spawn("host2", "acme-b", *argv("-p", str(port)))
    try:
        wait_cm_listener(tb, "host2", port, endpoint="acme-b", procs=(srv,))
        with rdma_moved(tb, "host2", STACK_SIZE, STACK_COUNT):
            cli = tb.tenant_run("host1", "acme-a", *argv("-s", "10.0.0.2", "-p", str(port)),
                                check=False)
            # A client that failed says why here, not as no packets moved.
            assert cli.returncode == 0, f"client exited {cli.returncode}:\n{cli.stdout}\n{cli.stderr}"
    except BaseException:
        srv.kill()
        finish(srv)
        raise
    outs = finish_pair(srv, cli)
    for out in outs:
        assert parse_rstream(out) == (STACK_SIZE, STACK_COUNT), out
    return outs


def test_rstream_by_virtual_ip(masq):
    rstream_pair(masq, ["rstream"], 18806)


@pytest.mark.extended
def test_riostream_by_virtual_ip(masq):
    rstream_pair(masq, ["riostream"], 18807)


@pytest.mark.extended
def test_socket_app_under_rspreload_by_virtual_ip(masq):
    # rstream -T s uses the standard sockets API, which librspreload.so
    # puts on rsockets; rdma_moved proves it did not fall back to TCP.
    preload = ["sh", "-c", f'LD_PRELOAD="$LD_PRELOAD:{RSPRELOAD}" exec "$@"', "rspreload"]
    rstream_pair(masq, [*preload, "rstream", "-T", "s"], 18808)


@pytest.mark.extended
def test_fi_info_lists_the_virtual_device_with_the_virtual_ip(masq):
    out = masq.tenant_run("host1", "acme-a", "fi_info", "-p", "verbs", "-t", "FI_EP_MSG",
                          "-v").stdout
    assert re.search(r"^\s+name: vrdma0$", out, re.M), out
    assert "src_addr: fi_sockaddr_in://10.0.0.1:0" in out, out
    assert not PHYSICAL.search(out), out


def test_fi_pingpong_msg_by_virtual_ip(masq):
    port = 18809
    srv = masq.tenant_spawn("host2", "acme-b", *fi_pingpong(port, iters=STACK_COUNT))
    try:
        masq.wait_listening("host2", port, tenant="acme-b")
        with rdma_moved(masq, "host2", STACK_SIZE, STACK_COUNT):
            cli = masq.tenant_run("host1", "acme-a",
                                  *fi_pingpong(port, "10.0.0.2", iters=STACK_COUNT), check=False)
    except BaseException:
        srv.kill()
        finish(srv)
        raise
    for out in finish_pair(srv, cli):
        assert parse_fi_pingpong(out) == (STACK_SIZE, STACK_COUNT, STACK_COUNT), out


@pytest.mark.extended
def test_multicast_fails_cleanly(masq):
    # mckey (rdmacm-utils) joins a multicast group, which masq does not
    # serve: masqd answers the group's resolution with ADDR_ERROR and
    # mckey's rdma_leave_multicast gets ENOSYS with libmasq's line; an
    # error status, never a signal.
    r = masq.tenant_run("host1", "acme-a", "mckey", "-m", "239.1.1.1", "-b", "10.0.0.1",
                        "-C", "1", check=False, timeout=60)
    assert r.returncode != 0 and not 128 < r.returncode < 160, (r.returncode, r.stderr)
    assert "multicast is not served by masq: Function not implemented" in r.stderr, r.stderr
