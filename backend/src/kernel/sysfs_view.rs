//! The tenant's view of sysfs: what `/sys/class/infiniband` shows inside an
//! endpoint.
//!
//! sysfs RDMA classes are not per network namespace (shared mode), so a
//! tenant's `/sys/class/infiniband` lists the physical device and its
//! underlay GIDs. NCCL, UCX and others read that tree directly, so masqd
//! writes a per-endpoint tree that describes the virtual device instead,
//! and the tenant's runtime binds it over the real directories. Layout,
//! under the endpoint's socket directory (mounted at /run/masq in the
//! tenant):
//!
//! ```text
//! sysfs/class/infiniband/           bound over /sys/class/infiniband
//!     vrdma0 -> .vrdma0.N           the kernel's class entries are symlinks too
//!     .vrdma0.N/node_guid ... ports/1/gids/0 ...
//!                                   (one gids/I per entry of a table as long
//!                                   as the physical port's, as the kernel's)
//! sysfs/class/infiniband_verbs/     bound over /sys/class/infiniband_verbs
//!     abi_version  uverbs0/{ibdev,abi_version}
//!     (vrdma1 and uverbs1 beside them for the apps' device on a second
//!     rail, each kept by a view of its own in the same directories)
//! phys-sys/                         empty; the runtime mounts the real sysfs
//!                                   here, for libmasq (see masq_sysfs.c)
//! ```
//!
//! A bind mount pins the directory it was given, so the directories a
//! tenant mounts are created once and never replaced: a new view is built
//! in `.vrdma0.N+1` and a symlink renamed over `vrdma0`, so readers see the
//! old tree or the new one, never a mix. For the same reason shutdown
//! empties them but leaves them in place: tenants still running when masqd
//! comes back see its new view.
//!
//! The socket directory is the tenant's to write where its runtime mounts
//! it read-write, so the view never goes there by path: every directory
//! is opened and every entry written or removed through `safe_fs`, which
//! follows no link. A link or file where the view's directories must be is
//! refused (`View::new` fails, and the endpoint is not served); a link
//! among the entries is removed itself.

use crate::error::Result;
use crate::safe_fs::Dir;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tracing::{debug, info, warn};

/// The view's root, in the socket directory.
const ROOT_DIR: &str = "sysfs";
/// The class directories the tenant's runtime binds over /sys.
pub const CLASS_DIRS: [&str; 2] = ["class/infiniband", "class/infiniband_verbs"];
/// The mount point for the physical sysfs, inside the socket directory.
pub const PHYS_SYSFS_DIR: &str = "phys-sys";

/// Device attributes copied from the physical device: they describe the
/// hardware, not the host (no GUID, no GID, no name). `node_desc` is not
/// among them: rdma-ndd writes the host name into it.
const DEVICE_FILES: &[&str] = &["node_type", "fw_ver", "hca_type", "hw_rev", "board_id"];
/// Port attributes copied from the physical port. `active_mtu` is not a
/// sysfs file (verbs report it), so there is nothing to copy.
const PORT_FILES: &[&str] = &[
    "state",
    "phys_state",
    "link_layer",
    "rate",
    "lid",
    "sm_lid",
    "sm_sl",
    "lid_mask_count",
    "cap_mask",
];

/// What is copied from the physical device: (path relative to the device
/// directory, contents as the kernel wrote them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhysAttrs {
    pub files: Vec<(String, String)>,
    pub abi_version: Option<String>,
}

/// The virtual device as libmasq is told about it at HELLO and in the GID
/// table: the view must agree with what verbs report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VirtualDevice {
    pub name: String,
    /// Its entry in class/infiniband_verbs (`uverbs0` for `vrdma0`).
    pub uverbs: String,
    pub port: u8,
    pub node_guid: u64,
    /// The vNIC's name inside the endpoint (gid_attrs/ndevs).
    pub ndev: String,
    pub gids: Vec<vbond::VirtualGid>,
    /// The physical port's `gid_tbl_len`, which libmasq reports too: the
    /// table's entries without a GID are empty ones.
    pub gid_tbl_len: u32,
}

