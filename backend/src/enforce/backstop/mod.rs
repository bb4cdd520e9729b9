//! The kernel backstop on software RoCE: nftables rules on UDP/4791 that
//! let a tenant's RoCE packets through only for connections masqd admitted.
//!
//! A tenant owns its uverbs fd, so it can call MODIFY_QP without libmasq.
//! On rxe every QP sends with a kernel socket of its own, created by
//! ibv_create_qp in the calling process, so the socket carries that
//! process's cgroup: nftables' `socket cgroupv2` tells the tenant apart on
//! egress. Rules (table `inet masq_backstop`):
//!
//! - egress: a packet from a socket in `<cgroupParent>/<endpoint>` jumps to
//!   the endpoint's chain, which passes RC and UC on to the eBPF egress
//!   program attached to the cgroup: it passes only if (peer host,
//!   destination QPN) is in the endpoint's `eg_<endpoint>`; a socket in any
//!   other cgroup under `<cgroupParent>` (an unconfigured tenant) is
//!   dropped; the host's own processes and the kernel (e.g. the CM's QP1)
//!   are not filtered.
//! - ingress: a packet to a tenant QP (`tenant_qps`, the QPs masqd has
//!   seen) passes only from the peer host of an admitted connection of
//!   that QP (`conn_to`: peer host, local address, QPN), checked by the
//!   eBPF ingress program on the rails' netdevs. `conn_to`, `tenant_qps`
//!   and `eg_<endpoint>` are eBPF maps (`kernel::bpf_backstop`), written
//!   as the table changes, one `bpf()` call per element (no nf_tables
//!   commit, no queue); masqd names them as nftables elements all the
//!   same. A local QP is
//!   keyed by the address the packet is sent to (`ip daddr`: this host's
//!   underlay address on the QP's rail) and its QPN: each RDMA device
//!   numbers its QPs on its own, so a QPN alone would let a peer admitted
//!   to rxe0's QP 0x11 reach rxe1's QP 0x11 through rxe1's address.
//! - UD (BTH opcodes 0b011xxxxx): an address handle names a host, not a
//!   QPN (that is chosen per send), so an endpoint's UD packets pass to
//!   the hosts of its admitted AHs (set `ud_<endpoint>`). On ingress a UD
//!   packet to a tenant's UD QP (eBPF map `ud_qps`: local address and QPN
//!   to its VNI) passes only from a UD QP of the same VNI: the sending QP
//!   (host, and the DETH's source QPN, which rxe writes from the real QP)
//!   must be in map `ud_from` (filled from the other masqds'
//!   announcements) with that VNI. Both are written as a UD QP comes and
//!   goes, one `bpf()` call each, like `conn_to`.
//! - a container runtime puts a container's processes in a cgroup of its
//!   own (podman: `libpod_parent/libpod-<id>`), outside `<cgroupParent>`.
//!   When an app in such a cgroup opens a session, masqd adopts the cgroup
//!   for the app's endpoint (maps `adopted_l<N>`, one per cgroup depth):
//!   from then on it is filtered as the endpoint's own (see `adopt_cgroup`).
//! - RoCE is not connection-tracked (`notrack`): the sets are the only
//!   state, so removing an element stops the traffic at once and no
//!   "established" entry of the kernel's conntrack can keep it alive.
//!
//! The sets mirror the RConntrack table (its journal, drained after every
//! change under the table's lock) element by element, never by reloading
//! the ruleset; the nftables sets' updates are queued in table order and
//! applied batched (`flush_updates`, or the thread of a request that waits for
//! them, `wait_applied`), as nf_tables netlink messages
//! (`kernel::nft_set`): libnftables would parse, evaluate and rebuild its
//! cache of the host's ruleset for each. The drop counters are read by a
//! netlink dump of the table's counter objects (`kernel::nft_counters`),
//! for the same reason. The ruleset itself and the reconcile go through
//! libnftables.
//!
//! The table outlives masqd on purpose: after a crash the admitted traffic
//! keeps flowing and nothing new passes. A restarted masqd keeps the sets
//! and, after a grace period for sessions to come back, rewrites them from
//! its table in one transaction (`reconcile`). An older masqd keyed the
//! ingress sets by QPN alone, under other names (`conn_in`, `tenant_qpns`,
//! `ud_qpns`, `udq_<vni>`; a set's type cannot change): `start` deletes
//! them once its chains no longer name them (`old_sets`), carrying their
//! elements into the eBPF maps at every rail address (what a QPN alone
//! meant) until the reconcile rewrites them. So do the nftables sets,
//! map and chains of the per-connection and UD elements that the eBPF
//! maps replaced.
//!
//! This file sets the table up and serves endpoints and cgroups; `sets`
//! keeps the sets at run time, `rules` writes the nftables text.

