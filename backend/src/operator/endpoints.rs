//! The operator's endpoints: serving one (its socket, its accept thread,
//! its CDI spec), and adding or removing one while masqd runs (`masqctl
//! endpoint add/del`): everything an endpoint has in the kernel and on
//! disk comes and goes with it, and no other endpoint notices.

use crate::config::{CniOwner, EndpointConfig};
use crate::endpoints::endpoint::{Endpoint, Origin};
use crate::endpoints::registry::RuntimeFile;
use crate::error::{Error, Result};
use crate::run::lock;
use crate::tenants::parts::Parts;
use crate::tenants::serve::{accept_loop, further_view_for, sysfs_view_for};
use crate::transport::seqpacket::Listener;
use serde_json::{json, Value};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use tracing::{debug, info, warn};

/// Listen on the endpoint's socket and accept its apps in a thread of its
/// own. A further device of another endpoint (`deviceOf`) is served on
/// that one's socket: its CDI spec is rewritten to bring this device too.
pub fn serve(parts: &Arc<Parts>, ep: &Arc<Endpoint>) -> Result<()> {
    if let Some(why) = refusal(parts, ep) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("endpoint {}: not served: {why}", ep.cfg.name),
        )
        .into());
    }
    if ep.cfg.device_of.is_none() {
        listen(parts, ep)?;
    }
    // Reading the vNIC writes the endpoint's sysfs view; a namespace that
    // does not exist yet is picked up by the view's thread.
    if let Err(e) = ep.with_vnic(|_| ()) {
        debug!(endpoint = %ep.cfg.name, "vNIC not readable yet: {e}");
    }
    if let Err(e) = write_cdi(parts, ep) {
        unserve(parts, ep);
        return Err(e.into());
    }
    info!(endpoint = %ep.cfg.name, tenant = %ep.cfg.tenant, vni = ep.cfg.vni,
          vip = %ep.cfg.vip, rail = %parts.rail(ep).name, socket = %ep.socket.display(),
          origin = ?ep.origin, "endpoint ready");
    Ok(())
}

/// Why `ep` is not served, if it is not: its sysfs view, or that of the
/// endpoint it is a further device of, could not be made.
pub fn refusal(parts: &Parts, ep: &Endpoint) -> Option<String> {
    if let Some(why) = &ep.view_refused {
        return Some(why.clone());
    }
    let of = ep.cfg.device_of.as_deref()?;
    let primary = parts.registry().local_named(of)?;
    let why = primary.view_refused.as_ref()?;
    Some(format!("endpoint {of}: {why}"))
}

fn listen(parts: &Arc<Parts>, ep: &Arc<Endpoint>) -> io::Result<()> {
    let bound = ep
        .socket
        .parent()
        .map(std::fs::create_dir_all)
        .unwrap_or(Ok(()))
        .map_err(crate::error::Error::from)
        // Any local process may connect: the endpoint's identity is
        // checked against the peer's network namespace.
        .and_then(|_| Listener::bind(&ep.socket, 0o666));
    let listener = match bound {
        Ok(l) => Arc::new(l),
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "endpoint {}: cannot listen on {}: {e}",
                    ep.cfg.name,
                    ep.socket.display()
                ),
            ))
        }
    };
    *lock(&ep.listener) = Some(listener.clone());
    let (s, e) = (parts.clone(), ep.clone());
    let spawned = thread::Builder::new()
        .name(format!("accept-{}", ep.cfg.name))
        .spawn(move || accept_loop(s, e, listener));
    if let Err(e) = spawned {
        unserve(parts, ep);
        return Err(e);
    }
    Ok(())
}

