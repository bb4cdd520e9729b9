//! `tenantLimits:`: what each endpoint's apps may make masqd hold, so one
//! tenant cannot exhaust masqd for the others (issue 51). Every limit is
//! per endpoint; the defaults fit a GPU node (a few endpoints, each with
//! a few hundred processes) with room to spare, and `packaging/masqd.service`
//! sizes `LimitNOFILE` and `TasksMax` from them.

use crate::error::{Error, Result};
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TenantLimits {
    /// Sessions (app connections, one masqd thread and up to three
    /// descriptors each) open at once; one more is refused EMFILE.
    #[serde(default = "default_sessions")]
    pub sessions: u32,
    /// RDMA CM event channels (one descriptor in masqd each); EMFILE.
    #[serde(default = "default_event_channels")]
    pub event_channels: u32,
    /// RDMA CM ids, the apps' own and those their listeners are given;
    /// ENOSPC (a connect request beyond it is rejected).
    #[serde(default = "default_cm_ids")]
    pub cm_ids: u32,
    /// UD address handles bound; EDQUOT.
    #[serde(default = "default_ahs")]
    pub address_handles: u32,
    /// RConntrack entries (connections and address handles); EDQUOT. An
    /// endpoint's `maxConnections`, if lower, is its quota instead.
    #[serde(default = "default_connections")]
    pub connections: u32,
    /// Descriptors masqd keeps for itself (etcd, nftables, netlink,
    /// listeners, peer links): a tenant's request that would make masqd
    /// hold a descriptor numbered at or above `RLIMIT_NOFILE` minus this
    /// is refused EMFILE, to that tenant only.
    #[serde(default = "default_fd_reserve")]
    pub fd_reserve: u32,
}

impl Default for TenantLimits {
    fn default() -> TenantLimits {
        TenantLimits {
            sessions: default_sessions(),
            event_channels: default_event_channels(),
            cm_ids: default_cm_ids(),
            address_handles: default_ahs(),
            connections: default_connections(),
            fd_reserve: default_fd_reserve(),
        }
    }
}

fn default_sessions() -> u32 {
    256
}
fn default_event_channels() -> u32 {
    1024
}
fn default_cm_ids() -> u32 {
    16384
}
fn default_ahs() -> u32 {
    65536
}
fn default_connections() -> u32 {
    131_072
}
fn default_fd_reserve() -> u32 {
    1024
}

impl TenantLimits {
    /// Each limit at least 1 and within what masqd can count; the error
    /// names the field.
    pub fn check(&self) -> Result<()> {
        for (key, v, max) in [
            ("sessions", self.sessions, 65_536),
            ("eventChannels", self.event_channels, 1 << 20),
            ("cmIds", self.cm_ids, 1 << 24),
            ("addressHandles", self.address_handles, 1 << 24),
            ("connections", self.connections, 1 << 24),
        ] {
            if v == 0 {
                return Err(Error::Invalid(format!(
                    "tenantLimits.{key}: 0 would refuse every app (give a positive number)"
                )));
            }
            if v > max {
                return Err(Error::Invalid(format!(
                    "tenantLimits.{key}: {v} is above {max}"
                )));
            }
        }
        if !(64..=1 << 20).contains(&self.fd_reserve) {
            return Err(Error::Invalid(format!(
                "tenantLimits.fdReserve: {} is outside 64..=1048576",
                self.fd_reserve
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_a_zero_or_huge_limit_is_named() {
        assert!(TenantLimits::default().check().is_ok());
        let zero = TenantLimits {
            event_channels: 0,
            ..Default::default()
        };
        let e = zero.check().expect_err("refused").to_string();
        assert!(e.contains("tenantLimits.eventChannels: 0"), "{e}");
        let huge = TenantLimits {
            sessions: 1 << 20,
            ..Default::default()
        };
        assert!(huge
            .check()
            .expect_err("refused")
            .to_string()
            .contains("sessions"));
        let small = TenantLimits {
            fd_reserve: 10,
            ..Default::default()
        };
        assert!(small
            .check()
            .expect_err("refused")
            .to_string()
            .contains("fdReserve"));
    }
}
