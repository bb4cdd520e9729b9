//! `audit:`: the periodic audit of every QP on the device, and what it
//! does with a tenant QP masqd did not admit.

use crate::error::{Error, Result};
use serde::Deserialize;

/// What the audit does with a tenant QP masqd did not admit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuditAction {
    /// Log and count it.
    Log,
    /// Also SIGKILL the process that owns it.
    KillProcess,
    /// Also kill every process of the endpoint (its cgroup's cgroup.kill).
    KillEndpoint,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuditConfig {
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// How often the device's QPs are listed: `500ms`, `2s`, `1m`.
    #[serde(default = "default_audit_interval")]
    pub interval: String,
    #[serde(default = "default_audit_action")]
    pub action: AuditAction,
}

impl Default for AuditConfig {
    fn default() -> AuditConfig {
        AuditConfig {
            enabled: true,
            interval: default_audit_interval(),
            action: default_audit_action(),
        }
    }
}

impl AuditConfig {
    /// The interval, validated (100 ms ..= 1 h).
    pub fn interval(&self) -> Result<std::time::Duration> {
        let s = self.interval.trim();
        let (num, unit_ms) = if let Some(n) = s.strip_suffix("ms") {
            (n, 1)
        } else if let Some(n) = s.strip_suffix('s') {
            (n, 1000)
        } else if let Some(n) = s.strip_suffix('m') {
            (n, 60_000)
        } else {
            (s, 1000)
        };
        let ms = num
            .trim()
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(unit_ms))
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "audit.interval: {:?} is not a duration (e.g. 500ms, 2s, 1m)",
                    self.interval
                ))
            })?;
        if !(100..=3_600_000).contains(&ms) {
            return Err(Error::Invalid(format!(
                "audit.interval: {:?} is outside 100ms..=1h",
                self.interval
            )));
        }
        Ok(std::time::Duration::from_millis(ms))
    }
}

fn default_true() -> bool {
    true
}
/// A round is one QP dump per device (the kernel queries each QP: a copy
/// on rxe, a firmware command on mlx5) and /proc reads only for a QP
/// whose creator has exited: cheap enough for a second (issue 51: the
/// window a QP can hide in is one interval).
fn default_audit_interval() -> String {
    "1s".into()
}
fn default_audit_action() -> AuditAction {
    AuditAction::Log
}
