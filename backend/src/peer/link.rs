//! The CM exchange between masqds over TCP on the underlay (`cm.port`),
//! accepted only from hosts in the VPC map. Messages are masq-proto's peer
//! messages (`spec.rs`, converted in `wire.rs`): the common header, whose
//! length frames each one on the stream and whose version tells a masqd of
//! another protocol apart, and a fixed-layout body. A peer that sends
//! anything else is logged and its link closed; it reconnects to send
//! again.
//!
//! Sending (`send.rs`): a queue and a thread per peer host, so that a
//! dead peer delays only its own messages, and a local thread for this
//! host's own endpoints.

use crate::error::{Error, Result};
use crate::peer::send::{Conn, Connect, Local, Outlet, Peer, Spawn, CONNECT_TIMEOUT};
pub use crate::peer::send::{Link, Outgoing, Sent};
use crate::peer::tls::{LinkTls, Reader};
use crate::peer::wire as peer_wire;
use masq_proto::PeerBody;
use std::collections::BTreeSet;
use std::io::{BufReader, Read};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// Where the link takes what it receives, and what it asks of masqd.
pub trait PeerSink: Send + Sync {
    /// A message from `from`, or from this host's own endpoints (through
    /// the local thread, so that no CM lock is re-entered).
    fn deliver(&self, from: Ipv4Addr, msg: PeerBody);
    /// `msg` could not be sent to `host`: the app sees a timeout.
    fn lost(&self, host: Ipv4Addr, msg: &PeerBody);
    /// `host`'s queue was full: a message for it was refused (and is
    /// reported `lost` too).
    fn dropped(&self, host: Ipv4Addr);
    /// The hosts of the VPC map: links are accepted from these only.
    fn hosts(&self) -> BTreeSet<Ipv4Addr>;
    fn stopping(&self) -> bool;
    /// The link's sending side, handed over right after the bind.
    fn linked(&self, link: Arc<Link>);
    /// A message spent `took` in `stage`: `queued` from the CM's send to
    /// its write on the link (here: through a peer's or the local thread), `handled`
    /// in `deliver` on the reader thread.
    fn timed(&self, stage: &'static str, kind: &'static str, took: Duration);
    /// Every 100 ms, for the CM's timeouts.
    fn tick(&self);
    /// The link listens; `others` are the other hosts of the VPC map.
    fn listening(&self, others: Vec<Ipv4Addr>);
    /// Mutual TLS for connections made from now on; None: plaintext.
    fn tls(&self) -> Option<Arc<LinkTls>>;
}

/// Bind the CM port on `own` and start the listener, the local thread and
/// the timer; each peer's sender starts with its first message.
pub fn start<S: PeerSink + 'static>(sink: &Arc<S>, own: Ipv4Addr, port: u16) -> Result<()> {
    let tcp = sink.clone();
    let connect: Arc<Connect> =
        Arc::new(move |host: Ipv4Addr| connect(host, port, tcp.tls().as_deref()));
    start_with(sink, own, port, connect)
}

/// `start`, with peers reached through `connect`.
fn start_with<S: PeerSink + 'static>(
    sink: &Arc<S>,
    own: Ipv4Addr,
    port: u16,
    connect: Arc<Connect>,
) -> Result<()> {
    let addr = SocketAddr::new(IpAddr::V4(own), port);
    let listener = TcpListener::bind(addr)
        .map_err(|e| Error::os(format!("CM link: cannot listen on {addr}"), e))?;
    let (tx, rx) = mpsc::channel();
    let spawn: Spawn = {
        let sink = sink.clone();
        Box::new(move |peer: Arc<Peer>| {
            let (sink, connect) = (sink.clone(), connect.clone());
            let host = peer.host;
            let spawned = thread::Builder::new()
                .name(format!("cm-to-{host}"))
                .spawn(move || crate::peer::send::serve_peer(&peer, &*connect, &Out(&*sink)));
            if let Err(e) = spawned {
                // Its queue fills and drops, counted.
                warn!(%host, "CM link: cannot start the peer's sender: {e}");
            }
        })
    };
    sink.linked(Arc::new(Link::new(own, tx, Some(spawn))));
    {
        let sink = sink.clone();
        thread::Builder::new()
            .name("cm-local".into())
            .spawn(move || local(&*sink, own, rx))?;
    }
    {
        let sink = sink.clone();
        thread::Builder::new()
            .name("cm-listen".into())
            .spawn(move || accept_loop(sink, listener))?;
    }
    {
        let sink = sink.clone();
        thread::Builder::new()
            .name("cm-timer".into())
            .spawn(move || {
                while !sink.stopping() {
                    thread::sleep(Duration::from_millis(100));
                    sink.tick();
                }
            })?;
    }
    info!(%addr, "CM link listening");
    // Other hosts' UD QPs were announced to the masqd before this one.
    sink.listening(sink.hosts().into_iter().filter(|h| *h != own).collect());
    Ok(())
}

