//! masq-proto: the frontend <-> backend wire protocol.
//!
//! One message per SOCK_SEQPACKET datagram: a 16-byte [`Header`] and a
//! fixed-size little-endian body. Requests come from the frontend (a
//! tenant's process, so untrusted); every request gets a reply with opcode
//! `request | REPLY` and the same request id, carrying either a body
//! (status 0) or only a negative errno, except posted requests (opcodes
//! [`POSTED_FIRST`]..=[`POSTED_LAST`]), which get none. Notices (opcodes from
//! [`NOTICE_BASE`], request id 0) come from the backend unasked.
//!
//! Peer messages (opcodes from [`PEER_BASE`], request id 0, no reply) go
//! from one masqd to another: the CM exchange, over TCP, framed by the
//! header's length ([`message_len`]). They share the header, so a masqd of
//! another protocol version is refused like a frontend would be.
//!
//! The layouts live in `spec.rs`; the C header is generated from it
//! (`cargo run -p masq-proto --bin masq-proto-gen-c`).
//!
//! Decoders check everything and never panic; what they accept re-encodes
//! to the same bytes.

pub mod cgen;
pub mod hex;
mod spec;
mod wire;

pub use spec::*;
pub use wire::{FieldDesc, Kind, Reader, StructDesc, Wire};

use std::fmt;
use std::net::Ipv4Addr;

/// One opcode's layouts, for generators.
#[derive(Debug)]
pub struct MessageDesc {
    pub name: &'static str,
    pub opcode: u16,
    pub request: Option<&'static StructDesc>,
    pub reply: Option<&'static StructDesc>,
}

/// A request's name as the C header spells it (`CM_CREATE_CHANNEL`), for
/// refusals and logs; `opcode 0x....` for one that is not a request.
pub fn request_name(opcode: u16) -> String {
    MESSAGES
        .iter()
        .find(|m| m.opcode == opcode)
        .map_or_else(|| format!("opcode {opcode:#06x}"), |m| cgen::upper(m.name))
}

// Linux errno values (the protocol is Linux-only); kept here so the crate
// needs no libc.
pub const EINVAL: i32 = 22;
pub const EPROTO: i32 = 71;
pub const EPROTONOSUPPORT: i32 = 93;
pub const EOPNOTSUPP: i32 = 95;

/// Why a message was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtoError {
    /// Shorter than a header (or than a field being read).
    TooShort {
        len: usize,
    },
    /// The header's length field is not the datagram's size.
    BadLength {
        header: u32,
        actual: usize,
    },
    /// On a stream: the header's length is less than a header or more
    /// than [`MAX_MESSAGE`].
    BadFrameLength(u32),
    BadVersion(u16),
    /// A valid opcode of another kind (a reply or notice sent as a request...).
    WrongKind(u16),
    UnknownOpcode(u16),
    BadStatus(i32),
    /// Not the exact size of this opcode's message.
    BadSize {
        opcode: u16,
        expected: usize,
        actual: usize,
    },
    /// A field outside its allowed values; names `Struct.field`.
    BadValue(&'static str),
    ReservedNotZero(&'static str),
    /// Not NUL-terminated within its field, nonzero after the NUL, or not UTF-8.
    BadString(&'static str),
    /// An array count larger than the array.
    BadCount(&'static str),
}

impl ProtoError {
    /// The positive errno to reply with (negate it for the status field).
    pub fn errno(&self) -> i32 {
        match self {
            ProtoError::BadVersion(_) => EPROTONOSUPPORT,
            ProtoError::UnknownOpcode(_) => EOPNOTSUPP,
            ProtoError::BadValue(_)
            | ProtoError::ReservedNotZero(_)
            | ProtoError::BadString(_)
            | ProtoError::BadCount(_) => EINVAL,
            _ => EPROTO,
        }
    }

    /// Framing and version errors mean the peer does not speak this
    /// protocol: reply, then close. A bad field or an unknown opcode only
    /// fails that request.
    pub fn is_fatal(&self) -> bool {
        !matches!(self.errno(), EINVAL | EOPNOTSUPP)
    }
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::TooShort { len } => write!(f, "message too short ({len} bytes)"),
            ProtoError::BadLength { header, actual } => {
                write!(f, "header says {header} bytes, datagram has {actual}")
            }
            ProtoError::BadFrameLength(n) => write!(
                f,
                "header says {n} bytes, outside {HEADER_SIZE}..={MAX_MESSAGE}"
            ),
            ProtoError::BadVersion(v) => write!(f, "unsupported protocol version {v}"),
            ProtoError::WrongKind(op) => write!(f, "opcode {op:#06x} not expected here"),
            ProtoError::UnknownOpcode(op) => write!(f, "unknown opcode {op:#06x}"),
            ProtoError::BadStatus(s) => write!(f, "invalid status {s}"),
            ProtoError::BadSize {
                opcode,
                expected,
                actual,
            } => write!(f, "opcode {opcode:#06x} is {expected} bytes, got {actual}"),
            ProtoError::BadValue(w) => write!(f, "{w} out of range"),
            ProtoError::ReservedNotZero(w) => write!(f, "{w} must be zero"),
            ProtoError::BadString(w) => write!(f, "{w} is not a NUL-terminated UTF-8 name"),
            ProtoError::BadCount(w) => write!(f, "{w} count exceeds its capacity"),
        }
    }
}

impl std::error::Error for ProtoError {}

impl CmAddr {
    /// An IPv4 address and port.
    pub fn v4(ip: Ipv4Addr, port: u16) -> CmAddr {
        CmAddr {
            addr: ip.octets(),
            port,
        }
    }

    /// The address and port.
    pub fn ip_port(&self) -> (Ipv4Addr, u16) {
        (Ipv4Addr::from(self.addr), self.port)
    }
}

/// A decoded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub request_id: u32,
    pub body: RequestBody,
}

