//! The backstop against real nftables, in a network namespace of the
//! test's own (root): the ruleset as `start` installs it, the set updates
//! as the netlink path applies them, read back with `nft -j list`.

use super::Backstop;
use crate::config::Config;
use crate::kernel::nft_set::{in_new_netns, listed};
use rconntrack::{Entry, Event, EventKind, QpType, State};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

const TABLE: &str = super::TABLE;
const PEER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

/// The backstop's cgroup parent for one test, gone with it.
struct Parent(String);

impl Drop for Parent {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(
            PathBuf::from(crate::enforce::rdma_cgroup::CGROUP_ROOT).join(&self.0),
        );
    }
}

fn start(test: &str) -> (Backstop, Parent) {
    let parent = Parent(format!("masq-test-{}-{test}", std::process::id()));
    let cfg = Config::parse(
        &format!(
            "device: rxe0
underlay: {{ netdev: eth0, ip: 198.18.0.1 }}
backstop: {{ cgroupParent: {} }}
endpoints:
  - {{ name: acme-a, tenant: acme, vni: 100, vip: 10.0.0.1, netns: /run/netns/acme-a }}
vpc:
  - {{ tenant: acme, vni: 100, vip: 10.0.0.1, host: 198.18.0.1, name: acme-a }}
",
            parent.0
        ),
        "t.yaml",
    )
    .expect("config");
    let b = Backstop::start(&cfg, &cfg.endpoints).expect("the backstop's ruleset");
    (b, parent)
}

fn flush(b: &Backstop) {
    b.flush_updates(Duration::ZERO);
}

fn set(name: &str) -> Vec<String> {
    listed(TABLE, name)
}

fn rc(local_qpn: u32, remote_qpn: u32, state: State) -> Entry {
    Entry {
        session: 1,
        qp_handle: local_qpn,
        tenant: "acme".into(),
        vni: 100,
        local_vip: Ipv4Addr::new(10, 0, 0, 1),
        local_qpn,
        remote_vip: Ipv4Addr::new(10, 0, 0, 2),
        remote_qpn,
        peer_host: PEER,
        qp_type: QpType::Rc,
        state,
        ..Default::default()
    }
}

fn ev(event: EventKind, entry: Entry) -> Event {
    Event { event, entry }
}

#[test]
fn the_sets_hold_the_keys_of_exactly_what_masqd_admitted() {
    in_new_netns(|| {
        let (b, _p) = start("keys");
        // QPNs and hosts whose bytes all differ: a wrong byte order would
        // list as other numbers.
        b.qp_seen(0x12_3456);
        flush(&b);
        assert_eq!(set("tenant_qpns"), ["1193046"]);

        let conn = rc(0x12_3456, 0xab_cdef, State::Admitted);
        b.apply(&[ev(EventKind::New, conn.clone())]);
        flush(&b);
        assert_eq!(set("eg_acme_a"), ["198.18.0.2 . 11259375"]);
        assert_eq!(set("conn_in"), ["198.18.0.2 . 1193046"]);

        b.ud_local(100, 0x01_0203, true);
        b.ud_remote(PEER, 0x0a_0b0c, 100, true);
        let ah = Entry {
            qp_handle: 99,
            qp_type: QpType::Ud,
            state: State::Established,
            ..rc(0, 0, State::Established)
        };
        b.apply(&[ev(EventKind::New, ah.clone())]);
        flush(&b);
        assert_eq!(set("udq_100"), ["66051"]);
        assert_eq!(set("ud_qpns"), ["66051"]);
        assert_eq!(set("ud_from"), ["198.18.0.2 . 658188 : jump udvni_100"]);
        assert_eq!(set("ud_acme_a"), ["198.18.0.2"]);

        // A policy reset cuts the connection; then everything goes.
        let reset = Entry {
            state: State::ResetByPolicy,
            ..conn.clone()
        };
        b.apply(&[ev(EventKind::Update, reset)]);
        flush(&b);
        assert!(set("eg_acme_a").is_empty());
        assert!(set("conn_in").is_empty());
        assert_eq!(set("tenant_qpns"), ["1193046"]);

        b.apply(&[ev(EventKind::Destroy, conn), ev(EventKind::Destroy, ah)]);
        b.qp_gone(0x12_3456);
        b.ud_local(100, 0x01_0203, false);
        b.ud_remote(PEER, 0x0a_0b0c, 100, false);
        flush(&b);
        for s in ["tenant_qpns", "udq_100", "ud_qpns", "ud_from", "ud_acme_a"] {
            assert!(set(s).is_empty(), "{s}: {:?}", set(s));
        }
    })
}

