//! CM events and QP attributes: the events on an app's channel (with the
//! QP attributes they make known), and INIT_QP_ATTR's answers in virtual
//! terms.

use super::{fail, Cm, CmHost, Id, Phase, State, ACK_TIMEOUT, MIN_RNR_TIMER};
use crate::endpoints::endpoint::Endpoint;
use crate::error::{refuse, Result};
use crate::kernel::ibv::*;
use masq_proto as proto;
use std::net::Ipv4Addr;
use tracing::warn;

/// This side's connection parameters as its app gave them (rdma_connect,
/// rdma_accept), with the PSN its QP starts at; the private data goes in
/// the message beside them.
pub(super) fn peer_params(p: &proto::CmConnParam, psn: u32) -> proto::PeerParams {
    proto::PeerParams {
        qp_num: p.qp_num,
        psn,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: p.flow_control,
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: p.srq,
    }
}

/// The peer's parameters (and the private data its message carried) as
/// this side's app sees them in an event: its initiator depth is our
/// responder resources and the reverse.
pub(super) fn event_param(p: &proto::PeerParams, private_data: Vec<u8>) -> proto::CmConnParam {
    proto::CmConnParam {
        responder_resources: p.initiator_depth,
        initiator_depth: p.responder_resources,
        flow_control: p.flow_control.min(1),
        retry_count: p.retry_count.min(7),
        rnr_retry_count: p.rnr_retry_count.min(7),
        srq: p.srq.min(1),
        qp_num: p.qp_num & 0xFF_FFFF,
        private_data,
    }
}

/// The largest IB MTU whose packets fit a netdev MTU, as the kernel's
/// iboe_get_mtu computes it (GRH, BTH, extended headers and ICRC taken out).
fn ib_mtu(netdev_mtu: u32) -> u8 {
    let room = netdev_mtu.saturating_sub(88);
    match room {
        4096.. => 5,
        2048.. => 4,
        1024.. => 3,
        512.. => 2,
        _ => 1,
    }
}

/// Endpoint `ep`'s virtual GID index (its vIP's) and its vNIC's MTU, as
/// its vNIC is now (`CmHost::vnic_route`'s default).
pub(super) fn vnic_route(ep: &Endpoint) -> Result<(u8, u32)> {
    // The kept view, not a fresh netlink dump: that cost milliseconds
    // on every connection.
    let (vgids, mtu) = ep
        .with_recent_vnic(|b| (b.gids().to_vec(), b.vnic().mtu))
        .map_err(|e| refuse(libc::EIO, format!("cannot read the vNIC: {e}")))?;
    let own = vbond::ipv4_mapped_gid(ep.cfg.vip);
    let sgid = vgids
        .iter()
        .find(|g| g.gid == own)
        .ok_or_else(|| refuse(libc::EADDRNOTAVAIL, format!("{} has no GID", ep.cfg.vip)))?;
    Ok((sgid.index as u8, mtu))
}

impl Cm {
    pub(super) fn emit(st: &State, id: u32, event: u32, status: i32, param: proto::CmConnParam) {
        Self::emit_attrs(st, id, event, status, param, Default::default());
    }

    /// An event that makes QP attributes known (ROUTE_RESOLVED,
    /// CONNECT_REQUEST, CONNECT_RESPONSE) carries them, so the app's
    /// rdma_init_qp_attr needs no round trip. One that cannot be computed
    /// goes without (mask 0): the app then asks, and gets the error.
    pub(super) fn emit_with_qp_attrs(
        shared: &dyn CmHost,
        st: &State,
        id: u32,
        event: u32,
        param: proto::CmConnParam,
    ) {
        let Some(i) = st.ids.get(&id) else { return };
        // INIT, RTR, RTS: enum ibv_qp_state 1..=3.
        let known = if event == proto::CM_EVENT_ROUTE_RESOLVED {
            1
        } else {
            3
        };
        let mut attrs: [proto::CmQpAttr; 3] = Default::default();
        for (state, slot) in (1..=known).zip(attrs.iter_mut()) {
            if let Ok(a) = Self::qp_attr(shared, i, state) {
                *slot = a;
            }
        }
        Self::emit_attrs(st, id, event, 0, param, attrs);
    }

    pub(super) fn emit_attrs(
        st: &State,
        id: u32,
        event: u32,
        status: i32,
        param: proto::CmConnParam,
        [init_attr, rtr_attr, rts_attr]: [proto::CmQpAttr; 3],
    ) {
        let Some(i) = st.ids.get(&id) else { return };
        let ev = proto::CmEvent {
            id,
            listen_id: if event == proto::CM_EVENT_CONNECT_REQUEST {
                i.listen_id
            } else {
                0
            },
            event,
            status,
            addrs: i.addrs(),
            param,
            init_attr,
            rtr_attr,
            rts_attr,
        };
        let Some(ch) = st.channels.get(&i.channel) else {
            return;
        };
        let bytes = proto::encode_notice(&proto::NoticeBody::CmEvent(ev));
        st.metrics.cm_event(&i.ep.cfg.tenant, event);
        if let Err(e) = ch.sock.send_nowait(&bytes) {
            // The app stopped reading its channel: losing this event is its
            // doing, and masqd must not block on it. What a channel queues
            // is bounded by its socket's send buffer (kernel memory).
            i.ep.usage.count(crate::endpoints::usage::What::CmEvents);
            warn!(
                session = i.session,
                id, event, "CM event not delivered: {e}"
            );
        }
    }

