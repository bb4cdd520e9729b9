//! Prometheus metrics: masqd serves OpenMetrics text on `metrics.listen`
//! (`/metrics`, from `http.rs`).
//!
//! Two kinds. Events are counted where they happen (`Metrics`, in
//! `Parts`): admissions by rule, request latency by opcode, CM events.
//! State is read at scrape time (`Scrape`): sessions, QPs and tracked
//! connections per endpoint, the endpoints' refusal and audit counters,
//! the backstop's drop counters, the policy in force, the VPC map's size,
//! etcd's health in cluster mode and the RNIC port's own counters from
//! sysfs. And `masq_build_info`, which masqd this is. Every label set is
//! bounded: tenants and rules come from the operator's files, opcodes and
//! events from the protocol, peers from the VPC map. Endpoint names, which
//! follow pods (`NAMESPACE.POD`, a Deployment's random suffix in it) or
//! container ids, label only the scrape-time state: a series per endpoint
//! served now, gone with it. Counted events (`Metrics`) never carry one, so
//! masqd's own families do not grow with every pod a host ever served.

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    pub tenant: String,
    /// `allowed` or `denied`.
    pub verdict: &'static str,
    /// The admitting rule (`acme/db/ingress[0]`), `no-policy`, or `none`
    /// for a denial.
    pub rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    pub op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub step: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerStageLabels {
    pub stage: &'static str,
    pub msg: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabels {
    pub peer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CmEventLabels {
    pub tenant: String,
    pub event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

/// The version masqd was built as (the workspace's, as `masqd --version`
/// prints it), and the commit `build.rs` found (`unknown` when built
/// outside a git checkout without `MASQ_COMMIT`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const COMMIT: &str = env!("MASQ_COMMIT");

type HistogramFamily = Family<OpLabels, Histogram, fn() -> Histogram>;

/// Events, counted where they happen. Cheap to clone: each family is
/// shared with the registry that encodes it.
#[derive(Clone)]
pub struct Metrics {
    pub admissions: Family<AdmissionLabels, Counter>,
    pub requests: HistogramFamily,
    /// masqd's work on a QP's move to RTR, step by step (`pipeline::qp`).
    pub rtr_steps: Family<StepLabels, Histogram, fn() -> Histogram>,
    /// The RDMA CM's steps of a QP (CM_ACCEPT_QP, CM_ESTABLISH_QP).
    pub cm_steps: Family<StepLabels, Histogram, fn() -> Histogram>,
    /// Messages between masqds: the hand-off to the link, the handling.
    pub peer: Family<PeerStageLabels, Histogram, fn() -> Histogram>,
    /// Messages refused by a peer's full queue on the link, by peer host.
    pub peer_dropped: Family<PeerLabels, Counter>,
    /// UD QP announcements refused past a peer host's limit, by peer host.
    pub peer_ud_refused: Family<PeerLabels, Counter>,
    pub cm_events: Family<CmEventLabels, Counter>,
    /// Unix time the policy in force was applied.
    pub policy_applied: Gauge<f64, AtomicU64>,
    /// Connected QPs the audit could tie to no endpoint (`enforce::audit`).
    pub audit_unattributed: Counter,
    /// One audit round over every device: the dumps and /proc reads.
    pub audit_round: Histogram,
}

fn request_buckets() -> Histogram {
    // 10 us .. ~5 s: a request under TCG takes 100s of microseconds; one
    // waiting for the backstop may take seconds.
    Histogram::new(exponential_buckets(1e-5, 2.5, 15))
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            admissions: Family::default(),
            requests: Family::new_with_constructor(request_buckets),
            rtr_steps: Family::new_with_constructor(request_buckets),
            cm_steps: Family::new_with_constructor(request_buckets),
            peer: Family::new_with_constructor(request_buckets),
            peer_dropped: Family::default(),
            peer_ud_refused: Family::default(),
            cm_events: Family::default(),
            policy_applied: Gauge::default(),
            audit_unattributed: Counter::default(),
            audit_round: request_buckets(),
        }
    }
}

impl Metrics {
    /// One admission decision: the rule that allowed it, or None (denied).
    pub fn admission(&self, tenant: &str, allowed_by: Option<&str>) {
        let (verdict, rule) = match allowed_by {
            Some(rule) => ("allowed", rule.to_string()),
            None => ("denied", "none".to_string()),
        };
        self.admissions
            .get_or_create(&AdmissionLabels {
                tenant: tenant.to_string(),
                verdict,
                rule,
            })
            .inc();
    }

    pub fn request(&self, opcode: u16, took: Duration) {
        let op = masq_proto::MESSAGES
            .iter()
            .find(|m| m.opcode == opcode)
            .map_or("malformed", |m| m.name);
        self.requests
            .get_or_create(&OpLabels { op })
            .observe(took.as_secs_f64());
    }

    pub fn rtr_step(&self, step: &'static str, took: Duration) {
        self.rtr_steps
            .get_or_create(&StepLabels { step })
            .observe(took.as_secs_f64());
    }

    pub fn cm_step(&self, step: &'static str, took: Duration) {
        self.cm_steps
            .get_or_create(&StepLabels { step })
            .observe(took.as_secs_f64());
    }

    pub fn peer_message(&self, stage: &'static str, msg: &'static str, took: Duration) {
        self.peer
            .get_or_create(&PeerStageLabels { stage, msg })
            .observe(took.as_secs_f64());
    }

    pub fn peer_dropped(&self, peer: std::net::Ipv4Addr) {
        self.peer_dropped
            .get_or_create(&PeerLabels {
                peer: peer.to_string(),
            })
            .inc();
    }

    pub fn peer_ud_refused(&self, peer: std::net::Ipv4Addr) {
        self.peer_ud_refused
            .get_or_create(&PeerLabels {
                peer: peer.to_string(),
            })
            .inc();
    }

    /// An event delivered to an app of one of `tenant`'s endpoints.
    pub fn cm_event(&self, tenant: &str, event: u32) {
        self.cm_events
            .get_or_create(&CmEventLabels {
                tenant: tenant.to_string(),
                event: cm_event_name(event),
            })
            .inc();
    }

    pub fn policy_applied_now(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.policy_applied.set(now);
    }
}

fn cm_event_name(event: u32) -> &'static str {
    // enum rdma_cm_event_type
    match event {
        0 => "addr_resolved",
        1 => "addr_error",
        2 => "route_resolved",
        3 => "route_error",
        4 => "connect_request",
        5 => "connect_response",
        6 => "connect_error",
        7 => "unreachable",
        8 => "rejected",
        9 => "established",
        10 => "disconnected",
        11 => "device_removal",
        15 => "timewait_exit",
        _ => "other",
    }
}

