//! The session loop over one tenant connection, generic over its
//! `Handler`: the same framing, refusal and reply rules for every handler.

use super::{Answer, Handler};
use crate::transport::seqpacket::Conn;
use masq_proto as proto;
use std::os::fd::AsRawFd;
use tracing::{debug, warn};

/// Serve requests until the app closes the connection, a reply cannot be
/// delivered, or an answer says to close.
pub fn serve<H: Handler + ?Sized>(h: &mut H, conn: &Conn) {
    let mut buf = vec![0u8; proto::MAX_MESSAGE];
    loop {
        let dgram = match conn.recv(&mut buf) {
            Ok(Some(d)) => d,
            Ok(None) => return,
            Err(e) => {
                if !h.stopping() {
                    warn!("receive failed: {e}");
                }
                return;
            }
        };
        h.received();
        if dgram.truncated {
            h.refused();
            warn!("message longer than {} bytes; closing", proto::MAX_MESSAGE);
            let _ = conn.send(&proto::encode_error(0, 0, -libc::EMSGSIZE), None);
            return;
        }
        let bytes = &buf[..dgram.len];
        let started = std::time::Instant::now();
        let (op, id) = proto::peek_ids(bytes);
        let answer = match proto::decode_request(bytes) {
            Ok(msg) => h.handle(msg, dgram.fds),
            Err(e) => {
                h.refused();
                warn!("malformed request: {e}");
                Answer {
                    reply: proto::encode_error(op, id, -e.errno()),
                    fd: None,
                    close: e.is_fatal(),
                }
            }
        };
        h.finished(op, started.elapsed());
        // Posted requests get no reply, not even an error, unless the
        // session ends (the frontend then sees the hang-up).
        if proto::is_posted(op) && !answer.close {
            continue;
        }
        let fd = answer.fd.as_ref().map(|f| f.as_raw_fd());
        if let Err(e) = conn.send(&answer.reply, fd) {
            debug!("reply not delivered: {e}");
            return;
        }
        if answer.close {
            return;
        }
    }
}

/// Turn a connection away before serving it: its first request (the
/// app's HELLO, waited for at most `wait`, so a silent client holds the
/// caller no longer) gets `errno`, as a kernel answers an open past a
/// limit; then the connection is closed.
pub fn refuse_first(conn: &Conn, errno: i32, wait: std::time::Duration) {
    let mut buf = vec![0u8; proto::MAX_MESSAGE];
    if !conn.readable(wait) {
        return;
    }
    // Descriptors it passed are closed with the datagram.
    let Ok(Some(d)) = conn.recv(&mut buf) else {
        return;
    };
    let (op, id) = proto::peek_ids(&buf[..d.len]);
    if let Err(e) = conn.send(&proto::encode_error(op, id, -errno), None) {
        debug!("refusal not delivered: {e}");
    }
}

#[cfg(test)]
mod tests {
    //! The loop against a dummy handler over a socket pair: what it
    //! replies, passes and counts, and when it stops.
    use super::*;
    use crate::transport::Handler;
    use proto::{DestroyQpReq, QueryGidTableReq, Reply, RequestBody};
    use std::os::fd::OwnedFd;
    use std::thread;
    use std::time::Duration;

    /// Replies with an error carrying the request id as errno (so each
    /// reply says which request it answers), hands any descriptor back, and
    /// closes after a request with id `CLOSE`.
    #[derive(Default)]
    struct Dummy {
        received: u32,
        refused: u32,
        handled: Vec<(u16, u32, usize)>,
        finished: Vec<u16>,
    }

    const CLOSE: u32 = 99;

    impl Handler for Dummy {
        fn received(&mut self) {
            self.received += 1;
        }
        fn handle(&mut self, req: proto::Request, mut fds: Vec<OwnedFd>) -> Answer {
            let (op, id) = (req.opcode(), req.request_id());
            self.handled.push((op, id, fds.len()));
            Answer {
                reply: proto::encode_error(op, id, -(id as i32)),
                fd: fds.pop(),
                close: id == CLOSE,
            }
        }
        fn refused(&mut self) {
            self.refused += 1;
        }
        fn finished(&mut self, op: u16, _took: Duration) {
            self.finished.push(op);
        }
        fn stopping(&self) -> bool {
            false
        }
    }

    /// The loop on one end of a pair, in a thread; the app's end.
    fn start() -> (thread::JoinHandle<Dummy>, Conn) {
        let (ours, theirs) = Conn::pair().expect("socketpair");
        let server = thread::spawn(move || {
            let mut h = Dummy::default();
            serve(&mut h, &ours);
            h
        });
        (server, Conn::from(theirs))
    }

    fn gids(id: u32) -> Vec<u8> {
        proto::encode_request(
            id,
            &RequestBody::QueryGidTable(QueryGidTableReq { port: 1 }),
        )
    }

    /// A posted request (QP_DESTROYED).
    fn destroyed_body() -> RequestBody {
        RequestBody::QpDestroyed(DestroyQpReq {
            qp_handle: 7,
            qp_num: 0x11,
        })
    }

