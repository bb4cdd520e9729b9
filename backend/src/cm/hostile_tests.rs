//! What a tenant's app or a peer host may not do to the CM, through the
//! CM's fake host: a request naming an id or channel of another app, or
//! one that does not exist, is refused (ENOENT); a request or a peer's
//! message in the wrong phase is refused or dropped; none of them changes
//! an id, sends a message or delivers an event.
use super::fakes::*;
use super::*;
use crate::config::TenantLimits;

const PORT: u16 = 7471;
const QPN: u32 = 0x33;
const PEER_QPN: u32 = 0x44;

fn setup() -> (FakeCmHost, Cm, Outbox) {
    let (cm, out) = cm(Duration::from_secs(60));
    (FakeCmHost::new(TenantLimits::default()), cm, out)
}

/// Every request that names an id, for id `id` (migrating to `channel`).
fn id_requests(id: u32, channel: u32) -> Vec<(&'static str, proto::RequestBody)> {
    use proto::RequestBody as R;
    let addr = proto::CmAddr {
        addr: VIP_A.octets(),
        port: 9000,
    };
    let param = proto::CmConnParam {
        qp_num: QPN,
        ..Default::default()
    };
    vec![
        ("destroy", R::CmDestroyId(proto::CmId { id })),
        (
            "migrate",
            R::CmMigrateId(proto::CmMigrateReq { id, channel }),
        ),
        ("bind", R::CmBindAddr(proto::CmBindReq { id, addr })),
        (
            "resolve",
            R::CmResolveAddr(proto::CmResolveAddrReq {
                id,
                timeout_ms: 1000,
                has_src: 0,
                src: Default::default(),
                dst: proto::CmAddr {
                    addr: VIP_B.octets(),
                    port: PORT,
                },
            }),
        ),
        ("route", R::CmResolveRoute(proto::CmId { id })),
        ("listen", R::CmListen(proto::CmListenReq { id, backlog: 1 })),
        (
            "connect",
            R::CmConnect(proto::CmConnectReq {
                id,
                param: param.clone(),
            }),
        ),
        ("accept", R::CmAccept(proto::CmConnectReq { id, param })),
        (
            "reject",
            R::CmReject(proto::CmRejectReq {
                id,
                private_data: Vec::new(),
            }),
        ),
        ("disconnect", R::CmDisconnect(proto::CmId { id })),
        (
            "init qp attr",
            R::CmInitQpAttr(proto::CmInitQpAttrReq { id, qp_state: 1 }),
        ),
        ("establish", R::CmEstablish(proto::CmId { id })),
    ]
}

/// globex-a's app (session 1): a listener on PORT, the id a REQ from
/// globex-b made (accepted if `accept`), and an idle id.
fn victim(h: &FakeCmHost, cm: &Cm, out: &Outbox, accept: bool) -> (App, Vec<u32>) {
    let globex = App::open(cm, h, 1, "globex-a").expect("globex-a");
    let listener = globex.listen(cm, h, false, PORT).expect("listen");
    let req = PeerBody::Req(proto::PeerReq {
        from_id: 60,
        vni: GLOBEX,
        src: proto::CmAddr::v4(VIP_B, 40000),
        dst: proto::CmAddr::v4(VIP_A, PORT),
        params: params(PEER_QPN),
        private_data: Vec::new(),
    });
    cm.on_peer(h, HOST2, req);
    let passive = globex.events()[0].id;
    if accept {
        globex.accept(cm, h, passive, QPN, b"").expect("accept");
    }
    let idle = globex.create_id(cm, h, false).expect("id");
    out.take();
    (globex, vec![listener, passive, idle])
}

/// Nothing changed since `before`: the ids, the outbox and the events.
fn unchanged(cm: &Cm, out: &Outbox, apps: &[&App], before: &[(u64, String, String)], what: &str) {
    assert_eq!(table(cm), before, "{what}");
    assert!(out.take().is_empty(), "{what}");
    for app in apps {
        assert!(app.events().is_empty(), "{what}");
    }
}

#[test]
fn every_request_naming_another_apps_id_is_refused_enoent_and_changes_nothing() {
    let (h, cm, out) = setup();
    let (victim, ids) = victim(&h, &cm, &out, false);
    // Another app of the same endpoint, and one of another tenant.
    let same_ep = App::open(&cm, &h, 2, "globex-a").expect("globex-a");
    let other = App::open(&cm, &h, 3, "acme-a").expect("acme-a");
    let before = table(&cm);
    for app in [&same_ep, &other] {
        for &id in &ids {
            for (what, req) in id_requests(id, app.channel) {
                assert_eq!(app.ask(&cm, &h, req), Err(libc::ENOENT), "{what} {id}");
                unchanged(&cm, &out, &[&victim, app], &before, what);
            }
        }
    }
}

