//! Golden vectors: golden/NAME.hex holds the encoding of each instance
//! below; frontend-provider/tests/test_proto.c checks the same files
//! except `peer_*` (masqd-to-masqd messages, not in the C header).
//! `MASQ_PROTO_BLESS=1 cargo test -p masq-proto` rewrites them.

use masq_proto::*;
use std::path::PathBuf;

#[allow(clippy::large_enum_variant)] // test vectors, built once
enum Msg {
    Req(Request),
    Rep(Reply),
    Notice(NoticeBody),
    Peer(PeerBody),
}

fn req(request_id: u32, body: RequestBody) -> Msg {
    Msg::Req(Request { request_id, body })
}

fn rep(request_id: u32, body: ReplyBody) -> Msg {
    Msg::Rep(Reply::Ok { request_id, body })
}

fn v4_mapped(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

const LINK_LOCAL: [u8; 16] = [
    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x42, 0x0a, 0xff, 0xfe, 0x00, 0x00, 0x05,
];

fn ah_to_peer() -> AhAttr {
    AhAttr {
        dgid: v4_mapped([10, 0, 0, 6]),
        sgid_index: 1,
        hop_limit: 64,
        is_global: 1,
        port_num: 1,
        ..Default::default()
    }
}

/// What the CM gives for RTR towards 10.0.0.6's QP 0x12.
fn rtr_to_peer() -> CmQpAttr {
    CmQpAttr {
        // IBV_QP_STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER
        attr_mask: 1 | (1 << 7) | (1 << 8) | (1 << 20) | (1 << 12) | (1 << 17) | (1 << 15),
        attr: QpAttr {
            qp_state: 2,
            path_mtu: 3,
            dest_qp_num: 0x12,
            rq_psn: 0x1234,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr: ah_to_peer(),
            ..Default::default()
        },
    }
}

fn goldens() -> Vec<(&'static str, &'static str, Msg)> {
    let mut v = vec![
        (
            "hello_req",
            "HELLO request from ib_write_bw",
            req(
                1,
                RequestBody::Hello(HelloReq {
                    features: FEATURE_NOTICES,
                    app_name: "ib_write_bw".into(),
                    ..Default::default()
                }),
            ),
        ),
        (
            "hello_reply",
            "HELLO reply: vrdma0 on rxe0 port 1, two GIDs",
            rep(
                1,
                ReplyBody::Hello(HelloReply {
                    features: FEATURE_NOTICES,
                    session_id: 7,
                    vdev_name: "vrdma0".into(),
                    phys_dev_name: "rxe0".into(),
                    node_guid: 0x0042_0aff_fe00_0005,
                    sys_image_guid: 0x0042_0aff_fe00_0005,
                    phys_port: 1,
                    gid_count: 2,
                    ..Default::default()
                }),
            ),
        ),
        (
            "open_device_req",
            "OPEN_DEVICE request (fd in SCM_RIGHTS)",
            req(2, RequestBody::OpenDevice),
        ),
        (
            "open_device_reply",
            "OPEN_DEVICE reply",
            rep(2, ReplyBody::OpenDevice),
        ),
        (
            "query_gid_table_req",
            "QUERY_GID_TABLE request for port 1",
            req(3, RequestBody::QueryGidTable(QueryGidTableReq { port: 1 })),
        ),
        (
            "query_gid_table_reply",
            "QUERY_GID_TABLE reply: link-local and IPv4 RoCEv2 GIDs",
            rep(
                3,
                ReplyBody::QueryGidTable(GidTable {
                    entries: vec![
                        GidEntry {
                            index: 0,
                            gid_type: GID_TYPE_ROCE_V2,
                            gid: LINK_LOCAL,
                        },
                        GidEntry {
                            index: 1,
                            gid_type: GID_TYPE_ROCE_V2,
                            gid: v4_mapped([10, 0, 0, 5]),
                        },
                    ],
                }),
            ),
        ),
        (
            "modify_qp_req",
            "MODIFY_QP request: RC QP 0x11 INIT->RTR towards 10.0.0.6 QPN 0x12",
            req(
                4,
                RequestBody::ModifyQp(ModifyQpReq {
                    qp_handle: 1,
                    qp_num: 0x11,
                    qp_type: 2,
                    // STATE | AV | PATH_MTU | RQ_PSN | MIN_RNR_TIMER | MAX_DEST_RD_ATOMIC | DEST_QPN
                    attr_mask: 0x0012_9181,
                    attr: QpAttr {
                        qp_state: 2,
                        path_mtu: 3,
                        rq_psn: 0x1a2b3c,
                        dest_qp_num: 0x12,
                        max_dest_rd_atomic: 1,
                        min_rnr_timer: 12,
                        ah_attr: ah_to_peer(),
                        ..Default::default()
                    },
                }),
            ),
        ),
        (
            "modify_qp_reply",
            "MODIFY_QP reply: done",
            rep(4, ReplyBody::ModifyQp),
        ),
        (
            "modify_qp_reply_eacces",
            "MODIFY_QP error reply: -EACCES (denied by a security group)",
            Msg::Rep(Reply::Err {
                request_id: 9,
                opcode: 4,
                status: -13,
            }),
        ),
        (
            "query_qp_req",
            "QUERY_QP request: STATE | AV | CAP",
            req(
                5,
                RequestBody::QueryQp(QueryQpReq {
                    qp_handle: 1,
                    attr_mask: 0x0008_0081,
                }),
            ),
        ),
        (
            "query_qp_reply",
            "QUERY_QP reply: RTS, virtual dgid shown back",
            rep(
                5,
                ReplyBody::QueryQp(QpAttr {
                    qp_state: 3,
                    cur_qp_state: 3,
                    path_mtu: 3,
                    rq_psn: 0x1a2b3c,
                    sq_psn: 0x4d5e6f,
                    dest_qp_num: 0x12,
                    qp_access_flags: 0x7,
                    max_rd_atomic: 1,
                    max_dest_rd_atomic: 1,
                    min_rnr_timer: 12,
                    port_num: 1,
                    timeout: 14,
                    retry_cnt: 7,
                    rnr_retry: 7,
                    cap: QpCap {
                        max_send_wr: 128,
                        max_recv_wr: 512,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 64,
                    },
                    ah_attr: ah_to_peer(),
                    ..Default::default()
                }),
            ),
        ),
        (
            "destroy_qp_req",
            "DESTROY_QP request",
            req(
                6,
                RequestBody::DestroyQp(DestroyQpReq {
                    qp_handle: 1,
                    qp_num: 0x11,
                }),
            ),
        ),
        (
            "destroy_qp_reply",
            "DESTROY_QP reply",
            rep(6, ReplyBody::DestroyQp),
        ),
        (
            "qp_moved_req",
            "QP_MOVED (posted): RC QP 0x11 (handle 1) moved to RTS on the app's fd",
            req(
                12,
                RequestBody::QpMoved(QpMovedReq {
                    qp_handle: 1,
                    qp_num: 0x11,
                    qp_type: 2,
                    attr_mask: 0x0001_2e01,
                    qp_state: 3,
                }),
            ),
        ),
        (
            "qp_destroyed_req",
            "QP_DESTROYED (posted): QP 0x11 (handle 1) destroyed",
            req(
                13,
                RequestBody::QpDestroyed(DestroyQpReq {
                    qp_handle: 1,
                    qp_num: 0x11,
                }),
            ),
        ),
        (
            "resync_qp_req",
            "RESYNC_QP request: RC QP 0x11 (handle 1) set towards 10.0.0.6 from sgid 1",
            req(
                7,
                RequestBody::ResyncQp(ResyncQpReq {
                    qp_handle: 1,
                    qp_num: 0x11,
                    qp_type: 2,
                    sgid_index: 1,
                    has_route: 1,
                    dgid: v4_mapped([10, 0, 0, 6]),
                }),
            ),
        ),
        (
            "resync_qp_reply",
            "RESYNC_QP reply: RTS, tracked again",
            rep(
                7,
                ReplyBody::ResyncQp(ResyncQpReply {
                    qp_state: 3,
                    result: RESYNC_TRACKED as u8,
                }),
            ),
        ),
        (
            "create_ah_req",
            "CREATE_AH request: UD destination 10.0.0.6 from sgid 1",
            req(
                8,
                RequestBody::CreateAh(CreateAhReq {
                    ah_attr: ah_to_peer(),
                }),
            ),
        ),
        (
            "create_ah_reply",
            "CREATE_AH reply: AH 3 towards host 192.168.1.2 from host sgid 1, DSCP 46",
            rep(
                8,
                ReplyBody::CreateAh(CreateAhReply {
                    ah_id: 3,
                    ah_attr: AhAttr {
                        dgid: v4_mapped([192, 168, 1, 2]),
                        traffic_class: 46 << 2,
                        ..ah_to_peer()
                    },
                }),
            ),
        ),
        (
            "create_ah_reply_ehostunreach",
            "CREATE_AH error reply: -EHOSTUNREACH (no such vIP in the VPC)",
            Msg::Rep(Reply::Err {
                request_id: 8,
                opcode: 8,
                status: -113,
            }),
        ),
        (
            "bind_ah_req",
            "BIND_AH request: admission 3 is the AH of kernel handle 5",
            req(
                9,
                RequestBody::BindAh(BindAhReq {
                    ah_id: 3,
                    ah_handle: 5,
                }),
            ),
        ),
        ("bind_ah_reply", "BIND_AH reply", rep(9, ReplyBody::BindAh)),
        (
            "resync_ah_req",
            "RESYNC_AH request: the AH of kernel handle 5, made towards 10.0.0.6 from sgid 1",
            req(
                35,
                RequestBody::ResyncAh(ResyncAhReq {
                    ah_handle: 5,
                    ah_attr: ah_to_peer(),
                }),
            ),
        ),
        (
            "resync_ah_reply",
            "RESYNC_AH reply: tracked again",
            rep(
                35,
                ReplyBody::ResyncAh(ResyncAhReply {
                    result: RESYNC_TRACKED as u8,
                }),
            ),
        ),
        (
            "destroy_ah_req",
            "DESTROY_AH request: the AH of kernel handle 5",
            req(10, RequestBody::DestroyAh(DestroyAhReq { ah_handle: 5 })),
        ),
        (
            "destroy_ah_reply",
            "DESTROY_AH reply",
            rep(10, ReplyBody::DestroyAh),
        ),
        (
            "resolve_grh_req",
            "RESOLVE_GRH request: from QP 0x12 on host 192.168.1.2 to host 192.168.1.1",
            req(
                11,
                RequestBody::ResolveGrh(ResolveGrhReq {
                    src_qp: 0x12,
                    sgid: v4_mapped([192, 168, 1, 2]),
                    dgid: v4_mapped([192, 168, 1, 1]),
                }),
            ),
        ),
        (
            "resolve_grh_reply",
            "RESOLVE_GRH reply: sent by 10.0.0.6 to virtual GID index 1",
            rep(
                11,
                ReplyBody::ResolveGrh(ResolveGrhReply {
                    sgid: v4_mapped([10, 0, 0, 6]),
                    sgid_index: 1,
                }),
            ),
        ),
        (
            "qp_error_notice",
            "QP_ERROR notice: QP 0x11 reset by policy",
            Msg::Notice(NoticeBody::QpError(QpErrorNotice {
                qp_num: 0x11,
                reason: QP_ERROR_POLICY_RESET,
            })),
        ),
    ];
    v.extend(cm_goldens());
    v.extend(peer_goldens());
    v
}

fn cm_addr(a: [u8; 4], port: u16) -> CmAddr {
    CmAddr { addr: a, port }
}

fn conn_param(qp_num: u32, private_data: &[u8]) -> CmConnParam {
    CmConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        qp_num,
        private_data: private_data.to_vec(),
        ..Default::default()
    }
}

