//! The eBPF backstop against real packets: two network namespaces joined
//! by a veth pair, UDP datagrams shaped as RoCEv2 (a BTH after the UDP
//! header) sent from one to the other, the programs attached as masqd
//! attaches them, and what arrives counted (run as root, as the nftables
//! tests are).

use super::{BpfBackstop, Key, DROPS_INGRESS, DROPS_UD_INGRESS};
use std::net::{Ipv4Addr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const SENDER: Ipv4Addr = Ipv4Addr::new(198, 18, 9, 1);
const RECEIVER: Ipv4Addr = Ipv4Addr::new(198, 18, 9, 2);

/// Run a command; it must succeed (its stderr in the panic if not).
pub(crate) fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect(args[0]);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two namespaces, `<tag>-s` (SENDER) and `<tag>-r` (RECEIVER), a bpffs
/// for the pins; all gone on drop.
struct Pair {
    tag: String,
    pins: Bpffs,
}

impl Pair {
    fn new(test: &str) -> Pair {
        let tag = format!("mbpf{}{test}", std::process::id() % 100000);
        let (s, r) = (format!("{tag}-s"), format!("{tag}-r"));
        sh(&["ip", "netns", "add", &s]);
        sh(&["ip", "netns", "add", &r]);
        sh(&[
            "ip", "link", "add", "v0", "netns", &s, "type", "veth", "peer", "name", "v1", "netns",
            &r,
        ]);
        for (ns, dev, addr) in [(&s, "v0", SENDER), (&r, "v1", RECEIVER)] {
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                dev,
            ]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        Pair {
            tag,
            pins: Bpffs::new(),
        }
    }

    fn ns(&self, side: &str) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}-{side}", self.tag))
    }

    /// Run `f` in the receiver's namespace.
    fn at_receiver<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let ns = std::fs::File::open(self.ns("r")).expect("the receiver's netns");
        std::thread::spawn(move || {
            nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    }

    fn load(&self) -> BpfBackstop {
        let dir = self.pins.path().join("masq");
        self.at_receiver(move || BpfBackstop::load(&dir).expect("the programs load"))
    }

    /// Send one RoCEv2-shaped datagram per destination QPN (an RC SEND
    /// ONLY, or UD's if `ud`, from QP 0) from the sender's namespace, from
    /// a process in `cgroup` if given; the QPNs the receiver got.
    fn send(&self, qpns: &[u32], ud: bool, cgroup: Option<&Path>) -> Vec<u32> {
        self.send_from(ud.then_some(0), qpns, cgroup)
    }

    /// `send`: a UD SEND ONLY from UD QP `from` (its DETH's source QPN),
    /// or RC's if none.
    fn send_from(&self, from: Option<u32>, qpns: &[u32], cgroup: Option<&Path>) -> Vec<u32> {
        let rx = self.at_receiver(|| {
            // Once (of many runs) the port was still taken a moment after
            // the last send's socket closed: a few tries.
            let mut tries = 0;
            let s = loop {
                match UdpSocket::bind((RECEIVER, 4791)) {
                    Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 20 => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    r => break r.expect("bind 4791"),
                }
            };
            s.set_read_timeout(Some(Duration::from_millis(500))).ok();
            s
        });
        let opcode = if from.is_some() { 0x64 } else { 0x04 };
        let src = from.unwrap_or(0);
        // A drop on egress fails the send (EPERM): the next one goes on.
        let script = format!(
            "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             for q in {qpns:?}:\n    \
             try: s.sendto(bytes([{opcode},0,0xff,0xff,0])+q.to_bytes(3,'big')+bytes(4+5)+({src}).to_bytes(3,'big'),('{RECEIVER}',4791))\n    \
             except PermissionError: pass\n"
        );
        let join = match cgroup {
            Some(c) => format!("echo $$ > {}/cgroup.procs && ", c.display()),
            None => String::new(),
        };
        let netns = format!("--net={}", self.ns("s").display());
        sh(&[
            "sh",
            "-c",
            &format!("{join}exec nsenter {netns} python3 -c \"$0\""),
            &script,
        ]);
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while let Ok(n) = rx.recv(&mut buf) {
            if n >= 12 {
                got.push(u32::from_be_bytes([0, buf[5], buf[6], buf[7]]));
            }
        }
        got
    }
}

/// A bpf file system of a test's own (in a temporary directory), gone
/// with it: where the eBPF maps are pinned.
pub(crate) struct Bpffs(tempfile::TempDir);

impl Bpffs {
    pub(crate) fn new() -> Bpffs {
        let dir = tempfile::tempdir().expect("a directory for bpffs");
        sh(&["mount", "-t", "bpf", "bpf", &dir.path().to_string_lossy()]);
        Bpffs(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for side in ["s", "r"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &format!("{}-{side}", self.tag)])
                .status();
        }
    }
}

