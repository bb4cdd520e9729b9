//! The operator control socket: one JSON request line, one JSON reply line.
//! Used by masqctl; root-only (mode 0600).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
