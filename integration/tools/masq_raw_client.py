#!/usr/bin/env python3
"""Send hand-made, mostly malformed protocol messages to masqd from inside
an endpoint and print what comes back, one JSON line per case
(`--foreign HANDLE QPN`: only the cases naming another session's QP):
{"case": ..., "status": <reply status or null>, "closed": <bool>}.
`--hoard SESSIONS CHANNELS SECONDS`: open up to SESSIONS sessions and on
them up to CHANNELS CM event channels, print what was got and the first
refusals as one JSON line, and hold it all for SECONDS (issue 51).
Layouts follow backend/proto/src/spec.rs (header '<HHIIi', little-endian)."""
import array
import json
import os
import socket
import struct
import sys

SOCK = os.environ.get("MASQ_SOCKET", "/run/masq/masq.sock")
HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                      "frontend-provider", "include", "masq_proto.h")


def protocol_version():
    """MASQ_VERSION as the generated C header (from spec.rs) has it."""
    with open(HEADER) as f:
        for line in f:
            if line.startswith("#define MASQ_VERSION "):
                return int(line.split()[2])
    raise SystemExit(f"no MASQ_VERSION in {HEADER}")


VERSION = protocol_version()
HELLO, OPEN_DEVICE, QUERY_GID_TABLE, MODIFY_QP, QUERY_QP, RESYNC_QP = 1, 2, 3, 4, 5, 7
CM_CREATE_CHANNEL = 16
# libmasq's CM connection holds at most this many channels.
CHANNELS_PER_SESSION = 256
MODIFY_QP_BODY = 108


def msg(opcode, body=b"", version=VERSION, length=None, req_id=7):
    n = 16 + len(body) if length is None else length
    return struct.pack("<HHIIi", version, opcode, n, req_id, 0) + body


def hello(name=b"raw-client"):
    return msg(HELLO, struct.pack("<I4s32s", 0, b"", name))


def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(SOCK)
    return s


def exchange(s, data, fds=()):
    if fds:
        s.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        s.send(data)
    reply = s.recv(8192)
    status = struct.unpack_from("<i", reply, 12)[0] if len(reply) >= 16 else None
    try:
        s.settimeout(0.5)
        closed = s.recv(8192) == b""
    except socket.timeout:
        closed = False
    finally:
        s.settimeout(10)
    return status, closed


def uverbs_fd():
    """The tenant's own uverbs file, as libmasq would pass it."""
    name = sorted(os.listdir("/sys/class/infiniband_verbs"))
    name = [n for n in name if n.startswith("uverbs")][0]
    return os.open(f"/dev/infiniband/{name}", os.O_RDWR)


def modify_qp(handle, mask, state, sgid_index=0, dgid=b"\x00" * 16):
    """MODIFY_QP of an RC QP; attr layout per spec.rs (ah_attr at 60)."""
    attr = bytearray(92)
    attr[0] = state
    attr[60:76] = dgid
    attr[80] = sgid_index
    attr[83] = 1  # is_global
    attr[89] = 1  # port
    return msg(MODIFY_QP, struct.pack("<IIII", handle, 17, 2, mask) + bytes(attr))


def resync_qp(handle, qpn):
    """RESYNC_QP of an RC QP said to be set towards 10.0.0.2."""
    dgid = b"\x00" * 10 + b"\xff\xff" + bytes([10, 0, 0, 2])
    return msg(RESYNC_QP, struct.pack("<IIIBBH", handle, qpn, 2, 1, 1, 0) + dgid)


def run(case, *messages, fds=(), greet=False, opened=False):
    s = connect()
    if greet or opened:
        exchange(s, hello())
    if opened:
        fd = uverbs_fd()
        exchange(s, msg(OPEN_DEVICE), (fd,))
        os.close(fd)
    status = closed = None
    for m in messages:
        status, closed = exchange(s, m, fds)
    print(json.dumps({"case": case, "status": status, "closed": closed}), flush=True)
    s.close()


def foreign(handle, qpn):
    """Name another session's QP (its handle and QPN, from masqctl) from a
    session of our own: ERROR it, claim it after a 'restart'."""
    IBV_QP_STATE, IBV_QPS_ERR = 1, 6
    run("foreign_modify", modify_qp(handle, IBV_QP_STATE, IBV_QPS_ERR), opened=True)
    run("foreign_resync", resync_qp(handle, qpn), opened=True)
    return 0


