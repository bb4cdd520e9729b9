//! What serves the tenants at run time: the live sessions (`sessions`) and
//! the daemon's state as the host the core, the CM and the CM link are
//! written against (`parts`).

pub mod kernel;
pub mod parts;
pub mod sessions;
