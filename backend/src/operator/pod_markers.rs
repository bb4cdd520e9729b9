//! The markers masq-nri decides by: ADD leaves one for each masq
//! attachment of a pod sandbox, `<pods>/<container ID>/<ifname>`, before it
//! asks masqd anything, and DEL and GC remove them. `<pods>` is `pods/`
//! beside masqd's control socket (`/run/masq/pods`): root's, on the host,
//! and mounted in no tenant's container (an endpoint's containers see only
//! its own `endpoints/<name>/`). A runtime runs a sandbox's CNI ADD before
//! it creates any container of the pod, so masq-nri knows from the pod
//! itself whether it asked for masq, and leaves every other pod alone even
//! when masqd cannot be reached (cni/nri/pods.go reads them). masq-cni
//! writes them (cni/src/main.rs).

use crate::config::EndpointConfig;
use serde::{Deserialize, Serialize};
use std::fs::DirBuilder;
use std::io::ErrorKind;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// What a marker holds: the masq network the pod asked for (masq-nri names
/// it when the pod cannot have it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub network: String,
    pub tenant: String,
    pub vni: u32,
}

pub struct Markers {
    dir: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerError {
    /// A container ID or interface name that is no plain name.
    BadName(String),
    /// The file system refused (the message names the file).
    Io(String),
}

impl std::fmt::Display for MarkerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MarkerError::BadName(m) | MarkerError::Io(m) => f.write_str(m),
        }
    }
}

type Result<T> = std::result::Result<T, MarkerError>;

/// A container ID or interface name as one path component: the CNI
/// specification's alphabets allow no '/', and "." and ".." are not names.
fn component<'a>(what: &str, s: &'a str) -> Result<&'a str> {
    if s.is_empty() || s == "." || s == ".." || s.contains(['/', '\0']) {
        return Err(MarkerError::BadName(format!(
            "masq: {what} {s:?} is not a plain name"
        )));
    }
    Ok(s)
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> MarkerError {
    MarkerError::Io(format!(
        "masq: cannot {what} masq-nri's marker {}: {e}",
        path.display()
    ))
}

impl Markers {
    /// The markers beside masqd's control socket `socket`.
    pub fn beside(socket: &Path) -> Markers {
        Markers {
            dir: socket.parent().unwrap_or(Path::new("/")).join("pods"),
        }
    }

    fn path(&self, container_id: &str, ifname: &str) -> Result<(PathBuf, PathBuf)> {
        let sandbox = self.dir.join(component("CNI_CONTAINERID", container_id)?);
        let file = sandbox.join(component("CNI_IFNAME", ifname)?);
        Ok((sandbox, file))
    }

