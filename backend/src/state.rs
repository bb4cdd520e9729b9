//! The daemon's state, shared by every thread: the configuration, the
//! endpoint registry and VPC map, the security groups in force, the live
//! sessions and the CM. Sources (the config file, `masqctl`, the cluster)
//! change it through its methods; `daemon.rs` starts and stops it.

use crate::cluster::endpoint::Endpoint;
use crate::cluster::registry::Registry;
use crate::cluster::Cluster;
use crate::cm::Cm;
use crate::config::Config;
use crate::enforce::admission::Admission;
use crate::enforce::audit::Admitted;
use crate::enforce::rdma_cgroup::{Applied, Cgroups};
use crate::kernel::host::HostDevice;
use crate::kernel::rdma_nl::RdmaNl;
use crate::records::QpRecord;
use crate::run::{lock, Run};
use crate::transport::seqpacket::Conn;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// What the control socket shows of a live session.
#[derive(Clone)]
pub struct SessionView {
    pub endpoint: String,
    pub tenant: String,
    pub pid: i32,
    pub app: String,
    pub started: u64,
    /// Requests received: flat while an app only posts and polls.
    pub requests: u64,
    pub qps: BTreeMap<u32, QpRecord>,
}

pub struct Shared {
    pub cfg: Config,
    pub admission: Admission,
    /// Each session's uverbs file, so policy can reset its QPs.
    pub(crate) fds: Mutex<BTreeMap<u64, Arc<OwnedFd>>>,
    pub host: HostDevice,
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
    pub(crate) sessions: Mutex<BTreeMap<u64, SessionView>>,
    pub(crate) conns: Mutex<BTreeMap<u64, Conn>>,
    next_session: AtomicU64,
    /// Started when, stopping or not.
    pub run: Run,
    /// RDMA CM ids, listeners and connections of every endpoint.
    pub cm: crate::cm::Cm,
    /// The kernel's QP table (rdma netlink), for the sessions' ownership
    /// checks; the audit has its own socket.
    rdma: Mutex<crate::kernel::rdma_nl::RdmaNl>,
    /// QPNs masqd answers for (what the audit does not flag).
    pub admitted: crate::enforce::audit::Admitted,
    /// Events for the Prometheus endpoint (`metrics.rs`).
    pub metrics: crate::metrics::Metrics,
    /// Cluster mode: the etcd store every host follows.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    /// The endpoints' cgroups, for their rdma limits.
    pub rdma_cgroups: Cgroups,
    /// Software RoCE: the endpoints' RoCE egress shaping (`ratelimit.rs`).
    pub rates: Option<crate::enforce::ratelimit::RateLimits>,
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
            rates,
            rdma_cgroups: Cgroups::new(
                crate::enforce::rdma_cgroup::CGROUP_ROOT,
                &cfg.backstop.cgroup_parent,
                &cfg.device,
            ),
            cluster,
            fds: Mutex::new(BTreeMap::new()),
            registry,
            endpoint_ops: Mutex::new(()),
            policy_ops: Mutex::new(()),
            host,
            sessions: Mutex::new(BTreeMap::new()),
            conns: Mutex::new(BTreeMap::new()),
            next_session: AtomicU64::new(1),
            // Validated when the config was read.
            run: Run::new(cfg.audit.interval().unwrap_or(Duration::from_secs(2))),
            cm: Cm::new(Duration::from_millis(cfg.cm.timeout_ms), metrics.clone()),
            rdma: Mutex::new(rdma),
            admitted: Admitted::default(),
            metrics,
            admission,
            cfg,
        }
    }

    /// Set the endpoint's rdma cgroup limits if its cgroup exists; the
    /// runtime may make it later, so the housekeeping thread calls this
    /// again every few seconds.
    pub fn apply_rdma_limits(&self, ep: &Endpoint) {
        let Some(limits) = &ep.cfg.rdma_limits else {
            return;
        };
        match self.rdma_cgroups.apply(&ep.cfg.name, limits) {
            Ok(Applied::Set) => {
                ep.rdma_limits_failing.store(false, Ordering::Relaxed);
                info!(endpoint = %ep.cfg.name, "rdma cgroup limits set: {}",
                      crate::enforce::rdma_cgroup::max_line(&self.cfg.device, limits));
            }
            Ok(_) => {}
            Err(e) => {
                if !ep.rdma_limits_failing.swap(true, Ordering::Relaxed) {
                    warn!(endpoint = %ep.cfg.name, "cannot set its rdma cgroup limits: {e}");
                }
            }
        }
    }

    /// Shape the endpoints' RoCE egress as their `maxRateMbps` say.
    pub fn sync_rate_limits(&self) -> Result<(), String> {
        match &self.rates {
            Some(r) => r.sync(&self.registry.configs()),
            None => Ok(()),
        }
    }

    pub fn next_session_id(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::SeqCst)
    }

    /// A session starts: shown by the control socket from now on, and
    /// closable (`conn`) by an endpoint's removal or masqd's stop.
    pub fn session_opened(&self, id: u64, conn: &Conn, view: SessionView) {
        if let Ok(c) = conn.try_clone() {
            lock(&self.conns).insert(id, c);
        }
        lock(&self.sessions).insert(id, view);
    }

    pub fn session_closed(&self, id: u64) {
        lock(&self.sessions).remove(&id);
        lock(&self.conns).remove(&id);
        lock(&self.fds).remove(&id);
    }

    /// Whether session's app has exited, even if its session thread has
    /// not read the hang-up yet (the CM then frees its ports at once, as
    /// the kernel does before the app's parent can see it exit).
    pub fn app_gone(&self, session: u64) -> bool {
        if !lock(&self.sessions).contains_key(&session) {
            return true; // ended, or ending
        }
        lock(&self.conns)
            .get(&session)
            .is_some_and(Conn::peer_closed)
    }

    /// The process behind an open session.
    pub fn session_pid(&self, session: u64) -> Option<i32> {
        lock(&self.sessions).get(&session).map(|v| v.pid)
    }

    /// One QP as the kernel reports it (a single-QP query).
    pub fn qp_lookup(&self, qpn: u32) -> io::Result<crate::kernel::rdma_nl::Lookup> {
        lock(&self.rdma).qp(qpn)
    }

    pub fn register_fd(&self, session: u64, fd: Arc<OwnedFd>) {
        lock(&self.fds).insert(session, fd);
    }

    /// `masqctl policy apply` (and SIGHUP): check the file, then in cluster
    /// mode write it for every host (compare-and-swap: a concurrent apply
    /// elsewhere makes this one fail), and apply it here.
    pub fn apply_policy_file(&self, path: &Path) -> Result<Value, String> {
        let not_changed = |e: String| format!("{e}\npolicy not changed");
        let _one_at_a_time = lock(&self.policy_ops);
        let refs = self.registry.policy_refs();
        let (p, unknown) = self.admission.check(path, &refs).map_err(not_changed)?;
        let Some(c) = &self.cluster else {
            let mut v = self.apply_policy(p).map_err(not_changed)?;
            v["unknown_endpoints"] = json!(unknown);
            return Ok(v);
        };
        let rev = c.put_policy(p.text(), p.file()).map_err(not_changed)?;
        let mut v = self.apply_policy(p)?;
        c.status_changed();
        v["cluster_revision"] = json!(rev);
        v["unknown_endpoints"] = json!(unknown);
        Ok(v)
    }

    /// Apply a validated policy: its tcp/udp rules first (one nftables
    /// transaction; on failure nothing changes), then the RDMA side, and
    /// reset what it no longer allows.
    pub fn apply_policy(&self, policy: masq_policy::Policy) -> Result<Value, String> {
        let started = Instant::now();
        crate::enforce::firewall::render(&policy, &self.registry.configs())
            .and_then(|r| crate::enforce::firewall::load(&r).map_err(|e| e.to_string()))?;
        let file = policy.file().to_string();
        let applied = self.admission.apply(policy);
        self.metrics.policy_applied_now();
        let reset = self.reset(&applied.to_reset, "policy change");
        // Under `keep`, established tcp/udp flows stay too (stateful
        // security groups); otherwise their kernel entries go.
        let flows = match (applied.keep, self.admission.active()) {
            (false, Some(p)) => {
                crate::enforce::kconntrack::drop_denied(&p, &self.registry.configs())
            }
            _ => 0,
        };
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        info!(file = %file, version = %applied.version, reset, flows, keep = applied.keep,
              "policy applied in {ms:.2} ms");
        Ok(
            json!({ "version": applied.version, "reset": reset, "flows_reset": flows,
                "keep": applied.keep, "elapsed_ms": ms }),
        )
    }

    /// Move the QPs of these connections to ERROR and stop tracking them.
    pub fn reset(&self, entries: &[rconntrack::Entry], why: &str) -> usize {
        let mut done = 0;
        for e in entries {
            let fd = lock(&self.fds).get(&e.session).cloned();
            if e.qp_type == rconntrack::QpType::Ud {
                // A UD entry is an address handle, keyed by its handle.
                match fd.map(|fd| {
                    crate::kernel::uverbs::destroy_ah(fd.as_fd(), self.host.driver_id, e.qp_handle)
                }) {
                    Some(Ok(())) => {
                        done += 1;
                        info!(tenant = %e.tenant, src = %e.local_vip, dst = %e.remote_vip,
                              "UD address handle destroyed: {why}");
                    }
                    Some(Err(err)) => warn!(ah = e.qp_handle, "cannot destroy the AH: {err}"),
                    None => debug!(ah = e.qp_handle, "session already gone"),
                }
                self.admission.table().remove(e.key());
                continue;
            }
            let cmd = crate::kernel::uverbs::ModifyQp {
                qp_handle: e.qp_handle,
                attr_mask: 1, // IBV_QP_STATE
                qp_state: 6,  // IBV_QPS_ERR
                ..Default::default()
            };
            match fd
                .map(|fd| crate::kernel::uverbs::modify_qp(fd.as_fd(), self.host.driver_id, &cmd))
            {
                Some(Ok(())) => {
                    done += 1;
                    info!(tenant = %e.tenant, src = %e.local_vip, sqpn = e.local_qpn,
                          dst = %e.remote_vip, dqpn = e.remote_qpn, "QP moved to ERROR: {why}");
                }
                Some(Err(err)) => warn!(qpn = e.local_qpn, "cannot reset QP: {err}"),
                None => debug!(qpn = e.local_qpn, "session already gone"),
            }
            self.admission.table().remove(e.key());
        }
        done
    }

    /// Keep the control socket's view of a session current: its counters,
    /// and the QPs the last request changed (`touched`), not the whole map.
    pub fn publish(
        &self,
        id: u64,
        app: &str,
        requests: u64,
        qps: &BTreeMap<u32, QpRecord>,
        touched: &[u32],
    ) {
        if let Some(v) = lock(&self.sessions).get_mut(&id) {
            if v.app != app {
                v.app = app.to_string();
            }
            v.requests = requests;
            for h in touched {
                match qps.get(h) {
                    Some(q) => v.qps.insert(*h, q.clone()),
                    None => v.qps.remove(h),
                };
            }
        }
    }

    /// masqd's state for a metrics scrape.
    pub fn sample(&self) -> crate::metrics::Sample {
        let sessions = lock(&self.sessions).clone();
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
            .join(&self.host.name)
            .join("ports")
            .join(self.host.port.to_string());
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
