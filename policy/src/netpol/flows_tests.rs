use super::*;
use crate::netpol::decide::{Connection, PortSpace};
use crate::netpol::index::tests::{ends, random_update, Rng};
use crate::netpol::index::Snapshot;
use crate::netpol::object::{Namespace, NetworkPolicy, Pod};
use crate::netpol::selector::Labels;
use serde_json::json;

/// Whether a flow to or from `peer` on `protocol`/`port` passes `flows`,
/// read as the ruleset reads it: an accept rule's addresses, then its
/// ports; the direction's default deny after the last.
fn passes(flows: &Flows, peer: Ipv4Addr, protocol: Protocol, port: u16) -> bool {
    let rules = match flows {
        Flows::Open => return true,
        Flows::Unknown(_) => return false,
        Flows::Isolated { rules, .. } => rules,
    };
    rules.iter().any(|r| {
        let peer_ok = r.peers.as_ref().is_none_or(|p| {
            let inside = |(net, len): (Ipv4Addr, u8)| {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                u32::from(peer) & mask == u32::from(net) & mask
            };
            p.vips.contains(&peer)
                || p.blocks
                    .iter()
                    .any(|b| inside(b.net) && !b.except.iter().any(|&e| inside(e)))
        });
        let port_ok = r.ports.as_ref().is_none_or(|ports| {
            ports.iter().any(|p| {
                p.protocol == protocol && p.range.is_none_or(|(lo, hi)| (lo..=hi).contains(&port))
            })
        });
        peer_ok && port_ok
    })
}

/// For random mirrors, a tcp or udp flow from a to b's port passes a's
/// egress and b's ingress exactly when the RDMA CM connect from a to b on
/// that port space and port is allowed: the pod's TCP and its RDMA agree.
#[test]
fn a_flow_passes_the_rules_exactly_when_the_cm_connect_is_allowed() {
    let mut rng = Rng(0x0f10_5a9e_e000_0057);
    let (mut allowed, mut denied) = (0, 0);
    for round in 0..12 {
        let mut snap = Snapshot::default();
        let mut index = Index::default();
        for step in 0..50 {
            random_update(&mut rng, &mut snap, &mut index);
            if step % 10 != 9 {
                continue;
            }
            // ends() puts a pod and an endpoint that is none at 10.0.0.2;
            // a VNI holds one endpoint per vIP, so the pod is left out.
            let all: Vec<Endpoint> = ends()
                .into_iter()
                .filter(|e| e.pod.is_none() || e.vip != Ipv4Addr::new(10, 0, 0, 2))
                .collect();
            let flows: Vec<PodFlows> = all.iter().map(|e| index.flows(e, &all)).collect();
            for (i, a) in all.iter().enumerate() {
                for (j, b) in all.iter().enumerate() {
                    if i == j {
                        continue;
                    }
                    for (space, protocol) in [
                        (PortSpace::Tcp, Protocol::Tcp),
                        (PortSpace::Udp, Protocol::Udp),
                    ] {
                        for port in [7400, 7470, 7471, 7472, 9] {
                            let want = index.decide(a, b, Connection::Cm { space, port });
                            let got = passes(&flows[i].egress, b.vip, protocol, port)
                                && passes(&flows[j].ingress, a.vip, protocol, port);
                            assert_eq!(
                                got, want.allowed,
                                "round {round} step {step}: {a:?} -> {b:?} {protocol:?} {port}: {want}\n{:?}\n{:?}",
                                flows[i].egress, flows[j].ingress
                            );
                            if got {
                                allowed += 1;
                            } else {
                                denied += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(allowed > 2000 && denied > 2000, "{allowed} {denied}");
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().expect("test address")
}

/// The shapes the random test rarely makes: `except`, named and SCTP
/// ports, a selector matching nothing, IPv6, and an unmirrored pod.
#[test]
fn each_kind_of_peer_and_port_becomes_its_set() {
    let policy = NetworkPolicy::from_value(&json!({
        "metadata": {"namespace": "team", "name": "db-in"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"app": "web"}}},
                          {"ipBlock": {"cidr": "10.0.8.0/24", "except": ["10.0.8.7/32"]}},
                          {"ipBlock": {"cidr": "fd00::/64"}}],
                 "ports": [{"port": 5432}, {"protocol": "UDP", "port": 7000, "endPort": 7010},
                           {"protocol": "SCTP", "port": 9}]},
                {"ports": [{"port": "postgres"}]},
                {"from": [{"podSelector": {"matchLabels": {"app": "none"}}}]}
            ]
        }
    }))
    .expect("policy");
    let index = Index::build(Snapshot {
        namespaces: vec![Namespace::new("team", labels(&[]))],
        pods: vec![
            Pod::new("team", "db", labels(&[("app", "db")])),
            Pod::new("team", "web", labels(&[("app", "web")])),
            Pod::new("team", "web2", labels(&[("app", "web")])),
        ],
        policies: vec![policy],
    });
    let others = [
        Endpoint::pod("team", "db", ip("10.0.0.1")),
        Endpoint::pod("team", "web2", ip("10.0.0.9")),
        Endpoint::pod("team", "web", ip("10.0.0.2")),
        Endpoint::pod("team", "gone", ip("10.0.0.3")),
        Endpoint::other(ip("10.0.0.4")),
    ];
    let db = index.flows(&others[0], &others);
    assert_eq!(db.egress, Flows::Open);
    let Flows::Isolated { pod, rules } = &db.ingress else {
        panic!("db is isolated: {db:?}");
    };
    assert_eq!(&**pod, "team/db");
    assert_eq!(rules.len(), 3);
    assert_eq!(
        rules[0],
        FlowRule {
            name: "team/db-in/ingress[0]".into(),
            peers: Some(Peers {
                vips: vec![ip("10.0.0.2"), ip("10.0.0.9")],
                blocks: vec![Block {
                    net: (ip("10.0.8.0"), 24),
                    except: vec![(ip("10.0.8.7"), 32)],
                }],
            }),
            ports: Some(vec![
                FlowPort {
                    protocol: Protocol::Tcp,
                    range: Some((5432, 5432)),
                },
                FlowPort {
                    protocol: Protocol::Udp,
                    range: Some((7000, 7010)),
                },
            ]),
        }
    );
    assert_eq!(rules[0].admits_nothing(), None);
    assert_eq!(
        rules[1].admits_nothing(),
        Some("only named or SCTP ports, which match no tcp/udp port")
    );
    assert_eq!(
        rules[2].admits_nothing(),
        Some("selects no endpoint of this VNI now")
    );
    // An endpoint that is no pod is open; an unmirrored pod admits nothing.
    let other = index.flows(&others[4], &others);
    assert_eq!((other.ingress, other.egress), (Flows::Open, Flows::Open));
    let gone = index.flows(&others[3], &others);
    assert_eq!(gone.ingress, Flows::Unknown("team/gone".into()));
    assert_eq!(gone.egress, Flows::Unknown("team/gone".into()));
}
