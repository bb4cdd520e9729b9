//! The security groups' policy as masqd puts it in force: from a file
//! (`masqctl policy apply`, SIGHUP), from a source (the config file, the
//! cluster), and again whenever the set of endpoints changes. Every path
//! holds `policy_ops` (`Parts::policy_change`) from resolving the policy to putting it in force.

use crate::cluster::source::Store;
use crate::config::EndpointConfig;
use crate::endpoints::placement::{Placement, SourceId};
use crate::error::{Error, Result};
use crate::tenants::parts::Parts;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Instant;
use tracing::{debug, info, warn};

/// A refused apply says that nothing changed; who must act stays.
fn not_changed(e: impl Into<Error>) -> Error {
    let e = e.into();
    let said = format!("{e}\npolicy not changed");
    match e {
        Error::Invalid(_) | Error::InFile { .. } => Error::Invalid(said),
        _ => Error::Failed(said),
    }
}

impl Parts {
    /// SIGHUP: the configured policy file read again, as `apply_policy_text`.
    pub fn apply_policy_file(&self, path: &Path) -> Result<Value> {
        let (text, file) = masq_policy::Policy::read(path)
            .map_err(|e| not_changed(Error::Invalid(e.to_string())))?;
        self.apply_policy_text(&text, &file)
    }

    /// `masqctl policy apply` (the text masqctl read from `file`): check
    /// it, then in cluster mode write it for every host (compare-and-swap:
    /// a concurrent apply elsewhere makes this one fail), and apply it here.
    pub fn apply_policy_text(&self, text: &str, file: &str) -> Result<Value> {
        let _one_at_a_time = self.policy_change();
        let refs = self.registry().policy_refs();
        let (p, unknown) = self
            .admission()
            .check_text(text, file, &refs)
            .map_err(not_changed)?;
        let Some(c) = self.cluster() else {
            let mut v = self.apply_policy(p).map_err(not_changed)?;
            v["unknown_endpoints"] = json!(unknown);
            return Ok(v);
        };
        let rev = c.put_policy(p.text(), p.file()).map_err(not_changed)?;
        let mut v = self.apply_policy(p)?;
        c.status_changed();
        v["cluster_revision"] = json!(rev);
        v["unknown_endpoints"] = json!(unknown);
        Ok(v)
    }

    /// Apply a validated policy: its tcp/udp rules first (one nftables
    /// transaction; on failure nothing changes), then the RDMA side, and
    /// reset what it no longer allows.
    pub fn apply_policy(&self, policy: masq_policy::Policy) -> Result<Value> {
        let started = Instant::now();
        let ruleset = {
            let flows = self.netpol_flows(&policy);
            crate::enforce::firewall::render(&policy, &self.registry().configs(), &flows)
        };
        ruleset.and_then(|r| crate::enforce::firewall::load(&r))?;
        let file = policy.file().to_string();
        let applied = self.admission().apply(policy, self.registry());
        self.metrics().policy_applied_now();
        let reset = self.reset_denied(&applied.to_reset, "policy change");
        // Under `keep`, established tcp/udp flows stay too (stateful
        // security groups); otherwise their kernel entries go.
        let flows = match (applied.keep, self.admission().active()) {
            (false, Some(p)) => {
                crate::enforce::kconntrack::drop_denied(&p, &self.registry().configs())
            }
            _ => 0,
        };
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        info!(file = %file, version = %applied.version, reset, flows, keep = applied.keep,
              "policy applied in {ms:.2} ms");
        Ok(
            json!({ "version": applied.version, "reset": reset, "flows_reset": flows,
                "keep": applied.keep, "elapsed_ms": ms }),
        )
    }

