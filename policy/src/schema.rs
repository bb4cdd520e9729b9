//! The policy file's schema: walks the YAML tree into a typed document,
//! recording every structural problem with its place. Name resolution
//! (groups, endpoints) happens in `compile`.

use crate::error::{Errors, Location};
use crate::yaml::{Map, Node, Scalar};
use crate::OnRuleChange;
use std::collections::HashMap;
use std::fmt;
use std::net::Ipv4Addr;

/// An IPv4 prefix with no host bits set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Cidr {
    pub addr: u32,
    pub len: u8,
}

impl Cidr {
    pub fn host(ip: Ipv4Addr) -> Cidr {
        Cidr {
            addr: u32::from(ip),
            len: 32,
        }
    }

    fn mask(len: u8) -> u32 {
        if len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(len))
        }
    }

    pub fn first(&self) -> u32 {
        self.addr
    }

    pub fn last(&self) -> u32 {
        self.addr | !Self::mask(self.len)
    }

    pub fn contains(&self, ip: u32) -> bool {
        ip & Self::mask(self.len) == self.addr
    }

    pub fn covers(&self, other: &Cidr) -> bool {
        self.len <= other.len && self.contains(other.addr)
    }

    /// `a.b.c.d/n`, or a bare address as /32 when `bare_ok`.
    pub fn parse(s: &str, bare_ok: bool) -> Result<Cidr, String> {
        let Some((addr, len)) = s.split_once('/') else {
            if bare_ok {
                return parse_ip(s).map(Cidr::host);
            }
            return Err(format!(
                "invalid CIDR {s:?}: expected address/prefix-length, e.g. 10.0.0.0/16"
            ));
        };
        let ip = parse_ip(addr).map_err(|e| format!("invalid CIDR {s:?}: {e}"))?;
        let len: u8 = match len.parse() {
            Ok(n) if n <= 32 => n,
            _ => return Err(format!("invalid CIDR {s:?}: prefix length must be 0..=32")),
        };
        let addr = u32::from(ip);
        let net = addr & Self::mask(len);
        if net != addr {
            return Err(format!(
                "invalid CIDR {s:?}: host bits are set (the network is {}/{len})",
                Ipv4Addr::from(net)
            ));
        }
        Ok(Cidr { addr, len })
    }
}

fn parse_ip(s: &str) -> Result<Ipv4Addr, String> {
    // std refuses leading zeros ("010.0.0.1"), which some tools read as octal.
    s.parse::<Ipv4Addr>()
        .map_err(|_| format!("{s:?} is not an IPv4 address (a.b.c.d, each 0..=255)"))
}

/// Looks like an address attempt rather than an endpoint name.
fn looks_numeric(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '/')
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.addr), self.len)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Rdma,
    Tcp,
    Udp,
    All,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Rdma => "rdma",
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::All => "all",
        }
    }
}

/// Inclusive destination-port range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

impl PortRange {
    pub const ALL: PortRange = PortRange {
        lo: 0,
        hi: u16::MAX,
    };
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum MemberKind {
    Endpoint(String),
    Net(Cidr),
}

#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub kind: MemberKind,
    pub loc: Location,
    pub path: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Peer {
    Group(String),
    Net(Cidr),
}

#[derive(Clone, Debug)]
pub(crate) struct Rule {
    pub peer: Peer,
    pub peer_loc: Location,
    pub peer_path: String,
    pub protocol: Protocol,
    /// Empty means all ports (and always empty for rdma/all).
    pub ports: Vec<PortRange>,
}

/// How an endpoint's RoCE traffic is marked: the DSCP of the traffic
/// class masqd writes at RTR (the two ECN bits stay the app's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qos {
    pub dscp: u8,
    pub mode: QosMode,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosMode {
    /// Every connection carries `dscp`, whatever the app asked for.
    Set,
    /// The app's DSCP, but no higher than `dscp`.
    Max,
}

impl QosMode {
    pub fn as_str(self) -> &'static str {
        match self {
            QosMode::Set => "set",
            QosMode::Max => "max",
        }
    }
}