/// The CDI spec of `ep`'s apps' endpoint (`ep`'s, or the one it is a
/// further device of), with the uverbs node of every device they have.
fn write_cdi(parts: &Parts, ep: &Endpoint) -> io::Result<()> {
    let Some(cdi) = &parts.config().cdi else {
        return Ok(());
    };
    let devices = parts.registry().devices_of(ep);
    let Some(primary) = devices.iter().find(|d| d.cfg.device_of.is_none()) else {
        return Ok(());
    };
    let Some(dir) = primary.socket.parent() else {
        return Ok(());
    };
    let dev = crate::operator::cdi::Device {
        name: &primary.cfg.name,
        socket_dir: dir,
        uverbs_nodes: devices
            .iter()
            .map(|d| parts.rail(d).device.host.uverbs_node.as_path())
            .collect(),
        sysfs_view: primary.view.is_some(),
    };
    crate::operator::cdi::write(cdi, &dev)
        .map(|_| ())
        .map_err(|e| io::Error::new(e.kind(), format!("endpoint {}: {e}", ep.cfg.name)))
}

/// Stop accepting (the accept thread ends) and take the socket, the
/// sysfs view and the CDI spec off the disk.
fn unserve(parts: &Parts, ep: &Endpoint) {
    if let Some(cdi) = &parts.config().cdi {
        if ep.cfg.device_of.is_none() {
            crate::operator::cdi::remove(cdi, &ep.cfg.name);
        }
    }
    if ep.cfg.device_of.is_some() {
        // The primary's socket and view stay; its spec loses this device
        // once the registry has (the caller removes it first).
        if let Some(v) = &ep.view {
            v.remove();
        }
        if let Err(e) = write_cdi(parts, ep) {
            warn!(endpoint = %ep.cfg.name, "CDI spec: {e}");
        }
        return;
    }
    if let Some(l) = lock(&ep.listener).take() {
        l.shutdown();
    }
    let _ = std::fs::remove_file(&ep.socket);
    if let Some(v) = &ep.view {
        v.remove();
    }
}

/// What `add_endpoint` put in place, taken away again (the backstop's
/// chain, then the tcp/udp table) if it fails before `done`.
struct UndoAdd<'a> {
    parts: &'a Parts,
    e: &'a EndpointConfig,
    firewall: bool,
    backstop: bool,
}

impl UndoAdd<'_> {
    /// The endpoint is served: nothing to undo.
    fn done(&mut self) {
        self.firewall = false;
        self.backstop = false;
    }
}

impl Drop for UndoAdd<'_> {
    fn drop(&mut self) {
        let name = &self.e.name;
        if self.backstop {
            if let Some(b) = self.parts.admission().backstop() {
                if let Err(err) = b.remove_endpoint(name) {
                    warn!(endpoint = %name, "backstop: cannot remove its chain: {err}");
                }
            }
        }
        if self.firewall {
            if let Err(err) = crate::enforce::firewall::remove(std::slice::from_ref(self.e)) {
                warn!(endpoint = %name, "cannot remove its nftables table: {err}");
            }
        }
    }
}

/// A removed endpoint's socket directory, if empty, and its sysfs view's
/// directories, which `unserve` emptied: they stay across a masqd restart
/// for tenants that bound them, but a deleted endpoint has no tenants left.
fn remove_socket_dir(ep: &Endpoint) {
    if let Some(dir) = ep.socket.parent() {
        if ep.view.is_some() {
            crate::kernel::sysfs_view::remove_dirs(dir);
        }
        // Only empty (a socket directory someone else filled stays).
        let _ = std::fs::remove_dir(dir);
    }
}

