//! The running daemon: wire masqd's parts (`tenants::parts::Parts`) from
//! the config, start the threads (sessions, control socket, CM link,
//! cluster, housekeeping in `tenants::watch`) and stop them. The
//! endpoints are served by `operator::endpoints`, the control socket's
//! answers come from `operator::control_server`. As the composition
//! root it reaches each part through `Parts`' accessors (`config()`,
//! `run()`, `registry()`, ...), where the layers below take `Parts`
//! through their narrow traits.
use crate::cluster::source::{FileSource, Source};
use crate::config::{Config, EndpointConfig};
use crate::endpoints::endpoint::{Endpoint, Origin};
use crate::endpoints::registry::{Registry, RuntimeFile};
use crate::enforce::admission::Admission;
use crate::enforce::ratelimit::RateLimits;
use crate::error::{Error, Result};
use crate::http::Said;
use crate::kernel::host::HostDevice;
use crate::kernel::rdma_nl::RdmaNl;
use crate::run::STALL;
use crate::tenants::parts::Parts;
use crate::tenants::watch::{
    audit_loop, backstop_loop, backstop_sets_loop, cgroup_limits_loop, sysfs_view_loop,
};
use std::io;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use tracing::{error, info, warn};

pub struct Daemon {
    parts: Arc<Parts>,
    control_path: PathBuf,
}

/// A rail's device, checked to have the RoCE v2 GID of its underlay
/// address (`many`: errors name the rail).
fn discover_rail(r: &crate::config::RailConfig, many: bool) -> Result<HostDevice> {
    let host = HostDevice::discover(Path::new("/sys"), &r.device, r.port)?;
    let gid = vbond::ipv4_mapped_gid(r.underlay.ip);
    if !host.gids.iter().any(|g| g.gid == gid && g.roce_v2) {
        let at = if many {
            format!("rail {}: ", r.name)
        } else {
            String::new()
        };
        return Err(Error::Invalid(format!(
            "{at}{} port {} has no RoCE v2 GID for underlay.ip {} (check the config \
             and `rdma link`)",
            r.device, r.port, r.underlay.ip
        )));
    }
    Ok(host)
}

/// Every rail's device, all of one driver.
fn discover_rails(cfg: &Config) -> Result<Vec<HostDevice>> {
    let hosts = cfg
        .rails
        .iter()
        .map(|r| discover_rail(r, cfg.rails.len() > 1))
        .collect::<Result<Vec<HostDevice>>>()?;
    let host = &hosts[0];
    if let Some(other) = hosts.iter().find(|h| h.driver_id != host.driver_id) {
        return Err(Error::Invalid(format!(
            "rails: {} and {} have different drivers; one masqd serves the devices of \
             one driver",
            host.name, other.name
        )));
    }
    Ok(hosts)
}

/// The registry at start: the file's endpoints, then the ones added at run
/// time before a restart (those that still fit; a bad one is logged and
/// left out, the file's stop the start). The file's VPC map comes after,
/// from its source; the config check made sure it agrees with the file's
/// endpoints.
fn initial_registry(cfg: &Config, hosts: &[HostDevice]) -> Result<Registry> {
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
    // Pods made before masq-cni left masq-nri's markers get theirs.
    let attached: Vec<_> = initial.iter().map(|(e, _)| e.clone()).collect();
    let markers = crate::operator::pod_markers::Markers::in_socket_dir(&cfg.socket_dir);
    for err in markers.restore(&attached) {
        warn!("{err}");
    }
    // An endpoint's further devices after it.
    initial.sort_by_key(|(e, _)| e.device_of.is_some());
    for (e, origin) in initial {
        if let Err(why) = registry.check_new(&e) {
            if origin == Origin::File {
                return Err(Error::Invalid(why.to_string()));
            }
            warn!("endpoint added at run time not restored: {why}");
            continue;
        }
        let socket = registry.socket_of(&e);
        let rail = registry.rail_index(e.rail.as_deref()).unwrap_or(0);
        let (view, refused) = match &e.device_of {
            None => match crate::tenants::serve::sysfs_view_for(&socket, &sockets, &hosts[rail]) {
                Ok(view) => (view, None),
                Err(why) => (None, Some(why)),
            },
            Some(of) => {
                let viewed = registry.local_named(of).is_some_and(|p| p.view.is_some());
                let view = crate::tenants::serve::further_view_for(&socket, viewed, &hosts[rail]);
                (view, None)
            }
        };
        let mut ep =
            Endpoint::new(e, socket, origin, view).on_rail(rail, registry.rail_label(rail));
        if let Some(why) = refused {
            // Kept (listed, and in the runtime file) but not served; start
            // serves the other endpoints.
            ep = ep.refused(why.to_string());
        }
        registry.insert(Arc::new(ep));
    }
    Ok(registry)
}

