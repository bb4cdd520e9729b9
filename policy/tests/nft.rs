//! nftables rendering: content checks, and `nft -c` validation of every
//! rendered ruleset when nft can run here.

use masq_policy::{EndpointRef, NftError, Policy};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn endpoints() -> Vec<EndpointRef> {
    vec![
        EndpointRef::new("acme-a", "acme", 100, ip("10.0.0.1")),
        EndpointRef::new("acme-b", "acme", 100, ip("10.0.0.2")),
        EndpointRef::new("acme-c", "acme", 100, ip("10.0.1.5")),
        EndpointRef::new("acme-z", "acme", 101, ip("10.0.0.9")),
        EndpointRef::new("globex-a", "globex", 200, ip("10.0.0.1")),
        EndpointRef::new("globex-b", "globex", 200, ip("10.0.0.2")),
        EndpointRef::new("loner", "initech", 300, ip("10.9.0.1")),
    ]
}

fn example() -> Policy {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/policy.yaml");
    Policy::load(path, &endpoints()).unwrap()
}

/// Lines of the chain `name`, trimmed.
fn chain<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let start = format!("chain {name} {{");
    text.lines()
        .map(str::trim)
        .skip_while(|l| *l != start)
        .skip(1)
        .take_while(|l| *l != "}")
        .collect()
}

#[test]
fn database_endpoint() {
    let text = example().render_nft("acme-b", "veth-b", "br100").unwrap();
    assert!(text.contains("table bridge masq_acme-b {"), "{text}");
    assert!(
        text.contains("meta ibrname \"br100\" ct zone set 101"),
        "{text}"
    );
    assert_eq!(
        chain(&text, "forward"),
        [
            "type filter hook forward priority 0; policy accept;",
            "oifname \"veth-b\" jump to_endpoint",
            "iifname \"veth-b\" jump from_endpoint",
        ]
    );
    assert_eq!(
        chain(&text, "to_endpoint"),
        [
            "ether type arp accept",
            "ct state established,related accept",
            "# acme/db/ingress[0]: rdma, enforced by masqd",
            "ip saddr 10.0.0.1 tcp dport 18515 accept comment \"acme/db/ingress[1]\"",
            "ip saddr 10.0.1.0/24 accept comment \"acme/db/ingress[2]\"",
            "meta l4proto { tcp, udp } counter drop comment \"default-deny\"",
        ]
    );
    // egress: [] denies all new tcp/udp from the database.
    assert_eq!(
        chain(&text, "from_endpoint"),
        [
            "ether type arp accept",
            "ct state established,related accept",
            "meta l4proto { tcp, udp } counter drop comment \"default-deny\"",
        ]
    );
}

#[test]
fn web_endpoint_any_source_and_port_sets() {
    let text = example().render_nft("acme-a", "veth-a", "br100").unwrap();
    let to = chain(&text, "to_endpoint");
    assert!(
        to.contains(&"ether type ip tcp dport { 80, 443, 8000-8100 } accept comment \"acme/web/ingress[0]\""),
        "{text}"
    );
    // No egress key: unrestricted.
    assert_eq!(
        chain(&text, "from_endpoint"),
        [
            "ether type arp accept",
            "ct state established,related accept",
            "accept comment \"acme/web/egress(all)\"",
        ]
    );
}

#[test]
fn group_peers_expand_to_members_in_the_same_vni() {
    let yaml = r#"version: 1
tenants:
  acme:
    securityGroups:
      db:
        members: [acme-b]
        ingress:
          - from: { group: clients }
            protocol: udp
            ports: [5000, "5001-5010", "4000-5000"]
          - from: { group: empty }
            protocol: tcp
      clients:
        members: [acme-a, acme-z, 10.0.1.0/24, 10.0.1.5]
      empty:
        members: [acme-z]
"#;
    let p = Policy::parse(yaml, "p.yaml", &endpoints()).unwrap();
    let text = p.render_nft("acme-b", "vb", "br100").unwrap();
    let to = chain(&text, "to_endpoint");
    // acme-z is in VNI 101, so it is not a peer of acme-b (VNI 100); the
    // /32 inside the /24 and the overlapping port ranges are merged.
    assert!(
        to.contains(&"ip saddr { 10.0.0.1, 10.0.1.0/24 } udp dport 4000-5010 accept comment \"acme/db/ingress[0]\""),
        "{text}"
    );
    assert!(
        to.contains(&"# acme/db/ingress[1]: group empty has no members in VNI 100"),
        "{text}"
    );
}

