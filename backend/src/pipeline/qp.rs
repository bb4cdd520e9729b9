//! The QP pipeline: every QP change masqd makes or learns of goes through
//! route -> admit -> execute -> record.
//!
//! - route: check the request's own fields and translate its virtual
//!   address (dgid, sgid index, traffic class) into the physical one;
//! - admit: at RTR, the security groups and the endpoint's quota decide;
//!   the connection is tracked in RConntrack and the backstop's elements
//!   (the QP's, the connection's) are in the kernel before execute, taken
//!   out again if the kernel refuses the RTR;
//! - execute: the verbs command on the app's own uverbs file (`QpKernel`),
//!   after the kernel vouched that the QPN is the app's;
//! - record: the session's QP record, RConntrack's state from then on,
//!   the audit's vouchers.
//!
//! MODIFY_QP runs all four; RESYNC_QP (`resync.rs`) reads the kernel
//! instead of executing and re-runs admission; QP_MOVED (posted after the app moved a
//! QP itself, on its own fd, with a change that carries no address) only
//! records what the kernel says the QP's state is now. The kernel and the
//! host are traits, so the pipeline is tested without RDMA (`tests` below).

use crate::admit::{Ask, Conn};
use crate::endpoints::endpoint::Endpoint;
use crate::error::{from_io, refuse, Result};
use crate::kernel::ibv::state_name;
use crate::kernel::ibv::{
    qp_type_name, IBV_QPS_ERR, IBV_QPS_INIT, IBV_QPS_RESET, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_UC,
    IBV_QPT_UD, IBV_QP_ALT_PATH, IBV_QP_AV, IBV_QP_DEST_QPN, IBV_QP_PORT, IBV_QP_QKEY,
    IBV_QP_STATE,
};
use crate::kernel::ownership::Verdict;
use crate::kernel::uverbs;
use crate::pipeline::ports::{connection_quota, Guard, QpHost, QpKernel, Removal};
use crate::pipeline::session::{QpRecord, Session};
use masq_proto as proto;
use std::net::Ipv4Addr;
use std::sync::Arc;
use tracing::{debug, warn};

/// Q_Keys with the high bit set are for privileged senders (IBA 10.2.4).
const PRIVILEGED_QKEY: u32 = 0x8000_0000;
pub(super) fn new_record(qp_handle: u32, qpn: u32, qp_type: u32) -> QpRecord {
    QpRecord::new(qp_handle, qpn, qp_type_name(qp_type))
}

/// The local half of an RConntrack entry for this session's QP; the caller
/// fills in the peer, the state and the rule.
pub(super) fn local_entry(
    sess: &Session,
    qp_handle: u32,
    qpn: u32,
    qp_type: u32,
) -> rconntrack::Entry {
    let ep = &sess.ep.cfg;
    rconntrack::Entry {
        session: sess.id,
        qp_handle,
        tenant: Arc::from(ep.tenant.as_str()),
        vni: ep.vni,
        local_vip: ep.vip,
        local_qpn: qpn,
        rail: sess.ep.rail_label.clone(),
        qp_type: if qp_type == IBV_QPT_UC {
            rconntrack::QpType::Uc
        } else {
            rconntrack::QpType::Rc
        },
        ..Default::default()
    }
}

pub(super) fn key(sess: &Session, qp_handle: u32) -> rconntrack::QpKey {
    rconntrack::QpKey {
        session: sess.id,
        qp_handle,
    }
}

/// A translated destination.
struct Route {
    vip: Ipv4Addr,
    host: Ipv4Addr,
    name: String,
    vsgid: u8,
    dscp: u8,
}

/// Route: the request's own fields, and its address vector translated.
fn route(
    h: &dyn QpHost,
    sess: &Session,
    m: &proto::ModifyQpReq,
) -> Result<(uverbs::ModifyQp, Option<Route>)> {
    check_fields(h, sess, m)?;
    let mut cmd = command(m);
    if m.attr_mask & IBV_QP_AV == 0 {
        return Ok((cmd, None));
    }
    let (dest, route) = translate(h, sess, &m.attr.ah_attr)?;
    cmd.dest = dest;
    Ok((cmd, Some(route)))
}