/// Each rail's device with its rdma netlink socket, as `Parts::new` takes
/// them.
type Devices = Vec<(HostDevice, RdmaNl)>;

/// Each rail's device with its rdma netlink socket for the sessions'
/// ownership checks, and one more per rail for the audit when it is on.
fn open_netlink(cfg: &Config, hosts: Vec<HostDevice>) -> Result<(Devices, Vec<RdmaNl>)> {
    let rdma_nl = |r: &crate::config::RailConfig, what: &str| {
        RdmaNl::open(&r.device, r.port)
            .map_err(|e| e.context(format_args!("rdma netlink ({what}, {})", r.device)))
    };
    let mut devices = Vec::new();
    let mut audit_nl = Vec::new();
    for (r, h) in cfg.rails.iter().zip(hosts) {
        devices.push((h, rdma_nl(r, "QP ownership")?));
        if cfg.audit.enabled {
            audit_nl.push(rdma_nl(r, "audit")?);
        }
    }
    if !cfg.audit.enabled {
        warn!("QP audit disabled: QPs moved without libmasq go unnoticed on hardware RNICs");
    }
    Ok((devices, audit_nl))
}

/// What this start serves and how: the backstop, the rails, the
/// descriptor limits, the endpoints.
fn log_start(cfg: &Config, registry: &Registry, endpoints: usize, is_rxe: bool, backstop: bool) {
    if !backstop && is_rxe {
        warn!("backstop disabled: a tenant that skips libmasq can reach any QP");
    } else if !backstop {
        info!("hardware RNIC: no kernel backstop (its packets bypass netfilter)");
    }
    for r in &cfg.rails {
        info!(rail = %r.name, device = %r.device, port = r.port, underlay = %r.underlay.ip, "rail");
    }
    let nofile = crate::endpoints::usage::raise_nofile();
    let l = &cfg.tenant_limits;
    info!(
        "descriptors: limit {nofile}, tenants' below {}; per endpoint at most {} sessions, \
         {} event channels, {} CM ids, {} address handles, {} connections",
        crate::endpoints::usage::fd_ceiling(l.fd_reserve, nofile),
        l.sessions,
        l.event_channels,
        l.cm_ids,
        l.address_handles,
        l.connections
    );
    info!(
        "serving {} endpoint(s), VPC map of {}",
        endpoints,
        registry.vpc().len()
    );
}

/// Cluster mode's store, if the config has one (not started yet).
fn cluster_of(cfg: &Config) -> Result<Option<Arc<crate::cluster::Cluster>>> {
    let Some(c) = &cfg.cluster else {
        return Ok(None);
    };
    let rails = cfg
        .rails
        .iter()
        .map(|r| (r.name.clone(), r.underlay.ip))
        .collect();
    Ok(Some(crate::cluster::Cluster::new(
        c.clone(),
        cfg.underlay.ip,
        rails,
    )?))
}

/// Software RoCE's rate limits; on a hardware RNIC none, and an endpoint
/// that asks for one stops the start.
fn rate_limits(
    cfg: &Config,
    endpoints: &[EndpointConfig],
    is_rxe: bool,
) -> Result<Option<RateLimits>> {
    if is_rxe {
        return RateLimits::new(
            cfg.rails
                .iter()
                .map(|r| (r.name.clone(), r.underlay.netdev.clone()))
                .collect(),
            &cfg.backstop.cgroup_parent,
        )
        .map(Some)
        .map_err(|e| e.context("rate limits"));
    }
    match endpoints.iter().find(|e| e.max_rate_mbps.is_some()) {
        Some(e) => Err(Error::Invalid(
            crate::enforce::ratelimit::needs_software_roce(&e.name, &cfg.device),
        )),
        None => Ok(None),
    }
}