#[cfg(test)]
mod netns_tests;
mod rules;
mod sets;
#[cfg(test)]
mod upgrade_tests;

use crate::config::{BackstopConfig, Config, EndpointConfig};
use crate::enforce::rdma_cgroup::{cgroup_inode, CGROUP_ROOT};
use crate::error::{Error, Result};
use crate::kernel::bpf_backstop::{BpfBackstop, Key};
use crate::kernel::nft::{nft_id, Nft};
use crate::kernel::nft_counters::NftCounters;
use crate::kernel::nft_set::{Change, Field, NftSets};
use rconntrack::QpKey;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;
use tracing::{debug, info, warn};

use rules::{adopted_element, adopted_maps, cgroups_now, del, depth_of, old_keys, old_sets};
use rules::{endpoint_rules, lock, map_elements, old_chains_gone, old_sets_gone};

pub const TABLE: &str = "masq_backstop";
/// RoCEv2's UDP port.
const ROCE_PORT: u16 = 4791;
/// The BTH opcode's transport bits (its top 3): 0b011 is UD.
const BTH_UD: &str = "@th,64,3 3";
/// Any other transport (RC, UC, and what is no BTH at all).
const BTH_NOT_UD: &str = "@th,64,3 != 3";
/// The deepest cgroup masqd adopts (one verdict map per depth): runtimes
/// nest containers 2 (podman) to 5 (Kubernetes' QoS slices) deep.
pub const MAX_ADOPTED_DEPTH: usize = 8;

/// The ingress sets (see the top), keyed by the local address too.
/// `conn_to`, `tenant_qps` and the endpoints' `eg_<endpoint>` are eBPF
/// maps (`sets::bpf_key`); their elements are written as nftables ones.
const CONN_TO: &str = "conn_to";
const TENANT_QPS: &str = "tenant_qps";

/// Set elements as masqd keeps them: (host address, QPN), a peer's
/// (egress) or this host's on the QP's rail (a local QP).
type Pair = (Ipv4Addr, u32);
/// A `conn_to` element: (peer host, local address, local QPN).
type Conn = (Ipv4Addr, Ipv4Addr, u32);
/// An endpoint's nft identifier (see `nft_id`).
type EpId = String;
/// What one live entry put in: (endpoint, egress pair, ingress element).
type Live<'a> = (&'a str, Pair, Conn);

/// A device of an endpoint: its (VNI, vIP), which an entry's local side
/// names, and this host's underlay address on its rail, which packets to
/// its QPs are sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct At {
    vni: u32,
    vip: Ipv4Addr,
    local: Ipv4Addr,
}

struct EndpointRules {
    /// Path below the cgroup v2 root, e.g. `tenants/acme-a`.
    cgroup: String,
    /// Its devices by endpoint name: the endpoint's own, and those of its
    /// further devices (`deviceOf`), whose packets its apps' cgroup sends.
    at: BTreeMap<String, At>,
}

