"""The testbed's rails (`make test-rails`: `testbed up --rails 2`): each
host has a NIC and an rxe device per rail (eth0/rxe0 on the default
underlay, eth1/rxe1 on a segment of its own), as a GPU node has an RDMA NIC
per rail network. These tests check the testbed itself, natively: RoCE
over rxe1 moves on rail 1's segment and not on rail 0's."""
import pytest

from masq_testbed import finish, finish_pair, parse_bw

pytestmark = pytest.mark.rails

RAIL1 = {"host1": "203.0.113.1", "host2": "203.0.113.2"}


@pytest.fixture(scope="module", autouse=True)
def two_rails(testbed):
    """A testbed of another shape (one already up) boots again with two."""
    testbed.up(2, rails=2)


def link_bytes(tb, host):
    """Bytes each underlay NIC has received and sent: {netdev: (rx, tx)}."""
    out = {}
    for dev in ("eth0", "eth1"):
        stats = f"/sys/class/net/{dev}/statistics"
        rx, tx = tb.run(host, "cat", f"{stats}/rx_bytes", f"{stats}/tx_bytes").stdout.split()
        out[dev] = (int(rx), int(tx))
    return out


def test_each_host_has_an_rxe_device_per_rail(testbed):
    for host, ip in RAIL1.items():
        links = testbed.run(host, "rdma", "link", "show").stdout
        assert "link rxe0/1 state ACTIVE" in links and "netdev eth0" in links, links
        assert "link rxe1/1 state ACTIVE" in links and "netdev eth1" in links, links
        addr = testbed.run(host, "ip", "-4", "-o", "addr", "show", "dev", "eth1").stdout
        assert f"inet {ip}/24" in addr, addr
        # GID 1: the IPv4-mapped address, RoCE v2.
        gid = testbed.run(host, "cat", "/sys/class/infiniband/rxe1/ports/1/gids/1").stdout
        assert gid.strip() == "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}".format(
            *map(int, ip.split("."))), gid
        env = testbed.run(host, "cat", "/run/masq-host.env").stdout
        assert "MASQ_RAILS=2" in env and f"MASQ_UNDERLAY_IP1={ip}" in env, env


def test_roce_over_rail_1_stays_on_rail_1s_segment(testbed):
    size, iters = 65536, 100
    argv = ["ib_write_bw", "-d", "rxe1", "-x", "1", "-F", "-u", "18", "-s", str(size),
            "-n", str(iters), "-p", "18701"]
    before = link_bytes(testbed, "host2")
    srv = testbed.spawn("host2", *argv)
    try:
        testbed.wait_listening("host2", 18701)
        cli = testbed.run("host1", *argv, RAIL1["host2"], check=False)
    except BaseException:
        srv.kill()
        finish(srv)
        raise
    _, out = finish_pair(srv, cli)
    assert parse_bw(out)["iterations"] == iters
    after = link_bytes(testbed, "host2")
    moved = size * iters
    rail1_rx = after["eth1"][0] - before["eth1"][0]
    rail0_rx = after["eth0"][0] - before["eth0"][0]
    assert rail1_rx >= moved, (rail1_rx, moved)
    # Rail 0 carries only the suite's own control traffic meanwhile.
    assert rail0_rx < moved // 10, (rail0_rx, moved)
