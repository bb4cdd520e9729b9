//! The registry's placements, checks and listings.

use super::*;
use crate::config::CniOwner;
use crate::endpoints::endpoint::Origin;

fn cfg() -> Config {
    Config::parse(
        "device: rxe0\n\
         underlay: { netdev: eth0, ip: 198.18.0.1 }\n\
         vpc:\n\
         \x20 - { tenant: acme, vni: 100, vip: 10.0.0.1, host: 198.18.0.1, name: acme-a }\n\
         \x20 - { tenant: acme, vni: 100, vip: 10.0.0.2, host: 198.18.0.2, name: acme-b }\n",
        "t.yaml",
    )
    .unwrap()
}

fn ep(name: &str, tenant: &str, vni: u32, vip: &str) -> EndpointConfig {
    EndpointConfig {
        name: name.into(),
        tenant: tenant.into(),
        vni,
        vip: vip.parse().unwrap(),
        netns: format!("/run/netns/{name}").into(),
        vnic: "eth0".into(),
        rail: None,
        device_of: None,
        host_if: None,
        bridge: None,
        socket: None,
        max_connections: None,
        rdma_limits: None,
        max_rate_mbps: None,
        cni: None,
    }
}

fn add(r: &Registry, e: EndpointConfig) {
    r.check_new(&e).unwrap();
    let sock = e.socket_path(Path::new("/run/masq"));
    r.insert(Arc::new(Endpoint::new(e, sock, Origin::Command, None)));
}

/// A registry the config file's source has fed.
fn registry() -> Registry {
    let r = Registry::new(&cfg());
    let refused = r.feed(
        SourceId::File,
        crate::cluster::source::file_placements(&cfg()),
    );
    assert!(refused.is_empty(), "{refused:?}");
    r
}

#[test]
fn an_endpoint_comes_and_goes_with_the_map_entry_it_brought() {
    let r = registry();
    add(&r, ep("acme-c", "acme", 100, "10.0.0.3"));
    assert_eq!(
        r.vpc()
            .lookup(100, "10.0.0.3".parse().unwrap())
            .map(|p| p.host),
        Some("198.18.0.1".parse().unwrap())
    );
    assert!(r
        .policy_refs()
        .iter()
        .any(|e| e.name == "acme-c" && e.tenant == "acme"));
    assert_eq!(
        r.local_at(100, "10.0.0.3".parse().unwrap())
            .map(|e| e.cfg.name.clone()),
        Some("acme-c".into())
    );
    let gone = r.remove("acme-c").unwrap();
    assert!(gone.is_removed());
    assert!(r.vpc().lookup(100, "10.0.0.3".parse().unwrap()).is_none());
    assert!(r.local().is_empty());
    assert!(r.remove("acme-c").is_none());
}

#[test]
fn a_file_placed_endpoint_keeps_its_map_entry_when_removed() {
    let r = registry();
    add(&r, ep("acme-a", "acme", 100, "10.0.0.1"));
    r.remove("acme-a").unwrap();
    assert!(r.vpc().lookup(100, "10.0.0.1".parse().unwrap()).is_some());
}

#[test]
fn conflicts_are_refused_naming_the_field() {
    let r = registry();
    add(&r, ep("acme-c", "acme", 100, "10.0.0.3"));
    let err = |e: EndpointConfig| r.check_new(&e).unwrap_err().to_string();
    assert!(err(ep("acme-c", "acme", 100, "10.0.0.4"))
        .contains("endpoint acme-c: an endpoint of that name exists"));
    assert!(err(ep("acme_c", "acme", 100, "10.0.0.4")).contains("same nftables name"));
    assert!(err(ep("evil", "globex", 100, "10.0.0.9"))
        .contains("endpoint evil.vni: VNI 100 belongs to tenant \"acme\""));
    assert!(err(ep("acme-d", "acme", 100, "10.0.0.3"))
        .contains("endpoint acme-d.vip: 10.0.0.3 in VNI 100 is endpoint acme-c's"));
    assert!(err(ep("acme-d", "acme", 100, "10.0.0.2"))
        .contains("on host 198.18.0.2 (acme-b), not here"));
    assert!(err(ep("acme-b", "acme", 100, "10.0.0.7"))
        .contains("endpoint acme-b.name: the VPC map names VNI 100 vIP 10.0.0.2"));
    assert!(err(ep("acme d", "acme", 100, "10.0.0.7")).contains("endpoint acme d.name"));
    let mut rel = ep("acme-e", "acme", 100, "10.0.0.7");
    rel.netns = "netns/acme-e".into();
    assert!(err(rel).contains("endpoint acme-e.netns"));
    // A VNI nobody holds is free for any tenant.
    r.check_new(&ep("globex-z", "globex", 300, "10.0.0.1"))
        .unwrap();
}

