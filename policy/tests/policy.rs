//! Public-API tests: the example file, the admission predicate, defaults,
//! unions, prefixes, versions, and errors with exact positions.

use masq_policy::{
    Decision, EndpointRef, L4Proto, OnRuleChange, Policy, PolicyErrors, Qos, QosMode,
};
use std::net::Ipv4Addr;
use std::path::PathBuf;

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn endpoints() -> Vec<EndpointRef> {
    vec![
        EndpointRef::new("acme-a", "acme", 100, ip("10.0.0.1")),
        EndpointRef::new("acme-b", "acme", 100, ip("10.0.0.2")),
        EndpointRef::new("acme-c", "acme", 100, ip("10.0.1.5")),
        EndpointRef::new("globex-a", "globex", 200, ip("10.0.0.1")),
        EndpointRef::new("globex-b", "globex", 200, ip("10.0.0.2")),
    ]
}

fn example_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/policy.yaml")
}

fn parse(text: &str) -> Policy {
    match Policy::parse(text, "policy.yaml", &endpoints()) {
        Ok(p) => p,
        Err(e) => panic!("unexpected errors:\n{e}"),
    }
}

fn errors(text: &str) -> PolicyErrors {
    match Policy::parse(text, "policy.yaml", &endpoints()) {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(e) => e,
    }
}

/// Errors as `line:column: path: message` lines (file name stripped).
fn error_lines(text: &str) -> Vec<String> {
    errors(text)
        .iter()
        .map(|e| {
            let s = e.to_string();
            s.strip_prefix("policy.yaml:").unwrap_or(&s).to_string()
        })
        .collect()
}

fn rule(d: &Decision) -> String {
    d.to_string()
}

// ------------------------------------------------------------ example file

#[test]
fn example_file_loads() {
    let p = Policy::load(example_path(), &endpoints()).unwrap();
    assert_eq!(p.on_rule_change(), OnRuleChange::Reset);
    assert_eq!(p.version_hash().len(), 64);
    assert!(p.file().ends_with("examples/policy.yaml"));
    assert_eq!(p.groups_of("acme", 100, ip("10.0.0.2")), ["db"]);
    assert_eq!(p.groups_of("acme", 100, ip("10.0.1.5")), ["batch"]);
    assert_eq!(p.groups_of("globex", 200, ip("10.0.0.1")), ["peers"]);
    // Named members are per VNI: acme-a's vIP in another VNI is not web.
    assert!(p.groups_of("acme", 999, ip("10.0.0.1")).is_empty());

    // web (egress unrestricted) -> db (ingress from web: rdma).
    let v = p.rdma_allowed("acme", 100, ip("10.0.0.1"), ip("10.0.0.2"));
    assert!(v.allowed, "{v}");
    assert_eq!(v.rule(), "acme/web/egress(all)+acme/db/ingress[0]");
    // batch -> db: batch's egress rule and db's ingress from the subnet.
    let v = p.rdma_allowed("acme", 100, ip("10.0.1.5"), ip("10.0.0.2"));
    assert!(v.allowed, "{v}");
    assert_eq!(v.rule(), "acme/batch/egress[0]+acme/db/ingress[2]");
    // batch <-> web: web's ingress has no rdma; batch's egress only to db.
    assert!(
        !p.rdma_allowed("acme", 100, ip("10.0.1.5"), ip("10.0.0.1"))
            .allowed
    );
    // globex peers talk to each other; the same vIPs in acme mean acme's endpoints.
    assert!(
        p.rdma_allowed("globex", 200, ip("10.0.0.1"), ip("10.0.0.2"))
            .allowed
    );
    // An unknown tenant has no groups: ingress denied.
    let v = p.rdma_allowed("initech", 1, ip("10.0.0.1"), ip("10.0.0.2"));
    assert!(!v.allowed);
    assert_eq!(v.rule(), "default-deny");

    // tcp: web's public ports from anyone in the VPC.
    let v = p.flow_allowed(
        "acme",
        100,
        ip("10.0.1.5"),
        ip("10.0.0.1"),
        L4Proto::Tcp,
        8050,
    );
    assert!(!v.allowed, "batch egress is restricted to db: {v}");
    let v = p.flow_allowed(
        "acme",
        100,
        ip("10.0.0.2"),
        ip("10.0.0.1"),
        L4Proto::Tcp,
        443,
    );
    assert!(!v.allowed, "db has egress: []: {v}");
    assert_eq!(v.egress, Decision::DefaultDeny);
    let v = p.flow_allowed(
        "acme",
        100,
        ip("10.0.0.1"),
        ip("10.0.0.2"),
        L4Proto::Tcp,
        18515,
    );
    assert!(v.allowed, "{v}");
    assert_eq!(rule(&v.ingress), "acme/db/ingress[1]");
    let v = p.flow_allowed(
        "acme",
        100,
        ip("10.0.0.1"),
        ip("10.0.0.2"),
        L4Proto::Tcp,
        18516,
    );
    assert!(!v.allowed);
    let v = p.flow_allowed("acme", 100, ip("10.0.1.5"), ip("10.0.0.2"), L4Proto::Udp, 9);
    assert!(
        !v.allowed,
        "batch egress allows only tcp 18515 and rdma: {v}"
    );
}

