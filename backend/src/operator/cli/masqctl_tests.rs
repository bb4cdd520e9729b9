//! masqctl's parser: every spelling the repository's scripts, tests and
//! docs use parses to the request it always sent; the new grammar to the
//! same; bad values fail with exit status 2 naming the option.

use super::*;
use clap::error::ErrorKind;
use clap::CommandFactory;

/// Parsing reads MASQCTL_SOCKET and MASQCTL_OUTPUT, which one test sets:
/// the tests of this module parse one at a time.
static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    parse_locked(args)
}

fn parse_locked(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(modernize(
        std::iter::once("masqctl").chain(args.iter().copied()),
    ))
}

#[test]
fn old_commands_are_spelled_anew_before_parsing() {
    let m = |args: &[&str]| -> Vec<String> {
        modernize(std::iter::once("masqctl").chain(args.iter().copied()))
            .into_iter()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    };
    let cases: [(&[&str], &[&str]); 14] = [
        (&["status"], &["daemon", "show"]),
        (&["-o", "json", "status"], &["-o", "json", "daemon", "show"]),
        (
            &["--socket", "/s", "-o", "json", "endpoints"],
            &["--socket", "/s", "-o", "json", "endpoint", "list"],
        ),
        (&["-ojson", "sessions"], &["-ojson", "session", "list"]),
        (&["--output=json", "vpc"], &["--output=json", "vpc", "list"]),
        (&["vpc", "-o", "json"], &["vpc", "list", "-o", "json"]),
        (&["cm"], &["cm", "list"]),
        (&["status", "--help"], &["daemon", "show", "--help"]),
        // Already new, or a noun's own help: as given.
        (&["vpc", "list"], &["vpc", "list"]),
        (&["vpc", "--help"], &["vpc", "--help"]),
        (&["vpc", "help"], &["vpc", "help"]),
        (
            &["conntrack", "-L", "-t", "acme"],
            &["conntrack", "-L", "-t", "acme"],
        ),
        // "status" is -o's value here (and refused): not a command.
        (&["-o", "status"], &["-o", "status"]),
        (&["--", "status"], &["--", "status"]),
    ];
    for (args, want) in cases {
        assert_eq!(m(args), want, "{args:?}");
    }
}

fn action(args: &[&str]) -> Action {
    match parse(args) {
        Ok(cli) => cli.command.action(),
        Err(e) => panic!("{args:?}: {e}"),
    }
}

fn refused(args: &[&str]) -> String {
    match parse(args) {
        Ok(cli) => panic!("{args:?} parsed: {:?}", cli.command),
        Err(e) => {
            assert_eq!(e.exit_code(), 2, "{args:?}: {e}");
            e.to_string()
        }
    }
}

fn list(filter: CtFilter) -> Action {
    Action::Call(Request::ConntrackList { filter })
}

#[test]
fn old_and_new_spellings_send_the_same_request() {
    let same = [
        (&["status"][..], &["daemon", "show"][..]),
        (&["endpoints"], &["endpoint", "list"]),
        (&["sessions"], &["session", "list"]),
        (&["vpc"], &["vpc", "list"]),
        (&["cm"], &["cm", "list"]),
        (
            &["endpoint", "del", "acme-d"],
            &["endpoint", "delete", "acme-d"],
        ),
        (&["conntrack", "-L"], &["conntrack", "list"]),
        (&["conntrack", "--list"], &["conntrack", "list"]),
        (&["conntrack", "--dump"], &["conntrack", "list"]),
        (&["conntrack", "-E"], &["conntrack", "watch"]),
        (&["conntrack", "--event"], &["conntrack", "watch"]),
        (&["conntrack", "-D"], &["conntrack", "delete"]),
        (&["conntrack", "--delete"], &["conntrack", "delete"]),
        (
            &["conntrack", "-D", "-t", "globex"],
            &["conntrack", "delete", "--tenant", "globex"],
        ),
        (
            &["conntrack", "-L", "-q", "17"],
            &["conntrack", "list", "--qpn", "17"],
        ),
        // Filters before the verb, as the old flags allowed.
        (
            &["conntrack", "-t", "acme", "-s", "10.0.0.1", "-L"],
            &["conntrack", "list", "--tenant", "acme", "--src", "10.0.0.1"],
        ),
        (
            &["conntrack", "-Lt", "acme"],
            &["conntrack", "list", "--tenant", "acme"],
        ),
        (
            &["conntrack", "-L", "-p", "UD"],
            &["conntrack", "list", "--proto", "ud"],
        ),
        (
            &["conntrack", "list", "--qpn", "0x11"],
            &["conntrack", "list", "--qpn", "17"],
        ),
    ];
    for (old, new) in same {
        assert_eq!(action(old), action(new), "{old:?} vs {new:?}");
    }
}

