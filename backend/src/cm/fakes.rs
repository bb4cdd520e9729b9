//! A fake of the CM's host, for the CM's unit tests and the fuzzing of
//! the masqd-to-masqd stream (`crate::fuzz`): the example's host1 with its
//! VPC map and policy, a third host, apps that drive the CM as libmasq
//! does (a session, an event channel whose events can be read back), and
//! the link's sending side captured without sockets or threads.
//!
//! host1 (198.18.0.1) serves acme-a (VNI 100) and globex-a (VNI 200), both
//! at 10.0.0.1; host2 (198.18.0.2) holds acme-b and globex-b at 10.0.0.2
//! (the example's map), host3 (198.18.0.3) acme-c and globex-c at
//! 10.0.0.3. The example's policy: acme's clients (acme-a) may reach its
//! servers (acme-b) and not the reverse; globex's 10.0.0.0/24 reach each
//! other.

use super::{Cm, CmHost};
use crate::cluster::source::file_placements;
use crate::config::{Config, TenantLimits};
use crate::endpoints::endpoint::{Endpoint, Origin};
use crate::endpoints::placement::{Placement, SourceId};
use crate::endpoints::registry::Registry;
use crate::enforce::admission::Admission;
use crate::error::{refuse, Result};
use crate::kernel::host::HostDevice;
use crate::peer::link::Link;
use crate::peer::send::Local;
use crate::pipeline::ports::{Conntrack, Decide, Enforce, Guard};
use masq_proto::{self as proto, PeerBody};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

pub const HOST1: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const HOST2: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
pub const HOST3: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
/// Not in the VPC map.
pub const STRANGER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 9);
pub const VIP_A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const VIP_B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const VIP_C: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);
pub const ACME: u32 = 100;
pub const GLOBEX: u32 = 200;

/// A connection RConntrack tracks: (session, QPN) and (remote vIP, QPN).
pub type Tracked = ((u64, u32), (Ipv4Addr, u32));

/// host1 as the CM's host.
pub struct FakeCmHost {
    pub registry: Registry,
    pub admission: Admission,
    device: HostDevice,
    /// The hosts `reannounce_ud` was asked for.
    pub reannounced: Mutex<Vec<Ipv4Addr>>,
    /// Sessions whose app has exited (`app_gone`).
    pub gone: Mutex<Vec<u64>>,
    /// What RConntrack tracks: (session, QPN) -> the remote vIP and QPN.
    pub tracked: Mutex<Vec<Tracked>>,
    /// Every endpoint's vNIC: its GID index and MTU; None, a vNIC that
    /// cannot be read (EIO, as an endpoint without its netns).
    pub vnic: Mutex<Option<(u8, u32)>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Enforce for FakeCmHost {
    fn registry(&self) -> &Registry {
        &self.registry
    }
    fn decide(&self) -> &dyn Decide {
        &self.admission
    }
    fn conntrack(&self) -> &dyn Conntrack {
        &self.admission
    }
    fn guard(&self) -> Option<&dyn Guard> {
        None
    }
}

impl CmHost for FakeCmHost {
    fn host(&self, _ep: &Endpoint) -> &HostDevice {
        &self.device
    }
    fn app_gone(&self, session: u64) -> bool {
        locked(&self.gone).contains(&session)
    }
    fn tracked_qp(&self, session: u64, _ep: &Endpoint, qpn: u32) -> Option<(Ipv4Addr, u32)> {
        locked(&self.tracked)
            .iter()
            .find(|(k, _)| *k == (session, qpn))
            .map(|(_, t)| *t)
    }
    fn reannounce_ud(&self, host: Ipv4Addr) {
        locked(&self.reannounced).push(host);
    }
    fn vnic_route(&self, _ep: &Endpoint) -> Result<(u8, u32)> {
        (*locked(&self.vnic)).ok_or_else(|| refuse(libc::EIO, "cannot read the vNIC"))
    }
}

fn examples() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

impl FakeCmHost {
    /// host1 with the example's policy and these `tenantLimits`.
    pub fn new(limits: TenantLimits) -> FakeCmHost {
        let dir = examples();
        let mut cfg = Config::load(&dir.join("host1.yaml")).unwrap_or_else(|e| panic!("{e}"));
        cfg.tenant_limits = limits;
        let registry = Registry::new(&cfg);
        let mut map = file_placements(&cfg);
        for (tenant, vni) in [("acme", ACME), ("globex", GLOBEX)] {
            map.push(Placement {
                host: HOST3,
                name: Some(format!("{tenant}-c")),
                tenant: tenant.into(),
                vni,
                vip: VIP_C,
                rail: None,
                underlay: None,
                created: 0,
                pod: None,
            });
        }
        let refused = registry.feed(SourceId::File, map);
        assert!(refused.is_empty(), "{refused:?}");
        for e in &cfg.endpoints {
            let sock = format!("/nonexistent/{}.sock", e.name);
            registry.insert(Arc::new(Endpoint::new(
                e.clone(),
                sock.into(),
                Origin::File,
                None,
            )));
        }
        let admission = Admission::new(&cfg, &dir);
        let (policy, _) = admission
            .check(&dir.join("policy.yaml"), &registry.policy_refs())
            .unwrap_or_else(|e| panic!("{e}"));
        admission.apply(policy, &registry);
        FakeCmHost {
            registry,
            admission,
            device: HostDevice::rxe0_for_tests(),
            reannounced: Mutex::default(),
            gone: Mutex::default(),
            tracked: Mutex::default(),
            vnic: Mutex::default(),
        }
    }

