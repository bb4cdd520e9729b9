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

use crate::admit::{Ask, Conn, Denied};
use crate::endpoints::endpoint::Endpoint;
use crate::endpoints::usage::{Slot, What};
use crate::error::{from_io, refuse, Error, Result};
use crate::pipeline::ports::{connection_quota, Enforce, Held, QpHost, BACKSTOP_WAIT};
use crate::pipeline::qp::physical_av;
use crate::pipeline::session::{AhRecord, PendingAh, Session};
use masq_proto as proto;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// Admissions not yet bound to a kernel AH that a session may hold: an app
/// whose provider failed never binds, and must not grow masqd's memory.
const MAX_PENDING: usize = 64;

fn deny(ep: &Endpoint, remote: Ipv4Addr, why: &Denied) -> Error {
    ep.refused_connections
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    refuse(
        libc::EACCES,
        format!("{} deny UD {} -> {remote}: {why}", why.by, ep.cfg.vip),
    )
}

pub(crate) fn create_ah(
    h: &dyn QpHost,
    sess: &mut Session,
    r: &proto::CreateAhReq,
) -> Result<proto::ReplyBody> {
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
    // Refused before the app's provider makes an AH that BIND_AH would
    // refuse (the place is taken at BIND_AH).
    let max = h.registry().limits().address_handles;
    let held = ep.usage.held(What::AddressHandles);
    if held >= max as usize {
        return Err(ep.usage.refuse(
            What::AddressHandles,
            format_args!("address_handles limit reached ({held} of {max})"),
        ));
    }
    let av = physical_av(h, &ep, ah)?;
    let (remote_vip, peer_host, traffic_class) = (av.vip, av.host, av.traffic_class);
    // UD is RDMA: the same predicate as a connection, per destination.
    h.decide()
        .decide(
            &Ask::from_endpoint(&ep.cfg, remote_vip, Conn::Ud),
            h.registry(),
        )
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
            port_num: h.port(&sess.ep),
            ..*ah
        },
    }))
}

pub(crate) fn bind_ah(
    h: &(impl Enforce + ?Sized),
    sess: &mut Session,
    b: &proto::BindAhReq,
) -> Result<()> {
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
    track(h, sess, b.ah_handle, &p, "admitted")
}

/// Admit AH `handle` towards `p` and track it: the RConntrack entry, the
/// backstop's sets, the session's record. Decided again under the gate: a
/// rule change since the AH was asked for either sees this entry in the
/// table or is seen here.
fn track(
    h: &(impl Enforce + ?Sized),
    sess: &mut Session,
    handle: u32,
    p: &PendingAh,
    what: &str,
) -> Result<()> {
    let ep = sess.ep.clone();
    let limits = h.registry().limits();
    let slot = Slot::take(&ep.usage, What::AddressHandles, limits.address_handles)?;
    // The AH waits for its element below: this thread runs it.
    let _held = h.guard().map(Held::new);
    let gate = h.decide().admitting();
    let rule = h
        .decide()
        .decide(
            &Ask::from_endpoint(&ep.cfg, p.remote_vip, Conn::Ud),
            h.registry(),
        )
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
        rail: ep.rail_label.clone(),
        ..Default::default()
    };
    let max = connection_quota(&ep, limits.connections);
    match h.conntrack().upsert_within(entry, max as usize) {
        Ok(_) => {}
        Err(Some(held)) => {
            ep.usage.count(What::Connections);
            return Err(refuse(
                libc::EDQUOT,
                format!(
                    "connection quota of endpoint {} reached ({held} of {max}); \
                     UD {} -> {} refused",
                    ep.cfg.name, ep.cfg.vip, p.remote_vip
                ),
            ));
        }
        // Not tracked, it would not be guarded or reset either.
        Err(None) => return Err(refuse(libc::ENOSPC, "the connection table is full")),
    }
    info!(ah = handle, rule = %rule, "UD address handle {} -> {} {what}", ep.cfg.vip, p.remote_vip);
    drop(gate);
    // The app sends as soon as the AH exists: the backstop must let its
    // datagrams through by then, or they are lost without a trace.
    if let Some(bs) = h.guard() {
        if !bs.wait_applied(BACKSTOP_WAIT) {
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
            _slot: slot,
        },
    );
    Ok(())
}

/// RESYNC_AH: after a restart, an AH the app holds is admitted again as
/// it was first (the claim is the virtual destination; granting it gives
/// no more than CREATE_AH would), or destroyed on the app's uverbs file
/// if the security groups no longer allow it.
pub(crate) fn resync_ah(
    h: &dyn QpHost,
    sess: &mut Session,
    r: &proto::ResyncAhReq,
) -> Result<proto::ReplyBody> {
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
    let tracked = physical_av(h, &ep, &r.ah_attr).and_then(|av| {
        let p = PendingAh {
            remote_vip: av.vip,
            peer_host: av.host,
            dscp: av.traffic_class >> 2,
        };
        track(h, sess, r.ah_handle, &p, "re-registered")
    });
    let result = match tracked {
        Ok(()) => proto::RESYNC_TRACKED,
        Err(denied) => {
            match h.destroy_ah(sess.id, r.ah_handle) {
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

pub(crate) fn destroy_ah(h: &(impl Enforce + ?Sized), sess: &mut Session, d: &proto::DestroyAhReq) {
    if sess.ahs.remove(&d.ah_handle).is_some() {
        debug!(ah = d.ah_handle, "UD address handle destroyed");
        h.conntrack().forget(rconntrack::QpKey {
            session: sess.id,
            qp_handle: d.ah_handle,
        });
    }
}

/// How long RESOLVE_GRH waits for the sending host's announcement of its
/// QP (sent when the QP reached RTR, so normally long in).
const ANNOUNCE_WAIT: Duration = Duration::from_secs(2);

/// The sender of a received UD packet in virtual terms. A packet names its
/// sender by host (the GRH's source) and QPN (the DETH's): on this host
/// masqd knows every tenant QP; another host's masqd announced its UD QPs,
/// and the claim holds only if that host runs that vIP of this VNI.
pub(crate) fn resolve_grh(
    h: &dyn QpHost,
    sess: &Session,
    r: &proto::ResolveGrhReq,
) -> Result<proto::ReplyBody> {
    let ep = &sess.ep;
    let me = h.underlay(ep);
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
        h.local_sender(vni, r.src_qp)
    } else {
        remote_sender(h, vni, src_host, r.src_qp)
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

fn remote_sender(h: &dyn QpHost, vni: u32, host: Ipv4Addr, qpn: u32) -> Option<Ipv4Addr> {
    let deadline = Instant::now() + ANNOUNCE_WAIT;
    loop {
        if let Some((v, vip)) = h.ud_sender(host, qpn) {
            let vpc = h.registry().vpc();
            let theirs = vpc.lookup(v, vip).is_some_and(|p| p.underlay == host);
            return (v == vni && theirs).then_some(vip);
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Not announced (its masqd is older, or restarted since): the VPC map
    // still answers when the VNI has one endpoint on that host.
    match h.registry().vpc().vips_on_host(vni, host)[..] {
        [one] => Some(one),
        _ => None,
    }
}

#[cfg(test)]
#[path = "ah_tests.rs"]
mod tests;
