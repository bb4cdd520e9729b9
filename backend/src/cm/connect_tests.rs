//! Both sides of an RDMA CM connection through the CM's fake host: the
//! active side (resolve the address and route, connect: one REQ to the
//! peer's host; its REP: CONNECT_RESPONSE; establish: RTU), the passive
//! side (listen, a REQ: a new id with CONNECT_REQUEST; accept: REP; the
//! RTU: ESTABLISHED), the timeouts on either side, and the QP attributes
//! each step makes known.
use super::fakes::*;
use super::*;
use crate::config::TenantLimits;
use crate::kernel::ibv::*;

const PORT: u16 = 7471;
const SRC_PORT: u16 = 5000;
const QPN: u32 = 0x33;
const PEER_QPN: u32 = 0x44;

/// host1 with a vNIC (GID index 1, MTU 1500) and a CM whose connections
/// time out after `timeout`.
fn setup_with(timeout: Duration) -> (FakeCmHost, Cm, Outbox) {
    let h = FakeCmHost::new(TenantLimits::default());
    *h.vnic.lock().expect("vnic") = Some((1, 1500));
    let (cm, out) = cm(timeout);
    (h, cm, out)
}

fn setup() -> (FakeCmHost, Cm, Outbox) {
    setup_with(Duration::from_secs(60))
}

fn resolve(id: u32, dst: Ipv4Addr, port: u16) -> proto::RequestBody {
    proto::RequestBody::CmResolveAddr(proto::CmResolveAddrReq {
        id,
        timeout_ms: 1000,
        has_src: 0,
        src: Default::default(),
        dst: proto::CmAddr {
            addr: dst.octets(),
            port,
        },
    })
}

fn connect_req(id: u32, qpn: u32, private_data: &[u8]) -> proto::RequestBody {
    proto::RequestBody::CmConnect(proto::CmConnectReq {
        id,
        param: proto::CmConnParam {
            qp_num: qpn,
            retry_count: 7,
            rnr_retry_count: 7,
            private_data: private_data.to_vec(),
            ..Default::default()
        },
    })
}

fn init_qp_attr(id: u32, qp_state: u32) -> proto::RequestBody {
    proto::RequestBody::CmInitQpAttr(proto::CmInitQpAttrReq { id, qp_state })
}

fn rep(to_id: u32, from_id: u32, qpn: u32) -> PeerBody {
    PeerBody::Rep(proto::PeerRep {
        to_id,
        from_id,
        params: params(qpn),
        private_data: Vec::new(),
    })
}

fn req(from_id: u32, port: u16) -> PeerBody {
    PeerBody::Req(proto::PeerReq {
        from_id,
        vni: GLOBEX,
        src: proto::CmAddr::v4(VIP_B, 40000),
        dst: proto::CmAddr::v4(VIP_A, port),
        params: params(PEER_QPN),
        private_data: Vec::new(),
    })
}

/// acme-a's app with an id connecting from SRC_PORT to acme-b (host2)
/// with QP `QPN`; the REQ taken from the outbox.
fn connecting(h: &FakeCmHost, cm: &Cm, out: &Outbox) -> (App, u32) {
    let acme = App::open(cm, h, 1, "acme-a").expect("acme-a");
    let id = acme
        .connect(cm, h, false, SRC_PORT, (VIP_B, PORT), QPN)
        .expect("connect");
    assert!(matches!(
        out.take().as_slice(),
        [(HOST2, PeerBody::Req(..))]
    ));
    acme.events();
    (acme, id)
}

/// globex-a's app listening on PORT, and the id a REQ from globex-b's
/// id 60 made: (app, listener, new id).
fn requested(h: &FakeCmHost, cm: &Cm) -> (App, u32, u32) {
    let globex = App::open(cm, h, 1, "globex-a").expect("globex-a");
    let listener = globex.listen(cm, h, false, PORT).expect("listen");
    cm.on_peer(h, HOST2, req(60, PORT));
    let ev = globex.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_CONNECT_REQUEST]);
    (globex, listener, ev[0].id)
}