/// The kernel backstop, with the pods' and apps' cgroups it filtered
/// before a restart.
fn start_backstop(parts: &Parts, endpoints: &[EndpointConfig]) -> Result<()> {
    let b = crate::enforce::backstop::Backstop::start(parts.config(), endpoints)
        .map_err(|e| e.context("backstop"))?;
    // Pods' and apps' cgroups come back from the runtime file,
    // before any endpoint is served: no session of a pod's app
    // brings them, and an app that skips libmasq must stay
    // filtered across the restart.
    let kept = RuntimeFile::load(&parts.config().runtime_endpoints_file()).unwrap_or_default();
    let local = |n: &str| parts.registry().local_named(n).map(|e| e.cfg.clone());
    for (name, cgroup) in crate::tenants::cgroups::readopt_cgroups(&b, &kept.pod_cgroups, local) {
        if let Some(ep) = parts.registry().local_named(&name) {
            *crate::run::lock(&ep.pod_cgroup) = Some(cgroup);
        }
    }
    let apps = kept.app_cgroups.iter().map(|(cgroup, name)| (name, cgroup));
    let n = crate::tenants::cgroups::readopt_cgroups(&b, apps, local).len();
    if n > 0 {
        info!(
            cgroups = n,
            "backstop: apps' cgroups filtered again after the restart"
        );
    }
    parts.admission().set_backstop(b);
    Ok(())
}

/// The socket directory, without the CDI specs of endpoints no longer
/// served.
fn prepare_socket_dir(parts: &Parts) -> Result<()> {
    std::fs::create_dir_all(&parts.config().socket_dir)?;
    if let Some(cdi) = &parts.config().cdi {
        let served: Vec<String> = parts
            .registry()
            .local()
            .iter()
            .filter(|e| crate::operator::endpoints::refusal(parts, e).is_none())
            .map(|e| e.cfg.name.clone())
            .collect();
        crate::operator::cdi::remove_stale(cdi, &served);
    }
    Ok(())
}

/// The CM link's mutual TLS, with this host's cluster identity if it has
/// one.
fn start_link_tls(parts: &Parts) -> Result<()> {
    match parts.cluster().and_then(|c| c.identity()) {
        Some(id) => {
            let tls = crate::peer::tls::LinkTls::new(&id)?;
            parts.set_link_tls(tls);
            info!("CM link: mutual TLS with this host's cluster identity");
        }
        None => info!("CM link: plaintext (no cluster.tls): it trusts the underlay"),
    }
    Ok(())
}

/// What a failed start undoes: the endpoints' sockets and CDI specs go
/// again when it drops, unless `disarm`ed once the start is done.
struct Unserve<'a> {
    parts: Option<&'a Parts>,
}

impl<'a> Unserve<'a> {
    fn armed(parts: &'a Parts) -> Unserve<'a> {
        Unserve { parts: Some(parts) }
    }

    fn disarm(mut self) {
        self.parts = None;
    }
}

impl Drop for Unserve<'_> {
    fn drop(&mut self) {
        let Some(parts) = self.parts else {
            return;
        };
        for ep in parts.registry().local() {
            let _ = std::fs::remove_file(&ep.socket);
            if let Some(cdi) = &parts.config().cdi {
                crate::operator::cdi::remove(cdi, &ep.cfg.name);
            }
        }
    }
}

/// Every endpoint's socket, but those refused.
fn serve_endpoints(parts: &Arc<Parts>) -> Result<()> {
    for ep in parts.registry().local() {
        if let Some(why) = crate::operator::endpoints::refusal(parts, &ep) {
            // No socket: its apps get no session, rather than one
            // beside the host's sysfs. Its CDI spec went above.
            error!(endpoint = %ep.cfg.name, "endpoint not served: {why}");
            if ep.cfg.device_of.is_none() {
                let _ = std::fs::remove_file(&ep.socket);
            }
            continue;
        }
        crate::operator::endpoints::serve(parts, &ep)?;
    }
    Ok(())
}

/// The control socket, listened on, its connections answered in a thread.
fn start_control(parts: &Arc<Parts>, control_path: &Path) -> Result<()> {
    let control = bind_control(control_path)
        .map_err(|e| e.context(format_args!("cannot listen on {}", control_path.display())))?;
    let parts = parts.clone();
    thread::Builder::new()
        .name("control".into())
        .spawn(move || crate::operator::control_server::control_loop(parts, control))?;
    Ok(())
}

/// With a backstop: its loop, and the thread that flushes its sets.
fn start_backstop_threads(parts: &Arc<Parts>) -> Result<()> {
    if parts.admission().backstop().is_none() {
        return Ok(());
    }
    let s = parts.clone();
    thread::Builder::new()
        .name("backstop".into())
        .spawn(move || backstop_loop(&*s))?;
    let s = parts.clone();
    thread::Builder::new()
        .name("backstop-sets".into())
        .spawn(move || backstop_sets_loop(&*s))?;
    Ok(())
}

