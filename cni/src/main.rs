//! masq-cni: a chained CNI plugin (spec 1.1) that makes a container a masq
//! endpoint. The network's main plugin (e.g. `bridge` into the VNI's
//! bridge and VXLAN) creates the vNIC and its address; masq-cni then
//! registers the endpoint with the host's masqd through its control
//! socket (the API behind `masqctl endpoint add/delete`), which serves its
//! socket and writes its CDI spec, and in cluster mode publishes it.
//!
//! - ADD: netns, interface and vIP from the environment and prevResult,
//!   tenant and VNI from the network configuration, the name from the
//!   runtime's arguments; the endpoint records the attachment it belongs
//!   to (container id, network, interface). First, before masqd is asked,
//!   it leaves the marker masq-nri tells a masq pod by (`marker`).
//! - DEL: removes the marker, and that endpoint if it is this
//!   attachment's; succeeds when there is nothing to remove (idempotent).
//! - CHECK: the endpoint exists as ADD made it.
//! - GC: removes this network's endpoints and markers whose attachment the
//!   runtime no longer lists.
//! - STATUS: masqd answers.

mod spec;

use masq_backend::config::{CniOwner, EndpointConfig};
use masq_backend::operator::control::{self, Request};
use masq_backend::operator::pod_markers::{Marker, MarkerError, Markers};
use serde_json::{json, Value};
use spec::{code, CniError, Env, NetConf, Result};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const DEFAULT_CONTROL_SOCKET: &str = "/run/masq/control.sock";

fn main() {
    let command = std::env::var("CNI_COMMAND").unwrap_or_default();
    let mut input = Vec::new();
    let read = std::io::stdin().read_to_end(&mut input);
    // Errors are reported in the version the runtime asked for, if known.
    let asked_version = serde_json::from_slice::<Value>(&input)
        .ok()
        .and_then(|v| v["cniVersion"].as_str().map(str::to_string))
        .filter(|v| spec::SUPPORTED.contains(&v.as_str()))
        .unwrap_or_else(|| "1.1.0".to_string());
    let outcome = match read {
        Err(e) => Err(CniError::new(
            code::DECODE,
            format!("masq: cannot read the configuration on stdin: {e}"),
        )),
        Ok(_) => run(&command, &input, &Env::from_vars(|k| std::env::var(k).ok())),
    };
    let mut out = std::io::stdout();
    match outcome {
        Ok(Some(v)) => {
            let _ = writeln!(out, "{v}");
        }
        Ok(None) => {}
        Err(e) => {
            let _ = writeln!(out, "{}", e.to_json(&asked_version));
            std::process::exit(1);
        }
    }
}

fn run(command: &str, input: &[u8], env: &Env) -> Result<Option<Value>> {
    if command == "VERSION" {
        return Ok(Some(json!({
            "cniVersion": "1.1.0",
            "supportedVersions": spec::SUPPORTED,
        })));
    }
    let conf = NetConf::parse(input)?;
    let needs = |v: &str| {
        if conf.version_at_least(v) {
            Ok(())
        } else {
            Err(CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!(
                    "masq: {command} needs cniVersion {v} or later (the configuration says {})",
                    conf.cni_version
                ),
            ))
        }
    };
    let masqd = Masqd::new(&conf);
    match command {
        "ADD" => add(&conf, env, &masqd).map(Some),
        "DEL" => del(&conf, env, &masqd).map(|()| None),
        "CHECK" => {
            needs("0.4.0")?;
            check(&conf, env, &masqd).map(|()| None)
        }
        "GC" => {
            needs("1.1.0")?;
            gc(&conf, &masqd).map(|()| None)
        }
        "STATUS" => {
            needs("1.1.0")?;
            masqd
                .call(&Request::Status)
                .map(|_| None)
                .map_err(|e| CniError::new(code::NOT_AVAILABLE, e.msg).details(e.details))
        }
        "" => Err(CniError::new(code::BAD_ENV, "masq: CNI_COMMAND is not set")),
        other => Err(CniError::new(
            code::BAD_ENV,
            format!("masq: unknown CNI_COMMAND {other:?}"),
        )),
    }
}

/// The host's masqd, through its control socket.
struct Masqd {
    socket: PathBuf,
}

impl Masqd {
    fn new(conf: &NetConf) -> Masqd {
        Masqd {
            socket: PathBuf::from(
                conf.control_socket
                    .as_deref()
                    .unwrap_or(DEFAULT_CONTROL_SOCKET),
            ),
        }
    }

