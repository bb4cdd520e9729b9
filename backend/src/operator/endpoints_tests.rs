//! Adding and removing endpoints while masqd runs (`masqctl endpoint
//! add/del`): a refusal names its field and changes nothing, a failed add
//! leaves nothing behind, a CNI DEL touches only its own attachment's.
use super::*;
use crate::tenants::fakes::{endpoint, FakeParts};

fn pod(namespace: Option<&str>, tenant: &str) -> EndpointConfig {
    let mut e: EndpointConfig = serde_json::from_value(json!({
        "name": "team.srv", "tenant": tenant, "vni": 100, "vip": "10.0.0.60",
        "netns": "/var/run/netns/x",
        "cni": {"containerId": "sb1", "network": "acme100", "ifname": "net1"},
    }))
    .expect("endpoint");
    if let Some(c) = e.cni.as_mut() {
        c.namespace = namespace.map(str::to_string);
    }
    e
}

#[test]
fn a_pods_endpoint_needs_a_tenant_that_admits_its_namespace() {
    let policy = masq_policy::Policy::parse(
        "version: 1\ntenants:\n  acme:\n    kubernetes:\n      namespaces: [team]\n",
        "policy.yaml",
        &[],
    )
    .expect("policy");
    assert_eq!(
        namespace_admitted(Some(&policy), &pod(Some("team"), "acme")),
        Ok(())
    );
    let e = namespace_admitted(Some(&policy), &pod(Some("other"), "acme"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "endpoint team.srv: tenant acme admits Kubernetes namespaces team, not other \
         (tenants.acme.kubernetes.namespaces)"
    );
    let e = namespace_admitted(Some(&policy), &pod(Some("team"), "globex"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tenant globex admits no Kubernetes namespace"),
        "{e}"
    );
    // No policy applied yet: no namespace.
    let e = namespace_admitted(None, &pod(Some("team"), "acme"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tenant acme admits no Kubernetes namespace, so not team"),
        "{e}"
    );
    // Not a Kubernetes pod: not asked.
    assert_eq!(namespace_admitted(None, &pod(None, "acme")), Ok(()));
    let mut plain = pod(None, "acme");
    plain.cni = None;
    assert_eq!(namespace_admitted(None, &plain), Ok(()));
}

/// The pod a NetworkPolicy selects the endpoint as: a Kubernetes name,
/// and only with its namespace.
#[test]
fn a_pods_name_is_checked_and_needs_its_namespace() {
    let policy = masq_policy::Policy::parse(
        "version: 1\ntenants:\n  acme:\n    kubernetes:\n      namespaces: [team]\n",
        "policy.yaml",
        &[],
    )
    .expect("policy");
    let named = |ns: Option<&str>, name: &str| {
        let mut e = pod(ns, "acme");
        if let Some(c) = e.cni.as_mut() {
            c.pod = Some(name.to_string());
        }
        e
    };
    assert_eq!(
        namespace_admitted(Some(&policy), &named(Some("team"), "srv-0.a")),
        Ok(())
    );
    let e = namespace_admitted(Some(&policy), &named(None, "srv"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "endpoint team.srv: cni.pod needs the pod's cni.namespace"
    );
    for bad in ["", "Srv", "srv/x", "-srv", &"a".repeat(254)] {
        let e = namespace_admitted(Some(&policy), &named(Some("team"), bad))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is no Kubernetes pod name"), "{bad}: {e}");
    }
}

/// host1's endpoints, by name.
fn served(f: &FakeParts) -> Vec<String> {
    let mut names: Vec<_> = f
        .parts
        .registry()
        .local()
        .iter()
        .map(|e| e.cfg.name.clone())
        .collect();
    names.sort();
    names
}

/// `endpoint add` refused: the error, checked to have changed nothing
/// (the endpoints, the runtime file, the socket directory).
fn refused(f: &FakeParts, e: EndpointConfig) -> String {
    let before = served(f);
    let socket = e.socket_path(f.dir.path());
    let err = f.parts.add_endpoint(e).expect_err("refused").to_string();
    assert_eq!(served(f), before, "{err}");
    assert!(f.runtime_endpoints().is_empty(), "{err}");
    assert!(!socket.exists(), "{err}");
    err
}

#[test]
fn an_added_endpoint_is_served_written_down_and_deleted_whole() {
    let f = FakeParts::host1();
    let socket = f.dir.path().join("endpoints/acme-d/masq.sock");
    let added = f.parts.add_endpoint(endpoint(json!({}))).expect("added");
    assert_eq!(added, json!({ "name": "acme-d", "socket": socket }));
    assert!(socket.exists());
    assert_eq!(served(&f), ["acme-a", "acme-d", "globex-a"]);
    assert_eq!(f.runtime_endpoints(), ["acme-d"]);
    let deleted = f.parts.remove_endpoint("acme-d", None).expect("deleted");
    assert_eq!(
        deleted,
        json!({ "name": "acme-d", "sessions": 0, "qps_reset": 0 })
    );
    assert!(!socket.exists());
    assert_eq!(served(&f), ["acme-a", "globex-a"]);
    assert!(f.runtime_endpoints().is_empty());
}

/// Each refusal before anything is made names the field at fault.
#[test]
fn an_endpoint_that_does_not_fit_is_refused_naming_its_field() {
    let f = FakeParts::host1();
    assert_eq!(
        refused(&f, endpoint(json!({ "name": "acme-a", "vip": "10.0.0.9" }))),
        "endpoint acme-a: an endpoint of that name exists on this host"
    );
    assert_eq!(
        refused(&f, endpoint(json!({ "tenant": "globex" }))),
        "endpoint acme-d.vni: VNI 100 belongs to tenant \"acme\", not \"globex\""
    );
    let e = refused(&f, endpoint(json!({ "vip": "10.0.0.1" })));
    assert!(
        e.starts_with("endpoint acme-d.vip: 10.0.0.1 in VNI 100"),
        "{e}"
    );
    assert_eq!(
        refused(&f, endpoint(json!({ "netns": "netns/acme-d" }))),
        "endpoint acme-d.netns: \"netns/acme-d\" must be an absolute path"
    );
    assert_eq!(
        refused(&f, endpoint(json!({ "maxRateMbps": 100 }))),
        crate::enforce::ratelimit::needs_software_roce("acme-d", "rxe0")
    );
    let theirs = f.dir.path().join("endpoints/acme-a/acme-d.sock");
    assert_eq!(
        refused(&f, endpoint(json!({ "socket": theirs }))),
        format!(
            "endpoint acme-d.socket: {} is another endpoint's directory",
            f.dir.path().join("endpoints/acme-a").display()
        )
    );
    let pod = json!({ "cni": {
        "containerId": "sb1", "network": "acme100", "ifname": "net1", "pod": "srv",
    }});
    assert_eq!(
        refused(&f, endpoint(pod)),
        "endpoint acme-d: cni.pod needs the pod's cni.namespace"
    );
}

/// A socket that cannot be listened on fails the add after the endpoint
/// was registered: it goes again, and a second try, the way cleared,
/// succeeds (nothing of the first holds its name, vIP or socket).
#[test]
fn a_failed_add_leaves_nothing_behind() {
    let f = FakeParts::host1();
    let socket = f.dir.path().join("endpoints/acme-d/masq.sock");
    std::fs::create_dir_all(&socket).expect("a directory where the socket goes");
    let err = f
        .parts
        .add_endpoint(endpoint(json!({})))
        .expect_err("refused")
        .to_string();
    assert_eq!(served(&f), ["acme-a", "globex-a"]);
    assert!(f.runtime_endpoints().is_empty());
    assert!(
        err.starts_with(&format!(
            "endpoint acme-d: cannot listen on {}:",
            socket.display()
        )),
        "{err}"
    );
    std::fs::remove_dir(&socket).expect("rmdir");
    f.parts.add_endpoint(endpoint(json!({}))).expect("added");
    assert!(socket.exists());
    assert_eq!(f.runtime_endpoints(), ["acme-d"]);
}

fn owner(container: &str) -> CniOwner {
    serde_json::from_value(json!({
        "containerId": container, "network": "acme100", "ifname": "net1",
    }))
    .expect("owner")
}

/// A CNI DEL names its attachment: another's endpoint of that name is
/// kept, saying whose it is.
#[test]
fn a_delete_for_another_attachment_keeps_the_endpoint() {
    let f = FakeParts::host1();
    let cni = json!({ "cni": { "containerId": "c1", "network": "acme100", "ifname": "net1" } });
    f.parts.add_endpoint(endpoint(cni)).expect("added");
    let kept = f
        .parts
        .remove_endpoint("acme-d", Some(&owner("c2")))
        .expect("answered");
    assert_eq!(
        kept,
        json!({ "name": "acme-d", "kept": true,
                "why": "it is container c1's on network acme100, not c2's on acme100" })
    );
    let kept = f
        .parts
        .remove_endpoint("acme-a", Some(&owner("c2")))
        .expect("answered");
    assert_eq!(kept["why"], "it is no CNI attachment's");
    let kept = f
        .parts
        .remove_endpoint("acme-z", Some(&owner("c2")))
        .expect("answered");
    assert_eq!(kept["why"], "no such endpoint on this host");
    assert_eq!(served(&f), ["acme-a", "acme-d", "globex-a"]);
    f.parts
        .remove_endpoint("acme-d", Some(&owner("c1")))
        .expect("deleted");
    assert_eq!(served(&f), ["acme-a", "globex-a"]);
}

#[test]
fn deleting_an_unknown_endpoint_is_an_error() {
    let f = FakeParts::host1();
    assert_eq!(
        f.parts
            .remove_endpoint("acme-z", None)
            .map_err(|e| e.to_string()),
        Err("no endpoint \"acme-z\" on this host".to_string())
    );
    assert_eq!(served(&f), ["acme-a", "globex-a"]);
}

/// masq-nri's call for a pod with no endpoint, or without a backstop,
/// filters nothing.
#[test]
fn a_pod_is_adopted_only_with_a_backstop() {
    let f = FakeParts::host1();
    let cni = json!({ "cni": { "containerId": "sb1", "network": "acme100", "ifname": "net1" } });
    f.parts.add_endpoint(endpoint(cni)).expect("added");
    assert_eq!(
        f.parts.adopt_pod("sb1", 1),
        Ok(json!({ "endpoints": ["acme-d"], "backstop": false }))
    );
    assert_eq!(
        f.parts.adopt_pod("sb2", 1),
        Ok(json!({ "endpoints": [], "backstop": false }))
    );
}

/// An endpoint whose sysfs view could not be made is not served, nor a
/// further device of its apps: their socket would show the host's sysfs.
#[test]
fn an_endpoint_whose_view_was_refused_is_not_served_nor_its_further_devices() {
    let f = FakeParts::host1();
    let why = "its sysfs view cannot be made: planted link";
    let cfg = endpoint(json!({}));
    let socket = f.parts.registry().socket_of(&cfg);
    let ep = Endpoint::new(cfg, socket.clone(), Origin::Command, None).refused(why.into());
    let ep = Arc::new(ep);
    f.parts.registry().insert(ep.clone());
    let further = endpoint(json!({ "name": "acme-d1", "deviceOf": "acme-d" }));
    let further = Arc::new(Endpoint::new(
        further,
        socket.clone(),
        Origin::Command,
        None,
    ));
    assert_eq!(refusal(&f.parts, &ep).as_deref(), Some(why));
    assert_eq!(
        refusal(&f.parts, &further),
        Some(format!("endpoint acme-d: {why}"))
    );
    assert_eq!(refusal(&f.parts, &f.endpoint("acme-a")), None);
    let e = serve(&f.parts, &ep).expect_err("not served");
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    assert_eq!(e.to_string(), format!("endpoint acme-d: not served: {why}"));
    assert!(!socket.exists());
}
