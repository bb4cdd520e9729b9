//! masq-policy: security groups for masq tenants.
//!
//! Operators write security groups in YAML (format in this crate's
//! README.md). [`Policy::parse`] validates a file against the schema and
//! against masqd's endpoints, reporting every problem as
//! `file:line:column: path: message`, and compiles it into a prefix-indexed
//! matcher. A [`Policy`] is immutable: to change policy, parse the new file
//! and swap it in only if it validated, so a bad file changes nothing.
//!
//! Meaning (DESIGN.md, "Security groups: meaning"): stateful; ingress is
//! denied and egress allowed by default; an endpoint in several groups gets
//! the union of their rules. An RDMA RC/UC connection between A and B is
//! allowed when (egress of A allows B and ingress of B allows A) or (egress
//! of B allows A and ingress of A allows B); see [`Policy::rdma_allowed`].
//!
//! [`netpol`] decides the same connections by Kubernetes NetworkPolicy.

mod compile;
mod error;
pub mod netpol;
mod nft;
mod schema;
mod yaml;

pub use error::{Location, PolicyError, PolicyErrors};
pub use nft::{ct_zone, table_name, NftError};
pub use schema::{Qos, QosMode};

use compile::{Compiled, Want};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;

/// An endpoint masqd knows from its configuration; policies name endpoints
/// in `members` and must name only these.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EndpointRef {
    pub name: String,
    pub tenant: String,
    pub vni: u32,
    pub vip: Ipv4Addr,
}

impl EndpointRef {
    pub fn new(
        name: impl Into<String>,
        tenant: impl Into<String>,
        vni: u32,
        vip: Ipv4Addr,
    ) -> Self {
        EndpointRef {
            name: name.into(),
            tenant: tenant.into(),
            vni,
            vip,
        }
    }
}

/// What happens to tracked connections when the policy changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnRuleChange {
    /// Re-evaluate live connections and reset those no longer allowed.
    #[default]
    Reset,
    /// Leave tracked connections alone; new ones follow the new policy
    /// (AWS security group behaviour).
    Keep,
}

impl fmt::Display for OnRuleChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OnRuleChange::Reset => "reset",
            OnRuleChange::Keep => "keep",
        })
    }
}

/// Transport protocol for [`Policy::flow_allowed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum L4Proto {
    Tcp,
    Udp,
}

/// Why one side (egress of the initiator, or ingress of the responder)
/// allowed or denied.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// An explicit rule, named `tenant/group/ingress[i]` or
    /// `tenant/group/egress[i]` (the first allowing rule in file order).
    Rule(Arc<str>),
    /// The endpoint's group `tenant/group/egress` has no `egress` key, so it
    /// allows all egress.
    EgressUnrestricted(Arc<str>),
    /// The endpoint is in no security group: egress is allowed by default.
    DefaultEgressAllow,
    /// No rule allows it.
    DefaultDeny,
    /// Both ends are the same endpoint; traffic never leaves it.
    Loopback,
}

impl Decision {
    pub fn allows(&self) -> bool {
        !matches!(self, Decision::DefaultDeny)
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Rule(name) => f.write_str(name),
            Decision::EgressUnrestricted(group) => write!(f, "{group}(all)"),
            Decision::DefaultEgressAllow => f.write_str("default-egress-allow"),
            Decision::DefaultDeny => f.write_str("default-deny"),
            Decision::Loopback => f.write_str("loopback"),
        }
    }
}

/// The outcome of an admission check and the rules that decided it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Verdict {
    pub allowed: bool,
    /// The direction the decisions below are about: `from`'s egress and
    /// `to`'s ingress. For an allowed RDMA connection it is the direction
    /// that held (a→b when both do); for a denial it is a→b (RDMA) or
    /// src→dst (flows).
    pub from: Ipv4Addr,
    pub to: Ipv4Addr,
    pub egress: Decision,
    pub ingress: Decision,
}

impl Verdict {
    fn new(from: Ipv4Addr, to: Ipv4Addr, egress: Decision, ingress: Decision) -> Verdict {
        Verdict {
            allowed: egress.allows() && ingress.allows(),
            from,
            to,
            egress,
            ingress,
        }
    }

