//! What the verbs pipelines (`qp.rs`, `ah.rs`) and the CM ask of the rest
//! of masqd, and the limits they share. Both are written against these
//! traits, so they use no daemon state and the pipelines are tested
//! without RDMA.

use crate::admit::{Ask, Denied, Pods};
use crate::endpoints::endpoint::Endpoint;
use crate::endpoints::registry::Registry;
use crate::error::Result;
use crate::kernel::ownership::Verdict;
use crate::kernel::uverbs;
use masq_proto as proto;
use rconntrack::{CmSide, Entry, LocalKey, QpKey, State, TableFull, Upsert};
use std::net::Ipv4Addr;
use std::sync::{Arc, RwLockReadGuard};
use std::time::Duration;

/// How long an admission waits for the backstop to let its packets through.
pub(crate) const BACKSTOP_WAIT: Duration = Duration::from_secs(5);

/// The RConntrack entries (connections and address handles) endpoint `ep`
/// may hold: its `maxConnections`, or `tenantLimits.connections` (`limit`)
/// if that is lower or it has none.
pub(crate) fn connection_quota(ep: &Endpoint, limit: u32) -> u32 {
    ep.cfg.max_connections.map_or(limit, |m| m.min(limit))
}

/// The backstop as the pipelines drive it (`enforce::backstop`): the
/// QPs that may receive, and the wait until its nftables sets say so. A
/// local QP is named by this host's underlay address on its rail
/// (`Rails::underlay`) and its QPN: each device numbers its QPs alone.
/// When a removal's backstop deletions must be in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// In the next transaction: a connection the policy or an operator
    /// ended, an RTR the kernel refused, anything not `Gone`.
    Now,
    /// Within `BATCHED_DELETIONS_WAIT`, in one transaction with the other
    /// deletions of that moment: the QP is gone (destroyed, or moved to
    /// ERROR or RESET by its app), so its elements pass nothing it sends
    /// or receives. A new QP of the same QPN that masqd moves to RTR runs
    /// the queued deletions of the elements it adds before its own, in
    /// queue order, so it never inherits them.
    Gone,
}

/// How long the deletions of gone QPs wait for others (`Removal::Gone`):
/// a destroy each 300 us then costs one transaction per hundreds.
pub const BATCHED_DELETIONS_WAIT: Duration = Duration::from_millis(100);

pub trait Guard {
    fn qp_seen(&self, local: Ipv4Addr, qpn: u32);
    fn qp_gone(&self, local: Ipv4Addr, qpn: u32, when: Removal);
    /// Whether the sets were applied within `timeout`.
    fn wait_applied(&self, timeout: Duration) -> bool;
    /// This host's UD QP `qpn` of an endpoint in `vni` can receive (`up`),
    /// from UD QPs of its VNI only, or is gone.
    fn ud_local(&self, local: Ipv4Addr, vni: u32, qpn: u32, up: bool);
    /// Let in (or no longer) the datagrams of UD QP `qpn` that another
    /// host's endpoint in `vni` holds (the CM's UD announcements).
    fn ud_remote(&self, host: Ipv4Addr, qpn: u32, vni: u32, up: bool);
    /// This thread is about to queue updates and wait for them: until
    /// `release`, no other thread is woken to run them (see `Held`).
    fn hold(&self);
    fn release(&self);
    /// Whether the kernel refused an element this thread put in since the
    /// last call (an eBPF map full); the call clears it. An RTR asks
    /// before and after it puts its elements in: one not in force leaves
    /// its QP open to any host, or its connection dead.
    fn take_refused(&self) -> bool;
}

/// A `Guard::hold` for as long as it lives. Taken before the updates a
/// request will wait for, so that its `wait_applied` runs them on the
/// request's own thread, with whatever else is queued: no hand-off to the
/// backstop's updater thread and back.
pub struct Held<'a>(&'a dyn Guard);

