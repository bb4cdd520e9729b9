//! What serves the operator: the control socket's protocol (`control`)
//! and server (`control_server`), the command lines of masqd and masqctl
//! (`cli`), the CDI specs for container runtimes (`cdi`), serving, adding
//! and removing endpoints (`endpoints`), putting the security groups'
//! policy in force (`policy`), and masqctl writing it to the cluster as
//! the operator (`policy_as_operator`).

pub mod cdi;
pub mod cli;
pub mod control;
pub mod control_server;
pub mod endpoints;
pub mod pod_markers;
pub mod policy;
pub mod policy_as_operator;
