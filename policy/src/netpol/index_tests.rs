use super::*;
use crate::netpol::decide::{Change, Connection, Endpoint, PortSpace, Side, Verdict};
use crate::netpol::object::{Peer, Protocol};
use serde_json::{json, Value};
use std::net::Ipv4Addr;

pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

pub(crate) const NAMESPACES: [&str; 3] = ["a", "b", "c"];
pub(crate) const PODS: usize = 4;

fn labels(rng: &mut Rng) -> Labels {
    let mut l = Labels::new();
    for key in ["app", "env"] {
        if rng.below(3) > 0 {
            l.insert(key.into(), ["x", "y"][rng.below(2)].into());
        }
    }
    l
}

fn selector(rng: &mut Rng) -> Value {
    let value = ["x", "y"][rng.below(2)];
    match rng.below(4) {
        0 => json!({}),
        1 => json!({"matchLabels": {"app": value}}),
        2 => json!({"matchExpressions": [{"key": "env", "operator": "Exists"}]}),
        _ => json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["y"]}]}),
    }
}

fn peer(rng: &mut Rng) -> Value {
    match rng.below(4) {
        0 => json!({"podSelector": selector(rng)}),
        1 => json!({"namespaceSelector": selector(rng)}),
        2 => json!({"podSelector": selector(rng), "namespaceSelector": selector(rng)}),
        _ => json!({"ipBlock": {"cidr": "10.0.0.0/30"}}),
    }
}

fn rule(rng: &mut Rng, key: &str) -> Value {
    let mut r = serde_json::Map::new();
    if rng.below(4) > 0 {
        let peers: Vec<Value> = (0..1 + rng.below(2)).map(|_| peer(rng)).collect();
        r.insert(key.into(), peers.into());
    }
    if rng.below(3) == 0 {
        let port = 7470 + rng.below(3);
        let ports = match rng.below(4) {
            0 => json!([{"port": port}]),
            1 => json!([{"protocol": "UDP", "port": port, "endPort": port + 1}]),
            2 => json!([{"protocol": "UDP"}, {"port": "named"}]),
            _ => json!([{"protocol": "SCTP", "port": 7471}, {"port": 7400, "endPort": port}]),
        };
        r.insert("ports".into(), ports);
    }
    r.into()
}

fn policy(rng: &mut Rng, ns: &str, name: &str) -> NetworkPolicy {
    let types = [
        json!(["Ingress"]),
        json!(["Egress"]),
        json!(["Ingress", "Egress"]),
    ];
    let ingress: Vec<Value> = (0..rng.below(3)).map(|_| rule(rng, "from")).collect();
    let egress: Vec<Value> = (0..rng.below(3)).map(|_| rule(rng, "to")).collect();
    NetworkPolicy::from_value(&json!({
        "metadata": {"namespace": ns, "name": name},
        "spec": {"podSelector": selector(rng), "policyTypes": types[rng.below(3)],
                 "ingress": ingress, "egress": egress}
    }))
    .expect("generated policy")
}

pub(crate) fn vip(ns: usize, pod: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, ns as u8, pod as u8)
}

pub(crate) fn ends() -> Vec<Endpoint<'static>> {
    let mut ends = vec![Endpoint::other(Ipv4Addr::new(10, 0, 0, 2))];
    for (n, ns) in NAMESPACES.iter().enumerate() {
        for p in 0..PODS {
            ends.push(Endpoint::pod(ns, ["p0", "p1", "p2", "p3"][p], vip(n, p)));
        }
    }
    ends
}

const CONNS: [Connection; 3] = [
    Connection::Qp,
    Connection::Cm {
        space: PortSpace::Tcp,
        port: 7471,
    },
    Connection::Cm {
        space: PortSpace::Udp,
        port: 7471,
    },
];

/// Every decision and every pod's policies, to compare two indexes.
fn fingerprint(index: &Index) -> Vec<String> {
    let mut out = Vec::new();
    for e in ends() {
        if let Some((ns, name)) = e.pod {
            out.push(format!("{ns}/{name}: {:?}", index.policies_of(ns, name)));
        }
    }
    out.extend(decisions(|a, b, c| index.decide(a, b, c)));
    out
}

fn decisions(decide: impl Fn(&Endpoint, &Endpoint, Connection) -> Verdict) -> Vec<String> {
    let mut out = Vec::new();
    for a in &ends() {
        for b in &ends() {
            for c in CONNS {
                let v = decide(a, b, c);
                out.push(format!("{a:?} {b:?} {c:?}: {v} {v:?}"));
            }
        }
    }
    out
}

/// NetworkPolicy's meaning as a scan of the snapshot, without the index.
mod oracle {
    use super::*;

