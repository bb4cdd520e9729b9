//! The messages masqds exchange for the RDMA CM: what the CM sends and
//! receives (`cm/`), what the link carries (`link.rs`) and what
//! `wire.rs` encodes. Kept apart from the CM so that the wire and the
//! link do not depend on it.

use masq_proto as proto;
use std::net::Ipv4Addr;

/// One side's connection parameters as the CM carries them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params {
    pub qpn: u32,
    pub psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub private_data: Vec<u8>,
}

impl Params {
    pub(crate) fn from_proto(p: &proto::CmConnParam, psn: u32) -> Params {
        Params {
            qpn: p.qp_num,
            psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: p.flow_control,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            private_data: p.private_data.clone(),
        }
    }

    /// The peer's parameters as this side's app sees them in an event:
    /// its initiator depth is our responder resources and the reverse.
    pub(crate) fn to_event(&self) -> proto::CmConnParam {
        proto::CmConnParam {
            responder_resources: self.initiator_depth,
            initiator_depth: self.responder_resources,
            flow_control: self.flow_control.min(1),
            retry_count: self.retry_count.min(7),
            rnr_retry_count: self.rnr_retry_count.min(7),
            srq: self.srq.min(1),
            qp_num: self.qpn & 0xFF_FFFF,
            private_data: self.private_data.clone(),
        }
    }
}

/// A CM message between masqds (on the wire: `peer::wire`). Ids are each
/// host's own numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerMsg {
    Req {
        from_id: u32,
        vni: u32,
        src: Ipv4Addr,
        src_port: u16,
        dst: Ipv4Addr,
        dst_port: u16,
        params: Params,
    },
    Rep {
        to_id: u32,
        from_id: u32,
        params: Params,
    },
    Rej {
        to_id: u32,
        from_id: u32,
        reason: i32,
        private_data: Vec<u8>,
    },
    Rtu {
        to_id: u32,
        from_id: u32,
    },
    Dreq {
        /// 0: the sender lost the peer's id number (it restarted and its
        /// app restored the id); then from_id and from_qpn find it.
        to_id: u32,
        from_id: u32,
        /// The sender's QP: with to_id 0 it must be the one the receiver's
        /// id is connected to, so an id number alone disconnects nothing.
        from_qpn: u32,
    },
    /// A UD id asks for the QP of the listener at dst (SIDR REQ).
    SidrReq {
        from_id: u32,
        vni: u32,
        src: Ipv4Addr,
        src_port: u16,
        dst: Ipv4Addr,
        dst_port: u16,
        private_data: Vec<u8>,
    },
    /// The answer (SIDR REP): status 0 with the QP and Q_Key, or
    /// CM_SIDR_UNSUPPORTED (nobody listens), CM_SIDR_REJECT.
    SidrRep {
        to_id: u32,
        status: u32,
        qpn: u32,
        qkey: u32,
        private_data: Vec<u8>,
    },
    /// The sender (re)started: announce this host's UD QPs to it again.
    UdQuery,
    /// The sender has the receiver's UdQp (up) in force.
    UdQpAck {
        vni: u32,
        qpn: u32,
    },
    /// A UD QP of an endpoint of the sending host is up (or gone): a UD
    /// packet names its sender by host and QPN only, and the receiving
    /// masqd names it by vIP (see `ud.rs`).
    UdQp {
        vni: u32,
        vip: Ipv4Addr,
        qpn: u32,
        up: bool,
    },
}

impl PeerMsg {
    /// The message's name, for the metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            PeerMsg::Req { .. } => "Req",
            PeerMsg::Rep { .. } => "Rep",
            PeerMsg::Rej { .. } => "Rej",
            PeerMsg::Rtu { .. } => "Rtu",
            PeerMsg::Dreq { .. } => "Dreq",
            PeerMsg::SidrReq { .. } => "SidrReq",
            PeerMsg::SidrRep { .. } => "SidrRep",
            PeerMsg::UdQuery => "UdQuery",
            PeerMsg::UdQpAck { .. } => "UdQpAck",
            PeerMsg::UdQp { .. } => "UdQp",
        }
    }
}
