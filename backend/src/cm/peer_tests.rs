//! The CM's peer path as a hostile peer host meets it (issue 51 point 9):
//! a REQ is admitted only from the host that holds its source, to an
//! endpoint served here, when the security groups allow it; a REP, REJ,
//! RTU or DREQ that is not the sender's to send (another host's
//! connection, another id, the wrong phase) changes nothing; a flood of
//! REQs stops at the endpoint's `tenantLimits.cmIds`.
use super::fakes::*;
use super::*;
use crate::config::TenantLimits;

const PORT: u16 = 7471;
const QPN: u32 = 0x22;

fn setup(limits: TenantLimits) -> (FakeCmHost, Cm, Outbox) {
    let (cm, out) = cm(Duration::from_secs(60));
    (FakeCmHost::new(limits), cm, out)
}

fn req(from_id: u32, vni: u32, src: Ipv4Addr, dst: Ipv4Addr, dst_port: u16) -> PeerBody {
    PeerBody::Req(proto::PeerReq {
        from_id,
        vni,
        src: proto::CmAddr::v4(src, 40000),
        dst: proto::CmAddr::v4(dst, dst_port),
        params: proto::PeerParams {
            qp_num: QPN,
            psn: 1,
            ..Default::default()
        },
        private_data: Vec::new(),
    })
}

fn rep(to_id: u32, from_id: u32) -> PeerBody {
    PeerBody::Rep(proto::PeerRep {
        to_id,
        from_id,
        params: proto::PeerParams {
            qp_num: QPN,
            ..Default::default()
        },
        private_data: Vec::new(),
    })
}

fn rej(to_id: u32, from_id: u32) -> PeerBody {
    PeerBody::Rej(proto::PeerRej {
        to_id,
        from_id,
        reason: proto::CM_REJ_CONSUMER_DEFINED,
        private_data: Vec::new(),
    })
}

fn dreq(to_id: u32, from_id: u32, from_qpn: u32) -> PeerBody {
    PeerBody::Dreq(proto::PeerDreq {
        to_id,
        from_id,
        from_qpn,
    })
}

#[test]
fn a_req_the_security_groups_admit_reaches_the_listener_and_nothing_else() {
    let (h, cm, out) = setup(TenantLimits::default());
    let globex = App::open(&cm, &h, 1, "globex-a").expect("globex-a");
    let acme = App::open(&cm, &h, 2, "acme-a").expect("acme-a");
    let gl = globex.listen(&cm, &h, false, PORT).expect("listen");
    acme.listen(&cm, &h, false, PORT).expect("listen");
    cm.on_peer(&h, HOST2, req(50, GLOBEX, VIP_B, VIP_A, PORT));
    let ev = globex.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_CONNECT_REQUEST]);
    assert_eq!(ev[0].listen_id, gl);
    assert_eq!(ev[0].param.qp_num, QPN);
    assert_eq!(ev[0].addrs.dst.addr, VIP_B.octets(), "the requester");
    assert!(
        acme.events().is_empty(),
        "acme-a, same vIP and port, other VNI"
    );
    assert!(out.take().is_empty(), "nothing answers before the app");
    // The same REQ again (the peer retried) changes nothing.
    let before = table(&cm);
    cm.on_peer(&h, HOST2, req(50, GLOBEX, VIP_B, VIP_A, PORT));
    assert_eq!(table(&cm), before);
    assert!(globex.events().is_empty());
}

#[test]
fn a_req_the_security_groups_deny_is_dropped_without_an_answer() {
    let deny = "version: 1\ntenants:\n  globex:\n    securityGroups:\n      \
                solo: { members: [globex-a] }\n";
    let (h, cm, out) = setup(TenantLimits::default());
    let refs = h.registry.policy_refs();
    let (p, _) = h
        .admission
        .check_text(deny, "deny.yaml", &refs)
        .unwrap_or_else(|e| panic!("{e}"));
    h.admission.apply(p, &h.registry);
    let globex = App::open(&cm, &h, 1, "globex-a").expect("globex-a");
    globex.listen(&cm, &h, false, PORT).expect("listen");
    let before = table(&cm);
    cm.on_peer(&h, HOST2, req(50, GLOBEX, VIP_B, VIP_A, PORT));
    assert!(globex.events().is_empty());
    assert!(out.take().is_empty(), "a firewall's drop: no REJ");
    assert_eq!(table(&cm), before);
}

