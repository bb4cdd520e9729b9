//! The protocol, defined once. Rust types, encoders and decoders come from
//! here through the macros in `wire.rs`, and so does the C header
//! `frontend-provider/include/masq_proto.h` (see `cgen.rs`).
//!
//! Layout rule: every field sits at a multiple of its own size, with
//! explicit `reserved` bytes where C would pad (checked at compile time).
//! Enum-like fields list their allowed values with `in`, using
//! libibverbs' numbering.
//!
//! The `peers` messages travel between masqds only (the CM exchange, see
//! `backend/src/peer/`, whose `wire.rs` encodes them). Their structs are
//! named `Peer*` and their constants `PEER_*`, which keeps them out of the
//! C header: libmasq never sees them.

use crate::wire::{constants, messages, wire_structs};

constants! {
    /// Protocol version carried in every header.
    VERSION: u16 = 2;
    /// Largest datagram either side sends or accepts.
    MAX_MESSAGE: usize = 4096;
    /// Size of the common header.
    HEADER_SIZE: usize = 16;
    /// Reply opcode = request opcode | REPLY.
    REPLY: u16 = 0x8000;
    /// Opcodes from here (below REPLY) are asynchronous notices.
    NOTICE_BASE: u16 = 0x4000;
    /// Opcodes from here (below NOTICE_BASE) are masqd-to-masqd messages.
    /// None gets a reply; the frontend never sends or receives them.
    PEER_BASE: u16 = 0x2000;
    /// Requests with opcodes POSTED_FIRST..=POSTED_LAST are posted: the
    /// frontend does not wait and the backend sends no reply, not even an
    /// error (it logs and counts a refusal instead).
    POSTED_FIRST: u16 = 12;
    POSTED_LAST: u16 = 15;
    /// Feature bit: the frontend accepts asynchronous notices.
    FEATURE_NOTICES: u32 = 1 << 0;
    /// Feature bit: the backend takes posted requests (QP_MOVED,
    /// QP_DESTROYED), so the frontend may move QPs on its own fd.
    FEATURE_POSTED: u32 = 1 << 1;
    /// Features this implementation understands.
    SUPPORTED_FEATURES: u32 = FEATURE_NOTICES | FEATURE_POSTED;
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
    /// RDMA CM port spaces masq serves: RDMA_PS_TCP (RC QPs) and
    /// RDMA_PS_UDP (UD QPs; the IB CM's SIDR exchange).
    CM_PS_TCP: u32 = 0x0106;
    CM_PS_UDP: u32 = 0x0111;
    /// The Q_Key of every RDMA_PS_UDP id (the kernel's RDMA_UDP_QKEY).
    CM_UDP_QKEY: u32 = 0x0123_4567;
    /// Private data a CM message can carry (the IB CM limits once the
    /// RDMA CM header is taken out): REQ, REJ, and REP/the cap.
    CM_REQ_PRIVATE_DATA: usize = 56;
    CM_REJ_PRIVATE_DATA: usize = 148;
    CM_MAX_PRIVATE_DATA: usize = 196;
    /// The same for a UD id's SIDR REQ and REP.
    CM_SIDR_REQ_PRIVATE_DATA: usize = 180;
    CM_SIDR_REP_PRIVATE_DATA: usize = 136;
    /// SIDR REP statuses, the UNREACHABLE event's status on a UD id: no
    /// listener on the port, and a reject by the peer app.
    CM_SIDR_UNSUPPORTED: u32 = 1;
    CM_SIDR_REJECT: u32 = 2;
    /// enum rdma_cm_event_type, as librdmacm numbers it.
    CM_EVENT_ADDR_RESOLVED: u32 = 0;
    CM_EVENT_ADDR_ERROR: u32 = 1;
    CM_EVENT_ROUTE_RESOLVED: u32 = 2;
    CM_EVENT_ROUTE_ERROR: u32 = 3;
    CM_EVENT_CONNECT_REQUEST: u32 = 4;
    CM_EVENT_CONNECT_RESPONSE: u32 = 5;
    CM_EVENT_CONNECT_ERROR: u32 = 6;
    CM_EVENT_UNREACHABLE: u32 = 7;
    CM_EVENT_REJECTED: u32 = 8;
    CM_EVENT_ESTABLISHED: u32 = 9;
    CM_EVENT_DISCONNECTED: u32 = 10;
    CM_EVENT_TIMEWAIT_EXIT: u32 = 15;
    /// IB CM reject reasons carried as the REJECTED event's status: no
    /// listener on the port, and a reject by the peer app.
    CM_REJ_INVALID_SERVICE_ID: i32 = 8;
    CM_REJ_CONSUMER_DEFINED: i32 = 28;
    /// CM_RESTORE_ID: what the id was when masqd went away.
    CM_RESTORE_BOUND: u32 = 1;
    CM_RESTORE_LISTENING: u32 = 2;
    CM_RESTORE_CONNECTED: u32 = 3;
    /// A connection was being set up: it is lost (the id gets
    /// CONNECT_ERROR with ECONNRESET).
    CM_RESTORE_PENDING: u32 = 4;
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
        /// Which of the endpoint's virtual devices the session serves
        /// (`vrdmaN`'s N). An older masqd takes only 0 (it checks the
        /// byte as reserved): libmasq asks for another only when HELLO
        /// on device 0 counted more.
        vdev: u8,
        reserved: reserved[3],
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
        /// How many virtual devices the endpoint has, one per rail it is
        /// attached to; 0 from an older masqd, which means one.
        vdev_count: u8,
        reserved: reserved[5],
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

    /// Posted after the frontend moved one of its QPs itself, on its own
    /// uverbs fd (a change that carries no address: see docs/trust-model.md). Only
    /// a prompt: masqd reads the QP's state from the kernel, so a false
    /// claim changes nothing it records.
    pub struct QpMovedReq {
        qp_handle: u32,
        qp_num: u32,
        /// enum ibv_qp_type, as in ModifyQpReq
        qp_type: u32 in 2..=4 | 8..=10 | 255,
        /// enum ibv_qp_attr_mask bits the app passed
        attr_mask: u32,
        /// enum ibv_qp_state the app moved the QP to (with IBV_QP_STATE)
        qp_state: u8 in 0..=6,
        reserved: reserved[7],
    }

    pub struct ResyncQpReply {
        /// enum ibv_qp_state, as the kernel reports it now
        qp_state: u8 in 0..=6,
        /// RESYNC_* result
        result: u8 in 0..=2,
        reserved: reserved[6],
    }

    /// A CM event channel; its event socket rides along as SCM_RIGHTS in
    /// the CM_CREATE_CHANNEL reply.
    pub struct CmChannel {
        channel: u32,
        reserved: reserved[4],
    }

    pub struct CmCreateIdReq {
        channel: u32,
        /// enum rdma_port_space: RDMA_PS_TCP or RDMA_PS_UDP
        port_space: u32 in 0x0106 | 0x0111,
    }

    pub struct CmId {
        id: u32,
        reserved: reserved[4],
    }

    pub struct CmMigrateReq {
        id: u32,
        channel: u32,
    }

    /// An IPv4 socket address: addr in network byte order, port as a number.
    pub struct CmAddr {
        addr: bytes[4],
        port: u16,
        reserved: reserved[2],
    }

    pub struct CmBindReq {
        id: u32,
        reserved: reserved[4],
        addr: CmAddr,
    }

    /// The id's addresses as they are now (port 0 and 0.0.0.0 when unset).
    pub struct CmAddrs {
        src: CmAddr,
        dst: CmAddr,
    }

    pub struct CmResolveAddrReq {
        id: u32,
        timeout_ms: u32,
        /// 1 when the app named a source address.
        has_src: u8 in 0..=1,
        reserved: reserved[3],
        src: CmAddr,
        dst: CmAddr,
    }

    pub struct CmListenReq {
        id: u32,
        backlog: u32,
    }

    /// struct rdma_conn_param. In a CONNECT_REQUEST event qp_num is the
    /// peer's QP and the depths are from this side's point of view.
    pub struct CmConnParam {
        responder_resources: u8,
        initiator_depth: u8,
        flow_control: u8 in 0..=1,
        retry_count: u8 in 0..=7,
        /// 7 = retry forever
        rnr_retry_count: u8 in 0..=7,
        srq: u8 in 0..=1,
        reserved: reserved[2],
        qp_num: u32 in 0..=0xFFFFFF,
        private_data_len: len,
        private_data: blob[196; private_data_len],
    }

    pub struct CmConnectReq {
        id: u32,
        reserved: reserved[4],
        param: CmConnParam,
    }

    pub struct CmRejectReq {
        id: u32,
        private_data_len: len,
        private_data: blob[148; private_data_len],
    }

    pub struct CmInitQpAttrReq {
        id: u32,
        /// enum ibv_qp_state: INIT, RTR or RTS
        qp_state: u32 in 1..=3,
    }

    pub struct CmQpAttr {
        /// enum ibv_qp_attr_mask bits of the fields set
        attr_mask: u32,
        reserved: reserved[4],
        attr: QpAttr,
    }

    /// One RDMA CM event, pushed on the channel's event socket.
    pub struct CmEvent {
        /// The id the event is for; for CONNECT_REQUEST the new id.
        id: u32,
        /// For CONNECT_REQUEST the listening id, else 0.
        listen_id: u32,
        /// enum rdma_cm_event_type
        event: u32 in 0..=15,
        /// 0, a negative errno, or for REJECTED the IB CM reject reason
        status: i32,
        /// The id's addresses once the event is applied.
        addrs: CmAddrs,
        /// CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED, REJECTED:
        /// the peer's parameters and private data.
        param: CmConnParam,
        /// What CM_INIT_QP_ATTR would answer for INIT, RTR and RTS once
        /// this event is applied, where the event makes it known
        /// (attr_mask 0 otherwise): ROUTE_RESOLVED carries INIT's,
        /// CONNECT_REQUEST and CONNECT_RESPONSE all three. The frontend's
        /// rdma_init_qp_attr answers from them without a round trip.
        /// On a UD id's ESTABLISHED, rtr_attr instead names the peer as
        /// rdma_ud_param does: ah_attr (virtual), qkey and dest_qp_num
        /// (mask IBV_QP_AV | IBV_QP_QKEY | IBV_QP_DEST_QPN).
        init_attr: CmQpAttr,
        rtr_attr: CmQpAttr,
        rts_attr: CmQpAttr,
    }

    /// CREATE_AH: a UD destination by virtual address. `ah_attr` is the
    /// app's (virtual dgid and sgid index; is_global must be 1).
    pub struct CreateAhReq {
        ah_attr: AhAttr,
    }

    /// What the frontend hands the provider's create_ah: the same AH with
    /// the peer host's physical dgid, the host's sgid index and the
    /// policy's traffic class. `ah_id` names this admission in BIND_AH.
    pub struct CreateAhReply {
        ah_id: u32,
        reserved: reserved[4],
        ah_attr: AhAttr,
    }

    /// The provider created admission `ah_id`'s AH: its kernel handle, by
    /// which masqd tracks it (and destroys it on a policy reset).
    pub struct BindAhReq {
        ah_id: u32,
        ah_handle: u32,
    }

    pub struct DestroyAhReq {
        ah_handle: u32,
        reserved: reserved[4],
    }

    /// After a masqd restart, once per AH the frontend holds: its kernel
    /// handle and the virtual attributes the app created it with. masqd
    /// admits it again as CREATE_AH and BIND_AH would have (RESYNC_TRACKED)
    /// or, if the security groups no longer allow it, destroys it on the
    /// app's uverbs file (RESYNC_RESET).
    pub struct ResyncAhReq {
        ah_handle: u32,
        reserved: reserved[4],
        ah_attr: AhAttr,
    }

    pub struct ResyncAhReply {
        /// RESYNC_TRACKED or RESYNC_RESET
        result: u8 in 1..=2,
        reserved: reserved[7],
    }

    /// A received UD packet's GRH (as the app's ibv_init_ah_from_wc sees
    /// it), to be named in virtual terms: the sender host's physical
    /// source GID, this host's physical destination GID, and the sending
    /// QP (ibv_wc.src_qp).
    pub struct ResolveGrhReq {
        src_qp: u32 in 0..=0xFFFFFF,
        reserved: reserved[4],
        sgid: bytes[16],
        dgid: bytes[16],
    }

    /// The sender's virtual GID (`::ffff:vIP` in this VPC) and the virtual
    /// index of this endpoint's GID the packet was sent to.
    pub struct ResolveGrhReply {
        sgid: bytes[16],
        sgid_index: u8,
        reserved: reserved[7],
    }

    /// CM_ACCEPT_QP, on the verbs session of the QP's context: masqd
    /// moves the QP to RTR and RTS with the CM id's attributes (RTR's
    /// max_dest_rd_atomic and RTS's max_rd_atomic from `param`'s depths,
    /// as rdma_accept gives them) and then accepts as CM_ACCEPT does. The
    /// id must be a CM id of the same process and endpoint.
    pub struct CmAcceptQpReq {
        id: u32,
        qp_handle: u32,
        param: CmConnParam,
    }

    /// CM_ESTABLISH_QP, on the verbs session of the QP's context: the
    /// active side's answer to CONNECT_RESPONSE. masqd moves the QP to RTR
    /// and RTS with the CM id's attributes and then establishes as
    /// CM_ESTABLISH does (the RTU).
    pub struct CmEstablishQpReq {
        id: u32,
        qp_handle: u32,
        qp_num: u32 in 1..=0xFFFFFF,
        reserved: reserved[4],
    }

    /// After a masqd restart: an id as the app holds it, under its old
    /// number (the peer's masqd knows it by that number).
    pub struct CmRestoreIdReq {
        id: u32,
        channel: u32,
        /// enum rdma_port_space: RDMA_PS_TCP or RDMA_PS_UDP
        port_space: u32 in 0x0106 | 0x0111,
        /// CM_RESTORE_*
        state: u32 in 1..=4,
        /// CONNECTED, PENDING: 1 if this side called rdma_connect, 0 if it
        /// answers a connection request
        active: u32 in 0..=1,
        /// LISTENING: rdma_listen's backlog
        backlog: u32,
        /// CONNECTED: this side's QP and the peer's (masqd checks both
        /// against the connection it tracks for the app's QP)
        qp_num: u32 in 0..=0xFFFFFF,
        remote_qpn: u32 in 0..=0xFFFFFF,
        addrs: CmAddrs,
    }

    pub struct QpErrorNotice {
        qp_num: u32,
        /// QP_ERROR_* reason
        reason: u32 in 1..=2,
    }

    /// One side's connection parameters as the CM exchange carries them
    /// (REQ, REP); the private data follows in the message, bounded as
    /// the IB CM bounds that message's.
    pub struct PeerParams {
        /// The sender's QP
        qp_num: u32 in 0..=0xFFFFFF,
        /// Its starting PSN
        psn: u32 in 0..=0xFFFFFF,
        responder_resources: u8,
        initiator_depth: u8,
        flow_control: u8 in 0..=1,
        retry_count: u8 in 0..=7,
        /// 7 = retry forever
        rnr_retry_count: u8 in 0..=7,
        srq: u8 in 0..=1,
        reserved: reserved[2],
    }

    /// Connection request from the active side's masqd. Ids in peer
    /// messages are each host's own numbers.
    pub struct PeerReq {
        from_id: u32,
        vni: u32 in 1..=0xFFFFFF,
        /// The connecting app's vIP and port, and the one it connects to.
        src: CmAddr,
        dst: CmAddr,
        params: PeerParams,
        private_data_len: len,
        private_data: blob[CM_REQ_PRIVATE_DATA; private_data_len],
    }

    /// The passive side accepted.
    pub struct PeerRep {
        to_id: u32,
        from_id: u32,
        params: PeerParams,
        private_data_len: len,
        private_data: blob[CM_MAX_PRIVATE_DATA; private_data_len],
    }

    pub struct PeerRej {
        to_id: u32,
        /// 0 when the sender made no id (nobody listens on the port).
        from_id: u32,
        /// IB CM reject reason (16 bits in IB), the REJECTED event's status
        reason: i32 in 1..=0xFFFF,
        private_data_len: len,
        private_data: blob[CM_REJ_PRIVATE_DATA; private_data_len],
    }

    /// Ready to use: the active side's QP is at RTS.
    pub struct PeerRtu {
        to_id: u32,
        from_id: u32,
    }

    pub struct PeerDreq {
        /// 0: the sender lost the peer's id number (it restarted and its
        /// app restored the id); then from_id and from_qpn find it.
        to_id: u32,
        from_id: u32,
        /// The sender's QP: with to_id 0 it must be the one the receiver's
        /// id is connected to, so an id number alone disconnects nothing.
        from_qpn: u32 in 0..=0xFFFFFF,
        reserved: reserved[4],
    }

    /// A UD id asks the listener at dst for its QP (the IB CM's SIDR REQ).
    pub struct PeerSidrReq {
        from_id: u32,
        vni: u32 in 1..=0xFFFFFF,
        src: CmAddr,
        dst: CmAddr,
        private_data_len: len,
        private_data: blob[CM_SIDR_REQ_PRIVATE_DATA; private_data_len],
    }

    /// The answer to a SIDR REQ: the listener's app accepted with QP
    /// qp_num and Q_Key qkey (status 0), or CM_SIDR_UNSUPPORTED (nobody
    /// listens) or CM_SIDR_REJECT (it rejected).
    pub struct PeerSidrRep {
        to_id: u32,
        status: u32 in 0..=2,
        qp_num: u32 in 0..=0xFFFFFF,
        qkey: u32,
        private_data_len: len,
        private_data: blob[CM_SIDR_REP_PRIVATE_DATA; private_data_len],
    }

    /// The receiver of PEER_UD_QP (up) has it in force: its backstop lets
    /// that QP's datagrams in to the VNI's UD QPs from now on.
    pub struct PeerUdQpAck {
        vni: u32 in 1..=0xFFFFFF,
        qpn: u32 in 0..=0xFFFFFF,
    }

    /// The sender (re)started and knows no other host's UD QPs: the
    /// receiver announces its own again (PEER_UD_QP), those of the VNIs the
    /// sender's host serves.
    pub struct PeerUdQuery {
        reserved: reserved[8],
    }

    /// A UD QP of an endpoint of the sending host is up (or gone): a UD
    /// packet names its sender by host and QPN only, and the receiving
    /// masqd names it by vIP.
    pub struct PeerUdQp {
        vni: u32 in 1..=0xFFFFFF,
        /// IPv4, network byte order
        vip: bytes[4],
        qpn: u32 in 0..=0xFFFFFF,
        up: u8 in 0..=1,
        reserved: reserved[3],
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
        // UD address handles: translated and admitted by masqd, created by
        // the provider with the physical attributes masqd returns.
        8 CreateAh(CreateAhReq) => (CreateAhReply),
        9 BindAh(BindAhReq) => (),
        10 DestroyAh(DestroyAhReq) => (),
        // A received GRH back to the sender's virtual GID.
        11 ResolveGrh(ResolveGrhReq) => (ResolveGrhReply),
        // Posted (no reply): a QP moved on the app's own fd, and a QP the
        // app destroyed.
        12 QpMoved(QpMovedReq) => (),
        13 QpDestroyed(DestroyQpReq) => (),
        // RDMA CM, the kernel's rdma_ucm commands carried to masqd.
        16 CmCreateChannel() => (CmChannel),
        17 CmDestroyChannel(CmChannel) => (),
        18 CmCreateId(CmCreateIdReq) => (CmId),
        19 CmDestroyId(CmId) => (),
        20 CmMigrateId(CmMigrateReq) => (),
        21 CmBindAddr(CmBindReq) => (CmAddrs),
        22 CmResolveAddr(CmResolveAddrReq) => (CmAddrs),
        23 CmResolveRoute(CmId) => (),
        24 CmListen(CmListenReq) => (),
        25 CmConnect(CmConnectReq) => (),
        // On the passive side: accept a CONNECT_REQUEST.
        26 CmAccept(CmConnectReq) => (),
        27 CmReject(CmRejectReq) => (),
        28 CmDisconnect(CmId) => (),
        29 CmInitQpAttr(CmInitQpAttrReq) => (CmQpAttr),
        // On the active side, after CONNECT_RESPONSE: the QP is at RTS (RTU).
        30 CmEstablish(CmId) => (),
        // After a masqd restart, on a new CM connection: a channel under
        // its old number (a new event socket rides along with the reply),
        // then each id.
        31 CmRestoreChannel(CmChannel) => (),
        32 CmRestoreId(CmRestoreIdReq) => (),
        // The CM moving a QP itself: one round trip instead of an RTR
        // MODIFY_QP and an accept or establish.
        33 CmAcceptQp(CmAcceptQpReq) => (),
        34 CmEstablishQp(CmEstablishQpReq) => (),
        // After a masqd restart, once per AH the frontend holds (after
        // its QPs' RESYNC_QP).
        35 ResyncAh(ResyncAhReq) => (ResyncAhReply),
    }
    notices {
        0x4001 QpError(QpErrorNotice),
        0x4002 CmEvent(CmEvent),
    }
    // masqd to masqd: the CM exchange on the underlay. Request id and
    // status are 0.
    peers {
        0x2001 Req(PeerReq),
        0x2002 Rep(PeerRep),
        0x2003 Rej(PeerRej),
        0x2004 Rtu(PeerRtu),
        0x2005 Dreq(PeerDreq),
        0x2006 UdQp(PeerUdQp),
        0x2007 SidrReq(PeerSidrReq),
        0x2008 SidrRep(PeerSidrRep),
        0x2009 UdQuery(PeerUdQuery),
        0x200a UdQpAck(PeerUdQpAck),
    }
}
