//! The housekeeping threads, each one round per interval until masqd
//! stops: the endpoints' sysfs views, the QP audit, the backstop's cgroups
//! and counters. Each beats once a round (`Run::heartbeat`): a round stuck
//! on a lock or a kernel call makes masqd unhealthy.

use crate::enforce::audit;
use crate::run::{lock, STALL};
use crate::tenants::parts::Parts;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// Keep every endpoint's sysfs view current: wake on any vNIC's netlink
/// notification (reading it through `with_vnic` rewrites the view), and
/// every few seconds for the physical port's state and for namespaces that
/// appeared or went away.
pub fn sysfs_view_loop(parts: Arc<Parts>) {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let mut lost: BTreeMap<String, bool> = BTreeMap::new();
    let beat = parts.run.heartbeat("sysfs-view", STALL);
    while !parts.run.is_stopping() {
        beat.beat();
        // Duplicates, so the poll holds no endpoint's lock.
        let fds: Vec<OwnedFd> = parts
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
        if parts.run.is_stopping() {
            return;
        }
        for ep in &parts.registry.local() {
            let Some(view) = &ep.view else { continue };
            view.refresh_phys();
            let gone = match ep.with_vnic(|_| ()) {
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

/// The audit thread: one round per interval until masqd stops.
///
/// After a start, apps need the recovery grace (`backstop.
/// recoveryGraceSeconds`) to resync their QPs; until it has passed, their
/// QPs look unadmitted, so the audit only counts what it would flag.
pub fn audit_loop(parts: Arc<Parts>, mut nl: Vec<crate::kernel::rdma_nl::RdmaNl>) {
    let interval = parts.run.audit_interval();
    let action = parts.cfg.audit.action;
    let grace = Duration::from_secs(parts.cfg.backstop.recovery_grace_seconds);
    let parent = parts.cfg.backstop.cgroup_parent.clone();
    info!(?interval, ?action, "QP audit running");
    let mut reported = std::collections::HashSet::new();
    let mut waiting = 0;
    let beat = parts.run.heartbeat("audit", interval + STALL);
    while !parts.run.is_stopping() {
        beat.beat();
        std::thread::sleep(interval);
        let started = Instant::now();
        let ids = audit::EndpointIds::read(&parts.registry.configs(), &parent);
        let owner = |task| {
            let pid = crate::kernel::ownership::tgid_of(task)?;
            Some((ids.endpoint_of(pid)?, pid))
        };
        // Each rail's device: the kernel's list first, then what masqd
        // vouches for (a QP masqd moves in between was vouched for before
        // it moved).
        let mut found = Vec::new();
        let mut listed = 0;
        for (rail, nl) in nl.iter_mut().enumerate() {
            match nl.qps() {
                Ok(qps) => {
                    listed += qps.len();
                    let admitted = parts.admitted.snapshot(rail);
                    let bypasses = audit::find_bypasses(&qps, &admitted, owner);
                    // A QP the CM connects is the CM's own (it checked the
                    // policy): the CM knows it by the device's endpoint.
                    found.extend(bypasses.into_iter().filter(|b| !cm_made(&parts, b, rail)));
                }
                Err(e) => warn!("audit: cannot list the QPs of rail {rail}'s device: {e}"),
            }
        }
        debug!(
            qps = listed,
            flagged = found.len(),
            "audit round in {:?}",
            started.elapsed()
        );
        if parts.run.uptime() < grace {
            if found.len() != waiting {
                waiting = found.len();
                info!("audit: {waiting} connected tenant QP(s) not (yet) resynced; acting after the recovery grace");
            }
            continue;
        }
        let p = audit::plan(&found, &mut reported, action, true);
        let ep_of = |name: &str| parts.registry.local_named(name);
        for b in &p.new {
            if let Some(ep) = ep_of(&b.endpoint) {
                ep.audit_bypasses.fetch_add(1, Ordering::Relaxed);
            }
            warn!(
                endpoint = %b.endpoint, pid = b.pid, qpn = b.qpn, state = crate::kernel::ibv::state_name(b.state),
                "audit: bypass: {} QP {:#x} of pid {} in {} is {} but masqd never admitted it",
                crate::kernel::ibv::type_name(b.qp_type), b.qpn, b.pid, b.endpoint, crate::kernel::ibv::state_name(b.state)
            );
        }
        for (endpoint, pid) in &p.kill_pids {
            match audit::kill_process(*pid, endpoint, &ids) {
                Ok(()) => {
                    if let Some(ep) = ep_of(endpoint) {
                        ep.audit_kills.fetch_add(1, Ordering::Relaxed);
                    }
                    warn!(endpoint = %endpoint, pid, "audit: killed pid {pid} (SIGKILL) for its unadmitted QP(s)");
                }
                Err(e) => warn!(endpoint = %endpoint, pid, "audit: cannot kill pid {pid}: {e}"),
            }
        }
        for endpoint in &p.kill_endpoints {
            match audit::kill_endpoint(&parent, endpoint) {
                Ok(()) => {
                    if let Some(ep) = ep_of(endpoint) {
                        ep.audit_kills.fetch_add(1, Ordering::Relaxed);
                    }
                    warn!(endpoint = %endpoint, "audit: killed every process of {endpoint} (cgroup.kill)");
                }
                Err(e) => warn!(endpoint = %endpoint, "audit: cannot kill {endpoint}: {e}"),
            }
        }
    }
}

/// Whether bypass `b` (a QP on rail `rail`'s device) is a QP the RDMA CM
/// connected, for the device of `b`'s endpoint's apps on that rail.
fn cm_made(parts: &Parts, b: &audit::Bypass, rail: usize) -> bool {
    let Some(ep) = parts.registry.local_named(&b.endpoint) else {
        return false;
    };
    parts
        .registry
        .devices_of(&ep)
        .iter()
        .filter(|d| d.rail == rail)
        .any(|d| parts.cm.role_of(&d.cfg.name, b.qpn).is_some())
}

/// The backstop's housekeeping: pick up tenant cgroups created after
/// masqd, log drops (the attempts of tenants that skip libmasq), and once,
/// after the grace period, rewrite the sets from what sessions re-registered.
pub fn backstop_loop(parts: Arc<Parts>) {
    let Some(b) = parts.admission.backstop() else {
        return;
    };
    let grace = Duration::from_secs(parts.cfg.backstop.recovery_grace_seconds);
    let mut reconciled = false;
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    let beat = parts.run.heartbeat("backstop", STALL);
    while !parts.run.is_stopping() {
        beat.beat();
        thread::sleep(Duration::from_secs(2));
        b.refresh_cgroups();
        if !reconciled && parts.run.uptime() >= grace {
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
