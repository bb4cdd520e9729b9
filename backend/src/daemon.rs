//! The running daemon: endpoint sockets, sessions, the control socket.

use crate::admission::Admission;
use crate::config::{Config, EndpointConfig};
use crate::control::{self, Request};
use crate::seqpacket::{Conn, Listener};
use crate::session::{self, QpRecord, Session};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::{debug, info, warn};

/// The physical device masqd serves, as found in sysfs at start.
pub struct HostDevice {
    pub name: String,
    pub port: u8,
    /// dev_t of its uverbs character device: a tenant's fd must be one.
    pub uverbs_rdev: u64,
    /// The kernel's `enum rdma_driver_id` for it, needed in every ioctl.
    pub driver_id: u32,
    pub gids: Vec<vbond::HostGid>,
}

pub struct Endpoint {
    pub cfg: EndpointConfig,
    pub socket: PathBuf,
    /// Connections refused (wrong namespace) and requests refused, for
    /// `masqctl endpoints`: attempts to reach past the endpoint show here.
    pub refused_connections: AtomicU64,
    pub refused_requests: AtomicU64,
    /// Connected QPs of the endpoint's processes that masqd never admitted
    /// (found by the audit), and processes/cgroups killed for them.
    pub audit_bypasses: AtomicU64,
    pub audit_kills: AtomicU64,
    /// The vNIC as last read, with the inode of the namespace it was read
    /// in (see `session::virtual_gids`).
    pub binding: Mutex<Option<(u64, vbond::Binding)>>,
    /// The endpoint's sysfs view (see `sysfs_view`); `None` when its
    /// socket directory is shared with another endpoint's.
    pub view: Option<crate::sysfs_view::View>,
}

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
    fds: Mutex<BTreeMap<u64, Arc<OwnedFd>>>,
    pub host: HostDevice,
    pub vpc: vbond::VpcMap,
    pub endpoints: Vec<Arc<Endpoint>>,
    started: Instant,
    sessions: Mutex<BTreeMap<u64, SessionView>>,
    conns: Mutex<BTreeMap<u64, Conn>>,
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
}

pub struct Daemon {
    shared: Arc<Shared>,
    listeners: Vec<(PathBuf, Arc<Listener>)>,
    control_path: PathBuf,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking session thread must not take the daemon down with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl HostDevice {
    pub fn discover(sysfs: &Path, name: &str, port: u8) -> io::Result<HostDevice> {
        let dev_dir = sysfs.join("class/infiniband").join(name);
        if !dev_dir.exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no RDMA device {name} (nothing at {})", dev_dir.display()),
            ));
        }
        let (uverbs, uverbs_rdev) = find_uverbs(sysfs, name)?;
        let node = Path::new("/dev/infiniband").join(&uverbs);
        let dev = std::fs::File::open(&node)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", node.display())))?;
        use std::os::fd::AsFd;
        let driver_id = crate::uverbs::probe_driver_id(dev.as_fd())
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", node.display())))?;
        let gids = vbond::read_host_gids(sysfs, name, port)?;
        debug!(uverbs = %node.display(), driver_id, "device found");
        Ok(HostDevice {
            name: name.to_string(),
            port,
            uverbs_rdev,
            driver_id,
            gids,
        })
    }
}

/// The uverbs character device of `ibdev` (name and dev_t), from
/// /sys/class/infiniband_verbs/*/ibdev.
fn find_uverbs(sysfs: &Path, ibdev: &str) -> io::Result<(String, u64)> {
    let class = sysfs.join("class/infiniband_verbs");
    for entry in std::fs::read_dir(&class)? {
        let dir = entry?.path();
        let Ok(owner) = std::fs::read_to_string(dir.join("ibdev")) else {
            continue;
        };
        if owner.trim() != ibdev {
            continue;
        }
        let dev = std::fs::read_to_string(dir.join("dev"))?;
        let (maj, min) = dev.trim().split_once(':').ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad {}/dev", dir.display()),
            )
        })?;
        let parse = |s: &str| {
            s.parse::<u32>()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
        };
        let name = entry_name(&dir);
        return Ok((name, libc::makedev(parse(maj)?, parse(min)?)));
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("{ibdev} has no uverbs device (is ib_uverbs loaded?)"),
    ))
}

fn entry_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn build_vpc(cfg: &Config) -> vbond::VpcMap {
    let mut vpc = vbond::VpcMap::default();
    for v in &cfg.vpc {
        let name = v
            .name
            .clone()
            .unwrap_or_else(|| format!("{}-{}", v.tenant, v.vip));
        vpc.insert(v.vni, v.vip, name, v.host);
    }
    vpc
}

