//! Decoder checks, one refusal at a time, and random input.

use super::*;

fn hello() -> Vec<u8> {
    encode_request(
        7,
        &RequestBody::Hello(HelloReq {
            features: 1,
            app_name: "app".into(),
            ..Default::default()
        }),
    )
}

fn modify() -> Vec<u8> {
    encode_request(
        8,
        &RequestBody::ModifyQp(ModifyQpReq {
            qp_type: 2,
            ..Default::default()
        }),
    )
}

/// `b` with bytes from `at` replaced by `v`.
fn patch(mut b: Vec<u8>, at: usize, v: &[u8]) -> Vec<u8> {
    b[at..at + v.len()].copy_from_slice(v);
    b
}

#[test]
fn framing_errors_are_fatal_protocol_errors() {
    let ok = hello();
    assert!(decode_request(&ok).is_ok());
    let cases = [
        (ok[..15].to_vec(), ProtoError::TooShort { len: 15 }),
        (
            ok[..20].to_vec(),
            ProtoError::BadLength {
                header: 56,
                actual: 20,
            },
        ),
        (
            patch(ok.clone(), 12, &1i32.to_le_bytes()),
            ProtoError::BadStatus(1),
        ),
        (
            patch(ok.clone(), 2, &0x8001u16.to_le_bytes()),
            ProtoError::WrongKind(0x8001),
        ),
        (
            patch(ok.clone(), 2, &0x4001u16.to_le_bytes()),
            ProtoError::WrongKind(0x4001),
        ),
        (
            patch(ok.clone(), 2, &2u16.to_le_bytes()),
            ProtoError::BadSize {
                opcode: 2,
                expected: 16,
                actual: 56,
            },
        ),
    ];
    for (bytes, want) in cases {
        let e = decode_request(&bytes).unwrap_err();
        assert_eq!(e, want);
        assert_eq!(e.errno(), EPROTO);
        assert!(e.is_fatal());
    }
}

#[test]
fn other_versions_get_eprotonosupport_even_with_other_sizes() {
    let other = VERSION + 1;
    let b = patch(hello()[..20].to_vec(), 0, &other.to_le_bytes());
    let e = decode_request(&b).unwrap_err();
    assert_eq!(e, ProtoError::BadVersion(other));
    assert_eq!(e.errno(), EPROTONOSUPPORT);
    assert!(e.is_fatal());
}

#[test]
fn unknown_opcode_fails_only_that_request() {
    let b = patch(hello(), 2, &0x77u16.to_le_bytes());
    let e = decode_request(&b).unwrap_err();
    assert_eq!(e, ProtoError::UnknownOpcode(0x77));
    assert_eq!(e.errno(), EOPNOTSUPP);
    assert!(!e.is_fatal());
    assert_eq!(peek_ids(&b), (0x77, 7));
}

#[test]
fn field_errors_are_einval() {
    let h = hello();
    let m = modify();
    // Offsets: header 16; HelloReq vdev at 20, reserved at 21, app_name at 24..56;
    // ModifyQpReq qp_type at 24, attr at 32 (qp_state 32, reserved 67,
    // ah_attr at 92: flow_label 108, is_global 115, reserved 122).
    let cases = [
        (
            patch(h.clone(), 21, &[1]),
            ProtoError::ReservedNotZero("HelloReq.reserved"),
        ),
        (
            patch(h.clone(), 24, &[b'a'; 32]),
            ProtoError::BadString("HelloReq.app_name"),
        ),
        (
            patch(h.clone(), 40, b"x"),
            ProtoError::BadString("HelloReq.app_name"),
        ),
        (
            patch(h.clone(), 24, &[0xff, 0xfe]),
            ProtoError::BadString("HelloReq.app_name"),
        ),
        (
            patch(m.clone(), 24, &[5]),
            ProtoError::BadValue("ModifyQpReq.qp_type"),
        ),
        (
            patch(m.clone(), 32, &[7]),
            ProtoError::BadValue("QpAttr.qp_state"),
        ),
        (
            patch(m.clone(), 67, &[1]),
            ProtoError::ReservedNotZero("QpAttr.reserved"),
        ),
        (
            patch(m.clone(), 108, &[0, 0, 0x10]),
            ProtoError::BadValue("AhAttr.flow_label"),
        ),
        (
            patch(m.clone(), 115, &[2]),
            ProtoError::BadValue("AhAttr.is_global"),
        ),
        (
            patch(m.clone(), 122, &[0, 1]),
            ProtoError::ReservedNotZero("AhAttr.reserved"),
        ),
    ];
    for (bytes, want) in cases {
        let e = decode_request(&bytes).unwrap_err();
        assert_eq!(e, want);
        assert_eq!(e.errno(), EINVAL);
        assert!(!e.is_fatal());
    }
}

