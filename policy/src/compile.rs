//! Name resolution and the compiled matcher.
//!
//! Per tenant, membership ("which groups is this address in") and each
//! group's ingress/egress peers are indexed by prefix: the distinct CIDRs
//! become a sorted list of disjoint address intervals (binary search gives
//! the most specific CIDR), and nested CIDRs keep a parent link, so a lookup
//! visits only the at most 33 prefixes that contain the address instead of
//! scanning rules. Ports are sorted disjoint intervals as well. Every index
//! stores the lowest matching rule id, so the verdict names the first rule
//! in file order that allows the traffic.

use crate::error::Errors;
use crate::schema::{Cidr, Document, MemberKind, Peer, PortRange, Protocol};
use crate::{Decision, EndpointRef, L4Proto};
use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;

/// "No rule" / "no node"; also the identity for `min` over rule ids.
pub(crate) const NONE: u32 = u32::MAX;

/// Most-specific-prefix lookup over a set of CIDRs.
#[derive(Debug, Default)]
pub(crate) struct NetMap {
    /// Distinct CIDRs sorted by (address, length): a node's index. Parents
    /// sort before their children.
    nets: Vec<Cidr>,
    parent: Vec<u32>,
    /// Interval starts (first is 0) and the innermost node covering each.
    starts: Vec<u32>,
    node: Vec<u32>,
}

impl NetMap {
    pub fn build(mut nets: Vec<Cidr>) -> NetMap {
        nets.sort();
        nets.dedup();
        let mut parent = vec![NONE; nets.len()];
        let mut starts = vec![0u32];
        let mut node = vec![NONE];
        let mut emit = |pos: u64, n: u32| {
            // An interval starting past the address space is not needed.
            let Ok(pos) = u32::try_from(pos) else { return };
            if starts.last() == Some(&pos) {
                // Same start: the later emission is the correct one (an
                // inner prefix starting here, or the outer one after pops).
                if let Some(last) = node.last_mut() {
                    *last = n;
                }
            } else {
                starts.push(pos);
                node.push(n);
            }
        };
        // Sweep: CIDRs are either nested or disjoint, so a stack of open
        // prefixes (each ending at `end`, exclusive) suffices.
        let mut stack: Vec<(u32, u64)> = Vec::new();
        for (i, net) in nets.iter().enumerate() {
            let start = u64::from(net.first());
            while let Some(&(_, end)) = stack.last() {
                if end > start {
                    break;
                }
                stack.pop();
                emit(end, stack.last().map_or(NONE, |t| t.0));
            }
            parent[i] = stack.last().map_or(NONE, |t| t.0);
            emit(start, i as u32);
            stack.push((i as u32, u64::from(net.last()) + 1));
        }
        while let Some((_, end)) = stack.pop() {
            emit(end, stack.last().map_or(NONE, |t| t.0));
        }
        NetMap {
            nets,
            parent,
            starts,
            node,
        }
    }

    pub fn len(&self) -> usize {
        self.nets.len()
    }

    pub fn node_of(&self, c: &Cidr) -> u32 {
        // Only called with CIDRs the map was built from.
        self.nets.binary_search(c).map_or(NONE, |i| i as u32)
    }

    pub fn parent(&self, n: u32) -> u32 {
        self.parent[n as usize]
    }

    /// The most specific CIDR containing `ip`, or NONE.
    #[inline]
    pub fn innermost(&self, ip: u32) -> u32 {
        // starts[0] == 0, so partition_point is at least 1.
        let i = self.starts.partition_point(|&s| s <= ip);
        self.node[i - 1]
    }
}

/// Destination ports → lowest rule id allowing them.
#[derive(Debug, Default)]
struct PortMap {
    starts: Vec<u32>,
    rule: Vec<u32>,
}

