//! Insert, lookup and reevaluate at 1M entries; prints bytes per entry
//! (counting allocator). Run: cargo bench -p rconntrack

use criterion::{criterion_group, criterion_main, Criterion};
use rconntrack::{Decision, Entry, LocalKey, QpKey, QpType, State, Table};
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

const N: u32 = 1_000_000;

fn entry(i: u32) -> Entry {
    Entry {
        session: u64::from(i / 16),
        qp_handle: i % 16,
        tenant: "acme".into(),
        vni: 100 + i % 4,
        local_vip: Ipv4Addr::from(0x0a00_0000 + i / 64),
        local_qpn: i,
        remote_vip: Ipv4Addr::from(0x0a01_0000 + i % 1000),
        remote_qpn: i ^ 0x5555,
        peer_host: Ipv4Addr::new(192, 168, 1, (i % 200) as u8),
        qp_type: QpType::Rc,
        state: State::Established,
        rule: "acme/db/ingress[0]".into(),
        ..Entry::default()
    }
}

fn filled() -> Table {
    let mut t = Table::new();
    for i in 0..N {
        t.upsert(entry(i)).expect("below the limit");
    }
    t
}

fn local_key(i: u32) -> LocalKey {
    LocalKey {
        vni: 100 + i % 4,
        vip: Ipv4Addr::from(0x0a00_0000 + i / 64),
        qpn: i,
    }
}

fn bench(c: &mut Criterion) {
    let before = LIVE.load(Ordering::Relaxed);
    let start = Instant::now();
    let mut t = filled();
    let took = start.elapsed();
    let bytes = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "memory: {:.1} bytes/entry at {N} entries; insert 1M took {took:?}",
        bytes as f64 / f64::from(N)
    );

    let mut g = c.benchmark_group("table");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.bench_function("insert_1M", |b| b.iter(|| black_box(filled().len())));

    let mut i = 0u32;
    g.bench_function("lookup_by_key", |b| {
        b.iter(|| {
            i = (i + 7919) % N;
            black_box(t.get(QpKey {
                session: u64::from(i / 16),
                qp_handle: i % 16,
            }))
            .is_some()
        })
    });
    g.bench_function("lookup_by_local", |b| {
        b.iter(|| {
            i = (i + 7919) % N;
            black_box(t.get_local(local_key(i))).is_some()
        })
    });
    // A cheap predicate that denies 1 in 1000 and keeps the rest.
    g.bench_function("reevaluate_1M", |b| {
        b.iter(|| {
            let denied = t.reevaluate(|e| {
                (e.remote_vip == Ipv4Addr::new(10, 1, 0, 7)).then_some(Decision::Deny)
            });
            black_box(denied.len())
        })
    });
    g.finish();
    assert_eq!(t.len(), N as usize);
    t.remove_session(0);
}

criterion_group!(benches, bench);
criterion_main!(benches);
