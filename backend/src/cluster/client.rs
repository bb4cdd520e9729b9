//! How masq connects to etcd as an identity: the TLS of a cluster member
//! (masqd's long-lived client, `etcd`) and the one-off client of a masqctl
//! command (`auth`, `policy`).

use crate::config::identity::Identity;
use crate::error::{Error, Result};
use etcd_client::{Certificate, Client, ConnectOptions, TlsOptions};
use std::time::Duration;

/// etcd's TLS as `id`: the cluster's CA and this certificate.
pub(crate) fn tls_options(id: &Identity) -> TlsOptions {
    TlsOptions::new()
        .ca_certificate(Certificate::from_pem(&id.ca))
        .identity(etcd_client::Identity::from_pem(&id.cert, &id.key))
}

/// A client of etcd at `urls` as `identity`, for one command (masqctl),
/// with the runtime that drives it.
pub(crate) fn connect_once(
    urls: &[String],
    identity: &Identity,
) -> Result<(tokio::runtime::Runtime, Client)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(e.to_string()))?;
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(10))
        .with_tls(tls_options(identity));
    let client = rt
        .block_on(Client::connect(urls, Some(opts)))
        .map_err(|e| Error::Failed(format!("etcd at {}: {e}", urls.join(","))))?;
    Ok((rt, client))
}
