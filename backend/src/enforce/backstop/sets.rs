//! The backstop's sets at run time: mirroring the RConntrack table's
//! events and the QPs masqd sees into them, the queue of element updates
//! and its flush, the reconcile after a restart, the counters, and the
//! verbs pipelines' `Guard`.

use super::rules::{
    add, bump, conn_to, del, del_ud, drop_ref, egress, egress_pair, endpoint_of, ingress, lock,
    tenant_qp, ud_host, vnis,
};
use super::{Backstop, CONN_TO, TABLE, TENANT_QPS};
use crate::error::{Error, Result};
use crate::kernel::bpf_backstop::{
    BpfBackstop, Key, DROPS_INGRESS, DROPS_NO_ENDPOINT, DROPS_UD_INGRESS,
};
use crate::kernel::nft_set::{Change, Element, Field};
use crate::pipeline::ports::{Guard, Removal, BATCHED_DELETIONS_WAIT};
use rconntrack::{Event, EventKind, QpType, State};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::sync::{MutexGuard, TryLockError};
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

impl Backstop {
    /// Mirror table events into the sets. An entry passes while it is
    /// ADMITTED or ESTABLISHED; RESET_BY_POLICY cuts it at once, before
    /// masqd even moves the QP to ERROR. `when` says how soon deletions
    /// must be in force (see `Removal`).
    pub fn apply(&self, events: &[Event], when: Removal) {
        if events.is_empty() {
            return;
        }
        let mut el = self.lock();
        let mut cmd = Vec::new();
        for ev in events {
            let e = &ev.entry;
            let passes = ev.event != EventKind::Destroy
                && matches!(e.state, State::Admitted | State::Established);
            if e.qp_type == QpType::Ud {
                // An address handle: its destination QPN is chosen per
                // send, so it admits a host (set ud_<endpoint>).
                let want = passes
                    .then(|| endpoint_of(&el.endpoints, e))
                    .flatten()
                    .map(|(ep, _)| (ep, e.peer_host));
                let have = el.live_ud.get(&e.key()).cloned();
                if want != have {
                    if let Some((ep, host)) = have {
                        del_ud(&mut el, &mut cmd, &ep, host);
                        el.live_ud.remove(&e.key());
                    }
                    if let Some((ep, host)) = want {
                        if bump(el.ud.entry(ep.clone()).or_default(), host) {
                            cmd.push(Change::Add(ud_host(&ep, host)));
                        }
                        el.live_ud.insert(e.key(), (ep, host));
                    }
                }
                continue;
            }
            let want = (passes)
                .then(|| endpoint_of(&el.endpoints, e))
                .flatten()
                .map(|(ep, local)| (ep, egress_pair(e), ingress(e, local)));
            let have = el.live.get(&e.key()).cloned();
            if want == have {
                continue;
            }
            if let Some((ep, eg, ing)) = have {
                del(&mut el, &mut cmd, (&ep, eg, ing));
                el.live.remove(&e.key());
            }
            if let Some((ep, eg, ing)) = want {
                add(&mut el, &mut cmd, (&ep, eg, ing));
                el.live.insert(e.key(), (ep, eg, ing));
            }
        }
        self.submit(cmd, when);
    }

    /// A tenant QP masqd has seen (its move to RTR), on the rail of this
    /// host's address `local`: from now on only admitted peers reach it.
    pub fn qp_seen(&self, local: Ipv4Addr, qpn: u32) {
        let mut el = self.lock();
        if bump(&mut el.tenant_qps, (local, qpn)) {
            self.submit(vec![Change::Add(tenant_qp((local, qpn)))], Removal::Now);
        }
    }

    /// A UD QP of a local endpoint in `vni`, on the rail of address
    /// `local`, is about to receive (from INIT on) or gone: from now on
    /// datagrams reach it only from UD QPs announced in its VNI (eBPF map
    /// `ud_qps`, written here: one `bpf()` call, no transaction).
    pub fn ud_local(&self, local: Ipv4Addr, vni: u32, qpn: u32, up: bool) {
        let mut el = self.lock();
        let qp = (local, qpn);
        let had = if up {
            el.ud_local.insert(qp, vni)
        } else {
            el.ud_local.remove(&qp)
        };
        match (up, had) {
            (true, Some(old)) if old == vni => {}
            // A new VNI replaces the old one in the same slot.
            (true, _) => self.write_key(Key::UdQp(local, qpn, vni), true),
            (false, Some(old)) => self.write_key(Key::UdQp(local, qpn, old), false),
            (false, None) => {}
        }
    }

