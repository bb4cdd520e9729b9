//! masqctl's text output, `table` and `wide`, from one renderer: the
//! listings (endpoints, sessions, the VPC map, CM ids) are described once
//! by their columns, each marked for both or for `wide` only, and printed
//! a row per item, like `ip`/`conntrack` listings; the other answers are
//! lines, status with the cluster and the backstop in `wide`.

use crate::operator::control::Request;
use serde_json::Value;
use std::fmt::Write as _;

/// A reply field as a table cell: strings bare, null or missing as "-".
pub(crate) fn s(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::String(x)) => x.clone(),
        Some(Value::Null) | None => "-".into(),
        Some(x) => x.to_string(),
    }
}

/// A reply as the table prints it.
pub fn render_table(req: &Request, reply: &Value) -> String {
    render(req, reply, false)
}

/// The wide table: more columns for endpoints, sessions, the VPC map and
/// CM ids, and the backstop and cluster for status; the others print as
/// their table.
pub fn render_wide(req: &Request, reply: &Value) -> String {
    render(req, reply, true)
}

/// One column of a listing.
#[derive(Clone, Copy)]
struct Col {
    head: &'static str,
    /// The row's key whose value the cell shows.
    key: &'static str,
    /// The cell's width; 0 (the last column) prints it as it is.
    width: usize,
    right: bool,
    /// Shown in `wide` only.
    wide: bool,
    /// The cell counts the row's array at `key`.
    count: bool,
}

const fn left(head: &'static str, key: &'static str, width: usize) -> Col {
    Col {
        head,
        key,
        width,
        right: false,
        wide: false,
        count: false,
    }
}

const fn right(head: &'static str, key: &'static str, width: usize) -> Col {
    Col {
        right: true,
        ..left(head, key, width)
    }
}

impl Col {
    const fn wide(self) -> Col {
        Col { wide: true, ..self }
    }

    const fn count(self) -> Col {
        Col {
            count: true,
            ..self
        }
    }

    fn cell(&self, row: &Value) -> String {
        if self.count {
            row[self.key].as_array().map_or(0, Vec::len).to_string()
        } else {
            s(row, self.key)
        }
    }
}

/// A listing: the reply's array of rows, its columns, and what prints
/// under each row (`wide` or not).
struct Listing {
    rows: &'static str,
    cols: &'static [Col],
    under: Option<fn(&mut String, &Value, bool)>,
}

const ENDPOINTS: Listing = Listing {
    rows: "endpoints",
    cols: &[
        left("ENDPOINT", "name", 12),
        left("TENANT", "tenant", 10),
        right("VNI", "vni", 8),
        left("VIP", "vip", 15),
        left("VDEV", "vdev", 8),
        left("RAIL", "rail", 8).wide(),
        left("SESS", "sessions", 7),
        left("ORIGIN", "origin", 8),
        left("NETNS", "netns", 20).wide(),
        left("VNIC", "vnic", 8).wide(),
        left("HOST_IF", "host_if", 12).wide(),
        left("BRIDGE", "bridge", 8).wide(),
        right("MAXCONN", "max_connections", 7).wide(),
        right("RATE", "max_rate_mbps", 7).wide(),
        right("REFCONN", "refused_connections", 7).wide(),
        right("REFREQ", "refused_requests", 7).wide(),
        right("BYPASS", "audit_bypasses", 7).wide(),
        left("SOCKET", "socket", 0),
    ],
    under: Some(gid_rows),
};

const SESSIONS: Listing = Listing {
    rows: "sessions",
    cols: &[
        right("ID", "id", 5),
        left("ENDPOINT", "endpoint", 12),
        left("TENANT", "tenant", 10),
        right("PID", "pid", 7),
        left("APP", "app", 16),
        right("QPS", "qps", 4).count(),
        right("REQUESTS", "requests", 9).wide(),
        right("STARTED", "started", 12).wide(),
    ],
    under: Some(qp_rows),
};

const VPC: Listing = Listing {
    rows: "vpc",
    cols: &[
        right("VNI", "vni", 8),
        left("TENANT", "tenant", 10).wide(),
        left("VIP", "vip", 15),
        left("ENDPOINT", "name", 16),
        left("HOST", "host", 15),
        left("SOURCE", "source", 0),
    ],
    under: None,
};

const CM_IDS: Listing = Listing {
    rows: "ids",
    cols: &[
        left("ENDPOINT", "endpoint", 12),
        left("TENANT", "tenant", 10).wide(),
        right("VNI", "vni", 8).wide(),
        right("SESSION", "session", 8).wide(),
        right("ID", "id", 6),
        left("PS", "ps", 4),
        left("STATE", "state", 13),
        left("SIDE", "side", 7),
        left("LOCAL", "local", 21),
        left("PEER", "peer", 21),
        right("QPN", "qpn", 8),
        right("PEER_QPN", "peer_qpn", 8).wide(),
    ],
    under: None,
};

