//! Kubernetes NetworkPolicy on RDMA: the index of what masq-netpol mirrors
//! into etcd (`cluster/mirror.rs` reads its keys) and the question the
//! admission asks of it, for the tenants whose `kubernetes.networkPolicy`
//! is true, beside their security groups (both must allow).
//!
//! A pod is known by its vIP through masqd's own registry (`Pods`): the
//! pod a local endpoint is, masq-cni said; a remote one, its host
//! published. Labels and policies are the mirror's alone.

use crate::admit::{Ask, Conn, Mirrored, Pods};
use masq_policy::netpol::{Change, Connection, Endpoint, Index, PodFlows, Snapshot, Verdict};
use std::net::Ipv4Addr;
use std::sync::{RwLock, RwLockReadGuard};

/// The mirrored NetworkPolicy, indexed.
#[derive(Default)]
pub struct NetworkPolicies {
    index: RwLock<Index>,
}

impl NetworkPolicies {
    fn read(&self) -> RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Everything mirrored now (the cluster's view, read whole).
    pub fn replace(&self, snapshot: Snapshot) {
        let index = Index::build(snapshot);
        *self.index.write().unwrap_or_else(|e| e.into_inner()) = index;
    }

    pub fn update(&self, m: Mirrored) {
        let mut index = self.index.write().unwrap_or_else(|e| e.into_inner());
        match m {
            Mirrored::Namespace(ns) => index.upsert_namespace(ns),
            Mirrored::NamespaceGone(ns) => index.remove_namespace(&ns),
            Mirrored::Pod(p) => index.upsert_pod(p),
            Mirrored::PodGone { namespace, name } => index.remove_pod(&namespace, &name),
            Mirrored::Policy(p) => index.upsert_policy(p),
            Mirrored::PolicyGone { namespace, name } => index.remove_policy(&namespace, &name),
        }
    }

    /// (pods, policies) mirrored.
    pub fn counts(&self) -> (usize, usize) {
        self.read().counts()
    }

    /// The ends of `ask` as NetworkPolicy sees them, owned.
    pub fn ends(ask: &Ask, pods: &dyn Pods) -> Ends {
        [
            pods.pod_at(ask.vni, ask.local),
            pods.pod_at(ask.vni, ask.remote),
        ]
    }

    /// NetworkPolicy's verdict on `ask` between ends `ends` (from `ends`).
    pub fn decide(&self, ask: &Ask, ends: &Ends) -> Verdict {
        let [local, remote] = endpoints(ask, ends);
        let index = self.read();
        // Port-less traffic has no initiator: asked from the lower vIP's
        // end, so that both hosts' verdicts name the same rules.
        let (a, b) = if local.vip <= remote.vip {
            (&local, &remote)
        } else {
            (&remote, &local)
        };
        match ask.conn {
            Conn::Qp => index.decide(a, b, Connection::Qp),
            Conn::Ud => index.decide(a, b, Connection::Ud),
            Conn::Cm {
                outbound,
                space,
                port,
            } => {
                let conn = Connection::Cm { space, port };
                if outbound {
                    index.decide(&local, &remote, conn)
                } else {
                    index.decide(&remote, &local, conn)
                }
            }
        }
    }

    /// NetworkPolicy's tcp/udp rules for the local endpoint at `vip`, which
    /// is `pod` (its own config's word, so that an endpoint being added,
    /// not yet in the registry, is filtered as its pod from its first
    /// ruleset): its pod's policies, with `vni_endpoints` (its VNI's, from
    /// `Registry::pods_in`) as the peers their selectors choose from
    /// (`enforce::firewall` renders them).
    pub fn flows(
        &self,
        vip: Ipv4Addr,
        pod: &Option<(String, String)>,
        vni_endpoints: &[(Ipv4Addr, Option<(String, String)>)],
    ) -> PodFlows {
        let others: Vec<Endpoint> = vni_endpoints.iter().map(|(v, p)| end(*v, p)).collect();
        self.read().flows(&end(vip, pod), &others)
    }

    /// Whether `change` may alter the verdict between `ends`.
    pub fn touches(change: &Change, ask: &Ask, ends: &Ends) -> bool {
        let [local, remote] = endpoints(ask, ends);
        change.may_change(&local, &remote)
    }
}

/// The pods (namespace, name) at an `Ask`'s local and remote vIPs.
pub type Ends = [Option<(String, String)>; 2];

/// A registry's (vIP, pod) as NetworkPolicy's endpoint.
fn end(vip: Ipv4Addr, pod: &Option<(String, String)>) -> Endpoint<'_> {
    Endpoint {
        pod: pod.as_ref().map(|(ns, n)| (ns.as_str(), n.as_str())),
        vip,
    }
}

fn endpoints<'a>(ask: &Ask, ends: &'a Ends) -> [Endpoint<'a>; 2] {
    [end(ask.local, &ends[0]), end(ask.remote, &ends[1])]
}

#[cfg(test)]
mod tests {
    use super::*;
    use masq_policy::netpol::{Flows, Namespace, NetworkPolicy, Pod};

    /// The registry holds no endpoint of the VNI yet, as when an endpoint
    /// is being added.
    #[test]
    fn an_endpoint_not_yet_registered_is_filtered_as_its_pod() {
        let np = NetworkPolicies::default();
        let deny = NetworkPolicy::from_json(
            r#"{"metadata": {"namespace": "team", "name": "deny"},
                "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}"#,
        )
        .expect("policy");
        np.replace(Snapshot {
            namespaces: vec![Namespace::new("team", Default::default())],
            pods: vec![Pod::new("team", "db", Default::default())],
            policies: vec![deny],
        });
        let vip = Ipv4Addr::new(10, 0, 0, 2);
        let db = Some(("team".to_string(), "db".to_string()));
        let flows = np.flows(vip, &db, &[]);
        assert!(
            matches!(&flows.ingress, Flows::Isolated { pod, rules } if &**pod == "team/db" && rules.is_empty()),
            "{flows:?}"
        );
        assert_eq!(flows.egress, Flows::Open);
        let other = np.flows(vip, &None, &[]);
        assert_eq!((other.ingress, other.egress), (Flows::Open, Flows::Open));
    }
}