#[test]
fn an_update_that_fails_costs_only_itself_not_the_updates_batched_with_it() {
    in_new_netns(|| {
        let (b, _p) = start("absent");
        b.qp_seen(1);
        b.qp_seen(2);
        flush(&b);
        assert_eq!(set("tenant_qpns"), ["1", "2"]);
        // Gone behind masqd's back: deleting it fails, and with it the
        // batch; each update is then tried alone, as with libnftables.
        crate::kernel::nft::Nft::new()
            .unwrap()
            .run(&format!("delete element inet {TABLE} tenant_qpns {{ 1 }}"))
            .expect("deleted by hand");
        b.qp_gone(1);
        b.qp_seen(3);
        b.apply(&[ev(EventKind::New, rc(2, 7, State::Admitted))]);
        flush(&b);
        assert_eq!(set("tenant_qpns"), ["2", "3"]);
        assert_eq!(set("conn_in"), ["198.18.0.2 . 2"]);
        assert_eq!(set("eg_acme_a"), ["198.18.0.2 . 7"]);
    })
}

#[test]
fn the_reconcile_rewrites_the_sets_in_the_same_keys() {
    in_new_netns(|| {
        let (b, _p) = start("reconcile");
        b.qp_seen(0x12_3456);
        b.apply(&[ev(
            EventKind::New,
            rc(0x12_3456, 0xab_cdef, State::Admitted),
        )]);
        flush(&b);
        // An element nobody re-registered, as after a restart.
        crate::kernel::nft::Nft::new()
            .unwrap()
            .run(&format!("add element inet {TABLE} tenant_qpns {{ 9 }}"))
            .expect("added by hand");
        b.reconcile();
        assert_eq!(set("tenant_qpns"), ["1193046"]);
        assert_eq!(set("conn_in"), ["198.18.0.2 . 1193046"]);
        assert_eq!(set("eg_acme_a"), ["198.18.0.2 . 11259375"]);
    })
}

#[test]
fn the_drop_counters_are_read_without_libnftables_and_a_lost_table_is_an_error() {
    in_new_netns(|| {
        let (b, _p) = start("counters");
        let mut names: Vec<String> = b
            .counters()
            .expect("counters")
            .into_iter()
            .map(|(name, packets, bytes)| {
                assert_eq!((packets, bytes), (0, 0), "{name}");
                name
            })
            .collect();
        names.sort();
        assert!(names.contains(&"drop_acme_a".to_string()), "{names:?}");
        assert!(names.contains(&"ingress_drop".to_string()), "{names:?}");
        crate::kernel::nft::Nft::new()
            .unwrap()
            .run(&format!("delete table inet {TABLE}"))
            .expect("deleted by hand");
        let e = b.counters().expect_err("no table");
        assert!(e.contains("the table is gone"), "{e}");
    })
}

#[test]
fn a_waiting_admission_runs_its_transaction_on_its_own_thread() {
    in_new_netns(|| {
        let (b, _p) = start("own-thread");
        // No updater thread runs here: only the waiting thread can apply.
        b.hold();
        b.qp_seen(0x12_3456);
        b.apply(&[ev(
            EventKind::New,
            rc(0x12_3456, 0xab_cdef, State::Admitted),
        )]);
        let t = std::time::Instant::now();
        assert!(b.wait_applied(Duration::from_secs(5)), "applied");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        b.release();
        assert_eq!(set("tenant_qpns"), ["1193046"]);
        assert_eq!(set("conn_in"), ["198.18.0.2 . 1193046"]);
        assert_eq!(set("eg_acme_a"), ["198.18.0.2 . 11259375"]);
        // Nothing queued: the wait is over at once.
        assert!(b.wait_applied(Duration::ZERO));
    })
}

