//! One app context's session: validate each request, translate virtual
//! addresses, run the verbs command on the tenant's own uverbs file.

use crate::ibv::{
    IBV_QP_ALT_PATH, IBV_QP_AV, IBV_QP_DEST_QPN, IBV_QP_PORT, IBV_QP_QKEY, IBV_QP_STATE,
};
use crate::registry::{Endpoint, VDEV_NAME};
use crate::seqpacket::Conn;
use crate::state::{QpRecord, Shared};
use crate::{audit, ownership, uverbs};
use masq_proto as proto;
use std::collections::BTreeMap;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

const IBV_QPS_RESET: u8 = 0;
const IBV_QPS_INIT: u8 = 1;
const IBV_QPS_RTR: u8 = 2;
const IBV_QPS_RTS: u8 = 3;
const IBV_QPS_SQE: u8 = 5;
const IBV_QPS_ERR: u8 = 6;
/// Q_Keys with the high bit set are for privileged senders (IBA 10.2.4).
const PRIVILEGED_QKEY: u32 = 0x8000_0000;
/// How long an admission waits for the backstop to let its packets through.
pub(crate) const BACKSTOP_WAIT: Duration = Duration::from_secs(5);

pub struct Session {
    pub id: u64,
    pub pid: i32,
    pub ep: Arc<Endpoint>,
    pub app: String,
    pub requests: u64,
    hello: bool,
    uverbs: Option<Arc<OwnedFd>>,
    pub qps: BTreeMap<u32, QpRecord>,
    /// UD address handles by kernel handle, and admissions not yet bound.
    pub(crate) ahs: BTreeMap<u32, crate::ud::AhRecord>,
    pub(crate) ah_pending: BTreeMap<u32, crate::ud::PendingAh>,
    pub(crate) next_ah_id: u32,
}

impl Session {
    pub fn new(id: u64, pid: i32, ep: Arc<Endpoint>) -> Session {
        Session {
            id,
            pid,
            ep,
            app: String::new(),
            requests: 0,
            hello: false,
            uverbs: None,
            qps: BTreeMap::new(),
            ahs: BTreeMap::new(),
            ah_pending: BTreeMap::new(),
            next_ah_id: 0,
        }
    }

    /// Whether OPEN_DEVICE gave the session its uverbs file.
    pub(crate) fn has_device(&self) -> bool {
        self.uverbs.is_some()
    }
}

/// A failed request: the errno the app will see, and why (for the log).
pub(crate) struct Refusal {
    errno: i32,
    why: String,
}

pub(crate) fn refuse(errno: i32, why: impl Into<String>) -> Refusal {
    Refusal {
        errno,
        why: why.into(),
    }
}

pub(crate) fn from_io(e: io::Error, what: &str) -> Refusal {
    refuse(
        e.raw_os_error().unwrap_or(libc::EIO),
        format!("{what}: {e}"),
    )
}

/// The endpoint's virtual GID table, as its vNIC is now (see `with_vnic`).
pub fn virtual_gids(ep: &Endpoint) -> io::Result<Vec<vbond::VirtualGid>> {
    ep.with_vnic(|b| b.gids().to_vec())
}

/// Serve requests until the app closes the connection.
pub fn serve(shared: &Shared, sess: &mut Session, conn: &Conn) {
    let mut buf = vec![0u8; proto::MAX_MESSAGE];
    loop {
        let dgram = match conn.recv(&mut buf) {
            Ok(Some(d)) => d,
            Ok(None) => return,
            Err(e) => {
                if !shared.is_stopping() {
                    warn!("receive failed: {e}");
                }
                return;
            }
        };
        sess.requests += 1;
        if dgram.truncated {
            sess.ep.refused_requests.fetch_add(1, Ordering::Relaxed);
            warn!("message longer than {} bytes; closing", proto::MAX_MESSAGE);
            let _ = conn.send(&proto::encode_error(0, 0, -libc::EMSGSIZE), None);
            return;
        }
        let bytes = &buf[..dgram.len];
        let mut reply_fd = None;
        let started = std::time::Instant::now();
        let (op, id) = proto::peek_ids(bytes);
        let (reply, close) = match proto::decode_request(bytes) {
            Ok(msg) => handle(shared, sess, msg, dgram.fds, &mut reply_fd),
            Err(e) => {
                sess.ep.refused_requests.fetch_add(1, Ordering::Relaxed);
                warn!("malformed request: {e}");
                (proto::encode_error(op, id, -e.errno()), e.is_fatal())
            }
        };
        shared.metrics.request(op, started.elapsed());
        shared.publish(sess.id, &sess.app, sess.requests, &sess.qps);
        let fd = reply_fd.as_ref().map(|f| f.as_raw_fd());
        if let Err(e) = conn.send(&reply, fd) {
            debug!("reply not delivered: {e}");
            return;
        }
        if close {
            return;
        }
    }
}

