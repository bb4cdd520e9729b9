//! Where the daemon's state comes from. A `Source` feeds a `Store`: the
//! config file (`FileSource`: its `vpc:` map and `policy:` file, once at
//! start) and the cluster (`cluster::Cluster`: every host's endpoints and
//! the one policy in etcd, for as long as masqd runs). Tests feed their own.
//!
//! Each source's placements are kept apart in the store, so what one says
//! never erases what another said: a map entry is a local endpoint's if
//! this host serves it, else the cluster's, else the file's. The policy is
//! whichever a source gave last.

use crate::config::{Config, EndpointConfig};
use crate::endpoints::placement::{Placement, SourceId};
use crate::error::{Error, Result};
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use tracing::warn;

/// What sources feed into the daemon, and what the cluster asks of it.
pub trait Store: Send + Sync + 'static {
    /// `from`'s placements now: they replace what it placed before.
    fn placements(&self, from: SourceId, all: Vec<Placement>);
    /// `from` placed one endpoint (new, or moved).
    fn placed(&self, from: SourceId, p: Placement);
    /// `from` took endpoint `name` of `host` away.
    fn unplaced(&self, from: SourceId, host: Ipv4Addr, name: &str);
    /// `from`'s policy is this text (`file` labels its errors). An error
    /// says why it is not in force; the one before stays.
    fn policy(&self, from: SourceId, text: &str, file: &str) -> Result<()>;
    /// This host's endpoints, to publish.
    fn local_endpoints(&self) -> Vec<EndpointConfig>;
    /// The version of the policy in force here.
    fn policy_version(&self) -> Option<String>;
    /// The config file's policy (text, file), offered to a cluster that
    /// has none yet: migrating from files, the first host in brings it.
    fn file_policy(&self) -> Option<(String, String)>;
    /// What masq-netpol mirrored of Kubernetes, read whole: it replaces
    /// what was.
    fn mirrored_all(&self, all: masq_policy::netpol::Snapshot);
    /// One mirrored object put or deleted.
    fn mirrored(&self, m: crate::admit::Mirrored);
}

pub trait Source: Send + Sync {
    /// Feed `store` what the source holds now, then (on threads of its own)
    /// every change until masqd stops. An error: what it holds cannot be
    /// used, and masqd does not start.
    fn start(self: Arc<Self>, store: Arc<dyn Store>) -> Result<()>;
}

/// masqd.yaml's `vpc:` and the policy file it names, as read at start.
pub struct FileSource {
    placements: Vec<Placement>,
    /// (text, file name for errors).
    policy: Option<(String, String)>,
}

impl FileSource {
    /// Read the policy file now (its path is relative to `config_dir`),
    /// so an unreadable one stops the start with its path.
    pub fn new(cfg: &Config, config_dir: &Path) -> Result<FileSource> {
        let policy = match &cfg.policy {
            Some(p) => Some(
                masq_policy::Policy::read(config_dir.join(p))
                    .map_err(|e| Error::Invalid(e.to_string()))?,
            ),
            None => None,
        };
        Ok(FileSource {
            placements: file_placements(cfg),
            policy,
        })
    }
}

impl FileSource {
    /// The policy checked against the file's map, not applied (`masqd
    /// --check`): what it is, or where it is wrong.
    pub fn check(&self) -> Result<String> {
        let Some((text, file)) = &self.policy else {
            return Ok("no policy".into());
        };
        let refs: Vec<_> = self
            .placements
            .iter()
            .filter_map(|p| {
                let name = p.name.clone()?;
                Some(masq_policy::EndpointRef::new(
                    name,
                    p.tenant.clone(),
                    p.vni,
                    p.vip,
                ))
            })
            .collect();
        let (p, _) = masq_policy::Policy::parse_allowing_unknown(text, file, &refs)
            .map_err(|e| Error::Invalid(e.to_string()))?;
        Ok(format!("policy {} version {}", p.file(), p.version_hash()))
    }
}

