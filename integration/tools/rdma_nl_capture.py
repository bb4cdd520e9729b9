#!/usr/bin/env python3
"""Print, in hex, the raw rdma netlink reply to RDMA_NLDEV_CMD_RES_QP_GET
for device index DEV (a dump, or with LQPN and PORT a single-QP query).
Used once to capture the fixtures of backend/src/kernel/rdma_nl.rs's tests.

    rdma_nl_capture.py DEV [LQPN PORT]
"""
import socket
import struct
import sys

NETLINK_RDMA = 20
NLM_F_REQUEST, NLM_F_DUMP = 1, 0x300
TYPE = (5 << 10) | 10  # RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RES_QP_GET)


def attr(kind, value):
    return struct.pack("=HHI", 8, kind, value)


def main():
    dev = int(sys.argv[1])
    body = attr(1, dev)
    flags = NLM_F_REQUEST | NLM_F_DUMP
    if len(sys.argv) == 4:
        body += attr(3, int(sys.argv[3])) + attr(21, int(sys.argv[2], 0))
        flags = NLM_F_REQUEST
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_RDMA)
    s.bind((0, 0))
    s.send(struct.pack("=IHHII", 16 + len(body), TYPE, flags, 1, 0) + body)
    while True:
        data = s.recv(65536)
        print(data.hex())
        kind = struct.unpack_from("=H", data, 4)[0]
        if flags == NLM_F_REQUEST or kind in (2, 3):  # reply, ERROR, DONE
            break


if __name__ == "__main__":
    main()
