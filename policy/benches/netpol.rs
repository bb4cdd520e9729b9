//! NetworkPolicy at the scale: 10,000 masq pods in 100 namespaces
//! and 1,000 policies (10 per namespace), with the selectors clusters
//! write: a default deny, allow-same-namespace for one tier, app-to-app
//! rules with ports, namespaces by label and by `matchExpressions`, an
//! egress policy with an ipBlock. Seeded: every run measures the same
//! cluster.
//!
//! - `parse 1k policies`: the API's JSON into [`NetworkPolicy`]s;
//! - `build`: the index of the whole snapshot (what masqd does at start);
//! - `update pod labels` / `update policy` / `update namespace`: one
//!   incremental change, alternating between two versions;
//! - `decide QP` / `decide CM`: one decision between random pods;
//! - `flows`: one pod's NetworkPolicy as tcp/udp rules for its vNIC, its
//!   selectors resolved among all 10,000 pods.
//!
//! It prints the index's heap (counting allocator) and how many of the
//! sampled decisions allowed. `cargo bench -p masq-policy --bench netpol`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use masq_policy::netpol::{
    Connection, Endpoint, Index, Labels, Namespace, NetworkPolicy, Pod, PortSpace, Snapshot,
};
use serde_json::{json, Value};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new, Ordering::Relaxed);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

const NAMESPACES: usize = 100;
const PODS_PER_NS: usize = 100;
const POLICIES_PER_NS: usize = 10;
const APPS: usize = 10;

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

fn ns_name(n: usize) -> String {
    format!("ns{n}")
}

fn pod_name(p: usize) -> String {
    format!("app{}-{p}", p % APPS)
}

fn vip(n: usize, p: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, (n / 2) as u8, (n % 2 * 100 + p) as u8, 1)
}