#[derive(Default)]
struct Elements {
    /// The endpoints served, by nft identifier.
    endpoints: BTreeMap<EpId, EndpointRules>,
    /// Entries whose elements are in, and which.
    live: HashMap<QpKey, (EpId, Pair, Conn)>,
    /// endpoint -> (peer host, peer QPN) -> references
    egress: HashMap<EpId, HashMap<Pair, u32>>,
    /// (peer host, local address, local QPN) -> references
    conn_to: HashMap<Conn, u32>,
    /// (local address, QPN) -> references
    tenant_qps: HashMap<Pair, u32>,
    /// UD entries whose element is in: (endpoint, peer host).
    live_ud: HashMap<QpKey, (EpId, Ipv4Addr)>,
    /// endpoint -> peer host of an admitted UD AH -> references
    ud: HashMap<EpId, HashMap<Ipv4Addr, u32>>,
    /// The local endpoints' UD QPs: (local address, QPN) -> VNI (eBPF map
    /// ud_qps).
    ud_local: HashMap<Pair, u32>,
    /// Other hosts' UD QPs as announced: (host, QPN) -> VNI (eBPF map
    /// ud_from).
    ud_remote: HashMap<Pair, u32>,
    /// cgroups in the verdict map, with the inode they had then.
    cgroups: BTreeMap<EpId, u64>,
    /// Adopted cgroups (path below the root) -> (endpoint, inode then).
    adopted: BTreeMap<String, (EpId, u64)>,
    /// Depths whose `adopted_l<N>` map has its rule in the output chain.
    adopted_rules: std::collections::BTreeSet<usize>,
}

pub struct Backstop {
    /// The ruleset and the reconcile (libnftables).
    nft: Nft,
    /// The per-connection set elements (netlink).
    sets: NftSets,
    /// The drop counters (a netlink dump).
    counters: NftCounters,
    /// The per-connection elements an RTR waits for (`conn_to`,
    /// `tenant_qps`, `eg_<endpoint>`) live in eBPF maps, checked by the
    /// programs this holds (see "The backstop's eBPF maps" in
    /// docs/design.md); taken after `sending` and `elements`.
    bpf: Mutex<BpfBackstop>,
    level: usize,
    parent: String,
    /// The rails' names and this host's underlay address on each, to find
    /// an endpoint's (`At::of`).
    rails: Vec<(String, Ipv4Addr)>,
    elements: Mutex<Elements>,
    /// Set updates not yet in the kernel, in order (see `flush_updates`).
    pending: Mutex<Queue>,
    wake: Condvar,
    /// The number of the last update in the kernel (see `wait_applied`).
    applied: Mutex<u64>,
    applied_cv: Condvar,
    /// Held while updates are taken and run, so batches stay in order
    /// (taken through `sending()`, whose release wakes the waiters).
    sending: Mutex<()>,
}

/// Queued set updates; `last` numbers every update ever queued.
#[derive(Default)]
struct Queue {
    /// Each update, and when it was queued if it is a gone QP's
    /// deletions (`Removal::Gone`), which may wait for their batch.
    cmds: Vec<(Vec<Change>, Option<Instant>)>,
    last: u64,
    /// Threads that will run the queue themselves (`hold`): while there
    /// are any, the updater thread is not woken.
    holders: usize,
}

/// What names a set element: its set and key.
fn element_key(c: &Change) -> (&str, &[Field]) {
    (c.element().set.as_str(), &c.element().key[..])
}

impl Queue {
    /// Whether an update that must not wait is queued.
    fn urgent(&self) -> bool {
        self.cmds.iter().any(|(_, gone)| gone.is_none())
    }

    /// When the oldest queued deletion of a gone QP was queued.
    fn gone_since(&self) -> Option<Instant> {
        self.cmds.iter().find_map(|(_, gone)| *gone)
    }

    /// Everything queued, and the number of the last update.
    fn take(&mut self) -> (Vec<Vec<Change>>, u64) {
        let cmds = std::mem::take(&mut self.cmds);
        (cmds.into_iter().map(|(c, _)| c).collect(), self.last)
    }

    /// What a waiting admission runs: every update but the gone QPs'
    /// deletions, which wait on for their batch unless one names an
    /// element that another update names (a reused QPN's elements, deleted
    /// then added again): those keep their place in the queue's order.
    /// Updates on other elements commute, so the order of the rest holds.
    fn take_urgent(&mut self) -> (Vec<Vec<Change>>, u64) {
        let named: HashSet<(&str, &[Field])> = self
            .cmds
            .iter()
            .filter(|(_, gone)| gone.is_none())
            .flat_map(|(c, _)| c.iter().map(element_key))
            .collect();
        let now: Vec<bool> = self
            .cmds
            .iter()
            .map(|(c, gone)| gone.is_none() || c.iter().any(|c| named.contains(&element_key(c))))
            .collect();
        let (taken, left): (Vec<_>, Vec<_>) = std::mem::take(&mut self.cmds)
            .into_iter()
            .zip(now)
            .partition(|(_, now)| *now);
        self.cmds = left.into_iter().map(|(c, _)| c).collect();
        (taken.into_iter().map(|((c, _), _)| c).collect(), self.last)
    }
}

