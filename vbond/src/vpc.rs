//! The VPC map and virtual <-> physical address translation.

use crate::gid::{gid_to_string, ipv4_mapped_gid, vip_of_gid, Gid, VirtualGid};
use crate::sysfs::HostGid;
use nix::libc;
use std::collections::HashMap;
use std::fmt;
use std::net::Ipv4Addr;

/// The rail a single-NIC host's endpoints are on.
pub const FIRST_RAIL: &str = "rail0";

/// Where a vIP lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Endpoint name, e.g. `acme-b`.
    pub name: String,
    /// Underlay IPv4 of the host the endpoint runs on: its identity (the
    /// CM link's address), its first rail's address.
    pub host: Ipv4Addr,
    /// The rail network the endpoint's device is on, and the host's
    /// address there: what its packets carry.
    pub rail: String,
    pub underlay: Ipv4Addr,
}

impl Peer {
    /// An endpoint of a host with one rail.
    pub fn single(name: impl Into<String>, host: Ipv4Addr) -> Peer {
        Peer {
            name: name.into(),
            host,
            rail: FIRST_RAIL.into(),
            underlay: host,
        }
    }
}

/// A translated destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route<'a> {
    pub vip: Ipv4Addr,
    pub peer: &'a Peer,
    /// `::ffff:ADDR` of the peer's host on the peer's rail, what goes into
    /// the QP context.
    pub phys_dgid: Gid,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TranslateError {
    /// The dgid is not a RoCE v2 IPv4-mapped GID (link-local, IPv6, ...):
    /// a VPC routes IPv4 vIPs only.
    NotIpv4Gid(Gid),
    /// The vIP is not in this VPC.
    NoRoute { vni: u32, vip: Ipv4Addr },
    /// The vIP is on another rail network, not joined to the sender's.
    CrossRail {
        vip: Ipv4Addr,
        from: String,
        to: String,
    },
    /// The sgid index is past the end of the virtual GID table.
    NoSuchSgid(u32),
    /// The virtual sgid is not an IPv4 RoCE v2 GID, so it can't pair with
    /// an IPv4 dgid.
    SgidNotIpv4(u32),
    /// The host port has no GID of that type for its underlay address.
    NoHostGid { underlay: Ipv4Addr, roce_v2: bool },
    /// A QP's physical dgid is not its recorded peer's: someone changed
    /// the QP behind masq's back. The physical GID is not shown.
    PeerMismatch { peer_vip: Ipv4Addr },
    /// DSCP is 6 bits.
    BadDscp(u8),
}

impl TranslateError {
    /// The errno a verbs app gets.
    pub fn errno(&self) -> i32 {
        match self {
            TranslateError::NotIpv4Gid(_)
            | TranslateError::NoRoute { .. }
            | TranslateError::CrossRail { .. } => libc::EHOSTUNREACH,
            TranslateError::NoSuchSgid(_) | TranslateError::SgidNotIpv4(_) => libc::EINVAL,
            TranslateError::BadDscp(_) => libc::EINVAL,
            TranslateError::NoHostGid { .. } => libc::ENETDOWN,
            TranslateError::PeerMismatch { .. } => libc::EIO,
        }
    }
}

impl fmt::Display for TranslateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TranslateError::NotIpv4Gid(g) => {
                write!(
                    f,
                    "dgid {} is not an IPv4 RoCE v2 GID (::ffff:a.b.c.d)",
                    gid_to_string(g)
                )
            }
            TranslateError::NoRoute { vni, vip } => write!(f, "{vip} is not in VNI {vni}"),
            TranslateError::CrossRail { vip, from, to } => write!(
                f,
                "{vip} is on rail {to}, which rail {from} does not reach (no railJoins)"
            ),
            TranslateError::NoSuchSgid(i) => write!(f, "sgid index {i} is not in the GID table"),
            TranslateError::SgidNotIpv4(i) => {
                write!(f, "sgid index {i} is not an IPv4 RoCE v2 GID")
            }
            TranslateError::NoHostGid { underlay, roce_v2 } => write!(
                f,
                "the host port has no {} GID for {underlay}",
                if *roce_v2 { "RoCE v2" } else { "RoCE v1" }
            ),
            TranslateError::PeerMismatch { peer_vip } => {
                write!(f, "QP's destination is not its recorded peer {peer_vip}")
            }
            TranslateError::BadDscp(d) => write!(f, "DSCP {d} is out of range 0..=63"),
        }
    }
}

