//! RESYNC_QP: the QPs an app had set up, named again after a masqd
//! restart, checked against the kernel and the current policy and tracked
//! again (or moved to ERROR); the QP pipeline's (`qp.rs`) records and
//! entries.

use crate::error::{from_io, refuse, Result};
use crate::kernel::ibv::state_name;
use crate::kernel::ibv::{
    IBV_QPS_ERR, IBV_QPS_RTR, IBV_QPS_SQE, IBV_QPT_UD, IBV_QP_AV, IBV_QP_DEST_QPN, IBV_QP_STATE,
};
use crate::kernel::ownership::Verdict;
use crate::kernel::uverbs;
use crate::pipeline::ports::{QpHost, QpKernel};
use crate::pipeline::qp::{ask, local_entry, new_record};
use crate::pipeline::session::Session;
use masq_proto as proto;
use std::net::Ipv4Addr;
use std::sync::Arc;
use tracing::{debug, info, warn};

/// RESYNC_QP: after a masqd restart the frontend names the QPs it had set
/// up. Nothing it says is taken on trust: the kernel checks that the
/// handle is a QP of this session's uverbs file and tells its state,
/// destination QPN and physical destination; the claimed virtual
/// destination must be the VPC address whose host that is; the current
/// policy must allow the pair. A connected QP that fails a check is moved
/// to ERROR (as a policy reset does); QPs never named stay untracked.
/// The claimed QPN must be the app's own by the kernel's word (see
/// `ownership.rs`) and may not be another tracked QP's.
pub fn resync(
    h: &dyn QpHost,
    k: &dyn QpKernel,
    sess: &mut Session,
    r: &proto::ResyncQpReq,
) -> Result<proto::ResyncQpReply> {
    if sess.qps.contains_key(&r.qp_handle) {
        return Err(refuse(
            libc::EEXIST,
            format!("QP handle {} is already known", r.qp_handle),
        ));
    }
    let gate = h.decide().admitting();
    // The handle first, in the app's own uverbs file: another app's handle
    // is ENOENT there, whatever QPN comes with it.
    let kq = k
        .query(r.qp_handle, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN)
        .map_err(|e| from_io(e, "RESYNC_QP: QUERY_QP"))?;
    let owner_checked = matches!(k.owner(r.qp_num, r.qp_type)?, Verdict::Owned(_));
    let reply = |result: u32, state: u8| proto::ResyncQpReply {
        qp_state: state.min(IBV_QPS_ERR),
        result: result as u8,
    };
    let mut rec = new_record(r.qp_handle, r.qp_num, r.qp_type);
    rec.state = state_name(kq.qp_state);
    rec.owner_checked = owner_checked;
    let connected = (IBV_QPS_RTR..=IBV_QPS_SQE).contains(&kq.qp_state);
    if connected && owner_checked {
        // Until the checks below end: a QP reset there is no bypass either.
        h.vouchers()
            .vouch(sess.ep.rail, r.qp_num, sess.id, sess.pid);
    }
    // A QP that can receive is guarded again (the sets survived the
    // restart; `reconcile` keeps only what came back).
    if let (true, Some(b)) = (connected, h.guard()) {
        b.qp_seen(h.underlay(&sess.ep), r.qp_num);
        rec.guarded = true;
    }
    sess.touched.push(r.qp_handle);
    if !connected || r.qp_type == IBV_QPT_UD {
        debug!(
            qpn = r.qp_num,
            state = rec.state,
            "QP resynced: nothing to track"
        );
        sess.qps.insert(r.qp_handle, rec);
        drop(gate);
        if r.qp_type == IBV_QPT_UD && connected && owner_checked {
            // This host's backstop sets, and hosts whose masqd restarted
            // too, learn it again (the others ask with PEER_UD_QUERY when
            // they start).
            if let Some(b) = h.guard() {
                b.ud_local(h.underlay(&sess.ep), sess.ep.cfg.vni, r.qp_num, true);
            }
            h.ud_announce(&sess.ep, r.qp_num, true);
        }
        return Ok(reply(proto::RESYNC_UNTRACKED, kq.qp_state));
    }
    let ep = &sess.ep.cfg;
    let lk = rconntrack::LocalKey {
        vni: ep.vni,
        vip: ep.vip,
        qpn: r.qp_num,
    };
    if h.conntrack().tracks_local(lk) {
        if rec.guarded {
            if let Some(b) = h.guard() {
                b.qp_gone(h.underlay(&sess.ep), r.qp_num);
            }
        }
        return Err(refuse(
            libc::EEXIST,
            format!("QPN {:#x} is already tracked for another QP", r.qp_num),
        ));
    }
    match verify_resync(h, sess, r, &kq) {
        Ok((vip, host, rule)) => {
            let established = kq.qp_state != IBV_QPS_RTR;
            let entry = rconntrack::Entry {
                remote_vip: vip,
                remote_qpn: kq.dest_qp_num,
                peer_host: host,
                state: if established {
                    rconntrack::State::Established
                } else {
                    rconntrack::State::Admitted
                },
                rule: rule.clone(),
                ..local_entry(sess, r.qp_handle, r.qp_num, r.qp_type)
            };
            if h.conntrack().upsert(entry).is_err() {
                warn!("connection table full; {} not tracked", r.qp_num);
                sess.qps.insert(r.qp_handle, rec);
                return Ok(reply(proto::RESYNC_UNTRACKED, kq.qp_state));
            }
            rec.remote_vip = Some(vip);
            rec.remote_qpn = Some(kq.dest_qp_num);
            rec.peer_host = Some(host);
            rec.virt_sgid_index = r.sgid_index;
            info!(qpn = r.qp_num, rule = %rule,
                  "QP resynced: {} -> {vip} QPN {:#x}, tracked again", rec.state, kq.dest_qp_num);
            sess.qps.insert(r.qp_handle, rec);
            Ok(reply(proto::RESYNC_TRACKED, kq.qp_state))
        }
        Err(why) => {
            let cmd = uverbs::ModifyQp {
                qp_handle: r.qp_handle,
                attr_mask: IBV_QP_STATE,
                qp_state: IBV_QPS_ERR,
                ..Default::default()
            };
            k.modify(&cmd)
                .map_err(|e| from_io(e, "RESYNC_QP: cannot move the QP to ERROR"))?;
            warn!(qpn = r.qp_num, "QP moved to ERROR on resync: {why}");
            rec.state = state_name(IBV_QPS_ERR);
            sess.qps.insert(r.qp_handle, rec);
            Ok(reply(proto::RESYNC_RESET, IBV_QPS_ERR))
        }
    }
}

