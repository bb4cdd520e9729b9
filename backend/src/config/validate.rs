//! The config file's consistency checks (`Config::parse`): each section's
//! values, and across sections the VPC map's and the endpoints' VNIs,
//! names, sockets and placement.

use super::{check_device_of, check_name, check_vni, ClusterConfig, Config};
use crate::error::{Error, Result};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::Ipv4Addr;

/// Each VNI's tenant, as claimed so far.
type VniOwners<'a> = HashMap<u32, &'a str>;
/// Each (VNI, vIP)'s host, as the VPC map places it.
type Placed = BTreeMap<(u32, Ipv4Addr), Ipv4Addr>;

impl Config {
    pub(super) fn validate(&self) -> Result<()> {
        self.validate_rails()?;
        if self.underlay.ip.is_unspecified() && !self.vpc.is_empty() {
            return Err(Error::Invalid(
                "underlay.ip: required with a vpc: map, which names hosts by it (only a file \
                 for many hosts, in cluster mode, may leave it to the netdev)"
                    .into(),
            ));
        }
        self.validate_cm()?;
        self.audit.interval()?;
        self.tenant_limits.check()?;
        if let Some(c) = &self.cluster {
            validate_cluster(c)?;
        }
        self.validate_metrics()?;
        self.validate_dirs()?;
        let (mut vni_owner, placed) = self.validate_vpc()?;
        self.validate_endpoints(&mut vni_owner, &placed)
    }

    fn validate_cm(&self) -> Result<()> {
        if self.cm.port == 0 {
            return Err(Error::Invalid("cm.port: must be 1 or more".into()));
        }
        if !(100..=600_000).contains(&self.cm.timeout_ms) {
            return Err(Error::Invalid(format!(
                "cm.timeoutMs: {} is outside 100..=600000",
                self.cm.timeout_ms
            )));
        }
        Ok(())
    }

    /// The metrics' TLS and bearer token need its listener.
    fn validate_metrics(&self) -> Result<()> {
        if self.metrics.listen.is_none() {
            if self.metrics.tls.is_some() {
                return Err(Error::Invalid(
                    "metrics.tls: set, but metrics.listen is not".into(),
                ));
            }
            if self.metrics.bearer_token_file.is_some() {
                return Err(Error::Invalid(
                    "metrics.bearerTokenFile: set, but metrics.listen is not".into(),
                ));
            }
        }
        Ok(())
    }

    /// cdi.specDir and socketDir are absolute paths.
    fn validate_dirs(&self) -> Result<()> {
        if let Some(c) = &self.cdi {
            if !c.spec_dir.is_absolute() {
                return Err(Error::Invalid(format!(
                    "cdi.specDir: {:?} must be an absolute path",
                    c.spec_dir
                )));
            }
        }
        if !self.socket_dir.is_absolute() {
            return Err(Error::Invalid(format!(
                "socketDir: {:?} must be an absolute path",
                self.socket_dir
            )));
        }
        Ok(())
    }

    /// The VPC map's entries: each VNI belongs to exactly one tenant, each
    /// (VNI, vIP) is one endpoint. The VNIs' tenants, and each (VNI, vIP)'s
    /// host.
    fn validate_vpc(&self) -> Result<(VniOwners<'_>, Placed)> {
        let mut vni_owner = VniOwners::new();
        let mut placed = Placed::new();
        for (i, v) in self.vpc.iter().enumerate() {
            let at = format!("vpc[{i}]");
            check_name(&format!("{at}.tenant"), &v.tenant, 64)?;
            check_vni(&format!("{at}.vni"), v.vni)?;
            if let Some(n) = &v.name {
                check_name(&format!("{at}.name"), n, 64)?;
            }
            if let Some(r) = &v.rail {
                check_name(&format!("{at}.rail"), r, 15)?;
            }
            claim_vni(&mut vni_owner, v.vni, &v.tenant, &at)?;
            if placed.insert((v.vni, v.vip), v.host).is_some() {
                return Err(Error::Invalid(format!(
                    "{at}: VNI {} vIP {} is listed twice in the VPC map",
                    v.vni, v.vip
                )));
            }
        }
        Ok((vni_owner, placed))
    }

