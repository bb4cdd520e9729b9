//! masqd's configuration file (YAML).
//!
//! One file per host: the RDMA device and underlay it serves, the endpoints
//! that live on this host, and the VPC map of every endpoint in every VPC
//! (which host each (VNI, vIP) lives on). Parse errors carry file:line:column;
//! consistency errors name the field path and the offending value.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

mod audit;
pub mod identity;
mod limits;
mod rails;
mod validate;

pub use audit::{AuditAction, AuditConfig};
pub use limits::TenantLimits;

pub use rails::{check_device_of, rail_position, rail_value, RailConfig, Underlay, FIRST_RAIL};

pub const DEFAULT_SOCKET_DIR: &str = "/run/masq";
const MAX_VNI: u32 = 0xFF_FFFF;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// The RDMA device masqd serves (e.g. rxe0, mlx5_0): the first rail's,
    /// whether given here or as `rails[0]`.
    #[serde(default)]
    pub device: String,
    /// Its port (RoCE devices have one).
    #[serde(default = "default_port")]
    pub port: u8,
    /// The first rail's underlay; its address is the host's identity.
    #[serde(default)]
    pub underlay: Underlay,
    /// A host with several RDMA NICs: one rail each, in this order (what
    /// `vrdmaN`'s N follows). Without it, `device`/`underlay` are the one
    /// rail, `rail0`.
    #[serde(default)]
    pub rails: Vec<RailConfig>,
    /// Rails whose networks route to each other: a connection between
    /// rails of one group is allowed, any other between rails is refused.
    #[serde(default)]
    pub rail_joins: Vec<Vec<String>>,
    /// Where endpoint sockets and the control socket live.
    #[serde(default = "default_socket_dir")]
    pub socket_dir: PathBuf,
    /// Security groups (YAML); none means the built-in defaults.
    #[serde(default)]
    pub policy: Option<PathBuf>,
    /// Endpoints on this host.
    #[serde(default)]
    pub endpoints: Vec<EndpointConfig>,
    /// Every endpoint of every VPC, on any host (in cluster mode, only
    /// what the cluster does not publish, e.g. hosts not yet migrated).
    #[serde(default)]
    pub vpc: Vec<VpcEntry>,
    /// Cluster mode: endpoints, VPC map and policy shared through etcd.
    #[serde(default)]
    pub cluster: Option<ClusterConfig>,
    /// The kernel backstop against tenants that skip libmasq.
    #[serde(default)]
    pub backstop: BackstopConfig,
    /// RDMA CM for librdmacm apps: the masqd-to-masqd exchange.
    #[serde(default)]
    pub cm: CmConfig,
    /// The periodic audit of every QP on the device.
    #[serde(default)]
    pub audit: AuditConfig,
    /// What each endpoint's apps may make masqd hold (`limits.rs`).
    #[serde(default)]
    pub tenant_limits: TenantLimits,
    /// Prometheus metrics; off unless `listen` is set.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Container Device Interface: a spec per endpoint for the runtime;
    /// off unless given.
    #[serde(default)]
    pub cdi: Option<CdiConfig>,
}

/// Where masqd writes its CDI specs and what they give a container.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CdiConfig {
    /// A directory the runtime reads CDI specs from (podman and containerd:
    /// /etc/cdi and /var/run/cdi).
    #[serde(default = "default_cdi_dir")]
    pub spec_dir: PathBuf,
    /// The host directory holding libmasq.so and its facades
    /// (libmasq-ibverbs.so, libmasq-rdmacm.so), mounted read-only at
    /// /usr/lib/masq in the container; relative to the config file.
    #[serde(default = "default_libmasq_dir")]
    pub libmasq_dir: PathBuf,
}

