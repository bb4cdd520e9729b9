//! Whose is a QP: what the audit asks to tie a connected QP to a tenant
//! process (`Owners`), and its answers from the kernel (`KernelOwners`).
//!
//! The kernel names a QP's creating task only while that task lives
//! (nldev's `fill_res_name_pid` leaves `RES_PID` out once it has exited),
//! so a QP created by a thread that exited names nobody. What else the
//! kernel reports leads back to a process, in this order:
//! - the QP's PD (`RES_PDN`), whose creating task the PD dump names;
//! - the PD's user context (`RES_CTXN`), whose creating task the context
//!   dump names (where the kernel has that dump: 6.1 does);
//! - the uverbs file that holds the context: nldev does not say which, but
//!   every process that holds the device's uverbs file open (an fd, or a
//!   mapping of it, which keeps the file alive after its fd is closed)
//!   shows it in /proc as the device's `st_rdev`. Only processes in a
//!   tenant endpoint are candidates; when they are all in one endpoint,
//!   the QP is that endpoint's.
//!
//! A task created the object and may have handed its file to another
//! process since (fork, SCM_RIGHTS); the audit acts on whom the kernel
//! names, as it always did.

use crate::error::Result;
use crate::kernel::rdma_nl::{RdmaNl, ResInfo};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use tracing::debug;

/// What the audit asks of the kernel and /proc, one device and one round
/// at a time (an implementation may cache within the round).
pub trait Owners {
    /// The endpoint and process of live task `task`; None when it runs in
    /// no endpoint (a host process) or is gone.
    fn owner(&mut self, task: u32) -> Option<(String, i32)>;
    /// PD `pdn` of the device, if the kernel lists it.
    fn pd(&mut self, pdn: u32) -> Option<ResInfo>;
    /// The creating task of user context `ctxn`, if the kernel names one.
    fn ctx_creator(&mut self, ctxn: u32) -> Option<u32>;
    /// The tenant processes that hold the device's uverbs file (an fd or a
    /// mapping), each with its endpoint.
    fn holders(&mut self) -> Vec<(String, i32)>;
    /// Whether process `pid` has libmasq mapped (so it had, or will have,
    /// a session whose QPs it resyncs after masqd's start).
    fn libmasq(&mut self, pid: i32) -> bool;
    /// Whether process `pid` has a live masqd session now.
    fn session(&mut self, pid: i32) -> bool;
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

/// `Owners` from rdma netlink (one device), /proc and sysfs.
pub struct KernelOwners<'a> {
    nl: &'a mut RdmaNl,
    ids: &'a EndpointIds,
    sessions: &'a HashSet<i32>,
    pds: Option<HashMap<u32, ResInfo>>,
    ctxs: Option<HashMap<u32, ResInfo>>,
    holders: Option<Vec<(String, i32)>>,
    libmasq: HashMap<i32, bool>,
}

impl<'a> KernelOwners<'a> {
    pub fn new(
        nl: &'a mut RdmaNl,
        ids: &'a EndpointIds,
        sessions: &'a HashSet<i32>,
    ) -> KernelOwners<'a> {
        KernelOwners {
            nl,
            ids,
            sessions,
            pds: None,
            ctxs: None,
            holders: None,
            libmasq: HashMap::new(),
        }
    }
}

fn by_id(r: Result<Vec<ResInfo>>, what: &str, device: &str) -> HashMap<u32, ResInfo> {
    match r {
        Ok(v) => v.into_iter().map(|r| (r.id, r)).collect(),
        Err(e) => {
            debug!("audit: cannot list the {what}s of {device}: {e}");
            HashMap::new()
        }
    }
}

impl Owners for KernelOwners<'_> {
    fn owner(&mut self, task: u32) -> Option<(String, i32)> {
        let pid = crate::kernel::ownership::tgid_of(task)?;
        Some((self.ids.endpoint_of(pid)?, pid))
    }

    fn pd(&mut self, pdn: u32) -> Option<ResInfo> {
        if self.pds.is_none() {
            let r = self.nl.pds();
            self.pds = Some(by_id(r, "PD", self.nl.device()));
        }
        self.pds.as_ref()?.get(&pdn).cloned()
    }

    fn ctx_creator(&mut self, ctxn: u32) -> Option<u32> {
        if self.ctxs.is_none() {
            let r = self.nl.ctxs();
            self.ctxs = Some(by_id(r, "context", self.nl.device()));
        }
        self.ctxs.as_ref()?.get(&ctxn)?.pid
    }

    fn holders(&mut self) -> Vec<(String, i32)> {
        if self.holders.is_none() {
            let ids = self.ids;
            let class = Path::new("/sys/class/infiniband_verbs");
            let found = match uverbs_rdev(class, self.nl.device()) {
                Some(rdev) => tenant_holders(Path::new("/proc"), rdev, |pid| ids.endpoint_of(pid)),
                None => {
                    debug!("audit: no uverbs device for {}", self.nl.device());
                    Vec::new()
                }
            };
            self.holders = Some(found);
        }
        self.holders.clone().unwrap_or_default()
    }

    fn libmasq(&mut self, pid: i32) -> bool {
        *self.libmasq.entry(pid).or_insert_with(|| {
            std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| maps_libmasq(&m))
        })
    }

    fn session(&mut self, pid: i32) -> bool {
        self.sessions.contains(&pid)
    }
}

