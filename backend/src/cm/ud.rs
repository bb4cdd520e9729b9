//! UD ids and UD QPs: the SIDR exchange (a UD id's "connection": the
//! query for the passive side's QP), and the announcements of UD QPs
//! between masqds, which tell each host's backstop whose datagrams to let
//! in.

use super::ud_peers::Announced;
use super::{fail, Cm, CmHost, Event, PeerRef, State};
use crate::error::{refuse, Result};
use crate::kernel::ibv::*;
use masq_policy::netpol::PortSpace;
use masq_proto::{self as proto, PeerBody};
use std::net::Ipv4Addr;
use std::time::Duration;
use tracing::{debug, info, warn};

impl Cm {
    /// Tell `host`'s masqd that this host's UD QP `qpn` of (vni, vip) is
    /// up or gone.
    pub fn announce_ud(&self, host: Ipv4Addr, vni: u32, vip: Ipv4Addr, qpn: u32, up: bool) {
        self.send(
            host,
            PeerBody::UdQp(proto::PeerUdQp {
                vni,
                vip: vip.octets(),
                qpn,
                up: u8::from(up),
            }),
        );
    }

    /// Announce this host's UD QP `qpn` of (vni, vip) as up to those of
    /// `hosts` not told yet, without waiting: sent when the QP reaches
    /// INIT, so that the acks are in by its RTR.
    pub fn announce_ud_early(&self, hosts: &[Ipv4Addr], vni: u32, vip: Ipv4Addr, qpn: u32) {
        let mut up = self.ud_up.lock().unwrap_or_else(|p| p.into_inner());
        let new: Vec<Ipv4Addr> = hosts
            .iter()
            .filter(|h| !up.contains_key(&(**h, qpn)))
            .copied()
            .collect();
        // Marked before the send: an ack may come back at once.
        up.extend(new.iter().map(|h| ((*h, qpn), false)));
        drop(up);
        for h in new {
            self.announce_ud(h, vni, vip, qpn, true);
        }
    }

    /// Announce this host's UD QP `qpn` of (vni, vip) as up to `hosts`
    /// (those not told at INIT), and wait up to `timeout` until each has
    /// it in force (its backstop lets the QP's datagrams in), as the app's
    /// first datagram may follow at once. A host the message could not
    /// reach counts as answered. False if one did not answer in time.
    pub fn announce_ud_up(
        &self,
        hosts: &[Ipv4Addr],
        vni: u32,
        vip: Ipv4Addr,
        qpn: u32,
        timeout: Duration,
    ) -> bool {
        self.announce_ud_early(hosts, vni, vip, qpn);
        let up = self.ud_up.lock().unwrap_or_else(|p| p.into_inner());
        let (up, waited) = self
            .ud_acked
            .wait_timeout_while(up, timeout, |u| {
                hosts.iter().any(|h| u.get(&(*h, qpn)) == Some(&false))
            })
            .unwrap_or_else(|p| p.into_inner());
        drop(up);
        !waited.timed_out()
    }

    /// `host` has UD QP `qpn`'s announcement in force, or it could not be
    /// sent there.
    pub fn ud_acked(&self, host: Ipv4Addr, qpn: u32) {
        let mut up = self.ud_up.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(acked @ false) = up.get_mut(&(host, qpn)) {
            *acked = true;
            self.ud_acked.notify_all();
        }
    }

    /// This host's UD QP `qpn` is gone (its end announced): a QP that
    /// gets the number later is announced afresh.
    pub fn forget_ud(&self, qpn: u32) {
        let mut up = self.ud_up.lock().unwrap_or_else(|p| p.into_inner());
        up.retain(|(_, q), _| *q != qpn);
    }

    /// Ask each of `hosts`' masqds to announce its UD QPs: after a
    /// restart this masqd knows none of them.
    pub fn query_ud(&self, hosts: impl IntoIterator<Item = Ipv4Addr>) {
        for h in hosts {
            self.send(h, PeerBody::UdQuery(proto::PeerUdQuery {}));
        }
    }

    /// The announced UD QP `qpn` that sends from underlay address `addr`
    /// (its host's, on its rail): its VNI and vIP.
    pub fn ud_sender(&self, addr: Ipv4Addr, qpn: u32) -> Option<(u32, Ipv4Addr)> {
        self.ud_peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(addr, qpn)
    }

    /// A UD id's accept: the SIDR REP telling the querying side this
    /// app's QP and the port space's Q_Key. The QP needs no step here (the
    /// app moved it to RTS itself, as rdma_create_qp does for UD).
    pub(super) fn accept_ud(
        &self,
        st: &mut State,
        session: u64,
        c: &proto::CmConnectReq,
    ) -> Result<()> {
        let i = Self::accepting(st, session, c)?;
        if c.param.private_data.len() > proto::CM_SIDR_REP_PRIVATE_DATA {
            return fail(libc::EINVAL, "more than 136 bytes of private data");
        }
        let p = i.peer.ok_or_else(|| refuse(libc::EINVAL, "no peer"))?;
        i.local.qp_num = c.param.qp_num;
        i.step_checked(Event::Accept);
        info!(
            qpn = c.param.qp_num,
            "CM UD query answered: {}",
            i.ends("<-")
        );
        self.send(
            p.host,
            PeerBody::SidrRep(proto::PeerSidrRep {
                to_id: p.id,
                status: 0,
                qp_num: c.param.qp_num,
                qkey: proto::CM_UDP_QKEY,
                private_data: c.param.private_data.clone(),
            }),
        );
        Ok(())
    }

