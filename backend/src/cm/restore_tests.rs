//! An app's channels and ids coming back after a masqd restart, through
//! the CM's fake host: under their old numbers, as far as masqd can check
//! them (a port that is free, a connection RConntrack tracks again for the
//! app's own QP), and what a restored connection still does (a DREQ that
//! names only its QP ends it).
use super::fakes::*;
use super::*;
use crate::config::TenantLimits;

const PORT: u16 = 7471;
const CHANNEL: u32 = 500;
const ID: u32 = 900;
const QPN: u32 = 0x33;
const PEER_QPN: u32 = 0x44;

fn setup() -> (FakeCmHost, Cm, Outbox) {
    let (cm, out) = cm(Duration::from_secs(60));
    (FakeCmHost::new(TenantLimits::default()), cm, out)
}

/// CM_RESTORE_ID of id `ID` on the app's channel: `state` (CM_RESTORE_*),
/// from `src` to `dst`.
fn restore_id(
    app: &App,
    state: u32,
    active: bool,
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
) -> proto::RequestBody {
    proto::RequestBody::CmRestoreId(proto::CmRestoreIdReq {
        id: ID,
        channel: app.channel,
        port_space: proto::CM_PS_TCP,
        state,
        active: u32::from(active),
        backlog: 16,
        qp_num: QPN,
        remote_qpn: PEER_QPN,
        addrs: proto::CmAddrs {
            src: proto::CmAddr {
                addr: src.0.octets(),
                port: src.1,
            },
            dst: proto::CmAddr {
                addr: dst.0.octets(),
                port: dst.1,
            },
        },
    })
}

fn with_id(body: proto::RequestBody, id: u32) -> proto::RequestBody {
    match body {
        proto::RequestBody::CmRestoreId(mut r) => {
            r.id = id;
            proto::RequestBody::CmRestoreId(r)
        }
        other => other,
    }
}

fn udp(body: proto::RequestBody) -> proto::RequestBody {
    match body {
        proto::RequestBody::CmRestoreId(mut r) => {
            r.port_space = proto::CM_PS_UDP;
            proto::RequestBody::CmRestoreId(r)
        }
        other => other,
    }
}

fn bind(id: u32, port: u16) -> proto::RequestBody {
    proto::RequestBody::CmBindAddr(proto::CmBindReq {
        id,
        addr: proto::CmAddr {
            addr: VIP_A.octets(),
            port,
        },
    })
}

/// globex-a's app (session 1) with its channel restored, and RConntrack
/// tracking its QP `QPN` to globex-b's `PEER_QPN` again.
fn restored_app(h: &FakeCmHost, cm: &Cm) -> App {
    h.tracked
        .lock()
        .expect("tracked")
        .push(((1, QPN), (VIP_B, PEER_QPN)));
    App::restore(cm, h, 1, "globex-a", CHANNEL).expect("channel")
}

#[test]
fn a_channel_comes_back_under_its_old_number_with_a_new_event_socket() {
    let (h, cm, _out) = setup();
    let app = App::restore(&cm, &h, 1, "globex-a", CHANNEL).expect("restore");
    assert_eq!(app.channel, CHANNEL);
    let id = app.create_id(&cm, &h, false).expect("an id on it");
    let resolve = proto::RequestBody::CmResolveAddr(proto::CmResolveAddrReq {
        id,
        timeout_ms: 1000,
        has_src: 0,
        src: Default::default(),
        dst: proto::CmAddr {
            addr: VIP_B.octets(),
            port: PORT,
        },
    });
    app.ask(&cm, &h, resolve).expect("resolve");
    assert_eq!(kinds(&app.events()), [proto::CM_EVENT_ADDR_RESOLVED]);
}

#[test]
fn a_channel_number_in_use_or_0_is_refused() {
    let (h, cm, _out) = setup();
    App::restore(&cm, &h, 1, "globex-a", CHANNEL).expect("restore");
    let again = App::restore(&cm, &h, 1, "globex-a", CHANNEL).map(|_| ());
    assert_eq!(again.map_err(|r| r.errno()), Err(libc::EEXIST));
    let other = App::restore(&cm, &h, 2, "acme-a", CHANNEL).map(|_| ());
    assert_eq!(
        other.map_err(|r| r.errno()),
        Err(libc::EEXIST),
        "another app's"
    );
    let zero = App::restore(&cm, &h, 1, "globex-a", 0).map(|_| ());
    assert_eq!(zero.map_err(|r| r.errno()), Err(libc::EEXIST));
}

