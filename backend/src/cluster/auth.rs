//! etcd's users and roles for a masq cluster (`masqctl cluster init-auth`).
//!
//! etcd run with `--client-cert-auth` takes a client certificate's CN as
//! its user once authentication is on. The roles made here let each host's
//! user write only its own keys under the prefix (its registration, its
//! endpoints and its policy status), let the operator's user write any of
//! masq's keys (the policy above all), and let every one of them read the
//! prefix, which each masqd follows. Hosts also write the claims on
//! endpoints' names and vIPs (`P/claims/`). etcd turns authentication on only
//! with a `root` user, so that one is made too: it is the identity this
//! command runs with once authentication is on, to add hosts later.
//!
//! Kubernetes NetworkPolicy's mirror (`masq-netpol`, docs/kubernetes.md)
//! gets a role of its own: it writes `P/k8s/` (the namespaces', masq
//! pods' and NetworkPolicies' copies every masqd decides from) and only
//! that; no host's role may write there, so a host with a valid
//! certificate cannot widen another pod's policy.
//!
//! Every step is idempotent: what exists is left as it is, and running the
//! command again with more hosts adds them.

use crate::config::identity::Identity;
use crate::error::{Error, Result};
use etcd_client::{Client, Permission, UserAddOptions};
use std::net::Ipv4Addr;

/// The role every operator user gets.
pub const OPERATOR_ROLE: &str = "masq-operator";

/// The role of NetworkPolicy's mirror.
pub const NETPOL_ROLE: &str = "masq-netpol";

/// A host: the CN of its certificate and its underlay address (the name
/// its keys carry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub ip: Ipv4Addr,
}

/// `NAME=IP`, as `masqctl cluster init-auth` takes a host.
pub fn parse_host(s: &str) -> Result<Host> {
    let (name, ip) = s.split_once('=').ok_or_else(|| {
        Error::Invalid(format!(
            "{s:?}: want NAME=IP (its certificate's CN and underlay IP)"
        ))
    })?;
    if name.is_empty() || name == "root" {
        return Err(Error::Invalid(format!(
            "{s:?}: a host's name is its certificate's CN, not empty or root"
        )));
    }
    let ip = ip
        .parse()
        .map_err(|e| Error::Invalid(format!("{s:?}: {ip:?} is not an IPv4 address: {e}")))?;
    Ok(Host {
        name: name.into(),
        ip,
    })
}

/// The role of host `name`.
pub fn host_role(name: &str) -> String {
    format!("masq-host-{name}")
}

/// What a host's role may do: read the prefix; read and write its own
/// registration, endpoints and status (the keys `etcd.rs` writes), and the
/// claims on endpoints' names and vIPs (`publish.rs`), which no host owns
/// before it claims them: etcd cannot let a host delete only its own, so
/// the claims guard honest hosts, and what readers enforce is in
/// `registry.rs`.
fn host_permissions(prefix: &str, ip: Ipv4Addr) -> Vec<Permission> {
    vec![
        Permission::read(format!("{prefix}/")).with_prefix(),
        Permission::read_write(format!("{prefix}/hosts/{ip}")),
        Permission::read_write(format!("{prefix}/endpoints/{ip}/")).with_prefix(),
        Permission::read_write(format!("{prefix}/status/{ip}")),
        Permission::read_write(format!("{prefix}/claims/")).with_prefix(),
    ]
}

/// What NetworkPolicy's mirror may do: read the prefix, write `P/k8s/`.
fn netpol_permissions(prefix: &str) -> Vec<Permission> {
    vec![
        Permission::read(format!("{prefix}/")).with_prefix(),
        Permission::read_write(format!("{prefix}/k8s/")).with_prefix(),
    ]
}

/// etcd's answer to making what exists.
fn exists(e: &etcd_client::Error) -> bool {
    e.to_string().contains("already")
}

async fn ensure_role(
    client: &mut Client,
    role: &str,
    perms: Vec<Permission>,
    done: &mut Vec<String>,
) -> Result<()> {
    match client.role_add(role).await {
        Ok(_) => done.push(format!("role {role} added")),
        Err(e) if exists(&e) => {}
        Err(e) => return Err(Error::Failed(format!("role {role}: {e}"))),
    }
    for p in perms {
        client
            .role_grant_permission(role, p)
            .await
            .map_err(|e| Error::Failed(format!("role {role}: {e}")))?;
    }
    Ok(())
}

