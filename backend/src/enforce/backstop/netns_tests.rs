//! The backstop against real nftables and eBPF, in a network namespace
//! of the test's own (root): the ruleset as `start` installs it, the set
//! updates as the netlink path applies them, read back with `nft -j
//! list`, and the per-connection elements as the eBPF maps hold them
//! (pinned in a bpffs of the test's thread, kept across its restarts).

use super::Backstop;
use crate::config::Config;
use crate::kernel::bpf_backstop::tests::{sh, Bpffs};
use crate::kernel::bpf_backstop::Key;
use crate::kernel::nft_set::{in_new_netns, listed};
use crate::pipeline::ports::{Removal, BATCHED_DELETIONS_WAIT};
use nix::sched::CloneFlags;
use rconntrack::{Entry, Event, EventKind, QpType, State};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

pub(super) const TABLE: &str = super::TABLE;
pub(super) const PEER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// This host's underlay address (its only rail's, but in `two_rails`).
pub(super) const LOCAL: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

/// `in_new_netns`, in a mount namespace of the thread's own too, with
/// cgroup v2 at `CGROUP_ROOT` (mounted there if the host has it elsewhere,
/// as a hybrid host does): the eBPF egress program attaches only to a
/// real cgroup.
pub(super) fn in_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    in_new_netns(move || {
        nix::sched::unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_FS)
            .expect("a mount namespace of the test's own");
        sh(&["mount", "--make-rprivate", "/"]);
        let root = crate::enforce::rdma_cgroup::CGROUP_ROOT;
        let is_v2 = nix::sys::statfs::statfs(root)
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC);
        if !is_v2 {
            sh(&["mount", "-t", "cgroup2", "cgroup2", root]);
        }
        f()
    })
}

/// The backstop's cgroup parent for one test, gone with it.
pub(super) struct Parent(String);

impl Drop for Parent {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(
            PathBuf::from(crate::enforce::rdma_cgroup::CGROUP_ROOT).join(&self.0),
        );
    }
}

pub(super) fn start(test: &str) -> (Backstop, Parent) {
    start_with(
        test,
        "device: rxe0
underlay: { netdev: eth0, ip: 198.18.0.1 }
endpoints:
  - { name: acme-a, tenant: acme, vni: 100, vip: 10.0.0.1, netns: /run/netns/acme-a }
vpc:
  - { tenant: acme, vni: 100, vip: 10.0.0.1, host: 198.18.0.1, name: acme-a }
",
    )
}

thread_local! {
    /// A bpffs for the eBPF pins of one test thread: every start in the
    /// thread (a restart in the test) finds the maps the one before left.
    static PINS: Bpffs = Bpffs::new();
}

/// The backstop of config `yaml`, with a cgroup parent of the test's own,
/// the rails' netdevs made in the test's namespace (veths) for the eBPF
/// ingress program.
fn start_with(test: &str, yaml: &str) -> (Backstop, Parent) {
    let parent = Parent(format!("masq-test-{}-{test}", std::process::id()));
    let pins = PINS.with(|p| p.path().join("masq"));
    let yaml = format!(
        "backstop: {{ cgroupParent: {}, bpfDir: {} }}\n{yaml}",
        parent.0,
        pins.display()
    );
    let cfg = Config::parse(&yaml, "t.yaml").expect("config");
    for r in &cfg.rails {
        // There already after a restart in the same test.
        let peer = format!("{}p", r.underlay.netdev);
        let _ = std::process::Command::new("ip")
            .args([
                "link",
                "add",
                &r.underlay.netdev,
                "type",
                "veth",
                "peer",
                "name",
                &peer,
            ])
            .output();
    }
    let b = Backstop::start(&cfg, &cfg.endpoints).expect("the backstop's ruleset");
    (b, parent)
}

