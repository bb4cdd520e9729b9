//! Cluster mode against a real etcd on the loopback (no RDMA needed): two
//! hosts' `Cluster`s feed stores of their own, as masqd feeds its registry.
//! Skipped, saying so, where no etcd binary is installed.

use masq_backend::cluster::source::{Source, Store};
use masq_backend::cluster::Cluster;
use masq_backend::cluster::{auth, policy};
use masq_backend::config::identity::Identity;
use masq_backend::config::{ClusterConfig, Config, EndpointConfig, TlsFiles};
use masq_backend::endpoints::placement::{Placement, SourceId};
use masq_backend::endpoints::registry::Registry;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Fake {
    local: Mutex<Vec<EndpointConfig>>,
    remote: Mutex<BTreeMap<String, Placement>>,
    policy: Mutex<Option<String>>,
    /// Every endpoint that left the view (deleted or missing from a read).
    gone: Mutex<Vec<String>>,
    /// How long applying one placement takes (masqd recompiles its policy
    /// and loads nftables for each; seconds on a loaded host).
    slow: Mutex<Duration>,
    /// The policy file this host brings: (text, file).
    file: Mutex<Option<(String, String)>>,
    /// When set, what masqd's registry makes of the placements.
    map: std::sync::OnceLock<Registry>,
    /// What masq-netpol's keys fed, in order: the view read whole, then
    /// each object.
    mirrored: Mutex<Vec<String>>,
}

impl Store for Fake {
    fn placements(&self, _from: SourceId, endpoints: Vec<Placement>) {
        if let Some(r) = self.map.get() {
            r.feed(SourceId::Cluster, endpoints.clone());
        }
        let new: BTreeMap<_, _> = endpoints
            .into_iter()
            .map(|r| (r.name.clone().unwrap_or_default(), r))
            .collect();
        let mut old = self.remote.lock().unwrap();
        let left = old.keys().filter(|n| !new.contains_key(*n)).cloned();
        self.gone.lock().unwrap().extend(left);
        *old = new;
    }
    fn placed(&self, _from: SourceId, r: Placement) {
        std::thread::sleep(*self.slow.lock().unwrap());
        let name = r.name.clone().unwrap_or_default();
        if let Some(m) = self.map.get() {
            m.place(SourceId::Cluster, r.clone());
        }
        self.remote.lock().unwrap().insert(name, r);
    }
    fn unplaced(&self, _from: SourceId, host: Ipv4Addr, name: &str) {
        if let Some(m) = self.map.get() {
            m.unplace(SourceId::Cluster, host, name);
        }
        self.remote.lock().unwrap().remove(name);
        self.gone.lock().unwrap().push(name.to_string());
    }
    fn policy(&self, _from: SourceId, text: &str, _file: &str) -> masq_backend::error::Result<()> {
        *self.policy.lock().unwrap() = Some(text.to_string());
        Ok(())
    }
    fn local_endpoints(&self) -> Vec<EndpointConfig> {
        self.local.lock().unwrap().clone()
    }
    fn policy_version(&self) -> Option<String> {
        self.policy
            .lock()
            .unwrap()
            .as_ref()
            .map(|t| format!("{}", t.len()))
    }
    fn file_policy(&self) -> Option<(String, String)> {
        self.file.lock().unwrap().clone()
    }
    fn mirrored_all(&self, all: masq_policy::netpol::Snapshot) {
        self.mirrored.lock().unwrap().push(format!(
            "all: {} namespace(s), {} pod(s), {} policies",
            all.namespaces.len(),
            all.pods.len(),
            all.policies.len()
        ));
    }
    fn mirrored(&self, m: masq_backend::admit::Mirrored) {
        self.mirrored.lock().unwrap().push(m.describe());
    }
}

