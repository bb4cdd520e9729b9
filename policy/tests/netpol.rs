//! NetworkPolicy's meaning for RDMA (policy/src/netpol/): each rule of the
//! semantics, and the examples of the Kubernetes documentation
//! (kubernetes.io/docs/concepts/services-networking/network-policies/ and
//! its "Declare Network Policy" task) as masq decides them.

use masq_policy::netpol::{
    Connection, Endpoint, Index, Labels, Namespace, NetworkPolicy, Pod, PortSpace, Side, Snapshot,
};
use serde_json::{json, Value};
use std::net::Ipv4Addr;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn policy(ns: &str, name: &str, spec: Value) -> NetworkPolicy {
    let p = NetworkPolicy::from_value(&json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"namespace": ns, "name": name}, "spec": spec}))
    .expect("policy");
    assert!(p.problems.is_empty(), "{:?}", p.problems);
    p
}

/// Two namespaces: `team` (labels team=a, env=prod) with pods `db`
/// (app=db, 10.0.0.1), `web` (app=web, 10.0.0.2), `batch` (app=batch,
/// 10.0.0.3); `other` (team=b) with `web` (app=web, 10.0.1.2) and `cli`
/// (app=cli, 10.0.1.3).
fn world(policies: Vec<NetworkPolicy>) -> Index {
    let ns = |name: &str, l: &[(&str, &str)]| {
        let mut l = labels(l);
        l.insert("kubernetes.io/metadata.name".into(), name.into());
        Namespace::new(name, l)
    };
    Index::build(Snapshot {
        namespaces: vec![
            ns("team", &[("team", "a"), ("env", "prod")]),
            ns("other", &[("team", "b")]),
        ],
        pods: vec![
            Pod::new("team", "db", labels(&[("app", "db")])),
            Pod::new("team", "web", labels(&[("app", "web")])),
            Pod::new("team", "batch", labels(&[("app", "batch")])),
            Pod::new("other", "web", labels(&[("app", "web")])),
            Pod::new("other", "cli", labels(&[("app", "cli")])),
        ],
        policies,
    })
}

fn ep(name: &'static str) -> Endpoint<'static> {
    let (ns, pod) = name.split_once('/').expect("ns/pod");
    let vip = match name {
        "team/db" => [10, 0, 0, 1],
        "team/web" => [10, 0, 0, 2],
        "team/batch" => [10, 0, 0, 3],
        "other/web" => [10, 0, 1, 2],
        "other/cli" => [10, 0, 1, 3],
        _ => [10, 9, 9, 9],
    };
    Endpoint::pod(ns, pod, Ipv4Addr::from(vip))
}

/// An endpoint that is no pod's (masqd's config, podman's).
fn other(vip: [u8; 4]) -> Endpoint<'static> {
    Endpoint::other(Ipv4Addr::from(vip))
}

const QP: Connection = Connection::Qp;

fn tcp(port: u16) -> Connection {
    Connection::Cm {
        space: PortSpace::Tcp,
        port,
    }
}

fn udp(port: u16) -> Connection {
    Connection::Cm {
        space: PortSpace::Udp,
        port,
    }
}

/// The verdict's label, `deny:` prefixed when denied.
fn decide(index: &Index, a: Endpoint, b: Endpoint, c: Connection) -> String {
    let v = index.decide(&a, &b, c);
    assert_eq!(v.allowed, v.egress.allows() && v.ingress.allows(), "{v:?}");
    if v.allowed {
        v.label()
    } else {
        format!("deny:{}", v.label())
    }
}

#[test]
fn without_policies_every_pod_is_open() {
    let idx = world(vec![]);
    for c in [QP, Connection::Ud, tcp(7471), udp(1)] {
        assert_eq!(
            decide(&idx, ep("team/web"), ep("other/cli"), c),
            "netpol:none"
        );
        assert_eq!(
            decide(&idx, other([1, 2, 3, 4]), ep("team/db"), c),
            "netpol:none"
        );
    }
}