#[test]
fn resync_qp_fields_are_checked() {
    let good = encode_request(
        9,
        &RequestBody::ResyncQp(ResyncQpReq {
            qp_handle: 3,
            qp_num: 0x33,
            qp_type: 2,
            sgid_index: 1,
            has_route: 1,
            dgid: [0; 16],
        }),
    );
    assert_eq!(good.len(), HEADER_SIZE + 32);
    assert!(decode_request(&good).is_ok());
    // Body at 16: qp_type 24, has_route 29, reserved 30..32.
    let cases = [
        (patch(good.clone(), 24, &[1]), "ResyncQpReq.qp_type"),
        (patch(good.clone(), 29, &[2]), "ResyncQpReq.has_route"),
    ];
    for (bytes, field) in cases {
        assert_eq!(decode_request(&bytes), Err(ProtoError::BadValue(field)));
    }
    assert_eq!(
        decode_request(&patch(good.clone(), 31, &[1])),
        Err(ProtoError::ReservedNotZero("ResyncQpReq.reserved"))
    );
    // A reply with an unknown result is refused.
    let rep = encode_reply(
        9,
        &ReplyBody::ResyncQp(ResyncQpReply {
            qp_state: 6,
            result: RESYNC_RESET as u8,
        }),
    );
    assert!(decode_reply(&rep).is_ok());
    assert_eq!(
        decode_reply(&patch(rep, 17, &[3])),
        Err(ProtoError::BadValue("ResyncQpReply.result"))
    );
}

#[test]
fn gid_table_count_and_unused_slots() {
    let table = |n: usize| {
        let entries = (0..n)
            .map(|i| GidEntry {
                index: i as u32,
                gid_type: GID_TYPE_ROCE_V2,
                gid: [i as u8; 16],
            })
            .collect();
        encode_reply(3, &ReplyBody::QueryGidTable(GidTable { entries }))
    };
    // Over capacity is truncated on encode, so the result still decodes.
    let full = table(MAX_GIDS + 3);
    match decode_reply(&full) {
        Ok(Reply::Ok {
            body: ReplyBody::QueryGidTable(t),
            ..
        }) => assert_eq!(t.entries.len(), MAX_GIDS),
        other => panic!("{other:?}"),
    }
    let two = table(2);
    assert_eq!(
        decode_reply(&patch(two.clone(), 16, &17u32.to_le_bytes())),
        Err(ProtoError::BadCount("GidTable.entries"))
    );
    // A used slot past the count must be zero.
    assert_eq!(
        decode_reply(&patch(two.clone(), 16, &1u32.to_le_bytes())),
        Err(ProtoError::ReservedNotZero("GidTable.entries"))
    );
    assert_eq!(
        decode_reply(&patch(two, 16 + 8 + 4, &[3])),
        Err(ProtoError::BadValue("GidEntry.gid_type"))
    );
}

#[test]
fn hello_reply_gid_count_matches_capacity() {
    let r = |n: u8| {
        encode_reply(
            1,
            &ReplyBody::Hello(HelloReply {
                gid_count: n,
                ..Default::default()
            }),
        )
    };
    assert!(decode_reply(&r(MAX_GIDS as u8)).is_ok());
    assert_eq!(
        decode_reply(&r(MAX_GIDS as u8 + 1)),
        Err(ProtoError::BadValue("HelloReply.gid_count"))
    );
}

