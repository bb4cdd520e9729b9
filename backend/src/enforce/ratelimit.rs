//! Per-endpoint rate limits on software RoCE: an endpoint's RoCE packets
//! are shaped on its rail's underlay netdev to its `maxRateMbps`.
//!
//! rxe sends each QP's packets with a kernel socket created in the app's
//! process, so the socket carries the endpoint's cgroup (as the backstop
//! uses). nftables marks RoCE packets by that cgroup (table
//! `inet masq_rate`, map cgroup -> mark), and an HTB qdisc on the underlay
//! (handle `4d51:`) has a class per limited endpoint that a `fw` filter
//! fills by mark. Unmarked traffic is not classified and leaves at full
//! speed (HTB sends it directly), so nothing else on the host is shaped.
//! The mark is the apps' cgroup's, whichever device sends: each rail's
//! netdev classifies it at the rate of the apps' device on that rail.
//! Each class queues deeply (a pfifo of 10,000 packets) rather than drop:
//! a RoCE RC sender that loses packets retransmits whole windows.
//!
//! The qdisc and classes are changed with `tc -batch`, and read back
//! (is the qdisc there, the classes' counters) over rtnetlink
//! (`kernel::tc`), not from tc's text.
//!
//! Hardware RNICs send past the host's qdiscs; there the NIC's own
//! limiters apply (see docs/qos.md).

use crate::config::EndpointConfig;
use crate::error::{Error, Result};
use crate::kernel::nft::Nft;
use crate::kernel::tc::{ClassStats, Node};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use tracing::{debug, info, warn};

pub const TABLE: &str = "masq_rate";

/// Why endpoint `name`'s `maxRateMbps` cannot be had on `device`, a
/// hardware RNIC.
pub fn needs_software_roce(name: &str, device: &str) -> String {
    format!(
        "endpoint {name}.maxRateMbps: rate limits need software RoCE ({device} sends past the \
         host's qdiscs; use the NIC's own limiters)"
    )
}
/// The root qdisc's handle ("MQ"): how masqd knows the qdisc is its own.
const QDISC: u16 = 0x4d51;
/// Marks are QDISC << 16 | class minor.
const MARK_BASE: u32 = (QDISC as u32) << 16;
const QUEUE_PACKETS: u32 = 10_000;
/// HTB's burst: tc's default (one MTU at these rates) let a class reach
/// only 80% of its rate on the testbed, where timers fire late; 64 KiB,
/// what rxe keeps in flight per QP at 1 KiB packets, reached 96%.
const BURST: &str = "64k";

/// An endpoint's class on its rail's netdev: its minor number and rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Class {
    minor: u16,
    mbps: u32,
}

/// A limited endpoint: the netdev of its rail, and its apps' cgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Limited {
    netdev: String,
    cgroup: String,
    mbps: u32,
}

/// Limited endpoints' classes by netdev, then by apps' cgroup.
type Classes = BTreeMap<String, BTreeMap<String, Class>>;

#[derive(Default)]
struct State {
    /// Limited endpoints by name.
    limited: BTreeMap<String, Limited>,
    /// Each limited apps' cgroup's class minor, which is also its mark:
    /// an app's devices on several rails share one cgroup, so its packets
    /// carry one mark, and each rail's netdev has a class of that minor
    /// with the rate of the app's device on that rail.
    minors: BTreeMap<String, u16>,
    /// Cgroups in the mark map, with the inode they had then.
    cgroups: BTreeMap<String, u64>,
    /// The netdevs masqd's qdisc is on: asked of the kernel at the first
    /// sync (ones left by an earlier masqd are removed), then known.
    installed: Option<BTreeSet<String>>,
}

impl State {
    fn classes(&self) -> Classes {
        classes_of(&self.limited, &self.minors)
    }
}

fn classes_of(limited: &BTreeMap<String, Limited>, minors: &BTreeMap<String, u16>) -> Classes {
    let mut by_netdev = Classes::new();
    for l in limited.values() {
        if let Some(&minor) = minors.get(&l.cgroup) {
            by_netdev.entry(l.netdev.clone()).or_default().insert(
                l.cgroup.clone(),
                Class {
                    minor,
                    mbps: l.mbps,
                },
            );
        }
    }
    by_netdev
}

pub struct RateLimits {
    /// Each rail's name and underlay netdev, the first rail first.
    rails: Vec<(String, String)>,
    /// Endpoints' cgroups are `<parent>/<name>` below the cgroup root.
    parent: String,
    level: usize,
    cgroup_root: String,
    nft: Nft,
    state: Mutex<State>,
}