/// Handle one decoded request; returns the encoded reply and whether the
/// session must end.
fn handle(
    shared: &Shared,
    sess: &mut Session,
    msg: proto::Request,
    mut fds: Vec<OwnedFd>,
    reply_fd: &mut Option<OwnedFd>,
) -> (Vec<u8>, bool) {
    let (op, id) = (msg.opcode(), msg.request_id());
    let result = match (&msg.body, sess.hello) {
        (proto::RequestBody::Hello(h), false) => hello(shared, sess, h).map(|r| (r, false)),
        (proto::RequestBody::Hello(_), true) => Err(refuse(libc::EPROTO, "second HELLO")),
        (_, false) => Err(refuse(libc::EPROTO, "request before HELLO")),
        (proto::RequestBody::OpenDevice, true) => open_device(shared, sess, fds.pop(), fds.len())
            .map(|_| (proto::ReplyBody::OpenDevice, false)),
        (proto::RequestBody::QueryGidTable(q), true) => {
            query_gids(shared, sess, q).map(|r| (r, false))
        }
        (proto::RequestBody::ModifyQp(m), true) => {
            modify_qp(shared, sess, m).map(|_| (proto::ReplyBody::ModifyQp, false))
        }
        (proto::RequestBody::QueryQp(q), true) => query_qp(shared, sess, q).map(|r| (r, false)),
        (proto::RequestBody::ResyncQp(r), true) => {
            let res = resync_qp(shared, sess, r);
            // Every success records the QP in the session (and so, at its
            // end, qp_gone): the backstop guards it again.
            if let (Ok(_), Some(b)) = (&res, shared.admission.backstop()) {
                b.qp_seen(r.qp_num);
            }
            res.map(|r| (r, false))
        }
        (
            body @ (proto::RequestBody::CmCreateChannel
            | proto::RequestBody::CmDestroyChannel(_)
            | proto::RequestBody::CmCreateId(_)
            | proto::RequestBody::CmDestroyId(_)
            | proto::RequestBody::CmMigrateId(_)
            | proto::RequestBody::CmBindAddr(_)
            | proto::RequestBody::CmResolveAddr(_)
            | proto::RequestBody::CmResolveRoute(_)
            | proto::RequestBody::CmListen(_)
            | proto::RequestBody::CmConnect(_)
            | proto::RequestBody::CmAccept(_)
            | proto::RequestBody::CmReject(_)
            | proto::RequestBody::CmDisconnect(_)
            | proto::RequestBody::CmInitQpAttr(_)
            | proto::RequestBody::CmEstablish(_)
            | proto::RequestBody::CmRestoreChannel(_)
            | proto::RequestBody::CmRestoreId(_)),
            true,
        ) => match shared.cm.request(shared, sess.id, &sess.ep, body) {
            Ok((reply, fd)) => {
                *reply_fd = fd;
                Ok((reply, false))
            }
            Err((errno, why)) => Err(refuse(errno, why)),
        },
        (proto::RequestBody::CreateAh(r), true) => {
            crate::ud::create_ah(shared, sess, r).map(|r| (r, false))
        }
        (proto::RequestBody::BindAh(b), true) => {
            crate::ud::bind_ah(shared, sess, b).map(|_| (proto::ReplyBody::BindAh, false))
        }
        (proto::RequestBody::DestroyAh(d), true) => {
            crate::ud::destroy_ah(shared, sess, d);
            Ok((proto::ReplyBody::DestroyAh, false))
        }
        (proto::RequestBody::ResolveGrh(r), true) => {
            crate::ud::resolve_grh(shared, sess, r).map(|r| (r, false))
        }
        (proto::RequestBody::DestroyQp(d), true) => {
            if let Some(qp) = sess.qps.remove(&d.qp_handle) {
                debug!(qpn = qp.qpn, "QP destroyed");
                if qp.qp_type == "UD" && qp.owner_checked {
                    crate::ud::announce(shared, &sess.ep, qp.qpn, false);
                }
                shared.admitted.forget(qp.qpn, sess.id);
                if let Some(b) = shared.admission.backstop() {
                    b.qp_gone(qp.qpn);
                }
            }
            shared.admission.table().remove(rconntrack::QpKey {
                session: sess.id,
                qp_handle: d.qp_handle,
            });
            Ok((proto::ReplyBody::DestroyQp, false))
        }
    };
    match result {
        Ok((body, close)) => (proto::encode_reply(id, &body), close),
        Err(r) => {
            sess.ep.refused_requests.fetch_add(1, Ordering::Relaxed);
            warn!(op, errno = r.errno, "refused: {}", r.why);
            (proto::encode_error(op, id, -r.errno), false)
        }
    }
}

