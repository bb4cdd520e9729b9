//! What follows the cluster: the endpoints (`endpoint`), the registry of
//! this host's endpoints and the VPC map (`registry`), the sources that
//! place endpoints in it (`source`), the etcd store every host of a
//! cluster follows (`etcd`; `publish` within it: how a host publishes its
//! endpoints and claims their names and vIPs; `values`: what it reads of
//! the store's keys and values), the policy it holds and who writes it
//! (`policy`), etcd's users and roles for it (`auth`), and how each
//! connects to it as an identity (`client`); what each endpoint's apps make
//! masqd hold, against its limits (`usage`).

pub mod auth;
pub mod client;
pub mod endpoint;
pub mod etcd;
pub mod policy;
pub mod registry;
pub mod source;
pub mod usage;

// The paths `cluster::Cluster` and `cluster::retry_max` stay as they were.
pub use etcd::{retry_max, Cluster, Health};