/// Every masqctl command line of integration/tests, integration/bench,
/// integration/demo and the docs, and the request it has always sent.
#[test]
fn the_repositorys_spellings_parse_to_their_requests() {
    let ct = |tenant: Option<&str>, src: Option<&str>, dst: Option<&str>, proto: Option<&str>| {
        CtFilter {
            tenant: tenant.map(str::to_string),
            src: src.map(str::to_string),
            dst: dst.map(str::to_string),
            proto: proto.map(str::to_string),
            ..Default::default()
        }
    };
    let cases: Vec<(&[&str], Action)> = vec![
        (&["-o", "json", "status"], Action::Call(Request::Status)),
        (
            &["-o", "json", "endpoints"],
            Action::Call(Request::Endpoints),
        ),
        (&["endpoints"], Action::Call(Request::Endpoints)),
        (
            &["-o", "json", "endpoint", "list"],
            Action::Call(Request::Endpoints),
        ),
        (&["-o", "json", "sessions"], Action::Call(Request::Sessions)),
        (&["-o", "json", "vpc"], Action::Call(Request::Vpc)),
        (&["-o", "json", "cm"], Action::Call(Request::Cm)),
        (
            &["-o", "json", "policy", "show"],
            Action::Call(Request::PolicyShow),
        ),
        (
            &["endpoint", "del", "acme-d"],
            Action::Call(Request::EndpointDel {
                name: "acme-d".into(),
                owner: None,
            }),
        ),
        (&["conntrack", "-L"], list(CtFilter::default())),
        (
            &["-o", "json", "conntrack", "-L"],
            list(CtFilter::default()),
        ),
        (
            &["-o", "json", "conntrack", "-L", "-s", "10.0.0.4"],
            list(ct(None, Some("10.0.0.4"), None, None)),
        ),
        (
            &["conntrack", "-L", "-s", "10.0.0.0/24"],
            list(ct(None, Some("10.0.0.0/24"), None, None)),
        ),
        (
            &["conntrack", "-L", "-t", "acme", "-d", "10.0.0.2"],
            list(ct(Some("acme"), None, Some("10.0.0.2"), None)),
        ),
        (
            &["conntrack", "-L", "-p", "ud", "-t", "acme"],
            list(ct(Some("acme"), None, None, Some("ud"))),
        ),
        (
            &["conntrack", "-L", "-p", "ud"],
            list(ct(None, None, None, Some("ud"))),
        ),
        (
            &["-o", "json", "conntrack", "-D", "-t", "globex"],
            Action::Call(Request::ConntrackDelete {
                filter: ct(Some("globex"), None, None, None),
            }),
        ),
        (
            &["-o", "json", "conntrack", "-E", "-t", "acme"],
            Action::Watch(ct(Some("acme"), None, None, None)),
        ),
        (
            &["-o", "json", "conntrack", "-E"],
            Action::Watch(CtFilter::default()),
        ),
    ];
    for (args, want) in cases {
        assert_eq!(action(args), want, "{args:?}");
    }
    // The package test's global options before the command.
    let cli = parse(&["--socket", "/tmp/x/control.sock", "-o", "json", "status"]).expect("parse");
    assert_eq!(cli.socket, PathBuf::from("/tmp/x/control.sock"));
    assert_eq!(cli.output, Format::Json);
    // And after it.
    let cli = parse(&["endpoints", "-o", "json", "--socket", "/s"]).expect("parse");
    assert_eq!(
        (cli.output, cli.socket),
        (Format::Json, PathBuf::from("/s"))
    );
}