/// The config file's `vpc:` as placements.
pub fn file_placements(cfg: &Config) -> Vec<Placement> {
    cfg.vpc
        .iter()
        .map(|v| Placement {
            host: v.host,
            name: v.name.clone(),
            tenant: v.tenant.clone(),
            vni: v.vni,
            vip: v.vip,
            rail: v.rail.clone(),
            underlay: v.underlay,
            created: 0,
            pod: None,
        })
        .collect()
}

impl Source for FileSource {
    fn start(self: Arc<Self>, store: Arc<dyn Store>) -> Result<()> {
        store.placements(SourceId::File, self.placements.clone());
        match &self.policy {
            Some((text, file)) => store.policy(SourceId::File, text, file),
            None => {
                warn!("no policy configured: every pair of endpoints in a VPC may connect");
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A store that records what it is fed.
    #[derive(Default)]
    struct Recorder {
        fed: Mutex<Vec<String>>,
    }

    impl Store for Recorder {
        fn placements(&self, from: SourceId, all: Vec<Placement>) {
            let names: Vec<_> = all.iter().map(|p| format!("{:?}", p.name)).collect();
            self.fed
                .lock()
                .unwrap()
                .push(format!("{from}: {}", names.join(" ")));
        }
        fn placed(&self, _: SourceId, _: Placement) {}
        fn unplaced(&self, _: SourceId, _: Ipv4Addr, _: &str) {}
        fn policy(&self, from: SourceId, text: &str, file: &str) -> Result<()> {
            masq_policy::Policy::parse_allowing_unknown(text, file, &[])
                .map_err(|e| Error::Invalid(e.to_string()))?;
            self.fed
                .lock()
                .unwrap()
                .push(format!("{from}: policy {file}"));
            Ok(())
        }
        fn local_endpoints(&self) -> Vec<EndpointConfig> {
            Vec::new()
        }
        fn policy_version(&self) -> Option<String> {
            None
        }
        fn file_policy(&self) -> Option<(String, String)> {
            None
        }
        fn mirrored_all(&self, _: masq_policy::netpol::Snapshot) {}
        fn mirrored(&self, _: crate::admit::Mirrored) {}
    }

    fn config(policy: &str) -> (Config, std::path::PathBuf) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../integration/tests/configs/policy");
        let cfg = Config::parse(
            &format!(
                "device: rxe0\nunderlay: {{ netdev: eth0, ip: 198.18.0.1 }}\npolicy: {policy}\n\
                 vpc:\n\
                 \x20 - {{ tenant: acme, vni: 100, vip: 10.0.0.1, host: 198.18.0.1, name: acme-a }}\n\
                 \x20 - {{ tenant: acme, vni: 100, vip: 10.0.0.2, host: 198.18.0.2 }}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        (cfg, dir)
    }

    #[test]
    fn the_file_feeds_its_map_then_its_policy() {
        let (cfg, dir) = config("policy-revoked.yaml");
        let store = Arc::new(Recorder::default());
        Arc::new(FileSource::new(&cfg, &dir).unwrap())
            .start(store.clone())
            .unwrap();
        let fed = store.fed.lock().unwrap().clone();
        assert_eq!(fed.len(), 2, "{fed:?}");
        assert_eq!(fed[0], "config file: Some(\"acme-a\") None");
        assert!(fed[1].ends_with("policy-revoked.yaml"), "{fed:?}");
    }

    #[test]
    fn a_bad_or_missing_policy_file_is_an_error_naming_it() {
        let (cfg, dir) = config("policy-invalid.yaml");
        let err = Arc::new(FileSource::new(&cfg, &dir).unwrap())
            .start(Arc::new(Recorder::default()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("policy-invalid.yaml:8:27:"), "{err}");
        let (cfg, dir) = config("no-such-policy.yaml");
        let err = FileSource::new(&cfg, &dir)
            .err()
            .expect("must fail")
            .to_string();
        assert!(err.contains("no-such-policy.yaml: cannot read"), "{err}");
    }
}