fn hello(
    shared: &Shared,
    sess: &mut Session,
    h: &proto::HelloReq,
) -> Result<proto::ReplyBody, Refusal> {
    let (guid, gid_count) = sess
        .ep
        .with_vnic(|b| (b.node_guid(), b.gids().len()))
        .map_err(|e| from_io(e, "cannot read the endpoint's vNIC"))?;
    sess.app = h.app_name.clone();
    sess.hello = true;
    info!(app = %sess.app, "session opened");
    Ok(proto::ReplyBody::Hello(proto::HelloReply {
        features: h.features & proto::SUPPORTED_FEATURES,
        session_id: sess.id as u32,
        vdev_name: VDEV_NAME.into(),
        phys_dev_name: shared.host.name.clone(),
        node_guid: guid,
        sys_image_guid: guid,
        phys_port: shared.host.port,
        gid_count: gid_count.min(proto::MAX_GIDS) as u8,
    }))
}

fn open_device(
    shared: &Shared,
    sess: &mut Session,
    fd: Option<OwnedFd>,
    extra: usize,
) -> Result<(), Refusal> {
    let fd = fd.ok_or_else(|| refuse(libc::EBADF, "OPEN_DEVICE without a descriptor"))?;
    if extra > 0 {
        return Err(refuse(libc::EINVAL, "more than one descriptor"));
    }
    if sess.uverbs.is_some() {
        return Err(refuse(libc::EBUSY, "the session already has a device"));
    }
    let meta = std::fs::File::from(fd.try_clone().map_err(|e| from_io(e, "dup"))?)
        .metadata()
        .map_err(|e| from_io(e, "fstat"))?;
    use std::os::unix::fs::FileTypeExt;
    if !meta.file_type().is_char_device() || meta.rdev() != shared.host.uverbs_rdev {
        return Err(refuse(
            libc::ENODEV,
            format!("descriptor is not {}'s uverbs device", shared.host.name),
        ));
    }
    let fd = Arc::new(fd);
    shared.register_fd(sess.id, fd.clone());
    sess.uverbs = Some(fd);
    debug!("device opened");
    Ok(())
}

fn query_gids(
    shared: &Shared,
    sess: &Session,
    q: &proto::QueryGidTableReq,
) -> Result<proto::ReplyBody, Refusal> {
    if q.port != shared.host.port {
        return Err(refuse(libc::EINVAL, format!("no port {}", q.port)));
    }
    let gids = virtual_gids(&sess.ep).map_err(|e| from_io(e, "cannot read the vNIC"))?;
    Ok(proto::ReplyBody::QueryGidTable(proto::GidTable {
        entries: gids
            .iter()
            .take(proto::MAX_GIDS)
            .map(|g| proto::GidEntry {
                index: g.index,
                gid_type: if g.roce_v2 {
                    proto::GID_TYPE_ROCE_V2
                } else {
                    proto::GID_TYPE_ROCE_V1
                },
                gid: g.gid,
            })
            .collect(),
    }))
}

const IBV_QPT_UC: u32 = 3;
const IBV_QPT_UD: u32 = 4;

fn qp_type_name(t: u32) -> &'static str {
    match t {
        2 => "RC",
        3 => "UC",
        4 => "UD",
        _ => "other",
    }
}

