//! The backstop's nftables text and element bookkeeping: the rules of an
//! endpoint, an older masqd's table's parts, the verdict-map elements of the endpoints' and
//! the adopted cgroups, the per-connection set elements and the reference
//! counts behind each.

use super::{At, Conn, Elements, EndpointRules, EpId, Live, Pair, TABLE};
use super::{BTH_NOT_UD, BTH_UD, CONN_TO, TENANT_QPS};
use crate::config::EndpointConfig;
use crate::enforce::rdma_cgroup::{cgroup_inode, CGROUP_ROOT};
use crate::error::{Error, Result};
use crate::kernel::bpf_backstop::Key;
use crate::kernel::nft_set::{Change, Element, Field};
use rconntrack::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

impl At {
    /// `e`'s device, on its rail (none: the first) of `rails` (name,
    /// this host's underlay address).
    pub(super) fn of(rails: &[(String, Ipv4Addr)], e: &EndpointConfig) -> Result<At> {
        let local = crate::config::rail_value(rails, e.rail.as_deref()).copied();
        let local = local.ok_or_else(|| {
            Error::Failed(format!(
                "endpoint {}: no rail {:?} on this host",
                e.name,
                e.rail.as_deref().unwrap_or_default()
            ))
        })?;
        // Elements keyed by 0.0.0.0 would match no packet: its QPs would
        // take no ingress at all.
        if local.is_unspecified() {
            return Err(Error::Failed(format!(
                "endpoint {}: its rail has no underlay address",
                e.name
            )));
        }
        Ok(At {
            vni: e.vni,
            vip: e.vip,
            local,
        })
    }
}

impl EndpointRules {
    pub(super) fn of(parent: &str, e: &EndpointConfig, at: At) -> EndpointRules {
        EndpointRules {
            cgroup: format!("{parent}/{}", e.name),
            at: BTreeMap::from([(e.name.clone(), at)]),
        }
    }
}

/// The VNIs of the endpoints' devices.
pub(super) fn vnis(endpoints: &BTreeMap<EpId, EndpointRules>) -> BTreeSet<u32> {
    endpoints
        .values()
        .flat_map(|e| e.at.values().map(|a| a.vni))
        .collect()
}

/// One endpoint's set, counter and chain (created if missing, emptied,
/// refilled): its UD packets pass only to the hosts of its admitted
/// address handles; its IPv4 RC and UC packets pass on to the eBPF egress
/// program of its cgroup, which lets through only admitted (host, QPN)
/// pairs (`eg_<endpoint>` in the eBPF map `egress`); the rest is dropped.
pub(super) fn endpoint_rules(id: &str) -> String {
    let t = format!("inet {TABLE}");
    let c = format!("ep_{id}");
    format!(
        "add counter {t} drop_{id}\n\
         add chain {t} {c}\nflush chain {t} {c}\n\
         add set {t} ud_{id} {{ type ipv4_addr; }}\n\
         add rule {t} {c} ip daddr @ud_{id} {BTH_UD} accept\n\
         add rule {t} {c} meta nfproto ipv4 {BTH_NOT_UD} accept\n\
         add rule {t} {c} counter name drop_{id} drop\n"
    )
}

/// The `name`s of the `kind` items ("set", "map", "chain", ...) of the
/// table in its terse JSON listing (none if it is not JSON: no table).
fn listed_names(listing: &str, kind: &str) -> Vec<String> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(listing) else {
        return Vec::new();
    };
    v["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i.get(kind))
        .filter(|s| s["family"] == "inet" && s["table"] == TABLE)
        .filter_map(|s| s["name"].as_str())
        .map(String::from)
        .collect()
}

/// The VNI that `name` ends in, if it is `<prefix><vni>`.
fn vni_in(name: &str, prefix: &str) -> Option<u32> {
    name.strip_prefix(prefix).and_then(|v| v.parse().ok())
}

/// What kind of nftables object an older masqd's `old_sets` one is: the
/// map `ud_from`, or a set.
pub(super) fn old_kind(name: &str) -> &'static str {
    if name == "ud_from" {
        "map"
    } else {
        "set"
    }
}

