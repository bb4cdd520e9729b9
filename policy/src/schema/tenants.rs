//! The document's top: its version and onRuleChange, tenants, their
//! security groups, QoS and members.

use super::rules::Dir;
use super::walker::{join, valid_name, value_loc, Walker};
use super::{looks_numeric, Cidr, Document, Group, Member, MemberKind, Qos, QosMode, Tenant};
use crate::yaml::{Node, Scalar};
use crate::OnRuleChange;

impl Walker<'_> {
    pub(super) fn document(&mut self, root: &Node) -> Document {
        let mut doc = Document {
            on_rule_change: OnRuleChange::Reset,
            tenants: Vec::new(),
        };
        let Node::Map(map) = root else {
            self.err(
                root.loc(),
                "",
                format!(
                    "expected a mapping with keys version, onRuleChange, tenants; found {}",
                    root.kind()
                ),
            );
            return doc;
        };
        self.check_keys(map, "", &["version", "onRuleChange", "tenants"], None);
        match map.get("version") {
            None => self.err(map.loc, "", "missing key \"version\" (expected version: 1)"),
            Some((k, v)) => {
                if let Some(s) = self.scalar(v, k, "version", "version 1") {
                    if s.value != "1" {
                        self.err(
                            s.loc,
                            "version",
                            format!("unsupported version {:?}: expected 1", s.value),
                        );
                    }
                }
            }
        }
        if let Some((k, v)) = map.get("onRuleChange") {
            if let Some(s) = self.scalar(v, k, "onRuleChange", "reset or keep") {
                match s.value.as_str() {
                    "reset" => doc.on_rule_change = OnRuleChange::Reset,
                    "keep" => doc.on_rule_change = OnRuleChange::Keep,
                    other => self.err(
                        s.loc,
                        "onRuleChange",
                        format!("unknown value {other:?}: expected reset or keep"),
                    ),
                }
            }
        }
        if let Some((k, v)) = map.get("tenants") {
            match v {
                _ if v.is_null() => {}
                Node::Map(tenants) => {
                    for (name, t) in self.named_entries(tenants, "tenants", "tenant") {
                        let path = join("tenants", &name.value);
                        doc.tenants.push(self.tenant(&name.value, name, t, &path));
                    }
                }
                other => self.err(
                    value_loc(other, k),
                    "tenants",
                    format!("expected a mapping of tenant names, found {}", other.kind()),
                ),
            }
        }
        doc
    }

    fn tenant(&mut self, name: &str, key: &Scalar, node: &Node, path: &str) -> Tenant {
        let mut tenant = Tenant {
            name: name.to_string(),
            qos: None,
            groups: Vec::new(),
            kubernetes: None,
        };
        let allowed = ["qos", "securityGroups", "kubernetes"];
        let Some(map) = self.keyed_map(key, node, path, &allowed) else {
            return tenant;
        };
        if let Some((k, v)) = map.get("qos") {
            tenant.qos = self.qos(k, v, &join(path, "qos"));
        }
        if let Some((k, v)) = map.get("kubernetes") {
            tenant.kubernetes = Some(self.kubernetes(k, v, &join(path, "kubernetes")));
        }
        if let Some((k, v)) = map.get("securityGroups") {
            let gpath = join(path, "securityGroups");
            match v {
                _ if v.is_null() => {}
                Node::Map(groups) => {
                    for (gname, g) in self.named_entries(groups, &gpath, "security group") {
                        let p = join(&gpath, &gname.value);
                        tenant.groups.push(self.group(gname, g, &p));
                    }
                }
                other => self.err(
                    value_loc(other, k),
                    &gpath,
                    format!(
                        "expected a mapping of security group names, found {}",
                        other.kind()
                    ),
                ),
            }
        }
        tenant
    }

    fn group(&mut self, key: &Scalar, node: &Node, path: &str) -> Group {
        let mut group = Group {
            name: key.value.clone(),
            qos: None,
            members: Vec::new(),
            ingress: None,
            egress: None,
        };
        let allowed = ["members", "ingress", "egress", "qos"];
        let Some(map) = self.keyed_map(key, node, path, &allowed) else {
            return group;
        };
        if let Some((k, v)) = map.get("qos") {
            group.qos = self.qos(k, v, &join(path, "qos"));
        }
        if let Some((k, v)) = map.get("members") {
            let mpath = join(path, "members");
            match v {
                _ if v.is_null() => {}
                Node::Seq(items) => {
                    for (i, item) in items.items.iter().enumerate() {
                        let p = format!("{mpath}[{i}]");
                        if let Some(m) = self.member(item, k, &p) {
                            group.members.push(m);
                        }
                    }
                }
                other => self.err(
                    value_loc(other, k),
                    &mpath,
                    format!(
                        "expected a list of endpoint names, vIPs or CIDRs, found {}",
                        other.kind()
                    ),
                ),
            }
        }
        match map.get("ingress") {
            // Omitted and null both mean the default: deny all ingress.
            None => group.ingress = None,
            Some((_, v)) if v.is_null() => group.ingress = None,
            Some((k, v)) => group.ingress = Some(self.rules(Dir::Ingress, k, v, path)),
        }
        match map.get("egress") {
            None => group.egress = None,
            Some((k, v)) if v.is_null() => {
                // Omitted means allow-all but [] means deny-all; an empty
                // value is too ambiguous to guess.
                self.err(
                    k.loc,
                    &join(path, "egress"),
                    "empty egress: write `egress: []` to deny all egress, or omit the key to allow all",
                );
            }
            Some((k, v)) => group.egress = Some(self.rules(Dir::Egress, k, v, path)),
        }
        group
    }

    /// `qos: { dscp: 0..=63, mode: set | max }` (mode defaults to set).
    fn qos(&mut self, key: &Scalar, node: &Node, path: &str) -> Option<Qos> {
        let Node::Map(map) = node else {
            self.err(
                value_loc(node, key),
                path,
                format!(
                    "expected a mapping with keys dscp, mode; found {}",
                    node.kind()
                ),
            );
            return None;
        };
        self.check_keys(map, path, &["dscp", "mode"], None);
        let dscp = match map.get("dscp") {
            None => {
                self.err(map.loc, path, "missing key \"dscp\" (0..=63)");
                None
            }
            Some((k, v)) => {
                let p = join(path, "dscp");
                let s = self.scalar(v, k, &p, "a DSCP value 0..=63")?;
                match s.value.parse::<u8>() {
                    Ok(d) if d <= 63 => Some(d),
                    _ => {
                        self.err(
                            s.loc,
                            &p,
                            format!("invalid DSCP {:?}: expected 0..=63", s.value),
                        );
                        None
                    }
                }
            }
        };
        let mode = match map.get("mode") {
            None => Some(QosMode::Set),
            Some((k, v)) => {
                let p = join(path, "mode");
                let s = self.scalar(v, k, &p, "set or max")?;
                match s.value.as_str() {
                    "set" => Some(QosMode::Set),
                    "max" => Some(QosMode::Max),
                    other => {
                        self.err(
                            s.loc,
                            &p,
                            format!("unknown value {other:?}: expected set or max"),
                        );
                        None
                    }
                }
            }
        };
        Some(Qos {
            dscp: dscp?,
            mode: mode?,
        })
    }

    fn member(&mut self, node: &Node, key: &Scalar, path: &str) -> Option<Member> {
        let s = self.scalar(node, key, path, "an endpoint name, vIP or CIDR")?;
        let v = s.value.trim();
        let kind = if v.contains('/') || looks_numeric(v) {
            match Cidr::parse(v, true) {
                Ok(c) => MemberKind::Net(c),
                Err(e) => {
                    self.err(s.loc, path, e);
                    return None;
                }
            }
        } else if valid_name(v) {
            MemberKind::Endpoint(v.to_string())
        } else {
            self.err(
                s.loc,
                path,
                format!("invalid member {v:?}: expected an endpoint name, vIP or CIDR"),
            );
            return None;
        };
        Some(Member {
            kind,
            loc: s.loc,
            path: path.to_string(),
        })
    }
}
