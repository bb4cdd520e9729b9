//! One netlink request and its answer, for the families whose messages a
//! crate defines (ctnetlink, rtnetlink's traffic control): send, then
//! collect the replies until the answer is complete (the ack of a change,
//! NLMSG_DONE of a dump).

use crate::error::Result;
use netlink_packet_core::{
    NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload, NetlinkSerializable,
    NLM_F_REQUEST,
};
use netlink_sys::{Socket, SocketAddr};
use std::fmt::Debug;
use std::io;

pub struct Netlink {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
    what: &'static str,
}

/// A socket of `protocol` (NETLINK_NETFILTER, NETLINK_ROUTE, ...), bound
/// to a port of its own and connected to the kernel.
pub(crate) fn kernel_socket(protocol: isize) -> Result<Socket> {
    let mut sock = Socket::new(protocol)?;
    sock.bind_auto()?;
    sock.connect(&SocketAddr::new(0, 0))?;
    Ok(sock)
}

/// setsockopt(2) of one plain value (an int, a timeval) on a socket.
pub(crate) fn set_option<T>(
    sock: &Socket,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> Result<()> {
    // SAFETY: `value` is a plain value of its own size, only read.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(sock),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error().into())
    }
}

fn invalid(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {e}"))
}

impl Netlink {
    /// A socket of `protocol` (NETLINK_NETFILTER, NETLINK_ROUTE, ...);
    /// `what` names it in errors.
    pub fn open(protocol: isize, what: &'static str) -> Result<Netlink> {
        Ok(Netlink {
            sock: kernel_socket(protocol)?,
            seq: 0,
            buf: vec![0; 64 * 1024],
            what,
        })
    }

    /// Send `req` with NLM_F_REQUEST and `flags` (NLM_F_DUMP, NLM_F_ACK)
    /// and return the messages of the answer; an error the kernel answers
    /// is its errno.
    pub fn request<M>(&mut self, req: M, flags: u16) -> Result<Vec<M>>
    where
        M: NetlinkSerializable + NetlinkDeserializable + Debug,
    {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut hdr = NetlinkHeader::default();
        hdr.flags = NLM_F_REQUEST | flags;
        hdr.sequence_number = seq;
        let mut msg = NetlinkMessage::new(hdr, NetlinkPayload::InnerMessage(req));
        msg.finalize();
        let mut out = vec![0; msg.buffer_len()];
        msg.serialize(&mut out);
        self.sock.send(&out, 0)?;
        let mut answer = Vec::new();
        loop {
            let n = self.sock.recv(&mut &mut self.buf[..], libc::MSG_TRUNC)?;
            if n > self.buf.len() {
                return Err(
                    invalid(self.what, format!("a reply of {n} bytes does not fit")).into(),
                );
            }
            let mut off = 0;
            while off < n {
                let m = NetlinkMessage::<M>::deserialize(&self.buf[off..n])
                    .map_err(|e| invalid(self.what, e))?;
                let len = m.header.length as usize;
                if len == 0 {
                    return Err(invalid(self.what, "zero-length netlink message").into());
                }
                off += (len + 3) & !3;
                if m.header.sequence_number != seq {
                    // A late answer to an earlier, abandoned request.
                    continue;
                }
                match m.payload {
                    NetlinkPayload::InnerMessage(inner) => answer.push(inner),
                    NetlinkPayload::Done(_) => return Ok(answer),
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            Some(c) => Err(io::Error::from_raw_os_error(-c.get()).into()),
                            None => Ok(answer),
                        };
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Runs the test `test` (its full path) of this test binary again, alone,
/// in a user and network namespace of its own (`unshare -rn`), with `env`
/// set so that it knows it is the child; fails unless it ran and passed.
#[cfg(test)]
pub(crate) fn run_test_in_own_netns(test: &str, env: &str) {
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new("unshare")
        .arg("-rn")
        .arg(exe)
        .args(["--exact", test])
        .env(env, "1")
        .output()
        .expect("unshare (util-linux) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("1 passed"), "the child ran no test: {text}");
}
