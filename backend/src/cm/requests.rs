//! The apps' CM requests: the `request` dispatch (a function per request;
//! those that make and end channels and ids are in `ids`, UD's accept in
//! `ud`, restore's in `restore`), address and route resolution, listen,
//! connect, accept, reject, disconnect and establish, and what the verbs
//! pipeline asks of the CM (the QP step and the role of a QP).

use super::attrs::peer_params;
use super::{fail, random_u32, Cm, CmHost, Event, Id, Phase, Role, State};
use crate::admit::{Ask, Conn};
use crate::endpoints::endpoint::Endpoint;
use crate::error::{refuse, Result};
use crate::kernel::ibv::*;
use masq_policy::netpol::PortSpace;
use masq_proto::{self as proto, PeerBody};
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Instant;
use tracing::{debug, info, warn};

impl Cm {
    /// Serve one CM request from a session of endpoint `ep`.
    pub fn request(
        &self,
        shared: &dyn CmHost,
        session: u64,
        ep: &Arc<Endpoint>,
        body: &proto::RequestBody,
    ) -> Result<(proto::ReplyBody, Option<OwnedFd>)> {
        use proto::RequestBody as R;
        // Looked up before the CM's lock: the table is not taken under it.
        let tracked = match body {
            R::CmRestoreId(r) if r.state == proto::CM_RESTORE_CONNECTED => {
                shared.tracked_qp(session, ep, r.qp_num)
            }
            _ => None,
        };
        let mut st = self.lock();
        let st = &mut *st;
        let reply = match body {
            R::CmRestoreChannel(c) => {
                return Self::restore_channel(st, shared.registry().limits(), ep, session, c)
            }
            R::CmCreateChannel => return Self::create_channel(shared, st, session, ep),
            R::CmRestoreId(r) => {
                self.restore_id(shared, st, session, ep, r, tracked)?;
                proto::ReplyBody::CmRestoreId
            }
            R::CmDestroyChannel(c) => self.destroy_channel(st, session, c.channel)?,
            R::CmCreateId(c) => self.create_id(shared, st, session, ep, c)?,
            R::CmDestroyId(c) => self.destroy_id(st, session, c.id)?,
            R::CmMigrateId(m) => Self::migrate_id(st, session, m)?,
            R::CmBindAddr(b) => self.bind_addr(shared, st, session, b)?,
            R::CmResolveAddr(r) => {
                self.resolve_addr(shared, st, session, r)?;
                proto::ReplyBody::CmResolveAddr(Self::own(st, session, r.id)?.addrs())
            }
            R::CmResolveRoute(c) => Self::resolve_route(shared, st, session, c.id)?,
            R::CmListen(l) => self.listen(shared, st, session, l.id)?,
            R::CmConnect(c) => {
                self.connect(shared, st, session, c)?;
                proto::ReplyBody::CmConnect
            }
            R::CmAccept(c) => {
                if Self::own(st, session, c.id)?.udp {
                    self.accept_ud(st, session, c)?;
                } else {
                    self.accept(shared, st, session, c)?;
                }
                proto::ReplyBody::CmAccept
            }
            R::CmReject(r) => self.reject(st, session, r)?,
            R::CmDisconnect(c) => self.disconnect(st, session, c.id)?,
            R::CmInitQpAttr(q) => {
                let i = Self::own(st, session, q.id)?;
                proto::ReplyBody::CmInitQpAttr(Self::qp_attr(shared, i, q.qp_state)?)
            }
            R::CmEstablish(c) => self.establish(st, session, c.id)?,
            _ => return fail(libc::EPROTO, "not a CM request"),
        };
        Ok((reply, None))
    }

    fn resolve_route(
        shared: &dyn CmHost,
        st: &mut State,
        session: u64,
        id: u32,
    ) -> Result<proto::ReplyBody> {
        let i = Self::own(st, session, id)?;
        i.step(Event::ResolveRoute)
            .map_err(|_| refuse(libc::EINVAL, "route before address resolution"))?;
        Self::emit_with_qp_attrs(
            shared,
            st,
            id,
            proto::CM_EVENT_ROUTE_RESOLVED,
            Default::default(),
        );
        Ok(proto::ReplyBody::CmResolveRoute)
    }

    /// rdma_listen: an unbound id takes an ephemeral port first.
    fn listen(
        &self,
        shared: &dyn CmHost,
        st: &mut State,
        session: u64,
        id: u32,
    ) -> Result<proto::ReplyBody> {
        let busy = || refuse(libc::EINVAL, "listen on a connected id");
        let (port, may) = {
            let i = Self::own(st, session, id)?;
            (i.port, i.may(Event::Listen))
        };
        if !may {
            return Err(busy());
        }
        if port == 0 {
            self.bind(shared, st, id, Ipv4Addr::UNSPECIFIED, 0)?;
        }
        let i = Self::own(st, session, id)?;
        i.step(Event::Listen).map_err(|_| busy())?;
        info!(port = i.port, "CM listening on {}:{}", i.src_ip, i.port);
        Ok(proto::ReplyBody::CmListen)
    }