#[test]
fn load_errors_name_the_file() {
    let e = Policy::load("/nonexistent/policy.yaml", &[]).unwrap_err();
    assert_eq!(e.len(), 1);
    assert!(e.first().location.is_none());
    assert!(
        e.to_string()
            .starts_with("/nonexistent/policy.yaml: cannot read:"),
        "{e}"
    );
}

// ----------------------------------------------------- the A/B predicate

/// Two endpoints a (10.0.0.1) and b (10.0.0.2), each in its own group with
/// the given ingress/egress YAML (`None` omits the key).
fn pair(a_in: Option<&str>, a_eg: Option<&str>, b_in: Option<&str>, b_eg: Option<&str>) -> Policy {
    let mut s = String::from("version: 1\ntenants:\n  acme:\n    securityGroups:\n");
    for (name, member, ing, eg) in [("ga", "acme-a", a_in, a_eg), ("gb", "acme-b", b_in, b_eg)] {
        s.push_str(&format!("      {name}:\n        members: [{member}]\n"));
        if let Some(r) = ing {
            s.push_str(&format!("        ingress: {r}\n"));
        }
        if let Some(r) = eg {
            s.push_str(&format!("        egress: {r}\n"));
        }
    }
    parse(&s)
}

const FROM_GA: &str = "[{from: {group: ga}, protocol: rdma}]";
const FROM_GB: &str = "[{from: {group: gb}, protocol: rdma}]";
const TO_GA: &str = "[{to: {group: ga}, protocol: rdma}]";
const TO_GB: &str = "[{to: {group: gb}, protocol: rdma}]";

fn both_orders(p: &Policy) -> bool {
    let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
    let ab = p.rdma_allowed("acme", 100, a, b);
    let ba = p.rdma_allowed("acme", 100, b, a);
    assert_eq!(
        ab.allowed, ba.allowed,
        "predicate must be symmetric: {ab} / {ba}"
    );
    ab.allowed
}

#[test]
fn a_to_b_direction_alone_admits() {
    // egress(a) allows b, ingress(b) allows a; nothing the other way.
    let p = pair(None, Some(TO_GB), Some(FROM_GA), Some("[]"));
    assert!(both_orders(&p));
    let v = p.rdma_allowed("acme", 100, ip("10.0.0.2"), ip("10.0.0.1"));
    assert_eq!(
        (v.from, v.to),
        (ip("10.0.0.1"), ip("10.0.0.2")),
        "reports the direction that held"
    );
    assert_eq!(v.rule(), "acme/ga/egress[0]+acme/gb/ingress[0]");
}

#[test]
fn b_to_a_direction_alone_admits() {
    let p = pair(Some(FROM_GB), Some("[]"), None, Some(TO_GA));
    assert!(both_orders(&p));
    let v = p.rdma_allowed("acme", 100, ip("10.0.0.1"), ip("10.0.0.2"));
    assert_eq!(v.rule(), "acme/gb/egress[0]+acme/ga/ingress[0]");
    assert_eq!(v.from, ip("10.0.0.2"));
}

#[test]
fn both_directions_prefer_a_to_b() {
    let p = pair(Some(FROM_GB), None, Some(FROM_GA), None);
    let v = p.rdma_allowed("acme", 100, ip("10.0.0.2"), ip("10.0.0.1"));
    assert!(v.allowed);
    assert_eq!((v.from, v.to), (ip("10.0.0.2"), ip("10.0.0.1")));
    assert_eq!(
        v.egress,
        Decision::EgressUnrestricted("acme/gb/egress".into())
    );
}

#[test]
fn half_directions_do_not_combine() {
    // egress(a)->b and ingress(a)<-b hold, but ingress(b) and egress(b) do not.
    let p = pair(Some(FROM_GB), Some(TO_GB), None, Some("[]"));
    assert!(!both_orders(&p));
    // egress(b)->a and ingress(b)<-a hold, but neither side of a.
    let p = pair(None, Some("[]"), Some(FROM_GA), Some(TO_GA));
    assert!(!both_orders(&p));
}

