//! The CM exchange on the wire: `peer::msg::PeerMsg` to and from masq-proto's
//! peer messages (`PeerReq` .. `PeerUdQuery`, defined in its `spec.rs`), and
//! their framing on the TCP stream between masqds, where each message's
//! header gives its length.
//!
//! Everything read here comes from another host and is checked by the
//! proto decoder before it becomes a `PeerMsg`; what `cm` then does with
//! the values (which ids, which endpoints) it checks itself.

use crate::peer::msg::{Params, PeerMsg};
use masq_proto::{self as proto, PeerBody, ProtoError};
use std::fmt;
use std::io::{self, Read};
use std::net::Ipv4Addr;

/// Why a peer message was not sent or not read.
#[derive(Debug)]
pub enum Error {
    /// This side's message does not fit the wire layout (a value out of
    /// range, or more private data than the message carries).
    Unencodable(String),
    /// Not a peer message of this protocol version.
    Proto(ProtoError),
    /// The stream ended inside a message.
    Cut {
        have: usize,
        want: usize,
    },
    Io(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unencodable(why) => write!(f, "message not encodable: {why}"),
            Error::Proto(e) => write!(f, "malformed message: {e}"),
            Error::Cut { have, want } => {
                write!(f, "stream ended inside a message ({have} of {want} bytes)")
            }
            Error::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<ProtoError> for Error {
    fn from(e: ProtoError) -> Self {
        Error::Proto(e)
    }
}

fn params_to_wire(p: &Params) -> proto::PeerParams {
    proto::PeerParams {
        qp_num: p.qpn,
        psn: p.psn,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: p.flow_control,
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: p.srq,
    }
}

fn params_from_wire(p: proto::PeerParams, private_data: Vec<u8>) -> Params {
    Params {
        qpn: p.qp_num,
        psn: p.psn,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: p.flow_control,
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: p.srq,
        private_data,
    }
}

fn addr(ip: Ipv4Addr, port: u16) -> proto::CmAddr {
    proto::CmAddr {
        addr: ip.octets(),
        port,
    }
}

fn to_wire(msg: &PeerMsg) -> PeerBody {
    match msg {
        PeerMsg::Req {
            from_id,
            vni,
            src,
            src_port,
            dst,
            dst_port,
            params,
        } => PeerBody::Req(proto::PeerReq {
            from_id: *from_id,
            vni: *vni,
            src: addr(*src, *src_port),
            dst: addr(*dst, *dst_port),
            params: params_to_wire(params),
            private_data: params.private_data.clone(),
        }),
        PeerMsg::Rep {
            to_id,
            from_id,
            params,
        } => PeerBody::Rep(proto::PeerRep {
            to_id: *to_id,
            from_id: *from_id,
            params: params_to_wire(params),
            private_data: params.private_data.clone(),
        }),
        PeerMsg::Rej {
            to_id,
            from_id,
            reason,
            private_data,
        } => PeerBody::Rej(proto::PeerRej {
            to_id: *to_id,
            from_id: *from_id,
            reason: *reason,
            private_data: private_data.clone(),
        }),
        PeerMsg::Rtu { to_id, from_id } => PeerBody::Rtu(proto::PeerRtu {
            to_id: *to_id,
            from_id: *from_id,
        }),
        PeerMsg::Dreq {
            to_id,
            from_id,
            from_qpn,
        } => PeerBody::Dreq(proto::PeerDreq {
            to_id: *to_id,
            from_id: *from_id,
            from_qpn: *from_qpn,
        }),
        PeerMsg::SidrReq {
            from_id,
            vni,
            src,
            src_port,
            dst,
            dst_port,
            private_data,
        } => PeerBody::SidrReq(proto::PeerSidrReq {
            from_id: *from_id,
            vni: *vni,
            src: addr(*src, *src_port),
            dst: addr(*dst, *dst_port),
            private_data: private_data.clone(),
        }),
        PeerMsg::SidrRep {
            to_id,
            status,
            qpn,
            qkey,
            private_data,
        } => PeerBody::SidrRep(proto::PeerSidrRep {
            to_id: *to_id,
            status: *status,
            qp_num: *qpn,
            qkey: *qkey,
            private_data: private_data.clone(),
        }),
        PeerMsg::UdQuery => PeerBody::UdQuery(proto::PeerUdQuery {}),
        PeerMsg::UdQpAck { vni, qpn } => PeerBody::UdQpAck(proto::PeerUdQpAck {
            vni: *vni,
            qpn: *qpn,
        }),
        PeerMsg::UdQp { vni, vip, qpn, up } => PeerBody::UdQp(proto::PeerUdQp {
            vni: *vni,
            vip: vip.octets(),
            qpn: *qpn,
            up: u8::from(*up),
        }),
    }
}

/// The decoder has checked every field, so every body converts.
fn from_wire(body: PeerBody) -> PeerMsg {
    match body {
        PeerBody::Req(r) => PeerMsg::Req {
            from_id: r.from_id,
            vni: r.vni,
            src: Ipv4Addr::from(r.src.addr),
            src_port: r.src.port,
            dst: Ipv4Addr::from(r.dst.addr),
            dst_port: r.dst.port,
            params: params_from_wire(r.params, r.private_data),
        },
        PeerBody::Rep(r) => PeerMsg::Rep {
            to_id: r.to_id,
            from_id: r.from_id,
            params: params_from_wire(r.params, r.private_data),
        },
        PeerBody::Rej(r) => PeerMsg::Rej {
            to_id: r.to_id,
            from_id: r.from_id,
            reason: r.reason,
            private_data: r.private_data,
        },
        PeerBody::Rtu(r) => PeerMsg::Rtu {
            to_id: r.to_id,
            from_id: r.from_id,
        },
        PeerBody::Dreq(r) => PeerMsg::Dreq {
            to_id: r.to_id,
            from_id: r.from_id,
            from_qpn: r.from_qpn,
        },
        PeerBody::SidrReq(r) => PeerMsg::SidrReq {
            from_id: r.from_id,
            vni: r.vni,
            src: Ipv4Addr::from(r.src.addr),
            src_port: r.src.port,
            dst: Ipv4Addr::from(r.dst.addr),
            dst_port: r.dst.port,
            private_data: r.private_data,
        },
        PeerBody::SidrRep(r) => PeerMsg::SidrRep {
            to_id: r.to_id,
            status: r.status,
            qpn: r.qp_num,
            qkey: r.qkey,
            private_data: r.private_data,
        },
        PeerBody::UdQuery(_) => PeerMsg::UdQuery,
        PeerBody::UdQpAck(a) => PeerMsg::UdQpAck {
            vni: a.vni,
            qpn: a.qpn,
        },
        PeerBody::UdQp(u) => PeerMsg::UdQp {
            vni: u.vni,
            vip: Ipv4Addr::from(u.vip),
            qpn: u.qpn,
            up: u.up != 0,
        },
    }
}

/// `msg` as one framed message. It is decoded again before it goes, so
/// this side never sends what a peer would refuse: the encoder cuts
/// private data to the message's capacity, and the decoder holds the
/// allowed values.
pub fn encode(msg: &PeerMsg) -> Result<Vec<u8>, Error> {
    let body = to_wire(msg);
    let bytes = proto::encode_peer(&body);
    match proto::decode_peer(&bytes) {
        Ok(back) if back == body => Ok(bytes),
        Ok(_) => Err(Error::Unencodable(
            "more private data than the message carries".into(),
        )),
        Err(e) => Err(Error::Unencodable(e.to_string())),
    }
}

/// Decode one whole framed message.
pub fn decode(bytes: &[u8]) -> Result<PeerMsg, Error> {
    Ok(from_wire(proto::decode_peer(bytes)?))
}

/// Fill `buf` from `r`; the number of bytes read, short only at the end
/// of the stream.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut have = 0;
    while have < buf.len() {
        match r.read(&mut buf[have..]) {
            Ok(0) => break,
            Ok(n) => have += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(have)
}

/// The next message on a peer's stream, or `None` where the stream ends
/// between messages. The header is checked (version, a length within
/// `MAX_MESSAGE`) before the rest is read, so a peer of another version
/// or a corrupt length makes no large read.
pub fn read(r: &mut impl Read) -> Result<Option<PeerMsg>, Error> {
    let mut buf = vec![0; proto::HEADER_SIZE];
    match read_full(r, &mut buf).map_err(Error::Io)? {
        0 => return Ok(None),
        n if n < proto::HEADER_SIZE => {
            return Err(Error::Cut {
                have: n,
                want: proto::HEADER_SIZE,
            })
        }
        _ => {}
    }
    let len = proto::message_len(&buf)?;
    buf.resize(len, 0);
    let n = read_full(r, &mut buf[proto::HEADER_SIZE..]).map_err(Error::Io)?;
    if proto::HEADER_SIZE + n < len {
        return Err(Error::Cut {
            have: proto::HEADER_SIZE + n,
            want: len,
        });
    }
    decode(&buf).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn params(qpn: u32, data: &[u8]) -> Params {
        Params {
            qpn,
            psn: 0xabcdef,
            responder_resources: 4,
            initiator_depth: 2,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 6,
            srq: 1,
            private_data: data.to_vec(),
        }
    }

    fn every_variant() -> Vec<PeerMsg> {
        vec![
            PeerMsg::Req {
                from_id: 3,
                vni: 100,
                src: Ipv4Addr::new(10, 0, 0, 5),
                src_port: 40001,
                dst: Ipv4Addr::new(10, 0, 0, 6),
                dst_port: 7174,
                params: params(0x11, &[0x5a; proto::CM_REQ_PRIVATE_DATA]),
            },
            PeerMsg::Rep {
                to_id: 3,
                from_id: 4,
                params: params(0xff_ffff, &[0xa5; proto::CM_MAX_PRIVATE_DATA]),
            },
            PeerMsg::Rej {
                to_id: 3,
                from_id: 0,
                reason: proto::CM_REJ_CONSUMER_DEFINED,
                private_data: vec![1; proto::CM_REJ_PRIVATE_DATA],
            },
            PeerMsg::Rej {
                to_id: 3,
                from_id: 4,
                reason: proto::CM_REJ_INVALID_SERVICE_ID,
                private_data: Vec::new(),
            },
            PeerMsg::Rtu {
                to_id: 4,
                from_id: 3,
            },
            PeerMsg::Dreq {
                to_id: 0,
                from_id: u32::MAX,
                from_qpn: 0x11,
            },
            PeerMsg::UdQp {
                vni: 0xff_ffff,
                vip: Ipv4Addr::new(10, 0, 0, 5),
                qpn: 0x22,
                up: true,
            },
            PeerMsg::UdQp {
                vni: 1,
                vip: Ipv4Addr::new(10, 0, 0, 5),
                qpn: 0x22,
                up: false,
            },
            PeerMsg::UdQuery,
            PeerMsg::UdQpAck {
                vni: 100,
                qpn: 0x22,
            },
            PeerMsg::SidrReq {
                from_id: 9,
                vni: 200,
                src: Ipv4Addr::new(10, 0, 0, 5),
                src_port: 40002,
                dst: Ipv4Addr::new(10, 0, 0, 6),
                dst_port: 7174,
                private_data: vec![7; proto::CM_SIDR_REQ_PRIVATE_DATA],
            },
            PeerMsg::SidrRep {
                to_id: 9,
                status: 0,
                qpn: 0x33,
                qkey: proto::CM_UDP_QKEY,
                private_data: vec![8; proto::CM_SIDR_REP_PRIVATE_DATA],
            },
            PeerMsg::SidrRep {
                to_id: 9,
                status: proto::CM_SIDR_UNSUPPORTED,
                qpn: 0,
                qkey: 0,
                private_data: Vec::new(),
            },
        ]
    }

    #[test]
    fn every_variant_round_trips() {
        for m in every_variant() {
            let b = encode(&m).unwrap_or_else(|e| panic!("{m:?}: {e}"));
            assert_eq!(decode(&b).expect("decode"), m);
        }
    }

    #[test]
    fn a_stream_of_messages_reads_back_in_order() {
        let all = every_variant();
        let mut stream = Vec::new();
        for m in &all {
            stream.extend(encode(m).expect("encode"));
        }
        let mut r = Cursor::new(stream);
        for m in &all {
            assert_eq!(read(&mut r).expect("read").as_ref(), Some(m));
        }
        assert!(read(&mut r).expect("end").is_none());
    }

    #[test]
    fn what_a_peer_would_refuse_is_not_sent() {
        let req = |params| PeerMsg::Req {
            from_id: 3,
            vni: 100,
            src: Ipv4Addr::new(10, 0, 0, 5),
            src_port: 1,
            dst: Ipv4Addr::new(10, 0, 0, 6),
            dst_port: 2,
            params,
        };
        let bad = [
            req(params(0x11, &[0; proto::CM_REQ_PRIVATE_DATA + 1])),
            req(params(0x100_0000, b"")),
            req(Params {
                flow_control: 2,
                ..params(0x11, b"")
            }),
            PeerMsg::Rej {
                to_id: 1,
                from_id: 2,
                reason: -22,
                private_data: Vec::new(),
            },
            PeerMsg::UdQp {
                vni: 0,
                vip: Ipv4Addr::LOCALHOST,
                qpn: 1,
                up: true,
            },
            PeerMsg::SidrRep {
                to_id: 1,
                status: 3,
                qpn: 1,
                qkey: 0,
                private_data: Vec::new(),
            },
            PeerMsg::SidrRep {
                to_id: 1,
                status: 0,
                qpn: 1,
                qkey: 0,
                private_data: vec![0; proto::CM_SIDR_REP_PRIVATE_DATA + 1],
            },
        ];
        for m in bad {
            assert!(matches!(encode(&m), Err(Error::Unencodable(_))), "{m:?}");
        }
    }

    fn rtu() -> Vec<u8> {
        encode(&PeerMsg::Rtu {
            to_id: 1,
            from_id: 2,
        })
        .expect("encode")
    }

    fn read_bytes(b: Vec<u8>) -> Result<Option<PeerMsg>, Error> {
        read(&mut Cursor::new(b))
    }

    #[test]
    fn malformed_streams_are_errors() {
        let good = rtu();
        let with = |at: usize, v: &[u8]| {
            let mut b = good.clone();
            b[at..at + v.len()].copy_from_slice(v);
            b
        };
        let proto_err = |b: Vec<u8>| match read_bytes(b) {
            Err(Error::Proto(e)) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            proto_err(with(0, &(proto::VERSION + 1).to_le_bytes())),
            ProtoError::BadVersion(proto::VERSION + 1)
        );
        assert_eq!(
            proto_err(with(2, &0x2077u16.to_le_bytes())),
            ProtoError::UnknownOpcode(0x2077)
        );
        // A frontend request on the CM link.
        assert_eq!(
            proto_err(with(2, &19u16.to_le_bytes())),
            ProtoError::WrongKind(19)
        );
        assert_eq!(
            proto_err(with(4, &(proto::MAX_MESSAGE as u32 + 1).to_le_bytes())),
            ProtoError::BadFrameLength(proto::MAX_MESSAGE as u32 + 1)
        );
        assert_eq!(
            proto_err(with(4, &u32::MAX.to_le_bytes())),
            ProtoError::BadFrameLength(u32::MAX)
        );
        assert_eq!(
            proto_err(with(4, &8u32.to_le_bytes())),
            ProtoError::BadFrameLength(8)
        );
        // A length that frames a whole message, but not this opcode's size.
        let mut longer = with(4, &28u32.to_le_bytes());
        longer.extend([0; 4]);
        assert!(matches!(
            proto_err(longer),
            ProtoError::BadSize { opcode: 0x2004, .. }
        ));
        // Cut in the header and in the body.
        assert!(matches!(
            read_bytes(good[..5].to_vec()),
            Err(Error::Cut { have: 5, want: 16 })
        ));
        assert!(matches!(
            read_bytes(good[..20].to_vec()),
            Err(Error::Cut { have: 20, want: 24 })
        ));
        // A JSON line, as a masqd from before this format sends it.
        assert!(matches!(
            read_bytes(br#"{"type":"rtu","to_id":1,"from_id":2}"#.to_vec()),
            Err(Error::Proto(ProtoError::BadVersion(_)))
        ));
    }

    /// Random bytes and every cut and flip of real messages: never a panic.
    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for m in every_variant() {
            let good = encode(&m).expect("encode");
            for i in 0..good.len() {
                let mut b = good.clone();
                b[i] ^= (next() as u8) | 1;
                let _ = read_bytes(b);
                let _ = read_bytes(good[..i].to_vec());
            }
        }
        for _ in 0..2000 {
            let len = next() as usize % 300;
            let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if len >= 8 {
                b[0..2].copy_from_slice(&proto::VERSION.to_le_bytes());
                b[4..8].copy_from_slice(&(len as u32).to_le_bytes());
            }
            let _ = read_bytes(b);
        }
    }
}
