//! The cluster's policy in etcd (`P/policy`): how it is stored, and how it
//! is written, by a masqd (`Cluster::put_policy`, etcd's roles off) or by
//! masqctl with the operator's identity (`write_as_operator`, roles on).
//! Either write is a compare-and-swap on the revision the writer's masqd
//! last saw, so that of two applies made at once one fails instead of
//! silently undoing the other.

use crate::cluster::client::connect_once;
use crate::config::identity::Identity;
use crate::error::{Error, Result};
use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use serde::{Deserialize, Serialize};

/// The policy as stored at `P/policy`.
#[derive(Serialize, Deserialize)]
pub struct StoredPolicy {
    pub text: String,
    pub file: String,
}

impl StoredPolicy {
    pub fn encode(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|e| Error::Failed(e.to_string()))
    }
}

/// Why a write failed.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// Someone wrote the policy since the writer's masqd last saw it.
    Lost,
    /// etcd's roles do not let this identity write it.
    Denied(String),
    Etcd(String),
}

/// What the caller of a lost race is told.
pub const LOST: &str = "the cluster's policy changed since this host last saw it (another \
                        apply won); check the policy in force and apply again";

/// etcd refused the call: with authentication on, this identity's roles
/// do not allow it (`cluster::auth`).
pub(crate) fn denied(e: &impl std::fmt::Display) -> bool {
    e.to_string().contains("permission denied")
}

/// Put `value` at `key` if its mod revision is still `seen` (0: it does not
/// exist). Returns the store's revision after the write.
pub(crate) async fn compare_and_put(
    client: &mut Client,
    key: &str,
    value: String,
    seen: i64,
) -> Result<i64, WriteError> {
    let txn = Txn::new()
        .when([Compare::mod_revision(key, CompareOp::Equal, seen)])
        .and_then([TxnOp::put(key, value, None)]);
    let resp = client.txn(txn).await.map_err(|e| {
        let e = format!("etcd: {e}");
        if denied(&e) {
            WriteError::Denied(e)
        } else {
            WriteError::Etcd(e)
        }
    })?;
    if !resp.succeeded() {
        return Err(WriteError::Lost);
    }
    Ok(resp.header().map(|h| h.revision()).unwrap_or(0))
}

/// Write `policy` at `P/policy` (`prefix` is P) as the operator, if its
/// mod revision is still `seen`. Returns the store's revision after it.
pub fn write_as_operator(
    urls: &[String],
    operator: &Identity,
    prefix: &str,
    policy: &StoredPolicy,
    seen: i64,
) -> Result<i64> {
    let (rt, mut client) = connect_once(urls, operator)?;
    let key = format!("{prefix}/policy");
    let value = policy.encode()?;
    rt.block_on(compare_and_put(&mut client, &key, value, seen))
        .map_err(|e| {
            Error::Failed(match e {
                WriteError::Lost => LOST.to_string(),
                WriteError::Denied(e) => format!(
                    "{e}: {} may not write {key}; `masqctl cluster init-auth --operator NAME` \
                     makes the user NAME (a certificate's CN) that may",
                    operator.subject
                ),
                WriteError::Etcd(e) => e,
            })
        })
}
