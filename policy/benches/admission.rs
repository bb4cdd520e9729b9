//! Admission decisions against a 10,000-rule policy, random lookups.
//!
//! `cargo bench -p masq-policy --bench admission`

use criterion::{criterion_group, criterion_main, Criterion};
use masq_policy::{L4Proto, Policy};
use std::hint::black_box;
use std::time::Duration;

mod common;
use common::{endpoints, policy_text, sample_pairs, Rng, SEED};

fn bench(c: &mut Criterion) {
    let mut rng = Rng(SEED);
    let eps = endpoints();
    let text = policy_text(&mut rng, None);
    let policy = Policy::parse(&text, "bench.yaml", &eps).expect("bench policy");

    // Random endpoint pairs plus some addresses no endpoint has.
    let pairs = sample_pairs(&mut rng);
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