impl Qos {
    /// The traffic class to program for an app that asked for `requested`.
    pub fn traffic_class(&self, requested: u8) -> u8 {
        let asked = requested >> 2;
        let dscp = match self.mode {
            QosMode::Set => self.dscp,
            QosMode::Max => asked.min(self.dscp),
        };
        (dscp << 2) | (requested & 0x3)
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub name: String,
    pub qos: Option<Qos>,
    pub members: Vec<Member>,
    /// `None`: key omitted, deny all ingress.
    pub ingress: Option<Vec<Rule>>,
    /// `None`: key omitted, allow all egress. `Some(vec![])`: deny all.
    pub egress: Option<Vec<Rule>>,
}

#[derive(Clone, Debug)]
pub(crate) struct Tenant {
    pub name: String,
    pub qos: Option<Qos>,
    pub groups: Vec<Group>,
    /// `kubernetes.namespaces`: the namespaces whose pods may attach to
    /// it (`None`: no key, so none may; see `kubernetes`).
    pub kubernetes: Option<Vec<String>>,
}

#[derive(Clone, Debug)]
pub(crate) struct Document {
    pub on_rule_change: OnRuleChange,
    pub tenants: Vec<Tenant>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
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

pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Tenant, group and endpoint-like names appear in rule names
/// (`tenant/group/ingress[0]`) and nftables comments, so they are kept to a
/// quoting-free alphabet.
pub(crate) fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && s.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

const NAME_RULE: &str =
    "expected 1..=64 letters, digits, '-', '_' or '.', starting with a letter or digit";

/// Edit distance, for "did you mean" hints on misspelt keys.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

fn list(words: &[&str]) -> String {
    words.join(", ")
}

pub(crate) struct Walker<'e> {
    errs: &'e mut Errors,
}

/// Where to point for a value: an empty plain value has no position of its
/// own (the parser reports the next token), so point at its key.
pub(crate) fn value_loc(node: &Node, key: &Scalar) -> Location {
    match node {
        Node::Scalar(s) if s.plain && s.value.is_empty() => key.loc,
        _ => node.loc(),
    }
}

impl Walker<'_> {
    pub(crate) fn err(&mut self, loc: Location, path: &str, msg: impl Into<String>) {
        self.errs.push(loc, path, msg);
    }