impl<'a> Held<'a> {
    pub fn new(g: &'a dyn Guard) -> Held<'a> {
        g.hold();
        Held(g)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.release()
    }
}

/// The security groups' decision (`enforce::admission`).
pub trait Decide {
    /// The rule that allows `ask` (`local` -> `remote` in `tenant`'s VNI),
    /// or why not; `pods` says which Kubernetes pods the ends are.
    fn decide(&self, ask: &Ask, pods: &dyn Pods) -> Result<Arc<str>, Denied>;
    /// The traffic class to program for `vip`'s app, which asked for `requested`.
    fn traffic_class(&self, tenant: &str, vni: u32, vip: Ipv4Addr, requested: u8) -> u8;
    /// Held from decide to tracking: a rule change waits for it.
    fn admitting(&self) -> RwLockReadGuard<'_, ()>;
}

/// RConntrack's table (`enforce::admission`). Each method takes the table
/// once, as one `table()` guard did, so each change reaches the backstop
/// as it did.
pub trait Conntrack {
    /// How many entries of (vni, vip) there are besides `except`'s.
    fn held(&self, vni: u32, vip: Ipv4Addr, except: QpKey) -> usize;
    fn get(&self, key: QpKey) -> Option<Entry>;
    fn upsert(&self, e: Entry) -> Result<Upsert, TableFull>;
    /// `upsert`, if the entry is there already or its endpoint (its vni
    /// and local vIP) holds fewer than `max`: else `Err(Some(held))`;
    /// `Err(None)` if the table is full. Counted and inserted under one
    /// lock, so two sessions cannot both take the last place.
    fn upsert_within(&self, e: Entry, max: usize) -> Result<Upsert, Option<usize>>;
    fn set_state(&self, key: QpKey, state: State) -> bool;
    fn remove(&self, key: QpKey) -> Option<Entry>;
    /// `remove`, of a QP that is gone (`Removal::Gone`): its backstop
    /// deletions may wait for others.
    fn forget(&self, key: QpKey) -> Option<Entry>;
    /// Whether a QP with this local key is tracked.
    fn tracks_local(&self, lk: LocalKey) -> bool;
    /// Mark the tracked QP with this local key as connected by the CM, on
    /// `side`; nothing if it is not tracked.
    fn set_cm(&self, lk: LocalKey, side: CmSide);
}

/// The audit's vouchers (`enforce::audit`): the QPNs masqd answers for.
pub trait Vouchers {
    /// QPN `qpn` of rail `rail`'s device is session `session`'s (of
    /// process `pid`), admitted.
    fn vouch(&self, rail: usize, qpn: u32, session: u64, pid: i32);
    fn forget(&self, rail: usize, qpn: u32, session: u64);
}

/// The verbs commands on one app's uverbs file, and the kernel's word on
/// who owns a QPN.
pub trait QpKernel {
    fn modify(&self, cmd: &uverbs::ModifyQp) -> Result<()>;
    fn query(&self, qp_handle: u32, attr_mask: u32) -> Result<uverbs::QueryQpResp>;
    /// Whether `qpn` is the app's QP of type `qp_type` (`ownership.rs`).
    fn owner(&self, qpn: u32, qp_type: u32) -> Result<Verdict>;
}

/// The admission as the pipelines and the CM share it: the endpoints and
/// the VPC map (whose limits and pods a decision reads), the security
/// groups' decision, RConntrack's table and the backstop. `ah.rs`'s
/// tracking uses these four alone; `cm::CmHost` asks for the same four.
/// Implemented by `tenants::parts::Parts` (the registry, `Admission`, its
/// backstop) and by `fakes.rs`'s `FakeHost`.
pub trait Enforce {
    fn registry(&self) -> &Registry;
    fn decide(&self) -> &dyn Decide;
    fn conntrack(&self) -> &dyn Conntrack;
    /// The backstop, if masqd runs one.
    fn guard(&self) -> Option<&dyn Guard>;
}

/// The served device an endpoint is on (its rail), for translating its
/// virtual addresses to the device's and naming its QPs to the backstop.
/// Implemented by `Parts` (its `rails`) and by `FakeHost` (one port,
/// an underlay address per rail).
pub trait Rails {
    /// The port of `ep`'s device.
    fn port(&self, ep: &Endpoint) -> u8;
    /// The rail `ep`'s device is on.
    fn rail_name(&self, ep: &Endpoint) -> &str;
    /// The physical sgid index for the endpoint's virtual index `vindex`.
    fn sgid_index(&self, ep: &Endpoint, vindex: u32) -> Result<u32>;
    /// This host's underlay address on `ep`'s rail.
    fn underlay(&self, ep: &Endpoint) -> Ipv4Addr;
}

/// What the RDMA CM knows of a QP, and the UD QPs the hosts of a VNI tell
/// each other of over the CM link (`cm::Cm`, and the live sessions for
/// this host's own): the QP pipeline matches the rules on the CM's side of
/// a connection and announces its UD QPs; the AH pipeline names a UD
/// datagram's sender. Implemented by `Parts` and by `FakeHost` (which logs
/// the announcements and knows no sender).
pub trait CmView {
    /// The RDMA CM's side of a connection it set up, if it did.
    fn cm_side(&self, ep: &Endpoint, qpn: u32) -> Option<rconntrack::CmSide>;
    /// A UD QP can receive (`up`) or is gone: the other hosts of its VNI
    /// are told (the backstop's own sets are the pipeline's, `Guard`).
    fn ud_announce(&self, ep: &Endpoint, qpn: u32, up: bool);
    /// A UD QP reached INIT: the other hosts are told now, and their acks
    /// awaited at its RTR (`ud_announce`), so that a gap costs the app
    /// nothing.
    fn ud_announce_early(&self, ep: &Endpoint, qpn: u32);
    /// Another host's announced UD QP `qpn`: its VNI and vIP.
    fn ud_sender(&self, host: Ipv4Addr, qpn: u32) -> Option<(u32, Ipv4Addr)>;
    /// The vIP of this host's endpoint in `vni` whose app holds UD QP `qpn`.
    fn local_sender(&self, vni: u32, qpn: u32) -> Option<Ipv4Addr>;
}

/// The audit's vouchers, which the QP pipeline gives and takes back as a
/// QP is admitted and destroyed. Implemented by `Parts` (its `admitted`)
/// and by `FakeHost`.
pub trait Audit {
    fn vouchers(&self) -> &dyn Vouchers;
}

/// The AHs masqd destroys on an app's own uverbs file, when a restored
/// session's AH cannot be tracked again (`ah::resync_ah`). Implemented by
/// `Parts` (the live sessions' files) and by `FakeHost` (a log).
pub trait AhFiles {
    /// Destroy AH `ah_handle` on the uverbs file session `session`
    /// registered at OPEN_DEVICE; `None` if there is none (the session is gone).
    fn destroy_ah(&self, session: u64, ah_handle: u32) -> Option<Result<()>>;
}

/// How long the steps of a QP's move took, for the metrics' breakdown.
/// Implemented by `Parts` (`metrics.rs`) and by `FakeHost` (a log of the
/// steps, in order).
pub trait StepTimes {
    /// One step of a move to RTR took `took`.
    fn rtr_step(&self, step: &'static str, took: Duration);
    /// One step of the RDMA CM's accept or establish of a QP took `took`.
    fn cm_step(&self, step: &'static str, took: Duration);
}

/// What the pipelines need of masqd, all of it: the functions that use
/// every concern (`qp::modify`, `qp::resync`, `ah::create_ah`, ...) take
/// this; the ones that use one take that trait. Every type with all six
/// is one (`Parts`, `FakeHost`).
pub trait QpHost: Enforce + Rails + CmView + Audit + AhFiles + StepTimes {}

impl<T: Enforce + Rails + CmView + Audit + AhFiles + StepTimes> QpHost for T {}

/// The RDMA CM as its QP steps use it (`cm::Cm`): an id's RTR and RTS
/// attributes, and the accept (REP) or establish (RTU) that follows them.
pub trait CmSteps {
    /// The CM session of CM id `id` of endpoint `ep` (if app `pid` holds
    /// it on one of its sessions, and it is in the phase for this step:
    /// `accept` for the passive side, with the app's responder resources
    /// and initiator depth), and its QP's RTR and RTS attributes.
    fn qp_attrs(
        &self,
        id: u32,
        ep: &str,
        pid: i32,
        qpn: u32,
        accept: Option<(u8, u8)>,
    ) -> Result<(u64, proto::CmQpAttr, proto::CmQpAttr)>;
    /// Run the accept or establish `body` on the id's CM session.
    fn finish(&self, cm_session: u64, ep: &Arc<Endpoint>, body: &proto::RequestBody) -> Result<()>;
}
