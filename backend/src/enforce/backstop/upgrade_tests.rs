//! Upgrades from an older masqd's table: its QPN-only sets, and the
//! nftables sets of the per-connection elements that the eBPF maps replace
//! (in a network namespace of the test's own, as `netns_tests`).

use super::netns_tests::{bset, flush, in_netns, nft, start, LOCAL, PEER, TABLE};
use crate::kernel::bpf_backstop::Key;
use std::net::Ipv4Addr;

/// An older masqd's table: the ingress sets keyed by QPN alone, with
/// elements, their rules, and VNI 200's, which no endpoint serves now.
const OLD_TABLE: &str = "add table inet masq_backstop
add set inet masq_backstop conn_in { typeof ip saddr . @th,104,24; }
add set inet masq_backstop tenant_qpns { typeof @th,104,24; }
add set inet masq_backstop ud_qpns { typeof @th,104,24; }
add map inet masq_backstop ud_from { typeof ip saddr . @th,200,24 : verdict; }
add element inet masq_backstop conn_in { 198.18.0.2 . 17 }
add element inet masq_backstop tenant_qpns { 17 }
add element inet masq_backstop ud_qpns { 18 }
add chain inet masq_backstop input { type filter hook input priority filter; policy accept; }
add rule inet masq_backstop input udp dport 4791 ip saddr . @th,104,24 @conn_in accept
add rule inet masq_backstop input udp dport 4791 @th,64,3 3 @th,104,24 @ud_qpns accept
add rule inet masq_backstop input udp dport 4791 @th,104,24 @tenant_qpns drop
";

fn old_vni(vni: u32) -> String {
    let t = format!("inet {TABLE}");
    format!(
        "add set {t} udq_{vni} {{ typeof @th,104,24; }}
         add element {t} udq_{vni} {{ 18 }}
         add chain {t} udvni_{vni}
         add rule {t} udvni_{vni} @th,104,24 @udq_{vni} accept
         add element {t} ud_from {{ 198.18.0.2 . {vni} : jump udvni_{vni} }}
"
    )
}

#[test]
fn an_older_masqds_qpn_only_sets_give_way_to_the_new_ones() {
    in_netns(|| {
        nft(&format!("{OLD_TABLE}{}{}", old_vni(100), old_vni(200))).expect("the old table");
        let (b, _p) = start("upgrade");
        for old in ["conn_in", "tenant_qpns", "ud_qpns", "udq_100", "udq_200"] {
            let e = nft(&format!("list set inet {TABLE} {old}")).expect_err(old);
            assert!(e.to_string().contains("No such file"), "{old}: {e}");
        }
        // The maps hold the old elements at this host's address (what a
        // QPN alone meant) until the reconcile rewrites them.
        assert_eq!(bset(&b, "conn_to"), ["198.18.0.2 . 198.18.0.1 . 17"]);
        assert_eq!(bset(&b, "tenant_qps"), ["198.18.0.1 . 17"]);
        // VNI 200's have no successor: no endpoint serves it now.
        assert_eq!(bset(&b, "ud_qps"), ["198.18.0.1 . 18 : 100"]);
        assert_eq!(bset(&b, "ud_from"), ["198.18.0.2 . 100 : 100"]);
        old_ud_gone();
        b.qp_seen(LOCAL, 0x12);
        flush(&b);
        drop(b);
        // A restart over the new table keeps the new sets' elements.
        let (b, _p2) = start("upgrade-again");
        assert_eq!(
            bset(&b, "tenant_qps"),
            ["198.18.0.1 . 17", "198.18.0.1 . 18"]
        );
    })
}

/// `counter` is among the backstop's drop counters (for the metrics).
fn assert_counted(b: &super::Backstop, counter: &str) {
    let names: Vec<String> = b
        .counters()
        .expect("counters")
        .into_iter()
        .map(|c| c.0)
        .collect();
    assert!(names.iter().any(|n| n == counter), "{counter}: {names:?}");
}

/// No set, map, chain or counter of nftables' UD checks is left.
fn old_ud_gone() {
    let t = format!("inet {TABLE}");
    let table = nft(&format!("list table {t}")).expect("the table");
    for old in [
        "ud_qps",
        "udq",
        "ud_from",
        "ud_in",
        "udvni_",
        "ud_ingress_drop",
        "hook input",
    ] {
        assert!(!table.contains(old), "{old} is left: {table}");
    }
}

