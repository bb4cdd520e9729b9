//! The parts of the CNI specification (1.1, and the older versions
//! runtimes still send) that masq-cni reads and writes: the network
//! configuration on stdin, the previous plugin's result, the runtime's
//! environment and the error object.
//!
//! Own serde types rather than a library: the Rust CNI crates on crates.io
//! (`cni-plugin` 0.2) stop at spec 1.0 and refuse the GC and STATUS
//! commands when they parse the command.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::Ipv4Addr;

/// Spec versions masq-cni speaks. CHECK needs 0.4.0, GC and STATUS 1.1.0.
pub const SUPPORTED: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// Well-known error codes (CNI spec, "Error").
pub mod code {
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    pub const BAD_ENV: u32 = 4;
    pub const DECODE: u32 = 6;
    pub const INVALID_CONFIG: u32 = 7;
    pub const TRY_AGAIN: u32 = 11;
    pub const NOT_AVAILABLE: u32 = 50;
    /// masqd refused the endpoint (plugin-specific codes start at 100).
    pub const REFUSED: u32 = 100;
    /// CHECK: the endpoint is not as the attachment says it should be.
    pub const CHECK_FAILED: u32 = 101;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniError {
    pub code: u32,
    pub msg: String,
    pub details: String,
}

impl CniError {
    pub fn new(code: u32, msg: impl Into<String>) -> CniError {
        CniError {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    pub fn details(mut self, d: impl Into<String>) -> CniError {
        self.details = d.into();
        self
    }

    pub fn to_json(&self, cni_version: &str) -> Value {
        let mut v = serde_json::json!({
            "cniVersion": cni_version,
            "code": self.code,
            "msg": self.msg,
        });
        if !self.details.is_empty() {
            v["details"] = Value::String(self.details.clone());
        }
        v
    }
}

pub type Result<T> = std::result::Result<T, CniError>;

/// The network configuration masq-cni gets on stdin (one plugin's entry of
/// a conflist, with the runtime's additions). Unknown keys are allowed: a
/// conflist carries the other plugins' and the runtime's own.
#[derive(Debug, Clone)]
pub struct NetConf {
    pub cni_version: String,
    /// The network's name.
    pub name: String,
    /// The tenant owning the VNI.
    pub tenant: Option<String>,
    /// The VPC (VXLAN network identifier) the main plugin attaches to.
    pub vni: Option<u32>,
    /// masqd's control socket (`controlSocket`).
    pub control_socket: Option<String>,
    /// `newVpc`: accept a VNI that no endpoint in masqd's VPC map uses yet
    /// (the first endpoint of a new VPC). Off: a VNI masqd does not know
    /// is an error, which catches a mistyped VNI before a container runs
    /// unreachable.
    pub new_vpc: bool,
    /// The rail (masqd.yaml's `rails[].name`) this network's device is
    /// on; none: the host's first. A pod's second masq network with a
    /// rail of its own gives the pod a further device there (`vrdma1`).
    pub rail: Option<String>,
    pub prev_result: Option<Value>,
    /// GC: the attachments the runtime still has.
    pub valid_attachments: Option<Vec<Attachment>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

impl NetConf {
    /// Parse stdin; serde's message names the field that is wrong.
    pub fn parse(bytes: &[u8]) -> Result<NetConf> {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| {
            CniError::new(
                code::DECODE,
                format!("masq: the network configuration is not JSON: {e}"),
            )
        })?;
        if !v.is_object() {
            return Err(CniError::new(
                code::DECODE,
                "masq: the network configuration is not a JSON object",
            ));
        }
        // Field by field, so that an error names the field.
        fn field<T: serde::de::DeserializeOwned>(v: &Value, key: &str) -> Result<Option<T>> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => serde_json::from_value(x.clone()).map(Some).map_err(|e| {
                    CniError::new(
                        code::DECODE,
                        format!("masq: network configuration field {key:?}: {e}"),
                    )
                }),
            }
        }
        let need = |key: &str| -> Result<String> {
            field(&v, key)?.ok_or_else(|| {
                CniError::new(
                    code::INVALID_CONFIG,
                    format!("masq: the network configuration has no {key:?}"),
                )
            })
        };
        let conf = NetConf {
            cni_version: need("cniVersion")?,
            name: need("name")?,
            tenant: field(&v, "tenant")?,
            vni: field(&v, "vni")?,
            control_socket: field(&v, "controlSocket")?,
            new_vpc: field(&v, "newVpc")?.unwrap_or(false),
            rail: field(&v, "rail")?,
            prev_result: field(&v, "prevResult")?,
            valid_attachments: field(&v, "cni.dev/valid-attachments")?,
        };
        if !SUPPORTED.contains(&conf.cni_version.as_str()) {
            return Err(CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!(
                    "masq: cniVersion {:?} is not supported (supported: {})",
                    conf.cni_version,
                    SUPPORTED.join(", ")
                ),
            ));
        }
        Ok(conf)
    }