    /// Host `host`'s masqd announced its UD QP `qpn` in `vni` (or its
    /// end): its datagrams may reach this host's UD QPs of that VNI (eBPF
    /// map `ud_from`). A VNI with no endpoint here has nothing to reach:
    /// its announcements take no room.
    pub fn ud_remote(&self, host: Ipv4Addr, qpn: u32, vni: u32, up: bool) {
        let mut el = self.lock();
        let served = vnis(&el.endpoints).contains(&vni);
        let had = el.ud_remote.get(&(host, qpn)).copied();
        if up && had == Some(vni) {
            return;
        }
        if up && served {
            el.ud_remote.insert((host, qpn), vni);
            self.write_key(Key::UdFrom(host, qpn, vni), true);
        } else if let Some(old) = had.filter(|&old| up || old == vni) {
            el.ud_remote.remove(&(host, qpn));
            self.write_key(Key::UdFrom(host, qpn, old), false);
        }
    }

    /// One element of the eBPF maps in or out (called under the elements
    /// lock, as `submit`; see `write_map`).
    fn write_key(&self, key: Key, add: bool) {
        write_map(&mut lock(&self.bpf), Ok(key), add);
    }

    /// The QP is destroyed (or its session ended), or its RTR failed.
    pub fn qp_gone(&self, local: Ipv4Addr, qpn: u32, when: Removal) {
        let mut el = self.lock();
        if drop_ref(&mut el.tenant_qps, (local, qpn)) {
            self.submit(vec![Change::Delete(tenant_qp((local, qpn)))], when);
        }
    }

    /// Put a set update in force: the eBPF maps' elements at once, one
    /// `bpf()` call each, the nftables sets' queued (called under the
    /// elements lock, so either reaches the kernel in the order the table
    /// changed). A map update is no transaction: there is nothing to share
    /// or batch, and queueing it cost an admission the queue's machinery
    /// around its three calls, or a hand-off to the updater thread where
    /// no thread held the queue (docs/performance.md).
    ///
    /// Of the nftables updates an admission waits for its own
    /// (`wait_applied`, which runs them on its thread): a new connection
    /// whose first packets were dropped relies on rxe's retries, which a
    /// loaded host can outlast (the connection then fails with a retry
    /// error). Others are run by `flush_updates` in a thread of their own,
    /// woken here unless a holder will run them; a removed one passes a
    /// moment longer. Deletions of gone QPs (`Removal::Gone`, only
    /// deletions) wait up to `BATCHED_DELETIONS_WAIT` for company: the
    /// updater is woken by the first of them, and waits out the rest
    /// unless something else is queued.
    fn submit(&self, cmd: Vec<Change>, when: Removal) {
        if cmd.is_empty() {
            return;
        }
        let cmd = self.write_maps(cmd);
        if cmd.is_empty() {
            return;
        }
        let gone = when == Removal::Gone && cmd.iter().all(|c| matches!(c, Change::Delete(_)));
        let mut q = lock(&self.pending);
        q.cmds.push((cmd, gone.then(Instant::now)));
        q.last += 1;
        let wake = q.holders == 0 && (!gone || q.cmds.len() == 1);
        drop(q);
        if wake {
            self.wake.notify_one();
        }
    }

    /// The updates of `cmd` whose sets live in the eBPF maps, written;
    /// the rest, nftables', returned.
    fn write_maps(&self, cmd: Vec<Change>) -> Vec<Change> {
        let mut bpf = lock(&self.bpf);
        cmd.into_iter()
            .filter(|c| !apply_in_maps(&mut bpf, c))
            .collect()
    }

    /// A thread that will wait for what it queues next: until `release`,
    /// the updater is not woken for anything queued, since the holder runs
    /// the queue itself in `wait_applied`. An update of another thread
    /// queued meanwhile waits for the holder's transaction (the holder's
    /// request takes a moment, a hand-off to the updater as long).
    pub fn hold(&self) {
        lock(&self.pending).holders += 1;
    }

    pub fn release(&self) {
        let mut q = lock(&self.pending);
        q.holders = q.holders.saturating_sub(1);
        let wake = q.holders == 0 && !q.cmds.is_empty();
        drop(q);
        if wake {
            self.wake.notify_one();
        }
    }

