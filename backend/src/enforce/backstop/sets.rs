//! The backstop's sets at run time: mirroring the RConntrack table's
//! events and the QPs masqd sees into them, the queue of element updates
//! and its flush, the reconcile after a restart, the counters, and the
//! verbs pipelines' `Guard`.

use super::rules::{
    add, bump, conn_in, del, del_ud, drop_ref, egress, egress_pair, endpoint_of, ingress_pair,
    lock, tenant_qpn, ud_from, ud_host, ud_local_qpn,
};
use super::{Backstop, TABLE};
use crate::kernel::nft_set::Change;
use crate::pipeline::ports::Guard;
use rconntrack::{Event, EventKind, QpType, State};
use serde_json::Value;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::Duration;
use tracing::{debug, info, warn};

impl Backstop {
    /// Mirror table events into the sets. An entry passes while it is
    /// ADMITTED or ESTABLISHED; RESET_BY_POLICY cuts it at once, before
    /// masqd even moves the QP to ERROR.
    pub fn apply(&self, events: &[Event]) {
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
                    .map(|ep| (ep, e.peer_host));
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
                .map(|ep| (ep, egress_pair(e), ingress_pair(e)));
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
        self.submit(cmd);
    }

    /// A tenant QP masqd has seen (its first MODIFY_QP): from now on only
    /// admitted peers reach it.
    pub fn qp_seen(&self, qpn: u32) {
        let mut el = self.lock();
        if bump(&mut el.tenant_qpns, qpn) {
            self.submit(vec![Change::Add(tenant_qpn(qpn))]);
        }
    }

    /// As `qp_seen`, for a QP whose admission follows at once: its update
    /// waits in the queue for the admission's, so both go to the kernel in
    /// one transaction (one libnftables call costs milliseconds under
    /// emulation, and the admission waits for it).
    pub fn qp_seen_with_admission(&self, qpn: u32) {
        let mut el = self.lock();
        if bump(&mut el.tenant_qpns, qpn) {
            let mut q = lock(&self.pending);
            q.cmds.push(vec![Change::Add(tenant_qpn(qpn))]);
            q.last += 1;
        }
    }

    /// A UD QP of a local endpoint in `vni` is up (at RTR) or gone: from
    /// now on datagrams reach it only from UD QPs announced in its VNI.
    pub fn ud_local(&self, vni: u32, qpn: u32, up: bool) {
        let mut el = self.lock();
        let mut cmd = Vec::new();
        let had = if up {
            el.ud_local.insert(qpn, vni)
        } else {
            el.ud_local.remove(&qpn)
        };
        if had == Some(vni) && up {
            return;
        }
        if let Some(old) = had {
            let [udq, ud_qpns] = ud_local_qpn(old, qpn);
            cmd.push(Change::Delete(udq));
            if !up {
                cmd.push(Change::Delete(ud_qpns));
            }
        }
        if up {
            cmd.extend(ud_local_qpn(vni, qpn).map(Change::Add));
        }
        self.submit(cmd);
    }

    /// Host `host`'s masqd announced its UD QP `qpn` in `vni` (or its
    /// end): its datagrams may reach this host's UD QPs of that VNI. A VNI
    /// with no endpoint here has no chain, and nothing to reach.
    pub fn ud_remote(&self, host: Ipv4Addr, qpn: u32, vni: u32, up: bool) {
        let mut el = self.lock();
        let served = el.endpoints.values().any(|e| e.at.0 == vni);
        let mut cmd = Vec::new();
        let had = el.ud_remote.get(&(host, qpn)).copied();
        if up && had == Some(vni) {
            return;
        }
        if let Some(old) = had.filter(|&old| up || old == vni) {
            el.ud_remote.remove(&(host, qpn));
            // A map's element is deleted by its key alone.
            let mut e = ud_from(host, qpn, old);
            e.jump = None;
            cmd.push(Change::Delete(e));
        }
        if up && served {
            el.ud_remote.insert((host, qpn), vni);
            cmd.push(Change::Add(ud_from(host, qpn, vni)));
        }
        self.submit(cmd);
    }

    /// The QP is destroyed (or its session ended).
    pub fn qp_gone(&self, qpn: u32) {
        let mut el = self.lock();
        if drop_ref(&mut el.tenant_qpns, qpn) {
            self.submit(vec![Change::Delete(tenant_qpn(qpn))]);
        }
    }

    /// Queue a set update (called under the elements lock, so updates are
    /// queued in the order the table changed). One transaction costs a
    /// system call and the kernel's commit, so
    /// `flush_updates` runs them in a thread of their own, many per
    /// transaction, and an admission waits for its own (`wait_applied`): a
    /// new connection whose first packets were dropped relies on rxe's
    /// retries, which a loaded host can outlast (the connection then fails
    /// with a retry error). A removed one passes a moment longer (its QP is
    /// already in ERROR for apps that use libmasq).
    fn submit(&self, cmd: Vec<Change>) {
        if cmd.is_empty() {
            return;
        }
        let mut q = lock(&self.pending);
        q.cmds.push(cmd);
        q.last += 1;
        drop(q);
        self.wake.notify_one();
    }