#[test]
fn default_deny_all_ingress_isolates_every_pod_of_its_namespace_only() {
    // Docs: "Default deny all ingress traffic".
    let idx = world(vec![policy(
        "team",
        "default-deny-ingress",
        json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
    )]);
    assert_eq!(
        decide(&idx, ep("other/cli"), ep("team/db"), tcp(7471)),
        "deny:netpol:default-deny team/db ingress"
    );
    // Egress from the isolated namespace is not restricted.
    assert_eq!(
        decide(&idx, ep("team/db"), ep("other/cli"), tcp(7471)),
        "netpol:none"
    );
    for c in [QP, Connection::Ud, tcp(7471)] {
        // Between two pods of the namespace neither direction holds.
        assert_eq!(
            decide(&idx, ep("team/web"), ep("team/db"), c),
            "deny:netpol:default-deny team/db ingress"
        );
    }
    // A QP (and a UD address handle) is symmetric: db may reach cli, so a
    // QP between them is allowed from either end, as the reverse of an
    // allowed connection, like a TCP connection db opened to cli.
    for c in [QP, Connection::Ud] {
        let v = idx.decide(&ep("other/cli"), &ep("team/db"), c);
        assert!(
            v.allowed && v.reversed && v.label() == "netpol:none",
            "{v:?}"
        );
        let v = idx.decide(&ep("team/db"), &ep("other/cli"), c);
        assert!(v.allowed && !v.reversed, "{v:?}");
    }
}

#[test]
fn a_qp_between_two_isolated_pods_is_denied_and_names_the_first_refusal() {
    let idx = world(vec![policy(
        "team",
        "deny",
        json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
    )]);
    assert_eq!(
        decide(&idx, ep("team/web"), ep("team/db"), QP),
        "deny:netpol:default-deny team/web egress"
    );
    let v = idx.decide(&ep("team/web"), &ep("team/db"), QP);
    assert!(!v.reversed, "a denial reports a->b");
    // Default deny all egress blocks even an open peer.
    assert_eq!(
        decide(&idx, ep("team/web"), ep("other/web"), tcp(1)),
        "deny:netpol:default-deny team/web egress"
    );
}

#[test]
fn allow_all_ingress_and_the_empty_rule_admit_everyone_even_non_pods() {
    // Docs: "Allow all ingress traffic": ingress: [{}].
    for rule in [json!({}), json!({"from": []}), json!({"from": null})] {
        let idx = world(vec![policy(
            "team",
            "allow-all",
            json!({"podSelector": {}, "ingress": [rule]}),
        )]);
        assert_eq!(
            decide(&idx, ep("other/cli"), ep("team/db"), tcp(9)),
            "netpol:team/allow-all/ingress[0]"
        );
        assert_eq!(
            decide(&idx, other([192, 168, 0, 1]), ep("team/db"), QP),
            "netpol:team/allow-all/ingress[0]"
        );
    }
    // `ingress: []` (or none) admits nothing.
    let idx = world(vec![policy(
        "team",
        "none",
        json!({"podSelector": {}, "ingress": []}),
    )]);
    assert!(decide(&idx, ep("team/web"), ep("team/db"), QP).starts_with("deny:"));
}

#[test]
fn allow_same_namespace_admits_its_pods_but_not_another_namespace_nor_non_pods() {
    let idx = world(vec![policy(
        "team",
        "same-ns",
        json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}),
    )]);
    assert_eq!(
        decide(&idx, ep("team/web"), ep("team/db"), tcp(1)),
        "netpol:team/same-ns/ingress[0]"
    );
    assert!(decide(&idx, ep("other/web"), ep("team/db"), tcp(1)).starts_with("deny:"));
    assert!(decide(&idx, other([10, 0, 0, 9]), ep("team/db"), tcp(1)).starts_with("deny:"));
}

