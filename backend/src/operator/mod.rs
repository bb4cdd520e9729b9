//! What serves the operator: the control socket's protocol (`control`)
//! and server (`control_server`), the command lines of masqd and masqctl
//! (`cli`), the CDI specs for container runtimes (`cdi`), serving, adding
//! and removing endpoints (`endpoints`), and putting the security groups'
//! policy in force (`policy`).

pub mod cdi;
pub mod cli;
pub mod control;
pub mod control_server;
pub mod endpoints;
pub mod policy;
