//! UD ids through the CM's fake host: the SIDR exchange from both sides
//! (a UD connect: one SIDR REQ; its SIDR REP: ESTABLISHED with the
//! peer's QP, Q_Key and address, or UNREACHABLE; a SIDR REQ to a UD
//! listener: a new UD id, whose accept or reject is the SIDR REP), and the
//! announcements of UD QPs between masqds.
use super::fakes::*;
use super::*;
use crate::config::TenantLimits;
use crate::kernel::ibv::*;

const PORT: u16 = 7471;
const QPN: u32 = 0x55;
const PEER_QPN: u32 = 0x44;
const PEER_ID: u32 = 60;

fn setup_with(limits: TenantLimits) -> (FakeCmHost, Cm, Outbox) {
    let h = FakeCmHost::new(limits);
    *h.vnic.lock().expect("vnic") = Some((1, 1500));
    let (cm, out) = cm(Duration::from_secs(60));
    (h, cm, out)
}

fn setup() -> (FakeCmHost, Cm, Outbox) {
    setup_with(TenantLimits::default())
}

fn sidr_req(from_id: u32, port: u16, private_data: &[u8]) -> PeerBody {
    PeerBody::SidrReq(proto::PeerSidrReq {
        from_id,
        vni: GLOBEX,
        src: proto::CmAddr::v4(VIP_B, 40000),
        dst: proto::CmAddr::v4(VIP_A, port),
        private_data: private_data.to_vec(),
    })
}

fn sidr_rep(to_id: u32, status: u32) -> PeerBody {
    PeerBody::SidrRep(proto::PeerSidrRep {
        to_id,
        status,
        qp_num: if status == 0 { PEER_QPN } else { 0 },
        qkey: if status == 0 { proto::CM_UDP_QKEY } else { 0 },
        private_data: b"hi".to_vec(),
    })
}

/// globex-a's UD id querying globex-b's UD listener at PORT (the SIDR
/// REQ taken).
fn querying(h: &FakeCmHost, cm: &Cm, out: &Outbox) -> (App, u32) {
    let globex = App::open(cm, h, 1, "globex-a").expect("globex-a");
    let id = globex
        .connect(cm, h, true, 6000, (VIP_B, PORT), 0)
        .expect("UD connect");
    assert!(matches!(
        out.take().as_slice(),
        [(HOST2, PeerBody::SidrReq(..))]
    ));
    globex.events();
    (globex, id)
}

/// globex-a's UD listener at PORT, and the UD id globex-b's query made.
fn queried(h: &FakeCmHost, cm: &Cm) -> (App, u32, u32) {
    let globex = App::open(cm, h, 1, "globex-a").expect("globex-a");
    let listener = globex.listen(cm, h, true, PORT).expect("UD listen");
    cm.on_peer(h, HOST2, sidr_req(PEER_ID, PORT, b"who"));
    let ev = globex.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_CONNECT_REQUEST]);
    (globex, listener, ev[0].id)
}

#[test]
fn a_ud_connect_sends_one_sidr_req_with_its_private_data_and_needs_no_qp() {
    let (h, cm, out) = setup();
    let globex = App::open(&cm, &h, 1, "globex-a").expect("globex-a");
    let id = globex.create_id(&cm, &h, true).expect("UD id");
    let resolve = proto::RequestBody::CmResolveAddr(proto::CmResolveAddrReq {
        id,
        timeout_ms: 1000,
        has_src: 1,
        src: proto::CmAddr {
            addr: VIP_A.octets(),
            port: 6000,
        },
        dst: proto::CmAddr {
            addr: VIP_B.octets(),
            port: PORT,
        },
    });
    globex.ask(&cm, &h, resolve).expect("resolve");
    let route = proto::RequestBody::CmResolveRoute(proto::CmId { id });
    globex.ask(&cm, &h, route).expect("route");
    let ev = globex.events();
    assert_eq!(ev[1].init_attr.attr.qkey, proto::CM_UDP_QKEY, "UD's INIT");
    let big = vec![0; proto::CM_SIDR_REQ_PRIVATE_DATA + 1];
    let connect = |private_data: Vec<u8>| {
        proto::RequestBody::CmConnect(proto::CmConnectReq {
            id,
            param: proto::CmConnParam {
                private_data,
                ..Default::default()
            },
        })
    };
    assert_eq!(globex.ask(&cm, &h, connect(big)), Err(libc::EINVAL));
    globex
        .ask(&cm, &h, connect(b"q".to_vec()))
        .expect("connect");
    assert_eq!(
        out.take(),
        [(
            HOST2,
            PeerBody::SidrReq(proto::PeerSidrReq {
                from_id: id,
                vni: GLOBEX,
                src: proto::CmAddr::v4(VIP_A, 6000),
                dst: proto::CmAddr::v4(VIP_B, PORT),
                private_data: b"q".to_vec()
            })
        )]
    );
    assert_eq!(state(&cm, id), "connecting");
    assert_eq!(cm.list()[0]["ps"], "udp");
}

