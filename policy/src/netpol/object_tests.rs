use super::*;
use crate::netpol::selector::Operator;
use serde_json::json;

fn np(spec: Value) -> NetworkPolicy {
    NetworkPolicy::from_value(&json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"namespace": "team", "name": "p", "uid": "ignored"},
        "spec": spec,
    }))
    .expect("policy")
}

fn np_err(spec: Value) -> NetpolError {
    NetworkPolicy::from_value(
        &json!({"metadata": {"namespace": "team", "name": "p"}, "spec": spec}),
    )
    .expect_err("malformed")
}

#[test]
fn policy_types_default_as_the_api_server_does() {
    // No policyTypes: Ingress, and Egress only when egress rules exist.
    let p = np(json!({"podSelector": {}}));
    assert!(p.isolates_ingress && !p.isolates_egress);
    let p = np(json!({"podSelector": {}, "egress": [{}]}));
    assert!(p.isolates_ingress && p.isolates_egress);
    let p = np(json!({"podSelector": {}, "egress": []}));
    assert!(p.isolates_ingress && !p.isolates_egress);
    let p = np(json!({"podSelector": {}, "policyTypes": [], "egress": [{}]}));
    assert!(p.isolates_ingress && p.isolates_egress);
    // Given: as written, whatever rules there are.
    let p = np(json!({"podSelector": {}, "policyTypes": ["Egress"], "ingress": [{}]}));
    assert!(!p.isolates_ingress && p.isolates_egress);
    assert!(p.ingress.is_empty() && p.egress.is_empty());
}

#[test]
fn a_missing_spec_or_pod_selector_selects_every_pod_as_go_reads_it() {
    let p =
        NetworkPolicy::from_json(r#"{"metadata": {"namespace": "team", "name": "p"}}"#).unwrap();
    assert!(p.pod_selector.is_empty() && p.isolates_ingress && p.ingress.is_empty());
    let p = np(json!({"podSelector": null}));
    assert!(p.pod_selector.is_empty());
}

#[test]
fn rules_peers_and_ports_are_read() {
    let p = np(json!({
        "podSelector": {"matchLabels": {"app": "db"}},
        "ingress": [
            {},
            {"from": []},
            {"from": [
                {"podSelector": {"matchLabels": {"role": "client"}}},
                {"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}},
                {"podSelector": {}, "namespaceSelector": {"matchLabels": {"x": "y"}}},
                {"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.1.0/24"]}}
            ],
             "ports": [
                {"port": 7471},
                {"protocol": "UDP", "port": 4791, "endPort": 4800},
                {"protocol": "SCTP"},
                {"port": "rdma"}
             ]}
        ]
    }));
    assert_eq!(p.ingress.len(), 3);
    assert!(p.ingress[0].peers.is_empty() && p.ingress[0].ports.is_empty());
    assert!(p.ingress[1].peers.is_empty());
    let r = &p.ingress[2];
    assert_eq!(&*r.name, "team/p/ingress[2]");
    assert_eq!(r.peers.len(), 4);
    assert!(matches!(
        &r.peers[0],
        Peer::Pods {
            pods: Some(_),
            namespaces: None
        }
    ));
    match &r.peers[1] {
        Peer::Pods {
            pods: None,
            namespaces: Some(s),
        } => assert_eq!(s.match_expressions[0].operator, Operator::Exists),
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(&r.peers[2], Peer::Pods { pods: Some(s), namespaces: Some(_) } if s.is_empty())
    );
    let Peer::IpBlock(b) = &r.peers[3] else {
        panic!("ipBlock")
    };
    assert!(b.contains("10.0.2.3".parse().unwrap()));
    assert!(!b.contains("10.0.1.3".parse().unwrap()));
    assert!(!b.contains("10.1.0.1".parse().unwrap()));
    assert_eq!(
        r.ports,
        vec![
            PortRule {
                protocol: Protocol::Tcp,
                port: Some(Port::Number(7471)),
                end_port: None
            },
            PortRule {
                protocol: Protocol::Udp,
                port: Some(Port::Number(4791)),
                end_port: Some(4800)
            },
            PortRule {
                protocol: Protocol::Sctp,
                port: None,
                end_port: None
            },
            PortRule {
                protocol: Protocol::Tcp,
                port: Some(Port::Named("rdma".into())),
                end_port: None
            },
        ]
    );
}