#[test]
fn error_replies_are_header_only() {
    let e = encode_error(4, 9, -13);
    assert_eq!(
        decode_reply(&e),
        Ok(Reply::Err {
            request_id: 9,
            opcode: 4,
            status: -13
        })
    );
    // A status that is not an errno still yields a valid reply.
    assert_eq!(&encode_error(4, 9, 5)[12..], &(-EPROTO).to_le_bytes());
    // Error status with a body attached.
    let mut b = encode_reply(5, &ReplyBody::QueryQp(QpAttr::default()));
    b[12..16].copy_from_slice(&(-13i32).to_le_bytes());
    assert!(matches!(decode_reply(&b), Err(ProtoError::BadSize { .. })));
    // Unknown request opcode in an error reply.
    assert_eq!(
        decode_reply(&encode_error(0x99, 1, -22)),
        Err(ProtoError::UnknownOpcode(0x99))
    );
}

#[test]
fn notices_have_no_request_id() {
    let n = encode_notice(&NoticeBody::QpError(QpErrorNotice {
        qp_num: 5,
        reason: QP_ERROR_OPERATOR_TEARDOWN,
    }));
    assert!(decode_notice(&n).is_ok());
    assert_eq!(
        decode_notice(&patch(n.clone(), 8, &[1])),
        Err(ProtoError::BadValue("Header.request_id"))
    );
    assert_eq!(
        decode_notice(&patch(n.clone(), 20, &[3])),
        Err(ProtoError::BadValue("QpErrorNotice.reason"))
    );
    assert_eq!(decode_request(&n), Err(ProtoError::WrongKind(0x4001)));
}

#[test]
fn strings_are_cut_to_fit() {
    let mut w = Vec::new();
    wire::put_str(&mut w, &"é".repeat(20), 32); // 40 bytes of 2-byte chars
    assert_eq!(w.len(), 32);
    assert_eq!(w.iter().position(|&b| b == 0), Some(30));
    let mut w = Vec::new();
    wire::put_str(&mut w, "ab\0cd", 8);
    assert_eq!(w, b"ab\0\0\0\0\0\0");
}

#[test]
fn every_message_fits_and_has_no_holes() {
    for d in ALL_STRUCTS {
        assert!(d.naturally_packed(), "{}", d.name);
    }
    for m in MESSAGES.iter().chain(NOTICES).chain(PEER_MESSAGES) {
        for d in [m.request, m.reply].into_iter().flatten() {
            assert!(HEADER_SIZE + d.size() <= MAX_MESSAGE, "{}", m.name);
        }
    }
    assert_eq!(Header::SIZE, HEADER_SIZE);
}

#[test]
fn requests_are_named_as_the_c_header_names_them() {
    assert_eq!(
        request_name(RequestBody::CmCreateChannel.opcode()),
        "CM_CREATE_CHANNEL"
    );
    assert_eq!(request_name(2), "OPEN_DEVICE");
    assert_eq!(request_name(0x77), "opcode 0x0077");
}

