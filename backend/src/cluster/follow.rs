//! One connection to etcd, from connect to its end: this host's lease
//! and the task that renews it, the registration, the whole view read at
//! a revision and the watch from the next one (`Cluster::start` connects
//! again when it ends).

use super::{etcd_err, lock, Apply, Cluster, Publish, CALL_TIMEOUT};
use crate::cluster::client::tls_options;
use crate::cluster::policy::{denied, StoredPolicy};
use crate::cluster::source::Store;
use crate::error::{Error, Result};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, Txn, TxnOp, WatchOptions,
    WatchResponse, WatchStream,
};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info};

impl Cluster {
    /// One connection's life: register, read the view, watch it.
    pub(super) async fn follow(
        &self,
        store: &dyn Store,
        apply: &std::sync::mpsc::Sender<Apply>,
        rx: &mut mpsc::UnboundedReceiver<Publish>,
    ) -> Result<()> {
        let mut client = self.connect().await?;
        let (lease, mut renewal) = self.keep_lease(&mut client).await?;
        // What was queued while etcd was away is in the full registration.
        while rx.try_recv().is_ok() {}
        self.register(&mut client, lease, store).await?;
        if let Some((text, file)) = store.file_policy() {
            self.offer_file_policy(&mut client, text, file).await?;
        }
        let (mut revision, mut watch) = self.read_and_watch(&mut client, apply).await?;
        *lock(&self.client) = Some(client.clone());
        {
            let mut h = lock(&self.health);
            h.revision = revision;
            h.lease = format!("{lease:x}");
        }
        if self.set_health("connected", None) != "connected" {
            info!(revision, lease = format!("{lease:x}"), etcd = ?self.cfg.etcd,
                  "cluster: registered and following");
        }
        // Endpoint keys this host deleted itself: their watch events are
        // expected, not a sign that its lease or keys were lost.
        let mut deleting = HashSet::new();
        loop {
            tokio::select! {
                r = &mut renewal.0 => return match r {
                    Ok(Err(e)) => Err(e),
                    _ => Err(Error::Failed("lease renewal stopped".into())),
                },
                msg = watch.message() => {
                    let Some(resp) = msg.map_err(etcd_err)? else {
                        return Err(Error::Failed("watch closed".into()));
                    };
                    self.on_watch(&mut client, lease, apply, &resp, &mut revision, &mut deleting).await?;
                }
                p = rx.recv() => match p {
                    Some(p) => self.publish_one(&mut client, lease, store, p, &mut deleting).await?,
                    None => return Ok(()),
                },
            }
        }
    }

    /// A client of etcd's, with this host's identity if it has one.
    async fn connect(&self) -> Result<Client> {
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(CALL_TIMEOUT)
            .with_timeout(CALL_TIMEOUT)
            .with_keep_alive(Duration::from_secs(1), CALL_TIMEOUT);
        if let Some(id) = self.identity() {
            opts = opts.with_tls(tls_options(&id));
        }
        Client::connect(&self.cfg.etcd, Some(opts))
            .await
            .map_err(etcd_err)
    }

    /// This host's lease (`lease`), and the task that renews it: it ends
    /// with an error once a renewal fails or the lease expired.
    async fn keep_lease(&self, client: &mut Client) -> Result<(i64, AbortOnDrop<Result<()>>)> {
        let ttl = self.cfg.lease_seconds as i64;
        let lease = self.lease(client, ttl).await?;
        let (mut keeper, mut alive) = client.lease_keep_alive(lease).await.map_err(etcd_err)?;
        // Renewed apart from the watch and the publishing, so that neither
        // a slow etcd call nor a burst of events delays it.
        let period = Duration::from_secs((ttl as u64 / 3).max(1));
        let renewal = AbortOnDrop(tokio::spawn(async move {
            let mut renew = tokio::time::interval(period);
            loop {
                renew.tick().await;
                keeper.keep_alive().await.map_err(etcd_err)?;
                match alive.message().await.map_err(etcd_err)? {
                    Some(r) if r.ttl() > 0 => {}
                    _ => return Err::<(), Error>(Error::failed("this host's lease expired")),
                }
            }
        }));
        Ok((lease, renewal))
    }

