//! The QP pipeline (`qp.rs`) against a fake kernel (one QP, its state and
//! destination, every command it ran) and the example config's VPC map
//! and policy: no RDMA needed. The fakes are `pipeline/fakes.rs`.
use super::*;
use crate::pipeline::fakes::*;
use crate::pipeline::resync::resync;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::io;
use std::rc::Rc;

#[test]
fn an_admitted_rtr_runs_the_physical_destination_and_is_tracked_through_rts_and_error() {
    let (h, mut sess) = setup(None);
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    assert!(
        sess.qps[&HANDLE].owner_checked,
        "INIT's notice checked the QPN"
    );
    assert!(
        h.admitted.snapshot(0).is_empty(),
        "nothing vouched before RTR"
    );
    modify(&h, &k, &mut sess, &rtr()).unwrap_or_else(|e| panic!("{e}"));
    let ran = k.ran.borrow();
    assert_eq!(ran.len(), 1);
    assert_eq!(ran[0].dest.dgid, v4_mapped([198, 18, 0, 2]));
    assert_eq!(ran[0].dest.sgid_index, 3);
    assert_eq!(ran[0].dest_qp_num, 0x12);
    drop(ran);
    assert_eq!(h.admitted.snapshot(0).get(&QPN), Some(&PID));
    let t = tracked(&h);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].state, rconntrack::State::Admitted);
    assert_eq!((t[0].local_qpn, t[0].remote_qpn), (QPN, 0x12));
    assert_eq!(t[0].remote_vip, Ipv4Addr::new(10, 0, 0, 2));
    assert_eq!(sess.qps[&HANDLE].state, "RTR");

    // RTS and ERROR happen on the app's fd; masqd learns them.
    k.qp.borrow_mut().qp_state = IBV_QPS_RTS;
    moved(&h, &k, &mut sess, &moved_req(IBV_QPS_RTS)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tracked(&h)[0].state, rconntrack::State::Established);
    assert_eq!(sess.qps[&HANDLE].state, "RTS");
    k.qp.borrow_mut().qp_state = IBV_QPS_ERR;
    moved(&h, &k, &mut sess, &moved_req(IBV_QPS_ERR)).unwrap_or_else(|e| panic!("{e}"));
    assert!(tracked(&h).is_empty());
    assert_eq!(sess.qps[&HANDLE].state, "ERROR");
    assert_eq!(k.ran.borrow().len(), 1, "masqd ran only the RTR");
    destroyed(&h, &mut sess, HANDLE);
    assert!(sess.qps.is_empty());
    assert!(h.admitted.snapshot(0).is_empty());
}

#[test]
fn an_rtrs_steps_are_timed_in_order_and_nothing_else_is() {
    let (h, mut sess) = setup(None);
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    assert!(h.timed_steps.borrow().is_empty(), "INIT is not timed");
    modify(&h, &k, &mut sess, &rtr()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        *h.timed_steps.borrow(),
        ["route", "owner", "admit", "track", "modify", "record"]
    );
}

#[test]
fn an_rtr_the_policy_denies_is_eacces_and_never_reaches_the_kernel() {
    let (h, mut sess) = setup(Some(
        "version: 1\ntenants:\n  acme:\n    securityGroups:\n      \
         clients: { members: [acme-a] }\n",
    ));
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    let e = modify(&h, &k, &mut sess, &rtr()).expect_err("denied");
    assert_eq!(e.errno(), libc::EACCES, "{e}");
    assert!(k.ran.borrow().is_empty());
    assert!(tracked(&h).is_empty());
    assert!(h.admitted.snapshot(0).is_empty());
    assert_eq!(k.qp.borrow().qp_state, IBV_QPS_INIT);
}