/// The request's attribute mask and the fields masqd refuses before the
/// kernel would (or where it would not).
fn check_fields(h: &dyn QpHost, sess: &Session, m: &proto::ModifyQpReq) -> Result<()> {
    let a = &m.attr;
    let mask = m.attr_mask;
    if mask & !uverbs::LEGACY_ATTR_MASK != 0 {
        return Err(refuse(
            libc::EOPNOTSUPP,
            format!("attribute mask {mask:#x}"),
        ));
    }
    if mask & IBV_QP_ALT_PATH != 0 {
        return Err(refuse(
            libc::EOPNOTSUPP,
            "alternate paths are not virtualized",
        ));
    }
    // The kernel refuses a privileged Q_Key (high bit) to callers without
    // CAP_NET_RAW; masqd has it and runs the command, so it refuses first.
    if mask & IBV_QP_QKEY != 0 && a.qkey & PRIVILEGED_QKEY != 0 {
        return Err(refuse(
            libc::EPERM,
            format!("privileged Q_Key {:#x}", a.qkey),
        ));
    }
    if mask & IBV_QP_PORT != 0 && a.port_num != h.port(&sess.ep) {
        return Err(refuse(libc::EINVAL, format!("port {}", a.port_num)));
    }
    Ok(())
}

/// The verbs command for the request's fields, without a destination.
fn command(m: &proto::ModifyQpReq) -> uverbs::ModifyQp {
    let a = &m.attr;
    uverbs::ModifyQp {
        qp_handle: m.qp_handle,
        attr_mask: m.attr_mask,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags,
        pkey_index: a.pkey_index,
        qp_state: a.qp_state,
        cur_qp_state: a.cur_qp_state,
        path_mtu: a.path_mtu,
        path_mig_state: a.path_mig_state,
        en_sqd_async_notify: a.en_sqd_async_notify,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        ..Default::default()
    }
}

/// The request's address vector as the kernel's destination, and the
/// route it names.
fn translate(
    h: &dyn QpHost,
    sess: &Session,
    ah: &proto::AhAttr,
) -> Result<(uverbs::QpDest, Route)> {
    let av = physical_av(h, &sess.ep, ah)?;
    let dest = uverbs::QpDest {
        dgid: av.phys_dgid,
        flow_label: ah.flow_label,
        dlid: ah.dlid,
        sgid_index: av.sgid_index,
        hop_limit: ah.hop_limit,
        traffic_class: av.traffic_class,
        sl: ah.sl,
        src_path_bits: ah.src_path_bits,
        static_rate: ah.static_rate,
        is_global: 1,
        port_num: h.port(&sess.ep),
        ..Default::default()
    };
    let route = Route {
        vip: av.vip,
        host: av.host,
        name: av.name,
        vsgid: ah.sgid_index,
        dscp: av.traffic_class >> 2,
    };
    Ok((dest, route))
}

/// An app's address vector (RC's at RTR, UD's address handle) in the
/// host's terms: its destination from the VPC map, the host's GID index
/// for the virtual one, and the policy's traffic class.
pub(crate) struct PhysicalAv {
    pub vip: Ipv4Addr,
    pub host: Ipv4Addr,
    pub name: String,
    pub phys_dgid: [u8; 16],
    pub sgid_index: u8,
    pub traffic_class: u8,
}

/// Check and translate `ah` for endpoint `ep`; admission is the caller's.
pub(crate) fn physical_av(h: &dyn QpHost, ep: &Endpoint, ah: &proto::AhAttr) -> Result<PhysicalAv> {
    if ah.is_global == 0 {
        return Err(refuse(
            libc::EINVAL,
            "RoCE needs a global route (is_global)",
        ));
    }
    if ah.port_num != 0 && ah.port_num != h.port(ep) {
        return Err(refuse(libc::EINVAL, format!("AH port {}", ah.port_num)));
    }
    let cfg = &ep.cfg;
    let tr = |e: vbond::TranslateError| refuse(e.errno(), format!("{e} (tenant {})", cfg.tenant));
    // Copied out: the map is not held across the vNIC read and below.
    let (vip, host, name, phys_dgid) = {
        let vpc = h.registry().vpc();
        let d = vpc
            .translate_dgid(cfg.vni, &ah.dgid, h.rail_name(ep))
            .map_err(tr)?;
        (d.vip, d.peer.underlay, d.peer.name.clone(), d.phys_dgid)
    };
    let traffic_class = h
        .decide()
        .traffic_class(&cfg.tenant, cfg.vni, cfg.vip, ah.traffic_class);
    let sgid_index = h.sgid_index(ep, u32::from(ah.sgid_index))? as u8;
    Ok(PhysicalAv {
        vip,
        host,
        name,
        phys_dgid,
        sgid_index,
        traffic_class,
    })
}

