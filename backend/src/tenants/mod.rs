//! What serves the tenants at run time: the parts masqd is made of
//! (`parts`) as the host the core, the CM and the CM link are written
//! against, and the live sessions (`sessions`) with their kernel.

pub mod kernel;
pub mod parts;
pub mod sessions;
