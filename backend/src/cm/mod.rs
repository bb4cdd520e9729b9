//! RDMA CM for tenants: masqd plays the part of the kernel's rdma_ucm.
//!
//! libmasq carries librdmacm's calls here (the CM_* requests); ids, ports
//! and listeners live per endpoint, so two tenants may listen on the same
//! vIP:port in different VNIs. The CM exchange itself (REQ, REP, REJ, RTU,
//! DREQ, and for RDMA_PS_UDP ids the SIDR query: SIDR REQ and REP) goes to
//! the peer's masqd over the underlay (`peer::link`), never through the
//! tenant's network. A connect the security groups deny is
//! dropped, so it looks as a firewall makes it look: nothing answers, and
//! the app gets UNREACHABLE (ETIMEDOUT) after `cm.timeoutMs`.
//!
//! The QP itself still moves through MODIFY_QP, where admission and
//! RConntrack see it as any verbs connection; INIT_QP_ATTR hands libmasq
//! the virtual addresses to put there, and `role_of` tells RConntrack
//! which side connected.
//!
//! The CM's methods are in `impl Cm` blocks by role: `ids` (ids, ports,
//! channels, timeouts), `requests` (the apps' CM requests), `attrs`
//! (events and QP attributes), `peer` (messages from peer masqds), `ud`
//! (UD ids and UD QP announcements) and `restore` (after a masqd restart);
//! `phase` holds an id's phases and the one function that moves them.

mod attrs;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fakes;
mod ids;
mod peer;
mod phase;
mod requests;
mod restore;
mod ud;
mod ud_peers;

use crate::endpoints::endpoint::Endpoint;
use crate::endpoints::usage::Slot;
use crate::error::{refuse, Result};
use crate::kernel::host::HostDevice;
use crate::peer::link::{Link, Outgoing, Sent};
use crate::pipeline::ports::Enforce;
use crate::transport::seqpacket::Conn;
use masq_proto::{self as proto, PeerBody, PeerParams};
use phase::{Event, Phase};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};
use tracing::debug;

/// What the CM needs of the daemon (`tenants::parts::Parts` is it).
/// The admission (the registry, the security groups, RConntrack's table
/// and the backstop) is the verbs pipelines' own `Enforce`.
pub trait CmHost: Enforce {
    /// The device `ep` is served on.
    fn host(&self, ep: &Endpoint) -> &HostDevice;
    /// The session's app has exited (its ports are free at once).
    fn app_gone(&self, session: u64) -> bool;
    /// The connection RConntrack tracks for QP `qpn` of endpoint `ep`, if
    /// the app behind `session` (any of its sessions) owns that QP: the
    /// remote vIP and QPN.
    fn tracked_qp(&self, session: u64, ep: &Endpoint, qpn: u32) -> Option<(Ipv4Addr, u32)>;
    /// Announce this host's UD QPs to `host` again (its masqd asked).
    fn reannounce_ud(&self, host: Ipv4Addr);
    /// Endpoint `ep`'s virtual GID index (its vIP's) and its vNIC's MTU,
    /// for the QP attributes and address vectors the CM hands out.
    fn vnic_route(&self, ep: &Endpoint) -> Result<(u8, u32)> {
        attrs::vnic_route(ep)
    }
}

/// A refused CM request: the errno the app sees and why, for the log.
fn fail<T>(errno: i32, why: impl Into<String>) -> Result<T> {
    Err(refuse(errno, why))
}

/// Ids one app may hold at once: a bound on what a tenant can make masqd keep.
const MAX_IDS_PER_SESSION: usize = 4096;
const MAX_CHANNELS_PER_SESSION: usize = 256;
const EPHEMERAL: std::ops::RangeInclusive<u16> = 32768..=60999;
/// The REJ reason a connect request past the listening endpoint's
/// `tenantLimits.cmIds` gets (IB_CM_REJ_NO_RESOURCES).
const CM_REJ_NO_RESOURCES: i32 = 3;

/// The kernel CM's defaults for RoCE: ~67 ms local ACK timeout, 12 (0.64 ms)
/// minimum RNR timer.
/// The RTS ACK timeout (4.096 us * 2^17, about 0.5 s): what the kernel's
/// CM gives a RoCE QP (packet life time 16, plus one). 14 (67 ms) made rxe
/// retransmit whenever a loaded guest answered late, and rxe 6.1 sometimes
/// fails a long run with status 9 while it sorts out the duplicates.
const ACK_TIMEOUT: u8 = 17;
const MIN_RNR_TIMER: u8 = 12;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PeerRef {
    host: Ipv4Addr,
    id: u32,
}

