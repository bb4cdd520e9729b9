//! Security groups applied to RDMA connections: the decision at RTR, the
//! RConntrack table of admitted connections, and policy changes (check,
//! atomic apply, re-evaluation of what is tracked). For tenants whose
//! policy says `kubernetes.networkPolicy`, the cluster's NetworkPolicy
//! (`netpol`) must allow a connection too, and its changes re-evaluate
//! what they may change.

use crate::admit::{Ask, Denied, Mirrored, Pods};
use crate::config::Config;
use crate::enforce::netpol::{Ends, NetworkPolicies};
use crate::error::{Error, Result};
use crate::pipeline::ports::{Conntrack, Decide, Removal};
use masq_policy::{EndpointRef, OnRuleChange, Policy};
use rconntrack::{Decision, Entry, LocalKey, QpKey, State, Table, TableFull, Upsert};
use std::net::Ipv4Addr;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard};

use crate::enforce::backstop::Backstop;

pub struct Admission {
    /// The policy file named by the config, for SIGHUP.
    pub path: Option<PathBuf>,
    /// None: no policy configured, every pair in a VPC may connect.
    policy: RwLock<Option<Arc<Policy>>>,
    table: Mutex<Table>,
    /// Held shared from an admission decision until its entry is in the
    /// table, and exclusively by `apply`: a QP admitted under the old rules
    /// is either in the table when they are re-evaluated or decided under
    /// the new ones, never lost in between.
    gate: RwLock<()>,
    /// Kernel sets that mirror the table (software RoCE).
    backstop: OnceLock<Backstop>,
    /// Decisions counted by tenant, verdict and rule.
    pub metrics: crate::metrics::Metrics,
    /// The cluster's NetworkPolicy, as mirrored.
    pub netpol: NetworkPolicies,
}

/// The locked table. Dropping it mirrors what changed into the backstop,
/// still under the lock, so the kernel sees changes in table order and no
/// path that edits the table can forget to.
pub struct TableGuard<'a> {
    table: MutexGuard<'a, Table>,
    backstop: Option<&'a Backstop>,
    removal: Removal,
}

impl Deref for TableGuard<'_> {
    type Target = Table;
    fn deref(&self) -> &Table {
        &self.table
    }
}

impl DerefMut for TableGuard<'_> {
    fn deref_mut(&mut self) -> &mut Table {
        &mut self.table
    }
}

impl Drop for TableGuard<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.backstop {
            b.apply(&self.table.take_journal(), self.removal);
        }
    }
}

/// What a policy change did.
#[derive(Debug, Default)]
pub struct Applied {
    pub version: String,
    pub keep: bool,
    /// Connections the new policy no longer allows (already marked
    /// RESET_BY_POLICY; the caller moves their QPs to ERROR).
    pub to_reset: Vec<Entry>,
}

impl Admission {
    /// No policy yet (every pair in a VPC may connect): a source gives one
    /// (`source.rs`). `path` is the config's policy file, for SIGHUP.
    pub fn new(cfg: &Config, config_dir: &Path) -> Admission {
        Admission {
            path: cfg.policy.as_ref().map(|p| config_dir.join(p)),
            policy: RwLock::new(None),
            table: Mutex::new(Table::new()),
            gate: RwLock::new(()),
            backstop: OnceLock::new(),
            metrics: crate::metrics::Metrics::default(),
            netpol: NetworkPolicies::default(),
        }
    }

