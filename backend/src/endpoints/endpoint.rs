//! One endpoint this host serves: its configuration, its counters, its
//! vNIC as last read, its sysfs view and its socket.

use crate::config::EndpointConfig;
use crate::error::Result;
use crate::transport::seqpacket::Listener;
use serde::Serialize;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a session's hot path trusts the last look at an endpoint's
/// namespace file (see `Endpoint::with_recent_vnic`).
const NETNS_RECHECK: Duration = Duration::from_secs(1);

/// The name of an endpoint's virtual device `index` (`vrdma0`, ...).
pub fn vdev_name(index: usize) -> String {
    format!("vrdma{index}")
}

/// Where an endpoint came from, for `masqctl endpoint list`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// masqd.yaml's `endpoints:`.
    File,
    /// `masqctl endpoint add` (kept in the runtime file across restarts).
    Command,
}

pub struct Endpoint {
    pub cfg: EndpointConfig,
    /// The host's rail its device is on (an index into `rails:`), and its
    /// name for RConntrack on a host with several.
    pub rail: usize,
    pub rail_label: Option<std::sync::Arc<str>>,
    /// Its place among its apps' devices (`vrdmaN`'s N), kept by the
    /// registry as devices come and go.
    pub vdev: std::sync::atomic::AtomicUsize,
    pub socket: PathBuf,
    pub origin: Origin,
    /// Connections refused (wrong namespace) and requests refused, for
    /// `masqctl endpoints`: attempts to reach past the endpoint show here.
    pub refused_connections: AtomicU64,
    pub refused_requests: AtomicU64,
    /// Connected QPs of the endpoint's processes that masqd never admitted
    /// (found by the audit), and processes/cgroups killed for them.
    pub audit_bypasses: AtomicU64,
    pub audit_kills: AtomicU64,
    /// The vNIC as last read, with the inode of the namespace it was read
    /// in and when that inode was read (see `with_vnic`).
    pub binding: Mutex<Option<(u64, Instant, vbond::Binding)>>,
    /// The endpoint's sysfs view (see `sysfs_view`; a further device's
    /// is in its endpoint's socket directory); `None` when its socket
    /// directory is shared with another endpoint's.
    pub view: Option<crate::kernel::sysfs_view::View>,
    /// Why the endpoint is not served, when its sysfs view could not be
    /// made (see `refused`).
    pub view_refused: Option<String>,
    /// Its socket while served; shut down when the endpoint is removed,
    /// which ends its accept thread.
    pub listener: Mutex<Option<Arc<Listener>>>,
    /// Set by `Registry::remove`.
    pub(super) removed: AtomicBool,
    /// Held from counting the endpoint's connections to tracking a new one,
    /// when it has a quota: two admissions cannot both take the last slot.
    pub quota: Mutex<()>,
    /// What its apps make masqd hold, and the refusals at its limits.
    pub usage: Arc<crate::endpoints::usage::Usage>,
    /// Its rdma cgroup limits could not be set (logged once until they are).
    pub rdma_limits_failing: AtomicBool,
    /// The pod's cgroup the backstop filters as this endpoint's (masq-nri
    /// asked; below the cgroup root), kept for a restart.
    pub pod_cgroup: Mutex<Option<String>>,
}

impl Endpoint {
    pub fn new(
        cfg: EndpointConfig,
        socket: PathBuf,
        origin: Origin,
        view: Option<crate::kernel::sysfs_view::View>,
    ) -> Endpoint {
        let usage = Arc::new(crate::endpoints::usage::Usage::new(&cfg.name));
        Endpoint {
            cfg,
            rail: 0,
            rail_label: None,
            vdev: std::sync::atomic::AtomicUsize::new(0),
            socket,
            origin,
            refused_connections: AtomicU64::new(0),
            refused_requests: AtomicU64::new(0),
            audit_bypasses: AtomicU64::new(0),
            audit_kills: AtomicU64::new(0),
            binding: Mutex::new(None),
            view,
            view_refused: None,
            listener: Mutex::new(None),
            removed: AtomicBool::new(false),
            quota: Mutex::new(()),
            usage,
            rdma_limits_failing: AtomicBool::new(false),
            pod_cgroup: Mutex::new(None),
        }
    }

