//! The housekeeping threads, each one round per interval until masqd
//! stops: the endpoints' sysfs views, the QP audit, the backstop's cgroups
//! and counters, its sets' updates, the endpoints' cgroup limits. Each beats once a round (`Run::heartbeat`): a round stuck
//! on a lock or a kernel call makes masqd unhealthy. They see masqd's
//! parts through `Housekeeping`, which `Parts` implements.

use crate::config::Config;
use crate::endpoints::endpoint::Endpoint;
use crate::endpoints::registry::Registry;
use crate::enforce::attribution::KernelOwners;
use crate::enforce::audit::{self, Admitted};
use crate::enforce::backstop::Backstop;
use crate::enforce::limits::Limits;
use crate::metrics::Metrics;
use crate::run::{lock, Run, STALL};
use std::collections::{BTreeMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// What the housekeeping threads use of masqd's parts. Implemented by
/// `tenants::parts::Parts`, each method handing out the one part it names.
pub trait Housekeeping {
    /// Stopping or not, since when, and the loops' heartbeats.
    fn run(&self) -> &Run;
    /// The audit's action, the backstop's recovery grace and cgroup parent.
    fn config(&self) -> &Config;
    /// This host's endpoints and their devices.
    fn registry(&self) -> &Registry;
    /// The pids of the live sessions' apps.
    fn session_pids(&self) -> HashSet<i32>;
    /// The QPNs masqd answers for, by rail.
    fn admitted(&self) -> &Admitted;
    /// Whether the RDMA CM connected QP `qpn` of device `device` (an
    /// endpoint's name, or a further device's).
    fn cm_connected(&self, device: &str, qpn: u32) -> bool;
    /// The audit's round times and its unattributed QPs.
    fn metrics(&self) -> &Metrics;
    /// The kernel backstop, when there is one.
    fn backstop(&self) -> Option<&Backstop>;
    /// The endpoints' rdma cgroup limits and rate limits.
    fn limits(&self) -> &Limits;
    /// The name of the device `ep` is on (its rail's).
    fn device_name(&self, ep: &Endpoint) -> &str;
}

/// Keep every endpoint's sysfs view current: wake on any vNIC's netlink
/// notification (reading it through `with_vnic` rewrites the view), and
/// every few seconds for the physical port's state and for namespaces that
/// appeared or went away.
pub fn sysfs_view_loop(parts: &impl Housekeeping) {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let mut lost: BTreeMap<String, bool> = BTreeMap::new();
    let beat = parts.run().heartbeat("sysfs-view", STALL);
    while !parts.run().is_stopping() {
        beat.beat();
        // Duplicates, so the poll holds no endpoint's lock.
        let fds: Vec<OwnedFd> = parts
            .registry()
            .local()
            .iter()
            .filter_map(|ep| {
                let slot = lock(&ep.binding);
                let (_, _, b) = slot.as_ref()?;
                b.as_fd().try_clone_to_owned().ok()
            })
            .collect();
        let mut pfds: Vec<PollFd> = fds
            .iter()
            .map(|f| PollFd::new(f.as_fd(), PollFlags::POLLIN))
            .collect();
        let _ = nix::poll::poll(&mut pfds, PollTimeout::from(2000u16));
        drop(pfds);
        if parts.run().is_stopping() {
            return;
        }
        for ep in &parts.registry().local() {
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

/// The audit thread: one round per interval (a random wait of half to
/// one interval, see `audit::next_wait`; longer after a costly round, see
/// `audit::paced_wait`) until masqd stops.
///
/// After a start, apps need the recovery grace (`backstop.
/// recoveryGraceSeconds`) to resync their QPs; until it has passed, their
/// QPs look unadmitted, so a bypass of a process with libmasq mapped waits
/// for it; one of a process without libmasq (which never had a session)
/// is acted on at once.
pub fn audit_loop(parts: &impl Housekeeping, mut nl: Vec<crate::kernel::rdma_nl::RdmaNl>) {
    let interval = parts.run().audit_interval();
    let action = parts.config().audit.action;
    let grace = Duration::from_secs(parts.config().backstop.recovery_grace_seconds);
    let parent = parts.config().backstop.cgroup_parent.clone();
    info!(?interval, ?action, "QP audit running");
    let mut seen = audit::Seen::default();
    let mut waiting = 0;
    let mut took = Duration::ZERO;
    // When a round was last said to stretch the wait (at most once a minute).
    let mut told: Option<Instant> = None;
    let beat = parts.run().heartbeat("audit", interval + STALL);
    while !parts.run().is_stopping() {
        let wait = audit::paced_wait(interval, took);
        if wait > interval && told.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
            told = Some(Instant::now());
            info!(
                "audit: a round took {took:?}, so the next comes {wait:?} later, past the \
                 {interval:?} interval, to keep the audit within {:.0}% of a CPU",
                audit::MAX_CPU_SHARE * 100.0
            );
        }
        sleep_beating(parts.run(), &beat, wait, interval);
        let started = Instant::now();
        let ids =
            crate::enforce::attribution::EndpointIds::read(&parts.registry().configs(), &parent);
        let sessions = parts.session_pids();
        // Each rail's device: the kernel's list first, then what masqd
        // vouches for (a QP masqd moves in between was vouched for before
        // it moved).
        let mut found = audit::Findings::default();
        let mut listed = 0;
        for (rail, nl) in nl.iter_mut().enumerate() {
            match nl.qps() {
                Ok(qps) => {
                    listed += qps.len();
                    let admitted = parts.admitted().snapshot(rail);
                    let mut owners = KernelOwners::new(nl, &ids, &sessions);
                    let mut f = audit::find_bypasses(&qps, &admitted, &mut owners);
                    // A QP the CM connects is the CM's own (it checked the
                    // policy): the CM knows it by the device's endpoint.
                    f.bypasses
                        .retain(|b| !cm_made(parts, Some(b.endpoint.as_str()), b.qpn, rail));
                    f.unattributed
                        .retain(|u| !cm_made(parts, None, u.qpn, rail));
                    found.extend(f);
                }
                Err(e) => warn!("audit: cannot list the QPs of rail {rail}'s device: {e}"),
            }
        }
        took = started.elapsed();
        parts.metrics().audit_round.observe(took.as_secs_f64());
        debug!(
            qps = listed,
            flagged = found.bypasses.len(),
            unattributed = found.unattributed.len(),
            "audit round in {took:?}"
        );
        let in_grace = parts.run().uptime() < grace;
        let p = audit::plan(&found, &mut seen, action, in_grace);
        if p.deferred != waiting {
            waiting = p.deferred;
            if waiting > 0 {
                info!("audit: {waiting} connected QP(s) of processes with libmasq not (yet) resynced; acting on them after the recovery grace");
            }
        }
        report(parts, &p, action);
        act(parts, &p, &ids, &parent);
    }
}

/// Sleep `wait`, beating at least once per `slice` (a wait stretched past
/// the heartbeat's bound is no stall), and waking early when masqd stops.
fn sleep_beating(run: &Run, beat: &crate::run::Heartbeat, wait: Duration, slice: Duration) {
    let until = Instant::now() + wait;
    loop {
        beat.beat();
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || run.is_stopping() {
            return;
        }
        std::thread::sleep(left.min(slice));
    }
}

/// Logs and counts what a round newly found.
fn report(parts: &impl Housekeeping, p: &audit::Plan, action: crate::config::AuditAction) {
    use crate::kernel::ibv::{state_name, type_name};
    for b in &p.new {
        if let Some(ep) = parts.registry().local_named(&b.endpoint) {
            ep.audit_bypasses.fetch_add(1, Ordering::Relaxed);
        }
        warn!(
            endpoint = %b.endpoint, pid = %b.pids(), qpn = b.qpn, state = state_name(b.state),
            "audit: bypass: {} QP {:#x} of pid {} in {} is {} but masqd never admitted it{}",
            type_name(b.qp_type), b.qpn, b.pids(), b.endpoint, state_name(b.state), b.via.describe()
        );
        let spared = b.via == audit::Via::Holder && b.procs.iter().all(|p| p.session);
        if action == crate::config::AuditAction::KillProcess && spared {
            warn!(
                endpoint = %b.endpoint, qpn = b.qpn,
                "audit: QP {:#x}: every process holding the device in {} has a session: none is killed (kill-endpoint would end the endpoint)",
                b.qpn, b.endpoint
            );
        }
    }
    for u in &p.unattributed {
        parts.metrics().audit_unattributed.inc();
        let held = if u.holders.is_empty() {
            "no endpoint's process holds the device's uverbs file".to_string()
        } else {
            format!(
                "the device's uverbs file is held in {}",
                u.holders.join(", ")
            )
        };
        warn!(
            qpn = u.qpn, state = state_name(u.state),
            "audit: unattributed: {} QP {:#x} is {} and masqd never admitted it, but the kernel names no live creator of it, its PD or its context, and {held}: counted, not acted on",
            type_name(u.qp_type), u.qpn, state_name(u.state)
        );
    }
}

/// Sends the round's kills.
fn act(
    parts: &impl Housekeeping,
    p: &audit::Plan,
    ids: &crate::enforce::attribution::EndpointIds,
    parent: &str,
) {
    let ep_of = |name: &str| parts.registry().local_named(name);
    for (endpoint, pid) in &p.kill_pids {
        match audit::kill_process(*pid, endpoint, ids) {
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
        match audit::kill_endpoint(parent, endpoint) {
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

/// Whether QP `qpn` on rail `rail`'s device is one the RDMA CM connected,
/// for the device of `endpoint`'s apps on that rail (of any endpoint's
/// when None).
fn cm_made(parts: &impl Housekeeping, endpoint: Option<&str>, qpn: u32, rail: usize) -> bool {
    parts
        .registry()
        .local()
        .iter()
        .filter(|ep| endpoint.is_none_or(|name| ep.cfg.name == name))
        .any(|ep| {
            parts
                .registry()
                .devices_of(ep)
                .iter()
                .filter(|d| d.rail == rail)
                .any(|d| parts.cm_connected(&d.cfg.name, qpn))
        })
}

/// The backstop's housekeeping: pick up tenant cgroups created after
/// masqd, log drops (the attempts of tenants that skip libmasq), and once,
/// after the grace period, rewrite the sets from what sessions re-registered.
pub fn backstop_loop(parts: &impl Housekeeping) {
    let Some(b) = parts.backstop() else {
        return;
    };
    let grace = Duration::from_secs(parts.config().backstop.recovery_grace_seconds);
    let mut reconciled = false;
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    let beat = parts.run().heartbeat("backstop", STALL);
    while !parts.run().is_stopping() {
        beat.beat();
        thread::sleep(Duration::from_secs(2));
        b.refresh_cgroups();
        if !reconciled && parts.run().uptime() >= grace {
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

/// The backstop's set updates, flushed every 500 ms until masqd stops,
/// then once more.
pub fn backstop_sets_loop(parts: &impl Housekeeping) {
    if let Some(b) = parts.backstop() {
        let beat = parts.run().heartbeat("backstop-sets", STALL);
        while !parts.run().is_stopping() {
            beat.beat();
            b.flush_updates(Duration::from_millis(500));
        }
        b.flush_updates(Duration::ZERO);
    }
}

/// Endpoints' cgroups appear when their containers start: their rdma
/// limits and rate-limit marks follow, every 2 s.
pub fn cgroup_limits_loop(parts: &impl Housekeeping) {
    let beat = parts.run().heartbeat("cgroup-limits", STALL);
    while !parts.run().is_stopping() {
        beat.beat();
        for ep in parts.registry().local() {
            parts
                .limits()
                .apply_rdma_limits(&ep, parts.device_name(&ep));
        }
        if let Err(e) = parts.limits().sync_rates(&parts.registry().configs()) {
            warn!("rate limits: {e}");
        }
        thread::sleep(Duration::from_secs(2));
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