    pub fn table(&self) -> TableGuard<'_> {
        TableGuard {
            table: self.table.lock().unwrap_or_else(|e| e.into_inner()),
            backstop: self.backstop.get(),
            removal: Removal::Now,
        }
    }

    /// `table`, to remove the entries of QPs that are gone: their backstop
    /// deletions may wait for others (`Removal::Gone`).
    pub fn table_of_gone_qps(&self) -> TableGuard<'_> {
        let mut t = self.table();
        t.removal = Removal::Gone;
        t
    }

    /// From now on every table change is mirrored into `b` (set once, at
    /// start, while the table is empty).
    pub fn set_backstop(&self, b: Backstop) {
        let mut table = self.table();
        table.enable_journal();
        if self.backstop.set(b).is_err() {
            tracing::warn!("backstop set twice; the first one stays");
        }
    }

    pub fn backstop(&self) -> Option<&Backstop> {
        self.backstop.get()
    }

    /// Hold across decide -> MODIFY_QP -> table insert (see `gate`).
    pub fn admitting(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The traffic class to program for an app of `tenant` at `vip` that
    /// asked for `requested`: the policy's `qos` for it, else the app's.
    pub fn traffic_class(&self, tenant: &str, vni: u32, vip: Ipv4Addr, requested: u8) -> u8 {
        self.active()
            .and_then(|p| p.qos_of(tenant, vni, vip))
            .map_or(requested, |(q, _)| q.traffic_class(requested))
    }

    pub fn active(&self) -> Option<Arc<Policy>> {
        self.policy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Parse and compile a policy file against the VPC map, without
    /// applying it. Errors are file:line:column lines. Endpoints come and
    /// go (containers, other hosts), so a member naming one not known now
    /// is no error: it matches nothing until it is, and is returned so the
    /// operator sees it (a typo shows there).
    pub fn check(&self, path: &Path, endpoints: &[EndpointRef]) -> Result<(Policy, Vec<String>)> {
        Policy::load_allowing_unknown(path, endpoints)
            .map_err(|errs| Error::Invalid(errs.to_string()))
    }

    /// Parse and compile the cluster's policy text. It was checked where it
    /// was applied; an endpoint it names that this host does not know (yet)
    /// matches nothing here until it is, and is returned.
    pub fn check_text(
        &self,
        text: &str,
        file: &str,
        endpoints: &[EndpointRef],
    ) -> Result<(Policy, Vec<String>)> {
        Policy::parse_allowing_unknown(text, file, endpoints)
            .map_err(|errs| Error::Invalid(errs.to_string()))
    }

    /// The endpoints changed (`changed` names them; empty: any may have):
    /// if the active policy names one, it is resolved again against
    /// `endpoints()` and returned for the caller to apply, with the names it
    /// gives that are gone. A change it does not name costs nothing.
    pub fn rebind(
        &self,
        endpoints: impl FnOnce() -> Vec<EndpointRef>,
        changed: &[&str],
    ) -> Option<(Policy, Vec<String>)> {
        let affected = |p: &Policy| changed.is_empty() || changed.iter().any(|n| p.names(n));
        let active = self.active().filter(|p| affected(p))?;
        match active.rebind(&endpoints()) {
            Ok(r) => Some(r),
            Err(e) => {
                // Its text parsed before; only a bug gets here.
                tracing::warn!("active policy does not resolve again: {e}");
                None
            }
        }
    }

    /// The admitting rule for an RDMA connection local -> remote, or why
    /// not: the security groups' rule and, for a tenant that enforces it,
    /// NetworkPolicy's (`netpol:...`, see `Verdict::label`).
    pub fn decide(&self, ask: &Ask, pods: &dyn Pods) -> Result<Arc<str>, Denied> {
        let ends = || NetworkPolicies::ends(ask, pods);
        let verdict = self.verdict(self.active().as_deref(), ask, ends);
        self.metrics.admission(ask.tenant, verdict.as_deref().ok());
        verdict
    }

    /// `ends` says which pods the ends are, asked only for a tenant that
    /// enforces NetworkPolicy.
    fn verdict(
        &self,
        policy: Option<&Policy>,
        ask: &Ask,
        ends: impl FnOnce() -> Ends,
    ) -> Result<Arc<str>, Denied> {
        let Some(policy) = policy else {
            return Ok(Arc::from("no-policy"));
        };
        let v = policy.rdma_allowed(ask.tenant, ask.vni, ask.local, ask.remote);
        if !v.allowed {
            return Err(Denied {
                by: "security groups",
                why: v.to_string(),
            });
        }
        if !policy.enforces_network_policy(ask.tenant) {
            return Ok(Arc::from(v.rule()));
        }
        let np = self.netpol.decide(ask, &ends());
        if np.allowed {
            Ok(Arc::from(format!("{},{}", v.rule(), np.label())))
        } else {
            Err(Denied {
                by: "Kubernetes NetworkPolicy",
                why: format!("{} (security groups allow: {})", np.label(), v.rule()),
            })
        }
    }

    /// Swap in a new policy (all or nothing: it is already valid) and
    /// re-evaluate every tracked connection under it.
    pub fn apply(&self, policy: Policy, pods: &dyn Pods) -> Applied {
        let policy = Arc::new(policy);
        let keep = policy.on_rule_change() == OnRuleChange::Keep;
        let version = policy.version_hash().to_string();
        // Wait for admissions in flight to land in the table.
        let _gate = self.gate.write().unwrap_or_else(|e| e.into_inner());
        // Hold the table across the swap so no admission interleaves with
        // the re-evaluation under the old rules.
        let mut table = self.table();
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Some(policy.clone());
        let to_reset = table.reevaluate(|e| {
            let ask = Ask::of(e);
            self.again(&policy, keep, &ask, || NetworkPolicies::ends(&ask, pods))
        });
        Applied {
            version,
            keep,
            to_reset,
        }
    }

    /// A tracked connection decided again under `policy`: its new rule,
    /// `Deny`, or nothing to change (allowed as it was, or denied under
    /// `keep`).
    fn again(
        &self,
        policy: &Policy,
        keep: bool,
        ask: &Ask,
        ends: impl FnOnce() -> Ends,
    ) -> Option<Decision> {
        match self.verdict(Some(policy), ask, ends) {
            Ok(rule) => Some(Decision::Allow(rule)),
            Err(_) if keep => None,
            Err(_) => Some(Decision::Deny),
        }
    }

    /// The mirror changed one object: index it, and decide again the
    /// tracked connections of tenants that enforce NetworkPolicy whose
    /// verdict it may change (`onRuleChange` as for the policy).
    pub fn mirrored(&self, m: Mirrored, pods: &dyn Pods) -> Applied {
        let _gate = self.gate.write().unwrap_or_else(|e| e.into_inner());
        let mut table = self.table();
        let before = m.clone();
        let change = before.change();
        self.netpol.update(m);
        self.reevaluate_netpol(&mut table, pods, |ask, ends| {
            NetworkPolicies::touches(&change, ask, ends)
        })
    }

    /// The mirror's objects read whole (etcd's view): the index replaced,
    /// every connection of a tenant that enforces NetworkPolicy decided
    /// again.
    pub fn mirrored_all(
        &self,
        snapshot: masq_policy::netpol::Snapshot,
        pods: &dyn Pods,
    ) -> Applied {
        let _gate = self.gate.write().unwrap_or_else(|e| e.into_inner());
        let mut table = self.table();
        self.netpol.replace(snapshot);
        self.reevaluate_netpol(&mut table, pods, |_, _| true)
    }

    fn reevaluate_netpol(
        &self,
        table: &mut TableGuard,
        pods: &dyn Pods,
        affected: impl Fn(&Ask, &Ends) -> bool,
    ) -> Applied {
        let Some(policy) = self.active().filter(|p| p.any_network_policy()) else {
            return Applied::default();
        };
        let keep = policy.on_rule_change() == OnRuleChange::Keep;
        let to_reset = table.reevaluate(|e| {
            if !policy.enforces_network_policy(&e.tenant) {
                return None;
            }
            let ask = Ask::of(e);
            let ends = NetworkPolicies::ends(&ask, pods);
            if !affected(&ask, &ends) {
                return None;
            }
            self.again(&policy, keep, &ask, || ends)
        });
        Applied {
            version: policy.version_hash().to_string(),
            keep,
            to_reset,
        }
    }
}

/// The verbs pipelines' questions to the policy: its own methods.
impl Decide for Admission {
    fn decide(&self, ask: &Ask, pods: &dyn Pods) -> Result<Arc<str>, Denied> {
        Admission::decide(self, ask, pods)
    }
    fn traffic_class(&self, tenant: &str, vni: u32, vip: Ipv4Addr, requested: u8) -> u8 {
        Admission::traffic_class(self, tenant, vni, vip, requested)
    }
    fn admitting(&self) -> RwLockReadGuard<'_, ()> {
        Admission::admitting(self)
    }
}