impl Parts {
    /// `masqctl endpoint add`: check it as the config file's endpoints are
    /// checked, then give it its backstop chain, its tcp/udp table, its
    /// socket and sysfs view; on any failure, undo what was done.
    pub fn add_endpoint(self: &Arc<Self>, e: EndpointConfig) -> Result<Value> {
        let _one_at_a_time = self.endpoint_change();
        let (socket, others) = self.check_addable(&e)?;
        let mut undo = UndoAdd {
            parts: self,
            e: &e,
            firewall: false,
            backstop: false,
        };
        self.add_filters(&e, &mut undo)?;
        let rail = self.registry().rail_index(e.rail.as_deref()).unwrap_or(0);
        let host = &self.rails()[rail].device.host;
        let view = match &e.device_of {
            None => sysfs_view_for(&socket, &others, host)
                .map_err(|why| Error::Failed(format!("endpoint {}: not served: {why}", e.name)))?,
            Some(of) => {
                let viewed = self
                    .registry()
                    .local_named(of)
                    .is_some_and(|p| p.view.is_some());
                further_view_for(&socket, viewed, host)
            }
        };
        let ep = Endpoint::new(e.clone(), socket, Origin::Command, view)
            .on_rail(rail, self.registry().rail_label(rail));
        let ep = Arc::new(ep);
        self.registry().insert(ep.clone());
        if let Err(err) = self
            .limits()
            .sync_rates(&self.registry().configs())
            .map_err(|e| e.context("rate limits"))
            .and_then(|()| serve(self, &ep))
        {
            self.registry().remove(&e.name);
            unserve(self, &ep);
            if let Err(e) = self.limits().sync_rates(&self.registry().configs()) {
                warn!("rate limits: {e}");
            }
            return Err(err);
        }
        undo.done();
        self.limits()
            .apply_rdma_limits(&ep, &self.rail(&ep).device.host.name);
        self.endpoints_changed(&format!("endpoint {} added", e.name), &e.name);
        if let Some(c) = self.cluster() {
            c.endpoint_up(e.clone());
        }
        Ok(json!({ "name": e.name, "socket": ep.socket }))
    }

    /// Whether `e` may be added: the policy's namespace admits it, the
    /// registry has room for it, its rate limit can be kept, its socket's
    /// directory is no other endpoint's. Its socket, and the other
    /// endpoints'.
    fn check_addable(&self, e: &EndpointConfig) -> Result<(PathBuf, Vec<PathBuf>)> {
        namespace_admitted(self.admission().active().as_deref(), e)?;
        self.registry().check_new(e)?;
        if e.max_rate_mbps.is_some() && self.limits().rates.is_none() {
            return Err(Error::Invalid(
                crate::enforce::ratelimit::needs_software_roce(&e.name, &self.config().device),
            ));
        }
        let socket = self.registry().socket_of(e);
        let others: Vec<_> = self
            .registry()
            .local()
            .iter()
            .map(|o| o.socket.clone())
            .collect();
        if let Some(dir) = socket.parent().filter(|_| e.device_of.is_none()) {
            if others.iter().any(|o| o.parent() == Some(dir)) {
                return Err(Error::Failed(format!(
                    "endpoint {}.socket: {} is another endpoint's directory",
                    e.name,
                    dir.display()
                )));
            }
        }
        Ok((socket, others))
    }

    /// The new endpoint's tcp/udp table (under the policy in force) and
    /// its backstop chain, each marked in `undo` once it is there.
    fn add_filters(&self, e: &EndpointConfig, undo: &mut UndoAdd) -> Result<()> {
        let one = std::slice::from_ref(e);
        if let Some(p) = self.admission().active() {
            let flows = self.netpol_flows(&p);
            crate::enforce::firewall::render(&p, one, &flows)
                .and_then(|r| crate::enforce::firewall::load(&r))?;
        }
        undo.firewall = true;
        if let Some(b) = self.admission().backstop() {
            b.add_endpoint(e)
                .map_err(|err| Error::Failed(format!("endpoint {}: backstop: {err}", e.name)))?;
        }
        undo.backstop = true;
        Ok(())
    }