/// The claimed destination of a connected QP against the kernel's, and the
/// current policy: (peer vIP, peer host, admitting rule) or why not.
fn verify_resync(
    h: &dyn QpHost,
    sess: &Session,
    r: &proto::ResyncQpReq,
    kq: &uverbs::QueryQpResp,
) -> Result<(Ipv4Addr, Ipv4Addr, Arc<str>), String> {
    if r.has_route == 0 {
        return Err("connected, but no destination was named".into());
    }
    let ep = &sess.ep.cfg;
    let (route_vip, route_host, phys_dgid) = {
        let vpc = h.registry().vpc();
        let r = vpc
            .translate_dgid(ep.vni, &r.dgid, h.rail_name(&sess.ep))
            .map_err(|e| format!("claimed destination: {e}"))?;
        (r.vip, r.peer.underlay, r.phys_dgid)
    };
    if phys_dgid != kq.dest.dgid {
        return Err(format!(
            "the kernel's destination {} is not the host of {}",
            vbond::gid_to_string(&kq.dest.dgid),
            route_vip
        ));
    }
    let psgid = h
        .sgid_index(&sess.ep, u32::from(r.sgid_index))
        .map_err(|e| format!("claimed sgid index: {}", e.why()))?;
    if psgid != u32::from(kq.dest.sgid_index) {
        return Err(format!(
            "the kernel's sgid index {} is not virtual index {}'s",
            kq.dest.sgid_index, r.sgid_index
        ));
    }
    let rule = h
        .decide()
        .decide(&ask(h, sess, r.qp_num, route_vip), h.registry())
        .map_err(|why| format!("{} deny {} -> {}: {why}", why.by, ep.vip, route_vip))?;
    Ok((route_vip, route_host, rule))
}
