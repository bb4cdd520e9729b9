//! What masqd reads out of etcd's keys and values under the prefix: an
//! endpoint's key and value (`P/endpoints/<IP>/<name>`) and the policy
//! (`P/policy`). Any host may write these (and, with etcd's roles off,
//! anyone who reaches etcd): whatever they hold is an error here, logged
//! and ignored by the caller, never a panic.

use super::publish::Published;
use crate::cluster::policy::StoredPolicy;
use crate::endpoints::placement::Placement;
use std::net::Ipv4Addr;

/// One key and value of the store, as the cluster task reads it.
pub enum Parsed {
    Endpoint(Placement),
    Policy(StoredPolicy),
    Bad(String),
    Other,
}

/// The host and endpoint name an endpoint's key under `prefix` names.
pub(super) fn endpoint_key<'a>(prefix: &str, key: &'a str) -> Option<(Ipv4Addr, &'a str)> {
    let rest = key.strip_prefix(&format!("{prefix}/endpoints/"))?;
    let (host, name) = rest.split_once('/')?;
    Some((host.parse().ok()?, name))
}

/// Key `key` with `value` (etcd's bytes, as stored) under `prefix`, first
/// written at revision `created`.
pub fn parse(prefix: &str, key: &[u8], value: &[u8], created: i64) -> Parsed {
    let key = std::str::from_utf8(key).unwrap_or_default();
    let value = std::str::from_utf8(value).unwrap_or_default();
    if let Some((host, name)) = endpoint_key(prefix, key) {
        return match serde_json::from_str::<Published>(value) {
            Ok(p) if p.host == host && p.endpoint.name == name => Parsed::Endpoint(Placement {
                host,
                name: Some(p.endpoint.name),
                tenant: p.endpoint.tenant,
                vni: p.endpoint.vni,
                vip: p.endpoint.vip,
                rail: p.endpoint.rail,
                underlay: p.underlay,
                created,
            }),
            Ok(_) => Parsed::Bad(format!(
                "{key}: host or name differ from the key's; ignored"
            )),
            Err(e) => Parsed::Bad(format!("{key}: {e}; ignored")),
        };
    }
    if key == format!("{prefix}/policy") {
        return match serde_json::from_str::<StoredPolicy>(value) {
            Ok(p) => Parsed::Policy(p),
            Err(e) => Parsed::Bad(format!("{key}: {e}; policy not changed")),
        };
    }
    Parsed::Other
}