impl PortMap {
    fn build(ranges: &[(PortRange, u32)]) -> PortMap {
        if ranges.is_empty() {
            return PortMap::default();
        }
        // Sweep over range boundaries, keeping the set of open rules.
        let mut events: Vec<(u32, bool, u32)> = Vec::with_capacity(ranges.len() * 2);
        for &(r, id) in ranges {
            events.push((u32::from(r.lo), true, id));
            events.push((u32::from(r.hi) + 1, false, id));
        }
        events.sort_unstable();
        let mut open: BTreeMap<u32, usize> = BTreeMap::new();
        let mut starts = vec![0u32];
        let mut rule = vec![NONE];
        let mut i = 0;
        while i < events.len() {
            let pos = events[i].0;
            while i < events.len() && events[i].0 == pos {
                let (_, opening, id) = events[i];
                if opening {
                    *open.entry(id).or_insert(0) += 1;
                } else if let Some(c) = open.get_mut(&id) {
                    *c -= 1;
                    if *c == 0 {
                        open.remove(&id);
                    }
                }
                i += 1;
            }
            let best = open.keys().next().copied().unwrap_or(NONE);
            if rule.last() == Some(&best) {
                continue;
            }
            if starts.last() == Some(&pos) {
                if let Some(last) = rule.last_mut() {
                    *last = best;
                }
            } else {
                starts.push(pos);
                rule.push(best);
            }
        }
        PortMap { starts, rule }
    }

    #[inline]
    fn get(&self, port: u16) -> u32 {
        if self.starts.is_empty() {
            return NONE;
        }
        let i = self.starts.partition_point(|&s| s <= u32::from(port));
        self.rule[i - 1]
    }
}

/// What a connection needs from a rule.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Want {
    Rdma,
    Port(L4Proto, u16),
}

/// What the rules naming one peer (one CIDR or one group) allow.
#[derive(Debug)]
struct Grants {
    rdma: u32,
    tcp: PortMap,
    udp: PortMap,
}

#[derive(Default)]
struct GrantsBuilder {
    rdma: Option<u32>,
    tcp: Vec<(PortRange, u32)>,
    udp: Vec<(PortRange, u32)>,
}

impl GrantsBuilder {
    fn add(&mut self, id: u32, protocol: Protocol, ports: &[PortRange]) {
        let all = [PortRange::ALL];
        let ports = if ports.is_empty() { &all[..] } else { ports };
        if matches!(protocol, Protocol::Rdma | Protocol::All) {
            self.rdma = Some(self.rdma.map_or(id, |r| r.min(id)));
        }
        if matches!(protocol, Protocol::Tcp | Protocol::All) {
            self.tcp.extend(ports.iter().map(|&p| (p, id)));
        }
        if matches!(protocol, Protocol::Udp | Protocol::All) {
            self.udp.extend(ports.iter().map(|&p| (p, id)));
        }
    }

    fn build(self) -> Grants {
        Grants {
            rdma: self.rdma.unwrap_or(NONE),
            tcp: PortMap::build(&self.tcp),
            udp: PortMap::build(&self.udp),
        }
    }
}

impl Grants {
    #[inline]
    fn get(&self, want: Want) -> u32 {
        match want {
            Want::Rdma => self.rdma,
            Want::Port(L4Proto::Tcp, p) => self.tcp.get(p),
            Want::Port(L4Proto::Udp, p) => self.udp.get(p),
        }
    }
}

/// One direction (ingress or egress) of one group.
#[derive(Debug, Default)]
struct DirMatcher {
    nets: NetMap,
    net_grants: Vec<Grants>,
    /// Sorted by peer group index.
    groups: Vec<(u32, Grants)>,
}

impl DirMatcher {
    fn build(rules: &[RuleM]) -> DirMatcher {
        let nets = NetMap::build(
            rules
                .iter()
                .filter_map(|r| match r.peer {
                    PeerM::Net(c) => Some(c),
                    PeerM::Group(_) => None,
                })
                .collect(),
        );
        let mut net_b: Vec<GrantsBuilder> =
            (0..nets.len()).map(|_| GrantsBuilder::default()).collect();
        let mut group_b: BTreeMap<u32, GrantsBuilder> = BTreeMap::new();
        for r in rules {
            let b = match r.peer {
                PeerM::Net(c) => &mut net_b[nets.node_of(&c) as usize],
                PeerM::Group(g) => group_b.entry(g).or_default(),
            };
            b.add(r.id, r.protocol, &r.ports);
        }
        DirMatcher {
            nets,
            net_grants: net_b.into_iter().map(GrantsBuilder::build).collect(),
            groups: group_b.into_iter().map(|(g, b)| (g, b.build())).collect(),
        }
    }