/// Whether the backstop applies to this device: on by default for software
/// RoCE (driver rxe), whose packets cross the host's netfilter; a hardware
/// RNIC's never do.
pub fn wanted(cfg: &BackstopConfig, is_rxe: bool) -> bool {
    cfg.enabled.unwrap_or(is_rxe)
}

impl Backstop {
    /// Install (or take over, after a crash) the table for `endpoints`.
    /// Set elements that are already there are kept until `reconcile`.
    pub fn start(cfg: &Config, endpoints: &[EndpointConfig]) -> Result<Backstop> {
        let parent = cfg.backstop.cgroup_parent.trim_matches('/').to_string();
        if parent.is_empty() {
            return Err(Error::invalid(
                "backstop.cgroupParent: must name a cgroup below the root",
            ));
        }
        let parent_dir = Path::new(CGROUP_ROOT).join(&parent);
        std::fs::create_dir_all(&parent_dir).map_err(|e| {
            Error::Failed(format!(
                "backstop.cgroupParent: cannot create {}: {e}",
                parent_dir.display()
            ))
        })?;
        let rails: Vec<(String, Ipv4Addr)> = cfg
            .rails
            .iter()
            .map(|r| (r.name.clone(), r.underlay.ip))
            .collect();
        let mut rules = BTreeMap::new();
        let mut seen = HashMap::new();
        let (further, own): (Vec<&EndpointConfig>, Vec<&EndpointConfig>) =
            endpoints.iter().partition(|e| e.device_of.is_some());
        for e in own {
            let id = nft_id(&e.name);
            if let Some(other) = seen.insert(id.clone(), e.name.clone()) {
                return Err(Error::Failed(format!(
                    "endpoints {other} and {} map to the same nftables name {id}",
                    e.name
                )));
            }
            rules.insert(id, EndpointRules::of(&parent, e, At::of(&rails, e)?));
        }
        for e in further {
            if let Some(r) = e.device_of.as_ref().and_then(|p| rules.get_mut(&nft_id(p))) {
                r.at.insert(e.name.clone(), At::of(&rails, e)?);
            }
        }
        // The eBPF part first: its checks must be in place before the
        // chains below stop making them (an upgrade from a table that made
        // them in nftables).
        let mut bpf = BpfBackstop::load(&cfg.backstop.bpf_dir)?;
        for r in &cfg.rails {
            bpf.guard_netdev(&r.underlay.netdev)?;
        }
        for id in rules.keys() {
            bpf.endpoint_number(id)?;
        }
        let b = Backstop {
            bpf: Mutex::new(bpf),
            nft: Nft::new()?,
            sets: NftSets::open(TABLE)
                .map_err(|e| Error::Failed(format!("nf_tables netlink socket: {e}")))?,
            counters: NftCounters::open(TABLE)
                .map_err(|e| Error::Failed(format!("nf_tables netlink socket: {e}")))?,
            level: parent.split('/').count() + 1,
            parent,
            rails,
            elements: Mutex::new(Elements::default()),
            pending: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            applied: Mutex::new(0),
            applied_cv: Condvar::new(),
            sending: Mutex::new(()),
        };
        // An older masqd's sets, found before the chains naming them change.
        let table = b
            .nft
            .run_terse(&format!("list table inet {TABLE}"))
            .unwrap_or_default();
        let old = old_sets(&table);
        let listings: Vec<(&String, String)> = old
            .iter()
            .filter_map(|name| {
                let kind = rules::old_kind(name);
                let listing = b
                    .nft
                    .run(&format!("list {kind} inet {TABLE} {name}"))
                    .ok()?;
                Some((name, listing))
            })
            .collect();
        let local: Vec<Ipv4Addr> = b.rails.iter().map(|r| r.1).collect();
        b.carry_into_maps(&listings, &local, &rules::vnis(&rules));
        let mut cgroups = cgroups_now(&rules);
        b.guard_new_cgroups(&rules, &mut cgroups, &BTreeMap::new());
        // One transaction: chains and the verdict map are replaced whole, so
        // a restart never lets a running tenant's packet miss its chain; an
        // older masqd's chains that read the sets the eBPF maps replaced
        // go in it too (their elements are in the maps by now).
        b.nft.run(&format!(
            "{}{}{}",
            old_chains_gone(&table),
            b.render(&rules),
            map_elements(&rules, &cgroups)
        ))?;
        if !old.is_empty() {
            // A transaction of their own: a leftover that cannot go must
            // not stop masqd (no chain reads them now). The maps took
            // their elements at every rail address (what the old key
            // meant), so nothing guarded before passes; `reconcile`
            // rewrites them exactly.
            match b.nft.run(&old_sets_gone(&old)) {
                Ok(_) => info!(sets = ?old, "backstop: an older masqd's sets replaced"),
                Err(e) => warn!(sets = ?old, "backstop: an older masqd's sets stay: {e}"),
            }
            // Its ingress counters: the eBPF program counts those drops now.
            for c in ["ingress_drop", "ud_ingress_drop"] {
                let _ = b.nft.run(&format!("delete counter inet {TABLE} {c}"));
            }
        }
        let mut el = b.lock();
        el.endpoints = rules;
        el.cgroups = cgroups;
        drop(el);
        crate::enforce::kconntrack::forget_roce();
        info!(table = TABLE, cgroups = %format!("{}/*", b.parent), "RoCE backstop installed");
        Ok(b)
    }