struct Id {
    session: u64,
    channel: u32,
    ep: Arc<Endpoint>,
    /// RDMA_PS_UDP: a UD id, whose "connection" is one SIDR exchange
    /// that tells the active side the passive side's QP. Its ports are a
    /// space of their own.
    udp: bool,
    /// 0.0.0.0 (wildcard bind) or the endpoint's vIP.
    src_ip: Ipv4Addr,
    /// 0 while unbound. Passive ids share their listener's port.
    port: u16,
    /// Whether `port` is held in the port table by this id.
    owns_port: bool,
    dst: Option<(Ipv4Addr, u16)>,
    phase: Phase,
    active: bool,
    listen_id: u32,
    local: PeerParams,
    peer: Option<PeerRef>,
    peer_host: Ipv4Addr,
    remote: PeerParams,
    deadline: Option<Instant>,
    /// Its place in its endpoint's `tenantLimits.cmIds`.
    _slot: Slot,
}

impl Id {
    /// Its own address and its peer's for the log, `arrow` between them
    /// ("->" where this side connected, "<-" where it answered).
    fn ends(&self, arrow: &str) -> String {
        let (dip, dport) = self.dst.unwrap_or((Ipv4Addr::UNSPECIFIED, 0));
        format!("{}:{} {arrow} {dip}:{dport}", self.src_ip, self.port)
    }

    fn addrs(&self) -> proto::CmAddrs {
        let (dip, dport) = self.dst.unwrap_or((Ipv4Addr::UNSPECIFIED, 0));
        proto::CmAddrs {
            src: proto::CmAddr {
                addr: self.src_ip.octets(),
                port: self.port,
            },
            dst: proto::CmAddr {
                addr: dip.octets(),
                port: dport,
            },
        }
    }

    fn connected_or_connecting(&self) -> bool {
        matches!(
            self.phase,
            Phase::ReqReceived | Phase::RepSent | Phase::RepReceived | Phase::Established
        )
    }
}

struct Channel {
    session: u64,
    sock: Conn,
    /// Its place in its endpoint's `tenantLimits.eventChannels`.
    _slot: Slot,
}

type PortKey = (String, bool, u16);

#[derive(Default)]
struct State {
    next_id: u32,
    next_channel: u32,
    channels: BTreeMap<u32, Channel>,
    ids: BTreeMap<u32, Id>,
    /// Each endpoint's ids (`index_id`), so that the lookup of a QP's id,
    /// made at every RTR, walks one endpoint's ids and not the host's:
    /// a tenant's thousands of ids slow its own RTRs only.
    ids_of: HashMap<String, BTreeSet<u32>>,
    /// (endpoint, UDP port space?, port) -> the id holding it.
    ports: BTreeMap<PortKey, u32>,
    /// Events delivered, counted per endpoint.
    metrics: crate::metrics::Metrics,
}

impl State {
    /// Id `id` moved from endpoint `from` to `to` (either `None`: it was
    /// made, or is gone). Every change of `ids` and of an id's endpoint
    /// comes through here.
    fn index_id(&mut self, id: u32, from: Option<&str>, to: Option<&str>) {
        if let Some(ep) = from {
            if let Some(set) = self.ids_of.get_mut(ep) {
                set.remove(&id);
                if set.is_empty() {
                    self.ids_of.remove(ep);
                }
            }
        }
        if let Some(ep) = to {
            self.ids_of.entry(ep.to_string()).or_default().insert(id);
        }
    }

    /// Remove id `id`, from the index too.
    fn remove_id(&mut self, id: u32) -> Option<Id> {
        let i = self.ids.remove(&id)?;
        self.index_id(id, Some(&i.ep.cfg.name), None);
        Some(i)
    }
}

/// Which side of a CM connection a QP is, for RConntrack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Role {
    pub active: bool,
    pub local_port: u16,
    pub remote_port: u16,
}

pub struct Cm {
    state: Mutex<State>,
    link: Mutex<Option<Arc<Link>>>,
    /// Messages to peer masqds, sent once the state lock is released
    /// (`send`, `flush`); `flushing` keeps them in order across threads.
    outbox: Mutex<Vec<Outgoing>>,
    flushing: Mutex<()>,
    metrics: crate::metrics::Metrics,
    pub timeout: Duration,
    /// Other hosts' UD QPs as their masqds announced them. Claims: checked
    /// against the VPC map when read; bounded per announcing host.
    ud_peers: Mutex<ud_peers::UdPeers>,
    /// This host's UD QPs announced as up, until they are gone:
    /// (peer host, QPN) -> whether the peer has it in force; and the
    /// signal that an ack came in.
    ud_up: Mutex<std::collections::HashMap<(Ipv4Addr, u32), bool>>,
    ud_acked: std::sync::Condvar,
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 4 {
        // Never fails for 4 bytes once the pool is up; a clock is enough
        // for a starting PSN if it somehow does.
        return std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos());
    }
    u32::from_ne_bytes(b)
}

impl Cm {
    pub fn new(timeout: Duration, metrics: crate::metrics::Metrics) -> Cm {
        Cm {
            // Random starts: after a restart, apps restore their ids and
            // channels under their old numbers, which new ones should not take.
            state: Mutex::new(State {
                next_id: random_u32().max(1),
                next_channel: random_u32().max(1),
                metrics: metrics.clone(),
                ..Default::default()
            }),
            link: Mutex::new(None),
            outbox: Mutex::new(Vec::new()),
            flushing: Mutex::new(()),
            metrics,
            timeout,
            ud_peers: Mutex::new(ud_peers::UdPeers::new()),
            ud_up: Mutex::new(std::collections::HashMap::new()),
            ud_acked: std::sync::Condvar::new(),
        }
    }

