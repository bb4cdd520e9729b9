//! The RDMA CM's QP steps (`cm_step.rs`) against the core's fakes and a
//! fake CM: the QP goes through the QP pipeline, RTR then RTS, and only
//! then is the accept or establish sent; a refusal stops at its step.
use super::*;
use crate::endpoints::endpoint::Endpoint;
use crate::error::refuse;
use crate::kernel::ibv::{IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_SQ_PSN, IBV_QP_STATE};
use crate::pipeline::fakes::*;
use std::cell::RefCell;
use std::sync::Arc;

/// The CM of one id (7) of the fakes' app, on CM session 99, whose RTR
/// goes to acme-b's QP 0x12; what it was asked, in order.
#[derive(Default)]
struct FakeCm {
    asked: RefCell<Vec<String>>,
}

impl CmSteps for FakeCm {
    fn qp_attrs(
        &self,
        id: u32,
        _ep: &str,
        pid: i32,
        qpn: u32,
        accept: Option<(u8, u8)>,
    ) -> Result<(u64, proto::CmQpAttr, proto::CmQpAttr), crate::error::Error> {
        self.asked
            .borrow_mut()
            .push(format!("qp_attrs {id} {pid} {qpn:#x} {accept:?}"));
        if id != 7 {
            return Err(refuse(libc::ENOENT, format!("no CM id {id} of this app")));
        }
        let r = rtr();
        let rtr = proto::CmQpAttr {
            attr_mask: r.attr_mask,
            attr: r.attr,
        };
        let mut rts = proto::CmQpAttr {
            attr_mask: IBV_QP_STATE | IBV_QP_SQ_PSN,
            ..Default::default()
        };
        rts.attr.qp_state = IBV_QPS_RTS;
        Ok((99, rtr, rts))
    }
    fn finish(
        &self,
        cm_session: u64,
        _ep: &Arc<Endpoint>,
        body: &proto::RequestBody,
    ) -> Result<(), crate::error::Error> {
        let what = match body {
            proto::RequestBody::CmAccept(a) => format!("accept {}", a.id),
            proto::RequestBody::CmEstablish(e) => format!("establish {}", e.id),
            other => format!("{other:?}"),
        };
        self.asked
            .borrow_mut()
            .push(format!("{what} on session {cm_session}"));
        Ok(())
    }
}

fn states(k: &FakeKernel) -> Vec<u8> {
    k.ran.borrow().iter().map(|c| c.qp_state).collect()
}

#[test]
fn an_accept_moves_the_qp_to_rtr_and_rts_through_the_pipeline_then_accepts() {
    let (h, mut sess) = setup(None);
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    let cm = FakeCm::default();
    let param = proto::CmConnParam {
        responder_resources: 4,
        initiator_depth: 2,
        qp_num: QPN,
        ..Default::default()
    };
    cm_qp_step(&h, &cm, &k, &mut sess, 7, (HANDLE, QPN), Some(&param))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        *cm.asked.borrow(),
        [
            format!("qp_attrs 7 {PID} {QPN:#x} Some((4, 2))"),
            "accept 7 on session 99".to_string()
        ]
    );
    assert_eq!(states(&k), [IBV_QPS_RTR, IBV_QPS_RTS]);
    // The RTR went through admission: tracked, with the physical route.
    let t = tracked(&h);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].remote_vip, std::net::Ipv4Addr::new(10, 0, 0, 2));
    assert_eq!(sess.qps[&HANDLE].state, "RTS");
}

#[test]
fn an_establish_sends_the_rtu_after_rts() {
    let (h, mut sess) = setup(None);
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    let cm = FakeCm::default();
    cm_qp_step(&h, &cm, &k, &mut sess, 7, (HANDLE, QPN), None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        cm.asked.borrow().last().map(String::as_str),
        Some("establish 7 on session 99")
    );
    assert_eq!(states(&k), [IBV_QPS_RTR, IBV_QPS_RTS]);
    // Timed for the metrics: the CM's steps around the RTR's own.
    assert_eq!(
        *h.timed_steps.borrow(),
        ["attrs", "route", "owner", "admit", "track", "modify", "record", "rtr", "rts", "finish"]
    );
}

#[test]
fn an_rtr_the_policy_denies_stops_before_the_kernel_and_the_accept() {
    let (h, mut sess) = setup(Some(DENY_ALL));
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    let cm = FakeCm::default();
    let e = cm_qp_step(&h, &cm, &k, &mut sess, 7, (HANDLE, QPN), None).expect_err("denied");
    assert_eq!(e.errno(), libc::EACCES, "{e}");
    assert_eq!(
        cm.asked.borrow().len(),
        1,
        "no establish after a refused RTR"
    );
    assert!(k.ran.borrow().is_empty());
    assert_eq!(k.qp.borrow().qp_state, IBV_QPS_INIT);
    assert!(tracked(&h).is_empty());
}

#[test]
fn an_id_the_cm_does_not_give_the_app_moves_nothing() {
    let (h, mut sess) = setup(None);
    let k = kernel();
    init_on_own_fd(&h, &k, &mut sess);
    let cm = FakeCm::default();
    let e = cm_qp_step(&h, &cm, &k, &mut sess, 8, (HANDLE, QPN), None).expect_err("not its id");
    assert_eq!(e.errno(), libc::ENOENT, "{e}");
    assert!(k.ran.borrow().is_empty());
}