#[test]
fn every_request_naming_an_unknown_id_is_refused_enoent() {
    let (h, cm, out) = setup();
    let app = App::open(&cm, &h, 1, "acme-a").expect("acme-a");
    let before = table(&cm);
    for id in [0, 9999, u32::MAX] {
        for (what, req) in id_requests(id, app.channel) {
            assert_eq!(app.ask(&cm, &h, req), Err(libc::ENOENT), "{what} {id}");
            unchanged(&cm, &out, &[&app], &before, what);
        }
    }
}

#[test]
fn a_channel_of_another_app_is_not_the_callers_to_use_or_destroy() {
    let (h, cm, out) = setup();
    let (victim, _) = victim(&h, &cm, &out, true);
    let other = App::open(&cm, &h, 2, "globex-a").expect("globex-a");
    let mine = other.create_id(&cm, &h, false).expect("id");
    let before = table(&cm);
    let theirs = victim.channel;
    let requests = [
        (
            "create an id",
            proto::RequestBody::CmCreateId(proto::CmCreateIdReq {
                channel: theirs,
                port_space: proto::CM_PS_TCP,
            }),
        ),
        (
            "migrate to it",
            proto::RequestBody::CmMigrateId(proto::CmMigrateReq {
                id: mine,
                channel: theirs,
            }),
        ),
        (
            "destroy it",
            proto::RequestBody::CmDestroyChannel(proto::CmChannel { channel: theirs }),
        ),
        (
            "restore an id on it",
            proto::RequestBody::CmRestoreId(proto::CmRestoreIdReq {
                id: 777,
                channel: theirs,
                port_space: proto::CM_PS_TCP,
                state: proto::CM_RESTORE_BOUND,
                ..Default::default()
            }),
        ),
        (
            "destroy a channel that does not exist",
            proto::RequestBody::CmDestroyChannel(proto::CmChannel { channel: 9999 }),
        ),
    ];
    for (what, req) in requests {
        assert_eq!(other.ask(&cm, &h, req), Err(libc::ENOENT), "{what}");
        unchanged(&cm, &out, &[&victim, &other], &before, what);
    }
}

#[test]
fn a_request_that_is_not_the_cms_is_refused_eproto() {
    let (h, cm, out) = setup();
    let app = App::open(&cm, &h, 1, "acme-a").expect("acme-a");
    let before = table(&cm);
    let req = proto::RequestBody::CmAcceptQp(proto::CmAcceptQpReq::default());
    assert_eq!(app.ask(&cm, &h, req), Err(libc::EPROTO));
    unchanged(&cm, &out, &[&app], &before, "accept qp");
}

#[test]
fn requests_in_the_wrong_phase_are_refused_einval_and_change_nothing() {
    let (h, cm, out) = setup();
    let (globex, ids) = victim(&h, &cm, &out, true);
    let [listener, passive, idle] = ids[..] else {
        panic!("{ids:?}")
    };
    let acme = App::open(&cm, &h, 2, "acme-a").expect("acme-a");
    let connecting = acme
        .connect(&cm, &h, false, 5000, (VIP_B, PORT), QPN)
        .expect("connect");
    out.take();
    acme.events();
    let before = table(&cm);
    let find = |id, what| {
        id_requests(id, 0)
            .into_iter()
            .find(|(w, _)| *w == what)
            .map(|(_, r)| r)
            .unwrap_or_else(|| panic!("{what}"))
    };
    let cases = [
        (&globex, listener, "route"),
        (&globex, listener, "connect"),
        (&globex, listener, "accept"),
        (&globex, listener, "reject"),
        (&globex, listener, "disconnect"),
        (&globex, listener, "establish"),
        (&globex, listener, "bind"),
        (&globex, passive, "listen"),
        (&globex, passive, "resolve"),
        (&globex, passive, "connect"),
        (&globex, passive, "accept"),
        (&globex, passive, "reject"),
        (&globex, passive, "establish"),
        (&globex, idle, "route"),
        (&globex, idle, "connect"),
        (&globex, idle, "accept"),
        (&globex, idle, "establish"),
        (&acme, connecting, "listen"),
        (&acme, connecting, "resolve"),
        (&acme, connecting, "route"),
        (&acme, connecting, "connect"),
        (&acme, connecting, "accept"),
        (&acme, connecting, "disconnect"),
    ];
    for (app, id, what) in cases {
        assert_eq!(
            app.ask(&cm, &h, find(id, what)),
            Err(libc::EINVAL),
            "{what} {id}"
        );
        unchanged(&cm, &out, &[&globex, &acme], &before, what);
    }
}