/// Admit: the security groups' rule for local -> remote, within the
/// endpoint's connection quota; `cm`, the CM's side of the QP if the CM
/// connects it.
fn admit(
    h: &dyn QpHost,
    sess: &Session,
    qp_handle: u32,
    remote: Ipv4Addr,
    cm: Option<rconntrack::CmSide>,
) -> Result<Arc<str>> {
    let ep = &sess.ep.cfg;
    let conn = cm.map_or(Conn::Qp, Conn::cm_side);
    let rule = h
        .decide()
        .decide(&Ask::from_endpoint(ep, remote, conn), h.registry())
        .map_err(|why| {
            refuse(
                libc::EACCES,
                format!("{} deny {} -> {remote}: {why}", why.by, ep.vip),
            )
        })?;
    // Under the endpoint's quota lock when it has a `maxConnections`; the
    // default limit alone is checked without it (a few concurrent moves
    // of one endpoint may pass it by as many).
    let max = connection_quota(&sess.ep, h.registry().limits().connections);
    let held = h.conntrack().held(ep.vni, ep.vip, key(sess, qp_handle));
    if held >= max as usize {
        sess.ep
            .usage
            .count(crate::endpoints::usage::What::Connections);
        return Err(refuse(
            libc::EDQUOT,
            format!(
                "connection quota of endpoint {} reached ({held} of {max}); \
                 {} -> {remote} refused",
                ep.name, ep.vip
            ),
        ));
    }
    Ok(rule)
}

/// What a connected QP's move to RTR asks: a verbs QP, or the RDMA CM's
/// connection if the CM set it up (NetworkPolicy reads its port).
pub(super) fn ask<'a>(h: &dyn QpHost, sess: &'a Session, qpn: u32, remote: Ipv4Addr) -> Ask<'a> {
    let conn = h.cm_side(&sess.ep, qpn).map_or(Conn::Qp, Conn::cm_side);
    Ask::from_endpoint(&sess.ep.cfg, remote, conn)
}

/// Times steps for the metrics: each `step` hands `record` the time since
/// the previous one (or since the clock started). A clock started off
/// records nothing.
pub(crate) struct StepClock<F: FnMut(&'static str, std::time::Duration)> {
    record: F,
    last: Option<std::time::Instant>,
}

impl<F: FnMut(&'static str, std::time::Duration)> StepClock<F> {
    pub(crate) fn new(on: bool, record: F) -> Self {
        StepClock {
            record,
            last: on.then(std::time::Instant::now),
        }
    }

    pub(crate) fn step(&mut self, name: &'static str) {
        if let Some(last) = self.last {
            let now = std::time::Instant::now();
            (self.record)(name, now - last);
            self.last = Some(now);
        }
    }
}

