//! Per-endpoint rate limits on software RoCE: an endpoint's RoCE packets
//! are shaped on the underlay netdev to its `maxRateMbps`.
//!
//! rxe sends each QP's packets with a kernel socket created in the app's
//! process, so the socket carries the endpoint's cgroup (as the backstop
//! uses). nftables marks RoCE packets by that cgroup (table
//! `inet masq_rate`, map cgroup -> mark), and an HTB qdisc on the underlay
//! (handle `4d51:`) has a class per limited endpoint that a `fw` filter
//! fills by mark. Unmarked traffic is not classified and leaves at full
//! speed (HTB sends it directly), so nothing else on the host is shaped.
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
use crate::kernel::nft::Nft;
use crate::kernel::tc::{ClassStats, Node};
use std::collections::BTreeMap;
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

/// An endpoint's class: its minor number and rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Class {
    minor: u16,
    mbps: u32,
}

#[derive(Default)]
struct State {
    /// Limited endpoints by name.
    classes: BTreeMap<String, Class>,
    /// Cgroups in the mark map, with the inode they had then.
    cgroups: BTreeMap<String, u64>,
    /// Whether masqd's qdisc is on the underlay: asked of the kernel at
    /// the first sync (one left by an earlier masqd), then known.
    installed: Option<bool>,
}

pub struct RateLimits {
    netdev: String,
    /// Endpoints' cgroups are `<parent>/<name>` below the cgroup root.
    parent: String,
    level: usize,
    cgroup_root: String,
    nft: Nft,
    state: Mutex<State>,
}

