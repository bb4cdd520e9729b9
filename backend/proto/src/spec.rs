//! The protocol, defined once. Rust types, encoders and decoders come from
//! here through the macros in `wire.rs`, and so does the C header
//! `frontend-provider/include/masq_proto.h` (see `cgen.rs`).
//!
//! Layout rule: every field sits at a multiple of its own size, with
//! explicit `reserved` bytes where C would pad (checked at compile time).
//! Enum-like fields list their allowed values with `in`, using
//! libibverbs' numbering.

use crate::wire::{constants, messages, wire_structs};

constants! {
    /// Protocol version carried in every header.
    VERSION: u16 = 1;
    /// Largest datagram either side sends or accepts.
    MAX_MESSAGE: usize = 4096;
    /// Size of the common header.
    HEADER_SIZE: usize = 16;
    /// Reply opcode = request opcode | REPLY.
    REPLY: u16 = 0x8000;
    /// Opcodes from here (below REPLY) are asynchronous notices.
    NOTICE_BASE: u16 = 0x4000;
    /// Feature bit: the frontend accepts asynchronous notices.
    FEATURE_NOTICES: u32 = 1 << 0;
    /// Features this implementation understands.
    SUPPORTED_FEATURES: u32 = FEATURE_NOTICES;
    /// Capacity of the GID table reply.
    MAX_GIDS: usize = 16;
    /// GID types, as in enum ibv_gid_type.
    GID_TYPE_IB: u32 = 0;
    GID_TYPE_ROCE_V1: u32 = 1;
    GID_TYPE_ROCE_V2: u32 = 2;
    /// QP_ERROR notice reasons.
    QP_ERROR_POLICY_RESET: u32 = 1;
    QP_ERROR_OPERATOR_TEARDOWN: u32 = 2;
    /// RESYNC_QP results: the QP is not connected, nothing to track.
    RESYNC_UNTRACKED: u32 = 0;
    /// The QP is connected and tracked again.
    RESYNC_TRACKED: u32 = 1;
    /// masqd moved the QP to ERROR: the current policy denies it, or its
    /// destination in the kernel is not the one claimed.
    RESYNC_RESET: u32 = 2;
}