    fn pod<'s>(snap: &'s Snapshot, e: &Endpoint) -> Option<(&'s Pod, &'s Labels)> {
        let (ns, name) = e.pod?;
        let pod = snap
            .pods
            .iter()
            .find(|p| p.namespace == ns && p.name == name)?;
        let ns = snap.namespaces.iter().find(|n| n.name == ns)?;
        Some((pod, &ns.labels))
    }

    fn peer_matches(policy: &NetworkPolicy, peer: &Peer, snap: &Snapshot, e: &Endpoint) -> bool {
        match peer {
            Peer::IpBlock(b) => b.contains(e.vip),
            Peer::Pods { pods, namespaces } => {
                let Some((pod, ns_labels)) = pod(snap, e) else {
                    return false;
                };
                let ns_ok = match namespaces {
                    None => pod.namespace == policy.namespace,
                    Some(s) => s.matches(ns_labels),
                };
                ns_ok && pods.as_ref().is_none_or(|s| s.matches(&pod.labels))
            }
        }
    }

    fn side(
        snap: &Snapshot,
        me: &Endpoint,
        ingress: bool,
        peer: &Endpoint,
        service: Option<(Protocol, u16)>,
    ) -> Side {
        let Some((ns, name)) = me.pod else {
            return Side::Open;
        };
        let Some((pod, _)) = pod(snap, me) else {
            return Side::Unknown(format!("{ns}/{name}").into());
        };
        let mut policies: Vec<&NetworkPolicy> = snap
            .policies
            .iter()
            .filter(|p| p.namespace == ns && p.pod_selector.matches(&pod.labels))
            .filter(|p| {
                if ingress {
                    p.isolates_ingress
                } else {
                    p.isolates_egress
                }
            })
            .collect();
        if policies.is_empty() {
            return Side::Open;
        }
        policies.sort_by(|a, b| a.name.cmp(&b.name));
        for p in policies {
            for rule in if ingress { &p.ingress } else { &p.egress } {
                let ports = rule.ports.is_empty()
                    || service.is_some_and(|(proto, port)| {
                        rule.ports.iter().any(|r| r.admits(proto, port))
                    });
                let peers = rule.peers.is_empty()
                    || rule.peers.iter().any(|x| peer_matches(p, x, snap, peer));
                if ports && peers {
                    return Side::Rule(rule.name.clone());
                }
            }
        }
        Side::Isolated(format!("{ns}/{name}").into())
    }

    fn directed(
        snap: &Snapshot,
        from: &Endpoint,
        to: &Endpoint,
        service: Option<(Protocol, u16)>,
        reversed: bool,
    ) -> Verdict {
        let egress = side(snap, from, false, to, service);
        let ingress = side(snap, to, true, from, service);
        Verdict {
            allowed: egress.allows() && ingress.allows(),
            reversed,
            egress,
            ingress,
            loopback: false,
        }
    }

    pub fn decide(snap: &Snapshot, a: &Endpoint, b: &Endpoint, c: Connection) -> Verdict {
        if a == b {
            return Verdict {
                allowed: true,
                reversed: false,
                egress: Side::Open,
                ingress: Side::Open,
                loopback: true,
            };
        }
        match c {
            Connection::Cm { space, port } => {
                let proto = match space {
                    PortSpace::Tcp => Protocol::Tcp,
                    PortSpace::Udp => Protocol::Udp,
                };
                directed(snap, a, b, Some((proto, port)), false)
            }
            Connection::Qp | Connection::Ud => {
                let forward = directed(snap, a, b, None, false);
                let back = directed(snap, b, a, None, true);
                match (forward.allowed, back.allowed) {
                    (false, true) => back,
                    _ => forward,
                }
            }
        }
    }
}

/// One random change to both the snapshot and the index: a namespace's
/// labels or a policy (`pod` None), or a pod, added, changed or removed.
pub(crate) fn random_update(
    rng: &mut Rng,
    snap: &mut Snapshot,
    index: &mut Index,
) -> (&'static str, Option<String>) {
    let ns = NAMESPACES[rng.below(3)];
    let same = |n: &str, m: &str, name: &str| (n, m) == (ns, name);
    match rng.below(7) {
        0 => {
            let n = Namespace::new(ns, labels(rng));
            snap.namespaces.retain(|x| x.name != ns);
            snap.namespaces.push(n.clone());
            index.upsert_namespace(n);
            (ns, None)
        }
        1 => {
            snap.namespaces.retain(|x| x.name != ns);
            index.remove_namespace(ns);
            (ns, None)
        }
        2 | 3 => {
            let name = format!("p{}", rng.below(PODS));
            let pod = Pod::new(ns, name.as_str(), labels(rng));
            snap.pods.retain(|x| !same(&x.namespace, &x.name, &name));
            snap.pods.push(pod.clone());
            index.upsert_pod(pod);
            (ns, Some(name))
        }
        4 => {
            let name = format!("p{}", rng.below(PODS));
            snap.pods.retain(|x| !same(&x.namespace, &x.name, &name));
            index.remove_pod(ns, &name);
            (ns, Some(name))
        }
        5 => {
            let name = format!("np{}", rng.below(4));
            let p = policy(rng, ns, &name);
            snap.policies
                .retain(|x| !same(&x.namespace, &x.name, &name));
            snap.policies.push(p.clone());
            index.upsert_policy(p);
            (ns, None)
        }
        _ => {
            let name = format!("np{}", rng.below(4));
            snap.policies
                .retain(|x| !same(&x.namespace, &x.name, &name));
            index.remove_policy(ns, &name);
            (ns, None)
        }
    }
}