#[test]
fn allow_from_a_namespace_by_label() {
    let idx = world(vec![policy(
        "team",
        "from-b",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}]}]}),
    )]);
    assert_eq!(
        decide(&idx, ep("other/web"), ep("team/db"), tcp(1)),
        "netpol:team/from-b/ingress[0]"
    );
    assert_eq!(
        decide(&idx, ep("other/cli"), ep("team/db"), tcp(1)),
        "netpol:team/from-b/ingress[0]"
    );
    // The policy's own namespace does not carry the label.
    assert!(decide(&idx, ep("team/web"), ep("team/db"), tcp(1)).starts_with("deny:"));
    // Pods the policy does not select stay open.
    assert_eq!(
        decide(&idx, ep("team/db"), ep("team/web"), tcp(1)),
        "netpol:none"
    );
    // A namespace's labels change: it takes effect at once.
    let mut idx = idx;
    idx.upsert_namespace(Namespace::new("other", labels(&[("team", "c")])));
    assert!(decide(&idx, ep("other/web"), ep("team/db"), tcp(1)).starts_with("deny:"));
}

#[test]
fn pod_and_namespace_selector_in_one_peer_is_and_in_two_peers_is_or() {
    let and = world(vec![policy(
        "team",
        "and",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}},
                                      "podSelector": {"matchLabels": {"app": "web"}}}]}]}),
    )]);
    assert!(!decide(&and, ep("other/web"), ep("team/db"), tcp(1)).starts_with("deny:"));
    assert!(decide(&and, ep("other/cli"), ep("team/db"), tcp(1)).starts_with("deny:"));
    assert!(decide(&and, ep("team/web"), ep("team/db"), tcp(1)).starts_with("deny:"));

    let or = world(vec![policy(
        "team",
        "or",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}},
                                     {"podSelector": {"matchLabels": {"app": "web"}}}]}]}),
    )]);
    assert!(!decide(&or, ep("other/web"), ep("team/db"), tcp(1)).starts_with("deny:"));
    assert!(!decide(&or, ep("other/cli"), ep("team/db"), tcp(1)).starts_with("deny:"));
    // A podSelector alone means the policy's own namespace.
    assert!(!decide(&or, ep("team/web"), ep("team/db"), tcp(1)).starts_with("deny:"));
    assert!(decide(&or, ep("team/batch"), ep("team/db"), tcp(1)).starts_with("deny:"));
}

#[test]
fn match_expressions_select_peers() {
    let idx = world(vec![policy(
        "team",
        "expr",
        json!({"podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]},
               "ingress": [{"from": [{"namespaceSelector": {},
                   "podSelector": {"matchExpressions": [
                       {"key": "app", "operator": "NotIn", "values": ["cli", "batch"]},
                       {"key": "app", "operator": "Exists"}]}}]}]}),
    )]);
    assert!(!decide(&idx, ep("other/web"), ep("team/db"), tcp(1)).starts_with("deny:"));
    assert!(!decide(&idx, ep("team/web"), ep("team/db"), tcp(1)).starts_with("deny:"));
    assert!(decide(&idx, ep("other/cli"), ep("team/db"), tcp(1)).starts_with("deny:"));
    assert!(decide(&idx, ep("team/batch"), ep("team/db"), tcp(1)).starts_with("deny:"));
}

#[test]
fn ip_block_with_except_matches_the_masq_vip_of_pods_and_non_pods() {
    let idx = world(vec![policy(
        "team",
        "cidr",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [
                   {"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.1.0/24"]}},
                   {"ipBlock": {"cidr": "::/0"}}]}]}),
    )]);
    assert_eq!(
        decide(&idx, ep("team/web"), ep("team/db"), tcp(1)),
        "netpol:team/cidr/ingress[0]"
    );
    assert!(decide(&idx, ep("other/web"), ep("team/db"), tcp(1)).starts_with("deny:"));
    assert!(!decide(&idx, other([10, 0, 7, 7]), ep("team/db"), tcp(1)).starts_with("deny:"));
    assert!(decide(&idx, other([10, 0, 1, 7]), ep("team/db"), tcp(1)).starts_with("deny:"));
    // IPv6 blocks match no masq vIP.
    assert!(decide(&idx, other([172, 16, 0, 1]), ep("team/db"), tcp(1)).starts_with("deny:"));
}

