//! The host's rails: each RDMA NIC and the underlay network it is on, as
//! `rails:` lists them or `device:`/`underlay:` name the one; and the
//! checks of an endpoint's rail and of the further devices (`deviceOf`)
//! an endpoint's apps have on other rails.

use super::{check_name, default_port, Config, EndpointConfig};
use crate::error::{Error, Result};
use serde::Deserialize;
use std::collections::HashSet;
use std::net::Ipv4Addr;

/// One RDMA NIC and the underlay network it is on.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RailConfig {
    /// The rail network's name, the same on every host (a connection stays
    /// on one rail unless `railJoins` joins two); default `railN` by order.
    #[serde(default)]
    pub name: String,
    pub device: String,
    #[serde(default = "default_port")]
    pub port: u8,
    pub underlay: Underlay,
}

pub use vbond::FIRST_RAIL;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Underlay {
    /// The netdev the RDMA device sits on.
    #[serde(default)]
    pub netdev: String,
    /// This host's underlay address; its RoCEv2 GID is ::ffff:ip. Omitted
    /// (one file for many hosts, a DaemonSet's), `load` takes the netdev's.
    #[serde(default = "unspecified")]
    pub ip: Ipv4Addr,
}

fn unspecified() -> Ipv4Addr {
    Ipv4Addr::UNSPECIFIED
}

impl Default for Underlay {
    fn default() -> Underlay {
        Underlay {
            netdev: String::new(),
            ip: unspecified(),
        }
    }
}

impl Underlay {
    /// `ip` from the netdev's first IPv4 address, if the file gave none.
    pub(super) fn resolve(&mut self) -> Result<()> {
        if !self.ip.is_unspecified() {
            return Ok(());
        }
        let addrs = nix::ifaddrs::getifaddrs().map_err(|e| {
            Error::Invalid(format!(
                "underlay.ip: not given, and the addresses cannot be read: {e}"
            ))
        })?;
        self.ip = addrs
            .filter(|a| a.interface_name == self.netdev)
            .find_map(|a| a.address?.as_sockaddr_in().map(|s| s.ip()))
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "underlay.ip: not given, and underlay.netdev {} has no IPv4 address \
                     (give underlay.ip, or address the netdev first)",
                    self.netdev
                ))
            })?;
        Ok(())
    }
}

impl Config {
    /// `rails:` as given (each named), or the one rail `device`/`underlay`
    /// give; `device`, `port` and `underlay` then always mean the first.
    pub(super) fn settle_rails(&mut self) -> Result<()> {
        if self.rails.is_empty() {
            if self.device.is_empty() {
                return Err(Error::Invalid(
                    "device: missing: name the RDMA device to serve (or list rails:)".into(),
                ));
            }
            self.rails.push(RailConfig {
                name: FIRST_RAIL.into(),
                device: self.device.clone(),
                port: self.port,
                underlay: self.underlay.clone(),
            });
            return Ok(());
        }
        if !self.device.is_empty() || !self.underlay.netdev.is_empty() {
            return Err(Error::Invalid(
                "rails: given with device/underlay, which mean a first rail of their own: \
                 give one or the other"
                    .into(),
            ));
        }
        for (i, r) in self.rails.iter_mut().enumerate() {
            if r.name.is_empty() {
                r.name = format!("rail{i}");
            }
        }
        let first = &self.rails[0];
        self.device = first.device.clone();
        self.port = first.port;
        self.underlay = first.underlay.clone();
        Ok(())
    }

    /// The index of the rail named `name` (`None`: the first).
    pub fn rail_index(&self, name: Option<&str>) -> Option<usize> {
        rail_position(self.rails.iter().map(|r| r.name.as_str()), name)
    }

