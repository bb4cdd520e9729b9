//! GIDs, EUI-64, and the virtual GID table built from a vNIC.

use crate::nic::Vnic;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A GID as the verbs API carries it: 16 bytes, network order.
pub type Gid = [u8; 16];

/// `::ffff:a.b.c.d`, the RoCE v2 GID of an IPv4 address.
pub fn ipv4_mapped_gid(ip: Ipv4Addr) -> Gid {
    ip.to_ipv6_mapped().octets()
}

/// The IPv4 address of an IPv4-mapped GID; `None` for any other GID
/// (link-local, IPv6, IPv4-compatible `::a.b.c.d`, ...).
pub fn vip_of_gid(gid: &Gid) -> Option<Ipv4Addr> {
    Ipv6Addr::from(*gid).to_ipv4_mapped()
}

/// Text form as `ip` prints IPv6 (`::ffff:10.0.0.1`, `fe80::5054:ff:fe12:3456`).
pub fn gid_to_string(gid: &Gid) -> String {
    Ipv6Addr::from(*gid).to_string()
}

/// Parses IPv6 text, including sysfs's `fe80:0000:...:3456` form.
pub fn parse_gid(s: &str) -> Option<Gid> {
    s.trim().parse::<Ipv6Addr>().ok().map(|a| a.octets())
}

/// Modified EUI-64 of a MAC (RFC 4291 appendix A): insert ff:fe in the
/// middle and flip the universal/local bit, as the kernel's
/// `addrconf_addr_eui48` does for RoCE default GIDs and rxe's node GUID.
pub fn eui64_from_mac(mac: [u8; 6]) -> [u8; 8] {
    [
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]
}

/// `fe80::/64` + the MAC's EUI-64.
pub fn link_local_gid(mac: [u8; 6]) -> Gid {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8..].copy_from_slice(&eui64_from_mac(mac));
    g
}

/// Node GUID / sys_image_guid of a virtual device: the EUI-64 as a number,
/// first byte most significant. A `__be64` field holds `to_be_bytes()`.
pub fn guid_from_mac(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes(eui64_from_mac(mac))
}

/// One entry of a GID table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VirtualGid {
    pub index: u32,
    pub gid: Gid,
    /// Always true today: the virtual device offers RoCE v2 only.
    pub roce_v2: bool,
}

/// Whether an IPv6 vNIC address gets a GID: global scope only (no
/// link-local, loopback, multicast, unspecified or IPv4-mapped).
fn is_global_v6(a: &Ipv6Addr) -> bool {
    !(a.is_loopback()
        || a.is_unspecified()
        || a.is_multicast()
        || a.is_unicast_link_local()
        || a.to_ipv4_mapped().is_some())
}

