//! The parts masqd is made of, shared by every thread (`Parts`): the
//! configuration, the endpoint registry and VPC map, the security groups
//! in force, the live sessions, the CM, the limits. The core, the CM and
//! the CM link never see it whole: they take it through the narrow traits
//! they define (`pipeline::ports`'s `Enforce`, `Rails`, `CmView`,
//! `Audit`, `AhFiles`, `StepTimes` and `CmSteps`, `cm::CmHost`,
//! `peer::link::PeerSink`), and so do the housekeeping threads
//! (`watch::Housekeeping`), implemented here by handing out the one part
//! each call needs; and the UD announcements between hosts, which need
//! both the sessions and the CM. The operator's side (`operator/`) changes it through
//! its methods; `daemon.rs` wires it and starts its threads.

use crate::cluster::Cluster;
use crate::cm::Cm;
use crate::config::Config;
use crate::endpoints::endpoint::Endpoint;
use crate::endpoints::registry::Registry;
use crate::enforce::admission::Admission;
use crate::enforce::audit::Admitted;
use crate::enforce::limits::Limits;
use crate::error::{from_io, refuse, Result};
use crate::kernel::host::HostDevice;
use crate::kernel::rdma_nl::RdmaNl;
use crate::kernel::uverbs;
use crate::peer::link::PeerSink;
use crate::peer::tls::LinkTls;
use crate::pipeline::ports::{
    AhFiles, Audit, CmSteps, CmView, Conntrack, Decide, Enforce, Guard, Rails, StepTimes, Vouchers,
    BACKSTOP_WAIT,
};
use crate::run::Run;
use crate::tenants::kernel::{Device, Rail};
use crate::tenants::sessions::Sessions;
use masq_proto::PeerBody;
use std::collections::{BTreeSet, HashSet};
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tracing::{info, warn};

/// Its fields are this module's: the other modules take `Parts` through
/// their traits or through the accessors below.
pub struct Parts {
    cfg: Config,
    admission: Admission,
    /// The served rails: each one's device and the kernel's QP table.
    rails: Vec<Rail>,
    /// This host's endpoints and the VPC map.
    registry: Registry,
    /// Held across an endpoint's addition or removal: one at a time.
    endpoint_ops: Mutex<()>,
    /// Held from resolving a policy against the endpoints to putting it in
    /// force: of two changes at once (an endpoint placed from the cluster,
    /// one added here), the one resolved first must not land last and put
    /// back a policy that lacks the other's endpoint (resetting its
    /// connections).
    policy_ops: Mutex<()>,
    /// The live sessions: their views, connections and uverbs files.
    sessions: Sessions,
    /// Started when, stopping or not.
    run: Run,
    /// RDMA CM ids, listeners and connections of every endpoint.
    cm: crate::cm::Cm,
    /// QPNs masqd answers for (what the audit does not flag).
    admitted: crate::enforce::audit::Admitted,
    /// Events for the Prometheus endpoint (`metrics.rs`).
    metrics: crate::metrics::Metrics,
    /// Cluster mode: the etcd store every host follows.
    cluster: Option<Arc<crate::cluster::Cluster>>,
    /// The endpoints' rdma cgroup limits and rate limits.
    limits: Limits,
    /// Mutual TLS on the CM link (cluster mode with `cluster.tls`).
    link_tls: Mutex<Option<Arc<LinkTls>>>,
    /// NetworkPolicy's tcp/udp rules to render again (pods, labels,
    /// policies or a VNI's endpoints changed): the `netpol-firewall`
    /// thread does it once for a burst of changes.
    netpol_firewall: crate::run::Coalesced,
}

impl Parts {
    pub fn new(
        cfg: Config,
        admission: Admission,
        registry: Registry,
        devices: Vec<(HostDevice, RdmaNl)>,
        cluster: Option<Arc<Cluster>>,
        rates: Option<crate::enforce::ratelimit::RateLimits>,
    ) -> Parts {
        let devices = devices
            .into_iter()
            .map(|(host, rdma)| Device::new(host, rdma))
            .collect();
        Parts::with_devices(cfg, admission, registry, devices, cluster, rates)
    }

