//! Fuzz harnesses for what other hosts hand masqd (issue 51 point 9): the
//! masqd-to-masqd CM stream (`peer_stream`) and etcd's values
//! (`etcd_values`). Each takes arbitrary bytes; a panic is a finding.
//!
//! Two ways run them: `cargo test` (in `make test`) over the seed corpus
//! in backend/fuzz/seeds/ and a bounded number of inputs mutated from it
//! with a fixed seed, and libFuzzer (`make fuzz-long`, backend/fuzz/),
//! which starts from the same seeds. The seeds are made by `seeds()` from
//! real messages and values; a test keeps the checked-in files equal to
//! it (`MASQ_UPDATE_SEEDS=1` writes them).

pub mod etcd_values;
pub mod peer_stream;

pub use etcd_values::etcd_values;
pub use peer_stream::peer_stream;

use crate::cm::fakes::{VIP_A, VIP_B, VIP_C};
use masq_proto::{self as proto, PeerBody};
use peer_stream::{frame, ACCEPT, DISCONNECT, ESTABLISH, PORT, REJECT};

/// The seed corpus of each harness: (name, input).
pub fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    match target {
        "peer_stream" => peer_seeds(),
        "etcd_values" => etcd_seeds(),
        _ => Vec::new(),
    }
}

const ACME: u32 = crate::cm::fakes::ACME;
const GLOBEX: u32 = crate::cm::fakes::GLOBEX;

/// The parameters of a REQ or REP; `HELLO` is their private data.
fn params(qpn: u32) -> proto::PeerParams {
    proto::PeerParams {
        qp_num: qpn,
        psn: 0x1234,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..Default::default()
    }
}

const HELLO: &[u8] = b"hello";

fn req(from_id: u32, vni: u32, src: std::net::Ipv4Addr) -> PeerBody {
    PeerBody::Req(proto::PeerReq {
        from_id,
        vni,
        src: proto::CmAddr::v4(src, 40000),
        dst: proto::CmAddr::v4(VIP_A, PORT),
        params: params(0x40 + from_id),
        private_data: HELLO.to_vec(),
    })
}

/// Host2 is ctl bit 0 clear, host3 set.
const H2: u8 = 0;
const H3: u8 = 1;

