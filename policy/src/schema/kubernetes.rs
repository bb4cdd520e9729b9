//! A tenant's `kubernetes` key: which Kubernetes namespaces' pods may
//! attach to the tenant's networks, and whether the cluster's
//! NetworkPolicy holds for their RDMA too.
//!
//! ```yaml
//! tenants:
//!   acme:
//!     kubernetes:
//!       namespaces: [team, team-ci]
//!       networkPolicy: true
//! ```
//!
//! A NetworkAttachmentDefinition names its tenant in a string, and Multus
//! lets a pod of any namespace use a NAD of another (`team/acme100`), so
//! the tenant itself says which namespaces are its own: masqd refuses the
//! endpoint of a pod (masq-cni passes its `K8S_POD_NAMESPACE`) whose
//! namespace the tenant does not list. A tenant without the key admits no
//! namespace: a Kubernetes pod reaches a tenant only where the operator
//! said so.
//!
//! `networkPolicy: true` makes masqd decide the tenant's connections by the
//! NetworkPolicy objects masq-netpol mirrors, besides its security groups
//! (both must allow). It is off unless said: with it on and no mirror
//! running, every pod of the tenant is unknown and refused, so an operator
//! turns it on once the mirror runs.

use super::walker::{join, value_loc, Walker};
use super::Kubernetes;
use crate::yaml::{Node, Scalar};

/// A Kubernetes namespace name: an RFC 1123 label (1-63 lowercase letters,
/// digits and '-', starting and ending with a letter or digit).
pub(crate) fn valid_namespace(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&s.len())
        && s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.chars().all(|c| alnum(c) || c == '-')
}

impl Walker<'_> {
    /// `tenants.<t>.kubernetes`: the namespaces it admits (none for an
    /// empty key or list) and whether NetworkPolicy holds.
    pub(crate) fn kubernetes(&mut self, key: &Scalar, node: &Node, path: &str) -> Kubernetes {
        let mut out = Kubernetes::default();
        let Some(map) = self.keyed_map(key, node, path, &["namespaces", "networkPolicy"]) else {
            return out;
        };
        if let Some((k, v)) = map.get("networkPolicy") {
            let p = join(path, "networkPolicy");
            if let Some(s) = self.scalar(v, k, &p, "true or false") {
                match s.value.as_str() {
                    "true" => out.network_policy = true,
                    "false" => {}
                    other => self.err(
                        s.loc,
                        &p,
                        format!("expected true or false, found {other:?}"),
                    ),
                }
            }
        }
        if let Some((k, v)) = map.get("namespaces") {
            out.namespaces = self.namespaces(k, v, &join(path, "namespaces"));
        }
        out
    }

    fn namespaces(&mut self, k: &Scalar, v: &Node, npath: &str) -> Vec<String> {
        let items = match v {
            _ if v.is_null() => return Vec::new(),
            Node::Seq(s) => &s.items,
            other => {
                self.err(
                    value_loc(other, k),
                    npath,
                    format!(
                        "expected a list of Kubernetes namespace names, found {}",
                        other.kind()
                    ),
                );
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let p = format!("{npath}[{i}]");
            let Some(s) = self.scalar(item, k, &p, "a Kubernetes namespace name") else {
                continue;
            };
            if !valid_namespace(&s.value) {
                self.err(
                    s.loc,
                    &p,
                    format!(
                        "invalid Kubernetes namespace {:?}: expected 1..=63 lowercase letters, \
                         digits or '-', starting and ending with a letter or digit",
                        s.value
                    ),
                );
                continue;
            }
            if !out.contains(&s.value) {
                out.push(s.value.clone());
            }
        }
        out
    }
}