def status_of(s, data):
    """The reply's status, or None if masqd closed the session."""
    s.send(data)
    reply = s.recv(8192)  # a channel's descriptor, if any, is closed here
    return struct.unpack_from("<i", reply, 12)[0] if len(reply) >= 16 else None


def open_device(s, fd):
    """OPEN_DEVICE with fd: the reply's status, None if masqd closed."""
    s.sendmsg([msg(OPEN_DEVICE)],
              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    reply = s.recv(8192)
    return struct.unpack_from("<i", reply, 12)[0] if len(reply) >= 16 else None


def hoard(sessions, channels, seconds):
    """What a tenant makes masqd hold: sessions (HELLO and OPEN_DEVICE
    each, as CM requests need the device open), then event channels over
    them; both stop at the first refusal."""
    import time
    held, got = [], {"sessions": 0, "session_refused": None,
                     "channels": 0, "channel_refused": None}
    fd = uverbs_fd()
    for _ in range(sessions):
        s = connect()
        st = status_of(s, hello(b"hoarder"))
        if st == 0:
            st = open_device(s, fd)
        if st != 0:
            got["session_refused"] = st
            s.close()
            break
        held.append(s)
        got["sessions"] += 1
    for s in held:
        for _ in range(CHANNELS_PER_SESSION):
            if got["channels"] >= channels:
                break
            st = status_of(s, msg(CM_CREATE_CHANNEL))
            if st != 0:
                got["channel_refused"] = st
                break
            got["channels"] += 1
        if got["channel_refused"] is not None or got["channels"] >= channels:
            break
    print(json.dumps(got), flush=True)
    time.sleep(seconds)
    return 0


def main():
    if sys.argv[1:2] == ["--foreign"]:
        return foreign(int(sys.argv[2]), int(sys.argv[3], 0))
    if sys.argv[1:2] == ["--hoard"]:
        return hoard(*(int(a) for a in sys.argv[2:5]))
    null = os.open("/dev/null", os.O_RDONLY)
    run("short", b"\x01\x00\x01")
    run("bad_version", msg(HELLO, struct.pack("<I4s32s", 0, b"", b"x"), version=9))
    run("length_mismatch", msg(HELLO, struct.pack("<I4s32s", 0, b"", b"x"), length=999))
    run("oversize", msg(HELLO, b"\x00" * 8000))
    run("unknown_opcode", msg(0x77, b"\x00" * 8))
    run("before_hello", msg(MODIFY_QP, struct.pack("<IIII", 1, 1, 2, 0) + b"\x00" * 92))
    run("unterminated_name", hello(b"A" * 32))
    # HELLO's byte 4 names the virtual device; its reserved bytes follow.
    run("reserved_not_zero", msg(HELLO, struct.pack("<I4s32s", 0, b"\x00\x01", b"x")))
    run("no_such_device", msg(HELLO, struct.pack("<I4s32s", 0, b"\x01", b"x")))
    run("second_hello", hello(), greet=True)
    run("modify_before_open", msg(MODIFY_QP, struct.pack("<IIII", 1, 1, 2, 0) + b"\x00" * 92),
        greet=True)
    run("cm_before_open", msg(CM_CREATE_CHANNEL), greet=True)
    run("open_without_fd", msg(OPEN_DEVICE), greet=True)
    run("open_with_wrong_fd", msg(OPEN_DEVICE), fds=(null,), greet=True)
    bad_state = struct.pack("<IIII", 1, 1, 2, 1) + bytes([9]) + b"\x00" * 91
    run("bad_qp_state", msg(MODIFY_QP, bad_state), greet=True)
    run("bad_qp_type", msg(MODIFY_QP, struct.pack("<IIII", 1, 1, 77, 0) + b"\x00" * 92),
        greet=True)
    run("bad_port", msg(QUERY_GID_TABLE, struct.pack("<B7s", 9, b"")), greet=True)
    # With the tenant's real uverbs fd: handles are per fd, so a handle the
    # fd does not hold (forged, or another session's) is the kernel's ENOENT.
    IBV_QP_STATE, IBV_QP_AV = 1, 1 << 7
    run("forged_qp_handle", modify_qp(0x7FFF0000, IBV_QP_STATE, 1), opened=True)
    vip_peer = b"\x00" * 10 + b"\xff\xff" + bytes([10, 0, 0, 2])
    run("gid_index_outside_table",
        modify_qp(0, IBV_QP_STATE | IBV_QP_AV, 2, sgid_index=99, dgid=vip_peer), opened=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