    pub(super) fn sidr_rep(to_id: u32, status: u32, private_data: Vec<u8>) -> PeerBody {
        PeerBody::SidrRep(proto::PeerSidrRep {
            to_id,
            status,
            qp_num: 0,
            qkey: 0,
            private_data,
        })
    }

    /// A UD QP announcement from `from`'s masqd: (vni, vip)'s UD QP `qpn`
    /// is up or gone there. An up one is acknowledged (UdQpAck) once the
    /// backstop has it in force (its element is an eBPF map's, written
    /// here).
    pub(super) fn on_ud_qp(
        &self,
        shared: &dyn CmHost,
        from: Ipv4Addr,
        vni: u32,
        vip: Ipv4Addr,
        qpn: u32,
        up: bool,
    ) {
        // The backstop takes only what the VPC map puts on that host; its
        // datagrams come from the host's address on the endpoint's rail.
        let placed = shared
            .registry()
            .vpc()
            .lookup(vni, vip)
            .map(|p| (p.host, p.underlay));
        let theirs = placed.is_some_and(|(host, _)| host == from);
        let sender = placed.filter(|_| theirs).map_or(from, |(_, addr)| addr);
        {
            let mut m = self.ud_peers.lock().unwrap_or_else(|p| p.into_inner());
            if !up {
                m.withdraw(sender, qpn, vni, vip);
            } else if let Announced::OverLimit(n) = m.announce(from, sender, qpn, vni, vip) {
                drop(m);
                self.metrics.peer_ud_refused(from);
                if n.is_power_of_two() {
                    warn!(
                        %from, qpn,
                        "CM link: UD QP announcement dropped: that host has {} in force \
                         already ({n} dropped so far)",
                        super::ud_peers::MAX_PER_PEER
                    );
                }
                return;
            }
        }
        if up && !theirs {
            warn!(
                %from, qpn,
                "CM link: UD QP announced for VNI {vni} vIP {vip}, which the VPC map places on {}; \
                 its datagrams stay out",
                placed.map_or_else(|| "no host".to_string(), |(h, _)| h.to_string())
            );
        }
        if let (Some(bs), true) = (shared.guard(), theirs) {
            bs.ud_remote(sender, qpn, vni, up);
        }
        if up {
            self.send(from, PeerBody::UdQpAck(proto::PeerUdQpAck { vni, qpn }));
        }
    }

    /// A SIDR REQ: a new UD id on the listener's channel gets
    /// CONNECT_REQUEST; nobody listening answers CM_SIDR_UNSUPPORTED.
    pub(super) fn on_sidr_req(
        &self,
        shared: &dyn CmHost,
        st: &mut State,
        from: Ipv4Addr,
        r: proto::PeerSidrReq,
    ) {
        let (from_id, vni) = (r.from_id, r.vni);
        let (src, dst) = (r.src.ip_port(), r.dst.ip_port());
        let Some(ep) = Self::admit_request(shared, from, vni, src, dst, PortSpace::Udp) else {
            return;
        };
        let sender = Some(PeerRef {
            host: from,
            id: from_id,
        });
        if st.ids.values().any(|i| i.peer == sender) {
            return; // a repeated request
        }
        let Some(listener) = self.listener_for(shared, st, &ep, true, dst.1) else {
            debug!(port = dst.1, "CM UD query for a port nobody listens on");
            self.send(
                from,
                Self::sidr_rep(from_id, proto::CM_SIDR_UNSUPPORTED, Vec::new()),
            );
            return;
        };
        let Some((session, channel)) = st.ids.get(&listener).map(|l| (l.session, l.channel)) else {
            return;
        };
        let slot = match Self::id_slot(shared, &ep) {
            Ok(s) => s,
            Err(r) => {
                warn!(%from, endpoint = %ep.cfg.name, "CM UD query rejected: {}", r.why());
                self.send(
                    from,
                    Self::sidr_rep(from_id, proto::CM_SIDR_REJECT, Vec::new()),
                );
                return;
            }
        };
        let id = self.new_id(st, session, channel, ep.clone(), slot);
        if let Some(i) = st.ids.get_mut(&id) {
            i.udp = true;
            i.src_ip = ep.cfg.vip;
            i.port = dst.1;
            i.dst = Some(src);
            i.step_checked(Event::ReqIn);
            i.listen_id = listener;
            i.peer = sender;
            i.peer_host = from;
            info!("CM UD query {}:{} -> {}:{}", src.0, src.1, dst.0, dst.1);
        }
        let param = proto::CmConnParam {
            private_data: r.private_data,
            ..Default::default()
        };
        Self::emit_with_qp_attrs(shared, st, id, proto::CM_EVENT_CONNECT_REQUEST, param);
    }

