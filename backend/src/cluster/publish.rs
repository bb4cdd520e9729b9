//! How a host publishes its endpoints in etcd: the endpoint's key and the
//! claims on its name and vIP that go with it.
//!
//! `P/endpoints/<IP>/<name>` is in the publishing host's own key space,
//! so nothing in it stops a host from publishing another host's name or
//! vIP. Two keys that are not do: `P/claims/names/<name>` and
//! `P/claims/vips/<VNI>/<vIP>`, each holding the host and endpoint that
//! claimed it, under that host's lease. A host writes its endpoint's key
//! and both claims in one transaction that holds only if each claim is
//! absent or already its own: a host whose endpoint another host holds
//! gets that answer from etcd and publishes nothing. A claim goes with
//! its host's delete of the endpoint, its lease, or the operator.
//!
//! The claims are the honest hosts' guard, not the enforcement: etcd's
//! roles let every host write under `P/claims/` (so a compromised one can
//! delete another's claim). What every host enforces when it reads is in
//! `registry.rs` (`claimed`): a name or vIP is held by the endpoint key
//! that claimed it first (etcd's create revision), which no other host
//! can write.

use super::{lock, Cluster};
use crate::cluster::policy::denied;
use crate::config::EndpointConfig;
use crate::error::{Error, Result};
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use tracing::warn;

/// An endpoint as stored under `P/endpoints/`.
#[derive(Serialize, Deserialize)]
pub(super) struct Published {
    pub(super) host: Ipv4Addr,
    pub(super) endpoint: EndpointConfig,
    /// The host's address on the endpoint's rail, when that is not its
    /// first (an older masqd ignores it, and sees a rail it lacks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) underlay: Option<Ipv4Addr>,
}

/// A claim's value: who holds the name or vIP.
#[derive(Serialize, Deserialize)]
struct Claim {
    host: Ipv4Addr,
    endpoint: String,
}

/// What became of a publication.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Published,
    /// Another host holds the endpoint's name or vIP: nothing written.
    Held(String),
    /// etcd's roles do not let this host write claims (made by an older
    /// `masqctl cluster init-auth`): the endpoint is published without.
    Unclaimed(String),
}

/// The claims an endpoint `name` at `vip` in `vni` needs, under `prefix`.
fn claim_keys(prefix: &str, name: &str, vni: u32, vip: Ipv4Addr) -> [String; 2] {
    [
        format!("{prefix}/claims/names/{name}"),
        format!("{prefix}/claims/vips/{vni}/{vip}"),
    ]
}

fn claim_value(me: Ipv4Addr, name: &str) -> Result<String> {
    serde_json::to_string(&Claim {
        host: me,
        endpoint: name.into(),
    })
    .map_err(|e| Error::Failed(e.to_string()))
}

fn etcd_err(e: etcd_client::Error) -> Error {
    Error::Failed(format!("etcd: {e}"))
}

/// Who holds claim `key` (its value, as the operator reads it).
pub fn holder(key: &str, value: &[u8]) -> String {
    match serde_json::from_slice::<Claim>(value) {
        Ok(c) => format!("{key} is endpoint {}'s of host {}", c.endpoint, c.host),
        Err(_) => format!("{key} is held (by a value masqd cannot read)"),
    }
}

/// Write endpoint `p` at `key` under `lease`, with its claims, if no
/// other host holds them.
async fn publish(
    client: &mut Client,
    prefix: &str,
    lease: i64,
    key: &str,
    p: &Published,
) -> Result<Outcome> {
    let e = &p.endpoint;
    let value = serde_json::to_string(p).map_err(|e| Error::Failed(e.to_string()))?;
    let claim = claim_value(p.host, &e.name)?;
    let claims = claim_keys(prefix, &e.name, e.vni, e.vip);
    let with_lease = || Some(PutOptions::new().with_lease(lease));
    let before = client.get(key, None).await.map_err(etcd_err)?;
    let before = before
        .kvs()
        .first()
        .and_then(|kv| serde_json::from_slice::<Published>(kv.value()).ok());
    // A claim that changes between the read and the write makes the
    // transaction fail: read again, a few times.
    for _ in 0..3 {
        let mut seen = Vec::new();
        for k in &claims {
            let got = client.get(k.as_str(), None).await.map_err(etcd_err)?;
            match got.kvs().first() {
                None => seen.push(0),
                Some(kv) if kv.value() == claim.as_bytes() => seen.push(kv.mod_revision()),
                Some(kv) => return Ok(Outcome::Held(holder(k, kv.value()))),
            }
        }
        let when: Vec<Compare> = claims
            .iter()
            .zip(&seen)
            .map(|(k, rev)| Compare::mod_revision(k.as_str(), CompareOp::Equal, *rev))
            .collect();
        let mut ops: Vec<TxnOp> = claims
            .iter()
            .map(|k| TxnOp::put(k.as_str(), claim.as_str(), with_lease()))
            .collect();
        ops.push(TxnOp::put(key, value.as_str(), with_lease()));
        match client.txn(Txn::new().when(when).and_then(ops)).await {
            Ok(r) if r.succeeded() => {
                // Published at another vIP than before: that one is free.
                if let Some(b) =
                    before.filter(|b| (b.endpoint.vni, b.endpoint.vip) != (e.vni, e.vip))
                {
                    let [_, old] = claim_keys(prefix, &e.name, b.endpoint.vni, b.endpoint.vip);
                    drop_claim(client, &old, &claim).await?;
                }
                return Ok(Outcome::Published);
            }
            Ok(_) => continue,
            Err(err) => {
                let err = etcd_err(err);
                if !denied(&err) {
                    return Err(err);
                }
                let err = err.to_string();
                client
                    .put(key, value, with_lease())
                    .await
                    .map_err(etcd_err)?;
                return Ok(Outcome::Unclaimed(err));
            }
        }
    }
    Err(Error::Failed(format!(
        "endpoint {}: its claims changed on every try",
        e.name
    )))
}

