"""Native baseline: unmodified RDMA apps between the two hosts' rxe0 over
the underlay. Later tests compare masq against exactly these runs."""
import pytest

from masq_testbed import (
    UNDERLAY, fi_pingpong, finish, finish_pair, parse_bw, parse_fi_pingpong, parse_lat,
    parse_pingpong, parse_rstream, rdma_moved, rstream, wait_cm_listener,
)

# -u 18: a 1 s ACK timeout. perftest's default (14, 67 ms) makes rxe
# retransmit whenever a loaded guest answers late, and rxe 6.1 sometimes
# fails a long bandwidth run with status 9 (remote invalid request) while
# sorting out the duplicates (seen with no packet lost: duplicate_request
# 1288, completer_retry_err 10).
PERFTEST = ["-d", "rxe0", "-x", "1", "-F", "-u", "18"]  # GID 1 = ::ffff:<underlay IPv4>, RoCEv2


def client_server(tb, argv, port, server="host2", client="host1"):
    """Run argv as server on `server` and against it from `client`."""
    srv = tb.spawn(server, *argv, "-p", str(port))
    try:
        tb.wait_listening(server, port)
        cli = tb.run(client, *argv, "-p", str(port), UNDERLAY[server], check=False)
    except BaseException:
        srv.kill()
        finish(srv)
        raise
    return finish_pair(srv, cli)


def test_rc_pingpong(testbed):
    size, iters = 4096, 100
    srv, cli = client_server(
        testbed, ["ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-s", str(size), "-n", str(iters)],
        18601,
    )
    for out in (srv, cli):
        r = parse_pingpong(out)
        assert r["iters"] == iters
        assert r["bytes"] == 2 * size * iters
        assert r["mbit_per_s"] > 0
    # Each side saw the other's underlay GID: the native path carries host addresses.
    assert "GID ::ffff:198.18.0.2" in cli and "GID ::ffff:198.18.0.1" in srv


def _bw(testbed, tool, port, receiver, size=65536, iters=100, server="host2", client="host1"):
    # Exit codes, perftest's own count of completed iterations and the
    # receiver's packet counter prove the data moved; perftest's rates do not.
    with rdma_moved(testbed, receiver, size, iters):
        _, cli = client_server(
            testbed, [tool, *PERFTEST, "-s", str(size), "-n", str(iters)], port,
            server=server, client=client,
        )
    r = parse_bw(cli)
    assert r["bytes"] == size and r["iterations"] == iters
    return r


@pytest.mark.extended
def test_ib_write_bw(testbed):
    _bw(testbed, "ib_write_bw", 18602, receiver="host2")


@pytest.mark.extended
def test_ib_read_bw(testbed):
    _bw(testbed, "ib_read_bw", 18603, receiver="host1")  # the client reads


@pytest.mark.extended
def test_ib_write_bw_reverse_direction(testbed):
    _bw(testbed, "ib_write_bw", 18604, receiver="host1", size=4096, server="host1", client="host2")


@pytest.mark.extended
def test_ib_send_lat(testbed):
    size, iters = 64, 200
    # A ping-pong: each side receives every iteration's message.
    with rdma_moved(testbed, "host1", size, iters), rdma_moved(testbed, "host2", size, iters):
        _, cli = client_server(
            testbed, ["ib_send_lat", *PERFTEST, "-s", str(size), "-n", str(iters)], 18605
        )
    r = parse_lat(cli)
    assert r["bytes"] == size and r["iterations"] == iters


# The two stacks test_apps runs through masq, natively first: rsockets
# (librdmacm's sockets API) and libfabric's verbs provider.
STACK_SIZE, STACK_COUNT = 4096, 20


def test_rstream(testbed):
    port = 18606
    srv = testbed.spawn("host2", *rstream("rstream", "-p", str(port), count=STACK_COUNT))
    try:
        wait_cm_listener(testbed, "host2", port, procs=(srv,))
        with rdma_moved(testbed, "host2", STACK_SIZE, STACK_COUNT):
            cli = testbed.run("host1", *rstream("rstream", "-s", UNDERLAY["host2"], "-p",
                                                str(port), count=STACK_COUNT), check=False)
    except BaseException:
        srv.kill()
        finish(srv)
        raise
    for out in finish_pair(srv, cli):
        assert parse_rstream(out) == (STACK_SIZE, STACK_COUNT), out


def test_fi_pingpong_msg(testbed):
    port = 18607
    srv = testbed.spawn("host2", *fi_pingpong(port, iters=STACK_COUNT))
    try:
        testbed.wait_listening("host2", port)
        with rdma_moved(testbed, "host2", STACK_SIZE, STACK_COUNT):
            cli = testbed.run("host1", *fi_pingpong(port, UNDERLAY["host2"], iters=STACK_COUNT),
                              check=False)
    except BaseException:
        srv.kill()
        finish(srv)
        raise
    for out in finish_pair(srv, cli):
        assert parse_fi_pingpong(out) == (STACK_SIZE, STACK_COUNT, STACK_COUNT), out