fn state_name(s: u8) -> &'static str {
    ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERROR"]
        .get(s as usize)
        .copied()
        .unwrap_or("UNKNOWN")
}

/// The local half of an RConntrack entry for this session's QP; the caller
/// fills in the peer, the state and the rule.
fn local_entry(
    session: u64,
    ep: &Endpoint,
    qp_handle: u32,
    qpn: u32,
    qp_type: u32,
) -> rconntrack::Entry {
    rconntrack::Entry {
        session,
        qp_handle,
        tenant: Arc::from(ep.cfg.tenant.as_str()),
        vni: ep.cfg.vni,
        local_vip: ep.cfg.vip,
        local_qpn: qpn,
        qp_type: if qp_type == IBV_QPT_UC {
            rconntrack::QpType::Uc
        } else {
            rconntrack::QpType::Rc
        },
        ..Default::default()
    }
}

/// Asks the kernel whether QPN `qpn` is this app's QP of type `qp_type`
/// (see `ownership.rs`): one single-QP netlink query, no dump.
fn check_owner(
    shared: &Shared,
    sess: &Session,
    qpn: u32,
    qp_type: u32,
) -> Result<ownership::Verdict, Refusal> {
    let lookup = shared
        .qp_lookup(qpn)
        .map_err(|e| from_io(e, "rdma netlink QP query"))?;
    ownership::judge(lookup, qpn, qp_type, sess.pid, audit::tgid_of)
        .map_err(|(errno, why)| refuse(errno, format!("claimed QPN refused: {why}")))
}