/// MODIFY_QP: route -> admit -> execute -> record.
pub fn modify(
    h: &dyn QpHost,
    k: &dyn QpKernel,
    sess: &mut Session,
    m: &proto::ModifyQpReq,
) -> Result<()> {
    let to_rtr = moves_to(m, IBV_QPS_RTR);
    // Only a move to RTR is timed, step by step.
    let mut clock = StepClock::new(to_rtr, |step, took| h.rtr_step(step, took));
    let (cmd, route) = route(h, sess, m)?;
    clock.step("route");
    same_qpn(sess, m.qp_handle, m.qp_num)?;
    let check_after = owner_first(k, sess, m)?;
    clock.step("owner");
    let remote_vip = route
        .as_ref()
        .map(|r| r.vip)
        .or_else(|| sess.qps.get(&m.qp_handle).and_then(|q| q.remote_vip));
    let connects = to_rtr && m.qp_type != IBV_QPT_UD;
    // Held until the entry is in the table: a policy change waits for it.
    let _gate = connects.then(|| h.decide().admitting());
    let ep = sess.ep.clone();
    let _quota = (connects && ep.cfg.max_connections.is_some())
        .then(|| ep.quota.lock().unwrap_or_else(|e| e.into_inner()));
    // Looked up once: the CM finds a QP's id by a walk of its ids.
    let cm = connects.then(|| h.cm_side(&sess.ep, m.qp_num)).flatten();
    let admitted_by = if connects {
        let remote = remote_vip
            .ok_or_else(|| refuse(libc::EINVAL, "RTR without a destination (IBV_QP_AV)"))?;
        Some(admit(h, sess, m.qp_handle, remote, cm)?)
    } else {
        None
    };
    clock.step("admit");

    // Execute. Vouched for the audit (which flags QPs from RTR on) before
    // masqd moves it to RTR, never for less: a QP the app connects on its
    // own is not masqd's to answer for.
    if to_rtr {
        h.vouchers()
            .vouch(sess.ep.rail, m.qp_num, sess.id, sess.pid);
    }
    // A QP can receive from RTR on: the backstop guards its QPN (a UD
    // QP's in its VNI's sets too) before the RTR runs.
    let guard = to_rtr && !sess.qps.get(&m.qp_handle).is_some_and(|r| r.guarded);
    let entry =
        admitted_by.and_then(|rule| connection(sess, m, route.as_ref(), (remote_vip?, cm), rule));
    if let Some(b) = h.guard() {
        b.take_refused();
    }
    let before = guard_and_track(h, sess, m, guard, entry, &mut clock);
    if h.guard().is_some_and(|b| b.take_refused()) {
        // Fail closed: without its elements the QP would take packets
        // from any host, or its connection none.
        undo(h, sess, m, guard, before);
        return Err(refuse(
            libc::ENOSPC,
            "the backstop's eBPF maps are full: this QP's elements could not be put in force",
        ));
    }
    let executed = k.modify(&cmd);
    clock.step("modify");
    if let Err(e) = executed {
        undo(h, sess, m, guard, before);
        return Err(from_io(e, "MODIFY_QP"));
    }
    let owner_checked = if check_after {
        matches!(k.owner(m.qp_num, m.qp_type)?, Verdict::Owned(_))
    } else {
        true
    };
    let ud = m.qp_type == IBV_QPT_UD && owner_checked;
    if ud && to_rtr {
        // It can receive: the other hosts of its VNI are told.
        h.ud_announce(&sess.ep, m.qp_num, true);
    }
    let guarded = guard && h.guard().is_some();
    record(h, sess, m, route, owner_checked, guarded);
    if ud && moves_to(m, IBV_QPS_INIT) {
        ud_in_init(h, sess, m.qp_handle, m.qp_num);
    }
    clock.step("record");
    Ok(())
}

/// Whether `m` moves its QP to `state`.
fn moves_to(m: &proto::ModifyQpReq, state: u8) -> bool {
    m.attr_mask & IBV_QP_STATE != 0 && m.attr.qp_state == state
}

/// A UD QP of the app's in INIT (recorded, its QPN the kernel vouched
/// for, by MODIFY_QP or QP_MOVED): the other hosts of its VNI are told
/// early (`QpHost::ud_announce_early`), and it is guarded from now on, as
/// its RTR would guard it (its elements are in the eBPF maps at once), so
/// its RTR waits for nothing of the backstop's and the answers to that
/// announcement arrive while the app gets ready. Its elements only narrow
/// what reaches it, so INIT is no less safe a moment for them than RTR.
/// An element the maps refused is taken out again: the RTR then tries
/// again and fails closed if there is still no room.
fn ud_in_init(h: &dyn QpHost, sess: &mut Session, qp_handle: u32, qpn: u32) {
    h.ud_announce_early(&sess.ep, qpn);
    let Some(b) = h.guard() else {
        return;
    };
    let (local, vni) = (h.underlay(&sess.ep), sess.ep.cfg.vni);
    if let Some(rec) = sess.qps.get_mut(qp_handle).filter(|r| !r.guarded) {
        b.take_refused();
        guard_qp(b, local, vni, rec.qpn, true, None);
        if b.take_refused() {
            guard_qp(b, local, vni, rec.qpn, true, Some(Removal::Now));
        } else {
            rec.guarded = true;
        }
    }
}

/// A known QP handle keeps the QPN it was recorded with.
fn same_qpn(sess: &Session, qp_handle: u32, qpn: u32) -> Result<()> {
    match sess.qps.get(&qp_handle) {
        Some(r) if r.qpn != qpn => Err(refuse(
            libc::EINVAL,
            format!("QP handle {qp_handle} is QPN {:#x}, not {qpn:#x}", r.qpn),
        )),
        _ => Ok(()),
    }
}