    /// A SIDR REP for a UD id that is waiting for one: ESTABLISHED with
    /// the peer's QP, Q_Key and virtual address vector (in the event's
    /// rtr_attr), or UNREACHABLE with the SIDR status. A late one is
    /// dropped: SIDR leaves no state on the answering side to clean up.
    pub(super) fn on_sidr_rep(
        shared: &dyn CmHost,
        st: &mut State,
        from: Ipv4Addr,
        r: proto::PeerSidrRep,
    ) {
        let (to_id, status, qpn, qkey) = (r.to_id, r.status, r.qp_num, r.qkey);
        let Some(i) = st.ids.get_mut(&to_id) else {
            return;
        };
        if !(i.udp && i.may(Event::SidrRepIn { ok: true }) && i.peer_host == from) {
            return;
        }
        i.deadline = None;
        let mut param = proto::CmConnParam {
            private_data: r.private_data,
            ..Default::default()
        };
        let route = shared.vnic_route(&i.ep);
        let (dst, _) = i.dst.unwrap_or((Ipv4Addr::UNSPECIFIED, 0));
        let (sgid_index, _) = match (status, route) {
            (0, Ok(r)) => r,
            (0, Err(r)) => {
                warn!(id = to_id, "CM UD answer unusable: {}", r.why());
                i.step_checked(Event::SidrRepIn { ok: false });
                Self::emit(st, to_id, proto::CM_EVENT_UNREACHABLE, -r.errno(), param);
                return;
            }
            _ => {
                i.step_checked(Event::SidrRepIn { ok: false });
                debug!(id = to_id, status, "CM UD query refused");
                Self::emit(st, to_id, proto::CM_EVENT_UNREACHABLE, status as i32, param);
                return;
            }
        };
        i.step_checked(Event::SidrRepIn { ok: true });
        i.remote.qp_num = qpn;
        param.qp_num = qpn;
        let peer = proto::CmQpAttr {
            attr_mask: IBV_QP_AV | IBV_QP_QKEY | IBV_QP_DEST_QPN,
            attr: proto::QpAttr {
                qkey,
                dest_qp_num: qpn,
                ah_attr: Self::virtual_ah(shared, &i.ep, sgid_index, dst),
                ..Default::default()
            },
        };
        info!(id = to_id, qpn, "CM UD query answered by {dst}");
        Self::emit_attrs(
            st,
            to_id,
            proto::CM_EVENT_ESTABLISHED,
            0,
            param,
            [Default::default(), peer, Default::default()],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::link::Link;
    use std::sync::{mpsc, Arc};

    /// A CM whose messages to peers stay in the link's queues: with no
    /// peer threads, none of them has a connection, so all are queued.
    fn cm() -> (Cm, Arc<Link>) {
        let cm = Cm::new(Duration::from_secs(1), Default::default());
        let (tx, _) = mpsc::channel();
        let link = Arc::new(Link::new(Ipv4Addr::LOCALHOST, tx, None));
        cm.set_link(link.clone());
        (cm, link)
    }

    /// The hosts messages were queued for since the last look, in host
    /// order.
    fn sent(link: &Link) -> Vec<Ipv4Addr> {
        link.take_queued().into_iter().map(|(h, _)| h).collect()
    }

    const VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

    #[test]
    fn a_ud_qp_announced_at_init_and_acked_waits_for_nothing_at_rtr() {
        let (cm, rx) = cm();
        let (a, b) = (Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 3));
        cm.announce_ud_early(&[a, b], 100, VIP, 0x11);
        assert_eq!(sent(&rx), [a, b]);
        cm.announce_ud_early(&[a, b], 100, VIP, 0x11);
        assert!(sent(&rx).is_empty(), "told once");
        cm.ud_acked(a, 0x11);
        cm.ud_acked(b, 0x11);
        let t = std::time::Instant::now();
        assert!(cm.announce_ud_up(&[a, b], 100, VIP, 0x11, Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert!(sent(&rx).is_empty(), "nothing more to say at RTR");
    }

    #[test]
    fn an_rtr_waits_for_the_acks_still_missing_and_tells_a_host_not_told() {
        let (cm, rx) = cm();
        let (a, b) = (Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 3));
        cm.announce_ud_early(&[a], 100, VIP, 0x11);
        assert_eq!(sent(&rx), [a]);
        // a never answers; b joined the VNI since INIT.
        assert!(!cm.announce_ud_up(&[a, b], 100, VIP, 0x11, Duration::from_millis(20)));
        assert_eq!(sent(&rx), [b]);
        cm.ud_acked(a, 0x11);
        cm.ud_acked(b, 0x11);
        assert!(cm.announce_ud_up(&[a, b], 100, VIP, 0x11, Duration::ZERO));
        // Gone: a QP that gets the number later is announced afresh.
        cm.forget_ud(0x11);
        cm.announce_ud_early(&[a, b], 100, VIP, 0x11);
        assert_eq!(sent(&rx), [a, b]);
        assert!(!cm.announce_ud_up(&[a], 100, VIP, 0x11, Duration::ZERO));
    }
}