    /// The mapping at `node` (the value of `key`) with keys `allowed`,
    /// checked: None for null (the defaults) and, reported, for anything
    /// but a mapping.
    pub(crate) fn keyed_map<'n>(
        &mut self,
        key: &Scalar,
        node: &'n Node,
        path: &str,
        allowed: &[&str],
    ) -> Option<&'n Map> {
        let map = match node {
            _ if node.is_null() => return None,
            Node::Map(m) => m,
            other => {
                let keys = if allowed.len() == 1 { "key" } else { "keys" };
                self.err(
                    value_loc(other, key),
                    path,
                    format!(
                        "expected a mapping with {keys} {}; found {}",
                        list(allowed),
                        other.kind()
                    ),
                );
                return None;
            }
        };
        self.check_keys(map, path, allowed, None);
        Some(map)
    }

    /// Reports unknown and duplicate keys.
    pub(crate) fn check_keys(
        &mut self,
        map: &Map,
        path: &str,
        allowed: &[&str],
        hint: Option<(&str, &str)>,
    ) {
        // A map, not a scan: a hostile file may have huge mappings.
        let mut seen: HashMap<&str, Location> = HashMap::new();
        for (key, _) in &map.entries {
            if let Some(first) = seen.get(key.value.as_str()) {
                self.err(
                    key.loc,
                    &join(path, &key.value),
                    format!("duplicate key {:?} (first at {first})", key.value),
                );
                continue;
            }
            seen.insert(&key.value, key.loc);
            if allowed.contains(&key.value.as_str()) {
                continue;
            }
            let mut msg = format!(
                "unknown key {:?}: expected one of {}",
                key.value,
                list(allowed)
            );
            match hint {
                Some((wrong, why)) if key.value == wrong => {
                    msg = format!("unknown key {:?}: {why}", key.value);
                }
                _ => {
                    if let Some(best) = allowed
                        .iter()
                        .filter(|a| distance(a, &key.value) <= 2)
                        .min_by_key(|a| distance(a, &key.value))
                    {
                        msg.push_str(&format!(" (did you mean {best:?}?)"));
                    }
                }
            }
            self.err(key.loc, &join(path, &key.value), msg);
        }
    }

    /// Reports duplicate names in a mapping whose keys are names (tenants,
    /// groups); returns the entries to use (first of each name).
    fn named_entries<'n>(
        &mut self,
        map: &'n Map,
        path: &str,
        what: &str,
    ) -> Vec<(&'n Scalar, &'n Node)> {
        let mut out: Vec<(&Scalar, &Node)> = Vec::new();
        let mut seen: HashMap<&str, Location> = HashMap::new();
        for (key, value) in &map.entries {
            let p = join(path, &key.value);
            if let Some(first) = seen.get(key.value.as_str()) {
                self.err(
                    key.loc,
                    &p,
                    format!("duplicate {what} name {:?} (first at {first})", key.value),
                );
                continue;
            }
            seen.insert(&key.value, key.loc);
            if !valid_name(&key.value) {
                self.err(
                    key.loc,
                    &p,
                    format!("invalid {what} name {:?}: {NAME_RULE}", key.value),
                );
            }
            out.push((key, value));
        }
        out
    }

    pub(crate) fn scalar<'n>(
        &mut self,
        node: &'n Node,
        key: &Scalar,
        path: &str,
        expected: &str,
    ) -> Option<&'n Scalar> {
        match node {
            Node::Scalar(s) if !s.is_null() => Some(s),
            other => {
                self.err(
                    value_loc(other, key),
                    path,
                    format!("expected {expected}, found {}", other.kind()),
                );
                None
            }
        }
    }

    fn document(&mut self, root: &Node) -> Document {
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

    fn rules(&mut self, dir: Dir, key: &Scalar, node: &Node, gpath: &str) -> Vec<Rule> {
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

/// Walks the YAML tree; the document is meaningful only if `errs` stays
/// empty.
pub(crate) fn walk(root: &Node, errs: &mut Errors) -> Document {
    Walker { errs }.document(root)
}

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
        if let Some(ns) = &t.kubernetes {
            let mut ns: Vec<&String> = ns.iter().collect();
            ns.sort();
            let ns: Vec<&str> = ns.into_iter().map(String::as_str).collect();
            let _ = writeln!(out, " kubernetes namespaces {}", ns.join(" "));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parse() {
        assert_eq!(
            Cidr::parse("10.0.0.0/16", false).unwrap(),
            Cidr {
                addr: 0x0a00_0000,
                len: 16
            }
        );
        assert_eq!(Cidr::parse("0.0.0.0/0", false).unwrap().len, 0);
        assert_eq!(Cidr::parse("10.1.2.3", true).unwrap().len, 32);
        assert!(Cidr::parse("10.1.2.3", false).is_err());
        let e = Cidr::parse("10.0.0.0/33", false).unwrap_err();
        assert_eq!(
            e,
            "invalid CIDR \"10.0.0.0/33\": prefix length must be 0..=32"
        );
        let e = Cidr::parse("10.0.0.1/24", false).unwrap_err();
        assert!(
            e.contains("host bits are set (the network is 10.0.0.0/24)"),
            "{e}"
        );
        assert!(Cidr::parse("10.0.0/8", false)
            .unwrap_err()
            .contains("not an IPv4 address"));
        assert!(Cidr::parse("010.0.0.0/8", false).is_err());
        assert!(Cidr::parse("10.0.0.0/-1", false).is_err());
        assert!(Cidr::parse("10.0.0.0/", false).is_err());
    }

    #[test]
    fn cidr_contains() {
        let all = Cidr::parse("0.0.0.0/0", false).unwrap();
        assert!(all.contains(0) && all.contains(u32::MAX));
        assert_eq!(all.last(), u32::MAX);
        let c = Cidr::parse("10.0.1.0/24", false).unwrap();
        assert!(c.contains(u32::from(Ipv4Addr::new(10, 0, 1, 255))));
        assert!(!c.contains(u32::from(Ipv4Addr::new(10, 0, 2, 0))));
        assert!(all.covers(&c) && !c.covers(&all));
    }

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

    #[test]
    fn names() {
        assert!(valid_name("acme"));
        assert!(valid_name("web-1.a_b"));
        assert!(!valid_name(""));
        assert!(!valid_name("-x"));
        assert!(!valid_name("a/b"));
        assert!(!valid_name("a b"));
        assert!(!valid_name(&"a".repeat(65)));
    }

    #[test]
    fn edit_distance() {
        assert_eq!(distance("protocol", "protcol"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("ports", "ports"), 0);
    }
}
