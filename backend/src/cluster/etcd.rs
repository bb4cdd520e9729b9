//! Cluster mode: the endpoints of every host, the VPC map that follows from
//! them and the security-group policy, kept in etcd.
//!
//! Key layout under the configured prefix P:
//!
//! - `P/hosts/<underlay IP>`: this host is up (under its lease);
//! - `P/endpoints/<underlay IP>/<name>`: an endpoint and the host it lives
//!   on (under that host's lease: a host that stops renewing it loses its
//!   endpoints everywhere);
//! - `P/claims/names/<name>`, `P/claims/vips/<VNI>/<vIP>`: which host holds
//!   an endpoint's name and vIP (under its lease; see `publish.rs`);
//! - `P/policy`: the policy text, written once by `masqctl policy apply`
//!   on any host (compare-and-swap on its revision);
//! - `P/status/<underlay IP>`: the policy version in force on that host;
//! - `P/k8s/...`: Kubernetes' namespaces, masq pods and NetworkPolicies,
//!   written by masq-netpol alone (`values.rs`).
//!
//! Each host publishes its own endpoints and follows everything else: read
//! the prefix at a revision, watch from the next one, and read it whole
//! again if the watch breaks (etcd restarted, the revision was compacted).
//! While etcd is unreachable masqd serves from its last view and retries;
//! when it is back, the host registers again (its endpoints as they are
//! now, so changes made meanwhile are not lost) and reads the whole view.
//!
//! A `Source` (`source.rs`): it feeds the daemon's state through `Store`
//! and knows nothing of sessions or sockets.
//!
//! Applying a change (a policy recompiled, nftables loaded) can take
//! seconds on a busy host, so it never runs on the task that talks to etcd:
//! the `cluster-apply` thread applies the view and the watch's events in
//! their order, and the lease is renewed by a task of its own. A host whose
//! renewals waited behind that work would lose its lease, and every peer
//! would reset the connections its endpoints' names admitted.

use crate::admit::Mirrored;
use crate::cluster::policy::{compare_and_put, StoredPolicy, WriteError, LOST};
use crate::cluster::source::{Source, Store};
use crate::config::identity::Identity;
use crate::config::{ClusterConfig, EndpointConfig};
use crate::endpoints::placement::{Placement, SourceId};
use crate::error::{Error, Result};
use etcd_client::{Client, GetOptions, PutOptions};
use masq_policy::netpol::Snapshot;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

#[path = "follow.rs"]
mod follow;
#[path = "publish.rs"]
mod publish;
use publish::release;
#[path = "values.rs"]
mod values;
pub use values::Parsed;
#[cfg(any(test, feature = "fuzzing"))]
pub use {publish::holder as claim_holder, values::mirror_gone, values::parse as parse_value};

/// A change of this host's endpoints, for the cluster task.
enum Publish {
    Up(Box<EndpointConfig>),
    Down(String),
    Status,
    /// This host's certificate was reloaded: connect again with it.
    Reconnect,
}

/// Why `follow` ended when the certificate was reloaded.
const RELOADED: &str = "this host's certificate was reloaded";

/// What the cluster task hands the `cluster-apply` thread, in store order.
enum Apply {
    /// The whole view; `done` is told once it is in force.
    View {
        remotes: Vec<Placement>,
        policy: Option<StoredPolicy>,
        mirrored: Box<Snapshot>,
        done: Option<oneshot::Sender<()>>,
    },
    Placed(Placement),
    Unplaced(Ipv4Addr, String),
    Policy(StoredPolicy),
    Mirrored(Mirrored),
}

#[derive(Clone, Serialize)]
pub struct Health {
    /// `connected`, or `degraded` (serving from the last view).
    pub state: &'static str,
    /// Unix seconds of the last change of state.
    pub since: u64,
    /// The store revision the view was last read or watched at.
    pub revision: i64,
    /// This host's lease, hex (empty before the first registration).
    pub lease: String,
    pub error: Option<String>,
    /// `cluster.insecure`: plaintext etcd, no identities.
    pub insecure: bool,
    /// This host's endpoints it could not publish: another host holds
    /// their name or vIP (each with why).
    pub held_elsewhere: BTreeMap<String, String>,
}

