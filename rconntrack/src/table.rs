//! The table: a slab of entries plus two indexes, and event fan-out.

use crate::entry::{now_ms, Entry, LocalKey, QpKey, QpType, State};
use crate::filter::Filter;
use crate::slab::Slab;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum EventKind {
    New,
    Update,
    Destroy,
}

/// What `conntrack -E` would print: the kind and the entry after the change
/// (for DESTROY, the entry as it was).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub event: EventKind,
    #[serde(flatten)]
    pub entry: Entry,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.event {
            EventKind::New => "[NEW]",
            EventKind::Update => "[UPDATE]",
            EventKind::Destroy => "[DESTROY]",
        };
        write!(f, "{tag:>9} {}", self.entry)
    }
}

/// A policy's answer for one tracked connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Still allowed, admitted now by this rule (may differ from before).
    Allow(Arc<str>),
    /// No longer allowed.
    Deny,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upsert {
    New,
    Updated,
    /// Same content as tracked: no event, timestamps untouched.
    Unchanged,
}

/// Refused insert: the table holds `max` entries already (like
/// nf_conntrack_max; stops one tenant from exhausting masqd's memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableFull {
    pub max: usize,
}

impl fmt::Display for TableFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "connection table full ({} entries)", self.max)
    }
}

impl std::error::Error for TableFull {}

/// Default limit on tracked connections.
pub const DEFAULT_MAX: usize = 1 << 24;

/// The connection tracking table.
///
/// Entries live in a chunked slab (88 bytes a slot); the
/// primary index is a `BTreeMap` on (session, qp_handle), so removing all of
/// a session is a range and listings come out in a stable order; the
/// secondary index is a `HashMap` on (vni, local vIP, local QPN). Tenant and
/// rule names are interned. Measured cost: 150-170 bytes per entry
/// including both indexes (`tests/memory.rs`, `benches/table.rs`).
///
/// Not thread-safe by itself: masqd wraps it in a `Mutex`.
pub struct Table {
    slots: Slab,
    by_key: BTreeMap<QpKey, u32>,
    by_local: HashMap<LocalKey, u32>,
    /// Entries per (vni, local vIP): an endpoint's count without a scan,
    /// for its quota.
    per_vip: HashMap<(u32, Ipv4Addr), usize>,
    strings: HashSet<Arc<str>>,
    subscribers: Subscribers,
    max: usize,
}

/// Where events go: `conntrack -E` style listeners, which may fall behind
/// and be dropped, and an optional journal that keeps every event until the
/// owner takes it (masqd mirrors the table into the kernel from it, so it
/// must never miss one).
#[derive(Default)]
struct Subscribers {
    senders: Vec<SyncSender<Event>>,
    journal: Option<Vec<Event>>,
}

impl Default for Table {
    fn default() -> Table {
        Table::new()
    }
}

/// Only connected QPs are in the (vni, vIP, QPN) index: a UD QP has one
/// entry per admitted destination, all with the same local QPN.
fn local_index(e: &Entry) -> Option<LocalKey> {
    (e.qp_type != QpType::Ud).then(|| e.local_key())
}

fn intern(strings: &mut HashSet<Arc<str>>, s: &Arc<str>) -> Arc<str> {
    if let Some(x) = strings.get(&**s) {
        return x.clone();
    }
    strings.insert(s.clone());
    s.clone()
}

fn emit(subscribers: &mut Subscribers, event: EventKind, entry: &Entry) {
    if subscribers.senders.is_empty() && subscribers.journal.is_none() {
        return;
    }
    let ev = Event {
        event,
        entry: entry.clone(),
    };
    if let Some(j) = &mut subscribers.journal {
        j.push(ev.clone());
    }
    // A subscriber that fell behind is dropped rather than blocking masqd or
    // growing without bound (netlink's ENOBUFS, made final): its receiver
    // sees the end of the stream and must re-list to resynchronize.
    subscribers
        .senders
        .retain(|s| match s.try_send(ev.clone()) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
        });
}

impl Table {
    pub fn new() -> Table {
        Table::with_max(DEFAULT_MAX)
    }