#[test]
fn non_pod_endpoints_are_never_isolated_nor_selected_by_namespace_selectors() {
    let idx = world(vec![policy(
        "team",
        "all-ns",
        json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
               "ingress": [{"from": [{"namespaceSelector": {}}]}],
               "egress": [{"to": [{"namespaceSelector": {}}]}]}),
    )]);
    assert!(!decide(&idx, ep("other/cli"), ep("team/db"), QP).starts_with("deny:"));
    assert_eq!(
        decide(&idx, other([10, 0, 0, 9]), ep("team/db"), tcp(1)),
        "deny:netpol:default-deny team/db ingress"
    );
    assert_eq!(
        decide(&idx, ep("team/db"), other([10, 0, 0, 9]), tcp(1)),
        "deny:netpol:default-deny team/db egress"
    );
    // Between two non-pods NetworkPolicy has nothing to say.
    assert_eq!(
        decide(&idx, other([10, 0, 0, 8]), other([10, 0, 0, 9]), QP),
        "netpol:none"
    );
}

#[test]
fn an_egress_only_policy_restricts_egress_and_leaves_ingress_open() {
    let idx = world(vec![policy(
        "team",
        "egress-to-db",
        json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"],
               "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "db"}}}],
                           "ports": [{"protocol": "TCP", "port": 7471}]}]}),
    )]);
    assert_eq!(
        decide(&idx, ep("team/web"), ep("team/db"), tcp(7471)),
        "netpol:team/egress-to-db/egress[0]"
    );
    assert!(decide(&idx, ep("team/web"), ep("team/batch"), tcp(7471)).starts_with("deny:"));
    assert!(decide(&idx, ep("team/web"), ep("team/db"), tcp(7472)).starts_with("deny:"));
    // Ingress to web is open: anyone may connect to it.
    assert_eq!(
        decide(&idx, ep("other/cli"), ep("team/web"), tcp(1)),
        "netpol:none"
    );
    // A QP from web to db: the egress rule names a port, so it does not
    // admit port-less RDMA; db -> web is open, so the QP is allowed that way.
    let v = idx.decide(&ep("team/web"), &ep("team/db"), QP);
    assert!(v.allowed && v.reversed, "{v:?}");
    // To a pod that is isolated for ingress too, it is denied.
    let mut idx = idx;
    idx.upsert_policy(policy(
        "team",
        "db-in",
        json!({"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"from": [{"podSelector": {}}]}]}),
    ));
    assert_eq!(
        decide(&idx, ep("team/web"), ep("team/db"), tcp(7471)),
        "netpol:team/egress-to-db/egress[0]+team/db-in/ingress[0]"
    );
    // The QP still holds as db -> web (db's egress and web's ingress are
    // open); once web's ingress is isolated too, it does not.
    assert_eq!(
        decide(&idx, ep("team/web"), ep("team/db"), QP),
        "netpol:none"
    );
    idx.upsert_policy(policy(
        "team",
        "web-in",
        json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}),
    ));
    assert_eq!(
        decide(&idx, ep("team/web"), ep("team/db"), QP),
        "deny:netpol:default-deny team/web egress"
    );
}

