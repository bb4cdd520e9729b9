use super::*;
use crate::netpol::decide::{Connection, Endpoint, PortSpace};
use serde_json::{json, Value};
use std::net::Ipv4Addr;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const NAMESPACES: [&str; 3] = ["a", "b", "c"];
const PODS: usize = 4;

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
        r.insert("ports".into(), json!([{"port": 7470 + rng.below(3)}]));
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

fn vip(ns: usize, pod: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, ns as u8, pod as u8)
}

/// Every decision and every pod's policies, to compare two indexes.
fn fingerprint(index: &Index) -> Vec<String> {
    let mut out = Vec::new();
    let mut ends = vec![Endpoint::other(Ipv4Addr::new(10, 0, 0, 2))];
    for (n, ns) in NAMESPACES.iter().enumerate() {
        for p in 0..PODS {
            let name = ["p0", "p1", "p2", "p3"][p];
            out.push(format!("{ns}/{name}: {:?}", index.policies_of(ns, name)));
            ends.push(Endpoint::pod(ns, name, vip(n, p)));
        }
    }
    let conns = [
        Connection::Qp,
        Connection::Cm {
            space: PortSpace::Tcp,
            port: 7471,
        },
    ];
    for a in &ends {
        for b in &ends {
            for c in conns {
                out.push(format!("{a:?} {b:?} {c:?}: {}", index.decide(a, b, c)));
            }
        }
    }
    out
}

#[test]
fn incremental_updates_decide_as_a_rebuild_does() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    // Decisions by a rule and denials by isolation, so that the comparison
    // covers both.
    let (mut by_rule, mut denied) = (0, 0);
    for round in 0..20 {
        let mut snap = Snapshot::default();
        let mut index = Index::default();
        for step in 0..60 {
            let ns = NAMESPACES[rng.below(3)];
            match rng.below(7) {
                0 => {
                    let n = Namespace::new(ns, labels(&mut rng));
                    snap.namespaces.retain(|x| x.name != ns);
                    snap.namespaces.push(n.clone());
                    index.upsert_namespace(n);
                }
                1 => {
                    snap.namespaces.retain(|x| x.name != ns);
                    index.remove_namespace(ns);
                }
                2 | 3 => {
                    let name = format!("p{}", rng.below(PODS));
                    let pod = Pod::new(ns, name.as_str(), labels(&mut rng));
                    snap.pods
                        .retain(|x| (x.namespace.as_str(), x.name.as_str()) != (ns, &name));
                    snap.pods.push(pod.clone());
                    index.upsert_pod(pod);
                }
                4 => {
                    let name = format!("p{}", rng.below(PODS));
                    snap.pods
                        .retain(|x| (x.namespace.as_str(), x.name.as_str()) != (ns, &name));
                    index.remove_pod(ns, &name);
                }
                5 => {
                    let name = format!("np{}", rng.below(4));
                    let p = policy(&mut rng, ns, &name);
                    snap.policies
                        .retain(|x| (x.namespace.as_str(), x.name.as_str()) != (ns, &name));
                    snap.policies.push(p.clone());
                    index.upsert_policy(p);
                }
                _ => {
                    let name = format!("np{}", rng.below(4));
                    snap.policies
                        .retain(|x| (x.namespace.as_str(), x.name.as_str()) != (ns, &name));
                    index.remove_policy(ns, &name);
                }
            }
            if step % 10 == 9 {
                let rebuilt = Index::build(snap.clone());
                assert_eq!(
                    index.counts(),
                    rebuilt.counts(),
                    "round {round} step {step}"
                );
                let got = fingerprint(&index);
                assert_eq!(got, fingerprint(&rebuilt), "round {round} step {step}");
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