    /// `new`, with each rail's device already made (one per rail, in the
    /// config's order).
    pub fn with_devices(
        cfg: Config,
        admission: Admission,
        registry: Registry,
        devices: Vec<Device>,
        cluster: Option<Arc<Cluster>>,
        rates: Option<crate::enforce::ratelimit::RateLimits>,
    ) -> Parts {
        let metrics = admission.metrics.clone();
        Parts {
            limits: Limits::new(&cfg, rates),
            cluster,
            registry,
            endpoint_ops: Mutex::new(()),
            policy_ops: Mutex::new(()),
            rails: cfg
                .rails
                .iter()
                .zip(devices)
                .map(|(r, device)| Rail {
                    name: r.name.clone(),
                    device,
                    underlay: r.underlay.clone(),
                })
                .collect(),
            sessions: Sessions::default(),
            // Validated when the config was read.
            run: Run::new(cfg.audit.interval().unwrap_or(Duration::from_secs(2))),
            cm: Cm::new(Duration::from_millis(cfg.cm.timeout_ms), metrics.clone()),
            admitted: Admitted::default(),
            metrics,
            admission,
            cfg,
            link_tls: Mutex::new(None),
            netpol_firewall: Default::default(),
        }
    }
}

/// The parts one by one, for the composition root (`daemon.rs`, which
/// wires them and starts the threads) and for the operator (`operator/`,
/// the layer above, whose `impl Parts` blocks add and remove endpoints and
/// put policies in force). The layers below and the housekeeping threads
/// take `Parts` through their own narrow traits instead (the module's doc
/// lists them).
impl Parts {
    /// The configuration masqd started with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Started when, stopping or not, the loops' heartbeats.
    pub fn run(&self) -> &Run {
        &self.run
    }

    /// The served rails: each one's device and the kernel's QP table.
    pub fn rails(&self) -> &[Rail] {
        &self.rails
    }

    /// This host's endpoints and the VPC map.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The security groups in force, RConntrack's table, the backstop.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// The endpoints' rdma cgroup limits and rate limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The live sessions.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The RDMA CM's ids, listeners and connections.
    pub fn cm(&self) -> &Cm {
        &self.cm
    }

    /// The QPNs masqd answers for.
    pub fn admitted(&self) -> &Admitted {
        &self.admitted
    }

    /// Events for the Prometheus endpoint.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    /// Cluster mode's etcd store.
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.as_ref()
    }

    /// Held across an endpoint's addition or removal (`endpoint_ops`):
    /// one at a time.
    pub fn endpoint_change(&self) -> MutexGuard<'_, ()> {
        crate::run::lock(&self.endpoint_ops)
    }

    /// Held from resolving a policy against the endpoints to putting it
    /// in force (`policy_ops`): one policy change at a time.
    pub fn policy_change(&self) -> MutexGuard<'_, ()> {
        crate::run::lock(&self.policy_ops)
    }

    /// The asks to render NetworkPolicy's tcp/udp rules again, which the
    /// `netpol-firewall` thread takes.
    pub fn netpol_firewall_asks(&self) -> &crate::run::Coalesced {
        &self.netpol_firewall
    }
}

impl Parts {
    /// The rail `ep`'s device is on.
    pub fn rail(&self, ep: &Endpoint) -> &Rail {
        self.rails.get(ep.rail).unwrap_or(&self.rails[0])
    }

    /// The first rail's device: what every rail's shares (one driver).
    pub fn first_device(&self) -> &HostDevice {
        &self.rails[0].device.host
    }

    /// The CM link's mutual TLS for connections made from now on.
    pub fn set_link_tls(&self, tls: LinkTls) {
        *self.link_tls.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(tls));
    }

    /// masqd's state for a metrics scrape.
    pub fn sample(&self) -> crate::metrics::Sample {
        let sessions = self.sessions.with_views(|v| v.clone());
        let tracked: Vec<(u32, std::net::Ipv4Addr)> = self
            .admission
            .table()
            .iter()
            .map(|e| (e.vni, e.local_vip))
            .collect();
        let endpoints = self
            .registry
            .local()
            .iter()
            .map(|ep| {
                let mine = || sessions.values().filter(|s| s.endpoint == ep.cfg.name);
                crate::metrics::EndpointSample {
                    name: ep.cfg.name.clone(),
                    tenant: ep.cfg.tenant.clone(),
                    sessions: mine().count(),
                    qps: mine().map(|s| s.qps.len()).sum(),
                    tracked: tracked
                        .iter()
                        .filter(|&&k| k == (ep.cfg.vni, ep.cfg.vip))
                        .count(),
                    refused_requests: ep.refused_requests.load(Ordering::Relaxed),
                    refused_connections: ep.refused_connections.load(Ordering::Relaxed),
                    audit_bypasses: ep.audit_bypasses.load(Ordering::Relaxed),
                    audit_kills: ep.audit_kills.load(Ordering::Relaxed),
                    limit_refusals: ep.usage.refusals(),
                }
            })
            .collect();
        let port_counters = self
            .rails
            .iter()
            .map(|r| {
                let dev = &r.device.host;
                let dir = Path::new("/sys/class/infiniband")
                    .join(&dev.name)
                    .join("ports")
                    .join(dev.port.to_string());
                (dev.name.clone(), crate::metrics::port_counters(&dir))
            })
            .collect();
        crate::metrics::Sample {
            endpoints,
            backstop_drops: self.admission.backstop().and_then(|b| b.counters().ok()),
            policy: self
                .admission
                .active()
                .map(|p| (p.version_hash().to_string(), p.file().to_string())),
            port_counters,
            vpc: {
                let (hosts, endpoints) = self.registry.census();
                crate::metrics::VpcSample { hosts, endpoints }
            },
            cluster: self.cluster.as_ref().map(|c| {
                let h = c.health();
                crate::metrics::ClusterSample {
                    connected: h.state == "connected",
                    since: h.since,
                    revision: h.revision,
                    certificate_not_after: c.identity().map(|id| id.not_after),
                    claim_conflicts: [
                        ("peer", self.registry.claim_conflicts()),
                        ("own", c.claim_conflicts()),
                    ],
                }
            }),
        }
    }
}

