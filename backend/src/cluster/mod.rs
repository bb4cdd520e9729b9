//! What follows the cluster: the sources that place endpoints in the
//! registry (`source`; the registry itself is `endpoints/`'s), the etcd store every host of a
//! cluster follows (`etcd`; `publish` within it: how a host publishes its
//! endpoints and claims their names and vIPs; `values`: what it reads of
//! the store's keys and values), the policy it holds and who writes it
//! (`policy`), etcd's users and roles for it (`auth`), and how each
//! connects to it as an identity (`client`).

pub mod auth;
pub mod client;
pub mod etcd;
pub mod policy;
pub mod source;

// The paths `cluster::Cluster` and `cluster::retry_max` stay as they were.
pub use etcd::{retry_max, Cluster, Health};
