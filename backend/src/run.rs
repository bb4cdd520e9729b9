//! masqd's run: since when it runs and whether it is stopping, which
//! every thread looks at, and two helpers every part uses.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub struct Run {
    started: Instant,
    stopping: AtomicBool,
    audit_interval: Duration,
}

impl Run {
    pub fn new(audit_interval: Duration) -> Run {
        Run {
            started: Instant::now(),
            stopping: AtomicBool::new(false),
            audit_interval,
        }
    }

    /// masqd is stopping: threads end at their next look.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn audit_interval(&self) -> Duration {
        self.audit_interval
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking session thread must not take the daemon down with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