/// The QPN is taken from the app: the kernel must vouch for it before
/// masqd records, tracks or connects it. Once per QP: a record keeps the
/// QPN it was checked with. A QP in RESET has no port, and the kernel
/// answers for it only after the move to INIT gave it one, so that move
/// (which carries no address) runs first and is checked after; every later
/// move is checked before it runs, once its own fields passed (a malformed
/// request gets EINVAL, not a kernel lookup). Whether the kernel is to be
/// asked after the move.
fn owner_first(k: &dyn QpKernel, sess: &Session, m: &proto::ModifyQpReq) -> Result<bool> {
    let checked = sess.qps.get(&m.qp_handle).is_some_and(|r| r.owner_checked);
    let to_init_at_most = m.attr_mask & IBV_QP_STATE != 0 && m.attr.qp_state <= IBV_QPS_INIT;
    if !checked && !to_init_at_most {
        if let Verdict::NoPortYet = k.owner(m.qp_num, m.qp_type)? {
            return Err(refuse(
                libc::EPERM,
                format!(
                    "QP {:#x} has no port: only a move to INIT may come first",
                    m.qp_num
                ),
            ));
        }
    }
    Ok(!checked && to_init_at_most)
}

/// The RConntrack entry of an admitted connection to `remote_vip` (set up
/// by the CM if `cm`): its peer host and QPN from this request, or from
/// the QP's record.
fn connection(
    sess: &Session,
    m: &proto::ModifyQpReq,
    route: Option<&Route>,
    (remote_vip, cm): (Ipv4Addr, Option<rconntrack::CmSide>),
    rule: Arc<str>,
) -> Option<rconntrack::Entry> {
    let known = sess.qps.get(&m.qp_handle);
    let peer_host = route
        .map(|r| r.host)
        .or_else(|| known.and_then(|q| q.peer_host))?;
    let remote_qpn = if m.attr_mask & IBV_QP_DEST_QPN != 0 {
        m.attr.dest_qp_num
    } else {
        known.and_then(|q| q.remote_qpn).unwrap_or(0)
    };
    Some(rconntrack::Entry {
        remote_vip,
        remote_qpn,
        peer_host,
        state: rconntrack::State::Admitted,
        rule,
        cm,
        dscp: route.map(|r| r.dscp),
        ..local_entry(sess, m.qp_handle, m.qp_num, m.qp_type)
    })
}

/// Before the move runs: the QP guarded by the backstop (if `guard`) and
/// the connection tracked, so that the connection's elements are in
/// force by the RTR too (its app sends once RTR returns). Every element
/// an RTR puts in is an eBPF map's, written by this thread as the table
/// changes (`Backstop::submit`): there is nothing to wait for. What was
/// tracked before, for `undo`: `None` if nothing was tracked here.
fn guard_and_track<F: FnMut(&'static str, std::time::Duration)>(
    h: &dyn QpHost,
    sess: &Session,
    m: &proto::ModifyQpReq,
    guard: bool,
    entry: Option<rconntrack::Entry>,
    clock: &mut StepClock<F>,
) -> Option<Option<rconntrack::Entry>> {
    let qpn = m.qp_num;
    if let (true, Some(b)) = (guard, h.guard()) {
        let ud = m.qp_type == IBV_QPT_UD;
        guard_qp(b, h.underlay(&sess.ep), sess.ep.cfg.vni, m.qp_num, ud, None);
    }
    let before = entry
        .as_ref()
        .map(|_| h.conntrack().get(key(sess, m.qp_handle)));
    if let Some(e) = entry {
        debug!(qpn, rule = %e.rule, "connection admitted");
        if h.conntrack().upsert(e).is_err() {
            warn!("connection table full; {qpn} not tracked");
        }
    }
    clock.step("track");
    before
}

