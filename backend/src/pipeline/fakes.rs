//! Fakes the core's unit tests share: a kernel with one QP, the host
//! (the example config's VPC map and policy, RConntrack's table, the
//! audit's vouchers, an optional backstop guard: every trait of `QpHost`)
//! and the guard, whose calls go to a log.
use crate::config::Config;
use crate::endpoints::endpoint::{Endpoint, Origin};
use crate::endpoints::registry::Registry;
use crate::enforce::admission::Admission;
use crate::enforce::audit::Admitted;
use crate::error::{refuse, Result};
use crate::kernel::ibv::{
    IBV_QPS_INIT, IBV_QPS_RESET, IBV_QPS_RTR, IBV_QP_AV, IBV_QP_DEST_QPN, IBV_QP_STATE,
};
use crate::kernel::ownership::Verdict;
use crate::kernel::rdma_nl::QpInfo;
use crate::kernel::uverbs;
use crate::pipeline::ports::{
    AhFiles, Audit, CmView, Conntrack, Decide, Enforce, Guard, QpKernel, Rails, Removal, StepTimes,
    Vouchers,
};
use crate::pipeline::session::Session;
use masq_proto as proto;
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::io;
use std::net::Ipv4Addr;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

pub(super) const HANDLE: u32 = 1;
pub(super) const QPN: u32 = 0x11;
pub(super) const PID: i32 = 4242;

#[derive(Default)]
pub(super) struct FakeKernel {
    pub(super) qp: RefCell<uverbs::QueryQpResp>,
    pub(super) ran: RefCell<Vec<uverbs::ModifyQp>>,
    /// The kernel's word on the QPN: None = another process's.
    pub(super) mine: bool,
    /// The QP is gone from the kernel (destroyed).
    pub(super) gone: std::cell::Cell<bool>,
    /// How often the kernel was asked who owns the QPN.
    pub(super) owner_lookups: std::cell::Cell<u32>,
    /// How often the QP was queried on the app's file.
    pub(super) queries: std::cell::Cell<u32>,
}

impl QpKernel for FakeKernel {
    fn modify(&self, cmd: &uverbs::ModifyQp) -> Result<()> {
        if cmd.qp_handle != HANDLE {
            return Err(io::Error::from_raw_os_error(libc::ENOENT).into());
        }
        self.ran.borrow_mut().push(*cmd);
        let mut qp = self.qp.borrow_mut();
        if cmd.attr_mask & IBV_QP_STATE != 0 {
            qp.qp_state = cmd.qp_state;
        }
        if cmd.attr_mask & IBV_QP_AV != 0 {
            qp.dest = cmd.dest;
        }
        if cmd.attr_mask & IBV_QP_DEST_QPN != 0 {
            qp.dest_qp_num = cmd.dest_qp_num;
        }
        Ok(())
    }
    fn query(&self, qp_handle: u32, _mask: u32) -> Result<uverbs::QueryQpResp> {
        self.queries.set(self.queries.get() + 1);
        if qp_handle != HANDLE {
            return Err(io::Error::from_raw_os_error(libc::ENOENT).into());
        }
        Ok(*self.qp.borrow())
    }
    fn owner(&self, qpn: u32, qp_type: u32) -> Result<Verdict> {
        self.owner_lookups.set(self.owner_lookups.get() + 1);
        if self.gone.get() {
            return Err(refuse(
                libc::ENOENT,
                format!("no QP {qpn:#x} on the device"),
            ));
        }
        if qpn != QPN || !self.mine {
            return Err(refuse(libc::EPERM, "claimed QPN refused: not the app's"));
        }
        if self.qp.borrow().qp_state == IBV_QPS_RESET {
            return Ok(Verdict::NoPortYet);
        }
        Ok(Verdict::Owned(QpInfo {
            lqpn: qpn,
            port: Some(1),
            qp_type: qp_type as u8,
            state: self.qp.borrow().qp_state,
            pid: Some(PID as u32),
            kern_name: None,
            rqpn: None,
            pdn: Some(1),
        }))
    }
}

pub(super) struct FakeHost {
    pub(super) admission: Admission,
    pub(super) registry: Registry,
    pub(super) admitted: Admitted,
    pub(super) guard: Option<FakeGuard>,
    /// The AH handles `destroy_ah` destroyed on the app's file.
    pub(super) destroyed: RefCell<Vec<u32>>,
    /// The UD QPs announced to the other hosts: (QPN, up).
    pub(super) announced: RefCell<Vec<(u32, bool)>>,
    /// The UD QPs announced at INIT.
    pub(super) early: RefCell<Vec<u32>>,
    /// The steps timed (a move to RTR's, the CM's), in order.
    pub(super) timed_steps: RefCell<Vec<&'static str>>,
    /// The CM's side of every QP (none: no QP is the CM's), and how
    /// often it was asked.
    pub(super) cm: Option<rconntrack::CmSide>,
    pub(super) cm_asked: std::cell::Cell<u32>,
}