/// A session's QPs, a line each under its row: (name, key, wide only).
const QP_FIELDS: [(&str, &str, bool); 7] = [
    ("handle", "handle", true),
    ("qpn", "qpn", false),
    ("type", "qp_type", false),
    ("state", "state", false),
    ("remote", "remote_vip", false),
    ("rqpn", "remote_qpn", false),
    ("peer_host", "peer_host", true),
];

fn listing(out: &mut String, l: &Listing, reply: &Value, wide: bool) {
    let cols: Vec<&Col> = l.cols.iter().filter(|c| wide || !c.wide).collect();
    let line = |out: &mut String, cell: &dyn Fn(&Col) -> String| {
        let cells: Vec<String> = cols
            .iter()
            .map(|c| {
                if c.right {
                    format!("{:>w$}", cell(c), w = c.width)
                } else {
                    format!("{:<w$}", cell(c), w = c.width)
                }
            })
            .collect();
        let _ = writeln!(out, "{}", cells.join(" "));
    };
    line(out, &|c| c.head.to_string());
    for row in reply[l.rows].as_array().into_iter().flatten() {
        line(out, &|c| c.cell(row));
        if let Some(under) = l.under {
            under(out, row, wide);
        }
    }
}

/// An endpoint's virtual GIDs under its row (table and wide alike), or
/// why its vNIC could not be read.
fn gid_rows(out: &mut String, e: &Value, _wide: bool) {
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

fn qp_rows(out: &mut String, session: &Value, wide: bool) {
    for q in session["qps"].as_array().into_iter().flatten() {
        let fields: Vec<String> = QP_FIELDS
            .iter()
            .filter(|(_, _, only_wide)| wide || !only_wide)
            .map(|(name, key, _)| format!("{name}={}", s(q, key)))
            .collect();
        let _ = writeln!(out, "      {}", fields.join(" "));
    }
}

/// `req`'s reply as text; `wide` shows more where there is more to show.
fn render(req: &Request, reply: &Value, wide: bool) -> String {
    let mut out = String::new();
    match req {
        Request::Status => {
            status(&mut out, reply);
            if wide {
                status_wide(&mut out, reply);
            }
        }
        Request::Endpoints => listing(&mut out, &ENDPOINTS, reply, wide),
        Request::Sessions => listing(&mut out, &SESSIONS, reply, wide),
        Request::Vpc => listing(&mut out, &VPC, reply, wide),
        Request::Cm => listing(&mut out, &CM_IDS, reply, wide),
        // masq-nri's request; masqctl does not send it.
        Request::EndpointPod { sandbox, .. } => {
            let _ = writeln!(
                out,
                "pod {sandbox}: endpoints {}, pod cgroup {}",
                reply["endpoints"],
                s(reply, "cgroup")
            );
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
        Request::PolicyCheck { file, .. } => {
            let _ = writeln!(out, "{file}: ok, version {}", s(reply, "version"));
            unknown_note(&mut out, reply);
        }
        Request::PolicyApply { file, .. } => policy_applied(&mut out, file, reply),
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
    }
    out
}

fn status(out: &mut String, reply: &Value) {
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

/// What `wide` adds to status: the cluster's connection and the backstop.
fn status_wide(out: &mut String, reply: &Value) {
    let cluster = &reply["cluster"];
    if cluster.is_object() {
        let _ = writeln!(
            out,
            "{:<10} {} since {} revision {} lease {}{}",
            "cluster",
            s(cluster, "state"),
            s(cluster, "since"),
            s(cluster, "revision"),
            s(cluster, "lease"),
            cluster
                .get("error")
                .and_then(|e| e.as_str())
                .map(|e| format!(" error {e}"))
                .unwrap_or_default()
        );
    }
    let backstop = &reply["backstop"];
    if let Some(err) = backstop.get("error").and_then(|e| e.as_str()) {
        let _ = writeln!(out, "{:<10} error {err}", "backstop");
    } else if backstop.is_object() {
        let _ = writeln!(out, "{:<10} {}", "backstop", s(backstop, "table"));
        for d in backstop["drops"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "    {:<32} {:>10} packets {:>12} bytes",
                s(d, "counter"),
                s(d, "packets"),
                s(d, "bytes")
            );
        }
    }
}

fn policy_applied(out: &mut String, file: &str, reply: &Value) {
    if reply.get("written_by").is_some() {
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
    } else {
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
    }
    unknown_note(out, reply);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