fn placement(host: &str, name: &str, vni: u32, vip: &str) -> Placement {
    claim(host, name, vni, vip, 0)
}

/// A cluster placement whose key etcd created at revision `created`.
fn claim(host: &str, name: &str, vni: u32, vip: &str, created: i64) -> Placement {
    Placement {
        host: host.parse().unwrap(),
        name: Some(name.into()),
        tenant: "acme".into(),
        vni,
        vip: vip.parse().unwrap(),
        rail: None,
        underlay: None,
        created,
        pod: None,
    }
}

fn host_of(r: &Registry, vip: &str) -> Option<String> {
    r.vpc()
        .lookup(100, vip.parse().unwrap())
        .map(|p| p.host.to_string())
}

#[test]
fn the_cluster_feeds_other_hosts_endpoints() {
    let r = registry();
    add(&r, ep("acme-a", "acme", 100, "10.0.0.1"));
    let refused = r.feed(
        SourceId::Cluster,
        vec![
            claim("198.18.0.3", "acme-x", 100, "10.0.0.8", 5),
            // Conflicts: this host's own address, a local name, a taken vIP.
            claim("198.18.0.1", "acme-y", 100, "10.0.0.9", 6),
            claim("198.18.0.3", "acme-a", 100, "10.0.0.7", 7),
            claim("198.18.0.4", "acme-z", 100, "10.0.0.8", 8),
        ],
    );
    assert_eq!(refused.len(), 3, "{refused:?}");
    assert_eq!(host_of(&r, "10.0.0.8").as_deref(), Some("198.18.0.3"));
    // Its host changes it: the map follows; the same word again changes
    // nothing.
    let changed = claim("198.18.0.3", "acme-x", 100, "10.0.0.18", 5);
    // (acme-z waited for 10.0.0.8, free now.)
    assert_eq!(
        r.place(SourceId::Cluster, changed.clone()).names,
        ["acme-x", "acme-z"]
    );
    assert_eq!(host_of(&r, "10.0.0.18").as_deref(), Some("198.18.0.3"));
    assert_eq!(r.place(SourceId::Cluster, changed), Change::default());
    assert!(
        r.unplace(SourceId::Cluster, "198.18.0.4".parse().unwrap(), "acme-x")
            .names
            .is_empty(),
        "another host's delete is ignored"
    );
    assert!(!r
        .unplace(SourceId::Cluster, "198.18.0.3".parse().unwrap(), "acme-x")
        .names
        .is_empty());
    assert_eq!(host_of(&r, "10.0.0.18"), None);
    // acme-z waited for 10.0.0.8, free since acme-x moved off it.
    assert_eq!(host_of(&r, "10.0.0.8").as_deref(), Some("198.18.0.4"));
    assert_eq!(r.placed_by(SourceId::Cluster).len(), 1);
}