    /// rdma_reject of a connection request, or of a connect response: a
    /// REJ (for a UD id, a SIDR REP saying REJECT) to the peer.
    fn reject(
        &self,
        st: &mut State,
        session: u64,
        r: &proto::CmRejectReq,
    ) -> Result<proto::ReplyBody> {
        let i = Self::own_at(
            st,
            session,
            r.id,
            Event::Reject,
            "reject without a pending connection",
        )?;
        let p = i.peer.ok_or_else(|| refuse(libc::EINVAL, "no peer"))?;
        i.step_checked(Event::Reject);
        if i.udp {
            let mut data = r.private_data.clone();
            data.truncate(proto::CM_SIDR_REP_PRIVATE_DATA);
            self.send(p.host, Self::sidr_rep(p.id, proto::CM_SIDR_REJECT, data));
            return Ok(proto::ReplyBody::CmReject);
        }
        self.send(
            p.host,
            PeerBody::Rej(proto::PeerRej {
                to_id: p.id,
                from_id: r.id,
                reason: proto::CM_REJ_CONSUMER_DEFINED,
                private_data: r.private_data.clone(),
            }),
        );
        Ok(proto::ReplyBody::CmReject)
    }

    /// rdma_disconnect: a DREQ to the peer and DISCONNECTED to the app,
    /// or, after the peer's DREQ, nothing more.
    fn disconnect(&self, st: &mut State, session: u64, id: u32) -> Result<proto::ReplyBody> {
        let i = Self::own(st, session, id)?;
        if i.udp {
            return fail(libc::EINVAL, "a UD id has no connection to end");
        }
        let was = i.phase;
        i.step(Event::Disconnect)
            .map_err(|_| refuse(libc::EINVAL, "disconnect without a connection"))?;
        // An accept's clock (RepSent) ends with its connection.
        i.deadline = None;
        // The peer's DREQ came first: answering it is all.
        if was != Phase::PeerClosed {
            if let Some(p) = i.peer {
                self.send(
                    p.host,
                    PeerBody::Dreq(proto::PeerDreq {
                        to_id: p.id,
                        from_id: id,
                        from_qpn: i.local.qp_num,
                    }),
                );
            }
            Self::emit(st, id, proto::CM_EVENT_DISCONNECTED, 0, Default::default());
        }
        Ok(proto::ReplyBody::CmDisconnect)
    }

    /// rdma_establish (the active side's QP is at RTS): an RTU to the peer.
    fn establish(&self, st: &mut State, session: u64, id: u32) -> Result<proto::ReplyBody> {
        let i = Self::own_at(
            st,
            session,
            id,
            Event::Establish,
            "establish without a connect response",
        )?;
        let p = i.peer.ok_or_else(|| refuse(libc::EINVAL, "no peer"))?;
        i.step_checked(Event::Establish);
        info!(
            qpn = i.local.qp_num,
            "CM connection established: {} (active)",
            i.ends("->")
        );
        self.send(
            p.host,
            PeerBody::Rtu(proto::PeerRtu {
                to_id: p.id,
                from_id: id,
            }),
        );
        Ok(proto::ReplyBody::CmEstablish)
    }

    /// The vIP of the app's device (of `ep`'s apps) whose rail reaches
    /// `dst`'s, its own rail first; unspecified (the id's endpoint) when
    /// the app has one device or none reaches it.
    fn source_for(shared: &dyn CmHost, ep: &Endpoint, dst: Ipv4Addr) -> Ipv4Addr {
        let devices = shared.registry().devices_of(ep);
        let vpc = shared.registry().vpc();
        let Some(peer) = vpc.lookup(ep.cfg.vni, dst).filter(|_| devices.len() > 1) else {
            return Ipv4Addr::UNSPECIFIED;
        };
        let rail = |d: &Endpoint| shared.registry().rail_name(d.rail).to_string();
        let on = |same: bool| {
            devices.iter().find(|d| {
                d.cfg.vni == ep.cfg.vni
                    && (rail(d) == peer.rail) == same
                    && vpc.rails_meet(&rail(d), &peer.rail)
            })
        };
        on(true)
            .or_else(|| on(false))
            .map_or(Ipv4Addr::UNSPECIFIED, |d| d.cfg.vip)
    }

