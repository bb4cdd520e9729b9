//! The QP audit: every interval, list every QP on the device through rdma
//! netlink and flag a connected QP (RTR..SQE) whose owner runs in a tenant
//! endpoint but which masqd did not admit. Such a QP was moved by a tenant
//! that skipped libmasq (its own uverbs fd lets it): on hardware RNICs
//! nothing else sees it, on rxe the backstop drops its packets but its
//! retries cost the host CPU. The audit sees every QP's state and owner on
//! any RNIC; it does not see where a QP points, so it flags QPs masqd did
//! not admit, not destinations.
//!
//! Races with admission: a session vouches for a QPN *before* masqd moves
//! the QP, and the audit lists the kernel's QPs *before* it reads what is
//! vouched for, so a QP masqd is moving right now is always covered. A
//! session that ends leaves its QPNs vouched for a linger of two intervals,
//! the time its process takes to exit and the kernel to destroy its QPs.

use crate::config::AuditAction;
use crate::kernel::rdma_nl::QpInfo;
use crate::pipeline::ports::Vouchers;
use std::collections::{BTreeMap, HashMap, HashSet};
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

/// A connected tenant QP masqd did not admit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bypass {
    pub endpoint: String,
    /// The owning process (thread group id).
    pub pid: i32,
    pub qpn: u32,
    pub qp_type: u8,
    pub state: u8,
}

/// The decision, without RDMA or /proc: `owner` tells a QP's creating
/// task (as the kernel reports it) -> (endpoint, process), `None` when
/// the task is not in any endpoint; `admitted` is what masqd vouches for
/// (QPN -> process).
pub fn find_bypasses(
    qps: &[QpInfo],
    admitted: &HashMap<u32, i32>,
    mut owner: impl FnMut(u32) -> Option<(String, i32)>,
) -> Vec<Bypass> {
    qps.iter()
        .filter(|q| q.connected() && q.kern_name.is_none())
        .filter_map(|q| {
            // No pid: a kernel QP, or its creating task has exited (then
            // nothing names a process to act on).
            let (endpoint, pid) = owner(q.pid?)?;
            if admitted.get(&q.lqpn) == Some(&pid) {
                return None;
            }
            Some(Bypass {
                endpoint,
                pid,
                qpn: q.lqpn,
                qp_type: q.qp_type,
                state: q.state,
            })
        })
        .collect()
}

/// What one round should do about what it found, given what earlier
/// rounds already reported: each (QPN, process) is reported and counted
/// once; a kill is sent once per process (or endpoint) per round.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Newly seen bypasses: log and count these.
    pub new: Vec<Bypass>,
    pub kill_pids: Vec<(String, i32)>,
    pub kill_endpoints: Vec<String>,
}

pub fn plan(
    found: &[Bypass],
    reported: &mut HashSet<(u32, i32)>,
    action: AuditAction,
    acting: bool,
) -> Plan {
    let mut p = Plan::default();
    let now: HashSet<(u32, i32)> = found.iter().map(|b| (b.qpn, b.pid)).collect();
    // A QPN reported before and gone since may come back as another QP.
    reported.retain(|k| now.contains(k));
    let mut pids = BTreeMap::new();
    let mut eps = std::collections::BTreeSet::new();
    for b in found {
        if reported.insert((b.qpn, b.pid)) {
            p.new.push(b.clone());
        }
        // A process that survived a kill is killed again.
        pids.insert(b.pid, b.endpoint.clone());
        eps.insert(b.endpoint.clone());
    }
    if acting {
        match action {
            AuditAction::Log => {}
            AuditAction::KillProcess => {
                p.kill_pids = pids.into_iter().map(|(pid, ep)| (ep, pid)).collect()
            }
            AuditAction::KillEndpoint => p.kill_endpoints = eps.into_iter().collect(),
        }
    }
    p
}

