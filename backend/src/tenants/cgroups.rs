//! Which processes are an endpoint's: those in its network namespace
//! (`same_netns`); and the cgroups the software-RoCE backstop filters as an
//! endpoint's besides `<cgroupParent>/<endpoint>`:
//!
//! - the cgroup a container runtime put an app in, adopted when the app
//!   opens a session (podman's containers);
//! - a Kubernetes pod's cgroup, adopted when the runtime's NRI plugin
//!   (masq-nri) creates a container in the pod, before any of its apps
//!   runs, so an app that never opens a session (one that skips libmasq)
//!   is filtered too.
//!
//! Either is adopted only if every process in it lives in the endpoint's
//! network namespace: a login session's or a service's cgroup that merely
//! entered the namespace is no container's, and filtering it would catch
//! the host's own apps. For a pod the same check refuses a cgroup parent
//! shared with other pods.

use crate::config::EndpointConfig;
use crate::enforce::backstop::Backstop;
use crate::enforce::rdma_cgroup::CGROUP_ROOT;
use crate::error::{Error, Result};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use tracing::warn;

/// An app belongs to an endpoint when it lives in that endpoint's network
/// namespace: the socket path alone could be reached from elsewhere.
pub fn same_netns(pid: i32, netns: &Path) -> Result<()> {
    let want = std::fs::metadata(netns)
        .map_err(|e| Error::os(format!("endpoint namespace {}", netns.display()), e))?;
    let have = std::fs::metadata(format!("/proc/{pid}/ns/net"))
        .map_err(|e| Error::os(format!("pid {pid} network namespace"), e))?;
    if (want.dev(), want.ino()) == (have.dev(), have.ino()) {
        Ok(())
    } else {
        Err(Error::Failed(format!(
            "pid {pid} is not in the endpoint's network namespace {}",
            netns.display()
        )))
    }
}

/// `pid`'s cgroup v2 path below the root ("" for the root itself).
fn cgroup_of(pid: i32) -> Result<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map_err(|e| Error::os(format!("pid {pid}"), e))?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::/"))
        .map(|p| p.trim_end_matches('/').to_string())
        .ok_or_else(|| {
            Error::Failed(format!(
                "pid {pid}: no cgroup v2 entry in /proc/{pid}/cgroup"
            ))
        })
}

/// The first process in cgroup `path`, or in one below it, that lives
/// outside `netns`. A process that exited meanwhile is no outsider.
fn outsider(path: &Path, netns: &Path) -> Result<Option<i32>> {
    let procs = path.join("cgroup.procs");
    let list =
        std::fs::read_to_string(&procs).map_err(|e| Error::os(procs.display().to_string(), e))?;
    let found = list
        .lines()
        .filter_map(|p| p.trim().parse::<i32>().ok())
        .find(|&p| {
            std::fs::metadata(format!("/proc/{p}/ns/net")).is_ok() && same_netns(p, netns).is_err()
        });
    if found.is_some() {
        return Ok(found);
    }
    let children = std::fs::read_dir(path).map_err(|e| Error::os(path.display().to_string(), e))?;
    for child in children.flatten() {
        if child.file_type().is_ok_and(|t| t.is_dir()) {
            if let Some(p) = outsider(&child.path(), netns)? {
                return Ok(Some(p));
            }
        }
    }
    Ok(None)
}

/// Adopt cgroup `path` for `ep` if every process in it is the endpoint's.
/// Returns whether it is new.
fn adopt(b: &Backstop, ep: &EndpointConfig, path: &str) -> Result<bool> {
    match outsider(&Path::new(CGROUP_ROOT).join(path), &ep.netns)? {
        None => b.adopt_cgroup(&ep.name, path),
        Some(p) => Err(Error::Failed(format!(
            "cgroup /{path}: pid {p} in it lives outside the endpoint's namespace"
        ))),
    }
}