    /// A request; masqd's own refusal comes back as `Err` with its words.
    fn call(&self, req: &Request) -> Result<Value> {
        let reply = control::call(&self.socket, req).map_err(|e| {
            CniError::new(
                code::TRY_AGAIN,
                format!("masq: cannot reach masqd at {}: {e}", self.socket.display()),
            )
        })?;
        match reply.get("error") {
            Some(err) => Err(CniError::new(
                code::REFUSED,
                err.as_str().map_or_else(|| err.to_string(), str::to_string),
            )),
            None => Ok(reply),
        }
    }

    /// masq-nri's markers, beside the control socket.
    fn markers(&self) -> Markers {
        Markers::beside(&self.socket)
    }
}

/// A marker that cannot be written or removed: a name that is no plain
/// name is the runtime's mistake, the file system's refusal worth a retry.
fn marker_error(e: MarkerError) -> CniError {
    match e {
        MarkerError::BadName(m) => CniError::new(code::BAD_ENV, m),
        MarkerError::Io(m) => CniError::new(code::TRY_AGAIN, m),
    }
}

impl Masqd {
    fn endpoints(&self) -> Result<Vec<Value>> {
        Ok(self.call(&Request::Endpoints)?["endpoints"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    fn endpoint(&self, name: &str) -> Result<Option<Value>> {
        Ok(self.endpoints()?.into_iter().find(|e| e["name"] == name))
    }

    /// Delete endpoint `name` if it is still `owner`'s: masqd checks that
    /// and deletes in one step, so a name a new container has taken since
    /// this plugin looked is kept.
    fn delete(&self, name: &str, owner: CniOwner) -> Result<()> {
        self.call(&Request::EndpointDel {
            name: name.to_string(),
            owner: Some(owner),
        })
        .map(|_| ())
        .map_err(|e| {
            CniError::new(
                e.code,
                format!("masq: cannot delete endpoint {name}: {}", e.msg),
            )
        })
    }
}

fn owner_of(ep: &Value) -> Option<CniOwner> {
    serde_json::from_value(ep["cni"].clone()).ok()
}

/// The host-side interface of the vNIC and its bridge, for masqd's tcp/udp
/// rules: the one of the main plugin's host interfaces that is a bridge
/// port. None when the main plugin is not a bridge.
fn bridge_port(host_ifs: &[String]) -> Option<(String, String)> {
    host_ifs.iter().find_map(|i| {
        let master = std::fs::read_link(Path::new("/sys/class/net").join(i).join("master")).ok()?;
        let bridge = master.file_name()?.to_str()?.to_string();
        Some((i.clone(), bridge))
    })
}

fn add(conf: &NetConf, env: &Env, masqd: &Masqd) -> Result<Value> {
    let (tenant, vni) = conf.vpc()?;
    let container_id = env.need("CNI_CONTAINERID")?;
    let netns = env.need("CNI_NETNS")?;
    let ifname = env.need("CNI_IFNAME")?;
    let prev = conf.prev_result.clone().ok_or_else(|| {
        CniError::new(
            code::INVALID_CONFIG,
            format!(
                "masq: network {:?}: no prevResult; masq is a chained plugin and must come \
                 after the plugin that creates the interface",
                conf.name
            ),
        )
    })?;
    let at = spec::attached(&prev, &ifname)?;
    // Before masqd is asked: the pod asked for masq, whatever masqd says.
    let marker = Marker {
        network: conf.name.clone(),
        tenant: tenant.clone(),
        vni,
    };
    masqd
        .markers()
        .add(&container_id, &ifname, &marker)
        .map_err(marker_error)?;
    let owner = CniOwner {
        container_id,
        network: conf.name.clone(),
        ifname: ifname.clone(),
        namespace: env.pod_namespace(),
        pod: env.pod_name(),
    };
    let (name, device_of) = names(env, masqd, &owner)?;
    if let Some(ep) = masqd.endpoint(&name)? {
        // The runtime retrying an ADD that went through: nothing to do.
        if owner_of(&ep).as_ref() == Some(&owner) && ep["vip"] == at.vip.to_string() {
            return Ok(output(conf, prev));
        }
    }
    if !conf.new_vpc {
        let vpc = masqd.call(&Request::Vpc)?;
        let known = vpc["vpc"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["vni"] == vni);
        if !known {
            return Err(CniError::new(
                code::INVALID_CONFIG,
                format!(
                    "masq: network {:?}: vni {vni} is not a VPC masqd knows (no endpoint of it \
                     in its VPC map); check \"vni\", or set \"newVpc\": true for the first \
                     endpoint of a new VPC",
                    conf.name
                ),
            ));
        }
    }
    let (host_if, bridge) = bridge_port(&at.host_ifs).unzip();
    let endpoint = EndpointConfig {
        name: name.clone(),
        tenant,
        vni,
        vip: at.vip,
        netns: PathBuf::from(netns),
        vnic: ifname,
        rail: conf.rail.clone(),
        device_of,
        host_if,
        bridge,
        socket: None,
        max_connections: None,
        rdma_limits: None,
        max_rate_mbps: None,
        cni: Some(Box::new(owner)),
    };
    masqd
        .call(&Request::EndpointAdd { endpoint })
        .map_err(|e| {
            CniError::new(
                e.code,
                format!("masq: masqd refused endpoint {name}: {}", e.msg),
            )
        })?;
    Ok(output(conf, prev))
}

/// A chained plugin passes the previous result on, in the version asked.
fn output(conf: &NetConf, mut prev: Value) -> Value {
    prev["cniVersion"] = Value::String(conf.cni_version.clone());
    prev
}

/// The endpoint an attachment makes: the pod's own (its first masq
/// network's), or a further device of it (another network's, named
/// `<pod's>-<ifname>`) with the pod's endpoint it is a device of.
fn names(env: &Env, masqd: &Masqd, owner: &CniOwner) -> Result<(String, Option<String>)> {
    let pod = env.endpoint_name()?;
    let theirs = |ep: &Value| {
        owner_of(ep)
            .is_some_and(|o| o.container_id == owner.container_id && o.ifname != owner.ifname)
    };
    match masqd.endpoint(&pod)? {
        Some(ep) if theirs(&ep) => {
            let name = spec::fit_name(&format!("{pod}-{}", owner.ifname));
            Ok((name, Some(pod)))
        }
        _ => Ok((pod, None)),
    }
}

fn del(conf: &NetConf, env: &Env, masqd: &Masqd) -> Result<()> {
    let container_id = env.need("CNI_CONTAINERID")?;
    let ifname = env.need("CNI_IFNAME")?;
    masqd
        .markers()
        .remove(&container_id, &ifname, &conf.name)
        .map_err(marker_error)?;
    let owner = CniOwner {
        container_id: container_id.clone(),
        network: conf.name.clone(),
        ifname,
        namespace: env.pod_namespace(),
        pod: env.pod_name(),
    };
    let (name, _) = names(env, masqd, &owner)?;
    let Some(ep) = masqd.endpoint(&name)? else {
        return Ok(());
    };
    // Only this attachment's endpoint: a name taken again since, or one an
    // operator made, is not ours to remove.
    match owner_of(&ep) {
        Some(o) if o.container_id == container_id && o.network == conf.name => {
            masqd.delete(&name, o)
        }
        _ => Ok(()),
    }
}

fn check(conf: &NetConf, env: &Env, masqd: &Masqd) -> Result<()> {
    let (tenant, vni) = conf.vpc()?;
    let container_id = env.need("CNI_CONTAINERID")?;
    let netns = env.need("CNI_NETNS")?;
    let ifname = env.need("CNI_IFNAME")?;
    let prev = conf
        .prev_result
        .clone()
        .ok_or_else(|| CniError::new(code::INVALID_CONFIG, "masq: CHECK without prevResult"))?;
    let at = spec::attached(&prev, &ifname)?;
    let owner = CniOwner {
        container_id: container_id.clone(),
        network: conf.name.clone(),
        ifname: ifname.clone(),
        namespace: env.pod_namespace(),
        pod: env.pod_name(),
    };
    let (name, _) = names(env, masqd, &owner)?;
    let fail =
        |what: String| CniError::new(code::CHECK_FAILED, format!("masq: endpoint {name}: {what}"));
    let ep = masqd
        .endpoint(&name)?
        .ok_or_else(|| fail("masqd does not serve it".into()))?;
    let owner = owner_of(&ep);
    if owner.as_ref().map(|o| (&o.container_id, &o.network)) != Some((&container_id, &conf.name)) {
        return Err(fail(format!(
            "it belongs to another attachment ({:?})",
            ep["cni"]
        )));
    }
    for (field, want, have) in [
        ("tenant", json!(tenant), ep["tenant"].clone()),
        ("vni", json!(vni), ep["vni"].clone()),
        ("vip", json!(at.vip.to_string()), ep["vip"].clone()),
        ("netns", json!(netns), ep["netns"].clone()),
    ] {
        if want != have {
            return Err(fail(format!(
                "{field} is {have}, the attachment says {want}"
            )));
        }
    }
    Ok(())
}

fn gc(conf: &NetConf, masqd: &Masqd) -> Result<()> {
    let valid = conf.valid_attachments.clone().unwrap_or_default();
    masqd
        .markers()
        .gc(&conf.name, |id, ifname| {
            valid
                .iter()
                .any(|a| a.container_id == id && a.ifname == ifname)
        })
        .map_err(marker_error)?;
    let mut failed = Vec::new();
    let mut all = masqd.endpoints()?;
    // Further devices first: masqd keeps an endpoint that still has one.
    all.sort_by_key(|ep| ep["device_of"].is_null());
    for ep in all {
        let Some(o) = owner_of(&ep) else { continue };
        if o.network != conf.name
            || valid
                .iter()
                .any(|a| a.container_id == o.container_id && a.ifname == o.ifname)
        {
            continue;
        }
        if let Some(name) = ep["name"].as_str() {
            if let Err(e) = masqd.delete(name, o) {
                failed.push(e.msg);
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CniError::new(code::TRY_AGAIN, failed.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_answers_without_masqd() {
        let v = run("VERSION", b"{\"cniVersion\":\"1.1.0\"}", &Env::default())
            .expect("ok")
            .expect("output");
        assert_eq!(v["supportedVersions"].as_array().map(Vec::len), Some(5));
    }

    #[test]
    fn commands_newer_than_the_configuration_are_refused() {
        let conf = br#"{"cniVersion":"1.0.0","name":"n","type":"masq-cni"}"#;
        for cmd in ["GC", "STATUS"] {
            let e = run(cmd, conf, &Env::default()).unwrap_err();
            assert_eq!(e.code, code::INCOMPATIBLE_VERSION, "{cmd}: {}", e.msg);
        }
        let e = run("FROB", conf, &Env::default()).unwrap_err();
        assert_eq!(e.code, code::BAD_ENV);
    }

    #[test]
    fn an_unreachable_masqd_is_try_again_or_not_available() {
        let t = tempfile::tempdir().expect("tmp");
        let sock = t.path().join("none.sock");
        let conf = format!(
            r#"{{"cniVersion":"1.1.0","name":"n","type":"masq-cni","controlSocket":"{}"}}"#,
            sock.display()
        );
        let e = run("STATUS", conf.as_bytes(), &Env::default()).unwrap_err();
        assert_eq!(e.code, code::NOT_AVAILABLE);
        assert!(e.msg.contains("cannot reach masqd"), "{}", e.msg);
    }

    /// The pod asked for masq from the moment its ADD began, whatever
    /// masqd says: masq-nri must refuse its containers rather than start
    /// them without a device. DEL removes the marker even when masqd is
    /// away (the runtime retries the rest).
    #[test]
    fn add_marks_the_pod_before_asking_masqd_and_del_unmarks_it() {
        let t = tempfile::tempdir().expect("tmp");
        let conf = json!({"cniVersion": "1.1.0", "name": "acme100", "type": "masq-cni",
            "tenant": "acme", "vni": 100,
            "controlSocket": t.path().join("control.sock"),
            "prevResult": {"interfaces": [{"name": "net1", "sandbox": "/run/netns/x"}],
                "ips": [{"address": "10.0.0.60/24", "interface": 0}]}});
        let env = Env::from_vars(|k| match k {
            "CNI_CONTAINERID" => Some("sb1".into()),
            "CNI_NETNS" => Some("/run/netns/x".into()),
            "CNI_IFNAME" => Some("net1".into()),
            "CNI_ARGS" => Some("K8S_POD_NAMESPACE=team;K8S_POD_NAME=srv".into()),
            _ => None,
        });
        let input = conf.to_string();
        let e = run("ADD", input.as_bytes(), &env).unwrap_err();
        assert_eq!(e.code, code::TRY_AGAIN, "{}", e.msg);
        let marker: Marker =
            serde_json::from_slice(&std::fs::read(t.path().join("pods/sb1/net1")).expect("marker"))
                .expect("json");
        assert_eq!((marker.network.as_str(), marker.vni), ("acme100", 100));
        assert!(run("DEL", input.as_bytes(), &env).is_err());
        assert!(!t.path().join("pods/sb1").exists());
    }
}