#[test]
fn a_listening_id_comes_back_on_its_port_and_hears_requests() {
    let (h, cm, _out) = setup();
    let app = restored_app(&h, &cm);
    let listening = proto::CM_RESTORE_LISTENING;
    app.ask(
        &cm,
        &h,
        restore_id(
            &app,
            listening,
            false,
            (VIP_A, PORT),
            (Ipv4Addr::UNSPECIFIED, 0),
        ),
    )
    .expect("restore");
    assert_eq!(state(&cm, ID), "listening");
    assert!(app.events().is_empty(), "nothing to tell");
    let req = PeerBody::Req(proto::PeerReq {
        from_id: 60,
        vni: GLOBEX,
        src: proto::CmAddr::v4(VIP_B, 40000),
        dst: proto::CmAddr::v4(VIP_A, PORT),
        params: params(PEER_QPN),
        private_data: Vec::new(),
    });
    cm.on_peer(&h, HOST2, req);
    let ev = app.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_CONNECT_REQUEST]);
    assert_eq!(ev[0].listen_id, ID);
    let other = app.create_id(&cm, &h, false).expect("id");
    assert_eq!(app.ask(&cm, &h, bind(other, PORT)), Err(libc::EADDRINUSE));
}

#[test]
fn a_listening_id_without_a_port_is_refused_and_not_kept() {
    let (h, cm, _out) = setup();
    let app = restored_app(&h, &cm);
    let r = restore_id(
        &app,
        proto::CM_RESTORE_LISTENING,
        false,
        (VIP_A, 0),
        (Ipv4Addr::UNSPECIFIED, 0),
    );
    assert_eq!(app.ask(&cm, &h, r), Err(libc::EINVAL));
    assert_eq!(state(&cm, ID), "gone");
}

#[test]
fn a_bound_id_takes_its_port_again_and_one_whose_port_is_taken_is_not_kept() {
    let (h, cm, _out) = setup();
    let app = restored_app(&h, &cm);
    let bound = restore_id(
        &app,
        proto::CM_RESTORE_BOUND,
        false,
        (VIP_A, PORT),
        (Ipv4Addr::UNSPECIFIED, 0),
    );
    app.ask(&cm, &h, bound.clone()).expect("restore");
    assert_eq!(state(&cm, ID), "idle");
    let other = app.create_id(&cm, &h, false).expect("id");
    assert_eq!(app.ask(&cm, &h, bind(other, PORT)), Err(libc::EADDRINUSE));
    assert_eq!(
        app.ask(&cm, &h, with_id(bound, ID + 1)),
        Err(libc::EADDRINUSE)
    );
    assert_eq!(state(&cm, ID + 1), "gone");
    let ep = h.endpoint("globex-a");
    assert_eq!(
        ep.usage.held(crate::endpoints::usage::What::CmIds),
        2,
        "its slot given back"
    );
}

#[test]
fn an_id_whose_handshake_died_with_masqd_gets_connect_error() {
    let (h, cm, _out) = setup();
    let app = restored_app(&h, &cm);
    let pending = restore_id(
        &app,
        proto::CM_RESTORE_PENDING,
        true,
        (VIP_A, 5000),
        (VIP_B, PORT),
    );
    app.ask(&cm, &h, pending).expect("restore");
    let ev = app.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_CONNECT_ERROR]);
    assert_eq!((ev[0].id, ev[0].status), (ID, -libc::ECONNRESET));
    assert_eq!(state(&cm, ID), "closed");
    let other = app.create_id(&cm, &h, false).expect("id");
    assert_eq!(
        app.ask(&cm, &h, bind(other, 5000)),
        Err(libc::EADDRINUSE),
        "an active id holds its port"
    );
}