#[test]
fn endpoint_add_sends_the_endpoint_as_given() {
    let add = [
        "endpoint",
        "add",
        "acme-d",
        "--tenant",
        "acme",
        "--vni",
        "100",
        "--vip",
        "10.0.0.4",
        "--netns",
        "/run/netns/acme-d",
        "--host-if",
        "ve-acme-d",
        "--bridge",
        "mbr100",
        "--max-connections",
        "2",
        "--max-objects",
        "6",
        "--max-handles",
        "2",
        "--max-rate-mbps",
        "24",
    ];
    let Action::Call(Request::EndpointAdd { endpoint: e }) = action(&add) else {
        panic!("not an endpoint add");
    };
    assert_eq!(
        (e.name.as_str(), e.tenant.as_str(), e.vni, e.vip.to_string()),
        ("acme-d", "acme", 100, "10.0.0.4".to_string())
    );
    assert_eq!(e.netns, PathBuf::from("/run/netns/acme-d"));
    assert_eq!(e.vnic, "eth0");
    assert_eq!(e.host_if.as_deref(), Some("ve-acme-d"));
    assert_eq!(e.bridge.as_deref(), Some("mbr100"));
    assert_eq!(e.max_connections, Some(2));
    assert_eq!(
        e.rdma_limits,
        Some(RdmaLimits {
            handles: Some(2),
            objects: Some(6)
        })
    );
    assert_eq!(e.max_rate_mbps, Some(24));
    // masqd, not the parser, judges a VNI and a vNIC name (exit status 1,
    // "vni: 0 is not a VNI", as the endpoint tests expect).
    let mut zero = add.to_vec();
    zero[6] = "0";
    assert!(parse(&zero).is_ok());
}

#[test]
fn bad_values_fail_with_status_2_naming_the_option() {
    let e = refused(&["conntrack", "-L", "-p", "tcp"]);
    assert!(e.contains("--proto") && e.contains("rc, uc, ud"), "{e}");
    let e = refused(&["conntrack", "list", "--src", "10.0.0.300"]);
    assert!(e.contains("--src"), "{e}");
    let e = refused(&["conntrack", "list", "-d", "10.0.0.0/40"]);
    assert!(e.contains("--dst"), "{e}");
    let e = refused(&["conntrack", "list", "--qpn", "0x1000000"]);
    assert!(e.contains("--qpn") && e.contains("24 bits"), "{e}");
    let e = refused(&["conntrack", "list", "-q", "x"]);
    assert!(e.contains("--qpn"), "{e}");
    let e = refused(&["-o", "xml", "status"]);
    assert!(e.contains("--output") && e.contains("yaml"), "{e}");
    let e = refused(&[
        "endpoint",
        "add",
        "x",
        "--tenant",
        "t",
        "--vni",
        "1",
        "--vip",
        "10.0.0.300",
        "--netns",
        "/n",
    ]);
    assert!(e.contains("--vip"), "{e}");
    // --host-if without --bridge, as the endpoint tests check.
    refused(&[
        "endpoint",
        "add",
        "acme-d",
        "--tenant",
        "acme",
        "--vni",
        "100",
        "--vip",
        "10.0.0.4",
        "--netns",
        "/run/netns/x",
        "--host-if",
        "ve-x",
    ]);
    // A noun without its verb, two verbs, an unknown command.
    let e = refused(&["conntrack"]);
    assert!(e.contains("list") && e.contains("watch"), "{e}");
    refused(&["conntrack", "-t", "acme"]);
    refused(&["conntrack", "-L", "-E"]);
    refused(&["endpoint"]);
    refused(&["policy", "apply"]);
    refused(&["reboot"]);
    refused(&[]);
}