fn endpoint(name: &str, vip: &str) -> EndpointConfig {
    EndpointConfig {
        name: name.into(),
        tenant: "acme".into(),
        vni: 100,
        vip: vip.parse().unwrap(),
        netns: format!("/run/netns/{name}").into(),
        vnic: "eth0".into(),
        rail: None,
        device_of: None,
        host_if: None,
        bridge: None,
        socket: None,
        max_connections: None,
        rdma_limits: None,
        max_rate_mbps: None,
        cni: None,
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Etcd {
    child: Option<Child>,
    dir: tempfile::TempDir,
    client: u16,
    peer: u16,
}

impl Etcd {
    fn start() -> Option<Etcd> {
        let mut e = Etcd {
            child: None,
            dir: tempfile::tempdir().unwrap(),
            client: free_port(),
            peer: free_port(),
        };
        e.run().then_some(e)
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.client)
    }

    /// The CA's certificate and etcd's own identity (CN t), which the
    /// hosts of the tests without authentication use too.
    fn pki(&self) -> TlsFiles {
        self.identity_files("t")
    }

    /// The files of identity `name` (t, root, operator, h1, h2).
    fn identity_files(&self, name: &str) -> TlsFiles {
        let pki = self.dir.path().join("pki");
        TlsFiles {
            ca: pki.join("ca.pem"),
            cert: pki.join(format!("{name}.pem")),
            key: pki.join(format!("{name}-key.pem")),
        }
    }

    /// A client of this etcd as `name`.
    fn client(&self, name: &str) -> (tokio::runtime::Runtime, etcd_client::Client) {
        let id = Identity::load(&self.identity_files(name)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let tls = etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(id.ca))
            .identity(etcd_client::Identity::from_pem(id.cert, id.key));
        let opts = etcd_client::ConnectOptions::new().with_tls(tls);
        let client = rt
            .block_on(etcd_client::Client::connect([self.url()], Some(opts)))
            .unwrap();
        (rt, client)
    }

    /// Start it on its data directory (again, after `stop`).
    fn run(&mut self) -> bool {
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let made = Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../integration/make-pki"
        ))
        .arg(self.dir.path().join("ca"))
        .arg(self.dir.path().join("pki"))
        // etcd's own, and clients': etcd's root, an operator, two hosts.
        .args(["t=127.0.0.1", "root", "operator", "h1", "h2", "masq-netpol"])
        .status();
        assert!(
            matches!(made, Ok(s) if s.success()),
            "integration/make-pki failed ({made:?}); `make deps` installs openssl"
        );
        let tls = self.pki();
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &self.url(),
                "--advertise-client-urls",
                &self.url(),
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("t={peer}")])
            .arg("--cert-file")
            .arg(&tls.cert)
            .arg("--key-file")
            .arg(&tls.key)
            .arg("--trusted-ca-file")
            .arg(&tls.ca)
            .arg("--client-cert-auth")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match child {
            Ok(c) => {
                self.child = Some(c);
                true
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run etcd ({e}); `make deps` installs etcd-server");
                false
            }
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}

fn host(etcd: &Etcd, me: &str, local: &[EndpointConfig]) -> (Arc<Cluster>, Arc<Fake>) {
    host_as(etcd, "t", me, local, None)
}

/// A host whose certificate is `name`'s, bringing policy `file` if given.
fn host_as(
    etcd: &Etcd,
    name: &str,
    me: &str,
    local: &[EndpointConfig],
    file: Option<&str>,
) -> (Arc<Cluster>, Arc<Fake>) {
    let store = Arc::new(Fake::default());
    *store.local.lock().unwrap() = local.to_vec();
    *store.file.lock().unwrap() = file.map(|t| (t.to_string(), "policy.yaml".to_string()));
    (start_host(etcd, name, me, store.clone()), store)
}

/// Start a host as `name` at `me` feeding `store`.
fn start_host(etcd: &Etcd, name: &str, me: &str, store: Arc<Fake>) -> Arc<Cluster> {
    let cfg = ClusterConfig {
        etcd: vec![etcd.url()],
        tls: Some(etcd.identity_files(name)),
        insecure: false,
        prefix: "/masq-test".into(),
        lease_seconds: 3,
    };
    let me = me.parse().unwrap();
    let c = Cluster::new(cfg, me, vec![("rail0".into(), me)]).unwrap();
    c.clone().start(store).unwrap();
    c
}

