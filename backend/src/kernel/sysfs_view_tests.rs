//! The sysfs view's rendering and its life on disk.

use super::*;
use std::collections::BTreeMap;
use std::fs;
use std::net::Ipv4Addr;
use vbond::{ipv4_mapped_gid, link_local_gid, VirtualGid};

const MAC: [u8; 6] = [0xf2, 0x23, 0x2e, 0x35, 0x5d, 0x41];
const PHYS_GIDS: [&str; 2] = [
    "fe80:0000:0000:0000:5054:00ff:fe00:0001",
    "0000:0000:0000:0000:0000:ffff:c612:0001",
];

/// A physical rxe0 as the kernel lays it out, with its underlay GIDs.
fn phys_fixture(root: &Path) {
    let dev = root.join("class/infiniband/rxe0");
    let port = dev.join("ports/1");
    for d in ["gids", "gid_attrs/types", "gid_attrs/ndevs", "pkeys"] {
        fs::create_dir_all(port.join(d)).unwrap();
    }
    for (f, v) in [
        ("node_type", "1: CA\n"),
        ("fw_ver", "0.0.0\n"),
        ("node_desc", "rxe0 on host1\n"),
        ("node_guid", "5054:00ff:fe00:0001\n"),
        ("parent", "eth0\n"),
        ("ports/1/state", "4: ACTIVE\n"),
        ("ports/1/phys_state", "5: LinkUp\n"),
        ("ports/1/link_layer", "Ethernet\n"),
        ("ports/1/rate", "10 Gb/sec (1X QDR)\n"),
        ("ports/1/lid", "0x0\n"),
        ("ports/1/sm_lid", "0x0\n"),
        ("ports/1/sm_sl", "0\n"),
        ("ports/1/lid_mask_count", "0\n"),
        ("ports/1/cap_mask", "0x00890000\n"),
        ("ports/1/pkeys/0", "0xffff\n"),
        ("ports/1/gid_attrs/ndevs/1", "eth0\n"),
        ("ports/1/gid_attrs/types/1", "RoCE v2\n"),
    ] {
        fs::write(dev.join(f), v).unwrap();
    }
    for (i, g) in PHYS_GIDS.iter().enumerate() {
        fs::write(port.join(format!("gids/{i}")), format!("{g}\n")).unwrap();
    }
    fs::create_dir_all(root.join("class/infiniband_verbs")).unwrap();
    fs::write(root.join("class/infiniband_verbs/abi_version"), "6\n").unwrap();
}

fn device(vips: &[Ipv4Addr]) -> VirtualDevice {
    let mut gids = vec![VirtualGid {
        index: 0,
        gid: link_local_gid(MAC),
        roce_v2: true,
    }];
    for ip in vips {
        gids.push(VirtualGid {
            index: gids.len() as u32,
            gid: ipv4_mapped_gid(*ip),
            roce_v2: true,
        });
    }
    VirtualDevice {
        name: "vrdma0".into(),
        uverbs: "uverbs0".into(),
        port: 1,
        node_guid: vbond::guid_from_mac(MAC),
        ndev: "eth0".into(),
        gids,
        gid_tbl_len: 0,
    }
}

fn as_map(files: &[(PathBuf, String)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(p, v)| (p.display().to_string(), v.clone()))
        .collect()
}

