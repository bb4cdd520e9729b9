//! CM ids and ports: binding, the port table, channels, new ids, the
//! requests that make, move and end channels and ids, the teardown of ids
//! and sessions, listeners, timeouts and `masqctl cm`.

use super::{fail, random_u32, Channel, Cm, CmHost, Event, Id, Phase, State};
use super::{EPHEMERAL, MAX_CHANNELS_PER_SESSION};
use crate::config::TenantLimits;
use crate::endpoints::endpoint::Endpoint;
use crate::endpoints::usage::{fd_room, Slot, What};
use crate::error::{refuse, Result};
use crate::transport::seqpacket::Conn;
use masq_proto::{self as proto, PeerBody};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;
use tracing::info;

impl Cm {
    fn free_port(st: &mut State, ep: &str, udp: bool, port: u16, id: u32) {
        let key = (ep.to_string(), udp, port);
        if st.ports.get(&key) == Some(&id) {
            st.ports.remove(&key);
        }
    }

    fn bind_port(st: &mut State, id: u32, ep: &str, udp: bool, want: u16) -> Result<u16> {
        if want != 0 {
            let key = (ep.to_string(), udp, want);
            if st.ports.contains_key(&key) {
                return fail(libc::EADDRINUSE, format!("port {want} is in use"));
            }
            st.ports.insert(key, id);
            return Ok(want);
        }
        let span = u32::from(EPHEMERAL.end() - EPHEMERAL.start()) + 1;
        let start = random_u32() % span;
        for k in 0..span {
            let port = EPHEMERAL.start() + ((start + k) % span) as u16;
            let key = (ep.to_string(), udp, port);
            if let std::collections::btree_map::Entry::Vacant(v) = st.ports.entry(key) {
                v.insert(id);
                return Ok(port);
            }
        }
        fail(libc::EADDRINUSE, "no free ephemeral port")
    }

    pub(super) fn bind(
        &self,
        shared: &dyn CmHost,
        st: &mut State,
        id: u32,
        addr: Ipv4Addr,
        port: u16,
    ) -> Result<()> {
        let (ep, udp) = {
            let i = st.ids.get(&id).ok_or_else(|| refuse(libc::ENOENT, "id"))?;
            if i.port != 0 {
                return fail(libc::EINVAL, "id already bound");
            }
            (i.ep.clone(), i.udp)
        };
        // An address of another of the app's devices (its vrdma1 on a
        // second rail) binds the id to that device.
        let ep = match addr {
            Ipv4Addr::UNSPECIFIED => ep,
            _ => shared
                .registry()
                .devices_of(&ep)
                .into_iter()
                .find(|d| d.cfg.vip == addr)
                .ok_or_else(|| {
                    refuse(
                        libc::EADDRNOTAVAIL,
                        format!("{addr} is not this endpoint's address ({})", ep.cfg.vip),
                    )
                })?,
        };
        let ep_name = ep.cfg.name.clone();
        if port != 0 {
            self.reap_holder(shared, st, &ep_name, udp, port);
        }
        let port = Self::bind_port(st, id, &ep_name, udp, port)?;
        let moved = st.ids.get_mut(&id).map(|i| {
            i.src_ip = addr;
            i.port = port;
            i.owns_port = true;
            let from = i.ep.cfg.name.clone();
            i.ep = ep;
            (from, i.ep.cfg.name.clone())
        });
        if let Some((from, to)) = moved.filter(|(from, to)| from != to) {
            st.index_id(id, Some(&from), Some(&to));
        }
        Ok(())
    }

    /// rdma_create_event_channel: a channel and the app's end of its
    /// event socket, which rides along with the reply.
    pub(super) fn create_channel(
        shared: &dyn CmHost,
        st: &mut State,
        session: u64,
        ep: &Arc<Endpoint>,
    ) -> Result<(proto::ReplyBody, Option<OwnedFd>)> {
        let limits = shared.registry().limits();
        let (channel, theirs) = Self::add_channel(st, limits, ep, session, None)?;
        Ok((
            proto::ReplyBody::CmCreateChannel(proto::CmChannel { channel }),
            Some(theirs),
        ))
    }

