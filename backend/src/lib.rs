//! masqd internals: configuration, the uverbs commands masqd runs on
//! tenants' behalf, the per-endpoint session server and the control socket.
pub mod admit;
pub mod cluster;
pub mod cm;
pub mod config;
pub mod daemon;
pub mod endpoints;
pub mod enforce;
pub mod error;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
pub mod http;
pub mod kernel;
pub mod metrics;
pub mod notify;
pub mod operator;
pub mod peer;
pub mod pipeline;
pub mod run;
pub mod safe_fs;
pub mod tenants;
pub mod transport;