#[test]
fn rdma_cm_ports_follow_tcp_and_udp_rules_with_end_port() {
    // Docs: ports with endPort; the RDMA CM's TCP port space is TCP's.
    let idx = world(vec![policy(
        "team",
        "ports",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [{"namespaceSelector": {}}],
                            "ports": [{"protocol": "TCP", "port": 32000, "endPort": 32768},
                                      {"port": 7471},
                                      {"protocol": "UDP", "port": 4791},
                                      {"protocol": "SCTP", "port": 7472},
                                      {"protocol": "TCP", "port": "rdma"}]}]}),
    )]);
    let cli = || ep("other/cli");
    let db = || ep("team/db");
    for port in [32000, 32500, 32768, 7471] {
        assert_eq!(
            decide(&idx, cli(), db(), tcp(port)),
            "netpol:team/ports/ingress[0]",
            "{port}"
        );
    }
    for port in [31999, 32769, 4791, 7472] {
        assert!(
            decide(&idx, cli(), db(), tcp(port)).starts_with("deny:"),
            "{port}"
        );
    }
    assert!(!decide(&idx, cli(), db(), udp(4791)).starts_with("deny:"));
    assert!(decide(&idx, cli(), db(), udp(7471)).starts_with("deny:"));
    // SCTP and named ports never match the RDMA CM.
    assert!(decide(&idx, cli(), db(), udp(7472)).starts_with("deny:"));
    // A rule with ports admits no verbs QP or UD address handle: cli -> db
    // fails, and the QP holds only as db -> cli (open there).
    for c in [QP, Connection::Ud] {
        let v = idx.decide(&cli(), &db(), c);
        assert!(v.allowed && v.reversed, "{v:?}");
    }
    // The CM is directed like TCP: db's listener admits cli, but the
    // reverse connect (to cli's port) is decided by cli's ingress, open.
    assert_eq!(decide(&idx, db(), cli(), tcp(7471)), "netpol:none");
}

#[test]
fn a_protocol_only_port_rule_admits_every_port_of_it_but_no_qp() {
    let idx = world(vec![policy(
        "team",
        "udp-any",
        json!({"podSelector": {}, "ingress": [{"ports": [{"protocol": "UDP"}]}]}),
    )]);
    assert!(!decide(&idx, ep("other/cli"), ep("team/db"), udp(1)).starts_with("deny:"));
    assert!(decide(&idx, ep("other/cli"), ep("team/db"), tcp(1)).starts_with("deny:"));
    // Port-less traffic cli -> db is not admitted (the QP holds only as
    // db -> cli, open there); between two pods of team it is denied.
    assert!(idx.decide(&ep("other/cli"), &ep("team/db"), QP).reversed);
    assert!(decide(&idx, ep("team/web"), ep("team/db"), QP).starts_with("deny:"));
}

#[test]
fn a_qp_is_allowed_when_either_direction_is_and_is_the_same_from_both_ends() {
    // web may reach db (db's ingress), db's egress is isolated to nothing.
    let idx = world(vec![
        policy(
            "team",
            "db",
            json!({"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress", "Egress"],
                   "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}]}),
        ),
        policy(
            "team",
            "web",
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress", "Egress"],
                   "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "db"}}}]}]}),
        ),
    ]);
    let want = "netpol:team/web/egress[0]+team/db/ingress[0]";
    for c in [QP, Connection::Ud] {
        let ab = idx.decide(&ep("team/web"), &ep("team/db"), c);
        let ba = idx.decide(&ep("team/db"), &ep("team/web"), c);
        assert!(ab.allowed && !ab.reversed && ab.label() == want, "{ab:?}");
        assert!(ba.allowed && ba.reversed && ba.label() == want, "{ba:?}");
    }
    // The CM is directed: web -> db connects, db -> web does not.
    assert_eq!(decide(&idx, ep("team/web"), ep("team/db"), tcp(1)), want);
    assert_eq!(
        decide(&idx, ep("team/db"), ep("team/web"), tcp(1)),
        "deny:netpol:default-deny team/db egress"
    );
}

#[test]
fn the_first_admitting_rule_by_policy_name_then_rule_order_is_named() {
    let rule = json!({"from": [{"podSelector": {}}]});
    let idx = world(vec![
        policy(
            "team",
            "b",
            json!({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "1.0.0.0/8"}}]}, rule]}),
        ),
        policy("team", "c", json!({"podSelector": {}, "ingress": [rule]})),
        policy(
            "team",
            "a",
            json!({"podSelector": {"matchLabels": {"app": "none"}}, "ingress": [{}]}),
        ),
    ]);
    assert_eq!(
        decide(&idx, ep("team/web"), ep("team/db"), QP),
        "netpol:team/b/ingress[1]"
    );
}