fn peer_seeds() -> Vec<(String, Vec<u8>)> {
    let cat = |frames: &[Vec<u8>]| frames.concat();
    let rej = |to_id, from_id| {
        PeerBody::Rej(proto::PeerRej {
            to_id,
            from_id,
            reason: proto::CM_REJ_CONSUMER_DEFINED,
            private_data: b"no".to_vec(),
        })
    };
    let dreq = |to_id, from_id, from_qpn| {
        PeerBody::Dreq(proto::PeerDreq {
            to_id,
            from_id,
            from_qpn,
        })
    };
    // The set-up's ids: acme-a's connect is 3 (to host2), its UD query 4
    // (to host2), globex-a's connect 6 (to host3); a first REQ's id is 7.
    let rep = |to_id, from_id| {
        PeerBody::Rep(proto::PeerRep {
            to_id,
            from_id,
            params: params(0x50),
            private_data: HELLO.to_vec(),
        })
    };
    let sidr_rep = |to_id, status| {
        PeerBody::SidrRep(proto::PeerSidrRep {
            to_id,
            status,
            qp_num: 0x51,
            qkey: 0x1111_0000,
            private_data: Vec::new(),
        })
    };
    let sidr_req = PeerBody::SidrReq(proto::PeerSidrReq {
        from_id: 90,
        vni: ACME,
        src: proto::CmAddr::v4(VIP_B, 40001),
        dst: proto::CmAddr::v4(VIP_A, PORT),
        private_data: b"q".to_vec(),
    });
    let ud_qp = |vip: std::net::Ipv4Addr, up| {
        PeerBody::UdQp(proto::PeerUdQp {
            vni: ACME,
            vip: vip.octets(),
            qpn: 0x52,
            up: u8::from(up),
        })
    };
    let mut out = vec![
        // A REQ to globex-a from host2, accepted, RTU, then a DREQ.
        cat(&[
            frame(H2 | ACCEPT, &req(60, GLOBEX, VIP_B)),
            frame(
                H2,
                &PeerBody::Rtu(proto::PeerRtu {
                    to_id: 7,
                    from_id: 60,
                }),
            ),
            frame(H2, &dreq(7, 60, 0x40 + 60)),
        ]),
        // The same from host3 (globex-c), rejected by the app.
        cat(&[frame(H3 | REJECT, &req(61, GLOBEX, VIP_C))]),
        // The same, established and then disconnected by the app.
        cat(&[
            frame(H2 | ACCEPT, &req(60, GLOBEX, VIP_B)),
            frame(
                H2 | DISCONNECT,
                &PeerBody::Rtu(proto::PeerRtu {
                    to_id: 7,
                    from_id: 60,
                }),
            ),
        ]),
        // acme-a's connect: host2's REP, established, disconnected by the
        // peer; and a second REP, late.
        cat(&[
            frame(H2 | ESTABLISH, &rep(3, 70)),
            frame(H2, &dreq(3, 70, 0x50)),
            frame(H2, &rep(3, 70)),
        ]),
        // globex-a's connect answered by host3, then a REJ.
        cat(&[frame(H3, &rep(6, 71)), frame(H3, &rej(6, 71))]),
        cat(&[frame(H2, &rej(3, 0))]),
        // The UD query answered, and refused; a UD query to acme-a.
        cat(&[frame(H2, &sidr_rep(4, 0))]),
        cat(&[frame(H2, &sidr_rep(4, proto::CM_SIDR_REJECT))]),
        cat(&[frame(H2 | ACCEPT, &sidr_req)]),
        // UD QP announcements, a query and an ack.
        cat(&[
            frame(H2, &ud_qp(VIP_B, true)),
            frame(H3, &ud_qp(VIP_B, true)),
            frame(H2, &ud_qp(VIP_B, false)),
            frame(H3, &PeerBody::UdQuery(proto::PeerUdQuery {})),
            frame(
                H2,
                &PeerBody::UdQpAck(proto::PeerUdQpAck {
                    vni: ACME,
                    qpn: 0x11,
                }),
            ),
        ]),
        // A flood of REQs past the limit.
        (0..10)
            .map(|n| frame(H2, &req(200 + n, GLOBEX, VIP_B)))
            .collect::<Vec<_>>()
            .concat(),
    ];
    // acme-a is a client of the example's policy: acme-b's REQ to its
    // listener is admitted, acme-c's (in no group) is not.
    out.push(cat(&[frame(H2 | ACCEPT, &req(80, ACME, VIP_B))]));
    out.push(cat(&[frame(H3, &req(81, ACME, VIP_C))]));
    out.into_iter()
        .enumerate()
        .map(|(n, b)| (format!("seed-{n:02}"), b))
        .collect()
}

fn etcd_seeds() -> Vec<(String, Vec<u8>)> {
    use etcd_values::input;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let cfg =
        crate::config::Config::load(&dir.join("host2.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::new();
    for (n, e) in cfg.endpoints.iter().enumerate() {
        let published = serde_json::json!({ "host": cfg.underlay.ip, "endpoint": e });
        let key = format!("{}/{}", cfg.underlay.ip, e.name);
        let value = serde_json::to_vec(&published).unwrap_or_default();
        out.push((format!("endpoint-{n}"), input(0, key.as_bytes(), &value)));
    }
    let policy = std::fs::read_to_string(dir.join("policy.yaml")).unwrap_or_default();
    let stored = serde_json::json!({ "text": policy, "file": "policy.yaml" });
    out.push((
        "policy".into(),
        input(1, b"", &serde_json::to_vec(&stored).unwrap_or_default()),
    ));
    let claim = serde_json::json!({ "host": cfg.underlay.ip, "endpoint": "acme-b" });
    out.push((
        "claim".into(),
        input(
            2,
            b"acme-b",
            &serde_json::to_vec(&claim).unwrap_or_default(),
        ),
    ));
    // masq-netpol's own output (its golden files), under the keys it uses.
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../cni/netpol/testdata");
    for (file, key) in [
        ("namespace.json", "namespaces/team"),
        ("pod.json", "pods/team/srv"),
        ("networkpolicy.json", "networkpolicies/team/allow-app"),
    ] {
        let value = std::fs::read(golden.join(file)).unwrap_or_default();
        let name = format!("k8s-{}", file.trim_end_matches(".json"));
        out.push((name, input(5, key.as_bytes(), &value)));
    }
    out
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
