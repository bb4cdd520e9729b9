//! The sending side of the CM link (`link.rs` listens and reads).
//!
//! Each peer host has a queue of its own, served by a thread of its own
//! (started with the first message for it), so that a peer that is slow
//! or gone delays only its own messages: its thread waits out a connect
//! (up to `CONNECT_TIMEOUT`) or a write while the other peers' threads and
//! the CM's callers go on. The queue is bounded (`QUEUE_BOUND`): a message
//! for a peer whose queue is full is refused, counted
//! (`masq_peer_messages_dropped_total{peer}`) and reported lost, as one
//! the peer never took (the app sees a timeout). After a failed connect
//! the peer's thread tries again only after a backoff (doubling from
//! `BACKOFF_MIN` to `BACKOFF_MAX`); what comes for the peer meanwhile is
//! lost at once rather than each after a connect timeout.
//!
//! A message for a peer whose connection is up and idle, with nothing
//! queued ahead of it, is written by the caller's thread, with no thread
//! switch on the way (under emulation a hand-off cost 0.5-0.7 ms per
//! message), but only when the socket takes it without waiting (poll);
//! otherwise it queues. Order per peer is kept either way.
//!
//! Messages for this host's own endpoints never meet a peer's queue: one
//! local thread delivers them (so that no CM lock is re-entered), and
//! reports the messages a full queue refused, for the same reason.

use crate::peer::tls::Writer;
use crate::peer::wire as peer_wire;
use masq_proto::PeerBody;
use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::RawFd;
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tracing::{debug, warn};

/// How long a connect (and a write) to a peer may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Messages held for one peer, not yet written. CM exchanges are a few
/// messages per connection and the CM's own retries are seconds apart,
/// so a full queue means a peer that took nothing for a while.
pub const QUEUE_BOUND: usize = 256;
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// A message for `host`, queued at the instant given.
pub type Outgoing = (Ipv4Addr, PeerBody, Instant);

/// What the local thread does (`link::start` runs it).
pub enum Local {
    /// Deliver a message of this host's to itself.
    Deliver(PeerBody, Instant),
    /// A peer's full queue refused this message: count it, report it lost.
    Dropped(Ipv4Addr, PeerBody),
}

/// Opens a connection to a peer host (TCP and TLS in masqd; a fake in
/// tests).
pub type Connect = dyn Fn(Ipv4Addr) -> crate::error::Result<Conn> + Send + Sync;

/// Starts the thread that serves a new peer's queue.
pub type Spawn = Box<dyn Fn(Arc<Peer>) + Send + Sync>;

/// A connection's writing side and, where it is a socket, its descriptor:
/// a caller's thread writes only when the socket takes data now.
pub struct Conn {
    w: Writer,
    /// The socket inside `w`, valid as long as `w` is.
    fd: Option<RawFd>,
}

impl Conn {
    pub fn new(w: Writer, fd: Option<RawFd>) -> Conn {
        Conn { w, fd }
    }

    /// Whether a small write goes through without waiting: the socket has
    /// room (POLLOUT) and no error pending. Without a descriptor, yes.
    fn ready(&self) -> bool {
        let Some(fd) = self.fd else {
            return true;
        };
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one pollfd, on a descriptor `w` keeps open; no wait.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 1 && p.revents & (libc::POLLERR | libc::POLLHUP) == 0
    }
}

/// The sending side of the link, shared by the threads that send.
pub struct Link {
    own: Ipv4Addr,
    local: mpsc::Sender<Local>,
    peers: Mutex<BTreeMap<Ipv4Addr, Arc<Peer>>>,
    /// None in tests that only look at what is queued.
    spawn: Option<Spawn>,
}

/// One peer host: its queue and its connection.
pub struct Peer {
    pub host: Ipv4Addr,
    state: Mutex<PeerState>,
    wake: Condvar,
}

#[derive(Default)]
struct PeerState {
    /// The connection, while nobody writes to it: the peer's thread takes
    /// it out to connect and write, so this lock is never held across a
    /// wait for the peer.
    conn: Option<Conn>,
    queue: VecDeque<(PeerBody, Instant)>,
    /// The peer's thread holds a message: new ones queue behind it.
    busy: bool,
    /// No connect before this, after a failed one.
    retry_at: Option<Instant>,
    backoff: Duration,
    dropped: u64,
}