/// The virtual GID table of an endpoint, ordered like the kernel's RoCE GID
/// table: 0 = link-local from the MAC, then `::ffff:A` for each IPv4
/// address, then each global IPv6 address (in the vNIC's order).
pub fn virtual_gid_table(nic: &Vnic) -> Vec<VirtualGid> {
    let v4 = nic.addrs.iter().filter_map(|a| match a.ip {
        IpAddr::V4(ip) => Some(ipv4_mapped_gid(ip)),
        IpAddr::V6(_) => None,
    });
    let v6 = nic.addrs.iter().filter_map(|a| match a.ip {
        IpAddr::V6(ip) if is_global_v6(&ip) => Some(ip.octets()),
        _ => None,
    });
    let mut out: Vec<VirtualGid> = Vec::new();
    for gid in std::iter::once(link_local_gid(nic.mac)).chain(v4).chain(v6) {
        // An address listed twice (e.g. after a racy re-read) is one GID.
        if out.iter().any(|g| g.gid == gid) {
            continue;
        }
        out.push(VirtualGid {
            index: out.len() as u32,
            gid,
            roce_v2: true,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nic::IfAddr;

    const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

    #[test]
    fn eui64_flips_ul_bit_and_inserts_fffe() {
        assert_eq!(
            eui64_from_mac(MAC),
            [0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56]
        );
        // Universally administered MAC: the bit gets set.
        assert_eq!(eui64_from_mac([0x00, 0x1b, 0x21, 1, 2, 3])[0], 0x02);
        // The multicast bit is left alone.
        assert_eq!(eui64_from_mac([0x03, 0, 0, 0, 0, 0])[0], 0x01);
        assert_eq!(eui64_from_mac([0; 6]), [2, 0, 0, 0xff, 0xfe, 0, 0, 0]);
        assert_eq!(
            eui64_from_mac([0xff; 6]),
            [0xfd, 0xff, 0xff, 0xff, 0xfe, 0xff, 0xff, 0xff]
        );
    }

    #[test]
    fn link_local_and_guid() {
        assert_eq!(
            gid_to_string(&link_local_gid(MAC)),
            "fe80::5054:ff:fe12:3456"
        );
        assert_eq!(guid_from_mac(MAC), 0x5054_00ff_fe12_3456);
        assert_eq!(guid_from_mac(MAC).to_be_bytes(), eui64_from_mac(MAC));
    }

    #[test]
    fn ipv4_mapped_round_trip() {
        let ip = Ipv4Addr::new(10, 0, 0, 1);
        let g = ipv4_mapped_gid(ip);
        assert_eq!(gid_to_string(&g), "::ffff:10.0.0.1");
        assert_eq!(vip_of_gid(&g), Some(ip));
        assert_eq!(vip_of_gid(&link_local_gid(MAC)), None);
        // IPv4-compatible (::a.b.c.d) and IPv6 GIDs are not IPv4 RoCE v2 GIDs.
        assert_eq!(vip_of_gid(&parse_gid("::10.0.0.1").unwrap()), None);
        assert_eq!(vip_of_gid(&parse_gid("2001:db8::1").unwrap()), None);
        assert_eq!(vip_of_gid(&[0; 16]), None);
    }

    #[test]
    fn parse_sysfs_and_short_forms() {
        let long = parse_gid("0000:0000:0000:0000:0000:ffff:0a00:0001\n").unwrap();
        assert_eq!(long, ipv4_mapped_gid(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(
            parse_gid("fe80::5054:ff:fe12:3456"),
            Some(link_local_gid(MAC))
        );
        assert_eq!(parse_gid("10.0.0.1"), None);
        assert_eq!(parse_gid(""), None);
        assert_eq!(parse_gid("fe80::1::2"), None);
    }

    fn nic(addrs: &[&str]) -> Vnic {
        Vnic {
            ifname: "eth0".into(),
            ifindex: 2,
            mac: MAC,
            mtu: 1500,
            up: true,
            addrs: addrs
                .iter()
                .map(|a| IfAddr {
                    ip: a.parse().unwrap(),
                    prefix_len: 24,
                })
                .collect(),
        }
    }

    #[test]
    fn table_order_and_filtering() {
        // Kernel order of addresses is kept within each family; families
        // are grouped link-local, IPv4, IPv6 whatever order they came in.
        let t = virtual_gid_table(&nic(&[
            "2001:db8::1",
            "fe80::1",
            "10.0.0.1",
            "::1",
            "ff02::1",
            "10.0.0.9",
            "fd00::5",
            "::ffff:1.2.3.4",
            "10.0.0.1",
        ]));
        let got: Vec<String> = t.iter().map(|g| gid_to_string(&g.gid)).collect();
        assert_eq!(
            got,
            [
                "fe80::5054:ff:fe12:3456",
                "::ffff:10.0.0.1",
                "::ffff:10.0.0.9",
                "2001:db8::1",
                "fd00::5",
            ]
        );
        assert!(t
            .iter()
            .enumerate()
            .all(|(i, g)| g.index == i as u32 && g.roce_v2));
    }

    #[test]
    fn table_without_addresses_has_link_local_only() {
        let t = virtual_gid_table(&nic(&[]));
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].gid, link_local_gid(MAC));
    }
}