#[test]
fn a_tenant_qp_takes_rc_packets_only_from_the_hosts_it_is_connected_to() {
    let pair = Pair::new("in");
    let mut b = pair.load();
    let mut b = pair.at_receiver(move || {
        b.guard_netdev("v1").expect("the ingress filter");
        b
    });
    // 17: connected to SENDER; 18: a tenant QP, not connected; 19: no
    // tenant's QP (the host's own RDMA): not the backstop's.
    b.insert(Key::TenantQp(RECEIVER, 17)).unwrap();
    b.insert(Key::ConnTo(SENDER, RECEIVER, 17)).unwrap();
    b.insert(Key::TenantQp(RECEIVER, 18)).unwrap();
    assert_eq!(pair.send(&[17, 18, 19], false, None), vec![17, 19]);
    assert_eq!(b.drops()[&DROPS_INGRESS].packets, 1);
    // A datagram is UD's to check (ud_qps): 18 is no UD QP, it passes.
    assert_eq!(pair.send(&[18], true, None), vec![18]);
    // The connection goes: so do its packets.
    assert!(b.remove(Key::ConnTo(SENDER, RECEIVER, 17)).unwrap());
    assert!(!b.remove(Key::ConnTo(SENDER, RECEIVER, 17)).unwrap());
    assert_eq!(pair.send(&[17], false, None), Vec::<u32>::new());
    assert_eq!(b.drops()[&DROPS_INGRESS].packets, 2);
}

#[test]
fn a_tenant_ud_qp_takes_datagrams_only_from_ud_qps_of_its_vni() {
    let pair = Pair::new("ud");
    let mut b = pair.load();
    let mut b = pair.at_receiver(move || {
        b.guard_netdev("v1").expect("the ingress filter");
        b
    });
    // 20: a tenant's UD QP in VNI 100; 21: one in VNI 200; 22: no
    // tenant's (the host's own, or QP1's MADs): not the backstop's.
    b.insert(Key::UdQp(RECEIVER, 20, 100)).unwrap();
    b.insert(Key::UdQp(RECEIVER, 21, 200)).unwrap();
    // The sender's UD QP 5, announced in VNI 100.
    b.insert(Key::UdFrom(SENDER, 5, 100)).unwrap();
    let from = |qp, to: &[u32]| pair.send_from(Some(qp), to, None);
    assert_eq!(from(5, &[20, 21, 22]), vec![20, 22]);
    assert_eq!(b.drops()[&DROPS_UD_INGRESS].packets, 1);
    // A QP nobody announced reaches no tenant's.
    assert_eq!(from(6, &[20, 22]), vec![22]);
    // RC packets are not UD's to check.
    assert_eq!(pair.send(&[20], false, None), vec![20]);
    // The announcement ends: so do its datagrams.
    assert!(b.remove(Key::UdFrom(SENDER, 5, 0)).unwrap());
    assert_eq!(from(5, &[20]), Vec::<u32>::new());
    // Announced again in VNI 200 (a QPN reused by another tenant): it
    // reaches VNI 200's QP only; the slot took the new VNI.
    b.insert(Key::UdFrom(SENDER, 5, 100)).unwrap();
    b.insert(Key::UdFrom(SENDER, 5, 200)).unwrap();
    assert_eq!(from(5, &[20, 21]), vec![21]);
    assert_eq!(b.drops()[&DROPS_UD_INGRESS].packets, 4);
    let ud: Vec<Key> = b
        .elements()
        .into_iter()
        .filter(|k| matches!(k, Key::UdQp(..) | Key::UdFrom(..)))
        .collect();
    assert_eq!(
        ud,
        [
            Key::UdQp(RECEIVER, 20, 100),
            Key::UdQp(RECEIVER, 21, 200),
            Key::UdFrom(SENDER, 5, 200)
        ]
    );
}

/// A cgroup v2 directory of the test's own (under wherever cgroup2 is
/// mounted: `/sys/fs/cgroup`, or `unified` below it on a hybrid host),
/// removed on drop.
struct Cgroup(PathBuf);

impl Cgroup {
    fn new(name: &str) -> Cgroup {
        let mounts = std::fs::read_to_string("/proc/self/mounts").expect("/proc/self/mounts");
        let root = mounts
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.get(2) == Some(&"cgroup2"))
            .map(|f| PathBuf::from(f[1]))
            .expect("a cgroup2 mount");
        let dir = root.join(format!("masq-bpf-{}-{name}", std::process::id()));
        std::fs::create_dir(&dir).expect("a cgroup");
        Cgroup(dir)
    }
}

