//! The endpoint registry: the endpoints this host serves and the VPC map
//! that places every endpoint of every VPC on its host.
//!
//! Sources feed it: the config file at start, `masqctl endpoint add/del`
//! at run time. Everything that asks "which endpoint is this" or "where is
//! that vIP" asks here, so an endpoint that comes or goes is seen by every
//! path at once. Readers take a snapshot (an `Arc` or a copy) and never
//! hold the lock across I/O.

use crate::config::{Config, EndpointConfig};
use crate::seqpacket::Listener;
use masq_policy::EndpointRef;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::Duration;

/// The name every endpoint's virtual device has.
pub const VDEV_NAME: &str = "vrdma0";

/// Where an endpoint came from, for `masqctl endpoint list`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// masqd.yaml's `endpoints:`.
    File,
    /// `masqctl endpoint add` (kept in the runtime file across restarts).
    Command,
}

pub struct Endpoint {
    pub cfg: EndpointConfig,
    pub socket: PathBuf,
    pub origin: Origin,
    /// Connections refused (wrong namespace) and requests refused, for
    /// `masqctl endpoints`: attempts to reach past the endpoint show here.
    pub refused_connections: AtomicU64,
    pub refused_requests: AtomicU64,
    /// Connected QPs of the endpoint's processes that masqd never admitted
    /// (found by the audit), and processes/cgroups killed for them.
    pub audit_bypasses: AtomicU64,
    pub audit_kills: AtomicU64,
    /// The vNIC as last read, with the inode of the namespace it was read
    /// in (see `with_vnic`).
    pub binding: Mutex<Option<(u64, vbond::Binding)>>,
    /// The endpoint's sysfs view (see `sysfs_view`); `None` when its
    /// socket directory is shared with another endpoint's.
    pub view: Option<crate::sysfs_view::View>,
    /// Its socket while served; shut down when the endpoint is removed,
    /// which ends its accept thread.
    pub listener: Mutex<Option<Arc<Listener>>>,
    removed: AtomicBool,
    /// Held from counting the endpoint's connections to tracking a new one,
    /// when it has a quota: two admissions cannot both take the last slot.
    pub quota: Mutex<()>,
    /// Its rdma cgroup limits could not be set (logged once until they are).
    pub rdma_limits_failing: AtomicBool,
}

impl Endpoint {
    pub fn new(
        cfg: EndpointConfig,
        socket: PathBuf,
        origin: Origin,
        view: Option<crate::sysfs_view::View>,
    ) -> Endpoint {
        Endpoint {
            cfg,
            socket,
            origin,
            refused_connections: AtomicU64::new(0),
            refused_requests: AtomicU64::new(0),
            audit_bypasses: AtomicU64::new(0),
            audit_kills: AtomicU64::new(0),
            binding: Mutex::new(None),
            view,
            listener: Mutex::new(None),
            removed: AtomicBool::new(false),
            quota: Mutex::new(()),
            rdma_limits_failing: AtomicBool::new(false),
        }
    }

    /// The endpoint's vNIC as it is now: `f` sees its binding. Entering the
    /// namespace and dumping its links and addresses costs milliseconds, so
    /// the view is kept with a netlink subscription in that namespace and
    /// re-read only when a notification arrived, or when the namespace file
    /// names another namespace (the container was recreated).
    pub fn with_vnic<T>(&self, f: impl FnOnce(&vbond::Binding) -> T) -> std::io::Result<T> {
        let ns = std::fs::metadata(&self.cfg.netns)
            .map_err(|e| {
                std::io::Error::new(e.kind(), format!("{}: {e}", self.cfg.netns.display()))
            })?
            .ino();
        let mut slot = self.binding.lock().unwrap_or_else(|e| e.into_inner());
        let current = match slot.take() {
            Some((ino, mut b)) if ino == ns => b.wait_change(Some(Duration::ZERO)).map(|_| b),
            _ => vbond::Binding::open(&self.cfg.netns, &self.cfg.vnic),
        };
        // On error the slot stays empty: the next call opens it afresh.
        let b = current?;
        if let Some(view) = &self.view {
            view.vnic_seen(&b, VDEV_NAME);
        }
        let out = f(&b);
        *slot = Some((ns, b));
        Ok(out)
    }