    /// A table that refuses new entries beyond `max` (capped at u32::MAX,
    /// the slab's index type).
    pub fn with_max(max: usize) -> Table {
        Table {
            slots: Slab::default(),
            by_key: BTreeMap::new(),
            by_local: HashMap::new(),
            per_vip: HashMap::new(),
            strings: HashSet::new(),
            subscribers: Subscribers::default(),
            max: max.min(u32::MAX as usize),
        }
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// How many entries have local address (vni, vip): one endpoint's.
    pub fn held_by(&self, vni: u32, vip: Ipv4Addr) -> usize {
        self.per_vip.get(&(vni, vip)).copied().unwrap_or(0)
    }

    fn count(&mut self, vni: u32, vip: Ipv4Addr, add: bool) {
        let n = self.per_vip.entry((vni, vip)).or_insert(0);
        if add {
            *n += 1;
        } else {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_vip.remove(&(vni, vip));
            }
        }
    }

    fn at(&self, slot: u32) -> &Entry {
        self.slots.get(slot).expect("index points at a live slot")
    }

    /// Insert or update by (session, qp_handle). `created_ms`/`updated_ms`
    /// are set here. An RC/UC entry of a different QP with the same (vni,
    /// local vIP, local QPN) is stale (the QPN was reused) and is destroyed
    /// first.
    pub fn upsert(&mut self, mut e: Entry) -> Result<Upsert, TableFull> {
        e.tenant = intern(&mut self.strings, &e.tenant);
        e.rule = intern(&mut self.strings, &e.rule);
        let (key, lk) = (e.key(), local_index(&e));
        if let Some(&slot) = lk.and_then(|lk| self.by_local.get(&lk)) {
            if self.at(slot).key() != key {
                self.remove_slot(slot);
            }
        }
        let now = now_ms();
        if let Some(&slot) = self.by_key.get(&key) {
            let old = self
                .slots
                .get_mut(slot)
                .expect("index points at a live slot");
            if old.same_content(&e) {
                return Ok(Upsert::Unchanged);
            }
            e.created_ms = old.created_ms;
            e.updated_ms = now.max(old.created_ms);
            let (old_at, new_at) = ((old.vni, old.local_vip), (e.vni, e.local_vip));
            let old_lk = local_index(old);
            if old_lk != lk {
                if let Some(o) = old_lk {
                    self.by_local.remove(&o);
                }
                if let Some(n) = lk {
                    self.by_local.insert(n, slot);
                }
            }
            *old = e;
            emit(&mut self.subscribers, EventKind::Update, old);
            if old_at != new_at {
                self.count(old_at.0, old_at.1, false);
                self.count(new_at.0, new_at.1, true);
            }
            return Ok(Upsert::Updated);
        }
        if self.len() >= self.max {
            return Err(TableFull { max: self.max });
        }
        e.created_ms = now;
        e.updated_ms = now;
        emit(&mut self.subscribers, EventKind::New, &e);
        self.count(e.vni, e.local_vip, true);
        // len < max <= u32::MAX, so the slab has a free index.
        let slot = self.slots.insert(e).ok_or(TableFull { max: self.max })?;
        self.by_key.insert(key, slot);
        if let Some(lk) = lk {
            self.by_local.insert(lk, slot);
        }
        Ok(Upsert::New)
    }

    pub fn get(&self, key: QpKey) -> Option<&Entry> {
        self.by_key.get(&key).map(|&s| self.at(s))
    }

    /// The connected (RC/UC) QP with this local address and QPN.
    pub fn get_local(&self, lk: LocalKey) -> Option<&Entry> {
        self.by_local.get(&lk).map(|&s| self.at(s))
    }

    /// Move a tracked QP to `state` (e.g. ESTABLISHED at RTS). Returns false
    /// if it is not tracked. No event when the state is unchanged.
    pub fn set_state(&mut self, key: QpKey, state: State) -> bool {
        let Some(&slot) = self.by_key.get(&key) else {
            return false;
        };
        let e = self
            .slots
            .get_mut(slot)
            .expect("index points at a live slot");
        if e.state != state {
            e.state = state;
            e.updated_ms = now_ms().max(e.created_ms);
            emit(&mut self.subscribers, EventKind::Update, e);
        }
        true
    }

