//! An endpoint's sysfs view, and the sessions it admits.
use super::*;
use crate::tenants::fakes::FakeParts;

fn host() -> crate::kernel::host::HostDevice {
    crate::kernel::host::HostDevice::rxe0_for_tests()
}

/// Issue 51: with a dangling link planted at sysfs/class/infiniband,
/// masqd served the endpoint without its view (the apps read the
/// host's sysfs). Now the endpoint is refused, the link named.
#[test]
fn an_endpoint_whose_view_cannot_be_made_is_refused() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("acme-a");
    let sock = dir.join("masq.sock");
    std::fs::create_dir_all(dir.join("sysfs/class")).expect("mkdir");
    let link = dir.join("sysfs/class/infiniband");
    std::os::unix::fs::symlink(t.path().join("nowhere"), &link).expect("link");
    let why = sysfs_view_for(&sock, std::slice::from_ref(&sock), &host())
        .err()
        .expect("refused")
        .to_string();
    assert!(why.contains(&link.display().to_string()), "{why}");
    // A directory shared with another endpoint has no view, and is
    // no refusal.
    let other = dir.join("other.sock");
    assert!(matches!(sysfs_view_for(&sock, &[other], &host()), Ok(None)));
    std::fs::remove_file(&link).expect("unlink");
    assert!(matches!(sysfs_view_for(&sock, &[], &host()), Ok(Some(_))));
}

/// `tenantLimits.sessions` per endpoint: one more is refused EMFILE
/// naming the limit, and a session that ends makes room again.
#[test]
fn an_endpoints_sessions_past_its_limit_are_refused_emfile() {
    let f = FakeParts::with_config(|c| c.tenant_limits.sessions = 2);
    let ep = f.endpoint("acme-a");
    let (conn, _app) = Conn::pair().expect("socketpair");
    let one = admit_session(&f.parts, &ep, &conn).expect("first");
    let _two = admit_session(&f.parts, &ep, &conn).expect("second");
    let r = admit_session(&f.parts, &ep, &conn).expect_err("third");
    assert_eq!(r.errno(), libc::EMFILE, "{}", r.why());
    assert!(r.why().contains("limit reached (2 of 2)"), "{}", r.why());
    // Another endpoint's sessions are its own.
    let _globex = admit_session(&f.parts, &f.endpoint("globex-a"), &conn).expect("globex-a");
    drop(one);
    admit_session(&f.parts, &ep, &conn).expect("room again");
}

/// A session's thread is SCHED_BATCH: woken by its app's posted notice,
/// it does not preempt the app (the kernel's policy for the thread, asked
/// while the session runs).
#[test]
fn a_session_thread_never_preempts_its_app() {
    let f = FakeParts::host1();
    let ep = f.endpoint("acme-a");
    let (conn, app) = Conn::pair().expect("socketpair");
    let slot = admit_session(&f.parts, &ep, &conn).expect("a slot");
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let parts = f.parts.clone();
    let session = std::thread::spawn(move || {
        tid_tx.send(nix::unistd::gettid().as_raw()).expect("sent");
        run_session(parts, ep, conn, 1, std::process::id() as i32, slot);
    });
    let tid = tid_rx.recv().expect("the session's thread id");
    // SAFETY: a plain query of a thread of this process.
    let policy = || unsafe { libc::sched_getscheduler(tid) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while policy() != libc::SCHED_BATCH && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(policy(), libc::SCHED_BATCH);
    drop(app);
    session.join().expect("the session ends with its app");
}