/// The Prometheus endpoint and the probes, if the config has an address
/// for them; `/readyz` says 503 until `started`.
fn start_metrics(parts: &Arc<Parts>, started: &Arc<AtomicBool>) -> Result<()> {
    let Some(addr) = parts.config().metrics.listen else {
        return Ok(());
    };
    let weak = Arc::downgrade(parts);
    let sampler: crate::metrics::Sampler = Box::new(move || weak.upgrade().map(|s| s.sample()));
    let registry = crate::metrics::registry(parts.metrics(), sampler);
    let (w1, w2, up) = (
        Arc::downgrade(parts),
        Arc::downgrade(parts),
        started.clone(),
    );
    let probes = crate::http::Probes {
        health: Box::new(move || {
            w1.upgrade()
                .map_or(Err(Said::state("stopping")), |p| health(&p))
        }),
        ready: Box::new(move || {
            let started = up.load(Ordering::SeqCst);
            w2.upgrade()
                .map_or(Err(Said::state("not ready: stopping")), |p| {
                    readiness(&p, started)
                })
        }),
    };
    let beat = parts.run().heartbeat("metrics", STALL);
    let weak = Arc::downgrade(parts);
    let stopping = move || weak.upgrade().is_none_or(|s| s.run().is_stopping());
    let access = crate::http::Access::load(&parts.config().metrics)?;
    crate::http::serve(addr, registry, probes, access, beat, stopping)?;
    Ok(())
}

/// The QP audit's loop, if it has netlink sockets (it is on).
fn start_audit(parts: &Arc<Parts>, audit_nl: Vec<RdmaNl>) -> Result<()> {
    if audit_nl.is_empty() {
        return Ok(());
    }
    let s = parts.clone();
    thread::Builder::new()
        .name("audit".into())
        .spawn(move || audit_loop(&*s, audit_nl))?;
    Ok(())
}

/// Cluster mode: follow etcd, waiting a little for its first view.
fn start_cluster(parts: &Arc<Parts>) -> Result<()> {
    let Some(c) = parts.cluster() else {
        return Ok(());
    };
    c.clone()
        .start(parts.clone())
        .map_err(|e| e.context("cluster"))?;
    // With etcd up, serve the cluster's view from the first request.
    if !c.wait_connected(Duration::from_secs(5)) {
        warn!(error = ?c.health().error, "cluster: etcd not reachable yet; serving the file's view and retrying");
    }
    Ok(())
}

/// The endpoints' cgroup limits kept up (`cgroup_limits_loop`).
fn start_cgroup_limits(parts: &Arc<Parts>) -> Result<()> {
    let s = parts.clone();
    thread::Builder::new()
        .name("cgroup-limits".into())
        .spawn(move || cgroup_limits_loop(&*s))?;
    Ok(())
}

/// NetworkPolicy's tcp/udp rules rendered again when asked
/// (`Parts::netpol_firewall_asks`): once per burst of changes, 100 ms after its
/// first.
fn start_netpol_firewall(parts: &Arc<Parts>) -> Result<()> {
    let s = parts.clone();
    thread::Builder::new()
        .name("netpol-firewall".into())
        .spawn(move || {
            let beat = s.run().heartbeat("netpol-firewall", STALL);
            while !s.run().is_stopping() {
                beat.beat();
                let asked = s
                    .netpol_firewall_asks()
                    .take(Duration::from_secs(2), Duration::from_millis(100));
                if let Some((why, asks)) = asked {
                    s.load_netpol_firewall(&why, asks);
                }
            }
        })?;
    Ok(())
}

/// The endpoints' sysfs views kept up; always running: an endpoint added
/// later may have a view.
fn start_sysfs_view(parts: &Arc<Parts>) -> Result<()> {
    let s = parts.clone();
    thread::Builder::new()
        .name("sysfs-view".into())
        .spawn(move || sysfs_view_loop(&*s))?;
    Ok(())
}

/// The systemd watchdog, pinged while no watched loop stalls.
fn start_watchdog(parts: &Arc<Parts>) -> Result<()> {
    let (w1, w2) = (Arc::downgrade(parts), Arc::downgrade(parts));
    crate::notify::watchdog(
        move || w1.upgrade().map_or_else(Vec::new, |p| p.run().stalled()),
        move || w2.upgrade().is_none_or(|p| p.run().is_stopping()),
    )
}

