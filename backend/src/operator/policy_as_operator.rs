//! `masqctl policy apply --operator-cert FILE --operator-key FILE`: with
//! etcd's roles on (`masqctl cluster init-auth`) no masqd may write the
//! cluster's policy; the operator's identity does. masqd checks the file
//! against its VPC map and tells where etcd is and which revision of the
//! policy it last saw; masqctl writes the text masqd checked there, as the
//! operator and only if nobody wrote it since (the same compare-and-swap a
//! masqd makes), then waits until this host's masqd runs it. The operator's
//! key stays with masqctl: masqd never sees it.

use crate::cluster::policy::{write_as_operator, StoredPolicy};
use crate::config::identity::Identity;
use crate::config::TlsFiles;
use crate::error::{Error, Result};
use crate::operator::control::{self, Request};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long masqctl waits for this host's masqd to run what it wrote.
const IN_FORCE_WITHIN: Duration = Duration::from_secs(10);

fn ask(socket: &Path, req: &Request) -> Result<Value> {
    let reply = control::call(socket, req)?;
    match reply.get("error").and_then(|e| e.as_str()) {
        Some(e) => Err(Error::Failed(format!("masqd: {e}"))),
        None => Ok(reply),
    }
}

fn field(v: &Value, key: &str) -> Result<String> {
    v[key]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| Error::Failed(format!("masqd's answer has no {key}")))
}

/// Check policy `text` (read from `file`) with masqd at `socket`, write it
/// to the cluster as the operator (`cert`, `key`), and wait until masqd
/// runs it. The answer is
/// `policy apply`'s (kind PolicyApplied), with `written_by` and each
/// host's version.
pub fn apply(socket: &Path, file: &str, text: &str, cert: PathBuf, key: PathBuf) -> Result<Value> {
    let not_changed = |e: Error| match e {
        Error::Failed(e) => Error::Failed(format!("{e}\npolicy not changed")),
        other => other,
    };
    let check = ask(
        socket,
        &Request::PolicyCheck {
            file: file.to_string(),
            text: text.to_string(),
        },
    )
    .map_err(not_changed)?;
    let target = &check["cluster"];
    if !target.is_object() {
        return Err(Error::Invalid(
            "masqd is not in cluster mode: its policy has no operator; apply without \
             --operator-cert and --operator-key"
                .into(),
        ));
    }
    let Some(ca) = target["ca"].as_str() else {
        return Err(Error::Invalid(
            "masqd runs with cluster.insecure: etcd takes no certificates; apply without \
             --operator-cert and --operator-key"
                .into(),
        ));
    };
    let files = TlsFiles {
        ca: ca.into(),
        cert,
        key,
    };
    // Errors name the command's options (the CA is masqd's).
    let operator = Identity::load(&files).map_err(|e| {
        Error::Invalid(
            e.to_string()
                .replace("cluster.tls.cert", "--operator-cert")
                .replace("cluster.tls.key", "--operator-key")
                .replace("cluster.tls.ca", "masqd's cluster.tls.ca"),
        )
    })?;
    let urls: Vec<String> = serde_json::from_value(target["etcd"].clone())
        .map_err(|e| Error::Failed(format!("masqd's answer: etcd: {e}")))?;
    let policy = StoredPolicy {
        text: field(target, "text")?,
        file: field(target, "file")?,
    };
    let seen = target["revision"].as_i64().unwrap_or(0);
    let revision = write_as_operator(&urls, &operator, &field(target, "prefix")?, &policy, seen)
        .map_err(|e| Error::Failed(format!("{e}\npolicy not changed")))?;
    let version = check["version"].clone();
    let started = Instant::now();
    loop {
        let show = ask(socket, &Request::PolicyShow)?;
        if show["version"] == version {
            return Ok(json!({
                "version": version,
                "cluster_revision": revision,
                "written_by": operator.subject,
                "hosts": show["hosts"],
                "unknown_endpoints": check["unknown_endpoints"],
            }));
        }
        if started.elapsed() > IN_FORCE_WITHIN {
            return Err(Error::Failed(format!(
                "written to etcd at revision {revision} as {}, but masqd here still runs \
                 version {} after {} s (its log says why)",
                operator.subject,
                show["version"],
                IN_FORCE_WITHIN.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
