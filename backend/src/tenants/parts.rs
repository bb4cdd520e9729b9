//! `Shared` as the host the verbs pipelines (`pipeline::ports::QpHost`)
//! and the CM (`cm::CmHost`) are written against, as the CM link's sink
//! (`peer::link::PeerSink`), and the UD announcements that need both the
//! sessions and the CM. Kept apart from `state.rs` so that the daemon's
//! state does not depend on the pipelines nor they on it; it becomes the
//! plan's `Parts` once `Shared` is dissolved.

use crate::cluster::endpoint::Endpoint;
use crate::cluster::registry::Registry;
use crate::enforce::admission::Admission;
use crate::error::{from_io, refuse, Refusal};
use crate::kernel::host::HostDevice;
use crate::kernel::uverbs;
use crate::peer::link::PeerSink;
use crate::peer::msg::PeerMsg;
use crate::pipeline::ports::{Conntrack, Decide, Guard, QpHost, Vouchers, BACKSTOP_WAIT};
use crate::state::Shared;
use std::collections::BTreeSet;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::sync::mpsc;
use tracing::{info, warn};

impl QpHost for Shared {
    fn decide(&self) -> &dyn Decide {
        &self.admission
    }
    fn conntrack(&self) -> &dyn Conntrack {
        &self.admission
    }
    fn registry(&self) -> &Registry {
        &self.registry
    }
    fn vouchers(&self) -> &dyn Vouchers {
        &self.admitted
    }
    fn guard(&self) -> Option<&dyn Guard> {
        self.admission.backstop().map(|b| b as &dyn Guard)
    }
    fn port(&self) -> u8 {
        self.device.host.port
    }
    fn sgid_index(&self, ep: &Endpoint, vindex: u32) -> Result<u32, Refusal> {
        let underlay = self.cfg.underlay.ip;
        ep.with_vnic(|b| {
            vbond::translate_sgid_index(b.gids(), &self.device.host.gids, vindex, underlay)
        })
        .map_err(|e| from_io(e, "cannot read the vNIC"))?
        .map_err(|e| refuse(e.errno(), format!("{e} (tenant {})", ep.cfg.tenant)))
    }
    fn cm_side(&self, ep: &Endpoint, qpn: u32) -> Option<rconntrack::CmSide> {
        self.cm
            .role_of(&ep.cfg.name, qpn)
            .map(|r| rconntrack::CmSide {
                active: r.active,
                local_port: r.local_port,
                remote_port: r.remote_port,
            })
    }
    fn ud_announce(&self, ep: &Endpoint, qpn: u32, up: bool) {
        announce(self, ep, qpn, up);
    }
    fn underlay(&self) -> Ipv4Addr {
        self.cfg.underlay.ip
    }
    fn ud_sender(&self, host: Ipv4Addr, qpn: u32) -> Option<(u32, Ipv4Addr)> {
        self.cm.ud_sender(host, qpn)
    }
    fn local_sender(&self, vni: u32, qpn: u32) -> Option<Ipv4Addr> {
        local_sender(self, vni, qpn)
    }
    fn destroy_ah(&self, session: u64, ah_handle: u32) -> Option<io::Result<()>> {
        let fd = self.sessions.fd(session);
        fd.map(|fd| uverbs::destroy_ah(fd.as_fd(), self.device.host.driver_id, ah_handle))
    }
}

impl crate::cm::CmHost for Shared {
    fn registry(&self) -> &Registry {
        &self.registry
    }
    fn admission(&self) -> &Admission {
        &self.admission
    }
    fn host(&self) -> &HostDevice {
        &self.device.host
    }
    fn app_gone(&self, session: u64) -> bool {
        self.sessions.app_gone(session)
    }
    fn tracked_qp(
        &self,
        session: u64,
        ep: &crate::cluster::endpoint::Endpoint,
        qpn: u32,
    ) -> Option<(std::net::Ipv4Addr, u32)> {
        let pid_of = |s: u64| self.sessions.pid(s);
        let pid = pid_of(session)?;
        let (owner, remote) = {
            let table = self.admission.table();
            let e = table
                .iter()
                .find(|e| e.local_qpn == qpn && e.vni == ep.cfg.vni && e.local_vip == ep.cfg.vip)?;
            (e.session, (e.remote_vip, e.remote_qpn))
        };
        (pid_of(owner)? == pid).then_some(remote)
    }
    fn reannounce_ud(&self, host: std::net::Ipv4Addr) {
        reannounce(self, host);
    }
}

/// The CM link delivers to the CM, with `Shared` as its host.
impl PeerSink for Shared {
    fn deliver(&self, from: Ipv4Addr, msg: PeerMsg) {
        self.cm.on_peer(self, from, msg);
    }
    fn lost(&self, host: Ipv4Addr, msg: &PeerMsg) {
        if let PeerMsg::UdQp { qpn, up: true, .. } = *msg {
            self.cm.ud_acked(host, qpn); // nobody there to wait for
        }
    }
    fn hosts(&self) -> BTreeSet<Ipv4Addr> {
        self.registry.hosts().into_iter().collect()
    }
    fn stopping(&self) -> bool {
        self.run.is_stopping()
    }
    fn linked(&self, tx: mpsc::Sender<(Ipv4Addr, PeerMsg)>) {
        self.cm.set_link(tx);
    }
    fn tick(&self) {
        self.cm.expire();
    }
    fn listening(&self, others: Vec<Ipv4Addr>) {
        self.cm.query_ud(others);
    }
}

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
        .announce_ud_up(&hosts, vni, ep.cfg.vip, qpn, BACKSTOP_WAIT)
    {
        warn!(
            qpn,
            "UD QP not confirmed by every host of VNI {vni} in time; its first datagrams there may be dropped"
        );
    }
}

/// Another host's masqd (re)started and forgot this host's UD QPs: name
/// them to it again, those of the VNIs it serves.
fn reannounce(shared: &Shared, host: Ipv4Addr) {
    let qps: Vec<(String, u32)> = shared.sessions.with_views(|views| {
        views
            .values()
            .flat_map(|v| {
                v.qps
                    .values()
                    .filter(|q| q.qp_type == "UD")
                    .map(|q| (v.endpoint.clone(), q.qpn))
            })
            .collect()
    });
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

/// The vIP of the endpoint in `vni` on this host whose app holds UD QP
/// `qpn`, from the sessions' QP records.
fn local_sender(shared: &Shared, vni: u32, qpn: u32) -> Option<Ipv4Addr> {
    let name = shared.sessions.with_views(|views| {
        views
            .values()
            .find(|v| v.qps.values().any(|q| q.qpn == qpn && q.qp_type == "UD"))
            .map(|v| v.endpoint.clone())
    })?;
    let ep = shared.registry.local_named(&name)?;
    (ep.cfg.vni == vni).then_some(ep.cfg.vip)
}