fn read_attr(path: &Path, phys_dev: &str) -> Option<String> {
    let mut s = std::fs::read_to_string(path).ok()?;
    // A value naming the physical device would give it away.
    if s.contains(phys_dev) {
        return None;
    }
    if !s.ends_with('\n') {
        s.push('\n');
    }
    Some(s)
}

/// Read the attributes copied into every view from `SYSFS/class/infiniband/DEV`.
/// Missing files are left out, as the kernel leaves out what a driver lacks.
pub fn read_phys_attrs(sysfs: &Path, dev: &str, port: u8) -> PhysAttrs {
    let dev_dir = sysfs.join("class/infiniband").join(dev);
    let port_dir = format!("ports/{port}");
    let mut files = Vec::new();
    for f in DEVICE_FILES {
        if let Some(v) = read_attr(&dev_dir.join(f), dev) {
            files.push((f.to_string(), v));
        }
    }
    for f in PORT_FILES {
        let rel = format!("{port_dir}/{f}");
        if let Some(v) = read_attr(&dev_dir.join(&rel), dev) {
            files.push((rel, v));
        }
    }
    // RoCE ports have one P_Key (0xffff); cap what a large IB table copies.
    if let Ok(rd) = std::fs::read_dir(dev_dir.join(&port_dir).join("pkeys")) {
        let mut idx: Vec<u32> = rd
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        idx.sort_unstable();
        for i in idx.into_iter().take(128) {
            let rel = format!("{port_dir}/pkeys/{i}");
            if let Some(v) = read_attr(&dev_dir.join(&rel), dev) {
                files.push((rel, v));
            }
        }
    }
    let abi_version = read_attr(&sysfs.join("class/infiniband_verbs/abi_version"), dev);
    PhysAttrs { files, abi_version }
}

/// The physical port's GID table length as its sysfs shows it: the kernel
/// makes a `gids/I` file for every entry of the table, empty or not
/// (`gid_tbl_len`, 1024 on rxe). 0 when it cannot be read.
pub fn read_gid_tbl_len(sysfs: &Path, dev: &str, port: u8) -> u32 {
    let dir = sysfs
        .join("class/infiniband")
        .join(dev)
        .join(format!("ports/{port}/gids"));
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .map(|i| i.saturating_add(1))
        .max()
        .unwrap_or(0)
}

/// A GID as the kernel prints it (`%pI6`): eight 4-digit groups.
pub fn sysfs_gid(gid: &vbond::Gid) -> String {
    let groups: Vec<String> = gid
        .chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect();
    format!("{}\n", groups.join(":"))
}

/// A GUID as the kernel prints node_guid: four 4-digit groups.
pub fn sysfs_guid(guid: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}\n",
        (guid >> 48) & 0xffff,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    )
}

/// The view's files, as (path relative to the view root, contents).
pub fn render(dev: &VirtualDevice, phys: &PhysAttrs) -> Vec<(PathBuf, String)> {
    let d = Path::new("class/infiniband").join(&dev.name);
    let port = d.join(format!("ports/{}", dev.port));
    let mut out = vec![
        (d.join("node_guid"), sysfs_guid(dev.node_guid)),
        (d.join("sys_image_guid"), sysfs_guid(dev.node_guid)),
        (d.join("node_desc"), format!("{}\n", dev.name)),
    ];
    for (rel, v) in &phys.files {
        out.push((d.join(rel), v.clone()));
    }
    if !phys.files.iter().any(|(f, _)| f == "node_type") {
        out.push((d.join("node_type"), "1: CA\n".into()));
    }
    for g in &dev.gids {
        let i = g.index.to_string();
        out.push((port.join("gids").join(&i), sysfs_gid(&g.gid)));
        let ty = if g.roce_v2 { "RoCE v2" } else { "IB/RoCE v1" };
        out.push((port.join("gid_attrs/types").join(&i), format!("{ty}\n")));
        out.push((
            port.join("gid_attrs/ndevs").join(&i),
            format!("{}\n", dev.ndev),
        ));
    }
    // An empty entry: the kernel's show_port_gid prints the zero GID. Its
    // gid_attrs/types and ndevs files fail a read with EINVAL there, which
    // a plain file cannot do: the view leaves them out (ENOENT at open).
    for i in 0..dev.gid_tbl_len {
        if !dev.gids.iter().any(|g| g.index == i) {
            out.push((port.join("gids").join(i.to_string()), sysfs_gid(&[0; 16])));
        }
    }
    let abi = phys.abi_version.clone().unwrap_or_else(|| "6\n".into());
    let verbs = Path::new("class/infiniband_verbs");
    out.push((verbs.join("abi_version"), abi.clone()));
    out.push((
        verbs.join(&dev.uverbs).join("ibdev"),
        format!("{}\n", dev.name),
    ));
    out.push((verbs.join(&dev.uverbs).join("abi_version"), abi));
    out
}

