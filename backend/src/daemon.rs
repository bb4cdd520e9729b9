//! The running daemon: its shared state, start and stop, and the
//! housekeeping threads. The endpoints' sockets and sessions are in
//! `endpoints.rs`, the control socket's answers in `control_server.rs`.

use crate::admission::Admission;
use crate::config::Config;
use crate::host::HostDevice;
use crate::registry::{Endpoint, Origin, Registry, RuntimeFile};
use crate::seqpacket::Conn;
use crate::session::{self, QpRecord, Session};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
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
    started: Instant,
    pub(crate) sessions: Mutex<BTreeMap<u64, SessionView>>,
    pub(crate) conns: Mutex<BTreeMap<u64, Conn>>,
    next_session: AtomicU64,
    stopping: AtomicBool,
    /// RDMA CM ids, listeners and connections of every endpoint.
    pub cm: crate::cm::Cm,
    /// The kernel's QP table (rdma netlink), for the sessions' ownership
    /// checks; the audit has its own socket.
    rdma: Mutex<crate::rdma_nl::RdmaNl>,
    /// QPNs masqd answers for (what the audit does not flag).
    pub admitted: crate::audit::Admitted,
    /// Events for the Prometheus endpoint (`metrics.rs`).
    pub metrics: crate::metrics::Metrics,
    /// Cluster mode: the etcd store every host follows.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
}