fn until(what: &str, timeout: Duration, cond: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < timeout, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

#[test]
fn two_hosts_follow_each_other_through_etcd_and_its_outage() {
    let Some(mut etcd) = Etcd::start() else {
        return;
    };
    let long = Duration::from_secs(30);
    let (a, store_a) = host(&etcd, "198.18.0.1", &[endpoint("acme-a", "10.0.0.1")]);
    let (b, store_b) = host(&etcd, "198.18.0.2", &[endpoint("acme-b", "10.0.0.2")]);
    until("both connected", long, || {
        a.health().state == "connected" && b.health().state == "connected"
    });
    until("each sees the other's endpoint", long, || {
        store_a.remote.lock().unwrap().contains_key("acme-b")
            && store_b.remote.lock().unwrap().contains_key("acme-a")
    });
    assert!(
        !store_a.remote.lock().unwrap().contains_key("acme-a"),
        "a host's own endpoints are not remote to it"
    );
    let b_at_a = store_a.remote.lock().unwrap()["acme-b"].clone();
    assert_eq!(
        (b_at_a.host, b_at_a.vip),
        ("198.18.0.2".parse().unwrap(), "10.0.0.2".parse().unwrap())
    );

    // An endpoint added and removed on one host, seen by the other.
    let c = endpoint("acme-c", "10.0.0.3");
    store_b.local.lock().unwrap().push(c.clone());
    b.endpoint_up(c);
    let took = until("a sees acme-c", long, || {
        store_a.remote.lock().unwrap().contains_key("acme-c")
    });
    println!("endpoint up -> seen by the other host: {took:?}");
    store_b.local.lock().unwrap().retain(|e| e.name != "acme-c");
    b.endpoint_down("acme-c");
    until("a forgets acme-c", long, || {
        !store_a.remote.lock().unwrap().contains_key("acme-c")
    });

    // One policy write reaches both hosts.
    a.put_policy("version: 1\ntenants: {}\n", "p.yaml").unwrap();
    until("b has the policy", long, || {
        store_b.policy.lock().unwrap().is_some()
    });
    until("a saw its own write", long, || {
        store_a.policy.lock().unwrap().is_some()
    });

    // etcd away: both serve on, degraded; a change made meanwhile lands
    // once it is back.
    let leases = (a.health().lease, b.health().lease);
    assert!(!leases.0.is_empty() && leases.0 != leases.1);
    etcd.stop();
    until("both degraded", long, || {
        a.health().state == "degraded" && b.health().state == "degraded"
    });
    assert!(a
        .put_policy("version: 1\ntenants: {}\n", "q.yaml")
        .unwrap_err()
        .to_string()
        .contains("unreachable"));
    assert!(
        store_a.remote.lock().unwrap().contains_key("acme-b"),
        "the last view stays"
    );
    let d = endpoint("acme-d", "10.0.0.4");
    store_b.local.lock().unwrap().push(d.clone());
    b.endpoint_up(d);
    // Long enough for the retries to back off to their longest wait.
    std::thread::sleep(Duration::from_secs(8));
    store_a.gone.lock().unwrap().clear();
    assert!(etcd.run());
    let took = until("a sees acme-d after the outage", long, || {
        store_a.remote.lock().unwrap().contains_key("acme-d")
    });
    println!("etcd back -> change made during the outage seen: {took:?}");
    until("both connected again", long, || {
        a.health().state == "connected" && b.health().state == "connected"
    });
    // Each host came back on the lease it held, inside the TTL etcd gave it
    // again: its endpoints never left its peer's view.
    assert_eq!((a.health().lease, b.health().lease), leases);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(*store_a.gone.lock().unwrap(), Vec::<String>::new());
    assert!(store_a.remote.lock().unwrap().contains_key("acme-b"));
}

/// masq-netpol's keys reach masqd: read whole with the view, then each put
/// and delete in order; an object under another's key is left out.
#[test]
fn a_host_follows_the_netpol_mirrors_keys() {
    let Some(etcd) = Etcd::start() else {
        return;
    };
    let (rt, mut t) = answering(&etcd);
    let k8s = |rest: &str| format!("/masq-test/k8s/{rest}");
    let srv = r#"{"metadata":{"namespace":"team","name":"srv","labels":{"app":"srv"}}}"#;
    rt.block_on(t.put(
        k8s("namespaces/team"),
        r#"{"metadata":{"name":"team"}}"#,
        None,
    ))
    .unwrap();
    let (_a, store) = host(&etcd, "198.18.0.1", &[]);
    let fed = || store.mirrored.lock().unwrap().clone();
    until("the view is read", Duration::from_secs(30), || {
        !fed().is_empty()
    });
    assert_eq!(fed(), ["all: 1 namespace(s), 0 pod(s), 0 policies"]);
    rt.block_on(t.put(k8s("pods/team/db"), srv, None)).unwrap();
    rt.block_on(t.put(k8s("pods/team/srv"), srv, None)).unwrap();
    rt.block_on(t.delete(k8s("pods/team/srv"), None)).unwrap();
    until("the pod comes and goes", Duration::from_secs(30), || {
        fed().len() == 3
    });
    assert_eq!(
        fed()[1..],
        ["pod team/srv".to_string(), "pod team/srv gone".to_string()]
    );
}

#[test]
fn retries_stay_well_inside_the_lease() {
    use masq_backend::cluster::retry_max;
    assert_eq!(retry_max(4), Duration::from_secs(1));
    assert_eq!(retry_max(10), Duration::from_millis(2500));
    assert_eq!(retry_max(300), Duration::from_secs(5));
}

#[test]
fn a_host_busy_applying_keeps_its_lease_and_its_own_deletes_are_no_outage() {
    let Some(etcd) = Etcd::start() else {
        return;
    };
    let long = Duration::from_secs(60);
    let (a, store_a) = host(&etcd, "198.18.0.1", &[endpoint("acme-a", "10.0.0.1")]);
    let (b, store_b) = host(&etcd, "198.18.0.2", &[endpoint("acme-b", "10.0.0.2")]);
    until("both connected", long, || {
        a.health().state == "connected" && b.health().state == "connected"
    });
    until("b sees acme-a", long, || {
        store_b.remote.lock().unwrap().contains_key("acme-a")
    });
    let (lease, since) = (a.health().lease, a.health().since);

    // Each of b's new endpoints takes 2 s to apply, 8 s in all: more
    // than a's 3 s lease, which a must go on renewing meanwhile.
    *store_a.slow.lock().unwrap() = Duration::from_secs(2);
    for i in 0..4 {
        b.endpoint_up(endpoint(
            &format!("acme-b{i}"),
            &format!("10.0.0.{}", 10 + i),
        ));
    }
    until("a applied all of b's endpoints", long, || {
        store_a.remote.lock().unwrap().contains_key("acme-b3")
    });
    *store_a.slow.lock().unwrap() = Duration::ZERO;
    assert_eq!(a.health().lease, lease, "a lost its lease while applying");
    assert!(
        store_b.gone.lock().unwrap().is_empty(),
        "b saw a's endpoints leave: {:?}",
        store_b.gone.lock().unwrap()
    );

    // a deletes an endpoint of its own: its watch sees the delete, which
    // is no reason to register again (b would read a's endpoints anew).
    let x = endpoint("acme-x", "10.0.0.30");
    store_a.local.lock().unwrap().push(x.clone());
    a.endpoint_up(x);
    until("b sees acme-x", long, || {
        store_b.remote.lock().unwrap().contains_key("acme-x")
    });
    store_a.local.lock().unwrap().retain(|e| e.name != "acme-x");
    a.endpoint_down("acme-x");
    until("b forgets acme-x", long, || {
        !store_b.remote.lock().unwrap().contains_key("acme-x")
    });
    std::thread::sleep(Duration::from_secs(2));
    let h = a.health();
    assert_eq!(
        (h.state, h.since),
        ("connected", since),
        "a left the connected state: {:?}",
        h.error
    );
    assert_eq!(*store_b.gone.lock().unwrap(), vec!["acme-x".to_string()]);
}

/// `masqctl cluster init-auth`'s roles on a real etcd: a host's identity
/// writes its own keys and no other host's nor the policy, the operator's
/// writes the policy, and a masqd whose policy file etcd will not take
/// still follows the cluster.
#[test]
fn with_roles_a_host_writes_only_its_own_keys_and_the_operator_the_policy() {
    let Some(etcd) = Etcd::start() else { return };
    let [h1, h2] = two_hosts();
    let (rt, mut t) = answering(&etcd);
    let root = Identity::load(&etcd.identity_files("root")).unwrap();
    let urls = [etcd.url()];
    let done = auth::run(
        &urls,
        &root,
        "/masq-test",
        "operator",
        &[h1.clone(), h2],
        None,
    )
    .unwrap();
    assert!(done.iter().any(|l| l == "user h2 added"), "{done:?}");
    assert_eq!(done.last().map(String::as_str), Some("authentication on"));
    // Again, as root now that authentication is on: nothing new to make.
    let again = auth::run(&urls, &root, "/masq-test", "operator", &[h1], None).unwrap();
    assert_eq!(again, ["authentication on"]);
    // t, etcd's own certificate, has no user: it gets nothing now.
    assert!(rt.block_on(t.get("/masq-test/", None)).is_err());

    let (rt, mut c) = etcd.client("h2");
    let put = |c: &mut etcd_client::Client, key: &str| rt.block_on(c.put(key, "x", None));
    put(&mut c, "/masq-test/endpoints/198.18.0.2/b").expect("its own endpoint");
    put(&mut c, "/masq-test/status/198.18.0.2").expect("its own status");
    for key in [
        "/masq-test/endpoints/198.18.0.1/a",
        "/masq-test/hosts/198.18.0.1",
        "/masq-test/policy",
        "/masq-test/elsewhere",
    ] {
        let e = put(&mut c, key).expect_err(key).to_string();
        assert!(e.contains("permission denied"), "{key}: {e}");
    }
    let seen = rt
        .block_on(c.get(
            "/masq-test/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        ))
        .expect("it reads the prefix");
    let keys: Vec<&str> = seen.kvs().iter().map(|kv| kv.key_str().unwrap()).collect();
    assert_eq!(
        keys,
        [
            "/masq-test/endpoints/198.18.0.2/b",
            "/masq-test/status/198.18.0.2"
        ]
    );
    let (rt, mut op) = etcd.client("operator");
    let policy = r#"{"text":"version: 1\n","file":"policy.yaml"}"#;
    rt.block_on(op.put("/masq-test/policy", policy, None))
        .expect("the operator writes the policy");

    // masqd as h1, with a policy file etcd will not take from it: it
    // registers, publishes and follows all the same.
    let (c1, s1) = host_as(
        &etcd,
        "h1",
        "198.18.0.1",
        &[endpoint("acme-a", "10.0.0.1")],
        Some("version: 1\ntenants: {}\n"),
    );
    assert!(
        c1.wait_connected(Duration::from_secs(20)),
        "{:?}",
        c1.health().error
    );
    assert_eq!(s1.policy.lock().unwrap().as_deref(), Some("version: 1\n"));
    let (rt, mut op) = etcd.client("operator");
    let got = rt
        .block_on(op.get("/masq-test/endpoints/198.18.0.1/acme-a", None))
        .unwrap();
    assert_eq!(got.kvs().len(), 1, "h1 published its endpoint");

    // `masqctl policy apply` through masqd is refused, saying what to do.
    let e = c1
        .put_policy("version: 1\ntenants: {}\n", "mine.yaml")
        .expect_err("a host writes the policy")
        .to_string();
    assert!(
        e.contains("permission denied") && e.contains("--operator-cert"),
        "{e}"
    );
    // As the operator, with the revision masqd last saw (what masqctl gets
    // from `policy check`): the write reaches masqd. With an older one it
    // loses, changing nothing.
    let target = c1.policy_target();
    assert_eq!(target["prefix"], "/masq-test");
    let seen = target["revision"].as_i64().unwrap();
    let operator = Identity::load(&etcd.identity_files("operator")).unwrap();
    let next = policy::StoredPolicy {
        text: "version: 1\ntenants: {}\n".into(),
        file: "next.yaml".into(),
    };
    let e = policy::write_as_operator(&urls, &operator, "/masq-test", &next, seen - 1)
        .expect_err("a stale revision")
        .to_string();
    assert_eq!(e, policy::LOST);
    assert_eq!(s1.policy.lock().unwrap().as_deref(), Some("version: 1\n"));
    let rev = policy::write_as_operator(&urls, &operator, "/masq-test", &next, seen)
        .expect("the operator writes at the revision masqd saw");
    assert!(rev > seen);
    until(
        "h1 runs the operator's policy",
        Duration::from_secs(10),
        || s1.policy.lock().unwrap().as_deref() == Some(next.text.as_str()),
    );
    // A host's identity is no operator.
    let h2 = Identity::load(&etcd.identity_files("h2")).unwrap();
    let e = policy::write_as_operator(&urls, &h2, "/masq-test", &next, rev)
        .expect_err("h2 as the operator")
        .to_string();
    assert!(
        e.contains("permission denied") && e.contains("CN=h2"),
        "{e}"
    );
}

/// Issue 57: Kubernetes NetworkPolicy's copies below `P/k8s/` are the
/// mirror's to write: no host may write them (a compromised host cannot
/// widen a policy), and the mirror may write nothing else.
#[test]
fn with_roles_only_the_netpol_mirror_writes_k8s_and_only_there() {
    let Some(etcd) = Etcd::start() else { return };
    roles_on(&etcd);
    let pod = "/masq-test/k8s/pods/team/srv";
    for host in ["h1", "h2"] {
        let (rt, mut c) = etcd.client(host);
        for key in [pod, "/masq-test/k8s/networkpolicies/team/allow-all"] {
            let e = rt.block_on(c.put(key, "{}", None)).expect_err(key);
            assert!(
                e.to_string().contains("permission denied"),
                "{host} {key}: {e}"
            );
        }
    }
    let (rt, mut m) = etcd.client("masq-netpol");
    rt.block_on(m.put(pod, r#"{"metadata":{"labels":{}}}"#, None))
        .expect("the mirror writes a pod's labels");
    let txn = etcd_client::Txn::new().and_then([
        etcd_client::TxnOp::put("/masq-test/k8s/namespaces/team", "{}", None),
        etcd_client::TxnOp::delete(pod, None),
    ]);
    rt.block_on(m.txn(txn)).expect("and a resync's transaction");
    for key in [
        "/masq-test/policy",
        "/masq-test/hosts/198.18.0.1",
        "/masq-test/endpoints/198.18.0.1/a",
        "/masq-test/claims/vips/100/10.0.0.1",
        "/masq-test/k8sx",
        "/elsewhere",
    ] {
        let e = rt.block_on(m.put(key, "x", None)).expect_err(key);
        assert!(e.to_string().contains("permission denied"), "{key}: {e}");
    }
    let seen = rt
        .block_on(m.get(
            "/masq-test/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        ))
        .expect("it reads the prefix");
    assert_eq!(seen.kvs().len(), 1);
    // Hosts read the mirror's keys (masqd decides from them).
    let (rt, mut h1) = etcd.client("h1");
    let got = rt
        .block_on(h1.get("/masq-test/k8s/namespaces/team", None))
        .expect("a host reads k8s/");
    assert_eq!(got.kvs().len(), 1);
    // The mirror's user is no host's nor the operator's.
    let root = Identity::load(&etcd.identity_files("root")).unwrap();
    let e = auth::run(
        &[etcd.url()],
        &root,
        "/masq-test",
        "operator",
        &two_hosts(),
        Some("h1"),
    )
    .expect_err("a host as the mirror")
    .to_string();
    assert!(e.contains("--netpol-mirror"), "{e}");
}

/// h1 (198.18.0.1) and h2 (198.18.0.2), as `init-auth` is told of them.
fn two_hosts() -> [auth::Host; 2] {
    [("h1", "198.18.0.1"), ("h2", "198.18.0.2")].map(|(n, ip)| auth::Host {
        name: n.into(),
        ip: ip.parse().unwrap(),
    })
}

/// A client with etcd's own certificate (`t`), once etcd answers: before
/// authentication is on it answers any certificate of the CA.
fn answering(etcd: &Etcd) -> (tokio::runtime::Runtime, etcd_client::Client) {
    let (rt, mut t) = etcd.client("t");
    let started = Instant::now();
    while rt.block_on(t.get("/", None)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "etcd did not answer"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (rt, t)
}

/// `init-auth` for hosts h1 and h2, once etcd answers.
fn roles_on(etcd: &Etcd) {
    answering(etcd);
    let root = Identity::load(&etcd.identity_files("root")).unwrap();
    auth::run(
        &[etcd.url()],
        &root,
        "/masq-test",
        "operator",
        &two_hosts(),
        Some("masq-netpol"),
    )
    .unwrap();
}

/// Issue 51: with etcd's roles on, a host published another host's
/// endpoint under its own key and every peer moved the endpoint to it.
/// Now h2's masqd cannot publish h1's acme-a (its claims are h1's: etcd's
/// transaction fails), and what h2 writes raw under its own key is held
/// back by every reader until h1 deletes acme-a; then the next claim wins.
#[test]
fn with_roles_a_host_cannot_take_another_hosts_endpoint() {
    let Some(etcd) = Etcd::start() else { return };
    roles_on(&etcd);
    let long = Duration::from_secs(20);
    let acme_a = endpoint("acme-a", "10.0.0.1");
    let (c1, s1) = host_as(
        &etcd,
        "h1",
        "198.18.0.1",
        std::slice::from_ref(&acme_a),
        None,
    );
    assert!(c1.wait_connected(long), "{:?}", c1.health().error);
    // A reader with masqd's registry (the operator's identity reads all).
    let reader = Arc::new(Fake::default());
    let cfg = Config::parse(
        "device: rxe0\nunderlay: { netdev: eth0, ip: 198.18.0.9 }\n",
        "r.yaml",
    );
    assert!(reader.map.set(Registry::new(&cfg.unwrap())).is_ok());
    let _r = start_host(&etcd, "operator", "198.18.0.9", reader.clone());
    let map = reader.map.get().unwrap();
    let host_of = |vip: &str| {
        map.vpc()
            .lookup(100, vip.parse().unwrap())
            .map(|p| p.host.to_string())
    };
    until("the reader places acme-a on h1", long, || {
        host_of("10.0.0.1").as_deref() == Some("198.18.0.1")
    });

    // h2's masqd with acme-a of its own: etcd's transaction refuses it.
    let (c2, _s2) = host_as(
        &etcd,
        "h2",
        "198.18.0.2",
        std::slice::from_ref(&acme_a),
        None,
    );
    assert!(c2.wait_connected(long), "{:?}", c2.health().error);
    let why = c2.health().held_elsewhere.get("acme-a").cloned();
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("endpoint acme-a's of host 198.18.0.1")),
        "{why:?}"
    );
    assert_eq!(c2.claim_conflicts(), 1);
    let (rt, mut h2) = etcd.client("h2");
    let mine = "/masq-test/endpoints/198.18.0.2/acme-a";
    assert_eq!(rt.block_on(h2.get(mine, None)).unwrap().kvs().len(), 0);

    // Written raw under h2's own keys (etcd lets it), as acme-a and under
    // another name at acme-a's vIP: every reader holds both back.
    let raw = |name: &str| {
        let e = endpoint(name, "10.0.0.1");
        serde_json::json!({ "host": "198.18.0.2", "endpoint": e }).to_string()
    };
    rt.block_on(h2.put(mine, raw("acme-a"), None)).unwrap();
    rt.block_on(h2.put("/masq-test/endpoints/198.18.0.2/evil", raw("evil"), None))
        .unwrap();
    until("the reader held both claims back", long, || {
        map.claim_conflicts() == 2
    });
    assert_eq!(host_of("10.0.0.1").as_deref(), Some("198.18.0.1"));
    assert!(!map.policy_refs().iter().any(|e| e.name == "evil"));

    // h1 deletes acme-a: its claims go, the first waiting claim (h2's
    // acme-a, written before evil) is placed, and h2's masqd publishes.
    s1.local.lock().unwrap().clear();
    c1.endpoint_down("acme-a");
    until("the reader places acme-a on h2", long, || {
        host_of("10.0.0.1").as_deref() == Some("198.18.0.2")
    });
    until("h2 published acme-a", long, || {
        c2.health().held_elsewhere.is_empty()
    });
    let claim = rt
        .block_on(h2.get("/masq-test/claims/vips/100/10.0.0.1", None))
        .unwrap();
    let holder = claim
        .kvs()
        .first()
        .map(|kv| kv.value_str().unwrap().to_string());
    assert!(holder.is_some_and(|v| v.contains("198.18.0.2")));
}
