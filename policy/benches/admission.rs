//! Admission decisions against a 10,000-rule policy, random lookups.
//!
//! `cargo bench -p masq-policy --bench admission`

use criterion::{criterion_group, criterion_main, Criterion};
use masq_policy::{EndpointRef, L4Proto, Policy};
use std::fmt::Write;
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::Duration;

const GROUPS: usize = 100;
const RULES_PER_DIR: usize = 50; // 100 groups x (50 ingress + 50 egress) = 10,000 rules
const ENDPOINTS: usize = 2000;

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
}

fn vip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, (i / 250) as u8, (i % 250) as u8, 10)
}

fn endpoints() -> Vec<EndpointRef> {
    (0..ENDPOINTS)
        .map(|i| EndpointRef::new(format!("ep{i}"), "bench", 1, vip(i)))
        .collect()
}

fn policy_text(rng: &mut Rng) -> String {
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
            let _ = writeln!(s, "        {dir}:");
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
                let _ = writeln!(
                    s,
                    "          - {{ {key}: {peer}, protocol: {proto}{ports} }}"
                );
            }
        }
    }
    s
}

fn bench(c: &mut Criterion) {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let eps = endpoints();
    let text = policy_text(&mut rng);
    let policy = Policy::parse(&text, "bench.yaml", &eps).expect("bench policy");

    // Random endpoint pairs plus some addresses no endpoint has.
    let pairs: Vec<(Ipv4Addr, Ipv4Addr)> = (0..4096)
        .map(|_| {
            let a = vip(rng.below(ENDPOINTS));
            let b = if rng.below(10) == 0 {
                Ipv4Addr::from(0x0a00_0000 | (rng.next() as u32 & 0x00ff_ffff))
            } else {
                vip(rng.below(ENDPOINTS))
            };
            (a, b)
        })
        .collect();
    let allowed = pairs
        .iter()
        .filter(|(a, b)| policy.rdma_allowed("bench", 1, *a, *b).allowed)
        .count();
    eprintln!(
        "10,000 rules, {} bytes of YAML; {allowed} of {} sample pairs allowed",
        text.len(),
        pairs.len()
    );

    let mut i = 0usize;
    c.bench_function("rdma_allowed (10k rules, random pairs)", |bch| {
        bch.iter(|| {
            i = (i + 1) & 4095;
            let (a, b) = pairs[i];
            black_box(policy.rdma_allowed(black_box("bench"), 1, a, b))
        })
    });
    let mut i = 0usize;
    c.bench_function("flow_allowed tcp (10k rules, random pairs)", |bch| {
        bch.iter(|| {
            i = (i + 1) & 4095;
            let (a, b) = pairs[i];
            black_box(policy.flow_allowed(
                black_box("bench"),
                1,
                a,
                b,
                L4Proto::Tcp,
                (i * 7) as u16,
            ))
        })
    });
    let mut g = c.benchmark_group("parse+compile");
    g.sample_size(10);
    g.bench_function("10k rules", |bch| {
        bch.iter(|| black_box(Policy::parse(black_box(&text), "bench.yaml", &eps).is_ok()))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