/// Every file under `dir`, following the device symlink as a reader would.
fn tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                let rel = p.strip_prefix(base).unwrap().display().to_string();
                out.insert(rel, fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn kernel_formats() {
    assert_eq!(
        sysfs_gid(&ipv4_mapped_gid(Ipv4Addr::new(10, 0, 0, 1))),
        "0000:0000:0000:0000:0000:ffff:0a00:0001\n"
    );
    assert_eq!(
        sysfs_gid(&link_local_gid(MAC)),
        "fe80:0000:0000:0000:f023:2eff:fe35:5d41\n"
    );
    assert_eq!(
        sysfs_guid(vbond::guid_from_mac(MAC)),
        "f023:2eff:fe35:5d41\n"
    );
}

#[test]
fn renders_the_virtual_device_with_the_physical_ports_attributes() {
    let dir = tempfile::tempdir().unwrap();
    phys_fixture(dir.path());
    let phys = read_phys_attrs(dir.path(), "rxe0", 1);
    let m = as_map(&render(&device(&[Ipv4Addr::new(10, 0, 0, 1)]), &phys));
    let d = "class/infiniband/vrdma0";
    let want = [
        ("node_guid", "f023:2eff:fe35:5d41\n"),
        ("sys_image_guid", "f023:2eff:fe35:5d41\n"),
        ("node_type", "1: CA\n"),
        ("node_desc", "vrdma0\n"),
        ("fw_ver", "0.0.0\n"),
        ("ports/1/state", "4: ACTIVE\n"),
        ("ports/1/phys_state", "5: LinkUp\n"),
        ("ports/1/link_layer", "Ethernet\n"),
        ("ports/1/rate", "10 Gb/sec (1X QDR)\n"),
        ("ports/1/lid", "0x0\n"),
        ("ports/1/sm_lid", "0x0\n"),
        ("ports/1/cap_mask", "0x00890000\n"),
        ("ports/1/pkeys/0", "0xffff\n"),
        (
            "ports/1/gids/0",
            "fe80:0000:0000:0000:f023:2eff:fe35:5d41\n",
        ),
        (
            "ports/1/gids/1",
            "0000:0000:0000:0000:0000:ffff:0a00:0001\n",
        ),
        ("ports/1/gid_attrs/types/0", "RoCE v2\n"),
        ("ports/1/gid_attrs/types/1", "RoCE v2\n"),
        ("ports/1/gid_attrs/ndevs/1", "eth0\n"),
    ];
    for (f, v) in want {
        assert_eq!(
            m.get(&format!("{d}/{f}")).map(String::as_str),
            Some(v),
            "{f}"
        );
    }
    assert_eq!(m["class/infiniband_verbs/uverbs0/ibdev"], "vrdma0\n");
    assert_eq!(m["class/infiniband_verbs/abi_version"], "6\n");
    // Only the virtual table's entries, and nothing of the host.
    assert!(!m.contains_key(&format!("{d}/ports/1/gids/2")));
    assert!(!m.contains_key(&format!("{d}/parent")));
    for (path, v) in &m {
        assert!(!path.contains("rxe0") && !v.contains("rxe0"), "{path}");
        for g in PHYS_GIDS {
            assert!(!v.contains(g), "{path} has a physical GID");
        }
        assert!(!v.contains("c612"), "{path} has the underlay address");
        assert!(v.ends_with('\n'), "{path}");
    }
}

/// The rest of a physical table of `len` entries, empty as the kernel
/// shows them (zero GIDs).
fn phys_empty_entries(root: &Path, len: u32) {
    let gids = root.join("class/infiniband/rxe0/ports/1/gids");
    for i in PHYS_GIDS.len() as u32..len {
        fs::write(gids.join(i.to_string()), sysfs_gid(&[0; 16])).unwrap();
    }
}

#[test]
fn empty_entries_show_the_zero_gid_as_the_kernels() {
    let mut dev = device(&[Ipv4Addr::new(10, 0, 0, 1)]);
    dev.gid_tbl_len = 8;
    let m = as_map(&render(&dev, &PhysAttrs::default()));
    let port = "class/infiniband/vrdma0/ports/1";
    let gid = |i: u32| m.get(&format!("{port}/gids/{i}")).map(String::as_str);
    assert_eq!(gid(1), Some("0000:0000:0000:0000:0000:ffff:0a00:0001\n"));
    for i in 2..8 {
        assert_eq!(gid(i), Some("0000:0000:0000:0000:0000:0000:0000:0000\n"));
        // The kernel fails these reads with EINVAL; left out here.
        for attr in ["types", "ndevs"] {
            assert!(!m.contains_key(&format!("{port}/gid_attrs/{attr}/{i}")));
        }
    }
    assert_eq!(gid(8), None, "nothing past the table");
    let n = |dir: &str| m.keys().filter(|k| k.starts_with(dir)).count();
    assert_eq!(n(&format!("{port}/gids/")), 8);
    assert_eq!(n(&format!("{port}/gid_attrs/types/")), 2);
    assert_eq!(n(&format!("{port}/gid_attrs/ndevs/")), 2);

    // A table shorter than masqd's entries still shows every entry.
    dev.gid_tbl_len = 1;
    let m = as_map(&render(&dev, &PhysAttrs::default()));
    assert_eq!(m.keys().filter(|k| k.contains("/gids/")).count(), 2);
}

#[test]
fn the_view_has_as_many_entries_as_the_physical_port() {
    let phys = tempfile::tempdir().unwrap();
    phys_fixture(phys.path());
    assert_eq!(read_gid_tbl_len(phys.path(), "rxe0", 1), 2);
    phys_empty_entries(phys.path(), 1024);
    let junk = phys.path().join("class/infiniband/rxe0/ports/1/gids/x");
    fs::write(junk, "not an entry\n").unwrap();
    assert_eq!(read_gid_tbl_len(phys.path(), "mlx5_0", 1), 0);
    let sock = tempfile::tempdir().unwrap();
    let v = View::new(sock.path(), phys.path(), "rxe0", 1).unwrap();
    assert_eq!(v.gid_tbl_len, 1024);
    {
        let mut st = v.lock();
        let mut dev = device(&[Ipv4Addr::new(10, 0, 0, 1)]);
        dev.gid_tbl_len = v.gid_tbl_len;
        st.device = Some(dev);
        v.write_locked(&mut st);
    }
    let gids = sock
        .path()
        .join("sysfs/class/infiniband/vrdma0/ports/1/gids");
    assert_eq!(fs::read_dir(&gids).unwrap().count(), 1024);
    let zero = "0000:0000:0000:0000:0000:0000:0000:0000\n";
    assert_eq!(fs::read_to_string(gids.join("1023")).unwrap(), zero);
}

#[test]
fn a_value_naming_the_physical_device_is_not_copied() {
    let dir = tempfile::tempdir().unwrap();
    phys_fixture(dir.path());
    fs::write(dir.path().join("class/infiniband/rxe0/fw_ver"), "rxe0 1.0").unwrap();
    let phys = read_phys_attrs(dir.path(), "rxe0", 1);
    assert!(phys.files.iter().all(|(f, _)| f != "fw_ver"));
    // Missing device: nothing copied, the view still has its own files.
    let none = read_phys_attrs(dir.path(), "mlx5_0", 1);
    assert!(none.files.is_empty());
    let m = as_map(&render(&device(&[]), &none));
    assert_eq!(m["class/infiniband/vrdma0/node_type"], "1: CA\n");
}

#[test]
fn view_is_rewritten_behind_its_symlink_and_emptied_at_removal() {
    let phys = tempfile::tempdir().unwrap();
    phys_fixture(phys.path());
    let sock = tempfile::tempdir().unwrap();
    // Leftovers of an earlier masqd are cleared.
    let stale = sock.path().join("sysfs/class/infiniband/rxe9");
    fs::create_dir_all(&stale).unwrap();
    let v = View::new(sock.path(), phys.path(), "rxe0", 1).unwrap();
    assert!(!stale.exists());
    assert!(sock.path().join(PHYS_SYSFS_DIR).is_dir());
    let class = sock.path().join("sysfs/class/infiniband");
    let write = |d: VirtualDevice| {
        let mut st = v.lock();
        st.device = Some(d);
        v.write_locked(&mut st);
    };

    write(device(&[Ipv4Addr::new(10, 0, 0, 1)]));
    let t = tree(&class);
    assert_eq!(
        t["vrdma0/ports/1/gids/1"],
        "0000:0000:0000:0000:0000:ffff:0a00:0001\n"
    );
    assert_eq!(
        fs::read_link(class.join("vrdma0")).unwrap(),
        Path::new(".vrdma0.1")
    );

    write(device(&[
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 7),
    ]));
    let t = tree(&class);
    assert_eq!(
        t["vrdma0/ports/1/gids/2"],
        "0000:0000:0000:0000:0000:ffff:0a00:0007\n"
    );
    let names: Vec<String> = fs::read_dir(&class)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, [".vrdma0.2", "vrdma0"], "the old generation is gone");

    // The same view again writes nothing new.
    write(device(&[
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 7),
    ]));
    assert_eq!(v.lock().generation, 2);

    let verbs = sock.path().join("sysfs/class/infiniband_verbs");
    assert_eq!(tree(&verbs)["uverbs0/ibdev"], "vrdma0\n");

    v.vnic_lost();
    assert_eq!(fs::read_dir(&class).unwrap().count(), 0);
    write(device(&[Ipv4Addr::new(10, 0, 0, 1)]));
    assert!(class.join("vrdma0/node_guid").exists());

    v.remove();
    assert!(class.is_dir() && verbs.is_dir(), "mount points stay");
    assert_eq!(fs::read_dir(&class).unwrap().count(), 0);
    assert_eq!(fs::read_dir(&verbs).unwrap().count(), 0);
    // Closed: nothing is written any more.
    v.refresh_phys();
    fs::write(
        phys.path().join("class/infiniband/rxe0/ports/1/state"),
        "1: DOWN\n",
    )
    .unwrap();
    v.refresh_phys();
    assert_eq!(fs::read_dir(&class).unwrap().count(), 0);
}