#[test]
fn a_req_not_from_the_host_of_its_source_or_for_an_endpoint_not_served_here_is_dropped() {
    let (h, cm, out) = setup(TenantLimits::default());
    let globex = App::open(&cm, &h, 1, "globex-a").expect("globex-a");
    globex.listen(&cm, &h, false, PORT).expect("listen");
    let before = table(&cm);
    let cases = [
        (
            "host3 naming host2's vIP",
            HOST3,
            req(1, GLOBEX, VIP_B, VIP_A, PORT),
        ),
        (
            "a host not in the map",
            STRANGER,
            req(2, GLOBEX, VIP_B, VIP_A, PORT),
        ),
        (
            "a VNI not in the map",
            HOST2,
            req(3, 300, VIP_B, VIP_A, PORT),
        ),
        (
            "a vIP served on host3",
            HOST2,
            req(4, GLOBEX, VIP_B, VIP_C, PORT),
        ),
        (
            "an unknown vIP",
            HOST2,
            req(5, GLOBEX, VIP_B, [10, 9, 9, 9].into(), PORT),
        ),
        (
            "host1's own vIP as source",
            HOST2,
            req(6, GLOBEX, VIP_A, VIP_A, PORT),
        ),
        ("a QPN of 0", HOST2, {
            let mut r = req(7, GLOBEX, VIP_B, VIP_A, PORT);
            if let PeerBody::Req(proto::PeerReq { params, .. }) = &mut r {
                params.qp_num = 0;
            }
            r
        }),
    ];
    for (what, from, msg) in cases {
        cm.on_peer(&h, from, msg);
        assert!(globex.events().is_empty(), "{what}");
        assert!(out.take().is_empty(), "{what}");
        assert_eq!(table(&cm), before, "{what}");
    }
    // Admitted, to a port nobody listens on: the peer is told at once.
    cm.on_peer(&h, HOST2, req(8, GLOBEX, VIP_B, VIP_A, PORT + 1));
    match out.take().as_slice() {
        [(
            HOST2,
            PeerBody::Rej(proto::PeerRej {
                to_id: 8, reason, ..
            }),
        )] => {
            assert_eq!(*reason, proto::CM_REJ_INVALID_SERVICE_ID)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(table(&cm), before);
}

/// acme-a connecting to acme-b (host2), and globex-a holding a REQ from
/// globex-b (host2, its id 60): the active id, globex-a's listener and
/// the passive id.
fn two_connections(h: &FakeCmHost, cm: &Cm, out: &Outbox) -> (App, u32, App, u32, u32) {
    let acme = App::open(cm, h, 1, "acme-a").expect("acme-a");
    let active = acme
        .connect(cm, h, false, 5000, (VIP_B, PORT), 0x33)
        .expect("connect");
    match out.take().as_slice() {
        [(HOST2, PeerBody::Req(proto::PeerReq { from_id, vni, .. }))] => {
            assert_eq!((*from_id, *vni), (active, ACME))
        }
        other => panic!("{other:?}"),
    }
    let globex = App::open(cm, h, 2, "globex-a").expect("globex-a");
    let listener = globex.listen(cm, h, false, PORT).expect("listen");
    cm.on_peer(h, HOST2, req(60, GLOBEX, VIP_B, VIP_A, PORT));
    let ev = globex.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_CONNECT_REQUEST]);
    let passive = ev[0].id;
    acme.events();
    (acme, active, globex, listener, passive)
}

