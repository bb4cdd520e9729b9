//! The policy's canonical text, whose hash is its version.

use super::{Document, Group, MemberKind, Peer, Tenant};
use crate::OnRuleChange;

/// A text form that ignores layout, comments, key order and member order
/// but keeps rule order (rule indices name rules). Hashing it gives the
/// policy's version.
pub(crate) fn canonical(doc: &Document) -> String {
    use std::fmt::Write;
    let mut out = String::from("masq-policy v1\n");
    let _ = writeln!(
        out,
        "onRuleChange {}",
        match doc.on_rule_change {
            OnRuleChange::Reset => "reset",
            OnRuleChange::Keep => "keep",
        }
    );
    let mut tenants: Vec<&Tenant> = doc.tenants.iter().collect();
    tenants.sort_by(|a, b| a.name.cmp(&b.name));
    for t in tenants {
        let _ = writeln!(out, "tenant {}", t.name);
        if let Some(q) = t.qos {
            let _ = writeln!(out, " qos {} {}", q.dscp, q.mode.as_str());
        }
        if let Some(k) = &t.kubernetes {
            let mut ns: Vec<&String> = k.namespaces.iter().collect();
            ns.sort();
            let ns: Vec<&str> = ns.into_iter().map(String::as_str).collect();
            let _ = writeln!(out, " kubernetes namespaces {}", ns.join(" "));
            if k.network_policy {
                let _ = writeln!(out, " kubernetes networkPolicy");
            }
        }
        let mut groups: Vec<&Group> = t.groups.iter().collect();
        groups.sort_by(|a, b| a.name.cmp(&b.name));
        for g in groups {
            let _ = writeln!(out, " group {}", g.name);
            if let Some(q) = g.qos {
                let _ = writeln!(out, "  qos {} {}", q.dscp, q.mode.as_str());
            }
            let mut members: Vec<&MemberKind> = g.members.iter().map(|m| &m.kind).collect();
            members.sort();
            members.dedup();
            for m in members {
                match m {
                    MemberKind::Endpoint(n) => {
                        let _ = writeln!(out, "  member endpoint {n}");
                    }
                    MemberKind::Net(c) => {
                        let _ = writeln!(out, "  member net {c}");
                    }
                }
            }
            for (dir, rules) in [("ingress", &g.ingress), ("egress", &g.egress)] {
                match rules {
                    None => {
                        let _ = writeln!(out, "  {dir} default");
                    }
                    Some(rules) => {
                        let _ = writeln!(out, "  {dir} rules {}", rules.len());
                        for r in rules {
                            let peer = match &r.peer {
                                Peer::Group(g) => format!("group {g}"),
                                Peer::Net(c) => format!("net {c}"),
                            };
                            let ports: Vec<String> =
                                r.ports.iter().map(|p| p.to_string()).collect();
                            let _ = writeln!(
                                out,
                                "   {peer} {} ports {}",
                                r.protocol.as_str(),
                                if ports.is_empty() {
                                    "all".to_string()
                                } else {
                                    ports.join(",")
                                }
                            );
                        }
                    }
                }
            }
        }
    }
    out
}
