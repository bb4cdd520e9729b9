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

mod attrs;
mod ids;
mod peer;
mod requests;
mod ud;

use crate::cluster::endpoint::Endpoint;
use crate::cluster::registry::Registry;
use crate::enforce::admission::Admission;
use crate::error::{refuse, Refusal};
use crate::kernel::host::HostDevice;
use crate::peer::msg::{Params, PeerMsg};
use crate::transport::seqpacket::Conn;
use masq_proto as proto;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tracing::{debug, info};

/// What the CM needs of the daemon (`state::Shared` is it).
pub trait CmHost {
    fn registry(&self) -> &Registry;
    fn admission(&self) -> &Admission;
    fn host(&self) -> &HostDevice;
    /// The session's app has exited (its ports are free at once).
    fn app_gone(&self, session: u64) -> bool;
    /// The connection RConntrack tracks for QP `qpn` of endpoint `ep`, if
    /// the app behind `session` (any of its sessions) owns that QP: the
    /// remote vIP and QPN.
    fn tracked_qp(&self, session: u64, ep: &Endpoint, qpn: u32) -> Option<(Ipv4Addr, u32)>;
    /// Announce this host's UD QPs to `host` again (its masqd asked).
    fn reannounce_ud(&self, host: Ipv4Addr);
}

/// A refused CM request: the errno the app sees and why, for the log.
fn fail<T>(errno: i32, why: impl Into<String>) -> Result<T, Refusal> {
    Err(refuse(errno, why))
}

/// Ids one app may hold at once: a bound on what a tenant can make masqd keep.
const MAX_IDS_PER_SESSION: usize = 4096;
const MAX_CHANNELS_PER_SESSION: usize = 256;
const EPHEMERAL: std::ops::RangeInclusive<u16> = 32768..=60999;

/// The kernel CM's defaults for RoCE: ~67 ms local ACK timeout, 12 (0.64 ms)
/// minimum RNR timer.
/// The RTS ACK timeout (4.096 us * 2^17, about 0.5 s): what the kernel's
/// CM gives a RoCE QP (packet life time 16, plus one). 14 (67 ms) made rxe
/// retransmit whenever a loaded guest answered late, and rxe 6.1 sometimes
/// fails a long run with status 9 while it sorts out the duplicates.
const ACK_TIMEOUT: u8 = 17;
const MIN_RNR_TIMER: u8 = 12;

/// Where an id is in its life, as the kernel's CM would have it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    AddrResolved,
    RouteResolved,
    Listening,
    /// Active: REQ sent (or dropped by policy), waiting for REP.
    Connecting,
    /// Passive: CONNECT_REQUEST delivered, waiting for accept or reject.
    ReqReceived,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Active: REP received, waiting for the app's QP to reach RTS.
    RepReceived,
    Established,
    /// The peer disconnected (DISCONNECTED delivered); the app's own
    /// rdma_disconnect then succeeds, as the kernel's answers a DREQ.
    PeerClosed,
    Closed,
}

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
    local: Params,
    peer: Option<PeerRef>,
    peer_host: Ipv4Addr,
    remote: Params,
    deadline: Option<Instant>,
}

impl Id {
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
}

type PortKey = (String, bool, u16);

