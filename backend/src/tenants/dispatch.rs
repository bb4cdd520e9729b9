//! One app context's session: decode each request, answer it, and hand
//! QP changes to the pipeline (`pipeline::qp`) with the app's own uverbs file,
//! the CM's requests to the CM.

use crate::cm::{Cm, CmHost};
use crate::endpoints::endpoint::vdev_name;
use crate::error::{from_io, refuse, Result};
use crate::kernel::uverbs;
use crate::pipeline::ah;
use crate::pipeline::cm_step::cm_qp_step;
use crate::pipeline::ports::QpKernel;
use crate::pipeline::qp;
use crate::pipeline::resync;
use crate::pipeline::session::{QpRecord, Session};
use crate::tenants::kernel::SessionKernel;
use crate::tenants::parts::Parts;
use crate::transport;
use crate::transport::seqpacket::Conn;
use masq_proto as proto;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// Run a pipeline step with the session's kernel (its fd cloned out, so
/// the step may change the session).
fn with_kernel<T>(
    parts: &Parts,
    sess: &mut Session,
    what: &str,
    f: impl FnOnce(&dyn QpKernel, &mut Session) -> Result<T>,
) -> Result<T> {
    let fd = sess.uverbs.clone();
    let pid = sess.pid;
    let fd = fd.ok_or_else(|| refuse(libc::EPROTO, format!("{what} before OPEN_DEVICE")))?;
    let k = SessionKernel {
        device: &parts.rail(&sess.ep).device,
        fd: fd.as_fd(),
        pid,
    };
    f(&k, sess)
}

/// One session as the handler of its connection's requests.
struct SessionHandler<'a> {
    parts: &'a Parts,
    sess: &'a mut Session,
}

impl transport::Handler for SessionHandler<'_> {
    fn received(&mut self) {
        self.sess.requests += 1;
    }

    fn handle(&mut self, req: proto::Request, fds: Vec<OwnedFd>) -> transport::Answer {
        let mut fd = None;
        let reply = handle(self.parts, self.sess, req, fds, &mut fd);
        // No request ends the session: the app closes it (or the transport
        // does, on a message it cannot decode).
        transport::Answer {
            reply,
            fd,
            close: false,
        }
    }

    fn refused(&mut self) {
        self.sess
            .ep
            .refused_requests
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The metrics, then the control socket's view of the session, and the
    /// QPs this request touched are forgotten (as `publish` has seen them).
    fn finished(&mut self, op: u16, took: Duration) {
        let (parts, sess) = (self.parts, &mut *self.sess);
        parts.metrics().request(op, took);
        parts
            .sessions()
            .publish(sess.id, &sess.app, sess.requests, &sess.qps, &sess.touched);
        sess.touched.clear();
    }

    fn stopping(&self) -> bool {
        self.parts.run().is_stopping()
    }
}

/// Serve requests until the app closes the connection.
pub fn serve(parts: &Parts, sess: &mut Session, conn: &Conn) {
    transport::serve(&mut SessionHandler { parts, sess }, conn);
}

/// Handle one decoded request; returns the encoded reply. HELLO comes
/// first, once; then `request`.
fn handle(
    parts: &Parts,
    sess: &mut Session,
    msg: proto::Request,
    fds: Vec<OwnedFd>,
    reply_fd: &mut Option<OwnedFd>,
) -> Vec<u8> {
    let (op, id) = (msg.opcode(), msg.request_id());
    let result = match (&msg.body, sess.hello) {
        (proto::RequestBody::Hello(h), false) => hello(parts, sess, h),
        (_, false) => Err(refuse(libc::EPROTO, "request before HELLO")),
        (body, true) => request(parts, sess, body, fds, reply_fd),
    };
    match result {
        Ok(body) => proto::encode_reply(id, &body),
        Err(r) => {
            sess.ep.refused_requests.fetch_add(1, Ordering::Relaxed);
            warn!(op, errno = r.errno(), "refused: {}", r.why());
            proto::encode_error(op, id, -r.errno())
        }
    }
}

