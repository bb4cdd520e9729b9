//! The operator control socket: one JSON request line, one JSON reply line.
//! Used by masqctl; root-only (mode 0600).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    Status,
    Endpoints,
    /// Serve one more endpoint, at once and until deleted (kept across a
    /// masqd restart).
    EndpointAdd {
        endpoint: crate::config::EndpointConfig,
    },
    /// Stop serving an endpoint: its QPs are reset, its sessions closed.
    EndpointDel {
        name: String,
        /// Only if it is this CNI attachment's (checked and deleted in one
        /// step: a name taken again since is another endpoint, kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<crate::config::CniOwner>,
    },
    /// A container runtime's NRI plugin (masq-nri), as it creates a
    /// container of pod sandbox `sandbox` (its CNI container ID): the
    /// endpoints masq-cni made for the pod and, on software RoCE, the pod's
    /// cgroup (the parent of its sandbox process `pid`'s) filtered as the
    /// first one's, before any of the pod's apps runs.
    EndpointPod {
        sandbox: String,
        pid: i32,
    },
    Sessions,
    /// The VPC map: every endpoint of every VPC and its host.
    Vpc,
    /// RDMA CM ids: listeners and connections, like ss(8).
    Cm,
    /// Validate a policy without applying it. masqctl sends the file's
    /// text (masqd may run in a container that cannot open the operator's
    /// path); `file` names it in errors.
    PolicyCheck {
        file: String,
        text: String,
    },
    /// Validate and apply a policy, all or nothing (`text` as `PolicyCheck`).
    PolicyApply {
        file: String,
        text: String,
    },
    PolicyShow,
    ConntrackList {
        filter: CtFilter,
    },
    /// Reset the matching connections' QPs to ERROR and untrack them.
    ConntrackDelete {
        filter: CtFilter,
    },
    /// Stream NEW/UPDATE/DESTROY events, one JSON line each.
    ConntrackEvents {
        filter: CtFilter,
    },
}

/// `conntrack`-style selection of tracked connections.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CtFilter {
    pub tenant: Option<String>,
    pub vni: Option<u32>,
    /// Local vIP or CIDR.
    pub src: Option<String>,
    /// Remote vIP or CIDR.
    pub dst: Option<String>,
    /// Local or remote QPN.
    pub qpn: Option<u32>,
    /// rc, uc or ud (UD entries are address handles).
    #[serde(default)]
    pub proto: Option<String>,
}

impl CtFilter {
    pub fn compile(&self) -> Result<rconntrack::Filter> {
        let mut f = rconntrack::Filter::new();
        if let Some(t) = &self.tenant {
            f = f.tenant(t.clone());
        }
        if let Some(v) = self.vni {
            f = f.vni(v);
        }
        if let Some(c) = &self.src {
            f = f.src(
                c.parse()
                    .map_err(|e| Error::Invalid(format!("source {c:?}: {e}")))?,
            );
        }
        if let Some(c) = &self.dst {
            f = f.dst(
                c.parse()
                    .map_err(|e| Error::Invalid(format!("destination {c:?}: {e}")))?,
            );
        }
        if let Some(q) = self.qpn {
            f = f.qpn(q);
        }
        if let Some(p) = &self.proto {
            let t = rconntrack::QpType::parse(p)
                .ok_or_else(|| Error::Invalid(format!("protocol {p:?}: expected rc, uc or ud")))?;
            f = f.qp_type(t);
        }
        Ok(f)
    }
}

/// Longest policy text masqd takes over the control socket.
pub const MAX_POLICY_TEXT: usize = 4 << 20;

/// Longest request line masqd reads; anything longer is refused. Room for
/// a policy text of `MAX_POLICY_TEXT` bytes however JSON escapes it (at
/// most six bytes per byte).
pub const MAX_REQUEST: usize = 6 * MAX_POLICY_TEXT + 64 * 1024;

/// The name `policy check` and `policy apply` give standard input.
pub const STDIN_NAME: &str = "<stdin>";

