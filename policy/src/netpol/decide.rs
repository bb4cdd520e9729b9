//! Decisions: whether NetworkPolicy allows an RDMA connection between two
//! masq endpoints, with the meaning it has for TCP, and which rules said so.

use super::index::{Index, PodEntry};
use super::object::{NetworkPolicy, Peer, Protocol, Rule};
use super::selector::Labels;
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;

/// An end of a connection: a pod (namespace, name) or another endpoint
/// (masqd's config, podman's), and its masq vIP, all from masqd's own
/// endpoint registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint<'a> {
    /// `(namespace, name)` of a Kubernetes pod; `None` for an endpoint that
    /// is no pod's: never selected by a policy, matched only by `ipBlock`.
    pub pod: Option<(&'a str, &'a str)>,
    pub vip: Ipv4Addr,
}

impl<'a> Endpoint<'a> {
    pub fn pod(namespace: &'a str, name: &'a str, vip: Ipv4Addr) -> Endpoint<'a> {
        Endpoint {
            pod: Some((namespace, name)),
            vip,
        }
    }

    pub fn other(vip: Ipv4Addr) -> Endpoint<'a> {
        Endpoint { pod: None, vip }
    }
}

/// The RDMA CM's port space of a listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// RDMA_PS_TCP: decided as TCP to the port.
    Tcp,
    /// RDMA_PS_UDP: decided as UDP to the port.
    Udp,
}

/// What is being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Connection {
    /// An RDMA CM connect (or UD query) from `a` to `b` listening on
    /// `port`: directed, like a TCP connect.
    Cm { space: PortSpace, port: u16 },
    /// A verbs RC/UC QP at RTR: no port, no initiator known.
    Qp,
    /// A UD address handle: no port; decided like a QP.
    Ud,
}

/// What one end's policies said about one direction (its egress, or its
/// ingress).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// No policy isolates this end in this direction (or it is no pod).
    Open,
    /// The first admitting rule (policies by name, rules in order):
    /// `namespace/policy/ingress[i]`.
    Rule(Arc<str>),
    /// Policies isolate this pod (`namespace/name`) and none admits.
    Isolated(Arc<str>),
    /// A pod (`namespace/name`) or its namespace masq has not mirrored:
    /// denied, since its policies are unknown.
    Unknown(Arc<str>),
}

impl Side {
    pub fn allows(&self) -> bool {
        matches!(self, Side::Open | Side::Rule(_))
    }
}

/// The outcome, and what decided it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Verdict {
    pub allowed: bool,
    /// The direction the sides are about: `false` for a→b (the CM's
    /// direction, or a QP's first try), `true` for b→a.
    pub reversed: bool,
    /// The sending end's egress.
    pub egress: Side,
    /// The receiving end's ingress.
    pub ingress: Side,
    /// Both ends are one endpoint; traffic never leaves it.
    pub loopback: bool,
}

impl Verdict {
    /// A short, stable label for connection tracking:
    /// `netpol:team/allow-clients/ingress[0]`, with the egress rule first
    /// when both ends are isolated (`netpol:a/out/egress[0]+b/in/ingress[1]`),
    /// `netpol:none` when neither is, `netpol:loopback`; when denied,
    /// `netpol:default-deny team/db-0 ingress` (the side that refused,
    /// egress first) or `netpol:unknown team/db-0`.
    pub fn label(&self) -> String {
        if self.loopback {
            return "netpol:loopback".into();
        }
        if !self.allowed {
            for (side, dir) in [(&self.egress, "egress"), (&self.ingress, "ingress")] {
                match side {
                    Side::Isolated(pod) => return format!("netpol:default-deny {pod} {dir}"),
                    Side::Unknown(pod) => return format!("netpol:unknown {pod}"),
                    _ => {}
                }
            }
        }
        match (&self.egress, &self.ingress) {
            (Side::Rule(e), Side::Rule(i)) => format!("netpol:{e}+{i}"),
            (Side::Rule(r), _) | (_, Side::Rule(r)) => format!("netpol:{r}"),
            _ => "netpol:none".into(),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({})",
            if self.allowed { "allow" } else { "deny" },
            self.label()
        )
    }
}

/// What an update changed, to find the tracked connections whose verdict
/// it may have changed (the others need no re-evaluation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Change<'a> {
    /// A pod added, relabelled or removed: its own isolation and how
    /// others' rules match it.
    Pod { namespace: &'a str, name: &'a str },
    /// A policy of this namespace (whose pods alone it isolates), or the
    /// Namespace's labels (which others' `namespaceSelector`s read).
    Namespace(&'a str),
}

impl Change<'_> {
    /// Whether the verdict of a connection between `a` and `b` may differ
    /// after the change: only when one end is the pod, or in the namespace.
    pub fn may_change(&self, a: &Endpoint, b: &Endpoint) -> bool {
        let touches = |e: &Endpoint| match (self, e.pod) {
            (_, None) => false,
            (Change::Pod { namespace, name }, Some(p)) => p == (*namespace, *name),
            (Change::Namespace(ns), Some((namespace, _))) => namespace == *ns,
        };
        touches(a) || touches(b)
    }
}

/// An end as the index knows it.
pub(super) struct Resolved<'a> {
    pub vip: Ipv4Addr,
    pub who: Who<'a>,
}