#[test]
fn port_state_changes_reach_the_view() {
    let phys = tempfile::tempdir().unwrap();
    phys_fixture(phys.path());
    let sock = tempfile::tempdir().unwrap();
    let v = View::new(sock.path(), phys.path(), "rxe0", 1).unwrap();
    {
        let mut st = v.lock();
        st.device = Some(device(&[]));
        v.write_locked(&mut st);
    }
    let state = sock
        .path()
        .join("sysfs/class/infiniband/vrdma0/ports/1/state");
    assert_eq!(fs::read_to_string(&state).unwrap(), "4: ACTIVE\n");
    fs::write(
        phys.path().join("class/infiniband/rxe0/ports/1/state"),
        "1: DOWN\n",
    )
    .unwrap();
    v.refresh_phys();
    assert_eq!(fs::read_to_string(&state).unwrap(), "1: DOWN\n");
}

/// The apps' device on a second rail: its view writes vrdma1 and uverbs1
/// beside the first device's, and neither view's rewrites, loss or
/// removal takes the other's files.
#[test]
fn a_further_devices_view_lives_beside_the_first() {
    let phys = tempfile::tempdir().unwrap();
    phys_fixture(phys.path());
    let sock = tempfile::tempdir().unwrap();
    let first = View::new(sock.path(), phys.path(), "rxe0", 1).unwrap();
    let second = View::further(sock.path(), phys.path(), "rxe0", 1);
    let write = |v: &View, index: usize, ip: [u8; 4]| {
        let mut d = device(&[Ipv4Addr::from(ip)]);
        d.name = format!("vrdma{index}");
        d.uverbs = format!("uverbs{index}");
        let mut st = v.lock();
        st.device = Some(d);
        v.write_locked(&mut st);
    };
    let class = sock.path().join("sysfs/class/infiniband");
    let verbs = sock.path().join("sysfs/class/infiniband_verbs");
    write(&first, 0, [10, 0, 0, 1]);
    write(&second, 1, [10, 0, 1, 1]);
    write(&first, 0, [10, 0, 0, 7]);
    write(&second, 1, [10, 0, 1, 7]);
    let t = tree(&class);
    assert_eq!(
        t["vrdma0/ports/1/gids/1"],
        "0000:0000:0000:0000:0000:ffff:0a00:0007\n"
    );
    assert_eq!(
        t["vrdma1/ports/1/gids/1"],
        "0000:0000:0000:0000:0000:ffff:0a00:0107\n"
    );
    assert_eq!(tree(&verbs)["uverbs1/ibdev"], "vrdma1\n");
    let mut names: Vec<String> = fs::read_dir(&class)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, [".vrdma0.2", ".vrdma1.2", "vrdma0", "vrdma1"]);
    // The second device's vNIC goes: the first device stays.
    second.vnic_lost();
    assert!(class.join("vrdma0/node_guid").exists());
    assert!(!class.join("vrdma1").exists() && !verbs.join("uverbs1").exists());
    // It comes back as the apps' vrdma0 (the first device went): its
    // old name goes with the rewrite.
    write(&second, 1, [10, 0, 1, 1]);
    first.vnic_lost();
    write(&second, 0, [10, 0, 1, 1]);
    let t = tree(&class);
    assert_eq!(
        t["vrdma0/ports/1/gids/1"],
        "0000:0000:0000:0000:0000:ffff:0a00:0101\n"
    );
    assert!(!class.join("vrdma1").exists() && !verbs.join("uverbs1").exists());
    second.remove();
    assert_eq!(fs::read_dir(&class).unwrap().count(), 0);
    assert!(class.is_dir(), "mount points stay");
}