#[test]
fn endpoint_in_no_group() {
    let text = example().render_nft("loner", "vl", "br300").unwrap();
    assert!(text.contains("# groups: none;"));
    assert!(text.contains("ct zone set 301"));
    assert_eq!(
        chain(&text, "to_endpoint").last(),
        Some(&"meta l4proto { tcp, udp } counter drop comment \"default-deny\"")
    );
    assert_eq!(
        chain(&text, "from_endpoint").last(),
        Some(&"accept comment \"default-egress-allow\"")
    );
}

#[test]
fn render_errors() {
    let p = example();
    assert_eq!(
        p.render_nft("nobody", "v", "b"),
        Err(NftError::UnknownEndpoint("nobody".into()))
    );
    assert!(matches!(
        p.render_nft("acme-a", "veth\"x", "b"),
        Err(NftError::BadInterfaceName(_))
    ));
    assert!(matches!(
        p.render_nft("acme-a", "v", "bridge-name-too-long"),
        Err(NftError::BadInterfaceName(_))
    ));
}

// ------------------------------------------------------------- nft -c

/// Skips and partial checks must show in a normal `cargo test` run; the
/// test harness captures print!/eprint! but not direct writes.
fn note(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "note: {msg}");
}

enum Checked {
    Full,
    /// Validated except rules the kernel here cannot load; the reason.
    Partial(String),
    Skipped(String),
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

fn nft_c(text: &str) -> Result<(), String> {
    let path = std::env::temp_dir().join(format!(
        "masq-policy-{}-{}.nft",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, text).map_err(|e| format!("write: {e}"))?;
    let out = Command::new("nft").arg("-c").arg("-f").arg(&path).output();
    let _ = std::fs::remove_file(&path);
    match out {
        Err(e) => Err(format!("spawn: {e}")),
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr).into_owned()),
    }
}

/// Lines (1-based) the kernel refused, if every error is a kernel refusal
/// ("Could not process rule") of a rule needing nf_conntrack_bridge (`ct`)
/// or nft_meta_bridge (`meta ibrname`): nft's own parser and evaluator
/// accepted those lines before the kernel saw them.
fn kernel_only_refusals(text: &str, stderr: &str) -> Option<Vec<usize>> {
    let src: Vec<&str> = text.lines().collect();
    let mut lines = Vec::new();
    for l in stderr.lines().filter(|l| l.contains(": Error: ")) {
        let (pos, msg) = l.split_once(": Error: ")?;
        if !msg.starts_with("Could not process rule") {
            return None;
        }
        // "<file>:<line>:<cols>"
        let mut parts = pos.rsplitn(3, ':');
        let _cols = parts.next()?;
        let line: usize = parts.next()?.parse().ok()?;
        let code = src.get(line.checked_sub(1)?)?.trim();
        if !(code.starts_with("ct ") || code.starts_with("meta ibrname")) {
            return None;
        }
        lines.push(line);
    }
    (!lines.is_empty()).then_some(lines)
}