    /// The endpoint was deleted: its sessions and accept thread stop.
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::SeqCst)
    }
}

pub struct Registry {
    /// This host's underlay address: local endpoints' place in the map.
    host: Ipv4Addr,
    socket_dir: PathBuf,
    state: RwLock<State>,
}

#[derive(Default)]
struct State {
    local: BTreeMap<String, Arc<Endpoint>>,
    vpc: vbond::VpcMap,
    /// Each VNI's tenant (a VNI is one tenant's, on every host).
    tenants: HashMap<u32, String>,
    /// Map entries that came with a local endpoint rather than from the
    /// file's `vpc:`: they leave with it.
    brought: HashSet<(u32, Ipv4Addr)>,
    /// File entries without a name: listed under a made-up one, which
    /// policies cannot use.
    unnamed: HashSet<(u32, Ipv4Addr)>,
    /// Other hosts' endpoints as the cluster publishes them, by name.
    remote: BTreeMap<String, Remote>,
    /// Map entries per VNI: a VNI with none left has no tenant any more.
    per_vni: HashMap<u32, usize>,
}

impl State {
    /// Add (or replace) a map entry.
    fn map_put(&mut self, vni: u32, vip: Ipv4Addr, name: String, host: Ipv4Addr, tenant: &str) {
        if self.vpc.insert(vni, vip, name, host).is_none() {
            *self.per_vni.entry(vni).or_default() += 1;
        }
        self.tenants.insert(vni, tenant.to_string());
    }

    fn map_del(&mut self, vni: u32, vip: Ipv4Addr) {
        if self.vpc.remove(vni, vip).is_none() {
            return;
        }
        let n = self.per_vni.entry(vni).or_default();
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.per_vni.remove(&vni);
            self.tenants.remove(&vni);
        }
    }
}

/// Another host's endpoint, as the cluster store publishes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remote {
    pub host: Ipv4Addr,
    pub name: String,
    pub tenant: String,
    pub vni: u32,
    pub vip: Ipv4Addr,
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

impl Registry {
    /// The file's VPC map; endpoints are added with `insert`.
    pub fn new(cfg: &Config) -> Registry {
        let mut st = State::default();
        for v in &cfg.vpc {
            let name = v.name.clone().unwrap_or_else(|| {
                st.unnamed.insert((v.vni, v.vip));
                format!("{}-{}", v.tenant, v.vip)
            });
            st.map_put(v.vni, v.vip, name, v.host, &v.tenant);
        }
        Registry {
            host: cfg.underlay.ip,
            socket_dir: cfg.socket_dir.clone(),
            state: RwLock::new(st),
        }
    }

    /// Why `e` cannot be added next to what is here, if it cannot: its own
    /// fields, then its name, socket, VNI and place in the VPC map.
    pub fn check_new(&self, e: &EndpointConfig) -> Result<(), String> {
        let at = format!("endpoint {}", e.name);
        e.check(&at, &self.socket_dir)?;
        let st = read(&self.state);
        if st.local.contains_key(&e.name) {
            return Err(format!(
                "{at}: an endpoint of that name exists on this host"
            ));
        }
        let sock = e.socket_path(&self.socket_dir);
        if let Some(other) = st.local.values().find(|o| o.socket == sock) {
            return Err(format!(
                "{at}.socket: {} is endpoint {}'s",
                sock.display(),
                other.cfg.name
            ));
        }
        let id = crate::backstop::nft_id(&e.name);
        if let Some(other) = st
            .local
            .values()
            .find(|o| crate::backstop::nft_id(&o.cfg.name) == id)
        {
            return Err(format!(
                "{at}.name: maps to the same nftables name ({id}) as endpoint {}",
                other.cfg.name
            ));
        }
        if let Some(t) = st.tenants.get(&e.vni).filter(|t| **t != e.tenant) {
            return Err(format!(
                "{at}.vni: VNI {} belongs to tenant {t:?}, not {:?}",
                e.vni, e.tenant
            ));
        }
        if let Some(other) = st
            .local
            .values()
            .find(|o| (o.cfg.vni, o.cfg.vip) == (e.vni, e.vip))
        {
            return Err(format!(
                "{at}.vip: {} in VNI {} is endpoint {}'s",
                e.vip, e.vni, other.cfg.name
            ));
        }
        if let Some(p) = st.vpc.lookup(e.vni, e.vip) {
            if p.host != self.host {
                return Err(format!(
                    "{at}.vip: the VPC map places {} in VNI {} on host {} ({}), not here ({})",
                    e.vip, e.vni, p.host, p.name, self.host
                ));
            }
        }
        if let Some((vni, vip, p)) = st
            .vpc
            .iter()
            .find(|(vni, vip, p)| p.name == e.name && (*vni, *vip) != (e.vni, e.vip))
        {
            return Err(format!(
                "{at}.name: the VPC map names VNI {vni} vIP {vip} on host {} {:?}",
                p.host, e.name
            ));
        }
        Ok(())
    }

