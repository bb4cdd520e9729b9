//! The endpoints' limits on this host: their rdma cgroup limits and, on
//! software RoCE, their RoCE egress shaping.

use crate::config::{Config, EndpointConfig};
use crate::endpoints::endpoint::Endpoint;
use crate::enforce::ratelimit::RateLimits;
use crate::enforce::rdma_cgroup::{self, Applied, Cgroups};
use crate::error::Result;
use std::sync::atomic::Ordering;
use tracing::{info, warn};

pub struct Limits {
    /// The endpoints' cgroups, for their rdma limits.
    pub rdma_cgroups: Cgroups,
    /// Software RoCE: the endpoints' RoCE egress shaping (`ratelimit.rs`).
    pub rates: Option<RateLimits>,
}

impl Limits {
    pub fn new(cfg: &Config, rates: Option<RateLimits>) -> Limits {
        Limits {
            rdma_cgroups: Cgroups::new(rdma_cgroup::CGROUP_ROOT, &cfg.backstop.cgroup_parent),
            rates,
        }
    }

    /// Set the endpoint's rdma cgroup limits on its `device` if its apps'
    /// cgroup exists; the runtime may make it later, so the housekeeping
    /// thread calls this again every few seconds.
    pub fn apply_rdma_limits(&self, ep: &Endpoint, device: &str) {
        let Some(limits) = &ep.cfg.rdma_limits else {
            return;
        };
        match self.rdma_cgroups.apply(ep.cgroup_name(), device, limits) {
            Ok(Applied::Set) => {
                ep.rdma_limits_failing.store(false, Ordering::Relaxed);
                info!(endpoint = %ep.cfg.name, "rdma cgroup limits set: {}",
                      rdma_cgroup::max_line(device, limits));
            }
            Ok(_) => {}
            Err(e) => {
                if !ep.rdma_limits_failing.swap(true, Ordering::Relaxed) {
                    warn!(endpoint = %ep.cfg.name, "cannot set its rdma cgroup limits: {e}");
                }
            }
        }
    }

    /// Shape the endpoints' RoCE egress as their `maxRateMbps` say.
    pub fn sync_rates(&self, endpoints: &[EndpointConfig]) -> Result<()> {
        match &self.rates {
            Some(r) => r.sync(endpoints),
            None => Ok(()),
        }
    }
}