    /// For one render of vNIC rulesets under `policy`: the Kubernetes
    /// NetworkPolicy rules of a local endpoint whose tenant enforces it.
    /// A VNI's endpoints are listed once per render, not once per endpoint
    /// of it (each listing copies every pod of the VNI, cluster-wide).
    pub(crate) fn netpol_flows<'a>(
        &'a self,
        policy: &'a masq_policy::Policy,
    ) -> impl Fn(&EndpointConfig) -> Option<masq_policy::netpol::PodFlows> + 'a {
        type Listed = Vec<(Ipv4Addr, Option<(String, String)>)>;
        let vnis: RefCell<HashMap<u32, Listed>> = RefCell::default();
        move |e| {
            if !policy.enforces_network_policy(&e.tenant) {
                return None;
            }
            let mut vnis = vnis.borrow_mut();
            let listed = vnis
                .entry(e.vni)
                .or_insert_with(|| self.registry().pods_in(e.vni));
            Some(self.admission().netpol.flows(e.vip, &e.pod(), listed))
        }
    }

    /// NetworkPolicy's tcp/udp rules follow pods, labels, policies and
    /// endpoints: asks the `netpol-firewall` thread to render them again
    /// (`load_netpol_firewall`), when some tenant enforces NetworkPolicy.
    fn netpol_firewall(&self, why: &str) {
        if self
            .admission()
            .active()
            .is_some_and(|p| p.any_network_policy())
        {
            self.netpol_firewall_asks().ask(why);
        }
    }

    /// The vNIC rulesets of the local endpoints whose tenant enforces
    /// NetworkPolicy, rendered from the state of now and loaded, one
    /// nftables transaction; `asks` changes asked for it.
    pub(crate) fn load_netpol_firewall(&self, why: &str, asks: usize) {
        // Under policy_ops: a policy applied meanwhile renders the same
        // tables, and the one rendered last must be the newest.
        let _one_at_a_time = self.policy_change();
        // Stopping, masqd removes its tables under policy_ops too.
        if self.run().is_stopping() {
            return;
        }
        let Some(policy) = self.admission().active() else {
            return;
        };
        let mut enforcing = self.registry().configs();
        enforcing.retain(|e| policy.enforces_network_policy(&e.tenant));
        if enforcing.is_empty() {
            return;
        }
        let started = Instant::now();
        let flows = self.netpol_flows(&policy);
        match crate::enforce::firewall::render(&policy, &enforcing, &flows)
            .and_then(|r| crate::enforce::firewall::load(&r))
        {
            Ok(()) => debug!(
                endpoints = enforcing.len(),
                asks,
                ms = started.elapsed().as_secs_f64() * 1000.0,
                "{why}: NetworkPolicy's tcp/udp rules loaded again"
            ),
            Err(e) => warn!(
                asks,
                "{why}: NetworkPolicy's tcp/udp rules not changed: {e}"
            ),
        }
    }

    /// Move the QPs of connections a change now denies to ERROR.
    fn reset_denied(&self, denied: &[rconntrack::Entry], why: &str) -> usize {
        self.sessions()
            .reset(self.admission(), self.first_device().driver_id, denied, why)
    }

    /// The set of known endpoints changed (here or on another host):
    /// policies resolve names against the new one, the active one again.
    /// `changed` names the endpoints that came or went (empty: any).
    pub fn rebind_policy(&self, why: &str, changed: &[&str]) {
        let _one_at_a_time = self.policy_change();
        let refs = || self.registry().policy_refs();
        if let Some((policy, dangling)) = self.admission().rebind(refs, changed) {
            if !dangling.is_empty() {
                warn!("{why}: the policy names endpoint(s) no VPC has now, matching nothing until they are back: {}", dangling.join(", "));
            }
            if let Err(e) = self.apply_policy(policy) {
                warn!("{why}: policy not resolved again: {e}");
            }
        } else {
            // The endpoints NetworkPolicy's selectors choose from changed.
            self.netpol_firewall(why);
        }
    }
}

