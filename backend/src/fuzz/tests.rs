//! The harnesses in `cargo test`: over the checked-in seeds (and any
//! input a fuzzer found that was added beside them), and over inputs
//! mutated from them with a fixed seed, so a failure replays.
use super::*;
use crate::cm::fakes::{VIP_A, VIP_B, VIP_C};
use std::path::PathBuf;

/// Inputs per harness beyond the seeds: a few seconds of a debug build.
const ROUNDS: usize = 3000;

fn dir(target: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target)
}

/// The files in backend/fuzz/seeds/TARGET, by name.
fn checked_in(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir(target))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    Some((name, std::fs::read(e.path()).ok()?))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn the_checked_in_seeds_are_what_the_generator_makes() {
    for target in ["peer_stream", "etcd_values"] {
        let made = seeds(target);
        if std::env::var_os("MASQ_UPDATE_SEEDS").is_some() {
            std::fs::create_dir_all(dir(target)).expect("mkdir");
            for (name, bytes) in &made {
                std::fs::write(dir(target).join(name), bytes).expect("write");
            }
        }
        let files = checked_in(target);
        for (name, bytes) in &made {
            let file = files.iter().find(|(n, _)| n == name);
            assert_eq!(
                file.map(|f| &f.1),
                Some(bytes),
                "backend/fuzz/seeds/{target}/{name} is stale: MASQ_UPDATE_SEEDS=1 cargo test -p masq-backend fuzz::"
            );
        }
    }
}

/// The seeds take the CM through both sides of a connection, its
/// rejects, disconnects, UD queries and its limit: if the set-up's ids
/// change, the seeds stop reaching anything, and this says so.
#[test]
fn the_peer_stream_seeds_reach_every_event_and_answer() {
    let mut events = std::collections::BTreeSet::new();
    let mut sent = std::collections::BTreeSet::new();
    for (_, input) in seeds("peer_stream") {
        let r = peer_stream::reached(&input);
        events.extend(r.events);
        sent.extend(r.sent);
    }
    let want = [
        proto::CM_EVENT_CONNECT_REQUEST,
        proto::CM_EVENT_CONNECT_RESPONSE,
        proto::CM_EVENT_UNREACHABLE,
        proto::CM_EVENT_REJECTED,
        proto::CM_EVENT_ESTABLISHED,
        proto::CM_EVENT_DISCONNECTED,
    ];
    for e in want {
        assert!(events.contains(&e), "event {e} not reached: {events:?}");
    }
    for m in [
        "Rep", "Rtu", "Dreq", "Rej 3", "Rej 28", "SidrRep", "UdQpAck",
    ] {
        assert!(sent.contains(m), "{m} never sent: {sent:?}");
    }
}

/// xorshift64*: a fixed, small source of numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<T: Copy>(&mut self, of: &[T]) -> T {
        of[self.below(of.len())]
    }
}

/// `seed` changed a few times as a fuzzer would: bytes flipped or set
/// to edge values, a run cut out or repeated, a piece of another seed.
fn mutate(rng: &mut Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(b.len() + 1);
        match rng.below(6) {
            0 if at < b.len() => b[at] ^= 1 << rng.below(8),
            1 if at < b.len() => b[at] = rng.pick(&[0, 1, 0x7f, 0x80, 0xff]),
            2 => {
                let n = rng.below(8).min(b.len() - at);
                b.drain(at..at + n);
            }
            3 if at < b.len() => {
                let n = rng.below(16).min(b.len() - at);
                let piece = b[at..at + n].to_vec();
                b.splice(at..at, piece);
            }
            4 => {
                let from = rng.below(other.len() + 1);
                let n = rng.below(64).min(other.len() - from);
                b.splice(at..at, other[from..from + n].iter().copied());
            }
            _ => b.insert(at.min(b.len()), rng.next() as u8),
        }
    }
    b
}

/// A run of well-formed frames from a small vocabulary (the set-up's ids,
/// both hosts, both VNIs and one not in the map, the map's vIPs): the
/// states a byte mutation reaches only by luck.
fn frames(rng: &mut Rng) -> Vec<u8> {
    let ids = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 60, 70];
    let vnis = [ACME, GLOBEX, 300];
    let vips = [VIP_A, VIP_B, VIP_C];
    let mut out = Vec::new();
    for _ in 0..=rng.below(12) {
        let (to_id, from_id) = (rng.pick(&ids), rng.pick(&ids));
        let msg = match rng.below(9) {
            0 | 1 => PeerBody::Req(proto::PeerReq {
                from_id,
                vni: rng.pick(&vnis),
                src: proto::CmAddr::v4(rng.pick(&vips), 40000),
                dst: proto::CmAddr::v4(rng.pick(&vips), rng.pick(&[PORT, PORT + 1])),
                params: params(rng.below(3) as u32 * 0x40),
                private_data: HELLO.to_vec(),
            }),
            2 => PeerBody::Rep(proto::PeerRep {
                to_id,
                from_id,
                params: params(0x50),
                private_data: HELLO.to_vec(),
            }),
            3 => PeerBody::Rej(proto::PeerRej {
                to_id,
                from_id,
                reason: 28,
                private_data: Vec::new(),
            }),
            4 => PeerBody::Rtu(proto::PeerRtu { to_id, from_id }),
            5 => PeerBody::Dreq(proto::PeerDreq {
                to_id,
                from_id,
                from_qpn: rng.pick(&[0, 0x50, 0x77, 0x40 + 60]),
            }),
            6 => PeerBody::SidrReq(proto::PeerSidrReq {
                from_id,
                vni: rng.pick(&vnis),
                src: proto::CmAddr::v4(rng.pick(&vips), 40001),
                dst: proto::CmAddr::v4(rng.pick(&vips), PORT),
                private_data: Vec::new(),
            }),
            7 => PeerBody::SidrRep(proto::PeerSidrRep {
                to_id,
                status: rng.below(3) as u32,
                qp_num: 0x51,
                qkey: 1,
                private_data: Vec::new(),
            }),
            _ => PeerBody::UdQp(proto::PeerUdQp {
                vni: rng.pick(&vnis),
                vip: rng.pick(&vips).octets(),
                qpn: 0x52,
                up: u8::from(rng.below(2) == 0),
            }),
        };
        out.extend(frame(rng.next() as u8 & 0x0f, &msg));
    }
    out
}

fn run(target: &str, harness: fn(&[u8]), structured: Option<fn(&mut Rng) -> Vec<u8>>) {
    let seeds = checked_in(target);
    assert!(!seeds.is_empty(), "no seeds in {}", dir(target).display());
    for (name, input) in &seeds {
        eprintln!("{target}: {name}");
        harness(input);
    }
    let mut rng = Rng(0x6d61_7371_6675_7a7a);
    for round in 0..ROUNDS {
        let input = match structured {
            Some(gen) if round % 2 == 0 => gen(&mut rng),
            _ => {
                let seed = &seeds[rng.below(seeds.len())].1;
                let other = &seeds[rng.below(seeds.len())].1;
                mutate(&mut rng, seed, other)
            }
        };
        let caught = std::panic::catch_unwind(|| harness(&input));
        if caught.is_err() {
            let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
            panic!("{target}: round {round} failed on input {hex}");
        }
    }
}

#[test]
fn the_peer_stream_harness_holds_over_its_seeds_and_mutations() {
    run("peer_stream", peer_stream, Some(frames));
}

#[test]
fn the_etcd_values_harness_holds_over_its_seeds_and_mutations() {
    run("etcd_values", etcd_values, None);
}
