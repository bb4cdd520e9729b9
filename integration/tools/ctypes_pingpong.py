#!/usr/bin/python3
"""An RC ping-pong client in plain Python: libibverbs loaded with
ctypes.CDLL (dlopen), its functions looked up on that handle, and the
provider's post/poll functions called through the context's op table as
verbs.h's inline helpers do. Runs against an `ibv_rc_pingpong -g GIDX -s
SIZE -n ITERS` server (the same "LID:QPN:PSN:GID" exchange over TCP).

Prints the devices it lists and the GIDs of the one it opens.

Usage: ctypes_pingpong.py DEVICE GIDX SERVER PORT SIZE ITERS
"""
import ctypes as C
import os
import socket
import sys

u8, u16, u32, u64 = C.c_uint8, C.c_uint16, C.c_uint32, C.c_uint64
MSG_LEN = len("0000:000000:000000:00000000000000000000000000000000") + 1  # with its NUL

# Layouts from <infiniband/verbs.h>; only the fields used here are named.
class GID(C.Union):  # union ibv_gid: 8-byte aligned by its subnet_prefix/interface_id view
    _fields_ = [("raw", u8 * 16), ("global_", u64 * 2)]


class GlobalRoute(C.Structure):
    _fields_ = [("dgid", GID), ("flow_label", u32), ("sgid_index", u8),
                ("hop_limit", u8), ("traffic_class", u8)]


class AHAttr(C.Structure):
    _fields_ = [("grh", GlobalRoute), ("dlid", u16), ("sl", u8), ("src_path_bits", u8),
                ("static_rate", u8), ("is_global", u8), ("port_num", u8)]


class QPCap(C.Structure):
    _fields_ = [("max_send_wr", u32), ("max_recv_wr", u32), ("max_send_sge", u32),
                ("max_recv_sge", u32), ("max_inline_data", u32)]


class QPAttr(C.Structure):
    _fields_ = [("qp_state", C.c_int), ("cur_qp_state", C.c_int), ("path_mtu", C.c_int),
                ("path_mig_state", C.c_int), ("qkey", u32), ("rq_psn", u32), ("sq_psn", u32),
                ("dest_qp_num", u32), ("qp_access_flags", C.c_uint), ("cap", QPCap),
                ("ah_attr", AHAttr), ("alt_ah_attr", AHAttr), ("pkey_index", u16),
                ("alt_pkey_index", u16), ("en_sqd_async_notify", u8), ("sq_draining", u8),
                ("max_rd_atomic", u8), ("max_dest_rd_atomic", u8), ("min_rnr_timer", u8),
                ("port_num", u8), ("timeout", u8), ("retry_cnt", u8), ("rnr_retry", u8),
                ("alt_port_num", u8), ("alt_timeout", u8), ("rate_limit", u32)]


class QPInitAttr(C.Structure):
    _fields_ = [("qp_context", C.c_void_p), ("send_cq", C.c_void_p), ("recv_cq", C.c_void_p),
                ("srq", C.c_void_p), ("cap", QPCap), ("qp_type", C.c_int), ("sq_sig_all", C.c_int)]


class PortAttr(C.Structure):
    _fields_ = [("state", C.c_int), ("max_mtu", C.c_int), ("active_mtu", C.c_int),
                ("gid_tbl_len", C.c_int), ("port_cap_flags", u32), ("max_msg_sz", u32),
                ("bad_pkey_cntr", u32), ("qkey_viol_cntr", u32), ("pkey_tbl_len", u16),
                ("lid", u16), ("rest", u8 * 32)]


class MR(C.Structure):
    _fields_ = [("context", C.c_void_p), ("pd", C.c_void_p), ("addr", C.c_void_p),
                ("length", C.c_size_t), ("handle", u32), ("lkey", u32), ("rkey", u32)]


class QP(C.Structure):
    _fields_ = [("context", C.c_void_p), ("qp_context", C.c_void_p), ("pd", C.c_void_p),
                ("send_cq", C.c_void_p), ("recv_cq", C.c_void_p), ("srq", C.c_void_p),
                ("handle", u32), ("qp_num", u32)]


class SGE(C.Structure):
    _fields_ = [("addr", u64), ("length", u32), ("lkey", u32)]


class RecvWR(C.Structure):
    _fields_ = [("wr_id", u64), ("next", C.c_void_p), ("sg_list", C.POINTER(SGE)),
                ("num_sge", C.c_int)]


class SendWR(C.Structure):
    # The unions after imm_data (wr, qp_type, bind_mw/tso) as opaque space.
    _fields_ = [("wr_id", u64), ("next", C.c_void_p), ("sg_list", C.POINTER(SGE)),
                ("num_sge", C.c_int), ("opcode", C.c_int), ("send_flags", C.c_uint),
                ("imm_data", u32), ("wr", u64 * 4), ("qp_type", u32), ("bind_mw", u64 * 6)]