/// The daemon as its sources feed it (`source.rs`).
impl Store for Parts {
    fn placements(&self, from: SourceId, all: Vec<Placement>) {
        let n = all.len();
        for why in self.registry().feed(from, all) {
            warn!("{from}: {why}; left out of the VPC map");
        }
        info!("{from}: {n} endpoint(s) placed in the VPC map");
        self.rebind_policy(&format!("{from} view read"), &[]);
    }

    fn placed(&self, from: SourceId, p: Placement) {
        let (name, host, vni, vip) = (p.name.clone().unwrap_or_default(), p.host, p.vni, p.vip);
        let change = self.registry().place(from, p);
        if let Some(why) = &change.refused {
            warn!("{from}: {why}; left out of the VPC map");
        }
        if change.names.is_empty() {
            if change.refused.is_none() {
                debug!(endpoint = %name, %host, "{from}: endpoint placed again, unchanged");
            }
            return;
        }
        info!(endpoint = %name, %host, vni, %vip, changed = ?change.names, "{from}: endpoint up");
        let changed: Vec<&str> = change.names.iter().map(String::as_str).collect();
        self.rebind_policy(&format!("endpoint {name} up on {host}"), &changed);
    }

    fn unplaced(&self, from: SourceId, host: Ipv4Addr, name: &str) {
        let change = self.registry().unplace(from, host, name);
        if !change.names.is_empty() {
            info!(endpoint = name, %host, changed = ?change.names, "{from}: endpoint gone");
            let changed: Vec<&str> = change.names.iter().map(String::as_str).collect();
            self.rebind_policy(&format!("endpoint {name} gone from {host}"), &changed);
        }
    }

    fn policy(&self, from: SourceId, text: &str, file: &str) -> Result<()> {
        let _one_at_a_time = self.policy_change();
        let (p, dangling) =
            self.admission()
                .check_text(text, file, &self.registry().policy_refs())?;
        if !dangling.is_empty() {
            // Normal in a cluster (hosts come and go); a typo in a file.
            let names = dangling.join(", ");
            match from {
                SourceId::Cluster => info!("{from}: the policy names endpoints not known here now: {names}"),
                SourceId::File => warn!("policy names endpoint(s) not known now, matching nothing until they are: {names}"),
            }
        }
        let active = self.admission().active();
        if active.is_some_and(|a| a.version_hash() == p.version_hash()) {
            return Ok(());
        }
        self.apply_policy(p)?;
        if let Some(c) = self.cluster() {
            c.status_changed();
        }
        Ok(())
    }

    fn mirrored_all(&self, all: masq_policy::netpol::Snapshot) {
        let (pods, policies) = (all.pods.len(), all.policies.len());
        let applied = self.admission().mirrored_all(all, self.registry());
        self.netpol_firewall("NetworkPolicy read again");
        let reset = self.reset_denied(&applied.to_reset, "NetworkPolicy read again");
        info!(
            pods,
            networkpolicies = policies,
            reset,
            "cluster: Kubernetes' NetworkPolicy mirror read"
        );
    }

    fn mirrored(&self, m: crate::admit::Mirrored) {
        let what = m.describe();
        let applied = self.admission().mirrored(m, self.registry());
        self.netpol_firewall(&format!("Kubernetes {what}"));
        let reset = self.reset_denied(&applied.to_reset, "NetworkPolicy change");
        if applied.to_reset.is_empty() {
            debug!(reset, keep = applied.keep, "cluster: Kubernetes {what}");
        } else {
            info!(
                reset,
                keep = applied.keep,
                denied = applied.to_reset.len(),
                "cluster: Kubernetes {what}"
            );
        }
    }

    fn local_endpoints(&self) -> Vec<crate::config::EndpointConfig> {
        self.registry().configs()
    }

    fn policy_version(&self) -> Option<String> {
        self.admission()
            .active()
            .map(|p| p.version_hash().to_string())
    }

    fn file_policy(&self) -> Option<(String, String)> {
        self.admission().path.as_ref()?;
        let p = self.admission().active()?;
        Some((p.text().to_string(), p.file().to_string()))
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
