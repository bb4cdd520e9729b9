//! UD address handles by virtual address.
//!
//! An AH cannot be created by masqd itself: the provider keeps its own
//! object (rxe: the kernel's AH index; mlx5: the whole address vector) in
//! the app's memory. So libmasq asks masqd first (CREATE_AH: translate the
//! virtual dgid and sgid index, admit the pair by the security groups),
//! hands the physical attributes to the provider, and then names the
//! kernel handle it got (BIND_AH), by which masqd tracks the AH in
//! RConntrack and destroys it if a rule change no longer allows the pair.
//! RESOLVE_GRH names a received packet's sender in virtual terms, for
//! ibv_init_ah_from_wc.

use crate::error::{from_io, refuse, Refusal};
use crate::qp::physical_av;
use crate::records::{AhRecord, PendingAh, Session};
use crate::registry::Endpoint;
use crate::state::{lock, Shared};
use masq_proto as proto;
use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// Admissions not yet bound to a kernel AH that a session may hold: an app
/// whose provider failed never binds, and must not grow masqd's memory.
const MAX_PENDING: usize = 64;

fn deny(ep: &Endpoint, remote: Ipv4Addr, why: &str) -> Refusal {
    ep.refused_connections
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    refuse(
        libc::EACCES,
        format!("security groups deny UD {} -> {remote}: {why}", ep.cfg.vip),
    )
}

pub(crate) fn create_ah(
    shared: &Shared,
    sess: &mut Session,
    r: &proto::CreateAhReq,
) -> Result<proto::ReplyBody, Refusal> {
    if !sess.has_device() {
        return Err(refuse(libc::EPROTO, "CREATE_AH before OPEN_DEVICE"));
    }
    let ah = &r.ah_attr;
    if ah.dgid[0] == 0xff {
        return Err(refuse(
            libc::ENOSYS,
            "multicast destinations are not virtualized",
        ));
    }
    let ep = sess.ep.clone();
    let av = physical_av(shared, &ep, ah)?;
    let (remote_vip, peer_host, traffic_class) = (av.vip, av.host, av.traffic_class);
    // UD is RDMA: the same predicate as a connection, per destination.
    shared
        .admission
        .decide(&ep.cfg.tenant, ep.cfg.vni, ep.cfg.vip, remote_vip)
        .map_err(|why| deny(&ep, remote_vip, &why))?;
    if sess.ah_pending.len() >= MAX_PENDING {
        // The oldest admission was never bound: its provider call failed.
        sess.ah_pending.pop_first();
    }
    sess.next_ah_id = sess.next_ah_id.wrapping_add(1).max(1);
    let ah_id = sess.next_ah_id;
    sess.ah_pending.insert(
        ah_id,
        PendingAh {
            remote_vip,
            peer_host,
            dscp: traffic_class >> 2,
        },
    );
    debug!(
        ah_id,
        "UD destination {remote_vip} admitted via host {peer_host}"
    );
    Ok(proto::ReplyBody::CreateAh(proto::CreateAhReply {
        ah_id,
        ah_attr: proto::AhAttr {
            dgid: av.phys_dgid,
            sgid_index: av.sgid_index,
            traffic_class,
            port_num: shared.host.port,
            ..*ah
        },
    }))
}

pub(crate) fn bind_ah(
    shared: &Shared,
    sess: &mut Session,
    b: &proto::BindAhReq,
) -> Result<(), Refusal> {
    if sess.ahs.contains_key(&b.ah_handle) {
        return Err(refuse(
            libc::EEXIST,
            format!("AH handle {} is already bound", b.ah_handle),
        ));
    }
    let p = sess
        .ah_pending
        .remove(&b.ah_id)
        .ok_or_else(|| refuse(libc::ENOENT, format!("no pending CREATE_AH {}", b.ah_id)))?;
    track(shared, sess, b.ah_handle, &p, "admitted")
}