/// The only test that sets the environment, holding ENV throughout.
#[test]
fn the_environment_gives_the_defaults_and_options_win() {
    let env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var(SOCKET_ENV, "/run/other/control.sock");
    std::env::set_var(OUTPUT_ENV, "yaml");
    let from_env = parse_locked(&["status"]).map(|c| (c.socket, c.output));
    let given =
        parse_locked(&["--socket", "/s", "-o", "table", "status"]).map(|c| (c.socket, c.output));
    std::env::set_var(OPERATOR_CERT_ENV, "/etc/masq/operator.pem");
    std::env::set_var(OPERATOR_KEY_ENV, "/etc/masq/operator-key.pem");
    let as_operator = parse_locked(&["policy", "apply", "p.yaml"]).map(|c| c.command.action());
    std::env::remove_var(OPERATOR_CERT_ENV);
    std::env::remove_var(OPERATOR_KEY_ENV);
    std::env::set_var(OUTPUT_ENV, "xml");
    let bad = parse_locked(&["status"]).map(|c| c.output);
    std::env::remove_var(SOCKET_ENV);
    std::env::remove_var(OUTPUT_ENV);
    let defaults = parse_locked(&["status"]).map(|c| (c.socket, c.output));
    drop(env);
    assert_eq!(
        from_env.expect("env"),
        (PathBuf::from("/run/other/control.sock"), Format::Yaml)
    );
    assert_eq!(given.expect("given"), (PathBuf::from("/s"), Format::Table));
    let e = bad.expect_err("xml").to_string();
    assert!(e.contains("--output"), "{e}");
    assert_eq!(
        defaults.expect("defaults"),
        (PathBuf::from(DEFAULT_SOCKET), Format::Table)
    );
    assert_eq!(
        as_operator.expect("as the operator"),
        Action::ApplyAsOperator {
            path: "p.yaml".into(),
            cert: "/etc/masq/operator.pem".into(),
            key: "/etc/masq/operator-key.pem".into(),
        }
    );
}

/// `policy apply` writes as the operator with both its certificate and its
/// key, and through masqd with neither.
#[test]
fn policy_apply_takes_the_operators_certificate_and_key_together() {
    let apply = ["policy", "apply", "p.yaml"];
    let cert = ["--operator-cert", "o.pem"];
    let key = ["--operator-key", "o-key.pem"];
    assert_eq!(
        action(&[&apply[..], &cert, &key].concat()),
        Action::ApplyAsOperator {
            path: "p.yaml".into(),
            cert: "o.pem".into(),
            key: "o-key.pem".into(),
        }
    );
    // masqctl reads the file (or standard input) and sends its text.
    assert_eq!(
        action(&apply),
        Action::SendPolicy {
            path: "p.yaml".into(),
            apply: true
        }
    );
    assert_eq!(
        action(&["policy", "check", "-"]),
        Action::SendPolicy {
            path: "-".into(),
            apply: false
        }
    );
    let e = refused(&[&apply[..], &cert].concat());
    assert!(e.contains("--operator-key"), "{e}");
    let e = refused(&[&apply[..], &key].concat());
    assert!(e.contains("--operator-cert"), "{e}");
}