fn default_cdi_dir() -> PathBuf {
    PathBuf::from("/var/run/cdi")
}
fn default_libmasq_dir() -> PathBuf {
    PathBuf::from("/usr/lib/masq")
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterConfig {
    /// etcd client URLs, e.g. `https://198.18.0.1:2379`.
    pub etcd: Vec<String>,
    /// This host's identity: etcd is reached over TLS with it. Paths are
    /// relative to the configuration file.
    #[serde(default)]
    pub tls: Option<TlsFiles>,
    /// Plaintext etcd with no identities: anyone who reaches etcd can
    /// rewrite the cluster. Only where `tls` is not set, and said at start
    /// and in every `masqctl status`.
    #[serde(default)]
    pub insecure: bool,
    /// Key prefix of masq's keys in etcd.
    #[serde(default = "default_cluster_prefix")]
    pub prefix: String,
    /// TTL of this host's registration: its endpoints leave every other
    /// host's VPC map this long after it stops renewing it.
    #[serde(default = "default_lease_seconds")]
    pub lease_seconds: u64,
}

/// The CA every cluster member trusts, and this host's certificate and
/// key (PEM).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn default_cluster_prefix() -> String {
    "/masq".into()
}
fn default_lease_seconds() -> u64 {
    10
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MetricsConfig {
    /// Where masqd serves `GET /metrics`, e.g. `127.0.0.1:9464`. The
    /// numbers name tenants and rules: keep it off untrusted networks, or
    /// set `tls` and a bearer token or client certificates.
    #[serde(default)]
    pub listen: Option<std::net::SocketAddr>,
    /// Serve HTTPS with this certificate; with `clientCa`, only to clients
    /// with a certificate that CA signed. Paths relative to masqd.yaml.
    #[serde(default)]
    pub tls: Option<MetricsTls>,
    /// A file holding the token a scrape of `/metrics` must bring
    /// (`Authorization: Bearer TOKEN`); the probes stay open.
    #[serde(default)]
    pub bearer_token_file: Option<PathBuf>,
}

/// The metrics listener's certificate and key, and the CA of the clients
/// it takes (none: any client).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MetricsTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CmConfig {
    /// TCP port on underlay.ip where masqds exchange CM messages; every
    /// host uses the same one.
    #[serde(default = "default_cm_port")]
    pub port: u16,
    /// How long a connect waits for an answer (and a passive side for
    /// the ready-to-use) before the app gets UNREACHABLE / ETIMEDOUT. A
    /// connect the security groups deny waits this long too.
    #[serde(default = "default_cm_timeout")]
    pub timeout_ms: u64,
}

impl Default for CmConfig {
    fn default() -> CmConfig {
        CmConfig {
            port: default_cm_port(),
            timeout_ms: default_cm_timeout(),
        }
    }
}