    /// Add a checked endpoint (see `check_new`), placing it in the VPC map
    /// if the file did not.
    pub fn insert(&self, ep: Arc<Endpoint>) {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        let key = (ep.cfg.vni, ep.cfg.vip);
        if st.vpc.lookup(key.0, key.1).is_none() {
            st.map_put(key.0, key.1, ep.cfg.name.clone(), self.host, &ep.cfg.tenant);
            st.brought.insert(key);
        }
        st.tenants.insert(ep.cfg.vni, ep.cfg.tenant.clone());
        st.local.insert(ep.cfg.name.clone(), ep);
    }

    /// Take a local endpoint out (and its map entry, if it brought it).
    /// From here on no lookup finds it; the caller tears down the rest.
    pub fn remove(&self, name: &str) -> Option<Arc<Endpoint>> {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        let ep = st.local.remove(name)?;
        ep.removed.store(true, Ordering::SeqCst);
        let key = (ep.cfg.vni, ep.cfg.vip);
        if st.brought.remove(&key) {
            st.map_del(key.0, key.1);
        }
        Some(ep)
    }

    /// Replace every other host's endpoints with `all` (the cluster's
    /// view after a (re)read). Returns what was refused, and why.
    pub fn set_remote(&self, all: Vec<Remote>) -> Vec<String> {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        let old: Vec<String> = st.remote.keys().cloned().collect();
        for name in old {
            remove_remote(&mut st, &name);
        }
        all.into_iter()
            .filter_map(|r| add_remote(&mut st, self.host, r).err())
            .collect()
    }

    /// Another host published an endpoint (new, or changed).
    pub fn remote_up(&self, r: Remote) -> Result<(), String> {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        if st.remote.get(&r.name) == Some(&r) {
            return Ok(());
        }
        remove_remote(&mut st, &r.name);
        add_remote(&mut st, self.host, r)
    }

    /// Another host's endpoint is gone (deleted, or its host's lease
    /// expired). False if it was not known.
    pub fn remote_down(&self, host: Ipv4Addr, name: &str) -> bool {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        if st.remote.get(name).is_none_or(|r| r.host != host) {
            return false;
        }
        remove_remote(&mut st, name);
        true
    }

    /// The other hosts' endpoints known now.
    pub fn remotes(&self) -> Vec<Remote> {
        read(&self.state).remote.values().cloned().collect()
    }

    /// This host's endpoints, by name.
    pub fn local(&self) -> Vec<Arc<Endpoint>> {
        read(&self.state).local.values().cloned().collect()
    }

    pub fn local_named(&self, name: &str) -> Option<Arc<Endpoint>> {
        read(&self.state).local.get(name).cloned()
    }

    /// The local endpoint holding `vip` in VNI `vni`.
    pub fn local_at(&self, vni: u32, vip: Ipv4Addr) -> Option<Arc<Endpoint>> {
        read(&self.state)
            .local
            .values()
            .find(|e| (e.cfg.vni, e.cfg.vip) == (vni, vip))
            .cloned()
    }