#[test]
fn resolve_route_and_connect_send_one_req_to_the_host_of_the_destination() {
    let (h, cm, out) = setup();
    let acme = App::open(&cm, &h, 1, "acme-a").expect("acme-a");
    let id = acme.create_id(&cm, &h, false).expect("id");
    let addrs = match acme.ask(&cm, &h, resolve(id, VIP_B, PORT)) {
        Ok(proto::ReplyBody::CmResolveAddr(a)) => a,
        other => panic!("{other:?}"),
    };
    assert_eq!(addrs.src.addr, VIP_A.octets());
    assert!(EPHEMERAL.contains(&addrs.src.port), "{}", addrs.src.port);
    assert_eq!((addrs.dst.addr, addrs.dst.port), (VIP_B.octets(), PORT));
    let ev = acme.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_ADDR_RESOLVED]);
    assert_eq!(ev[0].status, 0);
    assert_eq!(state(&cm, id), "addrresolved");
    acme.ask(
        &cm,
        &h,
        proto::RequestBody::CmResolveRoute(proto::CmId { id }),
    )
    .expect("route");
    let ev = acme.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_ROUTE_RESOLVED]);
    // The route makes INIT's attributes known, not yet RTR's.
    assert_eq!(ev[0].init_attr.attr.port_num, 1);
    assert_ne!(ev[0].init_attr.attr_mask, 0);
    assert_eq!(ev[0].rtr_attr.attr_mask, 0);
    assert_eq!(state(&cm, id), "routeresolved");
    assert!(out.take().is_empty(), "nothing goes out before the connect");
    acme.ask(&cm, &h, connect_req(id, QPN, b"hello"))
        .expect("connect");
    match out.take().as_slice() {
        [(
            HOST2,
            PeerBody::Req(proto::PeerReq {
                from_id,
                vni,
                src,
                dst,
                params,
                private_data,
            }),
        )] => {
            let ((src, src_port), (dst, dst_port)) = (src.ip_port(), dst.ip_port());
            assert_eq!(
                (*from_id, *vni, src, src_port),
                (id, ACME, VIP_A, addrs.src.port)
            );
            assert_eq!((dst, dst_port), (VIP_B, PORT));
            assert_eq!(
                (params.qp_num, private_data.as_slice()),
                (QPN, &b"hello"[..])
            );
            assert!(params.psn <= 0xFF_FFFF);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(state(&cm, id), "connecting");
    assert_eq!(cm.list()[0]["side"], "active");
    assert!(acme.events().is_empty(), "the app waits for the answer");
}

#[test]
fn an_address_outside_the_vpc_map_gets_addr_error_and_the_id_is_not_resolved() {
    let (h, cm, out) = setup();
    let acme = App::open(&cm, &h, 1, "acme-a").expect("acme-a");
    let id = acme.create_id(&cm, &h, false).expect("id");
    acme.ask(&cm, &h, resolve(id, Ipv4Addr::new(10, 0, 0, 99), PORT))
        .expect("answered by an event");
    let ev = acme.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_ADDR_ERROR]);
    assert_eq!(ev[0].status, -libc::EHOSTUNREACH);
    assert_eq!(state(&cm, id), "idle");
    let route = proto::RequestBody::CmResolveRoute(proto::CmId { id });
    assert_eq!(acme.ask(&cm, &h, route), Err(libc::EINVAL));
    assert!(out.take().is_empty());
}