    /// The per-connection elements of an older masqd's sets (their names,
    /// as `old_sets` gives them, and JSON listings) into the eBPF maps, at
    /// every rail address `local` where a set's key had no address (what a
    /// QPN alone meant); `reconcile` rewrites them exactly. A UD QP's of a
    /// VNI no endpoint serves now (`served`) has no successor.
    fn carry_into_maps(
        &self,
        old: &[(&String, String)],
        local: &[Ipv4Addr],
        served: &std::collections::BTreeSet<u32>,
    ) {
        let mut bpf = lock(&self.bpf);
        for (name, listing) in old {
            let number = |id: &str| bpf.endpoint_number(id).ok();
            let keys = old_keys(name, listing, local, number);
            let gone = |k: &Key| k.vni().is_some_and(|v| !served.contains(&v));
            for k in keys.into_iter().filter(|k| !gone(k)) {
                if let Err(e) = bpf.insert(k) {
                    warn!("backstop: an older masqd's element stays out: {e}");
                }
            }
        }
    }

    /// The eBPF egress check on the endpoints' cgroups of `now` (endpoint,
    /// inode) that `had` does not hold as they are. A cgroup it cannot
    /// guard leaves `now`, so it stays out of the verdict map (its RoCE
    /// packets are then an unknown cgroup's: dropped) and is tried again
    /// at the next refresh.
    fn guard_new_cgroups(
        &self,
        endpoints: &BTreeMap<EpId, EndpointRules>,
        now: &mut BTreeMap<EpId, u64>,
        had: &BTreeMap<EpId, u64>,
    ) {
        now.retain(|id, ino| {
            if had.get(id) == Some(ino) {
                return true;
            }
            match self.guard_cgroup(&endpoints[id].cgroup, *ino, id) {
                Ok(()) => true,
                Err(e) => {
                    warn!("backstop: endpoint {id}'s cgroup stays unserved: {e}");
                    false
                }
            }
        });
    }

    /// The eBPF egress check on cgroup `path` (below the root, of inode
    /// `ino` when the caller looked), as endpoint `id`'s.
    fn guard_cgroup(&self, path: &str, ino: u64, id: &str) -> Result<()> {
        let mut bpf = lock(&self.bpf);
        let n = bpf.endpoint_number(id)?;
        bpf.guard_cgroup(&Path::new(CGROUP_ROOT).join(path), ino, n)
    }