fn modify_qp(shared: &Shared, sess: &mut Session, m: &proto::ModifyQpReq) -> Result<(), Refusal> {
    let fd = sess
        .uverbs
        .as_ref()
        .ok_or_else(|| refuse(libc::EPROTO, "MODIFY_QP before OPEN_DEVICE"))?;
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
    if mask & IBV_QP_PORT != 0 && a.port_num != shared.host.port {
        return Err(refuse(libc::EINVAL, format!("port {}", a.port_num)));
    }
    let mut cmd = uverbs::ModifyQp {
        qp_handle: m.qp_handle,
        attr_mask: mask,
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
    };
    let mut route = None;
    // The DSCP masqd programs at RTR (the policy's qos), for RConntrack.
    let mut dscp = None;
    if mask & IBV_QP_AV != 0 {
        let ah = &a.ah_attr;
        if ah.is_global == 0 {
            return Err(refuse(
                libc::EINVAL,
                "RoCE needs a global route (is_global)",
            ));
        }
        if ah.port_num != 0 && ah.port_num != shared.host.port {
            return Err(refuse(libc::EINVAL, format!("AH port {}", ah.port_num)));
        }
        let vni = sess.ep.cfg.vni;
        let tr = |e: vbond::TranslateError| {
            refuse(e.errno(), format!("{e} (tenant {})", sess.ep.cfg.tenant))
        };
        // Copied out: the map is not held across the vNIC read and below.
        let (dest_vip, dest_host, dest_name, phys_dgid) = {
            let vpc = shared.registry.vpc();
            let d = vpc.translate_dgid(vni, &ah.dgid).map_err(tr)?;
            (d.vip, d.peer.host, d.peer.name.clone(), d.phys_dgid)
        };
        let traffic_class = shared.admission.traffic_class(
            &sess.ep.cfg.tenant,
            vni,
            sess.ep.cfg.vip,
            ah.traffic_class,
        );
        dscp = Some(traffic_class >> 2);
        let vgids = virtual_gids(&sess.ep).map_err(|e| from_io(e, "cannot read the vNIC"))?;
        let psgid = vbond::translate_sgid_index(
            &vgids,
            &shared.host.gids,
            u32::from(ah.sgid_index),
            shared.cfg.underlay.ip,
        )
        .map_err(tr)?;
        cmd.dest = uverbs::QpDest {
            dgid: phys_dgid,
            flow_label: ah.flow_label,
            dlid: ah.dlid,
            sgid_index: psgid as u8,
            hop_limit: ah.hop_limit,
            traffic_class,
            sl: ah.sl,
            src_path_bits: ah.src_path_bits,
            static_rate: ah.static_rate,
            is_global: 1,
            port_num: shared.host.port,
            ..Default::default()
        };
        route = Some((dest_vip, dest_host, dest_name, ah.sgid_index));
    }
    // The QPN is taken from the app: the kernel must vouch for it before
    // masqd records, tracks or connects it. Once per QP: a record keeps
    // the QPN it was checked with. A QP in RESET has no port, and the
    // kernel answers for it only after the move to INIT gave it one, so
    // that move (which carries no address) runs first and is checked
    // after; every later move is checked before it runs, once its own
    // fields passed (a malformed request gets EINVAL, not a kernel lookup).
    let checked = sess.qps.get(&m.qp_handle).is_some_and(|r| r.owner_checked);
    let to_init_at_most = mask & IBV_QP_STATE != 0 && a.qp_state <= IBV_QPS_INIT;
    let check_after = !checked && to_init_at_most;
    if !checked && !to_init_at_most {
        match check_owner(shared, sess, m.qp_num, m.qp_type)? {
            ownership::Verdict::Owned(_) => {}
            ownership::Verdict::NoPortYet => {
                return Err(refuse(
                    libc::EPERM,
                    format!(
                        "QP {:#x} has no port: only a move to INIT may come first",
                        m.qp_num
                    ),
                ))
            }
        }
    }
    let to_rtr = mask & IBV_QP_STATE != 0 && a.qp_state == IBV_QPS_RTR;
    let remote_vip = route
        .as_ref()
        .map(|r| r.0)
        .or_else(|| sess.qps.get(&m.qp_handle).and_then(|q| q.remote_vip));
    let mut admitted_by = None;
    // Held until the entry is in the table: a policy change waits for it.
    let _gate = (to_rtr && m.qp_type != IBV_QPT_UD).then(|| shared.admission.admitting());
    let ep_arc = sess.ep.clone();
    let mut _quota = None;
    if to_rtr && m.qp_type != IBV_QPT_UD {
        let remote = remote_vip
            .ok_or_else(|| refuse(libc::EINVAL, "RTR without a destination (IBV_QP_AV)"))?;
        let ep = &sess.ep.cfg;
        match shared.admission.decide(&ep.tenant, ep.vni, ep.vip, remote) {
            Ok(rule) => admitted_by = Some(rule),
            Err(why) => {
                return Err(refuse(
                    libc::EACCES,
                    format!("security groups deny {} -> {remote}: {why}", ep.vip),
                ))
            }
        }
        if let Some(max) = ep.max_connections {
            _quota = Some(ep_arc.quota.lock().unwrap_or_else(|e| e.into_inner()));
            let held = shared
                .admission
                .table()
                .iter()
                .filter(|e| (e.vni, e.local_vip) == (ep.vni, ep.vip))
                .filter(|e| (e.session, e.qp_handle) != (sess.id, m.qp_handle))
                .count();
            if held >= max as usize {
                return Err(refuse(
                    libc::EDQUOT,
                    format!(
                        "connection quota of endpoint {} reached ({held} of {max}); \
                         {} -> {remote} refused",
                        ep.name, ep.vip
                    ),
                ));
            }
        }
    }
    let qpn = sess.qps.get(&m.qp_handle).map_or(m.qp_num, |r| r.qpn);
    if !check_after {
        // Before the move: the audit must never catch masqd's own QP
        // between the kernel's state change and masqd's record.
        shared.admitted.vouch(qpn, sess.id, sess.pid);
    }
    uverbs::modify_qp(fd.as_fd(), shared.host.driver_id, &cmd)
        .map_err(|e| from_io(e, "MODIFY_QP"))?;
    let owner_checked = if check_after {
        match check_owner(shared, sess, m.qp_num, m.qp_type)? {
            ownership::Verdict::Owned(_) => {
                shared.admitted.vouch(qpn, sess.id, sess.pid);
                true
            }
            ownership::Verdict::NoPortYet => false,
        }
    } else {
        true
    };

    if !sess.qps.get(&m.qp_handle).is_some_and(|r| r.owner_checked) && owner_checked {
        if let Some(b) = shared.admission.backstop() {
            b.qp_seen(qpn);
        }
    }
    if m.qp_type == IBV_QPT_UD && owner_checked && to_rtr {
        crate::ud::announce(shared, &sess.ep, qpn, true);
    }
    let rec = sess.qps.entry(m.qp_handle).or_insert_with(|| QpRecord {
        handle: m.qp_handle,
        qpn: m.qp_num,
        qp_type: qp_type_name(m.qp_type),
        state: "RESET",
        remote_vip: None,
        remote_qpn: None,
        peer_host: None,
        virt_sgid_index: 0,
        owner_checked: false,
    });
    rec.owner_checked |= owner_checked;
    if mask & IBV_QP_STATE != 0 {
        rec.state = state_name(a.qp_state);
    }
    if mask & IBV_QP_DEST_QPN != 0 {
        rec.remote_qpn = Some(a.dest_qp_num);
    }
    if let Some((vip, host, name, vsgid)) = route {
        rec.remote_vip = Some(vip);
        rec.peer_host = Some(host);
        rec.virt_sgid_index = vsgid;
        info!(
            qpn = rec.qpn,
            "QP -> {}: {vip} ({name}) QPN {:#x} via host {host}",
            state_name(a.qp_state),
            a.dest_qp_num
        );
    }
    let key = rconntrack::QpKey {
        session: sess.id,
        qp_handle: m.qp_handle,
    };
    if let (Some(rule), Some(remote_vip), Some(peer_host)) =
        (admitted_by, rec.remote_vip, rec.peer_host)
    {
        let cm = shared
            .cm
            .role_of(&sess.ep.cfg.name, rec.qpn)
            .map(|r| rconntrack::CmSide {
                active: r.active,
                local_port: r.local_port,
                remote_port: r.remote_port,
            });
        let entry = rconntrack::Entry {
            remote_vip,
            remote_qpn: rec.remote_qpn.unwrap_or(0),
            peer_host,
            state: rconntrack::State::Admitted,
            rule: rule.clone(),
            cm,
            dscp,
            ..local_entry(sess.id, &sess.ep, m.qp_handle, rec.qpn, m.qp_type)
        };
        if shared.admission.table().upsert(entry).is_err() {
            warn!("connection table full; {} not tracked", rec.qpn);
        }
        info!(qpn = rec.qpn, rule = %rule, "connection admitted");
        // The app sends once RTR returns: the backstop must let it through
        // by then (see Backstop::submit).
        if let Some(b) = shared.admission.backstop() {
            if !b.wait_applied(BACKSTOP_WAIT) {
                warn!(
                    qpn = rec.qpn,
                    "backstop sets not updated within {BACKSTOP_WAIT:?}; \
                      the connection's first packets may be dropped"
                );
            }
        }
    }
    if mask & IBV_QP_STATE != 0 {
        match a.qp_state {
            IBV_QPS_RTS => {
                shared
                    .admission
                    .table()
                    .set_state(key, rconntrack::State::Established);
            }
            IBV_QPS_RESET | IBV_QPS_ERR => {
                shared.admission.table().remove(key);
                rec.remote_vip = None;
                rec.remote_qpn = None;
            }
            _ => {}
        }
    }
    Ok(())
}