impl Request {
    pub fn opcode(&self) -> u16 {
        self.body.opcode()
    }

    pub fn request_id(&self) -> u32 {
        self.request_id
    }

    pub fn encode(&self) -> Vec<u8> {
        frame(self.opcode(), self.request_id, 0, |w| self.body.put(w))
    }
}

/// A decoded reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Ok {
        request_id: u32,
        body: ReplyBody,
    },
    /// `opcode` is the request's; `status` a negative errno.
    Err {
        request_id: u32,
        opcode: u16,
        status: i32,
    },
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Ok { request_id, body } => encode_reply(*request_id, body),
            Reply::Err {
                request_id,
                opcode,
                status,
            } => encode_error(*opcode, *request_id, *status),
        }
    }
}

fn frame(opcode: u16, request_id: u32, status: i32, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut w = Vec::with_capacity(HEADER_SIZE + 400);
    Header {
        version: VERSION,
        opcode,
        length: 0,
        request_id,
        status,
    }
    .put(&mut w);
    body(&mut w);
    let len = (w.len() as u32).to_le_bytes();
    w[4..8].copy_from_slice(&len);
    w
}

pub fn encode_request(request_id: u32, body: &RequestBody) -> Vec<u8> {
    frame(body.opcode(), request_id, 0, |w| body.put(w))
}

pub fn encode_reply(request_id: u32, body: &ReplyBody) -> Vec<u8> {
    frame(body.opcode() | REPLY, request_id, 0, |w| body.put(w))
}

/// A header-only error reply to `opcode` (a request opcode). `status` is a
/// negative errno; anything else becomes -EPROTO so the reply stays valid.
pub fn encode_error(opcode: u16, request_id: u32, status: i32) -> Vec<u8> {
    let status = if status < 0 { status } else { -EPROTO };
    frame(opcode | REPLY, request_id, status, |_| ())
}

pub fn encode_notice(body: &NoticeBody) -> Vec<u8> {
    frame(body.opcode(), 0, 0, |w| body.put(w))
}

pub fn encode_peer(body: &PeerBody) -> Vec<u8> {
    frame(body.opcode(), 0, 0, |w| body.put(w))
}

/// For a byte stream, where no datagram marks where a message ends: the
/// whole length of the message that starts with `header`, once the
/// version is ours and the length is one a message can have. The caller
/// reads that many bytes (header included) and decodes them.
pub fn message_len(header: &[u8]) -> Result<usize, ProtoError> {
    if header.len() < HEADER_SIZE {
        return Err(ProtoError::TooShort { len: header.len() });
    }
    let h = Header::get(&mut Reader::new(header))?;
    if h.version != VERSION {
        return Err(ProtoError::BadVersion(h.version));
    }
    match usize::try_from(h.length) {
        Ok(n) if (HEADER_SIZE..=MAX_MESSAGE).contains(&n) => Ok(n),
        _ => Err(ProtoError::BadFrameLength(h.length)),
    }
}

/// Opcode and request id as far as they can be read, to address an error
/// reply to a message that did not decode.
pub fn peek_ids(bytes: &[u8]) -> (u16, u32) {
    let opcode = bytes
        .get(2..4)
        .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
    let id = bytes
        .get(8..12)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    (opcode, id)
}

