//! The ends of an RDMA CM connection through the CM's fake host: a reject
//! from either side (the app's: a REJ to the peer; the peer's: REJECTED),
//! a disconnect from either side (DREQ, DISCONNECTED), an id or channel
//! destroyed, and the app exiting: its peers are told and its ports and
//! ids are free at once.
use super::fakes::*;
use super::*;
use crate::config::TenantLimits;
use crate::endpoints::usage::What;

const PORT: u16 = 7471;
const SRC_PORT: u16 = 5000;
const QPN: u32 = 0x33;
const PEER_QPN: u32 = 0x44;
/// The peer's id: 70 for the active side's peer, 60 for the passive's.
const PEER_OF_ACTIVE: u32 = 70;
const PEER_OF_PASSIVE: u32 = 60;

fn setup_with(timeout: Duration) -> (FakeCmHost, Cm, Outbox) {
    let (cm, out) = cm(timeout);
    (FakeCmHost::new(TenantLimits::default()), cm, out)
}

fn setup() -> (FakeCmHost, Cm, Outbox) {
    setup_with(Duration::from_secs(60))
}

fn ask_id(kind: fn(proto::CmId) -> proto::RequestBody, id: u32) -> proto::RequestBody {
    kind(proto::CmId { id })
}

fn reject(id: u32, private_data: &[u8]) -> proto::RequestBody {
    proto::RequestBody::CmReject(proto::CmRejectReq {
        id,
        private_data: private_data.to_vec(),
    })
}

fn rej_in(to_id: u32, from_id: u32, reason: i32, private_data: Vec<u8>) -> PeerBody {
    PeerBody::Rej(proto::PeerRej {
        to_id,
        from_id,
        reason,
        private_data,
    })
}

fn dreq(to_id: u32, from_id: u32, from_qpn: u32) -> PeerBody {
    PeerBody::Dreq(proto::PeerDreq {
        to_id,
        from_id,
        from_qpn,
    })
}

/// Session `session` of acme-a connecting to acme-b from SRC_PORT with
/// QP `QPN` (the REQ taken), and the REP in if `answered`.
fn active(h: &FakeCmHost, cm: &Cm, out: &Outbox, session: u64, answered: bool) -> (App, u32) {
    let acme = App::open(cm, h, session, "acme-a").expect("acme-a");
    let id = acme
        .connect(cm, h, false, SRC_PORT, (VIP_B, PORT), QPN)
        .expect("connect");
    out.take();
    acme.events();
    if answered {
        let rep = PeerBody::Rep(proto::PeerRep {
            to_id: id,
            from_id: PEER_OF_ACTIVE,
            params: params(PEER_QPN),
            private_data: Vec::new(),
        });
        cm.on_peer(h, HOST2, rep);
        assert_eq!(kinds(&acme.events()), [proto::CM_EVENT_CONNECT_RESPONSE]);
    }
    acme.events();
    (acme, id)
}

/// The active id established (RTU sent).
fn active_established(h: &FakeCmHost, cm: &Cm, out: &Outbox) -> (App, u32) {
    let (acme, id) = active(h, cm, out, 1, true);
    acme.ask(cm, h, ask_id(proto::RequestBody::CmEstablish, id))
        .expect("establish");
    out.take();
    (acme, id)
}

/// Session `session` of globex-a listening on PORT, and the id a REQ
/// from globex-b's id 60 made: (app, listener, id).
fn requested(h: &FakeCmHost, cm: &Cm, session: u64) -> (App, u32, u32) {
    let globex = App::open(cm, h, session, "globex-a").expect("globex-a");
    let listener = globex.listen(cm, h, false, PORT).expect("listen");
    let req = PeerBody::Req(proto::PeerReq {
        from_id: PEER_OF_PASSIVE,
        vni: GLOBEX,
        src: proto::CmAddr::v4(VIP_B, 40000),
        dst: proto::CmAddr::v4(VIP_A, PORT),
        params: params(PEER_QPN),
        private_data: Vec::new(),
    });
    cm.on_peer(h, HOST2, req);
    let ev = globex.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_CONNECT_REQUEST]);
    (globex, listener, ev[0].id)
}

