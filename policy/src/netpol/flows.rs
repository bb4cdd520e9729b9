//! NetworkPolicy as a pod's tcp/udp rules: for each direction of one pod,
//! the peers and ports its policies admit, as address and port sets for
//! nftables on the pod's vNIC (`crate::nft` renders them). A TCP or UDP
//! flow they pass is one [`Index::decide`] allows as an RDMA CM
//! connection to the same port, so a pod's TCP and its RDMA obey one
//! policy.
//!
//! Selectors become the vIPs of the pods they select now, among the
//! endpoints of the pod's VNI the caller lists; when pods, labels or
//! endpoints change, the caller asks again.

use super::decide::{Endpoint, Resolved, Who};
use super::index::Index;
use super::object::{Cidr, Peer, Port, Protocol, Rule};
use std::net::Ipv4Addr;
use std::sync::Arc;

/// One direction of a pod: what may enter it (ingress) or leave it
/// (egress).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Flows {
    /// No policy isolates it in this direction, or it is no pod.
    Open,
    /// Its pod (`namespace/name`) is not mirrored: its policies are
    /// unknown, so nothing is admitted, as at RTR.
    Unknown(Arc<str>),
    /// Policies isolate the pod (`namespace/name`): only `rules` admit.
    Isolated { pod: Arc<str>, rules: Vec<FlowRule> },
}

/// One ingress or egress rule of a policy, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowRule {
    /// `namespace/policy/ingress[i]`, as `netpol:` labels name it.
    pub name: Arc<str>,
    /// `None`: every peer (the rule has no `from`/`to`).
    pub peers: Option<Peers>,
    /// `None`: every port of tcp and udp. `Some(empty)`: the rule names
    /// only ports masq cannot match (named, SCTP), so it admits no tcp or
    /// udp flow.
    pub ports: Option<Vec<FlowPort>>,
}

impl FlowRule {
    /// Why it admits nothing now, if it does not: a comment for the
    /// ruleset.
    pub fn admits_nothing(&self) -> Option<&'static str> {
        if self.ports.as_ref().is_some_and(Vec::is_empty) {
            return Some("only named or SCTP ports, which match no tcp/udp port");
        }
        if self.peers.as_ref().is_some_and(Peers::is_empty) {
            return Some("selects no endpoint of this VNI now");
        }
        None
    }
}

/// The peers a rule admits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peers {
    /// The vIPs of the pods its `podSelector`/`namespaceSelector` select,
    /// sorted.
    pub vips: Vec<Ipv4Addr>,
    /// Its IPv4 `ipBlock`s (IPv6 ones match no vIP).
    pub blocks: Vec<Block>,
}

impl Peers {
    pub fn is_empty(&self) -> bool {
        self.vips.is_empty() && self.blocks.is_empty()
    }
}

/// An IPv4 `ipBlock`: `network/prefix` but not its exceptions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub net: (Ipv4Addr, u8),
    pub except: Vec<(Ipv4Addr, u8)>,
}

/// A tcp or udp port set of a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowPort {
    /// Tcp or Udp (SCTP is left out: only tcp and udp are filtered).
    pub protocol: Protocol,
    /// `None`: every port; else `lo..=hi`.
    pub range: Option<(u16, u16)>,
}

/// Both directions of a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFlows {
    pub ingress: Flows,
    pub egress: Flows,
}

fn v4(c: &Cidr) -> Option<(Ipv4Addr, u8)> {
    match *c {
        Cidr::V4 { network, prefix } => Some((Ipv4Addr::from(network), prefix)),
        Cidr::V6 => None,
    }
}

fn flow_ports(rule: &Rule) -> Option<Vec<FlowPort>> {
    if rule.ports.is_empty() {
        return None;
    }
    let ports = rule.ports.iter().filter_map(|p| {
        if p.protocol == Protocol::Sctp {
            return None;
        }
        let range = match (&p.port, p.end_port) {
            (None, _) => None,
            (Some(Port::Named(_)), _) => return None,
            (Some(Port::Number(n)), None) => Some((*n, *n)),
            (Some(Port::Number(n)), Some(end)) => Some((*n, end)),
        };
        Some(FlowPort {
            protocol: p.protocol,
            range,
        })
    });
    Some(ports.collect())
}

impl Index {
    /// What NetworkPolicy admits into and out of `me` over tcp and udp,
    /// with `others` (the other endpoints of its VNI, pods or not) as the
    /// peers selectors may pick.
    pub fn flows(&self, me: &Endpoint, others: &[Endpoint]) -> PodFlows {
        let me = self.resolve(me);
        let others: Vec<Resolved> = others
            .iter()
            .filter(|o| o.vip != me.vip)
            .map(|o| self.resolve(o))
            .collect();
        let direction = |ingress: bool| -> Flows {
            let entry = match &me.who {
                Who::Other => return Flows::Open,
                Who::Unknown(key) => return Flows::Unknown(key.clone()),
                Who::Pod { entry, .. } => entry,
            };
            let policies = if ingress {
                &entry.ingress
            } else {
                &entry.egress
            };
            if policies.is_empty() {
                return Flows::Open;
            }
            let mut rules = Vec::new();
            for policy in policies {
                for rule in if ingress {
                    &policy.ingress
                } else {
                    &policy.egress
                } {
                    let peers = (!rule.peers.is_empty()).then(|| Peers {
                        vips: others
                            .iter()
                            .filter(|o| {
                                rule.peers
                                    .iter()
                                    .any(|p| matches!(p, Peer::Pods { .. }) && p.admits(policy, o))
                            })
                            .map(|o| o.vip)
                            .collect(),
                        blocks: rule
                            .peers
                            .iter()
                            .filter_map(|p| match p {
                                Peer::IpBlock(b) => Some(Block {
                                    net: v4(&b.cidr)?,
                                    except: b.except.iter().filter_map(v4).collect(),
                                }),
                                Peer::Pods { .. } => None,
                            })
                            .collect(),
                    });
                    rules.push(FlowRule {
                        name: rule.name.clone(),
                        peers: peers.map(|mut p| {
                            p.vips.sort();
                            p.vips.dedup();
                            p
                        }),
                        ports: flow_ports(rule),
                    });
                }
            }
            Flows::Isolated {
                pod: entry.key.clone(),
                rules,
            }
        };
        PodFlows {
            ingress: direction(true),
            egress: direction(false),
        }
    }
}

#[cfg(test)]
#[path = "flows_tests.rs"]
mod tests;