impl std::error::Error for TranslateError {}

/// (VNI, vIP) -> endpoint and host, for every endpoint of every VPC, plus
/// per-VNI traffic-class policy. Built by masqd from its config.
#[derive(Clone, Debug, Default)]
pub struct VpcMap {
    peers: HashMap<(u32, Ipv4Addr), Peer>,
    dscp: HashMap<u32, u8>,
    /// Groups of rails whose networks reach each other.
    rail_joins: Vec<Vec<String>>,
}

impl VpcMap {
    pub fn new() -> VpcMap {
        VpcMap::default()
    }

    /// Add or replace an endpoint of a single-rail host; returns what was
    /// there.
    pub fn insert(
        &mut self,
        vni: u32,
        vip: Ipv4Addr,
        name: impl Into<String>,
        host: Ipv4Addr,
    ) -> Option<Peer> {
        self.insert_peer(vni, vip, Peer::single(name, host))
    }

    /// Add or replace; returns what was there.
    pub fn insert_peer(&mut self, vni: u32, vip: Ipv4Addr, peer: Peer) -> Option<Peer> {
        self.peers.insert((vni, vip), peer)
    }

    /// The groups of rails that reach each other (`railJoins`).
    pub fn set_rail_joins(&mut self, joins: Vec<Vec<String>>) {
        self.rail_joins = joins;
    }

    /// A QP on rail `from` can reach rail `to`: the same rail, or joined.
    pub fn rails_meet(&self, from: &str, to: &str) -> bool {
        from == to
            || self
                .rail_joins
                .iter()
                .any(|g| g.iter().any(|r| r == from) && g.iter().any(|r| r == to))
    }

    /// Builder form of `insert`.
    pub fn with(
        mut self,
        vni: u32,
        vip: Ipv4Addr,
        name: impl Into<String>,
        host: Ipv4Addr,
    ) -> VpcMap {
        self.insert(vni, vip, name, host);
        self
    }

    pub fn remove(&mut self, vni: u32, vip: Ipv4Addr) -> Option<Peer> {
        self.peers.remove(&(vni, vip))
    }

    pub fn lookup(&self, vni: u32, vip: Ipv4Addr) -> Option<&Peer> {
        self.peers.get(&(vni, vip))
    }

    pub fn len(&self) -> usize {
        self.peers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Unordered.
    pub fn iter(&self) -> impl Iterator<Item = (u32, Ipv4Addr, &Peer)> {
        self.peers.iter().map(|(&(vni, vip), p)| (vni, vip, p))
    }

    /// Override the DSCP of every QP in `vni` (`None`: pass the app's
    /// traffic class through, the default).
    pub fn set_dscp(&mut self, vni: u32, dscp: Option<u8>) -> Result<(), TranslateError> {
        match dscp {
            Some(d) if d > 63 => return Err(TranslateError::BadDscp(d)),
            Some(d) => self.dscp.insert(vni, d),
            None => self.dscp.remove(&vni),
        };
        Ok(())
    }

    pub fn dscp(&self, vni: u32) -> Option<u8> {
        self.dscp.get(&vni).copied()
    }

    /// The traffic class to program for an app that asked for `requested`:
    /// the override DSCP in the upper 6 bits if there is one, keeping the
    /// app's ECN bits; else `requested` unchanged.
    pub fn traffic_class(&self, vni: u32, requested: u8) -> u8 {
        match self.dscp(vni) {
            Some(d) => (d << 2) | (requested & 0x3),
            None => requested,
        }
    }

    /// Virtual dgid (`::ffff:vIP`) of a QP or AH in `vni` on rail `rail`
    /// -> the peer's physical GID (`::ffff:hostIP` on the peer's rail),
    /// if that rail is reachable from `rail`.
    pub fn translate_dgid(
        &self,
        vni: u32,
        vdgid: &Gid,
        rail: &str,
    ) -> Result<Route<'_>, TranslateError> {
        let vip = vip_of_gid(vdgid).ok_or(TranslateError::NotIpv4Gid(*vdgid))?;
        let peer = self
            .lookup(vni, vip)
            .ok_or(TranslateError::NoRoute { vni, vip })?;
        if !self.rails_meet(rail, &peer.rail) {
            return Err(TranslateError::CrossRail {
                vip,
                from: rail.into(),
                to: peer.rail.clone(),
            });
        }
        Ok(Route {
            vip,
            peer,
            phys_dgid: ipv4_mapped_gid(peer.underlay),
        })
    }
}