/// An older masqd's sets and maps that the eBPF maps replace (see the
/// top), as a terse JSON `list table` shows them: the per-connection ones
/// (in nftables, or keyed by QPN alone before that) and the UD QPs' ones
/// (`ud_qps`, `udqp_<vni>`, the map `ud_from`).
pub(super) fn old_sets(listing: &str) -> Vec<String> {
    let old = |n: &String| {
        [
            "conn_in",
            "tenant_qpns",
            "ud_qpns",
            CONN_TO,
            TENANT_QPS,
            "ud_qps",
            "ud_from",
        ]
        .contains(&n.as_str())
            || n.starts_with("eg_")
            || vni_in(n, "udq_").is_some()
            || vni_in(n, "udqp_").is_some()
    };
    let mut all = listed_names(listing, "set");
    all.extend(listed_names(listing, "map"));
    all.retain(old);
    all
}

/// An older masqd's chains that read the UD QPs' sets (`input`, which
/// sent a datagram to a tenant's UD QP to `ud_in`, which sent it on by
/// `ud_from` to its VNI's `udvni_<vni>`), in the order they can go:
/// flushed and deleted, with `ud_from`'s jumps flushed first.
pub(super) fn old_chains_gone(listing: &str) -> String {
    let chains = listed_names(listing, "chain");
    let t = format!("inet {TABLE}");
    let mut cmd = String::new();
    for c in ["input", "ud_in"] {
        if chains.iter().any(|n| n == c) {
            let _ = writeln!(cmd, "flush chain {t} {c}\ndelete chain {t} {c}");
        }
    }
    let vnis: Vec<&String> = chains
        .iter()
        .filter(|n| vni_in(n, "udvni_").is_some())
        .collect();
    if vnis.is_empty() {
        return cmd;
    }
    if listed_names(listing, "map").iter().any(|n| n == "ud_from") {
        let _ = writeln!(cmd, "flush map {t} ud_from");
    }
    for c in vnis {
        let _ = writeln!(cmd, "flush chain {t} {c}\ndelete chain {t} {c}");
    }
    cmd
}

/// The elements of an older masqd's set or map `name` (its `list set` or
/// `list map` in JSON) that live in the eBPF maps now: its per-connection
/// sets of nftables (`conn_to`, `tenant_qps`, `eg_<endpoint>`, whose
/// endpoint `number` gives), the UD QPs' (`udqp_<vni>` and the map
/// `ud_from`, whose jumps name the VNI; `ud_qps` holds nothing more), and
/// the QPN-only ones before them (`conn_in`, `tenant_qpns`, `udq_<vni>`),
/// whose QPNs are taken at each of this host's rail addresses `local`.
pub(super) fn old_keys(
    name: &str,
    listing: &str,
    local: &[Ipv4Addr],
    mut number: impl FnMut(&str) -> Option<u32>,
) -> Vec<Key> {
    let addr = |v: &serde_json::Value| v.as_str().and_then(|a| a.parse::<Ipv4Addr>().ok());
    let qpn = |v: &serde_json::Value| v.as_u64().and_then(|q| u32::try_from(q).ok());
    let egress = name.strip_prefix("eg_").and_then(&mut number);
    let ud_vni = vni_in(name, "udqp_");
    let ud_vni_old = vni_in(name, "udq_");
    let mut keys = Vec::new();
    for e in &listed_elements(listing) {
        if name == "ud_from" {
            // A map's element: [key, verdict].
            let target = e[1]["jump"]["target"].as_str().unwrap_or_default();
            if let ([h, q], Some(vni)) = (concat(&e[0]), vni_in(target, "udvni_")) {
                keys.extend(addr(h).zip(qpn(q)).map(|(h, q)| Key::UdFrom(h, q, vni)));
            }
            continue;
        }
        if let (Some(vni), Some(q)) = (ud_vni_old, qpn(e)) {
            keys.extend(local.iter().map(|&l| Key::UdQp(l, q, vni)));
            continue;
        }
        let fields = concat(e);
        if let (Some(vni), [l, q]) = (ud_vni, fields) {
            keys.extend(addr(l).zip(qpn(q)).map(|(l, q)| Key::UdQp(l, q, vni)));
            continue;
        }
        match (name, fields) {
            (CONN_TO, [p, l, q]) => keys
                .extend((addr(p).zip(addr(l)).zip(qpn(q))).map(|((p, l), q)| Key::ConnTo(p, l, q))),
            (TENANT_QPS, [l, q]) => {
                keys.extend(addr(l).zip(qpn(q)).map(|(l, q)| Key::TenantQp(l, q)))
            }
            ("conn_in", [p, q]) => {
                if let Some((p, q)) = addr(p).zip(qpn(q)) {
                    keys.extend(local.iter().map(|&l| Key::ConnTo(p, l, q)));
                }
            }
            ("tenant_qpns", []) => {
                if let Some(q) = qpn(e) {
                    keys.extend(local.iter().map(|&l| Key::TenantQp(l, q)));
                }
            }
            (_, [h, q]) => {
                if let Some(((n, h), q)) = egress.zip(addr(h)).zip(qpn(q)) {
                    keys.push(Key::Egress(n, h, q));
                }
            }
            _ => {}
        }
    }
    keys
}

