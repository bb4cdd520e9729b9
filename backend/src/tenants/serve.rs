//! An endpoint's apps: accept each one that lives in the endpoint's
//! network namespace, have the backstop filter its cgroup, run its session
//! and forget what it held when it goes; and the endpoint's sysfs view.

use crate::endpoints::endpoint::Endpoint;
use crate::endpoints::usage::{fd_room, Slot, What};
use crate::error::Result;
use crate::pipeline::ports::Removal;
use crate::pipeline::session::Session;
use crate::run::now_secs;
use crate::tenants::cgroups::same_netns;
use crate::tenants::dispatch;
use crate::tenants::parts::Parts;
use crate::tenants::sessions::SessionView;
use crate::transport::seqpacket::{Conn, Listener};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use tracing::{debug, info, warn};

/// The sysfs view of an endpoint, in its socket directory, unless another
/// endpoint shares that directory (a configured `socket:` path can): `None`
/// then. A view that cannot be made is an error, and the endpoint is not
/// to be served: its apps would read the host's sysfs.
pub fn sysfs_view_for(
    socket: &Path,
    others: &[std::path::PathBuf],
    host: &crate::kernel::host::HostDevice,
) -> crate::error::Result<Option<crate::kernel::sysfs_view::View>> {
    let Some(dir) = socket.parent() else {
        return Ok(None);
    };
    if others
        .iter()
        .any(|o| o != socket && o.parent() == Some(dir))
    {
        warn!(dir = %dir.display(), "endpoints share a socket directory: no sysfs view");
        return Ok(None);
    }
    crate::kernel::sysfs_view::View::new(dir, Path::new("/sys"), &host.name, host.port)
        .map(Some)
        .map_err(|e| e.context("its sysfs view cannot be made"))
}

/// The sysfs view of a further device (`deviceOf`) of the apps whose
/// socket is `socket`, beside their first device's, if that has one.
pub fn further_view_for(
    socket: &Path,
    primary_view: bool,
    host: &crate::kernel::host::HostDevice,
) -> Option<crate::kernel::sysfs_view::View> {
    let dir = socket.parent().filter(|_| primary_view)?;
    Some(crate::kernel::sysfs_view::View::further(
        dir,
        Path::new("/sys"),
        &host.name,
        host.port,
    ))
}

/// Accept the endpoint's apps, each in a session thread of its own,
/// until masqd stops or the endpoint goes.
pub fn accept_loop(parts: Arc<Parts>, ep: Arc<Endpoint>, listener: Arc<Listener>) {
    loop {
        let conn = match listener.accept() {
            Ok(c) => c,
            Err(e) => {
                if parts.run().is_stopping() || ep.is_removed() {
                    return;
                }
                warn!(endpoint = %ep.cfg.name, "accept failed: {e}");
                thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        if parts.run().is_stopping() || ep.is_removed() {
            return;
        }
        let peer = match conn.peer() {
            Ok(p) => p,
            Err(e) => {
                warn!(endpoint = %ep.cfg.name, "cannot identify peer: {e}");
                continue;
            }
        };
        let pid = peer.pid;
        if let Err(why) = same_netns(pid, &ep.cfg.netns) {
            ep.refused_connections.fetch_add(1, Ordering::Relaxed);
            warn!(endpoint = %ep.cfg.name, pid, "refused connection: {why}");
            continue;
        }
        let slot = match admit_session(&parts, &ep, &conn) {
            Ok(s) => s,
            Err(r) => {
                warn!(endpoint = %ep.cfg.name, pid, errno = r.errno(), "session refused: {}", r.why());
                // Only this endpoint's accepts wait for its refused app.
                crate::transport::refuse_first(&conn, r.errno(), REFUSE_WAIT);
                continue;
            }
        };
        // The reads of /proc/<pid> above were of the app that connected
        // only if it still runs now (else its pid may be another's). On a
        // kernel without SO_PEERPIDFD this says yes and the race stays.
        if !peer.still_running() {
            ep.refused_connections.fetch_add(1, Ordering::Relaxed);
            warn!(endpoint = %ep.cfg.name, pid, "refused connection: the connecting process exited before it was identified");
            continue;
        }
        let id = parts.sessions().next_id();
        let (parts, ep) = (parts.clone(), ep.clone());
        let spawned = thread::Builder::new()
            .name(format!("session-{id}"))
            .spawn(move || run_session(parts, ep, conn, id, pid, slot));
        if let Err(e) = spawned {
            warn!("cannot start a session thread: {e}");
        }
    }
}

/// The session's thread never preempts a running thread when it wakes
/// (SCHED_BATCH; its share of the CPU is unchanged). The app's posted
/// notices (QP_MOVED, QP_DESTROYED) then wait for the app to block, as it
/// does on its next request, and are handled in the same turn: on a busy
/// CPU each one cost the app two context switches ahead of that request
/// (docs/performance.md). A request the app waits for is served as soon
/// as the app sleeps; behind another busy thread of the same CPU, at the
/// end of that thread's time slice.
fn yield_to_the_app() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: the calling thread (0) and a valid parameter.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) } != 0 {
        debug!(
            "SCHED_BATCH refused ({}): notices preempt the app",
            std::io::Error::last_os_error()
        );
    }
}