/// `masqctl --help` lists nouns, each noun's help its verbs; the old
/// spellings are not listed and their help is the new one's.
#[test]
fn the_help_reads_as_one_grammar() {
    let mut cmd = Cli::command();
    cmd.build();
    let help = cmd.render_help().to_string();
    for old in ["status", "endpoints", "sessions"] {
        assert!(
            !help.lines().any(|l| l.trim_start().starts_with(old)),
            "{old} listed:\n{help}"
        );
    }
    for noun in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = noun.get_name();
        if matches!(name, "help" | "completion") {
            continue;
        }
        let verbs: Vec<&str> = noun
            .get_subcommands()
            .map(|v| v.get_name())
            .filter(|v| *v != "help")
            .collect();
        assert!(!verbs.is_empty(), "{name} has no verb");
        for v in noun.get_subcommands().filter(|v| v.get_name() != "help") {
            assert!(
                v.get_subcommands().all(|s| s.get_name() == "help"),
                "masqctl {name} {} goes deeper",
                v.get_name()
            );
        }
    }
    for (old, new) in [
        (&["status", "--help"][..], "masqctl daemon show"),
        (&["endpoints", "--help"], "masqctl endpoint list"),
        (&["sessions", "--help"], "masqctl session list"),
        (&["endpoint", "del", "--help"], "masqctl endpoint delete"),
        (&["vpc", "--help"], "Usage: masqctl vpc [OPTIONS] <COMMAND>"),
        (&["conntrack", "-L", "--help"], "masqctl conntrack {list"),
        (&["conntrack", "--help"], "--tenant"),
    ] {
        let e = parse(old).expect_err("help");
        assert_eq!(e.kind(), ErrorKind::DisplayHelp);
        assert!(e.to_string().contains(new), "{old:?}:\n{e}");
    }
    // The conntrack help shows --tenant and --qpn, not conntrack(8)'s -t, -q.
    let e = parse(&["conntrack", "list", "--help"])
        .expect_err("help")
        .to_string();
    assert!(!e.contains("-t,") && !e.contains("-q,"), "{e}");
    assert!(e.contains("-s, --src") && e.contains("-p, --proto"), "{e}");
}

/// `cluster init-auth` talks to etcd: its hosts are NAME=IP, checked as
/// the command line is read.
#[test]
fn cluster_init_auth_takes_etcd_credentials_and_hosts() {
    let a = match action(&[
        "cluster",
        "init-auth",
        "--etcd",
        "https://10.1.0.1:2379,https://10.1.0.2:2379",
        "--ca",
        "ca.pem",
        "--cert",
        "root.pem",
        "--key",
        "root-key.pem",
        "host1=10.1.0.1",
        "host2=10.1.0.2",
    ]) {
        Action::InitAuth(a) => a,
        other => panic!("{other:?}"),
    };
    assert_eq!(a.etcd, ["https://10.1.0.1:2379", "https://10.1.0.2:2379"]);
    assert_eq!(
        (a.prefix.as_str(), a.operator.as_str()),
        ("/masq", "operator")
    );
    let hosts: Vec<String> = a
        .hosts
        .iter()
        .map(|h| format!("{}={}", h.name, h.ip))
        .collect();
    assert_eq!(hosts, ["host1=10.1.0.1", "host2=10.1.0.2"]);
    // No host; a host without its IP; no --etcd.
    let creds = ["--ca", "c", "--cert", "c", "--key", "k"];
    let etcd = ["cluster", "init-auth", "--etcd", "https://e:2379"];
    let no_host = [&etcd[..], &creds].concat();
    let no_ip = [&no_host[..], &["host1"]].concat();
    let no_etcd = [&["cluster", "init-auth"][..], &creds, &["host1=10.1.0.1"]].concat();
    for bad in [no_host.clone(), no_ip, no_etcd] {
        assert!(parse(&bad).is_err(), "{bad:?}");
    }
    // NetworkPolicy's mirror's user alone (masq-signer adds it so).
    let mirror = [&no_host[..], &["--netpol-mirror", "masq-netpol"]].concat();
    match action(&mirror) {
        Action::InitAuth(a) => {
            assert_eq!(a.netpol_mirror.as_deref(), Some("masq-netpol"));
            assert!(a.hosts.is_empty());
        }
        other => panic!("{other:?}"),
    }
}
