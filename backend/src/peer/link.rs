//! The CM exchange between masqds over TCP on the underlay (`cm.port`),
//! accepted only from hosts in the VPC map. Messages are masq-proto's peer
//! messages (`spec.rs`, converted in `wire.rs`): the common header, whose
//! length frames each one on the stream and whose version tells a masqd of
//! another protocol apart, and a fixed-layout body. A peer that sends
//! anything else is logged and its link closed; it reconnects to send
//! again.
//!
//! A message to a peer whose connection is up is written by the thread
//! that sends it (`Link::send`), with no thread switch on the way: under
//! emulation a hand-off to another thread cost 0.5-0.7 ms per message.
//! Everything else goes to one sender thread, which (re)connects to each
//! peer on demand and retries once; while it holds messages for a peer,
//! later ones queue behind them, so order is kept. Messages for this
//! host's own endpoints take the sender thread too, so that no CM lock is
//! re-entered.

use crate::peer::msg::PeerMsg;
use crate::peer::tls::{LinkTls, Reader, Writer};
use crate::peer::wire as peer_wire;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A message for `host`, queued at the instant given.
pub type Outgoing = (Ipv4Addr, PeerMsg, Instant);

/// Where the link takes what it receives, and what it asks of masqd.
pub trait PeerSink: Send + Sync {
    /// A message from `from`, or from this host's own endpoints (through
    /// the sender thread, so that no CM lock is re-entered).
    fn deliver(&self, from: Ipv4Addr, msg: PeerMsg);
    /// `msg` could not be sent to `host`: the app sees a timeout.
    fn lost(&self, host: Ipv4Addr, msg: &PeerMsg);
    /// The hosts of the VPC map: links are accepted from these only.
    fn hosts(&self) -> BTreeSet<Ipv4Addr>;
    fn stopping(&self) -> bool;
    /// The link's sending side, handed over right after the bind.
    fn linked(&self, link: Arc<Link>);
    /// A message spent `took` in `stage`: `queued` from the CM's send to
    /// its write on the link (here: through the sender thread), `handled`
    /// in `deliver` on the reader thread.
    fn timed(&self, stage: &'static str, kind: &'static str, took: Duration);
    /// Every 100 ms, for the CM's timeouts.
    fn tick(&self);
    /// The link listens; `others` are the other hosts of the VPC map.
    fn listening(&self, others: Vec<Ipv4Addr>);
    /// Mutual TLS for connections made from now on; None: plaintext.
    fn tls(&self) -> Option<Arc<LinkTls>>;
}

/// The sending side of the link, shared by the threads that send and the
/// sender thread.
pub struct Link {
    own: Ipv4Addr,
    queue: mpsc::Sender<Outgoing>,
    peers: Mutex<BTreeMap<Ipv4Addr, Arc<Mutex<Peer>>>>,
}

/// The connection to one peer host.
#[derive(Default)]
struct Peer {
    stream: Option<Writer>,
    /// Messages for this peer on the sender thread's queue, not yet
    /// written: while there are any, a new one queues behind them.
    queued: usize,
}

/// What `Link::send` did with a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    /// Written to the peer's connection by the caller's thread.
    Written,
    /// Handed to the sender thread.
    Queued,
    /// Not sendable (it does not encode); logged.
    Dropped,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Link {
    /// A link whose messages the sender thread takes from `queue`.
    pub fn new(own: Ipv4Addr, queue: mpsc::Sender<Outgoing>) -> Link {
        Link {
            own,
            queue,
            peers: Mutex::new(BTreeMap::new()),
        }
    }

    fn peer(&self, host: Ipv4Addr) -> Arc<Mutex<Peer>> {
        locked(&self.peers).entry(host).or_default().clone()
    }

    /// Send `msg` (queued by the CM at `queued`) to `host`: written here if
    /// the peer's connection is up and nothing waits ahead of it, handed to
    /// the sender thread otherwise. Call it with no CM lock held: a write
    /// may wait for the peer (up to `CONNECT_TIMEOUT`).
    pub fn send(&self, host: Ipv4Addr, msg: PeerMsg, queued: Instant) -> Sent {
        if host != self.own {
            let peer = self.peer(host);
            let mut p = locked(&peer);
            if p.queued == 0 {
                if let Some(stream) = p.stream.as_mut() {
                    let bytes = match peer_wire::encode(&msg) {
                        Ok(b) => b,
                        Err(e) => {
                            warn!(%host, ?msg, "CM link: {e}; not sent");
                            return Sent::Dropped;
                        }
                    };
                    if stream.write_all(&bytes).is_ok() {
                        return Sent::Written;
                    }
                    // The sender thread connects afresh and retries.
                    p.stream = None;
                }
            }
            p.queued += 1;
        }
        let _ = self.queue.send((host, msg, queued));
        Sent::Queued
    }
}

