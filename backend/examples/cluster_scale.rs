//! Cluster mode at scale, without RDMA (run by `make bench`): one host
//! follows N endpoints published by others, then a stream of policy
//! changes, through a real etcd on the loopback, over TLS with client
//! certificates as in a deployment. The follower feeds masqd's
//! own registry and admission (what a masqd does with each change, minus
//! sessions and nftables). Prints one JSON object.
//!
//! cluster_scale [--endpoints N] [--rate PER_S] [--seconds S]

use masq_backend::cluster::source::{FileSource, Source, Store};
use masq_backend::cluster::Cluster;
use masq_backend::config::{Config, EndpointConfig};
use masq_backend::endpoints::placement::{Placement, SourceId};
use masq_backend::endpoints::registry::Registry;
use masq_backend::enforce::admission::Admission;
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The registry and admission, fed as masqd feeds them.
struct Follower {
    registry: Registry,
    admission: Admission,
    /// When each policy version (by text length tag) was applied.
    applied: Mutex<Vec<(String, Instant)>>,
}

impl Follower {
    fn rebind(&self, changed: &[&str]) {
        if let Some((p, _)) = self
            .admission
            .rebind(|| self.registry.policy_refs(), changed)
        {
            self.admission.apply(p, &self.registry);
        }
    }
}