/// Header checks common to every kind of message; returns the header and a
/// reader positioned at the body.
fn open(bytes: &[u8]) -> Result<(Header, Reader<'_>), ProtoError> {
    if bytes.len() < HEADER_SIZE {
        return Err(ProtoError::TooShort { len: bytes.len() });
    }
    let mut r = Reader::new(bytes);
    let h = Header::get(&mut r)?;
    if h.version != VERSION {
        return Err(ProtoError::BadVersion(h.version));
    }
    if usize::try_from(h.length).ok() != Some(bytes.len()) {
        return Err(ProtoError::BadLength {
            header: h.length,
            actual: bytes.len(),
        });
    }
    Ok((h, r))
}

fn check_size(opcode: u16, size: Option<usize>, actual: usize) -> Result<(), ProtoError> {
    let expected = HEADER_SIZE + size.ok_or(ProtoError::UnknownOpcode(opcode))?;
    if expected != actual {
        return Err(ProtoError::BadSize {
            opcode,
            expected,
            actual,
        });
    }
    Ok(())
}

fn is_request(opcode: u16) -> bool {
    opcode < NOTICE_BASE
}

/// A posted request: no reply is sent for it, even on error.
pub fn is_posted(opcode: u16) -> bool {
    (POSTED_FIRST..=POSTED_LAST).contains(&opcode)
}

fn is_notice(opcode: u16) -> bool {
    (NOTICE_BASE..REPLY).contains(&opcode)
}

fn is_peer(opcode: u16) -> bool {
    (PEER_BASE..NOTICE_BASE).contains(&opcode)
}

/// Decode a request from a tenant. The caller replies with
/// `-err.errno()` on error and closes the session if `err.is_fatal()`.
pub fn decode_request(bytes: &[u8]) -> Result<Request, ProtoError> {
    let (h, mut r) = open(bytes)?;
    if !is_request(h.opcode) {
        return Err(ProtoError::WrongKind(h.opcode));
    }
    check_size(h.opcode, RequestBody::body_size(h.opcode), bytes.len())?;
    if h.status != 0 {
        return Err(ProtoError::BadStatus(h.status));
    }
    let body = RequestBody::get(h.opcode, &mut r)?;
    Ok(Request {
        request_id: h.request_id,
        body,
    })
}

pub fn decode_reply(bytes: &[u8]) -> Result<Reply, ProtoError> {
    let (h, mut r) = open(bytes)?;
    if h.opcode & REPLY == 0 {
        return Err(ProtoError::WrongKind(h.opcode));
    }
    let op = h.opcode & !REPLY;
    let size = if is_request(op) {
        ReplyBody::body_size(op)
    } else {
        None
    };
    if h.status < 0 {
        check_size(op, size.map(|_| 0), bytes.len())?;
        return Ok(Reply::Err {
            request_id: h.request_id,
            opcode: op,
            status: h.status,
        });
    }
    check_size(op, size, bytes.len())?;
    if h.status != 0 {
        return Err(ProtoError::BadStatus(h.status));
    }
    let body = ReplyBody::get(op, &mut r)?;
    Ok(Reply::Ok {
        request_id: h.request_id,
        body,
    })
}

pub fn decode_notice(bytes: &[u8]) -> Result<NoticeBody, ProtoError> {
    let (h, mut r) = open(bytes)?;
    if !is_notice(h.opcode) {
        return Err(ProtoError::WrongKind(h.opcode));
    }
    check_size(h.opcode, NoticeBody::body_size(h.opcode), bytes.len())?;
    if h.status != 0 {
        return Err(ProtoError::BadStatus(h.status));
    }
    if h.request_id != 0 {
        return Err(ProtoError::BadValue("Header.request_id"));
    }
    NoticeBody::get(h.opcode, &mut r)
}

/// Decode a message from another masqd. It is untrusted like a tenant's
/// request, and there is no reply to carry an error: the caller logs it
/// and drops the link.
pub fn decode_peer(bytes: &[u8]) -> Result<PeerBody, ProtoError> {
    let (h, mut r) = open(bytes)?;
    if !is_peer(h.opcode) {
        return Err(ProtoError::WrongKind(h.opcode));
    }
    check_size(h.opcode, PeerBody::body_size(h.opcode), bytes.len())?;
    if h.status != 0 {
        return Err(ProtoError::BadStatus(h.status));
    }
    if h.request_id != 0 {
        return Err(ProtoError::BadValue("Header.request_id"));
    }
    PeerBody::get(h.opcode, &mut r)
}

#[cfg(test)]
mod tests;