    /// Local endpoints' configurations (firewall, audit, kernel conntrack).
    pub fn configs(&self) -> Vec<EndpointConfig> {
        read(&self.state)
            .local
            .values()
            .map(|e| e.cfg.clone())
            .collect()
    }

    /// The VPC map, read-locked: keep the guard short.
    pub fn vpc(&self) -> VpcGuard<'_> {
        VpcGuard(read(&self.state))
    }

    /// Every named endpoint of every VPC, as policies name them.
    pub fn policy_refs(&self) -> Vec<EndpointRef> {
        let st = read(&self.state);
        st.vpc
            .iter()
            .filter(|(vni, vip, _)| !st.unnamed.contains(&(*vni, *vip)))
            .filter_map(|(vni, vip, p)| {
                let tenant = st.tenants.get(&vni)?;
                Some(EndpointRef::new(p.name.clone(), tenant.clone(), vni, vip))
            })
            .collect()
    }

    /// The VPC map for `masqctl vpc`, sorted by VNI and vIP.
    pub fn listing(&self) -> Vec<serde_json::Value> {
        let st = read(&self.state);
        let mut rows: Vec<_> = st.vpc.iter().collect();
        rows.sort_by_key(|(vni, vip, _)| (*vni, *vip));
        rows.into_iter()
            .map(|(vni, vip, p)| {
                let source = if st
                    .local
                    .values()
                    .any(|e| (e.cfg.vni, e.cfg.vip) == (vni, vip))
                {
                    "local"
                } else if st.remote.contains_key(&p.name) {
                    "cluster"
                } else {
                    "file"
                };
                serde_json::json!({ "vni": vni, "vip": vip, "name": p.name, "host": p.host,
                                    "tenant": st.tenants.get(&vni), "source": source })
            })
            .collect()
    }

    /// Underlay addresses of every host in the map (the CM's peers).
    pub fn hosts(&self) -> HashSet<Ipv4Addr> {
        read(&self.state)
            .vpc
            .iter()
            .map(|(_, _, p)| p.host)
            .collect()
    }
}

fn add_remote(st: &mut State, me: Ipv4Addr, r: Remote) -> Result<(), String> {
    let at = format!("endpoint {} of host {}", r.name, r.host);
    if r.host == me {
        return Err(format!("{at}: names this host, which publishes its own"));
    }
    if st.local.contains_key(&r.name) {
        return Err(format!("{at}: this host has an endpoint of that name"));
    }
    if let Some(t) = st.tenants.get(&r.vni).filter(|t| **t != r.tenant) {
        return Err(format!("{at}: VNI {} belongs to tenant {t:?}", r.vni));
    }
    if let Some(p) = st.vpc.lookup(r.vni, r.vip) {
        let theirs = st
            .remote
            .get(&p.name)
            .is_some_and(|o| (o.vni, o.vip) == (r.vni, r.vip));
        let local = st
            .local
            .values()
            .any(|e| (e.cfg.vni, e.cfg.vip) == (r.vni, r.vip));
        if theirs || local {
            return Err(format!(
                "{at}: VNI {} vIP {} is {}'s already",
                r.vni, r.vip, p.name
            ));
        }
        // A file entry for it (a host not yet migrated): the cluster's word wins.
        st.unnamed.remove(&(r.vni, r.vip));
    }
    st.map_put(r.vni, r.vip, r.name.clone(), r.host, &r.tenant);
    st.remote.insert(r.name.clone(), r);
    Ok(())
}

fn remove_remote(st: &mut State, name: &str) {
    let Some(r) = st.remote.remove(name) else {
        return;
    };
    st.map_del(r.vni, r.vip);
}

/// A read-locked view of the VPC map.
pub struct VpcGuard<'a>(RwLockReadGuard<'a, State>);

impl std::ops::Deref for VpcGuard<'_> {
    type Target = vbond::VpcMap;
    fn deref(&self) -> &vbond::VpcMap {
        &self.0.vpc
    }
}

