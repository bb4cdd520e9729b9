//! The AH pipeline (`ah.rs`) against the fakes of `fakes.rs` and the
//! example config's VPC map and policy: a UD destination admitted by the
//! security groups, bound to the kernel's AH, admitted again after a
//! restart, forgotten; no RDMA needed.
use super::*;
use crate::endpoints::usage::What;
use crate::pipeline::fakes::*;

/// The example's host1 and a session of acme-a (10.0.0.1, VNI 100) that
/// opened the device.
fn opened(policy: Option<&str>) -> (FakeHost, Session) {
    let (h, mut sess) = setup(policy);
    let f = std::fs::File::open("/dev/null").expect("open /dev/null");
    sess.uverbs = Some(Arc::new(std::os::fd::OwnedFd::from(f)));
    (h, sess)
}

fn created(h: &FakeHost, sess: &mut Session, ah_attr: proto::AhAttr) -> proto::CreateAhReply {
    match create_ah(h, sess, &proto::CreateAhReq { ah_attr }) {
        Ok(proto::ReplyBody::CreateAh(r)) => r,
        Ok(other) => panic!("not a CREATE_AH reply: {other:?}"),
        Err(e) => panic!("{e}"),
    }
}

fn bind(h: &FakeHost, sess: &mut Session, ah_id: u32, ah_handle: u32) -> Result<(), Error> {
    bind_ah(h, sess, &proto::BindAhReq { ah_id, ah_handle })
}

fn entries(h: &FakeHost) -> Vec<rconntrack::Entry> {
    h.admission.table().iter().cloned().collect()
}

fn errno<T: std::fmt::Debug>(r: Result<T, Error>) -> i32 {
    r.expect_err("refused").errno()
}

#[test]
fn an_admitted_destination_gets_its_physical_address_and_is_tracked_once_bound() {
    let (h, mut sess) = opened(None);
    let r = created(&h, &mut sess, virtual_av([10, 0, 0, 2]));
    // acme-b lives on host2 (198.18.0.2); virtual index 1 is the host's 3.
    assert_eq!(r.ah_attr.dgid, v4_mapped([198, 18, 0, 2]));
    assert_eq!(r.ah_attr.sgid_index, 3);
    assert_eq!(r.ah_attr.port_num, 1);
    assert!(entries(&h).is_empty(), "nothing tracked before BIND_AH");
    bind(&h, &mut sess, r.ah_id, 5).unwrap_or_else(|e| panic!("{e}"));
    let e = entries(&h);
    assert_eq!(e.len(), 1);
    assert_eq!((e[0].session, e[0].qp_handle), (7, 5));
    assert_eq!(e[0].qp_type, rconntrack::QpType::Ud);
    assert_eq!(e[0].state, rconntrack::State::Established);
    assert_eq!(e[0].remote_vip, Ipv4Addr::new(10, 0, 0, 2));
    assert_eq!(e[0].peer_host, Ipv4Addr::new(198, 18, 0, 2));
    assert!(sess.ahs.contains_key(&5));
    assert!(sess.ah_pending.is_empty());
}

