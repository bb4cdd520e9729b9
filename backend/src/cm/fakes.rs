//! The CM's host for unit tests: host1 of the examples, with its acme-a
//! and globex-a, no backstop and no kernel behind it.
use super::{Cm, CmHost};
use crate::cluster::endpoint::{Endpoint, Origin};
use crate::cluster::registry::Registry;
use crate::config::{Config, TenantLimits};
use crate::enforce::admission::Admission;
use crate::kernel::host::HostDevice;
use crate::pipeline::ports::{Conntrack, Decide, Guard};
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// host1 of the examples as the CM's host.
pub(crate) struct Host {
    registry: Registry,
    admission: Admission,
    device: HostDevice,
}

impl CmHost for Host {
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
    fn host(&self, _ep: &Endpoint) -> &HostDevice {
        &self.device
    }
    fn app_gone(&self, _session: u64) -> bool {
        false
    }
    fn tracked_qp(&self, _session: u64, _ep: &Endpoint, _qpn: u32) -> Option<(Ipv4Addr, u32)> {
        None
    }
    fn reannounce_ud(&self, _host: Ipv4Addr) {}
}

/// The host, with `limits` for its tenants, and its acme-a and globex-a.
pub(crate) fn setup(limits: TenantLimits) -> (Host, Arc<Endpoint>, Arc<Endpoint>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut cfg = Config::load(&dir.join("host1.yaml")).unwrap_or_else(|e| panic!("{e}"));
    cfg.tenant_limits = limits;
    let ep = |name: &str| {
        let c = cfg.endpoints.iter().find(|e| e.name == name).cloned();
        let c = c.unwrap_or_else(|| panic!("{name} in the example"));
        Arc::new(Endpoint::new(c, "/nonexistent".into(), Origin::File, None))
    };
    let (a, g) = (ep("acme-a"), ep("globex-a"));
    let host = Host {
        registry: Registry::new(&cfg),
        admission: Admission::new(&cfg, &dir),
        device: HostDevice::rxe0_for_tests(),
    };
    (host, a, g)
}

/// A CM whose handshakes time out after a second.
pub(crate) fn cm() -> Cm {
    Cm::new(Duration::from_secs(1), Default::default())
}