#[test]
fn connect_refuses_an_id_without_a_route_a_qp_of_0_and_too_much_private_data() {
    let (h, cm, out) = setup();
    let acme = App::open(&cm, &h, 1, "acme-a").expect("acme-a");
    let id = acme.create_id(&cm, &h, false).expect("id");
    assert_eq!(
        acme.ask(&cm, &h, connect_req(id, QPN, b"")),
        Err(libc::EINVAL)
    );
    acme.ask(&cm, &h, resolve(id, VIP_B, PORT))
        .expect("resolve");
    assert_eq!(
        acme.ask(&cm, &h, connect_req(id, QPN, b"")),
        Err(libc::EINVAL),
        "no route yet"
    );
    acme.ask(
        &cm,
        &h,
        proto::RequestBody::CmResolveRoute(proto::CmId { id }),
    )
    .expect("route");
    assert_eq!(
        acme.ask(&cm, &h, connect_req(id, 0, b"")),
        Err(libc::EINVAL)
    );
    let big = vec![0u8; proto::CM_REQ_PRIVATE_DATA + 1];
    assert_eq!(
        acme.ask(&cm, &h, connect_req(id, QPN, &big)),
        Err(libc::EINVAL)
    );
    assert!(out.take().is_empty());
    assert_eq!(state(&cm, id), "routeresolved");
    // The most a REQ carries is taken.
    let most = vec![0u8; proto::CM_REQ_PRIVATE_DATA];
    acme.ask(&cm, &h, connect_req(id, QPN, &most))
        .expect("connect");
    assert_eq!(out.take().len(), 1);
}

#[test]
fn a_connect_the_security_groups_deny_sends_nothing_and_times_out_unreachable() {
    let (h, cm, out) = setup_with(Duration::ZERO);
    let deny = "version: 1\ntenants:\n  globex:\n    securityGroups:\n      \
                solo: { members: [globex-a] }\n";
    let (p, _) = h
        .admission
        .check_text(deny, "deny.yaml", &h.registry.policy_refs())
        .unwrap_or_else(|e| panic!("{e}"));
    h.admission.apply(p, &h.registry);
    let globex = App::open(&cm, &h, 1, "globex-a").expect("globex-a");
    let id = globex
        .connect(&cm, &h, false, SRC_PORT, (VIP_B, PORT), QPN)
        .expect("connect is answered later, as a firewall's drop is");
    assert!(out.take().is_empty(), "no REQ");
    assert_eq!(state(&cm, id), "connecting");
    globex.events();
    cm.expire();
    let ev = globex.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_UNREACHABLE]);
    assert_eq!(ev[0].status, -libc::ETIMEDOUT);
    assert_eq!(state(&cm, id), "closed");
    cm.expire();
    assert!(globex.events().is_empty(), "timed out once");
}

#[test]
fn a_rep_gives_connect_response_with_the_peers_qp_and_establish_sends_the_rtu() {
    let (h, cm, out) = setup();
    let (acme, id) = connecting(&h, &cm, &out);
    cm.on_peer(&h, HOST2, rep(id, 70, PEER_QPN));
    let ev = acme.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_CONNECT_RESPONSE]);
    assert_eq!(ev[0].param.qp_num, PEER_QPN);
    assert_eq!(ev[0].rtr_attr.attr.dest_qp_num, PEER_QPN);
    assert_eq!(ev[0].rtr_attr.attr.rq_psn, 7);
    assert_eq!(ev[0].rtr_attr.attr.path_mtu, 3, "MTU 1500");
    assert_eq!(
        ev[0].rtr_attr.attr.ah_attr.dgid,
        vbond::ipv4_mapped_gid(VIP_B)
    );
    assert_eq!(ev[0].rtr_attr.attr.ah_attr.sgid_index, 1);
    assert_ne!(ev[0].rts_attr.attr_mask & IBV_QP_SQ_PSN, 0);
    assert_eq!(state(&cm, id), "repreceived");
    assert!(out.take().is_empty(), "the RTU waits for the app");
    let role = cm.role_of("acme-a", QPN).expect("a CM QP");
    assert_eq!(
        role,
        Role {
            active: true,
            local_port: SRC_PORT,
            remote_port: PORT
        }
    );
    let establish = proto::RequestBody::CmEstablish(proto::CmId { id });
    acme.ask(&cm, &h, establish.clone()).expect("establish");
    assert_eq!(
        out.take(),
        [(
            HOST2,
            PeerBody::Rtu(proto::PeerRtu {
                to_id: 70,
                from_id: id
            })
        )]
    );
    assert_eq!(state(&cm, id), "established");
    assert!(acme.events().is_empty());
    assert_eq!(acme.ask(&cm, &h, establish), Err(libc::EINVAL), "once");
    assert!(out.take().is_empty());
}