/// The kernel refused the move: a QP that did not get to RTR keeps no
/// element of its own, and the table what it had `before`.
fn undo(
    h: &dyn QpHost,
    sess: &Session,
    m: &proto::ModifyQpReq,
    guard: bool,
    before: Option<Option<rconntrack::Entry>>,
) {
    match before {
        Some(Some(old)) => {
            let _ = h.conntrack().upsert(old);
        }
        Some(None) => {
            h.conntrack().remove(key(sess, m.qp_handle));
        }
        None => {}
    }
    if let (true, Some(b)) = (guard, h.guard()) {
        let ud = m.qp_type == IBV_QPT_UD;
        let local = h.underlay(&sess.ep);
        guard_qp(b, local, sess.ep.cfg.vni, m.qp_num, ud, Some(Removal::Now));
    }
}

/// The backstop's elements of a local QP that can receive: its QPN, and a
/// UD QP's in its VNI's sets; or taken out again, `Some(when)` (`Gone`
/// once the QP is destroyed).
fn guard_qp(b: &dyn Guard, local: Ipv4Addr, vni: u32, qpn: u32, ud: bool, out: Option<Removal>) {
    match out {
        None => {
            b.qp_seen(local, qpn);
            if ud {
                b.ud_local(local, vni, qpn, true);
            }
        }
        Some(when) => {
            if ud {
                b.ud_local(local, vni, qpn, false);
            }
            b.qp_gone(local, qpn, when);
        }
    }
}

/// Record: the session's record of the QP, and the table's state.
fn record(
    h: &dyn QpHost,
    sess: &mut Session,
    m: &proto::ModifyQpReq,
    route: Option<Route>,
    owner_checked: bool,
    guarded: bool,
) {
    let a = &m.attr;
    let has_state = m.attr_mask & IBV_QP_STATE != 0;
    sess.touched.push(m.qp_handle);
    let key = key(sess, m.qp_handle);
    let rec = sess
        .qps
        .entry(m.qp_handle, || new_record(m.qp_handle, m.qp_num, m.qp_type));
    rec.owner_checked |= owner_checked;
    rec.guarded |= guarded;
    if has_state {
        rec.state = state_name(a.qp_state);
    }
    if m.attr_mask & IBV_QP_DEST_QPN != 0 {
        rec.remote_qpn = Some(a.dest_qp_num);
    }
    if let Some(r) = route {
        rec.remote_vip = Some(r.vip);
        rec.peer_host = Some(r.host);
        rec.virt_sgid_index = r.vsgid;
        debug!(
            qpn = m.qp_num,
            "QP -> {}: {} ({}) QPN {:#x} via host {}",
            state_name(a.qp_state),
            r.vip,
            r.name,
            a.dest_qp_num,
            r.host
        );
    }
    if has_state {
        record_state(h, sess, key, a.qp_state);
    }
}

/// The table follows a QP's state: ESTABLISHED at RTS, gone at RESET or
/// ERROR (with the record's destination).
fn record_state(h: &dyn QpHost, sess: &mut Session, key: rconntrack::QpKey, state: u8) {
    match state {
        IBV_QPS_RTS => {
            h.conntrack().set_state(key, rconntrack::State::Established);
        }
        IBV_QPS_RESET | IBV_QPS_ERR => {
            h.conntrack().forget(key);
            if let Some(rec) = sess.qps.get_mut(key.qp_handle) {
                rec.remote_vip = None;
                rec.remote_qpn = None;
            }
        }
        _ => {}
    }
}

