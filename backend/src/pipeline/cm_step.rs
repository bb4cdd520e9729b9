//! The RDMA CM's QP steps (CM_ACCEPT_QP, CM_ESTABLISH_QP): the app's QP
//! moved to RTR and RTS through the QP pipeline with the CM id's
//! attributes, as MODIFY_QP would move it, then the accept or establish
//! on the id's own CM session.

use crate::error::Result;
use crate::kernel::ibv::IBV_QPT_RC;
use crate::pipeline::ports::{CmSteps, QpHost, QpKernel};
use crate::pipeline::qp::{self, StepClock};
use crate::pipeline::session::Session;
use masq_proto as proto;

/// Move QP (`qp_handle`, `qp_num`) for CM id `id` to RTR and RTS, then
/// accept (`accept`: the app's parameters) or establish. A refusal stops
/// at its step; the app then moves its QP to ERROR, as after a failed
/// MODIFY_QP. The CM id may live on another session of the same app (its
/// CM session).
pub(crate) fn cm_qp_step(
    h: &dyn QpHost,
    cm: &dyn CmSteps,
    k: &dyn QpKernel,
    sess: &mut Session,
    id: u32,
    (qp_handle, qp_num): (u32, u32),
    accept: Option<&proto::CmConnParam>,
) -> Result<()> {
    let mut clock = StepClock::new(true, |step, took| h.cm_step(step, took));
    let depths = accept.map(|p| (p.responder_resources, p.initiator_depth));
    let (cm_session, rtr, rts) = cm.qp_attrs(id, &sess.ep.cfg.name, sess.pid, qp_num, depths)?;
    clock.step("attrs");
    for (name, step) in [("rtr", rtr), ("rts", rts)] {
        let m = proto::ModifyQpReq {
            qp_handle,
            qp_num,
            qp_type: IBV_QPT_RC,
            attr_mask: step.attr_mask,
            attr: step.attr,
        };
        qp::modify(h, k, sess, &m)?;
        clock.step(name);
    }
    let body = match accept {
        Some(p) => proto::RequestBody::CmAccept(proto::CmConnectReq {
            id,
            param: p.clone(),
        }),
        None => proto::RequestBody::CmEstablish(proto::CmId { id }),
    };
    cm.finish(cm_session, &sess.ep, &body)?;
    clock.step("finish");
    Ok(())
}

#[cfg(test)]
#[path = "cm_step_tests.rs"]
mod tests;