fn labels(pairs: &[(&str, String)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

const ENVS: [&str; 3] = ["prod", "staging", "dev"];

fn namespace(n: usize) -> Namespace {
    Namespace::new(
        ns_name(n),
        labels(&[
            ("kubernetes.io/metadata.name", ns_name(n)),
            ("team", format!("t{}", n % 20)),
            ("env", ENVS[n % 3].into()),
        ]),
    )
}

fn pod(n: usize, p: usize, version: &str) -> Pod {
    let tier = ["fe", "be", "db"][p % 3];
    Pod::new(
        ns_name(n),
        pod_name(p),
        labels(&[
            ("app", format!("app{}", p % APPS)),
            ("tier", tier.into()),
            ("version", version.into()),
            ("pod-template-hash", format!("{:x}", p * 7919)),
        ]),
    )
}

/// Policy `i` of namespace `n`, as the API's JSON.
fn policy_json(rng: &mut Rng, n: usize, i: usize) -> Value {
    let app = |rng: &mut Rng| format!("app{}", rng.below(APPS));
    let spec = match i {
        0 => json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
        1 => json!({"podSelector": {"matchLabels": {"tier": "fe"}},
                    "ingress": [{"from": [{"podSelector": {}}]}]}),
        2 => json!({"podSelector": {"matchLabels": {"tier": "db"}},
                    "policyTypes": ["Ingress", "Egress"],
                    "ingress": [{"from": [{"podSelector": {"matchLabels": {"tier": "be"}}}]}],
                    "egress": [{"to": [{"namespaceSelector": {"matchExpressions": [
                                  {"key": "env", "operator": "In", "values": ["prod", "staging"]}]}},
                                {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.99.0.0/16"]}}]}]}),
        _ => {
            let mut rules = Vec::new();
            for _ in 0..1 + rng.below(3) {
                let peer = match rng.below(4) {
                    0 => json!({"podSelector": {"matchLabels": {"app": app(rng)}}}),
                    1 => {
                        json!({"namespaceSelector": {"matchLabels": {"team": format!("t{}", rng.below(20))}}})
                    }
                    2 => {
                        json!({"namespaceSelector": {"matchLabels": {"team": format!("t{}", rng.below(20))}},
                                "podSelector": {"matchLabels": {"app": app(rng)}}})
                    }
                    _ => json!({"podSelector": {"matchExpressions": [
                                   {"key": "app", "operator": "In", "values": [app(rng), app(rng)]},
                                   {"key": "version", "operator": "NotIn", "values": ["canary"]}]}}),
                };
                let mut rule = json!({"from": [peer]});
                if rng.below(2) == 0 {
                    let port = 7000 + rng.below(1000);
                    rule["ports"] =
                        json!([{"protocol": "TCP", "port": port, "endPort": port + 10}]);
                }
                rules.push(rule);
            }
            json!({"podSelector": {"matchLabels": {"app": format!("app{i}")}}, "ingress": rules})
        }
    };
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"namespace": ns_name(n), "name": format!("np{i}"),
                        "uid": format!("{n}-{i}"), "resourceVersion": "1"},
           "spec": spec})
}

fn cluster() -> (Snapshot, Vec<String>) {
    let mut rng = Rng(0x5eed_0057_0000_0001);
    let mut texts = Vec::new();
    for n in 0..NAMESPACES {
        for i in 0..POLICIES_PER_NS {
            texts.push(policy_json(&mut rng, n, i).to_string());
        }
    }
    let snapshot = Snapshot {
        namespaces: (0..NAMESPACES).map(namespace).collect(),
        pods: (0..NAMESPACES)
            .flat_map(|n| (0..PODS_PER_NS).map(move |p| pod(n, p, "v1")))
            .collect(),
        policies: texts
            .iter()
            .map(|t| NetworkPolicy::from_json(t).expect("bench policy"))
            .collect(),
    };
    (snapshot, texts)
}

fn bench(c: &mut Criterion) {
    let (snapshot, texts) = cluster();
    let before = LIVE.load(Ordering::Relaxed);
    let start = Instant::now();
    let mut index = Index::build(snapshot.clone());
    let took = start.elapsed();
    let heap = LIVE.load(Ordering::Relaxed) - before;
    let (pods, policies) = index.counts();
    eprintln!(
        "netpol: {pods} pods, {policies} policies in {NAMESPACES} namespaces: \
         index built in {took:?}, {:.1} MB of heap ({} bytes per pod)",
        heap as f64 / 1e6,
        heap / pods
    );

    // Random pairs of pods, some in one namespace.
    let mut rng = Rng(0xdec1_de00);
    let pairs: Vec<((usize, usize), (usize, usize))> = (0..4096)
        .map(|_| {
            let a = (rng.below(NAMESPACES), rng.below(PODS_PER_NS));
            let b_ns = if rng.below(2) == 0 {
                a.0
            } else {
                rng.below(NAMESPACES)
            };
            (a, (b_ns, rng.below(PODS_PER_NS)))
        })
        .collect();
    let names: Vec<Vec<String>> = (0..NAMESPACES)
        .map(|_| (0..PODS_PER_NS).map(pod_name).collect())
        .collect();
    let ns_names: Vec<String> = (0..NAMESPACES).map(ns_name).collect();
    let endpoint = |(n, p): (usize, usize)| Endpoint::pod(&ns_names[n], &names[n][p], vip(n, p));
    let cm = Connection::Cm {
        space: PortSpace::Tcp,
        port: 7005,
    };
    for conn in [Connection::Qp, cm] {
        let allowed = pairs
            .iter()
            .filter(|(a, b)| index.decide(&endpoint(*a), &endpoint(*b), conn).allowed)
            .count();
        eprintln!(
            "netpol: {conn:?}: {allowed} of {} sampled pairs allowed",
            pairs.len()
        );
    }

    let mut g = c.benchmark_group("netpol");
    g.sample_size(10);
    g.bench_function("parse 1k policies", |b| {
        b.iter(|| {
            for t in &texts {
                black_box(NetworkPolicy::from_json(t).expect("policy"));
            }
        })
    });
    g.bench_function("build (10k pods, 1k policies)", |b| {
        b.iter_batched(|| snapshot.clone(), Index::build, BatchSize::LargeInput)
    });
    g.sample_size(100);
    let mut k = 0usize;
    g.bench_function("update pod labels", |b| {
        b.iter(|| {
            k += 1;
            let version = if k.is_multiple_of(2) { "v1" } else { "canary" };
            index.upsert_pod(pod(k % NAMESPACES, k % PODS_PER_NS, version));
        })
    });
    // A policy selecting a tenth of its namespace's pods, and the default
    // deny selecting all of them.
    let mut rng = Rng(7);
    let versions: Vec<[NetworkPolicy; 2]> = (0..NAMESPACES)
        .map(|n| {
            let mut v = || NetworkPolicy::from_value(&policy_json(&mut rng, n, 5)).expect("p");
            [v(), v()]
        })
        .collect();
    g.bench_function("update policy", |b| {
        b.iter(|| {
            k += 1;
            index.upsert_policy(versions[k % NAMESPACES][k / NAMESPACES % 2].clone());
        })
    });
    let deny: Vec<NetworkPolicy> = (0..NAMESPACES)
        .map(|n| NetworkPolicy::from_value(&policy_json(&mut rng, n, 0)).expect("p"))
        .collect();
    g.bench_function("update policy selecting 100 pods", |b| {
        b.iter(|| {
            k += 1;
            index.upsert_policy(deny[k % NAMESPACES].clone());
        })
    });
    g.bench_function("update namespace", |b| {
        b.iter(|| {
            k += 1;
            let mut ns = namespace(k % NAMESPACES);
            ns.labels.insert("k".into(), (k % 2).to_string());
            index.upsert_namespace(ns);
        })
    });
    for (label, conn) in [("decide QP", Connection::Qp), ("decide CM", cm)] {
        g.bench_function(label, |b| {
            b.iter(|| {
                k = (k + 1) & 4095;
                let (a, z) = pairs[k];
                black_box(index.decide(&endpoint(a), &endpoint(z), conn).allowed)
            })
        });
    }
    // The tcp/udp rules of a pod's vNIC: its policies' selectors as the
    // vIPs of the pods they pick among all 10,000 (one VNI), what masqd
    // renders per local pod when something changes.
    let all: Vec<Endpoint> = (0..NAMESPACES)
        .flat_map(|n| (0..PODS_PER_NS).map(move |p| (n, p)))
        .map(endpoint)
        .collect();
    let rules: usize = (0..100)
        .map(|i| match index.flows(&all[i * 97], &all).ingress {
            masq_policy::netpol::Flows::Isolated { rules, .. } => rules
                .iter()
                .map(|r| r.peers.as_ref().map_or(1, |p| p.vips.len().max(1)))
                .sum(),
            _ => 0,
        })
        .sum();
    eprintln!(
        "netpol: flows: 100 sampled pods' ingress rules name {} peer vIPs on average",
        rules / 100
    );
    g.sample_size(20);
    g.bench_function("flows (one pod among 10k endpoints)", |b| {
        b.iter(|| {
            k = (k + 97) % all.len();
            black_box(index.flows(&all[k], &all))
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