    /// `masqctl endpoint del`: the endpoint's QPs go to ERROR (its apps see
    /// their work requests flushed), its sessions and CM ids close, its
    /// connections are untracked, and its socket, sysfs view, backstop
    /// chain and tcp/udp table go. With `owner`, only if the endpoint is
    /// that CNI attachment's: a late DEL of a container whose name a new
    /// one has taken since leaves the new endpoint alone.
    pub fn remove_endpoint(&self, name: &str, owner: Option<&CniOwner>) -> Result<Value> {
        let _one_at_a_time = self.endpoint_change();
        if let Some(want) = owner {
            if let Some(why) = self.not_owned_by(name, want) {
                info!(endpoint = name, container = %want.container_id, "endpoint kept: {why}");
                return Ok(json!({ "name": name, "kept": true, "why": why }));
            }
        }
        if let Some(d) = self
            .registry()
            .local()
            .iter()
            .find(|d| d.cfg.device_of.as_deref() == Some(name))
        {
            return Err(Error::Failed(format!(
                "endpoint {name} has a further device, endpoint {}: remove that first",
                d.cfg.name
            )));
        }
        let ep = self
            .registry()
            .remove(name)
            .ok_or_else(|| Error::Failed(format!("no endpoint {name:?} on this host")))?;
        unserve(self, &ep);
        remove_socket_dir(&ep);
        let (sessions, qps_reset) = self
            .sessions()
            .close_endpoint(&ep.cfg.name, self.first_device().driver_id);
        // What its sessions tracked went with them; CM-made entries too.
        let filter = rconntrack::Filter::new()
            .vni(ep.cfg.vni)
            .src(rconntrack::Cidr::host(ep.cfg.vip));
        let left: Vec<_> = self.admission().table().list(&filter).cloned().collect();
        let untracked = self.sessions().reset(
            self.admission(),
            self.first_device().driver_id,
            &left,
            "endpoint deleted",
        );
        self.remove_filters_and_limits(&ep);
        self.endpoints_changed(&format!("endpoint {name} deleted"), name);
        if let Some(c) = self.cluster() {
            c.endpoint_down(name);
        }
        info!(endpoint = name, sessions, qps_reset, "endpoint deleted");
        Ok(json!({ "name": name, "sessions": sessions, "qps_reset": qps_reset + untracked }))
    }

    /// Why endpoint `name` is not CNI attachment `want`'s, if it is not.
    fn not_owned_by(&self, name: &str, want: &CniOwner) -> Option<String> {
        let have = self
            .registry()
            .local_named(name)
            .and_then(|e| e.cfg.cni.as_deref().cloned());
        if have.as_ref() == Some(want) {
            return None;
        }
        Some(match have {
            Some(o) => format!(
                "it is container {}'s on network {}, not {}'s on {}",
                o.container_id, o.network, want.container_id, want.network
            ),
            None if self.registry().local_named(name).is_some() => {
                "it is no CNI attachment's".to_string()
            }
            None => "no such endpoint on this host".to_string(),
        })
    }

    /// A removed endpoint's backstop chain, tcp/udp table, rate limit and
    /// rdma cgroup limits go.
    fn remove_filters_and_limits(&self, ep: &Endpoint) {
        let name = ep.cfg.name.as_str();
        if let Some(b) = self.admission().backstop() {
            if let Err(e) = b.remove_endpoint(name) {
                warn!(endpoint = name, "backstop: cannot remove its chain: {e}");
            }
        }
        if let Err(e) = crate::enforce::firewall::remove(std::slice::from_ref(&ep.cfg)) {
            warn!(endpoint = name, "cannot remove its nftables table: {e}");
        }
        if let Err(e) = self.limits().sync_rates(&self.registry().configs()) {
            warn!(endpoint = name, "rate limits: {e}");
        }
        if ep.cfg.rdma_limits.is_some() {
            let device = &self.rail(ep).device.host.name;
            if let Err(e) = self.limits().rdma_cgroups.clear(ep.cgroup_name(), device) {
                warn!(endpoint = name, "cannot lift its rdma cgroup limits: {e}");
            }
        }
    }

    /// The set of endpoints changed: policies resolve names against the new
    /// one (the active policy again, at once), and the endpoints added at
    /// run time are written down for the next start.
    fn endpoints_changed(&self, why: &str, name: &str) {
        self.rebind_policy(why, &[name]);
        self.store_runtime_file(why);
    }

