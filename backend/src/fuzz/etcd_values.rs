//! What masqd reads from etcd, as any writer of the store may have left
//! it: an endpoint's key and value, the policy, a claim, a Kubernetes
//! object masq-netpol mirrored. (A host's status
//! is only shown, as JSON, by `masqctl policy status`.)
//! Each decodes to an error or to what masqd then uses, never a panic; a
//! decoded endpoint goes into a registry's VPC map and out again, a
//! decoded policy through the policy's parser, a mirrored object into
//! NetworkPolicy's index and out again.
//!
//! The input is `[kind] [key length] [key bytes] [value]`: kind picks the
//! key's place under the prefix (`P/endpoints/` + key, `P/policy`,
//! `P/claims/names/` + key, `P/status/` + key, the key bytes alone, or
//! `P/k8s/` + key).

use crate::admit::{Ask, Conn};
use crate::cluster::etcd::{claim_holder, parse_value, Parsed};
use crate::config::Config;
use crate::endpoints::placement::SourceId;
use crate::endpoints::registry::Registry;
use crate::enforce::netpol::NetworkPolicies;
use std::net::Ipv4Addr;
use std::path::Path;

pub const PREFIX: &str = "/masq";

thread_local! {
    static CONFIG: Config = {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        Config::load(&dir.join("host1.yaml")).unwrap_or_else(|e| panic!("{e}"))
    };
}

/// The key that `kind` and `key` name.
pub fn key(kind: u8, key: &[u8]) -> Vec<u8> {
    let under = match kind % 6 {
        0 => "endpoints/",
        1 => return format!("{PREFIX}/policy").into_bytes(),
        2 => "claims/names/",
        3 => "status/",
        4 => return key.to_vec(),
        _ => "k8s/",
    };
    let mut k = format!("{PREFIX}/{under}").into_bytes();
    k.extend_from_slice(key);
    k
}

/// The deletion of the mirrored object key `k` names.
fn parse_gone(k: &[u8]) -> Option<crate::admit::Mirrored> {
    crate::cluster::etcd::mirror_gone(PREFIX, std::str::from_utf8(k).ok()?)
}

/// One input of the harness (for the seed corpus).
pub fn input(kind: u8, k: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = vec![kind, u8::try_from(k.len()).unwrap_or(u8::MAX)];
    out.extend_from_slice(&k[..usize::from(out[1])]);
    out.extend_from_slice(value);
    out
}

pub fn etcd_values(data: &[u8]) {
    let [kind, len, rest @ ..] = data else {
        return;
    };
    let len = usize::from(*len).min(rest.len());
    let (k, value) = rest.split_at(len);
    let k = key(*kind, k);
    match parse_value(PREFIX, &k, value, 1) {
        Parsed::Endpoint(p) => CONFIG.with(|cfg| {
            let registry = Registry::new(cfg);
            let (host, name) = (p.host, p.name.clone().unwrap_or_default());
            registry.place(SourceId::Cluster, p);
            let _ = (registry.listing(), registry.census(), registry.hosts());
            let _ = registry.policy_refs();
            registry.unplace(SourceId::Cluster, host, &name);
            assert!(registry.hosts().is_empty(), "{name} of {host} left the map");
        }),
        Parsed::Policy(p) => {
            let _ = masq_policy::Policy::parse_allowing_unknown(&p.text, &p.file, &[]);
        }
        Parsed::Mirrored(m) => {
            let np = NetworkPolicies::default();
            let gone = parse_gone(&k);
            np.update(m);
            let ask = Ask {
                tenant: "acme",
                vni: 100,
                local: Ipv4Addr::new(10, 0, 0, 1),
                remote: Ipv4Addr::new(10, 0, 0, 2),
                conn: Conn::Qp,
            };
            let ends = [
                Some(("team".into(), "a".into())),
                Some(("team".into(), "b".into())),
            ];
            let _ = np.decide(&ask, &ends);
            if let Some(gone) = gone {
                np.update(gone);
            }
            assert_eq!(
                np.counts(),
                (0, 0),
                "{}: left in the index",
                String::from_utf8_lossy(&k)
            );
        }
        Parsed::Bad(why) => assert!(!why.is_empty()),
        Parsed::Other => {}
    }
    let text = String::from_utf8_lossy(&k);
    if text.starts_with(&format!("{PREFIX}/claims/")) {
        let _ = claim_holder(&text, value);
    }
}