    fn resolve_addr(
        &self,
        shared: &dyn CmHost,
        st: &mut State,
        session: u64,
        r: &proto::CmResolveAddrReq,
    ) -> Result<()> {
        let busy = || refuse(libc::EINVAL, "address resolution on a busy id");
        let (port, may) = {
            let i = Self::own(st, session, r.id)?;
            (i.port, i.may(Event::ResolveAddr))
        };
        if !may {
            return Err(busy());
        }
        let dst = Ipv4Addr::from(r.dst.addr);
        if port == 0 {
            let src = if r.has_src == 1 {
                Ipv4Addr::from(r.src.addr)
            } else {
                // The app's device on the destination's rail, as the
                // kernel routes an unbound id out of the matching NIC.
                Self::source_for(shared, &Self::own(st, session, r.id)?.ep, dst)
            };
            let want = if r.has_src == 1 { r.src.port } else { 0 };
            self.bind(shared, st, r.id, src, want)?;
        }
        let i = Self::own(st, session, r.id)?;
        let (vni, vip) = (i.ep.cfg.vni, i.ep.cfg.vip);
        i.src_ip = vip;
        i.dst = Some((dst, r.dst.port));
        let peer_host = shared.registry().vpc().lookup(vni, dst).map(|p| p.host);
        match peer_host {
            Some(host) => {
                i.step(Event::ResolveAddr).map_err(|_| busy())?;
                i.peer_host = host;
                Self::emit(
                    st,
                    r.id,
                    proto::CM_EVENT_ADDR_RESOLVED,
                    0,
                    Default::default(),
                );
            }
            None => {
                debug!(%dst, vni, "CM address not in the VPC");
                Self::emit(
                    st,
                    r.id,
                    proto::CM_EVENT_ADDR_ERROR,
                    -libc::EHOSTUNREACH,
                    Default::default(),
                );
            }
        }
        Ok(())
    }

    /// rdma_connect: a REQ, or for a UD id a SIDR REQ asking the listener
    /// at the destination for its QP (the id's own QP plays no part).
    /// Either is admitted here first; a denied one is dropped, as a
    /// firewall drops it: the app times out (UNREACHABLE, ETIMEDOUT), as
    /// it does when nothing answers in the kernel's CM.
    fn connect(
        &self,
        shared: &dyn CmHost,
        st: &mut State,
        session: u64,
        c: &proto::CmConnectReq,
    ) -> Result<()> {
        let timeout = self.timeout;
        let i = Self::own_at(
            st,
            session,
            c.id,
            Event::Connect,
            "connect before route resolution",
        )?;
        let (max_pdata, what) = if i.udp {
            (proto::CM_SIDR_REQ_PRIVATE_DATA, "CM UD query")
        } else {
            (proto::CM_REQ_PRIVATE_DATA, "CM connect")
        };
        if c.param.private_data.len() > max_pdata {
            return fail(
                libc::EINVAL,
                format!("more than {max_pdata} bytes of private data"),
            );
        }
        if c.param.qp_num == 0 && !i.udp {
            return fail(libc::EINVAL, "connect without a QP number");
        }
        let Some((dst, dst_port)) = i.dst else {
            return fail(libc::EINVAL, "no destination");
        };
        i.local = peer_params(&c.param, random_u32() & 0xFF_FFFF);
        i.step_checked(Event::Connect);
        i.active = true;
        i.deadline = Some(Instant::now() + timeout);
        let cfg = &i.ep.cfg;
        let conn = Conn::Cm {
            outbound: true,
            space: if i.udp {
                PortSpace::Udp
            } else {
                PortSpace::Tcp
            },
            port: dst_port,
        };
        let ask = Ask::from_endpoint(cfg, dst, conn);
        let rule = match shared.decide().decide(&ask, shared.registry()) {
            Ok(rule) => rule,
            Err(why) => {
                warn!(
                    "{what} {}:{} -> {dst}:{dst_port} denied by {}: {why}",
                    cfg.vip, i.port, why.by
                );
                return Ok(());
            }
        };
        info!(qpn = c.param.qp_num, %rule, "{what} {}:{} -> {dst}:{dst_port}", cfg.vip, i.port);
        let msg = if i.udp {
            PeerBody::SidrReq(proto::PeerSidrReq {
                from_id: c.id,
                vni: cfg.vni,
                src: proto::CmAddr::v4(cfg.vip, i.port),
                dst: proto::CmAddr::v4(dst, dst_port),
                private_data: c.param.private_data.clone(),
            })
        } else {
            PeerBody::Req(proto::PeerReq {
                from_id: c.id,
                vni: cfg.vni,
                src: proto::CmAddr::v4(cfg.vip, i.port),
                dst: proto::CmAddr::v4(dst, dst_port),
                params: i.local.clone(),
                private_data: c.param.private_data.clone(),
            })
        };
        self.send(i.peer_host, msg);
        Ok(())
    }