    /// The endpoints' own fields, names and sockets each used once, VNIs
    /// of one tenant (`vni_owner`, the VPC map's so far), each placed on
    /// this host by the VPC map (`placed`) unless in cluster mode.
    fn validate_endpoints<'a>(
        &'a self,
        vni_owner: &mut VniOwners<'a>,
        placed: &Placed,
    ) -> Result<()> {
        let mut names = HashSet::new();
        let mut sockets = HashSet::new();
        for (i, e) in self.endpoints.iter().enumerate() {
            let at = format!("endpoints[{i}]");
            e.check(&at, &self.socket_dir)?;
            if !names.insert(e.name.as_str()) {
                return Err(Error::Invalid(format!(
                    "{at}.name: endpoint {:?} is defined twice",
                    e.name
                )));
            }
            let sock = e.socket_path(&self.socket_dir);
            if !sockets.insert(sock.clone()) || sock == self.control_socket() {
                return Err(Error::Invalid(format!(
                    "{at}.socket: {sock:?} is used twice"
                )));
            }
            claim_vni(vni_owner, e.vni, &e.tenant, &at)?;
            let rail = |n: Option<&str>| self.rail_index(n);
            check_device_of(&at, e, &self.endpoints, rail)?;
            match placed.get(&(e.vni, e.vip)) {
                // In cluster mode a host publishes its own endpoints.
                None if self.cluster.is_some() => {}
                None => {
                    return Err(Error::Invalid(format!(
                        "{at}: {} (VNI {}, vIP {}) is missing from the VPC map",
                        e.name, e.vni, e.vip
                    )))
                }
                Some(host) if *host != self.underlay.ip => {
                    return Err(Error::Invalid(format!(
                        "{at}: {} is local, but the VPC map places VNI {} vIP {} on host {}, \
                         not on this host ({})",
                        e.name, e.vni, e.vip, host, self.underlay.ip
                    )))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// The cluster section: etcd's URLs as its TLS setting says, the key
/// prefix and the lease.
fn validate_cluster(c: &ClusterConfig) -> Result<()> {
    if c.etcd.is_empty() {
        return Err(Error::Invalid(
            "cluster.etcd: list at least one etcd URL".into(),
        ));
    }
    if c.tls.is_some() && c.insecure {
        return Err(Error::Invalid(
            "cluster.insecure: true, but cluster.tls is set: remove one".into(),
        ));
    }
    if c.tls.is_none() && !c.insecure {
        return Err(Error::Invalid(
            "cluster.tls: missing: cluster mode reaches etcd over TLS as this host \
             (tls: {ca, cert, key}); `insecure: true` runs it in plaintext with no \
             identities, and then anyone who reaches etcd can rewrite the cluster"
                .into(),
        ));
    }
    for (i, u) in c.etcd.iter().enumerate() {
        let want = if c.insecure { "http://" } else { "https://" };
        if !u.starts_with(want) {
            let why = match (u.starts_with("http://"), u.starts_with("https://")) {
                (true, _) => "is plaintext, but cluster.tls is set",
                (_, true) => "needs cluster.tls (cluster.insecure is set)",
                _ => "is not an http:// or https:// URL",
            };
            return Err(Error::Invalid(format!(
                "cluster.etcd[{i}]: {u:?} {why}; use {want}"
            )));
        }
    }
    if !c.prefix.starts_with('/') || c.prefix.ends_with('/') || c.prefix.len() < 2 {
        return Err(Error::Invalid(format!(
            "cluster.prefix: {:?} must start with '/' and not end with one",
            c.prefix
        )));
    }
    if !(2..=300).contains(&c.lease_seconds) {
        return Err(Error::Invalid(format!(
            "cluster.leaseSeconds: {} is outside 2..=300",
            c.lease_seconds
        )));
    }
    Ok(())
}

fn claim_vni<'a>(owners: &mut VniOwners<'a>, vni: u32, tenant: &'a str, at: &str) -> Result<()> {
    match owners.insert(vni, tenant) {
        Some(prev) if prev != tenant => Err(Error::Invalid(format!(
            "{at}: VNI {vni} belongs to tenant {prev:?}, not {tenant:?}"
        ))),
        _ => Ok(()),
    }
}