/// The passive id accepted with QP `QPN` and established by the RTU.
fn passive_established(h: &FakeCmHost, cm: &Cm, out: &Outbox, session: u64) -> (App, u32) {
    let (globex, _, id) = requested(h, cm, session);
    globex.accept(cm, h, id, QPN, b"").expect("accept");
    let rtu = PeerBody::Rtu(proto::PeerRtu {
        to_id: id,
        from_id: PEER_OF_PASSIVE,
    });
    cm.on_peer(h, HOST2, rtu);
    assert_eq!(kinds(&globex.events()), [proto::CM_EVENT_ESTABLISHED]);
    out.take();
    (globex, id)
}

#[test]
fn the_passive_app_rejecting_a_request_sends_a_rej_with_its_private_data() {
    let (h, cm, out) = setup();
    let (globex, listener, id) = requested(&h, &cm, 1);
    globex.ask(&cm, &h, reject(id, b"busy")).expect("reject");
    match out.take().as_slice() {
        [(
            HOST2,
            PeerBody::Rej(proto::PeerRej {
                to_id: PEER_OF_PASSIVE,
                from_id,
                reason,
                private_data,
            }),
        )] => {
            assert_eq!(*from_id, id);
            assert_eq!(*reason, proto::CM_REJ_CONSUMER_DEFINED);
            assert_eq!(private_data.as_slice(), b"busy");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(state(&cm, id), "closed");
    assert_eq!(state(&cm, listener), "listening");
    assert!(globex.events().is_empty());
    assert_eq!(
        globex.accept(&cm, &h, id, QPN, b""),
        Err(libc::EINVAL),
        "rejected"
    );
    assert_eq!(
        globex.ask(&cm, &h, reject(id, b"")),
        Err(libc::EINVAL),
        "once"
    );
    assert!(out.take().is_empty());
}

#[test]
fn the_active_app_rejecting_a_connect_response_sends_a_rej_to_the_peers_id() {
    let (h, cm, out) = setup();
    let (acme, id) = active(&h, &cm, &out, 1, true);
    acme.ask(&cm, &h, reject(id, b"")).expect("reject");
    match out.take().as_slice() {
        [(HOST2, PeerBody::Rej(proto::PeerRej { to_id, from_id, .. }))] => {
            assert_eq!((*to_id, *from_id), (PEER_OF_ACTIVE, id))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(state(&cm, id), "closed");
    let establish = ask_id(proto::RequestBody::CmEstablish, id);
    assert_eq!(acme.ask(&cm, &h, establish), Err(libc::EINVAL));
}

#[test]
fn reject_without_a_pending_connection_is_refused_and_sends_nothing() {
    let (h, cm, out) = setup();
    let (acme, connecting) = active(&h, &cm, &out, 1, false);
    assert_eq!(
        acme.ask(&cm, &h, reject(connecting, b"")),
        Err(libc::EINVAL)
    );
    let idle = acme.create_id(&cm, &h, false).expect("id");
    assert_eq!(acme.ask(&cm, &h, reject(idle, b"")), Err(libc::EINVAL));
    let (globex, listener, id) = requested(&h, &cm, 2);
    assert_eq!(
        globex.ask(&cm, &h, reject(listener, b"")),
        Err(libc::EINVAL)
    );
    globex.accept(&cm, &h, id, QPN, b"").expect("accept");
    out.take();
    assert_eq!(
        globex.ask(&cm, &h, reject(id, b"")),
        Err(libc::EINVAL),
        "accepted"
    );
    assert!(out.take().is_empty());
    assert_eq!(state(&cm, connecting), "connecting");
    assert_eq!(state(&cm, id), "repsent");
}

#[test]
fn a_rej_from_the_peer_gives_rejected_with_its_reason_and_stops_the_clock() {
    let (h, cm, out) = setup_with(Duration::ZERO);
    let (acme, id) = active(&h, &cm, &out, 1, false);
    let data = vec![9u8; proto::CM_REJ_PRIVATE_DATA + 10];
    cm.on_peer(&h, HOST2, rej_in(id, PEER_OF_ACTIVE, 28, data));
    let ev = acme.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_REJECTED]);
    assert_eq!(ev[0].status, 28);
    assert_eq!(ev[0].param.private_data.len(), proto::CM_REJ_PRIVATE_DATA);
    assert_eq!(state(&cm, id), "closed");
    cm.expire();
    assert!(acme.events().is_empty(), "no timeout after the REJ");
    assert!(out.take().is_empty());
}

#[test]
fn a_rej_for_a_port_nobody_listens_on_reaches_the_connecting_id() {
    let (h, cm, out) = setup();
    let (acme, id) = active(&h, &cm, &out, 1, false);
    // The peer's masqd rejects for its listener: from id 0.
    cm.on_peer(
        &h,
        HOST2,
        rej_in(id, 0, proto::CM_REJ_INVALID_SERVICE_ID, Vec::new()),
    );
    let ev = acme.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_REJECTED]);
    assert_eq!(ev[0].status, proto::CM_REJ_INVALID_SERVICE_ID);
}