struct State {
    closed: bool,
    generation: u64,
    device: Option<VirtualDevice>,
    phys: PhysAttrs,
    written: Option<Vec<(PathBuf, String)>>,
    /// The (vrdmaN, uverbsN) names last written, whose entries are this
    /// view's to replace and remove.
    shown: Option<(String, String)>,
}

/// One endpoint's view on disk, kept current with its vNIC and the
/// physical port.
pub struct View {
    /// The endpoint's socket directory, which its tenant may write: below
    /// it the view goes through `safe_fs` only.
    socket_dir: PathBuf,
    /// `<socket dir>/sysfs`
    root: PathBuf,
    phys_sysfs: PathBuf,
    phys_dev: String,
    port: u8,
    /// The physical port's gid_tbl_len: fixed for the device, read once.
    gid_tbl_len: u32,
    /// The view of the apps' first device, which owns the directories;
    /// a further device's view touches only its own entries.
    owner: bool,
    state: Mutex<State>,
}

fn io_at(e: io::Error, p: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", p.display()))
}

/// A directory that may not be there yet: `None` then.
fn existing(d: Result<Dir>) -> Result<Option<Dir>> {
    match d {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

impl View {
    /// The view of the endpoint whose socket lives in `socket_dir`; leftovers
    /// of an earlier masqd are cleared. Nothing shows until `vnic_seen`.
    /// A link or file where one of its directories must be (a tenant's)
    /// is refused, naming it: the endpoint is not served without its view.
    pub fn new(socket_dir: &Path, phys_sysfs: &Path, phys_dev: &str, port: u8) -> Result<View> {
        std::fs::create_dir_all(socket_dir).map_err(|e| io_at(e, socket_dir))?;
        let base = Dir::open(socket_dir)?;
        for c in CLASS_DIRS {
            base.create_dir_all(Path::new(ROOT_DIR).join(c))?.clear()?;
        }
        base.create_dir_all(PHYS_SYSFS_DIR)?;
        Ok(View::of(socket_dir, phys_sysfs, phys_dev, port, true))
    }

    /// The view of a further device of the apps whose socket lives in
    /// `socket_dir`, beside their first device's (which made the
    /// directories, see `new`).
    pub fn further(socket_dir: &Path, phys_sysfs: &Path, phys_dev: &str, port: u8) -> View {
        View::of(socket_dir, phys_sysfs, phys_dev, port, false)
    }

    fn of(socket_dir: &Path, phys_sysfs: &Path, phys_dev: &str, port: u8, owner: bool) -> View {
        View {
            socket_dir: socket_dir.to_path_buf(),
            root: socket_dir.join(ROOT_DIR),
            phys_sysfs: phys_sysfs.to_path_buf(),
            phys_dev: phys_dev.to_string(),
            port,
            gid_tbl_len: read_gid_tbl_len(phys_sysfs, phys_dev, port),
            owner,
            state: Mutex::new(State {
                closed: false,
                generation: 0,
                device: None,
                phys: read_phys_attrs(phys_sysfs, phys_dev, port),
                written: None,
                shown: None,
            }),
        }
    }

    /// Directory `rel` of the view (`""` for its root), opened without
    /// following a link below the socket directory.
    fn dir(&self, rel: &str) -> Result<Dir> {
        Dir::open(&self.socket_dir)?.open_dir(Path::new(ROOT_DIR).join(rel))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The endpoint's vNIC as masqd now sees it (called wherever the
    /// binding is refreshed), its device the apps' `index`th: rewrite the
    /// view if the virtual device changed. Cheap when nothing did, as it
    /// runs on request paths.
    pub fn vnic_seen(&self, b: &vbond::Binding, index: usize) {
        let vdev = format!("vrdma{index}");
        let mut st = self.lock();
        let gids = &b.gids()[..b.gids().len().min(masq_proto::MAX_GIDS)];
        let same = st.device.as_ref().is_some_and(|d| {
            d.node_guid == b.node_guid()
                && d.ndev == b.vnic().ifname
                && d.gids == gids
                && d.name == vdev
        });
        let vdev = vdev.as_str();
        if same || st.closed {
            return;
        }
        st.device = Some(VirtualDevice {
            name: vdev.to_string(),
            uverbs: format!("uverbs{index}"),
            port: self.port,
            node_guid: b.node_guid(),
            ndev: b.vnic().ifname.clone(),
            gids: gids.to_vec(),
            gid_tbl_len: self.gid_tbl_len,
        });
        self.write_locked(&mut st);
    }

    /// Re-read the physical port's attributes (its state may change) and
    /// rewrite the view if they did.
    pub fn refresh_phys(&self) {
        let phys = read_phys_attrs(&self.phys_sysfs, &self.phys_dev, self.port);
        let mut st = self.lock();
        if st.phys != phys {
            st.phys = phys;
            self.write_locked(&mut st);
        }
    }

    /// The vNIC cannot be read (namespace or interface gone): show no
    /// device rather than stale GIDs (the apps' other devices stay).
    pub fn vnic_lost(&self) {
        let mut st = self.lock();
        if st.device.take().is_some() {
            st.written = None;
            if let Some((vdev, uverbs)) = st.shown.take() {
                if let Err(e) = self.remove_own(&vdev, Some(&uverbs), None) {
                    warn!("sysfs view: {e}");
                }
            }
            info!(view = %self.root.display(), "sysfs view emptied: the vNIC is gone");
        }
    }

    /// masqd stops, or the device goes: empty the view for good (the
    /// directories stay as mount points, see the module doc). The first
    /// device's view empties the directories, another's takes its own
    /// entries.
    pub fn remove(&self) {
        let mut st = self.lock();
        st.closed = true;
        st.device = None;
        st.written = None;
        let r = match (self.owner, st.shown.take()) {
            // Each directory emptied though another cannot be.
            (true, _) => CLASS_DIRS
                .iter()
                .map(|c| existing(self.dir(c))?.map_or(Ok(()), |d| d.clear()))
                .fold(Ok(()), Result::and),
            (false, Some((vdev, uverbs))) => self.remove_own(&vdev, Some(&uverbs), None),
            (false, None) => Ok(()),
        };
        if let Err(e) = r {
            warn!("sysfs view: {e}");
        }
    }

    /// Remove device `vdev`'s link and generations but generation `keep`
    /// (and then its link), and its `uverbs` entry if named.
    fn remove_own(&self, vdev: &str, uverbs: Option<&str>, keep: Option<&str>) -> Result<()> {
        if let Some(class) = existing(self.dir("class/infiniband"))? {
            for name in class.names()? {
                let name = name.to_string_lossy();
                // With a generation kept, the link to it stays too.
                let kept = Some(name.as_ref()) == keep || (keep.is_some() && name == vdev);
                if !kept && device_of_entry(&name) == vdev {
                    class.remove(&*name)?;
                }
            }
        }
        match uverbs {
            Some(uverbs) => match existing(self.dir("class/infiniband_verbs"))? {
                Some(verbs) => verbs.remove(uverbs),
                None => Ok(()),
            },
            None => Ok(()),
        }
    }

    fn write_locked(&self, st: &mut State) {
        let Some(dev) = st.device.as_ref() else {
            return;
        };
        let files = render(dev, &st.phys);
        if st.written.as_ref() == Some(&files) {
            return;
        }
        match self.apply(&dev.name, st.generation + 1, &files) {
            Ok(()) => {
                st.generation += 1;
                st.written = Some(files);
                // A device whose place among the apps' changed: its old
                // name's entries go.
                let now = (dev.name.clone(), dev.uverbs.clone());
                if let Some((vdev, uverbs)) = st.shown.replace(now.clone()) {
                    if (vdev.as_str(), uverbs.as_str()) != (now.0.as_str(), now.1.as_str()) {
                        if let Err(e) = self.remove_own(&vdev, Some(&uverbs), None) {
                            warn!("sysfs view: {e}");
                        }
                    }
                }
                debug!(view = %self.root.display(), generation = st.generation,
                       "sysfs view written");
            }
            Err(e) => warn!(view = %self.root.display(), "cannot write the sysfs view: {e}"),
        }
    }

    /// Put `files` on disk: the device directory as a new generation behind
    /// its symlink, the few other files one by one. Every directory is
    /// opened below the socket directory without following a link.
    fn apply(&self, vdev: &str, generation: u64, files: &[(PathBuf, String)]) -> Result<()> {
        let root = self.dir("")?;
        let class = root.open_dir("class/infiniband")?;
        let dev_prefix = Path::new("class/infiniband").join(vdev);
        let gen_name = format!(".{vdev}.{generation}");
        class.remove(&gen_name)?;
        let gen = class.create_dir_all(&gen_name)?;
        // The directories written in, each opened once: (in the generation,
        // path below it or the root).
        let mut dirs: HashMap<(bool, PathBuf), Dir> = HashMap::new();
        for (rel, contents) in files {
            let (in_gen, base, inside) = match rel.strip_prefix(&dev_prefix) {
                Ok(inside) => (true, &gen, inside),
                Err(_) => (false, &root, rel.as_path()),
            };
            let (Some(parent), Some(name)) = (inside.parent(), inside.file_name()) else {
                continue;
            };
            let dir = if parent.as_os_str().is_empty() {
                base
            } else {
                match dirs.entry((in_gen, parent.to_path_buf())) {
                    std::collections::hash_map::Entry::Occupied(d) => &*d.into_mut(),
                    std::collections::hash_map::Entry::Vacant(v) => {
                        &*v.insert(base.create_dir_all(parent)?)
                    }
                }
            };
            if in_gen {
                dir.write(name, contents)?;
            } else {
                dir.write_atomic(name, contents)?;
            }
        }
        let link_tmp = format!(".{vdev}.link");
        class.remove(&link_tmp)?;
        class.symlink(&gen_name, &link_tmp)?;
        class.rename(&link_tmp, vdev)?;
        // Older generations: its own; and for the first device's view,
        // whatever else an earlier view left but the other devices' own.
        if !self.owner {
            return self.remove_own(vdev, None, Some(&gen_name));
        }
        for name in class.names()? {
            let name = name.to_string_lossy();
            let of = device_of_entry(&name);
            if name == gen_name.as_str() || name == vdev || (of.starts_with("vrdma") && of != vdev)
            {
                continue;
            }
            class.remove(&*name)?;
        }
        Ok(())
    }
}

/// A deleted endpoint's view directories in `socket_dir` (emptied by
/// `View::remove`), each only if it is an empty directory: nothing through
/// a link, nothing a tenant left in them.
pub fn remove_dirs(socket_dir: &Path) {
    let Ok(base) = Dir::open(socket_dir) else {
        return;
    };
    let root = Path::new(ROOT_DIR);
    if let Ok(class) = base.open_dir(root.join("class")) {
        for c in CLASS_DIRS {
            if let Some(name) = Path::new(c).file_name() {
                class.remove_empty_dir(name);
            }
        }
    }
    if let Ok(sysfs) = base.open_dir(root) {
        sysfs.remove_empty_dir("class");
    }
    base.remove_empty_dir(OsStr::new(ROOT_DIR));
    base.remove_empty_dir(PHYS_SYSFS_DIR);
}

/// The device a class/infiniband entry is of: `vrdma1` for `vrdma1`,
/// `.vrdma1.7` and `.vrdma1.link`.
fn device_of_entry(name: &str) -> &str {
    let n = name.strip_prefix('.').unwrap_or(name);
    n.split('.').next().unwrap_or(n)
}

#[cfg(test)]
#[path = "sysfs_view_tests.rs"]
mod tests;