fn query_qp(
    shared: &Shared,
    sess: &Session,
    q: &proto::QueryQpReq,
) -> Result<proto::ReplyBody, Refusal> {
    let fd = sess
        .uverbs
        .as_ref()
        .ok_or_else(|| refuse(libc::EPROTO, "QUERY_QP before OPEN_DEVICE"))?;
    let r = uverbs::query_qp(fd.as_fd(), shared.host.driver_id, q.qp_handle, q.attr_mask)
        .map_err(|e| from_io(e, "QUERY_QP"))?;
    // Only addresses masqd itself set are shown, translated back; anything
    // else the kernel holds is physical and stays hidden.
    let (dgid, sgid_index) = match sess.qps.get(&q.qp_handle) {
        Some(QpRecord {
            remote_vip: Some(vip),
            peer_host: Some(host),
            virt_sgid_index,
            ..
        }) => match vbond::reverse_dgid(&r.dest.dgid, *vip, *host) {
            Ok(g) => (g, *virt_sgid_index),
            Err(e) => {
                warn!("QUERY_QP: {e}");
                ([0; 16], 0)
            }
        },
        _ => ([0; 16], 0),
    };
    Ok(proto::ReplyBody::QueryQp(proto::QpAttr {
        qp_state: r.qp_state,
        cur_qp_state: r.cur_qp_state,
        path_mtu: r.path_mtu,
        path_mig_state: r.path_mig_state,
        qkey: r.qkey,
        rq_psn: r.rq_psn,
        sq_psn: r.sq_psn,
        dest_qp_num: r.dest_qp_num,
        qp_access_flags: r.qp_access_flags,
        pkey_index: r.pkey_index,
        en_sqd_async_notify: 0,
        sq_draining: r.sq_draining,
        max_rd_atomic: r.max_rd_atomic,
        max_dest_rd_atomic: r.max_dest_rd_atomic,
        min_rnr_timer: r.min_rnr_timer,
        port_num: r.port_num,
        timeout: r.timeout,
        retry_cnt: r.retry_cnt,
        rnr_retry: r.rnr_retry,
        rate_limit: 0,
        cap: proto::QpCap {
            max_send_wr: r.max_send_wr,
            max_recv_wr: r.max_recv_wr,
            max_send_sge: r.max_send_sge,
            max_recv_sge: r.max_recv_sge,
            max_inline_data: r.max_inline_data,
        },
        ah_attr: proto::AhAttr {
            dgid,
            flow_label: r.dest.flow_label,
            sgid_index,
            hop_limit: r.dest.hop_limit,
            traffic_class: r.dest.traffic_class,
            is_global: r.dest.is_global,
            dlid: r.dest.dlid,
            sl: r.dest.sl,
            src_path_bits: r.dest.src_path_bits,
            static_rate: r.dest.static_rate,
            port_num: r.dest.port_num,
        },
    }))
}