    /// rdma_destroy_event_channel: like closing an rdma_cm file, its ids
    /// go with it.
    pub(super) fn destroy_channel(
        &self,
        st: &mut State,
        session: u64,
        channel: u32,
    ) -> Result<proto::ReplyBody> {
        Self::own_channel(st, session, channel)?;
        let ids: Vec<u32> = st
            .ids
            .iter()
            .filter(|(_, i)| i.channel == channel)
            .map(|(k, _)| *k)
            .collect();
        for id in ids {
            self.teardown(st, id);
        }
        st.channels.remove(&channel);
        Ok(proto::ReplyBody::CmDestroyChannel)
    }

    /// rdma_create_id on one of the session's channels.
    pub(super) fn create_id(
        &self,
        shared: &dyn CmHost,
        st: &mut State,
        session: u64,
        ep: &Arc<Endpoint>,
        c: &proto::CmCreateIdReq,
    ) -> Result<proto::ReplyBody> {
        Self::own_channel(st, session, c.channel)?;
        Self::id_room(st, session)?;
        let slot = Self::id_slot(shared, ep)?;
        let id = self.new_id(st, session, c.channel, ep.clone(), slot);
        if let Some(i) = st.ids.get_mut(&id) {
            i.udp = c.port_space == proto::CM_PS_UDP;
        }
        Ok(proto::ReplyBody::CmCreateId(proto::CmId { id }))
    }

    /// rdma_destroy_id: see `teardown`.
    pub(super) fn destroy_id(
        &self,
        st: &mut State,
        session: u64,
        id: u32,
    ) -> Result<proto::ReplyBody> {
        Self::own(st, session, id)?;
        self.teardown(st, id);
        Ok(proto::ReplyBody::CmDestroyId)
    }

    /// rdma_migrate_id: the id's events go to another of the session's
    /// channels.
    pub(super) fn migrate_id(
        st: &mut State,
        session: u64,
        m: &proto::CmMigrateReq,
    ) -> Result<proto::ReplyBody> {
        Self::own_channel(st, session, m.channel)?;
        Self::own(st, session, m.id)?.channel = m.channel;
        Ok(proto::ReplyBody::CmMigrateId)
    }

    /// rdma_bind_addr: the id's addresses as bound.
    pub(super) fn bind_addr(
        &self,
        shared: &dyn CmHost,
        st: &mut State,
        session: u64,
        b: &proto::CmBindReq,
    ) -> Result<proto::ReplyBody> {
        Self::own(st, session, b.id)?;
        self.bind(shared, st, b.id, Ipv4Addr::from(b.addr.addr), b.addr.port)?;
        Ok(proto::ReplyBody::CmBindAddr(
            Self::own(st, session, b.id)?.addrs(),
        ))
    }

    /// Tear an id down as the kernel does when it is destroyed: tell the
    /// peer (DREQ, or REJ for a request never answered), free its port.
    pub(super) fn teardown(&self, st: &mut State, id: u32) {
        let Some(i) = st.remove_id(id) else { return };
        if let (true, Some(p), Phase::ReqReceived) = (i.udp, i.peer, i.phase) {
            // A SIDR REQ left unanswered is rejected, as the IB CM does.
            self.send(
                p.host,
                Self::sidr_rep(p.id, proto::CM_SIDR_REJECT, Vec::new()),
            );
        } else if let (false, Some(p)) = (i.udp, i.peer) {
            match i.phase {
                Phase::ReqReceived => self.send(
                    p.host,
                    PeerBody::Rej(proto::PeerRej {
                        to_id: p.id,
                        from_id: id,
                        reason: proto::CM_REJ_CONSUMER_DEFINED,
                        private_data: Vec::new(),
                    }),
                ),
                Phase::RepSent | Phase::RepReceived | Phase::Established => self.send(
                    p.host,
                    PeerBody::Dreq(proto::PeerDreq {
                        to_id: p.id,
                        from_id: id,
                        from_qpn: i.local.qp_num,
                    }),
                ),
                _ => {}
            }
        }
        if i.owns_port {
            Self::free_port(st, &i.ep.cfg.name, i.udp, i.port, id);
        }
    }