    /// Block until every update queued so far is in the kernel, or
    /// `timeout` passed; false on timeout. Waiting batches: the admissions
    /// of many QPs at once share one transaction.
    pub fn wait_applied(&self, timeout: Duration) -> bool {
        let target = lock(&self.pending).last;
        let applied = lock(&self.applied);
        let (applied, _) = self
            .applied_cv
            .wait_timeout_while(applied, timeout, |a| *a < target)
            .unwrap_or_else(|e| e.into_inner());
        *applied >= target
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
    pub fn flush_updates(&self, timeout: Duration) {
        {
            let q = lock(&self.pending);
            if q.cmds.is_empty() {
                drop(
                    self.wake
                        .wait_timeout(q, timeout)
                        .unwrap_or_else(|e| e.into_inner()),
                );
            }
        }
        let _sending = lock(&self.sending);
        let (cmds, upto) = {
            let mut q = lock(&self.pending);
            (std::mem::take(&mut q.cmds), q.last)
        };
        if cmds.is_empty() {
            return;
        }
        self.run_updates(&cmds);
        self.mark_applied(upto);
    }

    /// Queued updates: all in one transaction, or one by one if that fails.
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
    pub fn reconcile(&self) {
        // `sending` first: waiting for it must not hold the elements lock.
        let _sending = lock(&self.sending);
        let el = self.lock();
        let (queued, upto) = {
            let mut q = lock(&self.pending);
            (std::mem::take(&mut q.cmds), q.last)
        };
        let t = format!("inet {TABLE}");
        let mut cmd = format!(
            "flush set {t} conn_in\nflush set {t} tenant_qpns\n\
             flush set {t} ud_qpns\nflush map {t} ud_from\n"
        );
        let vnis: std::collections::BTreeSet<u32> = el.endpoints.values().map(|e| e.at.0).collect();
        for vni in &vnis {
            let _ = writeln!(cmd, "flush set {t} udq_{vni}");
        }
        let mut add = |e| cmd.push_str(&Change::Add(e).nft_command(&t));
        for (&qpn, &vni) in &el.ud_local {
            if vnis.contains(&vni) {
                ud_local_qpn(vni, qpn).into_iter().for_each(&mut add);
            }
        }
        for (&(host, qpn), &vni) in &el.ud_remote {
            if vnis.contains(&vni) {
                add(ud_from(host, qpn, vni));
            }
        }
        for id in el.endpoints.keys() {
            let _ = writeln!(cmd, "flush set {t} eg_{id}\nflush set {t} ud_{id}");
        }
        let mut add = |e| cmd.push_str(&Change::Add(e).nft_command(&t));
        for (id, hosts) in &el.ud {
            for &host in hosts.keys() {
                add(ud_host(id, host));
            }
        }
        for (id, pairs) in &el.egress {
            for &pair in pairs.keys() {
                add(egress(id, pair));
            }
        }
        for &pair in el.conn_in.keys() {
            add(conn_in(pair));
        }
        for &q in el.tenant_qpns.keys() {
            add(tenant_qpn(q));
        }
        match self.nft.run(&cmd) {
            Ok(_) => info!(
                connections = el.conn_in.len(),
                qps = el.tenant_qpns.len(),
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

    /// The drop counters: (name, packets, bytes).
    pub fn counters(&self) -> Result<Vec<(String, u64, u64)>, String> {
        let out = self.nft.run(&format!("list counters table inet {TABLE}"))?;
        let v: Value = serde_json::from_str(&out).map_err(|e| format!("nft JSON: {e}"))?;
        let mut c = Vec::new();
        for item in v["nftables"].as_array().into_iter().flatten() {
            let k = &item["counter"];
            if let Some(name) = k["name"].as_str() {
                c.push((
                    name.to_string(),
                    k["packets"].as_u64().unwrap_or(0),
                    k["bytes"].as_u64().unwrap_or(0),
                ));
            }
        }
        Ok(c)
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

/// What the verbs pipelines ask of the backstop: its own methods.
impl Guard for Backstop {
    fn qp_seen(&self, qpn: u32) {
        Backstop::qp_seen(self, qpn)
    }
    fn qp_seen_with_admission(&self, qpn: u32) {
        Backstop::qp_seen_with_admission(self, qpn)
    }
    fn qp_gone(&self, qpn: u32) {
        Backstop::qp_gone(self, qpn)
    }
    fn wait_applied(&self, timeout: Duration) -> bool {
        Backstop::wait_applied(self, timeout)
    }
    fn ud_remote(&self, host: Ipv4Addr, qpn: u32, vni: u32, up: bool) {
        Backstop::ud_remote(self, host, qpn, vni, up)
    }
}
