//! The objects the controller mirrors into etcd, parsed from the API's
//! JSON (networking.k8s.io/v1 and core/v1): a NetworkPolicy's spec, a
//! Namespace's labels and a masq pod's namespace, name and labels.
//!
//! Only the fields NetworkPolicy needs are read; unknown fields are ignored.
//! A malformed object is an error naming it and the field
//! ([`NetpolError`]). In a NetworkPolicy, a malformed rule (a peer, a port)
//! drops that rule only and is listed in [`NetworkPolicy::problems`]: the
//! policy still isolates the pods it selects, so a rule masq cannot read
//! admits nothing rather than leaving its pods open. A malformed
//! `podSelector` or `policyTypes` leaves no way to know whom the policy
//! isolates, and the whole policy is refused.

use super::json::{At, Fail, Kind, NetpolError};
use super::selector::{LabelSelector, Labels};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// A Namespace's name and labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    pub name: String,
    pub labels: Labels,
}

/// A masq pod's namespace, name and labels (no address: masqd binds a pod
/// to its vIP from its own endpoint registry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
}

/// A transport protocol of a NetworkPolicy port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

/// A port as the API writes it: a number, or a container port's name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Port {
    Number(u16),
    Named(String),
}

/// One `ports[]` item: a protocol and, optionally, a port or range.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PortRule {
    pub protocol: Protocol,
    /// `None`: every port of the protocol.
    pub port: Option<Port>,
    /// With a numbered `port`: the range `port..=end_port`.
    pub end_port: Option<u16>,
}

impl PortRule {
    /// Whether it admits `port` of `protocol`. A named port never matches:
    /// it names a container's port, which masq does not see.
    pub fn admits(&self, protocol: Protocol, port: u16) -> bool {
        self.protocol == protocol
            && match (&self.port, self.end_port) {
                (None, _) => true,
                (Some(Port::Named(_)), _) => false,
                (Some(Port::Number(p)), None) => port == *p,
                (Some(Port::Number(p)), Some(end)) => (*p..=end).contains(&port),
            }
    }
}

/// An `ipBlock` CIDR. IPv6 blocks are kept (so the object reads as
/// written) but match nothing: masq's vIPs are IPv4.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cidr {
    V4 { network: u32, prefix: u8 },
    V6,
}

impl Cidr {
    /// Parses `a.b.c.d/n` (or IPv6). Host bits are cleared, as Go's
    /// `net.ParseCIDR` does for the API server.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (addr, len) = text
            .split_once('/')
            .ok_or_else(|| format!("invalid CIDR {text:?}: expected address/prefix-length"))?;
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| format!("invalid CIDR {text:?}: {addr:?} is no IP address"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = match len.parse() {
            Ok(n) if n <= max && !len.starts_with('+') => n,
            _ => {
                return Err(format!(
                    "invalid CIDR {text:?}: prefix length must be 0..={max}"
                ))
            }
        };
        Ok(match ip {
            IpAddr::V4(a) => Cidr::V4 {
                network: u32::from(a) & mask(prefix),
                prefix,
            },
            IpAddr::V6(_) => Cidr::V6,
        })
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        match *self {
            Cidr::V4 { network, prefix } => u32::from(ip) & mask(prefix) == network,
            Cidr::V6 => false,
        }
    }
}

fn mask(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

/// An `ipBlock`: its CIDR but not its exceptions.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IpBlock {
    pub cidr: Cidr,
    pub except: Vec<Cidr>,
}

impl IpBlock {
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.cidr.contains(ip) && !self.except.iter().any(|c| c.contains(ip))
    }
}

/// One `from[]`/`to[]` item.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// `podSelector` and/or `namespaceSelector`: with `namespaces` absent,
    /// pods of the policy's own namespace; with `pods` absent, every pod of
    /// the selected namespaces; with both, the selected pods of the
    /// selected namespaces (AND).
    Pods {
        pods: Option<LabelSelector>,
        namespaces: Option<LabelSelector>,
    },
    IpBlock(IpBlock),
}

/// One ingress or egress rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    /// `namespace/policy/ingress[i]` (or `egress[i]`), `i` as in the
    /// object even when an earlier rule was dropped.
    pub name: Arc<str>,
    /// Empty: every peer (the rule has no `from`/`to`, or an empty one).
    pub peers: Vec<Peer>,
    /// Empty: every port, and port-less RDMA (verbs QPs, UD).
    pub ports: Vec<PortRule>,
}

