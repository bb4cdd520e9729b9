//! The CM exchange on the wire: masq-proto's peer messages (`PeerBody`,
//! `PeerReq` .. `PeerUdQuery`, defined once in its `spec.rs`, which the CM
//! uses as they are) framed on the TCP stream between masqds, where each
//! message's header gives its length.
//!
//! Everything read here comes from another host and is checked by the
//! proto decoder before the CM sees it; what `cm` then does with the
//! values (which ids, which endpoints) it checks itself.

use masq_proto::{self as proto, PeerBody, ProtoError};
use std::fmt;
use std::io::{self, Read};

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

/// `msg` as one framed message. It is decoded again before it goes, so
/// this side never sends what a peer would refuse: the encoder cuts
/// private data to the message's capacity, and the decoder holds the
/// allowed values.
pub fn encode(msg: &PeerBody) -> Result<Vec<u8>, Error> {
    let bytes = proto::encode_peer(msg);
    match proto::decode_peer(&bytes) {
        Ok(back) if back == *msg => Ok(bytes),
        Ok(_) => Err(Error::Unencodable(
            "more private data than the message carries".into(),
        )),
        Err(e) => Err(Error::Unencodable(e.to_string())),
    }
}

/// Decode one whole framed message.
pub fn decode(bytes: &[u8]) -> Result<PeerBody, Error> {
    Ok(proto::decode_peer(bytes)?)
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
pub fn read(r: &mut impl Read) -> Result<Option<PeerBody>, Error> {
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
    use std::net::Ipv4Addr;

    fn params(qpn: u32) -> proto::PeerParams {
        proto::PeerParams {
            qp_num: qpn,
            psn: 0xabcdef,
            responder_resources: 4,
            initiator_depth: 2,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 6,
            srq: 1,
        }
    }

    fn addr(a: u8, port: u16) -> proto::CmAddr {
        proto::CmAddr::v4(Ipv4Addr::new(10, 0, 0, a), port)
    }

    fn every_variant() -> Vec<PeerBody> {
        vec![
            PeerBody::Req(proto::PeerReq {
                from_id: 3,
                vni: 100,
                src: addr(5, 40001),
                dst: addr(6, 7174),
                params: params(0x11),
                private_data: vec![0x5a; proto::CM_REQ_PRIVATE_DATA],
            }),
            PeerBody::Rep(proto::PeerRep {
                to_id: 3,
                from_id: 4,
                params: params(0xff_ffff),
                private_data: vec![0xa5; proto::CM_MAX_PRIVATE_DATA],
            }),
            PeerBody::Rej(proto::PeerRej {
                to_id: 3,
                from_id: 0,
                reason: proto::CM_REJ_CONSUMER_DEFINED,
                private_data: vec![1; proto::CM_REJ_PRIVATE_DATA],
            }),
            PeerBody::Rej(proto::PeerRej {
                to_id: 3,
                from_id: 4,
                reason: proto::CM_REJ_INVALID_SERVICE_ID,
                private_data: Vec::new(),
            }),
            PeerBody::Rtu(proto::PeerRtu {
                to_id: 4,
                from_id: 3,
            }),
            PeerBody::Dreq(proto::PeerDreq {
                to_id: 0,
                from_id: u32::MAX,
                from_qpn: 0x11,
            }),
            PeerBody::UdQp(proto::PeerUdQp {
                vni: 0xff_ffff,
                vip: [10, 0, 0, 5],
                qpn: 0x22,
                up: 1,
            }),
            PeerBody::UdQp(proto::PeerUdQp {
                vni: 1,
                vip: [10, 0, 0, 5],
                qpn: 0x22,
                up: 0,
            }),
            PeerBody::UdQuery(proto::PeerUdQuery {}),
            PeerBody::UdQpAck(proto::PeerUdQpAck {
                vni: 100,
                qpn: 0x22,
            }),
            PeerBody::SidrReq(proto::PeerSidrReq {
                from_id: 9,
                vni: 200,
                src: addr(5, 40002),
                dst: addr(6, 7174),
                private_data: vec![7; proto::CM_SIDR_REQ_PRIVATE_DATA],
            }),
            PeerBody::SidrRep(proto::PeerSidrRep {
                to_id: 9,
                status: 0,
                qp_num: 0x33,
                qkey: proto::CM_UDP_QKEY,
                private_data: vec![8; proto::CM_SIDR_REP_PRIVATE_DATA],
            }),
            PeerBody::SidrRep(proto::PeerSidrRep {
                to_id: 9,
                status: proto::CM_SIDR_UNSUPPORTED,
                qp_num: 0,
                qkey: 0,
                private_data: Vec::new(),
            }),
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
        let req = |params, private_data| {
            PeerBody::Req(proto::PeerReq {
                from_id: 3,
                vni: 100,
                src: addr(5, 1),
                dst: addr(6, 2),
                params,
                private_data,
            })
        };
        let bad = [
            req(params(0x11), vec![0; proto::CM_REQ_PRIVATE_DATA + 1]),
            req(params(0x100_0000), Vec::new()),
            req(
                proto::PeerParams {
                    flow_control: 2,
                    ..params(0x11)
                },
                Vec::new(),
            ),
            PeerBody::Rej(proto::PeerRej {
                to_id: 1,
                from_id: 2,
                reason: -22,
                private_data: Vec::new(),
            }),
            PeerBody::UdQp(proto::PeerUdQp {
                vni: 0,
                vip: Ipv4Addr::LOCALHOST.octets(),
                qpn: 1,
                up: 1,
            }),
            PeerBody::SidrRep(proto::PeerSidrRep {
                to_id: 1,
                status: 3,
                qp_num: 1,
                qkey: 0,
                private_data: Vec::new(),
            }),
            PeerBody::SidrRep(proto::PeerSidrRep {
                to_id: 1,
                status: 0,
                qp_num: 1,
                qkey: 0,
                private_data: vec![0; proto::CM_SIDR_REP_PRIVATE_DATA + 1],
            }),
        ];
        for m in bad {
            assert!(matches!(encode(&m), Err(Error::Unencodable(_))), "{m:?}");
        }
    }

    fn rtu() -> Vec<u8> {
        encode(&PeerBody::Rtu(proto::PeerRtu {
            to_id: 1,
            from_id: 2,
        }))
        .expect("encode")
    }

    fn read_bytes(b: Vec<u8>) -> Result<Option<PeerBody>, Error> {
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