impl Daemon {
    /// Assemble masqd from `cfg`: check the devices and the endpoints,
    /// put the policy in force, then serve the endpoints and start each
    /// thread. A failure after the first socket takes the sockets away.
    pub fn start(mut cfg: Config, config_dir: &Path) -> Result<Daemon> {
        if let Some(c) = &mut cfg.cdi {
            // Relative to the config file, as `policy:` is.
            c.libmasq_dir = config_dir.join(&c.libmasq_dir);
        }
        let hosts = discover_rails(&cfg)?;
        let registry = initial_registry(&cfg, &hosts)?;
        let endpoint_cfgs = registry.configs();
        let admission = Admission::new(&cfg, config_dir);
        let file = Arc::new(FileSource::new(&cfg, config_dir).map_err(|e| e.context("policy"))?);
        let (devices, audit_nl) = open_netlink(&cfg, hosts)?;
        let is_rxe = devices[0].0.driver_id == crate::kernel::uverbs::RDMA_DRIVER_RXE;
        let backstop = crate::enforce::backstop::wanted(&cfg.backstop, is_rxe);
        log_start(&cfg, &registry, endpoint_cfgs.len(), is_rxe, backstop);
        let cluster = cluster_of(&cfg)?;
        let rates = rate_limits(&cfg, &endpoint_cfgs, is_rxe)?;
        let parts = Arc::new(Parts::new(
            cfg, admission, registry, devices, cluster, rates,
        ));
        // The file's map and policy first: a policy that does not check
        // stops the start before anything is in the kernel.
        file.start(parts.clone()).map_err(|e| e.context("policy"))?;
        if backstop {
            start_backstop(&parts, &endpoint_cfgs)?;
        }
        parts
            .limits()
            .sync_rates(&parts.registry().configs())
            .map_err(|e| e.context("rate limits"))?;
        parts.metrics().policy_applied_now();
        prepare_socket_dir(&parts)?;
        start_link_tls(&parts)?;
        // On a failed start, the sockets already made go again.
        let undo = Unserve::armed(&parts);
        serve_endpoints(&parts)?;
        crate::peer::link::start(&parts, parts.config().underlay.ip, parts.config().cm.port)?;
        let control_path = parts.config().control_socket();
        start_control(&parts, &control_path)?;
        start_backstop_threads(&parts)?;
        // Set once the start is done: /readyz answers 503 until then.
        let started = Arc::new(AtomicBool::new(false));
        start_metrics(&parts, &started)?;
        start_audit(&parts, audit_nl)?;
        start_cluster(&parts)?;
        start_cgroup_limits(&parts)?;
        start_sysfs_view(&parts)?;
        start_netpol_firewall(&parts)?;
        start_watchdog(&parts)?;
        undo.disarm();
        started.store(true, Ordering::SeqCst);
        Ok(Daemon {
            parts,
            control_path,
        })
    }

    /// What masqd serves, for the service manager's status line.
    pub fn status(&self) -> String {
        let n = self.parts.registry().local().len();
        format!(
            "serving {n} endpoint(s), control socket {}",
            self.control_path.display()
        )
    }

    /// SIGHUP: re-read the policy file and this host's certificate.
    pub fn reload(&self) {
        self.reload_policy();
        self.reload_identity();
    }

    /// Load this host's identity files again (a rotated certificate):
    /// connections made from now on, to etcd and on the CM link, show it;
    /// those up keep going. A file that does not load changes nothing.
    fn reload_identity(&self) {
        let Some(cluster) = self.parts.cluster() else {
            return;
        };
        let Some(files) = cluster.tls_files() else {
            return;
        };
        let loaded = crate::config::identity::Identity::load(files)
            .and_then(|id| crate::peer::tls::LinkTls::new(&id).map(|tls| (id, tls)));
        match loaded {
            Ok((id, tls)) => {
                info!(subject = %id.subject, not_after = id.not_after, "SIGHUP: this host's certificate reloaded");
                self.parts.set_link_tls(tls);
                cluster.use_identity(id);
            }
            Err(e) => warn!("SIGHUP: {e}; the certificate in use stays"),
        }
    }

    /// Re-read the configured policy file.
    fn reload_policy(&self) {
        let Some(path) = self.parts.admission().path.clone() else {
            info!("SIGHUP: no policy file configured");
            return;
        };
        if let Err(e) = self.parts.apply_policy_file(&path) {
            warn!("SIGHUP: {e}");
        }
    }

