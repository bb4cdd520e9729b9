#!/usr/bin/python3
"""How long a UD QP's INIT->RTR (ibv_modify_qp) takes: the median over N
new UD QPs, in rdma-core's Python bindings. Run it natively on rxe0 and in
an endpoint on vrdma0 (through masq, where that RTR waits for the VNI's
other hosts to let the QP's datagrams in) to compare.

Usage: ud_rtr_time.py DEVICE N [GAP_MS]

GAP_MS: a pause between each QP's INIT and its RTR, as an app that does
other work in between leaves (through masq the other hosts are told of
the QP at INIT, so by then their answers are in).
"""
import statistics
import sys
import time

import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    dev, n = sys.argv[1], int(sys.argv[2])
    gap = float(sys.argv[3]) / 1e3 if len(sys.argv) == 4 else 0.0
    ctx = Context(name=dev)
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    cap = QPCap(max_send_wr=1, max_recv_wr=1)
    times, qps = [], []
    for _ in range(n):
        qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=cap))
        init = QPAttr(qp_state=e.IBV_QPS_INIT)
        init.pkey_index, init.port_num, init.qkey = 0, 1, 0x11111111
        qp.modify(init, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
        time.sleep(gap)
        t = time.monotonic()
        qp.modify(QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
        times.append(time.monotonic() - t)
        qps.append(qp)  # kept until the end: each RTR is a new QP's
    print(f"{dev}: UD INIT->RTR median {statistics.median(times) * 1e6:.0f} us over {n} QPs"
          + (f", {gap * 1e3:g} ms after INIT" if gap else ""))


if __name__ == "__main__":
    main()