class WC(C.Structure):
    _fields_ = [("wr_id", u64), ("status", C.c_int), ("opcode", C.c_int), ("vendor_err", u32),
                ("byte_len", u32), ("imm_data", u32), ("qp_num", u32), ("src_qp", u32),
                ("wc_flags", C.c_uint), ("pkey_index", u16), ("slid", u16), ("sl", u8),
                ("dlid_path_bits", u8)]


assert C.sizeof(SendWR) == 128 and C.sizeof(WC) == 48 and C.sizeof(QPAttr) == 144
assert C.sizeof(QPInitAttr) == 64 and PortAttr.lid.offset == 34

# struct ibv_context: the device pointer, then the op table; the slots of
# the provider's poll_cq, post_send and post_recv in it.
OPS_OFFSET, POLL_CQ, POST_SEND, POST_RECV = 8, 11, 25, 26
POLL_FN = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int, C.POINTER(WC))
POST_SEND_FN = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(SendWR), C.POINTER(C.c_void_p))
POST_RECV_FN = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(RecvWR), C.POINTER(C.c_void_p))

IBV_QPT_RC, IBV_MTU_1024, IBV_WR_SEND, IBV_SEND_SIGNALED = 2, 3, 2, 2
IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS = 1, 2, 3
IBV_QP_STATE, IBV_QP_ACCESS_FLAGS, IBV_QP_PKEY_INDEX, IBV_QP_PORT = 1, 1 << 3, 1 << 4, 1 << 5
IBV_QP_AV, IBV_QP_PATH_MTU, IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT = 1 << 7, 1 << 8, 1 << 9, 1 << 10
IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN, IBV_QP_MAX_QP_RD_ATOMIC = 1 << 11, 1 << 12, 1 << 13
IBV_QP_MIN_RNR_TIMER, IBV_QP_SQ_PSN, IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 15, 1 << 16, 1 << 17
IBV_QP_DEST_QPN, IBV_ACCESS_LOCAL_WRITE = 1 << 20, 1


def op(ctx, slot, kind):
    ptr = C.c_void_p.from_address(ctx + OPS_OFFSET + slot * C.sizeof(C.c_void_p)).value
    return kind(ptr)


def exchange(server, port, lid, qpn, psn, gid):
    """ibv_rc_pingpong's client side of the address exchange."""
    with socket.create_connection((server, port)) as s:
        s.sendall(f"{lid:04x}:{qpn:06x}:{psn:06x}:{gid.hex()}".encode() + b"\0")
        reply = b""
        while len(reply) < MSG_LEN:
            chunk = s.recv(MSG_LEN - len(reply))
            if not chunk:
                sys.exit("server closed the exchange")
            reply += chunk
        s.sendall(b"done\0")
    lid, qpn, psn, wire = reply.rstrip(b"\0").decode().split(":")
    return int(lid, 16), int(qpn, 16), int(psn, 16), bytes.fromhex(wire)