    fn remove_slot(&mut self, slot: u32) -> Entry {
        let e = self.slots.take(slot).expect("index points at a live slot");
        self.by_key.remove(&e.key());
        self.count(e.vni, e.local_vip, false);
        if let Some(lk) = local_index(&e) {
            if self.by_local.get(&lk) == Some(&slot) {
                self.by_local.remove(&lk);
            }
        }
        if self.by_key.is_empty() {
            // Give the memory back once idle.
            self.slots.clear();
        }
        emit(&mut self.subscribers, EventKind::Destroy, &e);
        e
    }

    pub fn remove(&mut self, key: QpKey) -> Option<Entry> {
        let slot = *self.by_key.get(&key)?;
        Some(self.remove_slot(slot))
    }

    pub fn remove_local(&mut self, lk: LocalKey) -> Option<Entry> {
        let slot = *self.by_local.get(&lk)?;
        Some(self.remove_slot(slot))
    }

    /// Everything a session (one app context) tracked, e.g. when the app
    /// exited. In key order.
    pub fn remove_session(&mut self, session: u64) -> Vec<Entry> {
        let slots: Vec<u32> = self
            .by_key
            .range(Self::session_range(session))
            .map(|(_, &s)| s)
            .collect();
        slots.into_iter().map(|s| self.remove_slot(s)).collect()
    }

    fn session_range(session: u64) -> std::ops::RangeInclusive<QpKey> {
        QpKey {
            session,
            qp_handle: 0,
        }..=QpKey {
            session,
            qp_handle: u32::MAX,
        }
    }

