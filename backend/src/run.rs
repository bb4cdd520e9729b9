//! masqd's run: since when it runs, whether it is stopping, which every
//! thread looks at, and whether its loops still make progress (the
//! heartbeats the systemd watchdog and `/healthz` read); work asked for
//! often and done once (`Coalesced`); and two helpers every part uses.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub struct Run {
    started: Instant,
    stopping: AtomicBool,
    audit_interval: Duration,
    loops: Mutex<Vec<Arc<Beats>>>,
}

/// How long a housekeeping loop that wakes every few seconds may go
/// without a round before masqd counts it as stuck: generous, since a
/// round may wait on nft or netlink on a loaded (or emulated) host.
pub const STALL: Duration = Duration::from_secs(30);

/// One loop's beats.
struct Beats {
    name: &'static str,
    within: Duration,
    last: Mutex<Instant>,
    ended: AtomicBool,
}

/// A loop's pulse: the loop beats once per round; a round that blocks on
/// a lock or a call that never returns stops the beats, and a loop that
/// ends (or panics) while masqd runs drops it. Either way masqd is then
/// unhealthy (`Run::stalled`).
pub struct Heartbeat(Arc<Beats>);

impl Heartbeat {
    pub fn beat(&self) {
        *lock(&self.0.last) = Instant::now();
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.ended.store(true, Ordering::SeqCst);
    }
}

/// Work asked for many times and done once by a worker: `ask` records why
/// and wakes it; `take` hands it the asks made so far, after waiting a
/// little for more to join them. A burst of asks (every pod of a cluster
/// mirrored at once) is then one round of work, not one per ask.
#[derive(Default)]
pub struct Coalesced {
    /// The last ask's reason and how many asks since the last take.
    asked: Mutex<Option<(String, usize)>>,
    wake: Condvar,
}

impl Coalesced {
    pub fn ask(&self, why: &str) {
        let mut asked = lock(&self.asked);
        let n = asked.as_ref().map_or(0, |(_, n)| *n);
        *asked = Some((why.to_string(), n + 1));
        self.wake.notify_one();
    }

    /// The last reason and the number of asks, once there is one (within
    /// `timeout`) and `settle` has passed for others to join it.
    pub fn take(&self, timeout: Duration, settle: Duration) -> Option<(String, usize)> {
        let asked = lock(&self.asked);
        let (asked, _) = self
            .wake
            .wait_timeout_while(asked, timeout, |a| a.is_none())
            .unwrap_or_else(|e| e.into_inner());
        if asked.is_none() {
            return None;
        }
        drop(asked);
        std::thread::sleep(settle);
        lock(&self.asked).take()
    }
}

impl Run {
    pub fn new(audit_interval: Duration) -> Run {
        Run {
            started: Instant::now(),
            stopping: AtomicBool::new(false),
            audit_interval,
            loops: Mutex::new(Vec::new()),
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

    /// Watch a loop that runs until masqd stops and beats at most
    /// `within` apart (it has beaten once now).
    pub fn heartbeat(&self, name: &'static str, within: Duration) -> Heartbeat {
        let b = Arc::new(Beats {
            name,
            within,
            last: Mutex::new(Instant::now()),
            ended: AtomicBool::new(false),
        });
        lock(&self.loops).push(b.clone());
        Heartbeat(b)
    }

    /// Why masqd is not healthy: each watched loop that ended or has not
    /// beaten within its bound. Empty while all make progress, and once
    /// masqd stops (its loops end then).
    pub fn stalled(&self) -> Vec<String> {
        if self.is_stopping() {
            return Vec::new();
        }
        lock(&self.loops)
            .iter()
            .filter_map(|b| {
                let quiet = lock(&b.last).elapsed();
                if b.ended.load(Ordering::SeqCst) {
                    Some(format!("{}: loop ended", b.name))
                } else if quiet > b.within {
                    Some(format!("{}: no progress for {}s", b.name, quiet.as_secs()))
                } else {
                    None
                }
            })
            .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_stops_beating_or_ends_is_stalled_until_masqd_stops() {
        let run = Run::new(Duration::from_secs(1));
        let quick = run.heartbeat("quick", Duration::from_millis(500));
        let slow = run.heartbeat("slow", Duration::from_secs(60));
        assert!(run.stalled().is_empty());
        std::thread::sleep(Duration::from_millis(600));
        slow.beat();
        let stalled = run.stalled();
        assert_eq!(stalled.len(), 1, "{stalled:?}");
        assert!(
            stalled[0].starts_with("quick: no progress for "),
            "{stalled:?}"
        );
        quick.beat();
        assert!(run.stalled().is_empty());
        drop(slow);
        assert_eq!(run.stalled(), vec!["slow: loop ended"]);
        run.stop();
        assert!(run.stalled().is_empty());
    }

    #[test]
    fn a_loop_that_panics_is_stalled() {
        let run = Arc::new(Run::new(Duration::from_secs(1)));
        let r = run.clone();
        let t = std::thread::spawn(move || {
            let _beat = r.heartbeat("doomed", Duration::from_secs(60));
            panic!("a bug in the loop");
        });
        assert!(t.join().is_err());
        assert_eq!(run.stalled(), vec!["doomed: loop ended"]);
    }

    #[test]
    fn asks_made_together_are_taken_once() {
        let work = Arc::new(Coalesced::default());
        assert_eq!(work.take(Duration::from_millis(10), Duration::ZERO), None);
        // Asks made before a take (or while it settles) are one take.
        for i in 0..100 {
            work.ask(&format!("pod {i}"));
        }
        assert_eq!(
            work.take(Duration::ZERO, Duration::ZERO),
            Some(("pod 99".to_string(), 100))
        );
        assert_eq!(work.take(Duration::from_millis(10), Duration::ZERO), None);
        // A waiting taker is woken by the first ask (or finds it made).
        let w = work.clone();
        let taker = std::thread::spawn(move || w.take(Duration::from_secs(60), Duration::ZERO));
        work.ask("pod 100");
        assert_eq!(
            taker.join().expect("taker"),
            Some(("pod 100".to_string(), 1))
        );
    }
}