/// A policy file's name and text as masqctl sends them: `-` reads `stdin`.
/// Refused past `MAX_POLICY_TEXT` bytes or when not UTF-8, naming the file.
pub fn read_policy(path: &Path, stdin: impl io::Read) -> Result<(String, String)> {
    let from_stdin = path == Path::new("-");
    let file = if from_stdin {
        STDIN_NAME.to_string()
    } else {
        path.display().to_string()
    };
    let mut bytes = Vec::new();
    let limit = MAX_POLICY_TEXT as u64 + 1;
    let read = if from_stdin {
        stdin.take(limit).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|f| io::Read::take(f, limit).read_to_end(&mut bytes))
    };
    read.map_err(|e| Error::Invalid(format!("{file}: cannot read: {e}")))?;
    check_policy_size(&file, bytes.len())?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::Invalid(format!(
            "{file}: not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    Ok((file, text))
}

/// A policy text past `MAX_POLICY_TEXT` is refused, naming its file.
pub fn check_policy_size(file: &str, len: usize) -> Result<()> {
    if len > MAX_POLICY_TEXT {
        return Err(Error::Invalid(format!(
            "{file}: longer than {MAX_POLICY_TEXT} bytes (4 MiB), the most masqd takes over \
             its control socket"
        )));
    }
    Ok(())
}

/// Send a request and read line-delimited replies until the stream ends.
pub fn stream(socket: &Path, req: &Request, mut each: impl FnMut(Value)) -> Result<()> {
    let mut s = UnixStream::connect(socket)?;
    let mut line = serde_json::to_string(req).map_err(io::Error::other)?;
    line.push('\n');
    s.write_all(line.as_bytes())?;
    for l in BufReader::new(s).lines() {
        let v = serde_json::from_str(&l?).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad event from masqd: {e}"),
            )
        })?;
        each(v);
    }
    Ok(())
}

pub fn call(socket: &Path, req: &Request) -> Result<Value> {
    let mut s = UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut line = serde_json::to_string(req).map_err(io::Error::other)?;
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply)?;
    Ok(serde_json::from_str(&reply).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad reply from masqd: {e}"),
        )
    })?)
}

/// Read one request from a control connection.
pub fn read_request(stream: &UnixStream) -> Result<Request> {
    let mut line = String::new();
    let mut r = BufReader::new(stream.take_limited());
    match r.read_line(&mut line) {
        Ok(0) => Err(Error::Invalid("empty request".into())),
        Ok(_) if !line.ends_with('\n') => Err(Error::Invalid(format!(
            "request longer than {MAX_REQUEST} bytes"
        ))),
        Ok(_) => {
            serde_json::from_str(&line).map_err(|e| Error::Invalid(format!("bad request: {e}")))
        }
        Err(e) => Err(Error::Invalid(format!("cannot read request: {e}"))),
    }
}

trait TakeLimited {
    fn take_limited(&self) -> io::Take<&UnixStream>;
}

impl TakeLimited for UnixStream {
    fn take_limited(&self) -> io::Take<&UnixStream> {
        io::Read::take(self, MAX_REQUEST as u64)
    }
}

/// A reply field as a table cell: strings bare, null or missing as "-".
pub(crate) fn s(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::String(x)) => x.clone(),
        Some(Value::Null) | None => "-".into(),
        Some(x) => x.to_string(),
    }
}

/// An endpoint's virtual GIDs under its row (table and wide alike), or
/// why its vNIC could not be read.
pub(crate) fn gid_rows(out: &mut String, e: &Value) {
    for g in e["gids"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "    GID[{:>3}] {:<40} {}",
            s(g, "index"),
            s(g, "gid"),
            s(g, "type")
        );
    }
    if let Some(err) = e.get("gid_error").and_then(|v| v.as_str()) {
        let _ = writeln!(out, "    (vNIC unreadable: {err})");
    }
    if let Some(why) = e.get("not_served").and_then(|v| v.as_str()) {
        let _ = writeln!(out, "    (not served: {why})");
    }
}