pub struct Daemon {
    shared: Arc<Shared>,
    control_path: PathBuf,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking session thread must not take the daemon down with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn invalid(e: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// The registry at start: the file's VPC map and endpoints, then the ones
/// added at run time before a restart (those that still fit; a bad one is
/// logged and left out, the file's stop the start).
fn initial_registry(cfg: &Config, host: &HostDevice) -> io::Result<Registry> {
    let registry = Registry::new(cfg);
    let mut initial: Vec<_> = cfg
        .endpoints
        .iter()
        .map(|e| (e.clone(), Origin::File))
        .collect();
    match RuntimeFile::load(&cfg.runtime_endpoints_file()) {
        Ok(f) => initial.extend(f.endpoints.into_iter().map(|e| (e, Origin::Command))),
        Err(e) => warn!("endpoints added at run time not restored: {e}"),
    }
    let sockets: Vec<PathBuf> = initial
        .iter()
        .map(|(e, _)| e.socket_path(&cfg.socket_dir))
        .collect();
    for (e, origin) in initial {
        if let Err(why) = registry.check_new(&e) {
            if origin == Origin::File {
                return Err(invalid(why));
            }
            warn!("endpoint added at run time not restored: {why}");
            continue;
        }
        let socket = e.socket_path(&cfg.socket_dir);
        let view = crate::endpoints::sysfs_view_for(&socket, &sockets, host);
        registry.insert(Arc::new(Endpoint::new(e, socket, origin, view)));
    }
    Ok(registry)
}

impl Daemon {
    pub fn start(cfg: Config, config_dir: &Path) -> io::Result<Daemon> {
        let host = HostDevice::discover(Path::new("/sys"), &cfg.device, cfg.port)?;
        let registry = initial_registry(&cfg, &host)?;
        let endpoint_cfgs = registry.configs();
        let mut admission = Admission::new(&cfg, config_dir, registry.policy_refs())
            .map_err(|e| invalid(format!("policy: {e}")))?;
        match admission.active() {
            Some(p) => {
                let rules = crate::firewall::render(&p, &endpoint_cfgs).map_err(invalid)?;
                crate::firewall::load(&rules)?;
                info!(file = %p.file(), version = %p.version_hash(), "security groups loaded")
            }
            None => warn!("no policy configured: every pair of endpoints in a VPC may connect"),
        }
        let underlay_gid = vbond::ipv4_mapped_gid(cfg.underlay.ip);
        if !host.gids.iter().any(|g| g.gid == underlay_gid && g.roce_v2) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} port {} has no RoCE v2 GID for underlay.ip {} (check the config \
                     and `rdma link`)",
                    cfg.device, cfg.port, cfg.underlay.ip
                ),
            ));
        }
        let rdma_nl = |what: &str| {
            crate::rdma_nl::RdmaNl::open(&cfg.device, cfg.port)
                .map_err(|e| io::Error::new(e.kind(), format!("rdma netlink ({what}): {e}")))
        };
        let rdma = rdma_nl("QP ownership")?;
        let audit_nl = if cfg.audit.enabled {
            Some(rdma_nl("audit")?)
        } else {
            warn!("QP audit disabled: QPs moved without libmasq go unnoticed on hardware RNICs");
            None
        };
        let is_rxe = host.driver_id == crate::uverbs::RDMA_DRIVER_RXE;
        if crate::backstop::wanted(&cfg.backstop, is_rxe) {
            let b = crate::backstop::Backstop::start(&cfg, &endpoint_cfgs)
                .map_err(|e| io::Error::other(format!("backstop: {e}")))?;
            admission.set_backstop(b);
        } else if is_rxe {
            warn!("backstop disabled: a tenant that skips libmasq can reach any QP");
        } else {
            info!("hardware RNIC: no kernel backstop (its packets bypass netfilter)");
        }
        info!(
            device = %cfg.device, port = cfg.port, underlay = %cfg.underlay.ip,
            "serving {} endpoint(s), VPC map of {}", endpoint_cfgs.len(), registry.vpc().len()
        );
        let admission_metrics = admission.metrics.clone();
        let cluster = match &cfg.cluster {
            Some(c) => Some(crate::cluster::Cluster::new(c.clone(), cfg.underlay.ip)?),
            None => None,
        };
        let shared = Arc::new(Shared {
            cluster,
            admission,
            fds: Mutex::new(BTreeMap::new()),
            registry,
            endpoint_ops: Mutex::new(()),
            host,
            started: Instant::now(),
            sessions: Mutex::new(BTreeMap::new()),
            conns: Mutex::new(BTreeMap::new()),
            next_session: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
            cm: crate::cm::Cm::new(
                Duration::from_millis(cfg.cm.timeout_ms),
                admission_metrics.clone(),
            ),
            rdma: Mutex::new(rdma),
            admitted: crate::audit::Admitted::default(),
            metrics: admission_metrics,
            cfg,
        });
        shared.metrics.policy_applied_now();

        std::fs::create_dir_all(&shared.cfg.socket_dir)?;
        // On a failed start, the sockets already made go again.
        let unserve_all = |shared: &Shared| {
            for ep in shared.registry.local() {
                let _ = std::fs::remove_file(&ep.socket);
            }
        };
        for ep in shared.registry.local() {
            if let Err(e) = crate::endpoints::serve(&shared, &ep) {
                unserve_all(&shared);
                return Err(e);
            }
        }
        if let Err(e) = crate::cm_link::start(&shared) {
            unserve_all(&shared);
            return Err(e);
        }
        let control_path = shared.cfg.control_socket();
        let _ = std::fs::remove_file(&control_path);
        let control = match UnixListener::bind(&control_path) {
            Ok(c) => c,
            Err(e) => {
                unserve_all(&shared);
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot listen on {}: {e}", control_path.display()),
                ));
            }
        };
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&control_path, std::fs::Permissions::from_mode(0o600))?;
        }
        {
            let shared = shared.clone();
            thread::Builder::new()
                .name("control".into())
                .spawn(move || crate::control_server::control_loop(shared, control))?;
        }
        if shared.admission.backstop().is_some() {
            let s = shared.clone();
            thread::Builder::new()
                .name("backstop".into())
                .spawn(move || backstop_loop(s))?;
            let s = shared.clone();
            thread::Builder::new()
                .name("backstop-sets".into())
                .spawn(move || {
                    if let Some(b) = s.admission.backstop() {
                        while !s.is_stopping() {
                            b.flush_updates(Duration::from_millis(500));
                        }
                        b.flush_updates(Duration::ZERO);
                    }
                })?;
        }
        if let Some(addr) = shared.cfg.metrics.listen {
            let weak = Arc::downgrade(&shared);
            let sampler: crate::metrics::Sampler =
                Box::new(move || weak.upgrade().map(|s| s.sample()));
            let registry = crate::metrics::registry(&shared.metrics, sampler);
            let weak = Arc::downgrade(&shared);
            let stopping = move || weak.upgrade().is_none_or(|s| s.is_stopping());
            if let Err(e) = crate::metrics::serve(registry, addr, stopping) {
                unserve_all(&shared);
                return Err(e);
            }
        }
        if let Some(nl) = audit_nl {
            let s = shared.clone();
            thread::Builder::new()
                .name("audit".into())
                .spawn(move || crate::audit::run(s, nl))?;
        }
        if let Some(c) = &shared.cluster {
            c.start(shared.clone());
            // With etcd up, serve the cluster's view from the first request.
            if !c.wait_connected(Duration::from_secs(5)) {
                warn!(error = ?c.health().error, "cluster: etcd not reachable yet; serving the file's view and retrying");
            }
        }
        {
            // Always running: an endpoint added later may have a view.
            let s = shared.clone();
            thread::Builder::new()
                .name("sysfs-view".into())
                .spawn(move || sysfs_view_loop(s))?;
        }
        Ok(Daemon {
            shared,
            control_path,
        })
    }

    /// SIGHUP: re-read the configured policy file.
    pub fn reload_policy(&self) {
        let Some(path) = self.shared.admission.path.clone() else {
            info!("SIGHUP: no policy file configured");
            return;
        };
        if let Err(e) = self.shared.apply_policy_file(&path) {
            warn!("SIGHUP: {e}");
        }
    }

    pub fn shutdown(self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let endpoints = self.shared.registry.local();
        for ep in &endpoints {
            let _ = std::fs::remove_file(&ep.socket);
        }
        let _ = std::fs::remove_file(&self.control_path);
        for ep in &endpoints {
            if let Some(v) = &ep.view {
                v.remove();
            }
        }
        if let Err(e) = crate::firewall::remove(&self.shared.registry.configs()) {
            warn!("cannot remove the nftables rules: {e}");
        }
        for conn in lock(&self.shared.conns).values() {
            conn.shutdown();
        }
        info!("stopped; tenants' established QPs keep running on the NIC");
    }
}