/// Admit AH `handle` towards `p` and track it: the RConntrack entry, the
/// backstop's sets, the session's record. Decided again under the gate: a
/// rule change since the AH was asked for either sees this entry in the
/// table or is seen here.
fn track(
    shared: &Shared,
    sess: &mut Session,
    handle: u32,
    p: &PendingAh,
    what: &str,
) -> Result<(), Refusal> {
    let ep = sess.ep.clone();
    let gate = shared.admission.admitting();
    let rule = shared
        .admission
        .decide(&ep.cfg.tenant, ep.cfg.vni, ep.cfg.vip, p.remote_vip)
        .map_err(|why| deny(&ep, p.remote_vip, &why))?;
    let entry = rconntrack::Entry {
        session: sess.id,
        qp_handle: handle,
        tenant: Arc::from(ep.cfg.tenant.as_str()),
        vni: ep.cfg.vni,
        local_vip: ep.cfg.vip,
        remote_vip: p.remote_vip,
        peer_host: p.peer_host,
        qp_type: rconntrack::QpType::Ud,
        state: rconntrack::State::Established,
        rule: rule.clone(),
        dscp: Some(p.dscp),
        ..Default::default()
    };
    if shared.admission.table().upsert(entry).is_err() {
        warn!(
            ah = handle,
            "connection table full; UD destination not tracked"
        );
    }
    info!(ah = handle, rule = %rule, "UD address handle {} -> {} {what}", ep.cfg.vip, p.remote_vip);
    drop(gate);
    // The app sends as soon as the AH exists: the backstop must let its
    // datagrams through by then, or they are lost without a trace.
    if let Some(bs) = shared.admission.backstop() {
        if !bs.wait_applied(crate::ports::BACKSTOP_WAIT) {
            warn!(
                ah = handle,
                "backstop sets not updated in time; the first datagrams may be dropped"
            );
        }
    }
    sess.ahs.insert(
        handle,
        AhRecord {
            remote_vip: p.remote_vip,
            peer_host: p.peer_host,
        },
    );
    Ok(())
}

/// RESYNC_AH: after a restart, an AH the app holds is admitted again as
/// it was first (the claim is the virtual destination; granting it gives
/// no more than CREATE_AH would), or destroyed on the app's uverbs file
/// if the security groups no longer allow it.
pub(crate) fn resync_ah(
    shared: &Shared,
    sess: &mut Session,
    r: &proto::ResyncAhReq,
) -> Result<proto::ReplyBody, Refusal> {
    if !sess.has_device() {
        return Err(refuse(libc::EPROTO, "RESYNC_AH before OPEN_DEVICE"));
    }
    if sess.ahs.contains_key(&r.ah_handle) {
        return Err(refuse(
            libc::EEXIST,
            format!("AH handle {} is already bound", r.ah_handle),
        ));
    }
    if r.ah_attr.dgid[0] == 0xff {
        return Err(refuse(
            libc::ENOSYS,
            "multicast destinations are not virtualized",
        ));
    }
    let ep = sess.ep.clone();
    // A destination that left the VPC is refused as a denied one is.
    let tracked = physical_av(shared, &ep, &r.ah_attr).and_then(|av| {
        let p = PendingAh {
            remote_vip: av.vip,
            peer_host: av.host,
            dscp: av.traffic_class >> 2,
        };
        track(shared, sess, r.ah_handle, &p, "re-registered")
    });
    let result = match tracked {
        Ok(()) => proto::RESYNC_TRACKED,
        Err(denied) => {
            let fd = lock(&shared.fds).get(&sess.id).cloned();
            match fd
                .map(|fd| crate::uverbs::destroy_ah(fd.as_fd(), shared.host.driver_id, r.ah_handle))
            {
                Some(Ok(())) => info!(
                    ah = r.ah_handle,
                    "UD address handle destroyed: {}",
                    denied.why()
                ),
                Some(Err(e)) => warn!(
                    ah = r.ah_handle,
                    "cannot destroy the AH ({}): {e}",
                    denied.why()
                ),
                None => {}
            }
            proto::RESYNC_RESET
        }
    };
    Ok(proto::ReplyBody::ResyncAh(proto::ResyncAhReply {
        result: result as u8,
    }))
}

pub(crate) fn destroy_ah(shared: &Shared, sess: &mut Session, d: &proto::DestroyAhReq) {
    if sess.ahs.remove(&d.ah_handle).is_some() {
        debug!(ah = d.ah_handle, "UD address handle destroyed");
        shared.admission.table().remove(rconntrack::QpKey {
            session: sess.id,
            qp_handle: d.ah_handle,
        });
    }
}

/// How long RESOLVE_GRH waits for the sending host's announcement of its
/// QP (sent when the QP reached RTR, so normally long in).
const ANNOUNCE_WAIT: Duration = Duration::from_secs(2);

/// Tell the other hosts of the endpoint's VNI that its UD QP `qpn` is up
/// (at RTR) or gone, so that they can name its datagrams' sender.
pub(crate) fn announce(shared: &Shared, ep: &Endpoint, qpn: u32, up: bool) {
    if let Some(bs) = shared.admission.backstop() {
        bs.ud_local(ep.cfg.vni, qpn, up);
    }
    let me = shared.cfg.underlay.ip;
    let hosts: Vec<Ipv4Addr> = shared
        .registry
        .vpc()
        .iter()
        .filter(|(vni, _, p)| *vni == ep.cfg.vni && p.host != me)
        .map(|(_, _, p)| p.host)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if !up {
        for h in hosts {
            shared.cm.announce_ud(h, ep.cfg.vni, ep.cfg.vip, qpn, false);
        }
        return;
    }
    // The other hosts' backstops let the QP's datagrams in only once they
    // know it: its app may send right after this RTR.
    let vni = ep.cfg.vni;
    if !shared
        .cm
        .announce_ud_up(&hosts, vni, ep.cfg.vip, qpn, crate::ports::BACKSTOP_WAIT)
    {
        warn!(
            qpn,
            "UD QP not confirmed by every host of VNI {vni} in time; its first datagrams there may be dropped"
        );
    }
}