/// The host's directory a tenant points its link at, holding one file.
fn host_dir(t: &Path) -> PathBuf {
    let etc = t.join("host-etc");
    fs::create_dir_all(&etc).unwrap();
    fs::write(etc.join("passwd"), "root:x:0:0\n").unwrap();
    etc
}

fn host_dir_untouched(etc: &Path) {
    let mut names: Vec<String> = fs::read_dir(etc)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["passwd"], "nothing made or removed in the host's");
    assert_eq!(
        fs::read_to_string(etc.join("passwd")).unwrap(),
        "root:x:0:0\n"
    );
}

/// Issue 51's attack at masqd's start: `mv sysfs x; mkdir -p sysfs/class;
/// ln -s /etc sysfs/class/infiniband` in the tenant's socket directory.
/// The view is refused, naming the link, and the host's directory keeps
/// its file; so for a dangling link, a file where a directory must be,
/// and a link at phys-sys.
#[test]
fn a_tenants_link_where_the_views_directories_must_be_is_refused() {
    let phys = tempfile::tempdir().unwrap();
    phys_fixture(phys.path());
    let t = tempfile::tempdir().unwrap();
    let etc = host_dir(t.path());
    let plant = |name: &str, rel: &str, make: &dyn Fn(&Path)| {
        let sock = t.path().join(name);
        let p = sock.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        make(&p);
        let e = View::new(&sock, phys.path(), "rxe0", 1)
            .err()
            .expect("the view is refused");
        assert!(e.to_string().contains(rel), "{rel}: {e}");
        host_dir_untouched(&etc);
    };
    let link_to = |target: PathBuf| move |p: &Path| std::os::unix::fs::symlink(&target, p).unwrap();
    plant("a", "sysfs/class/infiniband", &link_to(etc.clone()));
    plant("b", "sysfs/class/infiniband_verbs", &link_to(etc.clone()));
    plant("c", "sysfs/class", &link_to(etc.clone()));
    plant(
        "d",
        "sysfs/class/infiniband",
        &link_to("/nonexistent".into()),
    );
    plant("e", "sysfs/class/infiniband", &|p: &Path| {
        fs::write(p, "").unwrap()
    });
    plant("f", PHYS_SYSFS_DIR, &link_to(etc.clone()));
}