/// The table of the masqd before the UD QPs' elements moved into the eBPF
/// maps: its UD ingress checks in nftables, VNI 100's QP 18 guarded and
/// host 198.18.0.2's UD QP 5 announced in it.
const UD_NFT_ERA_TABLE: &str = "add table inet masq_backstop
add set inet masq_backstop ud_qps { typeof ip daddr . @th,104,24; }
add map inet masq_backstop ud_from { typeof ip saddr . @th,200,24 : verdict; }
add counter inet masq_backstop ud_ingress_drop
add set inet masq_backstop udqp_100 { typeof ip daddr . @th,104,24; }
add chain inet masq_backstop udvni_100
add rule inet masq_backstop udvni_100 ip daddr . @th,104,24 @udqp_100 accept
add chain inet masq_backstop ud_in
add rule inet masq_backstop ud_in ip saddr . @th,200,24 vmap @ud_from
add rule inet masq_backstop ud_in counter name ud_ingress_drop drop
add chain inet masq_backstop input { type filter hook input priority filter; policy accept; }
add rule inet masq_backstop input udp dport 4791 @th,64,3 3 ip daddr . @th,104,24 @ud_qps goto ud_in
add rule inet masq_backstop input udp dport 4791 @th,64,3 3 accept
add element inet masq_backstop ud_qps { 198.18.0.1 . 18 }
add element inet masq_backstop udqp_100 { 198.18.0.1 . 18 }
add element inet masq_backstop ud_from { 198.18.0.2 . 5 : jump udvni_100 }
";

/// An upgrade from it: the UD QPs' elements are in the maps before its
/// chains stop reading its sets; then its sets, map, chains and counter
/// go, and the counter's name stays for the metrics.
#[test]
fn the_ud_checks_of_an_older_masqd_move_into_the_ebpf_maps() {
    in_netns(|| {
        nft(UD_NFT_ERA_TABLE).expect("the older table");
        let (b, _p) = start("ud-era");
        assert_eq!(bset(&b, "ud_qps"), ["198.18.0.1 . 18 : 100"]);
        assert_eq!(bset(&b, "ud_from"), ["198.18.0.2 . 5 : 100"]);
        old_ud_gone();
        assert_counted(&b, "ud_ingress_drop");
        drop(b);
        let (b, _p2) = start("ud-era-again");
        assert_eq!(bset(&b, "ud_from"), ["198.18.0.2 . 5 : 100"]);
    })
}

/// The table of the masqd before the eBPF maps: the per-connection
/// elements in nftables sets, read by the input chain and the endpoint's.
const NFT_ERA_TABLE: &str = "add table inet masq_backstop
add set inet masq_backstop conn_to { typeof ip saddr . ip daddr . @th,104,24; }
add set inet masq_backstop tenant_qps { typeof ip daddr . @th,104,24; }
add set inet masq_backstop eg_acme_a { typeof ip daddr . @th,104,24; }
add counter inet masq_backstop ingress_drop
add chain inet masq_backstop ep_acme_a
add rule inet masq_backstop ep_acme_a ip daddr . @th,104,24 @eg_acme_a accept
add chain inet masq_backstop input { type filter hook input priority filter; policy accept; }
add rule inet masq_backstop input udp dport 4791 ip saddr . ip daddr . @th,104,24 @conn_to accept
add rule inet masq_backstop input udp dport 4791 ip daddr . @th,104,24 @tenant_qps counter name ingress_drop drop
add element inet masq_backstop conn_to { 198.18.0.2 . 198.18.0.1 . 17 }
add element inet masq_backstop tenant_qps { 198.18.0.1 . 17 }
add element inet masq_backstop eg_acme_a { 198.18.0.2 . 34 }
";

