#!/usr/bin/python3
"""An RC ping-pong client written with rdma-core's Python bindings
(pyverbs), against an `ibv_rc_pingpong -g GIDX -s SIZE -n ITERS` server:
the same "LID:QPN:PSN:GID" exchange over TCP, then ITERS ping-pongs.

pyverbs' extension modules bring libibverbs in when Python imports them,
long after a preloaded libmasq started. Prints the devices it lists and
the GIDs of the one it opens.

Usage: pyverbs_pingpong.py DEVICE GIDX SERVER PORT SIZE ITERS
"""
import ipaddress
import os
import socket
import sys

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute, GID
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

MSG_LEN = len("0000:000000:000000:00000000000000000000000000000000") + 1  # with its NUL


def show(gid):
    """A GID as inet_ntop prints it (pyverbs prints all eight groups)."""
    return socket.inet_ntop(socket.AF_INET6, ipaddress.IPv6Address(str(gid)).packed)


def exchange(server, port, lid, qpn, psn, gid):
    """ibv_rc_pingpong's client side of the address exchange."""
    wire = ipaddress.IPv6Address(str(gid)).packed.hex()
    with socket.create_connection((server, port)) as s:
        s.sendall(f"{lid:04x}:{qpn:06x}:{psn:06x}:{wire}".encode() + b"\0")
        reply = b""
        while len(reply) < MSG_LEN:
            chunk = s.recv(MSG_LEN - len(reply))
            if not chunk:
                raise SystemExit("server closed the exchange")
            reply += chunk
        s.sendall(b"done\0")
    lid, qpn, psn, wire = reply.rstrip(b"\0").decode().split(":")
    return int(lid, 16), int(qpn, 16), int(psn, 16), ipaddress.IPv6Address(bytes.fromhex(wire))


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    dev, gidx, server, port, size, iters = sys.argv[1:]
    gidx, port, size, iters = int(gidx), int(port), int(size), int(iters)
    for d in get_device_list():
        print("device", d.name.decode())
    ctx = Context(name=dev)
    for i in range(ctx.query_port(1).gid_tbl_len):
        print(f"gid {i} {show(ctx.query_gid(1, i))}")
    mine = ctx.query_gid(1, gidx)
    pd = PD(ctx)
    mr = MR(pd, size, e.IBV_ACCESS_LOCAL_WRITE)
    cq = CQ(ctx, 2, None, None, 0)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                           cap=QPCap(max_send_wr=1, max_recv_wr=1)))
    psn = os.getpid() & 0xFFFFFF
    lid, rqpn, rpsn, rgid = exchange(server, port, ctx.query_port(1).lid, qp.qp_num, psn, mine)
    print("peer", show(rgid))
    attr = QPAttr(port_num=1)
    attr.path_mtu = e.IBV_MTU_1024
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.max_rd_atomic = 1
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    attr.dest_qp_num = rqpn
    attr.rq_psn = rpsn
    attr.sq_psn = psn
    attr.ah_attr = AHAttr(port_num=1, is_global=1, dlid=lid,
                          gr=GlobalRoute(dgid=GID(rgid.exploded), sgid_index=gidx, hop_limit=1))
    qp.to_rts(attr)
    # ibv_rc_pingpong's loop: the client sends first, the next send goes
    # once the last one completed and the peer's answer arrived.
    sge = SGE(mr.buf, size, mr.lkey)
    recv, send = RecvWR(wr_id=1, num_sge=1, sg=[sge]), SendWR(wr_id=2, num_sge=1, sg=[sge])
    qp.post_recv(recv)
    qp.post_send(send)
    sent = received = 0
    pending = {1, 2}
    while sent < iters or received < iters:
        n, wcs = cq.poll()
        for wc in wcs[:n]:
            if wc.status != e.IBV_WC_SUCCESS:
                sys.exit(f"completion status {wc.status} after {sent} sent, {received} received")
            pending.discard(wc.wr_id)
            if wc.wr_id == 2:
                sent += 1
            else:
                received += 1
                if received < iters:
                    qp.post_recv(recv)
            if not pending and sent < iters:
                qp.post_send(send)
                pending = {1, 2}
    print(f"{iters} iters of {size} bytes done")


if __name__ == "__main__":
    main()