/// An app outside the endpoint's cgroup, as it opens its session (HELLO):
/// filter its own cgroup (its container's) as the endpoint's. Returns the
/// cgroup if it is newly adopted; an error says why the backstop cannot
/// tell this app's packets, and the app is refused (issue 51: it was
/// served unfiltered).
pub fn adopt_app_cgroup(b: &Backstop, ep: &EndpointConfig, pid: i32) -> Result<Option<String>> {
    let path = cgroup_of(pid)?;
    if path.is_empty() {
        return Err(Error::Failed(format!(
            "pid {pid} runs in the root cgroup, whose packets cannot be filtered as the \
             endpoint's: run it in a container or in the endpoint's cgroup"
        )));
    }
    if b.by_name(&path) {
        return Ok(None);
    }
    match adopt(b, ep, &path) {
        Ok(new) => Ok(new.then_some(path)),
        Err(why) => Err(why.context(format_args!("its cgroup /{path}"))),
    }
}

/// A pod's cgroup, from its sandbox process `pid` (the pause container's):
/// the parent of that process's cgroup, which holds every container of the
/// pod. Returns the cgroup (below the root) and whether it is new.
pub fn adopt_pod_cgroup(b: &Backstop, ep: &EndpointConfig, pid: i32) -> Result<(String, bool)> {
    same_netns(pid, &ep.netns)?;
    let own = cgroup_of(pid)?;
    let pod = match own.rsplit_once('/') {
        Some((parent, _)) => parent.to_string(),
        None => {
            return Err(Error::Failed(format!(
                "pid {pid} runs in /{own}, a cgroup directly below the root: its pod has \
                 no cgroup of its own (give the pod a cgroup parent, as kubelet does)"
            )))
        }
    };
    let new = adopt(b, ep, &pod)?;
    Ok((pod, new))
}

/// At start, before any endpoint is served: the cgroups adopted before
/// the restart (`adopted`, endpoint and cgroup: pods' and apps' alike)
/// whose endpoint is still served and that still exist, checked again.
/// Returns those adopted; the others are logged.
pub fn readopt_cgroups<'a>(
    b: &Backstop,
    adopted: impl IntoIterator<Item = (&'a String, &'a String)>,
    endpoint: impl Fn(&str) -> Option<EndpointConfig>,
) -> Vec<(String, String)> {
    let mut done = Vec::new();
    for (name, cgroup) in adopted {
        let Some(ep) = endpoint(name) else {
            continue; // removed meanwhile
        };
        if !Path::new(CGROUP_ROOT).join(cgroup).is_dir() {
            continue; // its container ended meanwhile
        }
        match adopt(b, &ep, cgroup) {
            Ok(_) => done.push((name.clone(), cgroup.clone())),
            Err(e) => warn!(endpoint = %name, cgroup = %format!("/{cgroup}"),
                            "the cgroup is not filtered again after the restart: {e}"),
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn procs(dir: &Path, pids: &[u32]) {
        std::fs::create_dir_all(dir).unwrap();
        let list: String = pids.iter().map(|p| format!("{p}\n")).collect();
        std::fs::write(dir.join("cgroup.procs"), list).unwrap();
    }

    /// A pod's cgroup is the endpoint's only if every process below it
    /// lives in the endpoint's namespace; one container of another
    /// namespace (a cgroup parent shared with another pod) makes it not.
    #[test]
    fn a_process_of_another_namespace_anywhere_below_makes_an_outsider() {
        let Ok(mut other) = Command::new("unshare")
            .args(["--net", "sleep", "30"])
            .stdout(Stdio::null())
            .spawn()
        else {
            eprintln!("skipped: no unshare(1)");
            return;
        };
        let dir = std::env::temp_dir().join(format!("masq-cgroups-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let me = std::process::id();
        let netns = Path::new("/proc/self/ns/net");
        procs(&dir, &[]);
        procs(&dir.join("pause"), &[me]);
        procs(&dir.join("app"), &[me, 999_999_999]); // one has exited
        assert_eq!(outsider(&dir, netns), Ok(None));
        // Wait until the child has entered its namespace.
        let mine = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        for _ in 0..100 {
            let theirs = std::fs::metadata(format!("/proc/{}/ns/net", other.id()));
            if theirs.is_ok_and(|m| m.ino() != mine) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        procs(&dir.join("app/nested"), &[other.id()]);
        let found = outsider(&dir, netns);
        let _ = other.kill();
        let _ = other.wait();
        let _ = std::fs::remove_dir_all(&dir);
        if found == Ok(None) {
            eprintln!("skipped: unshare --net did not make a namespace here (not root?)");
            return;
        }
        assert_eq!(found, Ok(Some(other.id() as i32)));
    }
}