/// The daemon as the cluster feeds it (`cluster.rs`).
impl crate::cluster::Store for Shared {
    fn remote_view(&self, endpoints: Vec<crate::registry::Remote>) {
        let n = endpoints.len();
        for why in self.registry.set_remote(endpoints) {
            warn!("cluster: {why}; left out of the VPC map");
        }
        info!("cluster: {n} endpoint(s) of other hosts in the VPC map");
        self.rebind_policy("cluster view read", &[]);
    }

    fn remote_up(&self, r: crate::registry::Remote) {
        let (name, host, vni, vip) = (r.name.clone(), r.host, r.vni, r.vip);
        match self.registry.remote_up(r) {
            Ok(()) => {
                info!(endpoint = %name, %host, vni, %vip, "cluster: endpoint up");
                self.rebind_policy(&format!("endpoint {name} up on {host}"), &[&name]);
            }
            Err(why) => warn!("cluster: {why}; left out of the VPC map"),
        }
    }

    fn remote_down(&self, host: std::net::Ipv4Addr, name: &str) {
        if self.registry.remote_down(host, name) {
            info!(endpoint = name, %host, "cluster: endpoint gone");
            self.rebind_policy(&format!("endpoint {name} gone from {host}"), &[name]);
        }
    }

    fn policy(&self, text: &str, file: &str) {
        let p = match self
            .admission
            .check_text(text, file, &self.registry.policy_refs())
        {
            Ok((p, dangling)) => {
                if !dangling.is_empty() {
                    info!(
                        "cluster: the policy names endpoints not known here now: {}",
                        dangling.join(", ")
                    );
                }
                p
            }
            Err(e) => {
                warn!("cluster: the policy in etcd does not check here, keeping the one in force: {e}");
                return;
            }
        };
        let active = self.admission.active();
        if active.is_some_and(|a| a.version_hash() == p.version_hash()) {
            return;
        }
        match self.apply_policy(p) {
            Ok(_) => {
                if let Some(c) = &self.cluster {
                    c.status_changed();
                }
            }
            Err(e) => warn!("cluster: policy not applied here: {e}"),
        }
    }

    fn local_endpoints(&self) -> Vec<crate::config::EndpointConfig> {
        self.registry.configs()
    }

    fn policy_version(&self) -> Option<String> {
        self.admission
            .active()
            .map(|p| p.version_hash().to_string())
    }

    fn file_policy(&self) -> Option<(String, String)> {
        self.admission.path.as_ref()?;
        let p = self.admission.active()?;
        Some((p.text().to_string(), p.file().to_string()))
    }
}

