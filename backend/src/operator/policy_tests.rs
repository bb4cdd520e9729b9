//! Putting a policy in force: a text that does not check changes nothing
//! and says so; one that does is the active policy, its reply saying its
//! version and the endpoints it names that no VPC has.
use crate::cluster::source::Store;
use crate::endpoints::placement::SourceId;
use crate::tenants::fakes::{examples, FakeParts};
use serde_json::json;

fn example() -> String {
    std::fs::read_to_string(examples().join("policy.yaml")).expect("policy.yaml")
}

fn active_version(f: &FakeParts) -> Option<String> {
    f.parts
        .admission()
        .active()
        .map(|p| p.version_hash().to_string())
}

#[test]
fn an_applied_policy_is_in_force_and_says_its_version() {
    let f = FakeParts::host1();
    assert_eq!(active_version(&f), None);
    let v = f
        .parts
        .apply_policy_text(&example(), "policy.yaml")
        .expect("applied");
    let version = active_version(&f).expect("active");
    assert_eq!(v["version"], json!(version));
    assert_eq!(v["reset"], json!(0));
    assert_eq!(v["unknown_endpoints"], json!([]));
    assert_eq!(f.parts.policy_version(), Some(version));
}

/// Refused whole: the policy in force stays, and the error says so.
#[test]
fn a_policy_that_does_not_check_changes_nothing() {
    let f = FakeParts::host1().with_policy();
    let before = active_version(&f);
    for text in [
        "version: 2\n",
        "tenants: [\n",
        "version: 1\ntenants:\n  acme:\n    nope: 1\n",
    ] {
        let e = f
            .parts
            .apply_policy_text(text, "bad.yaml")
            .expect_err("refused")
            .to_string();
        assert!(e.ends_with("\npolicy not changed"), "{text:?}: {e}");
        assert!(e.contains("bad.yaml"), "{text:?}: {e}");
        assert_eq!(active_version(&f), before, "{text:?}");
    }
    let missing = f.dir.path().join("missing.yaml");
    let e = f
        .parts
        .apply_policy_file(&missing)
        .expect_err("refused")
        .to_string();
    assert!(e.ends_with("\npolicy not changed"), "{e}");
    assert!(e.contains(&missing.display().to_string()), "{e}");
    assert_eq!(active_version(&f), before);
}

/// A name no VPC has is allowed (its endpoint may come later) and told.
#[test]
fn a_policy_naming_an_unknown_endpoint_applies_and_names_it() {
    let f = FakeParts::host1();
    let text = example().replace("members: [acme-b]", "members: [acme-b, acme-x]");
    let v = f
        .parts
        .apply_policy_text(&text, "policy.yaml")
        .expect("applied");
    assert_eq!(v["unknown_endpoints"], json!(["acme-x"]));
}

/// A source's policy (the file at start, the cluster's) is checked as
/// masqctl's: a bad one leaves the policy in force.
#[test]
fn a_sources_bad_policy_leaves_the_one_in_force() {
    let f = FakeParts::host1().with_policy();
    let before = active_version(&f);
    let store: &dyn Store = &*f.parts;
    assert!(store
        .policy(SourceId::Cluster, "version: 2\n", "cluster.yaml")
        .is_err());
    assert_eq!(active_version(&f), before);
    // The same text again is no change.
    store
        .policy(SourceId::File, &example(), "policy.yaml")
        .expect("same policy");
    assert_eq!(active_version(&f), before);
}

/// A name the policy gives that no VPC has yet matches its endpoint once
/// a source places it (here the cluster, on host2), and no longer once it
/// is gone: the policy in force is resolved again each time.
#[test]
fn a_named_endpoint_is_matched_once_placed_and_not_once_gone() {
    use crate::admit::{Ask, Conn};
    use crate::endpoints::placement::Placement;
    use std::net::Ipv4Addr;
    let f = FakeParts::host1();
    let text = example().replace("members: [acme-b]", "members: [acme-b, acme-x]");
    f.parts
        .apply_policy_text(&text, "policy.yaml")
        .expect("applied");
    let (host2, x) = (Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(10, 0, 0, 9));
    let admitted = || {
        let ask = Ask {
            tenant: "acme",
            vni: 100,
            local: Ipv4Addr::new(10, 0, 0, 1),
            remote: x,
            conn: Conn::Qp,
        };
        f.parts.admission().decide(&ask, f.parts.registry()).is_ok()
    };
    assert!(!admitted(), "acme-x is not placed yet");
    let store: &dyn Store = &*f.parts;
    store.placed(
        SourceId::Cluster,
        Placement {
            host: host2,
            name: Some("acme-x".into()),
            tenant: "acme".into(),
            vni: 100,
            vip: x,
            rail: None,
            underlay: None,
            created: 1,
            pod: None,
        },
    );
    assert!(admitted(), "acme-x placed: a server of acme's clients");
    store.unplaced(SourceId::Cluster, host2, "acme-x");
    assert!(!admitted(), "acme-x gone");
}