impl RateLimits {
    pub fn new(netdev: &str, cgroup_parent: &str) -> Result<RateLimits, String> {
        let parent = cgroup_parent.trim_matches('/').to_string();
        Ok(RateLimits {
            netdev: netdev.to_string(),
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

    /// Make the classes and marks those of `endpoints` (the ones with
    /// `maxRateMbps`); with none, remove the qdisc and table altogether.
    /// Idempotent: called at start, on every endpoint change, and every few
    /// seconds for cgroups that appeared or went away.
    pub fn sync(&self, endpoints: &[EndpointConfig]) -> Result<(), String> {
        let mut st = self.lock();
        let want: BTreeMap<&str, u32> = endpoints
            .iter()
            .filter_map(|e| Some((e.name.as_str(), e.max_rate_mbps?)))
            .collect();
        if st.installed.is_none() {
            // An earlier masqd's qdisc and marks: start from nothing.
            if self.installed() {
                self.remove_all()?;
            }
            st.installed = Some(false);
        }
        let installed = st.installed == Some(true);
        if want.is_empty() {
            if installed {
                self.remove_all()?;
                info!("rate limits removed");
            }
            *st = State {
                installed: Some(false),
                ..State::default()
            };
            return Ok(());
        }
        let mut classes = BTreeMap::new();
        for (name, &mbps) in &want {
            let minor = match st.classes.get(*name) {
                Some(c) => c.minor,
                None => free_minor(&st.classes, &classes)?,
            };
            classes.insert(name.to_string(), Class { minor, mbps });
        }
        let cgroups: BTreeMap<String, u64> = classes
            .keys()
            .filter_map(|n| Some((n.clone(), self.cgroup_inode(n)?)))
            .collect();
        let fresh = !installed;
        if fresh || classes != st.classes {
            self.tc(&self.tc_commands(fresh, &st.classes, &classes))?;
            st.installed = Some(true);
            for (name, c) in &classes {
                if st.classes.get(name) != Some(c) {
                    info!(endpoint = %name, mbps = c.mbps, "RoCE egress limited to {} Mbit/s", c.mbps);
                }
            }
        }
        if fresh || classes != st.classes || cgroups != st.cgroups {
            self.nft.run(&self.nft_commands(&classes, &cgroups))?;
            debug!(cgroups = cgroups.len(), "rate-limit marks updated");
        }
        st.classes = classes;
        st.cgroups = cgroups;
        Ok(())
    }

    /// Bytes and packets each limited endpoint's class has sent, and how
    /// often it held packets back over its rate (the kernel's class
    /// counters, as `tc -s class show` prints them).
    pub fn stats(&self) -> BTreeMap<String, serde_json::Value> {
        let classes = self.lock().classes.clone();
        if classes.is_empty() {
            return BTreeMap::new();
        }
        let found = match crate::kernel::tc::class_stats(&self.netdev) {
            Ok(f) => f,
            Err(e) => {
                debug!("rate limits: cannot read {}'s classes: {e}", self.netdev);
                return BTreeMap::new();
            }
        };
        classes
            .into_iter()
            .filter_map(|(name, c)| {
                let (bytes, packets, overlimits) = class_stats(&found, c.minor)?;
                Some((
                    name,
                    serde_json::json!({ "mbps": c.mbps, "bytes": bytes, "packets": packets,
                                        "overlimits": overlimits }),
                ))
            })
            .collect()
    }

    fn cgroup_inode(&self, endpoint: &str) -> Option<u64> {
        crate::enforce::rdma_cgroup::cgroup_inode(
            &Path::new(&self.cgroup_root)
                .join(&self.parent)
                .join(endpoint),
        )
    }

    /// Whether the underlay's root qdisc is masqd's.
    fn installed(&self) -> bool {
        crate::kernel::tc::root_qdisc(&self.netdev)
            .ok()
            .flatten()
            .is_some_and(|q| is_ours(&q))
    }

    fn tc_commands(
        &self,
        fresh: bool,
        old: &BTreeMap<String, Class>,
        new: &BTreeMap<String, Class>,
    ) -> String {
        let dev = &self.netdev;
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

    fn nft_commands(
        &self,
        classes: &BTreeMap<String, Class>,
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
            if let Some(c) = classes.get(name) {
                let _ = writeln!(
                    s,
                    "add element {t} endpoint_mark {{ \"{}/{name}\" : {:#x} }}",
                    self.parent,
                    MARK_BASE | u32::from(c.minor)
                );
            }
        }
        s
    }

    fn remove_all(&self) -> Result<(), String> {
        let mut err = None;
        if self.installed() {
            if let Err(e) = self.tc(&format!("qdisc del dev {} root\n", self.netdev)) {
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
    fn tc(&self, batch: &str) -> Result<(), String> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut child = Command::new("tc")
            .args(["-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run tc: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(batch.as_bytes())
                .map_err(|e| format!("tc: {e}"))?;
        }
        let out = child.wait_with_output().map_err(|e| format!("tc: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
        warn!("tc refused:\n{batch}{why}");
        Err(format!("tc: {why}"))
    }
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
fn free_minor(a: &BTreeMap<String, Class>, b: &BTreeMap<String, Class>) -> Result<u16, String> {
    (1..0xffff)
        .find(|m| !a.values().chain(b.values()).any(|c| c.minor == *m))
        .ok_or_else(|| "no free HTB class left for a rate limit".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> RateLimits {
        RateLimits {
            netdev: "eth0".into(),
            parent: "tenants".into(),
            level: 2,
            cgroup_root: "/nonexistent".into(),
            nft: Nft::new().expect("libnftables"),
            state: Mutex::new(State::default()),
        }
    }

    fn classes(v: &[(&str, u16, u32)]) -> BTreeMap<String, Class> {
        v.iter()
            .map(|&(n, minor, mbps)| (n.to_string(), Class { minor, mbps }))
            .collect()
    }

    #[test]
    fn a_fresh_qdisc_gets_every_class_and_a_change_touches_only_what_changed() {
        let r = limits();
        let new = classes(&[("acme-a", 1, 16), ("acme-b", 2, 100)]);
        let fresh = r.tc_commands(true, &BTreeMap::new(), &new);
        assert!(fresh.starts_with("qdisc replace dev eth0 root handle 4d51: htb default 0\n"));
        assert!(fresh.contains(
            "class replace dev eth0 parent 4d51: classid 4d51:1 htb rate 16mbit ceil 16mbit"
        ));
        assert!(fresh.contains("handle 0x4d510002 fw classid 4d51:2"));
        let changed = classes(&[("acme-b", 2, 50)]);
        let delta = r.tc_commands(false, &new, &changed);
        assert!(!delta.contains("qdisc replace dev eth0 root"));
        assert!(delta.contains("class del dev eth0 classid 4d51:1"));
        assert!(delta.contains("classid 4d51:2 htb rate 50mbit"));
    }

    #[test]
    fn only_existing_cgroups_are_marked() {
        let r = limits();
        let cl = classes(&[("acme-a", 1, 16), ("acme-b", 2, 100)]);
        let cg: BTreeMap<String, u64> = [("acme-b".to_string(), 42)].into();
        let nft = r.nft_commands(&cl, &cg);
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
        let a = classes(&[("x", 1, 1), ("y", 3, 1)]);
        assert_eq!(free_minor(&a, &BTreeMap::new()), Ok(2));
        assert_eq!(free_minor(&a, &classes(&[("z", 2, 1)])), Ok(4));
    }
}