#[test]
fn a_passive_id_whose_handshake_died_leaves_the_port_to_its_listener() {
    let (h, cm, _out) = setup();
    let app = restored_app(&h, &cm);
    let pending = restore_id(
        &app,
        proto::CM_RESTORE_PENDING,
        false,
        (VIP_A, PORT),
        (VIP_B, 40000),
    );
    app.ask(&cm, &h, pending).expect("restore");
    assert_eq!(kinds(&app.events()), [proto::CM_EVENT_CONNECT_ERROR]);
    app.listen(&cm, &h, false, PORT)
        .expect("the port is the listener's");
}

#[test]
fn an_id_number_in_use_or_0_or_a_channel_not_the_apps_is_refused() {
    let (h, cm, _out) = setup();
    let app = restored_app(&h, &cm);
    let bound = restore_id(
        &app,
        proto::CM_RESTORE_BOUND,
        false,
        (VIP_A, 0),
        (Ipv4Addr::UNSPECIFIED, 0),
    );
    app.ask(&cm, &h, bound.clone()).expect("restore");
    assert_eq!(app.ask(&cm, &h, bound.clone()), Err(libc::EEXIST));
    assert_eq!(
        app.ask(&cm, &h, with_id(bound.clone(), 0)),
        Err(libc::EEXIST)
    );
    let acme = App::open(&cm, &h, 2, "acme-a").expect("another app");
    let theirs = restore_id(
        &acme,
        proto::CM_RESTORE_BOUND,
        false,
        (VIP_A, 0),
        (Ipv4Addr::UNSPECIFIED, 0),
    );
    assert_eq!(app.ask(&cm, &h, with_id(theirs, ID + 1)), Err(libc::ENOENT));
    assert_eq!(state(&cm, ID + 1), "gone");
}

#[test]
fn new_ids_after_a_restore_skip_the_restored_numbers() {
    let (h, cm, _out) = setup();
    let app = restored_app(&h, &cm);
    let bound = restore_id(
        &app,
        proto::CM_RESTORE_BOUND,
        false,
        (VIP_A, 0),
        (Ipv4Addr::UNSPECIFIED, 0),
    );
    // Ids are numbered from 1 in the fake: the restored 1 is skipped.
    app.ask(&cm, &h, with_id(bound, 1)).expect("restore");
    assert_eq!(app.create_id(&cm, &h, false).expect("id"), 2);
    let next = App::open(&cm, &h, 1, "globex-a").expect("a new channel");
    assert_ne!(next.channel, CHANNEL);
}

#[test]
fn a_connected_id_comes_back_only_as_the_connection_rconntrack_tracks() {
    let (h, cm, out) = setup();
    let app = App::restore(&cm, &h, 1, "globex-a", CHANNEL).expect("channel");
    let connected = restore_id(
        &app,
        proto::CM_RESTORE_CONNECTED,
        true,
        (VIP_A, 5000),
        (VIP_B, PORT),
    );
    assert_eq!(
        app.ask(&cm, &h, connected.clone()),
        Err(libc::EAGAIN),
        "not tracked yet"
    );
    h.tracked
        .lock()
        .expect("tracked")
        .push(((1, QPN), (VIP_B, PEER_QPN + 1)));
    assert_eq!(
        app.ask(&cm, &h, connected.clone()),
        Err(libc::EPERM),
        "another QP"
    );
    assert_eq!(state(&cm, ID), "gone");
    h.tracked.lock().expect("tracked")[0].1 = (VIP_B, PEER_QPN);
    app.ask(&cm, &h, connected).expect("restore");
    assert_eq!(state(&cm, ID), "established");
    assert_eq!(
        cm.role_of("globex-a", QPN),
        Some(Role {
            active: true,
            local_port: 5000,
            remote_port: PORT
        })
    );
    assert!(out.take().is_empty(), "the peer is not told");
    assert!(app.events().is_empty());
}