#[test]
fn an_unknown_virtual_destination_is_ehostunreach() {
    let (h, mut sess) = setup(None);
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    let mut m = rtr();
    m.attr.ah_attr.dgid = v4_mapped([10, 0, 0, 99]);
    let e = modify(&h, &k, &mut sess, &m).expect_err("no such vIP");
    assert_eq!(e.errno(), libc::EHOSTUNREACH, "{e}");
    assert!(k.ran.borrow().is_empty());
}

#[test]
fn a_qpn_the_kernel_does_not_give_the_app_is_refused_before_anything_runs() {
    let (h, mut sess) = setup(None);
    let k = FakeKernel::default(); // not the app's
    k.qp.borrow_mut().qp_state = IBV_QPS_INIT;
    let e = moved(&h, &k, &mut sess, &moved_req(IBV_QPS_INIT)).expect_err("not owned");
    assert_eq!(e.errno(), libc::EPERM);
    assert!(sess.qps.is_empty(), "a refused notice records nothing");
    let e = modify(&h, &k, &mut sess, &rtr()).expect_err("not owned");
    assert_eq!(e.errno(), libc::EPERM);
    assert!(k.ran.borrow().is_empty());
    assert!(tracked(&h).is_empty());
}

#[test]
fn a_notice_never_runs_a_command_on_the_apps_own_file() {
    // The app's ibv_destroy_qp right after a move would fail with EBUSY
    // while a command of masqd's held the QP on its file.
    let (h, mut sess) = setup(None);
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    modify(&h, &k, &mut sess, &rtr()).unwrap_or_else(|e| panic!("{e}"));
    for state in [IBV_QPS_RTS, IBV_QPS_ERR] {
        k.qp.borrow_mut().qp_state = state;
        moved(&h, &k, &mut sess, &moved_req(state)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            sess.qps[&HANDLE].state,
            state_name(state),
            "the kernel's state"
        );
    }
    assert_eq!(k.queries.get(), 0, "no query on the app's file");
    assert_eq!(
        k.owner_lookups.get(),
        2,
        "rdma netlink answered INIT's notice and ERROR's (RTS after masqd's own RTR is taken at its word)"
    );
}

/// An app that moves a QP to ERROR and destroys it at once (the RDMA
/// CM's teardown does, every connection) posts both notices before masqd
/// runs: by then the kernel has no such QP. The notice is moot, not a
/// refusal (it was counted and logged as one, which a busy CM app turned
/// into a false alert); the QP_DESTROYED that follows cleans up.
#[test]
fn a_notice_of_a_qp_destroyed_since_is_moot_not_refused() {
    let (h, mut sess) = setup(None);
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    modify(&h, &k, &mut sess, &rtr()).unwrap_or_else(|e| panic!("{e}"));
    k.gone.set(true);
    moved(&h, &k, &mut sess, &moved_req(IBV_QPS_ERR)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sess.qps[&HANDLE].state, "RTR", "nothing recorded");
    assert_eq!(tracked(&h).len(), 1, "untracked by the destroy, not here");
    destroyed(&h, &mut sess, HANDLE);
    assert!(tracked(&h).is_empty());
    // A handle masqd never heard of: nothing recorded either.
    let mut unknown = moved_req(IBV_QPS_INIT);
    unknown.qp_handle = 9;
    moved(&h, &k, &mut sess, &unknown).unwrap_or_else(|e| panic!("{e}"));
    assert!(sess.qps.is_empty());
}