/// A request after HELLO, a line per kind: the QP pipeline's (`qp`,
/// `resync`), the RDMA CM's (`cm_request`) and its QP steps, the address
/// handles' (`ah`). A CM request may hand the app a descriptor
/// (`reply_fd`).
fn request(
    parts: &Parts,
    sess: &mut Session,
    body: &proto::RequestBody,
    mut fds: Vec<OwnedFd>,
    reply_fd: &mut Option<OwnedFd>,
) -> Result<proto::ReplyBody> {
    use proto::ReplyBody as Reply;
    use proto::RequestBody as Req;
    match body {
        Req::Hello(_) => Err(refuse(libc::EPROTO, "second HELLO")),
        Req::OpenDevice => {
            open_device(parts, sess, fds.pop(), fds.len()).map(|_| Reply::OpenDevice)
        }
        Req::QueryGidTable(q) => query_gids(parts, sess, q),
        Req::ModifyQp(m) => modify_qp(parts, sess, m),
        Req::QpMoved(m) => qp_moved(parts, sess, m),
        Req::QpDestroyed(d) => Ok(destroy_qp(parts, sess, d.qp_handle, Reply::QpDestroyed)),
        Req::QueryQp(q) => query_qp(parts, sess, q),
        Req::ResyncQp(r) => resync_qp(parts, sess, r),
        Req::CmCreateChannel
        | Req::CmDestroyChannel(_)
        | Req::CmCreateId(_)
        | Req::CmDestroyId(_)
        | Req::CmMigrateId(_)
        | Req::CmBindAddr(_)
        | Req::CmResolveAddr(_)
        | Req::CmResolveRoute(_)
        | Req::CmListen(_)
        | Req::CmConnect(_)
        | Req::CmAccept(_)
        | Req::CmReject(_)
        | Req::CmDisconnect(_)
        | Req::CmInitQpAttr(_)
        | Req::CmEstablish(_)
        | Req::CmRestoreChannel(_)
        | Req::CmRestoreId(_) => cm_request(parts.cm(), parts, sess, body).map(|(reply, fd)| {
            *reply_fd = fd;
            reply
        }),
        Req::CmAcceptQp(r) => cm_accept_qp(parts, sess, r),
        Req::CmEstablishQp(r) => cm_establish_qp(parts, sess, r),
        Req::CreateAh(r) => ah::create_ah(parts, sess, r),
        Req::BindAh(b) => ah::bind_ah(parts, sess, b).map(|_| Reply::BindAh),
        Req::DestroyAh(d) => {
            ah::destroy_ah(parts, sess, d);
            Ok(Reply::DestroyAh)
        }
        Req::ResyncAh(r) => ah::resync_ah(parts, sess, r),
        Req::ResolveGrh(r) => ah::resolve_grh(parts, sess, r),
        Req::DestroyQp(d) => Ok(destroy_qp(parts, sess, d.qp_handle, Reply::DestroyQp)),
    }
}

fn modify_qp(
    parts: &Parts,
    sess: &mut Session,
    m: &proto::ModifyQpReq,
) -> Result<proto::ReplyBody> {
    with_kernel(parts, sess, "MODIFY_QP", |k, sess| {
        qp::modify(parts, k, sess, m)
    })
    .map(|_| proto::ReplyBody::ModifyQp)
}

fn qp_moved(parts: &Parts, sess: &mut Session, m: &proto::QpMovedReq) -> Result<proto::ReplyBody> {
    with_kernel(parts, sess, "QP_MOVED", |k, sess| {
        qp::moved(parts, k, sess, m)
    })
    .map(|_| proto::ReplyBody::QpMoved)
}

/// DESTROY_QP and QP_DESTROYED: answered `reply`.
fn destroy_qp(
    parts: &Parts,
    sess: &mut Session,
    qp_handle: u32,
    reply: proto::ReplyBody,
) -> proto::ReplyBody {
    qp::destroyed(parts, sess, qp_handle);
    reply
}

fn resync_qp(
    parts: &Parts,
    sess: &mut Session,
    r: &proto::ResyncQpReq,
) -> Result<proto::ReplyBody> {
    with_kernel(parts, sess, "RESYNC_QP", |k, sess| {
        resync::resync(parts, k, sess, r)
    })
    .map(proto::ReplyBody::ResyncQp)
}

fn cm_accept_qp(
    parts: &Parts,
    sess: &mut Session,
    r: &proto::CmAcceptQpReq,
) -> Result<proto::ReplyBody> {
    with_kernel(parts, sess, "CM_ACCEPT_QP", |k, sess| {
        let qp = (r.qp_handle, r.param.qp_num);
        cm_qp_step(parts, parts, k, sess, r.id, qp, Some(&r.param))
    })
    .map(|_| proto::ReplyBody::CmAcceptQp)
}

fn cm_establish_qp(
    parts: &Parts,
    sess: &mut Session,
    r: &proto::CmEstablishQpReq,
) -> Result<proto::ReplyBody> {
    with_kernel(parts, sess, "CM_ESTABLISH_QP", |k, sess| {
        let qp = (r.qp_handle, r.qp_num);
        cm_qp_step(parts, parts, k, sess, r.id, qp, None)
    })
    .map(|_| proto::ReplyBody::CmEstablishQp)
}