impl Daemon {
    pub fn start(cfg: Config, config_dir: &Path) -> io::Result<Daemon> {
        let mut admission = Admission::new(&cfg, config_dir)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("policy: {e}")))?;
        match admission.active() {
            Some(p) => {
                let rules = crate::firewall::render(&p, &cfg.endpoints)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                crate::firewall::load(&rules)?;
                info!(file = %p.file(), version = %p.version_hash(), "security groups loaded")
            }
            None => warn!("no policy configured: every pair of endpoints in a VPC may connect"),
        }
        let host = HostDevice::discover(Path::new("/sys"), &cfg.device, cfg.port)?;
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
            let b = crate::backstop::Backstop::start(&cfg)
                .map_err(|e| io::Error::other(format!("backstop: {e}")))?;
            admission.set_backstop(b);
        } else if is_rxe {
            warn!("backstop disabled: a tenant that skips libmasq can reach any QP");
        } else {
            info!("hardware RNIC: no kernel backstop (its packets bypass netfilter)");
        }
        info!(
            device = %cfg.device, port = cfg.port, underlay = %cfg.underlay.ip,
            "serving {} endpoint(s), VPC map of {}", cfg.endpoints.len(), cfg.vpc.len()
        );
        let endpoints: Vec<Arc<Endpoint>> = cfg
            .endpoints
            .iter()
            .map(|e| {
                let socket = e.socket_path(&cfg.socket_dir);
                Arc::new(Endpoint {
                    view: sysfs_view_for(&cfg, &socket, &host),
                    socket,
                    cfg: e.clone(),
                    refused_connections: AtomicU64::new(0),
                    refused_requests: AtomicU64::new(0),
                    audit_bypasses: AtomicU64::new(0),
                    audit_kills: AtomicU64::new(0),
                    binding: Mutex::new(None),
                })
            })
            .collect();
        let admission_metrics = admission.metrics.clone();
        let shared = Arc::new(Shared {
            admission,
            fds: Mutex::new(BTreeMap::new()),
            vpc: build_vpc(&cfg),
            host,
            endpoints,
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
        let mut listeners = Vec::new();
        let cleanup_on_error = |listeners: &Vec<(PathBuf, Arc<Listener>)>| {
            for (p, _) in listeners {
                let _ = std::fs::remove_file(p);
            }
        };
        for ep in &shared.endpoints {
            let bound = ep
                .socket
                .parent()
                .map(std::fs::create_dir_all)
                .unwrap_or(Ok(()))
                // Any local process may connect: the endpoint's identity is
                // checked against the peer's network namespace.
                .and_then(|_| Listener::bind(&ep.socket, 0o666));
            match bound {
                Ok(l) => listeners.push((ep.socket.clone(), Arc::new(l))),
                Err(e) => {
                    cleanup_on_error(&listeners);
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "endpoint {}: cannot listen on {}: {e}",
                            ep.cfg.name,
                            ep.socket.display()
                        ),
                    ));
                }
            }
        }
        if let Err(e) = crate::cm_link::start(&shared) {
            cleanup_on_error(&listeners);
            return Err(e);
        }
        let control_path = shared.cfg.control_socket();
        let _ = std::fs::remove_file(&control_path);
        let control = match UnixListener::bind(&control_path) {
            Ok(c) => c,
            Err(e) => {
                cleanup_on_error(&listeners);
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
        for (ep, (_, l)) in shared.endpoints.iter().zip(&listeners) {
            let (shared, ep, l) = (shared.clone(), ep.clone(), l.clone());
            thread::Builder::new()
                .name(format!("accept-{}", ep.cfg.name))
                .spawn(move || accept_loop(shared, ep, l))?;
            debug!("listening for endpoint");
        }
        {
            let shared = shared.clone();
            thread::Builder::new()
                .name("control".into())
                .spawn(move || control_loop(shared, control))?;
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
                cleanup_on_error(&listeners);
                return Err(e);
            }
        }
        if let Some(nl) = audit_nl {
            let s = shared.clone();
            thread::Builder::new()
                .name("audit".into())
                .spawn(move || crate::audit::run(s, nl))?;
        }
        for ep in &shared.endpoints {
            // Reading the vNIC writes the endpoint's sysfs view; a namespace
            // that does not exist yet is picked up by the view's thread.
            if let Err(e) = session::with_vnic(ep, |_| ()) {
                debug!(endpoint = %ep.cfg.name, "vNIC not readable yet: {e}");
            }
            info!(endpoint = %ep.cfg.name, tenant = %ep.cfg.tenant, vni = ep.cfg.vni,
                  vip = %ep.cfg.vip, socket = %ep.socket.display(), "endpoint ready");
        }
        if shared.endpoints.iter().any(|ep| ep.view.is_some()) {
            let s = shared.clone();
            thread::Builder::new()
                .name("sysfs-view".into())
                .spawn(move || sysfs_view_loop(s))?;
        }
        Ok(Daemon {
            shared,
            listeners,
            control_path,
        })
    }

    /// SIGHUP: re-read the configured policy file.
    pub fn reload_policy(&self) {
        let Some(path) = self.shared.admission.path.clone() else {
            info!("SIGHUP: no policy file configured");
            return;
        };
        match self.shared.admission.check(&path) {
            Ok(p) => {
                if let Err(e) = self.shared.apply_policy(p) {
                    warn!("SIGHUP: policy not changed: {e}");
                }
            }
            Err(e) => warn!("SIGHUP: policy not changed: {e}"),
        }
    }

    pub fn shutdown(self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        for (path, _) in &self.listeners {
            let _ = std::fs::remove_file(path);
        }
        let _ = std::fs::remove_file(&self.control_path);
        for ep in &self.shared.endpoints {
            if let Some(v) = &ep.view {
                v.remove();
            }
        }
        if let Err(e) = crate::firewall::remove(&self.shared.cfg.endpoints) {
            warn!("cannot remove the nftables rules: {e}");
        }
        for conn in lock(&self.shared.conns).values() {
            conn.shutdown();
        }
        info!("stopped; tenants' established QPs keep running on the NIC");
    }
}