#[test]
fn ingress_alone_needs_egress() {
    // b admits a, but a's egress is [] (deny all) and a admits nothing.
    let p = pair(None, Some("[]"), Some(FROM_GA), Some("[]"));
    assert!(!both_orders(&p));
    let v = p.rdma_allowed("acme", 100, ip("10.0.0.1"), ip("10.0.0.2"));
    assert_eq!(v.egress, Decision::DefaultDeny);
    assert_eq!(rule(&v.ingress), "acme/gb/ingress[0]");
    assert_eq!(
        v.to_string(),
        "deny 10.0.0.1 -> 10.0.0.2: egress default-deny, ingress acme/gb/ingress[0]"
    );
}

#[test]
fn egress_alone_needs_ingress() {
    let p = pair(None, None, None, None);
    assert!(!both_orders(&p), "default ingress deny on both sides");
    let v = p.rdma_allowed("acme", 100, ip("10.0.0.1"), ip("10.0.0.2"));
    assert_eq!(
        v.egress,
        Decision::EgressUnrestricted("acme/ga/egress".into())
    );
    assert_eq!(v.ingress, Decision::DefaultDeny);
}

#[test]
fn protocol_must_match() {
    let p = pair(
        None,
        None,
        Some("[{from: {group: ga}, protocol: tcp}]"),
        None,
    );
    assert!(!both_orders(&p));
    let p = pair(
        None,
        None,
        Some("[{from: {group: ga}, protocol: all}]"),
        None,
    );
    assert!(both_orders(&p));
}

#[test]
fn loopback_is_allowed() {
    let p = pair(None, Some("[]"), None, None);
    let v = p.rdma_allowed("acme", 100, ip("10.0.0.1"), ip("10.0.0.1"));
    assert!(v.allowed);
    assert_eq!(v.rule(), "loopback");
}

// ------------------------------------------------------- defaults, unions

#[test]
fn endpoint_in_no_group() {
    // a is in no group: egress allowed by default, ingress denied.
    let p = parse(
        "version: 1\ntenants:\n  acme:\n    securityGroups:\n      gb:\n        members: [acme-b]\n        ingress: [{from: {cidr: 10.0.0.0/24}, protocol: rdma}]\n",
    );
    let v = p.rdma_allowed("acme", 100, ip("10.0.0.1"), ip("10.0.0.2"));
    assert!(v.allowed, "{v}");
    assert_eq!(v.egress, Decision::DefaultEgressAllow);
    assert_eq!(v.rule(), "default-egress-allow+acme/gb/ingress[0]");
    // Two endpoints in no group: nobody admits anything.
    assert!(
        !p.rdma_allowed("acme", 100, ip("10.0.0.1"), ip("10.0.1.5"))
            .allowed
    );
}

#[test]
fn empty_policy_denies_ingress() {
    for p in [
        Policy::empty(),
        parse("version: 1\n"),
        parse("version: 1\ntenants:\n"),
    ] {
        let v = p.rdma_allowed("acme", 100, ip("10.0.0.1"), ip("10.0.0.2"));
        assert!(!v.allowed);
        assert_eq!(v.egress, Decision::DefaultEgressAllow);
        assert_eq!(p.on_rule_change(), OnRuleChange::Reset);
    }
    assert_eq!(
        Policy::empty().version_hash(),
        parse("version: 1\n").version_hash()
    );
}

#[test]
fn omitted_egress_allows_all_and_empty_denies_all() {
    let p = pair(None, None, Some(FROM_GA), None);
    assert!(p
        .flow_allowed(
            "acme",
            100,
            ip("10.0.0.1"),
            ip("10.9.9.9"),
            L4Proto::Udp,
            53
        )
        .egress
        .allows());
    let p = pair(None, Some("[]"), Some(FROM_GA), None);
    assert!(!p
        .flow_allowed(
            "acme",
            100,
            ip("10.0.0.1"),
            ip("10.9.9.9"),
            L4Proto::Udp,
            53
        )
        .egress
        .allows());
}