    /// Leave the marker of attachment (container_id, ifname); written whole
    /// (a temporary name, then renamed) so masq-nri never reads half.
    pub fn add(&self, container_id: &str, ifname: &str, m: &Marker) -> Result<()> {
        let (sandbox, file) = self.path(container_id, ifname)?;
        // The directories above as any other (the socket directory's mode
        // is masqd's to set), the sandbox's root's only.
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| io_error("make the directory of", &file, e))?;
        match DirBuilder::new().mode(0o700).create(&sandbox) {
            Err(e) if e.kind() != ErrorKind::AlreadyExists => {
                return Err(io_error("make the directory of", &file, e));
            }
            _ => {}
        }
        let tmp = sandbox.join(format!(".{ifname}.tmp"));
        let body = serde_json::to_vec(m)
            .map_err(|e| MarkerError::Io(format!("masq: marker {ifname}: {e}")))?;
        std::fs::write(&tmp, body).map_err(|e| io_error("write", &file, e))?;
        std::fs::rename(&tmp, &file).map_err(|e| io_error("write", &file, e))
    }

    /// Remove the marker of attachment (container_id, ifname) if it is
    /// `network`'s (or unreadable), and the sandbox's directory once empty.
    /// Nothing to remove is no error (DEL is idempotent).
    pub fn remove(&self, container_id: &str, ifname: &str, network: &str) -> Result<()> {
        let (sandbox, file) = self.path(container_id, ifname)?;
        let theirs = match std::fs::read(&file) {
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_error("read", &file, e)),
            Ok(b) => serde_json::from_slice::<Marker>(&b).is_ok_and(|m| m.network != network),
        };
        if theirs {
            return Ok(());
        }
        match std::fs::remove_file(&file) {
            Err(e) if e.kind() != ErrorKind::NotFound => {
                return Err(io_error("remove", &file, e));
            }
            _ => {}
        }
        // Another attachment's marker keeps it (ENOTEMPTY).
        let _ = std::fs::remove_dir(&sandbox);
        Ok(())
    }

    /// masqd's: the markers in its socket directory (beside its control
    /// socket, as masq-cni finds them).
    pub fn in_socket_dir(socket_dir: &Path) -> Markers {
        Markers {
            dir: socket_dir.join("pods"),
        }
    }

    /// masqd at start: the marker of each endpoint a CNI ADD made that has
    /// none (a pod made by a masq-cni from before the markers), so that
    /// its containers created from now on (a restart) still get their
    /// device. Returns what could not be written.
    pub fn restore(&self, endpoints: &[EndpointConfig]) -> Vec<MarkerError> {
        let mut failed = Vec::new();
        for e in endpoints {
            let Some(cni) = &e.cni else { continue };
            match self.path(&cni.container_id, &cni.ifname) {
                Ok((_, file)) if file.exists() => continue,
                Ok(_) => {}
                Err(err) => {
                    failed.push(err);
                    continue;
                }
            }
            let m = Marker {
                network: cni.network.clone(),
                tenant: e.tenant.clone(),
                vni: e.vni,
            };
            if let Err(err) = self.add(&cni.container_id, &cni.ifname, &m) {
                failed.push(err);
            }
        }
        failed
    }

    /// GC: remove `network`'s markers of attachments (container ID,
    /// ifname) that are not `valid`.
    pub fn gc(&self, network: &str, valid: impl Fn(&str, &str) -> bool) -> Result<()> {
        let sandboxes = match std::fs::read_dir(&self.dir) {
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            other => other.map_err(|e| io_error("list", &self.dir, e))?,
        };
        for sandbox in sandboxes.flatten() {
            let id = sandbox.file_name().to_string_lossy().into_owned();
            let Ok(files) = std::fs::read_dir(sandbox.path()) else {
                continue;
            };
            for f in files.flatten() {
                let ifname = f.file_name().to_string_lossy().into_owned();
                let ours = std::fs::read(f.path())
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Marker>(&b).ok())
                    .is_some_and(|m| m.network == network);
                if ours && !valid(&id, &ifname) {
                    self.remove(&id, &ifname, network)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(network: &str) -> Marker {
        Marker {
            network: network.into(),
            tenant: "acme".into(),
            vni: 100,
        }
    }

    #[test]
    fn add_leaves_a_marker_del_and_gc_remove_it() {
        let t = tempfile::tempdir().expect("tmp");
        let m = Markers::beside(&t.path().join("control.sock"));
        let pods = t.path().join("pods");
        m.add("sb1", "net1", &marker("acme100")).expect("add");
        m.add("sb1", "net2", &marker("acme200")).expect("add");
        let read = |p: PathBuf| serde_json::from_slice::<Marker>(&std::fs::read(p).expect("read"));
        assert_eq!(
            read(pods.join("sb1/net1")).expect("json"),
            marker("acme100")
        );
        // Another network's DEL of the same name leaves it.
        m.remove("sb1", "net1", "acme200").expect("del");
        assert!(pods.join("sb1/net1").exists());
        m.remove("sb1", "net1", "acme100").expect("del");
        m.remove("sb1", "net1", "acme100").expect("del again");
        assert!(!pods.join("sb1/net1").exists() && pods.join("sb1/net2").exists());
        m.remove("sb1", "net2", "acme200").expect("del");
        assert!(
            !pods.join("sb1").exists(),
            "the empty sandbox directory goes"
        );
        // GC: this network's attachments the runtime no longer lists.
        m.add("sb2", "net1", &marker("acme100")).expect("add");
        m.add("sb3", "net1", &marker("acme100")).expect("add");
        m.add("sb4", "net1", &marker("other")).expect("add");
        m.gc("acme100", |id, ifname| (id, ifname) == ("sb2", "net1"))
            .expect("gc");
        assert!(pods.join("sb2/net1").exists());
        assert!(!pods.join("sb3").exists());
        assert!(pods.join("sb4/net1").exists());
    }

    /// An endpoint a CNI ADD made before masq-cni left markers gets one
    /// when masqd starts; one that has its marker keeps it as it is, and
    /// an endpoint of no attachment gets none.
    #[test]
    fn masqd_marks_the_pods_it_restores_that_have_none() {
        let t = tempfile::tempdir().expect("tmp");
        let m = Markers::in_socket_dir(t.path());
        let ep = |name: &str, cni: Option<(&str, &str)>| {
            let mut v = serde_json::json!({"name": name, "tenant": "acme", "vni": 100,
                "vip": "10.0.0.60", "netns": "/var/run/netns/x"});
            if let Some((id, ifname)) = cni {
                v["cni"] = serde_json::json!({"containerId": id, "network": "acme100",
                    "ifname": ifname});
            }
            serde_json::from_value::<EndpointConfig>(v).expect("endpoint")
        };
        m.add("sb2", "net1", &marker("mine")).expect("add");
        let failed = m.restore(&[
            ep("team.old", Some(("sb1", "net1"))),
            ep("team.new", Some(("sb2", "net1"))),
            ep("plain", None),
            ep("bad", Some(("..", "net1"))),
        ]);
        assert!(
            matches!(failed[..], [MarkerError::BadName(_)]),
            "{failed:?}"
        );
        let read = |p: &str| {
            serde_json::from_slice::<Marker>(&std::fs::read(t.path().join(p)).expect("read"))
                .expect("json")
        };
        assert_eq!(read("pods/sb1/net1"), marker("acme100"));
        assert_eq!(read("pods/sb2/net1"), marker("mine"));
        assert_eq!(
            std::fs::read_dir(t.path().join("pods"))
                .expect("ls")
                .count(),
            2
        );
    }

    #[test]
    fn names_that_would_leave_the_directory_are_refused() {
        let t = tempfile::tempdir().expect("tmp");
        let m = Markers::beside(&t.path().join("control.sock"));
        for (id, ifname) in [
            ("..", "eth0"),
            ("a/b", "eth0"),
            ("sb", "../x"),
            ("", "eth0"),
        ] {
            let e = m.add(id, ifname, &marker("n")).unwrap_err();
            assert!(matches!(e, MarkerError::BadName(_)), "{id} {ifname}: {e}");
        }
        assert!(!t.path().join("x").exists());
    }
}
