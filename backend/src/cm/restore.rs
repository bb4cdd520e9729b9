//! Restoring an app's CM channels and ids after a masqd restart, under
//! their old numbers, as far as masqd can check them.

use super::{fail, Cm, CmHost, Event, PeerRef, Phase, State};
use crate::endpoints::endpoint::Endpoint;
use crate::endpoints::usage::Slot;
use crate::error::Result;
use masq_proto as proto;
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use tracing::info;

impl Cm {
    /// CM_RESTORE_CHANNEL: after a masqd restart, an app's channel comes
    /// back under its old number, if that is free, with a new event socket.
    pub(super) fn restore_channel(
        st: &mut State,
        limits: &crate::config::TenantLimits,
        ep: &Arc<Endpoint>,
        session: u64,
        c: &proto::CmChannel,
    ) -> Result<(proto::ReplyBody, Option<OwnedFd>)> {
        if c.channel == 0 || st.channels.contains_key(&c.channel) {
            return fail(libc::EEXIST, format!("channel {} is in use", c.channel));
        }
        let (_, theirs) = Self::add_channel(st, limits, ep, session, Some(c.channel))?;
        Ok((proto::ReplyBody::CmRestoreChannel, Some(theirs)))
    }

    /// CM_RESTORE_ID: after a masqd restart, an app's id comes back under
    /// its old number as far as masqd can check it: a bound or listening
    /// id takes its port again if it is free; a connected one must be the
    /// connection RConntrack tracks again for the app's own QP (`tracked`,
    /// restored by RESYNC_QP, which libmasq sends first), towards the
    /// address and QP it claims.
    pub(super) fn restore_id(
        &self,
        shared: &dyn CmHost,
        st: &mut State,
        session: u64,
        ep: &Arc<Endpoint>,
        r: &proto::CmRestoreIdReq,
        tracked: Option<(Ipv4Addr, u32)>,
    ) -> Result<()> {
        if r.id == 0 || st.ids.contains_key(&r.id) {
            return fail(libc::EEXIST, format!("CM id {} is in use", r.id));
        }
        Self::own_channel(st, session, r.channel)?;
        Self::id_room(st, session)?;
        let slot = Self::id_slot(shared, ep)?;
        if r.state == proto::CM_RESTORE_LISTENING && r.addrs.src.port == 0 {
            return fail(libc::EINVAL, "a listening id has a port");
        }
        if r.state != proto::CM_RESTORE_CONNECTED {
            return self.restore_unconnected(shared, st, session, ep, r, slot);
        }
        Self::restore_connected(shared, st, session, ep, r, slot, tracked)
    }

    /// A bound, listening or pending id (CM_RESTORE_ID): its port again,
    /// and for a pending one CONNECT_ERROR.
    fn restore_unconnected(
        &self,
        shared: &dyn CmHost,
        st: &mut State,
        session: u64,
        ep: &Arc<Endpoint>,
        r: &proto::CmRestoreIdReq,
        slot: Slot,
    ) -> Result<()> {
        let src = (Ipv4Addr::from(r.addrs.src.addr), r.addrs.src.port);
        let pending = r.state == proto::CM_RESTORE_PENDING;
        Self::insert_id(st, r.id, session, r.channel, ep.clone(), slot);
        if let Some(i) = st.ids.get_mut(&r.id) {
            i.udp = r.port_space == proto::CM_PS_UDP;
        }
        // A passive id's port is its listener's.
        let own_port = src.1 != 0 && !(pending && r.active == 0);
        if own_port {
            if let Err(e) = self.bind(shared, st, r.id, src.0, src.1) {
                st.remove_id(r.id);
                return Err(e);
            }
        }
        let ev = match r.state {
            proto::CM_RESTORE_LISTENING => Event::RestoreListening,
            proto::CM_RESTORE_PENDING => Event::RestorePending,
            _ => Event::RestoreBound,
        };
        let phase = match st.ids.get_mut(&r.id) {
            Some(i) => {
                i.step_checked(ev);
                i.phase
            }
            None => Phase::Idle,
        };
        info!(id = r.id, "CM id restored: {}:{} ({phase:?})", src.0, src.1);
        if pending {
            // Its handshake died with the masqd that carried it.
            Self::emit(
                st,
                r.id,
                proto::CM_EVENT_CONNECT_ERROR,
                -libc::ECONNRESET,
                Default::default(),
            );
        }
        Ok(())
    }