/// QP_MOVED (posted): the app moved one of its QPs on its own fd. The
/// claim only prompts masqd: the QP's state is read from the kernel's
/// resource tracker (rdma netlink), where the QPN must be the app's own,
/// and only that state is recorded. Nothing here admits, tracks or guards
/// a connection: a QP the app brought to RTR itself stays untracked (the
/// audit flags it). A UD QP of the app's in INIT is announced to the other
/// hosts of its VNI, so that its RTR finds their acks in: they then let
/// its datagrams reach their UD QPs of that VNI, which its RTR through
/// masqd would give it anyway.
///
/// Not through the app's uverbs file: the app does not wait for this, and
/// a command of masqd's on its QP makes the app's own ibv_destroy_qp fail
/// with EBUSY meanwhile (uverbs locks the object); netlink's reference only
/// delays the destroy. So the handle is not checked by the kernel here; it
/// only keys the session's record, and one QPN gets one handle.
pub fn moved(
    h: &dyn QpHost,
    k: &dyn QpKernel,
    sess: &mut Session,
    m: &proto::QpMovedReq,
) -> Result<()> {
    same_qpn(sess, m.qp_handle, m.qp_num)?;
    let known = sess.qps.contains_key(&m.qp_handle);
    if let (false, Some(other)) = (known, sess.qps.handle_of(m.qp_num)) {
        return Err(refuse(
            libc::EINVAL,
            format!(
                "QPN {:#x} is QP handle {other}, not {}",
                m.qp_num, m.qp_handle
            ),
        ));
    }
    let (owner_checked, state) = if rts_after_own_rtr(sess, m) {
        (true, IBV_QPS_RTS)
    } else {
        // The kernel's word through rdma netlink, never a command on the
        // app's own uverbs file: the app does not wait for a posted
        // notice, and its ibv_destroy_qp of the QP fails with EBUSY while
        // a command of masqd's holds the QP there (a move to ERROR and a
        // destroy right after it is common).
        match k.owner(m.qp_num, m.qp_type) {
            Ok(Verdict::Owned(q)) => (true, q.state.min(IBV_QPS_ERR)),
            Ok(Verdict::NoPortYet) => (false, IBV_QPS_RESET),
            // No such QP: destroyed since the notice was posted (an app
            // that moves a QP to ERROR and destroys it posts both before
            // masqd runs; the RDMA CM's teardown does, every connection).
            // Its QP_DESTROYED follows; there is nothing to record, and
            // nothing the app did wrong.
            Err(e) if e.errno() == libc::ENOENT => {
                debug!(
                    qpn = m.qp_num,
                    "QP_MOVED to {}: the kernel has no such QP now (destroyed since)",
                    state_name(m.qp_state)
                );
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    };
    if state != m.qp_state {
        debug!(
            qpn = m.qp_num,
            "QP_MOVED claims {} but the kernel has {}",
            state_name(m.qp_state),
            state_name(state)
        );
    }
    sess.touched.push(m.qp_handle);
    let key = key(sess, m.qp_handle);
    let rec = sess
        .qps
        .entry(m.qp_handle, || new_record(m.qp_handle, m.qp_num, m.qp_type));
    rec.owner_checked |= owner_checked;
    rec.state = state_name(state);
    record_state(h, sess, key, state);
    if owner_checked && m.qp_type == IBV_QPT_UD && state == IBV_QPS_INIT {
        ud_in_init(h, sess, m.qp_handle, m.qp_num);
    }
    Ok(())
}

/// Whether notice `m` is the RTS that follows an RTR masqd ran itself on
/// a QP whose QPN the kernel vouched for: then it is taken at its word,
/// with no kernel query (one per connected QP saved). From RTR a QP goes
/// to RTS, ERROR or RESET only, and the claim can only mark the tracked
/// connection ESTABLISHED, which it already is for the backstop; a false
/// one (the QP is in ERROR) keeps it tracked, as saying nothing would.
/// A claim that would untrack (ERROR, RESET) is always asked of the kernel.
fn rts_after_own_rtr(sess: &Session, m: &proto::QpMovedReq) -> bool {
    m.qp_state == IBV_QPS_RTS
        && m.qp_type != IBV_QPT_UD
        && sess.qps.get(&m.qp_handle).is_some_and(|r| {
            r.owner_checked && r.state == "RTR" && r.remote_vip.is_some() && r.qpn == m.qp_num
        })
}

/// DESTROY_QP and QP_DESTROYED: the app destroyed the QP (the kernel
/// already freed it; nothing to check).
pub fn destroyed(h: &dyn QpHost, sess: &mut Session, qp_handle: u32) {
    if let Some(qp) = sess.qps.remove(qp_handle) {
        debug!(qpn = qp.qpn, "QP destroyed");
        if qp.qp_type == "UD" && qp.owner_checked {
            h.ud_announce(&sess.ep, qp.qpn, false);
        }
        h.vouchers().forget(sess.ep.rail, qp.qpn, sess.id);
        if let (true, Some(b)) = (qp.guarded, h.guard()) {
            let (local, ud) = (h.underlay(&sess.ep), qp.qp_type == "UD");
            guard_qp(b, local, sess.ep.cfg.vni, qp.qpn, ud, Some(Removal::Gone));
        }
        sess.touched.push(qp_handle);
    }
    h.conntrack().forget(key(sess, qp_handle));
}

#[cfg(test)]
#[path = "qp_tests.rs"]
mod tests;
