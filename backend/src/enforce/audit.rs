//! The QP audit: every interval, list every QP on the device through rdma
//! netlink and flag a connected QP (RTR..SQE) whose owner runs in a tenant
//! endpoint but which masqd did not admit. Such a QP was moved by a tenant
//! that skipped libmasq (its own uverbs fd lets it): on hardware RNICs
//! nothing else sees it, on rxe the backstop drops its packets but its
//! retries cost the host CPU. The audit sees every QP's state and owner on
//! any RNIC; it does not see where a QP points, so it flags QPs masqd did
//! not admit, not destinations.
//!
//! The owner is the QP's creating task, or, once that has exited, what
//! `enforce::attribution` finds through the QP's PD, its context and the
//! processes holding the device's uverbs file. A connected user QP it
//! cannot tie to one endpoint is reported and counted as unattributed,
//! never skipped.
//!
//! Races with admission: a session vouches for a QPN *before* masqd moves
//! the QP, and the audit lists the kernel's QPs *before* it reads what is
//! vouched for, so a QP masqd is moving right now is always covered. A
//! session that ends leaves its QPNs vouched for a linger of two intervals,
//! the time its process takes to exit and the kernel to destroy its QPs.

use crate::config::AuditAction;
use crate::enforce::attribution::{EndpointIds, Owners};
use crate::error::{Error, Result};
use crate::kernel::rdma_nl::QpInfo;
use crate::pipeline::ports::Vouchers;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// QPNs masqd answers for: set up through a session, or by its CM. Keyed
/// by (rail, QPN): each device numbers its QPs.
#[derive(Default)]
pub struct Admitted {
    inner: Mutex<HashMap<(usize, u32), Vouch>>,
}

#[derive(Debug, Clone, Copy)]
struct Vouch {
    session: u64,
    /// The session's process: a QPN freed behind masqd's back and reused
    /// by another process is not covered by this vouch.
    pid: i32,
    /// Set when the session ended: vouched for until then.
    until: Option<Instant>,
}

impl Admitted {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(usize, u32), Vouch>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called before masqd moves QP `qpn` of rail `rail`'s device (see
    /// the module doc).
    pub fn vouch(&self, rail: usize, qpn: u32, session: u64, pid: i32) {
        self.lock().insert(
            (rail, qpn),
            Vouch {
                session,
                pid,
                until: None,
            },
        );
    }

    /// The app destroyed the QP (or masqd refused it after vouching).
    pub fn forget(&self, rail: usize, qpn: u32, session: u64) {
        let mut m = self.lock();
        if m.get(&(rail, qpn)).is_some_and(|v| v.session == session) {
            m.remove(&(rail, qpn));
        }
    }

    /// The session ended: its QPNs stay vouched for `linger`.
    pub fn session_gone(&self, session: u64, linger: Duration) {
        let until = Instant::now() + linger;
        for v in self.lock().values_mut() {
            if v.session == session && v.until.is_none() {
                v.until = Some(until);
            }
        }
    }

    /// The QPNs of rail `rail`'s device vouched for now, with the process
    /// each is vouched for; expired lingers are dropped.
    pub fn snapshot(&self, rail: usize) -> HashMap<u32, i32> {
        let now = Instant::now();
        let mut m = self.lock();
        m.retain(|_, v| v.until.is_none_or(|t| t > now));
        m.iter()
            .filter(|((r, _), _)| *r == rail)
            .map(|((_, q), v)| (*q, v.pid))
            .collect()
    }
}

/// How the audit tied a QP to its endpoint (see `enforce::attribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The kernel names the QP's creating task.
    Creator,
    /// Its creator exited; the creator of its PD.
    Pd,
    /// Its and its PD's creators exited; the creator of its context.
    Context,
    /// No creator is named: the one endpoint whose processes hold the
    /// device's uverbs file.
    Holder,
}

impl Via {
    /// How the log says it (after "of pid N in ENDPOINT").
    pub fn describe(self) -> &'static str {
        match self {
            Via::Creator => "",
            Via::Pd => " (by its PD's creator: its own has exited)",
            Via::Context => " (by its context's creator: its own and its PD's have exited)",
            Via::Holder => {
                " (by the device's uverbs file: no creator is named, and only this endpoint's processes hold it)"
            }
        }
    }
}

/// A process a bypass names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    /// It has libmasq mapped: during the grace after masqd's start it may
    /// still be resyncing its QPs.
    pub libmasq: bool,
    /// It has a live masqd session.
    pub session: bool,
}

/// A connected tenant QP masqd did not admit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bypass {
    pub endpoint: String,
    pub via: Via,
    /// The owning process (thread group id); for `Via::Holder`, every
    /// process of the endpoint that holds the device's uverbs file.
    pub procs: Vec<Proc>,
    pub qpn: u32,
    pub qp_type: u8,
    pub state: u8,
}

impl Bypass {
    /// The pids, comma-separated (as the log names them).
    pub fn pids(&self) -> String {
        let p: Vec<String> = self.procs.iter().map(|p| p.pid.to_string()).collect();
        p.join(",")
    }