/// Delete this host's endpoint at `key` and the claims it holds for it
/// (a claim another host holds now stays).
pub(super) async fn release(
    client: &mut Client,
    prefix: &str,
    me: Ipv4Addr,
    key: &str,
    name: &str,
) -> Result<()> {
    let got = client.get(key, None).await.map_err(etcd_err)?;
    let was = got
        .kvs()
        .first()
        .and_then(|kv| serde_json::from_slice::<Published>(kv.value()).ok());
    client.delete(key, None).await.map_err(etcd_err)?;
    let Some(was) = was else { return Ok(()) };
    let claim = claim_value(me, name)?;
    for k in claim_keys(prefix, name, was.endpoint.vni, was.endpoint.vip) {
        drop_claim(client, &k, &claim).await?;
    }
    Ok(())
}

/// Delete claim `key` if it is still `claim`.
async fn drop_claim(client: &mut Client, key: &str, claim: &str) -> Result<()> {
    let txn = Txn::new()
        .when([Compare::value(key, CompareOp::Equal, claim)])
        .and_then([TxnOp::delete(key, None)]);
    match client.txn(txn).await.map_err(etcd_err) {
        // Roles from before the claims: this host made none.
        Err(e) if denied(&e) => Ok(()),
        r => r.map(|_| ()),
    }
}

impl Cluster {
    pub(super) async fn put_endpoint(
        &self,
        client: &mut Client,
        lease: i64,
        mut e: EndpointConfig,
    ) -> Result<()> {
        let key = self.key(&format!("endpoints/{}/{}", self.me, e.name));
        // The rail by name, as every host names it; its address if not
        // the first's.
        let rail = e.rail.as_ref();
        let at = rail.and_then(|r| self.rails.iter().position(|(n, _)| n == r));
        let at = at.unwrap_or(0);
        let (rail, addr) = self
            .rails
            .get(at)
            .cloned()
            .unwrap_or((String::new(), self.me));
        if rail != vbond::FIRST_RAIL {
            e.rail = Some(rail);
        }
        let p = Published {
            host: self.me,
            endpoint: e,
            underlay: (at > 0).then_some(addr),
        };
        let name = p.endpoint.name.clone();
        match publish(client, &self.cfg.prefix, lease, &key, &p).await? {
            Outcome::Published => {
                lock(&self.held).remove(&name);
            }
            Outcome::Held(why) => {
                // What it published before (another vIP) is no longer so.
                release(client, &self.cfg.prefix, self.me, &key, &name).await?;
                if lock(&self.held).insert(name.clone(), p.endpoint).is_none() {
                    self.claim_conflicts.fetch_add(1, Ordering::Relaxed);
                    warn!(
                        "cluster: endpoint {name} not published: {why}; it is served here, \
                           but no other host reaches it until that host deletes it or its \
                           lease expires"
                    );
                }
                lock(&self.health).held_elsewhere.insert(name, why);
                return Ok(());
            }
            Outcome::Unclaimed(err) => warn!(
                "cluster: endpoint {name} published without its claims ({err}): run \
                 `masqctl cluster init-auth` again so that this host's role may write them"
            ),
        }
        lock(&self.health).held_elsewhere.remove(&name);
        Ok(())
    }

    /// Publish again the endpoints another host held (one of its claims
    /// was deleted).
    pub(super) async fn retry_held(&self, client: &mut Client, lease: i64) -> Result<()> {
        let held: Vec<EndpointConfig> = lock(&self.held).values().cloned().collect();
        for e in held {
            self.put_endpoint(client, lease, e).await?;
        }
        Ok(())
    }

    /// Times this host's publication of an endpoint met another host's
    /// claim on its name or vIP.
    pub fn claim_conflicts(&self) -> u64 {
        self.claim_conflicts.load(Ordering::Relaxed)
    }
}
