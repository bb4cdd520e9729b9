//! Differential test: random policies, written as YAML, evaluated by the
//! compiled matcher and by a direct transcription of the rules in
//! DESIGN.md (a scan over every rule); verdicts and deciding rules must
//! agree.

use masq_policy::{EndpointRef, L4Proto, Policy};
use std::fmt::Write;
use std::net::Ipv4Addr;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

const NETS: &[(&str, u32, u8)] = &[
    ("0.0.0.0/0", 0x0000_0000, 0),
    ("10.0.0.0/28", 0x0a00_0000, 28),
    ("10.0.0.0/29", 0x0a00_0000, 29),
    ("10.0.0.8/29", 0x0a00_0008, 29),
    ("10.0.0.4/30", 0x0a00_0004, 30),
    ("10.0.0.0/31", 0x0a00_0000, 31),
    ("10.0.0.5", 0x0a00_0005, 32),
    ("10.0.0.12/30", 0x0a00_000c, 30),
    ("10.0.0.16/28", 0x0a00_0010, 28),
];

fn net_contains(n: usize, ip: u32) -> bool {
    let (_, addr, len) = NETS[n];
    let mask = if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    };
    ip & mask == addr
}

#[derive(Clone, Copy, PartialEq)]
enum Proto {
    Rdma,
    Tcp,
    Udp,
    All,
}

#[derive(Clone)]
enum PeerSpec {
    Group(usize),
    Net(usize),
}

#[derive(Clone)]
struct RuleSpec {
    peer: PeerSpec,
    proto: Proto,
    ports: Vec<(u16, u16)>,
}

struct GroupSpec {
    endpoints: Vec<usize>,
    nets: Vec<usize>,
    ingress: Option<Vec<RuleSpec>>,
    egress: Option<Vec<RuleSpec>>,
}

struct Model {
    eps: Vec<EndpointRef>,
    groups: Vec<GroupSpec>,
    /// (group, is_egress, index) by rule id.
    names: Vec<String>,
}

fn gen_rule(rng: &mut Rng, ngroups: usize) -> RuleSpec {
    let peer = if rng.chance(50) {
        PeerSpec::Group(rng.below(ngroups))
    } else {
        PeerSpec::Net(rng.below(NETS.len()))
    };
    let proto = [Proto::Rdma, Proto::Tcp, Proto::Udp, Proto::All][rng.below(4)];
    let mut ports = Vec::new();
    if matches!(proto, Proto::Tcp | Proto::Udp) && rng.chance(60) {
        for _ in 0..1 + rng.below(2) {
            let lo = 1 + rng.below(12) as u16;
            let hi = lo + rng.below(4) as u16;
            ports.push((lo, hi));
        }
    }
    RuleSpec { peer, proto, ports }
}

fn gen_model(rng: &mut Rng) -> Model {
    let mut eps = Vec::new();
    for vni in [1u32, 2] {
        let mut used = Vec::new();
        for i in 0..6 {
            let mut host = rng.below(18) as u32;
            while used.contains(&host) {
                host = rng.below(18) as u32;
            }
            used.push(host);
            eps.push(EndpointRef::new(
                format!("e{vni}-{i}"),
                "t",
                vni,
                Ipv4Addr::from(0x0a00_0000 + host),
            ));
        }
    }
    let ngroups = 1 + rng.below(5);
    let mut groups = Vec::new();
    for _ in 0..ngroups {
        let endpoints = (0..eps.len()).filter(|_| rng.chance(20)).collect();
        let nets = (0..NETS.len()).filter(|_| rng.chance(8)).collect();
        let rules = |rng: &mut Rng| -> Option<Vec<RuleSpec>> {
            if rng.chance(25) {
                None
            } else {
                Some((0..rng.below(5)).map(|_| gen_rule(rng, ngroups)).collect())
            }
        };
        let ingress = rules(rng);
        let egress = rules(rng);
        groups.push(GroupSpec {
            endpoints,
            nets,
            ingress,
            egress,
        });
    }
    let mut names = Vec::new();
    for (gi, g) in groups.iter().enumerate() {
        for (dir, rules) in [("ingress", &g.ingress), ("egress", &g.egress)] {
            for i in 0..rules.as_ref().map_or(0, Vec::len) {
                names.push(format!("t/g{gi}/{dir}[{i}]"));
            }
        }
    }
    Model { eps, groups, names }
}

