//! The synthetic 10,000-rule policy the benches share: 100 security groups
//! of 20 random endpoints (out of 2,000) plus a /24, each with 50 ingress
//! and 50 egress rules naming groups, /16s, /24s or single addresses, for
//! rdma, all, tcp (ports and ranges) or udp. Seeded: every run and every
//! commit measures the same policy.

use masq_policy::EndpointRef;
use std::fmt::Write;
use std::net::Ipv4Addr;

pub const GROUPS: usize = 100;
/// 100 groups x (50 ingress + 50 egress) = 10,000 rules.
pub const RULES_PER_DIR: usize = 50;
pub const ENDPOINTS: usize = 2000;
pub const SEED: u64 = 0x5eed_1234_abcd_0001;

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

pub fn vip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, (i / 250) as u8, (i % 250) as u8, 10)
}

pub fn endpoints() -> Vec<EndpointRef> {
    (0..ENDPOINTS)
        .map(|i| EndpointRef::new(format!("ep{i}"), "bench", 1, vip(i)))
        .collect()
}

/// The policy's YAML. `without_ingress_of`: leave out that group's ingress
/// rules (a rule change that revokes some connections); everything else,
/// random draws included, is the same.
pub fn policy_text(rng: &mut Rng, without_ingress_of: Option<usize>) -> String {
    let mut s = String::from("version: 1\ntenants:\n  bench:\n    securityGroups:\n");
    for g in 0..GROUPS {
        // 20 named endpoints and one /24 per group; endpoints overlap groups.
        let members: Vec<String> = (0..20)
            .map(|_| format!("ep{}", rng.below(ENDPOINTS)))
            .collect();
        let _ = writeln!(
            s,
            "      g{g}:\n        members: [{}, 10.{}.{}.0/24]",
            members.join(", "),
            100 + g / 200,
            g % 200
        );
        for (dir, key) in [("ingress", "from"), ("egress", "to")] {
            let skip = dir == "ingress" && without_ingress_of == Some(g);
            if !skip {
                let _ = writeln!(s, "        {dir}:");
            }
            for _ in 0..RULES_PER_DIR {
                let peer = match rng.below(4) {
                    0 => format!("{{ group: g{} }}", rng.below(GROUPS)),
                    1 => format!("{{ cidr: 10.{}.0.0/16 }}", rng.below(8)),
                    2 => format!("{{ cidr: 10.{}.{}.0/24 }}", rng.below(8), rng.below(250)),
                    _ => format!("{{ cidr: {} }}", vip(rng.below(ENDPOINTS))),
                };
                let (proto, ports) = match rng.below(4) {
                    0 => ("rdma", String::new()),
                    1 => ("all", String::new()),
                    2 => (
                        "tcp",
                        format!(
                            ", ports: [{}, \"{}-{}\"]",
                            1 + rng.below(1000),
                            2000,
                            2000 + rng.below(5000)
                        ),
                    ),
                    _ => ("udp", format!(", ports: [{}]", 1 + rng.below(65000))),
                };
                if !skip {
                    let _ = writeln!(
                        s,
                        "          - {{ {key}: {peer}, protocol: {proto}{ports} }}"
                    );
                }
            }
        }
    }
    s
}

/// 4096 random endpoint pairs, one in ten towards an address no endpoint has.
pub fn sample_pairs(rng: &mut Rng) -> Vec<(Ipv4Addr, Ipv4Addr)> {
    (0..4096)
        .map(|_| {
            let a = vip(rng.below(ENDPOINTS));
            let b = if rng.below(10) == 0 {
                Ipv4Addr::from(0x0a00_0000 | (rng.next() as u32 & 0x00ff_ffff))
            } else {
                vip(rng.below(ENDPOINTS))
            };
            (a, b)
        })
        .collect()
}