#[test]
fn a_sidr_rep_gives_established_with_the_peers_qp_q_key_and_address() {
    let (h, cm, out) = setup();
    let (globex, id) = querying(&h, &cm, &out);
    cm.on_peer(&h, HOST2, sidr_rep(id, 0));
    let ev = globex.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_ESTABLISHED]);
    let e = &ev[0];
    assert_eq!(e.param.qp_num, PEER_QPN);
    assert_eq!(e.param.private_data, b"hi");
    let peer = &e.rtr_attr;
    assert_eq!(peer.attr_mask, IBV_QP_AV | IBV_QP_QKEY | IBV_QP_DEST_QPN);
    assert_eq!(
        (peer.attr.dest_qp_num, peer.attr.qkey),
        (PEER_QPN, proto::CM_UDP_QKEY)
    );
    assert_eq!(peer.attr.ah_attr.dgid, vbond::ipv4_mapped_gid(VIP_B));
    assert_eq!(peer.attr.ah_attr.sgid_index, 1);
    assert_eq!(state(&cm, id), "established");
    assert!(out.take().is_empty(), "SIDR has no third message");
    cm.on_peer(&h, HOST2, sidr_rep(id, 0));
    assert!(globex.events().is_empty(), "a second answer is dropped");
}

#[test]
fn a_sidr_rep_that_refuses_gives_unreachable_with_its_status() {
    let (h, cm, out) = setup();
    let (globex, id) = querying(&h, &cm, &out);
    cm.on_peer(&h, HOST2, sidr_rep(id, proto::CM_SIDR_REJECT));
    let ev = globex.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_UNREACHABLE]);
    assert_eq!(ev[0].status, proto::CM_SIDR_REJECT as i32);
    assert_eq!(state(&cm, id), "closed");
}

#[test]
fn a_sidr_rep_without_a_readable_vnic_gives_unreachable_with_the_errno() {
    let (h, cm, out) = setup();
    *h.vnic.lock().expect("vnic") = None;
    let (globex, id) = querying(&h, &cm, &out);
    cm.on_peer(&h, HOST2, sidr_rep(id, 0));
    let ev = globex.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_UNREACHABLE]);
    assert_eq!(ev[0].status, -libc::EIO);
    assert_eq!(state(&cm, id), "closed");
}

#[test]
fn a_sidr_rep_from_another_host_or_to_a_connected_id_changes_nothing() {
    let (h, cm, out) = setup();
    let (globex, id) = querying(&h, &cm, &out);
    let acme = App::open(&cm, &h, 2, "acme-a").expect("acme-a");
    let tcp = acme
        .connect(&cm, &h, false, 5000, (VIP_B, PORT), 0x33)
        .expect("connect");
    out.take();
    acme.events();
    let before = table(&cm);
    cm.on_peer(&h, HOST3, sidr_rep(id, 0));
    cm.on_peer(&h, HOST2, sidr_rep(tcp, 0));
    cm.on_peer(&h, HOST2, sidr_rep(9999, 0));
    assert_eq!(table(&cm), before);
    assert!(globex.events().is_empty());
    assert!(acme.events().is_empty());
    assert!(out.take().is_empty());
}