    pub fn shutdown(self) {
        self.parts.run().stop();
        let endpoints = self.parts.registry().local();
        for ep in &endpoints {
            let _ = std::fs::remove_file(&ep.socket);
        }
        let _ = std::fs::remove_file(&self.control_path);
        for ep in &endpoints {
            if let Some(v) = &ep.view {
                v.remove();
            }
        }
        // Under policy_ops: a NetworkPolicy refresh in flight loads before
        // this, or sees masqd stopping and loads nothing.
        let policy_ops = self.parts.policy_change();
        if let Err(e) = crate::enforce::firewall::remove(&self.parts.registry().configs()) {
            warn!("cannot remove the nftables rules: {e}");
        }
        drop(policy_ops);
        self.parts.sessions().shutdown_all();
        info!("stopped; tenants' established QPs keep running on the NIC");
    }
}

/// The control socket, 0600 from its first moment (root's only: it
/// changes everything), replacing a stale one.
fn bind_control(path: &std::path::Path) -> Result<UnixListener> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a socket path").into());
    };
    crate::safe_fs::Dir::open(dir)?.bind_socket(name, 0o600, |at| UnixListener::bind(at))
}

/// `/healthz`: masqd's watched loops make progress (`Run::stalled`), the
/// same check that keeps the systemd watchdog pinged. The probes' states
/// are fixed phrases; what lies behind one (which loop, socket or error)
/// is its detail, for `?verbose` clients the metrics let in (`http.rs`).
fn health(parts: &Parts) -> Result<Said, Said> {
    let stalled = parts.run().stalled();
    if stalled.is_empty() {
        Ok(Said::state("ok"))
    } else {
        Err(Said::detail("stalled", stalled.join("; ")))
    }
}

/// `/readyz`: masqd can serve its tenants: it is healthy, its start is
/// done, the control socket and every endpoint's socket are in place, and
/// in cluster mode it has read etcd's view at least once. A cluster that
/// went degraded after that is still ready (masqd serves the last view
/// and says so); one never read is not, as this host would not know
/// where the other hosts' endpoints are.
fn readiness(parts: &Parts, started: bool) -> Result<Said, Said> {
    if parts.run().is_stopping() {
        return Err(Said::state("not ready: stopping"));
    }
    if let Err(why) = health(parts) {
        return Err(Said::detail("not ready: stalled", why.detail));
    }
    if !started {
        return Err(Said::state("not ready: starting"));
    }
    let mut sockets = vec![parts.config().control_socket()];
    sockets.extend(parts.registry().local().iter().map(|e| e.socket.clone()));
    let missing: Vec<String> = sockets
        .iter()
        .filter(|s| !s.exists())
        .map(|s| s.display().to_string())
        .collect();
    if !missing.is_empty() {
        return Err(Said::detail("not ready: socket gone", missing.join(", ")));
    }
    match parts.cluster().map(|c| c.health()) {
        None => Ok(Said::state("ready")),
        Some(h) => cluster_readiness(&h),
    }
}

fn cluster_readiness(h: &crate::cluster::Health) -> Result<Said, Said> {
    let error = h.error.as_deref().unwrap_or("no error yet");
    if h.revision == 0 {
        Err(Said::detail("not ready: no view read from etcd yet", error))
    } else if h.state != "connected" {
        Ok(Said::detail(
            "ready, cluster degraded",
            format!(
                "since {} (Unix time), serving the view of revision {} ({error})",
                h.since, h.revision
            ),
        ))
    } else {
        Ok(Said::state("ready"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(state: &'static str, revision: i64, error: Option<&str>) -> crate::cluster::Health {
        crate::cluster::Health {
            state,
            since: 1_700_000_000,
            revision,
            lease: String::new(),
            error: error.map(str::to_string),
            insecure: false,
            held_elsewhere: Default::default(),
        }
    }

    /// The states say nothing of etcd's error; the details do.
    #[test]
    fn a_cluster_is_ready_once_read_and_stays_so_degraded() {
        assert_eq!(
            cluster_readiness(&health("degraded", 0, Some("etcd: connection refused"))),
            Err(Said::detail(
                "not ready: no view read from etcd yet",
                "etcd: connection refused"
            ))
        );
        assert_eq!(
            cluster_readiness(&health("connected", 7, None)),
            Ok(Said::state("ready"))
        );
        assert_eq!(
            cluster_readiness(&health("degraded", 7, Some("etcd: timeout"))),
            Ok(Said::detail(
                "ready, cluster degraded",
                "since 1700000000 (Unix time), serving the view of revision 7 (etcd: timeout)"
            ))
        );
    }
}