#[test]
fn port_rules_admit_their_protocol_and_range_and_never_a_named_port() {
    let rule = |port, end_port| PortRule {
        protocol: Protocol::Tcp,
        port,
        end_port,
    };
    let single = rule(Some(Port::Number(7471)), None);
    assert!(single.admits(Protocol::Tcp, 7471));
    assert!(!single.admits(Protocol::Tcp, 7472));
    assert!(!single.admits(Protocol::Udp, 7471));
    let range = rule(Some(Port::Number(7000)), Some(7010));
    assert!(range.admits(Protocol::Tcp, 7000) && range.admits(Protocol::Tcp, 7010));
    assert!(!range.admits(Protocol::Tcp, 6999) && !range.admits(Protocol::Tcp, 7011));
    assert!(rule(None, None).admits(Protocol::Tcp, 1));
    assert!(!rule(Some(Port::Named("rdma".into())), None).admits(Protocol::Tcp, 7471));
}

#[test]
fn cidrs_are_masked_like_go_and_ipv6_matches_nothing() {
    let c = Cidr::parse("10.0.0.7/24").unwrap();
    assert_eq!(
        c,
        Cidr::V4 {
            network: u32::from(Ipv4Addr::new(10, 0, 0, 0)),
            prefix: 24
        }
    );
    assert!(c.contains(Ipv4Addr::new(10, 0, 0, 200)));
    let all = Cidr::parse("0.0.0.0/0").unwrap();
    assert!(all.contains(Ipv4Addr::new(192, 168, 1, 1)));
    let host = Cidr::parse("10.0.0.1/32").unwrap();
    assert!(
        host.contains(Ipv4Addr::new(10, 0, 0, 1)) && !host.contains(Ipv4Addr::new(10, 0, 0, 2))
    );
    let v6 = Cidr::parse("::/0").unwrap();
    assert_eq!(v6, Cidr::V6);
    assert!(!v6.contains(Ipv4Addr::new(10, 0, 0, 1)));
    for bad in [
        "10.0.0.0",
        "10.0.0.0/33",
        "10.0.0/8",
        "10.0.0.0/+8",
        "x/1",
        "::/129",
    ] {
        assert!(Cidr::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn namespaces_and_pods_read_metadata_only() {
    let ns = Namespace::from_json(
        r#"{"kind":"Namespace","metadata":{"name":"team","labels":{"kubernetes.io/metadata.name":"team","env":"prod"}},"spec":{"finalizers":["kubernetes"]}}"#,
    )
    .unwrap();
    assert_eq!(ns.name, "team");
    assert_eq!(ns.labels.get("env").map(String::as_str), Some("prod"));
    let pod = Pod::from_json(
        r#"{"metadata":{"namespace":"team","name":"db-0","labels":{"app":"db"},
            "annotations":{"k8s.v1.cni.cncf.io/network-status":"[]"}},
            "status":{"podIP":"10.244.0.5"}}"#,
    )
    .unwrap();
    assert_eq!(
        (pod.namespace.as_str(), pod.name.as_str()),
        ("team", "db-0")
    );
    assert_eq!(pod.labels.len(), 1);
    let pod = Pod::from_json(r#"{"metadata":{"namespace":"team","name":"x"}}"#).unwrap();
    assert!(pod.labels.is_empty());
}

/// What masq-netpol (cni/netpol) writes into etcd, from its own golden
/// files: each reads whole, no rule dropped.
#[test]
fn the_mirrors_values_read_whole() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../cni/netpol/testdata/");
    let read = |f: &str| std::fs::read_to_string(format!("{dir}{f}")).expect(f);
    let ns = Namespace::from_json(&read("namespace.json")).unwrap();
    assert_eq!(ns.name, "team");
    assert_eq!(ns.labels.get("team").map(String::as_str), Some("a"));
    let pod = Pod::from_json(&read("pod.json")).unwrap();
    assert_eq!(
        (pod.namespace.as_str(), pod.name.as_str(), pod.labels.len()),
        ("team", "srv", 1)
    );
    let p = NetworkPolicy::from_json(&read("networkpolicy.json")).unwrap();
    assert_eq!(p.key(), "team/allow-app");
    assert!(p.problems.is_empty(), "{:?}", p.problems);
    assert!(p.isolates_ingress && p.isolates_egress);
    assert_eq!(p.pod_selector.match_expressions.len(), 1);
    let rule = &p.ingress[0];
    assert_eq!(rule.peers.len(), 2);
    assert_eq!(
        rule.ports[0],
        PortRule {
            protocol: Protocol::Tcp,
            port: Some(Port::Number(7471)),
            end_port: Some(7480)
        }
    );
    assert_eq!(rule.ports[1].port, Some(Port::Named("rdma-cm".into())));
    assert_eq!(rule.ports[2].protocol, Protocol::Sctp);
    assert!(matches!(
        &p.egress[0].peers[0],
        Peer::Pods { pods: None, namespaces: Some(s) } if s.is_empty()
    ));
}

#[test]
fn malformed_objects_name_the_object_and_the_field() {
    let cases = [
        (
            json!({"podSelector": []}),
            "spec.podSelector",
            "expected an object",
        ),
        (
            json!({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}),
            "spec.podSelector.matchExpressions[0].operator",
            "unknown operator",
        ),
        (
            json!({"policyTypes": ["Both"]}),
            "spec.policyTypes[0]",
            "unknown policy type",
        ),
        (
            json!({"policyTypes": "Ingress"}),
            "spec.policyTypes",
            "expected a list",
        ),
        (json!([]), "spec", "expected an object"),
    ];
    for (spec, path, msg) in cases {
        let e = np_err(spec.clone());
        assert_eq!(
            (e.kind, e.object.as_str(), e.path.as_str()),
            (Kind::NetworkPolicy, "team/p", path),
            "{spec}"
        );
        assert!(e.message.contains(msg), "{spec}: {e}");
    }
    let e = NetworkPolicy::from_json("{").unwrap_err();
    assert!(e.message.starts_with("not JSON"), "{e}");
    let e = NetworkPolicy::from_json(r#"{"metadata": {"name": "p"}}"#).unwrap_err();
    assert_eq!(
        (e.object.as_str(), e.path.as_str()),
        ("?", "metadata.namespace")
    );
    let e =
        NetworkPolicy::from_json(r#"{"metadata": {"namespace": "a", "name": ""}}"#).unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.message.as_str()),
        ("metadata.name", "must not be empty")
    );
    let e = Pod::from_json(r#"{"metadata": {"namespace": "a", "name": "b", "labels": {"x": 1}}}"#)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "Pod a/b: metadata.labels.x: expected a string, found a number"
    );
    let e = Namespace::from_json(r#"{"metadata": {"labels": {}}}"#).unwrap_err();
    assert_eq!(e.to_string(), "Namespace ?: metadata.name: missing");
}

#[test]
fn a_malformed_rule_is_dropped_and_named_while_the_policy_still_isolates() {
    let p = np(json!({
        "podSelector": {},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [
            {"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]},
            {"from": [{"podSelector": {}}]},
            {"from": [{}]},
            {"from": [{"podSelector": {}, "ipBlock": {"cidr": "10.0.0.0/8"}}]},
            {"ports": [{"port": 0}]},
            {"ports": [{"port": 70000}]},
            {"ports": [{"port": 80, "endPort": 79}]},
            {"ports": [{"port": "http", "endPort": 90}]},
            {"ports": [{"protocol": "ICMP"}]},
            {"ports": [{"port": 1.5}]},
            "x"
        ],
        "egress": {"to": []}
    }));
    assert!(p.isolates_ingress && p.isolates_egress);
    assert_eq!(p.ingress.len(), 1);
    assert_eq!(&*p.ingress[0].name, "team/p/ingress[1]");
    assert!(p.egress.is_empty());
    let got: Vec<(&str, &str)> = p
        .problems
        .iter()
        .map(|e| (e.path.as_str(), e.message.as_str()))
        .collect();
    let want = [
        (
            "spec.ingress[0].from[0].ipBlock.cidr",
            "prefix length must be 0..=32",
        ),
        (
            "spec.ingress[2].from[0]",
            "a peer needs podSelector, namespaceSelector or ipBlock",
        ),
        ("spec.ingress[3].from[0]", "ipBlock cannot be combined"),
        (
            "spec.ingress[4].ports[0].port",
            "expected an integer in 1..=65535, found 0",
        ),
        ("spec.ingress[5].ports[0].port", "found 70000"),
        (
            "spec.ingress[6].ports[0].endPort",
            "endPort 79 is below port 80",
        ),
        (
            "spec.ingress[7].ports[0].endPort",
            "endPort needs a numbered port",
        ),
        (
            "spec.ingress[8].ports[0].protocol",
            "unknown protocol \"ICMP\"",
        ),
        ("spec.ingress[9].ports[0].port", "found 1.5"),
        ("spec.ingress[10]", "expected an object, found a string"),
        ("spec.egress", "expected a list, found an object"),
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for ((path, msg), (wpath, wmsg)) in got.iter().zip(want) {
        assert_eq!(*path, wpath);
        assert!(msg.contains(wmsg), "{path}: {msg}");
        assert!(msg.contains("admits nothing"), "{path}: {msg}");
    }
    assert!(p.problems.iter().all(|e| e.object == "team/p"));
}

/// A small deterministic generator (xorshift), as the benches use.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Replaces one value somewhere in `v` with an odd one.
fn mutate(v: &mut Value, rng: &mut Rng) {
    let odd = [
        json!(null),
        json!(-1),
        json!(1e300),
        json!(""),
        json!("x/99"),
        json!([]),
        json!({}),
        json!([{}]),
        json!(true),
        json!(65536),
    ];
    let pick = (rng.next() % 4) as usize;
    match v {
        Value::Object(m) if !m.is_empty() && pick > 0 => {
            let i = (rng.next() % m.len() as u64) as usize;
            let key = m.keys().nth(i).cloned().unwrap_or_default();
            if let Some(child) = m.get_mut(&key) {
                mutate(child, rng);
            }
        }
        Value::Array(a) if !a.is_empty() && pick > 0 => {
            let i = (rng.next() % a.len() as u64) as usize;
            mutate(&mut a[i], rng);
        }
        _ => *v = odd[(rng.next() % odd.len() as u64) as usize].clone(),
    }
}

#[test]
fn random_mutations_of_a_policy_never_panic() {
    let base = json!({
        "metadata": {"namespace": "team", "name": "p", "labels": {"a": "b"}},
        "spec": {
            "podSelector": {"matchLabels": {"app": "db"},
                "matchExpressions": [{"key": "env", "operator": "In", "values": ["a"]}]},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [
                {"podSelector": {"matchLabels": {"r": "c"}}, "namespaceSelector": {}},
                {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}],
                "ports": [{"protocol": "TCP", "port": 1, "endPort": 9}, {"port": "n"}]}],
            "egress": [{"to": [{"namespaceSelector": {"matchExpressions":
                [{"key": "k", "operator": "NotIn", "values": ["v"]}]}}]}]
        }
    });
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut ok, mut refused, mut dropped) = (0, 0, 0);
    for _ in 0..5000 {
        let mut v = base.clone();
        for _ in 0..=(rng.next() % 3) {
            mutate(&mut v, &mut rng);
        }
        match NetworkPolicy::from_value(&v) {
            Ok(p) if p.problems.is_empty() => ok += 1,
            Ok(_) => dropped += 1,
            Err(e) => {
                assert!(!e.to_string().is_empty());
                refused += 1
            }
        }
        let _ = Pod::from_value(&v);
        let _ = Namespace::from_value(&v);
    }
    assert!(
        ok > 0 && refused > 0 && dropped > 0,
        "{ok} {refused} {dropped}"
    );
}