    /// Lowest rule id allowing `want` with the peer at `ip` (in groups
    /// `peer_groups`), or NONE.
    #[inline]
    fn find(&self, ip: u32, peer_groups: &[u32], want: Want) -> u32 {
        let mut best = NONE;
        let mut n = self.nets.innermost(ip);
        while n != NONE {
            best = best.min(self.net_grants[n as usize].get(want));
            n = self.nets.parent(n);
        }
        if !self.groups.is_empty() {
            for g in peer_groups {
                if let Ok(i) = self.groups.binary_search_by_key(g, |e| e.0) {
                    best = best.min(self.groups[i].1.get(want));
                }
            }
        }
        best
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PeerM {
    Group(u32),
    Net(Cidr),
}

#[derive(Clone, Debug)]
pub(crate) struct RuleM {
    pub id: u32,
    pub peer: PeerM,
    pub protocol: Protocol,
    pub ports: Vec<PortRange>,
}

#[derive(Debug)]
pub(crate) struct GroupM {
    pub name: String,
    pub qos: Option<crate::schema::Qos>,
    /// Resolved members, kept for nftables rendering.
    pub member_nets: Vec<Cidr>,
    pub member_endpoints: Vec<(u32, Ipv4Addr)>,
    pub ingress_rules: Vec<RuleM>,
    /// `None`: the group has no `egress` key and allows all egress.
    pub egress_rules: Option<Vec<RuleM>>,
    /// `tenant/group/egress` label for the allow-all case.
    pub egress_all_label: Arc<str>,
    ingress: DirMatcher,
    egress: DirMatcher,
}

#[derive(Debug)]
pub(crate) struct TenantM {
    pub qos: Option<crate::schema::Qos>,
    pub groups: Vec<GroupM>,
    /// Indexed by rule id: `tenant/group/ingress[i]`.
    pub rule_names: Vec<Arc<str>>,
    /// Membership by CIDR/vIP members (any VNI): per node, the groups of
    /// that CIDR and of every CIDR containing it.
    member_nets: NetMap,
    member_sets: Vec<Box<[u32]>>,
    /// Membership of named endpoints (VNI, vIP), including CIDR membership.
    named: HashMap<(u32, u32), Box<[u32]>>,
}

impl TenantM {
    /// Group indices (sorted) the address belongs to in this VNI.
    #[inline]
    pub fn groups_of(&self, vni: u32, ip: u32) -> &[u32] {
        if !self.named.is_empty() {
            if let Some(g) = self.named.get(&(vni, ip)) {
                return g;
            }
        }
        match self.member_nets.innermost(ip) {
            NONE => &[],
            n => &self.member_sets[n as usize],
        }
    }

    fn egress(&self, src_groups: &[u32], dst: u32, dst_groups: &[u32], want: Want) -> Decision {
        if src_groups.is_empty() {
            return Decision::DefaultEgressAllow;
        }
        let mut best = NONE;
        let mut unrestricted = None;
        for &g in src_groups {
            let group = &self.groups[g as usize];
            if group.egress_rules.is_none() {
                unrestricted.get_or_insert(g);
            } else {
                best = best.min(group.egress.find(dst, dst_groups, want));
            }
        }
        if best != NONE {
            Decision::Rule(self.rule_names[best as usize].clone())
        } else if let Some(g) = unrestricted {
            Decision::EgressUnrestricted(self.groups[g as usize].egress_all_label.clone())
        } else {
            Decision::DefaultDeny
        }
    }

    fn ingress(&self, dst_groups: &[u32], src: u32, src_groups: &[u32], want: Want) -> Decision {
        let mut best = NONE;
        for &g in dst_groups {
            best = best.min(self.groups[g as usize].ingress.find(src, src_groups, want));
        }
        if best == NONE {
            Decision::DefaultDeny
        } else {
            Decision::Rule(self.rule_names[best as usize].clone())
        }
    }

    /// (egress of `from`, ingress of `to`) for traffic from `from` to `to`.
    #[inline]
    pub fn decide(&self, vni: u32, from: u32, to: u32, want: Want) -> (Decision, Decision) {
        let gf = self.groups_of(vni, from);
        let gt = self.groups_of(vni, to);
        (
            self.egress(gf, to, gt, want),
            self.ingress(gt, from, gf, want),
        )
    }
}

#[derive(Debug, Default)]
pub(crate) struct Compiled {
    pub tenants: HashMap<String, TenantM>,
}

fn known_list(mut names: Vec<&str>) -> String {
    names.sort_unstable();
    names.dedup();
    const SHOW: usize = 8;
    let more = names.len().saturating_sub(SHOW);
    let mut s = names.into_iter().take(SHOW).collect::<Vec<_>>().join(", ");
    if more > 0 {
        s.push_str(&format!(", and {more} more"));
    }
    s
}

/// Whether `name` is a known endpoint of `tenant`.
fn owned(by_name: &HashMap<&str, &EndpointRef>, name: &str, tenant: &str) -> bool {
    by_name.get(name).is_some_and(|ep| ep.tenant == tenant)
}

fn union_sorted(a: &[u32], b: &[u32]) -> Box<[u32]> {
    let mut v: Vec<u32> = a.iter().chain(b).copied().collect();
    v.sort_unstable();
    v.dedup();
    v.into_boxed_slice()
}

/// Resolves names against the document's groups and masqd's endpoints and
/// builds the matcher; resolution errors go to `errs`.
///
/// With `dangling` given, a member naming an endpoint that is not (or no
/// longer) known, or not of its tenant, matches nothing and is listed there
/// instead of being an error: endpoints come and go under a policy.
pub(crate) fn compile(
    doc: &Document,
    endpoints: &[EndpointRef],
    errs: &mut Errors,
    mut dangling: Option<&mut Vec<String>>,
) -> Compiled {
    let mut by_name: HashMap<&str, &EndpointRef> = HashMap::new();
    for ep in endpoints {
        by_name.entry(ep.name.as_str()).or_insert(ep);
    }
    let mut compiled = Compiled::default();
    for t in &doc.tenants {
        let gindex: HashMap<&str, u32> = t
            .groups
            .iter()
            .enumerate()
            .map(|(i, g)| (g.name.as_str(), i as u32))
            .collect();
        let mut rule_names: Vec<Arc<str>> = Vec::new();
        let mut groups = Vec::new();
        let mut net_members: Vec<(Cidr, u32)> = Vec::new();
        let mut named: HashMap<(u32, u32), Vec<u32>> = HashMap::new();
        for (gi, g) in t.groups.iter().enumerate() {
            let gi = gi as u32;
            let mut member_nets = Vec::new();
            let mut member_endpoints = Vec::new();
            for m in &g.members {
                match &m.kind {
                    MemberKind::Net(c) => {
                        member_nets.push(*c);
                        net_members.push((*c, gi));
                    }
                    MemberKind::Endpoint(name) => match by_name.get(name.as_str()) {
                        None | Some(_) if dangling.is_some() && !owned(&by_name, name, &t.name) => {
                            if let Some(d) = dangling.as_deref_mut() {
                                d.push(name.clone());
                            }
                        }
                        None => {
                            let known: Vec<&str> = endpoints
                                .iter()
                                .filter(|e| e.tenant == t.name)
                                .map(|e| e.name.as_str())
                                .collect();
                            let hint = if known.is_empty() {
                                format!("tenant {} has no endpoints", t.name)
                            } else {
                                format!(
                                    "known endpoints of tenant {}: {}",
                                    t.name,
                                    known_list(known)
                                )
                            };
                            errs.push(
                                m.loc,
                                &m.path,
                                format!("unknown endpoint {name:?} ({hint})"),
                            );
                        }
                        Some(ep) if ep.tenant != t.name => {
                            errs.push(
                                m.loc,
                                &m.path,
                                format!(
                                    "endpoint {name:?} belongs to tenant {:?}, not {:?}",
                                    ep.tenant, t.name
                                ),
                            );
                        }
                        Some(ep) => {
                            member_endpoints.push((ep.vni, ep.vip));
                            named
                                .entry((ep.vni, u32::from(ep.vip)))
                                .or_default()
                                .push(gi);
                        }
                    },
                }
            }
            let mut resolve = |dir: &str, rules: &[crate::schema::Rule]| -> Vec<RuleM> {
                let mut out = Vec::new();
                for (i, r) in rules.iter().enumerate() {
                    let peer = match &r.peer {
                        Peer::Net(c) => PeerM::Net(*c),
                        Peer::Group(name) => match gindex.get(name.as_str()) {
                            Some(&pg) => PeerM::Group(pg),
                            None => {
                                let known: Vec<&str> =
                                    t.groups.iter().map(|g| g.name.as_str()).collect();
                                errs.push(
                                    r.peer_loc,
                                    &r.peer_path,
                                    format!(
                                        "unknown security group {name:?} in tenant {} (groups: {})",
                                        t.name,
                                        known_list(known)
                                    ),
                                );
                                continue;
                            }
                        },
                    };
                    let id = rule_names.len() as u32;
                    rule_names.push(format!("{}/{}/{dir}[{i}]", t.name, g.name).into());
                    out.push(RuleM {
                        id,
                        peer,
                        protocol: r.protocol,
                        ports: r.ports.clone(),
                    });
                }
                out
            };
            let ingress_rules = resolve("ingress", g.ingress.as_deref().unwrap_or(&[]));
            let egress_rules = g.egress.as_deref().map(|rules| resolve("egress", rules));
            groups.push(GroupM {
                name: g.name.clone(),
                qos: g.qos,
                member_nets,
                member_endpoints,
                ingress: DirMatcher::build(&ingress_rules),
                egress: egress_rules
                    .as_deref()
                    .map(DirMatcher::build)
                    .unwrap_or_default(),
                ingress_rules,
                egress_rules,
                egress_all_label: format!("{}/{}/egress", t.name, g.name).into(),
            });
        }

        // Membership by prefix: each node's set includes its ancestors'.
        let member_nets = NetMap::build(net_members.iter().map(|m| m.0).collect());
        let mut own: Vec<Vec<u32>> = vec![Vec::new(); member_nets.len()];
        for (c, g) in &net_members {
            own[member_nets.node_of(c) as usize].push(*g);
        }
        let mut member_sets: Vec<Box<[u32]>> = Vec::with_capacity(own.len());
        for (i, set) in own.iter().enumerate() {
            let p = member_nets.parent(i as u32);
            let inherited: &[u32] = if p == NONE {
                &[]
            } else {
                &member_sets[p as usize]
            };
            member_sets.push(union_sorted(set, inherited));
        }
        let named = named
            .into_iter()
            .map(|(key, gs)| {
                let via_net: &[u32] = match member_nets.innermost(key.1) {
                    NONE => &[],
                    n => &member_sets[n as usize],
                };
                (key, union_sorted(&gs, via_net))
            })
            .collect();
        compiled.tenants.insert(
            t.name.clone(),
            TenantM {
                qos: t.qos,
                groups,
                rule_names,
                member_nets,
                member_sets,
                named,
            },
        );
    }
    compiled
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Cidr {
        Cidr::parse(s, true).unwrap()
    }

    fn ip(s: &str) -> u32 {
        u32::from(s.parse::<Ipv4Addr>().unwrap())
    }

    /// Reference: most specific containing CIDR by scanning.
    fn scan(nets: &[Cidr], addr: u32) -> Option<Cidr> {
        nets.iter()
            .filter(|n| n.contains(addr))
            .max_by_key(|n| n.len)
            .copied()
    }

    #[test]
    fn netmap_nested_and_disjoint() {
        let nets = vec![
            c("0.0.0.0/0"),
            c("10.0.0.0/8"),
            c("10.0.0.0/16"),
            c("10.0.1.0/24"),
            c("10.0.1.7"),
            c("192.168.0.0/16"),
            c("255.255.255.255/32"),
            c("10.0.0.0/16"),
        ];
        let m = NetMap::build(nets.clone());
        for a in [
            "0.0.0.0",
            "9.255.255.255",
            "10.0.0.0",
            "10.0.0.255",
            "10.0.1.0",
            "10.0.1.6",
            "10.0.1.7",
            "10.0.1.8",
            "10.0.2.0",
            "10.1.0.0",
            "10.255.255.255",
            "11.0.0.0",
            "192.168.3.4",
            "192.169.0.0",
            "255.255.255.254",
            "255.255.255.255",
        ] {
            let got = match m.innermost(ip(a)) {
                NONE => None,
                n => Some(m.nets[n as usize]),
            };
            assert_eq!(got, scan(&nets, ip(a)), "{a}");
        }
        // Parent chain of 10.0.1.7 walks out to 0.0.0.0/0.
        let mut n = m.innermost(ip("10.0.1.7"));
        let mut chain = Vec::new();
        while n != NONE {
            chain.push(m.nets[n as usize].to_string());
            n = m.parent(n);
        }
        assert_eq!(
            chain,
            [
                "10.0.1.7/32",
                "10.0.1.0/24",
                "10.0.0.0/16",
                "10.0.0.0/8",
                "0.0.0.0/0"
            ]
        );
    }

    #[test]
    fn netmap_matches_scan_on_random_sets() {
        // Deterministic xorshift: random nested/disjoint prefix sets.
        let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for _ in 0..50 {
            let nets: Vec<Cidr> = (0..40)
                .map(|_| {
                    let len = (rnd() % 33) as u8;
                    // Cluster addresses so prefixes nest often.
                    let addr = ((rnd() as u32) & 0x0a0f_00ff) | 0x0a00_0000;
                    let mask = if len == 0 {
                        0
                    } else {
                        u32::MAX << (32 - u32::from(len))
                    };
                    Cidr {
                        addr: addr & mask,
                        len,
                    }
                })
                .collect();
            let m = NetMap::build(nets.clone());
            for _ in 0..500 {
                let a = ((rnd() as u32) & 0x0a0f_01ff) | 0x0a00_0000;
                let got = match m.innermost(a) {
                    NONE => None,
                    n => Some(m.nets[n as usize]),
                };
                assert_eq!(got, scan(&nets, a));
            }
        }
    }

    #[test]
    fn netmap_empty() {
        let m = NetMap::build(Vec::new());
        assert_eq!(m.innermost(0), NONE);
        assert_eq!(m.innermost(u32::MAX), NONE);
    }

    #[test]
    fn portmap_lowest_rule_wins() {
        let r = |lo, hi| PortRange { lo, hi };
        let m = PortMap::build(&[
            (r(100, 200), 5),
            (r(150, 300), 2),
            (r(180, 180), 9),
            (r(400, 400), 7),
        ]);
        assert_eq!(m.get(99), NONE);
        assert_eq!(m.get(100), 5);
        assert_eq!(m.get(149), 5);
        assert_eq!(m.get(150), 2);
        assert_eq!(m.get(180), 2);
        assert_eq!(m.get(300), 2);
        assert_eq!(m.get(301), NONE);
        assert_eq!(m.get(400), 7);
        assert_eq!(m.get(401), NONE);
        let all = PortMap::build(&[(PortRange::ALL, 3)]);
        assert_eq!(all.get(0), 3);
        assert_eq!(all.get(65535), 3);
        assert_eq!(PortMap::default().get(80), NONE);
    }
}