    /// The creator's process: what a report is keyed by (None for
    /// `Via::Holder`, whose holders may change from round to round).
    fn creator(&self) -> Option<i32> {
        (self.via != Via::Holder)
            .then(|| self.procs.first().map(|p| p.pid))
            .flatten()
    }
}

/// A connected user QP the audit could not tie to one endpoint: no
/// creator named by the kernel (of the QP, its PD or its context), and
/// the device's uverbs file held by no tenant process or by several
/// endpoints' (`holders`). Reported and counted, never skipped silently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unattributed {
    pub qpn: u32,
    pub qp_type: u8,
    pub state: u8,
    pub holders: Vec<String>,
}

/// What one round found on one device.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Findings {
    pub bypasses: Vec<Bypass>,
    pub unattributed: Vec<Unattributed>,
}

impl Findings {
    pub fn extend(&mut self, other: Findings) {
        self.bypasses.extend(other.bypasses);
        self.unattributed.extend(other.unattributed);
    }
}

/// Whose a QP is, by the kernel's objects.
enum Tie {
    /// A process in an endpoint, found so.
    Tenant(String, i32, Via),
    /// A live task in no endpoint: a host process's QP.
    Host,
    /// The kernel names no live creator of the QP, its PD or its context.
    Nobody,
}

fn tie(q: &QpInfo, o: &mut impl Owners) -> Tie {
    if let Some(task) = q.pid {
        return creator(o, task, Via::Creator);
    }
    let pd = q.pdn.and_then(|n| o.pd(n));
    if let Some(task) = pd.as_ref().and_then(|p| p.pid) {
        return creator(o, task, Via::Pd);
    }
    match pd.and_then(|p| p.ctxn).and_then(|c| o.ctx_creator(c)) {
        Some(task) => creator(o, task, Via::Context),
        None => Tie::Nobody,
    }
}

fn creator(o: &mut impl Owners, task: u32, via: Via) -> Tie {
    match o.owner(task) {
        Some((endpoint, pid)) => Tie::Tenant(endpoint, pid, via),
        None => Tie::Host,
    }
}

fn proc_of(o: &mut impl Owners, pid: i32) -> Proc {
    Proc {
        pid,
        libmasq: o.libmasq(pid),
        session: o.session(pid),
    }
}

/// The decision, without RDMA or /proc: `o` ties a QP to (endpoint,
/// process) through the kernel's objects (`enforce::attribution`);
/// `admitted` is what masqd vouches for (QPN -> process). A QP of a host
/// process is not the audit's; every other connected user QP is admitted,
/// a bypass, or unattributed.
pub fn find_bypasses(
    qps: &[QpInfo],
    admitted: &HashMap<u32, i32>,
    o: &mut impl Owners,
) -> Findings {
    let mut f = Findings::default();
    for q in qps
        .iter()
        .filter(|q| q.connected() && q.kern_name.is_none())
    {
        let (endpoint, via, procs) = match tie(q, o) {
            Tie::Host => continue,
            Tie::Tenant(_, pid, _) if admitted.get(&q.lqpn) == Some(&pid) => continue,
            Tie::Tenant(endpoint, pid, via) => (endpoint, via, vec![proc_of(o, pid)]),
            Tie::Nobody => {
                let holders = o.holders();
                // Vouched for a process that holds the device: its own QP,
                // whose creating thread has exited.
                if let Some(v) = admitted.get(&q.lqpn) {
                    if holders.iter().any(|(_, p)| p == v) {
                        continue;
                    }
                }
                let eps: BTreeSet<&String> = holders.iter().map(|(e, _)| e).collect();
                let mut eps: Vec<String> = eps.into_iter().cloned().collect();
                if eps.len() != 1 {
                    f.unattributed.push(Unattributed {
                        qpn: q.lqpn,
                        qp_type: q.qp_type,
                        state: q.state,
                        holders: eps,
                    });
                    continue;
                }
                let endpoint = eps.remove(0);
                let procs = holders.iter().map(|(_, p)| proc_of(o, *p)).collect();
                (endpoint, Via::Holder, procs)
            }
        };
        f.bypasses.push(Bypass {
            endpoint,
            via,
            procs,
            qpn: q.lqpn,
            qp_type: q.qp_type,
            state: q.state,
        });
    }
    f
}

/// What earlier rounds reported: each bypass (QPN, endpoint, creator) and
/// each unattributed QPN is reported and counted once while it lasts.
#[derive(Debug, Default)]
pub struct Seen {
    bypasses: HashSet<(u32, String, Option<i32>)>,
    unattributed: HashSet<u32>,
}

/// What one round should do about what it found: a kill is sent once per
/// process (or endpoint) per round.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Newly seen bypasses: log and count these.
    pub new: Vec<Bypass>,
    /// Newly seen unattributed QPs: log and count these.
    pub unattributed: Vec<Unattributed>,
    /// Bypasses left for after the recovery grace (their processes have
    /// libmasq mapped and may be resyncing).
    pub deferred: usize,
    pub kill_pids: Vec<(String, i32)>,
    pub kill_endpoints: Vec<String>,
}