/// RDMA CM: rping's client (10.0.0.5) connecting to its server at
/// 10.0.0.6:7174, id 3 on channel 1.
fn cm_goldens() -> Vec<(&'static str, &'static str, Msg)> {
    let addrs = CmAddrs {
        src: cm_addr([10, 0, 0, 5], 40001),
        dst: cm_addr([10, 0, 0, 6], 7174),
    };
    let id = |id| CmId { id };
    vec![
        (
            "cm_create_channel_req",
            "CM_CREATE_CHANNEL request",
            req(16, RequestBody::CmCreateChannel),
        ),
        (
            "cm_create_channel_reply",
            "CM_CREATE_CHANNEL reply: channel 1 (its socket as SCM_RIGHTS)",
            rep(16, ReplyBody::CmCreateChannel(CmChannel { channel: 1 })),
        ),
        (
            "cm_destroy_channel_req",
            "CM_DESTROY_CHANNEL request: channel 1",
            req(17, RequestBody::CmDestroyChannel(CmChannel { channel: 1 })),
        ),
        (
            "cm_destroy_channel_reply",
            "CM_DESTROY_CHANNEL reply",
            rep(17, ReplyBody::CmDestroyChannel),
        ),
        (
            "cm_create_id_req",
            "CM_CREATE_ID request: RDMA_PS_TCP on channel 1",
            req(
                18,
                RequestBody::CmCreateId(CmCreateIdReq {
                    channel: 1,
                    port_space: CM_PS_TCP,
                }),
            ),
        ),
        (
            "cm_create_id_reply",
            "CM_CREATE_ID reply: id 3",
            rep(18, ReplyBody::CmCreateId(id(3))),
        ),
        (
            "cm_destroy_id_req",
            "CM_DESTROY_ID request: id 3",
            req(19, RequestBody::CmDestroyId(id(3))),
        ),
        (
            "cm_destroy_id_reply",
            "CM_DESTROY_ID reply",
            rep(19, ReplyBody::CmDestroyId),
        ),
        (
            "cm_migrate_id_req",
            "CM_MIGRATE_ID request: id 3 to channel 2",
            req(
                20,
                RequestBody::CmMigrateId(CmMigrateReq { id: 3, channel: 2 }),
            ),
        ),
        (
            "cm_migrate_id_reply",
            "CM_MIGRATE_ID reply",
            rep(20, ReplyBody::CmMigrateId),
        ),
        (
            "cm_bind_addr_req",
            "CM_BIND_ADDR request: id 3 on 0.0.0.0:7174",
            req(
                21,
                RequestBody::CmBindAddr(CmBindReq {
                    id: 3,
                    addr: cm_addr([0; 4], 7174),
                }),
            ),
        ),
        (
            "cm_bind_addr_reply",
            "CM_BIND_ADDR reply: bound to 0.0.0.0:7174",
            rep(
                21,
                ReplyBody::CmBindAddr(CmAddrs {
                    src: cm_addr([0; 4], 7174),
                    ..Default::default()
                }),
            ),
        ),
        (
            "cm_resolve_addr_req",
            "CM_RESOLVE_ADDR request: id 3 to 10.0.0.6:7174 within 2 s",
            req(
                22,
                RequestBody::CmResolveAddr(CmResolveAddrReq {
                    id: 3,
                    timeout_ms: 2000,
                    has_src: 0,
                    src: CmAddr::default(),
                    dst: addrs.dst.clone(),
                }),
            ),
        ),
        (
            "cm_resolve_addr_reply",
            "CM_RESOLVE_ADDR reply: from 10.0.0.5:40001",
            rep(22, ReplyBody::CmResolveAddr(addrs.clone())),
        ),
        (
            "cm_resolve_route_req",
            "CM_RESOLVE_ROUTE request: id 3",
            req(23, RequestBody::CmResolveRoute(id(3))),
        ),
        (
            "cm_resolve_route_reply",
            "CM_RESOLVE_ROUTE reply",
            rep(23, ReplyBody::CmResolveRoute),
        ),
        (
            "cm_listen_req",
            "CM_LISTEN request: id 3, backlog 1024",
            req(
                24,
                RequestBody::CmListen(CmListenReq {
                    id: 3,
                    backlog: 1024,
                }),
            ),
        ),
        (
            "cm_listen_reply",
            "CM_LISTEN reply",
            rep(24, ReplyBody::CmListen),
        ),
        (
            "cm_connect_req",
            "CM_CONNECT request: id 3 with QP 0x11 and 4 bytes of private data",
            req(
                25,
                RequestBody::CmConnect(CmConnectReq {
                    id: 3,
                    param: conn_param(0x11, b"ping"),
                }),
            ),
        ),
        (
            "cm_connect_reply",
            "CM_CONNECT reply",
            rep(25, ReplyBody::CmConnect),
        ),
        (
            "cm_accept_req",
            "CM_ACCEPT request: id 4 with QP 0x12",
            req(
                26,
                RequestBody::CmAccept(CmConnectReq {
                    id: 4,
                    param: conn_param(0x12, b""),
                }),
            ),
        ),
        (
            "cm_accept_reply",
            "CM_ACCEPT reply",
            rep(26, ReplyBody::CmAccept),
        ),
        (
            "cm_reject_req",
            "CM_REJECT request: id 4 with 2 bytes of private data",
            req(
                27,
                RequestBody::CmReject(CmRejectReq {
                    id: 4,
                    private_data: b"no".to_vec(),
                }),
            ),
        ),
        (
            "cm_reject_reply",
            "CM_REJECT reply",
            rep(27, ReplyBody::CmReject),
        ),
        (
            "cm_disconnect_req",
            "CM_DISCONNECT request: id 3",
            req(28, RequestBody::CmDisconnect(id(3))),
        ),
        (
            "cm_disconnect_reply",
            "CM_DISCONNECT reply",
            rep(28, ReplyBody::CmDisconnect),
        ),
        (
            "cm_init_qp_attr_req",
            "CM_INIT_QP_ATTR request: id 3, RTR",
            req(
                29,
                RequestBody::CmInitQpAttr(CmInitQpAttrReq { id: 3, qp_state: 2 }),
            ),
        ),
        (
            "cm_init_qp_attr_reply",
            "CM_INIT_QP_ATTR reply: RTR towards 10.0.0.6's QP 0x12",
            rep(
                29,
                ReplyBody::CmInitQpAttr(rtr_to_peer()),
            ),
        ),
        (
            "cm_establish_req",
            "CM_ESTABLISH request: id 3",
            req(30, RequestBody::CmEstablish(id(3))),
        ),
        (
            "cm_establish_reply",
            "CM_ESTABLISH reply",
            rep(30, ReplyBody::CmEstablish),
        ),
        (
            "cm_restore_channel_req",
            "CM_RESTORE_CHANNEL request: channel 1",
            req(31, RequestBody::CmRestoreChannel(CmChannel { channel: 1 })),
        ),
        (
            "cm_restore_channel_reply",
            "CM_RESTORE_CHANNEL reply",
            rep(31, ReplyBody::CmRestoreChannel),
        ),
        (
            "cm_restore_id_req",
            "CM_RESTORE_ID request: id 3 on channel 1, connected (active) from QP 0x11 to QP 0x12",
            req(
                32,
                RequestBody::CmRestoreId(CmRestoreIdReq {
                    id: 3,
                    channel: 1,
                    port_space: CM_PS_TCP,
                    state: CM_RESTORE_CONNECTED,
                    active: 1,
                    backlog: 0,
                    qp_num: 0x11,
                    remote_qpn: 0x12,
                    addrs: addrs.clone(),
                }),
            ),
        ),
        (
            "cm_restore_id_reply",
            "CM_RESTORE_ID reply",
            rep(32, ReplyBody::CmRestoreId),
        ),
        (
            "cm_accept_qp_req",
            "CM_ACCEPT_QP request: id 4 with QP 0x12 (handle 9)",
            req(
                33,
                RequestBody::CmAcceptQp(CmAcceptQpReq {
                    id: 4,
                    qp_handle: 9,
                    param: conn_param(0x12, b""),
                }),
            ),
        ),
        (
            "cm_accept_qp_reply",
            "CM_ACCEPT_QP reply",
            rep(33, ReplyBody::CmAcceptQp),
        ),
        (
            "cm_establish_qp_req",
            "CM_ESTABLISH_QP request: id 3 with QP 0x11 (handle 8)",
            req(
                34,
                RequestBody::CmEstablishQp(CmEstablishQpReq {
                    id: 3,
                    qp_handle: 8,
                    qp_num: 0x11,
                }),
            ),
        ),
        (
            "cm_establish_qp_reply",
            "CM_ESTABLISH_QP reply",
            rep(34, ReplyBody::CmEstablishQp),
        ),
        (
            "cm_event_notice",
            "CM_EVENT notice: CONNECT_RESPONSE for id 3 from QP 0x12, with the QP's INIT, RTR and RTS attributes",
            Msg::Notice(NoticeBody::CmEvent(CmEvent {
                id: 3,
                listen_id: 0,
                event: CM_EVENT_CONNECT_RESPONSE,
                status: 0,
                addrs,
                param: conn_param(0x12, b"pong"),
                init_attr: CmQpAttr {
                    // IBV_QP_STATE | ACCESS_FLAGS | PKEY_INDEX | PORT
                    attr_mask: 1 | (1 << 3) | (1 << 4) | (1 << 5),
                    attr: QpAttr {
                        qp_state: 1,
                        // IBV_ACCESS_REMOTE_WRITE | REMOTE_READ
                        qp_access_flags: 2 | 4,
                        port_num: 1,
                        ..Default::default()
                    },
                },
                rtr_attr: rtr_to_peer(),
                rts_attr: CmQpAttr {
                    // IBV_QP_STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC | SQ_PSN
                    attr_mask: 1 | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 13) | (1 << 16),
                    attr: QpAttr {
                        qp_state: 3,
                        timeout: 14,
                        retry_cnt: 7,
                        rnr_retry: 7,
                        sq_psn: 0x4321,
                        max_rd_atomic: 1,
                        ..Default::default()
                    },
                },
            })),
        ),
    ]
}

