//! Container Device Interface specs: one per endpoint, so that a runtime
//! that speaks CDI (podman, containerd, CRI-O, Kubernetes device plugins)
//! gives a container everything masq needs from `--device
//! masq.io/endpoint=NAME` alone, with nothing changed in its image:
//!
//! - the served device's uverbs node (the app opens the physical device
//!   through stock libibverbs; the data path stays on it);
//! - the endpoint's socket directory at /run/masq, where libmasq looks for
//!   `masq.sock` by default, read-only: a socket is connected to on a
//!   read-only mount, and masqd's files there (the sysfs view, which the
//!   next container binds) stay out of the tenant's reach;
//! - the sysfs view masqd writes there bound over /sys/class/infiniband
//!   and /sys/class/infiniband_verbs, and the host's sysfs at
//!   /run/masq/phys-sys for libmasq itself (see `sysfs_view.rs`);
//! - libmasq.so and its facades at /usr/lib/masq, and LD_PRELOAD.
//!
//! Runtimes read the spec directory when they create a container, so the
//! file is written before `endpoint add` returns (a CNI ADD precedes the
//! container's creation) and goes with the endpoint.

use crate::config::CdiConfig;
use crate::error::Result;
use serde_json::{json, Value};
use std::io;
use std::path::{Path, PathBuf};

/// The CDI kind (vendor/class) of masq's endpoint devices.
pub const KIND: &str = "masq.io/endpoint";
/// The oldest spec version with everything used here; runtimes accept
/// specs up to the version they know (podman 4.3: 0.5.0).
const CDI_VERSION: &str = "0.5.0";
/// Where libmasq and its facades appear in the container.
pub const CONTAINER_LIB_DIR: &str = "/usr/lib/masq";
/// Our files in a shared spec directory start with this.
const FILE_PREFIX: &str = "masq-endpoint-";

/// What one endpoint's device gives a container.
pub struct Device<'a> {
    pub name: &'a str,
    /// The endpoint's socket directory on the host.
    pub socket_dir: &'a Path,
    /// The uverbs nodes of its devices (one per rail it is on).
    pub uverbs_nodes: Vec<&'a Path>,
    /// Whether masqd keeps a sysfs view in the socket directory.
    pub sysfs_view: bool,
}

pub fn spec_path(cfg: &CdiConfig, name: &str) -> PathBuf {
    cfg.spec_dir.join(format!("{FILE_PREFIX}{name}.json"))
}

/// A bind mount, read-only: the container writes nothing masq gives it.
fn bind(host: &Path, container: &str) -> Value {
    json!({
        "hostPath": host,
        "containerPath": container,
        "options": ["bind", "ro", "nosuid", "nodev"],
    })
}

/// The spec for one endpoint.
pub fn spec(cfg: &CdiConfig, d: &Device) -> Value {
    let mut mounts = vec![bind(d.socket_dir, "/run/masq")];
    if d.sysfs_view {
        let view = d.socket_dir.join("sysfs");
        mounts.push(bind(
            Path::new("/sys"),
            &format!("/run/masq/{}", crate::kernel::sysfs_view::PHYS_SYSFS_DIR),
        ));
        for class in crate::kernel::sysfs_view::CLASS_DIRS {
            mounts.push(bind(&view.join(class), &format!("/sys/{class}")));
        }
    }
    mounts.push(bind(&cfg.libmasq_dir, CONTAINER_LIB_DIR));
    json!({
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": [{
            "name": d.name,
            "containerEdits": {
                "env": [format!("LD_PRELOAD={CONTAINER_LIB_DIR}/libmasq.so")],
                "deviceNodes": d.uverbs_nodes.iter().map(|p| json!({ "path": p })).collect::<Vec<_>>(),
                "mounts": mounts,
            },
        }],
    })
}

/// Write the endpoint's spec; a reader sees the old file or the new one.
pub fn write(cfg: &CdiConfig, d: &Device) -> Result<PathBuf> {
    let lib = cfg.libmasq_dir.join("libmasq.so");
    if !lib.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("cdi.libmasqDir: no libmasq.so at {}", lib.display()),
        )
        .into());
    }
    std::fs::create_dir_all(&cfg.spec_dir).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cdi.specDir: cannot create {}: {e}", cfg.spec_dir.display()),
        )
    })?;
    let path = spec_path(cfg, d.name);
    let tmp = cfg.spec_dir.join(format!(".{FILE_PREFIX}{}.tmp", d.name));
    let text = serde_json::to_vec_pretty(&spec(cfg, d)).map_err(io::Error::other)?;
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io::Error::new(e.kind(), format!("CDI spec {}: {e}", path.display()))
        })?;
    Ok(path)
}