/// An upgrade from it: its elements are in the maps before its chains stop
/// reading its sets, which then go, with its ingress counter.
#[test]
fn the_per_connection_sets_of_an_older_masqd_move_into_the_ebpf_maps() {
    in_netns(|| {
        nft(NFT_ERA_TABLE).expect("the older table");
        let (b, _p) = start("nft-era");
        assert_eq!(bset(&b, "conn_to"), ["198.18.0.2 . 198.18.0.1 . 17"]);
        assert_eq!(bset(&b, "tenant_qps"), ["198.18.0.1 . 17"]);
        assert_eq!(bset(&b, "eg_acme_a"), ["198.18.0.2 . 34"]);
        for old in ["conn_to", "tenant_qps", "eg_acme_a"] {
            let e = nft(&format!("list set inet {TABLE} {old}")).expect_err(old);
            assert!(e.to_string().contains("No such file"), "{old}: {e}");
        }
        let e = nft(&format!("list counter inet {TABLE} ingress_drop"));
        assert!(e.is_err(), "the eBPF program counts those: {e:?}");
        let chain = nft(&format!("list chain inet {TABLE} ep_acme_a")).expect("rewritten");
        assert!(!chain.contains("@eg_"), "{chain}");
        // The counters' names stay, for the metrics.
        assert_counted(&b, "ingress_drop");
        drop(b);
        let (b, _p2) = start("nft-era-again");
        assert_eq!(bset(&b, "eg_acme_a"), ["198.18.0.2 . 34"]);
    })
}

#[test]
fn an_old_sets_elements_are_carried_to_every_rail_address() {
    use super::rules::old_keys;
    let rails = [LOCAL, Ipv4Addr::new(203, 0, 113, 1)];
    let rail1 = rails[1];
    let conn_in = r#"{"nftables": [{"metainfo": {}}, {"set": {"name": "conn_in",
        "elem": [{"concat": ["198.18.0.2", 17]}]}}]}"#;
    assert_eq!(
        old_keys("conn_in", conn_in, &rails, |_| None),
        [Key::ConnTo(PEER, LOCAL, 17), Key::ConnTo(PEER, rail1, 17)]
    );
    let tenant_qpns = r#"{"nftables": [{"set": {"name": "tenant_qpns", "elem": [17]}}]}"#;
    assert_eq!(
        old_keys("tenant_qpns", tenant_qpns, &rails, |_| None),
        [Key::TenantQp(LOCAL, 17), Key::TenantQp(rail1, 17)]
    );
    // The nftables sets of the per-connection elements, as they were.
    let eg = r#"{"nftables": [{"set": {"name": "eg_acme_a",
        "elem": [{"concat": ["198.18.0.2", 34]}]}}]}"#;
    assert_eq!(
        old_keys("eg_acme_a", eg, &rails, |id| (id == "acme_a").then_some(5)),
        [Key::Egress(5, PEER, 34)]
    );
    let conn_to = r#"{"nftables": [{"set": {"name": "conn_to",
        "elem": [{"concat": ["198.18.0.2", "203.0.113.1", 17]}]}}]}"#;
    assert_eq!(
        old_keys("conn_to", conn_to, &rails, |_| None),
        [Key::ConnTo(PEER, rail1, 17)]
    );
    let udq = r#"{"nftables": [{"set": {"name": "udq_100", "elem": [18, 19]}}]}"#;
    assert_eq!(
        old_keys("udq_100", udq, &rails[..1], |_| None),
        [Key::UdQp(LOCAL, 18, 100), Key::UdQp(LOCAL, 19, 100)]
    );
    let udqp = r#"{"nftables": [{"set": {"name": "udqp_7",
        "elem": [{"concat": ["203.0.113.1", 18]}]}}]}"#;
    assert_eq!(
        old_keys("udqp_7", udqp, &rails, |_| None),
        [Key::UdQp(rail1, 18, 7)]
    );
    let ud_from = r#"{"nftables": [{"map": {"name": "ud_from", "map": "verdict",
        "elem": [[{"concat": ["198.18.0.2", 5]}, {"jump": {"target": "udvni_7"}}]]}}]}"#;
    assert_eq!(
        old_keys("ud_from", ud_from, &rails, |_| None),
        [Key::UdFrom(PEER, 5, 7)]
    );
    // ud_qps holds nothing the VNIs' sets do not; an empty set, nothing.
    assert!(old_keys("ud_qps", udqp, &rails, |_| None).is_empty());
    let empty = r#"{"nftables": [{"set": {"name": "tenant_qpns"}}]}"#;
    assert!(old_keys("tenant_qpns", empty, &rails, |_| None).is_empty());
}