#[test]
fn a_rej_after_accept_closes_the_passive_id_and_a_late_rtu_changes_nothing() {
    let (h, cm, out) = setup();
    let (globex, _, id) = requested(&h, &cm, 1);
    globex.accept(&cm, &h, id, QPN, b"").expect("accept");
    out.take();
    cm.on_peer(&h, HOST2, rej_in(id, PEER_OF_PASSIVE, 5, Vec::new()));
    assert_eq!(kinds(&globex.events()), [proto::CM_EVENT_REJECTED]);
    assert_eq!(state(&cm, id), "closed");
    let rtu = PeerBody::Rtu(proto::PeerRtu {
        to_id: id,
        from_id: PEER_OF_PASSIVE,
    });
    cm.on_peer(&h, HOST2, rtu);
    assert!(globex.events().is_empty());
    assert_eq!(state(&cm, id), "closed");
    assert_eq!(cm.role_of("globex-a", QPN), None, "no longer a connection");
}

#[test]
fn the_active_app_disconnecting_sends_a_dreq_and_gets_disconnected_once() {
    let (h, cm, out) = setup();
    let (acme, id) = active_established(&h, &cm, &out);
    let disconnect = ask_id(proto::RequestBody::CmDisconnect, id);
    acme.ask(&cm, &h, disconnect.clone()).expect("disconnect");
    assert_eq!(out.take(), [(HOST2, dreq(PEER_OF_ACTIVE, id, QPN))]);
    assert_eq!(kinds(&acme.events()), [proto::CM_EVENT_DISCONNECTED]);
    assert_eq!(state(&cm, id), "closed");
    assert_eq!(acme.ask(&cm, &h, disconnect), Err(libc::EINVAL));
    assert!(out.take().is_empty());
    assert!(acme.events().is_empty());
}

#[test]
fn the_passive_app_disconnecting_sends_a_dreq_to_its_peers_id() {
    let (h, cm, out) = setup();
    let (globex, id) = passive_established(&h, &cm, &out, 1);
    globex
        .ask(&cm, &h, ask_id(proto::RequestBody::CmDisconnect, id))
        .expect("disconnect");
    assert_eq!(out.take(), [(HOST2, dreq(PEER_OF_PASSIVE, id, QPN))]);
    assert_eq!(kinds(&globex.events()), [proto::CM_EVENT_DISCONNECTED]);
}

