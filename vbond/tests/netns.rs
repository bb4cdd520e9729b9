//! Reads a real vNIC in a real network namespace. Needs root and `ip`;
//! skips (saying why) without them.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::Duration;
use vbond::{gid_to_string, guid_from_mac, ipv4_mapped_gid, read_vnic, virtual_gid_table, Binding};

struct Netns {
    name: String,
}

fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Netns {
    /// A namespace with a veth `v0` (MAC 52:54:00:12:34:56, two IPv4 and
    /// one global IPv6 address) and its peer `v1`.
    fn create(tag: &str) -> Result<Netns, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { nix::libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        let name = format!("vbond-{tag}-{}", std::process::id());
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        let n = ns.name.as_str();
        ip(&[
            "-n", n, "link", "add", "v0", "type", "veth", "peer", "name", "v1",
        ])?;
        ip(&["-n", n, "link", "set", "v0", "address", "52:54:00:12:34:56"])?;
        ip(&["-n", n, "addr", "add", "10.0.0.1/24", "dev", "v0"])?;
        ip(&["-n", n, "addr", "add", "10.0.0.9/32", "dev", "v0"])?;
        ip(&[
            "-n",
            n,
            "-6",
            "addr",
            "add",
            "2001:db8::1/64",
            "dev",
            "v0",
            "nodad",
        ])?;
        ip(&["-n", n, "link", "set", "v1", "up"])?;
        ip(&["-n", n, "link", "set", "v0", "up"])?;
        // The veth's operational state (IFF_RUNNING, what `up` means) turns
        // UP a moment after both ends are up, from the kernel's link-watch
        // work: wait for it, or the read races it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !ip(&["-n", n, "-o", "link", "show", "v0"])?.contains(" state UP ") {
            if std::time::Instant::now() > deadline {
                return Err("veth v0 is not operationally up after 5 s".into());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Ok(ns)
    }

    fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    fn ifindex(&self, dev: &str) -> u32 {
        let out = ip(&["-n", &self.name, "-o", "link", "show", dev]).unwrap();
        out.split(':').next().unwrap().trim().parse().unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

fn thread_netns() -> std::path::PathBuf {
    std::fs::read_link("/proc/thread-self/ns/net").unwrap()
}

macro_rules! netns_or_skip {
    ($tag:expr) => {
        match Netns::create($tag) {
            Ok(ns) => ns,
            Err(why) => {
                println!("SKIPPED: cannot make a test network namespace: {why}");
                return;
            }
        }
    };
}

#[test]
fn reads_vnic_and_builds_gid_table() {
    let ns = netns_or_skip!("read");
    let before = thread_netns();
    let nic = read_vnic(ns.path(), "v0").unwrap();
    assert_eq!(thread_netns(), before, "caller's thread changed namespace");

    assert_eq!(nic.ifname, "v0");
    assert_eq!(nic.mac, [0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
    assert_eq!(nic.ifindex, ns.ifindex("v0"));
    assert_eq!(nic.mtu, 1500);
    assert!(nic.up);
    let gids: Vec<String> = virtual_gid_table(&nic)
        .iter()
        .map(|g| gid_to_string(&g.gid))
        .collect();
    // The kernel's own link-local (fe80::5054:ff:fe12:3456, from the same
    // EUI-64) is not listed twice.
    assert_eq!(
        gids,
        [
            "fe80::5054:ff:fe12:3456",
            "::ffff:10.0.0.1",
            "::ffff:10.0.0.9",
            "2001:db8::1"
        ]
    );
    assert_eq!(guid_from_mac(nic.mac), 0x5054_00ff_fe12_3456);

    let e = read_vnic(ns.path(), "eth7").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    assert!(e.to_string().contains("eth7"), "{e}");

    // The /proc/PID/ns/net form, through a process living in the namespace.
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.name, "sleep", "30"])
        .spawn()
        .unwrap();
    let proc_path = format!("/proc/{}/ns/net", child.id());
    // `ip netns exec` enters the namespace before exec'ing sleep.
    let mut got = None;
    for _ in 0..100 {
        if let Ok(n) = read_vnic(&proc_path, "v0") {
            got = Some(n);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(got.expect("read through /proc/PID/ns/net"), nic);
}

#[test]
fn binding_follows_changes() {
    let ns = netns_or_skip!("watch");
    let mut b = Binding::open(ns.path(), "v0").unwrap();
    assert_eq!(b.gids().len(), 4);
    assert_eq!(b.node_guid(), 0x5054_00ff_fe12_3456);
    assert!(!b.refresh().unwrap());
    assert!(!b.wait_change(Some(Duration::from_millis(100))).unwrap());

    ip(&["-n", &ns.name, "addr", "add", "10.0.0.5/24", "dev", "v0"]).unwrap();
    assert!(b.wait_change(Some(Duration::from_secs(5))).unwrap());
    let five = ipv4_mapped_gid(Ipv4Addr::new(10, 0, 0, 5));
    let g = b.gids().iter().find(|g| g.gid == five).expect("new GID");
    // A secondary address comes after the others.
    assert_eq!(g.index, 3);
    assert_eq!(gid_to_string(&b.gids()[4].gid), "2001:db8::1");

    // A new MAC changes the link-local GID and the GUID.
    ip(&[
        "-n",
        &ns.name,
        "link",
        "set",
        "v0",
        "address",
        "02:00:00:00:00:01",
    ])
    .unwrap();
    assert!(b.wait_change(Some(Duration::from_secs(5))).unwrap());
    assert_eq!(gid_to_string(&b.gids()[0].gid), "fe80::ff:fe00:1");
    assert_eq!(b.node_guid(), 0x0000_00ff_fe00_0001);

    ip(&["-n", &ns.name, "link", "set", "v0", "down"]).unwrap();
    assert!(b.wait_change(Some(Duration::from_secs(5))).unwrap());
    assert!(!b.vnic().up);

    // Gone: refresh fails and the last view stays.
    ip(&["-n", &ns.name, "link", "del", "v0"]).unwrap();
    let e = b.refresh().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    assert_eq!(b.vnic().mac, [2, 0, 0, 0, 0, 1]);
}