#[test]
fn a_connected_id_without_a_port_as_ud_outside_the_map_or_at_another_address_is_refused() {
    let (h, cm, _out) = setup();
    let app = restored_app(&h, &cm);
    let connected = |src, dst| restore_id(&app, proto::CM_RESTORE_CONNECTED, true, src, dst);
    let cases = [
        (
            "no port",
            connected((VIP_A, 0), (VIP_B, PORT)),
            libc::EINVAL,
        ),
        (
            "a UD id",
            udp(connected((VIP_A, 5000), (VIP_B, PORT))),
            libc::EINVAL,
        ),
        (
            "a peer outside the map",
            connected((VIP_A, 5000), (Ipv4Addr::new(10, 0, 0, 99), PORT)),
            libc::EHOSTUNREACH,
        ),
        (
            "another address",
            connected((VIP_B, 5000), (VIP_B, PORT)),
            libc::EADDRNOTAVAIL,
        ),
    ];
    for (what, req, errno) in cases {
        assert_eq!(app.ask(&cm, &h, req), Err(errno), "{what}");
        assert_eq!(state(&cm, ID), "gone", "{what}");
    }
}

#[test]
fn a_restored_active_connection_holds_its_port_and_a_passive_one_does_not() {
    let (h, cm, _out) = setup();
    let app = restored_app(&h, &cm);
    let active = restore_id(
        &app,
        proto::CM_RESTORE_CONNECTED,
        true,
        (VIP_A, 5000),
        (VIP_B, PORT),
    );
    app.ask(&cm, &h, active.clone()).expect("restore");
    let other = app.create_id(&cm, &h, false).expect("id");
    assert_eq!(app.ask(&cm, &h, bind(other, 5000)), Err(libc::EADDRINUSE));
    // A second active one on the same port is refused.
    assert_eq!(
        app.ask(&cm, &h, with_id(active, ID + 1)),
        Err(libc::EADDRINUSE)
    );
    let passive = restore_id(
        &app,
        proto::CM_RESTORE_CONNECTED,
        false,
        (VIP_A, PORT),
        (VIP_B, 40000),
    );
    app.ask(&cm, &h, with_id(passive, ID + 2)).expect("restore");
    assert_eq!(
        cm.list().iter().filter(|v| v["side"] == "passive").count(),
        1
    );
    app.listen(&cm, &h, false, PORT)
        .expect("the passive id's port is its listener's");
}

#[test]
fn a_restored_connection_ends_by_a_dreq_that_names_its_qp_and_learns_the_peers_id() {
    let (h, cm, out) = setup();
    let app = restored_app(&h, &cm);
    let connected = restore_id(
        &app,
        proto::CM_RESTORE_CONNECTED,
        true,
        (VIP_A, 5000),
        (VIP_B, PORT),
    );
    app.ask(&cm, &h, connected).expect("restore");
    let dreq = |to_id, from_id, from_qpn| {
        PeerBody::Dreq(proto::PeerDreq {
            to_id,
            from_id,
            from_qpn,
        })
    };
    cm.on_peer(&h, HOST3, dreq(ID, 70, PEER_QPN));
    cm.on_peer(&h, HOST2, dreq(ID, 70, PEER_QPN + 1));
    cm.on_peer(&h, HOST2, dreq(0, 70, 0));
    assert!(app.events().is_empty(), "another host, another QP, no QP");
    cm.on_peer(&h, HOST2, dreq(0, 70, PEER_QPN));
    assert_eq!(kinds(&app.events()), [proto::CM_EVENT_DISCONNECTED]);
    assert_eq!(state(&cm, ID), "peerclosed");
    let disconnect = proto::RequestBody::CmDisconnect(proto::CmId { id: ID });
    app.ask(&cm, &h, disconnect).expect("disconnect");
    assert!(out.take().is_empty(), "the DREQ is answered");
}

#[test]
fn the_app_disconnecting_a_restored_connection_sends_a_dreq_with_its_qp_and_no_peer_id() {
    let (h, cm, out) = setup();
    let app = restored_app(&h, &cm);
    let connected = restore_id(
        &app,
        proto::CM_RESTORE_CONNECTED,
        false,
        (VIP_A, PORT),
        (VIP_B, 40000),
    );
    app.ask(&cm, &h, connected).expect("restore");
    let disconnect = proto::RequestBody::CmDisconnect(proto::CmId { id: ID });
    app.ask(&cm, &h, disconnect).expect("disconnect");
    assert_eq!(
        out.take(),
        [(
            HOST2,
            PeerBody::Dreq(proto::PeerDreq {
                to_id: 0,
                from_id: ID,
                from_qpn: QPN
            })
        )]
    );
    assert_eq!(kinds(&app.events()), [proto::CM_EVENT_DISCONNECTED]);
}