#[test]
fn union_of_groups() {
    let p = parse(
        r#"version: 1
tenants:
  acme:
    securityGroups:
      rdma-in:
        members: [acme-b]
        ingress:
          - from: { cidr: 10.0.0.1 }
            protocol: rdma
        egress: []
      tcp-in:
        members: [10.0.0.2/31]         # also covers acme-b
        ingress:
          - from: { cidr: 10.0.1.0/24 }
            protocol: tcp
            ports: [22]
        egress:
          - to: { cidr: 10.0.1.0/24 }
            protocol: udp
      open:
        members: [acme-c]
"#,
    );
    assert_eq!(
        p.groups_of("acme", 100, ip("10.0.0.2")),
        ["rdma-in", "tcp-in"]
    );
    assert_eq!(p.groups_of("acme", 100, ip("10.0.0.3")), ["tcp-in"]);
    let b = ip("10.0.0.2");
    // Ingress: the union of both groups' rules.
    assert!(p.rdma_allowed("acme", 100, ip("10.0.0.1"), b).allowed);
    let v = p.flow_allowed("acme", 100, ip("10.0.1.5"), b, L4Proto::Tcp, 22);
    assert!(v.allowed, "{v}");
    assert_eq!(rule(&v.ingress), "acme/tcp-in/ingress[0]");
    assert!(
        !p.flow_allowed("acme", 100, ip("10.0.1.5"), b, L4Proto::Tcp, 23)
            .allowed
    );
    // Egress: [] in one group plus a rule in the other = that rule.
    let v = p.flow_allowed("acme", 100, b, ip("10.0.1.5"), L4Proto::Udp, 4000);
    assert_eq!(rule(&v.egress), "acme/tcp-in/egress[0]");
    assert!(!v.ingress.allows(), "acme-c has no ingress rules");
    assert_eq!(
        p.flow_allowed("acme", 100, b, ip("10.0.2.1"), L4Proto::Udp, 4000)
            .egress,
        Decision::DefaultDeny
    );
    // A group without an egress key makes the union unrestricted.
    let p2 = parse(
        "version: 1\ntenants:\n  acme:\n    securityGroups:\n      x:\n        members: [acme-b]\n        egress: []\n      y:\n        members: [acme-b]\n",
    );
    assert_eq!(
        p2.flow_allowed("acme", 100, b, ip("1.2.3.4"), L4Proto::Tcp, 1)
            .egress,
        Decision::EgressUnrestricted("acme/y/egress".into())
    );
}

#[test]
fn group_peers_follow_membership() {
    let p = parse(
        r#"version: 1
tenants:
  acme:
    securityGroups:
      db:
        members: [acme-b]
        ingress: [{ from: { group: clients }, protocol: rdma }]
      clients:
        members: [acme-a, 10.0.1.0/24]
"#,
    );
    let b = ip("10.0.0.2");
    assert!(p.rdma_allowed("acme", 100, ip("10.0.0.1"), b).allowed);
    assert!(p.rdma_allowed("acme", 100, ip("10.0.1.77"), b).allowed);
    assert!(!p.rdma_allowed("acme", 100, ip("10.0.2.1"), b).allowed);
    // acme-a's vIP in another VNI is not acme-a (named members are per VNI);
    // the CIDR member applies in every VNI of the tenant.
    assert!(!p.rdma_allowed("acme", 101, ip("10.0.0.1"), b).allowed);
}

// -------------------------------------------------------------- prefixes

#[test]
fn overlapping_prefixes_first_rule_in_file_order() {
    let p = parse(
        r#"version: 1
tenants:
  acme:
    securityGroups:
      db:
        members: [acme-b]
        ingress:
          - from: { cidr: 10.0.0.0/8 }
            protocol: tcp
            ports: [80]
          - from: { cidr: 10.0.0.0/16 }
            protocol: tcp
            ports: ["80-90", 443]
          - from: { cidr: 10.0.1.0/24 }
            protocol: rdma
          - from: { cidr: 10.0.1.5/32 }
            protocol: all
          - from: { cidr: 0.0.0.0/0 }
            protocol: udp
            ports: [53]
"#,
    );
    let b = ip("10.0.0.2");
    let ing = |src: &str, proto, port| {
        let v = p.flow_allowed("acme", 100, ip(src), b, proto, port);
        rule(&v.ingress)
    };
    use L4Proto::{Tcp, Udp};
    assert_eq!(ing("10.0.9.9", Tcp, 80), "acme/db/ingress[0]");
    assert_eq!(ing("10.0.9.9", Tcp, 85), "acme/db/ingress[1]");
    assert_eq!(ing("10.0.9.9", Tcp, 443), "acme/db/ingress[1]");
    assert_eq!(ing("10.1.9.9", Tcp, 443), "default-deny");
    assert_eq!(ing("10.1.9.9", Tcp, 80), "acme/db/ingress[0]");
    assert_eq!(ing("11.0.0.1", Tcp, 80), "default-deny");
    assert_eq!(ing("10.0.1.5", Tcp, 9999), "acme/db/ingress[3]");
    assert_eq!(ing("10.0.1.5", Tcp, 80), "acme/db/ingress[0]");
    assert_eq!(ing("10.0.1.6", Tcp, 9999), "default-deny");
    assert_eq!(ing("192.168.1.1", Udp, 53), "acme/db/ingress[4]");
    assert_eq!(ing("10.0.1.5", Udp, 53), "acme/db/ingress[3]");
    assert_eq!(ing("255.255.255.255", Udp, 53), "acme/db/ingress[4]");
    assert_eq!(ing("0.0.0.0", Udp, 54), "default-deny");
    let rd = |src: &str| rule(&p.rdma_allowed("acme", 100, ip(src), b).ingress);
    assert_eq!(rd("10.0.1.200"), "acme/db/ingress[2]");
    assert_eq!(rd("10.0.1.5"), "acme/db/ingress[2]");
    assert_eq!(rd("10.0.2.1"), "default-deny");
}