/// Bind the CM port on `own` and start the listener and sender threads.
pub fn start<S: PeerSink + 'static>(sink: &Arc<S>, own: Ipv4Addr, port: u16) -> io::Result<()> {
    let addr = SocketAddr::new(IpAddr::V4(own), port);
    let listener = TcpListener::bind(addr)
        .map_err(|e| io::Error::new(e.kind(), format!("CM link: cannot listen on {addr}: {e}")))?;
    let (tx, rx) = mpsc::channel();
    let link = Arc::new(Link::new(own, tx));
    sink.linked(link.clone());
    {
        let sink = sink.clone();
        thread::Builder::new()
            .name("cm-send".into())
            .spawn(move || sender(sink, &link, port, rx))?;
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

fn sender<S: PeerSink>(sink: Arc<S>, link: &Link, port: u16, rx: mpsc::Receiver<Outgoing>) {
    for (host, msg, queued) in rx {
        if host == link.own {
            sink.timed("queued", msg.kind(), queued.elapsed());
            deliver(&*sink, host, msg);
            continue;
        }
        let peer = link.peer(host);
        let mut p = locked(&peer);
        p.queued = p.queued.saturating_sub(1);
        let sent = match peer_wire::encode(&msg) {
            Ok(bytes) => write_to(&mut p, host, port, sink.tls().as_deref(), &bytes),
            Err(e) => {
                warn!(%host, ?msg, "CM link: {e}; not sent");
                continue;
            }
        };
        drop(p);
        sink.timed("queued", msg.kind(), queued.elapsed());
        if !sent {
            // The app sees what a lost CM packet gives: a timeout.
            warn!(%host, "CM message lost");
            sink.lost(host, &msg);
        }
    }
}

/// Write `bytes` to `host`, connecting first if need be, with one retry on
/// a fresh connection: the old one may have died with the peer's restart.
fn write_to(p: &mut Peer, host: Ipv4Addr, port: u16, tls: Option<&LinkTls>, bytes: &[u8]) -> bool {
    for _ in 0..2 {
        if p.stream.is_none() {
            match connect(host, port, tls) {
                Ok(s) => p.stream = Some(s),
                Err(e) => {
                    warn!(%host, "CM link: cannot connect: {e}");
                    return false;
                }
            }
        }
        if let Some(s) = p.stream.as_mut() {
            if s.write_all(bytes).is_ok() {
                return true;
            }
            p.stream = None;
        }
    }
    false
}

fn connect(host: Ipv4Addr, port: u16, tls: Option<&LinkTls>) -> Result<Writer, String> {
    let to = SocketAddr::new(IpAddr::V4(host), port);
    let s = TcpStream::connect_timeout(&to, CONNECT_TIMEOUT).map_err(|e| format!("{to}: {e}"))?;
    let _ = s.set_nodelay(true);
    let _ = s.set_write_timeout(Some(CONNECT_TIMEOUT));
    match tls {
        Some(tls) => tls.connect(host, s).map_err(|e| format!("{to}: {e}")),
        None => Ok(Box::new(s)),
    }
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
fn deliver<S: PeerSink + ?Sized>(sink: &S, from: Ipv4Addr, msg: PeerMsg) {
    let (started, kind) = (Instant::now(), msg.kind());
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
    mut deliver: impl FnMut(PeerMsg),
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
    use std::io::Cursor;
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

    fn rtu(to_id: u32) -> PeerMsg {
        PeerMsg::Rtu { to_id, from_id: 9 }
    }

    fn bytes(m: &PeerMsg) -> Vec<u8> {
        peer_wire::encode(m).expect("encode")
    }

    /// The stream `good, bad, good`: what `read_link` delivers, returns
    /// and logs.
    fn run(bad: &[u8]) -> (Vec<PeerMsg>, Result<(), peer_wire::Error>, String) {
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
                    let mut b = bytes(&PeerMsg::UdQp {
                        vni: 1,
                        vip: PEER,
                        qpn: 1,
                        up: true,
                    });
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
        let all: Vec<PeerMsg> = (1..=50).map(rtu).collect();
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
        got: Mutex<Vec<(Ipv4Addr, PeerMsg)>>,
        lost: Mutex<Vec<(Ipv4Addr, PeerMsg)>>,
        link: Mutex<Option<Arc<Link>>>,
        listening: Mutex<Option<Vec<Ipv4Addr>>>,
        tls: Option<Arc<LinkTls>>,
    }

    impl PeerSink for FakeSink {
        fn deliver(&self, from: Ipv4Addr, msg: PeerMsg) {
            self.got.lock().expect("lock").push((from, msg));
        }
        fn lost(&self, host: Ipv4Addr, msg: &PeerMsg) {
            self.lost.lock().expect("lock").push((host, msg.clone()));
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
        let ud = PeerMsg::UdQp {
            vni: 1,
            vip: PEER,
            qpn: 5,
            up: true,
        };
        assert_eq!(link.send(other, ud.clone(), Instant::now()), Sent::Queued);
        wait_for("delivered", || !sink.got.lock().expect("lock").is_empty());
        assert_eq!(*sink.got.lock().expect("lock"), vec![(own, rtu(1))]);
        wait_for("lost", || !sink.lost.lock().expect("lock").is_empty());
        assert_eq!(*sink.lost.lock().expect("lock"), vec![(other, ud)]);
    }

    /// Two links on 127.0.0.1 and 127.0.0.2 (one port, as cm.port is), with
    /// the TLS given to each.
    fn pair(
        a_tls: Option<Arc<LinkTls>>,
        b_tls: Option<Arc<LinkTls>>,
    ) -> (Arc<FakeSink>, Arc<FakeSink>, Arc<Link>) {
        let (a, b) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
        let port = TcpListener::bind((b, 0))
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
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

    fn got(sink: &FakeSink) -> Vec<PeerMsg> {
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
        assert_eq!(link.send(B, rtu(2), Instant::now()), Sent::Written);
        assert_eq!(link.send(B, rtu(3), Instant::now()), Sent::Written);
        wait_for("all three", || got(&to).len() == 3);
        assert_eq!(got(&to), vec![rtu(1), rtu(2), rtu(3)]);
        assert!(from.lost.lock().expect("lock").is_empty());
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