async fn ensure_user(
    client: &mut Client,
    user: &str,
    role: &str,
    done: &mut Vec<String>,
) -> Result<()> {
    // No password: the user signs in with its certificate only.
    match client
        .user_add(user, "", Some(UserAddOptions::new().with_no_pwd()))
        .await
    {
        Ok(_) => done.push(format!("user {user} added")),
        Err(e) if exists(&e) => {}
        Err(e) => return Err(Error::Failed(format!("user {user}: {e}"))),
    }
    match client.user_grant_role(user, role).await {
        Ok(_) => Ok(()),
        Err(e) if exists(&e) => Ok(()),
        Err(e) => Err(Error::Failed(format!("user {user}: role {role}: {e}"))),
    }
}

/// Make the users and roles for masq's keys under `prefix` (NetworkPolicy's
/// mirror's too when `netpol` names its user) and turn authentication on.
/// Returns what it made, a line each.
pub async fn init_auth(
    client: &mut Client,
    prefix: &str,
    operator: &str,
    hosts: &[Host],
    netpol: Option<&str>,
) -> Result<Vec<String>> {
    let mut done = Vec::new();
    // etcd's root role exists from the start; its user does not.
    ensure_user(client, "root", "root", &mut done).await?;
    let all = Permission::read_write(format!("{prefix}/")).with_prefix();
    ensure_role(client, OPERATOR_ROLE, vec![all], &mut done).await?;
    ensure_user(client, operator, OPERATOR_ROLE, &mut done).await?;
    for h in hosts {
        let role = host_role(&h.name);
        ensure_role(client, &role, host_permissions(prefix, h.ip), &mut done).await?;
        ensure_user(client, &h.name, &role, &mut done).await?;
    }
    if let Some(user) = netpol {
        ensure_role(client, NETPOL_ROLE, netpol_permissions(prefix), &mut done).await?;
        ensure_user(client, user, NETPOL_ROLE, &mut done).await?;
    }
    client
        .auth_enable()
        .await
        .map_err(|e| Error::Failed(format!("turning authentication on: {e}")))?;
    done.push("authentication on".into());
    Ok(done)
}

/// `masqctl cluster init-auth`: connect to etcd at `urls` as `identity`
/// (etcd's root user once authentication is on) and run `init_auth`.
pub fn run(
    urls: &[String],
    identity: &Identity,
    prefix: &str,
    operator: &str,
    hosts: &[Host],
    netpol: Option<&str>,
) -> Result<Vec<String>> {
    if !prefix.starts_with('/') || prefix.ends_with('/') || prefix.len() < 2 {
        return Err(Error::Invalid(format!(
            "--prefix {prefix:?}: must start with '/' and not end with one"
        )));
    }
    if operator.is_empty() || operator == "root" || hosts.iter().any(|h| h.name == operator) {
        return Err(Error::Invalid(format!(
            "--operator {operator:?}: must be a certificate's CN of its own, not root or a host's"
        )));
    }
    if let Some(user) = netpol {
        // One user, one role: etcd grants a user the union of its roles.
        if user.is_empty()
            || user == "root"
            || user == operator
            || hosts.iter().any(|h| h.name == user)
        {
            return Err(Error::Invalid(format!(
                "--netpol-mirror {user:?}: must be a certificate's CN of its own, not root, the \
                 operator's or a host's"
            )));
        }
    }
    let (rt, mut client) = crate::cluster::client::connect_once(urls, identity)?;
    rt.block_on(init_auth(&mut client, prefix, operator, hosts, netpol))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_its_certificates_name_and_its_underlay_address() {
        assert_eq!(
            parse_host("host1=198.18.0.1"),
            Ok(Host {
                name: "host1".into(),
                ip: Ipv4Addr::new(198, 18, 0, 1)
            })
        );
        for (bad, says) in [
            ("host1", "want NAME=IP"),
            ("=198.18.0.1", "not empty or root"),
            ("root=198.18.0.1", "not empty or root"),
            ("host1=198.18.0", "not an IPv4 address"),
        ] {
            let e = parse_host(bad).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