    /// Block until every update queued so far is in the kernel, but the
    /// gone QPs' deletions that wait for their batch (`Queue::
    /// take_urgent`), or `timeout` passed; false on timeout. When no transaction is under
    /// way, this thread runs the queue itself (its own updates and any
    /// other queued), so an admission pays the kernel's work and no thread
    /// hand-off; while one is, it waits, and then runs what that one did
    /// not take, so under load the waiters' updates share transactions.
    pub fn wait_applied(&self, timeout: Duration) -> bool {
        let target = lock(&self.pending).last;
        let deadline = Instant::now() + timeout;
        let mut applied = lock(&self.applied);
        while *applied < target {
            // Tried under `applied`: a sender releases `sending` before it
            // takes `applied` to wake the waiters, so none is missed.
            if let Some(s) = self.try_sending() {
                drop(applied);
                self.run_urgent(&s);
                drop(s);
                applied = lock(&self.applied);
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            applied = self
                .applied_cv
                .wait_timeout(applied, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// `sending`, taken; released, it wakes the threads in `wait_applied`.
    pub(super) fn sending(&self) -> Sending<'_> {
        Sending {
            b: self,
            _held: Some(lock(&self.sending)),
        }
    }

    fn try_sending(&self) -> Option<Sending<'_>> {
        let g = match self.sending.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        Some(Sending {
            b: self,
            _held: Some(g),
        })
    }

    /// Every queued update, run in one transaction (or one by one if that
    /// fails); the caller holds `sending`.
    pub(super) fn run_queue(&self, _sending: &Sending<'_>) {
        let (cmds, upto) = lock(&self.pending).take();
        if cmds.is_empty() {
            return;
        }
        self.run_updates(&cmds);
        self.mark_applied(upto);
    }

    /// What must not wait of the queue (`Queue::take_urgent`), in one
    /// transaction; the caller holds `sending`.
    fn run_urgent(&self, _sending: &Sending<'_>) {
        let (cmds, upto) = lock(&self.pending).take_urgent();
        self.run_updates(&cmds);
        self.mark_applied(upto);
    }

    /// Updates up to number `upto` are in the kernel (or were tried).
    pub(super) fn mark_applied(&self, upto: u64) {
        let mut a = lock(&self.applied);
        *a = (*a).max(upto);
        self.applied_cv.notify_all();
    }

    /// Wait up to `timeout` for queued updates and run them: all in one
    /// transaction, or one by one if that fails (an update whose element
    /// changed meanwhile must not take the others down with it).
    ///
    /// `sending` is taken only after the wait: held across it, this loop
    /// re-took it at once every round and starved `reconcile`, which then
    /// waited holding the elements lock that accepting a session needs
    /// (masqd accepted no app for a minute and more after a restart).
    ///
    /// A queue of only gone QPs' deletions waits until the first of them
    /// is `BATCHED_DELETIONS_WAIT` old, or anything else is queued; a zero
    /// `timeout` (masqd stopping) runs it at once.
    pub fn flush_updates(&self, timeout: Duration) {
        let mut q = lock(&self.pending);
        let mut left = if q.cmds.is_empty() {
            timeout
        } else {
            Duration::ZERO
        };
        loop {
            if !left.is_zero() {
                q = self
                    .wake
                    .wait_timeout(q, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            left = match q.gone_since() {
                Some(since) if !q.urgent() && !timeout.is_zero() => {
                    (since + BATCHED_DELETIONS_WAIT).saturating_duration_since(Instant::now())
                }
                _ => Duration::ZERO,
            };
            if left.is_zero() {
                break;
            }
        }
        drop(q);
        let sending = self.sending();
        self.run_queue(&sending);
    }

    /// Queued updates (nftables' only: the maps' are written by `submit`),
    /// all in one transaction, or one by one if that fails.
    pub(super) fn run_updates(&self, cmds: &[Vec<Change>]) {
        if cmds.is_empty() {
            return;
        }
        if self.sets.apply(&cmds.concat()).is_ok() {
            debug!(updates = cmds.len(), "backstop sets updated");
        } else {
            for c in cmds {
                if let Err(e) = self.sets.apply(c) {
                    warn!("backstop: cannot update the sets: {e}");
                }
            }
        }
    }

    /// Rewrite every set from what masqd tracks now (its mirror of the
    /// table and the QPs seen since it started), in one transaction: after
    /// a restart, elements nobody re-registered go away. Queued updates are
    /// part of that state already and are dropped, unless this fails.
    /// After an upgrade from a masqd whose ingress sets had other names
    /// and keys, the new sets hold its elements at every rail address
    /// (`start`): this rewrites them to exactly what is admitted.
    pub fn reconcile(&self) {
        // `sending` first: waiting for it must not hold the elements lock.
        let _sending = self.sending();
        let el = self.lock();
        let (queued, upto) = lock(&self.pending).take();
        let t = format!("inet {TABLE}");
        let mut cmd = String::new();
        for id in el.endpoints.keys() {
            let _ = writeln!(cmd, "flush set {t} ud_{id}");
        }
        let mut add = |e| cmd.push_str(&Change::Add(e).nft_command(&t));
        for (id, hosts) in &el.ud {
            for &host in hosts.keys() {
                add(ud_host(id, host));
            }
        }
        let mut wanted = Vec::new();
        for (id, pairs) in &el.egress {
            wanted.extend(pairs.keys().map(|&pair| egress(id, pair)));
        }
        wanted.extend(el.conn_to.keys().map(|&c| conn_to(c)));
        wanted.extend(el.tenant_qps.keys().map(|&qp| tenant_qp(qp)));
        let vnis = vnis(&el.endpoints);
        let ud_local = el.ud_local.iter().map(|(&(l, q), &v)| Key::UdQp(l, q, v));
        let ud_remote = el
            .ud_remote
            .iter()
            .map(|(&(h, q), &v)| Key::UdFrom(h, q, v));
        let ud = ud_local
            .chain(ud_remote)
            .filter(|k| k.vni().is_some_and(|v| vnis.contains(&v)));
        self.reconcile_maps(&wanted, ud.collect());
        match self.nft.run(&cmd) {
            Ok(_) => info!(
                connections = el.conn_to.len(),
                qps = el.tenant_qps.len(),
                "backstop sets reconciled"
            ),
            Err(e) => {
                warn!("backstop: cannot reconcile the sets: {e}");
                for c in &queued {
                    if let Err(e) = self.sets.apply(c) {
                        warn!("backstop: cannot update the sets: {e}");
                    }
                }
            }
        }
        self.mark_applied(upto);
    }

    /// The eBPF maps made to hold exactly `wanted` (nftables-shaped
    /// elements of the sets that live there) and the UD QPs' `ud`: what is
    /// missing added (or its slot's value replaced) first, then what is
    /// left over deleted.
    fn reconcile_maps(&self, wanted: &[Element], ud: Vec<Key>) {
        let mut bpf = lock(&self.bpf);
        let mut wanted: BTreeSet<Key> = wanted
            .iter()
            .filter_map(|e| match bpf_key(&mut bpf, e)? {
                Ok(k) => Some(k),
                Err(err) => {
                    warn!("backstop: {err}");
                    None
                }
            })
            .collect();
        wanted.extend(ud);
        let slots: BTreeSet<Key> = wanted.iter().map(|k| k.slot()).collect();
        let have: BTreeSet<Key> = bpf.elements().into_iter().collect();
        for &k in wanted.difference(&have) {
            if let Err(e) = bpf.insert(k) {
                warn!("backstop: {e}");
            }
        }
        // A slot whose value was replaced above is no leftover.
        for &k in have.difference(&wanted) {
            if slots.contains(&k.slot()) {
                continue;
            }
            if let Err(e) = bpf.remove(k) {
                warn!("backstop: {e}");
            }
        }
    }

    /// The drop counters: (name, packets, bytes), nftables' and the eBPF
    /// programs' (`ingress_drop`, `no_endpoint_drop`, and an endpoint's
    /// RC and UC drops added to its `drop_<endpoint>`). The table always
    /// has some: none means it is gone.
    pub fn counters(&self) -> Result<Vec<(String, u64, u64)>> {
        let c = self
            .counters
            .read()
            .map_err(|e| Error::Failed(format!("nf_tables counters of inet {TABLE}: {e}")))?;
        if c.is_empty() {
            return Err(Error::Failed(format!(
                "no counters in inet {TABLE}: the table is gone (was the ruleset flushed?)"
            )));
        }
        let mut all: BTreeMap<String, (u64, u64)> = c
            .into_iter()
            .map(|c| (c.name, (c.packets, c.bytes)))
            .collect();
        all.entry("ingress_drop".into()).or_default();
        all.entry("ud_ingress_drop".into()).or_default();
        let bpf = lock(&self.bpf);
        for (n, d) in bpf.drops() {
            let name = match n {
                DROPS_INGRESS => "ingress_drop".to_string(),
                DROPS_UD_INGRESS => "ud_ingress_drop".to_string(),
                DROPS_NO_ENDPOINT => "no_endpoint_drop".to_string(),
                n => match bpf.endpoint_of(n) {
                    Some(id) => format!("drop_{id}"),
                    None => continue, // an endpoint forgotten since
                },
            };
            let c = all.entry(name).or_default();
            c.0 += d.packets;
            c.1 += d.bytes;
        }
        Ok(all.into_iter().map(|(n, (p, b))| (n, p, b)).collect())
    }

    /// What a drop counter counts, for the log.
    pub fn describe_counter(&self, counter: &str) -> String {
        match counter {
            "unknown_cgroup_drop" => format!(
                "sent from a cgroup under {}/ that is no configured endpoint",
                self.parent
            ),
            "ingress_drop" => {
                "to a tenant QP from a host no admitted connection of it names".into()
            }
            "no_endpoint_drop" => {
                "sent from a cgroup whose endpoint masqd was changing (eBPF egress)".into()
            }
            "ud_ingress_drop" => "a datagram to a tenant's UD QP from no UD QP of its VNI".into(),
            _ => {
                let id = counter.strip_prefix("drop_").unwrap_or(counter);
                let el = self.lock();
                let ep = el.endpoints.get(id);
                let name = ep.and_then(|e| e.cgroup.rsplit('/').next()).unwrap_or(id);
                format!("sent by {name} to a (host, QPN) no admitted connection of it names")
            }
        }
    }
}

/// The eBPF map element that nftables-shaped element `e` names, if its
/// set lives in the maps (`conn_to`, `tenant_qps`, `eg_<endpoint>`): an
/// error if it does but has no key there (no number for its endpoint).
fn bpf_key(bpf: &mut BpfBackstop, e: &Element) -> Option<Result<Key>> {
    match (e.set.as_str(), &e.key[..]) {
        (CONN_TO, [Field::Ipv4(p), Field::Ipv4(l), Field::Bits24(q)]) => {
            Some(Ok(Key::ConnTo(*p, *l, *q)))
        }
        (TENANT_QPS, [Field::Ipv4(l), Field::Bits24(q)]) => Some(Ok(Key::TenantQp(*l, *q))),
        (set, [Field::Ipv4(h), Field::Bits24(q)]) => {
            let id = set.strip_prefix("eg_")?;
            Some(bpf.endpoint_number(id).map(|n| Key::Egress(n, *h, *q)))
        }
        _ => None,
    }
}

thread_local! {
    /// Whether an element this thread added to the eBPF maps was refused
    /// since `take_refused` last asked. Map writes run on the thread whose
    /// table change they mirror (`submit`), so an RTR learns of its own.
    static REFUSED: Cell<bool> = const { Cell::new(false) };
}

/// Apply `c` to the eBPF maps if its set lives there; false if not (it is
/// nftables').
pub(super) fn apply_in_maps(bpf: &mut BpfBackstop, c: &Change) -> bool {
    let Some(key) = bpf_key(bpf, c.element()) else {
        return false;
    };
    let named = key.as_ref().ok().copied();
    let there = write_map(bpf, key, matches!(c, Change::Add(_)));
    if let (false, Some(key)) = (there, named) {
        warn!("backstop: {key:?} was not in the eBPF maps");
    }
    true
}

/// `key` put in the eBPF maps (`add`) or taken out; false if one taken
/// out was not there. A failure is logged, and a refused add is told to
/// this thread's `take_refused`.
fn write_map(bpf: &mut BpfBackstop, key: Result<Key>, add: bool) -> bool {
    let r = key.and_then(|k| {
        if add {
            bpf.insert(k).map(|()| true)
        } else {
            bpf.remove(k)
        }
    });
    r.unwrap_or_else(|e| {
        warn!("backstop: cannot update the eBPF maps: {e}");
        if add {
            REFUSED.with(|r| r.set(true));
        }
        true
    })
}

/// `Backstop::sending`, held.
pub(super) struct Sending<'a> {
    b: &'a Backstop,
    _held: Option<MutexGuard<'a, ()>>,
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        // Released first, so that a waiter woken here can take it.
        self._held.take();
        let _applied = lock(&self.b.applied);
        self.b.applied_cv.notify_all();
    }
}

/// What the verbs pipelines ask of the backstop: its own methods.
impl Guard for Backstop {
    fn qp_seen(&self, local: Ipv4Addr, qpn: u32) {
        Backstop::qp_seen(self, local, qpn)
    }
    fn qp_gone(&self, local: Ipv4Addr, qpn: u32, when: Removal) {
        Backstop::qp_gone(self, local, qpn, when)
    }
    fn wait_applied(&self, timeout: Duration) -> bool {
        Backstop::wait_applied(self, timeout)
    }
    fn ud_local(&self, local: Ipv4Addr, vni: u32, qpn: u32, up: bool) {
        Backstop::ud_local(self, local, vni, qpn, up)
    }
    fn ud_remote(&self, host: Ipv4Addr, qpn: u32, vni: u32, up: bool) {
        Backstop::ud_remote(self, host, qpn, vni, up)
    }
    fn hold(&self) {
        Backstop::hold(self)
    }
    fn release(&self) {
        Backstop::release(self)
    }
    fn take_refused(&self) -> bool {
        REFUSED.with(|r| r.replace(false))
    }
}
