//! masqd's parts as the tenants' and operator's unit tests build them:
//! host1 of the example (acme-a and globex-a, its VPC map), its sockets
//! under a directory of the test's own, and nothing of the kernel's: a
//! device without rdma netlink (`Device::without_netlink`), no cluster,
//! no backstop, no rate limits, and no endpoint with a host interface, so
//! that no policy is rendered for nftables.

use crate::cluster::source::file_placements;
use crate::config::{Config, EndpointConfig};
use crate::endpoints::endpoint::{Endpoint, Origin};
use crate::endpoints::placement::SourceId;
use crate::endpoints::registry::Registry;
use crate::enforce::admission::Admission;
use crate::kernel::host::HostDevice;
use crate::tenants::kernel::Device;
use crate::tenants::parts::Parts;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The example's directory: host1.yaml and policy.yaml.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// host1's parts, with no policy applied; its socketDir is `dir`, which
/// goes with them.
pub struct FakeParts {
    pub parts: Arc<Parts>,
    pub dir: tempfile::TempDir,
}

impl FakeParts {
    pub fn host1() -> FakeParts {
        FakeParts::with_config(|_| {})
    }

    /// host1's parts, its config changed by `change` (its `tenantLimits`,
    /// say) before they are made.
    pub fn with_config(change: impl FnOnce(&mut Config)) -> FakeParts {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cfg =
            Config::load(&examples().join("host1.yaml")).unwrap_or_else(|e| panic!("{e}"));
        change(&mut cfg);
        cfg.socket_dir = dir.path().to_path_buf();
        for e in &mut cfg.endpoints {
            e.host_if = None;
            e.bridge = None;
        }
        let registry = Registry::new(&cfg);
        let refused = registry.feed(SourceId::File, file_placements(&cfg));
        assert!(refused.is_empty(), "{refused:?}");
        for e in &cfg.endpoints {
            let socket = registry.socket_of(e);
            registry.insert(Arc::new(Endpoint::new(
                e.clone(),
                socket,
                Origin::File,
                None,
            )));
        }
        let admission = Admission::new(&cfg, &examples());
        let device = Device::without_netlink(HostDevice::rxe0_for_tests());
        let parts = Parts::with_devices(cfg, admission, registry, vec![device], None, None);
        FakeParts {
            parts: Arc::new(parts),
            dir,
        }
    }

    /// host1's endpoint `name`.
    pub fn endpoint(&self, name: &str) -> Arc<Endpoint> {
        self.parts
            .registry()
            .local_named(name)
            .unwrap_or_else(|| panic!("{name} is not served on host1"))
    }

    /// The example's policy in force.
    pub fn with_policy(self) -> FakeParts {
        self.parts
            .apply_policy_file(&examples().join("policy.yaml"))
            .unwrap_or_else(|e| panic!("{e}"));
        self
    }

    /// The endpoints added at run time, as the runtime file has them.
    pub fn runtime_endpoints(&self) -> Vec<String> {
        crate::endpoints::registry::RuntimeFile::load(&self.parts.config().runtime_endpoints_file())
            .map(|f| f.endpoints.into_iter().map(|e| e.name).collect())
            .unwrap_or_default()
    }
}

/// An endpoint as `masqctl endpoint add` sends it: `fields` over acme's
/// acme-d at 10.0.0.4 in VNI 100.
pub fn endpoint(fields: serde_json::Value) -> EndpointConfig {
    let mut v = serde_json::json!({
        "name": "acme-d", "tenant": "acme", "vni": 100, "vip": "10.0.0.4",
        "netns": "/var/run/netns/acme-d",
    });
    if let (Some(v), Some(f)) = (v.as_object_mut(), fields.as_object()) {
        v.extend(f.clone());
    }
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}