/// Keep every endpoint's sysfs view current: wake on any vNIC's netlink
/// notification (reading it through `with_vnic` rewrites the view), and
/// every few seconds for the physical port's state and for namespaces that
/// appeared or went away.
fn sysfs_view_loop(shared: Arc<Shared>) {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let mut lost: BTreeMap<String, bool> = BTreeMap::new();
    while !shared.is_stopping() {
        // Duplicates, so the poll holds no endpoint's lock.
        let fds: Vec<OwnedFd> = shared
            .registry
            .local()
            .iter()
            .filter_map(|ep| {
                let slot = lock(&ep.binding);
                let (_, b) = slot.as_ref()?;
                b.as_fd().try_clone_to_owned().ok()
            })
            .collect();
        let mut pfds: Vec<PollFd> = fds
            .iter()
            .map(|f| PollFd::new(f.as_fd(), PollFlags::POLLIN))
            .collect();
        let _ = nix::poll::poll(&mut pfds, PollTimeout::from(2000u16));
        drop(pfds);
        if shared.is_stopping() {
            return;
        }
        for ep in &shared.registry.local() {
            let Some(view) = &ep.view else { continue };
            view.refresh_phys();
            let gone = match session::with_vnic(ep, |_| ()) {
                Ok(()) => false,
                Err(e) => {
                    if lost.get(&ep.cfg.name) != Some(&true) {
                        info!(endpoint = %ep.cfg.name, "vNIC not readable: {e}");
                    }
                    view.vnic_lost();
                    true
                }
            };
            lost.insert(ep.cfg.name.clone(), gone);
        }
    }
}

/// The backstop's housekeeping: pick up tenant cgroups created after
/// masqd, log drops (the attempts of tenants that skip libmasq), and once,
/// after the grace period, rewrite the sets from what sessions re-registered.
fn backstop_loop(shared: Arc<Shared>) {
    let Some(b) = shared.admission.backstop() else {
        return;
    };
    let grace = Duration::from_secs(shared.cfg.backstop.recovery_grace_seconds);
    let mut reconciled = false;
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    while !shared.is_stopping() {
        thread::sleep(Duration::from_secs(2));
        b.refresh_cgroups();
        if !reconciled && shared.started.elapsed() >= grace {
            reconciled = true;
            b.reconcile();
        }
        match b.counters() {
            Ok(counters) => {
                for (name, packets, bytes) in counters {
                    let before = last.insert(name.clone(), packets).unwrap_or(0);
                    if packets > before {
                        warn!(
                            counter = %name, packets, bytes,
                            "backstop dropped {} RoCE packet(s) {}",
                            packets - before,
                            b.describe_counter(&name)
                        );
                    }
                }
            }
            Err(e) => debug!("backstop counters: {e}"),
        }
    }
}

impl Shared {
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

    /// One QP as the kernel reports it (a single-QP query).
    pub fn qp_lookup(&self, qpn: u32) -> io::Result<crate::rdma_nl::Lookup> {
        lock(&self.rdma).qp(qpn)
    }

    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn audit_interval(&self) -> Duration {
        // Validated when the config was read.
        self.cfg.audit.interval().unwrap_or(Duration::from_secs(2))
    }

    pub fn register_fd(&self, session: u64, fd: Arc<OwnedFd>) {
        lock(&self.fds).insert(session, fd);
    }

    /// `masqctl policy apply` (and SIGHUP): check the file, then in cluster
    /// mode write it for every host (compare-and-swap: a concurrent apply
    /// elsewhere makes this one fail), and apply it here.
    pub fn apply_policy_file(&self, path: &Path) -> Result<Value, String> {
        let not_changed = |e: String| format!("{e}\npolicy not changed");
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
        crate::firewall::render(&policy, &self.registry.configs())
            .and_then(|r| crate::firewall::load(&r).map_err(|e| e.to_string()))?;
        let file = policy.file().to_string();
        let applied = self.admission.apply(policy);
        self.metrics.policy_applied_now();
        let reset = self.reset(&applied.to_reset, "policy change");
        // Under `keep`, established tcp/udp flows stay too (stateful
        // security groups); otherwise their kernel entries go.
        let flows = match (applied.keep, self.admission.active()) {
            (false, Some(p)) => crate::kconntrack::drop_denied(&p, &self.registry.configs()),
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
            let cmd = crate::uverbs::ModifyQp {
                qp_handle: e.qp_handle,
                attr_mask: 1, // IBV_QP_STATE
                qp_state: 6,  // IBV_QPS_ERR
                ..Default::default()
            };
            match fd.map(|fd| crate::uverbs::modify_qp(fd.as_fd(), self.host.driver_id, &cmd)) {
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

    /// Keep the control socket's view of a session current.
    pub fn publish(&self, sess: &Session) {
        if let Some(v) = lock(&self.sessions).get_mut(&sess.id) {
            v.app = sess.app.clone();
            v.requests = sess.requests;
            v.qps = sess.qps.clone();
        }
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
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
