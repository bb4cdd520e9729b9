//! CM messages from peer masqds: `on_peer`'s dispatch, a function per
//! message of the connection exchange (REQ, REP, REJ, RTU, DREQ), and the
//! admission of a request from another host.

use super::attrs::event_param;
use super::{random_u32, Cm, CmHost, Event, Id, PeerRef, Phase, State};
use crate::admit::{Ask, Conn};
use crate::endpoints::endpoint::Endpoint;
use masq_policy::netpol::PortSpace;
use masq_proto::{self as proto, PeerBody};
use std::net::Ipv4Addr;
use std::sync::Arc;
use tracing::{debug, info, warn};

impl Cm {
    /// A CM message from the masqd at `from` (already known to be a host
    /// of the VPC map). Anything that does not fit is logged and dropped.
    pub fn on_peer(&self, shared: &dyn CmHost, from: Ipv4Addr, msg: PeerBody) {
        debug!(%from, ?msg, "CM message in");
        // The UD QPs' bookkeeping, without the CM's lock.
        match msg {
            PeerBody::UdQuery(_) => return shared.reannounce_ud(from),
            PeerBody::UdQpAck(a) => return self.ud_acked(from, a.qpn),
            PeerBody::UdQp(u) => {
                let vip = Ipv4Addr::from(u.vip);
                return self.on_ud_qp(shared, from, u.vni, vip, u.qpn, u.up != 0);
            }
            _ => {}
        }
        let mut st = self.lock();
        let st = &mut *st;
        match msg {
            PeerBody::Req(r) => self.on_req(shared, st, from, r),
            PeerBody::Rep(r) => self.on_rep(shared, st, from, r),
            PeerBody::Rej(r) => Self::on_rej(st, from, r),
            PeerBody::Rtu(r) => Self::on_rtu(st, from, r),
            PeerBody::Dreq(r) => Self::on_dreq(st, from, r),
            PeerBody::SidrReq(r) => self.on_sidr_req(shared, st, from, r),
            PeerBody::SidrRep(r) => Self::on_sidr_rep(shared, st, from, r),
            // Taken above.
            PeerBody::UdQp(_) | PeerBody::UdQuery(_) | PeerBody::UdQpAck(_) => {}
        }
    }

    /// A REP for an id that connected to `from`'s host and waits for one:
    /// CONNECT_RESPONSE. Any other is answered with a REJ, so that the
    /// peer's side does not wait for an RTU that will not come.
    fn on_rep(&self, shared: &dyn CmHost, st: &mut State, from: Ipv4Addr, r: proto::PeerRep) {
        let (to_id, from_id) = (r.to_id, r.from_id);
        let ok = st
            .ids
            .get(&to_id)
            .is_some_and(|i| i.may(Event::RepIn) && i.peer_host == from && i.peer.is_none());
        if !ok {
            // Too late (timed out) or unknown.
            self.send(
                from,
                PeerBody::Rej(proto::PeerRej {
                    to_id: from_id,
                    from_id: to_id,
                    reason: proto::CM_REJ_CONSUMER_DEFINED,
                    private_data: Vec::new(),
                }),
            );
            return;
        }
        if r.private_data.len() > proto::CM_MAX_PRIVATE_DATA {
            return;
        }
        if let Some(i) = st.ids.get_mut(&to_id) {
            i.peer = Some(PeerRef {
                host: from,
                id: from_id,
            });
            i.remote = r.params;
            i.step_checked(Event::RepIn);
            i.deadline = None;
            let param = event_param(&i.remote, r.private_data);
            Self::emit_with_qp_attrs(shared, st, to_id, proto::CM_EVENT_CONNECT_RESPONSE, param);
        }
    }

    /// A REJ from the id's peer (or, while connecting, from the host it
    /// connected to): REJECTED with the reason and private data.
    fn on_rej(st: &mut State, from: Ipv4Addr, r: proto::PeerRej) {
        let (to_id, from_id) = (r.to_id, r.from_id);
        let Some(i) = st.ids.get_mut(&to_id) else {
            return;
        };
        let from_peer = i.peer
            == Some(PeerRef {
                host: from,
                id: from_id,
            })
            || (i.phase == Phase::Connecting && i.peer_host == from);
        if !from_peer || i.step(Event::RejIn).is_err() {
            return;
        }
        i.deadline = None;
        let mut data = r.private_data;
        data.truncate(proto::CM_REJ_PRIVATE_DATA);
        let param = proto::CmConnParam {
            private_data: data,
            ..Default::default()
        };
        Self::emit(st, to_id, proto::CM_EVENT_REJECTED, r.reason, param);
    }

    /// An RTU from the id's peer after its REP: ESTABLISHED.
    fn on_rtu(st: &mut State, from: Ipv4Addr, r: proto::PeerRtu) {
        let (to_id, from_id) = (r.to_id, r.from_id);
        let Some(i) = st.ids.get_mut(&to_id) else {
            return;
        };
        if i.peer
            != Some(PeerRef {
                host: from,
                id: from_id,
            })
            || i.step(Event::RtuIn).is_err()
        {
            return;
        }
        i.deadline = None;
        info!(
            qpn = i.local.qp_num,
            "CM connection established: {} (passive)",
            i.ends("<-")
        );
        Self::emit(
            st,
            to_id,
            proto::CM_EVENT_ESTABLISHED,
            0,
            Default::default(),
        );
    }