#[test]
fn peer_messages_for_ids_in_the_wrong_phase_change_nothing() {
    let (h, cm, out) = setup();
    let (globex, ids) = victim(&h, &cm, &out, false);
    let [listener, requested, idle] = ids[..] else {
        panic!("{ids:?}")
    };
    let before = table(&cm);
    let cases = [
        (
            "RTU to a request not accepted",
            PeerBody::Rtu(proto::PeerRtu {
                to_id: requested,
                from_id: 60,
            }),
        ),
        (
            "DREQ to a request not accepted",
            PeerBody::Dreq(proto::PeerDreq {
                to_id: requested,
                from_id: 60,
                from_qpn: PEER_QPN,
            }),
        ),
        (
            "REJ to the listener",
            PeerBody::Rej(proto::PeerRej {
                to_id: listener,
                from_id: 60,
                reason: 28,
                private_data: Vec::new(),
            }),
        ),
        (
            "REJ to an idle id",
            PeerBody::Rej(proto::PeerRej {
                to_id: idle,
                from_id: 0,
                reason: 28,
                private_data: Vec::new(),
            }),
        ),
        (
            "DREQ to the listener",
            PeerBody::Dreq(proto::PeerDreq {
                to_id: listener,
                from_id: 60,
                from_qpn: PEER_QPN,
            }),
        ),
        (
            "SIDR REP to a TCP request",
            PeerBody::SidrRep(proto::PeerSidrRep {
                to_id: requested,
                status: 0,
                qp_num: 1,
                qkey: 1,
                private_data: Vec::new(),
            }),
        ),
        (
            "SIDR REP to no id",
            PeerBody::SidrRep(proto::PeerSidrRep {
                to_id: 9999,
                status: 0,
                qp_num: 1,
                qkey: 1,
                private_data: Vec::new(),
            }),
        ),
        (
            "RTU to no id",
            PeerBody::Rtu(proto::PeerRtu {
                to_id: 9999,
                from_id: 60,
            }),
        ),
        (
            "DREQ to no id",
            PeerBody::Dreq(proto::PeerDreq {
                to_id: 9999,
                from_id: 60,
                from_qpn: PEER_QPN,
            }),
        ),
    ];
    for (what, msg) in cases {
        cm.on_peer(&h, HOST2, msg);
        unchanged(&cm, &out, &[&globex], &before, what);
    }
}

#[test]
fn a_rep_to_an_id_that_waits_for_none_is_refused_with_a_rej_and_changes_nothing() {
    let (h, cm, out) = setup();
    let (globex, ids) = victim(&h, &cm, &out, true);
    let before = table(&cm);
    for id in ids {
        let rep = PeerBody::Rep(proto::PeerRep {
            to_id: id,
            from_id: 60,
            params: params(PEER_QPN),
            private_data: Vec::new(),
        });
        cm.on_peer(&h, HOST2, rep);
        assert_eq!(table(&cm), before, "{id}");
        assert!(globex.events().is_empty(), "{id}");
        assert!(
            matches!(
                out.take().as_slice(),
                [(HOST2, PeerBody::Rej(proto::PeerRej { to_id: 60, .. }))]
            ),
            "{id}"
        );
    }
}

#[test]
fn a_second_rep_to_a_connecting_id_is_refused_after_the_first() {
    let (h, cm, out) = setup();
    let acme = App::open(&cm, &h, 1, "acme-a").expect("acme-a");
    let id = acme
        .connect(&cm, &h, false, 5000, (VIP_B, PORT), QPN)
        .expect("connect");
    out.take();
    acme.events();
    let rep = |from_id| {
        PeerBody::Rep(proto::PeerRep {
            to_id: id,
            from_id,
            params: params(PEER_QPN),
            private_data: Vec::new(),
        })
    };
    cm.on_peer(&h, HOST2, rep(70));
    assert_eq!(kinds(&acme.events()), [proto::CM_EVENT_CONNECT_RESPONSE]);
    let before = table(&cm);
    cm.on_peer(&h, HOST2, rep(71));
    assert_eq!(table(&cm), before);
    assert!(acme.events().is_empty());
    assert!(matches!(
        out.take().as_slice(),
        [(HOST2, PeerBody::Rej(proto::PeerRej { to_id: 71, .. }))]
    ));
    // The first REP's peer is the one the RTU goes to.
    let establish = proto::RequestBody::CmEstablish(proto::CmId { id });
    acme.ask(&cm, &h, establish).expect("establish");
    assert!(matches!(
        out.take().as_slice(),
        [(HOST2, PeerBody::Rtu(proto::PeerRtu { to_id: 70, .. }))]
    ));
}
