//! The kernel's interfaces masqd uses: the uverbs commands it runs on the
//! apps' files, rdma netlink, the served device, the sysfs views, the
//! libibverbs numbering, the kernel's word on QP ownership, nftables
//! (libnftables for rulesets and listings, netlink for set elements), the
//! backstop's eBPF programs and maps, the connection tracking table
//! (ctnetlink) and traffic control's qdiscs and classes (rtnetlink).

pub mod bpf_backstop;
pub mod ctnetlink;
pub mod host;
pub mod ibv;
pub mod netlink;
pub mod nft;
pub mod nft_counters;
pub mod nft_set;
pub mod ownership;
pub mod rdma_nl;
pub mod sysfs_view;
pub mod tc;
pub mod uverbs;