/// A peer's thread reports to the sink.
struct Out<'a, S: PeerSink>(&'a S);

impl<S: PeerSink> Outlet for Out<'_, S> {
    fn lost(&self, host: Ipv4Addr, msg: &PeerBody) {
        self.0.lost(host, msg);
    }
    fn timed(&self, kind: &'static str, took: Duration) {
        self.0.timed("queued", kind, took);
    }
    fn stopping(&self) -> bool {
        self.0.stopping()
    }
}

/// This host's own messages, and the ones a full queue refused.
fn local<S: PeerSink>(sink: &S, own: Ipv4Addr, rx: mpsc::Receiver<Local>) {
    for job in rx {
        match job {
            Local::Deliver(msg, queued) => {
                sink.timed("queued", msg.name(), queued.elapsed());
                deliver(sink, own, msg);
            }
            Local::Dropped(host, msg) => {
                sink.dropped(host);
                sink.lost(host, &msg);
            }
        }
    }
}

fn connect(host: Ipv4Addr, port: u16, tls: Option<&LinkTls>) -> Result<Conn> {
    let to = SocketAddr::new(IpAddr::V4(host), port);
    let s = TcpStream::connect_timeout(&to, CONNECT_TIMEOUT)
        .map_err(|e| Error::os(to.to_string(), e))?;
    let _ = s.set_nodelay(true);
    let _ = s.set_write_timeout(Some(CONNECT_TIMEOUT));
    let fd = Some(s.as_raw_fd());
    match tls {
        Some(tls) => tls.connect(host, s).map(|w| Conn::new(w, fd)),
        None => Ok(Conn::new(Box::new(s), fd)),
    }
    .map_err(|e| e.context(to))
}

fn accept_loop<S: PeerSink + 'static>(sink: Arc<S>, listener: TcpListener) {
    for conn in listener.incoming() {
        if sink.stopping() {
            return;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                warn!("CM link: accept failed: {e}");
                thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let from = match stream.peer_addr() {
            Ok(SocketAddr::V4(a)) => *a.ip(),
            _ => continue,
        };
        if !sink.hosts().contains(&from) {
            warn!(%from, "CM link: connection from a host not in the VPC map; closed");
            continue;
        }
        let sink = sink.clone();
        let spawned = thread::Builder::new()
            .name(format!("cm-from-{from}"))
            .spawn(move || receive(sink, from, stream));
        if let Err(e) = spawned {
            warn!("CM link: cannot start a reader: {e}");
        }
    }
}

/// `deliver`, timed.
fn deliver<S: PeerSink + ?Sized>(sink: &S, from: Ipv4Addr, msg: PeerBody) {
    let (started, kind) = (Instant::now(), msg.name());
    sink.deliver(from, msg);
    sink.timed("handled", kind, started.elapsed());
}

fn receive<S: PeerSink>(sink: Arc<S>, from: Ipv4Addr, tcp: TcpStream) {
    let stream: Reader = match sink.tls() {
        Some(tls) => match tls.accept(from, tcp) {
            Ok(s) => s,
            Err(e) => {
                warn!(%from, "CM link: refused: {e}");
                return;
            }
        },
        None => Box::new(tcp),
    };
    debug!(%from, "CM link up");
    let _ = read_link(from, BufReader::new(stream), |msg| {
        deliver(&*sink, from, msg)
    });
    debug!(%from, "CM link down");
}