    /// The virtual address vector from this endpoint to vIP `dst`.
    pub(super) fn virtual_ah(
        shared: &dyn CmHost,
        ep: &Endpoint,
        sgid_index: u8,
        dst: Ipv4Addr,
    ) -> proto::AhAttr {
        proto::AhAttr {
            dgid: vbond::ipv4_mapped_gid(dst),
            sgid_index,
            hop_limit: 64,
            is_global: 1,
            port_num: shared.host(ep).port,
            ..Default::default()
        }
    }

    /// A UD id's QP attributes, as librdmacm's ucma_init_ud_qp uses them:
    /// INIT with the port space's Q_Key, then RTR, then RTS at PSN 0.
    fn ud_qp_attr(shared: &dyn CmHost, i: &Id, state: u32) -> Result<proto::CmQpAttr> {
        let mut a = proto::QpAttr {
            qp_state: state as u8,
            ..Default::default()
        };
        let attr_mask = match state {
            1 => {
                a.port_num = shared.host(&i.ep).port;
                a.qkey = proto::CM_UDP_QKEY;
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY
            }
            2 => IBV_QP_STATE,
            3 => IBV_QP_STATE | IBV_QP_SQ_PSN,
            _ => return fail(libc::EINVAL, format!("QP state {state}")),
        };
        Ok(proto::CmQpAttr { attr_mask, attr: a })
    }

    /// What librdmacm gets from the kernel's INIT_QP_ATTR, in virtual
    /// terms: libmasq passes it to MODIFY_QP, which translates and admits.
    pub(super) fn qp_attr(shared: &dyn CmHost, i: &Id, state: u32) -> Result<proto::CmQpAttr> {
        if i.udp {
            return Self::ud_qp_attr(shared, i, state);
        }
        let mut a = proto::QpAttr {
            qp_state: state as u8,
            ..Default::default()
        };
        let mask;
        // Passive ids answer before the app's accept: take the depths the
        // request offered, as the kernel does.
        let (resp_res, init_depth) = if i.active {
            (i.local.responder_resources, i.local.initiator_depth)
        } else {
            (i.remote.initiator_depth, i.remote.responder_resources)
        };
        match state {
            1 => {
                mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
                a.port_num = shared.host(&i.ep).port;
                a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
            }
            2 => mask = Self::rc_rtr(shared, i, &mut a, resp_res)?,
            3 => mask = Self::rc_rts(i, &mut a, init_depth)?,
            _ => return fail(libc::EINVAL, format!("QP state {state}")),
        }
        Ok(proto::CmQpAttr {
            attr_mask: mask,
            attr: a,
        })
    }

    /// A connected-mode QP's RTR attributes (`qp_attr`'s state 2): the
    /// peer's QP, PSN and virtual address; its mask.
    fn rc_rtr(shared: &dyn CmHost, i: &Id, a: &mut proto::QpAttr, resp_res: u8) -> Result<u32> {
        if !matches!(
            i.phase,
            Phase::RepReceived | Phase::ReqReceived | Phase::RepSent | Phase::Established
        ) {
            return fail(libc::EINVAL, "RTR attributes before the peer is known");
        }
        let (dst, _) = i
            .dst
            .ok_or_else(|| refuse(libc::EINVAL, "no destination"))?;
        let (sgid_index, mtu) = shared.vnic_route(&i.ep)?;
        a.path_mtu = ib_mtu(mtu);
        a.dest_qp_num = i.remote.qp_num;
        a.rq_psn = i.remote.psn;
        a.max_dest_rd_atomic = resp_res;
        a.min_rnr_timer = MIN_RNR_TIMER;
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE
            | if resp_res > 0 {
                IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
            } else {
                0
            };
        a.ah_attr = Self::virtual_ah(shared, &i.ep, sgid_index, dst);
        Ok(IBV_QP_STATE
            | IBV_QP_AV
            | IBV_QP_PATH_MTU
            | IBV_QP_DEST_QPN
            | IBV_QP_RQ_PSN
            | IBV_QP_MAX_DEST_RD_ATOMIC
            | IBV_QP_MIN_RNR_TIMER
            | IBV_QP_ACCESS_FLAGS)
    }

    /// A connected-mode QP's RTS attributes (`qp_attr`'s state 3): the
    /// timeouts and retries, this side's PSN; its mask.
    fn rc_rts(i: &Id, a: &mut proto::QpAttr, init_depth: u8) -> Result<u32> {
        if !matches!(
            i.phase,
            Phase::RepReceived | Phase::ReqReceived | Phase::RepSent | Phase::Established
        ) {
            return fail(libc::EINVAL, "RTS attributes before the peer is known");
        }
        let (retry, rnr) = if i.active {
            (i.local.retry_count, i.local.rnr_retry_count)
        } else {
            (i.remote.retry_count, i.remote.rnr_retry_count)
        };
        a.timeout = ACK_TIMEOUT;
        a.retry_cnt = retry.min(7);
        a.rnr_retry = rnr.min(7);
        a.sq_psn = i.local.psn;
        a.max_rd_atomic = init_depth;
        Ok(IBV_QP_STATE
            | IBV_QP_TIMEOUT
            | IBV_QP_RETRY_CNT
            | IBV_QP_RNR_RETRY
            | IBV_QP_SQ_PSN
            | IBV_QP_MAX_QP_RD_ATOMIC)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ib_mtu_follows_the_netdev() {
        assert_eq!(ib_mtu(1500), 3);
        assert_eq!(ib_mtu(1450), 3);
        assert_eq!(ib_mtu(9000), 5);
        assert_eq!(ib_mtu(1100), 2);
    }

    #[test]
    fn event_params_swap_the_depths() {
        let p = proto::PeerParams {
            responder_resources: 4,
            initiator_depth: 1,
            ..Default::default()
        };
        let e = event_param(&p, Vec::new());
        assert_eq!((e.responder_resources, e.initiator_depth), (1, 4));
    }
}