/// What `Link::send` did with a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    /// Written to the peer's connection by the caller's thread.
    Written,
    /// Queued for the peer's thread (or the local thread).
    Queued,
    /// Not sent: it does not encode, or the peer's queue is full; logged.
    Dropped,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Link {
    /// A link whose own-host messages go to `local`, and whose peers are
    /// each served by a thread `spawn` starts.
    pub fn new(own: Ipv4Addr, local: mpsc::Sender<Local>, spawn: Option<Spawn>) -> Link {
        Link {
            own,
            local,
            peers: Mutex::new(BTreeMap::new()),
            spawn,
        }
    }

    fn peer(&self, host: Ipv4Addr) -> Arc<Peer> {
        let mut peers = locked(&self.peers);
        if let Some(p) = peers.get(&host) {
            return p.clone();
        }
        let p = Arc::new(Peer {
            host,
            state: Mutex::new(PeerState {
                backoff: BACKOFF_MIN,
                ..Default::default()
            }),
            wake: Condvar::new(),
        });
        peers.insert(host, p.clone());
        if let Some(spawn) = &self.spawn {
            spawn(p.clone());
        }
        p
    }

    /// Send `msg` (queued by the CM at `queued`) to `host`: written here if
    /// the peer's connection is up, idle and has room, queued for the
    /// peer's thread otherwise (or refused if its queue is full). Never
    /// waits for a peer; call it with no CM lock held all the same.
    pub fn send(&self, host: Ipv4Addr, msg: PeerBody, queued: Instant) -> Sent {
        if host == self.own {
            let _ = self.local.send(Local::Deliver(msg, queued));
            return Sent::Queued;
        }
        let peer = self.peer(host);
        let mut p = locked(&peer.state);
        if !p.busy && p.queue.is_empty() {
            if let Some(conn) = p.conn.as_mut().filter(|c| c.ready()) {
                let bytes = match peer_wire::encode(&msg) {
                    Ok(b) => b,
                    Err(e) => {
                        warn!(%host, ?msg, "CM link: {e}; not sent");
                        return Sent::Dropped;
                    }
                };
                if conn.w.write_all(&bytes).is_ok() {
                    return Sent::Written;
                }
                // The peer's thread connects afresh and retries.
                p.conn = None;
            }
        }
        if p.queue.len() >= QUEUE_BOUND {
            p.dropped += 1;
            let dropped = p.dropped;
            drop(p);
            // Every message is counted; the log says so at 1, 2, 4, ...
            if dropped.is_power_of_two() {
                warn!(%host, dropped, "CM link: {QUEUE_BOUND} messages wait for this peer; message dropped");
            }
            let _ = self.local.send(Local::Dropped(host, msg));
            return Sent::Dropped;
        }
        p.queue.push_back((msg, queued));
        drop(p);
        peer.wake.notify_one();
        Sent::Queued
    }

    /// Whether `host`'s connection is up with nothing queued or in hand.
    #[cfg(test)]
    pub fn idle(&self, host: Ipv4Addr) -> bool {
        let peer = self.peer(host);
        let p = locked(&peer.state);
        p.conn.is_some() && !p.busy && p.queue.is_empty()
    }

    /// What waits in each peer's queue, in host order (tests without
    /// peer threads).
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn take_queued(&self) -> Vec<(Ipv4Addr, PeerBody)> {
        let peers = locked(&self.peers);
        let mut out = Vec::new();
        for (host, p) in peers.iter() {
            let mut st = locked(&p.state);
            out.extend(st.queue.drain(..).map(|(m, _)| (*host, m)));
        }
        out
    }
}

/// What a peer's thread reports to.
pub trait Outlet {
    fn lost(&self, host: Ipv4Addr, msg: &PeerBody);
    fn timed(&self, kind: &'static str, took: Duration);
    fn stopping(&self) -> bool;
}

/// Serve `peer`'s queue, in order, until masqd stops.
pub fn serve_peer(peer: &Peer, connect: &Connect, out: &dyn Outlet) {
    let host = peer.host;
    loop {
        let (msg, queued, mut conn, retry_at) = {
            let mut p = locked(&peer.state);
            let (msg, queued) = loop {
                if let Some(m) = p.queue.pop_front() {
                    break m;
                }
                if out.stopping() {
                    return;
                }
                p = peer
                    .wake
                    .wait_timeout(p, Duration::from_secs(1))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            };
            p.busy = true;
            (msg, queued, p.conn.take(), p.retry_at)
        };
        let sent = match peer_wire::encode(&msg) {
            Ok(bytes) => write_to(&mut conn, host, retry_at, connect, &bytes),
            Err(e) => {
                warn!(%host, ?msg, "CM link: {e}; not sent");
                Written::Yes
            }
        };
        {
            let mut p = locked(&peer.state);
            p.conn = conn;
            p.busy = false;
            match sent {
                Written::Yes => {
                    p.retry_at = None;
                    p.backoff = BACKOFF_MIN;
                }
                Written::NoConnect => {
                    p.retry_at = Some(Instant::now() + p.backoff);
                    p.backoff = (p.backoff * 2).min(BACKOFF_MAX);
                }
                Written::No | Written::BackingOff => {}
            }
        }
        out.timed(msg.name(), queued.elapsed());
        if sent != Written::Yes {
            // The app sees what a lost CM packet gives: a timeout.
            if sent == Written::BackingOff {
                debug!(%host, "CM message lost: the peer was unreachable a moment ago");
            } else {
                warn!(%host, "CM message lost");
            }
            out.lost(host, &msg);
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Written {
    Yes,
    /// The connection failed, twice.
    No,
    /// No connection could be made.
    NoConnect,
    /// Not tried: the last connect failed less than a backoff ago.
    BackingOff,
}

/// Write `bytes` to `host`, connecting first if need be (unless a connect
/// failed until `retry_at`), with one retry on a fresh connection: the
/// old one may have died with the peer's restart.
fn write_to(
    conn: &mut Option<Conn>,
    host: Ipv4Addr,
    retry_at: Option<Instant>,
    connect: &Connect,
    bytes: &[u8],
) -> Written {
    for _ in 0..2 {
        if conn.is_none() {
            if retry_at.is_some_and(|t| Instant::now() < t) {
                return Written::BackingOff;
            }
            match connect(host) {
                Ok(c) => *conn = Some(c),
                Err(e) => {
                    warn!(%host, "CM link: cannot connect: {e}");
                    return Written::NoConnect;
                }
            }
        }
        if let Some(c) = conn.as_mut() {
            if c.w.write_all(bytes).is_ok() {
                return Written::Yes;
            }
            *conn = None;
        }
    }
    Written::No
}