/// RESYNC_QP: after a masqd restart the frontend names the QPs it had set
/// up. Nothing it says is taken on trust: the kernel checks that the
/// handle is a QP of this session's uverbs file and tells its state,
/// destination QPN and physical destination; the claimed virtual
/// destination must be the VPC address whose host that is; the current
/// policy must allow the pair. A connected QP that fails a check is moved
/// to ERROR (as a policy reset does); QPs never named stay untracked.
/// The claimed QPN must be the app's own by the kernel's word (see
/// `ownership.rs`) and may not be another tracked QP's.
fn resync_qp(
    shared: &Shared,
    sess: &mut Session,
    r: &proto::ResyncQpReq,
) -> Result<proto::ReplyBody, Refusal> {
    let fd = sess
        .uverbs
        .clone()
        .ok_or_else(|| refuse(libc::EPROTO, "RESYNC_QP before OPEN_DEVICE"))?;
    if sess.qps.contains_key(&r.qp_handle) {
        return Err(refuse(
            libc::EEXIST,
            format!("QP handle {} is already known", r.qp_handle),
        ));
    }
    let _gate = shared.admission.admitting();
    // The handle first, in the app's own uverbs file: another app's handle
    // is ENOENT there, whatever QPN comes with it.
    let k = uverbs::query_qp(
        fd.as_fd(),
        shared.host.driver_id,
        r.qp_handle,
        IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN,
    )
    .map_err(|e| from_io(e, "RESYNC_QP: QUERY_QP"))?;
    let owner_checked = match check_owner(shared, sess, r.qp_num, r.qp_type)? {
        ownership::Verdict::Owned(_) => {
            shared.admitted.vouch(r.qp_num, sess.id, sess.pid);
            true
        }
        ownership::Verdict::NoPortYet => false,
    };
    let reply = |result: u32| {
        Ok(proto::ReplyBody::ResyncQp(proto::ResyncQpReply {
            qp_state: k.qp_state.min(IBV_QPS_ERR),
            result: result as u8,
        }))
    };
    let mut rec = QpRecord {
        handle: r.qp_handle,
        qpn: r.qp_num,
        qp_type: qp_type_name(r.qp_type),
        state: state_name(k.qp_state),
        remote_vip: None,
        remote_qpn: None,
        peer_host: None,
        virt_sgid_index: 0,
        owner_checked,
    };
    let connected = (IBV_QPS_RTR..=IBV_QPS_SQE).contains(&k.qp_state);
    if !connected || r.qp_type == IBV_QPT_UD {
        debug!(
            qpn = r.qp_num,
            state = rec.state,
            "QP resynced: nothing to track"
        );
        sess.qps.insert(r.qp_handle, rec);
        return reply(proto::RESYNC_UNTRACKED);
    }
    let ep = &sess.ep.cfg;
    let lk = rconntrack::LocalKey {
        vni: ep.vni,
        vip: ep.vip,
        qpn: r.qp_num,
    };
    if shared.admission.table().get_local(lk).is_some() {
        return Err(refuse(
            libc::EEXIST,
            format!("QPN {:#x} is already tracked for another QP", r.qp_num),
        ));
    }
    match verify_resync(shared, sess, r, &k) {
        Ok((vip, host, rule)) => {
            let established = k.qp_state != IBV_QPS_RTR;
            let entry = rconntrack::Entry {
                remote_vip: vip,
                remote_qpn: k.dest_qp_num,
                peer_host: host,
                state: if established {
                    rconntrack::State::Established
                } else {
                    rconntrack::State::Admitted
                },
                rule: rule.clone(),
                ..local_entry(sess.id, &sess.ep, r.qp_handle, r.qp_num, r.qp_type)
            };
            if shared.admission.table().upsert(entry).is_err() {
                warn!("connection table full; {} not tracked", r.qp_num);
                sess.qps.insert(r.qp_handle, rec);
                return reply(proto::RESYNC_UNTRACKED);
            }
            rec.remote_vip = Some(vip);
            rec.remote_qpn = Some(k.dest_qp_num);
            rec.peer_host = Some(host);
            rec.virt_sgid_index = r.sgid_index;
            info!(qpn = r.qp_num, rule = %rule,
                  "QP resynced: {} -> {vip} QPN {:#x}, tracked again", rec.state, k.dest_qp_num);
            sess.qps.insert(r.qp_handle, rec);
            reply(proto::RESYNC_TRACKED)
        }
        Err(why) => {
            let cmd = uverbs::ModifyQp {
                qp_handle: r.qp_handle,
                attr_mask: IBV_QP_STATE,
                qp_state: IBV_QPS_ERR,
                ..Default::default()
            };
            uverbs::modify_qp(fd.as_fd(), shared.host.driver_id, &cmd)
                .map_err(|e| from_io(e, "RESYNC_QP: cannot move the QP to ERROR"))?;
            warn!(qpn = r.qp_num, "QP moved to ERROR on resync: {why}");
            rec.state = state_name(IBV_QPS_ERR);
            sess.qps.insert(r.qp_handle, rec);
            Ok(proto::ReplyBody::ResyncQp(proto::ResyncQpReply {
                qp_state: IBV_QPS_ERR,
                result: proto::RESYNC_RESET as u8,
            }))
        }
    }
}