/// A NetworkPolicy as masq reads it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NetworkPolicy {
    pub namespace: String,
    pub name: String,
    pub pod_selector: LabelSelector,
    /// Whether it isolates the pods it selects for ingress / egress
    /// (`policyTypes`, defaulted as the API server does).
    pub isolates_ingress: bool,
    pub isolates_egress: bool,
    /// Rules of a direction the policy does not isolate are not kept.
    pub ingress: Vec<Rule>,
    pub egress: Vec<Rule>,
    /// The rules dropped because they were malformed.
    pub problems: Vec<NetpolError>,
}

/// `metadata.name` (and `metadata.namespace` when `namespaced`).
fn metadata<'a>(root: &At<'a>, namespaced: bool) -> Result<(String, String), Fail> {
    let meta = root.required("metadata")?;
    let name = meta.required("name")?.name()?.to_string();
    let namespace = if namespaced {
        meta.required("namespace")?.name()?.to_string()
    } else {
        String::new()
    };
    Ok((namespace, name))
}

fn labels(root: &At) -> Result<Labels, Fail> {
    let mut labels = Labels::new();
    let Some(meta) = root.field("metadata")? else {
        return Ok(labels);
    };
    let Some(l) = meta.field("labels")? else {
        return Ok(labels);
    };
    for (key, _) in l.object()? {
        let value = l.required(key)?;
        labels.insert(key.clone(), value.str()?.to_string());
    }
    Ok(labels)
}

fn json(text: &str, kind: Kind) -> Result<Value, NetpolError> {
    serde_json::from_str(text).map_err(|e| NetpolError {
        kind,
        object: "?".into(),
        path: String::new(),
        message: format!("not JSON: {e}"),
    })
}

/// Reads an object's metadata and then the rest, naming it in errors.
fn read<T>(
    value: &Value,
    kind: Kind,
    namespaced: bool,
    rest: impl FnOnce(&At, String, String) -> Result<T, Fail>,
) -> Result<T, NetpolError> {
    let root = At::root(value);
    let (namespace, name) = metadata(&root, namespaced).map_err(|f| f.into_error(kind, "?"))?;
    let object = if namespaced {
        format!("{namespace}/{name}")
    } else {
        name.clone()
    };
    rest(&root, namespace, name).map_err(|f| f.into_error(kind, &object))
}

impl Namespace {
    pub fn new(name: impl Into<String>, labels: Labels) -> Namespace {
        Namespace {
            name: name.into(),
            labels,
        }
    }

    /// From a core/v1 Namespace (`metadata.name`, `metadata.labels`).
    pub fn from_json(text: &str) -> Result<Namespace, NetpolError> {
        Self::from_value(&json(text, Kind::Namespace)?)
    }

    pub fn from_value(value: &Value) -> Result<Namespace, NetpolError> {
        read(value, Kind::Namespace, false, |root, _, name| {
            Ok(Namespace {
                name,
                labels: labels(root)?,
            })
        })
    }
}

impl Pod {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, labels: Labels) -> Pod {
        Pod {
            namespace: namespace.into(),
            name: name.into(),
            labels,
        }
    }

    /// From a core/v1 Pod (`metadata.namespace`, `.name`, `.labels`; all
    /// else, its addresses included, is ignored).
    pub fn from_json(text: &str) -> Result<Pod, NetpolError> {
        Self::from_value(&json(text, Kind::Pod)?)
    }

    pub fn from_value(value: &Value) -> Result<Pod, NetpolError> {
        read(value, Kind::Pod, true, |root, namespace, name| {
            Ok(Pod {
                namespace,
                name,
                labels: labels(root)?,
            })
        })
    }
}

impl NetworkPolicy {
    /// From a networking.k8s.io/v1 NetworkPolicy. `Err` when the object
    /// cannot be used at all; dropped rules are in `problems`.
    pub fn from_json(text: &str) -> Result<NetworkPolicy, NetpolError> {
        Self::from_value(&json(text, Kind::NetworkPolicy)?)
    }

    pub fn from_value(value: &Value) -> Result<NetworkPolicy, NetpolError> {
        read(value, Kind::NetworkPolicy, true, |root, namespace, name| {
            Self::spec(root, namespace, name)
        })
    }

