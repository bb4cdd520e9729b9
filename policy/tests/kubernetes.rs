//! A tenant's `kubernetes.namespaces`: the namespaces whose pods may attach
//! to it, each refusal naming the tenant and the namespace, and errors in
//! the key naming its field; its `kubernetes.networkPolicy`: whether the
//! cluster's NetworkPolicy decides its connections too.

use masq_policy::Policy;

fn parse(text: &str) -> Result<Policy, String> {
    Policy::parse(text, "policy.yaml", &[]).map_err(|e| e.to_string())
}

const POLICY: &str = "version: 1
tenants:
  acme:
    kubernetes:
      namespaces: [team, team-ci]
  globex:
    kubernetes: {}
  initech:
    securityGroups: {}
";

#[test]
fn a_tenant_admits_only_the_namespaces_it_lists() {
    let p = parse(POLICY).expect("policy");
    assert_eq!(p.admits_namespace("acme", "team"), Ok(()));
    assert_eq!(p.admits_namespace("acme", "team-ci"), Ok(()));
    assert_eq!(
        p.admits_namespace("acme", "mallory"),
        Err(
            "tenant acme admits Kubernetes namespaces team, team-ci, not mallory \
             (tenants.acme.kubernetes.namespaces)"
                .into()
        )
    );
    let e = p.admits_namespace("globex", "team").unwrap_err();
    assert!(
        e.contains("tenant globex admits no Kubernetes namespace") && e.contains("not team"),
        "{e}"
    );
}

/// The secure default: no key, no namespace; nor for a tenant the policy
/// does not name, nor with no policy at all.
#[test]
fn a_tenant_without_the_key_admits_no_namespace() {
    let p = parse(POLICY).expect("policy");
    let e = p.admits_namespace("initech", "team").unwrap_err();
    assert_eq!(
        e,
        "tenant initech admits no Kubernetes namespace, so not team: the policy has no \
         tenants.initech.kubernetes.namespaces"
    );
    let e = p.admits_namespace("hooli", "team").unwrap_err();
    assert!(e.ends_with("(nor the tenant)"), "{e}");
    assert!(Policy::empty().admits_namespace("acme", "team").is_err());
}

#[test]
fn errors_in_the_key_name_its_field() {
    for (text, says) in [
        (
            "version: 1\ntenants:\n  acme:\n    kubernetes:\n      namespace: [team]\n",
            "tenants.acme.kubernetes.namespace: unknown key \"namespace\": expected one of \
             namespaces, networkPolicy (did you mean \"namespaces\"?)",
        ),
        (
            "version: 1\ntenants:\n  acme:\n    kubernetes:\n      namespaces: [team, Team_1]\n",
            "tenants.acme.kubernetes.namespaces[1]: invalid Kubernetes namespace \"Team_1\"",
        ),
        (
            "version: 1\ntenants:\n  acme:\n    kubernetes:\n      namespaces: team\n",
            "tenants.acme.kubernetes.namespaces: expected a list of Kubernetes namespace names",
        ),
        (
            "version: 1\ntenants:\n  acme:\n    kubernetes: [team]\n",
            "tenants.acme.kubernetes: expected a mapping with keys namespaces, networkPolicy",
        ),
        (
            "version: 1\ntenants:\n  acme:\n    kubernetes:\n      namespaces: [team-]\n",
            "invalid Kubernetes namespace \"team-\"",
        ),
    ] {
        let e = parse(text).map(drop).unwrap_err();
        assert!(e.contains(says), "want {says:?} in:\n{e}");
    }
}

/// The key is part of the policy's version: a changed list is a new one,
/// and a policy without it keeps the version it had.
#[test]
fn the_namespaces_are_part_of_the_version() {
    let a = parse(POLICY).expect("a");
    let b = parse(&POLICY.replace("team-ci", "team-qa")).expect("b");
    let c = parse(&POLICY.replace("[team, team-ci]", "[team-ci, team]")).expect("c");
    assert_ne!(a.version_hash(), b.version_hash());
    assert_eq!(a.version_hash(), c.version_hash());
    let plain = "version: 1\ntenants:\n  acme:\n    securityGroups: {}\n";
    let with_none = parse(plain).expect("plain");
    assert_ne!(
        with_none.version_hash(),
        parse(&format!("{plain}    kubernetes: {{}}\n"))
            .expect("empty")
            .version_hash()
    );
}

/// Off unless the operator says so, per tenant; part of the version.
#[test]
fn network_policy_is_enforced_only_for_tenants_that_say_so() {
    let p = parse(POLICY).expect("policy");
    assert!(!p.any_network_policy());
    let on = POLICY.replace(
        "namespaces: [team, team-ci]",
        "namespaces: [team, team-ci]\n      networkPolicy: true",
    );
    let q = parse(&on).expect("on");
    assert!(q.enforces_network_policy("acme") && q.any_network_policy());
    assert!(!q.enforces_network_policy("globex"));
    assert_ne!(p.version_hash(), q.version_hash());
    let off = POLICY.replace(
        "namespaces: [team, team-ci]",
        "namespaces: [team, team-ci]\n      networkPolicy: false",
    );
    assert_eq!(parse(&off).expect("off").version_hash(), p.version_hash());
    let e =
        parse(&POLICY.replace("namespaces: [team, team-ci]", "networkPolicy: yes")).unwrap_err();
    assert!(
        e.contains("tenants.acme.kubernetes.networkPolicy: expected true or false, found \"yes\""),
        "{e}"
    );
}