    /// `tenant` and `vni`, which ADD needs.
    pub fn vpc(&self) -> Result<(String, u32)> {
        let tenant = self.tenant.clone().ok_or_else(|| {
            CniError::new(
                code::INVALID_CONFIG,
                format!(
                    "masq: network {:?}: the masq plugin needs \"tenant\"",
                    self.name
                ),
            )
        })?;
        let vni = self.vni.ok_or_else(|| {
            CniError::new(
                code::INVALID_CONFIG,
                format!(
                    "masq: network {:?}: the masq plugin needs \"vni\"",
                    self.name
                ),
            )
        })?;
        Ok((tenant, vni))
    }

    /// Whether this version has the command at all.
    pub fn version_at_least(&self, want: &str) -> bool {
        version_key(&self.cni_version) >= version_key(want)
    }
}

fn version_key(v: &str) -> Vec<u32> {
    v.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

/// The runtime's environment (CNI_* variables).
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub container_id: Option<String>,
    pub netns: Option<String>,
    pub ifname: Option<String>,
    pub args: Vec<(String, String)>,
}

impl Env {
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Env {
        let nonempty = |k: &str| get(k).filter(|v| !v.is_empty());
        Env {
            container_id: nonempty("CNI_CONTAINERID"),
            netns: nonempty("CNI_NETNS"),
            ifname: nonempty("CNI_IFNAME"),
            args: parse_args(&get("CNI_ARGS").unwrap_or_default()),
        }
    }

    pub fn need(&self, what: &str) -> Result<String> {
        let v = match what {
            "CNI_CONTAINERID" => &self.container_id,
            "CNI_NETNS" => &self.netns,
            "CNI_IFNAME" => &self.ifname,
            _ => &None,
        };
        v.clone().ok_or_else(|| {
            CniError::new(
                code::BAD_ENV,
                format!("masq: {what} is not set by the runtime"),
            )
        })
    }

