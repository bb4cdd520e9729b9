//! Memory per tracked connection, measured with a counting allocator.
//! Target: <= 256 bytes per entry including both indexes. Measured (x86_64):
//! 152 bytes at 100k entries, 168 at 917,505 (the worst point: the hash index
//! just doubled), 165 at 1M (benches/table.rs).

use rconntrack::{Entry, QpType, State, Table};
use std::alloc::{GlobalAlloc, Layout, System};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};

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

#[test]
fn bytes_per_entry_within_budget() {
    // 917_505 is just past a hash-index doubling: the worst point.
    for n in [100_000u32, 917_505] {
        let before = LIVE.load(Ordering::Relaxed);
        let mut t = Table::new();
        for i in 0..n {
            t.upsert(entry(i)).unwrap();
        }
        let per = (LIVE.load(Ordering::Relaxed) - before) as f64 / f64::from(n);
        println!("{n} entries: {per:.1} bytes/entry");
        assert!(per <= 256.0, "{per} bytes per entry at {n}");
        drop(t);
    }
}
