//! Any text through the policy parser: no panic, errors render, and an
//! accepted policy is deterministic (same hash on a second parse), answers
//! RDMA admission symmetrically and renders nftables for every endpoint.
#![no_main]

use libfuzzer_sys::fuzz_target;
use masq_policy::{EndpointRef, L4Proto, Policy};
use std::net::Ipv4Addr;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let ip = |s: &str| s.parse::<Ipv4Addr>().expect("a literal address");
    // The endpoints of the example policy, plus one in a VPC of its own.
    let eps = [
        EndpointRef::new("acme-a", "acme", 100, ip("10.0.0.1")),
        EndpointRef::new("acme-b", "acme", 100, ip("10.0.0.2")),
        EndpointRef::new("acme-c", "acme", 100, ip("10.0.1.5")),
        EndpointRef::new("globex-a", "globex", 200, ip("10.0.0.1")),
        EndpointRef::new("globex-b", "globex", 200, ip("10.0.0.2")),
    ];
    let p = match Policy::parse(text, "fuzz.yaml", &eps) {
        Ok(p) => p,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let again = Policy::parse(text, "fuzz.yaml", &eps).expect("accepted once, accepted twice");
    assert_eq!(p.version_hash(), again.version_hash());
    for a in &eps {
        for b in &eps {
            let ab = p.rdma_allowed(&a.tenant, a.vni, a.vip, b.vip).allowed;
            let ba = p.rdma_allowed(&a.tenant, a.vni, b.vip, a.vip).allowed;
            assert_eq!(ab, ba, "{} <-> {}", a.vip, b.vip);
            let _ = p.flow_allowed(&a.tenant, a.vni, a.vip, b.vip, L4Proto::Tcp, 18515);
        }
        let _ = p.groups_of(&a.tenant, a.vni, a.vip);
        let _ = p.render_nft(&a.name, "veth-fuzz", "br-fuzz");
    }
});
