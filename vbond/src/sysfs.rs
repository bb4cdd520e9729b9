//! The host RNIC's GID table, from sysfs.

use crate::gid::{parse_gid, Gid};
use std::io;
use std::path::Path;

/// One valid entry of a physical port's GID table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostGid {
    pub index: u32,
    pub gid: Gid,
    /// `RoCE v2`; false for `IB/RoCE v1`.
    pub roce_v2: bool,
    /// The netdev the GID belongs to (gid_attrs/ndevs), if the kernel says.
    pub ndev: Option<String>,
}

/// Read `SYSFS/class/infiniband/DEV/ports/PORT/gids/N` with
/// `gid_attrs/types/N` and `gid_attrs/ndevs/N`. `sysfs` is `/sys` on a
/// host and a fixture directory in tests. Empty slots (all-zero GID, or a
/// type file the kernel refuses to read) are left out. Sorted by index.
pub fn read_host_gids(sysfs: &Path, dev: &str, port: u8) -> io::Result<Vec<HostGid>> {
    if dev.is_empty() || dev.contains('/') || dev == "." || dev == ".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad RDMA device name {dev:?}"),
        ));
    }
    let port_dir = sysfs
        .join("class/infiniband")
        .join(dev)
        .join("ports")
        .join(port.to_string());
    let gids_dir = port_dir.join("gids");
    let entries = std::fs::read_dir(&gids_dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", gids_dir.display())))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Some(index) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Some(gid) = std::fs::read_to_string(entry.path())
            .ok()
            .and_then(|s| parse_gid(&s))
            .filter(|g| *g != [0; 16])
        else {
            continue;
        };
        let attr = |kind: &str| {
            std::fs::read_to_string(
                port_dir
                    .join("gid_attrs")
                    .join(kind)
                    .join(index.to_string()),
            )
            .ok()
            .map(|s| s.trim().to_string())
        };
        let roce_v2 = match attr("types").as_deref() {
            Some("RoCE v2") => true,
            Some("IB/RoCE v1") => false,
            _ => continue,
        };
        out.push(HostGid {
            index,
            gid,
            roce_v2,
            ndev: attr("ndevs").filter(|n| !n.is_empty()),
        });
    }
    out.sort_by_key(|g| g.index);
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::gid::ipv4_mapped_gid;
    use std::fs;
    use std::net::Ipv4Addr;
    use std::path::PathBuf;

    /// A sysfs tree like rxe0 on eth1 with 192.168.1.1, as the kernel lays
    /// it out (v1 and v2 entry per address; empty slots read as zeros).
    pub(crate) fn fixture(root: &Path) -> PathBuf {
        let port = root.join("class/infiniband/rxe0/ports/1");
        for d in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
            fs::create_dir_all(port.join(d)).unwrap();
        }
        let rows: &[(u32, &str, Option<&str>)] = &[
            (
                0,
                "fe80:0000:0000:0000:5054:00ff:fe00:0001",
                Some("IB/RoCE v1"),
            ),
            (
                1,
                "fe80:0000:0000:0000:5054:00ff:fe00:0001",
                Some("RoCE v2"),
            ),
            (
                2,
                "0000:0000:0000:0000:0000:ffff:c0a8:0101",
                Some("IB/RoCE v1"),
            ),
            (
                3,
                "0000:0000:0000:0000:0000:ffff:c0a8:0101",
                Some("RoCE v2"),
            ),
            (4, "0000:0000:0000:0000:0000:0000:0000:0000", None),
            (
                5,
                "2001:0db8:0000:0000:0000:0000:0000:0001",
                Some("RoCE v2"),
            ),
            (10, "garbage", Some("RoCE v2")),
            (
                11,
                "2001:0db8:0000:0000:0000:0000:0000:0002",
                Some("something new"),
            ),
            (12, "2001:0db8:0000:0000:0000:0000:0000:0003", None),
        ];
        for (i, gid, ty) in rows {
            fs::write(port.join("gids").join(i.to_string()), format!("{gid}\n")).unwrap();
            if let Some(ty) = ty {
                fs::write(
                    port.join("gid_attrs/types").join(i.to_string()),
                    format!("{ty}\n"),
                )
                .unwrap();
                fs::write(port.join("gid_attrs/ndevs").join(i.to_string()), "eth1\n").unwrap();
            }
        }
        fs::write(port.join("gids/README"), "not an index").unwrap();
        root.to_path_buf()
    }

    #[test]
    fn reads_valid_entries_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let root = fixture(dir.path());
        let g = read_host_gids(&root, "rxe0", 1).unwrap();
        let idx: Vec<(u32, bool)> = g.iter().map(|g| (g.index, g.roce_v2)).collect();
        assert_eq!(
            idx,
            vec![(0, false), (1, true), (2, false), (3, true), (5, true)]
        );
        assert_eq!(g[3].gid, ipv4_mapped_gid(Ipv4Addr::new(192, 168, 1, 1)));
        assert_eq!(g[3].ndev.as_deref(), Some("eth1"));
    }

    #[test]
    fn missing_device_port_or_bad_name() {
        let dir = tempfile::tempdir().unwrap();
        let root = fixture(dir.path());
        let e = read_host_gids(&root, "mlx5_0", 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("mlx5_0"));
        assert!(read_host_gids(&root, "rxe0", 2).is_err());
        for bad in ["", ".", "..", "../rxe0", "a/b"] {
            assert_eq!(
                read_host_gids(&root, bad, 1).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
        }
    }
}
