//! The policy file's schema: walks the YAML tree into a typed document,
//! recording every structural problem with its place. Name resolution
//! (groups, endpoints) happens in `compile`.
//!
//! This file holds the document's types; the walk is split by section:
//! `walker` (the walker and what every section uses: keys, names,
//! scalars), `tenants` (the document, tenants, security groups, QoS,
//! members), `rules` (ingress and egress rules, peers, ports),
//! `kubernetes` (a tenant's namespaces); `canonical` is the text the
//! policy's version hashes.

mod canonical;
mod kubernetes;
mod rules;
mod tenants;
mod walker;

pub(crate) use canonical::canonical;
pub(crate) use walker::walk;

use crate::error::Location;
use crate::OnRuleChange;
use std::fmt;
use std::net::Ipv4Addr;

/// An IPv4 prefix with no host bits set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Cidr {
    pub addr: u32,
    pub len: u8,
}

impl Cidr {
    pub fn host(ip: Ipv4Addr) -> Cidr {
        Cidr {
            addr: u32::from(ip),
            len: 32,
        }
    }

    fn mask(len: u8) -> u32 {
        if len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(len))
        }
    }

    pub fn first(&self) -> u32 {
        self.addr
    }

    pub fn last(&self) -> u32 {
        self.addr | !Self::mask(self.len)
    }

    pub fn contains(&self, ip: u32) -> bool {
        ip & Self::mask(self.len) == self.addr
    }

    pub fn covers(&self, other: &Cidr) -> bool {
        self.len <= other.len && self.contains(other.addr)
    }

    /// `a.b.c.d/n`, or a bare address as /32 when `bare_ok`.
    pub fn parse(s: &str, bare_ok: bool) -> Result<Cidr, String> {
        let Some((addr, len)) = s.split_once('/') else {
            if bare_ok {
                return parse_ip(s).map(Cidr::host);
            }
            return Err(format!(
                "invalid CIDR {s:?}: expected address/prefix-length, e.g. 10.0.0.0/16"
            ));
        };
        let ip = parse_ip(addr).map_err(|e| format!("invalid CIDR {s:?}: {e}"))?;
        let len: u8 = match len.parse() {
            Ok(n) if n <= 32 => n,
            _ => return Err(format!("invalid CIDR {s:?}: prefix length must be 0..=32")),
        };
        let addr = u32::from(ip);
        let net = addr & Self::mask(len);
        if net != addr {
            return Err(format!(
                "invalid CIDR {s:?}: host bits are set (the network is {}/{len})",
                Ipv4Addr::from(net)
            ));
        }
        Ok(Cidr { addr, len })
    }
}

fn parse_ip(s: &str) -> Result<Ipv4Addr, String> {
    // std refuses leading zeros ("010.0.0.1"), which some tools read as octal.
    s.parse::<Ipv4Addr>()
        .map_err(|_| format!("{s:?} is not an IPv4 address (a.b.c.d, each 0..=255)"))
}

/// Looks like an address attempt rather than an endpoint name.
fn looks_numeric(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '/')
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.addr), self.len)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Rdma,
    Tcp,
    Udp,
    All,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Rdma => "rdma",
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::All => "all",
        }
    }
}

/// Inclusive destination-port range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

impl PortRange {
    pub const ALL: PortRange = PortRange {
        lo: 0,
        hi: u16::MAX,
    };
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum MemberKind {
    Endpoint(String),
    Net(Cidr),
}

#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub kind: MemberKind,
    pub loc: Location,
    pub path: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Peer {
    Group(String),
    Net(Cidr),
}

#[derive(Clone, Debug)]
pub(crate) struct Rule {
    pub peer: Peer,
    pub peer_loc: Location,
    pub peer_path: String,
    pub protocol: Protocol,
    /// Empty means all ports (and always empty for rdma/all).
    pub ports: Vec<PortRange>,
}

/// How an endpoint's RoCE traffic is marked: the DSCP of the traffic
/// class masqd writes at RTR (the two ECN bits stay the app's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qos {
    pub dscp: u8,
    pub mode: QosMode,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosMode {
    /// Every connection carries `dscp`, whatever the app asked for.
    Set,
    /// The app's DSCP, but no higher than `dscp`.
    Max,
}

impl QosMode {
    pub fn as_str(self) -> &'static str {
        match self {
            QosMode::Set => "set",
            QosMode::Max => "max",
        }
    }
}

impl Qos {
    /// The traffic class to program for an app that asked for `requested`.
    pub fn traffic_class(&self, requested: u8) -> u8 {
        let asked = requested >> 2;
        let dscp = match self.mode {
            QosMode::Set => self.dscp,
            QosMode::Max => asked.min(self.dscp),
        };
        (dscp << 2) | (requested & 0x3)
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub name: String,
    pub qos: Option<Qos>,
    pub members: Vec<Member>,
    /// `None`: key omitted, deny all ingress.
    pub ingress: Option<Vec<Rule>>,
    /// `None`: key omitted, allow all egress. `Some(vec![])`: deny all.
    pub egress: Option<Vec<Rule>>,
}

#[derive(Clone, Debug)]
pub(crate) struct Tenant {
    pub name: String,
    pub qos: Option<Qos>,
    pub groups: Vec<Group>,
    /// `kubernetes`: the namespaces whose pods may attach to it and
    /// whether NetworkPolicy holds (`None`: no key, so none may; see
    /// `kubernetes`).
    pub kubernetes: Option<Kubernetes>,
}

/// A tenant's `kubernetes` key.
#[derive(Clone, Debug, Default)]
pub(crate) struct Kubernetes {
    pub namespaces: Vec<String>,
    /// `networkPolicy`: the cluster's NetworkPolicy decides its
    /// connections too.
    pub network_policy: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct Document {
    pub on_rule_change: OnRuleChange,
    pub tenants: Vec<Tenant>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parse() {
        assert_eq!(
            Cidr::parse("10.0.0.0/16", false).unwrap(),
            Cidr {
                addr: 0x0a00_0000,
                len: 16
            }
        );
        assert_eq!(Cidr::parse("0.0.0.0/0", false).unwrap().len, 0);
        assert_eq!(Cidr::parse("10.1.2.3", true).unwrap().len, 32);
        assert!(Cidr::parse("10.1.2.3", false).is_err());
        let e = Cidr::parse("10.0.0.0/33", false).unwrap_err();
        assert_eq!(
            e,
            "invalid CIDR \"10.0.0.0/33\": prefix length must be 0..=32"
        );
        let e = Cidr::parse("10.0.0.1/24", false).unwrap_err();
        assert!(
            e.contains("host bits are set (the network is 10.0.0.0/24)"),
            "{e}"
        );
        assert!(Cidr::parse("10.0.0/8", false)
            .unwrap_err()
            .contains("not an IPv4 address"));
        assert!(Cidr::parse("010.0.0.0/8", false).is_err());
        assert!(Cidr::parse("10.0.0.0/-1", false).is_err());
        assert!(Cidr::parse("10.0.0.0/", false).is_err());
    }

    #[test]
    fn cidr_contains() {
        let all = Cidr::parse("0.0.0.0/0", false).unwrap();
        assert!(all.contains(0) && all.contains(u32::MAX));
        assert_eq!(all.last(), u32::MAX);
        let c = Cidr::parse("10.0.1.0/24", false).unwrap();
        assert!(c.contains(u32::from(Ipv4Addr::new(10, 0, 1, 255))));
        assert!(!c.contains(u32::from(Ipv4Addr::new(10, 0, 2, 0))));
        assert!(all.covers(&c) && !c.covers(&all));
    }
}