/// What masqd's state looks like now, or None once masqd is gone.
pub type Sampler = Box<dyn Fn() -> Option<Sample> + Send + Sync>;

/// The registry masqd serves: the event families and the scrape-time state.
pub fn registry(m: &Metrics, sample: Sampler) -> Registry {
    let mut r = Registry::default();
    register_requests(&mut r, m);
    register_peers(&mut r, m);
    r.register(
        "masq_cm_events",
        "RDMA CM events delivered to tenants' apps, by tenant and event",
        m.cm_events.clone(),
    );
    r.register(
        "masq_policy_applied_timestamp_seconds",
        "When the security-group policy in force was applied (Unix time)",
        m.policy_applied.clone(),
    );
    register_audit(&mut r, m);
    register_build(&mut r);
    r.register_collector(Box::new(Scrape(sample)));
    r
}

/// The tenants' requests: admissions by rule, and the time of each
/// request and of the QP's and the CM's steps.
fn register_requests(r: &mut Registry, m: &Metrics) {
    r.register(
        "masq_admissions",
        "Connections admitted or denied by the security groups, by rule",
        m.admissions.clone(),
    );
    r.register(
        "masq_request_duration_seconds",
        "Time masqd took to answer a frontend request, by opcode",
        m.requests.clone(),
    );
    r.register(
        "masq_rtr_step_duration_seconds",
        "Time of each step of masqd's work on a QP's move to RTR: route, owner, \
         admit, track, backstop (the wait for its elements), modify (the ioctl), record",
        m.rtr_steps.clone(),
    );
    r.register(
        "masq_cm_qp_step_duration_seconds",
        "Time of each step of the RDMA CM's accept or establish of a QP in masqd: \
         attrs (the id's QP attributes), rtr, rts (the QP pipeline's moves), finish \
         (the accept or establish sent on)",
        m.cm_steps.clone(),
    );
}

/// The messages between masqds: their time, and those refused.
fn register_peers(r: &mut Registry, m: &Metrics) {
    r.register(
        "masq_peer_message_duration_seconds",
        "Messages between masqds (the RDMA CM's, UD QP announcements): queued = from \
         the CM's send to its write on the link (after the CM's lock is released, and \
         through the peer's sender thread while its connection is not up or busy); \
         handled = the reader thread's work on one received message",
        m.peer.clone(),
    );
    r.register(
        "masq_peer_messages_dropped",
        "Messages for a peer masqd refused because its queue on the link was full \
         (the peer took nothing for a while); the app sees a CM timeout",
        m.peer_dropped.clone(),
    );
    r.register(
        "masq_peer_ud_announcements_refused",
        "UD QP announcements of a peer masqd dropped because that host had 65536 in \
         force already (a compromised or broken peer announcing in a loop)",
        m.peer_ud_refused.clone(),
    );
}

