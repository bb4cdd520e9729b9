//! Kernel limits on the RDMA objects an endpoint holds: the rdma cgroup
//! controller's `rdma.max` in the endpoint's cgroup
//! (`<cgroupParent>/<name>`, as the backstop knows it).
//!
//! The controller charges the task that creates an object. A tenant's apps
//! open the device and create their PDs, CQs, QPs and MRs themselves
//! (libmasq calls stock libibverbs in the app), so all of it counts against
//! the endpoint; masqd only modifies QPs on the app's file, which creates
//! nothing and is charged nowhere.

use crate::config::RdmaLimits;
use crate::error::Result;
use std::io;
use std::path::{Path, PathBuf};

/// Where cgroup v2 is mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The inode of cgroup directory `dir`, if it exists: it tells a cgroup
/// from a later one of the same name.
pub fn cgroup_inode(dir: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir)
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| m.ino())
}

/// The `rdma.max` line for `device`; an unset limit is `max`.
pub fn max_line(device: &str, l: &RdmaLimits) -> String {
    let v = |n: Option<u32>| n.map_or("max".to_string(), |n| n.to_string());
    format!(
        "{device} hca_handle={} hca_object={}",
        v(l.handles),
        v(l.objects)
    )
}

/// The device's entry in an `rdma.max` or `rdma.current` file:
/// (hca_handle, hca_object), `None` for `max`.
pub fn parse_line(text: &str, device: &str) -> Option<(Option<u32>, Option<u32>)> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(device))?;
    let mut handles = None;
    let mut objects = None;
    for kv in line.split_whitespace().skip(1) {
        let (k, v) = kv.split_once('=')?;
        let n = if v == "max" {
            None
        } else {
            Some(v.parse().ok()?)
        };
        match k {
            "hca_handle" => handles = n,
            "hca_object" => objects = n,
            _ => {}
        }
    }
    Some((handles, objects))
}

pub struct Cgroups {
    root: PathBuf,
    parent: String,
}

/// What `apply` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Applied {
    /// The endpoint's cgroup does not exist (yet): nothing to limit.
    NoCgroup,
    Unchanged,
    Set,
}

impl Cgroups {
    pub fn new(root: impl Into<PathBuf>, parent: &str) -> Cgroups {
        Cgroups {
            root: root.into(),
            parent: parent.trim_matches('/').to_string(),
        }
    }

    fn dir(&self, endpoint: &str) -> PathBuf {
        self.root.join(&self.parent).join(endpoint)
    }

    /// Turn the rdma controller on from the root down to the endpoints'
    /// parent, so each endpoint's cgroup has `rdma.max`.
    fn enable_controller(&self) -> io::Result<()> {
        let mut dir = self.root.clone();
        for part in std::iter::once("").chain(self.parent.split('/')) {
            if !part.is_empty() {
                dir.push(part);
            }
            let ctl = dir.join("cgroup.subtree_control");
            let on = std::fs::read_to_string(&ctl)
                .map_err(|e| at(&ctl, e))?
                .split_whitespace()
                .any(|c| c == "rdma");
            if !on {
                std::fs::write(&ctl, "+rdma").map_err(|e| at(&ctl, e))?;
            }
        }
        Ok(())
    }

    /// Set `endpoint`'s limits on `device` (its line of the cgroup's
    /// `rdma.max`) if its cgroup exists and they differ.
    pub fn apply(&self, endpoint: &str, device: &str, limits: &RdmaLimits) -> Result<Applied> {
        let dir = self.dir(endpoint);
        if !dir.is_dir() {
            return Ok(Applied::NoCgroup);
        }
        let max = dir.join("rdma.max");
        if !max.exists() {
            self.enable_controller()?;
        }
        let want = (limits.handles, limits.objects);
        let now = std::fs::read_to_string(&max).map_err(|e| at(&max, e))?;
        if parse_line(&now, device) == Some(want) {
            return Ok(Applied::Unchanged);
        }
        std::fs::write(&max, max_line(device, limits)).map_err(|e| at(&max, e))?;
        Ok(Applied::Set)
    }