/// `grace`: masqd started less than `recoveryGraceSeconds` ago, and apps
/// that had sessions may not have resynced their QPs yet. Only bypasses
/// of processes with libmasq mapped wait for it: a process without
/// libmasq never had a session, so it has nothing to resync.
pub fn plan(found: &Findings, seen: &mut Seen, action: AuditAction, grace: bool) -> Plan {
    let mut p = Plan::default();
    let (acted, deferred): (Vec<&Bypass>, Vec<&Bypass>) = found
        .bypasses
        .iter()
        .partition(|b| !grace || b.procs.iter().all(|p| !p.libmasq));
    p.deferred = deferred.len();
    let key = |b: &Bypass| (b.qpn, b.endpoint.clone(), b.creator());
    let now: HashSet<_> = acted.iter().map(|&b| key(b)).collect();
    // A QPN reported before and gone since may come back as another QP.
    seen.bypasses.retain(|k| now.contains(k));
    let mut pids = BTreeMap::new();
    let mut eps = BTreeSet::new();
    for b in acted {
        if seen.bypasses.insert(key(b)) {
            p.new.push(b.clone());
        }
        // A process that survived a kill is killed again. Of the holders
        // of a QP no creator is named for, those with a session are
        // spared (the QP may be another holder's).
        for pr in &b.procs {
            if b.via != Via::Holder || !pr.session {
                pids.insert(pr.pid, b.endpoint.clone());
            }
        }
        eps.insert(b.endpoint.clone());
    }
    let now: HashSet<u32> = found.unattributed.iter().map(|u| u.qpn).collect();
    seen.unattributed.retain(|q| now.contains(q));
    for u in &found.unattributed {
        if seen.unattributed.insert(u.qpn) {
            p.unattributed.push(u.clone());
        }
    }
    match action {
        AuditAction::Log => {}
        AuditAction::KillProcess => {
            p.kill_pids = pids.into_iter().map(|(pid, ep)| (ep, pid)).collect()
        }
        AuditAction::KillEndpoint => p.kill_endpoints = eps.into_iter().collect(),
    }
    p
}

/// The wait before the next round: a random time from half the interval
/// to the whole of it. Rounds at a fixed phase let a tenant that learned
/// it (from when its first rogue QP was killed) fit short-lived QPs
/// between them; at random times each QP living `t` is seen with a
/// chance of at least `t / interval`, and no gap exceeds the interval.
pub fn next_wait(interval: Duration) -> Duration {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    let r = if n == 8 {
        u64::from_ne_bytes(b)
    } else {
        // No entropy: the clock's nanoseconds.
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::from(d.subsec_nanos()))
    };
    let frac = (r % 1_000_001) as f64 / 1_000_000.0;
    interval / 2 + (interval / 2).mul_f64(frac)
}

/// The most of one CPU the audit takes: a round that took `took` (a dump of
/// every QP of the device and a few /proc reads) is followed by a wait of
/// at least `took * 19`. rdma netlink tells of no QP made or moved, so no
/// round can list only the changes; with tens of thousands of QPs a round
/// costs enough that `audit.interval` alone would make the audit one of
/// masqd's main costs. Past this bound the rounds come further apart than
/// the interval (the backstop, not the audit, keeps such a QP's packets
/// out meanwhile).
pub const MAX_CPU_SHARE: f64 = 0.05;

/// The wait before the next round after one that took `took`: `next_wait`,
/// stretched to keep the audit within `MAX_CPU_SHARE`.
pub fn paced_wait(interval: Duration, took: Duration) -> Duration {
    next_wait(interval).max(took.mul_f64((1.0 - MAX_CPU_SHARE) / MAX_CPU_SHARE))
}

/// SIGKILL `pid` if it still runs in `endpoint`: a pidfd pins the process,
/// so a pid reused since the listing is never hit.
pub fn kill_process(pid: i32, endpoint: &str, ids: &EndpointIds) -> Result<()> {
    use std::io;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error().into());
    }
    // SAFETY: fd is a fresh descriptor this function owns.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
    if ids.endpoint_of(pid).as_deref() != Some(endpoint) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("pid {pid} is no longer in {endpoint}"),
        )
        .into());
    }
    use std::os::fd::AsRawFd;
    // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error().into());
    }
    Ok(())
}

/// Kill every process of the endpoint's cgroup (cgroup v2 `cgroup.kill`).
pub fn kill_endpoint(cgroup_parent: &str, endpoint: &str) -> Result<()> {
    let path = std::path::Path::new("/sys/fs/cgroup")
        .join(cgroup_parent.trim_matches('/'))
        .join(endpoint)
        .join("cgroup.kill");
    std::fs::write(&path, "1").map_err(|e| Error::os(path.display().to_string(), e))
}

/// What the verbs pipelines ask of the audit: its own methods.
impl Vouchers for Admitted {
    fn vouch(&self, rail: usize, qpn: u32, session: u64, pid: i32) {
        Admitted::vouch(self, rail, qpn, session, pid)
    }
    fn forget(&self, rail: usize, qpn: u32, session: u64) {
        Admitted::forget(self, rail, qpn, session)
    }
}

#[cfg(test)]
#[path = "audit_tests.rs"]
mod tests;
