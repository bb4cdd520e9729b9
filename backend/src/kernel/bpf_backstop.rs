//! The backstop's eBPF programs (`backend/bpf/backstop.bpf.c`) and their
//! maps: loaded with aya, the maps pinned in bpffs so that a restarted
//! masqd finds them as it left them (as it finds its nftables table), the
//! ingress program on each rail's netdev (tc, clsact), the egress program
//! on each guarded cgroup (attached the kernel's older way, which outlives
//! masqd: a bpf link would go with masqd's file; the next masqd finds the
//! earlier one's by asking the kernel what is attached). An element is one
//! `bpf()` call, where nftables takes a transaction and its commit
//! (docs/design.md, "The backstop's eBPF maps").

use crate::error::{Error, Result};
use aya::maps::{HashMap, MapData};
use aya::programs::tc::{NlOptions, SchedClassifierLink, TcAttachOptions};
use aya::programs::{CgroupSkb, SchedClassifier, TcAttachType};
use aya::{Ebpf, EbpfLoader, Pod};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/backstop.bpf.o"));

/// The ingress filter's place on a netdev's clsact ingress: fixed, so that
/// a restarted masqd replaces its own filter instead of adding one.
const TC_PRIORITY: u16 = 0x4d51; // "MQ"
const TC_HANDLE: u32 = 1;
/// The drops' keys besides an endpoint's (see the C).
pub const DROPS_INGRESS: u32 = 0;
pub const DROPS_UD_INGRESS: u32 = u32::MAX - 1;
pub const DROPS_NO_ENDPOINT: u32 = u32::MAX;

