//! systemd's service protocol (sd_notify(3)), for `Type=notify` with
//! `WatchdogSec=`: READY=1 once masqd serves, STOPPING=1 when it stops,
//! and WATCHDOG=1 pings only while every loop masqd watches makes
//! progress (`Run::stalled`), so that systemd restarts a wedged masqd
//! rather than one that merely looks alive. All of it is a no-op without
//! `NOTIFY_SOCKET` (and the pings without `WATCHDOG_USEC`), as when masqd
//! runs by hand or under another supervisor.

use sd_notify::NotifyState;
use std::thread;
use std::time::Duration;
use tracing::{debug, info, warn};

fn send(state: &[NotifyState]) {
    // Only the service manager reads these; masqd runs on without one.
    if let Err(e) = sd_notify::notify(state) {
        debug!("sd_notify: {e}");
    }
}

/// masqd serves: endpoints and the control socket are up.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// masqd is shutting down.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// Ping the watchdog from a thread of its own every half of
/// `WATCHDOG_USEC` (as sd_watchdog_enabled(3) advises), as long as
/// `stalled` names nothing; while it does, say why in STATUS= instead, so
/// that `systemctl status` shows it until systemd restarts masqd. The
/// thread ends once `stopping`.
pub fn watchdog(
    stalled: impl Fn() -> Vec<String> + Send + 'static,
    stopping: impl Fn() -> bool + Send + 'static,
) -> crate::error::Result<()> {
    let Some(timeout) = sd_notify::watchdog_enabled() else {
        return Ok(());
    };
    let every = timeout / 2;
    info!(
        ?timeout,
        "systemd watchdog: pinging every {every:?} while masqd's loops progress"
    );
    thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || {
            // The loops stalled at the last look, by name: logged once
            // each time the set changes, not at every look.
            let mut was: Vec<String> = Vec::new();
            while !stopping() {
                let now = stalled();
                let names: Vec<String> = now
                    .iter()
                    .map(|w| w.split(':').next().unwrap_or(w).to_string())
                    .collect();
                if now.is_empty() {
                    if !was.is_empty() {
                        info!("watchdog: masqd's loops progress again; pinging");
                        send(&[NotifyState::Status("serving")]);
                    }
                    send(&[NotifyState::Watchdog]);
                } else {
                    let text = now.join("; ");
                    if names != was {
                        warn!("watchdog: not pinging systemd: {text}");
                    }
                    send(&[NotifyState::Status(&format!("stalled: {text}"))]);
                }
                was = names;
                thread::sleep(every.max(Duration::from_millis(10)));
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Run;
    use std::os::unix::net::UnixDatagram;
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    const CHILD: &str = "MASQ_TEST_NOTIFY_CHILD";

    /// What masqd does, run by the test below in a process of its own
    /// (the notify socket comes from the environment, which a test must
    /// not change under the other tests' threads): a watched loop beats,
    /// masqd is ready, the loop wedges on a lock for a while, then comes
    /// back, and masqd stops. Does nothing when run on its own.
    #[test]
    fn notify_child() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        let run = Arc::new(Run::new(Duration::from_secs(1)));
        let wedge = Arc::new(Mutex::new(()));
        let beat = run.heartbeat("sessions", Duration::from_millis(300));
        let w = wedge.clone();
        let r = run.clone();
        thread::spawn(move || {
            while !r.is_stopping() {
                drop(crate::run::lock(&w));
                beat.beat();
                thread::sleep(Duration::from_millis(20));
            }
        });
        let (r1, r2) = (run.clone(), run.clone());
        watchdog(move || r1.stalled(), move || r2.is_stopping()).expect("watchdog");
        ready("serving 1 endpoint");
        thread::sleep(Duration::from_millis(600));
        let held = crate::run::lock(&wedge);
        thread::sleep(Duration::from_millis(1200));
        drop(held);
        thread::sleep(Duration::from_millis(600));
        stopping();
        run.stop();
    }

    #[test]
    fn systemd_hears_ready_then_pings_that_stop_while_a_loop_is_wedged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let sock = UnixDatagram::bind(&path).expect("bind the notify socket");
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let exe = std::env::current_exe().expect("the test binary");
        let child = std::process::Command::new(exe)
            .args(["--exact", "notify::tests::notify_child"])
            .env(CHILD, "1")
            .env("NOTIFY_SOCKET", &path)
            .env("WATCHDOG_USEC", "200000")
            .env_remove("WATCHDOG_PID")
            // Its own test report stays out of this one's.
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run the child");
        let start = Instant::now();
        let mut got: Vec<String> = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.iter().any(|m| m.contains("STOPPING=1")) {
            let n = sock.recv(&mut buf).expect("a notification within 10 s");
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            got.push(format!("{:>5} ms {msg}", start.elapsed().as_millis()));
        }
        let out = child.wait_with_output().expect("child");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let all = got.join("");
        let at = |pat: &str| got.iter().position(|m| m.contains(pat));
        let ready = at("READY=1\nSTATUS=serving 1 endpoint").expect(&all);
        let stalled = at("STATUS=stalled: sessions: no progress").expect(&all);
        let back = at("STATUS=serving\n").expect(&all);
        let stop = at("STOPPING=1").expect(&all);
        let pings = |from: usize, to: usize| {
            got[from..to]
                .iter()
                .filter(|m| m.contains("WATCHDOG=1"))
                .count()
        };
        assert!(ready < stalled && stalled < back && back < stop, "{all}");
        assert!(
            pings(ready, stalled) >= 2,
            "pings while the loop beats: {all}"
        );
        assert_eq!(pings(stalled, back), 0, "pings while it is wedged: {all}");
        assert!(pings(back, stop) >= 1, "pings once it is back: {all}");
    }
}
