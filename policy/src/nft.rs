//! nftables rendering of an endpoint's tcp/udp rules.
//!
//! The endpoint's vNIC is a veth whose host end is a port of a per-VNI
//! Linux bridge. Frames between bridge ports never reach the inet family's
//! hooks unless br_netfilter is loaded, and even then iif/oif there are the
//! bridge, not the port. So the ruleset lives in a `bridge` family table:
//! its forward hook sees each frame with `iifname`/`oifname` set to the
//! bridge ports, so traffic from the endpoint is `iifname <veth>` (egress
//! rules) and traffic to it is `oifname <veth>` (ingress rules).
//!
//! Stateful matching (`ct state established,related`) in the bridge family
//! needs the kernel's nf_conntrack_bridge (Linux >= 5.3; `modprobe
//! nf_conntrack_bridge`), not br_netfilter. Different VNIs may reuse the
//! same addresses, so every frame entering the endpoint's bridge is put in a
//! conntrack zone derived from the VNI before conntrack sees it; otherwise
//! one tenant's connection could make another tenant's identical 5-tuple
//! look established.
//!
//! RDMA rules are not rendered: RoCE traffic does not cross the vNIC and
//! masqd enforces RDMA at QP setup. Only tcp and udp are filtered (ARP,
//! ICMP and other protocols pass), matching what the policy can express.

use crate::compile::{PeerM, RuleM, TenantM};
use crate::netpol::{FlowRule, Flows, PodFlows};
use crate::schema::{Cidr, PortRange, Protocol};
use crate::{EndpointRef, Policy};
use std::fmt::{self, Write};

/// Why an endpoint's ruleset could not be rendered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NftError {
    /// The endpoint was not in the list given to [`Policy::parse`].
    UnknownEndpoint(String),
    /// Not a Linux interface name that can be quoted safely (1..=15 of
    /// letters, digits, '-', '_', '.').
    BadInterfaceName(String),
}

impl fmt::Display for NftError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NftError::UnknownEndpoint(n) => write!(f, "unknown endpoint {n:?}"),
            NftError::BadInterfaceName(n) => write!(
                f,
                "invalid interface name {n:?}: expected 1..=15 letters, digits, '-', '_' or '.'"
            ),
        }
    }
}

impl std::error::Error for NftError {}

fn check_ifname(name: &str) -> Result<(), NftError> {
    let ok = (1..=15).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(NftError::BadInterfaceName(name.to_string()))
    }
}

/// `masq_<endpoint>`: the endpoint name restricted to characters nft
/// accepts in an unquoted identifier; a hash suffix keeps rewritten names
/// distinct.
pub fn table_name(endpoint: &str) -> String {
    let clean: String = endpoint
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean == endpoint {
        format!("masq_{clean}")
    } else {
        // FNV-1a: stable across builds, unlike std's hasher.
        let h = endpoint.bytes().fold(0x811c_9dc5u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        format!("masq_{clean}_{h:08x}")
    }
}

/// Conntrack zone for a VNI: 1..=65535, distinct for VNIs below 65535.
/// Zone 0 stays the host's own.
pub fn ct_zone(vni: u32) -> u16 {
    (1 + vni % 65535) as u16
}

/// Smallest set of CIDRs covering the same addresses (nft refuses
/// overlapping elements in a set).
fn normalize_nets(mut nets: Vec<Cidr>) -> Vec<Cidr> {
    nets.sort();
    nets.dedup();
    let mut out: Vec<Cidr> = Vec::new();
    for n in nets {
        // Sorted by (address, length): a covering prefix comes first.
        if out.last().is_some_and(|last| last.covers(&n)) {
            continue;
        }
        out.push(n);
    }
    out
}

fn normalize_ports(mut ports: Vec<PortRange>) -> Vec<PortRange> {
    ports.sort();
    let mut out: Vec<PortRange> = Vec::new();
    for p in ports {
        match out.last_mut() {
            Some(last) if u32::from(p.lo) <= u32::from(last.hi) + 1 => {
                last.hi = last.hi.max(p.hi);
            }
            _ => out.push(p),
        }
    }
    out
}

/// nft writes single addresses without a prefix length.
struct NftNet(Cidr);

impl fmt::Display for NftNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len == 32 {
            write!(f, "{}", std::net::Ipv4Addr::from(self.0.addr))
        } else {
            write!(f, "{}", self.0)
        }
    }
}