    /// Tables, sets (kept if present), and chains (rewritten).
    fn render(&self, endpoints: &BTreeMap<EpId, EndpointRules>) -> String {
        let t = format!("inet {TABLE}");
        let mut s = String::new();
        let _ = writeln!(s, "add table {t}");
        let _ = writeln!(
            s,
            "add map {t} endpoint_cgroup {{ typeof socket cgroupv2 level {} : verdict; }}",
            self.level
        );
        for n in 1..=MAX_ADOPTED_DEPTH {
            // Emptied on every start: the apps of a container come back
            // with their sessions and adopt their cgroup again.
            let _ = writeln!(
                s,
                "add map {t} adopted_l{n} {{ typeof socket cgroupv2 level {n} : verdict; }}\n\
                 flush map {t} adopted_l{n}"
            );
        }
        let _ = writeln!(s, "add counter {t} unknown_cgroup_drop");
        // Chains: created if missing, emptied, refilled, all in this one
        // transaction. The caller refills the verdict map after them.
        let _ = writeln!(s, "flush map {t} endpoint_cgroup");
        for id in endpoints.keys() {
            s.push_str(&endpoint_rules(id));
        }
        let hooks = [
            ("prerouting", "prerouting", "raw"),
            ("output", "output", "raw"),
        ];
        for (name, hook, prio) in hooks {
            let _ = writeln!(
                s,
                "add chain {t} {name} {{ type filter hook {hook} priority {prio}; policy accept; }}\n\
                 flush chain {t} {name}"
            );
        }
        let roce = format!("udp dport {ROCE_PORT}");
        let _ = writeln!(s, "add rule {t} prerouting {roce} notrack");
        let _ = writeln!(s, "add rule {t} output {roce} notrack");
        let _ = writeln!(
            s,
            "add rule {t} output {roce} socket cgroupv2 level {} vmap @endpoint_cgroup",
            self.level
        );
        let _ = writeln!(
            s,
            "add rule {t} output {roce} socket cgroupv2 level {} \"{}\" counter name unknown_cgroup_drop drop",
            self.level - 1,
            self.parent
        );
        // Ingress, RC and UD alike: the eBPF program on the rails' netdevs.
        s
    }

    /// Serve one more endpoint: its set, counter and chain, and its cgroup
    /// in the verdict map if it exists (else `refresh_cgroups` adds it).
    pub fn add_endpoint(&self, e: &EndpointConfig) -> Result<()> {
        let at = At::of(&self.rails, e)?;
        let mut el = self.lock();
        if let Some(p) = &e.device_of {
            // Its packets leave from its apps' cgroup: its endpoint's chain.
            let rules = el
                .endpoints
                .get_mut(&nft_id(p))
                .ok_or_else(|| Error::Failed(format!("endpoint {p} is not in the backstop")))?;
            rules.at.insert(e.name.clone(), at);
            return Ok(());
        }
        let id = nft_id(&e.name);
        if el.endpoints.contains_key(&id) {
            return Err(Error::Failed(format!(
                "endpoint {} is in the backstop already",
                e.name
            )));
        }
        let one = BTreeMap::from([(id.clone(), EndpointRules::of(&self.parent, e, at))]);
        let cgroups = cgroups_now(&one);
        self.nft.run(&format!(
            "{}{}",
            endpoint_rules(&id),
            map_elements(&one, &cgroups)
        ))?;
        el.endpoints.extend(one);
        el.cgroups.extend(cgroups);
        Ok(())
    }