impl RateLimits {
    /// `rails`: each rail's name and underlay netdev, the first rail first.
    pub fn new(rails: Vec<(String, String)>, cgroup_parent: &str) -> Result<RateLimits> {
        let parent = cgroup_parent.trim_matches('/').to_string();
        Ok(RateLimits {
            rails,
            level: parent.split('/').count() + 1,
            parent,
            cgroup_root: crate::enforce::rdma_cgroup::CGROUP_ROOT.into(),
            nft: Nft::new()?,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The underlay netdev of rail `rail` (none is the first).
    fn netdev_of(&self, rail: Option<&str>) -> Option<&str> {
        crate::config::rail_value(&self.rails, rail).map(String::as_str)
    }

    /// Make the classes and marks those of `endpoints` (the ones with
    /// `maxRateMbps`), each on its rail's netdev; a netdev left with none
    /// loses the qdisc, and with none anywhere the table goes too.
    /// Idempotent: called at start, on every endpoint change, and every few
    /// seconds for cgroups that appeared or went away.
    pub fn sync(&self, endpoints: &[EndpointConfig]) -> Result<()> {
        let mut st = self.lock();
        let limited = self.limited_of(endpoints);
        if st.installed.is_none() {
            // An earlier masqd's qdiscs and marks: start from nothing.
            let left: BTreeSet<String> = self
                .rails
                .iter()
                .map(|(_, n)| n.clone())
                .filter(|n| self.installed(n))
                .collect();
            self.remove(&left)?;
            st.installed = Some(BTreeSet::new());
        }
        let installed = st.installed.clone().unwrap_or_default();
        if limited.is_empty() {
            if !installed.is_empty() || !st.minors.is_empty() {
                self.remove(&installed)?;
                info!("rate limits removed");
            }
            *st = State {
                installed: Some(BTreeSet::new()),
                ..State::default()
            };
            return Ok(());
        }
        let minors = minors_of(&limited, &st.minors)?;
        let new = classes_of(&limited, &minors);
        self.tc(&tc_batch(&installed, &st.classes(), &new))?;
        st.installed = Some(new.keys().cloned().collect());
        for (name, l) in &limited {
            if st.limited.get(name) != Some(l) {
                info!(endpoint = %name, netdev = %l.netdev, mbps = l.mbps,
                      "RoCE egress limited to {} Mbit/s", l.mbps);
            }
        }
        let cgroups: BTreeMap<String, u64> = minors
            .keys()
            .filter_map(|n| Some((n.clone(), self.cgroup_inode(n)?)))
            .collect();
        if installed.is_empty() || minors != st.minors || cgroups != st.cgroups {
            self.nft.run(&self.nft_commands(&minors, &cgroups))?;
            debug!(cgroups = cgroups.len(), "rate-limit marks updated");
        }
        st.limited = limited;
        st.minors = minors;
        st.cgroups = cgroups;
        Ok(())
    }

    /// The endpoints with `maxRateMbps`, by name, each on its rail's netdev.
    fn limited_of(&self, endpoints: &[EndpointConfig]) -> BTreeMap<String, Limited> {
        let mut limited = BTreeMap::new();
        for e in endpoints {
            let Some(mbps) = e.max_rate_mbps else {
                continue;
            };
            // The config's checks name every endpoint's rail.
            let Some(netdev) = self.netdev_of(e.rail.as_deref()) else {
                warn!(endpoint = %e.name, "rate limit skipped: no rail {:?}", e.rail);
                continue;
            };
            let cgroup = e.apps_endpoint().to_string();
            limited.insert(
                e.name.clone(),
                Limited {
                    netdev: netdev.into(),
                    cgroup,
                    mbps,
                },
            );
        }
        limited
    }

    /// Bytes and packets each limited endpoint's class has sent, and how
    /// often it held packets back over its rate (the kernel's class
    /// counters, as `tc -s class show` prints them).
    pub fn stats(&self) -> BTreeMap<String, serde_json::Value> {
        let (limited, minors) = {
            let st = self.lock();
            (st.limited.clone(), st.minors.clone())
        };
        let mut found = BTreeMap::new();
        limited
            .into_iter()
            .filter_map(|(name, l)| {
                let classes = found.entry(l.netdev.clone()).or_insert_with(|| {
                    crate::kernel::tc::class_stats(&l.netdev)
                        .inspect_err(|e| {
                            debug!("rate limits: cannot read {}'s classes: {e}", l.netdev)
                        })
                        .unwrap_or_default()
                });
                let (bytes, packets, overlimits) = class_stats(classes, *minors.get(&l.cgroup)?)?;
                Some((
                    name,
                    serde_json::json!({ "mbps": l.mbps, "netdev": l.netdev, "bytes": bytes,
                                        "packets": packets, "overlimits": overlimits }),
                ))
            })
            .collect()
    }

    fn cgroup_inode(&self, cgroup: &str) -> Option<u64> {
        crate::enforce::rdma_cgroup::cgroup_inode(
            &Path::new(&self.cgroup_root).join(&self.parent).join(cgroup),
        )
    }

    /// Whether `netdev`'s root qdisc is masqd's.
    fn installed(&self, netdev: &str) -> bool {
        crate::kernel::tc::root_qdisc(netdev)
            .ok()
            .flatten()
            .is_some_and(|q| is_ours(&q))
    }

    fn nft_commands(
        &self,
        minors: &BTreeMap<String, u16>,
        cgroups: &BTreeMap<String, u64>,
    ) -> String {
        let t = format!("inet {TABLE}");
        let mut s = String::new();
        let _ = writeln!(s, "add table {t}");
        let _ = writeln!(
            s,
            "add map {t} endpoint_mark {{ typeof socket cgroupv2 level {} : meta mark; }}",
            self.level
        );
        let _ = writeln!(
            s,
            "add chain {t} output {{ type filter hook output priority mangle; }}"
        );
        let _ = writeln!(s, "flush chain {t} output");
        let _ = writeln!(s, "flush map {t} endpoint_mark");
        let _ = writeln!(
            s,
            "add rule {t} output udp dport 4791 meta mark set socket cgroupv2 level {} map @endpoint_mark",
            self.level
        );
        for name in cgroups.keys() {
            if let Some(minor) = minors.get(name) {
                let _ = writeln!(
                    s,
                    "add element {t} endpoint_mark {{ \"{}/{name}\" : {:#x} }}",
                    self.parent,
                    MARK_BASE | u32::from(*minor)
                );
            }
        }
        s
    }

    /// Remove masqd's qdisc from `netdevs`, and the marks.
    fn remove(&self, netdevs: &BTreeSet<String>) -> Result<()> {
        let mut err = None;
        for netdev in netdevs.iter().filter(|n| self.installed(n)) {
            if let Err(e) = self.tc(&format!("qdisc del dev {netdev} root\n")) {
                err = Some(e);
            }
        }
        if let Err(e) = self.nft.run(&format!("destroy table inet {TABLE}\n")) {
            // `destroy` is nft 1.0.8+; older ones know only `delete`.
            if self.nft.run(&format!("list table inet {TABLE}\n")).is_ok() {
                self.nft
                    .run(&format!("delete table inet {TABLE}\n"))
                    .map_err(|_| e)?;
            }
        }
        err.map_or(Ok(()), Err)
    }

    /// Run tc commands as one batch (`tc -batch -`).
    fn tc(&self, batch: &str) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut child = Command::new("tc")
            .args(["-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::Failed(format!("cannot run tc: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(batch.as_bytes())
                .map_err(|e| Error::Failed(format!("tc: {e}")))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| Error::Failed(format!("tc: {e}")))?;
        if out.status.success() {
            return Ok(());
        }
        let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
        warn!("tc refused:\n{batch}{why}");
        Err(Error::Failed(format!("tc: {why}")))
    }
}

/// tc commands that make `dev`'s classes `new` where they were `old`
/// (keyed by apps' cgroup); `fresh`: the qdisc is not there yet.
fn tc_commands(
    dev: &str,
    fresh: bool,
    old: &BTreeMap<String, Class>,
    new: &BTreeMap<String, Class>,
) -> String {
    let mut s = String::new();
    if fresh {
        // `default 0`: what no filter classifies is sent unshaped.
        let _ = writeln!(
            s,
            "qdisc replace dev {dev} root handle {QDISC:x}: htb default 0"
        );
    }
    for (name, c) in old {
        if new.get(name).is_none_or(|n| n.minor != c.minor) && !fresh {
            let _ = writeln!(
                s,
                "filter del dev {dev} parent {QDISC:x}: protocol ip prio 1 handle {:#x} fw",
                MARK_BASE | u32::from(c.minor)
            );
            let _ = writeln!(s, "class del dev {dev} classid {QDISC:x}:{:x}", c.minor);
        }
    }
    for (name, c) in new {
        if !fresh && old.get(name) == Some(c) {
            continue;
        }
        let (minor, rate) = (c.minor, c.mbps);
        let _ = writeln!(
            s,
            "class replace dev {dev} parent {QDISC:x}: classid {QDISC:x}:{minor:x} htb \
             rate {rate}mbit ceil {rate}mbit burst {BURST} cburst {BURST}"
        );
        let _ = writeln!(
            s,
            "qdisc replace dev {dev} parent {QDISC:x}:{minor:x} handle {minor:x}: pfifo \
             limit {QUEUE_PACKETS}"
        );
        let _ = writeln!(
            s,
            "filter replace dev {dev} parent {QDISC:x}: protocol ip prio 1 handle {:#x} fw \
             classid {QDISC:x}:{minor:x}",
            MARK_BASE | u32::from(minor)
        );
    }
    s
}

/// (bytes, packets, overlimits) of class `QDISC:minor` in `tc -s class
/// show` output (this tc has no JSON for classes):
/// `class htb 4d51:1 root ...` then ` Sent 123 bytes 4 pkt (dropped 0,
/// overlimits 5 requeues 0)`.
fn class_stats(found: &[ClassStats], minor: u16) -> Option<(u64, u64, u64)> {
    found
        .iter()
        .find(|c| c.node.kind == "htb" && c.node.handle == (QDISC, minor))
        .map(|c| (c.bytes, c.packets, c.overlimits))
}

/// masqd's root qdisc: htb, handle QDISC:.
fn is_ours(q: &Node) -> bool {
    q.kind == "htb" && q.handle == (QDISC, 0)
}

/// The lowest class minor (1..=0xfffe) neither map uses.
/// Each limited apps' cgroup's class minor: the one it had (`had`), or
/// a free one.
fn minors_of(
    limited: &BTreeMap<String, Limited>,
    had: &BTreeMap<String, u16>,
) -> Result<BTreeMap<String, u16>> {
    let mut minors = BTreeMap::new();
    for l in limited.values() {
        if minors.contains_key(&l.cgroup) {
            continue;
        }
        let minor = match had.get(&l.cgroup) {
            Some(&m) => m,
            None => free_minor(had, &minors)?,
        };
        minors.insert(l.cgroup.clone(), minor);
    }
    Ok(minors)
}

/// The tc commands from classes `old` to `new`: each netdev's qdisc
/// (`installed` ones have it) set up or changed, or deleted where no
/// class is left.
fn tc_batch(installed: &BTreeSet<String>, old: &Classes, new: &Classes) -> String {
    let none = BTreeMap::new();
    let mut batch = String::new();
    for netdev in installed.iter().chain(new.keys()).collect::<BTreeSet<_>>() {
        let (was, now) = (old.get(netdev).unwrap_or(&none), new.get(netdev));
        match now {
            None => {
                let _ = writeln!(batch, "qdisc del dev {netdev} root");
            }
            Some(now) => {
                let fresh = !installed.contains(netdev);
                batch += &tc_commands(netdev, fresh, was, now);
            }
        }
    }
    batch
}

fn free_minor(a: &BTreeMap<String, u16>, b: &BTreeMap<String, u16>) -> Result<u16> {
    (1..0xffff)
        .find(|m| !a.values().chain(b.values()).any(|c| c == m))
        .ok_or_else(|| Error::failed("no free HTB class left for a rate limit"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes(v: &[(&str, u16, u32)]) -> BTreeMap<String, Class> {
        v.iter()
            .map(|&(n, minor, mbps)| (n.to_string(), Class { minor, mbps }))
            .collect()
    }

    #[test]
    fn a_fresh_qdisc_gets_every_class_and_a_change_touches_only_what_changed() {
        let new = classes(&[("acme-a", 1, 16), ("acme-b", 2, 100)]);
        let fresh = tc_commands("eth0", true, &BTreeMap::new(), &new);
        assert!(fresh.starts_with("qdisc replace dev eth0 root handle 4d51: htb default 0\n"));
        assert!(fresh.contains(
            "class replace dev eth0 parent 4d51: classid 4d51:1 htb rate 16mbit ceil 16mbit"
        ));
        assert!(fresh.contains("handle 0x4d510002 fw classid 4d51:2"));
        let changed = classes(&[("acme-b", 2, 50)]);
        let delta = tc_commands("eth0", false, &new, &changed);
        assert!(!delta.contains("qdisc replace dev eth0 root"));
        assert!(delta.contains("class del dev eth0 classid 4d51:1"));
        assert!(delta.contains("classid 4d51:2 htb rate 50mbit"));
    }

    #[test]
    fn an_apps_devices_share_its_mark_and_each_rail_gets_its_devices_rate() {
        let l = |netdev: &str, cgroup: &str, mbps| Limited {
            netdev: netdev.into(),
            cgroup: cgroup.into(),
            mbps,
        };
        let limited = BTreeMap::from([
            ("a".to_string(), l("eth0", "a", 16)),
            ("a-r1".to_string(), l("eth1", "a", 32)),
            ("b".to_string(), l("eth1", "b", 8)),
        ]);
        let minors = BTreeMap::from([("a".to_string(), 1), ("b".to_string(), 2)]);
        let by_netdev = classes_of(&limited, &minors);
        assert_eq!(by_netdev["eth0"], classes(&[("a", 1, 16)]));
        assert_eq!(by_netdev["eth1"], classes(&[("a", 1, 32), ("b", 2, 8)]));
    }

    #[test]
    fn only_existing_cgroups_are_marked() {
        let r =
            RateLimits::new(vec![("rail0".into(), "eth0".into())], "tenants").expect("libnftables");
        let minors = BTreeMap::from([("acme-a".to_string(), 1), ("acme-b".to_string(), 2)]);
        let cg: BTreeMap<String, u64> = [("acme-b".to_string(), 42)].into();
        let nft = r.nft_commands(&minors, &cg);
        assert!(nft.contains("meta mark set socket cgroupv2 level 2 map @endpoint_mark"));
        assert!(nft.contains(
            "add element inet masq_rate endpoint_mark { \"tenants/acme-b\" : 0x4d510002 }"
        ));
        assert!(!nft.contains("acme-a"));
    }

    const CHILD: &str = "MASQ_TEST_TC_CHILD";

    fn run(cmd: &str) {
        let mut w = cmd.split_whitespace();
        let out = Command::new(w.next().expect("a command"))
            .args(w)
            .output()
            .expect("iproute2 (scripts/install-deps) runs");
        assert!(out.status.success(), "{cmd}: {out:?}");
    }

    /// Run by the test below in a network namespace of its own (`unshare
    /// -rn`): masqd's qdisc and a class on its loopback, through which
    /// five datagrams go. Does nothing when run on its own.
    #[test]
    fn tc_child() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        run("ip link set lo up");
        let is_installed = || {
            crate::kernel::tc::root_qdisc("lo")
                .expect("qdiscs")
                .is_some_and(|q| is_ours(&q))
        };
        assert!(!is_installed());
        run(&format!(
            "tc qdisc replace dev lo root handle {QDISC:x}: htb default 2"
        ));
        assert!(is_installed());
        for minor in [2, 3] {
            run(&format!(
                "tc class replace dev lo parent {QDISC:x}: classid {QDISC:x}:{minor:x} htb \
                 rate 16mbit ceil 16mbit burst {BURST} cburst {BURST}"
            ));
        }
        // A receiver, so that no ICMP port unreachable comes back.
        let to = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        for _ in 0..5 {
            sock.send_to(&[0u8; 100], to.local_addr().expect("addr"))
                .expect("send");
        }
        let found = crate::kernel::tc::class_stats("lo").expect("classes");
        // 100 bytes of payload, 28 of UDP and IP, 14 of loopback's header.
        assert_eq!(class_stats(&found, 2), Some((5 * 142, 5, 0)), "{found:?}");
        assert_eq!(class_stats(&found, 3), Some((0, 0, 0)));
        assert_eq!(class_stats(&found, 4), None);
        assert!(crate::kernel::tc::class_stats("nosuchdev").is_err());
    }

    #[test]
    fn class_counters_and_the_root_qdisc_are_read_over_rtnetlink() {
        crate::kernel::netlink::run_test_in_own_netns("enforce::ratelimit::tests::tc_child", CHILD);
    }

    #[test]
    fn minors_are_reused_only_when_free() {
        let a = BTreeMap::from([("x".to_string(), 1), ("y".to_string(), 3)]);
        assert_eq!(free_minor(&a, &BTreeMap::new()), Ok(2));
        assert_eq!(
            free_minor(&a, &BTreeMap::from([("z".to_string(), 2)])),
            Ok(4)
        );
    }
}