#[test]
fn everything_prefix_as_member_and_peer() {
    let p = parse(
        r#"version: 1
tenants:
  acme:
    securityGroups:
      everyone:
        members: [0.0.0.0/0]
        ingress: [{ from: { cidr: 0.0.0.0/0 }, protocol: rdma }]
"#,
    );
    assert_eq!(p.groups_of("acme", 7, ip("255.255.255.255")), ["everyone"]);
    assert!(
        p.rdma_allowed("acme", 7, ip("0.0.0.1"), ip("255.255.255.255"))
            .allowed
    );
    assert!(
        !p.flow_allowed("acme", 7, ip("0.0.0.1"), ip("1.1.1.1"), L4Proto::Tcp, 1)
            .allowed
    );
}

// -------------------------------------------------- versions and onRuleChange

#[test]
fn on_rule_change_values() {
    assert_eq!(parse("version: 1\n").on_rule_change(), OnRuleChange::Reset);
    assert_eq!(
        parse("version: 1\nonRuleChange: reset\n").on_rule_change(),
        OnRuleChange::Reset
    );
    assert_eq!(
        parse("version: 1\nonRuleChange: keep\n").on_rule_change(),
        OnRuleChange::Keep
    );
    assert_eq!(
        error_lines("version: 1\nonRuleChange: drop\n"),
        ["2:15: onRuleChange: unknown value \"drop\": expected reset or keep"]
    );
}

#[test]
fn version_hash_ignores_layout_but_not_rules() {
    let base = std::fs::read_to_string(example_path()).unwrap();
    let h = parse(&base).version_hash().to_string();
    // Comments, blank lines, flow vs block style, key and member order.
    let relaid = base
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| l.split(" #").next().unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n\n");
    assert_eq!(parse(&relaid).version_hash(), h);
    let reordered = "tenants:\n  globex:\n    securityGroups:\n      peers:\n        ingress:\n          - {protocol: rdma, from: {group: peers}}\n        members: [globex-b, globex-a]\n"
        .to_string()
        + "onRuleChange: reset\nversion: 1\n";
    let only_globex = "version: 1\ntenants:\n  globex:\n    securityGroups:\n      peers:\n        members: [globex-a, globex-b]\n        ingress:\n          - from: { group: peers }\n            protocol: rdma\n";
    assert_eq!(
        parse(&reordered).version_hash(),
        parse(only_globex).version_hash()
    );
    // Any rule change changes it; so does onRuleChange.
    assert_ne!(parse(&base.replace("[18515]", "[18516]")).version_hash(), h);
    assert_ne!(
        parse(&base.replace("onRuleChange: reset", "onRuleChange: keep")).version_hash(),
        h
    );
    assert_ne!(
        parse(&base.replace("egress: []", "egress: [{to: {group: web}, protocol: rdma}]"))
            .version_hash(),
        h
    );
}

// ------------------------------------------------------------------ errors

#[test]
fn error_display_format() {
    let text = "version: 1\ntenants:\n  acme:\n    securityGroups:\n      db:\n        ingress:\n          - from: { cidr: 10.0.0.0/33 }\n            protocol: tcp\n";
    let e = errors(text);
    assert_eq!(e.len(), 1);
    assert_eq!(
        e.to_string(),
        "policy.yaml:7:27: tenants.acme.securityGroups.db.ingress[0].from.cidr: invalid CIDR \"10.0.0.0/33\": prefix length must be 0..=32"
    );
    let first = e.first();
    assert_eq!(first.file, "policy.yaml");
    assert_eq!(first.location.map(|l| (l.line, l.column)), Some((7, 27)));
    assert_eq!(
        first.path,
        "tenants.acme.securityGroups.db.ingress[0].from.cidr"
    );
}