/// How long a refused app's first request is waited for, to answer it.
const REFUSE_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// A session slot for one more app of `ep` (a thread, its connection, a
/// copy of it and its device: three descriptors), within `tenantLimits`:
/// EMFILE past its sessions or past masqd's descriptor reserve.
fn admit_session(parts: &Parts, ep: &Arc<Endpoint>, conn: &Conn) -> Result<Slot> {
    let limits = parts.registry().limits();
    let slot = Slot::take(&ep.usage, What::Sessions, limits.sessions)?;
    fd_room(&ep.usage, conn.as_raw_fd(), 2, limits.fd_reserve)?;
    Ok(slot)
}

/// Serve one app until it goes; its session `slot` is given back then.
fn run_session(parts: Arc<Parts>, ep: Arc<Endpoint>, conn: Conn, id: u64, pid: i32, _slot: Slot) {
    parts.sessions().opened(
        id,
        &conn,
        SessionView {
            endpoint: ep.cfg.name.clone(),
            tenant: ep.cfg.tenant.clone(),
            pid,
            app: String::new(),
            started: now_secs(),
            requests: 0,
            qps: BTreeMap::new(),
        },
    );
    let span = tracing::info_span!("session", id, endpoint = %ep.cfg.name, pid);
    let _enter = span.enter();
    debug!("connected");
    yield_to_the_app();
    let mut sess = Session::new(id, pid, ep.clone());
    dispatch::serve(&parts, &mut sess, &conn);
    parts.sessions().closed(id);
    parts.cm().session_gone(id);
    parts
        .admitted()
        .session_gone(id, 2 * parts.run().audit_interval());
    for e in parts.admission().table_of_gone_qps().remove_session(id) {
        debug!(qpn = e.local_qpn, "connection untracked: app gone");
    }
    if let Some(b) = parts.admission().backstop() {
        let local = parts.rail(&sess.ep).underlay.ip;
        for qp in sess.qps.values().filter(|q| q.guarded) {
            if qp.qp_type == "UD" {
                b.ud_local(local, sess.ep.cfg.vni, qp.qpn, false);
            }
            b.qp_gone(local, qp.qpn, Removal::Gone);
        }
    }
    for qp in sess
        .qps
        .values()
        .filter(|q| q.qp_type == "UD" && q.owner_checked)
    {
        crate::tenants::parts::announce(&parts, &sess.ep, qp.qpn, false);
    }
    if !sess.qps.is_empty() {
        info!("app gone; forgetting {} QP(s)", sess.qps.len());
    } else {
        debug!("closed");
    }
}

#[cfg(test)]
#[path = "serve_tests.rs"]
mod tests;
