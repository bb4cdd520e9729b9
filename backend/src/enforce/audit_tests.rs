//! The audit's decisions (`find_bypasses`, `plan`) against a fake of the
//! kernel's objects and /proc (`Owners`).

use super::*;
use crate::kernel::rdma_nl::ResInfo;

fn qp(lqpn: u32, state: u8, pid: Option<u32>) -> QpInfo {
    QpInfo {
        lqpn,
        port: Some(1),
        qp_type: 2,
        state,
        pid,
        kern_name: None,
        rqpn: Some(0x99),
        pdn: Some(1),
    }
}

/// A QP whose creating task has exited, on PD `pdn`.
fn orphan(lqpn: u32, pdn: u32) -> QpInfo {
    QpInfo {
        pid: None,
        pdn: Some(pdn),
        ..qp(lqpn, 3, None)
    }
}

/// Tasks 100 and 101 (a thread of 100) and 400 live in acme-a, 200 in
/// globex-a, 300 on the host. PD 1 is 100's; PD 7's creator exited, its
/// context 5 is 101's; PD 8's and its context 6's creators exited; PD 9
/// is the host's. 400 has libmasq mapped and a session.
struct Fake {
    holders: Vec<(String, i32)>,
    holder_scans: usize,
}

impl Fake {
    fn holding(holders: &[(&str, i32)]) -> Fake {
        Fake {
            holders: holders.iter().map(|(e, p)| (e.to_string(), *p)).collect(),
            holder_scans: 0,
        }
    }
}

impl Owners for Fake {
    fn owner(&mut self, task: u32) -> Option<(String, i32)> {
        match task {
            100 | 101 => Some(("acme-a".into(), 100)),
            400 => Some(("acme-a".into(), 400)),
            200 => Some(("globex-a".into(), 200)),
            _ => None,
        }
    }
    fn pd(&mut self, pdn: u32) -> Option<ResInfo> {
        let (pid, ctxn) = match pdn {
            1 => (Some(100), 1),
            7 => (None, 5),
            8 => (None, 6),
            9 => (Some(300), 9),
            _ => return None,
        };
        Some(ResInfo {
            id: pdn,
            pid,
            ctxn: Some(ctxn),
            kern: false,
        })
    }
    fn ctx_creator(&mut self, ctxn: u32) -> Option<u32> {
        (ctxn == 5).then_some(101)
    }
    fn holders(&mut self) -> Vec<(String, i32)> {
        self.holder_scans += 1;
        self.holders.clone()
    }
    fn libmasq(&mut self, pid: i32) -> bool {
        pid == 400
    }
    fn session(&mut self, pid: i32) -> bool {
        pid == 400
    }
}

fn nobody() -> Fake {
    Fake::holding(&[])
}

fn proc(pid: i32) -> Proc {
    Proc {
        pid,
        libmasq: pid == 400,
        session: pid == 400,
    }
}

fn bypass(endpoint: &str, via: Via, pids: &[i32], qpn: u32, state: u8) -> Bypass {
    Bypass {
        endpoint: endpoint.into(),
        via,
        procs: pids.iter().map(|p| proc(*p)).collect(),
        qpn,
        qp_type: 2,
        state,
    }
}

#[test]
fn an_unadmitted_connected_tenant_qp_is_a_bypass() {
    let qps = [qp(0x11, 2, Some(100)), qp(0x12, 3, Some(101))];
    let found = find_bypasses(&qps, &HashMap::new(), &mut nobody());
    assert_eq!(
        found.bypasses,
        vec![
            bypass("acme-a", Via::Creator, &[100], 0x11, 2),
            bypass("acme-a", Via::Creator, &[100], 0x12, 3),
        ]
    );
    assert!(found.unattributed.is_empty());
}

#[test]
fn admitted_unconnected_kernel_and_host_qps_are_not() {
    let mut kern = qp(1, 3, None);
    kern.kern_name = Some("ib_core".into());
    kern.pdn = None;
    let qps = [
        qp(0x11, 3, Some(100)), // admitted
        qp(0x12, 1, Some(100)), // INIT: no destination yet
        qp(0x13, 0, Some(100)), // RESET
        qp(0x14, 6, Some(100)), // ERROR
        qp(0x15, 3, Some(300)), // a host process
        orphan(0x16, 9),        // a host process's PD
        kern,
    ];
    let admitted: HashMap<u32, i32> = [(0x11, 100)].into();
    let mut o = nobody();
    assert_eq!(find_bypasses(&qps, &admitted, &mut o), Findings::default());
    assert_eq!(o.holder_scans, 0);
}

#[test]
fn a_qpn_vouched_for_another_process_is_not_admitted() {
    // acme-a's QPN 0x11 was freed behind masqd's back and reused by
    // globex-a's process.
    let admitted: HashMap<u32, i32> = [(0x11, 100)].into();
    let found = find_bypasses(&[qp(0x11, 3, Some(200))], &admitted, &mut nobody());
    assert_eq!(
        found.bypasses,
        vec![bypass("globex-a", Via::Creator, &[200], 0x11, 3)]
    );
}

