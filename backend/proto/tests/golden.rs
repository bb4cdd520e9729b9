//! Golden vectors: golden/NAME.hex holds the encoding of each instance
//! below; frontend-provider/tests/test_proto.c checks the same files.
//! `MASQ_PROTO_BLESS=1 cargo test -p masq-proto` rewrites them.

use masq_proto::*;
use std::path::PathBuf;

enum Msg {
    Req(Request),
    Rep(Reply),
    Notice(NoticeBody),
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

fn goldens() -> Vec<(&'static str, &'static str, Msg)> {
    vec![
        (
            "hello_req",
            "HELLO request from ib_write_bw",
            req(
                1,
                RequestBody::Hello(HelloReq {
                    features: FEATURE_NOTICES,
                    app_name: "ib_write_bw".into(),
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
            "qp_error_notice",
            "QP_ERROR notice: QP 0x11 reset by policy",
            Msg::Notice(NoticeBody::QpError(QpErrorNotice {
                qp_num: 0x11,
                reason: QP_ERROR_POLICY_RESET,
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
        assert!(
            has(false) && has(true),
            "{} lacks a golden request or reply",
            m.name
        );
    }
    for n in NOTICES {
        assert!(all
            .iter()
            .any(|(_, _, g)| matches!(g, Msg::Notice(b) if b.opcode() == n.opcode)));
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
    Ok(())
}