impl Store for Follower {
    fn placements(&self, from: SourceId, endpoints: Vec<Placement>) {
        self.registry.feed(from, endpoints);
        self.rebind(&[]);
    }
    fn placed(&self, from: SourceId, r: Placement) {
        let changed = self.registry.place(from, r).names;
        if !changed.is_empty() {
            self.rebind(&changed.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }
    fn unplaced(&self, from: SourceId, host: Ipv4Addr, name: &str) {
        let changed = self.registry.unplace(from, host, name).names;
        if !changed.is_empty() {
            self.rebind(&changed.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }
    fn policy(&self, _from: SourceId, text: &str, file: &str) -> masq_backend::error::Result<()> {
        let (p, _) = self
            .admission
            .check_text(text, file, &self.registry.policy_refs())?;
        self.admission.apply(p, &self.registry);
        let tag = text.lines().next().unwrap_or_default().to_string();
        self.applied.lock().unwrap().push((tag, Instant::now()));
        Ok(())
    }
    fn local_endpoints(&self) -> Vec<EndpointConfig> {
        Vec::new()
    }
    fn policy_version(&self) -> Option<String> {
        self.admission
            .active()
            .map(|p| p.version_hash().to_string())
    }
    fn file_policy(&self) -> Option<(String, String)> {
        None
    }
    fn mirrored_all(&self, all: masq_policy::netpol::Snapshot) {
        self.admission.mirrored_all(all, &self.registry);
    }
    fn mirrored(&self, m: masq_backend::admit::Mirrored) {
        self.admission.mirrored(m, &self.registry);
    }
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: not a number: {v}"))
        })
        .unwrap_or(default)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// CPU seconds of this process's threads named `name`.
fn thread_cpu(name: &str) -> f64 {
    let tick = 100.0; // USER_HZ on Linux
    let mut total = 0.0;
    for t in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !comm.trim().starts_with(name) {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let after = stat.rsplit(')').next().unwrap_or_default();
        let f: Vec<&str> = after.split_whitespace().collect();
        // utime and stime: fields 14 and 15 of stat, 12 and 13 after ") ".
        let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
            + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        total += ticks / tick;
    }
    total
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let n = arg("--endpoints", 10_000);
    let rate = arg("--rate", 100);
    let seconds = arg("--seconds", 10);
    let dir = tempfile::tempdir().unwrap();
    let (client_port, peer_port) = (free_port(), free_port());
    let url = format!("https://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    // The follower's and the writer's identity (bench), etcd's too.
    let pki = dir.path().join("pki");
    let made = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../integration/make-pki"
    ))
    .arg(dir.path().join("ca"))
    .arg(&pki)
    .arg("bench=127.0.0.1")
    .status()
    .expect("cannot run integration/make-pki");
    assert!(made.success(), "integration/make-pki failed");
    let (ca, cert, key) = (
        pki.join("ca.pem"),
        pki.join("bench.pem"),
        pki.join("bench-key.pem"),
    );
    let mut etcd = Command::new("etcd")
        .args(["--name", "bench", "--data-dir"])
        .arg(dir.path().join("etcd"))
        .args([
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args(["--initial-cluster", &format!("bench={peer}")])
        .arg("--cert-file")
        .arg(&cert)
        .arg("--key-file")
        .arg(&key)
        .arg("--trusted-ca-file")
        .arg(&ca)
        .arg("--client-cert-auth")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot run etcd (make deps installs etcd-server)");

    let policy_path = dir.path().join("policy.yaml");
    let policy = |tag: u64| {
        format!(
            "# change {tag}\nversion: 1\ntenants:\n  acme:\n    securityGroups:\n      web:\n        members: [ep-0, ep-1]\n      db:\n        members: [ep-2, 10.{}.0.0/16]\n        ingress:\n          - from: {{ group: web }}\n            protocol: rdma\n",
            tag % 200
        )
    };
    std::fs::write(&policy_path, policy(0)).unwrap();
    let cfg = Config::parse(
        &format!(
            "device: rxe0\nunderlay: {{ netdev: eth0, ip: 198.18.0.1 }}\npolicy: {}\n\
             cluster: {{ etcd: [\"{url}\"], leaseSeconds: 10, \
             tls: {{ ca: {}, cert: {}, key: {} }} }}\n",
            policy_path.display(),
            ca.display(),
            cert.display(),
            key.display()
        ),
        "bench.yaml",
    )
    .unwrap();
    let registry = Registry::new(&cfg);
    let admission = Admission::new(&cfg, dir.path());
    let follower = Arc::new(Follower {
        registry,
        admission,
        applied: Mutex::new(Vec::new()),
    });
    let me = "198.18.0.1".parse().unwrap();
    let cluster =
        Cluster::new(cfg.cluster.clone().unwrap(), me, vec![("rail0".into(), me)]).unwrap();
    // The file's policy first, as masqd starts.
    Arc::new(FileSource::new(&cfg, dir.path()).unwrap())
        .start(follower.clone())
        .unwrap();
    cluster.clone().start(follower.clone()).unwrap();
    assert!(
        cluster.wait_connected(Duration::from_secs(30)),
        "etcd did not come up"
    );
    let rss_before = rss_kib();
    let cpu_before = thread_cpu("cluster");

    // Writer: another host publishing N endpoints, 100 per transaction.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(
            std::fs::read(&ca).unwrap(),
        ))
        .identity(etcd_client::Identity::from_pem(
            std::fs::read(&cert).unwrap(),
            std::fs::read(&key).unwrap(),
        ));
    let mut client = rt
        .block_on(etcd_client::Client::connect(
            [url.as_str()],
            Some(etcd_client::ConnectOptions::new().with_tls(tls)),
        ))
        .unwrap();
    let started = Instant::now();
    let names: Vec<u64> = (0..n).collect();
    for chunk in names.chunks(100) {
        let ops: Vec<etcd_client::TxnOp> = chunk
            .iter()
            .map(|i| {
                let name = format!("ep-{i}");
                let e = serde_json::json!({ "host": "198.18.0.2", "endpoint": {
                    "name": name, "tenant": "acme", "vni": 100,
                    "vip": Ipv4Addr::from(0x0a00_0000u32 + *i as u32 + 1),
                    "netns": format!("/run/netns/{name}"), "vnic": "eth0" } });
                etcd_client::TxnOp::put(
                    format!("/masq/endpoints/198.18.0.2/{name}"),
                    e.to_string(),
                    None,
                )
            })
            .collect();
        rt.block_on(client.txn(etcd_client::Txn::new().and_then(ops)))
            .unwrap();
    }
    let written = started.elapsed();
    while follower.registry.placed_by(SourceId::Cluster).len() < n as usize {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "follower stalled"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let followed = started.elapsed();
    let cpu_endpoints = thread_cpu("cluster") - cpu_before;
    let rss_after = rss_kib();

    // Policy changes at `rate` per second.
    let cpu_before = thread_cpu("cluster");
    let total = rate * seconds;
    let mut sent = Vec::new();
    let t0 = Instant::now();
    for k in 1..=total {
        let due = t0 + Duration::from_secs_f64(k as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let text = policy(k);
        let value = serde_json::json!({ "text": text, "file": "bench-policy.yaml" }).to_string();
        sent.push((format!("# change {k}"), Instant::now()));
        rt.block_on(client.put("/masq/policy", value, None))
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while follower.applied.lock().unwrap().len() < total as usize && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let cpu_policy = thread_cpu("cluster") - cpu_before;
    let applied = follower.applied.lock().unwrap().clone();
    let mut lags: Vec<f64> = sent
        .iter()
        .filter_map(|(tag, at)| {
            let (_, done) = applied.iter().find(|(t, _)| t == tag)?;
            Some(done.duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    let _ = etcd.kill();
    let _ = etcd.wait();
    let out = serde_json::json!({
        "endpoints": {
            "count": n,
            "write_s": written.as_secs_f64(),
            "followed_s": followed.as_secs_f64(),
            "cpu_s": cpu_endpoints,
            "cpu_us_per_endpoint": cpu_endpoints * 1e6 / n as f64,
            "rss_kib_before": rss_before,
            "rss_kib_after": rss_after,
            "rss_bytes_per_endpoint": (rss_after.saturating_sub(rss_before)) as f64 * 1024.0 / n as f64,
        },
        "policy_changes": {
            "rate_per_s": rate,
            "sent": total,
            "applied": lags.len(),
            "lag_ms_median": if lags.is_empty() { None } else { Some(quantile(&mut lags, 0.5)) },
            "lag_ms_p99": if lags.is_empty() { None } else { Some(quantile(&mut lags, 0.99)) },
            "lag_ms_max": lags.iter().cloned().fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x)))),
            "cpu_s": cpu_policy,
            "cpu_ms_per_change": cpu_policy * 1000.0 / total as f64,
            "cpu_share": cpu_policy / seconds as f64,
        },
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