/// The endpoints as the audit tells processes apart: network namespace
/// (dev, inode) and cgroup path, read once per round (a namespace may be
/// recreated).
pub struct EndpointIds {
    /// (name, netns (dev, inode) if it exists now, cgroup path)
    eps: Vec<(String, Option<NsId>, String)>,
}

type NsId = (u64, u64);

impl EndpointIds {
    pub fn read(eps: &[crate::config::EndpointConfig], cgroup_parent: &str) -> EndpointIds {
        use std::os::unix::fs::MetadataExt;
        EndpointIds {
            eps: eps
                .iter()
                .map(|e| {
                    let ns = std::fs::metadata(&e.netns).ok().map(|m| (m.dev(), m.ino()));
                    let cg = format!("/{}/{}", cgroup_parent.trim_matches('/'), e.name);
                    (e.name.clone(), ns, cg)
                })
                .collect(),
        }
    }

    /// The endpoint process `pid` runs in: by network namespace, else by
    /// cgroup (a process that left the namespace is still the tenant's).
    pub fn endpoint_of(&self, pid: i32) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        let ns = std::fs::metadata(format!("/proc/{pid}/ns/net"))
            .ok()
            .map(|m| (m.dev(), m.ino()));
        if let Some(ns) = ns {
            if let Some((name, _, _)) = self.eps.iter().find(|(_, n, _)| *n == Some(ns)) {
                return Some(name.clone());
            }
        }
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let path = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
        self.eps
            .iter()
            .find(|(_, _, cg)| path == cg || path.starts_with(&format!("{cg}/")))
            .map(|(name, _, _)| name.clone())
    }
}