    /// A DREQ from the id's peer: DISCONNECTED. One to id 0 names the
    /// connection by the sender's QP (both ends restarted).
    fn on_dreq(st: &mut State, from: Ipv4Addr, r: proto::PeerDreq) {
        let (to_id, from_id, from_qpn) = (r.to_id, r.from_id, r.from_qpn);
        let sender = PeerRef {
            host: from,
            id: from_id,
        };
        // A restored id knows its peer's host and QP, not its id.
        let restored = |i: &Id| {
            i.peer == Some(PeerRef { host: from, id: 0 })
                && from_qpn != 0
                && i.remote.qp_num == from_qpn
        };
        let to_id = if to_id != 0 {
            to_id
        } else {
            // Both ends may have restarted: then neither knows the
            // other's id, and the QPs name the connection.
            let found = st.ids.iter().find(|(_, i)| {
                (i.peer == Some(sender) && from_qpn != 0 && i.remote.qp_num == from_qpn)
                    || restored(i)
            });
            match found {
                Some((k, _)) => *k,
                None => return,
            }
        };
        let Some(i) = st.ids.get_mut(&to_id) else {
            return;
        };
        if !(i.peer == Some(sender) || restored(i)) || i.step(Event::DreqIn).is_err() {
            return;
        }
        i.peer = Some(sender);
        i.deadline = None;
        Self::emit(
            st,
            to_id,
            proto::CM_EVENT_DISCONNECTED,
            0,
            Default::default(),
        );
    }

    fn on_req(&self, shared: &dyn CmHost, st: &mut State, from: Ipv4Addr, r: proto::PeerReq) {
        let (from_id, vni) = (r.from_id, r.vni);
        let (src, dst) = (r.src.ip_port(), r.dst.ip_port());
        if r.private_data.len() > proto::CM_REQ_PRIVATE_DATA || r.params.qp_num == 0 {
            warn!(%from, "malformed CM request; dropped");
            return;
        }
        let Some(ep) = Self::admit_request(shared, from, vni, src, dst, PortSpace::Tcp) else {
            return;
        };
        // A repeated REQ for a connection already under way changes nothing.
        if st.ids.values().any(|i| {
            i.peer
                == Some(PeerRef {
                    host: from,
                    id: from_id,
                })
        }) {
            return;
        }
        let Some(listener) = self.listener_for(shared, st, &ep, false, dst.1) else {
            debug!(port = dst.1, "CM request for a port nobody listens on");
            self.reject_req(from, from_id, proto::CM_REJ_INVALID_SERVICE_ID);
            return;
        };
        let (session, channel) = match st.ids.get(&listener) {
            Some(l) => (l.session, l.channel),
            None => return,
        };
        // An endpoint at its CM ids rejects, as a listener out of resources.
        let slot = match Self::id_slot(shared, &ep) {
            Ok(s) => s,
            Err(r) => {
                warn!(%from, endpoint = %ep.cfg.name, "CM request rejected: {}", r.why());
                self.reject_req(from, from_id, super::CM_REJ_NO_RESOURCES);
                return;
            }
        };
        let id = self.new_id(st, session, channel, ep.clone(), slot);
        if let Some(i) = st.ids.get_mut(&id) {
            i.src_ip = ep.cfg.vip;
            i.port = dst.1;
            i.dst = Some(src);
            i.step_checked(Event::ReqIn);
            i.listen_id = listener;
            i.peer = Some(PeerRef {
                host: from,
                id: from_id,
            });
            i.peer_host = from;
            i.local.psn = random_u32() & 0xFF_FFFF;
            i.remote = r.params;
            info!(
                "CM connect request {}:{} -> {}:{}",
                src.0, src.1, dst.0, dst.1
            );
            let param = event_param(&i.remote, r.private_data);
            Self::emit_with_qp_attrs(shared, st, id, proto::CM_EVENT_CONNECT_REQUEST, param);
        }
    }

    /// A REJ for `from`'s REQ (its id `from_id`) that no id here takes.
    fn reject_req(&self, from: Ipv4Addr, from_id: u32, reason: i32) {
        let rej = PeerBody::Rej(proto::PeerRej {
            to_id: from_id,
            from_id: 0,
            reason,
            private_data: Vec::new(),
        });
        self.send(from, rej);
    }

    /// The local endpoint a request from host `from` (REQ or SIDR REQ) is
    /// for, if the VPC map puts its source on that host and the security
    /// groups admit it; None (logged) drops the request: a denied one
    /// looks as a firewall makes it look.
    pub(super) fn admit_request(
        shared: &dyn CmHost,
        from: Ipv4Addr,
        vni: u32,
        src: (Ipv4Addr, u16),
        dst: (Ipv4Addr, u16),
        space: PortSpace,
    ) -> Option<Arc<Endpoint>> {
        let src_host = shared.registry().vpc().lookup(vni, src.0).map(|p| p.host);
        if src_host != Some(from) {
            warn!(%from, vni, src = %src.0, "CM request from a host that does not hold its source; dropped");
            return None;
        }
        let Some(ep) = shared.registry().local_at(vni, dst.0) else {
            warn!(%from, vni, dst = %dst.0, "CM request for an endpoint not on this host; dropped");
            return None;
        };
        let ask = Ask {
            tenant: &ep.cfg.tenant,
            vni,
            local: dst.0,
            remote: src.0,
            conn: Conn::Cm {
                outbound: false,
                space,
                port: dst.1,
            },
        };
        if let Err(why) = shared.decide().decide(&ask, shared.registry()) {
            warn!(
                "CM connect {}:{} -> {}:{} denied by {}: {why}",
                src.0, src.1, dst.0, dst.1, why.by
            );
            return None;
        }
        Some(ep)
    }
}