/// Hands each message from `from` to `deliver` until the stream ends, and
/// returns why it stopped. A message that does not decode ends the link
/// too: past a bad header the stream cannot be framed, and a peer that
/// sends bad bodies is not one to keep listening to.
fn read_link(
    from: Ipv4Addr,
    mut stream: impl Read,
    mut deliver: impl FnMut(PeerBody),
) -> Result<(), peer_wire::Error> {
    loop {
        match peer_wire::read(&mut stream) {
            Ok(Some(msg)) => deliver(msg),
            Ok(None) => return Ok(()),
            Err(peer_wire::Error::Io(e)) => {
                debug!(%from, "CM link: {e}");
                return Err(peer_wire::Error::Io(e));
            }
            Err(e) => {
                warn!(%from, "CM link: {e}; closing");
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::send::QUEUE_BOUND;
    use masq_proto as proto;
    use std::io::{self, Cursor, Write};
    use std::sync::Mutex;

    /// What `f` logs.
    fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl Write for Buf {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
                v.extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let w = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || w.clone())
            .with_ansi(false)
            .finish();
        let out = tracing::subscriber::with_default(sub, f);
        let text =
            String::from_utf8_lossy(&buf.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned();
        (out, text)
    }

    const PEER: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 2);

    fn rtu(to_id: u32) -> PeerBody {
        PeerBody::Rtu(proto::PeerRtu { to_id, from_id: 9 })
    }

    fn bytes(m: &PeerBody) -> Vec<u8> {
        peer_wire::encode(m).expect("encode")
    }

    /// The stream `good, bad, good`: what `read_link` delivers, returns
    /// and logs.
    fn run(bad: &[u8]) -> (Vec<PeerBody>, Result<(), peer_wire::Error>, String) {
        let mut stream = bytes(&rtu(1));
        stream.extend_from_slice(bad);
        stream.extend(bytes(&rtu(3)));
        let mut got = Vec::new();
        let (res, log) = logged(|| read_link(PEER, Cursor::new(stream), |m| got.push(m)));
        (got, res, log)
    }

    #[test]
    fn a_malformed_message_closes_the_link_with_a_warning_naming_the_host() {
        let good = bytes(&rtu(2));
        let with = |at: usize, v: &[u8]| {
            let mut b = good.clone();
            b[at..at + v.len()].copy_from_slice(v);
            b
        };
        let cases = [
            ("another version", with(0, &9u16.to_le_bytes()), "version 9"),
            (
                "unknown opcode",
                with(2, &0x2077u16.to_le_bytes()),
                "unknown opcode 0x2077",
            ),
            (
                "over-long length",
                with(4, &(1u32 << 20).to_le_bytes()),
                "1048576 bytes",
            ),
            (
                "a bad field",
                // PeerRtu has none to break, so a PEER_UD_QP with up = 2.
                {
                    let mut b = bytes(&PeerBody::UdQp(proto::PeerUdQp {
                        vni: 1,
                        vip: PEER.octets(),
                        qpn: 1,
                        up: 1,
                    }));
                    b[28] = 2;
                    b
                },
                "PeerUdQp.up",
            ),
            ("a JSON line", b"{\"type\":\"rtu\"}\n".to_vec(), "version"),
        ];
        for (what, bad, says) in cases {
            let (got, res, log) = run(&bad);
            assert_eq!(got, vec![rtu(1)], "{what}: only what came before");
            assert!(
                matches!(res, Err(peer_wire::Error::Proto(_))),
                "{what}: {res:?}"
            );
            assert!(
                log.contains("WARN") && log.contains("192.168.1.2") && log.contains(says),
                "{what}: {log}"
            );
        }
    }

    #[test]
    fn a_cut_message_is_warned_of() {
        let cut = bytes(&rtu(2));
        let mut stream = bytes(&rtu(1));
        stream.extend_from_slice(&cut[..20]);
        let mut got = Vec::new();
        let (res, log) = logged(|| read_link(PEER, Cursor::new(stream), |m| got.push(m)));
        assert_eq!(got, vec![rtu(1)]);
        assert!(matches!(res, Err(peer_wire::Error::Cut { .. })), "{res:?}");
        assert!(log.contains("WARN") && log.contains("192.168.1.2"), "{log}");
    }

    /// Over a real socket, as `receive` reads: every message in order, and
    /// a quiet end when the peer closes.
    #[test]
    fn messages_over_tcp_arrive_in_order() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let to = listener.local_addr().expect("addr");
        let all: Vec<PeerBody> = (1..=50).map(rtu).collect();
        let send = all.clone();
        let writer = thread::spawn(move || {
            let mut s = TcpStream::connect(to).expect("connect");
            for m in &send {
                s.write_all(&bytes(m)).expect("write");
            }
        });
        let (stream, _) = listener.accept().expect("accept");
        let mut got = Vec::new();
        let (res, log) = logged(|| read_link(PEER, BufReader::new(stream), |m| got.push(m)));
        writer.join().expect("writer");
        assert!(res.is_ok(), "{res:?}");
        assert_eq!(got, all);
        assert!(!log.contains("WARN"), "{log}");
    }

    /// Records what the link hands it; hosts 127.0.0.1 and .2.
    #[derive(Default)]
    struct FakeSink {
        got: Mutex<Vec<(Ipv4Addr, PeerBody)>>,
        lost: Mutex<Vec<(Ipv4Addr, PeerBody)>>,
        dropped: Mutex<Vec<Ipv4Addr>>,
        link: Mutex<Option<Arc<Link>>>,
        listening: Mutex<Option<Vec<Ipv4Addr>>>,
        tls: Option<Arc<LinkTls>>,
    }

    impl PeerSink for FakeSink {
        fn deliver(&self, from: Ipv4Addr, msg: PeerBody) {
            self.got.lock().expect("lock").push((from, msg));
        }
        fn lost(&self, host: Ipv4Addr, msg: &PeerBody) {
            self.lost.lock().expect("lock").push((host, msg.clone()));
        }
        fn dropped(&self, host: Ipv4Addr) {
            self.dropped.lock().expect("lock").push(host);
        }
        fn hosts(&self) -> BTreeSet<Ipv4Addr> {
            [Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2)].into()
        }
        fn stopping(&self) -> bool {
            false
        }
        fn linked(&self, link: Arc<Link>) {
            *self.link.lock().expect("lock") = Some(link);
        }
        fn timed(&self, _stage: &'static str, _kind: &'static str, _took: Duration) {}
        fn tick(&self) {}
        fn listening(&self, others: Vec<Ipv4Addr>) {
            *self.listening.lock().expect("lock") = Some(others);
        }
        fn tls(&self) -> Option<Arc<LinkTls>> {
            self.tls.clone()
        }
    }

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..500 {
            if done() {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        panic!("{what}: not in 5 s");
    }

    /// Messages to this host's own endpoints take the sender thread and
    /// come back through `deliver`; one that cannot reach its host is
    /// handed to `lost` (port 0: nothing listens there).
    #[test]
    fn the_link_loops_own_messages_back_and_reports_lost_ones() {
        let own = Ipv4Addr::new(127, 0, 0, 1);
        let other = Ipv4Addr::new(127, 0, 0, 2);
        let sink = Arc::new(FakeSink::default());
        start(&sink, own, 0).expect("start");
        assert_eq!(*sink.listening.lock().expect("lock"), Some(vec![other]));
        let link = sink
            .link
            .lock()
            .expect("lock")
            .clone()
            .expect("linked at start");
        assert_eq!(link.send(own, rtu(1), Instant::now()), Sent::Queued);
        let ud = PeerBody::UdQp(proto::PeerUdQp {
            vni: 1,
            vip: PEER.octets(),
            qpn: 5,
            up: 1,
        });
        assert_eq!(link.send(other, ud.clone(), Instant::now()), Sent::Queued);
        wait_for("delivered", || !sink.got.lock().expect("lock").is_empty());
        assert_eq!(*sink.got.lock().expect("lock"), vec![(own, rtu(1))]);
        wait_for("lost", || !sink.lost.lock().expect("lock").is_empty());
        assert_eq!(*sink.lost.lock().expect("lock"), vec![(other, ud)]);
    }

    /// A port free on 127.0.0.2.
    fn free_port() -> u16 {
        TcpListener::bind((B, 0))
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port()
    }

    /// Two links on 127.0.0.1 and 127.0.0.2 (one port, as cm.port is), with
    /// the TLS given to each.
    fn pair(
        a_tls: Option<Arc<LinkTls>>,
        b_tls: Option<Arc<LinkTls>>,
    ) -> (Arc<FakeSink>, Arc<FakeSink>, Arc<Link>) {
        pair_on(free_port(), a_tls, b_tls)
    }

    fn pair_on(
        port: u16,
        a_tls: Option<Arc<LinkTls>>,
        b_tls: Option<Arc<LinkTls>>,
    ) -> (Arc<FakeSink>, Arc<FakeSink>, Arc<Link>) {
        let (a, b) = (Ipv4Addr::new(127, 0, 0, 1), B);
        let from = Arc::new(FakeSink {
            tls: a_tls,
            ..Default::default()
        });
        let to = Arc::new(FakeSink {
            tls: b_tls,
            ..Default::default()
        });
        start(&to, b, port).expect("start b");
        start(&from, a, port).expect("start a");
        let link = from.link.lock().expect("lock").clone().expect("linked");
        (from, to, link)
    }

    const B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

    fn got(sink: &FakeSink) -> Vec<PeerBody> {
        let got = sink.got.lock().expect("lock");
        got.iter().map(|(_, m)| m.clone()).collect()
    }

    /// The first message to a peer waits for the sender thread to connect;
    /// once the connection is up, the next is written by the sending
    /// thread itself, and the peer gets both in order.
    #[test]
    fn a_connected_peer_is_written_to_by_the_sending_thread() {
        let (from, to, link) = pair(None, None);
        assert_eq!(link.send(B, rtu(1), Instant::now()), Sent::Queued);
        wait_for("the first", || got(&to).len() == 1);
        wait_for("the connection idle", || link.idle(B));
        assert_eq!(link.send(B, rtu(2), Instant::now()), Sent::Written);
        assert_eq!(link.send(B, rtu(3), Instant::now()), Sent::Written);
        wait_for("all three", || got(&to).len() == 3);
        assert_eq!(got(&to), vec![rtu(1), rtu(2), rtu(3)]);
        assert!(from.lost.lock().expect("lock").is_empty());
    }

    /// A listener on `ip:port` that takes no connection, as a host that
    /// died with its kernel's queue full: backlog 0, filled by a
    /// connection never accepted, so the kernel drops every further SYN
    /// and a connect waits out its timeout. Keep what it returns.
    fn blackhole(ip: Ipv4Addr, port: u16) -> (std::os::fd::OwnedFd, Vec<TcpStream>) {
        use nix::sys::socket::{bind, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("socket");
        let at = std::net::SocketAddrV4::new(ip, port);
        bind(fd.as_raw_fd(), &SockaddrIn::from(at)).expect("bind");
        // SAFETY: listen(2) on a socket this test owns.
        assert_eq!(unsafe { libc::listen(fd.as_raw_fd(), 0) }, 0);
        let mut held = Vec::new();
        while let Ok(s) = TcpStream::connect_timeout(&at.into(), Duration::from_millis(200)) {
            held.push(s);
            assert!(held.len() < 8, "the backlog never filled");
        }
        (fd, held)
    }

    /// A peer that takes no connection holds up neither this host's own
    /// messages nor another peer's: both arrive well within the dead
    /// peer's connect timeout. Its queue takes QUEUE_BOUND messages and
    /// refuses the rest, each counted and reported lost; once its connect
    /// has failed, what it holds is lost at once, not a timeout each.
    #[test]
    fn a_dead_peer_delays_only_its_own_messages_and_its_queue_drops_at_its_bound() {
        let port = free_port();
        let (own, dead) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 3));
        let _hole = blackhole(dead, port);
        let (from, to, link) = pair_on(port, None, None);
        let t = Instant::now();
        // The dead peer's sender now waits in its connect.
        assert_eq!(link.send(dead, rtu(1), Instant::now()), Sent::Queued);
        let refused = (0..QUEUE_BOUND + 5)
            .filter(|n| link.send(dead, rtu(*n as u32), Instant::now()) == Sent::Dropped)
            .count();
        link.send(own, rtu(2), Instant::now());
        link.send(B, rtu(3), Instant::now());
        wait_for("own and the live peer's", || {
            got(&from) == vec![rtu(2)] && got(&to) == vec![rtu(3)]
        });
        let took = t.elapsed();
        assert!(took < CONNECT_TIMEOUT / 2, "{took:?}");
        // The first may still have been queued when the rest came.
        assert!((5..=6).contains(&refused), "{refused}");
        wait_for("the drops counted", || {
            from.dropped.lock().expect("lock").len() == refused
        });
        assert!(from
            .dropped
            .lock()
            .expect("lock")
            .iter()
            .all(|h| *h == dead));
        let all = 1 + QUEUE_BOUND + 5;
        wait_for("all of the dead peer's lost", || {
            from.lost.lock().expect("lock").len() == all
        });
        assert!(from
            .lost
            .lock()
            .expect("lock")
            .iter()
            .all(|(h, _)| *h == dead));
        assert_eq!(got(&to), vec![rtu(3)]);
    }

    /// Identities made by integration/make-pki: `names` (NAME=IP) under one
    /// CA in `dir`.
    fn identities(dir: &std::path::Path, names: &[&str]) -> Vec<crate::config::identity::Identity> {
        let made = std::process::Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../integration/make-pki"
        ))
        .arg(dir.join("ca"))
        .arg(dir.join("pki"))
        .args(names)
        .status()
        .expect("integration/make-pki (openssl)");
        assert!(made.success());
        names
            .iter()
            .map(|n| {
                let n = n.split('=').next().expect("name");
                let pki = dir.join("pki");
                crate::config::identity::Identity::load(&crate::config::TlsFiles {
                    ca: pki.join("ca.pem"),
                    cert: pki.join(format!("{n}.pem")),
                    key: pki.join(format!("{n}-key.pem")),
                })
                .expect("identity")
            })
            .collect()
    }

    fn tls(id: &crate::config::identity::Identity) -> Option<Arc<LinkTls>> {
        Some(Arc::new(LinkTls::new(id).expect("tls")))
    }

    /// Over mutual TLS, messages go as over plain TCP; a client whose
    /// certificate another CA signed, or one that names another address,
    /// gets nothing delivered.
    #[test]
    fn the_link_over_mutual_tls_takes_only_the_clusters_certificate_for_the_senders_address() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ids = identities(dir.path(), &["a=127.0.0.1", "b=127.0.0.2"]);
        let other = tempfile::tempdir().expect("tempdir");
        let foreign = identities(other.path(), &["a=127.0.0.1"]);
        let (a, b) = (&ids[0], &ids[1]);

        let (_, to, link) = pair(tls(a), tls(b));
        link.send(B, rtu(1), Instant::now());
        wait_for("the first", || got(&to).len() == 1);
        wait_for("the connection idle", || link.idle(B));
        assert_eq!(link.send(B, rtu(2), Instant::now()), Sent::Written);
        wait_for("the second", || got(&to).len() == 2);

        // Trusts b's CA, but shows a certificate of another CA.
        let forged = crate::config::identity::Identity {
            ca: a.ca.clone(),
            ..foreign[0].clone()
        };
        // Shows b's own certificate from a's address.
        let borrowed = crate::config::identity::Identity { ..b.clone() };
        for (what, id) in [("another CA", forged), ("another address", borrowed)] {
            let (_, to, link) = pair(tls(&id), tls(b));
            for n in 0..3 {
                link.send(B, rtu(n), Instant::now());
                thread::sleep(Duration::from_millis(100));
            }
            thread::sleep(Duration::from_millis(500));
            assert!(got(&to).is_empty(), "{what}: {:?}", got(&to));
        }
    }
}