#[test]
fn a_sidr_req_to_a_ud_listener_makes_a_ud_id_whose_accept_answers_with_its_qp() {
    let (h, cm, out) = setup();
    let globex = App::open(&cm, &h, 1, "globex-a").expect("globex-a");
    let listener = globex.listen(&cm, &h, true, PORT).expect("UD listen");
    cm.on_peer(&h, HOST2, sidr_req(PEER_ID, PORT, b"who"));
    let ev = globex.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_CONNECT_REQUEST]);
    let id = ev[0].id;
    assert_eq!(ev[0].listen_id, listener);
    assert_eq!(ev[0].param.private_data, b"who");
    assert_eq!(ev[0].init_attr.attr.qkey, proto::CM_UDP_QKEY);
    assert_eq!(state(&cm, id), "reqreceived");
    assert!(out.take().is_empty());
    globex.accept(&cm, &h, id, QPN, b"me").expect("accept");
    assert_eq!(
        out.take(),
        [(
            HOST2,
            PeerBody::SidrRep(proto::PeerSidrRep {
                to_id: PEER_ID,
                status: 0,
                qp_num: QPN,
                qkey: proto::CM_UDP_QKEY,
                private_data: b"me".to_vec()
            })
        )]
    );
    assert_eq!(state(&cm, id), "established");
    assert!(globex.events().is_empty(), "nothing follows a UD accept");
    assert_eq!(
        globex.accept(&cm, &h, id, QPN, b""),
        Err(libc::EINVAL),
        "once"
    );
    assert_eq!(
        cm.role_of("globex-a", QPN),
        None,
        "RConntrack tracks no UD id"
    );
}

#[test]
fn a_ud_accept_without_a_qp_or_with_more_private_data_than_a_sidr_rep_carries_is_refused() {
    let (h, cm, out) = setup();
    let (globex, _, id) = queried(&h, &cm);
    assert_eq!(globex.accept(&cm, &h, id, 0, b""), Err(libc::EINVAL));
    let big = vec![0; proto::CM_SIDR_REP_PRIVATE_DATA + 1];
    assert_eq!(globex.accept(&cm, &h, id, QPN, &big), Err(libc::EINVAL));
    assert!(out.take().is_empty());
    assert_eq!(state(&cm, id), "reqreceived");
    let qp_step = cm.qp_step(&h, id, "globex-a", &|s| s == 1, QPN, Some((1, 1)));
    assert_eq!(
        qp_step.map(|_| ()).map_err(|e| e.errno()),
        Err(libc::EINVAL),
        "no QP step"
    );
}

