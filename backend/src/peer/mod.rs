//! The masqd-to-masqd transport for the RDMA CM: its messages are
//! masq-proto's (`PeerBody`), framed on the wire by `wire`; the TCP links between hosts
//! (`link`), which hand what they receive to a `link::PeerSink`, their
//! senders, a queue and a thread per peer (`send`), and their mutual TLS
//! (`tls`).

pub mod link;
pub mod send;
pub mod tls;
pub mod wire;
