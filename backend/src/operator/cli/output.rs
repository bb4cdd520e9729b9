//! How masqctl prints masqd's answers: `table` and `wide` (a table with
//! more columns where there are more to show; both in `table.rs`),
//! `json` and `yaml` (masqd's answer with `apiVersion` and `kind` added).
//!
//! The JSON schema is versioned by `apiVersion`: within `masqctl/v1`, keys
//! are only ever added; removing or renaming one, or changing its type,
//! makes `masqctl/v2`.

use super::masqctl::Format;
use super::table::{render_table, render_wide};
use crate::error::{Error, Result};
use crate::operator::control::Request;
use serde_json::Value;

/// The version of masqctl's JSON and YAML output.
pub const API_VERSION: &str = "masqctl/v1";

/// Every `kind`, as docs/operator-guide.md lists them.
pub const KINDS: [&str; 13] = [
    "DaemonStatus",
    "EndpointList",
    "EndpointAdded",
    "EndpointDeleted",
    "SessionList",
    "VpcMap",
    "CmIdList",
    "PolicyCheck",
    "PolicyApplied",
    "Policy",
    "ConntrackList",
    "ConntrackDeleted",
    "ConntrackEvent",
];

/// The `kind` of a reply to `req` (of each event for `ConntrackEvents`).
pub fn kind(req: &Request) -> &'static str {
    match req {
        Request::Status => "DaemonStatus",
        Request::Endpoints => "EndpointList",
        Request::EndpointAdd { .. } => "EndpointAdded",
        Request::EndpointDel { .. } => "EndpointDeleted",
        // masq-nri's, not masqctl's: not in KINDS.
        Request::EndpointPod { .. } => "EndpointPod",
        Request::Sessions => "SessionList",
        Request::Vpc => "VpcMap",
        Request::Cm => "CmIdList",
        Request::PolicyCheck { .. } => "PolicyCheck",
        Request::PolicyApply { .. } => "PolicyApplied",
        Request::PolicyShow => "Policy",
        Request::ConntrackList { .. } => "ConntrackList",
        Request::ConntrackDelete { .. } => "ConntrackDeleted",
        Request::ConntrackEvents { .. } => "ConntrackEvent",
    }
}

