//! The metrics as a scrape renders them, and the rules and dashboard
//! against what masqd serves.
use super::*;

#[test]
fn port_counters_read_both_directories_and_skip_what_is_not_a_number() {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(d.path().join("hw_counters")).expect("mkdir");
    std::fs::create_dir(d.path().join("counters")).expect("mkdir");
    std::fs::write(d.path().join("hw_counters/rcvd_pkts"), "42\n").expect("write");
    std::fs::write(d.path().join("counters/port_xmit_data"), "7\n").expect("write");
    std::fs::write(d.path().join("counters/broken"), "n/a\n").expect("write");
    assert_eq!(
        port_counters(d.path()),
        vec![("port_xmit_data".into(), 7), ("rcvd_pkts".into(), 42)]
    );
    assert!(port_counters(&d.path().join("missing")).is_empty());
}

#[test]
fn events_encode_with_bounded_labels() {
    let m = Metrics::default();
    m.admission("acme", Some("acme/db/ingress[0]"));
    m.admission("acme", None);
    m.request(4, Duration::from_micros(300));
    m.request(0x7777, Duration::from_micros(1));
    m.cm_event("acme", 9);
    m.rtr_step("backstop", Duration::from_micros(40));
    let mut r = Registry::default();
    r.register("masq_admissions", "a", m.admissions.clone());
    r.register("masq_request_duration_seconds", "r", m.requests.clone());
    r.register("masq_cm_events", "c", m.cm_events.clone());
    r.register("masq_rtr_step_duration_seconds", "s", m.rtr_steps.clone());
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &r).expect("encode");
    assert!(out.contains(
        r#"masq_admissions_total{tenant="acme",verdict="allowed",rule="acme/db/ingress[0]"} 1"#
    ));
    assert!(out.contains(r#"masq_admissions_total{tenant="acme",verdict="denied",rule="none"} 1"#));
    assert!(out.contains(r#"masq_request_duration_seconds_count{op="ModifyQp"} 1"#));
    assert!(out.contains(r#"masq_rtr_step_duration_seconds_sum{step="backstop"} 0.00004"#));
    assert!(out.contains(r#"masq_request_duration_seconds_count{op="malformed"} 1"#));
    assert!(out.contains(r#"masq_cm_events_total{tenant="acme",event="established"} 1"#));
}

/// A scrape of a host with one endpoint, the backstop, a policy and
/// a port counter; in cluster mode or not.
fn sample(cluster: Option<ClusterSample>) -> Sample {
    Sample {
        endpoints: vec![EndpointSample {
            name: "acme-a".into(),
            tenant: "acme".into(),
            sessions: 2,
            qps: 3,
            tracked: 1,
            refused_requests: 4,
            refused_connections: 5,
            audit_bypasses: 6,
            audit_kills: 7,
            limit_refusals: vec![("event_channels", 9), ("sessions", 0)],
        }],
        backstop_drops: Some(vec![("drop_acme_a".into(), 8, 800)]),
        policy: Some(("3f2a".into(), "/etc/masq/policy.yaml".into())),
        port_counters: vec![(
            "rxe0".into(),
            vec![
                ("port_rcv_data".into(), 5),
                ("port_rcv_packets".into(), 2),
                ("port_xmit_data".into(), 10),
                ("port_xmit_packets".into(), 3),
                ("rcvd_pkts".into(), 42),
            ],
        )],
        vpc: VpcSample {
            hosts: 2,
            endpoints: [("local", 1), ("cluster", 3), ("file", 0)],
        },
        cluster,
    }
}

/// What masqd serves: every family of `registry`, events included.
fn render(s: impl Fn() -> Option<Sample> + Send + Sync + 'static) -> String {
    let m = Metrics::default();
    m.admission("acme", Some("acme/db/ingress[0]"));
    m.request(4, Duration::from_micros(300));
    m.cm_event("acme", 9);
    m.peer_dropped(std::net::Ipv4Addr::new(198, 18, 0, 3));
    m.peer_ud_refused(std::net::Ipv4Addr::new(198, 18, 0, 3));
    m.policy_applied.set(1_700_000_000.0);
    m.audit_unattributed.inc();
    m.audit_round.observe(0.002);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry(&m, Box::new(s)))
        .expect("encode");
    out
}

#[test]
fn a_scrape_encodes_the_state_build_info_vpc_map_and_cluster() {
    let out = render(|| {
        Some(sample(Some(ClusterSample {
            connected: true,
            since: 1_700_000_100,
            revision: 77,
            certificate_not_after: Some(2_111_095_839),
            claim_conflicts: [("peer", 2), ("own", 0)],
        })))
    });
    for line in [
        r#"masq_build_info{version=""#,
        r#"masq_sessions{endpoint="acme-a",tenant="acme"} 2"#,
        r#"masq_qps{endpoint="acme-a",tenant="acme"} 3"#,
        r#"masq_tracked_connections{endpoint="acme-a",tenant="acme"} 1"#,
        r#"masq_refused_requests_total{endpoint="acme-a",tenant="acme"} 4"#,
        r#"masq_refused_connections_total{endpoint="acme-a",tenant="acme"} 5"#,
        r#"masq_audit_bypasses_total{endpoint="acme-a",tenant="acme"} 6"#,
        r#"masq_audit_kills_total{endpoint="acme-a",tenant="acme"} 7"#,
        r#"masq_tenant_limit_refusals_total{endpoint="acme-a",tenant="acme",what="event_channels"} 9"#,
        r#"masq_tenant_limit_refusals_total{endpoint="acme-a",tenant="acme",what="sessions"} 0"#,
        r#"masq_backstop_dropped_packets_total{counter="drop_acme_a"} 8"#,
        r#"masq_backstop_dropped_bytes_total{counter="drop_acme_a"} 800"#,
        r#"masq_policy_info{version="3f2a",file="/etc/masq/policy.yaml"} 1"#,
        "masq_policy_applied_timestamp_seconds 1700000000",
        "masq_audit_unattributed_qps_total 1\n",
        "masq_audit_round_duration_seconds_count 1\n",
        r#"masq_rnic_port_total{device="rxe0",counter="rcvd_pkts"} 42"#,
        r#"masq_rnic_port_bytes_total{device="rxe0",direction="transmit"} 40"#,
        r#"masq_rnic_port_bytes_total{device="rxe0",direction="receive"} 20"#,
        r#"masq_rnic_port_packets_total{device="rxe0",direction="transmit"} 3"#,
        r#"masq_rnic_port_packets_total{device="rxe0",direction="receive"} 2"#,
        "masq_vpc_hosts 2\n",
        r#"masq_vpc_endpoints{source="local"} 1"#,
        r#"masq_vpc_endpoints{source="cluster"} 3"#,
        r#"masq_vpc_endpoints{source="file"} 0"#,
        "masq_cluster_up 1\n",
        "masq_cluster_state_since_timestamp_seconds 1700000100\n",
        "masq_cluster_revision 77\n",
        "masq_cluster_certificate_expiry_timestamp_seconds 2111095839\n",
        r#"masq_cluster_claim_conflicts_total{whose="peer"} 2"#,
        r#"masq_cluster_claim_conflicts_total{whose="own"} 0"#,
    ] {
        assert!(out.contains(line), "{line:?} not in:\n{out}");
    }
    let build = format!(
        r#"masq_build_info{{version="{}",commit="{}"}} 1"#,
        env!("CARGO_PKG_VERSION"),
        env!("MASQ_COMMIT")
    );
    assert!(out.contains(&build), "{out}");
    assert!(out.contains("# TYPE masq_cluster_up gauge"));
    let degraded = render(|| {
        Some(sample(Some(ClusterSample {
            connected: false,
            since: 5,
            revision: 0,
            certificate_not_after: None,
            claim_conflicts: [("peer", 0), ("own", 0)],
        })))
    });
    assert!(degraded.contains("masq_cluster_up 0\n"), "{degraded}");
}

/// sysfs' data counters count 4-octet words: they are served as bytes
/// only, never under their own names in words.
#[test]
fn port_data_is_served_in_bytes_and_packets_apart_from_other_counters() {
    let out = render(|| Some(sample(None)));
    for file in [
        "port_xmit_data",
        "port_rcv_data",
        "port_xmit_packets",
        "port_rcv_packets",
    ] {
        let label = format!(r#"counter="{file}""#);
        assert!(!out.contains(&label), "{label} in:\n{out}");
    }
    assert!(out.contains("# TYPE masq_rnic_port_bytes counter"), "{out}");
}

#[test]
fn file_mode_has_no_cluster_families_and_a_gone_masqd_only_its_events() {
    let out = render(|| Some(sample(None)));
    assert!(!out.contains("masq_cluster_"), "{out}");
    assert!(out.contains("masq_vpc_hosts 2\n"));
    let gone = render(|| None);
    assert!(gone.contains("masq_build_info{"));
    assert!(gone.contains("masq_admissions_total{"));
    assert!(!gone.contains("masq_sessions"), "{gone}");
}

/// The names a scrape's samples carry (`_total`, `_bucket` and all).
fn served_names(exposition: &str) -> std::collections::BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// Every `masq_*` name in the Prometheus rules, their unit tests and
/// the Grafana dashboard (packaging/) is one masqd serves: a renamed
/// metric cannot leave an alert or a panel looking at nothing.
#[test]
fn the_rules_and_dashboard_name_only_metrics_masqd_serves() {
    let served = served_names(&render(|| {
        Some(sample(Some(ClusterSample {
            connected: true,
            since: 1,
            revision: 1,
            certificate_not_after: Some(2_111_095_839),
            claim_conflicts: [("peer", 2), ("own", 0)],
        })))
    }));
    let files = [
        (
            "masq-rules.yml",
            include_str!("../../packaging/prometheus/masq-rules.yml"),
        ),
        (
            "masq-rules.test.yml",
            include_str!("../../packaging/prometheus/masq-rules.test.yml"),
        ),
        (
            "masq-dashboard.json",
            include_str!("../../packaging/grafana/masq-dashboard.json"),
        ),
    ];
    for (file, text) in files {
        let mut named = 0;
        for (at, _) in text.match_indices("masq_") {
            // A name starts here unless a name character comes before.
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                served.contains(&name),
                "{file} names {name}, which masqd does not serve: {served:?}"
            );
            named += 1;
        }
        assert!(named > 0, "{file} names no masq_ metric");
    }
}
