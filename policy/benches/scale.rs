//! Admission and re-evaluation at scale, the way masqd does them
//! (`backend/src/enforce/admission.rs`): a 10,000-rule policy and an RConntrack
//! table holding 1,000,000 admitted connections.
//!
//! - `admit`: the decision at RTR (`rdma_allowed`, the admitting rule's
//!   label) plus, when allowed, the insert into the 1M-entry table.
//! - `reevaluate_1M`: a rule change: every tracked connection is decided
//!   again under the new policy (one group's ingress rules removed, then
//!   restored, alternately), as `Admission::apply` does.
//!
//! `cargo bench -p masq-policy --bench scale`

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use masq_policy::Policy;
use rconntrack::{Decision, Entry, QpKey, QpType, State, Table};
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::{endpoints, policy_text, sample_pairs, Rng, SEED};

const TRACKED: u32 = 1_000_000;
/// Admissions timed back to back before their entries are removed again
/// (untimed), so the table stays at 1M (+ at most this many).
const BATCH: u64 = 1000;

fn entry(session: u64, qp: u32, (a, b): (Ipv4Addr, Ipv4Addr), rule: Arc<str>) -> Entry {
    Entry {
        session,
        qp_handle: qp,
        tenant: Arc::from("bench"),
        vni: 1,
        local_vip: a,
        local_qpn: (session as u32) << 8 | qp,
        remote_vip: b,
        remote_qpn: qp ^ 0x5555,
        peer_host: Ipv4Addr::new(192, 168, 1, (session % 200) as u8),
        qp_type: QpType::Rc,
        state: State::Established,
        rule,
        ..Entry::default()
    }
}

fn decide(policy: &Policy, e: &Entry) -> Option<Decision> {
    let v = policy.rdma_allowed(&e.tenant, e.vni, e.local_vip, e.remote_vip);
    if v.allowed {
        Some(Decision::Allow(Arc::from(v.rule())))
    } else {
        Some(Decision::Deny)
    }
}

fn bench(c: &mut Criterion) {
    let eps = endpoints();
    let text = policy_text(&mut Rng(SEED), None);
    let policy = Policy::parse(&text, "bench.yaml", &eps).expect("bench policy");
    // The changed policy: group g0 loses its ingress rules.
    let changed_text = policy_text(&mut Rng(SEED), Some(0));
    let changed = Policy::parse(&changed_text, "bench.yaml", &eps).expect("changed policy");

    // Tracked connections are admitted pairs: draw until 4096 allowed ones.
    let mut rng = Rng(SEED ^ 0xfeed);
    let mut allowed = Vec::new();
    while allowed.len() < 4096 {
        for p in sample_pairs(&mut rng) {
            let v = policy.rdma_allowed("bench", 1, p.0, p.1);
            if v.allowed && allowed.len() < 4096 {
                allowed.push((p, Arc::<str>::from(v.rule())));
            }
        }
    }
    let start = Instant::now();
    let mut table = Table::new();
    // 1M QPs: 62,500 sessions (apps) of 16 QPs, spread over the pairs.
    for i in 0..TRACKED {
        let (pair, rule) = &allowed[(i as usize * 7919) % allowed.len()];
        table
            .upsert(entry(u64::from(i / 16), i % 16, *pair, rule.clone()))
            .expect("below the limit");
    }
    let revoked = table
        .iter()
        .filter(|e| {
            !changed
                .rdma_allowed(&e.tenant, e.vni, e.local_vip, e.remote_vip)
                .allowed
        })
        .count();
    eprintln!(
        "{} tracked connections filled in {:?}; the rule change revokes {revoked}",
        table.len(),
        start.elapsed()
    );

    // Admission attempts: random pairs, some denied (as in `admission`).
    let attempts = sample_pairs(&mut rng);
    let mut g = c.benchmark_group("scale");
    let mut next_session = u64::from(TRACKED);
    let mut k = 0usize;
    g.bench_function("admit (10k rules, 1M tracked)", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let n = BATCH.min(iters - done);
                let first = next_session;
                let t = Instant::now();
                for _ in 0..n {
                    k = (k + 1) & 4095;
                    let (a, b) = attempts[k];
                    let v = policy.rdma_allowed(black_box("bench"), 1, a, b);
                    if v.allowed {
                        let rule: Arc<str> = Arc::from(v.rule());
                        black_box(table.upsert(entry(next_session, 0, (a, b), rule)).is_ok());
                    }
                    next_session += 1;
                }
                took += t.elapsed();
                for s in first..next_session {
                    table.remove(QpKey {
                        session: s,
                        qp_handle: 0,
                    });
                }
                done += n;
            }
            took
        })
    });
    assert_eq!(table.len(), TRACKED as usize);

    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .measurement_time(Duration::from_secs(5));
    let mut flip = false;
    g.bench_function("reevaluate_1M after a rule change", |b| {
        b.iter(|| {
            flip = !flip;
            let p = if flip { &changed } else { &policy };
            black_box(table.reevaluate(|e| decide(p, e)).len())
        })
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
