//! masqd internals: configuration, the uverbs commands masqd runs on
//! tenants' behalf, the per-endpoint session server and the control socket.
pub mod admission;
pub mod audit;
pub mod backstop;
pub mod cluster;
pub mod cm;
pub mod cm_link;
pub mod config;
pub mod control;
pub mod control_server;
pub mod daemon;
pub mod endpoints;
pub mod firewall;
pub mod host;
pub mod ibv;
pub mod kconntrack;
pub mod metrics;
pub mod nft;
pub mod ownership;
pub mod rdma_nl;
pub mod registry;
pub mod seqpacket;
pub mod session;
pub mod state;
pub mod sysfs_view;
pub mod uverbs;