#[test]
fn every_kind_of_error_with_its_place() {
    let text = r#"version: 1
onRuleChange: reset
tenant: {}
tenants:
  acme:
    securityGroups:
      db:
        members: [acme-b, acme-x, globex-a, 10.0.0.256, 10.0.1.0/33, 10.0.1.1/24]
        ingress:
          - from: { group: webb }
            protocol: rdma
          - from: { cidr: 10.0.0.0/16 }
            protocol: rdma
            ports: [80]
          - from: { cidr: 10.0.0.0/16 }
            protocol: tcp
            ports: [18515, "20100-20000", 0, http]
          - to: { cidr: 10.0.0.0/16 }
            protocol: tcp
          - from: { cidr: 10.0.0.0/16, group: db }
            protocol: icmp
            protcol: tcp
          - protocol: udp
        egress:
      db:
        members: []
"#;
    let got = error_lines(text);
    let want = [
        r#"3:1: tenant: unknown key "tenant": expected one of version, onRuleChange, tenants (did you mean "tenants"?)"#,
        r#"8:27: tenants.acme.securityGroups.db.members[1]: unknown endpoint "acme-x" (known endpoints of tenant acme: acme-a, acme-b, acme-c)"#,
        r#"8:35: tenants.acme.securityGroups.db.members[2]: endpoint "globex-a" belongs to tenant "globex", not "acme""#,
        r#"8:45: tenants.acme.securityGroups.db.members[3]: "10.0.0.256" is not an IPv4 address (a.b.c.d, each 0..=255)"#,
        r#"8:57: tenants.acme.securityGroups.db.members[4]: invalid CIDR "10.0.1.0/33": prefix length must be 0..=32"#,
        r#"8:70: tenants.acme.securityGroups.db.members[5]: invalid CIDR "10.0.1.1/24": host bits are set (the network is 10.0.1.0/24)"#,
        r#"10:28: tenants.acme.securityGroups.db.ingress[0].from.group: unknown security group "webb" in tenant acme (groups: db)"#,
        r#"14:13: tenants.acme.securityGroups.db.ingress[1].ports: ports are only allowed with protocol tcp or udp (this rule's protocol is rdma)"#,
        r#"17:28: tenants.acme.securityGroups.db.ingress[2].ports[1]: invalid port range "20100-20000": start 20100 is greater than end 20000"#,
        r#"17:43: tenants.acme.securityGroups.db.ingress[2].ports[2]: invalid port "0": ports are 1..=65535"#,
        r#"17:46: tenants.acme.securityGroups.db.ingress[2].ports[3]: invalid port "http": expected a number 1..=65535 or a range "lo-hi""#,
        r#"18:13: tenants.acme.securityGroups.db.ingress[3].to: unknown key "to": ingress rules name their peer with "from""#,
        r#"18:13: tenants.acme.securityGroups.db.ingress[3]: missing key "from" (e.g. from: { group: web } or from: { cidr: 10.0.0.0/16 })"#,
        r#"20:40: tenants.acme.securityGroups.db.ingress[4].from: give either group or cidr, not both"#,
        r#"21:23: tenants.acme.securityGroups.db.ingress[4].protocol: unknown protocol "icmp": expected one of rdma, tcp, udp, all"#,
        r#"22:13: tenants.acme.securityGroups.db.ingress[4].protcol: unknown key "protcol": expected one of from, protocol, ports (did you mean "protocol"?)"#,
        r#"23:13: tenants.acme.securityGroups.db.ingress[5]: missing key "from" (e.g. from: { group: web } or from: { cidr: 10.0.0.0/16 })"#,
        r#"24:9: tenants.acme.securityGroups.db.egress: empty egress: write `egress: []` to deny all egress, or omit the key to allow all"#,
        r#"25:7: tenants.acme.securityGroups.db: duplicate security group name "db" (first at 7:7)"#,
    ];
    assert_eq!(got, want, "\ngot:\n{}", got.join("\n"));
}