impl VpcMap {
    /// The vIPs of `vni` whose endpoints send from underlay address
    /// `addr` (a host's, on one rail), in address order: the candidates
    /// for a packet of that VPC that came from there.
    pub fn vips_on_host(&self, vni: u32, addr: Ipv4Addr) -> Vec<Ipv4Addr> {
        let mut v: Vec<Ipv4Addr> = self
            .peers
            .iter()
            .filter(|((n, _), p)| *n == vni && p.underlay == addr)
            .map(|((_, vip), _)| *vip)
            .collect();
        v.sort();
        v
    }
}

/// Virtual sgid index -> the host port's sgid index: the host GID of the
/// same type whose address is the host's `underlay` IPv4. Only IPv4 RoCE v2
/// virtual GIDs translate, since dgids must be IPv4-mapped.
pub fn translate_sgid_index(
    virt: &[VirtualGid],
    host: &[HostGid],
    vindex: u32,
    underlay: Ipv4Addr,
) -> Result<u32, TranslateError> {
    let v = virt
        .iter()
        .find(|g| g.index == vindex)
        .ok_or(TranslateError::NoSuchSgid(vindex))?;
    if !v.roce_v2 || vip_of_gid(&v.gid).is_none() {
        return Err(TranslateError::SgidNotIpv4(vindex));
    }
    let want = ipv4_mapped_gid(underlay);
    host.iter()
        .find(|h| h.roce_v2 == v.roce_v2 && h.gid == want)
        .map(|h| h.index)
        .ok_or(TranslateError::NoHostGid {
            underlay,
            roce_v2: v.roce_v2,
        })
}