pub fn remove(cfg: &CdiConfig, name: &str) {
    let path = spec_path(cfg, name);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("cannot remove CDI spec {}: {e}", path.display()),
    }
}

/// Remove masq's specs for endpoints not served any more (deleted while
/// masqd was down, or gone from the config file): a runtime would
/// otherwise hand out a device whose socket nobody serves.
pub fn remove_stale(cfg: &CdiConfig, served: &[String]) {
    let Ok(dir) = std::fs::read_dir(&cfg.spec_dir) else {
        return;
    };
    for entry in dir.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(name) = file
            .strip_prefix(FILE_PREFIX)
            .and_then(|f| f.strip_suffix(".json"))
        else {
            continue;
        };
        if !served.iter().any(|s| s == name) {
            remove(cfg, name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dir: &Path, lib: &Path) -> CdiConfig {
        CdiConfig {
            spec_dir: dir.to_path_buf(),
            libmasq_dir: lib.to_path_buf(),
        }
    }

    fn dev<'a>(name: &'a str, sock: &'a Path) -> Device<'a> {
        Device {
            name,
            socket_dir: sock,
            uverbs_nodes: vec![Path::new("/dev/infiniband/uverbs0")],
            sysfs_view: true,
        }
    }

    #[test]
    fn a_spec_gives_the_device_node_the_socket_the_view_and_the_preload() {
        let c = cfg(Path::new("/etc/cdi"), Path::new("/opt/masq/lib"));
        let s = spec(&c, &dev("acme-a", Path::new("/run/masq/endpoints/acme-a")));
        assert_eq!(s["kind"], "masq.io/endpoint");
        let d = &s["devices"][0];
        assert_eq!(d["name"], "acme-a");
        let e = &d["containerEdits"];
        assert_eq!(e["env"][0], "LD_PRELOAD=/usr/lib/masq/libmasq.so");
        assert_eq!(e["deviceNodes"][0]["path"], "/dev/infiniband/uverbs0");
        let m: Vec<(String, String)> = e["mounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .map(|m| {
                (
                    m["hostPath"].as_str().unwrap_or_default().to_string(),
                    m["containerPath"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        let want = [
            ("/run/masq/endpoints/acme-a", "/run/masq"),
            ("/sys", "/run/masq/phys-sys"),
            (
                "/run/masq/endpoints/acme-a/sysfs/class/infiniband",
                "/sys/class/infiniband",
            ),
            (
                "/run/masq/endpoints/acme-a/sysfs/class/infiniband_verbs",
                "/sys/class/infiniband_verbs",
            ),
            ("/opt/masq/lib", "/usr/lib/masq"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(m, want);
        // The tenant writes none of them: not its socket directory, where
        // masqd keeps its view (issue 51).
        for m in e["mounts"].as_array().expect("mounts") {
            assert_eq!(m["options"][1], "ro", "{m}");
        }
    }

    #[test]
    fn specs_are_written_removed_and_stale_ones_cleaned_up() {
        let t = tempfile::tempdir().expect("tempdir");
        let lib = t.path().join("lib");
        std::fs::create_dir(&lib).expect("lib dir");
        let specs = t.path().join("cdi");
        let c = cfg(&specs, &lib);
        let sock = t.path().join("sock");
        let e = write(&c, &dev("a", &sock)).unwrap_err();
        assert!(e.to_string().contains("cdi.libmasqDir"), "{e}");
        assert!(!specs.exists(), "nothing written without libmasq");
        std::fs::write(lib.join("libmasq.so"), b"").expect("lib");
        for n in ["a", "b"] {
            let p = write(&c, &dev(n, &sock)).expect("write");
            let v: Value = serde_json::from_slice(&std::fs::read(&p).expect("read")).expect("json");
            assert_eq!(v["devices"][0]["name"], n);
        }
        std::fs::write(specs.join("other-vendor.json"), b"{}").expect("other");
        remove_stale(&c, &["a".to_string()]);
        let mut left: Vec<String> = std::fs::read_dir(&specs)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["masq-endpoint-a.json", "other-vendor.json"]);
        remove(&c, "a");
        remove(&c, "a");
        assert!(!spec_path(&c, "a").exists());
    }
}