#[test]
fn structural_errors() {
    assert_eq!(
        error_lines(""),
        [r#"1:1: missing key "version" (expected version: 1)"#]
    );
    assert_eq!(
        error_lines("version: 2\n"),
        [r#"1:10: version: unsupported version "2": expected 1"#]
    );
    assert_eq!(
        error_lines("- a\n"),
        ["1:1: expected a mapping with keys version, onRuleChange, tenants; found a list"]
    );
    assert_eq!(
        error_lines("version: 1\ntenants: [acme]\n"),
        ["2:10: tenants: expected a mapping of tenant names, found a list"]
    );
    assert_eq!(
        error_lines("version: 1\ntenants:\n  acme:\n    securityGroups:\n      db:\n        members: acme-b\n"),
        ["6:18: tenants.acme.securityGroups.db.members: expected a list of endpoint names, vIPs or CIDRs, found a scalar"]
    );
    assert_eq!(
        error_lines("version: 1\ntenants:\n  acme:\n    securityGroups:\n      db:\n        egress: [{to: {group: db}, protocol: udp, ports: []}]\n"),
        ["6:58: tenants.acme.securityGroups.db.egress[0].ports: an empty port list matches nothing: omit ports to allow all ports"]
    );
    assert_eq!(
        error_lines("version: 1\ntenants:\n  acme/x: {}\n  acme:\n    securityGroups:\n      db:\n        ingress: [{from: {group: db}, protocol: rdma}, 5]\n"),
        [
            r#"3:3: tenants.acme/x: invalid tenant name "acme/x": expected 1..=64 letters, digits, '-', '_' or '.', starting with a letter or digit"#,
            "7:56: tenants.acme.securityGroups.db.ingress[1]: expected a rule (a mapping with keys from, protocol, ports), found a scalar",
        ]
    );
    assert_eq!(
        error_lines("version: 1\nversion: 1\n"),
        [r#"2:1: version: duplicate key "version" (first at 1:1)"#]
    );
}

#[test]
fn yaml_errors_have_places() {
    assert_eq!(
        error_lines("version: 1\ntenants:\n  acme: [\n"),
        ["4:1: YAML syntax error: while parsing a node, did not find expected node content"]
    );
    assert_eq!(
        error_lines("version: 1\nx: &a 1\n"),
        ["2:7: YAML anchors are not supported in policy files"]
    );
    assert_eq!(error_lines("version: 1\n\tx: 1\n").len(), 1);
}

#[test]
fn rules_pointing_to_own_and_other_groups_in_any_order() {
    // A group may be referenced before it is defined, and by itself.
    let p = parse(
        "version: 1\ntenants:\n  acme:\n    securityGroups:\n      a:\n        members: [acme-a]\n        ingress: [{from: {group: b}, protocol: rdma}, {from: {group: a}, protocol: rdma}]\n      b:\n        members: [acme-b]\n",
    );
    assert!(
        p.rdma_allowed("acme", 100, ip("10.0.0.2"), ip("10.0.0.1"))
            .allowed
    );
}

#[test]
fn random_mutations_never_panic() {
    // Cheap robustness check: byte-level edits of a valid file must give
    // Ok or errors with places, never a panic.
    let base = std::fs::read_to_string(example_path()).unwrap();
    let bytes = base.as_bytes();
    let alphabet = b" -:[]{}#\n\t'\"&*!|>%@`,?0123456789./abcz";
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let eps = endpoints();
    for _ in 0..3000 {
        let mut b = bytes.to_vec();
        for _ in 0..(1 + rnd() % 4) {
            let pos = (rnd() as usize) % b.len();
            let c = alphabet[(rnd() as usize) % alphabet.len()];
            match rnd() % 3 {
                0 => b[pos] = c,
                1 => b.insert(pos, c),
                _ => {
                    b.remove(pos);
                }
            }
        }
        let Ok(text) = String::from_utf8(b) else {
            continue;
        };
        if let Err(e) = Policy::parse(&text, "m.yaml", &eps) {
            for err in &e {
                assert!(err.location.is_some(), "{err}");
            }
        }
    }
}

#[test]
fn huge_mappings_are_handled_in_linear_time() {
    // 100k unknown (and duplicate) keys: a quadratic duplicate check would
    // hang here; errors are capped.
    let mut text = String::from("version: 1\n");
    for i in 0..100_000 {
        text.push_str(&format!("k{}: 1\n", i % 50_000));
    }
    let e = errors(&text);
    assert_eq!(e.len(), 200);
    assert_eq!(e.first().location.map(|l| l.line), Some(2));
}

#[test]
fn port_forms() {
    let p = parse(
        "version: 1\ntenants:\n  acme:\n    securityGroups:\n      db:\n        members: [acme-b]\n        ingress:\n          - { from: { cidr: 10.0.0.0/16 }, protocol: tcp, ports: 80 }\n          - { from: { cidr: 10.0.0.0/16 }, protocol: udp, ports: \"1000-1002\" }\n          - { from: { cidr: 10.0.0.0/16 }, protocol: tcp, ports: [\"443\", 8443, \"9000 - 9001\", 65535] }\n",
    );
    let ok = |proto, port| {
        p.flow_allowed("acme", 100, ip("10.0.0.1"), ip("10.0.0.2"), proto, port)
            .allowed
    };
    use L4Proto::{Tcp, Udp};
    assert!(ok(Tcp, 80) && !ok(Tcp, 81) && !ok(Udp, 80));
    assert!(ok(Udp, 1000) && ok(Udp, 1002) && !ok(Udp, 1003) && !ok(Tcp, 1001));
    assert!(ok(Tcp, 443) && ok(Tcp, 8443) && ok(Tcp, 9001) && ok(Tcp, 65535) && !ok(Tcp, 9002));
}

// ------------------------------------------------------------ endpoints that come and go

#[test]
fn rebind_lets_named_members_go_and_come_back_without_changing_the_version() {
    let p = Policy::load(example_path(), &endpoints()).unwrap();
    assert!(
        p.rdma_allowed("acme", 100, ip("10.0.0.1"), ip("10.0.0.2"))
            .allowed
    );
    // acme-b (db) is gone: its vIP is nobody's member now.
    let without_b: Vec<EndpointRef> = endpoints()
        .into_iter()
        .filter(|e| e.name != "acme-b")
        .collect();
    let (gone, dangling) = p.rebind(&without_b).unwrap();
    assert_eq!(dangling, ["acme-b"]);
    assert!(p.names("acme-b") && p.names("globex-a") && !p.names("acme-z"));
    assert_eq!(gone.version_hash(), p.version_hash());
    assert!(gone.groups_of("acme", 100, ip("10.0.0.2")).is_empty());
    assert!(
        !gone
            .rdma_allowed("acme", 100, ip("10.0.0.1"), ip("10.0.0.2"))
            .allowed
    );
    // A strict parse of the same text names the missing endpoint.
    let e = Policy::parse(p.text(), "policy.yaml", &without_b).unwrap_err();
    assert!(e.to_string().contains("unknown endpoint \"acme-b\""), "{e}");
    // Back, at a new vIP: the rules follow the name.
    let mut moved = without_b.clone();
    moved.push(EndpointRef::new("acme-b", "acme", 100, ip("10.0.0.9")));
    let (back, dangling) = gone.rebind(&moved).unwrap();
    assert!(dangling.is_empty());
    assert!(
        back.rdma_allowed("acme", 100, ip("10.0.0.1"), ip("10.0.0.9"))
            .allowed
    );
    assert!(
        !back
            .rdma_allowed("acme", 100, ip("10.0.0.1"), ip("10.0.0.2"))
            .allowed
    );
    // A name now held by another tenant is dangling, not another's member.
    let mut stolen = without_b;
    stolen.push(EndpointRef::new("acme-b", "globex", 200, ip("10.0.0.7")));
    let (_, dangling) = p.rebind(&stolen).unwrap();
    assert_eq!(dangling, ["acme-b"]);
}

// ------------------------------------------------------------------- qos

#[test]
fn qos_of_a_group_wins_over_its_tenant_and_the_lowest_group_wins() {
    let p = parse(
        "version: 1
tenants:
  acme:
    qos: { dscp: 10 }
    securityGroups:
      web:
        members: [acme-a]
        qos: { dscp: 46, mode: max }
      db:
        members: [acme-b]
        qos: { dscp: 34 }
      all:
        members: [10.0.0.0/24]
        qos: { dscp: 40 }
",
    );
    let (q, from) = p.qos_of("acme", 100, ip("10.0.0.1")).unwrap();
    // web (46) and all (40): the lower DSCP.
    assert_eq!(
        (q.dscp, q.mode, from.as_str()),
        (40, QosMode::Set, "acme/all")
    );
    let (q, from) = p.qos_of("acme", 100, ip("10.0.0.2")).unwrap();
    assert_eq!((q.dscp, from.as_str()), (34, "acme/db"));
    // acme-c is in no group with qos: the tenant's.
    let (q, from) = p.qos_of("acme", 100, ip("10.0.1.5")).unwrap();
    assert_eq!((q.dscp, from.as_str()), (10, "acme"));
    assert!(p.qos_of("globex", 200, ip("10.0.0.1")).is_none());
}

#[test]
fn qos_sets_or_bounds_the_dscp_and_keeps_ecn() {
    let set = Qos {
        dscp: 46,
        mode: QosMode::Set,
    };
    assert_eq!(set.traffic_class(0), 46 << 2);
    assert_eq!(set.traffic_class((10 << 2) | 1), (46 << 2) | 1);
    let max = Qos {
        dscp: 26,
        mode: QosMode::Max,
    };
    assert_eq!(max.traffic_class(46 << 2), 26 << 2);
    assert_eq!(max.traffic_class((10 << 2) | 2), (10 << 2) | 2);
    assert_eq!(max.traffic_class(0), 0);
}

#[test]
fn qos_changes_the_version() {
    let base =
        "version: 1\ntenants:\n  acme:\n    securityGroups: { web: { members: [acme-a] } }\n";
    let marked = "version: 1\ntenants:\n  acme:\n    qos: { dscp: 8 }\n    securityGroups: { web: { members: [acme-a] } }\n";
    assert_ne!(parse(base).version_hash(), parse(marked).version_hash());
}

#[test]
fn bad_qos_is_named_by_place() {
    assert_eq!(
        error_lines("version: 1\ntenants:\n  acme:\n    qos: { dscp: 64 }\n"),
        ["4:18: tenants.acme.qos.dscp: invalid DSCP \"64\": expected 0..=63"]
    );
    assert_eq!(
        error_lines(
            "version: 1\ntenants:\n  acme:\n    securityGroups:\n      web: { qos: { dscp: 8, mode: cap } }\n"
        ),
        ["5:36: tenants.acme.securityGroups.web.qos.mode: unknown value \"cap\": expected set or max"]
    );
    assert_eq!(
        error_lines("version: 1\ntenants:\n  acme:\n    qos: { mode: max }\n"),
        ["4:10: tenants.acme.qos: missing key \"dscp\" (0..=63)"]
    );
    assert_eq!(
        error_lines("version: 1\ntenants:\n  acme:\n    qos: 46\n"),
        ["4:10: tenants.acme.qos: expected a mapping with keys dscp, mode; found a scalar"]
    );
}