/// Another host's masqd (re)started and forgot this host's UD QPs: name
/// them to it again, those of the VNIs it serves.
pub(crate) fn reannounce(shared: &Shared, host: Ipv4Addr) {
    let qps: Vec<(String, u32)> = lock(&shared.sessions)
        .values()
        .flat_map(|v| {
            v.qps
                .values()
                .filter(|q| q.qp_type == "UD")
                .map(|q| (v.endpoint.clone(), q.qpn))
        })
        .collect();
    let vpc = shared.registry.vpc();
    let mut n = 0;
    for (name, qpn) in qps {
        let Some(ep) = shared.registry.local_named(&name) else {
            continue;
        };
        if vpc
            .iter()
            .any(|(vni, _, p)| vni == ep.cfg.vni && p.host == host)
        {
            shared
                .cm
                .announce_ud(host, ep.cfg.vni, ep.cfg.vip, qpn, true);
            n += 1;
        }
    }
    if n > 0 {
        info!(%host, "{n} UD QP(s) announced again at that host's request");
    }
}

/// The sender of a received UD packet in virtual terms. A packet names its
/// sender by host (the GRH's source) and QPN (the DETH's): on this host
/// masqd knows every tenant QP; another host's masqd announced its UD QPs,
/// and the claim holds only if that host runs that vIP of this VNI.
pub(crate) fn resolve_grh(
    shared: &Shared,
    sess: &Session,
    r: &proto::ResolveGrhReq,
) -> Result<proto::ReplyBody, Refusal> {
    let ep = &sess.ep;
    let me = shared.cfg.underlay.ip;
    if vbond::vip_of_gid(&r.dgid) != Some(me) {
        return Err(refuse(
            libc::EINVAL,
            "the GRH's destination is not this host's RoCE v2 GID",
        ));
    }
    let src_host = vbond::vip_of_gid(&r.sgid).ok_or_else(|| {
        refuse(
            libc::EHOSTUNREACH,
            "the GRH's source is not an IPv4 RoCE v2 GID",
        )
    })?;
    let vgids = ep
        .virtual_gids()
        .map_err(|e| from_io(e, "cannot read the vNIC"))?;
    let mine = vbond::ipv4_mapped_gid(ep.cfg.vip);
    let vindex = vgids
        .iter()
        .find(|g| g.roce_v2 && g.gid == mine)
        .map(|g| g.index)
        .ok_or_else(|| refuse(libc::ENODEV, "the vNIC has no GID for its vIP"))?;
    let vni = ep.cfg.vni;
    let sender = if src_host == me {
        local_sender(shared, vni, r.src_qp)
    } else {
        remote_sender(shared, vni, src_host, r.src_qp)
    };
    let vip = sender.ok_or_else(|| {
        refuse(
            libc::EHOSTUNREACH,
            format!(
                "QPN {:#x} of the sending host is no endpoint of VNI {vni}",
                r.src_qp
            ),
        )
    })?;
    Ok(proto::ReplyBody::ResolveGrh(proto::ResolveGrhReply {
        sgid: vbond::ipv4_mapped_gid(vip),
        sgid_index: vindex as u8,
    }))
}

fn remote_sender(shared: &Shared, vni: u32, host: Ipv4Addr, qpn: u32) -> Option<Ipv4Addr> {
    let deadline = Instant::now() + ANNOUNCE_WAIT;
    loop {
        if let Some((v, vip)) = shared.cm.ud_sender(host, qpn) {
            let vpc = shared.registry.vpc();
            let theirs = vpc.lookup(v, vip).is_some_and(|p| p.host == host);
            return (v == vni && theirs).then_some(vip);
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Not announced (its masqd is older, or restarted since): the VPC map
    // still answers when the VNI has one endpoint on that host.
    match shared.registry.vpc().vips_on_host(vni, host)[..] {
        [one] => Some(one),
        _ => None,
    }
}

/// The vIP of the endpoint in `vni` on this host whose app holds UD QP
/// `qpn`, from the sessions' QP records.
fn local_sender(shared: &Shared, vni: u32, qpn: u32) -> Option<Ipv4Addr> {
    let name = lock(&shared.sessions)
        .values()
        .find(|v| v.qps.values().any(|q| q.qpn == qpn && q.qp_type == "UD"))
        .map(|v| v.endpoint.clone())?;
    let ep = shared.registry.local_named(&name)?;
    (ep.cfg.vni == vni).then_some(ep.cfg.vip)
}
