//! Security groups applied to RDMA connections: the decision at RTR, the
//! RConntrack table of admitted connections, and policy changes (check,
//! atomic apply, re-evaluation of what is tracked).

use crate::config::Config;
use crate::pipeline::ports::{Conntrack, Decide};
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
}

/// The locked table. Dropping it mirrors what changed into the backstop,
/// still under the lock, so the kernel sees changes in table order and no
/// path that edits the table can forget to.
pub struct TableGuard<'a> {
    table: MutexGuard<'a, Table>,
    backstop: Option<&'a Backstop>,
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
            b.apply(&self.table.take_journal());
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
        }
    }

    pub fn table(&self) -> TableGuard<'_> {
        TableGuard {
            table: self.table.lock().unwrap_or_else(|e| e.into_inner()),
            backstop: self.backstop.get(),
        }
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
    pub fn check(
        &self,
        path: &Path,
        endpoints: &[EndpointRef],
    ) -> Result<(Policy, Vec<String>), String> {
        Policy::load_allowing_unknown(path, endpoints).map_err(|errs| errs.to_string())
    }

    /// Parse and compile the cluster's policy text. It was checked where it
    /// was applied; an endpoint it names that this host does not know (yet)
    /// matches nothing here until it is, and is returned.
    pub fn check_text(
        &self,
        text: &str,
        file: &str,
        endpoints: &[EndpointRef],
    ) -> Result<(Policy, Vec<String>), String> {
        Policy::parse_allowing_unknown(text, file, endpoints).map_err(|errs| errs.to_string())
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

    /// The admitting rule for an RDMA connection local -> remote, or why not.
    pub fn decide(
        &self,
        tenant: &str,
        vni: u32,
        local: Ipv4Addr,
        remote: Ipv4Addr,
    ) -> Result<Arc<str>, String> {
        let verdict = match self.active() {
            None => Ok(Arc::from("no-policy")),
            Some(policy) => {
                let v = policy.rdma_allowed(tenant, vni, local, remote);
                if v.allowed {
                    Ok(Arc::from(v.rule()))
                } else {
                    Err(v.to_string())
                }
            }
        };
        let counted = verdict.as_deref().map_err(|_| ());
        self.metrics.admission(tenant, counted);
        verdict
    }

    /// Swap in a new policy (all or nothing: it is already valid) and
    /// re-evaluate every tracked connection under it.
    pub fn apply(&self, policy: Policy) -> Applied {
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
            let v = policy.rdma_allowed(&e.tenant, e.vni, e.local_vip, e.remote_vip);
            if v.allowed {
                Some(Decision::Allow(Arc::from(v.rule())))
            } else if keep {
                None
            } else {
                Some(Decision::Deny)
            }
        });
        Applied {
            version,
            keep,
            to_reset,
        }
    }
}

/// The verbs pipelines' questions to the policy: its own methods.
impl Decide for Admission {
    fn decide(
        &self,
        tenant: &str,
        vni: u32,
        local: Ipv4Addr,
        remote: Ipv4Addr,
    ) -> Result<Arc<str>, String> {
        Admission::decide(self, tenant, vni, local, remote)
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

    /// The admission as the file source leaves it at start.
    fn admission(cfg: &Config, dir: &Path) -> Result<Admission, String> {
        let a = Admission::new(cfg, dir);
        if let Some(path) = &a.path {
            let (p, _) = a.check(path, &refs(cfg))?;
            a.apply(p);
        }
        Ok(a)
    }

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().expect("ip")
    }

    #[test]
    fn the_example_policy_admits_its_pairs_and_nothing_else() {
        let (cfg, dir) = examples();
        let a = admission(&cfg, &dir).unwrap_or_else(|e| panic!("{e}"));
        let rule = a.decide("acme", 100, ip("10.0.0.1"), ip("10.0.0.2"));
        assert_eq!(
            rule.as_deref(),
            Ok("acme/clients/egress(all)+acme/servers/ingress[0]")
        );
        // The reverse direction holds too: the predicate is symmetric.
        assert!(a
            .decide("acme", 100, ip("10.0.0.2"), ip("10.0.0.1"))
            .is_ok());
        assert!(a
            .decide("globex", 200, ip("10.0.0.1"), ip("10.0.0.2"))
            .is_ok());
        let denied = a.decide("acme", 100, ip("10.0.0.1"), ip("10.0.0.9"));
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
            .expect_err("an unknown key");
        assert!(e.contains(&format!("<stdin>:{line}:")), "{e}");
    }

    #[test]
    fn without_a_policy_every_pair_is_admitted() {
        let (mut cfg, dir) = examples();
        cfg.policy = None;
        let a = admission(&cfg, &dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            a.decide("acme", 100, ip("10.0.0.1"), ip("10.0.0.9"))
                .as_deref(),
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
        let out = a.apply(a.check(&keep, &refs(&cfg)).expect("valid").0);
        assert!(out.keep && out.to_reset.is_empty());
        let out = a.apply(a.check(&revoked, &refs(&cfg)).expect("valid").0);
        assert_eq!(out.to_reset.len(), 1);
        assert_eq!(out.to_reset[0].local_qpn, 17);
    }
}