#[test]
fn admissions_at_once_all_get_their_elements_with_the_updater_running_too() {
    in_new_netns(|| {
        let (b, _p) = start("load");
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    b.flush_updates(Duration::from_millis(20));
                }
            });
            let admitting: Vec<_> = (1..=8u32)
                .map(|t| {
                    let b = &b;
                    s.spawn(move || {
                        for i in 0..25u32 {
                            let qpn = t << 16 | i;
                            b.hold();
                            b.qp_seen(qpn);
                            b.apply(&[ev(EventKind::New, rc(qpn, qpn + 1, State::Admitted))]);
                            assert!(b.wait_applied(Duration::from_secs(5)), "{qpn:#x}");
                            b.release();
                            // A deletion nobody waits for, too.
                            if i % 5 == 0 {
                                b.qp_seen(qpn | 0x8000);
                                b.qp_gone(qpn | 0x8000);
                            }
                        }
                    })
                })
                .collect();
            for a in admitting {
                a.join().expect("admitting thread");
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        b.flush_updates(Duration::ZERO);
        assert_eq!(set("tenant_qpns").len(), 200);
        assert_eq!(set("conn_in").len(), 200);
        assert_eq!(set("eg_acme_a").len(), 200);
    })
}

/// Not a check: what adding one element costs through libnftables' text
/// and through netlink, with the backstop's ruleset installed. Run with
/// `cargo test --release -- --ignored --nocapture one_element_costs`.
#[test]
#[ignore]
fn one_element_costs() {
    in_new_netns(|| {
        let (b, _p) = start("cost");
        let nft = crate::kernel::nft::Nft::new().unwrap();
        let sets = crate::kernel::nft_set::NftSets::open(TABLE).unwrap();
        let n = 500u32;
        let median = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let mut text = Vec::new();
        for q in 1..=n {
            let t = std::time::Instant::now();
            nft.run(&format!("add element inet {TABLE} tenant_qpns {{ {q} }}"))
                .unwrap();
            text.push(t.elapsed());
        }
        let mut netlink = Vec::new();
        for q in n + 1..=2 * n {
            let t = std::time::Instant::now();
            sets.apply(&[crate::kernel::nft_set::Change::Add(
                super::rules::tenant_qpn(q),
            )])
            .unwrap();
            netlink.push(t.elapsed());
        }
        let mut backstop = Vec::new();
        for q in 2 * n + 1..=3 * n {
            let t = std::time::Instant::now();
            b.qp_seen(q);
            b.flush_updates(Duration::ZERO);
            backstop.push(t.elapsed());
        }
        // An admission as an RTR makes it: its QPN and its connection,
        // waited for on its own thread, the updater thread running.
        let stop = std::sync::atomic::AtomicBool::new(false);
        let mut admission = Vec::new();
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    b.flush_updates(Duration::from_millis(20));
                }
            });
            for q in 3 * n + 1..=4 * n {
                let t = std::time::Instant::now();
                b.hold();
                b.qp_seen(q);
                b.apply(&[ev(EventKind::New, rc(q, q, State::Admitted))]);
                assert!(b.wait_applied(Duration::from_secs(5)));
                b.release();
                admission.push(t.elapsed());
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        eprintln!(
            "one element, median of {n}: libnftables {:?}, netlink {:?}, backstop qp_seen+flush {:?}; \
             an admission's three elements and its wait {:?}",
            median(text),
            median(netlink),
            median(backstop),
            median(admission)
        );
        assert_eq!(set("tenant_qpns").len(), 4 * n as usize);
    })
}