impl Enforce for FakeHost {
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
        self.guard.as_ref().map(|g| g as &dyn Guard)
    }
}

impl Rails for FakeHost {
    fn port(&self, _: &Endpoint) -> u8 {
        1
    }
    fn rail_name(&self, _: &Endpoint) -> &str {
        vbond::FIRST_RAIL
    }
    /// Virtual index 1 (the vNIC's IPv4 GID) is the host's index 3.
    fn sgid_index(&self, _ep: &Endpoint, vindex: u32) -> Result<u32> {
        match vindex {
            1 => Ok(3),
            _ => Err(refuse(libc::EINVAL, format!("no virtual GID {vindex}"))),
        }
    }
    /// 192.168.1.1 on the first rail, .2 on the second, ...
    fn underlay(&self, ep: &Endpoint) -> Ipv4Addr {
        Ipv4Addr::new(192, 168, 1, 1 + ep.rail as u8)
    }
}

impl CmView for FakeHost {
    fn cm_side(&self, _ep: &Endpoint, _qpn: u32) -> Option<rconntrack::CmSide> {
        self.cm_asked.set(self.cm_asked.get() + 1);
        self.cm
    }
    fn ud_announce(&self, _ep: &Endpoint, qpn: u32, up: bool) {
        self.announced.borrow_mut().push((qpn, up));
    }
    fn ud_announce_early(&self, _ep: &Endpoint, qpn: u32) {
        self.early.borrow_mut().push(qpn);
    }
    fn ud_sender(&self, _host: Ipv4Addr, _qpn: u32) -> Option<(u32, Ipv4Addr)> {
        None
    }
    fn local_sender(&self, _vni: u32, _qpn: u32) -> Option<Ipv4Addr> {
        None
    }
}

impl Audit for FakeHost {
    fn vouchers(&self) -> &dyn Vouchers {
        &self.admitted
    }
}

impl AhFiles for FakeHost {
    fn destroy_ah(&self, _session: u64, ah_handle: u32) -> Option<Result<()>> {
        self.destroyed.borrow_mut().push(ah_handle);
        Some(Ok(()))
    }
}

impl StepTimes for FakeHost {
    fn rtr_step(&self, step: &'static str, _took: Duration) {
        self.timed_steps.borrow_mut().push(step);
    }
    fn cm_step(&self, step: &'static str, _took: Duration) {
        self.timed_steps.borrow_mut().push(step);
    }
}

/// host1 of the examples, with `policy` (YAML) or the example's.
pub(super) fn setup(policy: Option<&str>) -> (FakeHost, Session) {
    setup_limited(policy, Default::default())
}

/// `setup` with these `tenantLimits`.
pub(super) fn setup_limited(
    policy: Option<&str>,
    limits: crate::config::TenantLimits,
) -> (FakeHost, Session) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut cfg = Config::load(&dir.join("host1.yaml")).unwrap_or_else(|e| panic!("{e}"));
    cfg.tenant_limits = limits;
    let registry = Registry::new(&cfg);
    let file = crate::endpoints::placement::SourceId::File;
    assert!(registry
        .feed(file, crate::cluster::source::file_placements(&cfg))
        .is_empty());
    let admission = Admission::new(&cfg, &dir);
    let refs = registry.policy_refs();
    let (p, _) = match policy {
        Some(text) => admission.check_text(text, "test.yaml", &refs),
        None => admission.check(&dir.join("policy.yaml"), &refs),
    }
    .unwrap_or_else(|e| panic!("{e}"));
    admission.apply(p, &registry);
    let acme_a = cfg
        .endpoints
        .iter()
        .find(|e| e.name == "acme-a")
        .cloned()
        .expect("acme-a in the example");
    let ep = Arc::new(Endpoint::new(
        acme_a,
        "/nonexistent/acme-a.sock".into(),
        Origin::File,
        None,
    ));
    let host = FakeHost {
        admission,
        registry,
        admitted: Admitted::default(),
        guard: None,
        destroyed: RefCell::default(),
        announced: RefCell::default(),
        early: RefCell::default(),
        timed_steps: RefCell::default(),
        cm: None,
        cm_asked: Default::default(),
    };
    (host, Session::new(7, PID, ep))
}

pub(super) fn kernel() -> FakeKernel {
    FakeKernel {
        mine: true,
        ..Default::default()
    }
}