    /// The cgroup its apps run in, below `backstop.cgroupParent`: its own
    /// name's, or that of the endpoint it is a further device of.
    pub fn cgroup_name(&self) -> &str {
        self.cfg.apps_endpoint()
    }

    /// The endpoint on rail `rail` (a `rails:` index), named `label` in
    /// its connections if the host has several.
    pub fn on_rail(mut self, rail: usize, label: Option<&str>) -> Endpoint {
        self.rail = rail;
        self.rail_label = label.map(std::sync::Arc::from);
        self
    }

    /// The endpoint, kept in the registry but not served: its sysfs view
    /// could not be made (`why`), and its apps would read the host's.
    pub fn refused(mut self, why: String) -> Endpoint {
        self.view_refused = Some(why);
        self
    }

    /// The endpoint's vNIC as it is now: `f` sees its binding. Entering the
    /// namespace and dumping its links and addresses costs milliseconds, so
    /// the view is kept with a netlink subscription in that namespace and
    /// re-read only when a notification arrived, or when the namespace file
    /// names another namespace (the container was recreated).
    pub fn with_vnic<T>(&self, f: impl FnOnce(&vbond::Binding) -> T) -> Result<T> {
        self.vnic_checked_within(Duration::ZERO, f)
    }

    /// `with_vnic`, for a session's hot path (its RTRs, address handles
    /// and CM connections): the namespace file is looked at again only
    /// if the last look is `NETNS_RECHECK` old (a `stat` of it cost 90 us
    /// of a 1.9 ms RTR under emulation). A session's HELLO looks afresh
    /// (`with_vnic`), so an app of a recreated container never meets the
    /// old namespace's vNIC; address changes still count at once.
    pub fn with_recent_vnic<T>(&self, f: impl FnOnce(&vbond::Binding) -> T) -> Result<T> {
        self.vnic_checked_within(NETNS_RECHECK, f)
    }

    fn vnic_checked_within<T>(
        &self,
        max_age: Duration,
        f: impl FnOnce(&vbond::Binding) -> T,
    ) -> Result<T> {
        let mut slot = self.binding.lock().unwrap_or_else(|e| e.into_inner());
        let recent = slot
            .as_ref()
            .filter(|(_, at, _)| at.elapsed() < max_age)
            .map(|&(ino, at, _)| (ino, at));
        let (ns, at) = match recent {
            Some(known) => known,
            None => {
                let ns = std::fs::metadata(&self.cfg.netns)
                    // Without the OS's errno: an app sees EIO, not the
                    // namespace file's.
                    .map_err(|e| {
                        std::io::Error::new(e.kind(), format!("{}: {e}", self.cfg.netns.display()))
                    })?
                    .ino();
                (ns, Instant::now())
            }
        };
        let current = match slot.take() {
            Some((ino, _, mut b)) if ino == ns => b.wait_change(Some(Duration::ZERO)).map(|_| b),
            _ => vbond::Binding::open(&self.cfg.netns, &self.cfg.vnic),
        };
        // On error the slot stays empty: the next call opens it afresh.
        let b = current?;
        if let Some(view) = &self.view {
            view.vnic_seen(&b, self.vdev.load(Ordering::Relaxed));
        }
        let out = f(&b);
        *slot = Some((ns, at, b));
        Ok(out)
    }

    /// The endpoint's virtual GID table, as its vNIC is now (see `with_vnic`).
    pub fn virtual_gids(&self) -> Result<Vec<vbond::VirtualGid>> {
        self.with_vnic(|b| b.gids().to_vec())
    }

    /// The endpoint was deleted: its sessions and accept thread stop.
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::SeqCst)
    }
}