    fn spec(root: &At, namespace: String, name: String) -> Result<NetworkPolicy, Fail> {
        // A missing spec or podSelector reads as Go's zero value: `{}`,
        // which selects every pod of the namespace.
        let empty = Value::Object(Default::default());
        let spec = root.field("spec")?.unwrap_or_else(|| At::root(&empty));
        spec.object()?;
        let pod_selector = match spec.field("podSelector")? {
            Some(at) => LabelSelector::parse(&at)?,
            None => LabelSelector::default(),
        };
        let (mut ingress, mut egress) = (false, false);
        for t in spec.list("policyTypes")? {
            match t.str()? {
                "Ingress" => ingress = true,
                "Egress" => egress = true,
                other => {
                    return Err(t.fail(format!(
                        "unknown policy type {other:?}: expected Ingress or Egress"
                    )))
                }
            }
        }
        if !ingress && !egress {
            // The API server's default: Ingress, and Egress when there are
            // egress rules.
            ingress = true;
            egress = !spec.list_is_empty("egress")?;
        }
        let mut policy = NetworkPolicy {
            namespace,
            name,
            pod_selector,
            isolates_ingress: ingress,
            isolates_egress: egress,
            ingress: Vec::new(),
            egress: Vec::new(),
            problems: Vec::new(),
        };
        let object = policy.key();
        if ingress {
            policy.ingress = parse_rules(&spec, "ingress", "from", &object, &mut policy.problems);
        }
        if egress {
            policy.egress = parse_rules(&spec, "egress", "to", &object, &mut policy.problems);
        }
        Ok(policy)
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The rules of one direction; a malformed rule is left out (it admits
/// nothing) and its error added to `problems`.
fn parse_rules(
    spec: &At,
    dir: &str,
    peers: &str,
    object: &str,
    problems: &mut Vec<NetpolError>,
) -> Vec<Rule> {
    let mut problem = |f: Fail, why: &str| {
        let mut e = f.into_error(Kind::NetworkPolicy, object);
        e.message.push_str(why);
        problems.push(e);
    };
    let items = match spec.list(dir) {
        Ok(items) => items,
        Err(f) => {
            problem(f, " (no rule read: the policy admits nothing)");
            return Vec::new();
        }
    };
    let mut rules = Vec::new();
    for (i, at) in items.iter().enumerate() {
        match parse_rule(at, peers, format!("{object}/{dir}[{i}]")) {
            Ok(rule) => rules.push(rule),
            Err(f) => problem(f, " (rule ignored: it admits nothing)"),
        }
    }
    rules
}

fn parse_rule(at: &At, peers_key: &str, name: String) -> Result<Rule, Fail> {
    at.object()?;
    let mut peers = Vec::new();
    for p in at.list(peers_key)? {
        peers.push(parse_peer(&p)?);
    }
    let mut ports = Vec::new();
    for p in at.list("ports")? {
        ports.push(parse_port(&p)?);
    }
    Ok(Rule {
        name: name.into(),
        peers,
        ports,
    })
}

fn parse_peer(at: &At) -> Result<Peer, Fail> {
    let pods = at.field("podSelector")?;
    let namespaces = at.field("namespaceSelector")?;
    let block = at.field("ipBlock")?;
    if let Some(b) = block {
        if pods.is_some() || namespaces.is_some() {
            return Err(at.fail("ipBlock cannot be combined with podSelector or namespaceSelector"));
        }
        let cidr_at = b.required("cidr")?;
        let cidr = Cidr::parse(cidr_at.str()?).map_err(|m| cidr_at.fail(m))?;
        let mut except = Vec::new();
        for e in b.list("except")? {
            except.push(Cidr::parse(e.str()?).map_err(|m| e.fail(m))?);
        }
        return Ok(Peer::IpBlock(IpBlock { cidr, except }));
    }
    if pods.is_none() && namespaces.is_none() {
        return Err(at.fail("a peer needs podSelector, namespaceSelector or ipBlock"));
    }
    Ok(Peer::Pods {
        pods: pods.map(|s| LabelSelector::parse(&s)).transpose()?,
        namespaces: namespaces.map(|s| LabelSelector::parse(&s)).transpose()?,
    })
}

fn parse_port(at: &At) -> Result<PortRule, Fail> {
    at.object()?;
    let protocol = match at.field("protocol")? {
        None => Protocol::Tcp,
        Some(p) => match p.str()? {
            "TCP" => Protocol::Tcp,
            "UDP" => Protocol::Udp,
            "SCTP" => Protocol::Sctp,
            other => {
                return Err(p.fail(format!(
                    "unknown protocol {other:?}: expected TCP, UDP or SCTP"
                )))
            }
        },
    };
    let port = match at.field("port")? {
        None => None,
        Some(p) if p.value.is_string() => Some(Port::Named(p.name()?.to_string())),
        Some(p) => Some(Port::Number(p.int_in(1, 65535)? as u16)),
    };
    let end_port = match at.field("endPort")? {
        None => None,
        Some(e) => {
            let end = e.int_in(1, 65535)? as u16;
            match port {
                Some(Port::Number(p)) if end >= p => Some(end),
                Some(Port::Number(p)) => {
                    return Err(e.fail(format!("endPort {end} is below port {p}")))
                }
                _ => return Err(e.fail("endPort needs a numbered port")),
            }
        }
    };
    Ok(PortRule {
        protocol,
        port,
        end_port,
    })
}

#[cfg(test)]
#[path = "object_tests.rs"]
mod tests;
