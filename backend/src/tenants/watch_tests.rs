//! The audit's report of a round: each bypass counted against its
//! endpoint, each unattributed QP in the metrics; nothing acted on.
use super::*;
use crate::config::AuditAction;
use crate::enforce::audit::{Bypass, Plan, Proc, Unattributed, Via};
use crate::tenants::fakes::FakeParts;

fn bypass(endpoint: &str, qpn: u32) -> Bypass {
    Bypass {
        endpoint: endpoint.into(),
        via: Via::Creator,
        procs: vec![Proc {
            pid: 4242,
            libmasq: false,
            session: false,
        }],
        qpn,
        qp_type: 2,
        state: 3,
    }
}

#[test]
fn a_rounds_bypasses_are_counted_against_their_endpoints() {
    let f = FakeParts::host1();
    let plan = Plan {
        new: vec![
            bypass("acme-a", 0x11),
            bypass("acme-a", 0x12),
            bypass("globex-a", 0x13),
            // Gone from this host since the round began: logged only.
            bypass("acme-z", 0x14),
        ],
        unattributed: vec![Unattributed {
            qpn: 0x15,
            qp_type: 2,
            state: 3,
            holders: vec![],
        }],
        deferred: 0,
        kill_pids: vec![],
        kill_endpoints: vec![],
    };
    report(&*f.parts, &plan, AuditAction::Log);
    let bypasses = |name: &str| f.endpoint(name).audit_bypasses.load(Ordering::Relaxed);
    assert_eq!((bypasses("acme-a"), bypasses("globex-a")), (2, 1));
    assert_eq!(f.parts.metrics().audit_unattributed.get(), 1);
    assert_eq!(f.endpoint("acme-a").audit_kills.load(Ordering::Relaxed), 0);
}

#[test]
fn a_wait_stretched_past_the_heartbeats_bound_is_no_stall_and_ends_when_masqd_stops() {
    let run = std::sync::Arc::new(Run::new(Duration::from_millis(50)));
    // The audit's bound: its interval plus a margin (STALL in masqd).
    let beat = run.heartbeat("audit", Duration::from_millis(150));
    let (r, checker) = (run.clone(), run.clone());
    // A paced wait of 10 s, in slices of the 50 ms interval.
    let sleeper = std::thread::spawn(move || {
        let started = Instant::now();
        sleep_beating(
            &r,
            &beat,
            Duration::from_secs(10),
            Duration::from_millis(50),
        );
        started.elapsed()
    });
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(60));
        assert!(checker.stalled().is_empty(), "{:?}", checker.stalled());
    }
    run.stop();
    let slept = sleeper.join().expect("the sleeper ends");
    assert!(
        slept < Duration::from_secs(5),
        "did not wake on stop: {slept:?}"
    );
}