/// SIGKILL `pid` if it still runs in `endpoint`: a pidfd pins the process,
/// so a pid reused since the listing is never hit.
pub fn kill_process(pid: i32, endpoint: &str, ids: &EndpointIds) -> std::io::Result<()> {
    use std::io;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor this function owns.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
    if ids.endpoint_of(pid).as_deref() != Some(endpoint) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("pid {pid} is no longer in {endpoint}"),
        ));
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
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Kill every process of the endpoint's cgroup (cgroup v2 `cgroup.kill`).
pub fn kill_endpoint(cgroup_parent: &str, endpoint: &str) -> std::io::Result<()> {
    let path = std::path::Path::new("/sys/fs/cgroup")
        .join(cgroup_parent.trim_matches('/'))
        .join(endpoint)
        .join("cgroup.kill");
    std::fs::write(&path, "1")
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
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
mod tests {
    use super::*;

    fn qp(lqpn: u32, state: u8, pid: Option<u32>) -> QpInfo {
        QpInfo {
            lqpn,
            port: Some(1),
            qp_type: 2,
            state,
            pid,
            kern_name: None,
            rqpn: Some(0x99),
        }
    }

    /// pids 100.. live in acme-a (pid 101 is a thread of 100), 200 in
    /// globex-a, 300 on the host.
    fn owner(pid: u32) -> Option<(String, i32)> {
        match pid {
            100 | 101 => Some(("acme-a".into(), 100)),
            200 => Some(("globex-a".into(), 200)),
            _ => None,
        }
    }

    #[test]
    fn an_unadmitted_connected_tenant_qp_is_a_bypass() {
        let qps = [qp(0x11, 2, Some(100)), qp(0x12, 3, Some(101))];
        let found = find_bypasses(&qps, &HashMap::new(), owner);
        assert_eq!(
            found,
            vec![
                Bypass {
                    endpoint: "acme-a".into(),
                    pid: 100,
                    qpn: 0x11,
                    qp_type: 2,
                    state: 2
                },
                Bypass {
                    endpoint: "acme-a".into(),
                    pid: 100,
                    qpn: 0x12,
                    qp_type: 2,
                    state: 3
                },
            ]
        );
    }

    #[test]
    fn admitted_unconnected_kernel_and_host_qps_are_not() {
        let mut kern = qp(1, 3, None);
        kern.kern_name = Some("ib_core".into());
        let qps = [
            qp(0x11, 3, Some(100)), // admitted
            qp(0x12, 1, Some(100)), // INIT: no destination yet
            qp(0x13, 0, Some(100)), // RESET
            qp(0x14, 6, Some(100)), // ERROR
            qp(0x15, 3, Some(300)), // a host process
            qp(0x16, 3, None),      // creating task gone
            kern,
        ];
        let admitted: HashMap<u32, i32> = [(0x11, 100)].into();
        assert!(find_bypasses(&qps, &admitted, owner).is_empty());
    }

    #[test]
    fn a_qpn_vouched_for_another_process_is_not_admitted() {
        // acme-a's QPN 0x11 was freed behind masqd's back and reused by
        // globex-a's process.
        let admitted: HashMap<u32, i32> = [(0x11, 100)].into();
        let found = find_bypasses(&[qp(0x11, 3, Some(200))], &admitted, owner);
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].pid, found[0].endpoint.as_str()),
            (200, "globex-a")
        );
    }

    #[test]
    fn sqd_and_sqe_count_as_connected() {
        let qps = [qp(0x11, 4, Some(200)), qp(0x12, 5, Some(200))];
        assert_eq!(find_bypasses(&qps, &HashMap::new(), owner).len(), 2);
    }

    #[test]
    fn a_bypass_is_reported_once_and_again_if_its_qpn_comes_back() {
        let b = find_bypasses(&[qp(0x11, 3, Some(100))], &HashMap::new(), owner);
        let mut reported = HashSet::new();
        let p = plan(&b, &mut reported, AuditAction::Log, true);
        assert_eq!(p.new.len(), 1);
        assert!(p.kill_pids.is_empty() && p.kill_endpoints.is_empty());
        assert!(plan(&b, &mut reported, AuditAction::Log, true)
            .new
            .is_empty());
        plan(&[], &mut reported, AuditAction::Log, true);
        assert_eq!(plan(&b, &mut reported, AuditAction::Log, true).new.len(), 1);
    }

    #[test]
    fn kill_modes_name_each_process_or_endpoint_once() {
        let qps = [
            qp(0x11, 3, Some(100)),
            qp(0x12, 3, Some(101)),
            qp(0x13, 2, Some(200)),
        ];
        let b = find_bypasses(&qps, &HashMap::new(), owner);
        let p = plan(&b, &mut HashSet::new(), AuditAction::KillProcess, true);
        assert_eq!(
            p.kill_pids,
            vec![("acme-a".to_string(), 100), ("globex-a".to_string(), 200)]
        );
        let p = plan(&b, &mut HashSet::new(), AuditAction::KillEndpoint, true);
        assert_eq!(p.kill_endpoints, vec!["acme-a", "globex-a"]);
        // During the restart grace nothing is killed.
        let p = plan(&b, &mut HashSet::new(), AuditAction::KillProcess, false);
        assert!(p.kill_pids.is_empty() && p.new.len() == 3);
    }

    #[test]
    fn a_vouched_qpn_lingers_after_its_session_then_expires() {
        let a = Admitted::default();
        a.vouch(0, 0x11, 1, 100);
        a.vouch(0, 0x12, 2, 200);
        // Another device's QP of the same number is another QP.
        a.vouch(1, 0x12, 3, 300);
        a.forget(0, 0x12, 1); // another session's QPN: not forgotten
        assert_eq!(a.snapshot(0), [(0x11, 100), (0x12, 200)].into());
        assert_eq!(a.snapshot(1), [(0x12, 300)].into());
        a.forget(0, 0x12, 2);
        a.forget(1, 0x12, 3);
        a.session_gone(1, Duration::from_millis(50));
        assert_eq!(a.snapshot(0), [(0x11, 100)].into());
        std::thread::sleep(Duration::from_millis(80));
        assert!(a.snapshot(0).is_empty());
    }
}
