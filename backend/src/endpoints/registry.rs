//! The endpoint registry: the endpoints this host serves and the VPC map
//! that places every endpoint of every VPC on its host.
//!
//! Local endpoints come from the config file at start and `masqctl
//! endpoint add/del` at run time; sources (`source.rs`: the file's `vpc:`,
//! the cluster) place the others. Everything that asks "which endpoint is
//! this" or "where is that vIP" asks here, so an endpoint that comes or goes
//! is seen by every path at once. Readers take a snapshot (an `Arc` or a
//! copy) and never hold the lock across I/O.

use crate::config::{Config, EndpointConfig};
use crate::endpoints::endpoint::Endpoint;
use crate::endpoints::placement::{Placement, SourceId};
use crate::error::{Error, Result};
use masq_policy::EndpointRef;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock, RwLockReadGuard};

pub struct Registry {
    /// This host's underlay address: local endpoints' place in the map.
    host: Ipv4Addr,
    /// This host's rails (name, address), in order: a local endpoint's
    /// rail index names one.
    rails: Vec<(String, Ipv4Addr)>,
    socket_dir: PathBuf,
    /// What each endpoint's apps may make masqd hold.
    limits: crate::config::TenantLimits,
    state: RwLock<State>,
}

type Key = (u32, Ipv4Addr);

#[derive(Default)]
struct State {
    local: BTreeMap<String, Arc<Endpoint>>,
    /// What each source placed, kept apart (see `settle`).
    fed: BTreeMap<SourceId, Fed>,
    /// The VPC map as it follows from `local` and `fed`.
    vpc: vbond::VpcMap,
    /// Which source each map entry is from (absent: a local endpoint).
    shown: HashMap<Key, SourceId>,
    /// Each VNI's tenant (a VNI is one tenant's, on every host).
    tenants: HashMap<u32, String>,
    /// Map entries per VNI: a VNI with none left has no tenant any more.
    per_vni: HashMap<u32, usize>,
    /// The cluster's claims held back because another host holds their
    /// name or vIP (see `claim`), by (name, host).
    waiting: BTreeMap<(String, Ipv4Addr), Placement>,
    /// Claims held back so far, each counted once (the metric).
    conflicts: u64,
}

/// What a source's word changed in the VPC map.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Change {
    /// The endpoints whose entries came, went or moved (none: nothing
    /// changed).
    pub names: Vec<String>,
    /// Why the placement was left out, if it was.
    pub refused: Option<String>,
}

impl Change {
    fn add(&mut self, names: Vec<String>) {
        for n in names {
            if !self.names.contains(&n) {
                self.names.push(n);
            }
        }
    }
}

/// One source's placements, by name (a file entry without one is listed
/// under a made-up one, which policies cannot use) and by address.
#[derive(Default)]
struct Fed {
    by_name: BTreeMap<String, Placement>,
    by_key: HashMap<Key, String>,
}

impl State {
    fn local_at(&self, key: Key) -> Option<&Arc<Endpoint>> {
        self.local.values().find(|e| (e.cfg.vni, e.cfg.vip) == key)
    }

    fn fed_at(&self, from: SourceId, key: Key) -> Option<(&str, &Placement)> {
        let f = self.fed.get(&from)?;
        let name = f.by_key.get(&key)?;
        Some((name, f.by_name.get(name)?))
    }

