//! What serves the tenants at run time: the parts masqd is made of
//! (`parts`) as the host the core, the CM and the CM link are written
//! against, the live sessions (`sessions`) with their kernel, and each
//! session's requests dispatched (`dispatch`).

pub mod dispatch;
pub mod kernel;
pub mod parts;
pub mod sessions;