/// Issue 51: a host published another host's endpoint (its name, VNI and
/// vIP) and every peer moved the endpoint to it. The first claim holds
/// until its key goes; a later one waits, and is placed only then.
#[test]
fn a_host_cannot_take_another_hosts_endpoint_or_vip() {
    let r = registry();
    let a = claim("198.18.0.3", "acme-x", 100, "10.0.0.8", 10);
    assert_eq!(r.place(SourceId::Cluster, a.clone()).names, ["acme-x"]);
    // Host .4 publishes acme-x as its own: held back, counted.
    let taken = claim("198.18.0.4", "acme-x", 100, "10.0.0.8", 20);
    let c = r.place(SourceId::Cluster, taken.clone());
    assert!(c.names.is_empty(), "{c:?}");
    let why = c.refused.unwrap();
    assert!(
        why.contains(
            "endpoint acme-x of host 198.18.0.4: its name is endpoint acme-x's of host 198.18.0.3"
        ),
        "{why}"
    );
    assert_eq!(host_of(&r, "10.0.0.8").as_deref(), Some("198.18.0.3"));
    assert_eq!(r.claim_conflicts(), 1);
    // Or the vIP under another name: held back too.
    let why = r
        .place(
            SourceId::Cluster,
            claim("198.18.0.5", "evil", 100, "10.0.0.8", 21),
        )
        .refused
        .unwrap();
    assert!(
        why.contains("VNI 100 vIP 10.0.0.8 is endpoint acme-x's"),
        "{why}"
    );
    assert_eq!(host_of(&r, "10.0.0.8").as_deref(), Some("198.18.0.3"));
    assert_eq!(r.claim_conflicts(), 2);
    // A view read again keeps the holder, whatever the order.
    let refused = r.feed(SourceId::Cluster, vec![taken.clone(), a.clone()]);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(host_of(&r, "10.0.0.8").as_deref(), Some("198.18.0.3"));
    assert_eq!(
        r.claim_conflicts(),
        2,
        "a claim still waiting is not counted again"
    );
    // The holder's delete (or lease) frees it: the claim that waited
    // longest takes it.
    r.place(
        SourceId::Cluster,
        claim("198.18.0.5", "evil", 100, "10.0.0.8", 21),
    );
    let c = r.unplace(SourceId::Cluster, a.host, "acme-x");
    assert_eq!(c.names, ["acme-x"]);
    assert_eq!(host_of(&r, "10.0.0.8").as_deref(), Some("198.18.0.4"));
    // A first view (a masqd starting) gives it to the first claim too.
    let fresh = registry();
    let later = claim("198.18.0.4", "acme-x", 100, "10.0.0.8", 30);
    fresh.feed(SourceId::Cluster, vec![later, a]);
    assert_eq!(host_of(&fresh, "10.0.0.8").as_deref(), Some("198.18.0.3"));
}

#[test]
fn each_source_keeps_its_own_word_and_the_cluster_ranks_over_the_file() {
    let r = registry();
    let source_of = |vip: &str| {
        r.listing()
            .into_iter()
            .find(|row| row["vip"] == vip)
            .map(|row| row["source"].as_str().unwrap_or_default().to_string())
    };
    // The cluster places the file's acme-b elsewhere: its word wins...
    r.place(
        SourceId::Cluster,
        placement("198.18.0.5", "acme-b", 100, "10.0.0.2"),
    );
    assert_eq!(host_of(&r, "10.0.0.2").as_deref(), Some("198.18.0.5"));
    assert_eq!(source_of("10.0.0.2").as_deref(), Some("cluster"));
    assert!(r.policy_refs().iter().any(|e| e.name == "acme-b"));
    // ...and when it takes it away, the file's entry is back.
    assert!(!r
        .unplace(SourceId::Cluster, "198.18.0.5".parse().unwrap(), "acme-b")
        .names
        .is_empty());
    assert_eq!(host_of(&r, "10.0.0.2").as_deref(), Some("198.18.0.2"));
    assert_eq!(source_of("10.0.0.2").as_deref(), Some("file"));
    // A file feed again replaces only the file's entries.
    r.place(
        SourceId::Cluster,
        placement("198.18.0.3", "acme-x", 100, "10.0.0.8"),
    );
    assert!(r.feed(SourceId::File, vec![]).is_empty());
    assert_eq!(host_of(&r, "10.0.0.2"), None);
    assert_eq!(host_of(&r, "10.0.0.8").as_deref(), Some("198.18.0.3"));
    // A tenant a VNI does not belong to is refused from any source.
    let mut other = placement("198.18.0.3", "globex-a", 100, "10.0.0.20");
    other.tenant = "globex".into();
    assert!(r
        .place(SourceId::File, other)
        .refused
        .unwrap()
        .contains("VNI 100 belongs to tenant \"acme\""));
}

#[test]
fn the_census_counts_hosts_and_entries_by_source() {
    let r = registry();
    assert_eq!(r.census(), (2, [("local", 0), ("cluster", 0), ("file", 2)]));
    add(&r, ep("acme-c", "acme", 100, "10.0.0.3"));
    r.place(
        SourceId::Cluster,
        placement("198.18.0.3", "acme-x", 100, "10.0.0.8"),
    );
    assert_eq!(r.census(), (3, [("local", 1), ("cluster", 1), ("file", 2)]));
}