#[test]
fn a_destination_the_policy_denies_is_eacces_and_counted_against_the_endpoint() {
    let (h, mut sess) = opened(Some(DENY_ALL));
    let r = create_ah(
        &h,
        &mut sess,
        &proto::CreateAhReq {
            ah_attr: virtual_av([10, 0, 0, 2]),
        },
    );
    assert_eq!(errno(r), libc::EACCES);
    assert_eq!(
        sess.ep
            .refused_connections
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert!(sess.ah_pending.is_empty());
    assert!(entries(&h).is_empty());
}

#[test]
fn no_device_multicast_and_unknown_destinations_are_refused() {
    let (h, mut sess) = setup(None);
    let req = |a| proto::CreateAhReq { ah_attr: a };
    assert_eq!(
        errno(create_ah(&h, &mut sess, &req(virtual_av([10, 0, 0, 2])))),
        libc::EPROTO
    );
    let (h, mut sess) = opened(None);
    let mut multicast = virtual_av([10, 0, 0, 2]);
    multicast.dgid[0] = 0xff;
    assert_eq!(
        errno(create_ah(&h, &mut sess, &req(multicast))),
        libc::ENOSYS
    );
    // 10.0.0.9 is in no VPC of acme's.
    assert_eq!(
        errno(create_ah(&h, &mut sess, &req(virtual_av([10, 0, 0, 9])))),
        libc::EHOSTUNREACH
    );
    let mut local_route = virtual_av([10, 0, 0, 2]);
    local_route.is_global = 0;
    assert_eq!(
        errno(create_ah(&h, &mut sess, &req(local_route))),
        libc::EINVAL
    );
    assert!(sess.ah_pending.is_empty());
}

#[test]
fn a_bind_needs_its_admission_and_a_handle_not_bound_yet() {
    let (h, mut sess) = opened(None);
    assert_eq!(errno(bind(&h, &mut sess, 42, 5)), libc::ENOENT);
    let first = created(&h, &mut sess, virtual_av([10, 0, 0, 2]));
    bind(&h, &mut sess, first.ah_id, 5).unwrap_or_else(|e| panic!("{e}"));
    let second = created(&h, &mut sess, virtual_av([10, 0, 0, 2]));
    assert_ne!(first.ah_id, second.ah_id);
    assert_eq!(errno(bind(&h, &mut sess, second.ah_id, 5)), libc::EEXIST);
    // The admission was used up by the first bind.
    assert_eq!(errno(bind(&h, &mut sess, first.ah_id, 6)), libc::ENOENT);
    assert_eq!(entries(&h).len(), 1);
}

#[test]
fn admissions_never_bound_are_capped_oldest_first() {
    let (h, mut sess) = opened(None);
    let ids: Vec<u32> = (0..=MAX_PENDING)
        .map(|_| created(&h, &mut sess, virtual_av([10, 0, 0, 2])).ah_id)
        .collect();
    assert_eq!(sess.ah_pending.len(), MAX_PENDING);
    assert_eq!(errno(bind(&h, &mut sess, ids[0], 5)), libc::ENOENT);
    bind(&h, &mut sess, ids[MAX_PENDING], 5).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_destroyed_ah_is_no_longer_tracked() {
    let (h, mut sess) = opened(None);
    let r = created(&h, &mut sess, virtual_av([10, 0, 0, 2]));
    bind(&h, &mut sess, r.ah_id, 5).unwrap_or_else(|e| panic!("{e}"));
    destroy_ah(&h, &mut sess, &proto::DestroyAhReq { ah_handle: 5 });
    assert!(entries(&h).is_empty());
    assert!(sess.ahs.is_empty());
}

fn resync(h: &FakeHost, sess: &mut Session, ah_handle: u32, ah_attr: proto::AhAttr) -> u32 {
    match resync_ah(h, sess, &proto::ResyncAhReq { ah_handle, ah_attr }) {
        Ok(proto::ReplyBody::ResyncAh(r)) => u32::from(r.result),
        Ok(other) => panic!("not a RESYNC_AH reply: {other:?}"),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn after_a_restart_an_allowed_ah_is_tracked_again_and_a_denied_one_destroyed() {
    let (h, mut sess) = opened(None);
    assert_eq!(
        resync(&h, &mut sess, 9, virtual_av([10, 0, 0, 2])),
        proto::RESYNC_TRACKED
    );
    assert_eq!(entries(&h).len(), 1);
    assert!(sess.ahs.contains_key(&9));
    assert!(h.destroyed.borrow().is_empty());
    let again = resync_ah(
        &h,
        &mut sess,
        &proto::ResyncAhReq {
            ah_handle: 9,
            ah_attr: virtual_av([10, 0, 0, 2]),
        },
    );
    assert_eq!(errno(again), libc::EEXIST);

    let (h, mut sess) = opened(Some(DENY_ALL));
    assert_eq!(
        resync(&h, &mut sess, 9, virtual_av([10, 0, 0, 2])),
        proto::RESYNC_RESET
    );
    assert_eq!(*h.destroyed.borrow(), [9]);
    assert!(entries(&h).is_empty());
    assert!(sess.ahs.is_empty());
    // A destination that left the VPC goes the same way.
    assert_eq!(
        resync(&h, &mut sess, 10, virtual_av([10, 0, 0, 9])),
        proto::RESYNC_RESET
    );
    assert_eq!(*h.destroyed.borrow(), [9, 10]);
}

#[test]
fn a_grh_not_addressed_to_this_host_or_not_from_an_ipv4_gid_names_no_sender() {
    let (h, sess) = opened(None);
    let grh = |sgid: [u8; 16], dgid: [u8; 16]| proto::ResolveGrhReq {
        src_qp: 0x12,
        sgid,
        dgid,
    };
    // The fake host's underlay is 192.168.1.1.
    let other_host = grh(v4_mapped([198, 18, 0, 2]), v4_mapped([192, 168, 1, 2]));
    assert_eq!(errno(resolve_grh(&h, &sess, &other_host)), libc::EINVAL);
    let mut ipv6 = [0u8; 16];
    ipv6[0] = 0xfe;
    ipv6[1] = 0x80;
    let not_v4 = grh(ipv6, v4_mapped([192, 168, 1, 1]));
    assert_eq!(errno(resolve_grh(&h, &sess, &not_v4)), libc::EHOSTUNREACH);
}

/// acme-a's session on a host whose endpoints may hold `ahs` address
/// handles and `connections` RConntrack entries.
fn limited(ahs: u32, connections: u32) -> (FakeHost, Session) {
    let limits = crate::config::TenantLimits {
        address_handles: ahs,
        connections,
        ..Default::default()
    };
    let (h, mut sess) = setup_limited(None, limits);
    let f = std::fs::File::open("/dev/null").expect("open /dev/null");
    sess.uverbs = Some(Arc::new(std::os::fd::OwnedFd::from(f)));
    (h, sess)
}

fn refusals(sess: &Session, what: What) -> u64 {
    let r = sess.ep.usage.refusals();
    r.iter()
        .find(|(n, _)| *n == what.name())
        .map_or(0, |(_, c)| *c)
}

/// Issue 51: a loop of CREATE_AH and BIND_AH filled the RConntrack table
/// that all tenants share. Now an endpoint's address handles stop at its
/// limit (EDQUOT, before the provider makes one), counted; one destroyed
/// makes room.
#[test]
fn address_handles_past_the_endpoints_limit_get_edquot_until_one_is_destroyed() {
    let (h, mut sess) = limited(2, 100);
    for handle in [5, 6] {
        let r = created(&h, &mut sess, virtual_av([10, 0, 0, 2]));
        bind(&h, &mut sess, r.ah_id, handle).unwrap_or_else(|e| panic!("{e}"));
    }
    let req = proto::CreateAhReq {
        ah_attr: virtual_av([10, 0, 0, 2]),
    };
    assert_eq!(errno(create_ah(&h, &mut sess, &req)), libc::EDQUOT);
    assert_eq!(refusals(&sess, What::AddressHandles), 1);
    assert_eq!(entries(&h).len(), 2);
    // Another session of the endpoint is held to the same count.
    let mut other = Session::new(8, sess.pid, sess.ep.clone());
    other.uverbs = sess.uverbs.clone();
    assert_eq!(errno(create_ah(&h, &mut other, &req)), libc::EDQUOT);
    destroy_ah(&h, &mut sess, &proto::DestroyAhReq { ah_handle: 5 });
    let r = created(&h, &mut other, virtual_av([10, 0, 0, 2]));
    bind(&h, &mut other, r.ah_id, 5).unwrap_or_else(|e| panic!("{e}"));
    // A session gone gives its address handles back.
    drop(sess);
    let r = created(&h, &mut other, virtual_av([10, 0, 0, 2]));
    bind(&h, &mut other, r.ah_id, 9).unwrap_or_else(|e| panic!("{e}"));
}

/// Each bound AH is an RConntrack entry: past the endpoint's connection
/// limit BIND_AH is refused EDQUOT (libmasq then destroys the AH) and
/// nothing more is tracked; after a restart such an AH is destroyed.
#[test]
fn a_bind_past_the_endpoints_connections_is_edquot_and_tracks_nothing() {
    let (h, mut sess) = limited(100, 1);
    let first = created(&h, &mut sess, virtual_av([10, 0, 0, 2]));
    bind(&h, &mut sess, first.ah_id, 5).unwrap_or_else(|e| panic!("{e}"));
    let second = created(&h, &mut sess, virtual_av([10, 0, 0, 2]));
    assert_eq!(errno(bind(&h, &mut sess, second.ah_id, 6)), libc::EDQUOT);
    assert_eq!(refusals(&sess, What::Connections), 1);
    assert_eq!(entries(&h).len(), 1);
    assert!(!sess.ahs.contains_key(&6));
    assert_eq!(
        sess.ep.usage.held(What::AddressHandles),
        1,
        "the refused bind holds no place"
    );
    assert_eq!(
        resync(&h, &mut sess, 7, virtual_av([10, 0, 0, 2])),
        proto::RESYNC_RESET
    );
    assert_eq!(*h.destroyed.borrow(), [7]);
}