fn check(text: &str) -> Checked {
    match nft_c(text) {
        Ok(()) => Checked::Full,
        Err(e) if e.starts_with("spawn:") => Checked::Skipped(format!("nft cannot run here ({e})")),
        Err(e) if e.contains("Operation not permitted") => {
            Checked::Skipped("nft -c needs CAP_NET_ADMIN".into())
        }
        Err(e) => {
            let Some(refused) = kernel_only_refusals(text, &e) else {
                panic!("nft -c rejected the ruleset:\n{e}\n--- ruleset ---\n{text}");
            };
            // Validate everything else with the kernel.
            let rest: String = text
                .lines()
                .enumerate()
                .map(|(i, l)| {
                    if refused.contains(&(i + 1)) {
                        "# (refused here)"
                    } else {
                        l
                    }
                })
                .collect::<Vec<_>>()
                .join("\n");
            if let Err(e2) = nft_c(&rest) {
                panic!("nft -c rejected the ruleset without ct/ibrname rules:\n{e2}\n--- ruleset ---\n{rest}");
            }
            Checked::Partial(
                "this kernel lacks nf_conntrack_bridge/nft_meta_bridge: the ct and meta ibrname \
                 rules passed nft's parser but not the kernel; all other rules passed nft -c"
                    .into(),
            )
        }
    }
}

#[test]
fn rendered_rulesets_pass_nft_check() {
    let p = example();
    let mut results = Vec::new();
    for (ep, ifname, br) in [
        ("acme-a", "veth-a", "br100"),
        ("acme-b", "veth-b", "br100"),
        ("acme-c", "veth-c", "br100"),
        ("acme-z", "veth-z", "br101"),
        ("globex-a", "vg-a", "br200"),
        ("loner", "vl", "br300"),
    ] {
        let text = p.render_nft(ep, ifname, br).unwrap();
        results.push((ep, check(&text)));
    }
    // A ruleset with every kind of rule at once.
    let yaml = r#"version: 1
tenants:
  acme:
    securityGroups:
      all-kinds:
        members: [acme-a, 10.0.0.0/30]
        ingress:
          - { from: { cidr: 0.0.0.0/0 }, protocol: udp }
          - { from: { cidr: 10.0.0.0/8 }, protocol: tcp, ports: [1, 65535, "100-200"] }
          - { from: { group: all-kinds }, protocol: all }
          - { from: { group: all-kinds }, protocol: rdma }
        egress:
          - { to: { cidr: 0.0.0.0/0 }, protocol: tcp, ports: [443] }
          - { to: { group: all-kinds }, protocol: udp, ports: ["1-65535"] }
"#;
    let p = Policy::parse(yaml, "k.yaml", &endpoints()).unwrap();
    results.push((
        "all-kinds",
        check(&p.render_nft("acme-a", "veth-a", "br100").unwrap()),
    ));
    // One note per distinct outcome, naming the rulesets.
    let mut notes: Vec<(String, Vec<&str>)> = Vec::new();
    for (ep, r) in results {
        let what = match r {
            Checked::Full => "nft -c passed".to_string(),
            Checked::Partial(why) => format!("nft -c passed in part: {why}"),
            Checked::Skipped(why) => format!("SKIPPED nft -c: {why}"),
        };
        match notes.iter_mut().find(|(w, _)| *w == what) {
            Some((_, eps)) => eps.push(ep),
            None => notes.push((what, vec![ep])),
        }
    }
    for (what, eps) in notes {
        note(&format!(
            "{} ({} rulesets: {})",
            what,
            eps.len(),
            eps.join(", ")
        ));
    }
}

