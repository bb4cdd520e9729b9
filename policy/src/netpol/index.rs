//! The index decisions read: per namespace its labels, pods and policies,
//! and per pod the policies that select it for ingress and for egress, in
//! name order. A decision then reads only the policies of its two pods.
//!
//! Updates re-index only what they change: a pod's labels are matched
//! against its namespace's policies; a policy's `podSelector` against its
//! namespace's pods; a namespace's labels are read at decision time
//! (`namespaceSelector`) and index nothing.

use super::object::{Namespace, NetworkPolicy, Pod};
use super::selector::Labels;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Everything the controller mirrored, at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub namespaces: Vec<Namespace>,
    pub pods: Vec<Pod>,
    pub policies: Vec<NetworkPolicy>,
}

/// A pod as indexed.
#[derive(Clone, Debug)]
pub(crate) struct PodEntry {
    /// `namespace/name`, for verdicts.
    pub key: Arc<str>,
    pub labels: Labels,
    /// The policies of its namespace that select it and isolate it for
    /// ingress (egress), sorted by name.
    pub ingress: Vec<Arc<NetworkPolicy>>,
    pub egress: Vec<Arc<NetworkPolicy>>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct NsEntry {
    /// `None` until the Namespace itself is mirrored (its pods or policies
    /// may arrive first).
    pub labels: Option<Labels>,
    pub pods: HashMap<String, PodEntry>,
    pub policies: BTreeMap<String, Arc<NetworkPolicy>>,
}

impl NsEntry {
    fn is_unused(&self) -> bool {
        self.labels.is_none() && self.pods.is_empty() && self.policies.is_empty()
    }
}

/// NetworkPolicy's index for masq's decisions ([`Index::decide`]). Updates
/// take microseconds, so a lock around it suits better than a copy per
/// update; a clone copies the pods' labels and shares the policies.
#[derive(Clone, Debug, Default)]
pub struct Index {
    pub(crate) namespaces: HashMap<String, NsEntry>,
}

/// Where `policy` goes in a pod's list sorted by name.
fn insert_sorted(list: &mut Vec<Arc<NetworkPolicy>>, policy: &Arc<NetworkPolicy>) {
    match list.binary_search_by(|p| p.name.as_str().cmp(&policy.name)) {
        Ok(i) => list[i] = policy.clone(),
        Err(i) => list.insert(i, policy.clone()),
    }
}

fn remove_named(list: &mut Vec<Arc<NetworkPolicy>>, name: &str) {
    if let Ok(i) = list.binary_search_by(|p| p.name.as_str().cmp(name)) {
        list.remove(i);
    }
}

fn selecting(
    policies: &BTreeMap<String, Arc<NetworkPolicy>>,
    labels: &Labels,
) -> (Vec<Arc<NetworkPolicy>>, Vec<Arc<NetworkPolicy>>) {
    let (mut ingress, mut egress) = (Vec::new(), Vec::new());
    for p in policies.values() {
        if (p.isolates_ingress || p.isolates_egress) && p.pod_selector.matches(labels) {
            if p.isolates_ingress {
                ingress.push(p.clone());
            }
            if p.isolates_egress {
                egress.push(p.clone());
            }
        }
    }
    (ingress, egress)
}

impl Index {
    /// An index of `snapshot`. Of two objects with one name, the later
    /// counts.
    pub fn build(snapshot: Snapshot) -> Index {
        let mut index = Index::default();
        for ns in snapshot.namespaces {
            index.upsert_namespace(ns);
        }
        // Policies before pods, so each pod is matched once.
        for p in snapshot.policies {
            let ns = index.namespaces.entry(p.namespace.clone()).or_default();
            ns.policies.insert(p.name.clone(), Arc::new(p));
        }
        for pod in snapshot.pods {
            index.upsert_pod(pod);
        }
        index
    }

    /// Adds a namespace or changes its labels.
    pub fn upsert_namespace(&mut self, ns: Namespace) {
        self.namespaces.entry(ns.name).or_default().labels = Some(ns.labels);
    }

    /// Forgets a namespace's labels (its pods and policies stay until they
    /// are removed, as the API server removes them).
    pub fn remove_namespace(&mut self, name: &str) {
        if let Some(ns) = self.namespaces.get_mut(name) {
            ns.labels = None;
            if ns.is_unused() {
                self.namespaces.remove(name);
            }
        }
    }

    /// Adds a pod or changes its labels: matched against its namespace's
    /// policies only.
    pub fn upsert_pod(&mut self, pod: Pod) {
        let ns = self.namespaces.entry(pod.namespace.clone()).or_default();
        let (ingress, egress) = selecting(&ns.policies, &pod.labels);
        let entry = PodEntry {
            key: format!("{}/{}", pod.namespace, pod.name).into(),
            labels: pod.labels,
            ingress,
            egress,
        };
        ns.pods.insert(pod.name, entry);
    }

    pub fn remove_pod(&mut self, namespace: &str, name: &str) {
        if let Some(ns) = self.namespaces.get_mut(namespace) {
            ns.pods.remove(name);
            if ns.is_unused() {
                self.namespaces.remove(namespace);
            }
        }
    }

    /// Adds or replaces a policy: its `podSelector` is matched against its
    /// namespace's pods only.
    pub fn upsert_policy(&mut self, policy: NetworkPolicy) {
        let policy = Arc::new(policy);
        let ns = self.namespaces.entry(policy.namespace.clone()).or_default();
        let replaced = ns
            .policies
            .insert(policy.name.clone(), policy.clone())
            .is_some();
        for pod in ns.pods.values_mut() {
            if replaced {
                remove_named(&mut pod.ingress, &policy.name);
                remove_named(&mut pod.egress, &policy.name);
            }
            if policy.pod_selector.matches(&pod.labels) {
                if policy.isolates_ingress {
                    insert_sorted(&mut pod.ingress, &policy);
                }
                if policy.isolates_egress {
                    insert_sorted(&mut pod.egress, &policy);
                }
            }
        }
    }

    pub fn remove_policy(&mut self, namespace: &str, name: &str) {
        let Some(ns) = self.namespaces.get_mut(namespace) else {
            return;
        };
        if ns.policies.remove(name).is_none() {
            return;
        }
        for pod in ns.pods.values_mut() {
            remove_named(&mut pod.ingress, name);
            remove_named(&mut pod.egress, name);
        }
        if ns.is_unused() {
            self.namespaces.remove(namespace);
        }
    }

    /// How many pods and policies it holds.
    pub fn counts(&self) -> (usize, usize) {
        self.namespaces.values().fold((0, 0), |(pods, pols), ns| {
            (pods + ns.pods.len(), pols + ns.policies.len())
        })
    }

    /// The policies isolating a pod for ingress and for egress, by name
    /// (`None`: no such pod), for operators asking why.
    pub fn policies_of(&self, namespace: &str, name: &str) -> Option<(Vec<&str>, Vec<&str>)> {
        let pod = self.namespaces.get(namespace)?.pods.get(name)?;
        fn names(l: &[Arc<NetworkPolicy>]) -> Vec<&str> {
            l.iter().map(|p| p.name.as_str()).collect()
        }
        Some((names(&pod.ingress), names(&pod.egress)))
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
pub(super) mod tests;