fn accept_loop(shared: Arc<Shared>, ep: Arc<Endpoint>, listener: Arc<Listener>) {
    loop {
        let conn = match listener.accept() {
            Ok(c) => c,
            Err(e) => {
                if shared.stopping.load(Ordering::SeqCst) {
                    return;
                }
                warn!(endpoint = %ep.cfg.name, "accept failed: {e}");
                thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let pid = match conn.peer_pid() {
            Ok(p) => p,
            Err(e) => {
                warn!(endpoint = %ep.cfg.name, "cannot identify peer: {e}");
                continue;
            }
        };
        if let Err(why) = same_netns(pid, &ep.cfg.netns) {
            ep.refused_connections.fetch_add(1, Ordering::Relaxed);
            warn!(endpoint = %ep.cfg.name, pid, "refused connection: {why}");
            continue;
        }
        if let Some(b) = shared.admission.backstop() {
            // The endpoint's cgroup may have appeared since the last look.
            b.refresh_cgroups();
        }
        let id = shared.next_session.fetch_add(1, Ordering::SeqCst);
        let (shared, ep) = (shared.clone(), ep.clone());
        let spawned = thread::Builder::new()
            .name(format!("session-{id}"))
            .spawn(move || run_session(shared, ep, conn, id, pid));
        if let Err(e) = spawned {
            warn!("cannot start a session thread: {e}");
        }
    }
}

/// The sysfs view of an endpoint, in its socket directory, unless another
/// endpoint shares that directory (a configured `socket:` path can).
fn sysfs_view_for(
    cfg: &Config,
    socket: &Path,
    host: &HostDevice,
) -> Option<crate::sysfs_view::View> {
    let dir = socket.parent()?;
    let shared_dir = cfg
        .endpoints
        .iter()
        .filter(|e| e.socket_path(&cfg.socket_dir).parent() == Some(dir))
        .count()
        > 1;
    if shared_dir {
        warn!(dir = %dir.display(), "endpoints share a socket directory: no sysfs view");
        return None;
    }
    match crate::sysfs_view::View::new(dir, Path::new("/sys"), &host.name, host.port) {
        Ok(v) => Some(v),
        Err(e) => {
            warn!("no sysfs view: {e}");
            None
        }
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
            .endpoints
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
        for ep in &shared.endpoints {
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

/// An app belongs to an endpoint when it lives in that endpoint's network
/// namespace: the socket path alone could be reached from elsewhere.
fn same_netns(pid: i32, netns: &Path) -> Result<(), String> {
    let want = std::fs::metadata(netns)
        .map_err(|e| format!("endpoint namespace {}: {e}", netns.display()))?;
    let have = std::fs::metadata(format!("/proc/{pid}/ns/net"))
        .map_err(|e| format!("pid {pid} network namespace: {e}"))?;
    if (want.dev(), want.ino()) == (have.dev(), have.ino()) {
        Ok(())
    } else {
        Err(format!(
            "pid {pid} is not in the endpoint's network namespace {}",
            netns.display()
        ))
    }
}

fn run_session(shared: Arc<Shared>, ep: Arc<Endpoint>, conn: Conn, id: u64, pid: i32) {
    if let Ok(c) = conn.try_clone() {
        lock(&shared.conns).insert(id, c);
    }
    lock(&shared.sessions).insert(
        id,
        SessionView {
            endpoint: ep.cfg.name.clone(),
            tenant: ep.cfg.tenant.clone(),
            pid,
            app: String::new(),
            started: now_secs(),
            requests: 0,
            qps: BTreeMap::new(),
        },
    );
    let span = tracing::info_span!("session", id, endpoint = %ep.cfg.name, pid);
    let _enter = span.enter();
    debug!("connected");
    let mut sess = Session::new(id, pid, ep.clone());
    session::serve(&shared, &mut sess, &conn);
    lock(&shared.sessions).remove(&id);
    lock(&shared.conns).remove(&id);
    lock(&shared.fds).remove(&id);
    shared.cm.session_gone(id);
    shared
        .admitted
        .session_gone(id, 2 * shared.audit_interval());
    for e in shared.admission.table().remove_session(id) {
        debug!(qpn = e.local_qpn, "connection untracked: app gone");
    }
    if let Some(b) = shared.admission.backstop() {
        for qp in sess.qps.values() {
            b.qp_gone(qp.qpn);
        }
    }
    if !sess.qps.is_empty() {
        info!("app gone; forgetting {} QP(s)", sess.qps.len());
    } else {
        debug!("closed");
    }
}

impl Shared {
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

    /// Apply a validated policy: its tcp/udp rules first (one nftables
    /// transaction; on failure nothing changes), then the RDMA side, and
    /// reset what it no longer allows.
    pub fn apply_policy(&self, policy: masq_policy::Policy) -> Result<Value, String> {
        let started = Instant::now();
        crate::firewall::render(&policy, &self.cfg.endpoints)
            .and_then(|r| crate::firewall::load(&r).map_err(|e| e.to_string()))?;
        let file = policy.file().to_string();
        let applied = self.admission.apply(policy);
        self.metrics.policy_applied_now();
        let reset = self.reset(&applied.to_reset, "policy change");
        // Under `keep`, established tcp/udp flows stay too (stateful
        // security groups); otherwise their kernel entries go.
        let flows = match (applied.keep, self.admission.active()) {
            (false, Some(p)) => crate::kconntrack::drop_denied(&p, &self.cfg.endpoints),
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
            .endpoints
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

fn control_loop(shared: Arc<Shared>, listener: UnixListener) {
    for stream in listener.incoming() {
        if shared.is_stopping() {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = shared.clone();
        // A thread per connection: `conntrack -E` keeps its stream open.
        let _ = thread::Builder::new()
            .name("control-conn".into())
            .spawn(move || control_conn(&shared, stream));
    }
}

fn control_conn(shared: &Shared, mut stream: std::os::unix::net::UnixStream) {
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let reply = match control::read_request(&stream) {
        Ok(Request::ConntrackEvents { filter }) => match filter.compile() {
            Ok(f) => return stream_events(shared, stream, f),
            Err(e) => json!({ "error": e }),
        },
        Ok(req) => answer(shared, &req),
        Err(e) => json!({ "error": e }),
    };
    let mut line = reply.to_string();
    line.push('\n');
    let _ = stream.write_all(line.as_bytes());
}

fn stream_events(
    shared: &Shared,
    mut stream: std::os::unix::net::UnixStream,
    f: rconntrack::Filter,
) {
    let rx = shared.admission.table().subscribe(4096);
    for ev in rx {
        if !f.matches(&ev.entry) {
            continue;
        }
        let mut line = json!({ "event": ev.to_string(), "data": ev }).to_string();
        line.push('\n');
        if stream.write_all(line.as_bytes()).is_err() || shared.is_stopping() {
            return;
        }
    }
}

/// The backstop's drop counters, or null when it is off.
fn backstop_status(shared: &Shared) -> Value {
    let Some(b) = shared.admission.backstop() else {
        return Value::Null;
    };
    match b.counters() {
        Ok(c) => json!({
            "table": format!("inet {}", crate::backstop::TABLE),
            "drops": c.iter().map(|(name, packets, bytes)| {
                json!({"counter": name, "packets": packets, "bytes": bytes})
            }).collect::<Vec<_>>(),
        }),
        Err(e) => json!({"error": e}),
    }
}

fn conntrack_reply(entries: Vec<rconntrack::Entry>) -> Value {
    json!({
        "lines": entries.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
        "entries": entries,
    })
}

fn answer(shared: &Shared, req: &Request) -> Value {
    let sessions = lock(&shared.sessions).clone();
    match req {
        Request::Status => json!({
            "host": shared.cfg.underlay.ip.to_string(),
            "device": shared.host.name,
            "port": shared.host.port,
            "endpoints": shared.endpoints.len(),
            "sessions": sessions.len(),
            "qps": sessions.values().map(|s| s.qps.len()).sum::<usize>(),
            "uptime_s": shared.started.elapsed().as_secs(),
            "backstop": backstop_status(shared),
        }),
        Request::Endpoints => {
            let eps: Vec<Value> = shared
                .endpoints
                .iter()
                .map(|ep| {
                    let n = sessions
                        .values()
                        .filter(|s| s.endpoint == ep.cfg.name)
                        .count();
                    let mut v = json!({
                        "name": ep.cfg.name, "tenant": ep.cfg.tenant, "vni": ep.cfg.vni,
                        "vip": ep.cfg.vip.to_string(), "netns": ep.cfg.netns,
                        "vnic": ep.cfg.vnic, "socket": ep.socket, "vdev": session::VDEV_NAME,
                        "sessions": n,
                        "refused_connections": ep.refused_connections.load(Ordering::Relaxed),
                        "refused_requests": ep.refused_requests.load(Ordering::Relaxed),
                        "audit_bypasses": ep.audit_bypasses.load(Ordering::Relaxed),
                        "audit_kills": ep.audit_kills.load(Ordering::Relaxed),
                    });
                    match session::virtual_gids(ep) {
                        Ok(t) => {
                            v["gids"] = t
                                .iter()
                                .map(|g| {
                                    json!({
                                        "index": g.index, "gid": vbond::gid_to_string(&g.gid),
                                        "type": if g.roce_v2 { "RoCE v2" } else { "RoCE v1" },
                                    })
                                })
                                .collect();
                        }
                        Err(e) => v["gid_error"] = json!(e.to_string()),
                    }
                    v
                })
                .collect();
            json!({ "endpoints": eps })
        }
        Request::PolicyCheck { path } => match shared.admission.check(path) {
            Ok(p) => json!({ "version": p.version_hash() }),
            Err(e) => json!({ "error": e }),
        },
        Request::PolicyApply { path } => match shared.admission.check(path) {
            Ok(p) => shared
                .apply_policy(p)
                .unwrap_or_else(|e| json!({ "error": format!("{e}\npolicy not changed") })),
            Err(e) => json!({ "error": format!("{e}\npolicy not changed") }),
        },
        Request::PolicyShow => match shared.admission.active() {
            Some(p) => json!({
                "file": p.file(), "version": p.version_hash(),
                "on_rule_change": format!("{:?}", p.on_rule_change()).to_lowercase(),
                "text": std::fs::read_to_string(p.file()).ok(),
            }),
            None => json!({ "file": null, "version": null,
                            "on_rule_change": "none (no policy: all pairs in a VPC allowed)" }),
        },
        Request::ConntrackList { filter } => match filter.compile() {
            Ok(f) => conntrack_reply(shared.admission.table().list(&f).cloned().collect()),
            Err(e) => json!({ "error": e }),
        },
        Request::ConntrackDelete { filter } => match filter.compile() {
            Ok(f) => {
                let victims: Vec<_> = shared.admission.table().list(&f).cloned().collect();
                json!({ "reset": shared.reset(&victims, "deleted by the operator") })
            }
            Err(e) => json!({ "error": e }),
        },
        Request::ConntrackEvents { .. } => json!({ "error": "events are streamed" }),
        Request::Cm => json!({ "ids": shared.cm.list() }),
        Request::Sessions => {
            let list: Vec<Value> = sessions
                .iter()
                .map(|(id, s)| {
                    json!({
                        "id": id, "endpoint": s.endpoint, "tenant": s.tenant, "pid": s.pid,
                        "app": s.app, "started": s.started, "requests": s.requests,
                        "qps": s.qps.values().map(QpRecord::to_json).collect::<Vec<_>>(),
                    })
                })
                .collect();
            json!({ "sessions": list })
        }
    }
}