#[test]
fn only_the_rts_after_masqds_own_rtr_is_taken_at_its_word() {
    let (h, mut sess) = setup(None);
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    modify(&h, &k, &mut sess, &rtr()).unwrap_or_else(|e| panic!("{e}"));
    // A claim that would untrack is always asked: the app says ERROR, the
    // kernel says RTR, and the connection stays tracked.
    let asked = k.owner_lookups.get();
    moved(&h, &k, &mut sess, &moved_req(IBV_QPS_ERR)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(k.owner_lookups.get(), asked + 1);
    assert_eq!(tracked(&h).len(), 1, "a false ERROR hides nothing");
    assert_eq!(sess.qps[&HANDLE].state, "RTR");
    // The QP went to ERROR on the app's fd, yet the notice says RTS: taken
    // at its word, the connection stays tracked, as it would had the app
    // said nothing.
    k.qp.borrow_mut().qp_state = IBV_QPS_ERR;
    let asked = k.owner_lookups.get();
    moved(&h, &k, &mut sess, &moved_req(IBV_QPS_RTS)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(k.owner_lookups.get(), asked, "no kernel query");
    assert_eq!(tracked(&h)[0].state, rconntrack::State::Established);
    // A second RTS claim does not follow masqd's RTR: asked, and the
    // kernel's ERROR untracks the connection.
    moved(&h, &k, &mut sess, &moved_req(IBV_QPS_RTS)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(k.owner_lookups.get(), asked + 1);
    assert!(tracked(&h).is_empty());
    assert_eq!(sess.qps[&HANDLE].state, "ERROR");
}

#[test]
fn a_false_notice_records_the_kernels_state_and_admits_nothing() {
    let (h, mut sess) = setup(None);
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    // The app claims RTS; the QP is in INIT.
    moved(&h, &k, &mut sess, &moved_req(IBV_QPS_RTS)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sess.qps[&HANDLE].state, "INIT");
    // The app connects the QP itself, to any host, and says RTS.
    k.qp.borrow_mut().qp_state = IBV_QPS_RTS;
    k.qp.borrow_mut().dest.dgid = v4_mapped([198, 18, 0, 2]);
    moved(&h, &k, &mut sess, &moved_req(IBV_QPS_RTS)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sess.qps[&HANDLE].state, "RTS");
    assert!(tracked(&h).is_empty(), "no connection is tracked");
    assert!(!sess.qps[&HANDLE].guarded, "no backstop element");
    assert!(
        h.admitted.snapshot(0).is_empty(),
        "not vouched: the audit flags it"
    );
    assert!(k.ran.borrow().is_empty());
    // The QPN under a second handle is refused: one QPN, one handle.
    let mut forged = moved_req(IBV_QPS_RTS);
    forged.qp_handle = 9;
    let e = moved(&h, &k, &mut sess, &forged).expect_err("forged");
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(!sess.qps.contains_key(&9));
    // A QPN the kernel does not give the app is refused there.
    forged.qp_num = 0x77;
    let e = moved(&h, &k, &mut sess, &forged).expect_err("not the app's");
    assert_eq!(e.errno(), libc::EPERM);
    assert!(!sess.qps.contains_key(&9));
    // Another QPN for a known handle is refused.
    let mut other = moved_req(IBV_QPS_ERR);
    other.qp_num = 0x99;
    assert_eq!(
        moved(&h, &k, &mut sess, &other)
            .expect_err("wrong QPN")
            .errno(),
        libc::EINVAL
    );
}

fn resync_req() -> proto::ResyncQpReq {
    proto::ResyncQpReq {
        qp_handle: HANDLE,
        qp_num: QPN,
        qp_type: 2,
        sgid_index: 1,
        has_route: 1,
        dgid: v4_mapped([10, 0, 0, 2]),
    }
}

#[test]
fn resync_tracks_again_what_the_kernel_confirms() {
    let (h, mut sess) = setup(None);
    let k = kernel();
    {
        let mut qp = k.qp.borrow_mut();
        qp.qp_state = IBV_QPS_RTS;
        qp.dest.dgid = v4_mapped([198, 18, 0, 2]);
        qp.dest.sgid_index = 3;
        qp.dest_qp_num = 0x12;
    }
    let r = resync(&h, &k, &mut sess, &resync_req()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(u32::from(r.result), proto::RESYNC_TRACKED);
    let t = tracked(&h);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].state, rconntrack::State::Established);
    assert_eq!(t[0].remote_qpn, 0x12);
    assert!(k.ran.borrow().is_empty());
    assert_eq!(h.admitted.snapshot(0).get(&QPN), Some(&PID));
    // Named twice: refused.
    let e = resync(&h, &k, &mut sess, &resync_req()).expect_err("twice");
    assert_eq!(e.errno(), libc::EEXIST);
}

#[test]
fn resync_resets_a_qp_whose_kernel_destination_is_not_the_claimed_one() {
    let (h, mut sess) = setup(None);
    let k = kernel();
    {
        let mut qp = k.qp.borrow_mut();
        qp.qp_state = IBV_QPS_RTS;
        qp.dest.dgid = v4_mapped([198, 18, 0, 77]);
        qp.dest.sgid_index = 3;
    }
    let r = resync(&h, &k, &mut sess, &resync_req()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(u32::from(r.result), proto::RESYNC_RESET);
    let ran = k.ran.borrow();
    assert_eq!(ran.len(), 1);
    assert_eq!(ran[0].qp_state, IBV_QPS_ERR);
    assert!(tracked(&h).is_empty());
    assert_eq!(sess.qps[&HANDLE].state, "ERROR");
}

#[test]
fn resync_of_a_qp_in_init_tracks_nothing_and_its_rtr_still_goes_through_admission() {
    let (h, mut sess) = setup(None);
    let k = kernel();
    k.qp.borrow_mut().qp_state = IBV_QPS_INIT;
    let r = resync(&h, &k, &mut sess, &resync_req()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(u32::from(r.result), proto::RESYNC_UNTRACKED);
    assert!(tracked(&h).is_empty());
    modify(&h, &k, &mut sess, &rtr()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tracked(&h).len(), 1);
}

/// The fake kernel, its MODIFY_QPs logged in the guard's log (and
/// failed, if `fail`), with what stood at each: the backstop's elements in
/// force and the connections tracked.
struct Logged<'a> {
    k: &'a FakeKernel,
    h: &'a FakeHost,
    fail: bool,
    at_modify: RefCell<Vec<(BTreeSet<String>, usize)>>,
}

impl QpKernel for Logged<'_> {
    fn modify(&self, cmd: &uverbs::ModifyQp) -> crate::error::Result<()> {
        let g = self.h.guard.as_ref().expect("a guarded host");
        g.log.borrow_mut().push("modify".into());
        let in_force = g.in_force.borrow().clone();
        self.at_modify
            .borrow_mut()
            .push((in_force, tracked(self.h).len()));
        if self.fail {
            return Err(io::Error::from_raw_os_error(libc::EINVAL).into());
        }
        self.k.modify(cmd)
    }
    fn query(&self, qp_handle: u32, attr_mask: u32) -> crate::error::Result<uverbs::QueryQpResp> {
        self.k.query(qp_handle, attr_mask)
    }
    fn owner(&self, qpn: u32, qp_type: u32) -> Result<Verdict, crate::error::Error> {
        self.k.owner(qpn, qp_type)
    }
}

fn logged<'a>(k: &'a FakeKernel, h: &'a FakeHost, fail: bool) -> Logged<'a> {
    Logged {
        k,
        h,
        fail,
        at_modify: RefCell::default(),
    }
}

/// The example's host with a backstop guard, and the guard's log.
fn guarded() -> (FakeHost, Session, Rc<RefCell<Vec<String>>>) {
    let (mut h, sess) = setup(None);
    let g = FakeGuard::default();
    let log = g.log.clone();
    h.guard = Some(g);
    (h, sess, log)
}

fn taken(log: &Rc<RefCell<Vec<String>>>) -> Vec<String> {
    std::mem::take(&mut *log.borrow_mut())
}

fn set(elements: &[&str]) -> BTreeSet<String> {
    elements.iter().map(|e| e.to_string()).collect()
}

fn eventually(h: &FakeHost) -> BTreeSet<String> {
    h.guard.as_ref().expect("a guarded host").eventually()
}

#[test]
fn an_rtr_reaches_the_kernel_once_its_qpn_and_its_connection_are_in_the_backstop() {
    let (h, mut sess, log) = guarded();
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    assert!(taken(&log).is_empty(), "INIT cannot receive: not guarded");
    let lk = logged(&k, &h, false);
    modify(&h, &lk, &mut sess, &rtr()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(taken(&log), ["qp_seen 192.168.1.1 . 0x11", "modify"]);
    assert_eq!(
        lk.at_modify.borrow()[0],
        (set(&["tenant_qps 192.168.1.1 . 0x11"]), 1),
        "at the RTR: the QPN guarded, the connection tracked (its elements in the same wait)"
    );
    assert_eq!(tracked(&h).len(), 1);
    assert!(sess.qps[&HANDLE].guarded);
}

#[test]
fn a_failed_rtr_leaves_no_element_and_no_connection() {
    let (h, mut sess, log) = guarded();
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    let lk = logged(&k, &h, true);
    let e = modify(&h, &lk, &mut sess, &rtr()).expect_err("the kernel refused");
    assert_eq!(e.errno(), libc::EINVAL);
    assert_eq!(
        taken(&log),
        [
            "qp_seen 192.168.1.1 . 0x11",
            "modify",
            "qp_gone 192.168.1.1 . 0x11"
        ]
    );
    assert_eq!(
        lk.at_modify.borrow()[0],
        (set(&["tenant_qps 192.168.1.1 . 0x11"]), 1)
    );
    assert!(eventually(&h).is_empty(), "{:?}", eventually(&h));
    assert!(tracked(&h).is_empty());
    assert!(!sess.qps[&HANDLE].guarded);
}

/// At the eBPF maps' bound the RTR fails closed: an element the kernel
/// refused would leave the QP open to any host (`tenant_qps`) or its
/// connection dead, so the RTR never reaches the kernel and leaves nothing.
#[test]
fn an_rtr_whose_element_the_backstop_refused_is_refused_and_leaves_nothing() {
    let (h, mut sess, log) = guarded();
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    h.guard.as_ref().expect("guarded").refuse_next.set(true);
    let lk = logged(&k, &h, false);
    let e = modify(&h, &lk, &mut sess, &rtr()).expect_err("the maps are full");
    assert_eq!(e.errno(), libc::ENOSPC, "{}", e.why());
    assert!(e.why().contains("eBPF maps are full"), "{}", e.why());
    let log = taken(&log);
    assert!(!log.iter().any(|l| l == "modify"), "{log:?}");
    assert!(
        log.iter()
            .any(|l| l == "refused tenant_qps 192.168.1.1 . 0x11"),
        "{log:?}"
    );
    assert!(eventually(&h).is_empty(), "{:?}", eventually(&h));
    assert!(tracked(&h).is_empty());
    assert!(!sess.qps[&HANDLE].guarded);
    // Room again: the next RTR goes through.
    modify(&h, &k, &mut sess, &rtr()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tracked(&h).len(), 1);
}

#[test]
fn a_refused_rtr_on_a_connected_qp_leaves_its_connection_as_it_was() {
    let (h, mut sess, log) = guarded();
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    modify(&h, &k, &mut sess, &rtr()).unwrap_or_else(|e| panic!("{e}"));
    let before = tracked(&h);
    taken(&log);
    // Another RTR, to another QPN: the kernel refuses it (RTR from RTR).
    let mut again = rtr();
    again.attr.dest_qp_num = 0x13;
    let lk = logged(&k, &h, true);
    modify(&h, &lk, &mut sess, &again).expect_err("the kernel refused");
    assert_eq!(lk.at_modify.borrow()[0].1, 1);
    let after = tracked(&h);
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].remote_qpn, 0x12, "the connection as it was");
    assert_eq!(after[0].remote_qpn, before[0].remote_qpn);
    assert!(!taken(&log).contains(&"qp_gone 192.168.1.1 . 0x11".to_string()));
    assert_eq!(eventually(&h), set(&["tenant_qps 192.168.1.1 . 0x11"]));
    assert!(sess.qps[&HANDLE].guarded);
}

/// An RTR of a UD QP (no address: a UD QP has none).
fn ud_rtr() -> proto::ModifyQpReq {
    let mut m = modify_req(IBV_QP_STATE, IBV_QPS_RTR);
    m.qp_type = IBV_QPT_UD;
    m
}

fn ud_init_on_own_fd(h: &FakeHost, k: &FakeKernel, sess: &mut Session) {
    k.qp.borrow_mut().qp_state = IBV_QPS_INIT;
    let mut m = moved_req(IBV_QPS_INIT);
    m.qp_type = IBV_QPT_UD;
    moved(h, k, sess, &m).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_ud_qps_rtr_reaches_the_kernel_once_only_its_vnis_datagrams_can_reach_it() {
    let (h, mut sess, log) = guarded();
    let k = kernel();
    // Guarded from INIT (the kernel vouched for the QPN): its elements are
    // in force then; the RTR waits for nothing of the backstop's.
    ud_init_on_own_fd(&h, &k, &mut sess);
    assert_eq!(
        taken(&log),
        [
            "qp_seen 192.168.1.1 . 0x11",
            "ud_local 100 192.168.1.1 . 0x11 true"
        ]
    );
    assert!(sess.qps[&HANDLE].guarded);
    let lk = logged(&k, &h, false);
    modify(&h, &lk, &mut sess, &ud_rtr()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(taken(&log), ["modify"]);
    let ud = set(&[
        "tenant_qps 192.168.1.1 . 0x11",
        "ud_qps 192.168.1.1 . 0x11 : 100",
    ]);
    assert_eq!(lk.at_modify.borrow()[0], (ud.clone(), 0));
    assert_eq!(*h.announced.borrow(), [(QPN, true)], "announced after");
    // Destroyed: its elements go, and the other hosts are told.
    destroyed(&h, &mut sess, HANDLE);
    assert_eq!(
        taken(&log),
        [
            "ud_local 100 192.168.1.1 . 0x11 false",
            "qp_gone 192.168.1.1 . 0x11"
        ]
    );
    assert!(eventually(&h).is_empty());
    assert_eq!(*h.announced.borrow(), [(QPN, true), (QPN, false)]);
}

#[test]
fn a_qp_on_another_rail_is_guarded_at_that_rails_address() {
    // Each device numbers its QPs alone: its QPN 0x11 is not the first
    // rail's QPN 0x11.
    let (h, mut sess, log) = guarded();
    let ep = crate::endpoints::endpoint::Endpoint::new(
        sess.ep.cfg.clone(),
        sess.ep.socket.clone(),
        crate::endpoints::endpoint::Origin::File,
        None,
    );
    sess.ep = Arc::new(ep.on_rail(1, Some("rail1")));
    let k = kernel();
    ud_init_on_own_fd(&h, &k, &mut sess);
    modify(&h, &k, &mut sess, &ud_rtr()).unwrap_or_else(|e| panic!("{e}"));
    destroyed(&h, &mut sess, HANDLE);
    assert_eq!(
        taken(&log),
        [
            "qp_seen 192.168.1.2 . 0x11",
            "ud_local 100 192.168.1.2 . 0x11 true",
            "ud_local 100 192.168.1.2 . 0x11 false",
            "qp_gone 192.168.1.2 . 0x11"
        ]
    );
    assert!(eventually(&h).is_empty());
}

#[test]
fn a_ud_qp_in_init_is_announced_to_the_other_hosts_ahead_of_its_rtr() {
    let (h, mut sess, _log) = guarded();
    let k = kernel();
    ud_init_on_own_fd(&h, &k, &mut sess);
    assert_eq!(*h.early.borrow(), [QPN], "told at INIT");
    assert!(h.announced.borrow().is_empty(), "nothing waited for yet");
    modify(&h, &k, &mut sess, &ud_rtr()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(*h.announced.borrow(), [(QPN, true)], "the acks awaited");
    // An RC QP in INIT is nobody's business but this host's.
    let (h, mut sess, _log) = guarded();
    init_on_own_fd(&h, &kernel(), &mut sess);
    assert!(h.early.borrow().is_empty());
}

/// A UD QP whose RTR the kernel refused is as it was in INIT: guarded
/// (since INIT), told to no other host but early; its elements go with it.
#[test]
fn a_ud_qps_failed_rtr_leaves_it_as_in_init_and_announces_nothing() {
    let (h, mut sess, log) = guarded();
    let k = kernel();
    ud_init_on_own_fd(&h, &k, &mut sess);
    let at_init = eventually(&h);
    taken(&log);
    let lk = logged(&k, &h, true);
    modify(&h, &lk, &mut sess, &ud_rtr()).expect_err("the kernel refused");
    assert_eq!(taken(&log), ["modify"]);
    assert_eq!(eventually(&h), at_init);
    assert!(h.announced.borrow().is_empty(), "told at INIT only");
    assert!(sess.qps[&HANDLE].guarded);
    destroyed(&h, &mut sess, HANDLE);
    assert!(eventually(&h).is_empty(), "{:?}", eventually(&h));
}

/// The maps refused a UD QP's element at INIT: it is not guarded then
/// (what went in is taken out), and its RTR tries again, failing closed
/// while there is no room.
#[test]
fn a_ud_qp_the_maps_refused_at_init_is_guarded_by_its_rtr_or_refused() {
    let (h, mut sess, log) = guarded();
    let k = kernel();
    h.guard.as_ref().expect("guarded").refuse_next.set(true);
    ud_init_on_own_fd(&h, &k, &mut sess);
    assert!(!sess.qps[&HANDLE].guarded);
    assert!(eventually(&h).is_empty(), "{:?}", eventually(&h));
    assert!(taken(&log).contains(&"refused tenant_qps 192.168.1.1 . 0x11".to_string()));
    // Still no room at its RTR: refused, before the kernel moves it.
    h.guard.as_ref().expect("guarded").refuse_next.set(true);
    let lk = logged(&k, &h, false);
    let e = modify(&h, &lk, &mut sess, &ud_rtr()).expect_err("the maps are full");
    assert_eq!(e.errno(), libc::ENOSPC, "{}", e.why());
    assert!(!taken(&log).iter().any(|l| l == "modify"));
    assert!(eventually(&h).is_empty(), "{:?}", eventually(&h));
    // Room again: the RTR guards it, then moves it.
    modify(&h, &lk, &mut sess, &ud_rtr()).unwrap_or_else(|e| panic!("{e}"));
    assert!(sess.qps[&HANDLE].guarded);
    let ud = set(&[
        "tenant_qps 192.168.1.1 . 0x11",
        "ud_qps 192.168.1.1 . 0x11 : 100",
    ]);
    assert_eq!(lk.at_modify.borrow().last().expect("modified").0, ud);
}

#[test]
fn destroying_a_guarded_qp_lets_the_guard_forget_it() {
    let (h, mut sess, log) = guarded();
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    modify(&h, &k, &mut sess, &rtr()).unwrap_or_else(|e| panic!("{e}"));
    taken(&log);
    destroyed(&h, &mut sess, HANDLE);
    assert_eq!(taken(&log), ["qp_gone 192.168.1.1 . 0x11"]);
    // A QP that never reached RTR was never guarded.
    let (h, mut sess, log) = guarded();
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    destroyed(&h, &mut sess, HANDLE);
    assert!(taken(&log).is_empty());
}

#[test]
fn a_connected_resync_is_guarded_again() {
    let (h, mut sess, log) = guarded();
    let k = kernel();
    {
        let mut qp = k.qp.borrow_mut();
        qp.qp_state = IBV_QPS_RTS;
        qp.dest.dgid = v4_mapped([198, 18, 0, 2]);
        qp.dest.sgid_index = 3;
        qp.dest_qp_num = 0x12;
    }
    let r = resync(&h, &k, &mut sess, &resync_req()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(u32::from(r.result), proto::RESYNC_TRACKED);
    assert_eq!(taken(&log), ["qp_seen 192.168.1.1 . 0x11"]);
    assert!(sess.qps[&HANDLE].guarded);
}

#[test]
fn an_address_handle_is_bound_once_the_backstop_applied_its_sets() {
    let (h, mut sess, log) = guarded();
    let f = std::fs::File::open("/dev/null").expect("open");
    sess.uverbs = Some(Arc::new(std::os::fd::OwnedFd::from(f)));
    let ah_attr = proto::AhAttr {
        dgid: v4_mapped([10, 0, 0, 2]),
        sgid_index: 1,
        hop_limit: 64,
        is_global: 1,
        port_num: 1,
        ..Default::default()
    };
    let reply = crate::pipeline::ah::create_ah(&h, &mut sess, &proto::CreateAhReq { ah_attr })
        .unwrap_or_else(|e| panic!("{e}"));
    let proto::ReplyBody::CreateAh(r) = reply else {
        panic!("not a CREATE_AH reply: {reply:?}");
    };
    assert!(taken(&log).is_empty(), "nothing to wait for before BIND_AH");
    let bind = proto::BindAhReq {
        ah_id: r.ah_id,
        ah_handle: 5,
    };
    crate::pipeline::ah::bind_ah(&h, &mut sess, &bind).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(taken(&log), ["hold", "wait_applied", "release"]);
    assert_eq!(tracked(&h).len(), 1, "tracked before the wait");
}

/// Issue 51: an endpoint's RConntrack entries are bounded even without a
/// `maxConnections` (`tenantLimits.connections`): past it an RTR is
/// EDQUOT, never reaches the kernel and is counted; room comes back as
/// entries go. Another endpoint's count is its own.
#[test]
fn an_rtr_past_the_endpoints_connection_limit_is_edquot_until_one_goes() {
    let limits = crate::config::TenantLimits {
        connections: 1,
        ..Default::default()
    };
    let (h, mut sess) = setup_limited(None, limits);
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    let other = rconntrack::Entry {
        session: 99,
        qp_handle: 1,
        tenant: Arc::from("acme"),
        vni: sess.ep.cfg.vni,
        local_vip: sess.ep.cfg.vip,
        local_qpn: 0x99,
        remote_vip: Ipv4Addr::new(10, 0, 0, 2),
        ..Default::default()
    };
    h.admission.table().upsert(other.clone()).expect("tracked");
    let e = modify(&h, &k, &mut sess, &rtr()).expect_err("past the limit");
    assert_eq!(e.errno(), libc::EDQUOT, "{e}");
    assert!(k.ran.borrow().is_empty());
    let counted = sess.ep.usage.refusals();
    assert!(counted.contains(&("connections", 1)), "{counted:?}");
    // globex-a (VNI 200) shares the vIP, not the count.
    let globex = rconntrack::QpKey {
        session: 0,
        qp_handle: 0,
    };
    let held = crate::pipeline::ports::Conntrack::held(&h.admission, 200, sess.ep.cfg.vip, globex);
    assert_eq!(held, 0);
    h.admission.table().remove(other.key());
    modify(&h, &k, &mut sess, &rtr()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tracked(&h).len(), 1);
}

#[test]
fn a_cm_connected_qp_is_tracked_with_its_cm_side_asked_once() {
    let (mut h, mut sess) = setup(None);
    let side = rconntrack::CmSide {
        active: true,
        local_port: 40000,
        remote_port: 18850,
    };
    h.cm = Some(side);
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    modify(&h, &k, &mut sess, &rtr()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tracked(&h)[0].cm, Some(side));
    assert_eq!(h.cm_asked.get(), 1, "one walk of the CM's ids per RTR");
}
