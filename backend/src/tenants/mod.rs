//! What serves the tenants at run time: the parts masqd is made of
//! (`parts`) as the host the core, the CM and the CM link are written
//! against, each endpoint's apps accepted (`serve`), their sessions'
//! requests dispatched (`dispatch`), and the live sessions (`sessions`)
//! with their kernel; the containers' and pods' cgroups the backstop
//! filters as an endpoint's (`cgroups`); and the housekeeping threads
//! (`watch`). Its unit tests, and the operator's, build the parts
//! without the kernel (`fakes`).

pub mod cgroups;
pub mod dispatch;
#[cfg(test)]
pub mod fakes;
pub mod kernel;
pub mod parts;
pub mod serve;
pub mod sessions;
pub mod watch;