    /// A session ended (the app exited or closed its CM connection).
    pub fn session_gone(&self, session: u64) {
        let mut st = self.lock();
        self.close_session(&mut st, session);
    }

    fn close_session(&self, st: &mut State, session: u64) {
        let ids: Vec<u32> = st
            .ids
            .iter()
            .filter(|(_, i)| i.session == session)
            .map(|(k, _)| *k)
            .collect();
        if !ids.is_empty() {
            info!("app gone; closing {} CM id(s)", ids.len());
        }
        for id in ids {
            self.teardown(st, id);
        }
        st.channels.retain(|_, c| c.session != session);
    }

    /// If the id holding (ep, port) belongs to an app that has exited but
    /// whose session thread has not closed it yet, close it now: the
    /// kernel frees an exited process's CM ports before its parent can
    /// reap it, so a next server may bind the port, or a client reach the
    /// next listener, at once.
    fn reap_holder(&self, shared: &dyn CmHost, st: &mut State, ep: &str, udp: bool, port: u16) {
        let holder = st
            .ports
            .get(&(ep.to_string(), udp, port))
            .and_then(|h| st.ids.get(h))
            .map(|i| i.session);
        if let Some(session) = holder {
            if shared.app_gone(session) {
                info!(
                    session,
                    port, "app gone; closing its CM ids before reusing its port"
                );
                self.close_session(st, session);
            }
        }
    }

    /// Every id, for `masqctl cm`.
    pub fn list(&self) -> Vec<serde_json::Value> {
        let st = self.lock();
        st.ids
            .iter()
            .map(|(id, i)| {
                let (dip, dport) = i.dst.unwrap_or((Ipv4Addr::UNSPECIFIED, 0));
                let side = match i.phase {
                    Phase::Listening => "listen",
                    Phase::Idle | Phase::AddrResolved | Phase::RouteResolved => "-",
                    _ if i.active => "active",
                    _ => "passive",
                };
                serde_json::json!({
                    "id": id,
                    "endpoint": i.ep.cfg.name,
                    "tenant": i.ep.cfg.tenant,
                    "vni": i.ep.cfg.vni,
                    "session": i.session,
                    "state": format!("{:?}", i.phase).to_lowercase(),
                    "ps": if i.udp { "udp" } else { "tcp" },
                    "side": side,
                    "local": format!("{}:{}", i.src_ip, i.port),
                    "peer": format!("{dip}:{dport}"),
                    "qpn": i.local.qp_num,
                    "peer_qpn": i.remote.qp_num,
                })
            })
            .collect()
    }

    /// A channel of `session`, numbered `number` (a restored one) or the
    /// next free number: its number and the app's end of its event socket.
    pub(super) fn add_channel(
        st: &mut State,
        limits: &TenantLimits,
        ep: &Arc<Endpoint>,
        session: u64,
        number: Option<u32>,
    ) -> Result<(u32, OwnedFd)> {
        if st
            .channels
            .values()
            .filter(|c| c.session == session)
            .count()
            >= MAX_CHANNELS_PER_SESSION
        {
            return fail(libc::EMFILE, "too many CM channels");
        }
        let slot = Slot::take(&ep.usage, What::EventChannels, limits.event_channels)?;
        let (ours, theirs) =
            Conn::pair().map_err(|e| refuse(libc::EMFILE, format!("socketpair: {e}")))?;
        fd_room(&ep.usage, ours.as_raw_fd(), 0, limits.fd_reserve)?;
        let channel = number.unwrap_or_else(|| {
            let mut n = st.next_channel;
            while n == 0 || st.channels.contains_key(&n) {
                n = n.wrapping_add(1);
            }
            st.next_channel = n.wrapping_add(1);
            n
        });
        st.channels.insert(
            channel,
            Channel {
                session,
                sock: ours,
                _slot: slot,
            },
        );
        Ok((channel, theirs))
    }