/// masqd's answer with `apiVersion` and `kind` added (keys print sorted,
/// as masqd's own do).
pub fn envelope(req: &Request, reply: &Value) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("apiVersion".into(), API_VERSION.into());
    out.insert("kind".into(), kind(req).into());
    match reply {
        Value::Object(m) => {
            for (k, v) in m {
                if k != "apiVersion" && k != "kind" {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
        other => {
            out.insert("data".into(), other.clone());
        }
    }
    Value::Object(out)
}

/// A reply as `format` prints it (ending in a newline, or empty).
pub fn render(format: Format, req: &Request, reply: &Value) -> Result<String> {
    Ok(match format {
        Format::Table => render_table(req, reply),
        Format::Wide => render_wide(req, reply),
        Format::Json => {
            let v = envelope(req, reply);
            let mut s =
                serde_json::to_string_pretty(&v).map_err(|e| Error::Invalid(e.to_string()))?;
            s.push('\n');
            s
        }
        Format::Yaml => serde_yaml_ng::to_string(&envelope(req, reply))
            .map_err(|e| Error::Invalid(e.to_string()))?,
    })
}

/// One streamed conntrack event: `line` is its conntrack(8)-style text,
/// `data` its fields. JSON is one object a line; YAML one document each.
pub fn render_event(format: Format, line: &str, data: &Value) -> Result<String> {
    let req = Request::ConntrackEvents {
        filter: Default::default(),
    };
    Ok(match format {
        Format::Table | Format::Wide => format!("{line}\n"),
        Format::Json => format!("{}\n", envelope(&req, data)),
        Format::Yaml => format!(
            "---\n{}",
            serde_yaml_ng::to_string(&envelope(&req, data))
                .map_err(|e| Error::Invalid(e.to_string()))?
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_and_yaml_carry_the_version_and_kind_and_keep_every_key() {
        let reply = json!({"endpoints": [{"name": "acme-a"}]});
        let v: Value =
            serde_json::from_str(&render(Format::Json, &Request::Endpoints, &reply).expect("json"))
                .expect("parse");
        assert_eq!(v["apiVersion"], API_VERSION);
        assert_eq!(v["kind"], "EndpointList");
        assert_eq!(v["endpoints"][0]["name"], "acme-a");
        let y = render(Format::Yaml, &Request::Endpoints, &reply).expect("yaml");
        assert!(y.starts_with("apiVersion: masqctl/v1\n"), "{y}");
        assert!(y.contains("\nkind: EndpointList\n"), "{y}");
        let back: Value = serde_yaml_ng::from_str(&y).expect("parse yaml");
        assert_eq!(back["endpoints"][0]["name"], "acme-a");
    }

    #[test]
    fn the_table_is_what_it_was_and_wide_adds_columns() {
        let reply = json!({"vpc": [{"vni": 100, "vip": "10.0.0.1", "name": "acme-a",
            "host": "198.18.0.1", "tenant": "acme", "source": "local"}]});
        let table = render(Format::Table, &Request::Vpc, &reply).expect("table");
        assert_eq!(table, render_table(&Request::Vpc, &reply));
        assert!(!table.contains("TENANT"));
        let wide = render(Format::Wide, &Request::Vpc, &reply).expect("wide");
        assert!(wide.contains("TENANT") && wide.contains("acme "), "{wide}");
        // No wider form: the table.
        let ct = json!({"lines": ["rdma rc tenant=acme"], "entries": [{}]});
        let req = Request::ConntrackList {
            filter: Default::default(),
        };
        assert_eq!(render_wide(&req, &ct), render_table(&req, &ct));
    }

    #[test]
    fn every_request_has_a_listed_kind_of_its_own() {
        let f = crate::operator::control::CtFilter::default;
        let (p, t) = (String::new, String::new);
        let all = [
            Request::Status,
            Request::Endpoints,
            Request::EndpointAdd {
                endpoint: serde_yaml_ng::from_str(
                    "{name: a, tenant: t, vni: 1, vip: 10.0.0.1, netns: /n}",
                )
                .expect("endpoint"),
            },
            Request::EndpointDel {
                name: "a".into(),
                owner: None,
            },
            Request::Sessions,
            Request::Vpc,
            Request::Cm,
            Request::PolicyCheck {
                file: p(),
                text: t(),
            },
            Request::PolicyApply {
                file: p(),
                text: t(),
            },
            Request::PolicyShow,
            Request::ConntrackList { filter: f() },
            Request::ConntrackDelete { filter: f() },
            Request::ConntrackEvents { filter: f() },
        ];
        let kinds: std::collections::BTreeSet<&str> = all.iter().map(kind).collect();
        assert_eq!(kinds, KINDS.into_iter().collect());
    }

    #[test]
    fn events_are_one_json_object_a_line() {
        let data = json!({"event": "NEW", "local_qpn": 17});
        let line = render_event(Format::Json, "[NEW] rdma rc", &data).expect("json");
        assert_eq!(line.lines().count(), 1);
        let v: Value = serde_json::from_str(&line).expect("parse");
        assert_eq!(v["kind"], "ConntrackEvent");
        assert_eq!(v["event"], "NEW");
        assert_eq!(v["local_qpn"], 17);
        assert_eq!(
            render_event(Format::Table, "[NEW] rdma rc", &data).expect("table"),
            "[NEW] rdma rc\n"
        );
        let y = render_event(Format::Yaml, "x", &data).expect("yaml");
        assert!(y.starts_with("---\napiVersion: masqctl/v1\n"), "{y}");
    }
}