/// The claimed destination of a connected QP against the kernel's, and the
/// current policy: (peer vIP, peer host, admitting rule) or why not.
fn verify_resync(
    shared: &Shared,
    sess: &Session,
    r: &proto::ResyncQpReq,
    k: &uverbs::QueryQpResp,
) -> Result<(Ipv4Addr, Ipv4Addr, Arc<str>), String> {
    if r.has_route == 0 {
        return Err("connected, but no destination was named".into());
    }
    let ep = &sess.ep.cfg;
    let (route_vip, route_host, phys_dgid) = {
        let vpc = shared.registry.vpc();
        let r = vpc
            .translate_dgid(ep.vni, &r.dgid)
            .map_err(|e| format!("claimed destination: {e}"))?;
        (r.vip, r.peer.host, r.phys_dgid)
    };
    if phys_dgid != k.dest.dgid {
        return Err(format!(
            "the kernel's destination {} is not the host of {}",
            vbond::gid_to_string(&k.dest.dgid),
            route_vip
        ));
    }
    let vgids = virtual_gids(&sess.ep).map_err(|e| format!("cannot read the vNIC: {e}"))?;
    let psgid = vbond::translate_sgid_index(
        &vgids,
        &shared.host.gids,
        u32::from(r.sgid_index),
        shared.cfg.underlay.ip,
    )
    .map_err(|e| format!("claimed sgid index: {e}"))?;
    if psgid != u32::from(k.dest.sgid_index) {
        return Err(format!(
            "the kernel's sgid index {} is not virtual index {}'s",
            k.dest.sgid_index, r.sgid_index
        ));
    }
    let rule = shared
        .admission
        .decide(&ep.tenant, ep.vni, ep.vip, route_vip)
        .map_err(|why| format!("security groups deny {} -> {}: {why}", ep.vip, route_vip))?;
    Ok((route_vip, route_host, rule))
}