/// Kubernetes NetworkPolicy's chains: a second base chain after the
/// security groups', each rule's selected vIPs and ipBlocks (less their
/// exceptions) with its ports, the pod's default deny, and nft -c.
#[test]
fn network_policy_chains_follow_the_pods_flows() {
    use masq_policy::netpol::{Endpoint, Index, Namespace, NetworkPolicy, Pod, Snapshot};
    let policy = NetworkPolicy::from_json(
        r#"{"metadata": {"namespace": "team", "name": "db-in\"x"},
            "spec": {"podSelector": {"matchLabels": {"app": "db"}},
                     "policyTypes": ["Ingress", "Egress"],
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}},
                                           {"ipBlock": {"cidr": "10.0.8.0/24", "except": ["10.0.8.7/32"]}}],
                                  "ports": [{"port": 5432}, {"protocol": "UDP", "port": 7000, "endPort": 7010},
                                            {"protocol": "UDP", "port": 7011}]},
                                 {"ports": [{"port": "postgres"}]}],
                     "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "UDP"}]}]}}"#,
    )
    .unwrap();
    let labels = |app: &str| [("app".to_string(), app.to_string())].into_iter().collect();
    let index = Index::build(Snapshot {
        namespaces: vec![Namespace::new("team", Default::default())],
        pods: vec![
            Pod::new("team", "db", labels("db")),
            Pod::new("team", "web", labels("web")),
        ],
        policies: vec![policy],
    });
    let ends = [
        Endpoint::pod("team", "db", ip("10.0.0.2")),
        Endpoint::pod("team", "web", ip("10.0.0.1")),
    ];
    let p = example();
    let db = EndpointRef::new("acme-b", "acme", 100, ip("10.0.0.2"));
    let flows = index.flows(&ends[0], &ends);
    let text = p
        .render_nft_for(&db, "veth-b", "br100", Some(&flows))
        .unwrap();
    assert_eq!(
        chain(&text, "netpol"),
        [
            "type filter hook forward priority 10; policy accept;",
            "oifname \"veth-b\" jump netpol_to_endpoint",
            "iifname \"veth-b\" jump netpol_from_endpoint",
        ]
    );
    // The quote in the policy's name never reaches nft.
    let rule = "team/db-in_x/ingress[0]";
    assert_eq!(
        chain(&text, "netpol_to_endpoint"),
        [
            "ether type arp accept".to_string(),
            "ct state established,related accept".to_string(),
            format!("ip saddr 10.0.0.1 tcp dport 5432 accept comment \"{rule}\""),
            format!("ip saddr 10.0.0.1 udp dport 7000-7011 accept comment \"{rule}\""),
            format!("ip saddr 10.0.8.0/24 ip saddr != 10.0.8.7 tcp dport 5432 accept comment \"{rule}\""),
            format!("ip saddr 10.0.8.0/24 ip saddr != 10.0.8.7 udp dport 7000-7011 accept comment \"{rule}\""),
            "# team/db-in_x/ingress[1]: only named or SCTP ports, which match no tcp/udp port".to_string(),
            "meta l4proto { tcp, udp } counter drop comment \"netpol:default-deny team/db ingress\"".to_string(),
        ]
    );
    assert_eq!(
        chain(&text, "netpol_from_endpoint")[2..],
        [
            "ether type ip meta l4proto udp accept comment \"team/db-in_x/egress[0]\"",
            "meta l4proto { tcp, udp } counter drop comment \"netpol:default-deny team/db egress\"",
        ]
    );
    // web is isolated by nothing: no chain; a pod masq-netpol has not
    // mirrored refuses every tcp/udp flow until it is.
    let web = EndpointRef::new("acme-a", "acme", 100, ip("10.0.0.1"));
    let open = p
        .render_nft_for(&web, "veth-a", "br100", Some(&index.flows(&ends[1], &ends)))
        .unwrap();
    assert!(!open.contains("chain netpol"), "{open}");
    assert!(open.contains("# Kubernetes NetworkPolicy: no policy isolates this pod"));
    let gone = Endpoint::pod("team", "gone", ip("10.0.0.1"));
    let unknown = p
        .render_nft_for(&web, "veth-a", "br100", Some(&index.flows(&gone, &ends)))
        .unwrap();
    assert_eq!(
        chain(&unknown, "netpol_to_endpoint")[2..],
        ["meta l4proto { tcp, udp } counter drop comment \"netpol:unknown team/gone\""]
    );
    for t in [&text, &unknown] {
        match check(t) {
            Checked::Full => {}
            Checked::Partial(why) => note(&format!("netpol chains: nft -c passed in part: {why}")),
            Checked::Skipped(why) => note(&format!("SKIPPED netpol chains' nft -c: {why}")),
        }
    }
}