    /// The policy of this host's config file, written if etcd has none.
    async fn offer_file_policy(
        &self,
        client: &mut Client,
        text: String,
        file: String,
    ) -> Result<()> {
        let key = self.key("policy");
        let value = StoredPolicy {
            text,
            file: file.clone(),
        }
        .encode()?;
        let txn = Txn::new()
            .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), value, None)]);
        match client.txn(txn).await.map_err(etcd_err) {
            Ok(r) if r.succeeded() => info!(%file, "cluster: had no policy; wrote this host's"),
            Ok(_) => {}
            // With etcd's roles only the operator writes the policy.
            Err(e) if denied(&e) => {
                info!(%file, "cluster: this host may not write the policy (etcd's roles); \
                      it serves its file's until the operator applies one")
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// The whole view, read at a revision and applied (connected means
    /// serving it: `wait_connected`), and the watch from the next one.
    async fn read_and_watch(
        &self,
        client: &mut Client,
        apply: &std::sync::mpsc::Sender<Apply>,
    ) -> Result<(i64, WatchStream)> {
        let prefix = format!("{}/", self.cfg.prefix);
        let view = client
            .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(etcd_err)?;
        let revision = view.header().map(|h| h.revision()).unwrap_or(0);
        let (done, applied) = oneshot::channel();
        self.apply_view(apply, view.kvs(), done);
        // Connected means serving this view (`wait_connected`).
        let _ = applied.await;
        let watch = client
            .watch(
                prefix.as_str(),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_prev_key()
                        .with_start_revision(revision + 1),
                ),
            )
            .await
            .map_err(etcd_err)?;
        Ok((revision, watch))
    }

    /// One response of the watch: its events applied in order (`revision`
    /// follows them; `deleting`, see `apply_event`); claims another host
    /// let go of are tried again for the endpoints held back. A compacted
    /// or canceled watch ends the connection (the view is read whole
    /// again).
    async fn on_watch(
        &self,
        client: &mut Client,
        lease: i64,
        apply: &std::sync::mpsc::Sender<Apply>,
        resp: &WatchResponse,
        revision: &mut i64,
        deleting: &mut HashSet<String>,
    ) -> Result<()> {
        if resp.compact_revision() > 0 {
            return Err(Error::Failed(format!(
                "revision {} compacted; reading the whole view again",
                *revision + 1
            )));
        }
        if resp.canceled() {
            return Err(Error::Failed(format!(
                "watch canceled: {}",
                resp.cancel_reason()
            )));
        }
        let claims = self.key("claims/");
        let mut freed = false;
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            *revision = (*revision).max(kv.mod_revision());
            let put = ev.event_type() == EventType::Put;
            freed |= !put && kv.key_str().is_ok_and(|k| k.starts_with(&claims));
            self.apply_event(apply, kv, put, deleting)?;
        }
        lock(&self.health).revision = *revision;
        if freed && !lock(&self.held).is_empty() {
            self.retry_held(client, lease).await?;
        }
        Ok(())
    }

    /// The lease this host held before etcd went away, if etcd still has
    /// it: its keys then never leave the store, so no peer sees this host
    /// go and come back. Otherwise a new one.
    async fn lease(&self, client: &mut Client, ttl: i64) -> Result<i64> {
        let held = self.lease.load(Ordering::SeqCst);
        if held != 0 {
            let left = client
                .lease_time_to_live(held, None)
                .await
                .map_err(etcd_err)?
                .ttl();
            if left > 0 {
                debug!(
                    lease = format!("{held:x}"),
                    left, "cluster: keeping this host's lease"
                );
                return Ok(held);
            }
            info!(
                lease = format!("{held:x}"),
                "cluster: this host's lease expired; taking a new one"
            );
        }
        let lease = client.lease_grant(ttl, None).await.map_err(etcd_err)?.id();
        self.lease.store(lease, Ordering::SeqCst);
        Ok(lease)
    }
}

/// A task that ends with the connection it serves.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