    /// Number ids and channels from `first` on, so that a test or a fuzz
    /// input can name them.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn number_from(&self, first: u32) {
        let mut st = self.lock();
        st.next_id = first;
        st.next_channel = first;
    }

    fn lock(&self) -> Locked<'_> {
        Locked {
            cm: self,
            st: Some(self.state.lock().unwrap_or_else(|p| p.into_inner())),
        }
    }

    /// Where messages to peer masqds go (see `peer::link`).
    pub fn set_link(&self, link: Arc<Link>) {
        *self.link.lock().unwrap_or_else(|p| p.into_inner()) = Some(link);
    }

    /// Send `msg` to `host`'s masqd once the state lock is free: a write to
    /// the link may wait for the peer, and nothing should wait on it
    /// holding the CM. If the lock is held (by this thread or another), its
    /// holder sends the message when it lets go (`Locked::drop`); the
    /// message is in the outbox before `try_lock` fails, so that holder's
    /// `flush` sees it.
    fn send(&self, host: Ipv4Addr, msg: PeerBody) {
        debug!(%host, ?msg, "CM message out");
        let mut outbox = self.outbox.lock().unwrap_or_else(|p| p.into_inner());
        outbox.push((host, msg, Instant::now()));
        drop(outbox);
        let free = match self.state.try_lock() {
            Ok(_) | Err(TryLockError::Poisoned(_)) => true,
            Err(TryLockError::WouldBlock) => false,
        };
        if free {
            self.flush();
        }
    }

    /// Send what the outbox holds, in order.
    fn flush(&self) {
        let _one = self.flushing.lock().unwrap_or_else(|p| p.into_inner());
        let msgs = std::mem::take(&mut *self.outbox.lock().unwrap_or_else(|p| p.into_inner()));
        if msgs.is_empty() {
            return;
        }
        let Some(link) = self.link.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
            return;
        };
        for (host, msg, queued) in msgs {
            let kind = msg.name();
            if link.send(host, msg, queued) == Sent::Written {
                self.metrics.peer_message("queued", kind, queued.elapsed());
            }
        }
    }

    /// Id `id`, if `session` holds it.
    fn own(st: &mut State, session: u64, id: u32) -> Result<&mut Id> {
        match st.ids.get_mut(&id) {
            Some(i) if i.session == session => Ok(i),
            _ => fail(libc::ENOENT, format!("no CM id {id} in this session")),
        }
    }

    /// Id `id`, if `session` holds it and `ev` may happen to it now (the
    /// opening check of the app's connect, accept, reject and establish):
    /// EINVAL saying `early` if not. The caller checks the rest, then
    /// steps the id (`step_checked`: nothing between moves its phase).
    fn own_at<'a>(
        st: &'a mut State,
        session: u64,
        id: u32,
        ev: Event,
        early: &str,
    ) -> Result<&'a mut Id> {
        let i = Self::own(st, session, id)?;
        if !i.may(ev) {
            return fail(libc::EINVAL, early);
        }
        Ok(i)
    }

    /// Channel `channel`, if `session` holds it.
    fn own_channel(st: &State, session: u64, channel: u32) -> Result<&Channel> {
        match st.channels.get(&channel) {
            Some(ch) if ch.session == session => Ok(ch),
            _ => fail(libc::ENOENT, format!("no channel {channel}")),
        }
    }

    /// Room for one more id of `session` (ENOMEM past MAX_IDS_PER_SESSION).
    fn id_room(st: &State, session: u64) -> Result<()> {
        if st.ids.values().filter(|i| i.session == session).count() >= MAX_IDS_PER_SESSION {
            return fail(libc::ENOMEM, "too many CM ids");
        }
        Ok(())
    }
}

/// The CM's state, locked; on release, the messages sent meanwhile go out.
struct Locked<'a> {
    cm: &'a Cm,
    st: Option<MutexGuard<'a, State>>,
}

impl Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        self.st.as_deref().expect("held until drop")
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.st.as_deref_mut().expect("held until drop")
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.st = None;
        self.cm.flush();
    }
}

#[cfg(test)]
#[path = "close_tests.rs"]
mod close_tests;

#[cfg(test)]
#[path = "connect_tests.rs"]
mod connect_tests;

#[cfg(test)]
#[path = "hostile_tests.rs"]
mod hostile_tests;

#[cfg(test)]
#[path = "limits_tests.rs"]
mod limits_tests;

#[cfg(test)]
#[path = "peer_tests.rs"]
mod peer_tests;

#[cfg(test)]
#[path = "phase_tests.rs"]
mod phase_tests;

#[cfg(test)]
#[path = "restore_tests.rs"]
mod restore_tests;

#[cfg(test)]
#[path = "ud_tests.rs"]
mod ud_tests;
