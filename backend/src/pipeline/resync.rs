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
use crate::pipeline::ports::{QpHost, QpKernel, Removal};
use crate::pipeline::qp::{ask, local_entry, new_record};
use crate::pipeline::session::{QpRecord, Session};
use masq_proto as proto;
use std::net::Ipv4Addr;
use std::sync::{Arc, RwLockReadGuard};
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
    let connected = connected(kq.qp_state);
    let rec = take_back(h, sess, r, &kq, owner_checked);
    sess.touched.push(r.qp_handle);
    if !connected || r.qp_type == IBV_QPT_UD {
        let ud_up = r.qp_type == IBV_QPT_UD && connected && owner_checked;
        untracked(h, sess, r, rec, gate, ud_up);
        return Ok(reply(proto::RESYNC_UNTRACKED, kq.qp_state));
    }
    not_tracked_yet(h, sess, r, rec.guarded)?;
    match verify_resync(h, sess, r, &kq) {
        Ok(route) => Ok(track_again(h, sess, r, rec, &kq, route)),
        Err(why) => reset(k, sess, r, rec, &why),
    }
}

/// A QP in RTR, RTS or SQD/SQE: it has a destination and can receive.
fn connected(state: u8) -> bool {
    (IBV_QPS_RTR..=IBV_QPS_SQE).contains(&state)
}

fn reply(result: u32, state: u8) -> proto::ResyncQpReply {
    proto::ResyncQpReply {
        qp_state: state.min(IBV_QPS_ERR),
        result: result as u8,
    }
}

/// The session's record of the QP in the state the kernel has. A
/// connected QP of the app's own is vouched for, and one that can receive
/// guarded again.
fn take_back(
    h: &dyn QpHost,
    sess: &Session,
    r: &proto::ResyncQpReq,
    kq: &uverbs::QueryQpResp,
    owner_checked: bool,
) -> QpRecord {
    let mut rec = new_record(r.qp_handle, r.qp_num, r.qp_type);
    rec.state = state_name(kq.qp_state);
    rec.owner_checked = owner_checked;
    let connected = connected(kq.qp_state);
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
    rec
}

/// A QP not connected, or UD, is recorded and nothing tracked; a
/// connected UD QP of the app's own (`ud_up`) is let in again once the
/// policy's `gate` is released.
fn untracked(
    h: &dyn QpHost,
    sess: &mut Session,
    r: &proto::ResyncQpReq,
    rec: QpRecord,
    gate: RwLockReadGuard<'_, ()>,
    ud_up: bool,
) {
    debug!(
        qpn = r.qp_num,
        state = rec.state,
        "QP resynced: nothing to track"
    );
    sess.qps.insert(rec);
    drop(gate);
    if ud_up {
        // This host's backstop sets, and hosts whose masqd restarted
        // too, learn it again (the others ask with PEER_UD_QUERY when
        // they start).
        if let Some(b) = h.guard() {
            b.ud_local(h.underlay(&sess.ep), sess.ep.cfg.vni, r.qp_num, true);
        }
        h.ud_announce(&sess.ep, r.qp_num, true);
    }
}

/// The claimed QPN may not be another tracked QP's: refused, and the
/// guard just taken for it (if `guarded`) given back.
fn not_tracked_yet(
    h: &dyn QpHost,
    sess: &Session,
    r: &proto::ResyncQpReq,
    guarded: bool,
) -> Result<()> {
    let ep = &sess.ep.cfg;
    let lk = rconntrack::LocalKey {
        vni: ep.vni,
        vip: ep.vip,
        qpn: r.qp_num,
    };
    if !h.conntrack().tracks_local(lk) {
        return Ok(());
    }
    if guarded {
        if let Some(b) = h.guard() {
            b.qp_gone(h.underlay(&sess.ep), r.qp_num, Removal::Now);
        }
    }
    Err(refuse(
        libc::EEXIST,
        format!("QPN {:#x} is already tracked for another QP", r.qp_num),
    ))
}

/// A verified connected QP is tracked again, to (peer vIP, peer host) by
/// `rule`, and recorded; untracked if the table is full.
fn track_again(
    h: &dyn QpHost,
    sess: &mut Session,
    r: &proto::ResyncQpReq,
    mut rec: QpRecord,
    kq: &uverbs::QueryQpResp,
    (vip, host, rule): (Ipv4Addr, Ipv4Addr, Arc<str>),
) -> proto::ResyncQpReply {
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
        sess.qps.insert(rec);
        return reply(proto::RESYNC_UNTRACKED, kq.qp_state);
    }
    rec.remote_vip = Some(vip);
    rec.remote_qpn = Some(kq.dest_qp_num);
    rec.peer_host = Some(host);
    rec.virt_sgid_index = r.sgid_index;
    info!(qpn = r.qp_num, rule = %rule,
          "QP resynced: {} -> {vip} QPN {:#x}, tracked again", rec.state, kq.dest_qp_num);
    sess.qps.insert(rec);
    reply(proto::RESYNC_TRACKED, kq.qp_state)
}

/// A connected QP that failed a check (`why`) is moved to ERROR, as a
/// policy reset does, and recorded so.
fn reset(
    k: &dyn QpKernel,
    sess: &mut Session,
    r: &proto::ResyncQpReq,
    mut rec: QpRecord,
    why: &str,
) -> Result<proto::ResyncQpReply> {
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
    sess.qps.insert(rec);
    Ok(reply(proto::RESYNC_RESET, IBV_QPS_ERR))
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