#[test]
fn sqd_and_sqe_count_as_connected() {
    let qps = [qp(0x11, 4, Some(200)), qp(0x12, 5, Some(200))];
    let found = find_bypasses(&qps, &HashMap::new(), &mut nobody());
    assert_eq!(found.bypasses.len(), 2);
}

#[test]
fn a_qp_whose_creating_thread_exited_is_found_through_its_pd() {
    // Issue 51: the QP names no task; its PD names acme-a's 100.
    let found = find_bypasses(&[orphan(0x21, 1)], &HashMap::new(), &mut nobody());
    assert_eq!(
        found.bypasses,
        vec![bypass("acme-a", Via::Pd, &[100], 0x21, 3)]
    );
    // Vouched for that process: its own QP, moved through masqd.
    let admitted: HashMap<u32, i32> = [(0x21, 100)].into();
    assert!(find_bypasses(&[orphan(0x21, 1)], &admitted, &mut nobody())
        .bypasses
        .is_empty());
}

#[test]
fn a_qp_whose_pd_creator_exited_too_is_found_through_its_context() {
    let mut o = nobody();
    let found = find_bypasses(&[orphan(0x22, 7)], &HashMap::new(), &mut o);
    assert_eq!(
        found.bypasses,
        vec![bypass("acme-a", Via::Context, &[100], 0x22, 3)]
    );
    assert_eq!(o.holder_scans, 0, "no /proc scan when the kernel names one");
}

#[test]
fn a_qp_no_creator_is_named_for_is_the_one_endpoint_holding_the_device() {
    // PD 8 and its context were created by a thread that exited: acme-a's
    // 100 and 400 hold the device's uverbs file, no other endpoint's does.
    let mut o = Fake::holding(&[("acme-a", 100), ("acme-a", 400)]);
    let found = find_bypasses(&[orphan(0x23, 8)], &HashMap::new(), &mut o);
    assert_eq!(
        found.bypasses,
        vec![bypass("acme-a", Via::Holder, &[100, 400], 0x23, 3)]
    );
    // kill-process: the holder with a session (400) is spared, the QP may
    // be the other's; kill-endpoint ends the endpoint.
    let p = plan(
        &found,
        &mut Seen::default(),
        AuditAction::KillProcess,
        false,
    );
    assert_eq!(p.kill_pids, vec![("acme-a".to_string(), 100)]);
    let p = plan(
        &found,
        &mut Seen::default(),
        AuditAction::KillEndpoint,
        false,
    );
    assert_eq!(p.kill_endpoints, vec!["acme-a"]);
    // Vouched for a holder: covered; for a process that holds nothing:
    // not.
    let admitted: HashMap<u32, i32> = [(0x23, 400)].into();
    assert!(find_bypasses(&[orphan(0x23, 8)], &admitted, &mut o)
        .bypasses
        .is_empty());
    let admitted: HashMap<u32, i32> = [(0x23, 999)].into();
    assert_eq!(
        find_bypasses(&[orphan(0x23, 8)], &admitted, &mut o)
            .bypasses
            .len(),
        1
    );
}

#[test]
fn a_qp_no_endpoint_can_be_found_for_is_reported_and_counted_not_skipped() {
    // Issue 51: before, a QP without RES_PID was skipped without a word.
    // Nobody in an endpoint holds the device (the file is held by a host
    // process, or its fd rides in a socket), or two endpoints do.
    for (holders, names) in [
        (vec![], vec![]),
        (
            vec![("acme-a", 100), ("globex-a", 200), ("acme-a", 400)],
            vec!["acme-a", "globex-a"],
        ),
    ] {
        let qps = [orphan(0x24, 8), orphan(0x25, 0x77)]; // 0x77: no such PD
        let found = find_bypasses(&qps, &HashMap::new(), &mut Fake::holding(&holders));
        assert!(found.bypasses.is_empty());
        let u = |qpn| Unattributed {
            qpn,
            qp_type: 2,
            state: 3,
            holders: names.iter().map(|n| n.to_string()).collect(),
        };
        assert_eq!(found.unattributed, vec![u(0x24), u(0x25)]);
        // Reported once while it lasts, in the grace too; nothing killed.
        let mut seen = Seen::default();
        let p = plan(&found, &mut seen, AuditAction::KillEndpoint, true);
        assert_eq!(p.unattributed, found.unattributed);
        assert!(p.kill_endpoints.is_empty() && p.kill_pids.is_empty());
        let p = plan(&found, &mut seen, AuditAction::KillEndpoint, false);
        assert!(p.unattributed.is_empty());
        plan(&Findings::default(), &mut seen, AuditAction::Log, false);
        let p = plan(&found, &mut seen, AuditAction::Log, false);
        assert_eq!(p.unattributed.len(), 2);
    }
}