impl Cgroup {
    /// Its id, as `bpf_skb_ancestor_cgroup_id` gives it: its inode.
    fn id(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&self.0).expect("the cgroup").ino()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Its processes exited with their sender.
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The programs attached to a cgroup's egress, by name.
fn attached(cgroup: &Path) -> Vec<String> {
    let out = Command::new("bpftool")
        .args(["-j", "cgroup", "show"])
        .arg(cgroup)
        .output()
        .expect("bpftool");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v.as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["attach_type"] == "cgroup_inet_egress")
        .filter_map(|p| p["name"].as_str().map(String::from))
        .collect()
}

#[test]
fn an_endpoints_sockets_send_rc_packets_only_where_it_was_admitted() {
    let pair = Pair::new("eg");
    let cg = Cgroup::new("eg");
    let mut b = pair.load();
    b.guard_cgroup(&cg.0, cg.id(), 7)
        .expect("the egress program");
    b.insert(Key::Egress(7, RECEIVER, 17)).unwrap();
    assert_eq!(pair.send(&[17, 18], false, Some(&cg.0)), vec![17]);
    assert_eq!(b.drops()[&7].packets, 1);
    // UD is nftables' to check; a process in no guarded cgroup is not a
    // tenant's.
    assert_eq!(pair.send(&[18], true, Some(&cg.0)), vec![18]);
    assert_eq!(pair.send(&[17, 18], false, None), vec![17, 18]);
    // Another endpoint's admission is not this one's.
    b.insert(Key::Egress(8, RECEIVER, 18)).unwrap();
    assert_eq!(pair.send(&[18], false, Some(&cg.0)), Vec::<u32>::new());
    b.unguard_cgroup(&cg.0).unwrap();
    assert_eq!(attached(&cg.0), Vec::<String>::new());
    assert_eq!(pair.send(&[17, 18], false, Some(&cg.0)), vec![17, 18]);
}

/// masqd's restart: the filters keep working while no masqd runs, and the
/// next one takes the maps as they were and puts its programs in place of
/// the earlier ones, without a second copy.
#[test]
fn the_filters_outlive_masqd_and_the_next_one_takes_them_over() {
    let pair = Pair::new("rs");
    let cg = Cgroup::new("rs");
    let mut first = pair.load();
    first = pair.at_receiver(move || {
        first.guard_netdev("v1").expect("the ingress filter");
        first
    });
    first.guard_cgroup(&cg.0, cg.id(), 7).unwrap();
    first.insert(Key::TenantQp(RECEIVER, 18)).unwrap();
    first.insert(Key::Egress(7, RECEIVER, 17)).unwrap();
    let before = first.elements();
    assert_eq!(first.endpoint_number("acme_a").unwrap(), 1);
    assert_eq!(first.endpoint_number("acme_b").unwrap(), 2);
    drop(first);

    // No masqd: still filtered, both ways.
    assert_eq!(pair.send(&[17, 18], false, None), vec![17]);
    assert_eq!(pair.send(&[17, 19], false, Some(&cg.0)), vec![17]);

    let mut next = pair.load();
    assert_eq!(next.elements(), before);
    // Endpoints keep their numbers; a freed one is given again.
    assert_eq!(next.endpoint_number("acme_b").unwrap(), 2);
    next.forget_endpoint("acme_a");
    assert_eq!(next.endpoint_number("acme_c").unwrap(), 1);
    next = pair.at_receiver(move || {
        next.guard_netdev("v1").expect("the ingress filter, again");
        next
    });
    next.guard_cgroup(&cg.0, cg.id(), 7).unwrap();
    assert_eq!(attached(&cg.0), vec!["masq_egress".to_string()]);
    let filters = Command::new("ip")
        .args(["netns", "exec", &format!("{}-r", pair.tag)])
        .args(["tc", "filter", "show", "dev", "v1", "ingress"])
        .output()
        .expect("tc");
    let filters = String::from_utf8_lossy(&filters.stdout);
    let ours = filters.lines().filter(|l| l.contains("masq_ingress"));
    assert_eq!(ours.count(), 1, "{filters}");
    assert_eq!(pair.send(&[17, 18], false, None), vec![17]);
    assert_eq!(pair.send(&[17, 19], false, Some(&cg.0)), vec![17]);
    drop(next);

    // The pins lost (an operator removed them): the next masqd starts
    // with empty maps, and the earlier programs, which read the old ones,
    // are replaced all the same: 18, admitted only in the new maps, passes.
    std::fs::remove_dir_all(pair.pins.path().join("masq")).unwrap();
    let mut fresh = pair.load();
    assert_eq!(fresh.elements(), vec![]);
    fresh = pair.at_receiver(move || {
        fresh.guard_netdev("v1").expect("the ingress filter, again");
        fresh
    });
    fresh.guard_cgroup(&cg.0, cg.id(), 7).unwrap();
    fresh.insert(Key::Egress(7, RECEIVER, 18)).unwrap();
    assert_eq!(attached(&cg.0), vec!["masq_egress".to_string()]);
    assert_eq!(pair.send(&[17, 18], false, Some(&cg.0)), vec![18]);
}
