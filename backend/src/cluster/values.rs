//! What masqd reads out of etcd's keys and values under the prefix: an
//! endpoint's key and value (`P/endpoints/<IP>/<name>`), the policy
//! (`P/policy`) and what masq-netpol mirrors of Kubernetes
//! (`P/k8s/namespaces/<ns>`, `P/k8s/pods/<ns>/<pod>`,
//! `P/k8s/networkpolicies/<ns>/<name>`). Any host may write the first two
//! (and, with etcd's roles off, anyone who reaches etcd anything):
//! whatever they hold is an error here, logged and ignored by the caller,
//! never a panic.

use super::publish::Published;
use crate::admit::Mirrored;
use crate::cluster::policy::StoredPolicy;
use crate::endpoints::placement::Placement;
use crate::error::{Error, Result};
use masq_policy::netpol::{Namespace, NetworkPolicy, Pod};
use std::net::Ipv4Addr;

/// One key and value of the store, as the cluster task reads it.
pub enum Parsed {
    Endpoint(Placement),
    Policy(StoredPolicy),
    Mirrored(Mirrored),
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
                pod: p
                    .endpoint
                    .cni
                    .as_deref()
                    .and_then(|c| Some((c.namespace.clone()?, c.pod.clone()?))),
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
    match mirror_key(prefix, key) {
        Some(k) => match k.read(value) {
            Ok(m) => Parsed::Mirrored(m),
            Err(e) => Parsed::Bad(format!("{key}: {e}; ignored")),
        },
        None => Parsed::Other,
    }
}

/// Which Kubernetes object a key below `P/k8s/` is.
#[derive(Debug, PartialEq, Eq)]
enum MirrorKey<'a> {
    Namespace(&'a str),
    Pod(&'a str, &'a str),
    Policy(&'a str, &'a str),
}

fn mirror_key<'a>(prefix: &str, key: &'a str) -> Option<MirrorKey<'a>> {
    let rest = key.strip_prefix(prefix)?.strip_prefix("/k8s/")?;
    let (kind, rest) = rest.split_once('/')?;
    let two = || {
        let (ns, name) = rest.split_once('/')?;
        (!ns.is_empty() && !name.is_empty() && !name.contains('/')).then_some((ns, name))
    };
    match kind {
        "namespaces" if !rest.is_empty() && !rest.contains('/') => Some(MirrorKey::Namespace(rest)),
        "pods" => two().map(|(ns, n)| MirrorKey::Pod(ns, n)),
        "networkpolicies" => two().map(|(ns, n)| MirrorKey::Policy(ns, n)),
        _ => None,
    }
}

impl MirrorKey<'_> {
    /// The object in `value`, which must be the one the key names.
    fn read(&self, value: &str) -> Result<Mirrored> {
        let differs = |what: &str| {
            Err(Error::Failed(format!(
                "the object's {what} differs from the key's"
            )))
        };
        match *self {
            MirrorKey::Namespace(name) => {
                let ns = Namespace::from_json(value).map_err(|e| Error::Failed(e.to_string()))?;
                if ns.name != name {
                    return differs("name");
                }
                Ok(Mirrored::Namespace(ns))
            }
            MirrorKey::Pod(namespace, name) => {
                let p = Pod::from_json(value).map_err(|e| Error::Failed(e.to_string()))?;
                if (p.namespace.as_str(), p.name.as_str()) != (namespace, name) {
                    return differs("namespace or name");
                }
                Ok(Mirrored::Pod(p))
            }
            MirrorKey::Policy(namespace, name) => {
                let p =
                    NetworkPolicy::from_json(value).map_err(|e| Error::Failed(e.to_string()))?;
                if (p.namespace.as_str(), p.name.as_str()) != (namespace, name) {
                    return differs("namespace or name");
                }
                Ok(Mirrored::Policy(p))
            }
        }
    }

    fn gone(&self) -> Mirrored {
        match *self {
            MirrorKey::Namespace(ns) => Mirrored::NamespaceGone(ns.into()),
            MirrorKey::Pod(namespace, name) => Mirrored::PodGone {
                namespace: namespace.into(),
                name: name.into(),
            },
            MirrorKey::Policy(namespace, name) => Mirrored::PolicyGone {
                namespace: namespace.into(),
                name: name.into(),
            },
        }
    }
}

/// The mirrored object deleted key `key` under `prefix` named, if it is one.
pub fn mirror_gone(prefix: &str, key: &str) -> Option<Mirrored> {
    mirror_key(prefix, key).map(|k| k.gone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(key: &str, value: &str) -> Result<Mirrored, String> {
        match parse("/masq", key.as_bytes(), value.as_bytes(), 1) {
            Parsed::Mirrored(m) => Ok(m),
            Parsed::Bad(why) => Err(why),
            _ => Err("not a mirrored object".into()),
        }
    }

    #[test]
    fn the_mirrors_keys_name_their_objects_and_nothing_else() {
        let pod = r#"{"metadata":{"namespace":"team","name":"srv","labels":{"app":"srv"}}}"#;
        match parsed("/masq/k8s/pods/team/srv", pod) {
            Ok(Mirrored::Pod(p)) => {
                assert_eq!((p.namespace.as_str(), p.name.as_str()), ("team", "srv"))
            }
            other => panic!("{other:?}"),
        }
        let ns = r#"{"metadata":{"name":"team"}}"#;
        assert!(matches!(
            parsed("/masq/k8s/namespaces/team", ns),
            Ok(Mirrored::Namespace(_))
        ));
        // The object is the key's, or it is refused: a pod cannot be
        // written under another pod's key.
        let e = parsed("/masq/k8s/pods/team/db", pod).unwrap_err();
        assert_eq!(
            e,
            "/masq/k8s/pods/team/db: the object's namespace or name differs from the key's; ignored"
        );
        let e = parsed("/masq/k8s/pods/team/srv", "{").unwrap_err();
        assert!(e.starts_with("/masq/k8s/pods/team/srv: "), "{e}");
        // Keys of no object's shape are not the mirror's.
        for key in [
            "/masq/k8s/pods/team",
            "/masq/k8s/pods/team/srv/x",
            "/masq/k8s/namespaces/",
            "/masq/k8s/services/team/x",
            "/masqx/k8s/namespaces/team",
        ] {
            assert!(
                matches!(parse("/masq", key.as_bytes(), b"{}", 1), Parsed::Other),
                "{key}"
            );
            assert!(mirror_gone("/masq", key).is_none(), "{key}");
        }
        assert!(matches!(
            mirror_gone("/masq", "/masq/k8s/networkpolicies/team/allow"),
            Some(Mirrored::PolicyGone { .. })
        ));
    }
}