#[test]
fn a_dreq_from_the_peer_gives_disconnected_and_the_apps_disconnect_then_sends_nothing() {
    let (h, cm, out) = setup();
    let (acme, id) = active_established(&h, &cm, &out);
    cm.on_peer(&h, HOST2, dreq(id, PEER_OF_ACTIVE, PEER_QPN));
    assert_eq!(kinds(&acme.events()), [proto::CM_EVENT_DISCONNECTED]);
    assert_eq!(state(&cm, id), "peerclosed");
    cm.on_peer(&h, HOST2, dreq(id, PEER_OF_ACTIVE, PEER_QPN));
    assert!(acme.events().is_empty(), "disconnected once");
    acme.ask(&cm, &h, ask_id(proto::RequestBody::CmDisconnect, id))
        .expect("the answer to the DREQ");
    assert!(out.take().is_empty(), "no DREQ back");
    assert!(acme.events().is_empty(), "no second DISCONNECTED");
    assert_eq!(state(&cm, id), "closed");
}

#[test]
fn a_dreq_during_the_handshake_ends_a_rep_sent_or_rep_received_id() {
    let (h, cm, out) = setup_with(Duration::ZERO);
    let (acme, active_id) = active(&h, &cm, &out, 1, true);
    cm.on_peer(&h, HOST2, dreq(active_id, PEER_OF_ACTIVE, PEER_QPN));
    assert_eq!(kinds(&acme.events()), [proto::CM_EVENT_DISCONNECTED]);
    assert_eq!(state(&cm, active_id), "peerclosed");
    let (globex, _, id) = requested(&h, &cm, 2);
    globex.accept(&cm, &h, id, QPN, b"").expect("accept");
    cm.on_peer(&h, HOST2, dreq(id, PEER_OF_PASSIVE, PEER_QPN));
    assert_eq!(kinds(&globex.events()), [proto::CM_EVENT_DISCONNECTED]);
    assert_eq!(state(&cm, id), "peerclosed");
    cm.expire();
    assert!(
        globex.events().is_empty(),
        "the DREQ stopped the accept's clock"
    );
}

#[test]
fn disconnect_without_a_connection_or_of_a_ud_id_is_refused() {
    let (h, cm, out) = setup();
    let (acme, connecting) = active(&h, &cm, &out, 1, false);
    let disconnect = |id| ask_id(proto::RequestBody::CmDisconnect, id);
    assert_eq!(acme.ask(&cm, &h, disconnect(connecting)), Err(libc::EINVAL));
    let idle = acme.create_id(&cm, &h, false).expect("id");
    assert_eq!(acme.ask(&cm, &h, disconnect(idle)), Err(libc::EINVAL));
    let ud = acme.create_id(&cm, &h, true).expect("UD id");
    assert_eq!(acme.ask(&cm, &h, disconnect(ud)), Err(libc::EINVAL));
    let (globex, _, id) = requested(&h, &cm, 2);
    assert_eq!(
        globex.ask(&cm, &h, disconnect(id)),
        Err(libc::EINVAL),
        "not accepted"
    );
    assert!(out.take().is_empty());
    assert_eq!(state(&cm, connecting), "connecting");
    assert_eq!(state(&cm, id), "reqreceived");
}

#[test]
fn destroying_an_established_id_sends_a_dreq_and_frees_its_port() {
    let (h, cm, out) = setup();
    let (acme, id) = active_established(&h, &cm, &out);
    acme.ask(&cm, &h, ask_id(proto::RequestBody::CmDestroyId, id))
        .expect("destroy");
    assert_eq!(out.take(), [(HOST2, dreq(PEER_OF_ACTIVE, id, QPN))]);
    assert_eq!(state(&cm, id), "gone");
    assert!(acme.events().is_empty(), "a destroyed id has no events");
    acme.listen(&cm, &h, false, SRC_PORT)
        .expect("its port is free");
    let destroy = ask_id(proto::RequestBody::CmDestroyId, id);
    assert_eq!(acme.ask(&cm, &h, destroy), Err(libc::ENOENT));
}