// The maps' keys, as the C declares them: addresses in network byte order
// (an `Ipv4Addr`'s octets as they are), QPNs in host order.

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ConnKey {
    peer: [u8; 4],
    local: [u8; 4],
    qpn: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct QpKey {
    local: [u8; 4],
    qpn: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct HostQp {
    host: [u8; 4],
    qpn: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct EgressKey {
    endpoint: u32,
    host: [u8; 4],
    qpn: u32,
}

/// A drop counter's value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drops {
    pub packets: u64,
    pub bytes: u64,
}

/// An endpoint's name, NUL padded (`endpoint_ids`' key).
#[repr(C)]
#[derive(Clone, Copy)]
struct EndpointName([u8; 256]);

// SAFETY: plain `repr(C)` data without padding (fields of one size each).
unsafe impl Pod for ConnKey {}
unsafe impl Pod for QpKey {}
unsafe impl Pod for HostQp {}
unsafe impl Pod for EgressKey {}
unsafe impl Pod for Drops {}
unsafe impl Pod for EndpointName {}

/// One of the per-connection or per-QP elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    /// (peer host, local address, local QPN): the peer may reach that QP.
    ConnTo(Ipv4Addr, Ipv4Addr, u32),
    /// (local address, QPN): a guarded tenant QP.
    TenantQp(Ipv4Addr, u32),
    /// (endpoint, peer host, peer QPN): the endpoint may send there.
    Egress(u32, Ipv4Addr, u32),
    /// (local address, QPN, VNI): a tenant's UD QP, which takes datagrams
    /// only from UD QPs of its VNI.
    UdQp(Ipv4Addr, u32, u32),
    /// (host, QPN, VNI): another host's UD QP, announced in that VNI.
    UdFrom(Ipv4Addr, u32, u32),
}

impl Key {
    /// The map entry this element is, whatever its value (a UD QP's VNI):
    /// two keys of one slot cannot both be in the maps.
    pub fn slot(self) -> Key {
        match self {
            Key::UdQp(l, q, _) => Key::UdQp(l, q, 0),
            Key::UdFrom(h, q, _) => Key::UdFrom(h, q, 0),
            k => k,
        }
    }

    /// The VNI of a UD QP's element; none for the others.
    pub fn vni(self) -> Option<u32> {
        match self {
            Key::UdQp(_, _, v) | Key::UdFrom(_, _, v) => Some(v),
            _ => None,
        }
    }
}

pub struct BpfBackstop {
    ebpf: Ebpf,
    conn_to: HashMap<MapData, ConnKey, u8>,
    tenant_qps: HashMap<MapData, QpKey, u8>,
    egress: HashMap<MapData, EgressKey, u8>,
    ud_qps: HashMap<MapData, QpKey, u32>,
    ud_from: HashMap<MapData, HostQp, u32>,
    cgroup_endpoint: HashMap<MapData, u64, u32>,
    drops: HashMap<MapData, u32, Drops>,
    endpoint_ids: HashMap<MapData, EndpointName, u32>,
    /// `endpoint_ids` as this masqd read or wrote it.
    numbers: std::collections::HashMap<String, u32>,
}

fn failed(what: impl std::fmt::Display, e: impl std::fmt::Display) -> Error {
    Error::Failed(format!("backstop eBPF: {what}: {e}"))
}

impl BpfBackstop {
    /// Load the programs, with the maps pinned in `dir` (on a bpffs; made
    /// if missing): maps already pinned there are taken with their
    /// elements.
    pub fn load(dir: &Path) -> Result<BpfBackstop> {
        on_bpffs(dir)?;
        std::fs::create_dir_all(dir).map_err(|e| failed(dir.display(), e))?;
        let mut ebpf = EbpfLoader::new()
            .map_pin_path(dir)
            .load(OBJECT)
            .map_err(|e| failed(format!("loading into {}", dir.display()), e))?;
        let ingress: &mut SchedClassifier = program(&mut ebpf, "masq_ingress")?;
        ingress.load().map_err(|e| failed("masq_ingress", e))?;
        let egress: &mut CgroupSkb = program(&mut ebpf, "masq_egress")?;
        egress.load().map_err(|e| failed("masq_egress", e))?;
        Ok(BpfBackstop {
            conn_to: map(&mut ebpf, "conn_to")?,
            tenant_qps: map(&mut ebpf, "tenant_qps")?,
            egress: map(&mut ebpf, "egress")?,
            ud_qps: map(&mut ebpf, "ud_qps")?,
            ud_from: map(&mut ebpf, "ud_from")?,
            cgroup_endpoint: map(&mut ebpf, "cgroup_endpoint")?,
            drops: map(&mut ebpf, "drops")?,
            endpoint_ids: map(&mut ebpf, "endpoint_ids")?,
            numbers: Default::default(),
            ebpf,
        })
    }

    /// Check the RoCE packets that arrive on `netdev`: its clsact qdisc
    /// (added if missing) runs the ingress program, in place of the one an
    /// earlier masqd left there.
    pub fn guard_netdev(&mut self, netdev: &str) -> Result<()> {
        if let Err(e) = aya::programs::tc::qdisc_add_clsact(netdev) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(failed(format!("clsact on {netdev}"), e));
            }
        }
        let prog: &mut SchedClassifier = program(&mut self.ebpf, "masq_ingress")?;
        let options = TcAttachOptions::Netlink(NlOptions {
            priority: TC_PRIORITY,
            handle: TC_HANDLE,
        });
        let id = match prog.attach_with_options(netdev, TcAttachType::Ingress, options) {
            Ok(id) => id,
            // One is there (an earlier masqd's): replaced in one step.
            Err(_) => {
                let old = SchedClassifierLink::attached(
                    netdev,
                    TcAttachType::Ingress,
                    TC_PRIORITY,
                    TC_HANDLE,
                )
                .map_err(|e| failed(format!("{netdev}'s ingress filter"), e))?;
                prog.attach_to_link(old)
                    .map_err(|e| failed(format!("replacing {netdev}'s ingress filter"), e))?
            }
        };
        // The filter stays in the kernel when masqd exits (or restarts).
        let link = prog
            .take_link(id)
            .map_err(|e| failed(format!("{netdev}'s ingress filter"), e))?;
        std::mem::forget(link);
        Ok(())
    }

    /// Check the RoCE packets that the sockets of cgroup `path` (a cgroup
    /// v2 directory, whose id, its inode, the caller found: `id`) and its
    /// descendants send, as endpoint `endpoint`'s. The map learns the
    /// cgroup first: the program drops what it cannot place.
    pub fn guard_cgroup(&mut self, path: &Path, id: u64, endpoint: u32) -> Result<()> {
        self.cgroup_endpoint
            .insert(id, endpoint, 0)
            .map_err(|e| failed(format!("cgroup {}", path.display()), e))?;
        let cgroup = std::fs::File::open(path).map_err(|e| failed(path.display(), e))?;
        let prog: &mut CgroupSkb = program(&mut self.ebpf, "masq_egress")?;
        let fd = prog.fd().map_err(|e| failed("masq_egress", e))?;
        match prog_attach(Attach::Attach, cgroup.as_fd(), fd.as_fd()) {
            // This program is attached there already.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            r => r.map_err(|e| failed(format!("attaching to {}", path.display()), e))?,
        }
        // Then any other masq_egress goes (an earlier masqd's, with maps
        // of its own if the pins were lost): the cgroup is never unchecked.
        self.detach_egress(&cgroup, path, true)
    }

    /// Stop checking cgroup `path`'s egress (its entry goes with
    /// `forget_cgroup`).
    pub fn unguard_cgroup(&mut self, path: &Path) -> Result<()> {
        let cgroup = std::fs::File::open(path).map_err(|e| failed(path.display(), e))?;
        self.detach_egress(&cgroup, path, false)
    }

    /// Detach the masq_egress programs attached to `cgroup` (at `path`),
    /// but this masqd's if `keep_own`: found by asking the kernel what is
    /// attached there and by name, so that an earlier masqd's goes too.
    fn detach_egress(&mut self, cgroup: &std::fs::File, path: &Path, keep_own: bool) -> Result<()> {
        let prog: &mut CgroupSkb = program(&mut self.ebpf, "masq_egress")?;
        let own = prog.info().map_err(|e| failed("masq_egress", e))?.id();
        let attached = attached_egress(cgroup.as_fd())
            .map_err(|e| failed(format!("the programs of {}", path.display()), e))?;
        for id in attached.into_iter().filter(|&id| !(keep_own && id == own)) {
            let Some(info) = aya::programs::loaded_programs()
                .flatten()
                .find(|p| p.id() == id)
            else {
                continue; // gone meanwhile
            };
            if info.name_as_str() != Some("masq_egress") {
                continue; // someone else's program
            }
            let fd = info.fd().map_err(|e| failed(format!("program {id}"), e))?;
            match prog_attach(Attach::Detach, cgroup.as_fd(), fd.as_fd()) {
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                r => r.map_err(|e| failed(format!("detaching from {}", path.display()), e))?,
            }
        }
        Ok(())
    }

    /// Add an element (adding one that is there changes nothing; one of
    /// the same slot, `Key::slot`, is replaced).
    pub fn insert(&mut self, key: Key) -> Result<()> {
        let r = match key {
            Key::ConnTo(peer, local, qpn) => self.conn_to.insert(conn(peer, local, qpn), 1, 0),
            Key::TenantQp(local, qpn) => self.tenant_qps.insert(qp(local, qpn), 1, 0),
            Key::Egress(ep, host, qpn) => self.egress.insert(egress(ep, host, qpn), 1, 0),
            Key::UdQp(local, qpn, vni) => self.ud_qps.insert(qp(local, qpn), vni, 0),
            Key::UdFrom(host, qpn, vni) => self.ud_from.insert(host_qp(host, qpn), vni, 0),
        };
        r.map_err(|e| failed(format!("adding {key:?}"), e))
    }

    /// Delete an element (its slot, whatever its value); false if it was
    /// not there.
    pub fn remove(&mut self, key: Key) -> Result<bool> {
        let r = match key {
            Key::ConnTo(peer, local, qpn) => self.conn_to.remove(&conn(peer, local, qpn)),
            Key::TenantQp(local, qpn) => self.tenant_qps.remove(&qp(local, qpn)),
            Key::Egress(ep, host, qpn) => self.egress.remove(&egress(ep, host, qpn)),
            Key::UdQp(local, qpn, _) => self.ud_qps.remove(&qp(local, qpn)),
            Key::UdFrom(host, qpn, _) => self.ud_from.remove(&host_qp(host, qpn)),
        };
        match r {
            Ok(()) => Ok(true),
            Err(aya::maps::MapError::KeyNotFound) => Ok(false),
            Err(aya::maps::MapError::SyscallError(e))
                if e.io_error.raw_os_error() == Some(libc::ENOENT) =>
            {
                Ok(false)
            }
            Err(e) => Err(failed(format!("deleting {key:?}"), e)),
        }
    }

    /// Every element, sorted.
    pub fn elements(&self) -> Vec<Key> {
        let mut all: Vec<Key> = Vec::new();
        let v4 = Ipv4Addr::from;
        all.extend(
            self.conn_to
                .keys()
                .flatten()
                .map(|k| Key::ConnTo(v4(k.peer), v4(k.local), k.qpn)),
        );
        all.extend(
            self.tenant_qps
                .keys()
                .flatten()
                .map(|k| Key::TenantQp(v4(k.local), k.qpn)),
        );
        all.extend(
            self.egress
                .keys()
                .flatten()
                .map(|k| Key::Egress(k.endpoint, v4(k.host), k.qpn)),
        );
        all.extend(
            self.ud_qps
                .iter()
                .flatten()
                .map(|(k, vni)| Key::UdQp(v4(k.local), k.qpn, vni)),
        );
        all.extend(
            self.ud_from
                .iter()
                .flatten()
                .map(|(k, vni)| Key::UdFrom(v4(k.host), k.qpn, vni)),
        );
        all.sort();
        all
    }

    /// The drop counters: `DROPS_INGRESS`, `DROPS_UD_INGRESS`,
    /// `DROPS_NO_ENDPOINT` or an
    /// endpoint's number, to what was dropped.
    pub fn drops(&self) -> BTreeMap<u32, Drops> {
        self.drops.iter().flatten().collect()
    }

    /// Endpoint `name`'s number in the egress keys: the one it has (this
    /// masqd's, or an earlier one's), else the lowest free one (from 1).
    pub fn endpoint_number(&mut self, name: &str) -> Result<u32> {
        if let Some(&n) = self.numbers.get(name) {
            return Ok(n);
        }
        let key = endpoint_name(name)?;
        if let Ok(n) = self.endpoint_ids.get(&key, 0) {
            self.numbers.insert(name.to_string(), n);
            return Ok(n);
        }
        let taken: std::collections::BTreeSet<u32> =
            self.endpoint_ids.iter().flatten().map(|(_, n)| n).collect();
        let n = (1..DROPS_UD_INGRESS)
            .find(|n| !taken.contains(n))
            .ok_or_else(|| failed(name, "no endpoint number left"))?;
        self.endpoint_ids
            .insert(key, n, 0)
            .map_err(|e| failed(format!("numbering endpoint {name}"), e))?;
        self.numbers.insert(name.to_string(), n);
        Ok(n)
    }

    /// The endpoint numbered `n` (by this masqd: `endpoint_number`).
    pub fn endpoint_of(&self, n: u32) -> Option<&str> {
        self.numbers
            .iter()
            .find(|(_, &m)| m == n)
            .map(|(name, _)| name.as_str())
    }

    /// Endpoint `name` is no longer served: its number and drop counter go
    /// (its elements went before).
    pub fn forget_endpoint(&mut self, name: &str) {
        self.numbers.remove(name);
        if let Ok(key) = endpoint_name(name) {
            if let Ok(n) = self.endpoint_ids.get(&key, 0) {
                let _ = self.drops.remove(&n);
            }
            let _ = self.endpoint_ids.remove(&key);
        }
    }

    /// A cgroup no longer guarded, or gone (by its id then): its entry
    /// goes.
    pub fn forget_cgroup(&mut self, id: u64) {
        let _ = self.cgroup_endpoint.remove(&id);
    }
}