#[test]
fn a_ud_reject_answers_sidr_reject_with_its_private_data_cut_to_fit() {
    let (h, cm, out) = setup();
    let (globex, _, id) = queried(&h, &cm);
    let data = vec![7; proto::CM_SIDR_REP_PRIVATE_DATA + 5];
    let reject = proto::RequestBody::CmReject(proto::CmRejectReq {
        id,
        private_data: data,
    });
    globex.ask(&cm, &h, reject).expect("reject");
    match out.take().as_slice() {
        [(
            HOST2,
            PeerBody::SidrRep(proto::PeerSidrRep {
                to_id: PEER_ID,
                status,
                qp_num: 0,
                private_data,
                ..
            }),
        )] => {
            assert_eq!(*status, proto::CM_SIDR_REJECT);
            assert_eq!(private_data.len(), proto::CM_SIDR_REP_PRIVATE_DATA);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(state(&cm, id), "closed");
}

#[test]
fn a_sidr_req_nobody_listens_to_in_the_ud_space_is_answered_unsupported() {
    let (h, cm, out) = setup();
    let globex = App::open(&cm, &h, 1, "globex-a").expect("globex-a");
    globex.listen(&cm, &h, false, PORT).expect("a TCP listener");
    cm.on_peer(&h, HOST2, sidr_req(PEER_ID, PORT, b""));
    assert_eq!(
        out.take(),
        [(
            HOST2,
            PeerBody::SidrRep(proto::PeerSidrRep {
                to_id: PEER_ID,
                status: proto::CM_SIDR_UNSUPPORTED,
                qp_num: 0,
                qkey: 0,
                private_data: Vec::new()
            })
        )]
    );
    assert!(
        globex.events().is_empty(),
        "the TCP listener does not hear it"
    );
    assert_eq!(table(&cm).len(), 1);
}

#[test]
fn a_repeated_sidr_req_or_one_not_from_the_host_of_its_source_changes_nothing() {
    let (h, cm, out) = setup();
    let (globex, _, _) = queried(&h, &cm);
    let before = table(&cm);
    cm.on_peer(&h, HOST2, sidr_req(PEER_ID, PORT, b"who"));
    cm.on_peer(&h, HOST3, sidr_req(PEER_ID + 1, PORT, b"who"));
    cm.on_peer(&h, STRANGER, sidr_req(PEER_ID + 2, PORT, b"who"));
    assert_eq!(table(&cm), before);
    assert!(globex.events().is_empty());
    assert!(out.take().is_empty());
}

#[test]
fn destroying_an_unanswered_ud_request_answers_sidr_reject() {
    let (h, cm, out) = setup();
    let (globex, _, id) = queried(&h, &cm);
    let destroy = proto::RequestBody::CmDestroyId(proto::CmId { id });
    globex.ask(&cm, &h, destroy).expect("destroy");
    match out.take().as_slice() {
        [(
            HOST2,
            PeerBody::SidrRep(proto::PeerSidrRep {
                to_id: PEER_ID,
                status,
                ..
            }),
        )] => {
            assert_eq!(*status, proto::CM_SIDR_REJECT)
        }
        other => panic!("{other:?}"),
    }
    // An answered one leaves nothing to say.
    cm.on_peer(&h, HOST2, sidr_req(PEER_ID + 1, PORT, b""));
    let answered = globex.events()[0].id;
    globex.accept(&cm, &h, answered, QPN, b"").expect("accept");
    out.take();
    let destroy = proto::RequestBody::CmDestroyId(proto::CmId { id: answered });
    globex.ask(&cm, &h, destroy).expect("destroy");
    assert!(out.take().is_empty());
}

#[test]
fn a_ud_query_past_the_endpoints_cm_ids_is_answered_sidr_reject() {
    let limits = TenantLimits {
        cm_ids: 1,
        ..Default::default()
    };
    let (h, cm, out) = setup_with(limits);
    let globex = App::open(&cm, &h, 1, "globex-a").expect("globex-a");
    globex.listen(&cm, &h, true, PORT).expect("UD listen");
    cm.on_peer(&h, HOST2, sidr_req(PEER_ID, PORT, b""));
    match out.take().as_slice() {
        [(
            HOST2,
            PeerBody::SidrRep(proto::PeerSidrRep {
                to_id: PEER_ID,
                status,
                ..
            }),
        )] => {
            assert_eq!(*status, proto::CM_SIDR_REJECT)
        }
        other => panic!("{other:?}"),
    }
    assert!(globex.events().is_empty());
    assert_eq!(table(&cm).len(), 1);
}

#[test]
fn a_ud_qp_announced_by_its_host_is_acked_and_names_its_sender_until_withdrawn() {
    let (h, cm, out) = setup();
    let up = |up| {
        PeerBody::UdQp(proto::PeerUdQp {
            vni: GLOBEX,
            vip: VIP_B.octets(),
            qpn: 9,
            up: u8::from(up),
        })
    };
    cm.on_peer(&h, HOST2, up(true));
    assert_eq!(
        out.take(),
        [(
            HOST2,
            PeerBody::UdQpAck(proto::PeerUdQpAck {
                vni: GLOBEX,
                qpn: 9
            })
        )]
    );
    assert_eq!(cm.ud_sender(HOST2, 9), Some((GLOBEX, VIP_B)));
    cm.on_peer(&h, HOST2, up(false));
    assert!(out.take().is_empty(), "a withdrawal is not acked");
    assert_eq!(cm.ud_sender(HOST2, 9), None);
}

#[test]
fn a_ud_qp_announced_for_a_vip_another_host_holds_is_not_put_under_that_hosts_address() {
    let (h, cm, out) = setup();
    let claim = PeerBody::UdQp(proto::PeerUdQp {
        vni: GLOBEX,
        vip: VIP_B.octets(),
        qpn: 9,
        up: u8::from(true),
    });
    cm.on_peer(&h, HOST3, claim);
    assert_eq!(
        out.take(),
        [(
            HOST3,
            PeerBody::UdQpAck(proto::PeerUdQpAck {
                vni: GLOBEX,
                qpn: 9
            })
        )]
    );
    assert_eq!(
        cm.ud_sender(HOST2, 9),
        None,
        "host2's datagrams are not host3's to name"
    );
}

#[test]
fn a_ud_qp_ack_from_a_peer_ends_the_wait_for_it() {
    let (h, cm, out) = setup();
    cm.announce_ud_early(&[HOST2], GLOBEX, VIP_A, 9);
    assert_eq!(out.take().len(), 1);
    assert!(!cm.announce_ud_up(&[HOST2], GLOBEX, VIP_A, 9, Duration::ZERO));
    cm.on_peer(
        &h,
        HOST3,
        PeerBody::UdQpAck(proto::PeerUdQpAck {
            vni: GLOBEX,
            qpn: 9,
        }),
    );
    assert!(
        !cm.announce_ud_up(&[HOST2], GLOBEX, VIP_A, 9, Duration::ZERO),
        "another host's ack"
    );
    cm.on_peer(
        &h,
        HOST2,
        PeerBody::UdQpAck(proto::PeerUdQpAck {
            vni: GLOBEX,
            qpn: 9,
        }),
    );
    assert!(cm.announce_ud_up(&[HOST2], GLOBEX, VIP_A, 9, Duration::ZERO));
}

/// A SIDR exchange has no REP: one to a querying UD id is answered with a
/// REJ, as for any id that waits for none, and the query goes on (its
/// clock too), where the REP moved it past its SIDR REP and stopped the
/// clock, so the app waited for ever.
#[test]
fn a_rep_to_a_querying_ud_id_is_refused_and_its_sidr_rep_still_answers() {
    let (h, cm, out) = setup();
    let (globex, id) = querying(&h, &cm, &out);
    let rep = PeerBody::Rep(proto::PeerRep {
        to_id: id,
        from_id: 70,
        params: params(PEER_QPN),
        private_data: Vec::new(),
    });
    cm.on_peer(&h, HOST2, rep);
    assert!(globex.events().is_empty(), "no CONNECT_RESPONSE on a UD id");
    assert!(matches!(
        out.take().as_slice(),
        [(HOST2, PeerBody::Rej(proto::PeerRej { to_id: 70, .. }))]
    ));
    assert_eq!(state(&cm, id), "connecting");
    cm.on_peer(&h, HOST2, sidr_rep(id, 0));
    assert_eq!(kinds(&globex.events()), [proto::CM_EVENT_ESTABLISHED]);
}

/// A UD id has no connection to end: a DREQ from the host that queried it
/// changes nothing, where it delivered DISCONNECTED, which the kernel
/// never gives a UD id.
#[test]
fn a_dreq_to_an_answered_ud_id_changes_nothing() {
    let (h, cm, out) = setup();
    let (globex, _, id) = queried(&h, &cm);
    globex.accept(&cm, &h, id, QPN, b"").expect("accept");
    out.take();
    let dreq = PeerBody::Dreq(proto::PeerDreq {
        to_id: id,
        from_id: PEER_ID,
        from_qpn: PEER_QPN,
    });
    cm.on_peer(&h, HOST2, dreq);
    assert!(globex.events().is_empty(), "no DISCONNECTED on a UD id");
    assert_eq!(state(&cm, id), "established");
    assert!(out.take().is_empty());
}