pub(super) fn v4_mapped(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// The backstop's guard: its calls go to `log`, which a `Logged`
/// kernel shares, so their order against the kernel's commands shows.
/// Its QP elements are in force at once, as the backstop's eBPF maps'
/// are.
#[derive(Default)]
pub(super) struct FakeGuard {
    pub(super) log: Rc<RefCell<Vec<String>>>,
    pub(super) in_force: Rc<RefCell<BTreeSet<String>>>,
    /// The next element put in is refused, as by a full eBPF map.
    pub(super) refuse_next: Cell<bool>,
    refused: Cell<bool>,
}

impl FakeGuard {
    fn write(&self, add: bool, element: String) {
        if add && self.refuse_next.take() {
            self.log.borrow_mut().push(format!("refused {element}"));
            self.refused.set(true);
            return;
        }
        let mut in_force = self.in_force.borrow_mut();
        if add {
            in_force.insert(element);
        } else {
            in_force.remove(&element);
        }
    }

    /// The elements in force.
    pub(super) fn eventually(&self) -> BTreeSet<String> {
        self.in_force.borrow().clone()
    }
}

impl Guard for FakeGuard {
    // A local QP is written `address . QPN`, as nft writes the sets' keys.
    fn qp_seen(&self, local: Ipv4Addr, qpn: u32) {
        self.log
            .borrow_mut()
            .push(format!("qp_seen {local} . {qpn:#x}"));
        self.write(true, format!("tenant_qps {local} . {qpn:#x}"));
    }
    fn qp_gone(&self, local: Ipv4Addr, qpn: u32, _when: Removal) {
        self.log
            .borrow_mut()
            .push(format!("qp_gone {local} . {qpn:#x}"));
        self.write(false, format!("tenant_qps {local} . {qpn:#x}"));
    }
    fn wait_applied(&self, _timeout: Duration) -> bool {
        self.log.borrow_mut().push("wait_applied".into());
        true
    }
    fn ud_local(&self, local: Ipv4Addr, vni: u32, qpn: u32, up: bool) {
        self.log
            .borrow_mut()
            .push(format!("ud_local {vni} {local} . {qpn:#x} {up}"));
        self.write(up, format!("ud_qps {local} . {qpn:#x} : {vni}"));
    }
    fn ud_remote(&self, host: Ipv4Addr, qpn: u32, vni: u32, up: bool) {
        self.log
            .borrow_mut()
            .push(format!("ud_remote {host} {qpn:#x} {vni} {up}"));
    }
    fn hold(&self) {
        self.log.borrow_mut().push("hold".into());
    }
    fn release(&self) {
        self.log.borrow_mut().push("release".into());
    }
    fn take_refused(&self) -> bool {
        self.refused.replace(false)
    }
}

pub(super) fn modify_req(mask: u32, state: u8) -> proto::ModifyQpReq {
    proto::ModifyQpReq {
        qp_handle: HANDLE,
        qp_num: QPN,
        qp_type: 2,
        attr_mask: mask,
        attr: proto::QpAttr {
            qp_state: state,
            port_num: 1,
            ..Default::default()
        },
    }
}

/// RTR towards acme-b (10.0.0.2, on host2 198.18.0.2), QPN 0x12.
pub(super) fn rtr() -> proto::ModifyQpReq {
    let mut m = modify_req(
        IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | crate::kernel::ibv::IBV_QP_PATH_MTU,
        IBV_QPS_RTR,
    );
    m.attr.path_mtu = 3;
    m.attr.dest_qp_num = 0x12;
    m.attr.ah_attr = virtual_av([10, 0, 0, 2]);
    m
}

/// The virtual address of `vip` as an app gives it: virtual GID index 1.
pub(super) fn virtual_av(vip: [u8; 4]) -> proto::AhAttr {
    proto::AhAttr {
        dgid: v4_mapped(vip),
        sgid_index: 1,
        hop_limit: 64,
        is_global: 1,
        port_num: 1,
        ..Default::default()
    }
}

/// A policy in which acme-a may reach no one.
pub(super) const DENY_ALL: &str = "version: 1\ntenants:\n  acme:\n    securityGroups:\n      \
                                   clients: { members: [acme-a] }\n";

pub(super) fn moved_req(state: u8) -> proto::QpMovedReq {
    proto::QpMovedReq {
        qp_handle: HANDLE,
        qp_num: QPN,
        qp_type: 2,
        attr_mask: IBV_QP_STATE,
        qp_state: state,
    }
}

pub(super) fn tracked(h: &FakeHost) -> Vec<rconntrack::Entry> {
    h.admission.table().iter().cloned().collect()
}

/// The app moves its QP to INIT on its own fd (as libmasq does).
pub(super) fn init_on_own_fd(h: &FakeHost, k: &FakeKernel, sess: &mut Session) {
    k.qp.borrow_mut().qp_state = IBV_QPS_INIT;
    crate::pipeline::qp::moved(h, k, sess, &moved_req(IBV_QPS_INIT))
        .unwrap_or_else(|e| panic!("{e}"));
}