fn set<T: fmt::Display>(items: &[T]) -> String {
    if items.len() == 1 {
        items[0].to_string()
    } else {
        let v: Vec<String> = items.iter().map(|i| i.to_string()).collect();
        format!("{{ {} }}", v.join(", "))
    }
}

/// One accept rule, or the comment explaining why nothing is rendered.
fn rule_line(t: &TenantM, r: &RuleM, field: &str, vni: u32) -> Result<String, String> {
    let name = &t.rule_names[r.id as usize];
    let nets = match r.peer {
        PeerM::Net(c) => vec![c],
        PeerM::Group(g) => {
            let g = &t.groups[g as usize];
            let mut nets = g.member_nets.clone();
            nets.extend(
                g.member_endpoints
                    .iter()
                    .filter(|(v, _)| *v == vni)
                    .map(|(_, ip)| Cidr::host(*ip)),
            );
            if nets.is_empty() {
                return Err(format!(
                    "{name}: group {} has no members in VNI {vni}",
                    g.name
                ));
            }
            nets
        }
    };
    let nets = normalize_nets(nets);
    let addr = if nets.iter().any(|n| n.len == 0) {
        // Any IPv4 peer.
        "ether type ip".to_string()
    } else {
        let nets: Vec<NftNet> = nets.into_iter().map(NftNet).collect();
        format!("ip {field} {}", set(&nets))
    };
    let proto = match r.protocol {
        Protocol::Rdma => return Err(format!("{name}: rdma, enforced by masqd")),
        Protocol::All => String::new(),
        Protocol::Tcp | Protocol::Udp => {
            let p = r.protocol.as_str();
            if r.ports.is_empty() {
                format!(" ip protocol {p}")
            } else {
                format!(" {p} dport {}", set(&normalize_ports(r.ports.clone())))
            }
        }
    };
    Ok(format!("{addr}{proto} accept comment \"{name}\""))
}

fn chain_rules(out: &mut String, t: &TenantM, rules: &[&RuleM], field: &str, vni: u32) {
    for r in rules {
        match rule_line(t, r, field, vni) {
            Ok(line) => {
                let _ = writeln!(out, "\t\t{line}");
            }
            Err(why) => {
                let _ = writeln!(out, "\t\t# {why}");
            }
        }
    }
}

/// A comment nft takes as written: names from the API (NetworkPolicy's)
/// are not checked for quotes, and nft keeps 128 bytes of a comment.
fn comment(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "/._-[]:+() ".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(127)
        .collect()
}

/// The accept lines of one NetworkPolicy rule: each address match (the
/// selected pods' vIPs, each `ipBlock` less its exceptions) with each
/// protocol's ports.
fn netpol_lines(out: &mut String, rule: &FlowRule, field: &str) {
    let name = comment(&rule.name);
    if let Some(why) = rule.admits_nothing() {
        let _ = writeln!(out, "\t\t# {name}: {why}");
        return;
    }
    let addrs: Vec<String> = match &rule.peers {
        None => vec![String::new()],
        Some(p) => {
            let mut addrs = Vec::new();
            if !p.vips.is_empty() {
                addrs.push(format!("ip {field} {} ", set(&p.vips)));
            }
            for b in &p.blocks {
                let net = NftNet(Cidr {
                    addr: u32::from(b.net.0),
                    len: b.net.1,
                });
                // Any IPv4 peer, as the security groups write 0.0.0.0/0.
                let mut a = if b.net.1 == 0 {
                    "ether type ip ".to_string()
                } else {
                    format!("ip {field} {net} ")
                };
                if !b.except.is_empty() {
                    let except: Vec<NftNet> = b
                        .except
                        .iter()
                        .map(|&(ip, len)| {
                            NftNet(Cidr {
                                addr: u32::from(ip),
                                len,
                            })
                        })
                        .collect();
                    let _ = write!(a, "ip {field} != {} ", set(&except));
                }
                addrs.push(a);
            }
            addrs
        }
    };
    let ports: Vec<String> = match &rule.ports {
        None => vec!["meta l4proto { tcp, udp }".into()],
        Some(ports) => {
            let mut lines = Vec::new();
            for (proto, name) in [
                (crate::netpol::Protocol::Tcp, "tcp"),
                (crate::netpol::Protocol::Udp, "udp"),
            ] {
                let of: Vec<_> = ports.iter().filter(|p| p.protocol == proto).collect();
                if of.iter().any(|p| p.range.is_none()) {
                    lines.push(format!("meta l4proto {name}"));
                } else if !of.is_empty() {
                    let ranges: Vec<PortRange> = of
                        .iter()
                        .filter_map(|p| p.range)
                        .map(|(lo, hi)| PortRange { lo, hi })
                        .collect();
                    lines.push(format!("{name} dport {}", set(&normalize_ports(ranges))));
                }
            }
            lines
        }
    };
    for a in &addrs {
        for p in &ports {
            let _ = writeln!(out, "\t\t{a}{p} accept comment \"{name}\"");
        }
    }
}