wire_structs! {
    /// The common header of every message.
    pub struct Header {
        version: u16,
        opcode: u16,
        /// Whole message, header included.
        length: u32,
        request_id: u32,
        /// 0, or a negative errno in a reply (which then has no body).
        status: i32,
    }

    pub struct HelloReq {
        /// FEATURE_* bits the frontend supports.
        features: u32,
        reserved: reserved[4],
        app_name: str[32],
    }

    pub struct HelloReply {
        /// The accepted subset of the requested features.
        features: u32,
        session_id: u32,
        vdev_name: str[64],
        phys_dev_name: str[64],
        /// GUIDs as numbers; verbs shows them big-endian (htobe64).
        node_guid: u64,
        sys_image_guid: u64,
        phys_port: u8,
        gid_count: u8 in 0..=16,
        reserved: reserved[6],
    }

    pub struct QueryGidTableReq {
        port: u8,
        reserved: reserved[7],
    }

    pub struct GidEntry {
        index: u32,
        /// enum ibv_gid_type
        gid_type: u32 in 0..=2,
        gid: bytes[16],
    }

    pub struct GidTable {
        count: len,
        reserved: reserved[4],
        entries: GidEntry[MAX_GIDS; count],
    }

    /// struct ibv_qp_cap
    pub struct QpCap {
        max_send_wr: u32,
        max_recv_wr: u32,
        max_send_sge: u32,
        max_recv_sge: u32,
        max_inline_data: u32,
    }

    /// struct ibv_ah_attr with its global route flattened in.
    pub struct AhAttr {
        dgid: bytes[16],
        flow_label: u32 in 0..=0xFFFFF,
        sgid_index: u8,
        hop_limit: u8,
        traffic_class: u8,
        is_global: u8 in 0..=1,
        dlid: u16,
        sl: u8 in 0..=15,
        src_path_bits: u8,
        static_rate: u8,
        port_num: u8,
        reserved: reserved[2],
    }

    /// The fields of struct ibv_qp_attr that masq carries. A sender copies
    /// only the fields named in the attribute mask and zeroes the others.
    pub struct QpAttr {
        /// enum ibv_qp_state, RESET..ERR
        qp_state: u8 in 0..=6,
        cur_qp_state: u8 in 0..=6,
        /// enum ibv_mtu (0 when unset)
        path_mtu: u8 in 0..=5,
        /// enum ibv_mig_state
        path_mig_state: u8 in 0..=2,
        qkey: u32,
        rq_psn: u32,
        sq_psn: u32,
        dest_qp_num: u32,
        qp_access_flags: u32,
        pkey_index: u16,
        en_sqd_async_notify: u8 in 0..=1,
        sq_draining: u8 in 0..=1,
        max_rd_atomic: u8,
        max_dest_rd_atomic: u8,
        /// 5-bit IB encoding
        min_rnr_timer: u8 in 0..=31,
        port_num: u8,
        /// 5-bit IB encoding
        timeout: u8 in 0..=31,
        retry_cnt: u8 in 0..=7,
        /// 7 = retry forever
        rnr_retry: u8 in 0..=7,
        reserved: reserved[1],
        rate_limit: u32,
        cap: QpCap,
        ah_attr: AhAttr,
    }

    pub struct ModifyQpReq {
        qp_handle: u32,
        qp_num: u32,
        /// enum ibv_qp_type: RC, UC, UD, RAW_PACKET, XRC_SEND, XRC_RECV, DRIVER
        qp_type: u32 in 2..=4 | 8..=10 | 255,
        /// enum ibv_qp_attr_mask bits
        attr_mask: u32,
        attr: QpAttr,
    }

    pub struct QueryQpReq {
        qp_handle: u32,
        attr_mask: u32,
    }

    pub struct DestroyQpReq {
        qp_handle: u32,
        qp_num: u32,
    }

    /// After masqd restarted: a QP the frontend had set up in an earlier
    /// session, named again so that masqd tracks it. Only the handle is
    /// checked by the kernel (QUERY_QP on the session's fd); masqd reads
    /// the state, destination QPN and physical dgid from there and treats
    /// the rest as claims to verify.
    pub struct ResyncQpReq {
        qp_handle: u32,
        qp_num: u32,
        /// enum ibv_qp_type, as in ModifyQpReq
        qp_type: u32 in 2..=4 | 8..=10 | 255,
        /// The virtual sgid index the app set with IBV_QP_AV.
        sgid_index: u8,
        /// 1 when the app set a destination (then dgid is its virtual dgid).
        has_route: u8 in 0..=1,
        reserved: reserved[2],
        dgid: bytes[16],
    }

    pub struct ResyncQpReply {
        /// enum ibv_qp_state, as the kernel reports it now
        qp_state: u8 in 0..=6,
        /// RESYNC_* result
        result: u8 in 0..=2,
        reserved: reserved[6],
    }

    pub struct QpErrorNotice {
        qp_num: u32,
        /// QP_ERROR_* reason
        reason: u32 in 1..=2,
    }
}

messages! {
    requests {
        1 Hello(HelloReq) => (HelloReply),
        // The uverbs fd rides along as SCM_RIGHTS.
        2 OpenDevice() => (),
        3 QueryGidTable(QueryGidTableReq) => (GidTable),
        4 ModifyQp(ModifyQpReq) => (),
        5 QueryQp(QueryQpReq) => (QpAttr),
        6 DestroyQp(DestroyQpReq) => (),
        // After a masqd restart, once per QP the frontend knows of.
        7 ResyncQp(ResyncQpReq) => (ResyncQpReply),
    }
    notices {
        0x4001 QpError(QpErrorNotice),
    }
}
