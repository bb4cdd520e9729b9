//! The configuration's parsing and validation, on texts like an operator's.

use super::*;

const GOOD: &str = "\
device: rxe0
underlay: { netdev: eth0, ip: 198.18.0.1 }
endpoints:
  - { name: acme-a, tenant: acme, vni: 100, vip: 10.0.0.1, netns: /run/netns/acme-a }
vpc:
  - { tenant: acme, vni: 100, vip: 10.0.0.1, host: 198.18.0.1, name: acme-a }
  - { tenant: acme, vni: 100, vip: 10.0.0.2, host: 198.18.0.2, name: acme-b }
";

#[test]
fn a_good_config_parses_with_defaults() {
    let c = Config::parse(GOOD, "t.yaml").expect("valid");
    assert_eq!(c.port, 1);
    assert_eq!(c.socket_dir, PathBuf::from("/run/masq"));
    assert_eq!(c.endpoints[0].vnic, "eth0");
    assert_eq!(
        c.endpoints[0].socket_path(&c.socket_dir),
        PathBuf::from("/run/masq/endpoints/acme-a/masq.sock")
    );
}

#[test]
fn the_shipped_examples_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    for host in ["host1.yaml", "host2.yaml"] {
        Config::load(&dir.join(host)).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn syntax_and_type_errors_carry_line_and_column() {
    let bad = GOOD.replace("vip: 10.0.0.1, netns", "vip: 10.0.0.300, netns");
    let e = Config::parse(&bad, "t.yaml").unwrap_err();
    assert_eq!(e.position().map(|p| p.0), Some(4), "{e}");
    assert!(e.to_string().starts_with("t.yaml:4:"), "{e}");
    assert!(e.to_string().contains("vip"), "{e}");
}

#[test]
fn unknown_fields_are_refused() {
    let bad = GOOD.replace("device: rxe0", "device: rxe0\ndevcie: rxe1");
    let e = Config::parse(&bad, "t.yaml").unwrap_err();
    assert!(e.to_string().contains("devcie"), "{e}");
    assert_eq!(e.position().map(|p| p.0), Some(2));
}

fn err_of(text: &str) -> String {
    Config::parse(text, "t.yaml").unwrap_err().to_string()
}

#[test]
fn consistency_errors_name_the_field() {
    let e = err_of(&GOOD.replace(
        "vni: 100, vip: 10.0.0.1, netns",
        "vni: 0, vip: 10.0.0.1, netns",
    ));
    assert!(e.contains("endpoints[0].vni: 0 is not a VNI"), "{e}");

    let e = err_of(&GOOD.replace("host: 198.18.0.1, name", "host: 198.18.0.9, name"));
    assert!(e.contains("endpoints[0]: acme-a is local"), "{e}");

    let e = err_of(&GOOD.replace("vip: 10.0.0.2, host", "vip: 10.0.0.1, host"));
    assert!(
        e.contains("vpc[1]: VNI 100 vIP 10.0.0.1 is listed twice"),
        "{e}"
    );

    let e = err_of(&GOOD.replace(
        "tenant: acme, vni: 100, vip: 10.0.0.2",
        "tenant: globex, vni: 100, vip: 10.0.0.2",
    ));
    assert!(
        e.contains("vpc[1]: VNI 100 belongs to tenant \"acme\""),
        "{e}"
    );

    let e = err_of(&GOOD.replace("netns: /run/netns/acme-a", "netns: run/netns/acme-a"));
    assert!(e.contains("endpoints[0].netns"), "{e}");

    let e = err_of(&GOOD.replace("name: acme-a, tenant", "name: \"acme a\", tenant"));
    assert!(e.contains("endpoints[0].name"), "{e}");

    // A socket directory is mounted in the tenant's containers: never one
    // with masqd's control socket, runtime file or other endpoints in it.
    for sock in [
        "/run/masq/a.sock",
        "/run/masq/endpoints/a.sock",
        "/run/a.sock",
    ] {
        let e = err_of(&GOOD.replace(
            "netns: /run/netns/acme-a }",
            &format!("netns: /run/netns/acme-a, socket: {sock} }}"),
        ));
        assert!(
            e.contains("endpoints[0].socket: its directory"),
            "{sock}: {e}"
        );
    }
    let ok = GOOD.replace(
        "netns: /run/netns/acme-a }",
        "netns: /run/netns/acme-a, socket: /run/acme-a/masq.sock }",
    );
    Config::parse(&ok, "t.yaml").expect("a directory of its own");
}

#[test]
fn cluster_mode_takes_tls_or_an_explicit_insecure_and_never_a_mix() {
    let with = |cluster: &str| format!("{GOOD}cluster: {cluster}\n");
    let tls = "tls: { ca: ca.pem, cert: h.pem, key: h-key.pem }";
    let e = err_of(&with(r#"{ etcd: ["http://198.18.0.1:2379"] }"#));
    assert!(
        e.contains("cluster.tls: missing") && e.contains("insecure: true"),
        "{e}"
    );
    let e = err_of(&with(&format!(
        r#"{{ etcd: ["http://198.18.0.1:2379"], {tls} }}"#
    )));
    assert!(
        e.contains("cluster.etcd[0]: \"http://198.18.0.1:2379\" is plaintext")
            && e.contains("https://"),
        "{e}"
    );
    let e = err_of(&with(
        r#"{ etcd: ["https://198.18.0.1:2379"], insecure: true }"#,
    ));
    assert!(
        e.contains("cluster.etcd[0]") && e.contains("needs cluster.tls"),
        "{e}"
    );
    let e = err_of(&with(&format!(
        r#"{{ etcd: ["https://198.18.0.1:2379"], insecure: true, {tls} }}"#
    )));
    assert!(
        e.contains("cluster.insecure: true, but cluster.tls is set"),
        "{e}"
    );
    let e = err_of(&with(
        r#"{ etcd: ["https://198.18.0.1:2379"], tls: { ca: ca.pem } }"#,
    ));
    assert!(e.contains("missing field `cert`"), "{e}");
    assert!(Config::parse(
        &with(r#"{ etcd: ["http://198.18.0.1:2379"], insecure: true }"#),
        "t.yaml"
    )
    .is_ok());
}

#[test]
fn the_identity_files_are_relative_to_the_configuration_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("masqd.yaml");
    let text = format!(
        "{GOOD}cluster: {{ etcd: [\"https://198.18.0.1:2379\"], \
         tls: {{ ca: pki/ca.pem, cert: /etc/h.pem, key: h-key.pem }} }}\n"
    );
    std::fs::write(&path, text).expect("write");
    let cfg = Config::load(&path).expect("load");
    let tls = cfg.cluster.and_then(|c| c.tls).expect("tls");
    assert_eq!(tls.ca, dir.path().join("pki/ca.pem"));
    assert_eq!(tls.cert, PathBuf::from("/etc/h.pem"));
    assert_eq!(tls.key, dir.path().join("h-key.pem"));
}

#[test]
fn a_local_endpoint_missing_from_the_vpc_map_is_an_error() {
    let e = err_of(&GOOD.replace(
        "  - { tenant: acme, vni: 100, vip: 10.0.0.1, host: 198.18.0.1, name: acme-a }\n",
        "",
    ));
    assert!(e.contains("missing from the VPC map"), "{e}");
}

#[test]
fn the_audit_section_is_validated() {
    let base = "device: rxe0\nunderlay: { netdev: eth0, ip: 198.18.0.1 }\nvpc: []\n";
    let cfg = Config::parse(base, "m.yaml").unwrap();
    assert!(cfg.audit.enabled);
    assert_eq!(cfg.audit.action, AuditAction::Log);
    assert_eq!(cfg.audit.interval(), Ok(std::time::Duration::from_secs(1)));
    let with = |a: &str| Config::parse(&format!("{base}audit: {a}\n"), "m.yaml");
    let c = with("{ interval: 500ms, action: kill-endpoint }").unwrap();
    assert_eq!(c.audit.action, AuditAction::KillEndpoint);
    assert_eq!(
        c.audit.interval(),
        Ok(std::time::Duration::from_millis(500))
    );
    assert_eq!(
        with("{ interval: 1m, action: kill-process }")
            .unwrap()
            .audit
            .interval(),
        Ok(std::time::Duration::from_secs(60))
    );
    let e = with("{ interval: 2x }").unwrap_err().to_string();
    assert!(e.contains("audit.interval") && e.contains("2x"), "{e}");
    let e = with("{ interval: 10ms }").unwrap_err().to_string();
    assert!(e.contains("outside 100ms..=1h"), "{e}");
    let e = with("{ action: kill-everything }").unwrap_err().to_string();
    assert!(
        e.contains("kill-everything") && e.starts_with("m.yaml:4:"),
        "{e}"
    );
}

#[test]
fn a_missing_file_is_reported_with_its_name() {
    let e = Config::load(Path::new("/nonexistent/masq.yaml")).unwrap_err();
    assert!(e
        .to_string()
        .starts_with("/nonexistent/masq.yaml: cannot read"));
}

#[test]
fn the_metrics_guards_need_the_listener_and_their_files_are_relative_to_the_config() {
    let e = err_of(&format!(
        "{GOOD}metrics: {{ tls: {{ cert: m.pem, key: m-key.pem }} }}\n"
    ));
    assert!(
        e.contains("metrics.tls: set, but metrics.listen is not"),
        "{e}"
    );
    let e = err_of(&format!("{GOOD}metrics: {{ bearerTokenFile: token }}\n"));
    assert!(
        e.contains("metrics.bearerTokenFile: set, but metrics.listen is not"),
        "{e}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("masqd.yaml");
    let text = format!(
        "{GOOD}metrics: {{ listen: \"127.0.0.1:9464\", bearerTokenFile: token, \
         tls: {{ cert: m.pem, key: /etc/m-key.pem, clientCa: ca.pem }} }}\n"
    );
    std::fs::write(&path, text).expect("write");
    let m = Config::load(&path).expect("load").metrics;
    assert_eq!(m.bearer_token_file, Some(dir.path().join("token")));
    let tls = m.tls.expect("tls");
    assert_eq!(tls.cert, dir.path().join("m.pem"));
    assert_eq!(tls.key, PathBuf::from("/etc/m-key.pem"));
    assert_eq!(tls.client_ca, Some(dir.path().join("ca.pem")));
}

/// One file for every host of a cluster (a DaemonSet's ConfigMap): without
/// `underlay.ip` each host takes its netdev's address; a vpc: map, which
/// names hosts by it, needs it given.
#[test]
fn an_omitted_underlay_ip_is_the_netdevs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("masqd.yaml");
    let cluster = "cluster: { etcd: [\"http://127.0.0.1:2379\"], insecure: true }\n";
    std::fs::write(
        &path,
        format!("device: rxe0\nunderlay: {{ netdev: lo }}\n{cluster}"),
    )
    .expect("write");
    let cfg = Config::load(&path).expect("load");
    assert_eq!(cfg.underlay.ip, Ipv4Addr::LOCALHOST);
    std::fs::write(
        &path,
        format!("device: rxe0\nunderlay: {{ netdev: nosuch0 }}\n{cluster}"),
    )
    .expect("write");
    let e = Config::load(&path).expect_err("no such netdev").to_string();
    assert!(
        e.contains("underlay.ip: not given") && e.contains("nosuch0"),
        "{e}"
    );
    let e = err_of(
        "device: rxe0\nunderlay: { netdev: eth0 }\nvpc:\n  \
         - { tenant: acme, vni: 100, vip: 10.0.0.1, host: 198.18.0.1, name: acme-a }\n",
    );
    assert!(e.contains("underlay.ip: required with a vpc: map"), "{e}");
}

/// Two rails: endpoint `a` on rxe0 at 198.18.0.1, its further device
/// `a-r1` on rxe1 at 203.0.113.1 (also the backstop's tests').
pub(crate) const RAILS: &str = "\
rails:
  - { device: rxe0, underlay: { netdev: eth0, ip: 198.18.0.1 } }
  - { device: rxe1, underlay: { netdev: eth1, ip: 203.0.113.1 } }
endpoints:
  - { name: a, tenant: acme, vni: 100, vip: 10.0.0.1, netns: /run/netns/a }
  - { name: a-r1, tenant: acme, vni: 101, vip: 10.1.0.1, netns: /run/netns/a, vnic: eth1,
      rail: rail1, deviceOf: a }
vpc:
  - { tenant: acme, vni: 100, vip: 10.0.0.1, host: 198.18.0.1, name: a }
  - { tenant: acme, vni: 101, vip: 10.1.0.1, host: 198.18.0.1, name: a-r1, rail: rail1,
      underlay: 203.0.113.1 }
";

#[test]
fn rails_are_named_in_order_and_the_first_is_the_hosts() {
    let c = Config::parse(RAILS, "t.yaml").expect("valid");
    let names: Vec<&str> = c.rails.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["rail0", "rail1"]);
    assert_eq!(
        (c.device.as_str(), c.underlay.ip),
        ("rxe0", "198.18.0.1".parse().unwrap())
    );
    assert_eq!(c.rail_index(Some("rail1")), Some(1));
    assert_eq!(c.rail_index(None), Some(0));
    // One device: one rail, rail0, as before rails: existed.
    let one = Config::parse(GOOD, "t.yaml").expect("valid");
    assert_eq!(one.rails.len(), 1);
    assert_eq!(
        (one.rails[0].name.as_str(), one.rails[0].device.as_str()),
        ("rail0", "rxe0")
    );
}

#[test]
fn rail_mistakes_name_the_field() {
    let e = err_of(&RAILS.replace("rails:\n", "device: rxe0\nrails:\n"));
    assert!(e.contains("rails: given with device/underlay"), "{e}");
    let e = err_of(&RAILS.replace("device: rxe1", "device: rxe0"));
    assert!(
        e.contains("rails[1].device: rxe0 serves another rail"),
        "{e}"
    );
    let e = err_of(&RAILS.replace("netdev: eth1", "netdev: eth0"));
    assert!(
        e.contains("rails[1].underlay.netdev: eth0 is another rail's"),
        "{e}"
    );
    let e = err_of(&RAILS.replace("rail: rail1, deviceOf", "rail: rail7, deviceOf"));
    assert!(
        e.contains("endpoints[1].rail: no rail named \"rail7\""),
        "{e}"
    );
    let e = err_of(&format!("{RAILS}railJoins: [[rail0, rail9]]\n"));
    assert!(e.contains("railJoins[0]: no rail named \"rail9\""), "{e}");
    let e = err_of(&format!("{RAILS}railJoins: [[rail0]]\n"));
    assert!(e.contains("railJoins[0]: join two rails or more"), "{e}");
    let e = err_of("rails: []\n");
    assert!(e.contains("device: missing"), "{e}");
}

#[test]
fn a_further_device_is_the_same_apps_on_another_rail() {
    let e = err_of(&RAILS.replace("deviceOf: a }", "deviceOf: b }"));
    assert!(
        e.contains("endpoints[1].deviceOf: no endpoint \"b\""),
        "{e}"
    );
    let e = err_of(&RAILS.replace("rail: rail1, deviceOf", "deviceOf"));
    assert!(
        e.contains("endpoints[1].rail: a's device a is on that rail already"),
        "{e}"
    );
    let e = err_of(&RAILS.replace(
        "netns: /run/netns/a, vnic: eth1",
        "netns: /run/netns/b, vnic: eth1",
    ));
    assert!(
        e.contains("endpoints[1].deviceOf: a is another tenant's or in another namespace"),
        "{e}"
    );
    Config::parse(
        &RAILS.replace("deviceOf: a }", "deviceOf: a, rdmaLimits: { objects: 9 } }"),
        "t.yaml",
    )
    .expect("a further device's rdma limits are its device's line");
    Config::parse(
        &RAILS.replace("deviceOf: a }", "deviceOf: a, maxRateMbps: 9 }"),
        "t.yaml",
    )
    .expect("a further device's rate limit shapes its rail's netdev");
}