    /// This host's endpoint `name` (acme-a or globex-a).
    pub fn endpoint(&self, name: &str) -> Arc<Endpoint> {
        self.registry
            .local_named(name)
            .unwrap_or_else(|| panic!("{name} is not served on host1"))
    }
}

/// host1 with these `tenantLimits`, and its acme-a and globex-a: for
/// tests that need only those.
pub fn setup(limits: TenantLimits) -> (FakeCmHost, Arc<Endpoint>, Arc<Endpoint>) {
    let h = FakeCmHost::new(limits);
    let (a, g) = (h.endpoint("acme-a"), h.endpoint("globex-a"));
    (h, a, g)
}

/// A CM whose ids and channels are numbered from 1 (masqd starts at
/// random numbers) and whose messages to peers are kept (`Outbox`).
pub fn cm(timeout: Duration) -> (Cm, Outbox) {
    let cm = Cm::new(timeout, Default::default());
    cm.number_from(1);
    let (tx, local) = mpsc::channel();
    // No peer threads: nothing connects, so every message is queued.
    let link = Arc::new(Link::new(HOST1, tx, None));
    cm.set_link(link.clone());
    (cm, Outbox { link, local })
}

/// What the CM sent to peer masqds: each peer's queue in the link, and
/// this host's own messages (which the link's local thread would deliver).
pub struct Outbox {
    link: Arc<Link>,
    local: mpsc::Receiver<Local>,
}

impl Outbox {
    /// The messages sent since the last look: this host's own first, then
    /// each peer's in host order.
    pub fn take(&self) -> Vec<(Ipv4Addr, PeerBody)> {
        let mut out = Vec::new();
        while let Ok(job) = self.local.try_recv() {
            match job {
                Local::Deliver(msg, _) => out.push((HOST1, msg)),
                // A full queue refused it: sent all the same, as far as the
                // CM is concerned.
                Local::Dropped(host, msg) => out.push((host, msg)),
            }
        }
        out.extend(self.link.take_queued());
        out
    }
}

/// An app of one of host1's endpoints: a session with one event channel.
pub struct App {
    pub session: u64,
    pub ep: Arc<Endpoint>,
    pub channel: u32,
    /// The app's end of the channel's event socket.
    events: OwnedFd,
}

impl App {
    /// Session `session` of endpoint `name`, with its channel.
    pub fn open(cm: &Cm, h: &FakeCmHost, session: u64, name: &str) -> Result<App> {
        let ep = h.endpoint(name);
        match cm.request(h, session, &ep, &proto::RequestBody::CmCreateChannel)? {
            (proto::ReplyBody::CmCreateChannel(c), Some(events)) => Ok(App {
                session,
                ep,
                channel: c.channel,
                events,
            }),
            _ => Err(refuse(libc::EPROTO, "not a channel")),
        }
    }

    /// After a masqd restart: session `session`'s channel `channel` of
    /// endpoint `name` back under its number (CM_RESTORE_CHANNEL).
    pub fn restore(cm: &Cm, h: &FakeCmHost, session: u64, name: &str, channel: u32) -> Result<App> {
        let ep = h.endpoint(name);
        let req = proto::RequestBody::CmRestoreChannel(proto::CmChannel { channel });
        match cm.request(h, session, &ep, &req)? {
            (proto::ReplyBody::CmRestoreChannel, Some(events)) => Ok(App {
                session,
                ep,
                channel,
                events,
            }),
            _ => Err(refuse(libc::EPROTO, "not a channel")),
        }
    }

    pub fn request(
        &self,
        cm: &Cm,
        h: &FakeCmHost,
        body: proto::RequestBody,
    ) -> Result<proto::ReplyBody> {
        cm.request(h, self.session, &self.ep, &body).map(|r| r.0)
    }

    /// rdma_create_id on the app's channel (RDMA_PS_UDP if `udp`).
    pub fn create_id(&self, cm: &Cm, h: &FakeCmHost, udp: bool) -> Result<u32> {
        let port_space = if udp {
            proto::CM_PS_UDP
        } else {
            proto::CM_PS_TCP
        };
        let req = proto::RequestBody::CmCreateId(proto::CmCreateIdReq {
            channel: self.channel,
            port_space,
        });
        match self.request(cm, h, req)? {
            proto::ReplyBody::CmCreateId(i) => Ok(i.id),
            _ => Err(refuse(libc::EPROTO, "not an id")),
        }
    }