fn yaml(m: &Model) -> String {
    let mut s = String::from("version: 1\ntenants:\n  t:\n    securityGroups:\n");
    for (gi, g) in m.groups.iter().enumerate() {
        let mut members: Vec<String> = g.endpoints.iter().map(|&e| m.eps[e].name.clone()).collect();
        members.extend(g.nets.iter().map(|&n| NETS[n].0.to_string()));
        let _ = writeln!(s, "      g{gi}:\n        members: [{}]", members.join(", "));
        for (dir, key, rules) in [("ingress", "from", &g.ingress), ("egress", "to", &g.egress)] {
            let Some(rules) = rules else { continue };
            let _ = writeln!(
                s,
                "        {dir}:{}",
                if rules.is_empty() { " []" } else { "" }
            );
            for r in rules {
                let peer = match r.peer {
                    PeerSpec::Group(p) => format!("{{ group: g{p} }}"),
                    PeerSpec::Net(n) => format!("{{ cidr: {} }}", NETS[n].0),
                };
                let proto = match r.proto {
                    Proto::Rdma => "rdma",
                    Proto::Tcp => "tcp",
                    Proto::Udp => "udp",
                    Proto::All => "all",
                };
                let _ = writeln!(
                    s,
                    "          - {key}: {peer}\n            protocol: {proto}"
                );
                if !r.ports.is_empty() {
                    let ports: Vec<String> = r
                        .ports
                        .iter()
                        .map(|(lo, hi)| format!("\"{lo}-{hi}\""))
                        .collect();
                    let _ = writeln!(s, "            ports: [{}]", ports.join(", "));
                }
            }
        }
    }
    s
}

#[derive(Clone, Copy)]
enum Want {
    Rdma,
    Port(L4Proto, u16),
}

impl Model {
    fn groups_of(&self, vni: u32, ip: u32) -> Vec<usize> {
        (0..self.groups.len())
            .filter(|&g| {
                let gs = &self.groups[g];
                gs.endpoints
                    .iter()
                    .any(|&e| self.eps[e].vni == vni && u32::from(self.eps[e].vip) == ip)
                    || gs.nets.iter().any(|&n| net_contains(n, ip))
            })
            .collect()
    }

    fn rule_matches(&self, r: &RuleSpec, peer: u32, peer_groups: &[usize], want: Want) -> bool {
        let peer_ok = match r.peer {
            PeerSpec::Group(g) => peer_groups.contains(&g),
            PeerSpec::Net(n) => net_contains(n, peer),
        };
        let proto_ok = match (want, r.proto) {
            (_, Proto::All) => true,
            (Want::Rdma, p) => p == Proto::Rdma,
            (Want::Port(l4, port), p) => {
                let same = matches!(
                    (l4, p),
                    (L4Proto::Tcp, Proto::Tcp) | (L4Proto::Udp, Proto::Udp)
                );
                same && (r.ports.is_empty()
                    || r.ports.iter().any(|&(lo, hi)| lo <= port && port <= hi))
            }
        };
        peer_ok && proto_ok
    }

    fn rule_id(&self, g: usize, egress: bool, i: usize) -> usize {
        let mut id = 0;
        for (gi, gs) in self.groups.iter().enumerate() {
            let ni = gs.ingress.as_ref().map_or(0, Vec::len);
            let ne = gs.egress.as_ref().map_or(0, Vec::len);
            if gi == g {
                return id + if egress { ni + i } else { i };
            }
            id += ni + ne;
        }
        unreachable!()
    }

