//! Whether the QPN an app claims is its own, by the kernel's word.
//!
//! MODIFY_QP and RESYNC_QP name a QP by handle (which the kernel resolves
//! in the app's own uverbs file) and by QPN (which uverbs cannot read
//! back, and which masqd records, tracks and hands to the backstop). The
//! kernel's resource tracker knows each QPN's type and creating task, so
//! the claim is checked there: the QPN must exist on the served device
//! (else ENOENT, as for a forged handle), be a user QP created by a thread
//! of the calling process, and have the claimed type (else EPERM: the
//! object exists, but the app may not name it so).
//!
//! Both pids are in masqd's pid namespace: SO_PEERCRED and rdma netlink
//! translate into the reader's namespace, so a tenant in its own pid
//! namespace is compared correctly as long as masqd runs in an ancestor
//! namespace (the host's).

use crate::error::{refuse, Result};
use crate::kernel::rdma_nl::{Lookup, QpInfo};

/// The claim holds, or the kernel cannot tell yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Owned(QpInfo),
    /// In RESET, before any port: the kernel answers only once a modify
    /// set one (see `RdmaNl::qp`).
    NoPortYet,
}

/// `lookup` is the kernel's answer for `qpn`; `session_pid` the app's
/// process (SO_PEERCRED); `tgid_of` maps the kernel's task id to its
/// process. Err: the refusal, with its errno.
pub fn judge(
    lookup: Lookup,
    qpn: u32,
    claimed_type: u32,
    session_pid: i32,
    tgid_of: impl Fn(u32) -> Option<i32>,
) -> Result<Verdict> {
    let q = match lookup {
        Lookup::Missing => {
            return Err(refuse(
                libc::ENOENT,
                format!("no QP {qpn:#x} on the device (the kernel has none)"),
            ))
        }
        Lookup::NoPort => return Ok(Verdict::NoPortYet),
        Lookup::Found(q) => q,
    };
    if let Some(k) = &q.kern_name {
        return Err(refuse(
            libc::EPERM,
            format!("QP {qpn:#x} is the kernel's ({k}), not the app's"),
        ));
    }
    let Some(task) = q.pid else {
        // The creating task has exited: nothing ties the QP to this app.
        return Err(refuse(
            libc::EPERM,
            format!("QP {qpn:#x}: the kernel names no live creator"),
        ));
    };
    // The app's main thread is its own thread group: no lookup for it.
    let tgid = if i32::try_from(task) == Ok(session_pid) {
        Some(session_pid)
    } else {
        tgid_of(task)
    };
    match tgid {
        Some(p) if p == session_pid => {}
        Some(p) => {
            return Err(refuse(
                libc::EPERM,
                format!("QP {qpn:#x} belongs to pid {p}, not to the app (pid {session_pid})"),
            ))
        }
        None => {
            return Err(refuse(
                libc::EPERM,
                format!("QP {qpn:#x}: its creator (task {task}) is gone"),
            ))
        }
    }
    if u32::from(q.qp_type) != claimed_type {
        return Err(refuse(
            libc::EPERM,
            format!(
                "QP {qpn:#x} is {}, not the claimed {}",
                crate::kernel::ibv::type_name(q.qp_type),
                crate::kernel::ibv::type_name(claimed_type.min(255) as u8)
            ),
        ));
    }
    Ok(Verdict::Owned(q))
}

/// A task id -> its thread group id, from /proc (the kernel reports the
/// task that created the QP, which may be any thread of the process).
pub fn tgid_of(tid: u32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(pid: Option<u32>, qp_type: u8) -> Lookup {
        Lookup::Found(QpInfo {
            lqpn: 0x11,
            port: Some(1),
            qp_type,
            state: 1,
            pid,
            kern_name: None,
            rqpn: None,
            pdn: Some(1),
        })
    }

    /// Task 500 is the app (pid 500); 501 one of its threads; 600 another
    /// process.
    fn tgid(t: u32) -> Option<i32> {
        match t {
            500 | 501 => Some(500),
            600 => Some(600),
            _ => None,
        }
    }

    #[test]
    fn the_apps_own_qp_of_the_claimed_type_passes_from_any_thread() {
        assert!(matches!(
            judge(found(Some(500), 2), 0x11, 2, 500, tgid),
            Ok(Verdict::Owned(_))
        ));
        assert!(matches!(
            judge(found(Some(501), 2), 0x11, 2, 500, tgid),
            Ok(Verdict::Owned(_))
        ));
    }

    #[test]
    fn the_apps_main_thread_needs_no_lookup() {
        let no_lookup = |t: u32| -> Option<i32> { panic!("task {t} looked up") };
        assert!(matches!(
            judge(found(Some(500), 2), 0x11, 2, 500, no_lookup),
            Ok(Verdict::Owned(_))
        ));
    }

    #[test]
    fn a_qpn_the_kernel_does_not_have_is_enoent() {
        let e = judge(Lookup::Missing, 0x11, 2, 500, tgid).unwrap_err();
        assert_eq!(e.errno(), libc::ENOENT);
    }

    #[test]
    fn another_process_a_kernel_qp_a_dead_creator_or_another_type_is_eperm() {
        for (lookup, t) in [
            (found(Some(600), 2), 2),
            (found(None, 2), 2),
            (found(Some(777), 2), 2),
            (found(Some(500), 4), 2),
        ] {
            let e = judge(lookup.clone(), 0x11, t, 500, tgid).unwrap_err();
            assert_eq!(e.errno(), libc::EPERM, "{lookup:?}: {}", e.why());
        }
        let mut k = QpInfo {
            lqpn: 1,
            kern_name: Some("ib_core".into()),
            ..Default::default()
        };
        k.qp_type = 1;
        let e = judge(Lookup::Found(k), 1, 1, 500, tgid).unwrap_err();
        assert_eq!(e.errno(), libc::EPERM);
    }

    #[test]
    fn a_qp_without_a_port_cannot_be_judged_yet() {
        assert_eq!(
            judge(Lookup::NoPort, 0x11, 2, 500, tgid),
            Ok(Verdict::NoPortYet)
        );
    }
}