#[test]
fn in_the_grace_a_process_without_libmasq_is_acted_on_and_one_with_it_waits() {
    // Issue 51: nothing was acted on for recoveryGraceSeconds after a
    // start. 100 never had libmasq (nothing to resync); 400 has it.
    let qps = [qp(0x31, 3, Some(100)), qp(0x32, 3, Some(400))];
    let found = find_bypasses(&qps, &HashMap::new(), &mut nobody());
    let mut seen = Seen::default();
    let p = plan(&found, &mut seen, AuditAction::KillProcess, true);
    assert_eq!(p.new, vec![bypass("acme-a", Via::Creator, &[100], 0x31, 3)]);
    assert_eq!(p.kill_pids, vec![("acme-a".to_string(), 100)]);
    assert_eq!(p.deferred, 1);
    // kill-endpoint: 400's QP alone does not end acme-a in the grace.
    let only_400 = Findings {
        bypasses: vec![found.bypasses[1].clone()],
        unattributed: vec![],
    };
    let p = plan(
        &only_400,
        &mut Seen::default(),
        AuditAction::KillEndpoint,
        true,
    );
    assert!(p.kill_endpoints.is_empty() && p.new.is_empty());
    // After the grace, 400's QP (still unadmitted) is reported and killed.
    let p = plan(&found, &mut seen, AuditAction::KillProcess, false);
    assert_eq!(p.new, vec![bypass("acme-a", Via::Creator, &[400], 0x32, 3)]);
    assert_eq!(
        p.kill_pids,
        vec![("acme-a".to_string(), 100), ("acme-a".to_string(), 400)]
    );
    assert_eq!(p.deferred, 0);
}

#[test]
fn a_bypass_is_reported_once_and_again_if_its_qpn_comes_back() {
    let b = find_bypasses(&[qp(0x11, 3, Some(100))], &HashMap::new(), &mut nobody());
    let mut seen = Seen::default();
    let p = plan(&b, &mut seen, AuditAction::Log, false);
    assert_eq!(p.new.len(), 1);
    assert!(p.kill_pids.is_empty() && p.kill_endpoints.is_empty());
    assert!(plan(&b, &mut seen, AuditAction::Log, false).new.is_empty());
    plan(&Findings::default(), &mut seen, AuditAction::Log, false);
    assert_eq!(plan(&b, &mut seen, AuditAction::Log, false).new.len(), 1);
}

#[test]
fn kill_modes_name_each_process_or_endpoint_once() {
    let qps = [
        qp(0x11, 3, Some(100)),
        qp(0x12, 3, Some(101)),
        qp(0x13, 2, Some(200)),
    ];
    let b = find_bypasses(&qps, &HashMap::new(), &mut nobody());
    let p = plan(&b, &mut Seen::default(), AuditAction::KillProcess, false);
    assert_eq!(
        p.kill_pids,
        vec![("acme-a".to_string(), 100), ("globex-a".to_string(), 200)]
    );
    let p = plan(&b, &mut Seen::default(), AuditAction::KillEndpoint, false);
    assert_eq!(p.kill_endpoints, vec!["acme-a", "globex-a"]);
}

#[test]
fn a_vouched_qpn_lingers_after_its_session_then_expires() {
    let a = Admitted::default();
    a.vouch(0, 0x11, 1, 100);
    a.vouch(0, 0x12, 2, 200);
    // Another device's QP of the same number is another QP.
    a.vouch(1, 0x12, 3, 300);
    a.forget(0, 0x12, 1); // another session's QPN: not forgotten
    assert_eq!(a.snapshot(0), [(0x11, 100), (0x12, 200)].into());
    assert_eq!(a.snapshot(1), [(0x12, 300)].into());
    a.forget(0, 0x12, 2);
    a.forget(1, 0x12, 3);
    a.session_gone(1, Duration::from_millis(50));
    assert_eq!(a.snapshot(0), [(0x11, 100)].into());
    std::thread::sleep(Duration::from_millis(80));
    assert!(a.snapshot(0).is_empty());
}

#[test]
fn rounds_come_at_random_times_never_more_than_an_interval_apart() {
    let i = Duration::from_secs(1);
    let waits: Vec<Duration> = (0..200).map(|_| next_wait(i)).collect();
    assert!(waits.iter().all(|w| *w >= i / 2 && *w <= i), "{waits:?}");
    let distinct: HashSet<Duration> = waits.iter().copied().collect();
    assert!(distinct.len() > 100, "not random: {distinct:?}");
}

#[test]
fn a_costly_round_stretches_the_wait_to_keep_the_audit_within_its_cpu_share() {
    let i = Duration::from_secs(1);
    // A cheap round (a few QPs): the interval's random wait, as before.
    for took in [Duration::ZERO, Duration::from_millis(5)] {
        let w = paced_wait(i, took);
        assert!(w >= i / 2 && w <= i, "{took:?}: {w:?}");
    }
    // A round of 200 ms (tens of thousands of QPs): 19 times as long a
    // wait, whatever the interval says.
    let took = Duration::from_millis(200);
    let w = paced_wait(i, took);
    assert_eq!(w, Duration::from_millis(3800));
    assert!(took.as_secs_f64() / (took + w).as_secs_f64() <= MAX_CPU_SHARE + 1e-9);
}