    pub(super) fn new_id(
        &self,
        st: &mut State,
        session: u64,
        channel: u32,
        ep: Arc<Endpoint>,
        slot: Slot,
    ) -> u32 {
        let mut id = st.next_id;
        while id == 0 || st.ids.contains_key(&id) {
            id = id.wrapping_add(1);
        }
        st.next_id = id.wrapping_add(1);
        Self::insert_id(st, id, session, channel, ep, slot);
        id
    }

    /// A slot for one more CM id of `ep`, within `tenantLimits.cmIds`
    /// (ENOSPC past it).
    pub(super) fn id_slot(shared: &dyn CmHost, ep: &Arc<Endpoint>) -> Result<Slot> {
        Slot::take(&ep.usage, What::CmIds, shared.registry().limits().cm_ids)
    }

    pub(super) fn insert_id(
        st: &mut State,
        id: u32,
        session: u64,
        channel: u32,
        ep: Arc<Endpoint>,
        slot: Slot,
    ) {
        let name = ep.cfg.name.clone();
        let old = st.ids.insert(
            id,
            Id {
                session,
                channel,
                ep,
                udp: false,
                src_ip: Ipv4Addr::UNSPECIFIED,
                port: 0,
                owns_port: false,
                dst: None,
                phase: Phase::Idle,
                active: false,
                listen_id: 0,
                local: Default::default(),
                peer: None,
                peer_host: Ipv4Addr::UNSPECIFIED,
                remote: Default::default(),
                deadline: None,
                _slot: slot,
            },
        );
        if let Some(old) = old {
            st.index_id(id, Some(&old.ep.cfg.name), None);
        }
        st.index_id(id, None, Some(&name));
    }

    /// The id listening on `port` of endpoint `ep` in one port space,
    /// after closing a holder whose app has exited.
    pub(super) fn listener(
        &self,
        shared: &dyn CmHost,
        st: &mut State,
        ep: &str,
        udp: bool,
        port: u16,
    ) -> Option<u32> {
        self.reap_holder(shared, st, ep, udp, port);
        st.ports
            .get(&(ep.to_string(), udp, port))
            .copied()
            .filter(|l| st.ids.get(l).is_some_and(|i| i.phase == Phase::Listening))
    }

    /// The listener a request to device endpoint `ep`'s `port` reaches:
    /// one bound to its address, else one of its apps bound to any
    /// address on another of their devices (as a kernel listener on
    /// 0.0.0.0 hears every NIC).
    pub(super) fn listener_for(
        &self,
        shared: &dyn CmHost,
        st: &mut State,
        ep: &Endpoint,
        udp: bool,
        port: u16,
    ) -> Option<u32> {
        if let Some(l) = self.listener(shared, st, &ep.cfg.name, udp, port) {
            return Some(l);
        }
        let others = shared.registry().devices_of(ep);
        others
            .iter()
            .filter(|d| d.cfg.name != ep.cfg.name)
            .find_map(|d| {
                self.listener(shared, st, &d.cfg.name, udp, port)
                    .filter(|l| st.ids.get(l).is_some_and(|i| i.src_ip.is_unspecified()))
            })
    }

    /// Time out what waited too long; called a few times a second.
    pub fn expire(&self) {
        let now = Instant::now();
        let mut st = self.lock();
        let late: Vec<u32> = st
            .ids
            .iter()
            .filter(|(_, i)| i.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| *k)
            .collect();
        for id in late {
            if let Some(i) = st.ids.get_mut(&id) {
                i.deadline = None;
                i.step_checked(Event::Timeout);
                info!(id, "CM connection timed out");
            }
            Self::emit(
                &st,
                id,
                proto::CM_EVENT_UNREACHABLE,
                -libc::ETIMEDOUT,
                Default::default(),
            );
        }
    }
}
