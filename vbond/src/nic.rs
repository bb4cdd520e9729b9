//! The vNIC's data: what `read_vnic` reads and the virtual GID table is
//! built from (its own module, so `gid` and `vnic` need not use each other).

use std::net::IpAddr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IfAddr {
    pub ip: IpAddr,
    pub prefix_len: u8,
}

/// What masq needs of an endpoint's network interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vnic {
    pub ifname: String,
    pub ifindex: u32,
    pub mac: [u8; 6],
    pub mtu: u32,
    /// Administratively up and with carrier (IFF_UP and IFF_RUNNING).
    pub up: bool,
    /// In the kernel's order, IPv4 and IPv6 together.
    pub addrs: Vec<IfAddr>,
}
