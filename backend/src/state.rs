//! The daemon's state, shared by every thread: the configuration, the
//! endpoint registry and VPC map, the security groups in force, the live
//! sessions and the CM. Sources (the config file, `masqctl`, the cluster)
//! change it through its methods; `daemon.rs` starts and stops it.

use crate::cluster::registry::Registry;
use crate::cluster::Cluster;
use crate::cm::Cm;
use crate::config::Config;
use crate::enforce::admission::Admission;
use crate::enforce::audit::Admitted;
use crate::enforce::limits::Limits;
use crate::kernel::host::HostDevice;
use crate::kernel::rdma_nl::RdmaNl;
use crate::run::Run;
use crate::tenants::kernel::Device;
use crate::tenants::sessions::Sessions;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Shared {
    pub cfg: Config,
    pub admission: Admission,
    /// The served device and the kernel's QP table.
    pub device: Device,
    /// This host's endpoints and the VPC map.
    pub registry: Registry,
    /// Held across an endpoint's addition or removal: one at a time.
    pub(crate) endpoint_ops: Mutex<()>,
    /// Held from resolving a policy against the endpoints to putting it in
    /// force: of two changes at once (an endpoint placed from the cluster,
    /// one added here), the one resolved first must not land last and put
    /// back a policy that lacks the other's endpoint (resetting its
    /// connections).
    pub(crate) policy_ops: Mutex<()>,
    /// The live sessions: their views, connections and uverbs files.
    pub sessions: Sessions,
    /// Started when, stopping or not.
    pub run: Run,
    /// RDMA CM ids, listeners and connections of every endpoint.
    pub cm: crate::cm::Cm,
    /// QPNs masqd answers for (what the audit does not flag).
    pub admitted: crate::enforce::audit::Admitted,
    /// Events for the Prometheus endpoint (`metrics.rs`).
    pub metrics: crate::metrics::Metrics,
    /// Cluster mode: the etcd store every host follows.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    /// The endpoints' rdma cgroup limits and rate limits.
    pub limits: Limits,
}

impl Shared {
    pub fn new(
        cfg: Config,
        admission: Admission,
        registry: Registry,
        host: HostDevice,
        rdma: RdmaNl,
        cluster: Option<Arc<Cluster>>,
        rates: Option<crate::enforce::ratelimit::RateLimits>,
    ) -> Shared {
        let metrics = admission.metrics.clone();
        Shared {
            limits: Limits::new(&cfg, rates),
            cluster,
            registry,
            endpoint_ops: Mutex::new(()),
            policy_ops: Mutex::new(()),
            device: Device::new(host, rdma),
            sessions: Sessions::default(),
            // Validated when the config was read.
            run: Run::new(cfg.audit.interval().unwrap_or(Duration::from_secs(2))),
            cm: Cm::new(Duration::from_millis(cfg.cm.timeout_ms), metrics.clone()),
            admitted: Admitted::default(),
            metrics,
            admission,
            cfg,
        }
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
                }
            })
            .collect();
        let port_dir = Path::new("/sys/class/infiniband")
            .join(&self.device.host.name)
            .join("ports")
            .join(self.device.host.port.to_string());
        crate::metrics::Sample {
            endpoints,
            backstop_drops: self.admission.backstop().and_then(|b| b.counters().ok()),
            policy: self
                .admission
                .active()
                .map(|p| (p.version_hash().to_string(), p.file().to_string())),
            port_counters: crate::metrics::port_counters(&port_dir),
        }
    }
}