    /// All entries in (session, qp_handle) order.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> + '_ {
        self.by_key.values().map(|&s| self.at(s))
    }

    /// Entries matching `filter`, in key order. A session filter walks only
    /// that session's range.
    pub fn list<'a>(&'a self, filter: &'a Filter) -> impl Iterator<Item = &'a Entry> + 'a {
        let range = match filter.session {
            Some(s) => Self::session_range(s),
            None => {
                QpKey {
                    session: 0,
                    qp_handle: 0,
                }..=QpKey {
                    session: u64::MAX,
                    qp_handle: u32::MAX,
                }
            }
        };
        self.by_key
            .range(range)
            .map(|(_, &s)| self.at(s))
            .filter(move |e| filter.matches(e))
    }

    /// Ask `decide` about every entry (after a policy change). `None` leaves
    /// an entry alone; `Allow(rule)` records a changed rule (UPDATE event);
    /// `Deny` marks it RESET_BY_POLICY (UPDATE event) and returns it, in key
    /// order: masqd moves those QPs to ERROR and then removes them. A denied
    /// entry that was not removed is returned again next time.
    pub fn reevaluate(&mut self, mut decide: impl FnMut(&Entry) -> Option<Decision>) -> Vec<Entry> {
        let now = now_ms();
        let Table {
            slots,
            strings,
            subscribers,
            ..
        } = self;
        let mut denied = Vec::new();
        for e in slots.iter_mut() {
            match decide(e) {
                Some(Decision::Allow(rule)) if *rule != *e.rule => {
                    e.rule = intern(strings, &rule);
                    e.updated_ms = now.max(e.created_ms);
                    emit(subscribers, EventKind::Update, e);
                }
                None | Some(Decision::Allow(_)) => {}
                Some(Decision::Deny) => {
                    if e.state != State::ResetByPolicy {
                        e.state = State::ResetByPolicy;
                        e.updated_ms = now.max(e.created_ms);
                        emit(subscribers, EventKind::Update, e);
                    }
                    denied.push(e.clone());
                }
            }
        }
        // Rule names of a replaced policy are referenced by no entry now.
        strings.retain(|s| Arc::strong_count(s) > 1);
        denied.sort_unstable_by_key(|e| e.key());
        denied
    }

    /// A new `conntrack -E` listener. It gets every later event; if it lets
    /// more than `capacity` pile up it is disconnected (see `emit`).
    pub fn subscribe(&mut self, capacity: usize) -> Receiver<Event> {
        let (tx, rx) = mpsc::sync_channel(capacity.max(1));
        self.subscribers.senders.push(tx);
        rx
    }

    pub fn subscriber_count(&self) -> usize {
        self.subscribers.senders.len()
    }

    /// Start keeping every later event until `take_journal`.
    pub fn enable_journal(&mut self) {
        self.subscribers.journal.get_or_insert_with(Vec::new);
    }

    /// The events since the last call, oldest first (empty when the
    /// journal is off).
    pub fn take_journal(&mut self) -> Vec<Event> {
        match &mut self.subscribers.journal {
            Some(j) => std::mem::take(j),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::Cidr;
    use std::sync::mpsc::TryRecvError;

    fn ent(session: u64, h: u32, lqpn: u32, remote_last: u8) -> Entry {
        Entry {
            session,
            qp_handle: h,
            tenant: "acme".into(),
            vni: 100,
            local_vip: Ipv4Addr::new(10, 0, 0, 1),
            local_qpn: lqpn,
            remote_vip: Ipv4Addr::new(10, 0, 0, remote_last),
            remote_qpn: 1000 + lqpn,
            peer_host: Ipv4Addr::new(192, 168, 1, remote_last),
            qp_type: QpType::Rc,
            state: State::Admitted,
            rule: "acme/db/ingress[0]".into(),
            ..Entry::default()
        }
    }

    fn key(session: u64, qp_handle: u32) -> QpKey {
        QpKey { session, qp_handle }
    }

    fn lk(qpn: u32) -> LocalKey {
        LocalKey {
            vni: 100,
            vip: Ipv4Addr::new(10, 0, 0, 1),
            qpn,
        }
    }

    fn drain(rx: &Receiver<Event>) -> Vec<(EventKind, QpKey)> {
        rx.try_iter().map(|e| (e.event, e.entry.key())).collect()
    }

    #[test]
    fn upsert_lookup_and_timestamps() {
        let mut t = Table::new();
        assert!(t.is_empty());
        assert_eq!(t.upsert(ent(1, 1, 17, 2)), Ok(Upsert::New));
        assert_eq!(t.upsert(ent(1, 1, 17, 2)), Ok(Upsert::Unchanged));
        let created = t.get(key(1, 1)).unwrap().created_ms;
        assert!(created > 0);
        let mut e = ent(1, 1, 17, 2);
        e.state = State::Established;
        e.created_ms = 1; // ignored: the table owns timestamps
        assert_eq!(t.upsert(e), Ok(Upsert::Updated));
        let got = t.get(key(1, 1)).unwrap();
        assert_eq!(got.created_ms, created);
        assert!(got.updated_ms >= created);
        assert_eq!(got.state, State::Established);
        assert_eq!(t.get_local(lk(17)).unwrap().key(), key(1, 1));
        assert!(t.get(key(1, 2)).is_none());
        assert!(t.get_local(lk(18)).is_none());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn strings_are_interned() {
        let mut t = Table::new();
        t.upsert(ent(1, 1, 17, 2)).unwrap();
        t.upsert(ent(1, 2, 18, 2)).unwrap();
        let (a, b) = (t.get(key(1, 1)).unwrap(), t.get(key(1, 2)).unwrap());
        assert!(Arc::ptr_eq(&a.tenant, &b.tenant));
        assert!(Arc::ptr_eq(&a.rule, &b.rule));
    }

    #[test]
    fn local_key_change_and_stale_qpn_reuse() {
        let mut t = Table::new();
        let rx = t.subscribe(16);
        t.upsert(ent(1, 1, 17, 2)).unwrap();
        // Same QP, new local QPN: the secondary index follows.
        t.upsert(ent(1, 1, 19, 2)).unwrap();
        assert!(t.get_local(lk(17)).is_none());
        assert_eq!(t.get_local(lk(19)).unwrap().key(), key(1, 1));
        // Another QP claims QPN 19: the old entry is stale and destroyed.
        t.upsert(ent(2, 5, 19, 3)).unwrap();
        assert_eq!(t.len(), 1);
        assert!(t.get(key(1, 1)).is_none());
        assert_eq!(t.get_local(lk(19)).unwrap().key(), key(2, 5));
        assert_eq!(
            drain(&rx),
            vec![
                (EventKind::New, key(1, 1)),
                (EventKind::Update, key(1, 1)),
                (EventKind::Destroy, key(1, 1)),
                (EventKind::New, key(2, 5)),
            ]
        );
    }

    #[test]
    fn remove_by_key_and_local() {
        let mut t = Table::new();
        for h in 0..4 {
            t.upsert(ent(1, h, 100 + h, 2)).unwrap();
        }
        assert_eq!(t.remove(key(1, 2)).unwrap().local_qpn, 102);
        assert!(t.remove(key(1, 2)).is_none());
        assert_eq!(t.remove_local(lk(103)).unwrap().qp_handle, 3);
        assert!(t.remove_local(lk(103)).is_none());
        assert_eq!(t.len(), 2);
        // Freed slots are reused.
        t.upsert(ent(1, 9, 109, 2)).unwrap();
        assert_eq!(t.slots.high_water(), 4);
        let keys: Vec<_> = t.iter().map(|e| e.key()).collect();
        assert_eq!(keys, vec![key(1, 0), key(1, 1), key(1, 9)]);
        for k in keys {
            t.remove(k).unwrap();
        }
        assert!(t.is_empty() && t.slots.high_water() == 0 && t.by_local.is_empty());
    }

    #[test]
    fn session_cleanup_only_touches_that_session() {
        let mut t = Table::new();
        for s in 1..=3u64 {
            for h in 0..5 {
                t.upsert(ent(s, h, (s as u32) * 100 + h, 2)).unwrap();
            }
        }
        t.upsert(ent(2, u32::MAX, 299, 2)).unwrap();
        let rx = t.subscribe(64);
        let gone = t.remove_session(2);
        assert_eq!(gone.len(), 6);
        assert!(gone.iter().all(|e| e.session == 2));
        assert_eq!(gone.last().unwrap().qp_handle, u32::MAX);
        assert_eq!(t.len(), 10);
        assert!(t.iter().all(|e| e.session != 2));
        assert!(t.get_local(lk(201)).is_none());
        assert_eq!(t.get_local(lk(301)).unwrap().session, 3);
        let evs = drain(&rx);
        assert_eq!(evs.len(), 6);
        assert!(evs
            .iter()
            .all(|(k, q)| *k == EventKind::Destroy && q.session == 2));
        assert!(t.remove_session(2).is_empty());
        assert!(t.remove_session(u64::MAX).is_empty());
    }

    #[test]
    fn set_state_events() {
        let mut t = Table::new();
        t.upsert(ent(1, 1, 17, 2)).unwrap();
        let rx = t.subscribe(8);
        assert!(t.set_state(key(1, 1), State::Established));
        assert!(t.set_state(key(1, 1), State::Established));
        assert!(!t.set_state(key(1, 2), State::Closing));
        let evs: Vec<Event> = rx.try_iter().collect();
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].event, EventKind::Update);
        assert_eq!(evs[0].entry.state, State::Established);
        assert!(evs[0]
            .to_string()
            .starts_with(" [UPDATE] rdma rc tenant=acme"));
    }

    #[test]
    fn list_with_filters() {
        let mut t = Table::new();
        for s in 1..=3u64 {
            for h in 0..4u32 {
                let mut e = ent(s, h, (s as u32) * 100 + h, 2 + (h % 2) as u8);
                if h == 3 {
                    e.qp_type = QpType::Uc;
                    e.tenant = "globex".into();
                    e.vni = 200;
                }
                t.upsert(e).unwrap();
            }
        }
        let n = |f: Filter| t.list(&f).count();
        assert_eq!(n(Filter::new()), 12);
        assert_eq!(n(Filter::new().session(2)), 4);
        assert_eq!(n(Filter::new().session(4)), 0);
        assert_eq!(n(Filter::new().tenant("globex")), 3);
        assert_eq!(n(Filter::new().vni(100).session(1)), 3);
        assert_eq!(
            n(Filter::new().dst(Cidr::host(Ipv4Addr::new(10, 0, 0, 3)))),
            6
        );
        assert_eq!(n(Filter::new().qp_type(QpType::Uc)), 3);
        assert_eq!(n(Filter::new().sqpn(201)), 1);
        assert_eq!(n(Filter::new().qpn(1201)), 1);
        assert_eq!(n(Filter::new().state(State::Established)), 0);
        let keys: Vec<_> = t
            .list(&Filter::new().session(3))
            .map(|e| e.qp_handle)
            .collect();
        assert_eq!(keys, vec![0, 1, 2, 3]);
    }

    #[test]
    fn reevaluate_denies_updates_and_ignores() {
        let mut t = Table::new();
        for h in 0..6 {
            t.upsert(ent(1, h, 100 + h, 2 + h as u8)).unwrap();
        }
        let rx = t.subscribe(64);
        let new_rule: Arc<str> = "acme/db/ingress[1]".into();
        let denied = t.reevaluate(|e| match e.qp_handle % 3 {
            0 => Some(Decision::Deny),
            1 => Some(Decision::Allow(new_rule.clone())),
            _ => None,
        });
        let keys: Vec<_> = denied.iter().map(|e| e.qp_handle).collect();
        assert_eq!(keys, vec![0, 3]);
        assert!(denied.iter().all(|e| e.state == State::ResetByPolicy));
        assert_eq!(&*t.get(key(1, 1)).unwrap().rule, "acme/db/ingress[1]");
        assert_eq!(&*t.get(key(1, 2)).unwrap().rule, "acme/db/ingress[0]");
        assert_eq!(t.get(key(1, 2)).unwrap().state, State::Admitted);
        assert_eq!(drain(&rx).len(), 4); // 2 resets + 2 rule changes
                                         // Unchanged answers cause no events; still-denied entries come back.
        let again = t.reevaluate(|e| match e.qp_handle % 3 {
            0 => Some(Decision::Deny),
            1 => Some(Decision::Allow(new_rule.clone())),
            _ => None,
        });
        assert_eq!(again.len(), 2);
        assert!(drain(&rx).is_empty());
        // masqd removes what was denied.
        for e in denied.into_iter().chain(again) {
            t.remove(e.key());
        }
        assert_eq!(t.len(), 4);
        assert_eq!(drain(&rx).len(), 2); // events hold entries (and names) too
                                         // The old rule name stays interned while entries 2 and 5 use it.
        t.reevaluate(|_| None);
        assert!(t.strings.contains("acme/db/ingress[0]"));
        t.reevaluate(|_| Some(Decision::Allow(new_rule.clone())));
        assert!(!t.strings.contains("acme/db/ingress[0]"));
        assert!(t.reevaluate(|_| None).is_empty());
    }

    #[test]
    fn events_fan_out_and_drop_closed_or_slow_subscribers() {
        let mut t = Table::new();
        let a = t.subscribe(100);
        let b = t.subscribe(100);
        let slow = t.subscribe(1);
        t.upsert(ent(1, 1, 17, 2)).unwrap();
        drop(b);
        t.upsert(ent(1, 2, 18, 2)).unwrap();
        assert_eq!(t.subscriber_count(), 1);
        t.remove(key(1, 1)).unwrap();
        assert_eq!(
            drain(&a),
            vec![
                (EventKind::New, key(1, 1)),
                (EventKind::New, key(1, 2)),
                (EventKind::Destroy, key(1, 1)),
            ]
        );
        // The slow one got what fit, then was cut off.
        assert_eq!(slow.try_recv().unwrap().entry.key(), key(1, 1));
        assert_eq!(slow.try_recv(), Err(TryRecvError::Disconnected));
    }

    #[test]
    fn the_journal_keeps_every_event_until_taken() {
        let mut t = Table::new();
        t.upsert(ent(1, 1, 17, 2)).unwrap();
        assert!(t.take_journal().is_empty(), "off until enabled");
        t.enable_journal();
        for h in 0..10_000 {
            t.upsert(ent(2, h, 100 + h, 2)).unwrap();
        }
        t.remove(key(1, 1)).unwrap();
        let j = t.take_journal();
        assert_eq!(j.len(), 10_001, "never dropped, unlike a slow listener");
        assert_eq!(j[0].event, EventKind::New);
        assert_eq!(
            (j[10_000].event, j[10_000].entry.key()),
            (EventKind::Destroy, key(1, 1))
        );
        assert!(t.take_journal().is_empty());
    }

    #[test]
    fn event_json_is_flat() {
        let ev = Event {
            event: EventKind::Destroy,
            entry: ent(1, 1, 17, 2),
        };
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(v["event"], "DESTROY");
        assert_eq!(v["local_qpn"], 17);
        let back: Event = serde_json::from_value(v).unwrap();
        assert_eq!(back, ev);
    }

    #[test]
    fn entries_are_counted_per_local_address_as_they_come_and_go() {
        let mut t = Table::new();
        let vip = Ipv4Addr::new(10, 0, 0, 1);
        t.upsert(ent(1, 1, 17, 2)).unwrap();
        t.upsert(ent(1, 2, 18, 3)).unwrap();
        t.upsert(ent(2, 1, 19, 2)).unwrap();
        assert_eq!(t.held_by(100, vip), 3);
        let mut moved = ent(2, 1, 19, 2);
        moved.local_vip = Ipv4Addr::new(10, 0, 0, 9);
        t.upsert(moved).unwrap();
        assert_eq!(t.held_by(100, vip), 2);
        assert_eq!(t.held_by(100, Ipv4Addr::new(10, 0, 0, 9)), 1);
        t.remove(key(1, 1)).unwrap();
        t.remove_session(2);
        assert_eq!(t.held_by(100, vip), 1);
        assert_eq!(t.held_by(100, Ipv4Addr::new(10, 0, 0, 9)), 0);
    }

    #[test]
    fn limit_is_enforced_without_side_effects() {
        let mut t = Table::with_max(2);
        t.upsert(ent(1, 1, 17, 2)).unwrap();
        t.upsert(ent(1, 2, 18, 2)).unwrap();
        assert_eq!(t.upsert(ent(1, 3, 19, 2)), Err(TableFull { max: 2 }));
        assert_eq!(t.len(), 2);
        // Updates and stale replacements still work when full.
        let mut e = ent(1, 2, 18, 2);
        e.state = State::Closing;
        assert_eq!(t.upsert(e), Ok(Upsert::Updated));
        assert_eq!(t.upsert(ent(2, 1, 18, 2)), Ok(Upsert::New));
        assert_eq!(t.len(), 2);
        assert_eq!(Table::with_max(usize::MAX).max(), u32::MAX as usize);
    }

    #[test]
    fn ud_destinations_share_a_qpn_but_are_not_in_the_local_index() {
        let mut t = Table::new();
        let rx = t.subscribe(16);
        // One UD QP (QPN 40), two address handles 7 and 8 to two peers.
        for (h, peer) in [(7, 2), (8, 3)] {
            let mut e = ent(1, h, 40, peer);
            e.qp_type = QpType::Ud;
            e.remote_qpn = 0;
            assert_eq!(t.upsert(e), Ok(Upsert::New));
        }
        assert_eq!(t.len(), 2);
        assert!(t.get_local(lk(40)).is_none());
        assert_eq!(drain(&rx).len(), 2); // no stale-QPN destroy
                                         // A type change moves an entry out of the index and back.
        t.upsert(ent(1, 1, 17, 2)).unwrap();
        let mut e = ent(1, 1, 17, 2);
        e.qp_type = QpType::Ud;
        t.upsert(e).unwrap();
        assert!(t.get_local(lk(17)).is_none());
        t.upsert(ent(1, 1, 17, 2)).unwrap();
        assert_eq!(t.get_local(lk(17)).unwrap().qp_handle, 1);
        assert_eq!(t.remove_session(1).len(), 3);
        assert!(t.by_local.is_empty());
    }

    #[test]
    fn slot_is_compact() {
        assert_eq!(
            std::mem::size_of::<Option<Entry>>(),
            std::mem::size_of::<Entry>()
        );
        // 88 bytes, plus 8 for the CM side (role and ports) since RDMA CM,
        // plus 16 for the rail's shared name since multi-rail hosts.
        assert!(
            std::mem::size_of::<Entry>() <= 112,
            "{}",
            std::mem::size_of::<Entry>()
        );
    }
}