    pub(super) fn validate_rails(&self) -> Result<()> {
        let many = self.rails.len() > 1;
        let mut names = HashSet::new();
        let mut devices = HashSet::new();
        let mut netdevs = HashSet::new();
        for (i, r) in self.rails.iter().enumerate() {
            let at = if many {
                format!("rails[{i}].")
            } else {
                String::new()
            };
            if many {
                check_name(&format!("{at}name"), &r.name, 15)?;
            }
            check_name(&format!("{at}device"), &r.device, 64)?;
            check_name(&format!("{at}underlay.netdev"), &r.underlay.netdev, 15)?;
            if r.port == 0 {
                return Err(Error::Invalid(format!("{at}port: must be 1 or more")));
            }
            if !names.insert(r.name.as_str()) {
                return Err(Error::Invalid(format!(
                    "{at}name: rail {:?} is listed twice",
                    r.name
                )));
            }
            if !devices.insert(r.device.as_str()) {
                return Err(Error::Invalid(format!(
                    "{at}device: {} serves another rail",
                    r.device
                )));
            }
            if !netdevs.insert(r.underlay.netdev.as_str()) {
                return Err(Error::Invalid(format!(
                    "{at}underlay.netdev: {} is another rail's",
                    r.underlay.netdev
                )));
            }
        }
        for (i, group) in self.rail_joins.iter().enumerate() {
            if group.len() < 2 {
                return Err(Error::Invalid(format!(
                    "railJoins[{i}]: join two rails or more"
                )));
            }
            if let Some(r) = group.iter().find(|r| !names.contains(r.as_str())) {
                return Err(Error::Invalid(format!(
                    "railJoins[{i}]: no rail named {r:?} in rails:"
                )));
            }
        }
        Ok(())
    }
}

/// The index of rail `name` among rails named `names` in order (`None`:
/// the first, which every host has).
pub fn rail_position<'a>(
    mut names: impl Iterator<Item = &'a str>,
    name: Option<&str>,
) -> Option<usize> {
    match name {
        None => Some(0),
        Some(n) => names.position(|r| r == n),
    }
}

/// What `rails` (name and value, in rail order) holds for rail `name`
/// (`None`: the first).
pub fn rail_value<'a, T>(rails: &'a [(String, T)], name: Option<&str>) -> Option<&'a T> {
    let i = rail_position(rails.iter().map(|(n, _)| n.as_str()), name)?;
    rails.get(i).map(|(_, v)| v)
}

/// `e`'s rail is one of this host's (`rail` resolves a rail's name; none
/// is the first), and, if `e` is a further device of another endpoint
/// (`deviceOf`), that endpoint is among `local`, is no further device
/// itself, has the same tenant and namespace, and no other device of its
/// is on `e`'s rail.
pub fn check_device_of<'a>(
    at: &str,
    e: &EndpointConfig,
    local: impl IntoIterator<Item = &'a EndpointConfig>,
    rail: impl Fn(Option<&str>) -> Option<usize>,
) -> Result<()> {
    let mine = rail(e.rail.as_deref()).ok_or_else(|| {
        Error::Invalid(format!(
            "{at}.rail: no rail named {:?} on this host (rails: names them)",
            e.rail.as_deref().unwrap_or_default()
        ))
    })?;
    let Some(of) = &e.device_of else {
        return Ok(());
    };
    if e.socket.is_some() {
        return Err(Error::Invalid(format!(
            "{at}.socket: a further device of {of} is served on {of}'s socket"
        )));
    }
    let local: Vec<&EndpointConfig> = local.into_iter().collect();
    let primary = local
        .iter()
        .find(|o| o.name == *of && o.name != e.name)
        .ok_or_else(|| Error::Invalid(format!("{at}.deviceOf: no endpoint {of:?} on this host")))?;
    if let Some(up) = &primary.device_of {
        return Err(Error::Invalid(format!(
            "{at}.deviceOf: {of} is itself a further device of {up}: name {up}"
        )));
    }
    if primary.tenant != e.tenant || primary.netns != e.netns {
        return Err(Error::Invalid(format!(
            "{at}.deviceOf: {of} is another tenant's or in another namespace: its \
             devices are the same apps'"
        )));
    }
    let group = local
        .iter()
        .filter(|o| o.name != e.name && (o.name == *of || o.device_of.as_ref() == Some(of)));
    for o in group {
        if rail(o.rail.as_deref()) == Some(mine) {
            return Err(Error::Invalid(format!(
                "{at}.rail: {of}'s device {} is on that rail already",
                o.name
            )));
        }
    }
    Ok(())
}