fn default_cm_port() -> u16 {
    4792
}
fn default_cm_timeout() -> u64 {
    5000
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BackstopConfig {
    /// Default: on for software RoCE (rxe), whose packets cross the host's
    /// netfilter; off for hardware RNICs, whose packets never do.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// cgroup v2 path (below /sys/fs/cgroup) holding one cgroup per
    /// endpoint, named after it: endpoint NAME's processes must run in
    /// `<cgroupParent>/NAME`.
    #[serde(default = "default_cgroup_parent")]
    pub cgroup_parent: String,
    /// After a restart, how long sessions have to re-register before the
    /// kernel sets are rewritten from what came back.
    #[serde(default = "default_recovery_grace")]
    pub recovery_grace_seconds: u64,
    /// Where the eBPF part's maps and egress program are pinned (a
    /// directory on a bpf file system, made if missing; `/sys/fs/bpf` is
    /// mounted if it is not): a restarted masqd takes them from there.
    #[serde(default = "default_bpf_dir")]
    pub bpf_dir: std::path::PathBuf,
}

impl Default for BackstopConfig {
    fn default() -> BackstopConfig {
        BackstopConfig {
            enabled: None,
            cgroup_parent: default_cgroup_parent(),
            recovery_grace_seconds: default_recovery_grace(),
            bpf_dir: default_bpf_dir(),
        }
    }
}

fn default_cgroup_parent() -> String {
    "tenants".into()
}
fn default_recovery_grace() -> u64 {
    30
}
fn default_bpf_dir() -> std::path::PathBuf {
    "/sys/fs/bpf/masq".into()
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EndpointConfig {
    pub name: String,
    pub tenant: String,
    pub vni: u32,
    pub vip: Ipv4Addr,
    /// The endpoint's network namespace, e.g. /run/netns/acme-a.
    pub netns: PathBuf,
    /// The vNIC inside that namespace.
    #[serde(default = "default_vnic")]
    pub vnic: String,
    /// The rail (`rails[].name`) its virtual device is on; default the
    /// first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail: Option<String>,
    /// Another endpoint on this host whose apps this one is a further
    /// virtual device of (their `vrdma1` on a second rail, say): served
    /// on that endpoint's socket, to its processes, in its cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_of: Option<String>,
    /// Host side of the vNIC (a bridge port) and its bridge: where masqd
    /// applies the policy's tcp/udp rules with nftables. Without them the
    /// endpoint gets RDMA rules only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_if: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge: Option<String>,
    /// The socket the endpoint's apps reach masqd on; default
    /// `<socketDir>/endpoints/<name>/masq.sock`. Its directory is what a
    /// container runtime mounts at /run/masq in the endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    /// Most connections (QPs moved to RTR, tracked) the endpoint may hold
    /// at once; one more gets EDQUOT. None: no quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Kernel limits on the RDMA objects its processes hold (the rdma
    /// cgroup controller, in `<backstop.cgroupParent>/<name>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_limits: Option<RdmaLimits>,
    /// Software RoCE: its RoCE egress is shaped to this many Mbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate_mbps: Option<u32>,
    /// The container attachment a CNI plugin made this endpoint for: its
    /// DEL and GC remove only endpoints they own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cni: Option<Box<CniOwner>>,
}

/// A CNI attachment: container, network and interface (the key the CNI
/// spec uses for GC's valid attachments).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CniOwner {
    pub container_id: String,
    pub network: String,
    pub ifname: String,
    /// The pod's Kubernetes namespace (the runtime's K8S_POD_NAMESPACE):
    /// masqd makes the endpoint only if its tenant admits the namespace
    /// (the policy's `tenants.<t>.kubernetes.namespaces`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The pod's name (K8S_POD_NAME, given with a namespace): the pod
    /// NetworkPolicy selects this endpoint as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
}

/// `rdma.max` of an endpoint's cgroup; an omitted limit is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RdmaLimits {
    /// Device contexts its processes may hold open (`hca_handle`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handles: Option<u32>,
    /// Verbs objects (PDs, CQs, QPs, SRQs, MRs, MWs, AHs...) they may hold
    /// (`hca_object`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VpcEntry {
    pub tenant: String,
    pub vni: u32,
    pub vip: Ipv4Addr,
    /// Underlay IP of the host the endpoint lives on.
    pub host: Ipv4Addr,
    /// Endpoint name, for logs and listings.
    #[serde(default)]
    pub name: Option<String>,
    /// The rail the endpoint's device is on (default the first, `rail0`),
    /// and the host's address on it (default `host`).
    #[serde(default)]
    pub rail: Option<String>,
    #[serde(default)]
    pub underlay: Option<Ipv4Addr>,
}

pub(crate) fn default_port() -> u8 {
    1
}
fn default_socket_dir() -> PathBuf {
    PathBuf::from(DEFAULT_SOCKET_DIR)
}
fn default_vnic() -> String {
    "eth0".into()
}

impl EndpointConfig {
    /// The Kubernetes pod (namespace, name) this endpoint is, as masq-cni
    /// said; None for an endpoint that is no pod's.
    pub fn pod(&self) -> Option<(String, String)> {
        let c = self.cni.as_deref()?;
        Some((c.namespace.clone()?, c.pod.clone()?))
    }

    /// The endpoint its apps connect to, whose cgroup they run in: its
    /// own, or the one it is a further device of (`deviceOf`).
    pub fn apps_endpoint(&self) -> &str {
        self.device_of.as_deref().unwrap_or(&self.name)
    }