    /// Lift `endpoint`'s limits on `device` (it was deleted, or lost its
    /// limits).
    pub fn clear(&self, endpoint: &str, device: &str) -> Result<()> {
        let max = self.dir(endpoint).join("rdma.max");
        match std::fs::read_to_string(&max) {
            Ok(now) if parse_line(&now, device).is_some() => {
                let unlimited = RdmaLimits {
                    handles: None,
                    objects: None,
                };
                Ok(std::fs::write(&max, max_line(device, &unlimited)).map_err(|e| at(&max, e))?)
            }
            _ => Ok(()),
        }
    }

    /// What the endpoint's processes hold of `device` now: (handles,
    /// objects).
    pub fn current(&self, endpoint: &str, device: &str) -> Option<(u32, u32)> {
        let text = std::fs::read_to_string(self.dir(endpoint).join("rdma.current")).ok()?;
        match parse_line(&text, device)? {
            (Some(h), Some(o)) => Some((h, o)),
            _ => None,
        }
    }
}

fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(handles: Option<u32>, objects: Option<u32>) -> RdmaLimits {
        RdmaLimits { handles, objects }
    }

    #[test]
    fn lines_round_trip() {
        let l = max_line("rxe0", &limits(Some(2), None));
        assert_eq!(l, "rxe0 hca_handle=2 hca_object=max");
        assert_eq!(parse_line(&l, "rxe0"), Some((Some(2), None)));
        let file = "mlx5_0 hca_handle=max hca_object=max\nrxe0 hca_handle=1 hca_object=7\n";
        assert_eq!(parse_line(file, "rxe0"), Some((Some(1), Some(7))));
        assert_eq!(parse_line(file, "rxe1"), None);
        assert_eq!(parse_line("rxe0 hca_handle=x", "rxe0"), None);
    }

    #[test]
    fn apply_writes_once_and_only_where_the_cgroup_is() {
        let root = tempfile::tempdir().unwrap();
        for d in ["", "tenants"] {
            let ctl = root.path().join(d).join("cgroup.subtree_control");
            std::fs::create_dir_all(ctl.parent().unwrap()).unwrap();
            std::fs::write(&ctl, "cpu memory").unwrap();
        }
        let cg = Cgroups::new(root.path(), "tenants");
        let l = limits(None, Some(6));
        assert_eq!(cg.apply("acme-a", "rxe0", &l).unwrap(), Applied::NoCgroup);
        let dir = root.path().join("tenants/acme-a");
        std::fs::create_dir_all(&dir).unwrap();
        // No rdma.max: the controller is turned on down to the parent (in
        // a real cgroupfs that makes the file; here it stays missing).
        assert_eq!(
            cg.apply("acme-a", "rxe0", &l).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            std::fs::read_to_string(root.path().join("tenants/cgroup.subtree_control")).unwrap(),
            "+rdma"
        );
        std::fs::write(dir.join("rdma.max"), "").unwrap();
        assert_eq!(cg.apply("acme-a", "rxe0", &l).unwrap(), Applied::Set);
        assert_eq!(
            std::fs::read_to_string(dir.join("rdma.max")).unwrap(),
            "rxe0 hca_handle=max hca_object=6"
        );
        assert_eq!(cg.apply("acme-a", "rxe0", &l).unwrap(), Applied::Unchanged);
        std::fs::write(dir.join("rdma.current"), "rxe0 hca_handle=1 hca_object=3\n").unwrap();
        assert_eq!(cg.current("acme-a", "rxe0"), Some((1, 3)));
        cg.clear("acme-a", "rxe0").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("rdma.max")).unwrap(),
            "rxe0 hca_handle=max hca_object=max"
        );
    }
}