/// The fields of a concatenated key in JSON (none if it is not one).
fn concat(e: &serde_json::Value) -> &[serde_json::Value] {
    e["concat"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// A set's or map's elements as its `list set` or `list map` in JSON
/// shows them (none if the listing is not JSON: no such set).
fn listed_elements(listing: &str) -> Vec<serde_json::Value> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(listing) else {
        return Vec::new();
    };
    v["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i.get("set").or_else(|| i.get("map"))?["elem"].as_array())
        .flatten()
        .cloned()
        .collect()
}

/// Deleting them (`ud_from` is a map), once `render` rewrote the chains
/// that named them and `old_chains_gone` took the rest.
pub(super) fn old_sets_gone(old: &[String]) -> String {
    let t = format!("inet {TABLE}");
    let mut cmd = String::new();
    for name in old {
        let _ = writeln!(cmd, "delete {} {t} {name}", old_kind(name));
    }
    cmd
}

/// The endpoints whose cgroup exists now, with its inode.
pub(super) fn cgroups_now(endpoints: &BTreeMap<EpId, EndpointRules>) -> BTreeMap<EpId, u64> {
    endpoints
        .iter()
        .filter_map(|(id, ep)| {
            Some((
                id.clone(),
                cgroup_inode(&Path::new(CGROUP_ROOT).join(&ep.cgroup))?,
            ))
        })
        .collect()
}

/// Verdict-map elements for these endpoints' cgroups.
pub(super) fn map_elements(
    endpoints: &BTreeMap<EpId, EndpointRules>,
    cgroups: &BTreeMap<EpId, u64>,
) -> String {
    let mut cmd = String::new();
    for id in cgroups.keys() {
        if let Some(ep) = endpoints.get(id) {
            let _ = writeln!(
                cmd,
                "add element inet {TABLE} endpoint_cgroup {{ \"{}\" : jump ep_{id} }}",
                ep.cgroup
            );
        }
    }
    cmd
}

/// The adopted maps in use, emptied and refilled (one transaction with
/// whatever follows, so a live cgroup never misses its chain).
pub(super) fn adopted_maps(
    adopted: &BTreeMap<String, (EpId, u64)>,
    depths: &std::collections::BTreeSet<usize>,
) -> String {
    let t = format!("inet {TABLE}");
    let mut cmd = String::new();
    for n in depths {
        let _ = writeln!(cmd, "flush map {t} adopted_l{n}");
    }
    for (path, (id, _)) in adopted {
        cmd.push_str(&adopted_element(path, id));
    }
    cmd
}

/// A cgroup's depth below the root: the level its map matches at.
pub(super) fn depth_of(path: &str) -> usize {
    path.split('/').count()
}

/// The element sending adopted cgroup `path`'s packets to endpoint `id`'s chain.
pub(super) fn adopted_element(path: &str, id: &str) -> String {
    format!(
        "add element inet {TABLE} adopted_l{} {{ \"{path}\" : jump ep_{id} }}\n",
        depth_of(path)
    )
}

/// The endpoint whose device an entry's local side is, and this host's
/// address on that device's rail.
pub(super) fn endpoint_of(
    endpoints: &BTreeMap<EpId, EndpointRules>,
    e: &Entry,
) -> Option<(EpId, Ipv4Addr)> {
    endpoints.iter().find_map(|(id, r)| {
        r.at.values()
            .find(|a| (a.vni, a.vip) == (e.vni, e.local_vip))
            .map(|a| (id.clone(), a.local))
    })
}

pub(super) fn add(el: &mut Elements, out: &mut Vec<Change>, (ep, eg, ing): Live) {
    if bump(el.egress.entry(ep.to_string()).or_default(), eg) {
        out.push(Change::Add(egress(ep, eg)));
    }
    if bump(&mut el.conn_to, ing) {
        out.push(Change::Add(conn_to(ing)));
    }
}

pub(super) fn del(el: &mut Elements, out: &mut Vec<Change>, (ep, eg, ing): Live) {
    if el.egress.get_mut(ep).is_some_and(|m| drop_ref(m, eg)) {
        out.push(Change::Delete(egress(ep, eg)));
    }
    if drop_ref(&mut el.conn_to, ing) {
        out.push(Change::Delete(conn_to(ing)));
    }
}

pub(super) fn del_ud(el: &mut Elements, out: &mut Vec<Change>, ep: &str, host: Ipv4Addr) {
    if el.ud.get_mut(ep).is_some_and(|m| drop_ref(m, host)) {
        out.push(Change::Delete(ud_host(ep, host)));
    }
}

// The sets' elements, keyed as the sets' `typeof` declares (see `render`).

/// `eg_<endpoint>`: (peer host, destination QPN) the endpoint may send to.
pub(super) fn egress(ep: &str, (host, qpn): Pair) -> Element {
    Element::new(format!("eg_{ep}"), &[Field::Ipv4(host), Field::Bits24(qpn)])
}

/// `conn_to`: (peer host, local address, local QPN): the peer may reach
/// that tenant QP.
pub(super) fn conn_to((host, local, qpn): Conn) -> Element {
    let key = [Field::Ipv4(host), Field::Ipv4(local), Field::Bits24(qpn)];
    Element::new(CONN_TO, &key)
}

/// `tenant_qps`: a tenant QP, (local address, QPN).
pub(super) fn tenant_qp((local, qpn): Pair) -> Element {
    Element::new(TENANT_QPS, &[Field::Ipv4(local), Field::Bits24(qpn)])
}

/// `ud_<endpoint>`: a host the endpoint's UD packets may go to.
pub(super) fn ud_host(ep: &str, host: Ipv4Addr) -> Element {
    Element::new(format!("ud_{ep}"), &[Field::Ipv4(host)])
}

pub(super) fn egress_pair(e: &Entry) -> Pair {
    (e.peer_host, e.remote_qpn)
}

/// `conn_to`'s element for an entry whose QP is on the rail of address
/// `local`.
pub(super) fn ingress(e: &Entry, local: Ipv4Addr) -> Conn {
    (e.peer_host, local, e.local_qpn)
}

/// Count a reference; true when it is the first (the element must be added).
pub(super) fn bump<K: std::hash::Hash + Eq>(m: &mut HashMap<K, u32>, k: K) -> bool {
    let n = m.entry(k).or_insert(0);
    *n += 1;
    *n == 1
}

/// Drop a reference; true when it was the last (the element must go).
pub(super) fn drop_ref<K: std::hash::Hash + Eq>(m: &mut HashMap<K, u32>, k: K) -> bool {
    match m.get_mut(&k) {
        Some(n) if *n > 1 => {
            *n -= 1;
            false
        }
        Some(_) => {
            m.remove(&k);
            true
        }
        None => false,
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