pub(super) enum Who<'a> {
    Other,
    Unknown(Arc<str>),
    Pod {
        namespace: &'a str,
        ns_labels: &'a Labels,
        entry: &'a PodEntry,
    },
}

#[derive(Clone, Copy)]
enum Dir {
    Ingress,
    Egress,
}

impl Rule {
    /// Whether the rule's ports admit `service`; port-less RDMA (`None`)
    /// only passes a rule without `ports`.
    fn admits_service(&self, service: Option<(Protocol, u16)>) -> bool {
        if self.ports.is_empty() {
            return true;
        }
        match service {
            None => false,
            Some((proto, port)) => self.ports.iter().any(|p| p.admits(proto, port)),
        }
    }

    fn admits_peer(&self, policy: &NetworkPolicy, peer: &Resolved) -> bool {
        self.peers.is_empty() || self.peers.iter().any(|p| p.admits(policy, peer))
    }
}

impl Peer {
    /// Whether this `from`/`to` item of `policy` selects `peer`.
    pub(super) fn admits(&self, policy: &NetworkPolicy, peer: &Resolved) -> bool {
        match self {
            Peer::IpBlock(block) => block.contains(peer.vip),
            Peer::Pods { pods, namespaces } => match &peer.who {
                Who::Pod {
                    namespace,
                    ns_labels,
                    entry,
                } => {
                    let ns_ok = match namespaces {
                        None => *namespace == policy.namespace,
                        Some(sel) => sel.matches(ns_labels),
                    };
                    ns_ok && pods.as_ref().is_none_or(|sel| sel.matches(&entry.labels))
                }
                Who::Other | Who::Unknown(_) => false,
            },
        }
    }
}

impl Index {
    pub(super) fn resolve<'a>(&'a self, ep: &Endpoint) -> Resolved<'a> {
        let who = match ep.pod {
            None => Who::Other,
            Some((namespace, name)) => {
                let found = self
                    .namespaces
                    .get_key_value(namespace)
                    .and_then(|(k, ns)| {
                        Some(Who::Pod {
                            namespace: k.as_str(),
                            ns_labels: ns.labels.as_ref()?,
                            entry: ns.pods.get(name)?,
                        })
                    });
                found.unwrap_or_else(|| Who::Unknown(format!("{namespace}/{name}").into()))
            }
        };
        Resolved { vip: ep.vip, who }
    }

    /// What `me`'s policies of direction `dir` say about `peer`.
    fn side(me: &Resolved, dir: Dir, peer: &Resolved, service: Option<(Protocol, u16)>) -> Side {
        let entry = match &me.who {
            Who::Other => return Side::Open,
            Who::Unknown(key) => return Side::Unknown(key.clone()),
            Who::Pod { entry, .. } => entry,
        };
        let policies = match dir {
            Dir::Ingress => &entry.ingress,
            Dir::Egress => &entry.egress,
        };
        if policies.is_empty() {
            return Side::Open;
        }
        for policy in policies {
            let rules = match dir {
                Dir::Ingress => &policy.ingress,
                Dir::Egress => &policy.egress,
            };
            for rule in rules {
                if rule.admits_service(service) && rule.admits_peer(policy, peer) {
                    return Side::Rule(rule.name.clone());
                }
            }
        }
        Side::Isolated(entry.key.clone())
    }

    fn directed(
        from: &Resolved,
        to: &Resolved,
        service: Option<(Protocol, u16)>,
        reversed: bool,
    ) -> Verdict {
        let egress = Self::side(from, Dir::Egress, to, service);
        let ingress = Self::side(to, Dir::Ingress, from, service);
        Verdict {
            allowed: egress.allows() && ingress.allows(),
            reversed,
            egress,
            ingress,
            loopback: false,
        }
    }

    /// Whether NetworkPolicy allows `conn` between `a` and `b`:
    ///
    /// - [`Connection::Cm`] from `a` to `b`'s port: `a`'s egress must allow
    ///   `b` and `b`'s ingress `a`, on the port space's protocol and port;
    /// - [`Connection::Qp`] and [`Connection::Ud`]: as port-less traffic
    ///   a→b or, failing that, b→a (only rules without `ports` admit it).
    ///
    /// An end no policy isolates in a direction is unrestricted there; an
    /// endpoint to itself is always allowed.
    pub fn decide(&self, a: &Endpoint, b: &Endpoint, conn: Connection) -> Verdict {
        if a == b {
            return Verdict {
                allowed: true,
                reversed: false,
                egress: Side::Open,
                ingress: Side::Open,
                loopback: true,
            };
        }
        let (ra, rb) = (self.resolve(a), self.resolve(b));
        match conn {
            Connection::Cm { space, port } => {
                let proto = match space {
                    PortSpace::Tcp => Protocol::Tcp,
                    PortSpace::Udp => Protocol::Udp,
                };
                Self::directed(&ra, &rb, Some((proto, port)), false)
            }
            Connection::Qp | Connection::Ud => {
                let forward = Self::directed(&ra, &rb, None, false);
                if forward.allowed {
                    return forward;
                }
                let back = Self::directed(&rb, &ra, None, true);
                if back.allowed {
                    back
                } else {
                    forward
                }
            }
        }
    }
}