    /// The endpoint's own fields, as the config file and `masqctl endpoint
    /// add` take them; `at` names it in errors (`endpoints[2]`).
    pub fn check(&self, at: &str, socket_dir: &Path) -> Result<()> {
        self.check_names(at)?;
        self.check_limits(at)?;
        if let Some(o) = &self.cni {
            check_cni(at, o)?;
        }
        self.check_paths(at, socket_dir)
    }

    /// The names it gives (its own, its tenant's, its interfaces'), and
    /// its VNI.
    fn check_names(&self, at: &str) -> Result<()> {
        check_name(&format!("{at}.name"), &self.name, 64)?;
        check_name(&format!("{at}.tenant"), &self.tenant, 64)?;
        check_name(&format!("{at}.vnic"), &self.vnic, 15)?;
        check_vni(&format!("{at}.vni"), self.vni)?;
        if let Some(r) = &self.rail {
            check_name(&format!("{at}.rail"), r, 15)?;
        }
        if let Some(d) = &self.device_of {
            check_name(&format!("{at}.deviceOf"), d, 64)?;
        }
        if let Some(i) = &self.host_if {
            check_name(&format!("{at}.hostIf"), i, 15)?;
        }
        if let Some(b) = &self.bridge {
            check_name(&format!("{at}.bridge"), b, 15)?;
        }
        if self.host_if.is_some() != self.bridge.is_some() {
            return Err(Error::Invalid(format!(
                "{at}: hostIf and bridge go together"
            )));
        }
        Ok(())
    }

    /// Its quota and limits, none of them 0.
    fn check_limits(&self, at: &str) -> Result<()> {
        if self.max_connections == Some(0) {
            return Err(Error::Invalid(format!(
                "{at}.maxConnections: 0 would refuse every connection (omit it for no quota)"
            )));
        }
        if self.max_rate_mbps == Some(0) {
            return Err(Error::Invalid(format!(
                "{at}.maxRateMbps: 0 would stop its RDMA traffic (omit it for no limit)"
            )));
        }
        if let Some(l) = &self.rdma_limits {
            for (key, v) in [("handles", l.handles), ("objects", l.objects)] {
                match v {
                    Some(0) => {
                        return Err(Error::Invalid(format!(
                            "{at}.rdmaLimits.{key}: 0 would refuse every app the device \
                             (omit it for no limit)"
                        )))
                    }
                    Some(n) if n > i32::MAX as u32 => {
                        return Err(Error::Invalid(format!(
                            "{at}.rdmaLimits.{key}: {n} is more than the kernel takes ({})",
                            i32::MAX
                        )))
                    }
                    _ => {}
                }
            }
            if l.handles.is_none() && l.objects.is_none() {
                return Err(Error::Invalid(format!(
                    "{at}.rdmaLimits: give handles, objects or both (or omit rdmaLimits)"
                )));
            }
        }
        Ok(())
    }

    /// Its netns and socket paths: absolute, the socket neither masqd's
    /// control socket nor in a directory that shows masqd's.
    fn check_paths(&self, at: &str, socket_dir: &Path) -> Result<()> {
        if !self.netns.is_absolute() {
            return Err(Error::Invalid(format!(
                "{at}.netns: {:?} must be an absolute path",
                self.netns
            )));
        }
        let sock = self.socket_path(socket_dir);
        if !sock.is_absolute() {
            return Err(Error::Invalid(format!(
                "{at}.socket: {sock:?} must be an absolute path"
            )));
        }
        if sock == socket_dir.join("control.sock") {
            return Err(Error::Invalid(format!(
                "{at}.socket: {sock:?} is masqd's control socket"
            )));
        }
        // Its directory is mounted in the tenant's containers: not one that
        // holds masqd's own files or the other endpoints' directories.
        let dir = sock.parent().unwrap_or(&sock);
        if socket_dir.join("endpoints").starts_with(dir) {
            let dir = dir.display();
            return Err(Error::Invalid(format!(
                "{at}.socket: its directory {dir} would show the tenant masqd's socketDir"
            )));
        }
        Ok(())
    }