/// One of the CM's requests, on a session that has opened its device: a
/// process that never opened one makes masqd hold no CM state (issue 51).
fn cm_request(
    cm: &Cm,
    host: &dyn CmHost,
    sess: &Session,
    body: &proto::RequestBody,
) -> Result<(proto::ReplyBody, Option<OwnedFd>)> {
    if sess.uverbs.is_none() {
        let what = proto::request_name(body.opcode());
        return Err(refuse(libc::EPROTO, format!("{what} before OPEN_DEVICE")));
    }
    cm.request(host, sess.id, &sess.ep, body)
}

fn hello(parts: &Parts, sess: &mut Session, h: &proto::HelloReq) -> Result<proto::ReplyBody> {
    if let Some(b) = parts.admission().backstop() {
        // The endpoint's cgroup may have appeared since the last look.
        b.refresh_cgroups();
        match crate::tenants::cgroups::adopt_app_cgroup(b, &sess.ep.cfg, sess.pid) {
            Ok(Some(_)) => parts.store_runtime_file("an app's cgroup adopted"),
            Ok(None) => {}
            // Served, its packets would pass the backstop unfiltered.
            Err(why) => {
                return Err(refuse(
                    libc::EPERM,
                    format!("the backstop cannot filter this app's RoCE packets: {why}"),
                ))
            }
        }
    }
    // The app's devices are its endpoint's, one per rail; the session
    // serves the one it names, from here on.
    let devices = parts.registry().devices_of(&sess.ep);
    let index = usize::from(h.vdev);
    let ep = devices.get(index).cloned().ok_or_else(|| {
        refuse(
            libc::ENODEV,
            format!("no virtual device {} (it has {})", index, devices.len()),
        )
    })?;
    let (guid, gid_count) = ep
        .with_vnic(|b| (b.node_guid(), b.gids().len()))
        .map_err(|e| from_io(e, "cannot read the endpoint's vNIC"))?;
    let phys = &parts.rail(&ep).device.host;
    sess.set_app(&h.app_name);
    sess.hello = true;
    if ep.cfg.name != sess.ep.cfg.name {
        info!(app = %sess.app, device = %ep.cfg.name, "session opened on {}", vdev_name(index));
        parts.sessions().moved(sess.id, &ep.cfg.name);
        sess.ep = ep.clone();
    } else {
        info!(app = %sess.app, "session opened");
    }
    Ok(proto::ReplyBody::Hello(proto::HelloReply {
        features: h.features & proto::SUPPORTED_FEATURES,
        session_id: sess.id as u32,
        vdev_name: vdev_name(index),
        phys_dev_name: phys.name.clone(),
        node_guid: guid,
        sys_image_guid: guid,
        phys_port: phys.port,
        gid_count: gid_count.min(proto::MAX_GIDS) as u8,
        // One device: 0, as an older masqd says it.
        vdev_count: if devices.len() > 1 {
            devices.len().min(usize::from(u8::MAX)) as u8
        } else {
            0
        },
    }))
}

fn open_device(parts: &Parts, sess: &mut Session, fd: Option<OwnedFd>, extra: usize) -> Result<()> {
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
    let phys = &parts.rail(&sess.ep).device.host;
    if !meta.file_type().is_char_device() || meta.rdev() != phys.uverbs_rdev {
        return Err(refuse(
            libc::ENODEV,
            format!("descriptor is not {}'s uverbs device", phys.name),
        ));
    }
    // Held as long as the session: within masqd's descriptor reserve.
    let reserve = parts.registry().limits().fd_reserve;
    crate::endpoints::usage::fd_room(&sess.ep.usage, fd.as_raw_fd(), 0, reserve)?;
    let fd = Arc::new(fd);
    parts.sessions().register_fd(sess.id, fd.clone());
    sess.uverbs = Some(fd);
    debug!("device opened");
    Ok(())
}

fn query_gids(
    parts: &Parts,
    sess: &Session,
    q: &proto::QueryGidTableReq,
) -> Result<proto::ReplyBody> {
    if q.port != parts.rail(&sess.ep).device.host.port {
        return Err(refuse(libc::EINVAL, format!("no port {}", q.port)));
    }
    let gids = sess
        .ep
        .virtual_gids()
        .map_err(|e| from_io(e, "cannot read the vNIC"))?;
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

fn query_qp(parts: &Parts, sess: &Session, q: &proto::QueryQpReq) -> Result<proto::ReplyBody> {
    let fd = sess
        .uverbs
        .as_ref()
        .ok_or_else(|| refuse(libc::EPROTO, "QUERY_QP before OPEN_DEVICE"))?;
    let r = uverbs::query_qp(
        fd.as_fd(),
        parts.first_device().driver_id,
        q.qp_handle,
        q.attr_mask,
    )
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

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;