/// The dev_t of `device`'s uverbs character device, from the class
/// directory (`/sys/class/infiniband_verbs`: `uverbsN/ibdev` names the
/// device, `uverbsN/dev` is `major:minor`).
pub fn uverbs_rdev(class: &Path, device: &str) -> Option<u64> {
    for e in std::fs::read_dir(class).ok()?.flatten() {
        let dir = e.path();
        let ibdev = std::fs::read_to_string(dir.join("ibdev")).unwrap_or_default();
        if ibdev.trim() != device {
            continue;
        }
        let dev = std::fs::read_to_string(dir.join("dev")).ok()?;
        let (major, minor) = dev.trim().split_once(':')?;
        return Some(libc::makedev(major.parse().ok()?, minor.parse().ok()?));
    }
    None
}

/// Whether the process whose /proc directory is `proc_dir` holds the
/// character device `rdev`: among its fds, or its mappings (`map_files`,
/// readable by root), which keep a closed fd's file alive.
pub fn holds(proc_dir: &Path, rdev: u64) -> bool {
    ["fd", "map_files"].iter().any(|sub| {
        let Ok(entries) = std::fs::read_dir(proc_dir.join(sub)) else {
            return false;
        };
        entries.flatten().any(|e| {
            // stat follows the magic link to the open file's inode.
            std::fs::metadata(e.path())
                .is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == rdev)
        })
    })
}

/// The processes under `proc_root` that run in an endpoint
/// (`endpoint_of`) and hold `rdev`, each with its endpoint, by pid.
pub fn tenant_holders(
    proc_root: &Path,
    rdev: u64,
    endpoint_of: impl Fn(i32) -> Option<String>,
) -> Vec<(String, i32)> {
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let mut out: Vec<(String, i32)> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((endpoint_of(pid)?, pid)))
        .filter(|(_, pid)| holds(&proc_root.join(pid.to_string()), rdev))
        .collect();
    out.sort_by_key(|(_, pid)| *pid);
    out
}

/// Whether a /proc/PID/maps text maps libmasq (`libmasq.so` or one of
/// its facades, `libmasq-ibverbs.so`, `libmasq-rdmacm.so`). A tenant can
/// map a file of that name: the answer only delays the audit's action
/// during the recovery grace, never spares a QP.
pub fn maps_libmasq(maps: &str) -> bool {
    maps.lines().any(|l| {
        l.split_whitespace()
            .nth(5)
            .and_then(|path| path.rsplit('/').next())
            .is_some_and(|name| name.starts_with("libmasq") && name.contains(".so"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn dev_null() -> u64 {
        std::fs::metadata("/dev/null").expect("/dev/null").rdev()
    }

    #[test]
    fn the_uverbs_device_is_found_by_its_ibdev() {
        let d = tempfile::tempdir().expect("tempdir");
        for (n, ibdev, dev) in [
            ("uverbs0", "mlx5_0", "231:192"),
            ("uverbs1", "rxe0", "231:193"),
        ] {
            std::fs::create_dir(d.path().join(n)).expect("mkdir");
            std::fs::write(d.path().join(n).join("ibdev"), format!("{ibdev}\n")).expect("w");
            std::fs::write(d.path().join(n).join("dev"), format!("{dev}\n")).expect("w");
        }
        assert_eq!(uverbs_rdev(d.path(), "rxe0"), Some(libc::makedev(231, 193)));
        assert_eq!(uverbs_rdev(d.path(), "rxe1"), None);
        assert_eq!(uverbs_rdev(&d.path().join("missing"), "rxe0"), None);
    }

    #[test]
    fn a_holder_is_found_by_its_fd_or_by_a_mapping_alone() {
        // Fake /proc: 10 holds the device by an fd, 11 by a mapping only
        // (its fd closed), 12 holds another device, 13 is a host process.
        let d = tempfile::tempdir().expect("tempdir");
        let mk = |pid: &str, sub: &str, target: &str| {
            let dir = d.path().join(pid).join(sub);
            std::fs::create_dir_all(&dir).expect("mkdir");
            symlink(target, dir.join("3")).expect("symlink");
        };
        mk("10", "fd", "/dev/null");
        mk("11", "map_files", "/dev/null");
        mk("12", "fd", "/dev/zero");
        mk("13", "fd", "/dev/null");
        std::fs::create_dir(d.path().join("self")).expect("mkdir");
        let endpoint_of = |pid| (pid != 13).then(|| "acme-a".to_string());
        assert_eq!(
            tenant_holders(d.path(), dev_null(), endpoint_of),
            vec![("acme-a".to_string(), 10), ("acme-a".to_string(), 11)]
        );
        assert!(!holds(&d.path().join("12"), dev_null()));
    }

    #[test]
    fn libmasq_is_seen_in_maps_by_file_name() {
        let with = "7f00-7f10 r-xp 00000000 08:01 42 /usr/lib/masq/libmasq.so\n";
        let facade = "7f00-7f10 r-xp 00000000 08:01 42 /opt/masq/libmasq-ibverbs.so\n";
        let without = "7f00-7f10 r-xp 00000000 08:01 43 /usr/lib/libibverbs.so.1.14\n\
                       7f20-7f30 rw-s 00000000 00:05 7 /dev/infiniband/uverbs0\n\
                       7ff0-7ff8 rw-p 00000000 00:00 0 [stack]\n";
        assert!(maps_libmasq(with) && maps_libmasq(facade));
        assert!(!maps_libmasq(without));
        assert!(!maps_libmasq(
            "7f00-7f10 r--p 00000000 08:01 44 /home/libmasq-notes.txt\n"
        ));
    }
}