/// The elements of a set that lives in the eBPF maps (`conn_to`,
/// `tenant_qps`, `eg_<endpoint>`; `ud_qps` and `ud_from` with their VNI
/// after a colon), written as nft lists them, sorted.
pub(super) fn bset(b: &Backstop, name: &str) -> Vec<String> {
    let mut bpf = super::rules::lock(&b.bpf);
    let ep = name
        .strip_prefix("eg_")
        .map(|id| bpf.endpoint_number(id).expect("a number"));
    let mut out: Vec<String> = bpf
        .elements()
        .into_iter()
        .filter_map(|k| match k {
            Key::ConnTo(p, l, q) if name == "conn_to" => Some(format!("{p} . {l} . {q}")),
            Key::TenantQp(l, q) if name == "tenant_qps" => Some(format!("{l} . {q}")),
            Key::Egress(n, h, q) if Some(n) == ep => Some(format!("{h} . {q}")),
            Key::UdQp(l, q, v) if name == "ud_qps" => Some(format!("{l} . {q} : {v}")),
            Key::UdFrom(h, q, v) if name == "ud_from" => Some(format!("{h} . {q} : {v}")),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

pub(super) fn flush(b: &Backstop) {
    b.flush_updates(Duration::ZERO);
}

pub(super) fn set(name: &str) -> Vec<String> {
    listed(TABLE, name)
}

pub(super) fn nft(cmd: &str) -> crate::error::Result<String> {
    crate::kernel::nft::Nft::new()?.run(cmd)
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
    in_netns(|| {
        let (b, _p) = start("keys");
        // QPNs and hosts whose bytes all differ: a wrong byte order would
        // list as other numbers.
        b.qp_seen(LOCAL, 0x12_3456);
        flush(&b);
        assert_eq!(bset(&b, "tenant_qps"), ["198.18.0.1 . 1193046"]);

        let conn = rc(0x12_3456, 0xab_cdef, State::Admitted);
        b.apply(&[ev(EventKind::New, conn.clone())], Removal::Now);
        flush(&b);
        assert_eq!(bset(&b, "eg_acme_a"), ["198.18.0.2 . 11259375"]);
        assert_eq!(bset(&b, "conn_to"), ["198.18.0.2 . 198.18.0.1 . 1193046"]);

        b.ud_local(LOCAL, 100, 0x01_0203, true);
        b.ud_remote(PEER, 0x0a_0b0c, 100, true);
        let ah = Entry {
            qp_handle: 99,
            qp_type: QpType::Ud,
            state: State::Established,
            ..rc(0, 0, State::Established)
        };
        b.apply(&[ev(EventKind::New, ah.clone())], Removal::Now);
        flush(&b);
        assert_eq!(bset(&b, "ud_qps"), ["198.18.0.1 . 66051 : 100"]);
        assert_eq!(bset(&b, "ud_from"), ["198.18.0.2 . 658188 : 100"]);
        assert_eq!(set("ud_acme_a"), ["198.18.0.2"]);

        // A policy reset cuts the connection; then everything goes.
        let reset = Entry {
            state: State::ResetByPolicy,
            ..conn.clone()
        };
        b.apply(&[ev(EventKind::Update, reset)], Removal::Now);
        flush(&b);
        assert!(bset(&b, "eg_acme_a").is_empty());
        assert!(bset(&b, "conn_to").is_empty());
        assert_eq!(bset(&b, "tenant_qps"), ["198.18.0.1 . 1193046"]);

        b.apply(
            &[ev(EventKind::Destroy, conn), ev(EventKind::Destroy, ah)],
            Removal::Now,
        );
        b.qp_gone(LOCAL, 0x12_3456, Removal::Now);
        b.ud_local(LOCAL, 100, 0x01_0203, false);
        b.ud_remote(PEER, 0x0a_0b0c, 100, false);
        flush(&b);
        for s in ["tenant_qps", "ud_qps", "ud_from"] {
            assert!(bset(&b, s).is_empty(), "{s}: {:?}", bset(&b, s));
        }
        assert!(set("ud_acme_a").is_empty());
    })
}

#[test]
fn an_update_that_fails_costs_only_itself_not_the_updates_batched_with_it() {
    in_netns(|| {
        let (b, _p) = start("absent");
        let to = |h| ah(h, Ipv4Addr::new(198, 18, 0, h as u8));
        b.apply(
            &[ev(EventKind::New, to(2)), ev(EventKind::New, to(3))],
            Removal::Now,
        );
        flush(&b);
        assert_eq!(set("ud_acme_a"), ["198.18.0.2", "198.18.0.3"]);
        // Gone behind masqd's back: deleting it fails, and with it the
        // batch; each update is then tried alone, as with libnftables.
        nft(&format!(
            "delete element inet {TABLE} ud_acme_a {{ 198.18.0.2 }}"
        ))
        .expect("deleted by hand");
        b.apply(&[ev(EventKind::Destroy, to(2))], Removal::Now);
        b.apply(&[ev(EventKind::New, to(4))], Removal::Now);
        // The eBPF maps' elements are not in the transaction: they go in
        // whatever befalls it.
        b.qp_seen(LOCAL, 2);
        b.apply(
            &[ev(EventKind::New, rc(2, 7, State::Admitted))],
            Removal::Now,
        );
        flush(&b);
        assert_eq!(set("ud_acme_a"), ["198.18.0.3", "198.18.0.4"]);
        assert_eq!(bset(&b, "tenant_qps"), ["198.18.0.1 . 2"]);
        assert_eq!(bset(&b, "conn_to"), ["198.18.0.2 . 198.18.0.1 . 2"]);
        assert_eq!(bset(&b, "eg_acme_a"), ["198.18.0.2 . 7"]);
    })
}

#[test]
fn the_reconcile_rewrites_the_sets_in_the_same_keys() {
    in_netns(|| {
        let (b, _p) = start("reconcile");
        b.qp_seen(LOCAL, 0x12_3456);
        b.apply(
            &[ev(
                EventKind::New,
                rc(0x12_3456, 0xab_cdef, State::Admitted),
            )],
            Removal::Now,
        );
        flush(&b);
        // Elements nobody re-registered, as after a restart.
        let mut bpf = super::rules::lock(&b.bpf);
        bpf.insert(Key::TenantQp(LOCAL, 9)).expect("added by hand");
        bpf.insert(Key::ConnTo(PEER, LOCAL, 9))
            .expect("added by hand");
        drop(bpf);
        b.reconcile();
        assert_eq!(bset(&b, "tenant_qps"), ["198.18.0.1 . 1193046"]);
        assert_eq!(bset(&b, "conn_to"), ["198.18.0.2 . 198.18.0.1 . 1193046"]);
        assert_eq!(bset(&b, "eg_acme_a"), ["198.18.0.2 . 11259375"]);
    })
}

/// Two rails: endpoint `a` on rxe0 at 198.18.0.1, its further device
/// `a-r1` on rxe1 at 203.0.113.1.
const TWO_RAILS: &str = crate::config::tests::RAILS;

#[test]
fn the_same_qpn_on_two_devices_is_two_elements_one_per_rails_address() {
    in_netns(|| {
        let (b, _p) = start_with("rails", TWO_RAILS);
        let rail1 = Ipv4Addr::new(203, 0, 113, 1);
        // QP 0x11 on each device, both connected to the same peer QP: the
        // peer admitted to one must not reach the other.
        let on_rxe0 = rc(0x11, 0x22, State::Admitted);
        let on_rxe1 = Entry {
            qp_handle: 2,
            vni: 101,
            local_vip: Ipv4Addr::new(10, 1, 0, 1),
            remote_vip: Ipv4Addr::new(10, 1, 0, 2),
            rail: Some("rail1".into()),
            ..on_rxe0.clone()
        };
        b.qp_seen(LOCAL, 0x11);
        b.qp_seen(rail1, 0x11);
        b.ud_local(LOCAL, 100, 0x12, true);
        b.ud_local(rail1, 101, 0x12, true);
        b.apply(
            &[
                ev(EventKind::New, on_rxe0.clone()),
                ev(EventKind::New, on_rxe1),
            ],
            Removal::Now,
        );
        flush(&b);
        assert_eq!(
            bset(&b, "conn_to"),
            [
                "198.18.0.2 . 198.18.0.1 . 17",
                "198.18.0.2 . 203.0.113.1 . 17"
            ]
        );
        assert_eq!(
            bset(&b, "tenant_qps"),
            ["198.18.0.1 . 17", "203.0.113.1 . 17"]
        );
        assert_eq!(
            bset(&b, "ud_qps"),
            ["198.18.0.1 . 18 : 100", "203.0.113.1 . 18 : 101"]
        );
        // Both devices' apps send from a's cgroup: one egress element.
        assert_eq!(bset(&b, "eg_a"), ["198.18.0.2 . 34"]);

        // rxe0's QP goes; rxe1's keeps all of its elements.
        b.apply(&[ev(EventKind::Destroy, on_rxe0)], Removal::Now);
        b.qp_gone(LOCAL, 0x11, Removal::Now);
        b.ud_local(LOCAL, 100, 0x12, false);
        flush(&b);
        let left = || {
            assert_eq!(bset(&b, "conn_to"), ["198.18.0.2 . 203.0.113.1 . 17"]);
            assert_eq!(bset(&b, "tenant_qps"), ["203.0.113.1 . 17"]);
            assert_eq!(bset(&b, "ud_qps"), ["203.0.113.1 . 18 : 101"]);
            assert_eq!(bset(&b, "eg_a"), ["198.18.0.2 . 34"]);
        };
        left();
        // The reconcile writes the same keys.
        b.reconcile();
        left();
    })
}

/// A RoCE packet (an RC SEND's BTH) from `from` to QP `qpn` at `to`.
fn send_roce(from: Ipv4Addr, to: Ipv4Addr, qpn: u32) {
    let s = std::net::UdpSocket::bind((from, 0)).expect("bind");
    let mut bth = [0u8; 12];
    bth[0] = 0x04; // RC SEND_ONLY: not UD
    bth[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    s.send_to(&bth, (to, super::ROCE_PORT)).expect("send");
}

fn ingress_drops(b: &Backstop) -> u64 {
    let c = b.counters().expect("counters");
    c.iter().find(|c| c.0 == "ingress_drop").map_or(0, |c| c.1)
}

#[test]
fn a_peer_admitted_to_one_devices_qp_cannot_reach_the_same_qpn_on_another() {
    in_netns(|| {
        // Both rails' addresses and the peer's on lo: its packets cross
        // the input hook as a wire's would.
        for a in ["198.18.0.1/32", "203.0.113.1/32", "198.18.0.2/32"] {
            let ok = std::process::Command::new("ip")
                .args(["addr", "add", a, "dev", "lo"])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "ip addr add {a}");
        }
        let up = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status();
        assert!(up.is_ok_and(|s| s.success()), "lo up");
        let (b, _p) = start_with("reach", TWO_RAILS);
        // Here the rails' packets cross lo: the ingress program goes there.
        super::rules::lock(&b.bpf)
            .guard_netdev("lo")
            .expect("on lo");
        let rail1 = Ipv4Addr::new(203, 0, 113, 1);
        b.qp_seen(LOCAL, 0x11);
        b.qp_seen(rail1, 0x11);
        b.apply(
            &[ev(EventKind::New, rc(0x11, 0x22, State::Admitted))],
            Removal::Now,
        );
        flush(&b);
        send_roce(PEER, LOCAL, 0x11);
        send_roce(PEER, rail1, 0x11);
        let t = std::time::Instant::now();
        while ingress_drops(&b) == 0 && t.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(ingress_drops(&b), 1, "rxe1's QP 0x11 only");
    })
}

#[test]
fn the_drop_counters_are_read_without_libnftables_and_a_lost_table_is_an_error() {
    in_netns(|| {
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
        nft(&format!("delete table inet {TABLE}")).expect("deleted by hand");
        let e = b.counters().expect_err("no table").to_string();
        assert!(e.contains("the table is gone"), "{e}");
    })
}

#[test]
fn a_waiting_admission_runs_its_transaction_on_its_own_thread() {
    in_netns(|| {
        let (b, _p) = start("own-thread");
        // No updater thread runs here: only the waiting thread can apply.
        b.hold();
        b.qp_seen(LOCAL, 0x12_3456);
        b.apply(
            &[ev(
                EventKind::New,
                rc(0x12_3456, 0xab_cdef, State::Admitted),
            )],
            Removal::Now,
        );
        let t = std::time::Instant::now();
        assert!(b.wait_applied(Duration::from_secs(5)), "applied");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        b.release();
        assert_eq!(bset(&b, "tenant_qps"), ["198.18.0.1 . 1193046"]);
        assert_eq!(bset(&b, "conn_to"), ["198.18.0.2 . 198.18.0.1 . 1193046"]);
        assert_eq!(bset(&b, "eg_acme_a"), ["198.18.0.2 . 11259375"]);
        // Nothing queued: the wait is over at once.
        assert!(b.wait_applied(Duration::ZERO));
    })
}

/// An address handle of `acme-a` to `host`: element `host` of
/// `ud_acme_a`, an nftables set (the eBPF maps' elements are not queued).
fn ah(qp_handle: u32, host: Ipv4Addr) -> Entry {
    Entry {
        qp_handle,
        qp_type: QpType::Ud,
        peer_host: host,
        ..rc(0, 0, State::Established)
    }
}

#[test]
fn the_maps_elements_are_in_force_as_the_table_changes_with_no_queue() {
    in_netns(|| {
        let (b, _p) = start("direct");
        // No updater thread, no flush, no wait: the admission's elements
        // are in the maps once the table's events are mirrored.
        let conn = rc(0x31, 0x41, State::Admitted);
        b.qp_seen(LOCAL, 0x31);
        b.apply(&[ev(EventKind::New, conn.clone())], Removal::Now);
        assert_eq!(bset(&b, "tenant_qps"), ["198.18.0.1 . 49"]);
        assert_eq!(bset(&b, "conn_to"), ["198.18.0.2 . 198.18.0.1 . 49"]);
        assert_eq!(bset(&b, "eg_acme_a"), ["198.18.0.2 . 65"]);
        assert!(b.wait_applied(Duration::ZERO), "nothing was queued");
        // A gone QP's are deleted at once too: no batch to wait for.
        b.apply(&[ev(EventKind::Destroy, conn.clone())], Removal::Gone);
        b.qp_gone(LOCAL, 0x31, Removal::Gone);
        for s in ["tenant_qps", "conn_to", "eg_acme_a"] {
            assert!(bset(&b, s).is_empty(), "{s}: {:?}", bset(&b, s));
        }
        // Its QPN at once again, towards the same peer.
        b.qp_seen(LOCAL, 0x31);
        b.apply(&[ev(EventKind::New, conn)], Removal::Now);
        assert_eq!(bset(&b, "conn_to"), ["198.18.0.2 . 198.18.0.1 . 49"]);
        assert!(b.wait_applied(Duration::ZERO), "nothing was queued");
    })
}

/// At the eBPF maps' bound (262,144 elements each): an element the kernel
/// refuses is told to the thread that put it in (`take_refused`, which its
/// RTR asks, to fail closed), once, and to no other thread.
#[test]
fn a_full_maps_refusal_is_told_to_the_thread_that_met_it() {
    use crate::pipeline::ports::Guard;
    in_netns(|| {
        let (b, _p) = start("full");
        let filled = {
            let mut bpf = super::rules::lock(&b.bpf);
            let mut q = 0u32;
            while bpf.insert(Key::TenantQp(PEER, q)).is_ok() {
                q += 1;
            }
            q
        };
        assert_eq!(filled, 262_144);
        assert!(!b.take_refused(), "nothing refused to the backstop yet");
        b.qp_seen(LOCAL, 0x31);
        let other = std::thread::scope(|s| s.spawn(|| b.take_refused()).join());
        assert!(!other.expect("another thread"), "another thread's refusal");
        assert!(b.take_refused(), "refused: the map is full");
        assert!(!b.take_refused(), "told once");
        // Room again: the next one goes in.
        b.qp_gone(LOCAL, 0x31, Removal::Now);
        super::rules::lock(&b.bpf)
            .remove(Key::TenantQp(PEER, 0))
            .expect("removed");
        b.qp_seen(LOCAL, 0x31);
        assert!(!b.take_refused());
        assert!(bset(&b, "tenant_qps").contains(&"198.18.0.1 . 49".to_string()));
    })
}

#[test]
fn a_gone_qps_deletions_wait_for_company_but_never_outlast_a_reuse_of_its_element() {
    in_netns(|| {
        let (b, _p) = start("gone");
        const PEER2: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
        let first = ah(99, PEER);
        b.apply(&[ev(EventKind::New, first.clone())], Removal::Now);
        flush(&b);
        assert_eq!(set("ud_acme_a"), ["198.18.0.2"]);
        // Destroyed: the updater waits for company, then deletes.
        let gone = |b: &Backstop, e: &Entry| {
            b.apply(&[ev(EventKind::Destroy, e.clone())], Removal::Gone);
        };
        let t = std::time::Instant::now();
        gone(&b, &first);
        b.flush_updates(Duration::from_secs(5));
        assert!(t.elapsed() >= BATCHED_DELETIONS_WAIT, "{:?}", t.elapsed());
        assert!(set("ud_acme_a").is_empty());

        // Its element comes back at once, for an AH to the same host: the
        // deletion would take it out after the addition, so the admission
        // runs the queue in order, the old deletion first.
        b.apply(&[ev(EventKind::New, first.clone())], Removal::Now);
        flush(&b);
        gone(&b, &first);
        let second = ah(100, PEER);
        b.hold();
        b.apply(&[ev(EventKind::New, second.clone())], Removal::Now);
        assert!(b.wait_applied(Duration::from_secs(5)));
        b.release();
        assert_eq!(set("ud_acme_a"), ["198.18.0.2"]);

        // An admission of another element does not take it along: it
        // waits for its batch, the admission's element is in at once.
        gone(&b, &second);
        let third = ah(102, Ipv4Addr::new(198, 18, 0, 4));
        b.hold();
        b.apply(&[ev(EventKind::New, third.clone())], Removal::Now);
        assert!(b.wait_applied(Duration::from_secs(5)));
        b.release();
        assert_eq!(set("ud_acme_a"), ["198.18.0.2", "198.18.0.4"]);
        b.flush_updates(Duration::from_secs(5));
        assert_eq!(set("ud_acme_a"), ["198.18.0.4"]);
        b.apply(&[ev(EventKind::Destroy, third)], Removal::Now);
        flush(&b);
        assert!(set("ud_acme_a").is_empty());

        // A policy's reset queued behind a gone element's deletion does
        // not wait with it: both are in at once.
        let other = ah(101, PEER2);
        b.apply(
            &[
                ev(EventKind::New, first.clone()),
                ev(EventKind::New, other.clone()),
            ],
            Removal::Now,
        );
        flush(&b);
        assert_eq!(set("ud_acme_a"), ["198.18.0.2", "198.18.0.3"]);
        gone(&b, &first);
        let reset = Entry {
            state: State::ResetByPolicy,
            ..other
        };
        let t = std::time::Instant::now();
        b.apply(&[ev(EventKind::Update, reset)], Removal::Now);
        b.flush_updates(Duration::from_secs(5));
        assert!(t.elapsed() < BATCHED_DELETIONS_WAIT, "{:?}", t.elapsed());
        assert!(set("ud_acme_a").is_empty());
    })
}

#[test]
fn admissions_at_once_all_get_their_elements_with_the_updater_running_too() {
    in_netns(|| {
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
                            b.qp_seen(LOCAL, qpn);
                            b.apply(
                                &[ev(EventKind::New, rc(qpn, qpn + 1, State::Admitted))],
                                Removal::Now,
                            );
                            assert!(b.wait_applied(Duration::from_secs(5)), "{qpn:#x}");
                            b.release();
                            // A deletion nobody waits for, too.
                            if i % 5 == 0 {
                                b.qp_seen(LOCAL, qpn | 0x8000);
                                b.qp_gone(LOCAL, qpn | 0x8000, Removal::Now);
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
        assert_eq!(bset(&b, "tenant_qps").len(), 200);
        assert_eq!(bset(&b, "conn_to").len(), 200);
        assert_eq!(bset(&b, "eg_acme_a").len(), 200);
    })
}

/// Not a check: what adding one element costs through libnftables' text
/// and through netlink, with the backstop's ruleset installed. Run with
/// `cargo test --release -- --ignored --nocapture one_element_costs`.
#[test]
#[ignore]
fn one_element_costs() {
    in_netns(|| {
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
            nft.run(&format!(
                "add element inet {TABLE} ud_acme_a {{ {} }}",
                Ipv4Addr::from(q)
            ))
            .unwrap();
            text.push(t.elapsed());
        }
        let mut netlink = Vec::new();
        for q in n + 1..=2 * n {
            let t = std::time::Instant::now();
            sets.apply(&[crate::kernel::nft_set::Change::Add(super::rules::ud_host(
                "acme_a",
                Ipv4Addr::from(q),
            ))])
            .unwrap();
            netlink.push(t.elapsed());
        }
        let mut backstop = Vec::new();
        for q in 2 * n + 1..=3 * n {
            let t = std::time::Instant::now();
            b.qp_seen(LOCAL, q);
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
                b.qp_seen(LOCAL, q);
                b.apply(
                    &[ev(EventKind::New, rc(q, q, State::Admitted))],
                    Removal::Now,
                );
                assert!(b.wait_applied(Duration::from_secs(5)));
                b.release();
                admission.push(t.elapsed());
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        eprintln!(
            "one element, median of {n}: libnftables (ud_acme_a) {:?}, netlink (ud_acme_a) {:?}, backstop qp_seen+flush (eBPF) {:?}; \
             an admission's three elements and its wait {:?}",
            median(text),
            median(netlink),
            median(backstop),
            median(admission)
        );
        assert_eq!(bset(&b, "tenant_qps").len(), 2 * n as usize);
    })
}

/// Issue 51: a masqd restart emptied the adopted cgroups' maps, and a
/// container whose app never opened a session again went unfiltered. The
/// cgroups the runtime file keeps are adopted again by the next start,
/// before any session; one whose container ended meanwhile is skipped.
#[test]
fn a_restart_filters_the_adopted_cgroups_again_before_any_session() {
    in_netns(|| {
        let (b, parent) = start("readopt");
        let app = format!("{}-app", parent.0);
        let dir = PathBuf::from(crate::enforce::rdma_cgroup::CGROUP_ROOT).join(&app);
        std::fs::create_dir_all(&dir).unwrap();
        // (Made by the kernel on a cgroup file system; not where the
        // tests' /sys/fs/cgroup is a plain directory.)
        if !dir.join("cgroup.procs").exists() {
            std::fs::write(dir.join("cgroup.procs"), "").unwrap();
        }
        let adopted = || set("adopted_l1").iter().any(|e| e.contains(&app));
        assert_eq!(b.adopt_cgroup("acme-a", &app), Ok(true));
        assert!(adopted(), "{:?}", set("adopted_l1"));
        drop(b);
        let (b, _again) = start("readopt");
        assert!(!adopted(), "a start empties the adopted maps");
        let cfg = Config::parse(
            "device: rxe0\nunderlay: { netdev: eth0, ip: 198.18.0.1 }\nendpoints:\n\
             \x20 - { name: acme-a, tenant: acme, vni: 100, vip: 10.0.0.1, netns: /run/netns/acme-a }\n\
             vpc: [{ tenant: acme, vni: 100, vip: 10.0.0.1, host: 198.18.0.1, name: acme-a }]\n",
            "t.yaml",
        )
        .unwrap();
        let ep = cfg.endpoints[0].clone();
        let (name, gone) = ("acme-a".to_string(), format!("{}-gone", parent.0));
        let kept = [(&name, &app), (&name, &gone)];
        let back = crate::tenants::cgroups::readopt_cgroups(&b, kept, |n| {
            (n == "acme-a").then(|| ep.clone())
        });
        let listed = set("adopted_l1");
        let _ = std::fs::remove_file(dir.join("cgroup.procs"));
        let _ = std::fs::remove_dir(&dir);
        assert_eq!(back, [(name.clone(), app.clone())]);
        assert!(listed.iter().any(|e| e.contains(&app)), "{listed:?}");
    });
}
