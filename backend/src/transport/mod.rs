//! The tenants' socket: one SOCK_SEQPACKET connection per app context,
//! carrying masq-proto requests and replies (the wire is the `masq-proto`
//! crate). The loop (`connection.rs`) receives, checks, decodes and
//! answers; what a request means is up to its `Handler`.

mod connection;
pub mod seqpacket;

pub use connection::{refuse_first, serve};

use masq_proto as proto;
use std::os::fd::OwnedFd;
use std::time::Duration;

/// The answer to one decoded request.
pub struct Answer {
    /// The encoded reply (an error reply on refusal).
    pub reply: Vec<u8>,
    /// A descriptor to pass along with the reply.
    pub fd: Option<OwnedFd>,
    /// The session ends after this reply.
    pub close: bool,
}

/// What a connection's requests are handed to. The loop calls, for each
/// datagram: `received`, then (too long or malformed) `refused`, or
/// `handle`; then `finished` for every datagram that got that far.
pub trait Handler {
    /// A datagram arrived (counted before it is checked).
    fn received(&mut self);
    /// Answer one decoded request, with the descriptors that came with it.
    fn handle(&mut self, req: proto::Request, fds: Vec<OwnedFd>) -> Answer;
    /// A datagram was refused before `handle`: too long or malformed.
    fn refused(&mut self);
    /// The datagram with opcode `op` was handled or refused as malformed,
    /// `took` after it was received.
    fn finished(&mut self, op: u16, took: Duration);
    /// masqd is stopping: a failed receive is then expected, not logged.
    fn stopping(&self) -> bool;
}
