//! The physical RDMA device masqd serves, as found in sysfs at start.

use crate::error::Result;
use std::io;
use std::path::Path;
use tracing::debug;

/// The physical device masqd serves, as found in sysfs at start.
pub struct HostDevice {
    pub name: String,
    pub port: u8,
    /// Its uverbs character device, e.g. `/dev/infiniband/uverbs0`.
    pub uverbs_node: std::path::PathBuf,
    /// dev_t of its uverbs character device: a tenant's fd must be one.
    pub uverbs_rdev: u64,
    /// The kernel's `enum rdma_driver_id` for it, needed in every ioctl.
    pub driver_id: u32,
    pub gids: Vec<vbond::HostGid>,
}

impl HostDevice {
    /// rxe0 as the unit tests describe a host's device (no GIDs read).
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn rxe0_for_tests() -> HostDevice {
        HostDevice {
            name: "rxe0".into(),
            port: 1,
            uverbs_node: "/dev/infiniband/uverbs0".into(),
            uverbs_rdev: 0,
            driver_id: 0,
            gids: Vec::new(),
        }
    }

    pub fn discover(sysfs: &Path, name: &str, port: u8) -> Result<HostDevice> {
        let dev_dir = sysfs.join("class/infiniband").join(name);
        if !dev_dir.exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no RDMA device {name} (nothing at {})", dev_dir.display()),
            )
            .into());
        }
        let (uverbs, uverbs_rdev) = find_uverbs(sysfs, name)?;
        let node = Path::new("/dev/infiniband").join(&uverbs);
        let dev = std::fs::File::open(&node)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", node.display())))?;
        use std::os::fd::AsFd;
        let driver_id = crate::kernel::uverbs::probe_driver_id(dev.as_fd())
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", node.display())))?;
        let gids = vbond::read_host_gids(sysfs, name, port)?;
        debug!(uverbs = %node.display(), driver_id, "device found");
        Ok(HostDevice {
            name: name.to_string(),
            port,
            uverbs_node: node,
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