    /// A connected id (CM_RESTORE_ID): only the connection RConntrack
    /// tracks for the app's QP (`tracked`), from this endpoint's vIP to an
    /// address of its VNI.
    fn restore_connected(
        shared: &dyn CmHost,
        st: &mut State,
        session: u64,
        ep: &Arc<Endpoint>,
        r: &proto::CmRestoreIdReq,
        slot: Slot,
        tracked: Option<(Ipv4Addr, u32)>,
    ) -> Result<()> {
        let src = (Ipv4Addr::from(r.addrs.src.addr), r.addrs.src.port);
        let dst = (Ipv4Addr::from(r.addrs.dst.addr), r.addrs.dst.port);
        let peer_host = Self::check_connected(shared, ep, r, tracked)?;
        let active = r.active == 1;
        if active {
            // The active side holds its own port; a passive one shares its listener's.
            let key = (ep.cfg.name.clone(), false, src.1);
            if st.ports.contains_key(&key) {
                return fail(libc::EADDRINUSE, format!("port {} is in use", src.1));
            }
            st.ports.insert(key, r.id);
        }
        Self::insert_id(st, r.id, session, r.channel, ep.clone(), slot);
        if let Some(i) = st.ids.get_mut(&r.id) {
            i.src_ip = ep.cfg.vip;
            i.port = src.1;
            i.owns_port = active;
            i.dst = Some(dst);
            i.step_checked(Event::RestoreConnected);
            i.active = active;
            i.local.qp_num = r.qp_num;
            i.remote.qp_num = r.remote_qpn;
            // The peer's id number is not known here any more (see Dreq).
            i.peer = Some(PeerRef {
                host: peer_host,
                id: 0,
            });
            i.peer_host = peer_host;
        }
        info!(
            id = r.id,
            qpn = r.qp_num,
            "CM connection restored: {}:{} -> {}:{} ({})",
            src.0,
            src.1,
            dst.0,
            dst.1,
            if active { "active" } else { "passive" }
        );
        Ok(())
    }

    /// What a connected id claims, checked: a port, connected mode, this
    /// endpoint's vIP, a peer in its VNI's map, and the connection
    /// RConntrack tracks for its QP (`tracked`). The peer's host.
    fn check_connected(
        shared: &dyn CmHost,
        ep: &Endpoint,
        r: &proto::CmRestoreIdReq,
        tracked: Option<(Ipv4Addr, u32)>,
    ) -> Result<Ipv4Addr> {
        let src = (Ipv4Addr::from(r.addrs.src.addr), r.addrs.src.port);
        let dst = Ipv4Addr::from(r.addrs.dst.addr);
        let udp = r.port_space == proto::CM_PS_UDP;
        if src.1 == 0 {
            return fail(libc::EINVAL, "a connected id has a port");
        }
        if udp {
            // A UD id keeps no connection: the frontend restores it as bound.
            return fail(libc::EINVAL, "a UD id is never restored as connected");
        }
        if src.0 != ep.cfg.vip && src.0 != Ipv4Addr::UNSPECIFIED {
            return fail(
                libc::EADDRNOTAVAIL,
                format!("{} is not this endpoint's address ({})", src.0, ep.cfg.vip),
            );
        }
        let Some(peer_host) = shared
            .registry()
            .vpc()
            .lookup(ep.cfg.vni, dst)
            .map(|p| p.host)
        else {
            return fail(
                libc::EHOSTUNREACH,
                format!("{} is not in VNI {}'s map", dst, ep.cfg.vni),
            );
        };
        match tracked {
            // Not (yet) re-registered by the app's verbs session.
            None => {
                return fail(
                    libc::EAGAIN,
                    format!("QP {:#x} is not tracked for this app", r.qp_num),
                )
            }
            Some(t) if t != (dst, r.remote_qpn) => {
                return fail(
                    libc::EPERM,
                    format!(
                        "QP {:#x} is connected to {} QP {:#x}, not {} QP {:#x}",
                        r.qp_num, t.0, t.1, dst, r.remote_qpn
                    ),
                )
            }
            Some(_) => {}
        }
        Ok(peer_host)
    }
}