    pub fn socket_path(&self, socket_dir: &Path) -> PathBuf {
        self.socket.clone().unwrap_or_else(|| {
            socket_dir
                .join("endpoints")
                .join(&self.name)
                .join("masq.sock")
        })
    }
}

/// The CNI plugin's names of an endpoint: printable, 1-256 characters.
fn check_cni(at: &str, o: &CniOwner) -> Result<()> {
    for (key, v) in [
        ("containerId", &o.container_id),
        ("network", &o.network),
        ("ifname", &o.ifname),
    ] {
        if v.is_empty() || v.len() > 256 || v.chars().any(|c| c.is_control()) {
            return Err(Error::Invalid(format!(
                "{at}.cni.{key}: {v:?} must be 1-256 printable characters"
            )));
        }
    }
    Ok(())
}

impl Config {
    pub fn load(path: &Path) -> Result<Config> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| Error::InFile {
            file: file.clone(),
            position: None,
            why: format!("cannot read: {e}"),
        })?;
        let mut cfg = Config::parse(&text, &file)?;
        let many = cfg.rails.len() > 1;
        for (i, r) in cfg.rails.iter_mut().enumerate() {
            let at = if many {
                format!("rails[{i}].")
            } else {
                String::new()
            };
            r.underlay.resolve().map_err(|e| Error::InFile {
                file: file.clone(),
                position: None,
                why: format!("{at}{e}"),
            })?;
        }
        cfg.underlay = cfg.rails[0].underlay.clone();
        let dir = path.parent().unwrap_or(Path::new(""));
        if let Some(tls) = cfg.cluster.as_mut().and_then(|c| c.tls.as_mut()) {
            for p in [&mut tls.ca, &mut tls.cert, &mut tls.key] {
                *p = dir.join(&*p);
            }
        }
        let m = &mut cfg.metrics;
        if let Some(tls) = m.tls.as_mut() {
            for p in [&mut tls.cert, &mut tls.key]
                .into_iter()
                .chain(tls.client_ca.as_mut())
            {
                *p = dir.join(&*p);
            }
        }
        if let Some(p) = m.bearer_token_file.as_mut() {
            *p = dir.join(&*p);
        }
        Ok(cfg)
    }

    pub fn parse(text: &str, file: &str) -> Result<Config> {
        let mut cfg: Config = serde_yaml_ng::from_str(text).map_err(|e| Error::InFile {
            file: file.to_string(),
            position: e.location().map(|l| (l.line(), l.column())),
            why: e.to_string(),
        })?;
        cfg.settle_rails()
            .and_then(|()| cfg.validate())
            .map_err(|e| Error::InFile {
                file: file.to_string(),
                position: None,
                why: e.to_string(),
            })?;
        Ok(cfg)
    }

    pub fn control_socket(&self) -> PathBuf {
        self.socket_dir.join("control.sock")
    }

    /// Where masqd keeps the endpoints added at run time (`masqctl endpoint
    /// add`), so a restart serves them again; under /run, they go with a
    /// reboot, as the containers they belong to do.
    pub fn runtime_endpoints_file(&self) -> PathBuf {
        self.socket_dir.join("runtime-endpoints.yaml")
    }
}

pub(crate) fn check_name(field: &str, value: &str, max: usize) -> Result<()> {
    let ok = !value.is_empty()
        && value.len() <= max
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "{field}: {value:?} must be 1-{max} characters of A-Z, a-z, 0-9, '-', '_', '.'"
        )))
    }
}

fn check_vni(field: &str, vni: u32) -> Result<()> {
    if (1..=MAX_VNI).contains(&vni) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "{field}: {vni} is not a VNI (1..={MAX_VNI})"
        )))
    }
}

#[cfg(test)]
pub(crate) mod tests;