#[test]
fn a_rep_rej_rtu_or_dreq_not_the_senders_to_send_changes_nothing() {
    let (h, cm, out) = setup(TenantLimits::default());
    let (acme, active, globex, listener, passive) = two_connections(&h, &cm, &out);
    let before = table(&cm);
    let cases = [
        ("REP from another host", HOST3, rep(active, 70)),
        ("REP to the passive id", HOST2, rep(passive, 60)),
        ("REP to the listener", HOST2, rep(listener, 70)),
        ("REP to no id", HOST2, rep(9999, 70)),
        ("REJ from another host", HOST3, rej(active, 70)),
        (
            "REJ to the passive id from another id",
            HOST2,
            rej(passive, 61),
        ),
        (
            "REJ to the passive id from another host",
            HOST3,
            rej(passive, 60),
        ),
        (
            "RTU before the app accepted",
            HOST2,
            PeerBody::Rtu(proto::PeerRtu {
                to_id: passive,
                from_id: 60,
            }),
        ),
        (
            "RTU to the active id",
            HOST2,
            PeerBody::Rtu(proto::PeerRtu {
                to_id: active,
                from_id: 70,
            }),
        ),
        ("DREQ to the connecting id", HOST2, dreq(active, 70, QPN)),
        (
            "DREQ before the app accepted",
            HOST2,
            dreq(passive, 60, QPN),
        ),
        ("DREQ naming no id, only a QPN", HOST2, dreq(0, 61, QPN)),
    ];
    for (what, from, msg) in cases {
        cm.on_peer(&h, from, msg);
        assert!(acme.events().is_empty(), "{what}");
        assert!(globex.events().is_empty(), "{what}");
        assert_eq!(table(&cm), before, "{what}");
        // A REP for an id that does not wait for one is answered with a
        // REJ to its sender (its side must not wait for an RTU), naming
        // the sender's id: nothing else goes out.
        for (to, m) in out.take() {
            assert_eq!(to, from, "{what}");
            assert!(
                matches!(m, PeerBody::Rej(proto::PeerRej { to_id: 70 | 60, .. })),
                "{what}: {m:?}"
            );
        }
    }
    // The right sender is still heard: host2's REP, then a REJ from
    // another of its ids is not its connection's.
    cm.on_peer(&h, HOST2, rep(active, 70));
    assert_eq!(kinds(&acme.events()), [proto::CM_EVENT_CONNECT_RESPONSE]);
    cm.on_peer(&h, HOST2, rej(active, 71));
    cm.on_peer(&h, HOST3, dreq(active, 70, QPN));
    cm.on_peer(&h, HOST2, dreq(active, 71, QPN));
    assert!(acme.events().is_empty());
    cm.on_peer(&h, HOST2, rej(active, 70));
    assert_eq!(kinds(&acme.events()), [proto::CM_EVENT_REJECTED]);
    assert!(globex.events().is_empty());
}

#[test]
fn a_flood_of_reqs_stops_at_the_endpoints_cm_ids_with_rej_no_resources() {
    let limits = TenantLimits {
        cm_ids: 4,
        ..Default::default()
    };
    let (h, cm, out) = setup(limits);
    let globex = App::open(&cm, &h, 1, "globex-a").expect("globex-a");
    globex.listen(&cm, &h, false, PORT).expect("listen");
    for n in 0..20 {
        cm.on_peer(&h, HOST2, req(100 + n, GLOBEX, VIP_B, VIP_A, PORT));
    }
    assert_eq!(globex.events().len(), 3, "the listener and three requests");
    let rejected: Vec<u32> = out
        .take()
        .into_iter()
        .map(|(to, m)| match m {
            PeerBody::Rej(proto::PeerRej {
                to_id,
                from_id: 0,
                reason: CM_REJ_NO_RESOURCES,
                ..
            }) if to == HOST2 => to_id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(rejected, (103..120).collect::<Vec<_>>());
    assert_eq!(table(&cm).len(), 4);
    let globex_ep = h.endpoint("globex-a");
    assert_eq!(
        globex_ep.usage.held(crate::endpoints::usage::What::CmIds),
        4
    );
    // acme-a, on the same host, still gets its ids.
    let acme = App::open(&cm, &h, 2, "acme-a").expect("acme-a");
    acme.create_id(&cm, &h, false).expect("acme-a's id");
}

#[test]
fn a_ud_query_from_a_peer_reannounces_to_that_peer_only() {
    let (h, cm, out) = setup(TenantLimits::default());
    cm.on_peer(&h, HOST3, PeerBody::UdQuery(proto::PeerUdQuery {}));
    assert_eq!(*h.reannounced.lock().expect("lock"), [HOST3]);
    assert!(out.take().is_empty());
}
