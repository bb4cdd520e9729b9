//! The live sessions: what the control socket shows of each, their
//! connections (closable by an endpoint's removal or masqd's stop) and
//! their uverbs files (so a policy change can reset their QPs).

use crate::enforce::admission::Admission;
use crate::kernel::uverbs;
use crate::pipeline::session::QpRecord;
use crate::run::lock;
use crate::transport::seqpacket::Conn;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tracing::{debug, info, warn};

/// What the control socket shows of a live session.
#[derive(Clone)]
pub struct SessionView {
    pub endpoint: String,
    pub tenant: String,
    pub pid: i32,
    pub app: String,
    pub started: u64,
    /// Requests received: flat while an app only posts and polls.
    pub requests: u64,
    pub qps: BTreeMap<u32, QpRecord>,
}

pub struct Sessions {
    views: Mutex<BTreeMap<u64, SessionView>>,
    conns: Mutex<BTreeMap<u64, Conn>>,
    /// Each session's uverbs file, so policy can reset its QPs.
    fds: Mutex<BTreeMap<u64, Arc<OwnedFd>>>,
    next: AtomicU64,
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions {
            views: Mutex::new(BTreeMap::new()),
            conns: Mutex::new(BTreeMap::new()),
            fds: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(1),
        }
    }
}

impl Sessions {
    pub fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst)
    }

    /// A session starts: shown by the control socket from now on, and
    /// closable (`conn`) by an endpoint's removal or masqd's stop.
    pub fn opened(&self, id: u64, conn: &Conn, view: SessionView) {
        if let Ok(c) = conn.try_clone() {
            lock(&self.conns).insert(id, c);
        }
        lock(&self.views).insert(id, view);
    }

    /// The session serves another device of its app's: endpoint `name`'s.
    pub fn moved(&self, id: u64, name: &str) {
        if let Some(v) = lock(&self.views).get_mut(&id) {
            v.endpoint = name.to_string();
        }
    }

    pub fn closed(&self, id: u64) {
        lock(&self.views).remove(&id);
        lock(&self.conns).remove(&id);
        lock(&self.fds).remove(&id);
    }

    /// Whether session's app has exited, even if its session thread has
    /// not read the hang-up yet (the CM then frees its ports at once, as
    /// the kernel does before the app's parent can see it exit).
    pub fn app_gone(&self, session: u64) -> bool {
        if !lock(&self.views).contains_key(&session) {
            return true; // ended, or ending
        }
        lock(&self.conns)
            .get(&session)
            .is_some_and(Conn::peer_closed)
    }

    /// The process behind an open session.
    pub fn pid(&self, session: u64) -> Option<i32> {
        lock(&self.views).get(&session).map(|v| v.pid)
    }

    pub fn register_fd(&self, session: u64, fd: Arc<OwnedFd>) {
        lock(&self.fds).insert(session, fd);
    }

    /// The uverbs file session `session` registered at OPEN_DEVICE.
    pub fn fd(&self, session: u64) -> Option<Arc<OwnedFd>> {
        lock(&self.fds).get(&session).cloned()
    }

    /// `f` sees every session's view, under the views' lock.
    pub fn with_views<T>(&self, f: impl FnOnce(&BTreeMap<u64, SessionView>) -> T) -> T {
        f(&lock(&self.views))
    }

    /// masqd stops: every session's thread sees its connection end.
    pub fn shutdown_all(&self) {
        for conn in lock(&self.conns).values() {
            conn.shutdown();
        }
    }

    /// Move the QPs of these connections to ERROR and stop tracking them.
    pub fn reset(
        &self,
        admission: &Admission,
        driver_id: u32,
        entries: &[rconntrack::Entry],
        why: &str,
    ) -> usize {
        let mut done = 0;
        for e in entries {
            let fd = lock(&self.fds).get(&e.session).cloned();
            if e.qp_type == rconntrack::QpType::Ud {
                // A UD entry is an address handle, keyed by its handle.
                match fd.map(|fd| uverbs::destroy_ah(fd.as_fd(), driver_id, e.qp_handle)) {
                    Some(Ok(())) => {
                        done += 1;
                        info!(tenant = %e.tenant, src = %e.local_vip, dst = %e.remote_vip,
                              "UD address handle destroyed: {why}");
                    }
                    Some(Err(err)) => warn!(ah = e.qp_handle, "cannot destroy the AH: {err}"),
                    None => debug!(ah = e.qp_handle, "session already gone"),
                }
                admission.table().remove(e.key());
                continue;
            }
            let cmd = uverbs::ModifyQp {
                qp_handle: e.qp_handle,
                attr_mask: 1, // IBV_QP_STATE
                qp_state: 6,  // IBV_QPS_ERR
                ..Default::default()
            };
            match fd.map(|fd| uverbs::modify_qp(fd.as_fd(), driver_id, &cmd)) {
                Some(Ok(())) => {
                    done += 1;
                    info!(tenant = %e.tenant, src = %e.local_vip, sqpn = e.local_qpn,
                          dst = %e.remote_vip, dqpn = e.remote_qpn, "QP moved to ERROR: {why}");
                }
                Some(Err(err)) => warn!(qpn = e.local_qpn, "cannot reset QP: {err}"),
                None => debug!(qpn = e.local_qpn, "session already gone"),
            }
            admission.table().remove(e.key());
        }
        done
    }

    /// Keep the control socket's view of a session current: its counters,
    /// and the QPs the last request changed (`touched`), not the whole map.
    pub fn publish(
        &self,
        id: u64,
        app: &str,
        requests: u64,
        qps: &BTreeMap<u32, QpRecord>,
        touched: &[u32],
    ) {
        if let Some(v) = lock(&self.views).get_mut(&id) {
            if v.app != app {
                v.app = app.to_string();
            }
            v.requests = requests;
            for h in touched {
                match qps.get(h) {
                    Some(q) => v.qps.insert(*h, q.clone()),
                    None => v.qps.remove(h),
                };
            }
        }
    }

    /// Move every QP of the endpoint's sessions to ERROR and close the
    /// sessions (their threads clean up as after an app's exit).
    pub fn close_endpoint(&self, endpoint: &str, driver_id: u32) -> (usize, usize) {
        let mine: Vec<(u64, Vec<u32>)> = lock(&self.views)
            .iter()
            .filter(|(_, s)| s.endpoint == endpoint)
            .map(|(id, s)| (*id, s.qps.values().map(|q| q.handle).collect()))
            .collect();
        let mut reset = 0;
        for (id, handles) in &mine {
            let fd = lock(&self.fds).get(id).cloned();
            for &h in handles {
                let cmd = uverbs::ModifyQp {
                    qp_handle: h,
                    attr_mask: 1, // IBV_QP_STATE
                    qp_state: 6,  // IBV_QPS_ERR
                    ..Default::default()
                };
                match fd
                    .as_ref()
                    .map(|fd| uverbs::modify_qp(fd.as_fd(), driver_id, &cmd))
                {
                    Some(Ok(())) => reset += 1,
                    Some(Err(e)) => debug!(session = id, handle = h, "cannot reset QP: {e}"),
                    None => {}
                }
            }
            if let Some(c) = lock(&self.conns).get(id) {
                c.shutdown();
            }
        }
        (mine.len(), reset)
    }
}

#[cfg(test)]
#[path = "sessions_tests.rs"]
mod tests;