    fn destroyed(id: u32) -> Vec<u8> {
        proto::encode_request(id, &destroyed_body())
    }

    /// The next reply: decoded, and the number of descriptors with it.
    fn reply(app: &Conn) -> Option<(Reply, usize)> {
        let mut buf = vec![0u8; proto::MAX_MESSAGE];
        let d = app.recv(&mut buf).expect("recv")?;
        let r = proto::decode_reply(&buf[..d.len]).expect("a reply");
        Some((r, d.fds.len()))
    }

    fn err(opcode: u16, request_id: u32, status: i32) -> Reply {
        Reply::Err {
            request_id,
            opcode,
            status,
        }
    }

    #[test]
    fn replies_pass_descriptors_and_posted_requests_get_none() {
        let (server, app) = start();
        let op_gids = RequestBody::QueryGidTable(QueryGidTableReq { port: 1 }).opcode();
        let op_destroyed = destroyed_body().opcode();
        assert!(proto::is_posted(op_destroyed) && !proto::is_posted(op_gids));

        app.send(&gids(1), None).expect("send");
        assert_eq!(reply(&app), Some((err(op_gids, 1, -1), 0)));

        let f = std::fs::File::open("/dev/null").expect("open");
        app.send(&gids(2), Some(f.as_raw_fd())).expect("send");
        assert_eq!(
            reply(&app),
            Some((err(op_gids, 2, -2), 1)),
            "the fd comes back"
        );

        // No reply to the posted request: the next datagram answers 4.
        app.send(&destroyed(3), None).expect("send");
        app.send(&gids(4), None).expect("send");
        assert_eq!(reply(&app), Some((err(op_gids, 4, -4), 0)));

        drop(app);
        let h = server.join().expect("server");
        assert_eq!(h.received, 4);
        assert_eq!(h.refused, 0);
        let ids: Vec<(u32, usize)> = h.handled.iter().map(|&(_, id, n)| (id, n)).collect();
        assert_eq!(ids, vec![(1, 0), (2, 1), (3, 0), (4, 0)]);
        assert_eq!(h.finished, vec![op_gids, op_gids, op_destroyed, op_gids]);
    }

    #[test]
    fn a_refused_connection_gets_its_errno_on_its_first_request_then_ends() {
        let (ours, theirs) = Conn::pair().expect("socketpair");
        let app = Conn::from(theirs);
        app.send(&gids(9), None).expect("send");
        refuse_first(&ours, libc::EMFILE, Duration::from_secs(1));
        drop(ours);
        let op = RequestBody::QueryGidTable(QueryGidTableReq { port: 1 }).opcode();
        assert_eq!(reply(&app), Some((err(op, 9, -libc::EMFILE), 0)));
        assert!(reply(&app).is_none(), "closed");

        // A client that says nothing holds the caller no longer than the wait.
        let (ours, _silent) = Conn::pair().expect("socketpair");
        let t = std::time::Instant::now();
        refuse_first(&ours, libc::EMFILE, Duration::from_millis(50));
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_truncated_request_gets_emsgsize_and_ends_the_session() {
        let (server, app) = start();
        app.send(&vec![0u8; proto::MAX_MESSAGE + 1], None)
            .expect("send");
        // Opcode 0: there is no request to name (decode_reply refuses it).
        let mut buf = vec![0u8; proto::MAX_MESSAGE];
        let d = app.recv(&mut buf).expect("recv").expect("a reply");
        assert_eq!(
            &buf[..d.len],
            &proto::encode_error(0, 0, -libc::EMSGSIZE)[..]
        );
        assert_eq!(reply(&app), None, "then the loop ends");
        let h = server.join().expect("server");
        assert_eq!((h.received, h.refused), (1, 1));
        assert!(h.handled.is_empty() && h.finished.is_empty());
    }

    #[test]
    fn a_malformed_request_is_refused_with_its_errno() {
        let (server, app) = start();
        let mut bad = gids(5);
        bad.push(0); // longer than its header says
        app.send(&bad, None).expect("send");
        let op = RequestBody::QueryGidTable(QueryGidTableReq { port: 1 }).opcode();
        let e = proto::decode_request(&bad).expect_err("malformed");
        assert_eq!(reply(&app), Some((err(op, 5, -e.errno()), 0)));
        drop(app);
        let h = server.join().expect("server");
        assert_eq!((h.received, h.refused), (1, 1));
        assert_eq!(h.finished, vec![op]);
    }

    #[test]
    fn an_answer_that_closes_ends_the_session_after_its_reply() {
        let (server, app) = start();
        // Even a posted request is answered when its session ends.
        app.send(&destroyed(CLOSE), None).expect("send");
        let op = destroyed_body().opcode();
        assert_eq!(reply(&app), Some((err(op, CLOSE, -(CLOSE as i32)), 0)));
        assert_eq!(reply(&app), None);
        let h = server.join().expect("server");
        assert_eq!(h.received, 1);
    }

    #[test]
    fn the_loop_ends_when_the_app_hangs_up() {
        let (server, app) = start();
        drop(app);
        let h = server.join().expect("server");
        assert_eq!((h.received, h.refused), (0, 0));
    }
}