/// Where the system mounts bpffs (systemd does; a bare init may not).
const BPFFS: &str = "/sys/fs/bpf";

/// Check that `dir` is on a bpf file system (its nearest existing
/// ancestor is), mounting one at `/sys/fs/bpf` first if `dir` is below it
/// and none is there.
fn on_bpffs(dir: &Path) -> Result<()> {
    const BPF_FS_MAGIC: nix::sys::statfs::FsType = nix::sys::statfs::FsType(0xcafe_4a11);
    let is_bpffs =
        |p: &Path| nix::sys::statfs::statfs(p).is_ok_and(|s| s.filesystem_type() == BPF_FS_MAGIC);
    let existing = dir
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"));
    if is_bpffs(existing) {
        return Ok(());
    }
    if dir.starts_with(BPFFS) && !is_bpffs(Path::new(BPFFS)) {
        nix::mount::mount(
            Some("bpf"),
            BPFFS,
            Some("bpf"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .map_err(|e| failed(format!("mounting bpffs on {BPFFS}"), e))?;
        return Ok(());
    }
    Err(failed(
        format!("backstop.bpfDir {}", dir.display()),
        "not on a bpf file system",
    ))
}

fn endpoint_name(name: &str) -> Result<EndpointName> {
    let mut key = [0u8; 256];
    if name.len() >= key.len() {
        return Err(failed(name, "an endpoint name longer than 255 bytes"));
    }
    key[..name.len()].copy_from_slice(name.as_bytes());
    Ok(EndpointName(key))
}

fn program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program>,
{
    let p = ebpf
        .program_mut(name)
        .ok_or_else(|| failed(name, "not in the object"))?;
    p.try_into()
        .map_err(|_| failed(name, "not of the expected program type"))
}

fn map<K: Pod, V: Pod>(ebpf: &mut Ebpf, name: &str) -> Result<HashMap<MapData, K, V>> {
    let m = ebpf
        .take_map(name)
        .ok_or_else(|| failed(name, "not in the object"))?;
    HashMap::try_from(m).map_err(|e| failed(name, e))
}

fn conn(peer: Ipv4Addr, local: Ipv4Addr, qpn: u32) -> ConnKey {
    ConnKey {
        peer: peer.octets(),
        local: local.octets(),
        qpn,
    }
}

fn qp(local: Ipv4Addr, qpn: u32) -> QpKey {
    QpKey {
        local: local.octets(),
        qpn,
    }
}

fn host_qp(host: Ipv4Addr, qpn: u32) -> HostQp {
    HostQp {
        host: host.octets(),
        qpn,
    }
}

fn egress(endpoint: u32, host: Ipv4Addr, qpn: u32) -> EgressKey {
    EgressKey {
        endpoint,
        host: host.octets(),
        qpn,
    }
}

/// include/uapi/linux/bpf.h's `enum bpf_attach_type`: a cgroup's egress.
const BPF_CGROUP_INET_EGRESS: u32 = 1;

enum Attach {
    Attach,
    Detach,
}

/// `BPF_PROG_ATTACH` / `BPF_PROG_DETACH` of a cgroup/skb egress program,
/// several allowed per cgroup. aya attaches cgroup programs through a bpf
/// link, which the kernel takes away with the last file that holds it:
/// masqd's, when it exits. An attachment made this way stays until it is
/// detached.
fn prog_attach(op: Attach, cgroup: BorrowedFd, prog: BorrowedFd) -> std::io::Result<()> {
    // include/uapi/linux/bpf.h: the attach part of union bpf_attr.
    #[repr(C)]
    struct AttachAttr {
        target_fd: u32,
        attach_bpf_fd: u32,
        attach_type: u32,
        attach_flags: u32,
        replace_bpf_fd: u32,
    }
    const BPF_PROG_ATTACH: libc::c_long = 8;
    const BPF_PROG_DETACH: libc::c_long = 9;
    const BPF_F_ALLOW_MULTI: u32 = 2;
    let (cmd, flags) = match op {
        Attach::Attach => (BPF_PROG_ATTACH, BPF_F_ALLOW_MULTI),
        Attach::Detach => (BPF_PROG_DETACH, 0),
    };
    let attr = AttachAttr {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_INET_EGRESS,
        attach_flags: flags,
        replace_bpf_fd: 0,
    };
    // SAFETY: `attr` is a valid, initialized bpf_attr prefix of the size
    // passed; the kernel reads it and keeps no pointer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            &attr as *const AttachAttr,
            std::mem::size_of::<AttachAttr>(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The ids of the programs attached to a cgroup's egress
/// (`BPF_PROG_QUERY`).
fn attached_egress(cgroup: BorrowedFd) -> std::io::Result<Vec<u32>> {
    // include/uapi/linux/bpf.h: the query part of union bpf_attr.
    #[repr(C)]
    struct QueryAttr {
        target_fd: u32,
        attach_type: u32,
        query_flags: u32,
        attach_flags: u32,
        prog_ids: u64,
        prog_cnt: u32,
        _pad: u32,
    }
    const BPF_PROG_QUERY: libc::c_long = 16;
    // More than any host attaches to one cgroup's egress (the kernel
    // allows 64 in all).
    let mut ids = [0u32; 64];
    let mut attr = QueryAttr {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_INET_EGRESS,
        query_flags: 0,
        attach_flags: 0,
        prog_ids: ids.as_mut_ptr() as u64,
        prog_cnt: ids.len() as u32,
        _pad: 0,
    };
    // SAFETY: `attr` is a valid bpf_attr prefix; the kernel writes at most
    // `prog_cnt` ids to `ids`, which outlives the call, and the count back.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_QUERY,
            &mut attr as *mut QueryAttr,
            std::mem::size_of::<QueryAttr>(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let n = (attr.prog_cnt as usize).min(ids.len());
    Ok(ids[..n].to_vec())
}

#[cfg(test)]
#[path = "bpf_backstop_tests.rs"]
pub(crate) mod tests;