#[test]
fn an_endpoint_to_itself_is_always_allowed() {
    let idx = world(vec![policy(
        "team",
        "deny",
        json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
    )]);
    for c in [QP, tcp(1)] {
        assert_eq!(
            decide(&idx, ep("team/db"), ep("team/db"), c),
            "netpol:loopback"
        );
    }
}

#[test]
fn a_pod_or_namespace_not_mirrored_yet_is_denied_as_unknown() {
    let mut idx = world(vec![]);
    let ghost = Endpoint::pod("team", "ghost", Ipv4Addr::new(10, 0, 0, 50));
    assert_eq!(
        decide(&idx, ghost, ep("team/db"), QP),
        "deny:netpol:unknown team/ghost"
    );
    assert_eq!(
        decide(&idx, ep("team/db"), ghost, tcp(1)),
        "deny:netpol:unknown team/ghost"
    );
    let v = idx.decide(&ep("team/db"), &ghost, QP);
    assert_eq!(v.ingress, Side::Unknown("team/ghost".into()));
    idx.upsert_pod(Pod::new("team", "ghost", Labels::new()));
    assert_eq!(decide(&idx, ghost, ep("team/db"), QP), "netpol:none");
    // Its namespace's labels are needed too (namespaceSelector).
    idx.upsert_pod(Pod::new("new", "p", Labels::new()));
    let p = Endpoint::pod("new", "p", Ipv4Addr::new(10, 0, 2, 1));
    assert_eq!(
        decide(&idx, p, ep("team/db"), QP),
        "deny:netpol:unknown new/p"
    );
    idx.upsert_namespace(Namespace::new("new", Labels::new()));
    assert_eq!(decide(&idx, p, ep("team/db"), QP), "netpol:none");
}

#[test]
fn label_and_policy_changes_take_effect_on_the_next_decision() {
    let mut idx = world(vec![policy(
        "team",
        "db",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}]}),
    )]);
    assert!(decide(&idx, ep("team/web"), ep("team/db"), tcp(1)).starts_with("deny:"));
    // web gains the label the rule wants.
    idx.upsert_pod(Pod::new(
        "team",
        "web",
        labels(&[("app", "web"), ("role", "client")]),
    ));
    assert_eq!(
        decide(&idx, ep("team/web"), ep("team/db"), tcp(1)),
        "netpol:team/db/ingress[0]"
    );
    // db loses the label the policy selects: it is open again.
    idx.upsert_pod(Pod::new("team", "db", labels(&[("app", "db2")])));
    assert_eq!(
        decide(&idx, ep("team/batch"), ep("team/db"), tcp(1)),
        "netpol:none"
    );
    idx.upsert_pod(Pod::new("team", "db", labels(&[("app", "db")])));
    assert!(decide(&idx, ep("team/batch"), ep("team/db"), tcp(1)).starts_with("deny:"));
    // Deleting the policy admits everyone.
    idx.remove_policy("team", "db");
    assert_eq!(
        decide(&idx, ep("team/batch"), ep("team/db"), tcp(1)),
        "netpol:none"
    );
}

#[test]
fn a_policy_whose_only_rule_is_malformed_still_isolates() {
    let p = NetworkPolicy::from_value(&json!({
        "metadata": {"namespace": "team", "name": "bad"},
        "spec": {"podSelector": {"matchLabels": {"app": "db"}},
                 "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/99"}}]}]}}))
    .expect("the policy is kept");
    assert_eq!(
        p.problems[0].to_string(),
        "NetworkPolicy team/bad: spec.ingress[0].from[0].ipBlock.cidr: invalid CIDR \"10.0.0.0/99\": \
         prefix length must be 0..=32 (rule ignored: it admits nothing)"
    );
    let idx = world(vec![p]);
    assert_eq!(
        decide(&idx, ep("team/web"), ep("team/db"), tcp(1)),
        "deny:netpol:default-deny team/db ingress"
    );
}