/// Every struct a message reaches, nested ones included.
fn reached(m: &MessageDesc) -> Vec<&'static StructDesc> {
    fn walk(d: &'static StructDesc, out: &mut Vec<&'static StructDesc>) {
        out.push(d);
        for f in d.fields {
            match f.kind {
                Kind::Struct(sd) | Kind::Array { elem: sd, .. } => walk(sd, out),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    for d in [m.request, m.reply].into_iter().flatten() {
        walk(d, &mut out);
    }
    out
}

/// The C header leaves out what `cgen::peer_only` names, so the frontend's
/// messages must not need any of it, and the peer messages' own structs
/// must be named so that they stay out.
#[test]
fn peer_structs_are_apart_from_the_frontends() {
    for m in MESSAGES.iter().chain(NOTICES) {
        for d in reached(m) {
            assert!(!cgen::peer_only(d.name), "{} uses {}", m.name, d.name);
        }
    }
    for m in PEER_MESSAGES {
        assert!((PEER_BASE..NOTICE_BASE).contains(&m.opcode), "{}", m.name);
        let top = m.request.map(|d| d.name).unwrap_or_default();
        assert!(cgen::peer_only(top), "{}: {top}", m.name);
        assert!(m.reply.is_none());
    }
    for m in MESSAGES {
        assert!(m.opcode < PEER_BASE, "{}", m.name);
    }
}

fn peer_req() -> Vec<u8> {
    encode_peer(&PeerBody::Req(PeerReq {
        from_id: 3,
        vni: 100,
        src: CmAddr {
            addr: [10, 0, 0, 5],
            port: 40001,
        },
        dst: CmAddr {
            addr: [10, 0, 0, 6],
            port: 7174,
        },
        params: PeerParams {
            qp_num: 0x11,
            psn: 0x1234,
            retry_count: 7,
            ..Default::default()
        },
        private_data: b"ping".to_vec(),
    }))
}

#[test]
fn peer_framing_errors() {
    let ok = peer_req();
    assert_eq!(ok.len(), HEADER_SIZE + 100);
    assert!(decode_peer(&ok).is_ok());
    let cases = [
        (ok[..15].to_vec(), ProtoError::TooShort { len: 15 }),
        (
            ok[..60].to_vec(),
            ProtoError::BadLength {
                header: 116,
                actual: 60,
            },
        ),
        (
            patch(ok.clone(), 0, &(VERSION + 1).to_le_bytes()),
            ProtoError::BadVersion(VERSION + 1),
        ),
        (
            patch(ok.clone(), 12, &(-5i32).to_le_bytes()),
            ProtoError::BadStatus(-5),
        ),
        (
            patch(ok.clone(), 8, &1u32.to_le_bytes()),
            ProtoError::BadValue("Header.request_id"),
        ),
        // Another peer message's opcode: the size gives it away.
        (
            patch(ok.clone(), 2, &0x2004u16.to_le_bytes()),
            ProtoError::BadSize {
                opcode: 0x2004,
                expected: HEADER_SIZE + 8,
                actual: 116,
            },
        ),
        (
            patch(ok.clone(), 2, &0x200bu16.to_le_bytes()),
            ProtoError::UnknownOpcode(0x200b),
        ),
        (
            patch(ok.clone(), 2, &0x2000u16.to_le_bytes()),
            ProtoError::UnknownOpcode(0x2000),
        ),
        // Frontend requests, notices and replies are not peer messages.
        (
            patch(ok.clone(), 2, &25u16.to_le_bytes()),
            ProtoError::WrongKind(25),
        ),
        (
            patch(ok.clone(), 2, &0x4002u16.to_le_bytes()),
            ProtoError::WrongKind(0x4002),
        ),
        (
            patch(ok.clone(), 2, &0xa001u16.to_le_bytes()),
            ProtoError::WrongKind(0xa001),
        ),
    ];
    for (bytes, want) in cases {
        assert_eq!(decode_peer(&bytes), Err(want));
    }
    // And the other decoders take no peer message.
    assert_eq!(decode_request(&ok), Err(ProtoError::UnknownOpcode(0x2001)));
    assert_eq!(decode_notice(&ok), Err(ProtoError::WrongKind(0x2001)));
    assert_eq!(decode_reply(&ok), Err(ProtoError::WrongKind(0x2001)));
}

#[test]
fn peer_field_errors() {
    let req = peer_req();
    // PeerReq at 16: vni 20, src 24 (reserved 30), dst 32, params 40
    // (qp_num 40, psn 44, flow_control 50, retry_count 51, srq 53,
    // reserved 54), private_data_len 56, private_data 60..116.
    let cases = [
        (
            patch(req.clone(), 20, &[0, 0, 0, 0]),
            ProtoError::BadValue("PeerReq.vni"),
        ),
        (
            patch(req.clone(), 20, &[0, 0, 0, 1]),
            ProtoError::BadValue("PeerReq.vni"),
        ),
        (
            patch(req.clone(), 30, &[1]),
            ProtoError::ReservedNotZero("CmAddr.reserved"),
        ),
        (
            patch(req.clone(), 43, &[1]),
            ProtoError::BadValue("PeerParams.qp_num"),
        ),
        (
            patch(req.clone(), 47, &[1]),
            ProtoError::BadValue("PeerParams.psn"),
        ),
        (
            patch(req.clone(), 50, &[2]),
            ProtoError::BadValue("PeerParams.flow_control"),
        ),
        (
            patch(req.clone(), 51, &[8]),
            ProtoError::BadValue("PeerParams.retry_count"),
        ),
        (
            patch(req.clone(), 53, &[2]),
            ProtoError::BadValue("PeerParams.srq"),
        ),
        (
            patch(req.clone(), 55, &[1]),
            ProtoError::ReservedNotZero("PeerParams.reserved"),
        ),
        // More private data than a REQ may carry.
        (
            patch(req.clone(), 56, &57u32.to_le_bytes()),
            ProtoError::BadCount("PeerReq.private_data"),
        ),
        // A byte past the count.
        (
            patch(req.clone(), 56, &3u32.to_le_bytes()),
            ProtoError::ReservedNotZero("PeerReq.private_data"),
        ),
        (
            patch(req.clone(), 115, &[1]),
            ProtoError::ReservedNotZero("PeerReq.private_data"),
        ),
    ];
    for (bytes, want) in cases {
        assert_eq!(decode_peer(&bytes), Err(want));
    }
    // The REQ's full 56 bytes are accepted.
    let full = patch(
        patch(req.clone(), 56, &56u32.to_le_bytes()),
        60,
        &[0xab; 56],
    );
    match decode_peer(&full) {
        Ok(PeerBody::Req(r)) => assert_eq!(r.private_data, vec![0xab; 56]),
        other => panic!("{other:?}"),
    }

    let rej = encode_peer(&PeerBody::Rej(PeerRej {
        to_id: 1,
        from_id: 0,
        reason: CM_REJ_INVALID_SERVICE_ID,
        private_data: Vec::new(),
    }));
    assert!(decode_peer(&rej).is_ok());
    // PeerRej at 16: reason 24, private_data_len 28.
    assert_eq!(
        decode_peer(&patch(rej.clone(), 24, &0i32.to_le_bytes())),
        Err(ProtoError::BadValue("PeerRej.reason"))
    );
    assert_eq!(
        decode_peer(&patch(rej.clone(), 24, &(-22i32).to_le_bytes())),
        Err(ProtoError::BadValue("PeerRej.reason"))
    );
    assert_eq!(
        decode_peer(&patch(rej, 28, &149u32.to_le_bytes())),
        Err(ProtoError::BadCount("PeerRej.private_data"))
    );

    let rep = encode_peer(&PeerBody::Rep(PeerRep::default()));
    // PeerRep at 16: params 24, private_data_len 40.
    assert_eq!(
        decode_peer(&patch(rep, 40, &197u32.to_le_bytes())),
        Err(ProtoError::BadCount("PeerRep.private_data"))
    );

    let dreq = encode_peer(&PeerBody::Dreq(PeerDreq::default()));
    // PeerDreq at 16: from_qpn 24, reserved 28.
    assert_eq!(
        decode_peer(&patch(dreq.clone(), 27, &[1])),
        Err(ProtoError::BadValue("PeerDreq.from_qpn"))
    );
    assert_eq!(
        decode_peer(&patch(dreq, 28, &[1])),
        Err(ProtoError::ReservedNotZero("PeerDreq.reserved"))
    );

    let ud = encode_peer(&PeerBody::UdQp(PeerUdQp {
        vni: 100,
        vip: [10, 0, 0, 5],
        qpn: 0x22,
        up: 1,
    }));
    assert!(decode_peer(&ud).is_ok());
    // PeerUdQp at 16: vip 20, qpn 24, up 28, reserved 29.
    let cases = [
        (
            patch(ud.clone(), 27, &[1]),
            ProtoError::BadValue("PeerUdQp.qpn"),
        ),
        (
            patch(ud.clone(), 28, &[2]),
            ProtoError::BadValue("PeerUdQp.up"),
        ),
        (
            patch(ud.clone(), 31, &[1]),
            ProtoError::ReservedNotZero("PeerUdQp.reserved"),
        ),
        (patch(ud, 16, &[0; 4]), ProtoError::BadValue("PeerUdQp.vni")),
    ];
    let cases = cases.into_iter().chain(sidr_cases());
    for (bytes, want) in cases {
        let e = decode_peer(&bytes).unwrap_err();
        assert_eq!(e, want);
        assert_eq!(e.errno(), EINVAL);
    }
}

/// The SIDR messages' range checks, as (bytes, error) cases.
fn sidr_cases() -> Vec<(Vec<u8>, ProtoError)> {
    let req = encode_peer(&PeerBody::SidrReq(PeerSidrReq {
        from_id: 1,
        vni: 100,
        ..Default::default()
    }));
    let rep = encode_peer(&PeerBody::SidrRep(PeerSidrRep {
        to_id: 1,
        qp_num: 0x33,
        qkey: 0x0123_4567,
        ..Default::default()
    }));
    assert!(decode_peer(&req).is_ok() && decode_peer(&rep).is_ok());
    // PeerSidrReq at 16: vni 20. PeerSidrRep at 16: status 20, qp_num 24.
    vec![
        (
            patch(req, 20, &[0; 4]),
            ProtoError::BadValue("PeerSidrReq.vni"),
        ),
        (
            patch(rep.clone(), 20, &[3]),
            ProtoError::BadValue("PeerSidrRep.status"),
        ),
        (
            patch(rep, 27, &[1]),
            ProtoError::BadValue("PeerSidrRep.qp_num"),
        ),
    ]
}

#[test]
fn message_len_reads_a_stream_header() {
    let ok = peer_req();
    assert_eq!(message_len(&ok[..HEADER_SIZE]), Ok(116));
    assert_eq!(message_len(&ok), Ok(116));
    assert_eq!(
        message_len(&ok[..10]),
        Err(ProtoError::TooShort { len: 10 })
    );
    let h = |version: u16, length: u32| {
        let mut b = ok[..HEADER_SIZE].to_vec();
        b[0..2].copy_from_slice(&version.to_le_bytes());
        b[4..8].copy_from_slice(&length.to_le_bytes());
        message_len(&b)
    };
    assert_eq!(h(VERSION, HEADER_SIZE as u32), Ok(HEADER_SIZE));
    assert_eq!(h(VERSION, MAX_MESSAGE as u32), Ok(MAX_MESSAGE));
    for bad in [0, 15, MAX_MESSAGE as u32 + 1, u32::MAX] {
        let e = h(VERSION, bad).unwrap_err();
        assert_eq!(e, ProtoError::BadFrameLength(bad));
        assert!(e.is_fatal());
    }
    // The version is checked first: another version's lengths mean nothing.
    assert_eq!(
        h(VERSION + 1, u32::MAX),
        Err(ProtoError::BadVersion(VERSION + 1))
    );
}

#[test]
fn peek_ids_on_short_input() {
    assert_eq!(peek_ids(&[]), (0, 0));
    assert_eq!(peek_ids(&[1, 0, 5, 0]), (5, 0));
}

/// Deterministic random input, biased towards plausible headers so the
/// body decoders run too: no panics, and accepted input is canonical.
#[test]
fn random_bytes_never_panic() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let sizes: Vec<usize> = MESSAGES
        .iter()
        .chain(NOTICES)
        .chain(PEER_MESSAGES)
        .flat_map(|m| [m.request, m.reply])
        .map(|d| HEADER_SIZE + d.map_or(0, |d| d.size()))
        .collect();
    let ops: Vec<u16> = MESSAGES
        .iter()
        .flat_map(|m| [m.opcode, m.opcode | REPLY])
        .chain(NOTICES.iter().map(|n| n.opcode))
        .chain(PEER_MESSAGES.iter().map(|n| n.opcode))
        .collect();
    for _ in 0..100_000 {
        let r = next();
        let len = match r % 4 {
            0 => (r >> 8) as usize % 600,
            _ => sizes[(r >> 8) as usize % sizes.len()],
        };
        // Mostly zero bytes with a few random ones, like real messages.
        let mut b: Vec<u8> = (0..len)
            .map(|_| {
                let v = next();
                if v % 8 == 0 {
                    (v >> 8) as u8
                } else {
                    0
                }
            })
            .collect();
        if len >= HEADER_SIZE && r % 16 != 0 {
            b[0..2].copy_from_slice(&VERSION.to_le_bytes());
            b[2..4].copy_from_slice(&ops[(r >> 20) as usize % ops.len()].to_le_bytes());
            b[4..8].copy_from_slice(&(len as u32).to_le_bytes());
            if r % 5 != 0 {
                b[12..16].fill(0);
            }
        }
        if let Ok(m) = decode_request(&b) {
            assert_eq!(m.encode(), b);
        }
        if let Ok(m) = decode_reply(&b) {
            assert_eq!(m.encode(), b);
        }
        if let Ok(m) = decode_notice(&b) {
            assert_eq!(encode_notice(&m), b);
        }
        if let Ok(m) = decode_peer(&b) {
            assert_eq!(encode_peer(&m), b);
        }
    }
}