#[test]
fn a_change_changes_only_the_verdicts_of_connections_it_touches() {
    let mut rng = Rng(0xc4a2_9e00_0000_0057);
    let mut changed = 0;
    for _ in 0..4 {
        let mut snap = Snapshot::default();
        let mut index = Index::default();
        let mut before = decisions(|a, b, c| index.decide(a, b, c));
        for _ in 0..40 {
            let (ns, pod) = random_update(&mut rng, &mut snap, &mut index);
            let change = match &pod {
                Some(name) => Change::Pod {
                    namespace: ns,
                    name,
                },
                None => Change::Namespace(ns),
            };
            let after = decisions(|a, b, c| index.decide(a, b, c));
            let mut i = 0;
            for a in &ends() {
                for b in &ends() {
                    for _ in CONNS {
                        if before[i] != after[i] {
                            changed += 1;
                            assert!(change.may_change(a, b), "{change:?}: {}", after[i]);
                        }
                        i += 1;
                    }
                }
            }
            before = after;
        }
    }
    assert!(changed > 1000, "{changed}");
}

#[test]
fn incremental_updates_decide_as_a_rebuild_and_a_scan_of_the_snapshot_do() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    // Decisions by a rule and denials by isolation, so that the comparison
    // covers both.
    let (mut by_rule, mut denied) = (0, 0);
    for round in 0..20 {
        let mut snap = Snapshot::default();
        let mut index = Index::default();
        for step in 0..60 {
            random_update(&mut rng, &mut snap, &mut index);
            if step % 10 == 9 {
                let rebuilt = Index::build(snap.clone());
                assert_eq!(
                    index.counts(),
                    rebuilt.counts(),
                    "round {round} step {step}"
                );
                let got = fingerprint(&index);
                assert_eq!(got, fingerprint(&rebuilt), "round {round} step {step}");
                let want = decisions(|a, b, c| oracle::decide(&snap, a, b, c));
                assert_eq!(
                    got[ends().len() - 1..],
                    want[..],
                    "round {round} step {step}"
                );
                for line in &got {
                    by_rule += usize::from(line.contains("allow (netpol:") && line.contains("]"));
                    denied += usize::from(line.contains("deny (netpol:default-deny"));
                }
            }
        }
        // Removing everything leaves nothing behind.
        for p in &snap.pods {
            index.remove_pod(&p.namespace, &p.name);
        }
        for p in &snap.policies {
            index.remove_policy(&p.namespace, &p.name);
        }
        for n in &snap.namespaces {
            index.remove_namespace(&n.name);
        }
        assert!(index.namespaces.is_empty(), "round {round}");
    }
    assert!(by_rule > 500 && denied > 500, "{by_rule} {denied}");
}

#[test]
fn a_pod_lists_the_policies_that_isolate_it_by_name_and_direction() {
    let mut rng = Rng(7);
    let mut snap = Snapshot::default();
    let all = |name: &str, types: Value| {
        NetworkPolicy::from_value(&json!({"metadata": {"namespace": "a", "name": name},
            "spec": {"podSelector": {}, "policyTypes": types}}))
        .unwrap()
    };
    snap.policies.push(all("zz", json!(["Ingress"])));
    snap.policies.push(all("mm", json!(["Egress"])));
    snap.policies.push(all("aa", json!(["Ingress", "Egress"])));
    snap.policies.push(policy(&mut rng, "b", "other-namespace"));
    snap.pods.push(Pod::new("a", "p0", labels(&mut rng)));
    let mut index = Index::build(snap);
    assert_eq!(
        index.policies_of("a", "p0"),
        Some((vec!["aa", "zz"], vec!["aa", "mm"]))
    );
    index.upsert_policy(all("aa", json!(["Egress"])));
    index.upsert_policy(all("bb", json!(["Ingress"])));
    assert_eq!(
        index.policies_of("a", "p0"),
        Some((vec!["bb", "zz"], vec!["aa", "mm"]))
    );
    index.remove_policy("a", "zz");
    index.remove_policy("a", "absent");
    index.remove_policy("nowhere", "zz");
    assert_eq!(
        index.policies_of("a", "p0"),
        Some((vec!["bb"], vec!["aa", "mm"]))
    );
    assert_eq!(index.policies_of("a", "p9"), None);
    assert_eq!(index.counts(), (1, 4));
}

#[test]
fn the_index_can_be_shared_between_threads() {
    fn shared<T: Send + Sync + Clone>() {}
    shared::<Index>();
}