    /// Write down the endpoints added at run time and the cgroups the
    /// backstop adopted (pods' and apps').
    pub(crate) fn store_runtime_file(&self, why: &str) {
        let local = self.registry().local();
        let pods: Vec<String> = local
            .iter()
            .filter_map(|e| lock(&e.pod_cgroup).clone())
            .collect();
        let endpoint_of = |id: &str| {
            local
                .iter()
                .find(|e| crate::kernel::nft::nft_id(&e.cfg.name) == id)
                .map(|e| e.cfg.name.clone())
        };
        let app_cgroups = self
            .admission()
            .backstop()
            .map(|b| b.adopted())
            .unwrap_or_default()
            .into_iter()
            .filter(|(path, _)| !pods.contains(path))
            .filter_map(|(path, id)| Some((path, endpoint_of(&id)?)))
            .collect();
        let file = RuntimeFile {
            app_cgroups,
            endpoints: local
                .iter()
                .filter(|e| e.origin == Origin::Command)
                .map(|e| e.cfg.clone())
                .collect(),
            pod_cgroups: local
                .iter()
                .filter_map(|e| Some((e.cfg.name.clone(), lock(&e.pod_cgroup).clone()?)))
                .collect(),
        };
        let path = self.config().runtime_endpoints_file();
        if let Err(e) = file.store(&path) {
            warn!(
                "{why}: cannot write {}: a restart will not serve it as it is now: {e}",
                path.display()
            );
        }
    }

    /// masq-nri, as it creates a container of pod sandbox `sandbox`
    /// (process `pid`): the endpoints masq-cni made for the pod (their CNI
    /// container ID is the sandbox's), by name, and the backstop filters the
    /// pod's cgroup as the first one's. Without a backstop (a hardware RNIC,
    /// whose QPs the audit watches) there is nothing to filter.
    pub fn adopt_pod(&self, sandbox: &str, pid: i32) -> Result<Value> {
        let eps: Vec<_> = self
            .registry()
            .local()
            .into_iter()
            .filter(|ep| ep.cfg.cni.as_ref().map(|c| c.container_id.as_str()) == Some(sandbox))
            .collect();
        let names: Vec<&str> = eps.iter().map(|ep| ep.cfg.name.as_str()).collect();
        let (Some(ep), Some(b)) = (eps.first(), self.admission().backstop()) else {
            return Ok(json!({ "endpoints": names, "backstop": false }));
        };
        let name = &ep.cfg.name;
        let (cgroup, new) = crate::tenants::cgroups::adopt_pod_cgroup(b, &ep.cfg, pid)
            .map_err(|e| Error::Failed(format!("endpoint {name}: {e}")))?;
        let was = lock(&ep.pod_cgroup).replace(cgroup.clone());
        if was.as_ref() != Some(&cgroup) {
            self.store_runtime_file("pod cgroup adopted");
        }
        Ok(json!({
            "endpoints": names,
            "backstop": true,
            "cgroup": format!("/{cgroup}"),
            "new": new,
        }))
    }
}

/// A Kubernetes pod's endpoint (its CNI attachment names the pod's
/// namespace) only in a tenant whose policy admits that namespace: a
/// NetworkAttachmentDefinition names its tenant in a string any namespace
/// can reference through Multus. No policy applied admits none. Endpoints
/// of no namespace (the config's, masqctl's, podman's) are not asked.
fn namespace_admitted(policy: Option<&masq_policy::Policy>, e: &EndpointConfig) -> Result<()> {
    let cni = e.cni.as_deref();
    let pod = cni.and_then(|c| c.pod.as_deref());
    let Some(ns) = cni.and_then(|c| c.namespace.as_deref()) else {
        return match pod {
            Some(_) => Err(Error::Failed(format!(
                "endpoint {}: cni.pod needs the pod's cni.namespace",
                e.name
            ))),
            None => Ok(()),
        };
    };
    if let Some(pod) = pod.filter(|p| !valid_pod_name(p)) {
        return Err(Error::Failed(format!(
            "endpoint {}: cni.pod {pod:?} is no Kubernetes pod name (1..=253 lowercase \
             letters, digits, '-' or '.', starting and ending with a letter or digit)",
            e.name
        )));
    }
    let empty;
    let policy = match policy {
        Some(p) => p,
        None => {
            empty = masq_policy::Policy::empty();
            &empty
        }
    };
    policy
        .admits_namespace(&e.tenant, ns)
        .map_err(|why| Error::Failed(format!("endpoint {}: {why}", e.name)))
}

/// A DNS-1123 subdomain, as Kubernetes names pods.
fn valid_pod_name(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=253).contains(&s.len())
        && s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.chars().all(|c| alnum(c) || c == '-' || c == '.')
}

#[cfg(test)]
#[path = "endpoints_tests.rs"]
mod tests;