fn peer_params(qp_num: u32, psn: u32) -> PeerParams {
    PeerParams {
        qp_num,
        psn,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..Default::default()
    }
}

/// The same rping connection as the masqds exchange it: the client's
/// host knows the id as 3, the server's host the new id as 4.
fn peer_goldens() -> Vec<(&'static str, &'static str, Msg)> {
    vec![
        (
            "peer_req",
            "PEER_REQ: id 3's 10.0.0.5:40001 in VNI 100 to 10.0.0.6:7174, QP 0x11, 4 bytes of private data",
            Msg::Peer(PeerBody::Req(PeerReq {
                from_id: 3,
                vni: 100,
                src: cm_addr([10, 0, 0, 5], 40001),
                dst: cm_addr([10, 0, 0, 6], 7174),
                params: peer_params(0x11, 0x1234),
                private_data: b"ping".to_vec(),
            })),
        ),
        (
            "peer_rep",
            "PEER_REP: id 4 accepts for id 3 with QP 0x12, 4 bytes of private data",
            Msg::Peer(PeerBody::Rep(PeerRep {
                to_id: 3,
                from_id: 4,
                params: peer_params(0x12, 0x5678),
                private_data: b"pong".to_vec(),
            })),
        ),
        (
            "peer_rej",
            "PEER_REJ: id 4's app rejects id 3 with 2 bytes of private data",
            Msg::Peer(PeerBody::Rej(PeerRej {
                to_id: 3,
                from_id: 4,
                reason: CM_REJ_CONSUMER_DEFINED,
                private_data: b"no".to_vec(),
            })),
        ),
        (
            "peer_rtu",
            "PEER_RTU: id 3 to id 4",
            Msg::Peer(PeerBody::Rtu(PeerRtu {
                to_id: 4,
                from_id: 3,
            })),
        ),
        (
            "peer_dreq",
            "PEER_DREQ: id 4 lost (restored), found by id 3's QP 0x11",
            Msg::Peer(PeerBody::Dreq(PeerDreq {
                to_id: 0,
                from_id: 3,
                from_qpn: 0x11,
            })),
        ),
        (
            "peer_ud_qp",
            "PEER_UD_QP: UD QP 0x22 of 10.0.0.5 in VNI 100 is up",
            Msg::Peer(PeerBody::UdQp(PeerUdQp {
                vni: 100,
                vip: [10, 0, 0, 5],
                qpn: 0x22,
                up: 1,
            })),
        ),
        (
            "peer_ud_qp_ack",
            "PEER_UD_QP_ACK: UD QP 0x22 of VNI 100 is let in",
            Msg::Peer(PeerBody::UdQpAck(PeerUdQpAck { vni: 100, qpn: 0x22 })),
        ),
        (
            "peer_ud_query",
            "PEER_UD_QUERY: announce your UD QPs again",
            Msg::Peer(PeerBody::UdQuery(PeerUdQuery {})),
        ),
        (
            "peer_sidr_req",
            "PEER_SIDR_REQ: id 9 of 10.0.0.5:40002 asks 10.0.0.6:7174 in VNI 100",
            Msg::Peer(PeerBody::SidrReq(PeerSidrReq {
                from_id: 9,
                vni: 100,
                src: CmAddr {
                    addr: [10, 0, 0, 5],
                    port: 40002,
                },
                dst: CmAddr {
                    addr: [10, 0, 0, 6],
                    port: 7174,
                },
                private_data: b"ud?".to_vec(),
            })),
        ),
        (
            "peer_sidr_rep",
            "PEER_SIDR_REP: to id 9, QP 0x33 with Q_Key 0x01234567",
            Msg::Peer(PeerBody::SidrRep(PeerSidrRep {
                to_id: 9,
                status: 0,
                qp_num: 0x33,
                qkey: 0x0123_4567,
                private_data: b"ud!".to_vec(),
            })),
        ),
    ]
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden")
}