#[test]
fn destroying_an_unanswered_request_rejects_it_and_leaves_the_listeners_port() {
    let (h, cm, out) = setup();
    let (globex, listener, id) = requested(&h, &cm, 1);
    globex
        .ask(&cm, &h, ask_id(proto::RequestBody::CmDestroyId, id))
        .expect("destroy");
    match out.take().as_slice() {
        [(
            HOST2,
            PeerBody::Rej(proto::PeerRej {
                to_id: PEER_OF_PASSIVE,
                from_id,
                reason,
                ..
            }),
        )] => {
            assert_eq!((*from_id, *reason), (id, proto::CM_REJ_CONSUMER_DEFINED))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(state(&cm, listener), "listening");
    let other = App::open(&cm, &h, 2, "globex-a").expect("globex-a");
    assert_eq!(
        other.listen(&cm, &h, false, PORT).map_err(|r| r.errno()),
        Err(libc::EADDRINUSE),
        "the listener still holds the port"
    );
}

#[test]
fn destroying_a_connecting_id_sends_nothing_and_frees_its_port() {
    let (h, cm, out) = setup();
    let (acme, id) = active(&h, &cm, &out, 1, false);
    acme.ask(&cm, &h, ask_id(proto::RequestBody::CmDestroyId, id))
        .expect("destroy");
    assert!(out.take().is_empty());
    acme.listen(&cm, &h, false, SRC_PORT)
        .expect("its port is free");
    // The REP that comes later finds no id: the peer is told.
    let rep = PeerBody::Rep(proto::PeerRep {
        to_id: id,
        from_id: PEER_OF_ACTIVE,
        params: params(PEER_QPN),
        private_data: Vec::new(),
    });
    cm.on_peer(&h, HOST2, rep);
    assert!(matches!(
        out.take().as_slice(),
        [(
            HOST2,
            PeerBody::Rej(proto::PeerRej {
                to_id: PEER_OF_ACTIVE,
                ..
            })
        )]
    ));
}

#[test]
fn the_app_exiting_tells_each_peer_and_frees_its_ports_channels_and_ids() {
    let (h, cm, out) = setup();
    let (_globex, passive) = passive_established(&h, &cm, &out, 1);
    let acme = App::open(&cm, &h, 2, "acme-a").expect("acme-a, another app");
    let kept = acme.listen(&cm, &h, false, PORT).expect("listen");
    cm.session_gone(1);
    assert_eq!(out.take(), [(HOST2, dreq(PEER_OF_PASSIVE, passive, QPN))]);
    let ids: Vec<u64> = table(&cm).into_iter().map(|(i, _, _)| i).collect();
    assert_eq!(ids, [u64::from(kept)], "only the other app's id is left");
    let ep = h.endpoint("globex-a");
    assert_eq!(ep.usage.held(What::CmIds), 0);
    assert_eq!(ep.usage.held(What::EventChannels), 0);
    let next = App::open(&cm, &h, 3, "globex-a").expect("globex-a's next app");
    next.listen(&cm, &h, false, PORT)
        .expect("the listener's port is free");
}

#[test]
fn destroying_a_channel_ends_its_ids_and_no_other_channels() {
    let (h, cm, out) = setup();
    let (acme, id) = active_established(&h, &cm, &out);
    let other = App::open(&cm, &h, 1, "acme-a").expect("a second channel");
    let kept = other.create_id(&cm, &h, false).expect("id");
    let destroy = proto::RequestBody::CmDestroyChannel(proto::CmChannel {
        channel: acme.channel,
    });
    acme.ask(&cm, &h, destroy.clone()).expect("destroy");
    assert_eq!(out.take(), [(HOST2, dreq(PEER_OF_ACTIVE, id, QPN))]);
    assert_eq!(state(&cm, id), "gone");
    assert_eq!(state(&cm, kept), "idle");
    assert_eq!(acme.ask(&cm, &h, destroy), Err(libc::ENOENT), "once");
}

#[test]
fn a_port_held_by_an_exited_app_is_taken_back_when_bound_again() {
    let (h, cm, out) = setup();
    let (_globex, id) = passive_established(&h, &cm, &out, 1);
    // The app exited; its session thread has not closed it yet.
    h.gone.lock().expect("gone").push(1);
    let next = App::open(&cm, &h, 2, "globex-a").expect("globex-a's next app");
    next.listen(&cm, &h, false, PORT)
        .expect("the exited app's port");
    assert_eq!(state(&cm, id), "gone");
    assert_eq!(out.take(), [(HOST2, dreq(PEER_OF_PASSIVE, id, QPN))]);
}

#[test]
fn a_port_held_by_a_live_app_is_not_taken() {
    let (h, cm, out) = setup();
    let (_globex, id) = passive_established(&h, &cm, &out, 1);
    h.gone.lock().expect("gone").push(7);
    let next = App::open(&cm, &h, 2, "globex-a").expect("another app");
    assert_eq!(
        next.listen(&cm, &h, false, PORT).map_err(|r| r.errno()),
        Err(libc::EADDRINUSE)
    );
    assert_eq!(state(&cm, id), "established");
    assert!(out.take().is_empty());
}

#[test]
fn a_req_to_the_listener_of_an_exited_app_is_rejected_as_nobody_listens() {
    let (h, cm, out) = setup();
    let globex = App::open(&cm, &h, 1, "globex-a").expect("globex-a");
    let listener = globex.listen(&cm, &h, false, PORT).expect("listen");
    h.gone.lock().expect("gone").push(1);
    let req = PeerBody::Req(proto::PeerReq {
        from_id: PEER_OF_PASSIVE,
        vni: GLOBEX,
        src: proto::CmAddr::v4(VIP_B, 40000),
        dst: proto::CmAddr::v4(VIP_A, PORT),
        params: params(PEER_QPN),
        private_data: Vec::new(),
    });
    cm.on_peer(&h, HOST2, req);
    match out.take().as_slice() {
        [(
            HOST2,
            PeerBody::Rej(proto::PeerRej {
                to_id: PEER_OF_PASSIVE,
                reason,
                ..
            }),
        )] => {
            assert_eq!(*reason, proto::CM_REJ_INVALID_SERVICE_ID)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(state(&cm, listener), "gone");
    assert!(globex.events().is_empty());
}

#[test]
fn a_dreq_naming_no_id_finds_the_connection_by_its_senders_qp() {
    let (h, cm, out) = setup();
    let (acme, id) = active_established(&h, &cm, &out);
    cm.on_peer(&h, HOST2, dreq(0, PEER_OF_ACTIVE, PEER_QPN + 1));
    assert!(acme.events().is_empty(), "another QP");
    cm.on_peer(&h, HOST2, dreq(0, PEER_OF_ACTIVE, 0));
    assert!(acme.events().is_empty(), "no QP");
    cm.on_peer(&h, HOST2, dreq(0, PEER_OF_ACTIVE, PEER_QPN));
    assert_eq!(kinds(&acme.events()), [proto::CM_EVENT_DISCONNECTED]);
    assert_eq!(state(&cm, id), "peerclosed");
}

/// The app's disconnect after its accept and before the RTU ends the
/// connection: the accept's clock stops with it, or the app would get
/// UNREACHABLE after DISCONNECTED.
#[test]
fn the_apps_disconnect_after_its_accept_stops_the_accepts_clock() {
    let (h, cm, out) = setup_with(Duration::ZERO);
    let (globex, _, id) = requested(&h, &cm, 1);
    globex.accept(&cm, &h, id, QPN, b"").expect("accept");
    out.take();
    globex
        .ask(&cm, &h, ask_id(proto::RequestBody::CmDisconnect, id))
        .expect("disconnect");
    assert_eq!(out.take(), [(HOST2, dreq(PEER_OF_PASSIVE, id, QPN))]);
    assert_eq!(kinds(&globex.events()), [proto::CM_EVENT_DISCONNECTED]);
    cm.expire();
    assert!(
        globex.events().is_empty(),
        "no UNREACHABLE after DISCONNECTED"
    );
    assert_eq!(state(&cm, id), "closed");
}