/// One direction's NetworkPolicy chain; `None` when it is open.
fn netpol_chain(flows: &Flows, chain: &str, dir: &str, field: &str) -> Option<String> {
    let mut s = String::new();
    let _ = writeln!(s, "\tchain {chain} {{");
    let _ = writeln!(s, "\t\tether type arp accept");
    let _ = writeln!(s, "\t\tct state established,related accept");
    let deny = match flows {
        Flows::Open => return None,
        Flows::Unknown(pod) => format!("netpol:unknown {pod}"),
        Flows::Isolated { pod, rules } => {
            for r in rules {
                netpol_lines(&mut s, r, field);
            }
            format!("netpol:default-deny {pod} {dir}")
        }
    };
    let _ = writeln!(
        s,
        "\t\tmeta l4proto {{ tcp, udp }} counter drop comment \"{}\"",
        comment(&deny)
    );
    let _ = writeln!(s, "\t}}");
    Some(s)
}

/// Kubernetes NetworkPolicy's chains, a base chain after the security
/// groups' (priority 10): a frame passes when both accept it.
fn netpol_chains(s: &mut String, flows: &PodFlows, host_ifname: &str) {
    let to = netpol_chain(&flows.ingress, "netpol_to_endpoint", "ingress", "saddr");
    let from = netpol_chain(&flows.egress, "netpol_from_endpoint", "egress", "daddr");
    if to.is_none() && from.is_none() {
        let _ = writeln!(
            s,
            "\t# Kubernetes NetworkPolicy: no policy isolates this pod"
        );
        return;
    }
    let _ = writeln!(s, "\tchain netpol {{");
    let _ = writeln!(
        s,
        "\t\ttype filter hook forward priority 10; policy accept;"
    );
    if to.is_some() {
        let _ = writeln!(s, "\t\toifname \"{host_ifname}\" jump netpol_to_endpoint");
    }
    if from.is_some() {
        let _ = writeln!(s, "\t\tiifname \"{host_ifname}\" jump netpol_from_endpoint");
    }
    let _ = writeln!(s, "\t}}");
    for chain in [to, from].into_iter().flatten() {
        s.push_str(&chain);
    }
}