fn encode(m: &Msg) -> Vec<u8> {
    match m {
        Msg::Req(r) => r.encode(),
        Msg::Rep(r) => r.encode(),
        Msg::Notice(n) => encode_notice(n),
        Msg::Peer(p) => encode_peer(p),
    }
}

#[test]
fn golden_vectors_encode_and_decode() {
    let bless = std::env::var_os("MASQ_PROTO_BLESS").is_some();
    for (name, title, msg) in goldens() {
        let bytes = encode(&msg);
        let path = golden_dir().join(format!("{name}.hex"));
        if bless {
            std::fs::write(&path, hex::annotate(title, &bytes)).expect("write golden file");
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (MASQ_PROTO_BLESS=1 writes it)", path.display()));
        let file = hex::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            file,
            bytes,
            "{name}: encoding differs from the golden file; got\n{}",
            hex::annotate(title, &bytes)
        );
        match msg {
            Msg::Req(r) => assert_eq!(decode_request(&file), Ok(r), "{name}"),
            Msg::Rep(r) => assert_eq!(decode_reply(&file), Ok(r), "{name}"),
            Msg::Notice(n) => assert_eq!(decode_notice(&file), Ok(n), "{name}"),
            Msg::Peer(p) => assert_eq!(decode_peer(&file), Ok(p), "{name}"),
        }
    }
}