    /// Stop serving an endpoint whose connections are gone: its chain, set
    /// and counter go, and its cgroup leaves the verdict map (a process
    /// left in it is then an unknown tenant's: dropped).
    pub fn remove_endpoint(&self, name: &str) -> Result<()> {
        // Updates already queued may name its set: run them first, in order.
        let sending = self.sending();
        self.run_queue(&sending);
        let mut el = self.lock();
        let id = nft_id(name);
        let Some(rules) = el.endpoints.remove(&id) else {
            // A further device: its address leaves its endpoint's chain.
            for r in el.endpoints.values_mut() {
                r.at.remove(name);
            }
            return Ok(());
        };
        let own = el.cgroups.remove(&id).map(|ino| (rules.cgroup, ino));
        let adopted: Vec<(String, u64)> = el
            .adopted
            .iter()
            .filter(|(_, (ep, _))| *ep == id)
            .map(|(p, (_, ino))| (p.clone(), *ino))
            .collect();
        el.adopted.retain(|_, (ep, _)| *ep != id);
        // Its connections are normally untracked by now; any left go too.
        let mut gone = Vec::new();
        let left: Vec<QpKey> = el
            .live
            .iter()
            .filter(|(_, l)| l.0 == id)
            .map(|(k, _)| *k)
            .collect();
        for k in left {
            if let Some((ep, eg, ing)) = el.live.remove(&k) {
                del(&mut el, &mut gone, (&ep, eg, ing));
            }
        }
        el.live_ud.retain(|_, l| l.0 != id);
        el.egress.remove(&id);
        el.ud.remove(&id);
        // The map is rebuilt rather than an element deleted: a cgroup that is
        // gone cannot be named by path.
        let t = format!("inet {TABLE}");
        let mut bpf = lock(&self.bpf);
        let cmd: String = gone
            .iter()
            .filter(|c| !sets::apply_in_maps(&mut bpf, c))
            .map(|c| c.nft_command(&t))
            .collect();
        let cmd = format!(
            "{cmd}flush map {t} endpoint_cgroup\n{}{}\
             flush chain {t} ep_{id}\ndelete chain {t} ep_{id}\n\
             delete set {t} ud_{id}\ndelete counter {t} drop_{id}\n",
            map_elements(&el.endpoints, &el.cgroups),
            adopted_maps(&el.adopted, &el.adopted_rules)
        );
        self.nft.run(&cmd)?;
        // Its cgroups leave the eBPF egress check (a process left in its
        // own is then an unknown tenant's for nftables: dropped).
        for (path, ino) in own.into_iter().chain(adopted) {
            let dir = Path::new(CGROUP_ROOT).join(&path);
            if cgroup_inode(&dir) == Some(ino) {
                if let Err(e) = bpf.unguard_cgroup(&dir) {
                    warn!("backstop: {e}");
                }
            }
            bpf.forget_cgroup(ino);
        }
        bpf.forget_endpoint(&id);
        Ok(())
    }

    /// Put every configured endpoint whose cgroup exists into the verdict
    /// map (again, if it was recreated). Called when a session opens and
    /// periodically: a tenant's cgroup may appear after masqd.
    pub fn refresh_cgroups(&self) {
        let mut el = self.lock();
        self.prune_adopted(&mut el);
        let mut now = cgroups_now(&el.endpoints);
        if now == el.cgroups {
            return;
        }
        // The eBPF egress check first: nftables' chain of an endpoint leaves
        // its RC packets to it.
        self.guard_new_cgroups(&el.endpoints, &mut now, &el.cgroups);
        for (id, ino) in &el.cgroups {
            if now.get(id) != Some(ino) {
                lock(&self.bpf).forget_cgroup(*ino);
            }
        }
        let only_added = el.cgroups.iter().all(|(i, ino)| now.get(i) == Some(ino));
        let cmd = if only_added {
            let new = now
                .iter()
                .filter(|(i, _)| !el.cgroups.contains_key(*i))
                .map(|(i, &ino)| (i.clone(), ino))
                .collect();
            map_elements(&el.endpoints, &new)
        } else {
            // A cgroup went or was recreated: its old id cannot be deleted
            // by path (that resolves the new one), so rebuild the map, in
            // one transaction so the others never miss a packet.
            format!(
                "flush map inet {TABLE} endpoint_cgroup\n{}",
                map_elements(&el.endpoints, &now)
            )
        };
        match self.nft.run(&cmd) {
            Ok(_) => {
                debug!(
                    cgroups = now.len(),
                    "backstop: egress filtered for the endpoints' cgroups"
                );
                el.cgroups = now;
            }
            Err(e) => warn!("backstop: cannot map the endpoints' cgroups: {e}"),
        }
    }