    /// (egress label, ingress label) for from -> to.
    fn decide(&self, vni: u32, from: u32, to: u32, want: Want) -> (String, String) {
        let gf = self.groups_of(vni, from);
        let gt = self.groups_of(vni, to);
        let egress = if gf.is_empty() {
            "default-egress-allow".to_string()
        } else {
            let mut best: Option<usize> = None;
            let mut unrestricted = None;
            for &g in &gf {
                match &self.groups[g].egress {
                    None => {
                        unrestricted.get_or_insert(g);
                    }
                    Some(rules) => {
                        for (i, r) in rules.iter().enumerate() {
                            if self.rule_matches(r, to, &gt, want) {
                                let id = self.rule_id(g, true, i);
                                best = Some(best.map_or(id, |b| b.min(id)));
                            }
                        }
                    }
                }
            }
            match (best, unrestricted) {
                (Some(id), _) => self.names[id].clone(),
                (None, Some(g)) => format!("t/g{g}/egress(all)"),
                (None, None) => "default-deny".into(),
            }
        };
        let mut best: Option<usize> = None;
        for &g in &gt {
            for (i, r) in self.groups[g].ingress.iter().flatten().enumerate() {
                if self.rule_matches(r, from, &gf, want) {
                    let id = self.rule_id(g, false, i);
                    best = Some(best.map_or(id, |b| b.min(id)));
                }
            }
        }
        let ingress = best.map_or("default-deny".into(), |id| self.names[id].clone());
        (egress, ingress)
    }
}

fn allowed(d: &(String, String)) -> bool {
    d.0 != "default-deny" && d.1 != "default-deny"
}

#[test]
fn compiled_matcher_agrees_with_rule_scan() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut checks = 0;
    let mut allowed_count = 0;
    for round in 0..300 {
        let m = gen_model(&mut rng);
        let text = yaml(&m);
        let p = match Policy::parse(&text, "r.yaml", &m.eps) {
            Ok(p) => p,
            Err(e) => panic!("round {round}: {e}\n{text}"),
        };
        for _ in 0..200 {
            let vni = 1 + rng.below(2) as u32;
            let a = 0x0a00_0000 + rng.below(20) as u32;
            let b = 0x0a00_0000 + rng.below(20) as u32;
            let (ia, ib) = (Ipv4Addr::from(a), Ipv4Addr::from(b));
            // RDMA: the symmetric predicate.
            let got = p.rdma_allowed("t", vni, ia, ib);
            allowed_count += usize::from(got.allowed && a != b);
            if a == b {
                assert!(got.allowed);
            } else {
                let ab = m.decide(vni, a, b, Want::Rdma);
                let ba = m.decide(vni, b, a, Want::Rdma);
                let (want_allowed, from, d) = if allowed(&ab) {
                    (true, ia, ab)
                } else if allowed(&ba) {
                    (true, ib, ba)
                } else {
                    (false, ia, ab)
                };
                let ctx = format!("round {round} vni {vni} {ia}<->{ib}: {got}\n{text}");
                assert_eq!(got.allowed, want_allowed, "{ctx}");
                assert_eq!(got.from, from, "{ctx}");
                assert_eq!(got.egress.to_string(), d.0, "{ctx}");
                assert_eq!(got.ingress.to_string(), d.1, "{ctx}");
            }
            // tcp/udp flows.
            let l4 = if rng.chance(50) {
                L4Proto::Tcp
            } else {
                L4Proto::Udp
            };
            let port = rng.below(18) as u16;
            let got = p.flow_allowed("t", vni, ia, ib, l4, port);
            if a != b {
                let d = m.decide(vni, a, b, Want::Port(l4, port));
                let ctx =
                    format!("round {round} vni {vni} {ia}->{ib} {l4:?}/{port}: {got}\n{text}");
                assert_eq!(got.allowed, allowed(&d), "{ctx}");
                allowed_count += usize::from(got.allowed);
                assert_eq!(got.egress.to_string(), d.0, "{ctx}");
                assert_eq!(got.ingress.to_string(), d.1, "{ctx}");
            }
            checks += 2;
        }
    }
    println!("{checks} decisions agreed, {allowed_count} of them allowed");
    // The generator must exercise both outcomes substantially.
    assert!(allowed_count > checks / 10 && allowed_count < checks * 9 / 10);
}