impl Enforce for Parts {
    fn registry(&self) -> &Registry {
        &self.registry
    }
    fn decide(&self) -> &dyn Decide {
        &self.admission
    }
    fn conntrack(&self) -> &dyn Conntrack {
        &self.admission
    }
    fn guard(&self) -> Option<&dyn Guard> {
        self.admission.backstop().map(|b| b as &dyn Guard)
    }
}

impl Rails for Parts {
    fn port(&self, ep: &Endpoint) -> u8 {
        self.rail(ep).device.host.port
    }
    fn rail_name(&self, ep: &Endpoint) -> &str {
        &self.rail(ep).name
    }
    fn sgid_index(&self, ep: &Endpoint, vindex: u32) -> Result<u32> {
        let rail = self.rail(ep);
        let underlay = rail.underlay.ip;
        ep.with_recent_vnic(|b| {
            vbond::translate_sgid_index(b.gids(), &rail.device.host.gids, vindex, underlay)
        })
        .map_err(|e| from_io(e, "cannot read the vNIC"))?
        .map_err(|e| refuse(e.errno(), format!("{e} (tenant {})", ep.cfg.tenant)))
    }
    fn underlay(&self, ep: &Endpoint) -> Ipv4Addr {
        self.rail(ep).underlay.ip
    }
}

impl CmView for Parts {
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
    fn ud_announce_early(&self, ep: &Endpoint, qpn: u32) {
        let hosts = vni_hosts(self, ep);
        self.cm
            .announce_ud_early(&hosts, ep.cfg.vni, ep.cfg.vip, qpn);
    }
    fn ud_sender(&self, host: Ipv4Addr, qpn: u32) -> Option<(u32, Ipv4Addr)> {
        self.cm.ud_sender(host, qpn)
    }
    fn local_sender(&self, vni: u32, qpn: u32) -> Option<Ipv4Addr> {
        local_sender(self, vni, qpn)
    }
}

impl Audit for Parts {
    fn vouchers(&self) -> &dyn Vouchers {
        &self.admitted
    }
}

impl AhFiles for Parts {
    fn destroy_ah(&self, session: u64, ah_handle: u32) -> Option<Result<()>> {
        let fd = self.sessions.fd(session);
        fd.map(|fd| uverbs::destroy_ah(fd.as_fd(), self.first_device().driver_id, ah_handle))
    }
}

impl StepTimes for Parts {
    fn rtr_step(&self, step: &'static str, took: Duration) {
        self.metrics.rtr_step(step, took);
    }
    fn cm_step(&self, step: &'static str, took: Duration) {
        self.metrics.cm_step(step, took);
    }
}

