//! vbond: binds a masq virtual RDMA device to its endpoint's vNIC.
//!
//! - [`read_vnic`] / [`Binding`]: the vNIC's MAC, ifindex and addresses,
//!   read over rtnetlink inside the endpoint's network namespace (on a
//!   helper thread, so the caller's thread never changes namespace) and
//!   followed through link/address notifications.
//! - [`virtual_gid_table`]: the GIDs the tenant's apps see, built from the
//!   vNIC like the kernel builds a RoCE GID table from a netdev.
//! - [`VpcMap`]: (VNI, vIP) -> endpoint and host; translation of virtual
//!   dgids and sgid indexes to physical ones and back ([`translate_sgid_index`],
//!   [`reverse_dgid`]), and per-VNI DSCP.
//! - [`read_host_gids`]: the host RNIC's GID table from sysfs.

mod gid;
mod nic;
mod sysfs;
mod vnic;
mod vpc;

pub use gid::{
    eui64_from_mac, gid_to_string, guid_from_mac, ipv4_mapped_gid, link_local_gid, parse_gid,
    vip_of_gid, virtual_gid_table, Gid, VirtualGid,
};
pub use nic::{IfAddr, Vnic};
pub use sysfs::{read_host_gids, HostGid};
pub use vnic::{read_vnic, Binding};
pub use vpc::{
    reverse_dgid, translate_sgid_index, Peer, Route, TranslateError, VpcMap, FIRST_RAIL,
};
