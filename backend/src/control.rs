//! The operator control socket: one JSON request line, one JSON reply line.
//! Used by masqctl; root-only (mode 0600).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    Status,
    Endpoints,
    Sessions,
}

/// Longest request line masqd reads; anything longer is refused.
pub const MAX_REQUEST: usize = 64 * 1024;

pub fn call(socket: &Path, req: &Request) -> io::Result<Value> {
    let mut s = UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut line = serde_json::to_string(req).map_err(io::Error::other)?;
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply)?;
    serde_json::from_str(&reply).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad reply from masqd: {e}"),
        )
    })
}

/// Read one request from a control connection.
pub fn read_request(stream: &UnixStream) -> Result<Request, String> {
    let mut line = String::new();
    let mut r = BufReader::new(stream.take_limited());
    match r.read_line(&mut line) {
        Ok(0) => Err("empty request".into()),
        Ok(_) if !line.ends_with('\n') => Err(format!("request longer than {MAX_REQUEST} bytes")),
        Ok(_) => serde_json::from_str(&line).map_err(|e| format!("bad request: {e}")),
        Err(e) => Err(format!("cannot read request: {e}")),
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

fn s(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::String(x)) => x.clone(),
        Some(Value::Null) | None => "-".into(),
        Some(x) => x.to_string(),
    }
}

/// Human-readable rendering of a reply, like `ip`/`conntrack` listings.
pub fn render_table(req: &Request, reply: &Value) -> String {
    let mut out = String::new();
    match req {
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
        }
        Request::Endpoints => {
            let _ = writeln!(
                out,
                "{:<12} {:<10} {:>8} {:<15} {:<8} {:<7} SOCKET",
                "ENDPOINT", "TENANT", "VNI", "VIP", "VDEV", "SESS"
            );
            for e in reply["endpoints"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "{:<12} {:<10} {:>8} {:<15} {:<8} {:<7} {}",
                    s(e, "name"),
                    s(e, "tenant"),
                    s(e, "vni"),
                    s(e, "vip"),
                    s(e, "vdev"),
                    s(e, "sessions"),
                    s(e, "socket")
                );
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
            }
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

    #[test]
    fn tables_show_endpoints_with_their_gids() {
        let reply = json!({"endpoints": [{"name": "acme-a", "tenant": "acme", "vni": 100,
            "vip": "10.0.0.1", "vdev": "vrdma0", "sessions": 1, "socket": "/run/masq/x",
            "gids": [{"index": 1, "gid": "::ffff:10.0.0.1", "type": "RoCE v2"}]}]});
        let t = render_table(&Request::Endpoints, &reply);
        assert!(t.contains("acme-a"), "{t}");
        assert!(t.contains("GID[  1] ::ffff:10.0.0.1"), "{t}");
    }
}