    /// Filter the RoCE packets of cgroup `path` (below the root, outside
    /// `<cgroupParent>`) as endpoint `name`'s: the caller has checked that
    /// an app of the endpoint runs in it and that every process in it lives
    /// in the endpoint's network namespace. Returns whether it is new.
    pub fn adopt_cgroup(&self, name: &str, path: &str) -> Result<bool> {
        let id = nft_id(name);
        let depth = depth_of(path);
        if path.is_empty() || depth > MAX_ADOPTED_DEPTH {
            return Err(Error::Failed(format!(
                "cgroup /{path} is the root or deeper than {MAX_ADOPTED_DEPTH} levels"
            )));
        }
        if !path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-:@+/".contains(c))
        {
            return Err(Error::Failed(format!(
                "cgroup /{path}: a name nftables is not given"
            )));
        }
        if self.by_name(path) {
            return Ok(false); // filtered by name already
        }
        let ino = cgroup_inode(&Path::new(CGROUP_ROOT).join(path))
            .ok_or_else(|| Error::Failed(format!("cgroup /{path} is gone")))?;
        let mut el = self.lock();
        if !el.endpoints.contains_key(&id) {
            return Err(Error::Failed(format!(
                "endpoint {name} is not in the backstop"
            )));
        }
        // A pod's cgroup adopted for this endpoint covers its containers'.
        let covered = el.adopted.iter().any(|(p, (ep, _))| {
            *ep == id && path.starts_with(p.as_str()) && path[p.len()..].starts_with('/')
        });
        if covered {
            return Ok(false);
        }
        match el.adopted.get(path) {
            Some((ep, i)) if *ep == id && *i == ino => return Ok(false),
            Some((ep, i)) if *i == ino => {
                return Err(Error::Failed(format!(
                    "cgroup /{path} carries endpoint {ep}'s apps already"
                )))
            }
            _ => {}
        }
        let t = format!("inet {TABLE}");
        let mut cmd = String::new();
        if !el.adopted_rules.contains(&depth) {
            let _ = writeln!(
                cmd,
                "add rule {t} output udp dport {ROCE_PORT} socket cgroupv2 level {depth} vmap @adopted_l{depth}"
            );
        }
        // A recreated cgroup of the same path: its old element is gone
        // with it; `add` replaces nothing else.
        cmd.push_str(&adopted_element(path, &id));
        if let Some((_, old)) = el.adopted.get(path) {
            lock(&self.bpf).forget_cgroup(*old);
        }
        self.guard_cgroup(path, ino, &id)?;
        self.nft.run(&cmd)?;
        el.adopted_rules.insert(depth);
        el.adopted.insert(path.to_string(), (id, ino));
        info!(endpoint = %name, cgroup = %format!("/{path}"),
              "backstop: the endpoint's apps run in a cgroup of their own (a container's); its RoCE packets are filtered as the endpoint's");
        Ok(true)
    }

    /// Whether cgroup `path` (below the root) is `<cgroupParent>` or below
    /// it: filtered by its endpoint's name, nothing to adopt.
    pub fn by_name(&self, path: &str) -> bool {
        path == self.parent || path.starts_with(&format!("{}/", self.parent))
    }

    /// The adopted cgroups, by path, with their endpoint's nft identifier.
    pub fn adopted(&self) -> BTreeMap<String, String> {
        self.lock()
            .adopted
            .iter()
            .map(|(p, (ep, _))| (p.clone(), ep.clone()))
            .collect()
    }

    /// Forget adopted cgroups that are gone (a container that ended): a
    /// gone cgroup cannot be named by path, so the maps are rebuilt.
    fn prune_adopted(&self, el: &mut Elements) {
        let before = el.adopted.len();
        let mut gone = Vec::new();
        el.adopted.retain(|path, (_, ino)| {
            let here = cgroup_inode(&Path::new(CGROUP_ROOT).join(path.as_str())) == Some(*ino);
            if !here {
                gone.push(*ino);
            }
            here
        });
        if el.adopted.len() == before {
            return;
        }
        let mut bpf = lock(&self.bpf);
        for ino in gone {
            bpf.forget_cgroup(ino);
        }
        drop(bpf);
        if let Err(e) = self.nft.run(&adopted_maps(&el.adopted, &el.adopted_rules)) {
            warn!("backstop: cannot rebuild the adopted cgroups' maps: {e}");
        }
    }

    fn lock(&self) -> MutexGuard<'_, Elements> {
        lock(&self.elements)
    }
}