/// Endpoints a policy names that are not known now: a typo, or one that
/// has not started yet.
fn unknown_note(out: &mut String, reply: &Value) {
    let names: Vec<&str> = reply["unknown_endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .collect();
    if !names.is_empty() {
        let _ = writeln!(
            out,
            "note: no endpoint is named {} now; such members match nothing until one is",
            names.join(", ")
        );
    }
}

/// Unix seconds as an RFC 3339 UTC time.
fn utc(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{secs} (Unix time)"))
}

/// Human-readable rendering of a reply, like `ip`/`conntrack` listings.
pub fn render_table(req: &Request, reply: &Value) -> String {
    let mut out = String::new();
    match req {
        // masq-nri's request; masqctl does not send it.
        Request::EndpointPod { sandbox, .. } => {
            let _ = writeln!(
                out,
                "pod {sandbox}: endpoints {}, pod cgroup {}",
                reply["endpoints"],
                s(reply, "cgroup")
            );
        }
        Request::Status => {
            for k in [
                "host",
                "device",
                "port",
                "endpoints",
                "sessions",
                "qps",
                "uptime_s",
            ] {
                let _ = writeln!(out, "{k:<10} {}", s(reply, k));
            }
            if let Some(not_after) = reply["certificate"]["not_after"].as_i64() {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                let days = (not_after - now).div_euclid(86_400);
                let _ = writeln!(
                    out,
                    "{:<10} {}, expires {} ({})",
                    "identity",
                    s(&reply["certificate"], "subject"),
                    utc(not_after),
                    if not_after <= now {
                        "EXPIRED".to_string()
                    } else {
                        format!("in {days} days")
                    }
                );
            }
            if reply["cluster"]["insecure"] == Value::Bool(true) {
                let _ = writeln!(
                    out,
                    "{:<10} INSECURE: etcd in plaintext with no identities (cluster.insecure)",
                    "cluster"
                );
            }
        }
        Request::Vpc => {
            let _ = writeln!(
                out,
                "{:>8} {:<15} {:<16} {:<15} SOURCE",
                "VNI", "VIP", "ENDPOINT", "HOST"
            );
            for e in reply["vpc"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "{:>8} {:<15} {:<16} {:<15} {}",
                    s(e, "vni"),
                    s(e, "vip"),
                    s(e, "name"),
                    s(e, "host"),
                    s(e, "source")
                );
            }
        }
        Request::Cm => {
            let _ = writeln!(
                out,
                "{:<12} {:>6} {:<4} {:<13} {:<7} {:<21} {:<21} {:>8}",
                "ENDPOINT", "ID", "PS", "STATE", "SIDE", "LOCAL", "PEER", "QPN"
            );
            for i in reply["ids"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "{:<12} {:>6} {:<4} {:<13} {:<7} {:<21} {:<21} {:>8}",
                    s(i, "endpoint"),
                    s(i, "id"),
                    s(i, "ps"),
                    s(i, "state"),
                    s(i, "side"),
                    s(i, "local"),
                    s(i, "peer"),
                    s(i, "qpn")
                );
            }
        }
        Request::EndpointAdd { endpoint } => {
            let _ = writeln!(
                out,
                "endpoint {} added: socket {}",
                endpoint.name,
                s(reply, "socket")
            );
        }
        Request::EndpointDel { name, .. } if reply["kept"] == true => {
            let _ = writeln!(out, "endpoint {name} kept: {}", s(reply, "why"));
        }
        Request::EndpointDel { name, .. } => {
            let _ = writeln!(
                out,
                "endpoint {name} deleted: {} session(s) closed, {} QP(s) reset",
                s(reply, "sessions"),
                s(reply, "qps_reset")
            );
        }
        Request::Endpoints => {
            let _ = writeln!(
                out,
                "{:<12} {:<10} {:>8} {:<15} {:<8} {:<7} {:<8} SOCKET",
                "ENDPOINT", "TENANT", "VNI", "VIP", "VDEV", "SESS", "ORIGIN"
            );
            for e in reply["endpoints"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "{:<12} {:<10} {:>8} {:<15} {:<8} {:<7} {:<8} {}",
                    s(e, "name"),
                    s(e, "tenant"),
                    s(e, "vni"),
                    s(e, "vip"),
                    s(e, "vdev"),
                    s(e, "sessions"),
                    s(e, "origin"),
                    s(e, "socket")
                );
                gid_rows(&mut out, e);
            }
        }
        Request::PolicyCheck { file, .. } => {
            let _ = writeln!(out, "{file}: ok, version {}", s(reply, "version"));
            unknown_note(&mut out, reply);
        }
        Request::PolicyApply { file, .. } if reply.get("written_by").is_some() => {
            let _ = writeln!(
                out,
                "{file}: written to the cluster as {} at revision {}, version {}; in force here",
                s(reply, "written_by"),
                s(reply, "cluster_revision"),
                s(reply, "version"),
            );
            for h in reply["hosts"].as_array().into_iter().flatten() {
                let _ = writeln!(out, "  host {:<15} runs {}", s(h, "host"), s(h, "version"));
            }
            unknown_note(&mut out, reply);
        }
        Request::PolicyApply { file, .. } => {
            let _ = writeln!(
                out,
                "{file}: applied, version {}; {} RDMA connection(s) and {} tcp/udp flow(s) reset{} in {} ms",
                s(reply, "version"),
                s(reply, "reset"),
                s(reply, "flows_reset"),
                if reply["keep"] == Value::Bool(true) {
                    " (onRuleChange: keep)"
                } else {
                    ""
                },
                s(reply, "elapsed_ms")
            );
            unknown_note(&mut out, reply);
        }
        Request::PolicyShow => {
            let _ = writeln!(out, "file     {}", s(reply, "file"));
            let _ = writeln!(out, "version  {}", s(reply, "version"));
            let _ = writeln!(out, "onRuleChange {}", s(reply, "on_rule_change"));
            if let Some(text) = reply.get("text").and_then(|t| t.as_str()) {
                let _ = writeln!(out, "---\n{}", text.trim_end());
            }
        }
        Request::ConntrackList { .. } | Request::ConntrackEvents { .. } => {
            for line in reply["lines"].as_array().into_iter().flatten() {
                let _ = writeln!(out, "{}", line.as_str().unwrap_or_default());
            }
            let n = reply["entries"].as_array().map(|e| e.len()).unwrap_or(0);
            let _ = writeln!(out, "masqctl: {n} RDMA connection(s) shown.");
        }
        Request::ConntrackDelete { .. } => {
            let _ = writeln!(
                out,
                "masqctl: {} RDMA connection(s) reset.",
                s(reply, "reset")
            );
        }
        Request::Sessions => {
            let _ = writeln!(
                out,
                "{:>5} {:<12} {:<10} {:>7} {:<16} {:>4}",
                "ID", "ENDPOINT", "TENANT", "PID", "APP", "QPS"
            );
            for x in reply["sessions"].as_array().into_iter().flatten() {
                let qps = x["qps"].as_array().map(|q| q.len()).unwrap_or(0);
                let _ = writeln!(
                    out,
                    "{:>5} {:<12} {:<10} {:>7} {:<16} {:>4}",
                    s(x, "id"),
                    s(x, "endpoint"),
                    s(x, "tenant"),
                    s(x, "pid"),
                    s(x, "app"),
                    qps
                );
                for q in x["qps"].as_array().into_iter().flatten() {
                    let _ = writeln!(
                        out,
                        "      qpn={} type={} state={} remote={} rqpn={}",
                        s(q, "qpn"),
                        s(q, "qp_type"),
                        s(q, "state"),
                        s(q, "remote_vip"),
                        s(q, "remote_qpn")
                    );
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_have_a_stable_wire_form() {
        assert_eq!(
            serde_json::to_string(&Request::Sessions).expect("json"),
            r#"{"cmd":"sessions"}"#
        );
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"reboot"}"#).is_err());
    }

    /// masqctl reads the policy and sends its text: masqd, in a container,
    /// cannot open the operator's path. `-` is standard input.
    #[test]
    fn a_policy_is_sent_as_its_text_named_as_given() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, "version: 1\n").expect("write");
        let (file, text) = read_policy(&path, io::empty()).expect("file");
        assert_eq!(
            (file, text.as_str()),
            (path.display().to_string(), "version: 1\n")
        );
        let stdin: &[u8] = b"groups: {}\n";
        let (file, text) = read_policy(Path::new("-"), stdin).expect("stdin");
        assert_eq!((file.as_str(), text.as_str()), (STDIN_NAME, "groups: {}\n"));
        let req = Request::PolicyApply { file, text };
        let wire = serde_json::to_string(&req).expect("json");
        assert_eq!(
            wire,
            r#"{"cmd":"policy_apply","file":"<stdin>","text":"groups: {}\n"}"#
        );
        // An older masqctl's path alone is refused, saying what is missing.
        let old = serde_json::from_str::<Request>(r#"{"cmd":"policy_apply","path":"/p.yaml"}"#);
        assert!(old.unwrap_err().to_string().contains("missing field"));
    }

    #[test]
    fn a_policy_past_4_mib_or_not_text_is_refused_naming_its_file() {
        let big = vec![b'#'; MAX_POLICY_TEXT + 1];
        let e = read_policy(Path::new("-"), &big[..])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("<stdin>: longer than 4194304 bytes (4 MiB)"),
            "{e}"
        );
        let fits = vec![b'#'; MAX_POLICY_TEXT];
        assert!(read_policy(Path::new("-"), &fits[..]).is_ok());
        // masqd checks again what another client sends.
        let e = check_policy_size("p.yaml", MAX_POLICY_TEXT + 1)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("p.yaml: longer than"), "{e}");
        let e = read_policy(Path::new("-"), &b"a\xffb"[..])
            .unwrap_err()
            .to_string();
        assert_eq!(e, "<stdin>: not UTF-8 text (invalid byte at offset 1)");
        let e = read_policy(Path::new("/nonexistent/p.yaml"), io::empty())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/nonexistent/p.yaml: cannot read: "), "{e}");
    }

    /// A policy of the largest size masqd takes fits in a request line
    /// however JSON escapes it.
    #[test]
    fn the_largest_policy_fits_in_one_request() {
        let text = "\u{1}".repeat(MAX_POLICY_TEXT);
        let req = Request::PolicyCheck {
            file: "p.yaml".into(),
            text,
        };
        let (mut client, server) = UnixStream::pair().expect("pair");
        let line = serde_json::to_string(&req).expect("json") + "\n";
        assert!(line.len() <= MAX_REQUEST, "{} bytes", line.len());
        let writer = std::thread::spawn(move || client.write_all(line.as_bytes()));
        assert_eq!(read_request(&server).expect("request"), req);
        writer.join().expect("writer").expect("write");
    }

    #[test]
    fn an_endpoint_delete_names_its_attachment_or_none() {
        let plain = r#"{"cmd":"endpoint_del","name":"ct-srv"}"#;
        let del = |owner| Request::EndpointDel {
            name: "ct-srv".into(),
            owner,
        };
        assert_eq!(
            serde_json::from_str::<Request>(plain).expect("plain"),
            del(None)
        );
        assert_eq!(serde_json::to_string(&del(None)).expect("json"), plain);
        let cni = r#"{"cmd":"endpoint_del","name":"ct-srv","owner":{"containerId":"c1","network":"n","ifname":"eth0"}}"#;
        let owner = crate::config::CniOwner {
            container_id: "c1".into(),
            network: "n".into(),
            ifname: "eth0".into(),
            namespace: None,
            pod: None,
        };
        assert_eq!(
            serde_json::from_str::<Request>(cni).expect("cni"),
            del(Some(owner))
        );
    }

    #[test]
    fn conntrack_filter_selects_by_qp_type() {
        let ud = rconntrack::Entry {
            qp_type: rconntrack::QpType::Ud,
            ..Default::default()
        };
        let rc = rconntrack::Entry::default();
        let f = CtFilter {
            proto: Some("UD".into()),
            ..Default::default()
        }
        .compile()
        .expect("ud");
        assert!(f.matches(&ud) && !f.matches(&rc));
        let bad = CtFilter {
            proto: Some("tcp".into()),
            ..Default::default()
        };
        assert!(bad
            .compile()
            .unwrap_err()
            .to_string()
            .contains("rc, uc or ud"));
        // An older masqctl's request (no proto) still parses.
        let old: CtFilter = serde_json::from_str(r#"{"tenant":"acme"}"#).expect("json");
        assert_eq!(old.proto, None);
    }

    #[test]
    fn tables_show_endpoints_with_their_gids() {
        let reply = json!({"endpoints": [{"name": "acme-a", "tenant": "acme", "vni": 100,
            "vip": "10.0.0.1", "vdev": "vrdma0", "sessions": 1, "socket": "/run/masq/x",
            "gids": [{"index": 1, "gid": "::ffff:10.0.0.1", "type": "RoCE v2"}]}]});
        let t = render_table(&Request::Endpoints, &reply);
        assert!(t.contains("acme-a"), "{t}");
        assert!(t.contains("GID[  1] ::ffff:10.0.0.1"), "{t}");
        let reply = json!({"endpoints": [{"name": "acme-b",
            "not_served": "its sysfs view cannot be made: /x: a symbolic link"}]});
        let t = render_table(&Request::Endpoints, &reply);
        assert!(
            t.contains("    (not served: its sysfs view cannot be made"),
            "{t}"
        );
    }

    #[test]
    fn every_status_says_when_the_cluster_is_insecure_and_when_its_certificate_expires() {
        let status = |insecure: bool| {
            let reply =
                json!({"host": "h", "cluster": {"state": "connected", "insecure": insecure}});
            render_table(&Request::Status, &reply)
        };
        assert!(
            status(true).contains("cluster    INSECURE: etcd in plaintext"),
            "{}",
            status(true)
        );
        assert!(!status(false).contains("INSECURE"), "{}", status(false));
        let standalone = render_table(&Request::Status, &json!({"host": "h"}));
        assert!(!standalone.contains("cluster"), "{standalone}");
        let cert = |not_after: i64| {
            let reply = json!({"certificate": {"subject": "CN=host1", "not_after": not_after}});
            render_table(&Request::Status, &reply)
        };
        let t = cert(2_111_095_839);
        assert!(
            t.contains("identity   CN=host1, expires 2036-11-23T23:30:39Z (in "),
            "{t}"
        );
        assert!(cert(1_700_000_000).contains("(EXPIRED)"));
    }
}