#[test]
fn establish_and_rtr_attributes_before_the_rep_are_refused() {
    let (h, cm, out) = setup();
    let (acme, id) = connecting(&h, &cm, &out);
    let establish = proto::RequestBody::CmEstablish(proto::CmId { id });
    assert_eq!(acme.ask(&cm, &h, establish), Err(libc::EINVAL));
    assert_eq!(acme.ask(&cm, &h, init_qp_attr(id, 2)), Err(libc::EINVAL));
    assert_eq!(acme.ask(&cm, &h, init_qp_attr(id, 3)), Err(libc::EINVAL));
    let r = cm.qp_step(&h, id, "acme-a", &|s| s == 1, QPN, None);
    assert_eq!(r.map(|_| ()).map_err(|e| e.errno()), Err(libc::EINVAL));
    assert!(out.take().is_empty());
    assert_eq!(state(&cm, id), "connecting");
    assert_eq!(cm.role_of("acme-a", QPN), None, "not connected yet");
}

#[test]
fn a_rep_after_the_connect_timed_out_is_answered_with_a_rej_naming_its_sender() {
    let (h, cm, out) = setup_with(Duration::ZERO);
    let (acme, id) = connecting(&h, &cm, &out);
    cm.expire();
    assert_eq!(kinds(&acme.events()), [proto::CM_EVENT_UNREACHABLE]);
    cm.on_peer(&h, HOST2, rep(id, 70, PEER_QPN));
    match out.take().as_slice() {
        [(
            HOST2,
            PeerBody::Rej(proto::PeerRej {
                to_id: 70, from_id, ..
            }),
        )] => assert_eq!(*from_id, id),
        other => panic!("{other:?}"),
    }
    assert!(acme.events().is_empty());
    assert_eq!(state(&cm, id), "closed");
}

#[test]
fn a_rep_with_more_private_data_than_a_rep_carries_is_dropped() {
    let (h, cm, out) = setup();
    let (acme, id) = connecting(&h, &cm, &out);
    cm.on_peer(
        &h,
        HOST2,
        PeerBody::Rep(proto::PeerRep {
            to_id: id,
            from_id: 70,
            params: params(PEER_QPN),
            private_data: vec![0; proto::CM_MAX_PRIVATE_DATA + 1],
        }),
    );
    assert!(acme.events().is_empty());
    assert!(out.take().is_empty());
    assert_eq!(state(&cm, id), "connecting");
    // The peer may still answer properly.
    cm.on_peer(&h, HOST2, rep(id, 70, PEER_QPN));
    assert_eq!(kinds(&acme.events()), [proto::CM_EVENT_CONNECT_RESPONSE]);
}

#[test]
fn a_req_to_a_listener_makes_a_new_id_whose_connect_request_carries_the_peers_qp() {
    let (h, cm, out) = setup();
    let globex = App::open(&cm, &h, 1, "globex-a").expect("globex-a");
    let listener = globex.listen(&cm, &h, false, PORT).expect("listen");
    assert_eq!(state(&cm, listener), "listening");
    cm.on_peer(&h, HOST2, req(60, PORT));
    let ev = globex.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_CONNECT_REQUEST]);
    let e = &ev[0];
    assert_ne!(e.id, listener);
    assert_eq!(e.listen_id, listener);
    assert_eq!(e.param.qp_num, PEER_QPN);
    assert_eq!((e.addrs.src.addr, e.addrs.src.port), (VIP_A.octets(), PORT));
    assert_eq!(
        (e.addrs.dst.addr, e.addrs.dst.port),
        (VIP_B.octets(), 40000)
    );
    // RTR and RTS are known at once: the kernel's answer before accept.
    assert_eq!(e.rtr_attr.attr.dest_qp_num, PEER_QPN);
    assert_eq!(e.rtr_attr.attr.rq_psn, 7);
    assert_ne!(e.rts_attr.attr_mask, 0);
    assert_eq!(state(&cm, e.id), "reqreceived");
    assert_eq!(state(&cm, listener), "listening", "the listener listens on");
    assert!(out.take().is_empty(), "nothing answers before the app");
}