/// The QP audit: the QPs it could tie to no endpoint, and its rounds.
fn register_audit(r: &mut Registry, m: &Metrics) {
    r.register(
        "masq_audit_unattributed_qps",
        "Connected QPs the QP audit could tie to no endpoint (no creator named by the \
         kernel for the QP, its PD or its context, and the device's uverbs file held \
         by no endpoint's processes or by several endpoints')",
        m.audit_unattributed.clone(),
    );
    r.register(
        "masq_audit_round_duration_seconds",
        "Time of one QP audit round: the QP dump of every device, the PD and context \
         dumps and /proc reads it needed",
        m.audit_round.clone(),
    );
}

/// `masq_build_info`: which masqd this is.
fn register_build(r: &mut Registry) {
    let build: Family<BuildLabels, Gauge> = Family::default();
    build
        .get_or_create(&BuildLabels {
            version: VERSION,
            commit: COMMIT,
        })
        .set(1);
    r.register(
        "masq_build_info",
        "Which masqd this is: its version and commit (value 1)",
        build,
    );
}

/// What is read from masqd's state at each scrape.
struct Scrape(Sampler);

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scrape")
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: String,
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    endpoint: String,
    tenant: String,
    what: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CounterLabels {
    counter: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PortLabels {
    device: String,
    counter: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    device: String,
    /// `transmit` or `receive`.
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClaimLabels {
    whose: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    version: String,
    file: String,
}

fn put(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: &impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    metric.encode(enc.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl prometheus_client::collector::Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = (self.0)() else {
            return Ok(());
        };
        encode_endpoints(&mut enc, &s.endpoints)?;
        if let Some(drops) = &s.backstop_drops {
            encode_backstop_drops(&mut enc, drops)?;
        }
        if let Some((version, file)) = &s.policy {
            encode_policy(&mut enc, version, file)?;
        }
        encode_vpc(&mut enc, &s.vpc)?;
        if let Some(c) = &s.cluster {
            encode_cluster(&mut enc, c)?;
        }
        encode_port_counters(&mut enc, &s.port_counters)
    }
}

/// Each served endpoint's sessions, QPs, connections and refusals.
fn encode_endpoints(
    enc: &mut DescriptorEncoder,
    endpoints: &[EndpointSample],
) -> Result<(), std::fmt::Error> {
    let sessions: Family<EndpointLabels, Gauge> = Family::default();
    let qps: Family<EndpointLabels, Gauge> = Family::default();
    let tracked: Family<EndpointLabels, Gauge> = Family::default();
    let refused_req: Family<EndpointLabels, Counter> = Family::default();
    let refused_conn: Family<EndpointLabels, Counter> = Family::default();
    let bypasses: Family<EndpointLabels, Counter> = Family::default();
    let kills: Family<EndpointLabels, Counter> = Family::default();
    let limits: Family<LimitLabels, Counter> = Family::default();
    for e in endpoints {
        for &(what, n) in &e.limit_refusals {
            let l = LimitLabels {
                endpoint: e.name.clone(),
                tenant: e.tenant.clone(),
                what,
            };
            limits.get_or_create(&l).inc_by(n);
        }
        let l = EndpointLabels {
            endpoint: e.name.clone(),
            tenant: e.tenant.clone(),
        };
        sessions.get_or_create(&l).set(e.sessions as i64);
        qps.get_or_create(&l).set(e.qps as i64);
        tracked.get_or_create(&l).set(e.tracked as i64);
        refused_req.get_or_create(&l).inc_by(e.refused_requests);
        refused_conn.get_or_create(&l).inc_by(e.refused_connections);
        bypasses.get_or_create(&l).inc_by(e.audit_bypasses);
        kills.get_or_create(&l).inc_by(e.audit_kills);
    }
    put(enc, "masq_sessions", "Open app sessions", &sessions)?;
    put(enc, "masq_qps", "QPs masqd knows of", &qps)?;
    put(
        enc,
        "masq_tracked_connections",
        "Connections in the RConntrack table",
        &tracked,
    )?;
    put(
        enc,
        "masq_refused_requests",
        "Frontend requests refused (bad input or denied)",
        &refused_req,
    )?;
    put(
        enc,
        "masq_refused_connections",
        "Connections to the endpoint's socket from outside the endpoint",
        &refused_conn,
    )?;
    put(
        enc,
        "masq_audit_bypasses",
        "Connected QPs masqd never admitted, found by the QP audit",
        &bypasses,
    )?;
    put(
        enc,
        "masq_audit_kills",
        "Processes or cgroups killed by the QP audit",
        &kills,
    )?;
    put(
        enc,
        "masq_tenant_limit_refusals",
        "Requests refused at the endpoint's tenantLimits (or masqd's descriptor \
         reserve), and CM events dropped on a full channel, by what",
        &limits,
    )?;
    Ok(())
}

/// The backstop's drop counters, by nftables counter.
fn encode_backstop_drops(
    enc: &mut DescriptorEncoder,
    drops: &[(String, u64, u64)],
) -> Result<(), std::fmt::Error> {
    let packets: Family<CounterLabels, Counter> = Family::default();
    let bytes: Family<CounterLabels, Counter> = Family::default();
    for (name, p, b) in drops {
        let l = CounterLabels {
            counter: name.clone(),
        };
        packets.get_or_create(&l).inc_by(*p);
        bytes.get_or_create(&l).inc_by(*b);
    }
    put(
        enc,
        "masq_backstop_dropped_packets",
        "RoCE packets the backstop dropped, by nftables counter",
        &packets,
    )?;
    put(
        enc,
        "masq_backstop_dropped_bytes",
        "Bytes of RoCE packets the backstop dropped, by nftables counter",
        &bytes,
    )?;
    Ok(())
}

/// The policy in force.
fn encode_policy(
    enc: &mut DescriptorEncoder,
    version: &str,
    file: &str,
) -> Result<(), std::fmt::Error> {
    let info: Family<PolicyLabels, Gauge> = Family::default();
    info.get_or_create(&PolicyLabels {
        version: version.to_owned(),
        file: file.to_owned(),
    })
    .set(1);
    put(
        enc,
        "masq_policy_info",
        "The security-group policy in force (value 1)",
        &info,
    )?;
    Ok(())
}

/// The VPC map's size.
fn encode_vpc(enc: &mut DescriptorEncoder, vpc: &VpcSample) -> Result<(), std::fmt::Error> {
    let hosts = ConstGauge::new(vpc.hosts as i64);
    put(
        enc,
        "masq_vpc_hosts",
        "Hosts the VPC map places endpoints on (this one included if it serves any)",
        &hosts,
    )?;
    let entries: Family<SourceLabels, Gauge> = Family::default();
    for &(source, n) in &vpc.endpoints {
        entries
            .get_or_create(&SourceLabels { source })
            .set(n as i64);
    }
    put(
        enc,
        "masq_vpc_endpoints",
        "Entries of the VPC map, by where each came from (local, cluster, file)",
        &entries,
    )?;
    Ok(())
}

/// etcd's health as this host sees it (cluster mode).
fn encode_cluster(enc: &mut DescriptorEncoder, c: &ClusterSample) -> Result<(), std::fmt::Error> {
    let up = ConstGauge::new(i64::from(c.connected));
    put(
        enc,
        "masq_cluster_up",
        "1 while etcd is reachable and followed, 0 while degraded (serving the last view)",
        &up,
    )?;
    let since = ConstGauge::new(i64::try_from(c.since).unwrap_or(i64::MAX));
    put(
        enc,
        "masq_cluster_state_since_timestamp_seconds",
        "When masq_cluster_up last changed (Unix time)",
        &since,
    )?;
    let revision = ConstGauge::new(c.revision);
    put(
        enc,
        "masq_cluster_revision",
        "The etcd revision this host's view was last read or watched at",
        &revision,
    )?;
    let conflicts: Family<ClaimLabels, Counter> = Family::default();
    for &(whose, n) in &c.claim_conflicts {
        conflicts.get_or_create(&ClaimLabels { whose }).inc_by(n);
    }
    put(
        enc,
        "masq_cluster_claim_conflicts",
        "Claims of an endpoint's name or vIP that another host held: peers' claims this \
         host held back (peer), this host's publications etcd refused (own)",
        &conflicts,
    )?;
    if let Some(t) = c.certificate_not_after {
        put(
            enc,
            "masq_cluster_certificate_expiry_timestamp_seconds",
            "When this host's certificate (cluster.tls.cert, as last loaded) expires \
             (Unix time)",
            &ConstGauge::new(t),
        )?;
    }
    Ok(())
}

/// The port counters in the units Prometheus expects: the data counters,
/// which sysfs counts in 4-octet words, as bytes; the packet counters as
/// packets; every other file of `counters/` and `hw_counters/` (errors,
/// discards, a driver's own packet and event counts) by its name in one
/// family.
fn encode_port_counters(
    enc: &mut DescriptorEncoder,
    devices: &[(String, Vec<(String, u64)>)],
) -> Result<(), std::fmt::Error> {
    let bytes: Family<DirectionLabels, Counter> = Family::default();
    let packets: Family<DirectionLabels, Counter> = Family::default();
    let other: Family<PortLabels, Counter> = Family::default();
    for (device, counters) in devices {
        for (name, v) in counters {
            let dir = |direction| DirectionLabels {
                device: device.clone(),
                direction,
            };
            match name.as_str() {
                "port_xmit_data" => bytes
                    .get_or_create(&dir("transmit"))
                    .inc_by(v.saturating_mul(4)),
                "port_rcv_data" => bytes
                    .get_or_create(&dir("receive"))
                    .inc_by(v.saturating_mul(4)),
                "port_xmit_packets" => packets.get_or_create(&dir("transmit")).inc_by(*v),
                "port_rcv_packets" => packets.get_or_create(&dir("receive")).inc_by(*v),
                _ => other
                    .get_or_create(&PortLabels {
                        device: device.clone(),
                        counter: name.clone(),
                    })
                    .inc_by(*v),
            };
        }
    }
    put(
        enc,
        "masq_rnic_port_bytes",
        "Bytes the served RNIC ports sent and received (sysfs counters/port_xmit_data \
         and port_rcv_data, which count 4-octet words, times 4), one device per rail",
        &bytes,
    )?;
    put(
        enc,
        "masq_rnic_port_packets",
        "Packets the served RNIC ports sent and received (sysfs counters/port_xmit_packets \
         and port_rcv_packets), one device per rail",
        &packets,
    )?;
    put(
        enc,
        "masq_rnic_port",
        "The served RNIC ports' other counters, each a count of the packets or events \
         its sysfs file names (counters/ and hw_counters/), one device per rail",
        &other,
    )?;
    Ok(())
}

/// One endpoint's numbers at a scrape.
pub struct EndpointSample {
    pub name: String,
    pub tenant: String,
    pub sessions: usize,
    pub qps: usize,
    pub tracked: usize,
    pub refused_requests: u64,
    pub refused_connections: u64,
    pub audit_bypasses: u64,
    pub audit_kills: u64,
    /// Refusals at its `tenantLimits`, by what (`endpoints::usage`).
    pub limit_refusals: Vec<(&'static str, u64)>,
}

/// masqd's state at a scrape (see `Parts::sample`).
pub struct Sample {
    pub endpoints: Vec<EndpointSample>,
    /// (nftables counter, packets, bytes); None with the backstop off.
    pub backstop_drops: Option<Vec<(String, u64, u64)>>,
    /// (version, file) of the policy in force.
    pub policy: Option<(String, String)>,
    /// Each rail's device and its port's counters.
    pub port_counters: Vec<(String, Vec<(String, u64)>)>,
    pub vpc: VpcSample,
    /// Cluster mode only.
    pub cluster: Option<ClusterSample>,
}

/// The VPC map's size (`Registry::census`).
pub struct VpcSample {
    pub hosts: usize,
    /// Entries by source: `local`, `cluster`, `file`.
    pub endpoints: [(&'static str, usize); 3],
}

/// etcd's health as this host sees it (`cluster::Health`).
pub struct ClusterSample {
    pub connected: bool,
    /// Unix seconds of the last change of state.
    pub since: u64,
    pub revision: i64,
    /// This host's certificate's notAfter, Unix seconds (None: insecure).
    pub certificate_not_after: Option<i64>,
    /// Conflicting claims so far: `peer` (other hosts' claims held back
    /// here), `own` (this host's publications another host's claim
    /// refused).
    pub claim_conflicts: [(&'static str, u64); 2],
}

/// The port's counters from `<port dir>/counters` and `hw_counters`
/// (rxe has only the latter), each file one number; unreadable ones are
/// left out (some hardware counters refuse reads on some ports).
pub fn port_counters(port_dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for sub in ["counters", "hw_counters"] {
        let Ok(dir) = std::fs::read_dir(port_dir.join(sub)) else {
            continue;
        };
        for f in dir.flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if let Some(v) = std::fs::read_to_string(f.path())
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
            {
                out.push((name, v));
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