#[test]
fn a_local_endpoint_ranks_over_every_source_and_unnamed_entries_stay_unnamed() {
    let r = registry();
    let mut unnamed = placement("198.18.0.1", "x", 100, "10.0.0.3");
    unnamed.name = None;
    let mut feed = crate::cluster::source::file_placements(&cfg());
    feed.push(unnamed);
    assert!(r.feed(SourceId::File, feed).is_empty());
    assert!(!r
        .policy_refs()
        .iter()
        .any(|e| e.vip == "10.0.0.3".parse::<Ipv4Addr>().unwrap()));
    // This host's endpoint at the file's unnamed entry takes it over.
    add(&r, ep("acme-c", "acme", 100, "10.0.0.3"));
    assert!(r.policy_refs().iter().any(|e| e.name == "acme-c"));
    // The cluster cannot place anything at a local endpoint's address.
    let err = r
        .place(
            SourceId::Cluster,
            placement("198.18.0.9", "acme-q", 100, "10.0.0.3"),
        )
        .refused
        .unwrap();
    assert!(err.contains("is local endpoint acme-c's"), "{err}");
    // Gone again: the file's unnamed entry is back.
    r.remove("acme-c").unwrap();
    assert_eq!(host_of(&r, "10.0.0.3").as_deref(), Some("198.18.0.1"));
    assert!(!r.policy_refs().iter().any(|e| e.name == "acme-c"));
}

#[test]
fn the_runtime_file_round_trips() {
    let dir = std::env::temp_dir().join(format!("masq-rt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("runtime-endpoints.yaml");
    assert!(RuntimeFile::load(&path).unwrap().endpoints.is_empty());
    let mut e = ep("acme-c", "acme", 100, "10.0.0.3");
    e.host_if = Some("ve-acme-c".into());
    e.bridge = Some("mbr100".into());
    let pods = [("acme-c".to_string(), "kubepods/pod1".to_string())];
    let apps = [("libpod_parent/libpod-1".to_string(), "acme-c".to_string())];
    RuntimeFile {
        endpoints: vec![e.clone()],
        pod_cgroups: pods.clone().into(),
        app_cgroups: apps.clone().into(),
    }
    .store(&path)
    .unwrap();
    let back = RuntimeFile::load(&path).unwrap();
    assert_eq!(back.endpoints, vec![e]);
    assert_eq!(back.pod_cgroups, pods.into());
    assert_eq!(back.app_cgroups, apps.into());
    // A file from before pods' cgroups were kept still loads.
    std::fs::write(&path, "endpoints: []").unwrap();
    assert!(RuntimeFile::load(&path).unwrap().pod_cgroups.is_empty());
    std::fs::write(&path, "endpoints: [{ name: x, bogus: 1 }]").unwrap();
    assert!(RuntimeFile::load(&path)
        .unwrap_err()
        .to_string()
        .contains("runtime-endpoints.yaml"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// NetworkPolicy's selectors choose among every endpoint of a VNI: the
/// local ones with the pod masq-cni named, the placed ones with the pod
/// their host published, and none of another VNI.
#[test]
fn a_vnis_endpoints_are_listed_with_their_pods() {
    let r = registry();
    let mut pod = ep("team-db", "acme", 100, "10.0.0.3");
    pod.cni = Some(Box::new(CniOwner {
        container_id: "c1".into(),
        network: "acme".into(),
        ifname: "eth0".into(),
        namespace: Some("team".into()),
        pod: Some("db-0".into()),
    }));
    add(&r, pod);
    add(&r, ep("acme-a", "acme", 100, "10.0.0.1"));
    add(&r, ep("other-vni", "acme", 101, "10.0.0.3"));
    let mut web = claim("198.18.0.3", "team-web", 100, "10.0.0.8", 5);
    web.pod = Some(("team".into(), "web-0".into()));
    r.place(SourceId::Cluster, web);
    let mut all = r.pods_in(100);
    all.sort();
    let pod = |ns: &str, n: &str| Some((ns.to_string(), n.to_string()));
    assert_eq!(
        all,
        [
            ("10.0.0.1".parse().unwrap(), None),
            // acme-b of the config file, placed on host .2.
            ("10.0.0.2".parse().unwrap(), None),
            ("10.0.0.3".parse().unwrap(), pod("team", "db-0")),
            ("10.0.0.8".parse().unwrap(), pod("team", "web-0")),
        ]
    );
    assert_eq!(
        r.pod_at(100, "10.0.0.8".parse().unwrap()),
        pod("team", "web-0")
    );
    assert_eq!(r.pods_in(102), []);
}