// ------------------------------------------- enforcement on a real bridge

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Why the bridge experiment cannot run here, if it cannot.
fn bridge_unsupported() -> Option<String> {
    if !is_root() {
        return Some("needs root (network namespaces)".into());
    }
    for m in ["nf_conntrack_bridge", "nft_meta_bridge"] {
        // Absent modprobe or module: the probe below says what is missing.
        let _ = Command::new("modprobe").arg("-q").arg(m).status();
    }
    let probe = "table bridge masq_probe {\n\tchain z {\n\t\ttype filter hook prerouting priority -300; policy accept;\n\t\tmeta ibrname \"x\" ct zone set 1\n\t}\n\tchain f {\n\t\ttype filter hook forward priority 0; policy accept;\n\t\tct state established accept\n\t}\n}\n";
    if let Err(e) = nft_c(probe) {
        let e = e
            .lines()
            .find(|l| l.contains("Error"))
            .unwrap_or(&e)
            .to_string();
        return Some(format!(
            "kernel lacks bridge conntrack or bridge meta (nf_conntrack_bridge, nft_meta_bridge): {e}"
        ));
    }
    for tool in ["ip", "python3"] {
        if Command::new(tool).arg("-V").output().is_err()
            && Command::new(tool).arg("--version").output().is_err()
        {
            return Some(format!("{tool} not installed"));
        }
    }
    None
}

/// Loads rulesets on a Linux bridge in fresh network namespaces and checks
/// real tcp/udp traffic against the policy (tests/bridge_check.sh). Runs
/// where the kernel has nf_conntrack_bridge (e.g. the Debian kernel of the
/// integration testbed); elsewhere it says why it skipped.
#[test]
fn bridge_enforcement_in_namespaces() {
    if let Some(why) = bridge_unsupported() {
        note(&format!("SKIPPED bridge enforcement: {why}"));
        return;
    }
    let eps = vec![
        EndpointRef::new("acme-a", "acme", 100, ip("10.0.0.1")),
        EndpointRef::new("acme-b", "acme", 100, ip("10.0.0.2")),
        EndpointRef::new("acme-c", "acme", 100, ip("10.0.1.5")),
        EndpointRef::new("globex-z", "globex", 200, ip("10.0.1.5")),
        EndpointRef::new("globex-w", "globex", 200, ip("10.0.0.2")),
    ];
    let yaml = r#"version: 1
tenants:
  acme:
    securityGroups:
      db:
        members: [acme-b]
        ingress:
          - { from: { group: web }, protocol: tcp, ports: [18515] }
          - { from: { cidr: 10.0.1.0/24 }, protocol: udp, ports: ["5000-5010"] }
          - { from: { group: web }, protocol: rdma }
        egress: []
      web:
        members: [acme-a]
        ingress:
          - { from: { cidr: 0.0.0.0/0 }, protocol: tcp, ports: [80] }
      batch:
        members: [10.0.1.0/24]
        egress:
          - { to: { group: db }, protocol: tcp, ports: [18515] }
          - { to: { group: db }, protocol: udp }
  globex:
    securityGroups:
      locked:
        members: [globex-w]
"#;
    let p = Policy::parse(yaml, "bridge.yaml", &eps).unwrap();
    let dir = std::env::temp_dir().join(format!("masq-policy-bridge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (e, ep, br) in [
        ("a", "acme-a", "br100"),
        ("b", "acme-b", "br100"),
        ("c", "acme-c", "br100"),
        ("z", "globex-z", "br200"),
        ("w", "globex-w", "br200"),
    ] {
        let text = p.render_nft(ep, &format!("veth-{e}"), br).unwrap();
        std::fs::write(dir.join(format!("{e}.nft")), text).unwrap();
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/bridge_check.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    println!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "bridge enforcement failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
