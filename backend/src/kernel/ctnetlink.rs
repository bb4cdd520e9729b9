//! The kernel's connection tracking table over ctnetlink
//! (NETLINK_NETFILTER, the conntrack subsystem): dump the IPv4 entries and
//! delete one by its original tuple and zone. The messages are
//! `netlink-packet-netfilter`'s; the zone, which it does not name, is read
//! and written as a plain attribute.

use crate::error::Result;
use crate::kernel::netlink::Netlink;
use netlink_packet_core::{DefaultNla, Nla, NLM_F_ACK, NLM_F_DUMP};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Protocol, Tuple,
};
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
};
use netlink_sys::protocols::NETLINK_NETFILTER;
use std::net::{IpAddr, Ipv4Addr};

/// CTA_ZONE (linux/netfilter/nfnetlink_conntrack.h): u16, network order.
const CTA_ZONE: u16 = 18;

/// An entry's original direction (the way its first packet went) and zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub zone: u16,
    /// IPPROTO_TCP, IPPROTO_UDP, ...
    pub proto: u8,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
}

pub struct Ctnetlink(Netlink);

impl Ctnetlink {
    pub fn open() -> Result<Ctnetlink> {
        Netlink::open(NETLINK_NETFILTER, "ctnetlink").map(Ctnetlink)
    }

    /// Every IPv4 entry of the network namespace (entries of other
    /// protocols than TCP, UDP and the like have no ports and are left
    /// out).
    pub fn dump_ipv4(&mut self) -> Result<Vec<Entry>> {
        Ok(self
            .request(ConntrackMessage::Get(vec![]), NLM_F_DUMP)?
            .into_iter()
            .filter_map(|m| match m {
                ConntrackMessage::New(attrs) => entry(&attrs),
                _ => None,
            })
            .collect())
    }

    /// Delete the entry of `e` (its original tuple, in its zone). An entry
    /// already gone is `NotFound`.
    pub fn delete(&mut self, e: &Entry) -> Result<()> {
        let tuple = vec![
            Tuple::Ip(vec![
                IPTuple::SourceAddress(IpAddr::V4(e.src)),
                IPTuple::DestinationAddress(IpAddr::V4(e.dst)),
            ]),
            Tuple::Proto(vec![
                ProtoTuple::Protocol(Protocol::from(e.proto)),
                ProtoTuple::SourcePort(e.sport),
                ProtoTuple::DestinationPort(e.dport),
            ]),
        ];
        let msg = ConntrackMessage::Delete(vec![
            ConntrackAttribute::CtaTupleOrig(tuple),
            ConntrackAttribute::Other(DefaultNla::new(CTA_ZONE, e.zone.to_be_bytes().to_vec())),
        ]);
        self.request(msg, NLM_F_ACK)?;
        Ok(())
    }

    fn request(&mut self, req: ConntrackMessage, flags: u16) -> Result<Vec<ConntrackMessage>> {
        let req =
            NetfilterMessage::new(NetfilterHeader::new(NetfilterProtoFamily::IPv4, 0, 0), req);
        Ok(self
            .0
            .request(req, flags)?
            .into_iter()
            .filter_map(|m| match m.inner {
                NetfilterMessageInner::Conntrack(c) => Some(c),
                _ => None,
            })
            .collect())
    }
}

/// An entry from a dump's attributes: its original tuple and zone (0
/// without CTA_ZONE); None for IPv6 or a tuple without ports.
fn entry(attrs: &[ConntrackAttribute]) -> Option<Entry> {
    let mut zone = 0;
    let mut orig = None;
    for a in attrs {
        match a {
            ConntrackAttribute::CtaTupleOrig(t) => orig = Some(t),
            ConntrackAttribute::Other(nla) if nla.kind() == CTA_ZONE && nla.value_len() == 2 => {
                let mut v = [0u8; 2];
                nla.emit_value(&mut v);
                zone = u16::from_be_bytes(v);
            }
            _ => {}
        }
    }
    let (mut src, mut dst, mut proto, mut sport, mut dport) = (None, None, None, None, None);
    for t in orig? {
        match t {
            Tuple::Ip(ips) => {
                for ip in ips {
                    match ip {
                        IPTuple::SourceAddress(IpAddr::V4(a)) => src = Some(*a),
                        IPTuple::DestinationAddress(IpAddr::V4(a)) => dst = Some(*a),
                        _ => {}
                    }
                }
            }
            Tuple::Proto(ps) => {
                for p in ps {
                    match p {
                        ProtoTuple::Protocol(p) => proto = Some(u8::from(*p)),
                        ProtoTuple::SourcePort(s) => sport = Some(*s),
                        ProtoTuple::DestinationPort(d) => dport = Some(*d),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(Entry {
        zone,
        proto: proto?,
        src: src?,
        dst: dst?,
        sport: sport?,
        dport: dport?,
    })
}