pub(crate) fn render(
    policy: &Policy,
    ep: &EndpointRef,
    host_ifname: &str,
    bridge_ifname: &str,
    netpol: Option<&PodFlows>,
) -> Result<String, NftError> {
    check_ifname(host_ifname)?;
    check_ifname(bridge_ifname)?;
    let tenant = policy.compiled.tenants.get(&ep.tenant);
    let groups: &[u32] = tenant.map_or(&[], |t| t.groups_of(ep.vni, u32::from(ep.vip)));
    let table = table_name(&ep.name);
    let zone = ct_zone(ep.vni);

    let mut ingress: Vec<&RuleM> = Vec::new();
    let mut egress: Vec<&RuleM> = Vec::new();
    // Egress is unrestricted when the endpoint is in no group, or in any
    // group without an `egress` key (union of groups).
    let mut egress_all: Option<String> = groups.is_empty().then(|| "default-egress-allow".into());
    if let Some(t) = tenant {
        for &g in groups {
            let g = &t.groups[g as usize];
            ingress.extend(&g.ingress_rules);
            match &g.egress_rules {
                Some(rules) => egress.extend(rules),
                None => {
                    egress_all.get_or_insert_with(|| format!("{}(all)", g.egress_all_label));
                }
            }
        }
    }
    ingress.sort_by_key(|r| r.id);
    egress.sort_by_key(|r| r.id);
    let group_names: Vec<&str> = tenant.map_or(Vec::new(), |t| {
        groups
            .iter()
            .map(|&g| t.groups[g as usize].name.as_str())
            .collect()
    });

    let mut s = String::new();
    let _ = writeln!(
        s,
        "# masq security groups for endpoint {} (tenant {}, VNI {}, vIP {})",
        ep.name, ep.tenant, ep.vni, ep.vip
    );
    let _ = writeln!(
        s,
        "# groups: {}; policy {}",
        if group_names.is_empty() {
            "none".to_string()
        } else {
            group_names.join(", ")
        },
        policy.version_hash()
    );
    let _ = writeln!(
        s,
        "# Generated by masq-policy. Needs nf_conntrack_bridge (not br_netfilter)."
    );
    // Create-then-delete makes loading this file replace the table
    // atomically whether or not it exists.
    let _ = writeln!(s, "table bridge {table}");
    let _ = writeln!(s, "delete table bridge {table}");
    let _ = writeln!(s, "table bridge {table} {{");
    let _ = writeln!(s, "\tchain zone {{");
    let _ = writeln!(
        s,
        "\t\ttype filter hook prerouting priority -300; policy accept;"
    );
    let _ = writeln!(s, "\t\tmeta ibrname \"{bridge_ifname}\" ct zone set {zone}");
    let _ = writeln!(s, "\t}}");
    let _ = writeln!(s, "\tchain forward {{");
    let _ = writeln!(s, "\t\ttype filter hook forward priority 0; policy accept;");
    let _ = writeln!(s, "\t\toifname \"{host_ifname}\" jump to_endpoint");
    let _ = writeln!(s, "\t\tiifname \"{host_ifname}\" jump from_endpoint");
    let _ = writeln!(s, "\t}}");

    let _ = writeln!(s, "\tchain to_endpoint {{");
    let _ = writeln!(s, "\t\tether type arp accept");
    let _ = writeln!(s, "\t\tct state established,related accept");
    if let Some(t) = tenant {
        chain_rules(&mut s, t, &ingress, "saddr", ep.vni);
    }
    let _ = writeln!(
        s,
        "\t\tmeta l4proto {{ tcp, udp }} counter drop comment \"default-deny\""
    );
    let _ = writeln!(s, "\t}}");

    let _ = writeln!(s, "\tchain from_endpoint {{");
    let _ = writeln!(s, "\t\tether type arp accept");
    let _ = writeln!(s, "\t\tct state established,related accept");
    match (&egress_all, tenant) {
        (Some(label), _) => {
            let _ = writeln!(s, "\t\taccept comment \"{label}\"");
        }
        (None, Some(t)) => {
            chain_rules(&mut s, t, &egress, "daddr", ep.vni);
            let _ = writeln!(
                s,
                "\t\tmeta l4proto {{ tcp, udp }} counter drop comment \"default-deny\""
            );
        }
        // No tenant means no groups, so egress_all is set.
        (None, None) => {}
    }
    let _ = writeln!(s, "\t}}");
    if let Some(flows) = netpol {
        netpol_chains(&mut s, flows, host_ifname);
    }
    let _ = writeln!(s, "}}");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_zones() {
        assert_eq!(table_name("acme_a"), "masq_acme_a");
        assert_eq!(table_name("acme-a.1"), "masq_acme-a.1");
        let t = table_name("acme a");
        assert!(
            t.starts_with("masq_acme_a_") && t.len() == "masq_acme_a_".len() + 8,
            "{t}"
        );
        assert_ne!(table_name("acme a"), table_name("acme/a"));
        assert_eq!(ct_zone(0), 1);
        assert_eq!(ct_zone(100), 101);
        assert_eq!(ct_zone(65534), 65535);
        assert_eq!(ct_zone(65535), 1);
        assert!(check_ifname("veth-acme0").is_ok());
        assert!(check_ifname("").is_err());
        assert!(check_ifname("a\"b").is_err());
        assert!(check_ifname("0123456789abcdef").is_err());
    }

    #[test]
    fn normalization() {
        let c = |s: &str| Cidr::parse(s, true).unwrap();
        assert_eq!(
            normalize_nets(vec![
                c("10.0.0.5"),
                c("10.0.0.0/16"),
                c("10.0.0.5"),
                c("10.1.0.0/16")
            ]),
            vec![c("10.0.0.0/16"), c("10.1.0.0/16")]
        );
        let p = |lo, hi| PortRange { lo, hi };
        assert_eq!(
            normalize_ports(vec![p(10, 20), p(21, 25), p(5, 5), p(15, 30), p(40, 40)]),
            vec![p(5, 5), p(10, 30), p(40, 40)]
        );
    }
}