/// The same link planted while masqd runs: neither a rewrite of the view
/// nor its removal at masqd's stop writes or removes through it; links
/// among the view's entries are removed themselves.
#[test]
fn a_tenants_link_planted_under_a_running_view_is_never_followed() {
    let phys = tempfile::tempdir().unwrap();
    phys_fixture(phys.path());
    let t = tempfile::tempdir().unwrap();
    let etc = host_dir(t.path());
    let sock = t.path().join("sock");
    let v = View::new(&sock, phys.path(), "rxe0", 1).unwrap();
    let write = |ip: [u8; 4]| {
        let mut st = v.lock();
        st.device = Some(device(&[Ipv4Addr::from(ip)]));
        v.write_locked(&mut st);
    };
    write([10, 0, 0, 1]);
    let class = sock.join("sysfs/class/infiniband");
    let verbs = sock.join("sysfs/class/infiniband_verbs");
    // Links among the entries, into the view's tree and beside it.
    std::os::unix::fs::symlink(&etc, class.join(".vrdma0.1/ports/1/x")).unwrap();
    std::os::unix::fs::symlink(&etc, class.join(".vrdma0.9")).unwrap();
    std::os::unix::fs::symlink(&etc, verbs.join("uverbs7")).unwrap();
    write([10, 0, 0, 2]);
    assert!(class.join("vrdma0/node_guid").exists());
    assert!(!class.join(".vrdma0.9").exists() && !class.join(".vrdma0.1").exists());
    host_dir_untouched(&etc);

    // The class directory itself swapped for a link to the host's.
    fs::rename(&class, sock.join("x")).unwrap();
    std::os::unix::fs::symlink(&etc, &class).unwrap();
    write([10, 0, 0, 3]);
    host_dir_untouched(&etc);
    v.remove();
    host_dir_untouched(&etc);
    let verbs_entries = fs::read_dir(&verbs).unwrap().count();
    assert_eq!(verbs_entries, 0, "the rest of the view is emptied");
}

/// A deleted endpoint's view directories go only where they are
/// directories of the socket directory: an empty directory of the host's
/// a link points at stays.
#[test]
fn removing_the_view_directories_follows_no_link() {
    let t = tempfile::tempdir().unwrap();
    let etc = t.path().join("host");
    for d in ["infiniband", "infiniband_verbs"] {
        fs::create_dir_all(etc.join(d)).unwrap();
    }
    let sock = t.path().join("sock");
    fs::create_dir_all(sock.join("sysfs")).unwrap();
    std::os::unix::fs::symlink(&etc, sock.join("sysfs/class")).unwrap();
    remove_dirs(&sock);
    assert!(etc.join("infiniband").is_dir() && etc.join("infiniband_verbs").is_dir());
    // Its own, empty, go.
    let own = t.path().join("own");
    fs::create_dir_all(own.join("sysfs/class/infiniband")).unwrap();
    fs::create_dir_all(own.join("sysfs/class/infiniband_verbs")).unwrap();
    fs::create_dir_all(own.join(PHYS_SYSFS_DIR)).unwrap();
    remove_dirs(&own);
    assert_eq!(fs::read_dir(&own).unwrap().count(), 0);
}
