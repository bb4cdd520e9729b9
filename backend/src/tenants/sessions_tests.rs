//! The live sessions: what the control socket shows of each, and what
//! an endpoint's removal or a policy change does to them when their QPs
//! cannot be reached (no uverbs file, or one that is not a device).
use super::*;
use crate::tenants::fakes::FakeParts;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;

fn view(pid: i32) -> SessionView {
    SessionView {
        endpoint: "acme-a".into(),
        tenant: "acme".into(),
        pid,
        app: String::new(),
        started: 0,
        requests: 0,
        qps: BTreeMap::new(),
    }
}

#[test]
fn a_session_is_seen_until_closed_and_gone_once_its_app_hangs_up() {
    let s = Sessions::default();
    let id = s.next_id();
    assert_eq!((id, s.next_id()), (1, 2), "ids count from 1");
    let (ours, theirs) = Conn::pair().expect("socketpair");
    s.opened(id, &ours, view(42));
    assert_eq!(s.pid(id), Some(42));
    assert!(!s.app_gone(id));
    drop(theirs);
    assert!(s.app_gone(id), "hung up, before its thread reads it");
    let f = std::fs::File::open("/dev/null").expect("open");
    s.register_fd(id, Arc::new(OwnedFd::from(f)));
    assert!(s.fd(id).is_some());
    s.closed(id);
    assert_eq!((s.pid(id), s.fd(id).is_none()), (None, true));
    assert!(s.app_gone(id));
    assert_eq!(s.with_views(|v| v.len()), 0);
}

fn record(handle: u32) -> QpRecord {
    QpRecord {
        handle,
        qpn: 0x100 + handle,
        qp_type: "RC",
        state: "RTS",
        remote_vip: None,
        remote_qpn: None,
        peer_host: None,
        virt_sgid_index: 0,
        owner_checked: true,
        guarded: false,
    }
}

fn dev_null() -> Arc<OwnedFd> {
    Arc::new(OwnedFd::from(
        std::fs::File::open("/dev/null").expect("/dev/null"),
    ))
}

/// The app's end of a session's connection reads its end (EOF).
fn hung_up(theirs: &OwnedFd) -> bool {
    let mut b = [0u8; 1];
    let flags = nix::sys::socket::MsgFlags::MSG_DONTWAIT;
    matches!(
        nix::sys::socket::recv(theirs.as_raw_fd(), &mut b, flags),
        Ok(0)
    )
}

fn qps(s: &Sessions, id: u64) -> Vec<u32> {
    s.with_views(|v| v.get(&id).map(|v| v.qps.keys().copied().collect()))
        .unwrap_or_default()
}

/// A request changes what the control socket shows of the QPs it
/// touched, and only those.
#[test]
fn a_sessions_view_follows_the_qps_each_request_touched() {
    let s = Sessions::default();
    let (ours, _theirs) = Conn::pair().expect("socketpair");
    s.opened(1, &ours, view(42));
    let mut now = BTreeMap::from([(3, record(3)), (4, record(4))]);
    s.publish(1, "ib_write_bw", 5, &now, &[3]);
    assert_eq!(qps(&s, 1), [3]);
    now.remove(&3);
    s.publish(1, "ib_write_bw", 6, &now, &[3, 4]);
    assert_eq!(qps(&s, 1), [4]);
    let (app, requests) = s.with_views(|v| (v[&1].app.clone(), v[&1].requests));
    assert_eq!((app.as_str(), requests), ("ib_write_bw", 6));
    s.moved(1, "acme-b");
    assert_eq!(s.with_views(|v| v[&1].endpoint.clone()), "acme-b");
    // A session that ended meanwhile: nothing to show.
    s.publish(9, "x", 1, &now, &[4]);
    s.moved(9, "acme-b");
    assert_eq!(s.with_views(|v| v.len()), 1);
}

/// An endpoint's removal closes its sessions only; a QP whose reset the
/// kernel refuses (here: a uverbs file that is /dev/null) is not counted.
#[test]
fn closing_an_endpoint_closes_its_sessions_only() {
    let s = Sessions::default();
    let (a1, a1_app) = Conn::pair().expect("socketpair");
    let (a2, a2_app) = Conn::pair().expect("socketpair");
    let (g, g_app) = Conn::pair().expect("socketpair");
    s.opened(1, &a1, view(1));
    s.opened(2, &a2, view(2));
    s.opened(
        3,
        &g,
        SessionView {
            endpoint: "globex-a".into(),
            ..view(3)
        },
    );
    s.publish(2, "", 1, &BTreeMap::from([(7, record(7))]), &[7]);
    s.register_fd(2, dev_null());
    let driver = crate::kernel::uverbs::RDMA_DRIVER_RXE;
    assert_eq!(s.close_endpoint("acme-a", driver), (2, 0));
    assert!(hung_up(&a1_app) && hung_up(&a2_app));
    assert!(!hung_up(&g_app));
    assert_eq!(s.close_endpoint("acme-z", driver), (0, 0));
}

/// A policy change or `conntrack -D`: connections whose QP cannot be
/// reached (the session is gone, or its file is no device) are not
/// counted as reset, and are untracked all the same.
#[test]
fn a_reset_untracks_what_it_cannot_reach() {
    let f = FakeParts::host1();
    let s = f.parts.sessions();
    let entry = |session: u64, qp_type: rconntrack::QpType| rconntrack::Entry {
        session,
        qp_handle: 7,
        tenant: Arc::from("acme"),
        vni: 100,
        local_vip: Ipv4Addr::new(10, 0, 0, 1),
        local_qpn: 0x100 + session as u32,
        remote_vip: Ipv4Addr::new(10, 0, 0, 2),
        remote_qpn: 0x200,
        qp_type,
        ..Default::default()
    };
    let entries = [
        entry(1, rconntrack::QpType::Rc),
        entry(2, rconntrack::QpType::Rc),
        entry(3, rconntrack::QpType::Ud),
    ];
    for e in &entries {
        f.parts.admission().table().upsert(e.clone()).expect("room");
    }
    assert_eq!(f.parts.admission().table().len(), 3);
    s.register_fd(2, dev_null());
    s.register_fd(3, dev_null());
    let driver = crate::kernel::uverbs::RDMA_DRIVER_RXE;
    assert_eq!(s.reset(f.parts.admission(), driver, &entries, "test"), 0);
    assert_eq!(f.parts.admission().table().len(), 0);
}