def check(rc, what):
    if rc:
        sys.exit(f"{what} failed: {os.strerror(C.get_errno() or rc)}")


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    dev_name, gidx, server, port, size, iters = sys.argv[1:]
    gidx, port, size, iters = int(gidx), int(port), int(size), int(iters)
    v = C.CDLL("libibverbs.so.1", use_errno=True)
    for name, res, args in [
        ("ibv_get_device_list", C.POINTER(C.c_void_p), [C.POINTER(C.c_int)]),
        ("ibv_get_device_name", C.c_char_p, [C.c_void_p]),
        ("ibv_open_device", C.c_void_p, [C.c_void_p]),
        ("ibv_query_port", C.c_int, [C.c_void_p, u8, C.POINTER(PortAttr)]),
        ("ibv_query_gid", C.c_int, [C.c_void_p, u8, C.c_int, C.POINTER(GID)]),
        ("ibv_alloc_pd", C.c_void_p, [C.c_void_p]),
        ("ibv_reg_mr", C.POINTER(MR), [C.c_void_p, C.c_void_p, C.c_size_t, C.c_int]),
        ("ibv_create_cq", C.c_void_p, [C.c_void_p, C.c_int, C.c_void_p, C.c_void_p, C.c_int]),
        ("ibv_create_qp", C.POINTER(QP), [C.c_void_p, C.POINTER(QPInitAttr)]),
        ("ibv_modify_qp", C.c_int, [C.POINTER(QP), C.POINTER(QPAttr), C.c_int]),
    ]:
        getattr(v, name).restype, getattr(v, name).argtypes = res, args
    n = C.c_int()
    devices = v.ibv_get_device_list(C.byref(n))
    if not devices:
        sys.exit(f"ibv_get_device_list: {os.strerror(C.get_errno())}")
    dev = None
    for i in range(n.value):
        name = v.ibv_get_device_name(devices[i]).decode()
        print("device", name)
        if name == dev_name:
            dev = devices[i]
    if dev is None:
        sys.exit(f"no device {dev_name}")
    ctx = v.ibv_open_device(dev)
    if not ctx:
        sys.exit(f"ibv_open_device: {os.strerror(C.get_errno())}")
    pattr = PortAttr()
    check(v.ibv_query_port(ctx, 1, C.byref(pattr)), "ibv_query_port")
    gids = []
    for i in range(pattr.gid_tbl_len):
        gid = GID()
        check(v.ibv_query_gid(ctx, 1, i, C.byref(gid)), "ibv_query_gid")
        gids.append(bytes(gid.raw))
        print(f"gid {i} {socket.inet_ntop(socket.AF_INET6, gids[-1])}")
    buf = C.create_string_buffer(size)
    pd = v.ibv_alloc_pd(ctx)
    mr = v.ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE)
    cq = v.ibv_create_cq(ctx, 2, None, None, 0)
    init = QPInitAttr(send_cq=cq, recv_cq=cq, qp_type=IBV_QPT_RC,
                      cap=QPCap(max_send_wr=1, max_recv_wr=1, max_send_sge=1, max_recv_sge=1))
    qp = v.ibv_create_qp(pd, C.byref(init))
    if not (pd and mr and cq and qp):
        sys.exit(f"pd/mr/cq/qp: {os.strerror(C.get_errno())}")
    attr = QPAttr(qp_state=IBV_QPS_INIT, port_num=1)
    check(v.ibv_modify_qp(qp, C.byref(attr), IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT
                          | IBV_QP_ACCESS_FLAGS), "INIT")
    psn = os.getpid() & 0xFFFFFF
    lid, rqpn, rpsn, rgid = exchange(server, port, pattr.lid, qp.contents.qp_num, psn, gids[gidx])
    print("peer", socket.inet_ntop(socket.AF_INET6, rgid))
    grh = GlobalRoute(dgid=GID(raw=(u8 * 16)(*rgid)), sgid_index=gidx, hop_limit=1)
    attr = QPAttr(qp_state=IBV_QPS_RTR, path_mtu=IBV_MTU_1024, dest_qp_num=rqpn, rq_psn=rpsn,
                  max_dest_rd_atomic=1, min_rnr_timer=12,
                  ah_attr=AHAttr(grh=grh, dlid=lid, is_global=1, port_num=1))
    check(v.ibv_modify_qp(qp, C.byref(attr), IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU
                          | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC
                          | IBV_QP_MIN_RNR_TIMER), "RTR")
    attr = QPAttr(qp_state=IBV_QPS_RTS, timeout=14, retry_cnt=7, rnr_retry=7, sq_psn=psn,
                  max_rd_atomic=1)
    check(v.ibv_modify_qp(qp, C.byref(attr), IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT
                          | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC), "RTS")
    poll, post_send = op(ctx, POLL_CQ, POLL_FN), op(ctx, POST_SEND, POST_SEND_FN)
    post_recv = op(ctx, POST_RECV, POST_RECV_FN)
    sge = SGE(addr=C.addressof(buf), length=size, lkey=mr.contents.lkey)
    rwr = RecvWR(wr_id=1, sg_list=C.pointer(sge), num_sge=1)
    swr = SendWR(wr_id=2, sg_list=C.pointer(sge), num_sge=1, opcode=IBV_WR_SEND,
                 send_flags=IBV_SEND_SIGNALED)
    bad = C.c_void_p()
    qp_ptr = C.cast(qp, C.c_void_p)
    check(post_recv(qp_ptr, C.byref(rwr), C.byref(bad)), "post_recv")
    check(post_send(qp_ptr, C.byref(swr), C.byref(bad)), "post_send")
    # ibv_rc_pingpong's loop: the next send goes once the last one
    # completed and the peer's answer arrived.
    sent = received = 0
    pending = {1, 2}
    wc = WC()
    while sent < iters or received < iters:
        got = poll(cq, 1, C.byref(wc))
        if got < 0:
            sys.exit("poll_cq failed")
        if got == 0:
            continue
        if wc.status:
            sys.exit(f"completion status {wc.status} after {sent} sent, {received} received")
        pending.discard(wc.wr_id)
        if wc.wr_id == 2:
            sent += 1
        else:
            received += 1
            if received < iters:
                check(post_recv(qp_ptr, C.byref(rwr), C.byref(bad)), "post_recv")
        if not pending and sent < iters:
            check(post_send(qp_ptr, C.byref(swr), C.byref(bad)), "post_send")
            pending = {1, 2}
    print(f"{iters} iters of {size} bytes done")


if __name__ == "__main__":
    main()