#[test]
fn accept_sends_a_rep_with_the_apps_qp_and_the_rtu_establishes_the_passive_id() {
    let (h, cm, out) = setup();
    let (globex, _, id) = requested(&h, &cm);
    globex.accept(&cm, &h, id, QPN, b"welcome").expect("accept");
    match out.take().as_slice() {
        [(
            HOST2,
            PeerBody::Rep(proto::PeerRep {
                to_id: 60,
                from_id,
                params,
                private_data,
            }),
        )] => {
            assert_eq!(*from_id, id);
            assert_eq!(
                (params.qp_num, private_data.as_slice()),
                (QPN, &b"welcome"[..])
            );
            assert!(params.psn <= 0xFF_FFFF);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(state(&cm, id), "repsent");
    assert_eq!(
        cm.role_of("globex-a", QPN),
        Some(Role {
            active: false,
            local_port: PORT,
            remote_port: 40000
        })
    );
    assert!(globex.events().is_empty());
    let rtu = PeerBody::Rtu(proto::PeerRtu {
        to_id: id,
        from_id: 60,
    });
    cm.on_peer(&h, HOST2, rtu.clone());
    assert_eq!(kinds(&globex.events()), [proto::CM_EVENT_ESTABLISHED]);
    assert_eq!(state(&cm, id), "established");
    cm.on_peer(&h, HOST2, rtu);
    assert!(globex.events().is_empty(), "established once");
}

#[test]
fn accept_refuses_a_qp_of_0_a_listener_and_a_second_accept() {
    let (h, cm, out) = setup();
    let (globex, listener, id) = requested(&h, &cm);
    assert_eq!(globex.accept(&cm, &h, id, 0, b""), Err(libc::EINVAL));
    assert_eq!(
        globex.accept(&cm, &h, listener, QPN, b""),
        Err(libc::EINVAL)
    );
    assert!(out.take().is_empty());
    assert_eq!(state(&cm, id), "reqreceived");
    globex.accept(&cm, &h, id, QPN, b"").expect("accept");
    assert_eq!(out.take().len(), 1);
    assert_eq!(globex.accept(&cm, &h, id, QPN, b""), Err(libc::EINVAL));
    assert!(out.take().is_empty(), "one REP");
}

#[test]
fn an_accepted_request_without_an_rtu_times_out_unreachable() {
    let (h, cm, out) = setup_with(Duration::ZERO);
    let (globex, listener, id) = requested(&h, &cm);
    cm.expire();
    assert!(
        globex.events().is_empty(),
        "no clock runs before the accept"
    );
    globex.accept(&cm, &h, id, QPN, b"").expect("accept");
    out.take();
    cm.expire();
    let ev = globex.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_UNREACHABLE]);
    assert_eq!((ev[0].id, ev[0].status), (id, -libc::ETIMEDOUT));
    assert_eq!(state(&cm, id), "closed");
    assert_eq!(state(&cm, listener), "listening");
    // A late RTU changes nothing.
    cm.on_peer(
        &h,
        HOST2,
        PeerBody::Rtu(proto::PeerRtu {
            to_id: id,
            from_id: 60,
        }),
    );
    assert!(globex.events().is_empty());
    assert_eq!(state(&cm, id), "closed");
}