pub struct Cluster {
    cfg: ClusterConfig,
    /// This host's identity (None: `cluster.insecure`); replaced by
    /// `use_identity` when its files are reloaded.
    identity: Mutex<Option<Identity>>,
    me: Ipv4Addr,
    /// This host's rails (name, address), first first.
    rails: Vec<(String, Ipv4Addr)>,
    rt: tokio::runtime::Runtime,
    client: Mutex<Option<Client>>,
    health: Mutex<Health>,
    /// Mod revision of `P/policy` as last seen (0: none): an apply
    /// succeeds only if nobody wrote it since.
    policy_rev: AtomicI64,
    /// This host's lease (0: none yet), kept across reconnections.
    lease: AtomicI64,
    publish: mpsc::UnboundedSender<Publish>,
    publish_rx: Mutex<Option<mpsc::UnboundedReceiver<Publish>>>,
    /// This host's endpoints another host holds, published again when a
    /// claim is deleted.
    held: Mutex<BTreeMap<String, EndpointConfig>>,
    /// Times this host's publication met another host's claim.
    claim_conflicts: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn etcd_err(e: etcd_client::Error) -> Error {
    Error::Failed(format!("etcd: {e}"))
}

/// How long one etcd call may take before the host counts as cut off.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
const RETRY_MIN: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// The longest wait between two tries to reach etcd. etcd gives every
/// lease a full TTL again when it comes back (its leader promotes them),
/// so a host must be back well inside one TTL: a host that is late has
/// its keys deleted and its peers reset what their policy admitted only
/// because it was there.
pub fn retry_max(lease_seconds: u64) -> Duration {
    (Duration::from_secs(lease_seconds) / 4).clamp(RETRY_MIN, RETRY_MAX)
}

impl Cluster {
    /// The cluster as `cfg` describes it; an error if its identity files
    /// are missing or hold something else.
    pub fn new(
        cfg: ClusterConfig,
        me: Ipv4Addr,
        rails: Vec<(String, Ipv4Addr)>,
    ) -> Result<Arc<Cluster>> {
        let identity = match &cfg.tls {
            Some(files) => Some(Identity::load(files)?),
            None => {
                warn!(
                    "cluster.insecure: etcd in plaintext, with no identities: anyone who \
                     reaches it can rewrite this cluster's policy and endpoints"
                );
                None
            }
        };
        // One worker: the cluster's traffic is a handful of small messages.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("cluster")
            .enable_all()
            .build()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let insecure = cfg.insecure;
        Ok(Arc::new(Cluster {
            identity: Mutex::new(identity),
            cfg,
            me,
            rails,
            rt,
            client: Mutex::new(None),
            health: Mutex::new(Health {
                state: "degraded",
                since: now_secs(),
                revision: 0,
                lease: String::new(),
                error: Some("not connected yet".into()),
                insecure,
                held_elsewhere: BTreeMap::new(),
            }),
            policy_rev: AtomicI64::new(0),
            lease: AtomicI64::new(0),
            publish: tx,
            publish_rx: Mutex::new(Some(rx)),
            held: Mutex::new(BTreeMap::new()),
            claim_conflicts: AtomicU64::new(0),
        }))
    }

    fn key(&self, rest: &str) -> String {
        format!("{}/{rest}", self.cfg.prefix)
    }