    /// A short label for connection tracking: `acme/web/egress[0]+acme/db/ingress[1]`,
    /// `loopback`, or `default-deny`.
    pub fn rule(&self) -> String {
        if !self.allowed {
            "default-deny".into()
        } else if self.egress == Decision::Loopback {
            "loopback".into()
        } else {
            format!("{}+{}", self.egress, self.ingress)
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} -> {}: egress {}, ingress {}",
            if self.allowed { "allow" } else { "deny" },
            self.from,
            self.to,
            self.egress,
            self.ingress
        )
    }
}

/// A policy file's text and its name for errors, within the size limit.
fn read_file(path: &Path) -> Result<(String, String), PolicyErrors> {
    let file = path.display().to_string();
    let fail = |message: String| {
        PolicyErrors::single(PolicyError {
            file: file.clone(),
            location: None,
            path: String::new(),
            message,
        })
    };
    let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    if meta.len() > Policy::MAX_FILE_BYTES {
        return Err(fail(format!(
            "file is {} bytes; policy files are limited to {} bytes",
            meta.len(),
            Policy::MAX_FILE_BYTES
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        fail(format!(
            "not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    Ok((text, file))
}

/// A validated, compiled security-group policy.
#[derive(Debug)]
pub struct Policy {
    file: String,
    on_rule_change: OnRuleChange,
    hash: String,
    compiled: Compiled,
    endpoints: HashMap<String, EndpointRef>,
    /// The text it was parsed from, to resolve it again (`rebind`).
    text: Arc<str>,
    /// Endpoint names its members give.
    named: std::collections::HashSet<String>,
    /// Each tenant's `kubernetes.namespaces` (absent: the tenant has no
    /// `kubernetes` key).
    namespaces: HashMap<String, Vec<String>>,
    /// Tenants whose `kubernetes.networkPolicy` is true.
    network_policy: std::collections::HashSet<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::empty()
    }
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Policy {
    /// Policy files larger than this are refused unread.
    pub const MAX_FILE_BYTES: u64 = 16 << 20;

    /// No security groups: every ingress denied, every egress allowed.
    pub fn empty() -> Policy {
        let doc = schema::Document {
            on_rule_change: OnRuleChange::Reset,
            tenants: Vec::new(),
        };
        Policy {
            file: String::new(),
            on_rule_change: OnRuleChange::Reset,
            hash: sha256_hex(&schema::canonical(&doc)),
            compiled: Compiled::default(),
            endpoints: HashMap::new(),
            text: Arc::from(""),
            named: Default::default(),
            namespaces: HashMap::new(),
            network_policy: Default::default(),
        }
    }

    /// Validates and compiles policy text. `file_name` only labels errors.
    /// `endpoints` are the endpoints masqd knows; `members` may name only
    /// these (by name), and each only in its own tenant.
    pub fn parse(
        text: &str,
        file_name: &str,
        endpoints: &[EndpointRef],
    ) -> Result<Policy, PolicyErrors> {
        Self::parse_with(text, file_name, endpoints, None)
    }

    /// The same policy resolved against a changed set of endpoints: what it
    /// names that is gone matches nothing until it is back, and is returned
    /// (sorted) so the caller can say so. The version is unchanged.
    pub fn rebind(&self, endpoints: &[EndpointRef]) -> Result<(Policy, Vec<String>), PolicyErrors> {
        Self::parse_allowing_unknown(&self.text, &self.file, endpoints)
    }

    fn parse_with(
        text: &str,
        file_name: &str,
        endpoints: &[EndpointRef],
        dangling: Option<&mut Vec<String>>,
    ) -> Result<Policy, PolicyErrors> {
        let root = yaml::parse(text).map_err(|(loc, message)| {
            PolicyErrors::single(PolicyError {
                file: file_name.to_string(),
                location: Some(loc),
                path: String::new(),
                message,
            })
        })?;
        let mut errs = error::Errors::new(file_name);
        let doc = schema::walk(&root, &mut errs);
        let compiled = compile::compile(&doc, endpoints, &mut errs, dangling);
        if let Some(e) = errs.finish() {
            return Err(e);
        }
        let named = doc
            .tenants
            .iter()
            .flat_map(|t| &t.groups)
            .flat_map(|g| &g.members)
            .filter_map(|m| match &m.kind {
                schema::MemberKind::Endpoint(n) => Some(n.clone()),
                _ => None,
            })
            .collect();
        let namespaces = doc
            .tenants
            .iter()
            .filter_map(|t| Some((t.name.clone(), t.kubernetes.as_ref()?.namespaces.clone())))
            .collect();
        let network_policy = doc
            .tenants
            .iter()
            .filter(|t| t.kubernetes.as_ref().is_some_and(|k| k.network_policy))
            .map(|t| t.name.clone())
            .collect();
        let mut by_name = HashMap::new();
        for ep in endpoints {
            by_name.entry(ep.name.clone()).or_insert_with(|| ep.clone());
        }
        Ok(Policy {
            file: file_name.to_string(),
            on_rule_change: doc.on_rule_change,
            hash: sha256_hex(&schema::canonical(&doc)),
            compiled,
            endpoints: by_name,
            text: Arc::from(text),
            named,
            namespaces,
            network_policy,
        })
    }

    /// Whether the cluster's NetworkPolicy decides `tenant`'s connections
    /// too (its `kubernetes.networkPolicy`).
    pub fn enforces_network_policy(&self, tenant: &str) -> bool {
        self.network_policy.contains(tenant)
    }

    /// Any tenant's `kubernetes.networkPolicy` is true.
    pub fn any_network_policy(&self) -> bool {
        !self.network_policy.is_empty()
    }

    /// Whether a pod of Kubernetes namespace `namespace` may attach to
    /// `tenant` (its `kubernetes.namespaces` lists it); else why not,
    /// naming both. A tenant the policy does not name, or names without
    /// the key, admits no namespace.
    pub fn admits_namespace(&self, tenant: &str, namespace: &str) -> Result<(), String> {
        let key = format!("tenants.{tenant}.kubernetes.namespaces");
        match self.namespaces.get(tenant) {
            Some(ns) if ns.iter().any(|n| n == namespace) => Ok(()),
            Some(ns) if ns.is_empty() => Err(format!(
                "tenant {tenant} admits no Kubernetes namespace ({key} is empty), so not {namespace}"
            )),
            Some(ns) => Err(format!(
                "tenant {tenant} admits Kubernetes namespaces {}, not {namespace} ({key})",
                ns.join(", ")
            )),
            None => Err(format!(
                "tenant {tenant} admits no Kubernetes namespace, so not {namespace}: \
                 the policy has no {key}{}",
                if self.compiled.tenants.contains_key(tenant) {
                    ""
                } else {
                    " (nor the tenant)"
                }
            )),
        }
    }

    /// Reads and parses a policy file; errors are labelled with `path`.
    pub fn load(path: impl AsRef<Path>, endpoints: &[EndpointRef]) -> Result<Policy, PolicyErrors> {
        let (text, file) = read_file(path.as_ref())?;
        Self::parse(&text, &file, endpoints)
    }

    /// Like `parse`, but a member naming an endpoint not (yet) known is no
    /// error: it matches nothing and is returned (sorted). For a policy
    /// that was checked where every endpoint was known (a cluster's).
    pub fn parse_allowing_unknown(
        text: &str,
        file_name: &str,
        endpoints: &[EndpointRef],
    ) -> Result<(Policy, Vec<String>), PolicyErrors> {
        let mut dangling = Vec::new();
        let p = Self::parse_with(text, file_name, endpoints, Some(&mut dangling))?;
        dangling.sort();
        dangling.dedup();
        Ok((p, dangling))
    }

    /// A policy file's text and its name for errors (`parse`'s first two
    /// arguments), within the size limit.
    pub fn read(path: impl AsRef<Path>) -> Result<(String, String), PolicyErrors> {
        read_file(path.as_ref())
    }

    /// `load` with `parse_allowing_unknown`'s leniency.
    pub fn load_allowing_unknown(
        path: impl AsRef<Path>,
        endpoints: &[EndpointRef],
    ) -> Result<(Policy, Vec<String>), PolicyErrors> {
        let (text, file) = read_file(path.as_ref())?;
        Self::parse_allowing_unknown(&text, &file, endpoints)
    }

    /// Whether a member names endpoint `name` (so its coming or going
    /// changes what the policy allows).
    pub fn names(&self, name: &str) -> bool {
        self.named.contains(name)
    }

    /// The policy's text as parsed.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The file name given to `parse` (or path given to `load`).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// SHA-256 (hex) of the policy's canonical form: unchanged by comments,
    /// layout, key order or member order; changed by any rule change.
    pub fn version_hash(&self) -> &str {
        &self.hash
    }

    pub fn on_rule_change(&self) -> OnRuleChange {
        self.on_rule_change
    }

    /// Admission of an RDMA RC/UC connection between endpoints `a` and `b`
    /// of `tenant` in VPC `vni` (the caller has checked both are there).
    /// Symmetric in `a` and `b`, so both hosts reach the same answer. Also
    /// used per destination for UD address handles.
    pub fn rdma_allowed(&self, tenant: &str, vni: u32, a: Ipv4Addr, b: Ipv4Addr) -> Verdict {
        if a == b {
            return Verdict::new(a, b, Decision::Loopback, Decision::Loopback);
        }
        let Some(t) = self.compiled.tenants.get(tenant) else {
            return Verdict::new(a, b, Decision::DefaultEgressAllow, Decision::DefaultDeny);
        };
        let (ua, ub) = (u32::from(a), u32::from(b));
        let (e, i) = t.decide(vni, ua, ub, Want::Rdma);
        if e.allows() && i.allows() {
            return Verdict::new(a, b, e, i);
        }
        let (e2, i2) = t.decide(vni, ub, ua, Want::Rdma);
        if e2.allows() && i2.allows() {
            return Verdict::new(b, a, e2, i2);
        }
        Verdict::new(a, b, e, i)
    }

    /// Admission of a new tcp/udp flow initiated by `src` to `dst:dport`
    /// (replies are allowed by state). The same answer as the rendered
    /// nftables rules give.
    pub fn flow_allowed(
        &self,
        tenant: &str,
        vni: u32,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        proto: L4Proto,
        dport: u16,
    ) -> Verdict {
        if src == dst {
            return Verdict::new(src, dst, Decision::Loopback, Decision::Loopback);
        }
        let Some(t) = self.compiled.tenants.get(tenant) else {
            return Verdict::new(
                src,
                dst,
                Decision::DefaultEgressAllow,
                Decision::DefaultDeny,
            );
        };
        let (e, i) = t.decide(
            vni,
            u32::from(src),
            u32::from(dst),
            Want::Port(proto, dport),
        );
        Verdict::new(src, dst, e, i)
    }

    /// How `ip`'s RoCE traffic in `tenant`/`vni` is marked, and where that
    /// was said (`tenant` or `tenant/group`): a group's `qos` before its
    /// tenant's; of several groups, the lowest DSCP (the most modest mark
    /// any of them asks for).
    pub fn qos_of(&self, tenant: &str, vni: u32, ip: Ipv4Addr) -> Option<(Qos, String)> {
        let t = self.compiled.tenants.get(tenant)?;
        let by_group = t
            .groups_of(vni, u32::from(ip))
            .iter()
            .map(|&g| &t.groups[g as usize])
            .filter_map(|g| Some((g.qos?, format!("{tenant}/{}", g.name))))
            .min_by_key(|(q, _)| q.dscp);
        by_group.or_else(|| Some((t.qos?, tenant.to_string())))
    }

    /// Names of the security groups `ip` belongs to in `tenant`/`vni`, in
    /// file order.
    pub fn groups_of(&self, tenant: &str, vni: u32, ip: Ipv4Addr) -> Vec<&str> {
        self.compiled.tenants.get(tenant).map_or(Vec::new(), |t| {
            t.groups_of(vni, u32::from(ip))
                .iter()
                .map(|&g| t.groups[g as usize].name.as_str())
                .collect()
        })
    }

    /// The nftables ruleset (for `nft -f`) enforcing this endpoint's tcp/udp
    /// rules on the host side of its vNIC: `host_ifname` is the veth end
    /// that is a port of `bridge_ifname`, the endpoint's per-VNI bridge.
    /// Loading it replaces the endpoint's previous table atomically. Needs
    /// nf_tables bridge support and nf_conntrack_bridge.
    pub fn render_nft(
        &self,
        endpoint: &str,
        host_ifname: &str,
        bridge_ifname: &str,
    ) -> Result<String, NftError> {
        let ep = self
            .endpoints
            .get(endpoint)
            .ok_or_else(|| NftError::UnknownEndpoint(endpoint.to_string()))?;
        nft::render(self, ep, host_ifname, bridge_ifname, None)
    }

    /// `render_nft` for an endpoint given whole: one that came after the
    /// policy was compiled (endpoints come and go) has its rules too. With
    /// `netpol`, the pod's Kubernetes NetworkPolicy ([`netpol::Index::flows`])
    /// is a second base chain: tcp and udp need both.
    pub fn render_nft_for(
        &self,
        ep: &EndpointRef,
        host_ifname: &str,
        bridge_ifname: &str,
        netpol: Option<&netpol::PodFlows>,
    ) -> Result<String, NftError> {
        nft::render(self, ep, host_ifname, bridge_ifname, netpol)
    }
}