#[test]
fn every_golden_file_is_checked() {
    let names: Vec<String> = goldens().iter().map(|g| format!("{}.hex", g.0)).collect();
    for e in std::fs::read_dir(golden_dir()).expect("golden dir") {
        let f = e
            .expect("dir entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        assert!(names.contains(&f), "golden/{f} matches no instance");
    }
}

/// Every op's golden request and reply covered.
#[test]
fn goldens_cover_every_opcode() {
    let all = goldens();
    for m in MESSAGES {
        let has = |want_reply: bool| {
            all.iter().any(|(_, _, g)| match g {
                Msg::Req(r) => !want_reply && r.opcode() == m.opcode,
                Msg::Rep(Reply::Ok { body, .. }) => want_reply && body.opcode() == m.opcode,
                _ => false,
            })
        };
        // Posted requests get no reply.
        assert!(
            has(false) && (has(true) || is_posted(m.opcode)),
            "{} lacks a golden request or reply",
            m.name
        );
    }
    for n in NOTICES {
        assert!(all
            .iter()
            .any(|(_, _, g)| matches!(g, Msg::Notice(b) if b.opcode() == n.opcode)));
    }
    for p in PEER_MESSAGES {
        assert!(
            all.iter()
                .any(|(_, _, g)| matches!(g, Msg::Peer(b) if b.opcode() == p.opcode)),
            "{} lacks a golden message",
            p.name
        );
    }
}

/// Single-byte corruptions of every golden vector: decoders never panic,
/// and whatever they still accept re-encodes to the same bytes.
#[test]
fn corrupted_goldens_never_panic_and_stay_canonical() {
    for (name, _, msg) in goldens() {
        let good = encode(&msg);
        for i in 0..good.len() {
            for v in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut b = good.clone();
                b[i] ^= v;
                check_canonical(&b).unwrap_or_else(|e| panic!("{name} byte {i} ^ {v:#x}: {e}"));
            }
        }
        for len in 0..good.len() {
            check_canonical(&good[..len]).unwrap_or_else(|e| panic!("{name} cut at {len}: {e}"));
        }
    }
}

fn check_canonical(b: &[u8]) -> Result<(), String> {
    if let Ok(r) = decode_request(b) {
        if r.encode() != b {
            return Err(format!("request {r:?} re-encodes differently"));
        }
    }
    if let Ok(r) = decode_reply(b) {
        if r.encode() != b {
            return Err(format!("reply {r:?} re-encodes differently"));
        }
    }
    if let Ok(n) = decode_notice(b) {
        if encode_notice(&n) != b {
            return Err(format!("notice {n:?} re-encodes differently"));
        }
    }
    if let Ok(p) = decode_peer(b) {
        if encode_peer(&p) != b {
            return Err(format!("peer message {p:?} re-encodes differently"));
        }
    }
    Ok(())
}