/// The table as the verbs pipelines use it: one `table()` guard per call,
/// whose drop hands the change to the backstop under the table's lock.
impl Conntrack for Admission {
    fn held(&self, vni: u32, vip: Ipv4Addr, except: QpKey) -> usize {
        let table = self.table();
        let mine = table
            .get(except)
            .is_some_and(|e| (e.vni, e.local_vip) == (vni, vip));
        table.held_by(vni, vip) - usize::from(mine)
    }
    fn upsert_within(&self, e: Entry, max: usize) -> Result<Upsert, Option<usize>> {
        let mut table = self.table();
        if table.get(e.key()).is_none() {
            let held = table.held_by(e.vni, e.local_vip);
            if held >= max {
                return Err(Some(held));
            }
        }
        table.upsert(e).map_err(|_| None)
    }
    fn get(&self, key: QpKey) -> Option<Entry> {
        self.table().get(key).cloned()
    }
    fn upsert(&self, e: Entry) -> Result<Upsert, TableFull> {
        self.table().upsert(e)
    }
    fn set_state(&self, key: QpKey, state: State) -> bool {
        self.table().set_state(key, state)
    }
    fn remove(&self, key: QpKey) -> Option<Entry> {
        self.table().remove(key)
    }
    fn forget(&self, key: QpKey) -> Option<Entry> {
        self.table_of_gone_qps().remove(key)
    }
    fn tracks_local(&self, lk: LocalKey) -> bool {
        self.table().get_local(lk).is_some()
    }
    fn set_cm(&self, lk: LocalKey, side: rconntrack::CmSide) {
        let mut table = self.table();
        if let Some(mut e) = table.get_local(lk).cloned() {
            e.cm = Some(side);
            let _ = table.upsert(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::Conn;
    use masq_policy::netpol::{Namespace, NetworkPolicy, Pod, PortSpace};
    use std::collections::HashMap;

    fn examples() -> (Config, PathBuf) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let cfg = Config::load(&dir.join("host1.yaml")).unwrap_or_else(|e| panic!("{e}"));
        (cfg, dir)
    }

    fn refs(cfg: &Config) -> Vec<EndpointRef> {
        let r = crate::endpoints::registry::Registry::new(cfg);
        let file = crate::endpoints::placement::SourceId::File;
        assert!(r
            .feed(file, crate::cluster::source::file_placements(cfg))
            .is_empty());
        r.policy_refs()
    }

    /// Which pods are at which vIPs (of any VNI), as a registry says.
    #[derive(Default)]
    struct PodMap(HashMap<Ipv4Addr, (String, String)>);

    impl Pods for PodMap {
        fn pod_at(&self, _: u32, vip: Ipv4Addr) -> Option<(String, String)> {
            self.0.get(&vip).cloned()
        }
    }

    impl PodMap {
        fn with(pods: &[(&str, &str, &str)]) -> PodMap {
            PodMap(
                pods.iter()
                    .map(|(vip, ns, name)| (ip(vip), (ns.to_string(), name.to_string())))
                    .collect(),
            )
        }
    }

    /// The admission as the file source leaves it at start.
    fn admission(cfg: &Config, dir: &Path) -> crate::error::Result<Admission> {
        let a = Admission::new(cfg, dir);
        if let Some(path) = &a.path {
            let (p, _) = a.check(path, &refs(cfg))?;
            a.apply(p, &PodMap::default());
        }
        Ok(a)
    }

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().expect("ip")
    }

    fn ask<'a>(tenant: &'a str, vni: u32, local: &str, remote: &str, conn: Conn) -> Ask<'a> {
        Ask {
            tenant,
            vni,
            local: ip(local),
            remote: ip(remote),
            conn,
        }
    }

    /// A verbs QP local -> remote, decided with no pods known.
    fn qp(
        a: &Admission,
        tenant: &str,
        vni: u32,
        local: &str,
        remote: &str,
    ) -> Result<Arc<str>, String> {
        a.decide(
            &ask(tenant, vni, local, remote, Conn::Qp),
            &PodMap::default(),
        )
        .map_err(|d| d.to_string())
    }

    #[test]
    fn the_example_policy_admits_its_pairs_and_nothing_else() {
        let (cfg, dir) = examples();
        let a = admission(&cfg, &dir).unwrap_or_else(|e| panic!("{e}"));
        let rule = qp(&a, "acme", 100, "10.0.0.1", "10.0.0.2");
        assert_eq!(
            rule.as_deref(),
            Ok("acme/clients/egress(all)+acme/servers/ingress[0]")
        );
        // The reverse direction holds too: the predicate is symmetric.
        assert!(qp(&a, "acme", 100, "10.0.0.2", "10.0.0.1").is_ok());
        assert!(qp(&a, "globex", 200, "10.0.0.1", "10.0.0.2").is_ok());
        let denied = qp(&a, "acme", 100, "10.0.0.1", "10.0.0.9");
        assert!(denied.unwrap_err().contains("default-deny"));
    }

    /// `policy apply` sends the text: its errors still name the file masqctl
    /// read and the line.
    #[test]
    fn a_policy_text_is_checked_with_its_file_named_in_errors() {
        let (cfg, dir) = examples();
        let a = admission(&cfg, &dir).unwrap_or_else(|e| panic!("{e}"));
        let path = dir.join(cfg.policy.as_ref().expect("the example has a policy"));
        let text = std::fs::read_to_string(&path).expect("example policy");
        let (p, _) = a
            .check_text(&text, "policy.yaml", &refs(&cfg))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.file(), "policy.yaml");
        let broken = format!("{text}\nbogusKey: 1\n");
        let line = broken.lines().count();
        let e = a
            .check_text(&broken, "<stdin>", &refs(&cfg))
            .expect_err("an unknown key")
            .to_string();
        assert!(e.contains(&format!("<stdin>:{line}:")), "{e}");
    }

    #[test]
    fn without_a_policy_every_pair_is_admitted() {
        let (mut cfg, dir) = examples();
        cfg.policy = None;
        let a = admission(&cfg, &dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            qp(&a, "acme", 100, "10.0.0.1", "10.0.0.9").as_deref(),
            Ok("no-policy")
        );
    }

    #[test]
    fn apply_resets_what_the_new_policy_denies_unless_keep() {
        let (cfg, dir) = examples();
        let a = admission(&cfg, &dir).unwrap_or_else(|e| panic!("{e}"));
        a.table()
            .upsert(Entry {
                session: 1,
                qp_handle: 7,
                tenant: Arc::from("acme"),
                vni: 100,
                local_vip: ip("10.0.0.1"),
                local_qpn: 17,
                remote_vip: ip("10.0.0.2"),
                remote_qpn: 18,
                ..Default::default()
            })
            .expect("room");
        let revoked = dir.join("../integration/tests/configs/policy/policy-revoked.yaml");
        let keep = dir.join("../integration/tests/configs/policy/policy-revoked-keep.yaml");
        let none = PodMap::default();
        let out = a.apply(a.check(&keep, &refs(&cfg)).expect("valid").0, &none);
        assert!(out.keep && out.to_reset.is_empty());
        let out = a.apply(a.check(&revoked, &refs(&cfg)).expect("valid").0, &none);
        assert_eq!(out.to_reset.len(), 1);
        assert_eq!(out.to_reset[0].local_qpn, 17);
    }

    /// Tenant acme enforces NetworkPolicy; its one group admits all, so
    /// what is decided is NetworkPolicy's. Pods: team/cli (10.0.0.1),
    /// team/db (10.0.0.2), other/cli (10.0.0.3).
    fn enforcing(on_rule_change: &str) -> (Admission, PodMap) {
        let (cfg, dir) = examples();
        let a = Admission::new(&cfg, &dir);
        let text = format!(
            "version: 1\nonRuleChange: {on_rule_change}\ntenants:\n  acme:\n    kubernetes:\n      \
             namespaces: [team, other]\n      networkPolicy: true\n    securityGroups:\n      \
             all:\n        members: [10.0.0.0/24]\n        ingress:\n          \
             - {{ from: {{ cidr: 10.0.0.0/24 }}, protocol: all }}\n"
        );
        let pods = PodMap::with(&[
            ("10.0.0.1", "team", "cli"),
            ("10.0.0.2", "team", "db"),
            ("10.0.0.3", "other", "cli"),
        ]);
        let (p, _) = a
            .check_text(&text, "np.yaml", &[])
            .unwrap_or_else(|e| panic!("{e}"));
        a.apply(p, &pods);
        let labels = |k: &str, v: &str| [(k.to_string(), v.to_string())].into_iter().collect();
        a.mirrored(
            Mirrored::Namespace(Namespace::new("team", labels("team", "yes"))),
            &pods,
        );
        a.mirrored(
            Mirrored::Namespace(Namespace::new("other", labels("team", "no"))),
            &pods,
        );
        for (ns, name) in [("team", "cli"), ("team", "db"), ("other", "cli")] {
            a.mirrored(
                Mirrored::Pod(Pod::new(ns, name, labels("app", name))),
                &pods,
            );
        }
        (a, pods)
    }

    /// team/db talks to its own namespace only, both ways: with `ports`,
    /// it admits ingress on those alone. (A verbs QP is admitted when
    /// either end may begin it, so an end isolated for ingress alone
    /// still takes one from a pod it may reach.)
    fn db_policy(ports: &str) -> Mirrored {
        let text = format!(
            r#"{{"metadata":{{"namespace":"team","name":"db-in"}},
               "spec":{{"podSelector":{{"matchLabels":{{"app":"db"}}}},
                        "policyTypes":["Ingress","Egress"],
                        "ingress":[{{"from":[{{"podSelector":{{}}}}]{ports}}}],
                        "egress":[{{"to":[{{"podSelector":{{}}}}]}}]}}}}"#
        );
        Mirrored::Policy(NetworkPolicy::from_json(&text).unwrap_or_else(|e| panic!("{e}")))
    }

    fn track(a: &Admission, handle: u32, local: &str, remote: &str, rule: &str) {
        a.table()
            .upsert(Entry {
                session: 1,
                qp_handle: handle,
                tenant: Arc::from("acme"),
                vni: 100,
                local_vip: ip(local),
                local_qpn: 16 + handle,
                remote_vip: ip(remote),
                remote_qpn: 32 + handle,
                rule: Arc::from(rule),
                ..Default::default()
            })
            .expect("room");
    }

    #[test]
    fn network_policy_decides_an_enforcing_tenants_qps_beside_its_groups() {
        let (a, pods) = enforcing("reset");
        let decide = |local, remote, conn| {
            a.decide(&ask("acme", 100, local, remote, conn), &pods)
                .map(|r| r.to_string())
        };
        // No policy selects a pod: every pair is open, and says so.
        assert_eq!(
            decide("10.0.0.3", "10.0.0.2", Conn::Qp).as_deref(),
            Ok("acme/all/egress(all)+acme/all/ingress[0],netpol:none")
        );
        a.mirrored(db_policy(""), &pods);
        assert_eq!(
            decide("10.0.0.1", "10.0.0.2", Conn::Qp).as_deref(),
            Ok("acme/all/egress(all)+acme/all/ingress[0],netpol:team/db-in/ingress[0]")
        );
        // Either end may ask: the pair is decided, not who began, and both
        // hosts' verdicts name the same rules.
        assert_eq!(
            decide("10.0.0.2", "10.0.0.1", Conn::Qp),
            decide("10.0.0.1", "10.0.0.2", Conn::Qp)
        );
        let denied = decide("10.0.0.3", "10.0.0.2", Conn::Qp).unwrap_err();
        assert_eq!(denied.by, "Kubernetes NetworkPolicy");
        assert_eq!(
            denied.why,
            "netpol:default-deny team/db egress (security groups allow: acme/all/egress(all)+acme/all/ingress[0])"
        );
        // A vIP masq knows as no pod is not selected by podSelector.
        assert!(decide("10.0.0.9", "10.0.0.2", Conn::Qp).is_err());
        // A tenant that does not enforce it is not asked.
        let (cfg, dir) = examples();
        let plain = admission(&cfg, &dir).unwrap_or_else(|e| panic!("{e}"));
        plain.netpol.update(db_policy(""));
        assert!(plain
            .decide(&ask("acme", 100, "10.0.0.1", "10.0.0.2", Conn::Qp), &pods)
            .is_ok());
    }

    #[test]
    fn a_rule_with_ports_admits_the_cm_to_its_port_and_no_verbs_qp() {
        let (a, pods) = enforcing("reset");
        a.mirrored(
            db_policy(r#","ports":[{"protocol":"TCP","port":7471}]"#),
            &pods,
        );
        let cm = |outbound, port| Conn::Cm {
            outbound,
            space: PortSpace::Tcp,
            port,
        };
        let decide = |local, remote, conn| a.decide(&ask("acme", 100, local, remote, conn), &pods);
        // team/cli connects to team/db's listener on 7471, seen from each host.
        assert!(decide("10.0.0.1", "10.0.0.2", cm(true, 7471)).is_ok());
        assert!(decide("10.0.0.2", "10.0.0.1", cm(false, 7471)).is_ok());
        assert!(decide("10.0.0.1", "10.0.0.2", cm(true, 7472)).is_err());
        // A port-less QP is admitted as traffic either way: team/db may
        // begin one, as team/cli's ingress is open.
        assert!(decide("10.0.0.1", "10.0.0.2", Conn::Qp).is_ok());
        // Once team/cli's ingress is closed, only the port rule is left,
        // and a QP has no port.
        let closed = NetworkPolicy::from_json(
            r#"{"metadata":{"namespace":"team","name":"cli-closed"},
                "spec":{"podSelector":{"matchLabels":{"app":"cli"}},"policyTypes":["Ingress"]}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        a.mirrored(Mirrored::Policy(closed), &pods);
        assert!(decide("10.0.0.1", "10.0.0.2", Conn::Qp).is_err());
        assert!(decide("10.0.0.1", "10.0.0.2", cm(true, 7471)).is_ok());
        assert!(decide("10.0.0.2", "10.0.0.1", cm(true, 7471)).is_err());
        let udp = Conn::Cm {
            outbound: true,
            space: PortSpace::Udp,
            port: 7471,
        };
        assert!(decide("10.0.0.1", "10.0.0.2", udp).is_err());
    }

    #[test]
    fn a_mirrored_change_resets_only_what_it_denies_now_unless_keep() {
        for mode in ["reset", "keep"] {
            let (a, pods) = enforcing(mode);
            track(
                &a,
                1,
                "10.0.0.1",
                "10.0.0.2",
                "acme/all/egress(all)+acme/all/ingress[0],netpol:none",
            );
            track(
                &a,
                2,
                "10.0.0.3",
                "10.0.0.2",
                "acme/all/egress(all)+acme/all/ingress[0],netpol:none",
            );
            track(
                &a,
                3,
                "10.0.0.3",
                "10.0.0.1",
                "acme/all/egress(all)+acme/all/ingress[0],netpol:none",
            );
            let out = a.mirrored(db_policy(""), &pods);
            let reset: Vec<u32> = out.to_reset.iter().map(|e| e.qp_handle).collect();
            let rule = |h| {
                let key = QpKey {
                    session: 1,
                    qp_handle: h,
                };
                a.table().get(key).map(|e| e.rule.to_string())
            };
            assert_eq!(
                rule(1).as_deref(),
                Some("acme/all/egress(all)+acme/all/ingress[0],netpol:team/db-in/ingress[0]"),
                "{mode}: the allowed one names its rule now"
            );
            if mode == "keep" {
                assert!(reset.is_empty(), "{reset:?}");
            } else {
                assert_eq!(reset, [2], "other/cli -> team/db alone");
            }
            // Deleting the policy admits it again; other/cli -> team/cli
            // was never in question.
            let gone = Mirrored::PolicyGone {
                namespace: "team".into(),
                name: "db-in".into(),
            };
            assert!(a.mirrored(gone, &pods).to_reset.is_empty());
            assert_eq!(
                rule(3).as_deref(),
                Some("acme/all/egress(all)+acme/all/ingress[0],netpol:none")
            );
        }
    }

    #[test]
    fn an_unmirrored_pod_of_an_enforcing_tenant_is_refused_by_name() {
        let (a, _) = enforcing("reset");
        let pods = PodMap::with(&[("10.0.0.1", "team", "cli"), ("10.0.0.2", "team", "new")]);
        let d = a
            .decide(&ask("acme", 100, "10.0.0.1", "10.0.0.2", Conn::Qp), &pods)
            .unwrap_err();
        assert!(d.why.starts_with("netpol:unknown team/new"), "{}", d.why);
    }
}