impl crate::cm::CmHost for Parts {
    fn host(&self, ep: &Endpoint) -> &HostDevice {
        &self.rail(ep).device.host
    }
    fn app_gone(&self, session: u64) -> bool {
        self.sessions.app_gone(session)
    }
    fn tracked_qp(
        &self,
        session: u64,
        ep: &crate::endpoints::endpoint::Endpoint,
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

impl crate::tenants::watch::Housekeeping for Parts {
    fn run(&self) -> &Run {
        &self.run
    }
    fn config(&self) -> &Config {
        &self.cfg
    }
    fn registry(&self) -> &Registry {
        &self.registry
    }
    fn session_pids(&self) -> HashSet<i32> {
        self.sessions
            .with_views(|v| v.values().map(|s| s.pid).collect())
    }
    fn admitted(&self) -> &Admitted {
        &self.admitted
    }
    fn cm_connected(&self, device: &str, qpn: u32) -> bool {
        self.cm.role_of(device, qpn).is_some()
    }
    fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }
    fn backstop(&self) -> Option<&crate::enforce::backstop::Backstop> {
        self.admission.backstop()
    }
    fn limits(&self) -> &Limits {
        &self.limits
    }
    fn device_name(&self, ep: &Endpoint) -> &str {
        &self.rail(ep).device.host.name
    }
}

/// The CM link delivers to the CM, with `Parts` as its host.
/// The CM's QP steps (`pipeline::cm_step`) ask the CM.
impl CmSteps for Parts {
    fn qp_attrs(
        &self,
        id: u32,
        ep: &str,
        pid: i32,
        qpn: u32,
        accept: Option<(u8, u8)>,
    ) -> Result<(u64, masq_proto::CmQpAttr, masq_proto::CmQpAttr)> {
        let same_app = |s: u64| self.sessions.pid(s) == Some(pid);
        self.cm.qp_step(self, id, ep, &same_app, qpn, accept)
    }
    fn finish(
        &self,
        cm_session: u64,
        ep: &Arc<Endpoint>,
        body: &masq_proto::RequestBody,
    ) -> Result<()> {
        self.cm.request(self, cm_session, ep, body).map(|_| ())
    }
}

impl PeerSink for Parts {
    fn deliver(&self, from: Ipv4Addr, msg: PeerBody) {
        self.cm.on_peer(self, from, msg);
    }
    fn lost(&self, host: Ipv4Addr, msg: &PeerBody) {
        if let PeerBody::UdQp(u) = msg {
            if u.up != 0 {
                self.cm.ud_acked(host, u.qpn); // nobody there to wait for
            }
        }
    }
    fn dropped(&self, host: Ipv4Addr) {
        self.metrics.peer_dropped(host);
    }
    fn hosts(&self) -> BTreeSet<Ipv4Addr> {
        self.registry.hosts().into_iter().collect()
    }
    fn stopping(&self) -> bool {
        self.run.is_stopping()
    }
    fn linked(&self, link: Arc<crate::peer::link::Link>) {
        self.cm.set_link(link);
    }
    fn timed(&self, stage: &'static str, kind: &'static str, took: std::time::Duration) {
        self.metrics.peer_message(stage, kind, took);
    }
    fn tick(&self) {
        self.cm.expire();
    }
    fn listening(&self, others: Vec<Ipv4Addr>) {
        self.cm.query_ud(others);
    }
    fn tls(&self) -> Option<Arc<LinkTls>> {
        self.link_tls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The other hosts of the endpoint's VNI.
fn vni_hosts(parts: &Parts, ep: &Endpoint) -> Vec<Ipv4Addr> {
    let me = parts.cfg.underlay.ip;
    parts
        .registry
        .vpc()
        .iter()
        .filter(|(vni, _, p)| *vni == ep.cfg.vni && p.host != me)
        .map(|(_, _, p)| p.host)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Tell the other hosts of the endpoint's VNI that its UD QP `qpn` is up
/// (at RTR, their acks awaited) or gone, so that they can name its
/// datagrams' sender.
pub(crate) fn announce(parts: &Parts, ep: &Endpoint, qpn: u32, up: bool) {
    let hosts = vni_hosts(parts, ep);
    if !up {
        for h in hosts {
            parts.cm.announce_ud(h, ep.cfg.vni, ep.cfg.vip, qpn, false);
        }
        parts.cm.forget_ud(qpn);
        return;
    }
    // The other hosts' backstops let the QP's datagrams in only once they
    // know it: its app may send right after this RTR.
    let vni = ep.cfg.vni;
    if !parts
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
fn reannounce(parts: &Parts, host: Ipv4Addr) {
    let qps: Vec<(String, u32)> = parts.sessions.with_views(|views| {
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
    let vpc = parts.registry.vpc();
    let mut n = 0;
    for (name, qpn) in qps {
        let Some(ep) = parts.registry.local_named(&name) else {
            continue;
        };
        if vpc
            .iter()
            .any(|(vni, _, p)| vni == ep.cfg.vni && p.host == host)
        {
            parts
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
fn local_sender(parts: &Parts, vni: u32, qpn: u32) -> Option<Ipv4Addr> {
    let name = parts.sessions.with_views(|views| {
        views
            .values()
            .find(|v| v.qps.values().any(|q| q.qpn == qpn && q.qp_type == "UD"))
            .map(|v| v.endpoint.clone())
    })?;
    let ep = parts.registry.local_named(&name)?;
    (ep.cfg.vni == vni).then_some(ep.cfg.vip)
}