#[test]
fn qp_step_gives_a_requests_rtr_and_rts_with_the_depths_the_app_accepted() {
    let (h, cm, _out) = setup();
    let (_globex, _, id) = requested(&h, &cm);
    let (session, rtr, rts) = cm
        .qp_step(&h, id, "globex-a", &|s| s == 1, QPN, Some((3, 2)))
        .expect("qp step");
    assert_eq!(session, 1);
    assert_eq!(rtr.attr.qp_state, IBV_QPS_RTR);
    assert_eq!(rtr.attr.dest_qp_num, PEER_QPN);
    assert_eq!(rtr.attr.max_dest_rd_atomic, 3);
    assert_eq!(rts.attr.qp_state, IBV_QPS_RTS);
    assert_eq!(rts.attr.max_rd_atomic, 2);
    assert_eq!(rts.attr.retry_cnt, 7, "the requester's retries");
    let no = |r: Result<(u64, proto::CmQpAttr, proto::CmQpAttr), crate::error::Error>| {
        r.map(|_| ()).map_err(|e| e.errno())
    };
    assert_eq!(
        no(cm.qp_step(&h, id, "globex-a", &|s| s == 2, QPN, Some((1, 1)))),
        Err(libc::ENOENT),
        "another app"
    );
    assert_eq!(
        no(cm.qp_step(&h, id, "acme-a", &|s| s == 1, QPN, Some((1, 1)))),
        Err(libc::ENOENT),
        "another endpoint"
    );
    assert_eq!(
        no(cm.qp_step(&h, id, "globex-a", &|s| s == 1, QPN, None)),
        Err(libc::EINVAL),
        "no response to establish"
    );
}

#[test]
fn qp_step_establishes_only_the_qp_that_connected() {
    let (h, cm, out) = setup();
    let (_acme, id) = connecting(&h, &cm, &out);
    cm.on_peer(&h, HOST2, rep(id, 70, PEER_QPN));
    let step = |qpn| cm.qp_step(&h, id, "acme-a", &|s| s == 1, qpn, None);
    assert_eq!(
        step(QPN + 1).map(|_| ()).map_err(|e| e.errno()),
        Err(libc::EINVAL)
    );
    let (_, rtr, rts) = step(QPN).expect("its own QP");
    assert_eq!(rtr.attr.dest_qp_num, PEER_QPN);
    assert_eq!(rts.attr.retry_cnt, 7, "the app's own retries");
    assert_eq!(state(&cm, id), "repreceived", "the step moves no phase");
}