    /// Make the map entry for `key` what it must be now: the local
    /// endpoint's, else the placement of the source that ranks first.
    fn settle(&mut self, me: &[(String, Ipv4Addr)], key: Key) {
        let winner = match self.local_at(key) {
            Some(e) => {
                let (rail, underlay) = me
                    .get(e.rail)
                    .or(me.first())
                    .cloned()
                    .unwrap_or((vbond::FIRST_RAIL.into(), Ipv4Addr::UNSPECIFIED));
                let peer = vbond::Peer {
                    name: e.cfg.name.clone(),
                    host: me.first().map_or(underlay, |r| r.1),
                    rail,
                    underlay,
                };
                Some((peer, e.cfg.tenant.clone(), None))
            }
            None => self.fed.keys().find_map(|from| {
                self.fed_at(*from, key).map(|(name, p)| {
                    let peer = vbond::Peer {
                        name: name.to_string(),
                        host: p.host,
                        rail: p.rail.clone().unwrap_or_else(|| vbond::FIRST_RAIL.into()),
                        underlay: p.underlay.unwrap_or(p.host),
                    };
                    (peer, p.tenant.clone(), Some(*from))
                })
            }),
        };
        let (vni, vip) = key;
        match winner {
            Some((peer, tenant, from)) => {
                if self.vpc.insert_peer(vni, vip, peer).is_none() {
                    *self.per_vni.entry(vni).or_default() += 1;
                }
                self.tenants.insert(vni, tenant);
                match from {
                    Some(from) => self.shown.insert(key, from),
                    None => self.shown.remove(&key),
                };
            }
            None => {
                self.shown.remove(&key);
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
    }

    /// Why `from` cannot place `p` next to what is here, if it cannot.
    fn refuse(&self, me: Ipv4Addr, from: SourceId, p: &Placement, label: &str) -> Option<String> {
        let key = (p.vni, p.vip);
        let at = match from {
            SourceId::Cluster => format!("endpoint {label} of host {}", p.host),
            SourceId::File => format!(
                "vpc entry {label} (VNI {} vIP {} on host {})",
                p.vni, p.vip, p.host
            ),
        };
        if from == SourceId::Cluster && p.host == me {
            return Some(format!("{at}: names this host, which publishes its own"));
        }
        if let Some(e) = self.local_at(key) {
            // Only the file may place this host's own endpoints.
            let same = from == SourceId::File
                && p.host == me
                && p.name.as_ref().is_none_or(|n| *n == e.cfg.name);
            if !same {
                return Some(format!(
                    "{at}: VNI {} vIP {} is local endpoint {}'s",
                    p.vni, p.vip, e.cfg.name
                ));
            }
        } else if let Some(e) = p.name.as_ref().and_then(|n| self.local.get(n)) {
            return Some(format!(
                "{at}: this host's endpoint {} has VNI {} vIP {}",
                e.cfg.name, e.cfg.vni, e.cfg.vip
            ));
        }
        // (Between the cluster's hosts the first claim holds: see `claim`.)
        if let Some((name, _)) = self.fed_at(from, key).filter(|_| from == SourceId::File) {
            if name != label {
                return Some(format!(
                    "{at}: VNI {} vIP {} is {name}'s already",
                    p.vni, p.vip
                ));
            }
        }
        // (What `from` placed here before is out already: see `place`.)
        if let Some(t) = self.tenants.get(&p.vni).filter(|t| **t != p.tenant) {
            return Some(format!("{at}: VNI {} belongs to tenant {t:?}", p.vni));
        }
        None
    }

    /// `from` places `p`, replacing what it placed under that name (the
    /// cluster: only if on the same host; see `claim`).
    fn place(&mut self, me: &[(String, Ipv4Addr)], from: SourceId, p: Placement) -> Change {
        let label = p
            .name
            .clone()
            .unwrap_or_else(|| format!("{}-{}", p.tenant, p.vip));
        let mut change = Change::default();
        let own = self
            .fed
            .get(&from)
            .and_then(|f| f.by_name.get(&label))
            .is_some_and(|o| from == SourceId::File || o.host == p.host);
        let freed = own && self.unplace(me, from, &label).is_some();
        if freed {
            change.names.push(label.clone());
        }
        if from == SourceId::Cluster {
            self.waiting.remove(&(label.clone(), p.host));
        }
        match self.admit(me, from, label.clone(), p) {
            Ok(()) if !freed => change.names.push(label),
            Ok(()) => {}
            Err(why) => change.refused = Some(why),
        }
        if freed && from == SourceId::Cluster {
            change.add(self.promote(me));
        }
        change
    }

    /// Put `p` in the map as `from`'s `label`, unless it is refused (or,
    /// from the cluster, held back: see `claim`).
    fn admit(
        &mut self,
        me: &[(String, Ipv4Addr)],
        from: SourceId,
        label: String,
        p: Placement,
    ) -> Result<(), String> {
        let host = me.first().map(|r| r.1).unwrap_or(Ipv4Addr::UNSPECIFIED);
        if let Some(why) = self.refuse(host, from, &p, &label) {
            return Err(why);
        }
        if from == SourceId::Cluster {
            if let Some(why) = self.claimed(&p, &label) {
                self.waiting.insert((label, p.host), p);
                return Err(why);
            }
        }
        let key = (p.vni, p.vip);
        let f = self.fed.entry(from).or_default();
        f.by_key.insert(key, label.clone());
        f.by_name.insert(label, p);
        self.settle(me, key);
        Ok(())
    }

    /// Why the cluster's claim `p` waits, if another host holds its name or
    /// its vIP: between hosts the first claim holds both until its key goes
    /// (its host deletes it, its lease expires, the operator deletes it),
    /// so a host cannot take over another's endpoint by publishing it.
    fn claimed(&self, p: &Placement, label: &str) -> Option<String> {
        let f = self.fed.get(&SourceId::Cluster)?;
        let (what, holder) = match f.by_name.get(label) {
            Some(h) => ("its name".to_string(), (label, h)),
            None => (
                format!("VNI {} vIP {}", p.vni, p.vip),
                self.fed_at(SourceId::Cluster, (p.vni, p.vip))?,
            ),
        };
        let (name, h) = holder;
        Some(format!(
            "endpoint {label} of host {}: {what} is endpoint {name}'s of host {}, which claimed \
             it first; held back until that host deletes it or its lease expires",
            p.host, h.host
        ))
    }

    /// Place the cluster's claims that waited and are free now, the first
    /// claimed first. Returns their names.
    fn promote(&mut self, me: &[(String, Ipv4Addr)]) -> Vec<String> {
        let mut order: Vec<Placement> = self.waiting.values().cloned().collect();
        order.sort_by_key(|p| (p.created, p.host));
        let mut placed = Vec::new();
        for p in order {
            let label = p.name.clone().unwrap_or_default();
            self.waiting.remove(&(label.clone(), p.host));
            let host = p.host;
            if self
                .admit(me, SourceId::Cluster, label.clone(), p.clone())
                .is_ok()
            {
                placed.push(label);
            } else {
                // Refused for another reason now: it waits on.
                self.waiting.insert((label, host), p);
            }
        }
        placed
    }

    fn unplace(
        &mut self,
        me: &[(String, Ipv4Addr)],
        from: SourceId,
        label: &str,
    ) -> Option<Placement> {
        let f = self.fed.get_mut(&from)?;
        let p = f.by_name.remove(label)?;
        let key = (p.vni, p.vip);
        f.by_key.remove(&key);
        self.settle(me, key);
        Some(p)
    }
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

impl Registry {
    /// An empty registry for this host: sources place endpoints with
    /// `feed`, `place` and `unplace`, local ones come with `insert`.
    pub fn new(cfg: &Config) -> Registry {
        let mut state = State::default();
        state.vpc.set_rail_joins(cfg.rail_joins.clone());
        Registry {
            host: cfg.underlay.ip,
            rails: cfg
                .rails
                .iter()
                .map(|r| (r.name.clone(), r.underlay.ip))
                .collect(),
            socket_dir: cfg.socket_dir.clone(),
            limits: cfg.tenant_limits,
            state: RwLock::new(state),
        }
    }

    /// What each endpoint's apps may make masqd hold (`tenantLimits`).
    pub fn limits(&self) -> &crate::config::TenantLimits {
        &self.limits
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Why `e` cannot be added next to what is here, if it cannot: its own
    /// fields, then its name, socket, VNI and place in the VPC map.
    pub fn check_new(&self, e: &EndpointConfig) -> Result<()> {
        let at = format!("endpoint {}", e.name);
        e.check(&at, &self.socket_dir)?;
        let st = read(&self.state);
        if st.local.contains_key(&e.name) {
            return Err(Error::Invalid(format!(
                "{at}: an endpoint of that name exists on this host"
            )));
        }
        let configs: Vec<&EndpointConfig> = st.local.values().map(|o| &o.cfg).collect();
        let rail = |n: Option<&str>| self.rail_index(n);
        crate::config::check_device_of(&at, e, configs, rail)?;
        let sock = e.socket_path(&self.socket_dir);
        let shared = |o: &Endpoint| e.device_of.is_some() || o.cfg.device_of.is_some();
        if let Some(other) = st.local.values().find(|o| o.socket == sock && !shared(o)) {
            return Err(Error::Invalid(format!(
                "{at}.socket: {} is endpoint {}'s",
                sock.display(),
                other.cfg.name
            )));
        }
        let id = crate::kernel::nft::nft_id(&e.name);
        if let Some(other) = st
            .local
            .values()
            .find(|o| crate::kernel::nft::nft_id(&o.cfg.name) == id)
        {
            return Err(Error::Invalid(format!(
                "{at}.name: maps to the same nftables name ({id}) as endpoint {}",
                other.cfg.name
            )));
        }
        if let Some(t) = st.tenants.get(&e.vni).filter(|t| **t != e.tenant) {
            return Err(Error::Invalid(format!(
                "{at}.vni: VNI {} belongs to tenant {t:?}, not {:?}",
                e.vni, e.tenant
            )));
        }
        if let Some(other) = st.local_at((e.vni, e.vip)) {
            return Err(Error::Invalid(format!(
                "{at}.vip: {} in VNI {} is endpoint {}'s",
                e.vip, e.vni, other.cfg.name
            )));
        }
        if let Some(p) = st.vpc.lookup(e.vni, e.vip) {
            if p.host != self.host {
                return Err(Error::Invalid(format!(
                    "{at}.vip: the VPC map places {} in VNI {} on host {} ({}), not here ({})",
                    e.vip, e.vni, p.host, p.name, self.host
                )));
            }
        }
        if let Some((vni, vip, p)) = st
            .vpc
            .iter()
            .find(|(vni, vip, p)| p.name == e.name && (*vni, *vip) != (e.vni, e.vip))
        {
            return Err(Error::Invalid(format!(
                "{at}.name: the VPC map names VNI {vni} vIP {vip} on host {} {:?}",
                p.host, e.name
            )));
        }
        Ok(())
    }

    /// The index of this host's rail `name` (none: the first).
    pub fn rail_index(&self, name: Option<&str>) -> Option<usize> {
        crate::config::rail_position(self.rails.iter().map(|(r, _)| r.as_str()), name)
    }

    /// Where `e`'s apps reach masqd: its own socket, or that of the
    /// endpoint it is a further device of.
    pub fn socket_of(&self, e: &EndpointConfig) -> PathBuf {
        e.device_of
            .as_ref()
            .and_then(|of| self.local_named(of))
            .map_or_else(|| e.socket_path(&self.socket_dir), |p| p.socket.clone())
    }

    /// How connections name rail `index`: by its name, on a host with
    /// several; not at all on a host with one.
    pub fn rail_label(&self, index: usize) -> Option<&str> {
        (self.rails.len() > 1).then(|| self.rail_name(index))
    }

    /// The name of this host's rail `index`.
    pub fn rail_name(&self, index: usize) -> &str {
        self.rails
            .get(index)
            .map_or(vbond::FIRST_RAIL, |r| r.0.as_str())
    }

    /// The virtual devices of `ep`'s apps, `vrdma0` first: the endpoint
    /// they connect to and its further devices (`deviceOf`), in rail
    /// order.
    pub fn devices_of(&self, ep: &Endpoint) -> Vec<Arc<Endpoint>> {
        let st = read(&self.state);
        let primary = ep.cfg.apps_endpoint();
        let mut v: Vec<Arc<Endpoint>> = st
            .local
            .values()
            .filter(|o| o.cfg.name == primary || o.cfg.device_of.as_deref() == Some(primary))
            .cloned()
            .collect();
        v.sort_by_key(|o| o.rail);
        v
    }

    /// Add a checked endpoint (see `check_new`): from now on its map entry
    /// is its own, whatever a source placed there.
    pub fn insert(&self, ep: Arc<Endpoint>) {
        let mut st = self.write();
        let key = (ep.cfg.vni, ep.cfg.vip);
        st.local.insert(ep.cfg.name.clone(), ep.clone());
        st.settle(&self.rails, key);
        drop(st);
        self.number_devices(&ep);
    }

    /// Number the devices of `ep`'s apps (`vrdmaN`) as HELLO does.
    fn number_devices(&self, ep: &Endpoint) {
        for (i, d) in self.devices_of(ep).iter().enumerate() {
            d.vdev.store(i, Ordering::Relaxed);
        }
    }

    /// Take a local endpoint out; its map entry becomes what a source
    /// placed there, if any. From here on no lookup finds it; the caller
    /// tears down the rest.
    pub fn remove(&self, name: &str) -> Option<Arc<Endpoint>> {
        let mut st = self.write();
        let ep = st.local.remove(name)?;
        ep.removed.store(true, Ordering::SeqCst);
        st.settle(&self.rails, (ep.cfg.vni, ep.cfg.vip));
        drop(st);
        self.number_devices(&ep);
        Some(ep)
    }

    /// Replace everything `from` placed with `all`. Returns what was
    /// refused, and why. The cluster's claims are taken in the order they
    /// were made, those in the map already first: a view read again keeps
    /// what held, and a first view gives each name and vIP to the host
    /// that claimed it first.
    pub fn feed(&self, from: SourceId, mut all: Vec<Placement>) -> Vec<String> {
        let mut st = self.write();
        let claim = |p: &Placement| (p.name.clone(), p.host, p.vni, p.vip);
        let held: HashSet<_> = st
            .fed
            .get(&from)
            .map(|f| f.by_name.values().map(claim).collect())
            .unwrap_or_default();
        let labels: Vec<String> = st
            .fed
            .get(&from)
            .map(|f| f.by_name.keys().cloned().collect())
            .unwrap_or_default();
        for label in labels {
            st.unplace(&self.rails, from, &label);
        }
        let mut was_waiting = BTreeMap::new();
        if from == SourceId::Cluster {
            was_waiting = std::mem::take(&mut st.waiting);
            all.sort_by_key(|p| (!held.contains(&claim(p)), p.created, p.host));
        }
        let refused: Vec<String> = all
            .into_iter()
            .filter_map(|p| st.place(&self.rails, from, p).refused)
            .collect();
        let new = st.waiting.keys().filter(|k| !was_waiting.contains_key(*k));
        st.conflicts += new.count() as u64;
        refused
    }

    /// `from` placed an endpoint (new, or changed). No names changed:
    /// `from` had placed it just so already (a source that says it again
    /// changes nothing, and nothing need follow).
    pub fn place(&self, from: SourceId, p: Placement) -> Change {
        let mut st = self.write();
        let label = p.name.clone().unwrap_or_default();
        if st.fed.get(&from).and_then(|f| f.by_name.get(&label)) == Some(&p) {
            return Change::default();
        }
        let claim = (label, p.host);
        let was_waiting = st.waiting.contains_key(&claim);
        let change = st.place(&self.rails, from, p);
        if !was_waiting && st.waiting.contains_key(&claim) {
            st.conflicts += 1;
        }
        change
    }

    /// `from` took endpoint `name` of `host` away: what that changed
    /// (nothing if it had not placed it there). A claim it held back goes
    /// quietly; one it had placed gives its name and vIP to the claim
    /// that waited longest for them.
    pub fn unplace(&self, from: SourceId, host: Ipv4Addr, name: &str) -> Change {
        let mut st = self.write();
        if from == SourceId::Cluster && st.waiting.remove(&(name.to_string(), host)).is_some() {
            return Change::default();
        }
        let placed_there = st
            .fed
            .get(&from)
            .and_then(|f| f.by_name.get(name))
            .is_some_and(|p| p.host == host);
        let mut change = Change::default();
        if placed_there && st.unplace(&self.rails, from, name).is_some() {
            change.names.push(name.to_string());
            if from == SourceId::Cluster {
                change.add(st.promote(&self.rails));
            }
        }
        change
    }

    /// The cluster's claims held back so far because another host held
    /// their name or vIP.
    pub fn claim_conflicts(&self) -> u64 {
        read(&self.state).conflicts
    }

    /// What `from` has placed now.
    pub fn placed_by(&self, from: SourceId) -> Vec<Placement> {
        read(&self.state)
            .fed
            .get(&from)
            .map(|f| f.by_name.values().cloned().collect())
            .unwrap_or_default()
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
        read(&self.state).local_at((vni, vip)).cloned()
    }

    /// The Kubernetes pod (namespace, name) the endpoint at `vip` of `vni`
    /// is, as its host said: a local endpoint's masq-cni, a placed one's
    /// published endpoint. None: no pod's, or no endpoint there.
    pub fn pod_at(&self, vni: u32, vip: Ipv4Addr) -> Option<(String, String)> {
        let st = read(&self.state);
        let key = (vni, vip);
        match st.local_at(key) {
            Some(e) => e.cfg.pod(),
            None => st.fed_at(*st.shown.get(&key)?, key)?.1.pod.clone(),
        }
    }

    /// Every endpoint of `vni` in the VPC map, local or placed, with the
    /// pod it is (as `pod_at` says).
    pub fn pods_in(&self, vni: u32) -> Vec<(Ipv4Addr, Option<(String, String)>)> {
        let st = read(&self.state);
        let local = st.local.values().filter(|e| e.cfg.vni == vni);
        let mut all: Vec<_> = local.map(|e| (e.cfg.vip, e.cfg.pod())).collect();
        for (&key, &from) in st.shown.iter().filter(|((v, _), _)| *v == vni) {
            if let Some((_, p)) = st.fed_at(from, key) {
                all.push((key.1, p.pod.clone()));
            }
        }
        all
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
        let unnamed = |key: Key| {
            st.shown
                .get(&key)
                .is_some_and(|from| st.fed_at(*from, key).is_some_and(|(_, p)| p.name.is_none()))
        };
        st.vpc
            .iter()
            .filter(|(vni, vip, _)| !unnamed((*vni, *vip)))
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
                let source = match st.shown.get(&(vni, vip)) {
                    None => serde_json::json!("local"),
                    Some(from) => serde_json::json!(from),
                };
                serde_json::json!({ "vni": vni, "vip": vip, "name": p.name, "host": p.host,
                                    "rail": p.rail, "underlay": p.underlay,
                                    "tenant": st.tenants.get(&vni), "source": source })
            })
            .collect()
    }

    /// The VPC map's size, for the metrics: how many hosts it places
    /// endpoints on, and its entries by where each came from (`local`,
    /// `cluster`, `file`, each listed even when none).
    pub fn census(&self) -> (usize, [(&'static str, usize); 3]) {
        let st = read(&self.state);
        let mut by = [("local", 0), ("cluster", 0), ("file", 0)];
        let mut hosts = HashSet::new();
        for (vni, vip, p) in st.vpc.iter() {
            hosts.insert(p.host);
            let i = match st.shown.get(&(vni, vip)) {
                None => 0,
                Some(SourceId::Cluster) => 1,
                Some(SourceId::File) => 2,
            };
            by[i].1 += 1;
        }
        (hosts.len(), by)
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

impl crate::admit::Pods for Registry {
    fn pod_at(&self, vni: u32, vip: Ipv4Addr) -> Option<(String, String)> {
        Registry::pod_at(self, vni, vip)
    }
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
    /// Pods' cgroups the backstop filtered as an endpoint's (endpoint name
    /// to cgroup): adopted again at start, as no session brings them back.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub pod_cgroups: std::collections::BTreeMap<String, String>,
    /// Apps' cgroups (a container's) the backstop filtered as an
    /// endpoint's (cgroup to endpoint name): adopted again at start, before
    /// any endpoint is served, as an app that skips libmasq never opens
    /// the session that would bring it back.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub app_cgroups: std::collections::BTreeMap<String, String>,
}

impl RuntimeFile {
    /// Read it; a missing file is an empty one.
    pub fn load(path: &Path) -> Result<RuntimeFile> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_yaml_ng::from_str(&text).map_err(|e| Error::InFile {
                file: path.display().to_string(),
                position: None,
                why: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(RuntimeFile::default()),
            Err(e) => Err(Error::os(path.display().to_string(), e)),
        }
    }

    /// Replace it whole (write and rename), so a crash leaves the old or
    /// the new list, never half of one.
    pub fn store(&self, path: &Path) -> Result<()> {
        // One writer at a time: they share the temporary file.
        static STORING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = STORING.lock().unwrap_or_else(|e| e.into_inner());
        let text = serde_yaml_ng::to_string(self).map_err(|e| Error::failed(e.to_string()))?;
        let tmp = path.with_extension("yaml.tmp");
        std::fs::write(
            &tmp,
            format!("# Endpoints added with `masqctl endpoint add`; written by masqd.\n{text}"),
        )?;
        Ok(std::fs::rename(&tmp, path)?)
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