    fn set_health(&self, state: &'static str, error: Option<String>) -> &'static str {
        let mut h = lock(&self.health);
        let was = h.state;
        if was != state {
            h.since = now_secs();
        }
        h.state = state;
        h.error = error;
        was
    }

    /// This host's identity (None: `cluster.insecure`).
    pub fn identity(&self) -> Option<Identity> {
        lock(&self.identity).clone()
    }

    /// The files of this host's identity (None: `cluster.insecure`).
    pub fn tls_files(&self) -> Option<&crate::config::TlsFiles> {
        self.cfg.tls.as_ref()
    }

    /// Use `id` from now on: the connection to etcd is made again with it
    /// (this host's lease and keys stay, as across any reconnection).
    pub fn use_identity(&self, id: Identity) {
        *lock(&self.identity) = Some(id);
        let _ = self.publish.send(Publish::Reconnect);
    }

    pub fn health(&self) -> Health {
        lock(&self.health).clone()
    }

    /// Wait up to `timeout` for the first view (a start with etcd up then
    /// serves the cluster's endpoints and policy from its first request).
    pub fn wait_connected(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if lock(&self.health).state == "connected" {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// This host, its endpoints as they are now (and none it no longer
    /// has), and the policy version in force here.
    async fn register(&self, client: &mut Client, lease: i64, store: &dyn Store) -> Result<()> {
        let with_lease = || Some(PutOptions::new().with_lease(lease));
        let host = json!({ "underlay": self.me, "registered": now_secs() }).to_string();
        client
            .put(self.key(&format!("hosts/{}", self.me)), host, with_lease())
            .await
            .map_err(etcd_err)?;
        let mine = format!("{}/", self.key(&format!("endpoints/{}", self.me)));
        let local = store.local_endpoints();
        let stale = client
            .get(
                mine.as_str(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await
            .map_err(etcd_err)?;
        for kv in stale.kvs() {
            let name = kv.key_str().unwrap_or_default().trim_start_matches(&mine);
            if !local.iter().any(|e| e.name == name) {
                let key = kv.key_str().unwrap_or_default();
                release(client, &self.cfg.prefix, self.me, key, name).await?;
            }
        }
        for e in local {
            self.put_endpoint(client, lease, e).await?;
        }
        self.put_status(client, lease, store).await
    }

    async fn put_status(&self, client: &mut Client, lease: i64, store: &dyn Store) -> Result<()> {
        let status = json!({ "policyVersion": store.policy_version(), "at": now_secs() });
        client
            .put(
                self.key(&format!("status/{}", self.me)),
                status.to_string(),
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .map_err(etcd_err)
            .map(|_| ())
    }

    async fn publish_one(
        &self,
        client: &mut Client,
        lease: i64,
        store: &dyn Store,
        p: Publish,
        deleting: &mut HashSet<String>,
    ) -> Result<()> {
        match p {
            Publish::Up(e) => {
                deleting.remove(&e.name);
                self.put_endpoint(client, lease, *e).await
            }
            Publish::Down(name) => {
                let key = self.key(&format!("endpoints/{}/{name}", self.me));
                lock(&self.held).remove(&name);
                lock(&self.health).held_elsewhere.remove(&name);
                deleting.insert(name.clone());
                release(client, &self.cfg.prefix, self.me, &key, &name).await
            }
            Publish::Status => self.put_status(client, lease, store).await,
            Publish::Reconnect => Err(Error::failed(RELOADED)),
        }
    }

    fn apply_view(
        &self,
        apply: &std::sync::mpsc::Sender<Apply>,
        kvs: &[etcd_client::KeyValue],
        done: oneshot::Sender<()>,
    ) {
        let mut remotes = Vec::new();
        let mut policy = None;
        let mut mirrored = Snapshot::default();
        for kv in kvs {
            match self.parse(kv) {
                Parsed::Endpoint(r) if r.host != self.me => remotes.push(r),
                Parsed::Policy(p) => policy = Some((p, kv.mod_revision())),
                Parsed::Mirrored(Mirrored::Namespace(ns)) => mirrored.namespaces.push(ns),
                Parsed::Mirrored(Mirrored::Pod(p)) => mirrored.pods.push(p),
                Parsed::Mirrored(Mirrored::Policy(p)) => mirrored.policies.push(p),
                Parsed::Bad(why) => warn!("cluster: {why}"),
                _ => {}
            }
        }
        debug!(
            endpoints = remotes.len(),
            pods = mirrored.pods.len(),
            networkpolicies = mirrored.policies.len(),
            "cluster: view read"
        );
        let rev = policy.as_ref().map_or(0, |(_, rev)| *rev);
        self.policy_rev.store(rev, Ordering::SeqCst);
        let _ = apply.send(Apply::View {
            remotes,
            policy: policy.map(|(p, _)| p),
            mirrored: Box::new(mirrored),
            done: Some(done),
        });
    }

    fn apply_event(
        &self,
        apply: &std::sync::mpsc::Sender<Apply>,
        kv: &etcd_client::KeyValue,
        put: bool,
        deleting: &mut HashSet<String>,
    ) -> Result<()> {
        let key = kv.key_str().unwrap_or_default();
        if !put {
            if let Some((host, name)) = self.endpoint_key(key) {
                if host == self.me {
                    if deleting.remove(name) || lock(&self.held).contains_key(name) {
                        return Ok(()); // our own endpoint_down, or held elsewhere
                    }
                    // Our lease expired while we were cut off, or someone
                    // deleted it: register again.
                    return Err(Error::Failed(format!(
                        "this host's endpoint {name} left the store"
                    )));
                }
                let _ = apply.send(Apply::Unplaced(host, name.to_string()));
            } else if key == self.key("policy") {
                warn!("cluster: the policy was deleted from etcd; keeping the one in force");
                self.policy_rev.store(0, Ordering::SeqCst);
            } else if let Some(gone) = values::mirror_gone(&self.cfg.prefix, key) {
                let _ = apply.send(Apply::Mirrored(gone));
            }
            return Ok(());
        }
        match self.parse(kv) {
            Parsed::Endpoint(r) if r.host != self.me => {
                let _ = apply.send(Apply::Placed(r));
            }
            Parsed::Policy(p) => {
                self.policy_rev.store(kv.mod_revision(), Ordering::SeqCst);
                let _ = apply.send(Apply::Policy(p));
            }
            Parsed::Mirrored(m) => {
                let _ = apply.send(Apply::Mirrored(m));
            }
            Parsed::Bad(why) => warn!("cluster: {why}"),
            _ => {}
        }
        Ok(())
    }

    /// The `cluster-apply` thread: the store's changes, one at a time, in
    /// the order etcd gave them.
    fn applier(self: Arc<Self>, store: Arc<dyn Store>, ops: std::sync::mpsc::Receiver<Apply>) {
        for op in ops {
            match op {
                Apply::View {
                    remotes,
                    policy,
                    mirrored,
                    done,
                } => {
                    store.placements(SourceId::Cluster, remotes);
                    if let Some(p) = policy {
                        self.feed_policy(&*store, &p);
                    }
                    store.mirrored_all(*mirrored);
                    if let Some(done) = done {
                        let _ = done.send(());
                    }
                }
                Apply::Placed(p) => store.placed(SourceId::Cluster, p),
                Apply::Unplaced(host, name) => store.unplaced(SourceId::Cluster, host, &name),
                Apply::Policy(p) => {
                    self.feed_policy(&*store, &p);
                    let _ = self.publish.send(Publish::Status);
                }
                Apply::Mirrored(m) => store.mirrored(m),
            }
        }
    }

    fn feed_policy(&self, store: &dyn Store, p: &StoredPolicy) {
        if let Err(e) = store.policy(SourceId::Cluster, &p.text, &p.file) {
            warn!("cluster: the policy in etcd is not in force here, the one before is: {e}");
        }
    }

    fn endpoint_key<'a>(&self, key: &'a str) -> Option<(Ipv4Addr, &'a str)> {
        values::endpoint_key(&self.cfg.prefix, key)
    }

    fn parse(&self, kv: &etcd_client::KeyValue) -> Parsed {
        values::parse(&self.cfg.prefix, kv.key(), kv.value(), kv.create_revision())
    }

    /// Publish a change of this host's endpoints (sent when etcd is
    /// reachable; otherwise part of the next registration).
    pub fn endpoint_up(&self, e: EndpointConfig) {
        let _ = self.publish.send(Publish::Up(Box::new(e)));
    }

    pub fn endpoint_down(&self, name: &str) {
        let _ = self.publish.send(Publish::Down(name.to_string()));
    }

    /// The policy version in force here changed.
    pub fn status_changed(&self) {
        let _ = self.publish.send(Publish::Status);
    }

    /// Run one etcd call for a caller outside the runtime (the control
    /// socket), bounded by CALL_TIMEOUT; `err` words its error.
    fn call<T, E>(
        &self,
        f: impl std::future::Future<Output = Result<T, E>>,
        err: impl FnOnce(E) -> String,
    ) -> Result<T> {
        self.rt
            // The timer must be made inside the runtime: async block.
            .block_on(async { tokio::time::timeout(CALL_TIMEOUT, f).await })
            .map_err(|_| Error::failed("etcd did not answer in time"))?
            .map_err(|e| Error::Failed(err(e)))
    }

    fn connected(&self) -> Result<Client> {
        lock(&self.client).clone().ok_or_else(|| {
            let h = self.health();
            Error::Failed(format!(
                "etcd is unreachable ({}): the cluster's policy cannot change now",
                h.error.unwrap_or_default()
            ))
        })
    }

    /// Write the policy for every host, unless someone wrote it since this
    /// host last saw it (then the caller's apply lost the race).
    pub fn put_policy(&self, text: &str, file: &str) -> Result<i64> {
        let mut client = self.connected()?;
        let seen = self.policy_rev.load(Ordering::SeqCst);
        let key = self.key("policy");
        let value = StoredPolicy {
            text: text.into(),
            file: file.into(),
        }
        .encode()?;
        let rev = self.call(
            compare_and_put(&mut client, &key, value, seen),
            |e| match e {
                WriteError::Lost => LOST.to_string(),
                WriteError::Denied(e) => format!(
                    "{e}: with etcd's roles (masqctl cluster init-auth) a host may not write \
                 the policy; apply it as the operator: masqctl policy apply \
                 --operator-cert FILE --operator-key FILE"
                ),
                WriteError::Etcd(e) => e,
            },
        )?;
        self.policy_rev.store(rev, Ordering::SeqCst);
        Ok(rev)
    }

    /// Where and as what masqctl writes the policy as the operator: etcd's
    /// URLs, the prefix, the CA (None: `cluster.insecure`) and the
    /// revision of the policy this host last saw (the compare-and-swap's).
    pub fn policy_target(&self) -> Value {
        json!({
            "etcd": self.cfg.etcd,
            "prefix": self.cfg.prefix,
            "ca": self.cfg.tls.as_ref().map(|t| t.ca.clone()),
            "revision": self.policy_rev.load(Ordering::SeqCst),
        })
    }

    /// The policy version each host reports in force.
    pub fn policy_status(&self) -> Result<Value> {
        let mut client = self.connected()?;
        let prefix = format!("{}/", self.key("status"));
        let resp = self.call(
            client.get(prefix.as_str(), Some(GetOptions::new().with_prefix())),
            |e| format!("etcd: {e}"),
        )?;
        let hosts: Vec<Value> = resp
            .kvs()
            .iter()
            .map(|kv| {
                let host = kv.key_str().unwrap_or_default().trim_start_matches(&prefix);
                let v: Value =
                    serde_json::from_str(kv.value_str().unwrap_or_default()).unwrap_or(Value::Null);
                json!({ "host": host, "version": v["policyVersion"], "at": v["at"] })
            })
            .collect();
        Ok(json!(hosts))
    }
}

impl Source for Cluster {
    /// Follow the cluster until masqd stops, feeding `store`. etcd need
    /// not be up: the view comes when it is (see `wait_connected`).
    fn start(self: Arc<Self>, store: Arc<dyn Store>) -> Result<()> {
        let Some(mut rx) = lock(&self.publish_rx).take() else {
            return Err(Error::Failed("cluster: started twice".into()));
        };
        let (apply, ops) = std::sync::mpsc::channel();
        let (me, to) = (self.clone(), store.clone());
        std::thread::Builder::new()
            .name("cluster-apply".into())
            .spawn(move || me.applier(to, ops))
            .map_err(|e| Error::Failed(format!("cluster: cannot start its apply thread: {e}")))?;
        let me = self.clone();
        let retry_max = retry_max(self.cfg.lease_seconds);
        self.rt.spawn(async move {
            let mut backoff = RETRY_MIN;
            loop {
                let err = match me.follow(&*store, &apply, &mut rx).await {
                    Ok(()) => return,
                    Err(e) => e.to_string(),
                };
                *lock(&me.client) = None;
                if err == RELOADED {
                    info!("cluster: connecting to etcd again with the reloaded certificate");
                    backoff = RETRY_MIN;
                    continue;
                }
                let was = me.set_health("degraded", Some(err.clone()));
                if was == "connected" {
                    warn!("cluster: {err}; serving from the last view until etcd is back");
                    backoff = RETRY_MIN;
                } else {
                    debug!("cluster: {err}");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(retry_max);
            }
        });
        Ok(())
    }
}