#[test]
fn init_qp_attr_answers_init_at_once_and_rtr_once_the_peer_is_known() {
    let (h, cm, _out) = setup();
    let (globex, listener, id) = requested(&h, &cm);
    match globex.ask(&cm, &h, init_qp_attr(listener, 1)) {
        Ok(proto::ReplyBody::CmInitQpAttr(a)) => {
            assert_eq!(a.attr.port_num, 1);
            assert_ne!(a.attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE, 0);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        globex.ask(&cm, &h, init_qp_attr(listener, 2)),
        Err(libc::EINVAL)
    );
    assert_eq!(globex.ask(&cm, &h, init_qp_attr(id, 4)), Err(libc::EINVAL));
    match globex.ask(&cm, &h, init_qp_attr(id, 2)) {
        Ok(proto::ReplyBody::CmInitQpAttr(a)) => assert_eq!(a.attr.dest_qp_num, PEER_QPN),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_request_reaches_the_app_without_rtr_attributes_when_the_vnic_cannot_be_read() {
    let (h, cm, out) = setup();
    *h.vnic.lock().expect("vnic") = None;
    let globex = App::open(&cm, &h, 1, "globex-a").expect("globex-a");
    globex.listen(&cm, &h, false, PORT).expect("listen");
    cm.on_peer(&h, HOST2, req(60, PORT));
    let ev = globex.events();
    assert_eq!(kinds(&ev), [proto::CM_EVENT_CONNECT_REQUEST]);
    assert_ne!(ev[0].init_attr.attr_mask, 0, "INIT needs no vNIC");
    assert_eq!(
        ev[0].rtr_attr.attr_mask, 0,
        "the app asks, and gets the error"
    );
    assert_eq!(
        globex.ask(&cm, &h, init_qp_attr(ev[0].id, 2)),
        Err(libc::EIO)
    );
    assert!(out.take().is_empty());
}

#[test]
fn listen_binds_an_unbound_id_and_a_bound_port_is_not_taken_twice_in_one_space() {
    let (h, cm, _out) = setup();
    let globex = App::open(&cm, &h, 1, "globex-a").expect("globex-a");
    let id = globex.create_id(&cm, &h, false).expect("id");
    let listen = proto::RequestBody::CmListen(proto::CmListenReq { id, backlog: 1 });
    globex.ask(&cm, &h, listen.clone()).expect("listen");
    let port = cm.list()[0]["local"]
        .as_str()
        .map(String::from)
        .unwrap_or_default();
    let port: u16 = port
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    assert!(EPHEMERAL.contains(&port), "{port}");
    globex
        .ask(&cm, &h, listen)
        .expect("listen again is no error");
    let bind = |id, addr: Ipv4Addr, port| {
        proto::RequestBody::CmBindAddr(proto::CmBindReq {
            id,
            addr: proto::CmAddr {
                addr: addr.octets(),
                port,
            },
        })
    };
    let other = globex.create_id(&cm, &h, false).expect("id");
    assert_eq!(
        globex.ask(&cm, &h, bind(other, VIP_A, port)),
        Err(libc::EADDRINUSE)
    );
    assert_eq!(
        globex.ask(&cm, &h, bind(other, VIP_B, 1)),
        Err(libc::EADDRNOTAVAIL),
        "not the endpoint's address"
    );
    let ud = globex.create_id(&cm, &h, true).expect("UD id");
    globex
        .ask(&cm, &h, bind(ud, VIP_A, port))
        .expect("UD ports are a space of their own");
    assert_eq!(
        globex.ask(&cm, &h, bind(ud, VIP_A, port + 1)),
        Err(libc::EINVAL),
        "bound"
    );
    // Another endpoint's ports are its own.
    let acme = App::open(&cm, &h, 2, "acme-a").expect("acme-a");
    acme.listen(&cm, &h, false, port)
        .expect("acme-a, same port");
}

#[test]
fn listen_on_an_id_that_resolved_an_address_is_refused() {
    let (h, cm, _out) = setup();
    let acme = App::open(&cm, &h, 1, "acme-a").expect("acme-a");
    let id = acme.create_id(&cm, &h, false).expect("id");
    acme.ask(&cm, &h, resolve(id, VIP_B, PORT))
        .expect("resolve");
    let listen = proto::RequestBody::CmListen(proto::CmListenReq { id, backlog: 1 });
    assert_eq!(acme.ask(&cm, &h, listen), Err(libc::EINVAL));
    assert_eq!(state(&cm, id), "addrresolved");
}

#[test]
fn a_migrated_id_has_its_events_on_its_new_channel() {
    let (h, cm, _out) = setup();
    let first = App::open(&cm, &h, 1, "acme-a").expect("acme-a");
    let second = App::open(&cm, &h, 1, "acme-a").expect("a second channel");
    let id = first.create_id(&cm, &h, false).expect("id");
    let migrate = proto::RequestBody::CmMigrateId(proto::CmMigrateReq {
        id,
        channel: second.channel,
    });
    first.ask(&cm, &h, migrate).expect("migrate");
    first
        .ask(&cm, &h, resolve(id, VIP_B, PORT))
        .expect("resolve");
    assert!(first.events().is_empty());
    assert_eq!(kinds(&second.events()), [proto::CM_EVENT_ADDR_RESOLVED]);
}

#[test]
fn a_qps_cm_id_is_found_among_its_endpoints_ids_only_and_goes_with_it() {
    let (h, cm, out) = setup();
    let (acme, id) = connecting(&h, &cm, &out);
    cm.on_peer(&h, HOST2, rep(id, 70, PEER_QPN));
    assert!(cm.role_of("acme-a", QPN).is_some());
    assert_eq!(
        cm.role_of("globex-a", QPN),
        None,
        "another endpoint's ids are not its"
    );
    assert_eq!(
        cm.lock().ids_of.get("acme-a"),
        Some(&std::collections::BTreeSet::from([id]))
    );
    let destroy = proto::RequestBody::CmDestroyId(proto::CmId { id });
    acme.ask(&cm, &h, destroy).expect("destroy");
    assert_eq!(cm.role_of("acme-a", QPN), None);
    assert!(
        cm.lock().ids_of.is_empty(),
        "no id that is gone stays indexed"
    );
}
