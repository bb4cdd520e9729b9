//! What masqd enforces: the security groups' admission of RDMA
//! connections (and Kubernetes NetworkPolicy's, `netpol`), the nftables backstop, the tcp/udp firewall, the audit of
//! the kernel's QPs, the endpoints' rate limits and rdma cgroup limits,
//! and the kernel conntrack entries a policy change ends.

pub mod admission;
pub mod attribution;
pub mod audit;
pub mod backstop;
pub mod firewall;
pub mod kconntrack;
pub mod limits;
pub mod netpol;
pub mod ratelimit;
pub mod rdma_cgroup;
