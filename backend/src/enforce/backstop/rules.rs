//! The backstop's nftables text and element bookkeeping: the rules of an
//! endpoint and of a VNI, the verdict-map elements of the endpoints' and
//! the adopted cgroups, the per-connection set elements and the reference
//! counts behind each.

use super::{At, Conn, Elements, EndpointRules, EpId, Live, Pair, TABLE};
use super::{BTH_DEST_QPN, BTH_NOT_UD, BTH_UD, CONN_TO, TENANT_QPS, UD_QPS};
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

/// One VNI's UD ingress: the set of its local UD QPs (local address,
/// QPN) and the chain that a datagram from one of the VNI's UD QPs
/// elsewhere jumps to (created if missing; the set is kept, the chain
/// rewritten).
pub(super) fn vni_rules(vni: u32) -> String {
    let t = format!("inet {TABLE}");
    format!(
        "add set {t} udqp_{vni} {{ typeof ip daddr . {BTH_DEST_QPN}; }}
         add chain {t} udvni_{vni}
flush chain {t} udvni_{vni}
         add rule {t} udvni_{vni} ip daddr . {BTH_DEST_QPN} @udqp_{vni} accept
"
    )
}

/// An older masqd's ingress sets, keyed by QPN alone (see the top), as a
/// terse JSON `list sets` of the table shows them.
pub(super) fn old_sets(listing: &str) -> Vec<String> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(listing) else {
        return Vec::new(); // no table yet
    };
    let old = |n: &str| {
        ["conn_in", "tenant_qpns", "ud_qpns", CONN_TO, TENANT_QPS].contains(&n)
            || n.starts_with("eg_")
            || n.strip_prefix("udq_")
                .is_some_and(|v| v.parse::<u32>().is_ok())
    };
    v["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i.get("set"))
        .filter(|s| s["family"] == "inet" && s["table"] == TABLE)
        .filter_map(|s| s["name"].as_str())
        .filter(|n| old(n))
        .map(String::from)
        .collect()
}

/// An old set's elements (its `list set` in JSON) as elements of the set
/// that replaces it, once for each of this host's rail addresses `local`:
/// until the reconcile, a QPN guarded before stays guarded on every rail,
/// as it was. A UD set of a VNI no endpoint serves now has no successor.
pub(super) fn old_elements_carried(
    name: &str,
    listing: &str,
    local: &[Ipv4Addr],
    served: &BTreeSet<u32>,
) -> String {
    let new = match name {
        "ud_qpns" => UD_QPS.to_string(),
        _ => match name
            .strip_prefix("udq_")
            .and_then(|v| v.parse::<u32>().ok())
        {
            Some(vni) if served.contains(&vni) => format!("udqp_{vni}"),
            _ => return String::new(),
        },
    };
    let mut keys = Vec::new();
    for e in &listed_elements(listing) {
        // conn_in's (peer, QPN), the others' QPN.
        let (peer, qpn) = match e["concat"].as_array().map(Vec::as_slice) {
            Some([peer, qpn]) => (peer.as_str().map(|p| format!("{p} . ")), qpn.as_u64()),
            _ => (Some(String::new()), e.as_u64()),
        };
        if let (Some(peer), Some(qpn)) = (peer, qpn) {
            keys.extend(local.iter().map(|a| format!("{peer}{a} . {qpn}")));
        }
    }
    if keys.is_empty() {
        return String::new();
    }
    format!("add element inet {TABLE} {new} {{ {} }}\n", keys.join(", "))
}

/// The elements of an older masqd's set `name` (its `list set` in JSON)
/// that live in the eBPF maps now: its per-connection sets of nftables
/// (`conn_to`, `tenant_qps`, `eg_<endpoint>`, whose endpoint `number`
/// gives), and the QPN-only ones before them (`conn_in`, `tenant_qpns`),
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
    let mut keys = Vec::new();
    for e in &listed_elements(listing) {
        let fields = e["concat"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
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

/// A set's elements as its `list set` in JSON shows them (none if the
/// listing is not JSON: no such set).
fn listed_elements(listing: &str) -> Vec<serde_json::Value> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(listing) else {
        return Vec::new();
    };
    v["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["set"]["elem"].as_array())
        .flatten()
        .cloned()
        .collect()
}

/// Deleting them, once `render` rewrote the chains that named them. The
/// chain of a VNI no endpoint serves now is not rewritten: it is emptied
/// (its `ud_from` elements go at the reconcile).
pub(super) fn old_sets_gone(old: &[String], served: &BTreeSet<u32>) -> String {
    let t = format!("inet {TABLE}");
    let mut cmd = String::new();
    for name in old {
        let vni = name
            .strip_prefix("udq_")
            .and_then(|v| v.parse::<u32>().ok());
        if let Some(vni) = vni.filter(|v| !served.contains(v)) {
            let _ = writeln!(
                cmd,
                "add chain {t} udvni_{vni}\nflush chain {t} udvni_{vni}"
            );
        }
        let _ = writeln!(cmd, "delete set {t} {name}");
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

/// `udqp_<vni>` and `ud_qps`: a local UD QP of that VNI, (local address,
/// QPN).
pub(super) fn ud_local_qp(vni: u32, (local, qpn): Pair) -> [Element; 2] {
    let key = [Field::Ipv4(local), Field::Bits24(qpn)];
    [
        Element::new(format!("udqp_{vni}"), &key),
        Element::new(UD_QPS, &key),
    ]
}

/// `ud_from`: another host's UD QP, to its VNI's chain.
pub(super) fn ud_from(host: Ipv4Addr, qpn: u32, vni: u32) -> Element {
    Element::jumping(
        "ud_from",
        &[Field::Ipv4(host), Field::Bits24(qpn)],
        format!("udvni_{vni}"),
    )
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