    /// The opening of an accept, RC or UD: the app's id, with a request
    /// to answer, and the QP that answers it.
    pub(super) fn accepting<'a>(
        st: &'a mut State,
        session: u64,
        c: &proto::CmConnectReq,
    ) -> Result<&'a mut Id> {
        let i = Self::own_at(
            st,
            session,
            c.id,
            Event::Accept,
            "accept without a connect request",
        )?;
        if c.param.qp_num == 0 {
            return fail(libc::EINVAL, "accept without a QP number");
        }
        Ok(i)
    }

    fn accept(
        &self,
        shared: &dyn CmHost,
        st: &mut State,
        session: u64,
        c: &proto::CmConnectReq,
    ) -> Result<()> {
        let timeout = self.timeout;
        let i = Self::accepting(st, session, c)?;
        let p = i.peer.ok_or_else(|| refuse(libc::EINVAL, "no peer"))?;
        i.step_checked(Event::Accept);
        let psn = i.local.psn;
        i.local = peer_params(&c.param, psn);
        i.deadline = Some(Instant::now() + timeout);
        // The QP reached RTR (and was admitted) before the app called
        // accept, when its number was not known here yet: mark it now.
        let lk = rconntrack::LocalKey {
            vni: i.ep.cfg.vni,
            vip: i.ep.cfg.vip,
            qpn: c.param.qp_num,
        };
        let side = rconntrack::CmSide {
            active: false,
            local_port: i.port,
            remote_port: i.dst.map_or(0, |d| d.1),
        };
        shared.conntrack().set_cm(lk, side);
        self.send(
            p.host,
            PeerBody::Rep(proto::PeerRep {
                to_id: p.id,
                from_id: c.id,
                params: i.local.clone(),
                private_data: c.param.private_data.clone(),
            }),
        );
        Ok(())
    }

    /// What CM_ACCEPT_QP (`accept`: the depths the app accepted with) and
    /// CM_ESTABLISH_QP need of id: its CM session, for the accept or
    /// establish that follows, and the RTR and RTS attributes to move its
    /// QP with. The id must be in endpoint `ep`, on a CM session that
    /// `same_app` says is the caller's process, and at the step: a
    /// connection request to accept, or a response to establish for the
    /// QP `qpn` that connected.
    pub fn qp_step(
        &self,
        shared: &dyn CmHost,
        id: u32,
        ep: &str,
        same_app: &dyn Fn(u64) -> bool,
        qpn: u32,
        accept: Option<(u8, u8)>,
    ) -> Result<(u64, proto::CmQpAttr, proto::CmQpAttr)> {
        let st = self.lock();
        let i = match st.ids.get(&id) {
            Some(i) if i.ep.cfg.name == ep && same_app(i.session) => i,
            _ => return fail(libc::ENOENT, format!("no CM id {id} of this app")),
        };
        if i.udp {
            return fail(libc::EINVAL, format!("CM id {id} is a UD id: no QP step"));
        }
        let want = if accept.is_some() {
            Phase::ReqReceived
        } else {
            Phase::RepReceived
        };
        if i.phase != want {
            return fail(
                libc::EINVAL,
                format!("CM id {id} is {:?}, not {want:?}", i.phase),
            );
        }
        if accept.is_none() && i.local.qp_num != qpn {
            return fail(
                libc::EINVAL,
                format!(
                    "CM id {id} connected QP {:#x}, not {qpn:#x}",
                    i.local.qp_num
                ),
            );
        }
        let mut rtr = Self::qp_attr(shared, i, u32::from(IBV_QPS_RTR))?;
        let mut rts = Self::qp_attr(shared, i, u32::from(IBV_QPS_RTS))?;
        if let Some((resp_res, init_depth)) = accept {
            rtr.attr.max_dest_rd_atomic = resp_res;
            rts.attr.max_rd_atomic = init_depth;
        }
        Ok((i.session, rtr, rts))
    }

    /// The CM role of a QP whose connection this endpoint set up through
    /// the CM, for its RConntrack entry.
    pub fn role_of(&self, endpoint: &str, qpn: u32) -> Option<Role> {
        let st = self.lock();
        st.ids_of
            .get(endpoint)?
            .iter()
            .filter_map(|id| st.ids.get(id))
            .find(|i| {
                !i.udp
                    && i.ep.cfg.name == endpoint
                    && i.local.qp_num == qpn
                    && i.connected_or_connecting()
            })
            .map(|i| Role {
                active: i.active,
                local_port: i.port,
                remote_port: i.dst.map_or(0, |d| d.1),
            })
    }
}