    /// A new id bound to the endpoint's vIP and `port`, listening.
    pub fn listen(&self, cm: &Cm, h: &FakeCmHost, udp: bool, port: u16) -> Result<u32> {
        let id = self.create_id(cm, h, udp)?;
        let addr = proto::CmAddr {
            addr: self.ep.cfg.vip.octets(),
            port,
        };
        self.request(
            cm,
            h,
            proto::RequestBody::CmBindAddr(proto::CmBindReq { id, addr }),
        )?;
        let listen = proto::CmListenReq { id, backlog: 16 };
        self.request(cm, h, proto::RequestBody::CmListen(listen))?;
        Ok(id)
    }

    /// A new id from `src_port` resolved to `dst` and connecting with QP
    /// `qpn`: what rdma_connect sends is in the outbox.
    pub fn connect(
        &self,
        cm: &Cm,
        h: &FakeCmHost,
        udp: bool,
        src_port: u16,
        dst: (Ipv4Addr, u16),
        qpn: u32,
    ) -> Result<u32> {
        let id = self.create_id(cm, h, udp)?;
        let resolve = proto::CmResolveAddrReq {
            id,
            timeout_ms: 1000,
            has_src: 1,
            src: proto::CmAddr {
                addr: self.ep.cfg.vip.octets(),
                port: src_port,
            },
            dst: proto::CmAddr {
                addr: dst.0.octets(),
                port: dst.1,
            },
        };
        self.request(cm, h, proto::RequestBody::CmResolveAddr(resolve))?;
        self.request(
            cm,
            h,
            proto::RequestBody::CmResolveRoute(proto::CmId { id }),
        )?;
        let param = proto::CmConnParam {
            qp_num: qpn,
            retry_count: 7,
            rnr_retry_count: 7,
            ..Default::default()
        };
        self.request(
            cm,
            h,
            proto::RequestBody::CmConnect(proto::CmConnectReq { id, param }),
        )?;
        Ok(id)
    }

    /// A request as libmasq sends it: the reply, or the errno it refused
    /// with.
    pub fn ask(
        &self,
        cm: &Cm,
        h: &FakeCmHost,
        body: proto::RequestBody,
    ) -> Result<proto::ReplyBody, i32> {
        self.request(cm, h, body).map_err(|r| r.errno())
    }

    /// rdma_accept of id `id` with QP `qpn` (and `private_data`).
    pub fn accept(
        &self,
        cm: &Cm,
        h: &FakeCmHost,
        id: u32,
        qpn: u32,
        private_data: &[u8],
    ) -> Result<(), i32> {
        let param = proto::CmConnParam {
            qp_num: qpn,
            responder_resources: 1,
            initiator_depth: 1,
            private_data: private_data.to_vec(),
            ..Default::default()
        };
        let req = proto::RequestBody::CmAccept(proto::CmConnectReq { id, param });
        self.ask(cm, h, req).map(drop)
    }

    /// The events on the app's channel since the last look.
    pub fn events(&self) -> Vec<proto::CmEvent> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: recv(2) into `buf`, on the descriptor `events` holds.
            let n = unsafe {
                libc::recv(
                    self.events.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            let Ok(n) = usize::try_from(n) else { break };
            if n == 0 {
                break;
            }
            match proto::decode_notice(&buf[..n]) {
                Ok(proto::NoticeBody::CmEvent(e)) => out.push(e),
                other => panic!("not a CM event on the channel: {other:?}"),
            }
        }
        out
    }
}

/// Each id's endpoint and state, as `masqctl cm` lists them.
pub fn table(cm: &Cm) -> Vec<(u64, String, String)> {
    cm.list()
        .iter()
        .map(|v| {
            (
                v["id"].as_u64().unwrap_or(0),
                v["endpoint"].as_str().unwrap_or("").to_string(),
                v["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Id `id`'s state as `masqctl cm` lists it ("gone" if it is not listed).
pub fn state(cm: &Cm, id: u32) -> String {
    table(cm)
        .into_iter()
        .find(|(i, _, _)| *i == u64::from(id))
        .map_or_else(|| "gone".to_string(), |(_, _, s)| s)
}

/// The kinds of `events`, in order.
pub fn kinds(events: &[proto::CmEvent]) -> Vec<u32> {
    events.iter().map(|e| e.event).collect()
}

/// The parameters a peer's REQ or REP carries: QP `qpn`, PSN 7, one
/// read in flight each way, retries 7.
pub fn params(qpn: u32) -> proto::PeerParams {
    proto::PeerParams {
        qp_num: qpn,
        psn: 7,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..Default::default()
    }
}