    fn arg(&self, k: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// The pod's Kubernetes namespace, when the runtime says (kubelet's
    /// K8S_POD_NAMESPACE; Multus passes it on to its delegates): masqd
    /// checks that the tenant admits it.
    pub fn pod_namespace(&self) -> Option<String> {
        self.arg("K8S_POD_NAMESPACE").map(str::to_string)
    }

    /// The pod's Kubernetes name, when the runtime says both its namespace
    /// and name (podman passes a container's name alone): with the
    /// namespace, what NetworkPolicy selects the endpoint by.
    pub fn pod_name(&self) -> Option<String> {
        self.arg("K8S_POD_NAMESPACE")?;
        self.arg("K8S_POD_NAME").map(str::to_string)
    }

    /// The endpoint's name: the pod's (`NAMESPACE.NAME`) when the runtime
    /// says (Kubernetes; podman passes the container's name as
    /// K8S_POD_NAME), else the container id. Made to fit masqd's names.
    pub fn endpoint_name(&self) -> Result<String> {
        let raw = match (self.arg("K8S_POD_NAMESPACE"), self.arg("K8S_POD_NAME")) {
            (Some(ns), Some(pod)) => format!("{ns}.{pod}"),
            (None, Some(pod)) => pod.to_string(),
            _ => self.need("CNI_CONTAINERID")?,
        };
        Ok(fit_name(&raw))
    }
}

/// `K=V;K=V` as CNI_ARGS carries them.
fn parse_args(s: &str) -> Vec<(String, String)> {
    s.split(';')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// masqd's endpoint names are 1-64 of [A-Za-z0-9._-]: other characters
/// become '-', and a longer name keeps its first 55 characters and a hash
/// of the whole, so two long names stay apart.
pub fn fit_name(raw: &str) -> String {
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if !clean.is_empty() && clean.len() <= 64 {
        return clean;
    }
    // FNV-1a: stable across builds, unlike std's hasher.
    let mut h: u32 = 0x811c_9dc5;
    for b in raw.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    let head: String = clean.chars().take(55).collect();
    format!("{head}-{h:08x}")
}

/// What ADD needs from the main plugin's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attached {
    pub vip: Ipv4Addr,
    /// Interfaces outside the container (a bridge plugin reports the
    /// bridge and the veth's host side).
    pub host_ifs: Vec<String>,
}

#[derive(Deserialize, Serialize)]
struct PrevInterface {
    name: String,
    #[serde(default)]
    sandbox: Option<String>,
}

#[derive(Deserialize, Serialize)]
struct PrevIp {
    address: String,
    #[serde(default)]
    interface: Option<usize>,
}

#[derive(Deserialize, Serialize)]
struct Prev {
    #[serde(default)]
    interfaces: Vec<PrevInterface>,
    #[serde(default)]
    ips: Vec<PrevIp>,
}

/// The container's IPv4 address on `ifname` and the host-side interfaces,
/// from prevResult.
pub fn attached(prev: &Value, ifname: &str) -> Result<Attached> {
    let p: Prev = serde_json::from_value(prev.clone())
        .map_err(|e| CniError::new(code::DECODE, format!("masq: bad prevResult: {e}")))?;
    let idx = p
        .interfaces
        .iter()
        .position(|i| i.name == ifname && i.sandbox.as_deref().is_some_and(|s| !s.is_empty()))
        .ok_or_else(|| {
            CniError::new(
                code::INVALID_CONFIG,
                format!(
                    "masq: prevResult has no interface {ifname:?} in the container: chain masq \
                     after the plugin that creates it"
                ),
            )
        })?;
    let vip = p
        .ips
        .iter()
        .filter(|ip| ip.interface.is_none_or(|i| i == idx))
        .find_map(|ip| {
            ip.address
                .split_once('/')
                .map_or(ip.address.as_str(), |(a, _)| a)
                .parse::<Ipv4Addr>()
                .ok()
        })
        .ok_or_else(|| {
            CniError::new(
                code::INVALID_CONFIG,
                format!(
                    "masq: prevResult has no IPv4 address on {ifname:?}: masq needs the \
                     endpoint's virtual IP (configure the main plugin's IPAM)"
                ),
            )
        })?;
    let host_ifs = p
        .interfaces
        .iter()
        .filter(|i| i.sandbox.as_deref().is_none_or(str::is_empty))
        .map(|i| i.name.clone())
        .collect();
    Ok(Attached { vip, host_ifs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bridge_result() -> Value {
        json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "mbr100", "mac": "aa:bb:cc:00:00:01"},
                {"name": "veth1234", "mac": "aa:bb:cc:00:00:02"},
                {"name": "eth0", "mac": "aa:bb:cc:00:00:03", "sandbox": "/run/netns/x"}
            ],
            "ips": [{"address": "10.0.0.20/24", "interface": 2, "gateway": "10.0.0.254"}]
        })
    }

    #[test]
    fn the_vip_and_host_interfaces_come_from_the_bridge_plugins_result() {
        let a = attached(&bridge_result(), "eth0").expect("attached");
        assert_eq!(a.vip, Ipv4Addr::new(10, 0, 0, 20));
        assert_eq!(a.host_ifs, ["mbr100", "veth1234"]);
    }

    #[test]
    fn a_result_without_the_interface_or_an_ipv4_address_is_refused() {
        let e = attached(&bridge_result(), "net1").unwrap_err();
        assert_eq!(e.code, code::INVALID_CONFIG);
        assert!(e.msg.contains("\"net1\""), "{}", e.msg);
        let mut r = bridge_result();
        r["ips"] = json!([{"address": "fd00::5/64", "interface": 2}]);
        let e = attached(&r, "eth0").unwrap_err();
        assert!(e.msg.contains("no IPv4 address"), "{}", e.msg);
        let e = attached(&json!({"interfaces": 3}), "eth0").unwrap_err();
        assert_eq!(e.code, code::DECODE);
    }

    #[test]
    fn configs_name_the_bad_field_and_version() {
        let e = NetConf::parse(br#"{"cniVersion":"1.0.0","name":"n","type":"masq-cni","vni":"x"}"#)
            .unwrap_err();
        assert_eq!(e.code, code::DECODE);
        assert!(e.msg.contains("vni"), "{}", e.msg);
        let e =
            NetConf::parse(br#"{"cniVersion":"9.9.9","name":"n","type":"masq-cni"}"#).unwrap_err();
        assert_eq!(e.code, code::INCOMPATIBLE_VERSION);
        let c = NetConf::parse(
            br#"{"cniVersion":"1.1.0","name":"n","type":"masq-cni","tenant":"acme","vni":100,
                "capabilities":{"ips":true},"cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}"#,
        )
        .expect("parse");
        assert_eq!(c.vpc().expect("vpc"), ("acme".to_string(), 100));
        assert!(
            c.version_at_least("1.1.0")
                && !NetConf {
                    cni_version: "0.4.0".into(),
                    ..c.clone()
                }
                .version_at_least("1.0.0")
        );
        assert_eq!(c.valid_attachments.expect("valid")[0].container_id, "c1");
        let e = NetConf {
            tenant: None,
            ..NetConf::parse(br#"{"cniVersion":"1.0.0","name":"n","type":"t"}"#).expect("p")
        }
        .vpc()
        .unwrap_err();
        assert!(e.msg.contains("\"tenant\""), "{}", e.msg);
    }

    #[test]
    fn endpoint_names_come_from_the_pod_or_the_container() {
        let env = |args: &str| {
            Env::from_vars(|k| match k {
                "CNI_ARGS" => Some(args.to_string()),
                "CNI_CONTAINERID" => Some("0123abcd".to_string()),
                _ => None,
            })
        };
        let n = |a: &str| env(a).endpoint_name().expect("name");
        assert_eq!(n("IgnoreUnknown=1;K8S_POD_NAME=web-1"), "web-1");
        assert_eq!(n("K8S_POD_NAMESPACE=prod;K8S_POD_NAME=web-1"), "prod.web-1");
        assert_eq!(n("IgnoreUnknown=1"), "0123abcd");
        assert_eq!(
            env("K8S_POD_NAMESPACE=prod;K8S_POD_NAME=web-1").pod_namespace(),
            Some("prod".to_string())
        );
        assert_eq!(env("K8S_POD_NAME=web-1").pod_namespace(), None);
        assert_eq!(env("K8S_POD_NAME=web-1").pod_name(), None);
        assert_eq!(
            env("K8S_POD_NAMESPACE=prod;K8S_POD_NAME=web-1").pod_name(),
            Some("web-1".into())
        );
        let long = "x".repeat(100);
        let a = fit_name(&long);
        assert_eq!(a.len(), 64);
        assert_ne!(a, fit_name(&"x".repeat(101)));
        assert_eq!(fit_name("a b/c"), "a-b-c");
    }
}