#[derive(Default)]
struct State {
    next_id: u32,
    next_channel: u32,
    channels: BTreeMap<u32, Channel>,
    ids: BTreeMap<u32, Id>,
    /// (endpoint, UDP port space?, port) -> the id holding it.
    ports: BTreeMap<PortKey, u32>,
    /// Events delivered, counted per endpoint.
    metrics: crate::metrics::Metrics,
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
    out: Mutex<Option<mpsc::Sender<(Ipv4Addr, PeerMsg)>>>,
    pub timeout: Duration,
    /// Other hosts' UD QPs as their masqds announced them:
    /// (host, QPN) -> (VNI, vIP). Claims: checked against the VPC map.
    ud_peers: Mutex<std::collections::HashMap<(Ipv4Addr, u32), (u32, Ipv4Addr)>>,
    /// This host's UD QP announcements not yet in force at the peer:
    /// (peer host, QPN), and the signal that one came in.
    ud_unacked: Mutex<std::collections::HashSet<(Ipv4Addr, u32)>>,
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
                metrics,
                ..Default::default()
            }),
            out: Mutex::new(None),
            timeout,
            ud_peers: Mutex::new(std::collections::HashMap::new()),
            ud_unacked: Mutex::new(std::collections::HashSet::new()),
            ud_acked: std::sync::Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where messages to peer masqds go (see `peer::link`).
    pub fn set_link(&self, tx: mpsc::Sender<(Ipv4Addr, PeerMsg)>) {
        *self.out.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    }

    fn send(&self, host: Ipv4Addr, msg: PeerMsg) {
        debug!(%host, ?msg, "CM message out");
        if let Some(tx) = self.out.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let _ = tx.send((host, msg));
        }
    }

    fn own(st: &mut State, session: u64, id: u32) -> Result<&mut Id, Refusal> {
        match st.ids.get_mut(&id) {
            Some(i) if i.session == session => Ok(i),
            _ => fail(libc::ENOENT, format!("no CM id {id} in this session")),
        }
    }

    /// CM_RESTORE_ID: after a masqd restart, an app's id comes back under
    /// its old number as far as masqd can check it: a bound or listening
    /// id takes its port again if it is free; a connected one must be the
    /// connection RConntrack tracks again for the app's own QP (`tracked`,
    /// restored by RESYNC_QP, which libmasq sends first), towards the
    /// address and QP it claims.
    fn restore_id(
        &self,
        shared: &dyn CmHost,
        st: &mut State,
        session: u64,
        ep: &Arc<Endpoint>,
        r: &proto::CmRestoreIdReq,
        tracked: Option<(Ipv4Addr, u32)>,
    ) -> Result<(), Refusal> {
        if r.id == 0 || st.ids.contains_key(&r.id) {
            return fail(libc::EEXIST, format!("CM id {} is in use", r.id));
        }
        match st.channels.get(&r.channel) {
            Some(ch) if ch.session == session => {}
            _ => return fail(libc::ENOENT, format!("no channel {}", r.channel)),
        }
        if st.ids.values().filter(|i| i.session == session).count() >= MAX_IDS_PER_SESSION {
            return fail(libc::ENOMEM, "too many CM ids");
        }
        let src = (Ipv4Addr::from(r.addrs.src.addr), r.addrs.src.port);
        let dst = (Ipv4Addr::from(r.addrs.dst.addr), r.addrs.dst.port);
        if r.state == proto::CM_RESTORE_LISTENING && src.1 == 0 {
            return fail(libc::EINVAL, "a listening id has a port");
        }
        let udp = r.port_space == proto::CM_PS_UDP;
        if r.state != proto::CM_RESTORE_CONNECTED {
            let pending = r.state == proto::CM_RESTORE_PENDING;
            Self::insert_id(st, r.id, session, r.channel, ep.clone());
            if let Some(i) = st.ids.get_mut(&r.id) {
                i.udp = udp;
            }
            // A passive id's port is its listener's.
            let own_port = src.1 != 0 && !(pending && r.active == 0);
            if own_port {
                if let Err(e) = self.bind(shared, st, r.id, src.0, src.1) {
                    st.ids.remove(&r.id);
                    return Err(e);
                }
            }
            let phase = match r.state {
                proto::CM_RESTORE_LISTENING => Phase::Listening,
                proto::CM_RESTORE_PENDING => Phase::Closed,
                _ => Phase::Idle,
            };
            if let Some(i) = st.ids.get_mut(&r.id) {
                i.phase = phase;
            }
            info!(id = r.id, "CM id restored: {}:{} ({phase:?})", src.0, src.1);
            if pending {
                // Its handshake died with the masqd that carried it.
                Self::emit(
                    st,
                    r.id,
                    proto::CM_EVENT_CONNECT_ERROR,
                    -libc::ECONNRESET,
                    Default::default(),
                );
            }
            return Ok(());
        }
        if src.1 == 0 {
            return fail(libc::EINVAL, "a connected id has a port");
        }
        if udp {
            // A UD id keeps no connection: the frontend restores it as bound.
            return fail(libc::EINVAL, "a UD id is never restored as connected");
        }
        if src.0 != ep.cfg.vip && src.0 != Ipv4Addr::UNSPECIFIED {
            return fail(
                libc::EADDRNOTAVAIL,
                format!("{} is not this endpoint's address ({})", src.0, ep.cfg.vip),
            );
        }
        let Some(peer_host) = shared
            .registry()
            .vpc()
            .lookup(ep.cfg.vni, dst.0)
            .map(|p| p.host)
        else {
            return fail(
                libc::EHOSTUNREACH,
                format!("{} is not in VNI {}'s map", dst.0, ep.cfg.vni),
            );
        };
        match tracked {
            // Not (yet) re-registered by the app's verbs session.
            None => {
                return fail(
                    libc::EAGAIN,
                    format!("QP {:#x} is not tracked for this app", r.qp_num),
                )
            }
            Some(t) if t != (dst.0, r.remote_qpn) => {
                return fail(
                    libc::EPERM,
                    format!(
                        "QP {:#x} is connected to {} QP {:#x}, not {} QP {:#x}",
                        r.qp_num, t.0, t.1, dst.0, r.remote_qpn
                    ),
                )
            }
            Some(_) => {}
        }
        let active = r.active == 1;
        if active {
            // The active side holds its own port; a passive one shares its listener's.
            let key = (ep.cfg.name.clone(), false, src.1);
            if st.ports.contains_key(&key) {
                return fail(libc::EADDRINUSE, format!("port {} is in use", src.1));
            }
            st.ports.insert(key, r.id);
        }
        Self::insert_id(st, r.id, session, r.channel, ep.clone());
        if let Some(i) = st.ids.get_mut(&r.id) {
            i.src_ip = ep.cfg.vip;
            i.port = src.1;
            i.owns_port = active;
            i.dst = Some(dst);
            i.phase = Phase::Established;
            i.active = active;
            i.local.qpn = r.qp_num;
            i.remote.qpn = r.remote_qpn;
            // The peer's id number is not known here any more (see Dreq).
            i.peer = Some(PeerRef {
                host: peer_host,
                id: 0,
            });
            i.peer_host = peer_host;
        }
        info!(
            id = r.id,
            qpn = r.qp_num,
            "CM connection restored: {}:{} -> {}:{} ({})",
            src.0,
            src.1,
            dst.0,
            dst.1,
            if active { "active" } else { "passive" }
        );
        Ok(())
    }
}
