//! An endpoint's place in the VPC map as a source states it, and which
//! source stated it: what the registry keeps of every source apart (the
//! sources themselves follow the cluster: `cluster::source`).

use serde::Serialize;
use std::net::Ipv4Addr;

/// Which source placed an endpoint in the VPC map. Declared in order of
/// precedence: the cluster's word wins over a file not yet migrated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceId {
    Cluster,
    File,
}

impl std::fmt::Display for SourceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SourceId::Cluster => "cluster",
            SourceId::File => "config file",
        })
    }
}

/// An endpoint's place in the VPC map, as a source states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub host: Ipv4Addr,
    /// None: the file's entry gave none (listed, but no policy can name it).
    pub name: Option<String>,
    pub tenant: String,
    pub vni: u32,
    pub vip: Ipv4Addr,
    /// The rail its device is on (none: the first, `rail0`) and its
    /// host's address there (none: `host`).
    pub rail: Option<String>,
    pub underlay: Option<Ipv4Addr>,
    /// When its source first stated it: etcd's create revision of the
    /// endpoint's key (which of two hosts claimed a name or vIP first); 0
    /// from the file.
    pub created: i64,
    /// The Kubernetes pod (namespace, name) it is the endpoint of, as its
    /// host's masq-cni said: what NetworkPolicy selects it by.
    pub pod: Option<(String, String)>,
}