/// The endpoints added at run time, as kept in the runtime file.
#[derive(Debug, Default, serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeFile {
    pub endpoints: Vec<EndpointConfig>,
}

impl RuntimeFile {
    /// Read it; a missing file is an empty one.
    pub fn load(path: &Path) -> Result<RuntimeFile, String> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                serde_yaml_ng::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(RuntimeFile::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Replace it whole (write and rename), so a crash leaves the old or
    /// the new list, never half of one.
    pub fn store(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_yaml_ng::to_string(self).map_err(std::io::Error::other)?;
        let tmp = path.with_extension("yaml.tmp");
        std::fs::write(
            &tmp,
            format!("# Endpoints added with `masqctl endpoint add`; written by masqd.\n{text}"),
        )?;
        std::fs::rename(&tmp, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config::parse(
            "device: rxe0\n\
             underlay: { netdev: eth0, ip: 198.18.0.1 }\n\
             vpc:\n\
             \x20 - { tenant: acme, vni: 100, vip: 10.0.0.1, host: 198.18.0.1, name: acme-a }\n\
             \x20 - { tenant: acme, vni: 100, vip: 10.0.0.2, host: 198.18.0.2, name: acme-b }\n",
            "t.yaml",
        )
        .unwrap()
    }

    fn ep(name: &str, tenant: &str, vni: u32, vip: &str) -> EndpointConfig {
        EndpointConfig {
            name: name.into(),
            tenant: tenant.into(),
            vni,
            vip: vip.parse().unwrap(),
            netns: format!("/run/netns/{name}").into(),
            vnic: "eth0".into(),
            host_if: None,
            bridge: None,
            socket: None,
            max_connections: None,
            rdma_limits: None,
            max_rate_mbps: None,
            cni: None,
        }
    }

    fn add(r: &Registry, e: EndpointConfig) {
        r.check_new(&e).unwrap();
        let sock = e.socket_path(Path::new("/run/masq"));
        r.insert(Arc::new(Endpoint::new(e, sock, Origin::Command, None)));
    }

    #[test]
    fn an_endpoint_comes_and_goes_with_the_map_entry_it_brought() {
        let r = Registry::new(&cfg());
        add(&r, ep("acme-c", "acme", 100, "10.0.0.3"));
        assert_eq!(
            r.vpc()
                .lookup(100, "10.0.0.3".parse().unwrap())
                .map(|p| p.host),
            Some("198.18.0.1".parse().unwrap())
        );
        assert!(r
            .policy_refs()
            .iter()
            .any(|e| e.name == "acme-c" && e.tenant == "acme"));
        assert_eq!(
            r.local_at(100, "10.0.0.3".parse().unwrap())
                .map(|e| e.cfg.name.clone()),
            Some("acme-c".into())
        );
        let gone = r.remove("acme-c").unwrap();
        assert!(gone.is_removed());
        assert!(r.vpc().lookup(100, "10.0.0.3".parse().unwrap()).is_none());
        assert!(r.local().is_empty());
        assert!(r.remove("acme-c").is_none());
    }

    #[test]
    fn a_file_placed_endpoint_keeps_its_map_entry_when_removed() {
        let r = Registry::new(&cfg());
        add(&r, ep("acme-a", "acme", 100, "10.0.0.1"));
        r.remove("acme-a").unwrap();
        assert!(r.vpc().lookup(100, "10.0.0.1".parse().unwrap()).is_some());
    }

    #[test]
    fn conflicts_are_refused_naming_the_field() {
        let r = Registry::new(&cfg());
        add(&r, ep("acme-c", "acme", 100, "10.0.0.3"));
        let err = |e: EndpointConfig| r.check_new(&e).unwrap_err();
        assert!(err(ep("acme-c", "acme", 100, "10.0.0.4"))
            .contains("endpoint acme-c: an endpoint of that name exists"));
        assert!(err(ep("acme_c", "acme", 100, "10.0.0.4")).contains("same nftables name"));
        assert!(err(ep("evil", "globex", 100, "10.0.0.9"))
            .contains("endpoint evil.vni: VNI 100 belongs to tenant \"acme\""));
        assert!(err(ep("acme-d", "acme", 100, "10.0.0.3"))
            .contains("endpoint acme-d.vip: 10.0.0.3 in VNI 100 is endpoint acme-c's"));
        assert!(err(ep("acme-d", "acme", 100, "10.0.0.2"))
            .contains("on host 198.18.0.2 (acme-b), not here"));
        assert!(err(ep("acme-b", "acme", 100, "10.0.0.7"))
            .contains("endpoint acme-b.name: the VPC map names VNI 100 vIP 10.0.0.2"));
        assert!(err(ep("acme d", "acme", 100, "10.0.0.7")).contains("endpoint acme d.name"));
        let mut rel = ep("acme-e", "acme", 100, "10.0.0.7");
        rel.netns = "netns/acme-e".into();
        assert!(err(rel).contains("endpoint acme-e.netns"));
        // A VNI nobody holds is free for any tenant.
        r.check_new(&ep("globex-z", "globex", 300, "10.0.0.1"))
            .unwrap();
    }

    fn remote(host: &str, name: &str, vni: u32, vip: &str) -> Remote {
        Remote {
            host: host.parse().unwrap(),
            name: name.into(),
            tenant: "acme".into(),
            vni,
            vip: vip.parse().unwrap(),
        }
    }

    #[test]
    fn the_cluster_feeds_other_hosts_endpoints() {
        let r = Registry::new(&cfg());
        add(&r, ep("acme-a", "acme", 100, "10.0.0.1"));
        let refused = r.set_remote(vec![
            remote("198.18.0.3", "acme-x", 100, "10.0.0.8"),
            // Conflicts: this host's own address, a local name, a taken vIP.
            remote("198.18.0.1", "acme-y", 100, "10.0.0.9"),
            remote("198.18.0.3", "acme-a", 100, "10.0.0.7"),
            remote("198.18.0.4", "acme-z", 100, "10.0.0.8"),
        ]);
        assert_eq!(refused.len(), 3, "{refused:?}");
        let host_of = |vip: &str| {
            r.vpc()
                .lookup(100, vip.parse().unwrap())
                .map(|p| p.host.to_string())
        };
        assert_eq!(host_of("10.0.0.8").as_deref(), Some("198.18.0.3"));
        // An endpoint that moves to another host follows.
        r.remote_up(remote("198.18.0.4", "acme-x", 100, "10.0.0.8"))
            .unwrap();
        assert_eq!(host_of("10.0.0.8").as_deref(), Some("198.18.0.4"));
        assert!(
            !r.remote_down("198.18.0.3".parse().unwrap(), "acme-x"),
            "a stale host's delete is ignored"
        );
        assert!(r.remote_down("198.18.0.4".parse().unwrap(), "acme-x"));
        assert_eq!(host_of("10.0.0.8"), None);
        // The cluster's view replaces a file entry for the same address.
        r.remote_up(remote("198.18.0.5", "acme-b", 100, "10.0.0.2"))
            .unwrap();
        assert_eq!(host_of("10.0.0.2").as_deref(), Some("198.18.0.5"));
        assert!(r.policy_refs().iter().any(|e| e.name == "acme-b"));
    }

    #[test]
    fn the_runtime_file_round_trips() {
        let dir = std::env::temp_dir().join(format!("masq-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("runtime-endpoints.yaml");
        assert!(RuntimeFile::load(&path).unwrap().endpoints.is_empty());
        let mut e = ep("acme-c", "acme", 100, "10.0.0.3");
        e.host_if = Some("ve-acme-c".into());
        e.bridge = Some("mbr100".into());
        RuntimeFile {
            endpoints: vec![e.clone()],
        }
        .store(&path)
        .unwrap();
        assert_eq!(RuntimeFile::load(&path).unwrap().endpoints, vec![e]);
        std::fs::write(&path, "endpoints: [{ name: x, bogus: 1 }]").unwrap();
        assert!(RuntimeFile::load(&path)
            .unwrap_err()
            .contains("runtime-endpoints.yaml"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
