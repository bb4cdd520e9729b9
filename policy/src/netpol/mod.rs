//! Kubernetes NetworkPolicy for RDMA between masq pods.
//!
//! A controller mirrors into masq's etcd what NetworkPolicy needs and no
//! addresses: each Namespace's labels, each masq pod's namespace, name and
//! labels, each NetworkPolicy as the API's JSON. masqd binds a pod to its
//! vIP from its own endpoint registry (a pod's annotations are the
//! tenant's to write) and asks [`Index::decide`] at admission, beside its
//! security groups: a connection needs both.
//!
//! The meaning is NetworkPolicy's for TCP (docs/security-groups.md,
//! "Kubernetes NetworkPolicy"):
//!
//! - A pod selected by a policy with `Ingress` (`Egress`) in its
//!   `policyTypes` is isolated in that direction and admits only what one
//!   of those policies' rules allows; a pod no policy selects is open.
//! - An RDMA CM connect is TCP (RDMA_PS_TCP) or UDP (RDMA_PS_UDP) to the
//!   listener's port: a rule allowing TCP 7471 allows rping on 7471.
//! - A verbs RC/UC QP or UD address handle has no port and no known
//!   initiator: it is allowed when port-less traffic a→b or b→a is, and
//!   only rules without `ports` admit port-less traffic. A rule naming
//!   ports admits those services only; admitting a QP through it would
//!   open the pod's memory regions to everyone the service rule admits.
//! - Named ports never match (they name container ports masq does not
//!   see); `ipBlock` matches the peer's masq vIP; an endpoint that is no
//!   pod is matched by `ipBlock` (and rules without peers) only.
//! - Stateful: the reverse direction of an allowed connection is part of
//!   it.
//!
//! Files: `json.rs` reads the API's JSON with field paths, `selector.rs` label
//! selectors, `object.rs` the objects, `index.rs` the index and its updates,
//! `decide.rs` the decisions, `flows.rs` the same policies as a pod's
//! tcp/udp rules.

mod decide;
mod flows;
mod index;
mod json;
mod object;
mod selector;

pub use decide::{Change, Connection, Endpoint, PortSpace, Side, Verdict};
pub use flows::{Block, FlowPort, FlowRule, Flows, Peers, PodFlows};
pub use index::{Index, Snapshot};
pub use json::{Kind, NetpolError};
pub use object::{
    Cidr, IpBlock, Namespace, NetworkPolicy, Peer, Pod, Port, PortRule, Protocol, Rule,
};
pub use selector::{LabelSelector, Labels, Operator, Requirement};