/// For query_qp: the physical dgid in a QP context -> the virtual dgid the
/// app set, given the QP's recorded peer.
pub fn reverse_dgid(
    phys: &Gid,
    peer_vip: Ipv4Addr,
    peer_host: Ipv4Addr,
) -> Result<Gid, TranslateError> {
    if *phys != ipv4_mapped_gid(peer_host) {
        return Err(TranslateError::PeerMismatch { peer_vip });
    }
    Ok(ipv4_mapped_gid(peer_vip))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gid::{link_local_gid, parse_gid, virtual_gid_table};
    use crate::nic::{IfAddr, Vnic};
    use crate::sysfs::{read_host_gids, tests::fixture};

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn map() -> VpcMap {
        VpcMap::new()
            .with(100, ip("10.0.0.1"), "acme-a", ip("192.168.1.1"))
            .with(100, ip("10.0.0.2"), "acme-b", ip("192.168.1.2"))
            .with(200, ip("10.0.0.2"), "globex-b", ip("192.168.1.3"))
    }

    #[test]
    fn vips_on_host_stay_in_their_vni() {
        let m = map().with(100, ip("10.0.0.7"), "acme-g", ip("192.168.1.2"));
        assert_eq!(
            m.vips_on_host(100, ip("192.168.1.2")),
            vec![ip("10.0.0.2"), ip("10.0.0.7")]
        );
        assert_eq!(
            m.vips_on_host(200, ip("192.168.1.2")),
            Vec::<Ipv4Addr>::new()
        );
        assert_eq!(m.vips_on_host(200, ip("192.168.1.3")), vec![ip("10.0.0.2")]);
        assert!(m.vips_on_host(300, ip("192.168.1.3")).is_empty());
    }

    #[test]
    fn map_builder_insert_remove() {
        let mut m = map();
        assert_eq!(m.len(), 3);
        assert!(!m.is_empty());
        assert_eq!(m.lookup(200, ip("10.0.0.2")).unwrap().name, "globex-b");
        let old = m.insert(100, ip("10.0.0.2"), "acme-b2", ip("192.168.1.9"));
        assert_eq!(old.unwrap().name, "acme-b");
        assert_eq!(
            m.lookup(100, ip("10.0.0.2")).unwrap().host,
            ip("192.168.1.9")
        );
        assert!(m.remove(100, ip("10.0.0.2")).is_some());
        assert!(m.remove(100, ip("10.0.0.2")).is_none());
        assert_eq!(m.iter().count(), 2);
        assert!(VpcMap::default().is_empty());
    }

    #[test]
    fn dgid_translation() {
        let m = map();
        let r = m
            .translate_dgid(100, &ipv4_mapped_gid(ip("10.0.0.2")), FIRST_RAIL)
            .unwrap();
        assert_eq!(r.vip, ip("10.0.0.2"));
        assert_eq!(r.peer.name, "acme-b");
        assert_eq!(r.phys_dgid, ipv4_mapped_gid(ip("192.168.1.2")));
        // The same vIP in another VNI is another endpoint: VPCs overlap.
        let r = m
            .translate_dgid(200, &ipv4_mapped_gid(ip("10.0.0.2")), FIRST_RAIL)
            .unwrap();
        assert_eq!(r.phys_dgid, ipv4_mapped_gid(ip("192.168.1.3")));
    }

    #[test]
    fn dgid_translation_errors() {
        let m = map();
        let e = m
            .translate_dgid(200, &ipv4_mapped_gid(ip("10.0.0.1")), FIRST_RAIL)
            .unwrap_err();
        assert_eq!(
            e,
            TranslateError::NoRoute {
                vni: 200,
                vip: ip("10.0.0.1")
            }
        );
        assert_eq!(e.errno(), libc::EHOSTUNREACH);
        assert_eq!(e.to_string(), "10.0.0.1 is not in VNI 200");
        for g in [
            link_local_gid([2, 0, 0, 0, 0, 1]),
            parse_gid("2001:db8::1").unwrap(),
            parse_gid("::10.0.0.2").unwrap(),
            [0; 16],
        ] {
            let e = m.translate_dgid(100, &g, FIRST_RAIL).unwrap_err();
            assert_eq!(e, TranslateError::NotIpv4Gid(g));
            assert_eq!(e.errno(), libc::EHOSTUNREACH);
        }
        // A tenant can't reach the underlay by naming a host IP as dgid.
        let e = m
            .translate_dgid(100, &ipv4_mapped_gid(ip("192.168.1.2")), FIRST_RAIL)
            .unwrap_err();
        assert!(matches!(e, TranslateError::NoRoute { .. }));
    }

    /// A host with two rails: a vIP on rail1 goes to the host's rail1
    /// address; from rail0 it is out of reach until the rails are joined.
    #[test]
    fn dgid_translation_stays_on_its_rail() {
        let mut m = map();
        m.insert_peer(
            100,
            ip("10.1.0.2"),
            Peer {
                name: "acme-b-r1".into(),
                host: ip("192.168.1.2"),
                rail: "rail1".into(),
                underlay: ip("203.0.113.2"),
            },
        );
        let g = ipv4_mapped_gid(ip("10.1.0.2"));
        let r = m.translate_dgid(100, &g, "rail1").unwrap();
        assert_eq!(r.phys_dgid, ipv4_mapped_gid(ip("203.0.113.2")));
        assert_eq!(r.peer.host, ip("192.168.1.2"));
        let e = m.translate_dgid(100, &g, FIRST_RAIL).unwrap_err();
        assert_eq!(e.errno(), libc::EHOSTUNREACH);
        assert_eq!(
            e.to_string(),
            "10.1.0.2 is on rail rail1, which rail rail0 does not reach (no railJoins)"
        );
        // rail0's endpoints are out of rail1's reach too.
        let g0 = ipv4_mapped_gid(ip("10.0.0.2"));
        assert!(m.translate_dgid(100, &g0, "rail1").is_err());
        m.set_rail_joins(vec![vec!["rail0".into(), "rail1".into()]]);
        assert!(m.translate_dgid(100, &g, FIRST_RAIL).is_ok());
        assert!(m.translate_dgid(100, &g0, "rail1").is_ok());
        assert!(!m.rails_meet("rail0", "rail2"));
        // A datagram from the rail1 address names rail1's endpoints only.
        assert_eq!(m.vips_on_host(100, ip("203.0.113.2")), vec![ip("10.1.0.2")]);
        assert_eq!(m.vips_on_host(100, ip("192.168.1.2")), vec![ip("10.0.0.2")]);
    }

    fn vgids() -> Vec<VirtualGid> {
        virtual_gid_table(&Vnic {
            ifname: "eth0".into(),
            ifindex: 2,
            mac: [0x52, 0x54, 0, 0, 0, 9],
            mtu: 1450,
            up: true,
            addrs: ["10.0.0.1", "2001:db8::a"]
                .iter()
                .map(|a| IfAddr {
                    ip: a.parse().unwrap(),
                    prefix_len: 24,
                })
                .collect(),
        })
    }

    #[test]
    fn sgid_index_translation() {
        let dir = tempfile::tempdir().unwrap();
        let host = read_host_gids(&fixture(dir.path()), "rxe0", 1).unwrap();
        let v = vgids();
        // Virtual 1 = ::ffff:10.0.0.1 (v2) -> host 3 = ::ffff:192.168.1.1 (v2), not 2 (v1).
        assert_eq!(translate_sgid_index(&v, &host, 1, ip("192.168.1.1")), Ok(3));
        for i in [0, 2] {
            let e = translate_sgid_index(&v, &host, i, ip("192.168.1.1")).unwrap_err();
            assert_eq!(e, TranslateError::SgidNotIpv4(i));
            assert_eq!(e.errno(), libc::EINVAL);
        }
        assert_eq!(
            translate_sgid_index(&v, &host, 3, ip("192.168.1.1")),
            Err(TranslateError::NoSuchSgid(3))
        );
        let e = translate_sgid_index(&v, &host, 1, ip("192.168.1.7")).unwrap_err();
        assert_eq!(e.errno(), libc::ENETDOWN);
        // Only a RoCE v1 GID for the underlay: no match of the same type.
        let v1_only: Vec<HostGid> = host.iter().filter(|h| !h.roce_v2).cloned().collect();
        assert!(translate_sgid_index(&v, &v1_only, 1, ip("192.168.1.1")).is_err());
    }

    #[test]
    fn reverse_translation() {
        let phys = ipv4_mapped_gid(ip("192.168.1.2"));
        assert_eq!(
            reverse_dgid(&phys, ip("10.0.0.2"), ip("192.168.1.2")),
            Ok(ipv4_mapped_gid(ip("10.0.0.2")))
        );
        let e = reverse_dgid(&phys, ip("10.0.0.2"), ip("192.168.1.3")).unwrap_err();
        assert_eq!(
            e,
            TranslateError::PeerMismatch {
                peer_vip: ip("10.0.0.2")
            }
        );
        // The message must not leak the physical GID.
        assert!(!e.to_string().contains("192.168"));
    }

    #[test]
    fn traffic_class_override() {
        let mut m = map();
        assert_eq!(m.traffic_class(100, 0x6a), 0x6a);
        m.set_dscp(100, Some(46)).unwrap();
        assert_eq!(m.dscp(100), Some(46));
        assert_eq!(m.traffic_class(100, 0), 46 << 2);
        assert_eq!(m.traffic_class(100, 0x03), (46 << 2) | 3);
        assert_eq!(m.traffic_class(200, 0x10), 0x10);
        m.set_dscp(100, Some(63)).unwrap();
        assert_eq!(m.traffic_class(100, 0xff), 0xff);
        assert_eq!(m.set_dscp(100, Some(64)), Err(TranslateError::BadDscp(64)));
        assert_eq!(m.dscp(100), Some(63));
        m.set_dscp(100, None).unwrap();
        assert_eq!(m.traffic_class(100, 0x20), 0x20);
    }
}
