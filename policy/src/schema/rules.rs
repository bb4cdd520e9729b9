//! A security group's ingress and egress rules: their peers (a group or a
//! CIDR), protocols and ports.

use super::walker::{join, valid_name, value_loc, Walker, NAME_RULE};
use super::{Cidr, Peer, PortRange, Protocol, Rule};
use crate::error::Location;
use crate::yaml::{Node, Scalar};

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Dir {
    Ingress,
    Egress,
}

impl Dir {
    fn peer_key(self) -> &'static str {
        match self {
            Dir::Ingress => "from",
            Dir::Egress => "to",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Dir::Ingress => "ingress",
            Dir::Egress => "egress",
        }
    }
}

impl Walker<'_> {
    pub(super) fn rules(&mut self, dir: Dir, key: &Scalar, node: &Node, gpath: &str) -> Vec<Rule> {
        let path = join(gpath, dir.name());
        let Node::Seq(seq) = node else {
            self.err(
                value_loc(node, key),
                &path,
                format!("expected a list of rules, found {}", node.kind()),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in seq.items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            if let Some(r) = self.rule(dir, item, &p) {
                out.push(r);
            }
        }
        out
    }

    fn rule(&mut self, dir: Dir, node: &Node, path: &str) -> Option<Rule> {
        let peer_key = dir.peer_key();
        let Node::Map(map) = node else {
            self.err(
                node.loc(),
                path,
                format!(
                    "expected a rule (a mapping with keys {peer_key}, protocol, ports), found {}",
                    node.kind()
                ),
            );
            return None;
        };
        let wrong = match dir {
            Dir::Ingress => "to",
            Dir::Egress => "from",
        };
        let why = format!("{} rules name their peer with {peer_key:?}", dir.name());
        self.check_keys(
            map,
            path,
            &[peer_key, "protocol", "ports"],
            Some((wrong, &why)),
        );
        let mut ok = true;

        let peer = match map.get(peer_key) {
            None => {
                self.err(
                    map.loc,
                    path,
                    format!("missing key {peer_key:?} (e.g. {peer_key}: {{ group: web }} or {peer_key}: {{ cidr: 10.0.0.0/16 }})"),
                );
                None
            }
            Some((k, v)) => self.peer(k, v, &join(path, peer_key)),
        };

        let protocol = match map.get("protocol") {
            None => {
                self.err(
                    map.loc,
                    path,
                    "missing key \"protocol\" (expected one of rdma, tcp, udp, all)",
                );
                None
            }
            Some((k, v)) => {
                let p = join(path, "protocol");
                match self.scalar(v, k, &p, "one of rdma, tcp, udp, all") {
                    None => None,
                    Some(s) => match s.value.as_str() {
                        "rdma" => Some(Protocol::Rdma),
                        "tcp" => Some(Protocol::Tcp),
                        "udp" => Some(Protocol::Udp),
                        "all" => Some(Protocol::All),
                        other => {
                            self.err(
                                s.loc,
                                &p,
                                format!(
                                    "unknown protocol {other:?}: expected one of rdma, tcp, udp, all"
                                ),
                            );
                            None
                        }
                    },
                }
            }
        };

        let mut ports = Vec::new();
        if let Some((k, v)) = map.get("ports") {
            let p = join(path, "ports");
            match protocol {
                Some(proto @ (Protocol::Rdma | Protocol::All)) => {
                    self.err(
                        k.loc,
                        &p,
                        format!(
                            "ports are only allowed with protocol tcp or udp (this rule's protocol is {})",
                            proto.as_str()
                        ),
                    );
                    ok = false;
                }
                _ => match self.ports(k, v, &p) {
                    Some(list) => ports = list,
                    None => ok = false,
                },
            }
        }

        let (peer, peer_loc, peer_path) = peer?;
        let protocol = protocol?;
        if !ok {
            return None;
        }
        Some(Rule {
            peer,
            peer_loc,
            peer_path,
            protocol,
            ports,
        })
    }

    fn peer(&mut self, key: &Scalar, node: &Node, path: &str) -> Option<(Peer, Location, String)> {
        let Node::Map(map) = node else {
            self.err(
                value_loc(node, key),
                path,
                format!(
                    "expected {{ group: NAME }} or {{ cidr: A.B.C.D/N }}, found {}",
                    node.kind()
                ),
            );
            return None;
        };
        self.check_keys(map, path, &["group", "cidr"], None);
        match (map.get("group"), map.get("cidr")) {
            (Some((gk, _)), Some((ck, _))) => {
                // Point at whichever of the two comes second.
                self.err(
                    gk.loc.max(ck.loc),
                    path,
                    "give either group or cidr, not both",
                );
                None
            }
            (None, None) => {
                self.err(
                    value_loc(node, key),
                    path,
                    "expected { group: NAME } or { cidr: A.B.C.D/N }",
                );
                None
            }
            (Some((k, v)), None) => {
                let p = join(path, "group");
                let s = self.scalar(v, k, &p, "a security group name")?;
                if !valid_name(&s.value) {
                    self.err(
                        s.loc,
                        &p,
                        format!("invalid security group name {:?}: {NAME_RULE}", s.value),
                    );
                    return None;
                }
                Some((Peer::Group(s.value.clone()), s.loc, p))
            }
            (None, Some((k, v))) => {
                let p = join(path, "cidr");
                let s = self.scalar(v, k, &p, "a CIDR such as 10.0.0.0/16")?;
                match Cidr::parse(s.value.trim(), true) {
                    Ok(c) => Some((Peer::Net(c), s.loc, p)),
                    Err(e) => {
                        self.err(s.loc, &p, e);
                        None
                    }
                }
            }
        }
    }

    fn ports(&mut self, key: &Scalar, node: &Node, path: &str) -> Option<Vec<PortRange>> {
        let items: Vec<(&Node, String)> = match node {
            Node::Seq(seq) if seq.items.is_empty() => {
                self.err(
                    seq.loc,
                    path,
                    "an empty port list matches nothing: omit ports to allow all ports",
                );
                return None;
            }
            Node::Seq(seq) => seq
                .items
                .iter()
                .enumerate()
                .map(|(i, n)| (n, format!("{path}[{i}]")))
                .collect(),
            // A single port or range without brackets is unambiguous.
            Node::Scalar(_) => vec![(node, path.to_string())],
            Node::Map(_) => {
                self.err(
                    node.loc(),
                    path,
                    "expected a list of ports, e.g. [80, \"8000-8100\"], found a mapping",
                );
                return None;
            }
        };
        let mut out = Vec::new();
        let mut ok = true;
        for (item, p) in items {
            let Some(s) = self.scalar(item, key, &p, "a port 1..=65535 or a range \"lo-hi\"")
            else {
                ok = false;
                continue;
            };
            match parse_ports(s.value.trim()) {
                Ok(r) => out.push(r),
                Err(e) => {
                    self.err(s.loc, &p, e);
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }
}

fn parse_port(s: &str, whole: &str) -> Result<u16, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=65535).contains(&n) => Ok(n as u16),
        Ok(_) => Err(format!("invalid port {whole:?}: ports are 1..=65535")),
        Err(_) => Err(format!(
            "invalid port {whole:?}: expected a number 1..=65535 or a range \"lo-hi\""
        )),
    }
}

fn parse_ports(s: &str) -> Result<PortRange, String> {
    match s.split_once('-') {
        None => parse_port(s, s).map(|p| PortRange { lo: p, hi: p }),
        Some((lo, hi)) => {
            let (lo, hi) = (parse_port(lo, s)?, parse_port(hi, s)?);
            if lo > hi {
                return Err(format!(
                    "invalid port range {s:?}: start {lo} is greater than end {hi}"
                ));
            }
            Ok(PortRange { lo, hi })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports() {
        assert_eq!(parse_ports("80").unwrap(), PortRange { lo: 80, hi: 80 });
        assert_eq!(
            parse_ports("20000-20100").unwrap(),
            PortRange {
                lo: 20000,
                hi: 20100
            }
        );
        assert_eq!(parse_ports("1 - 2").unwrap(), PortRange { lo: 1, hi: 2 });
        assert!(parse_ports("0").unwrap_err().contains("1..=65535"));
        assert!(parse_ports("65536").unwrap_err().contains("1..=65535"));
        assert!(parse_ports("200-100")
            .unwrap_err()
            .contains("start 200 is greater than end 100"));
        assert!(parse_ports("http").is_err());
        assert!(parse_ports("1-2-3").is_err());
    }
}
