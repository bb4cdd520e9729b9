//! masqctl's grammar: `masqctl [OPTIONS] NOUN VERB [ARGS]`, as kubectl and
//! etcdctl have it, and what each command asks masqd (`Cli::action`).
//!
//! The spellings of before this grammar still parse, to the same request,
//! and their help is the new spelling's: `status`, `endpoints`,
//! `sessions` and bare `vpc` and `cm` are rewritten before parsing
//! (`modernize`, so that neither the help nor the completions offer them);
//! `endpoint del` and the filters `-t` (tenant) and `-q` (QPN), which in
//! conntrack(8) mean a timeout and a reply destination, are hidden
//! aliases of `endpoint delete`, `--tenant` and `--qpn`. conntrack(8)'s
//! `-L/-E/-D` (and `--list/--event/--delete`) are visible aliases of
//! `conntrack list/watch/delete`, before or after the filters.

use crate::config::{EndpointConfig, RdmaLimits};
use crate::operator::control::{CtFilter, Request};
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// The environment variable for `--socket`. Not `MASQ_SOCKET`: that one is
/// libmasq's, the endpoint's socket in a tenant's environment.
pub const SOCKET_ENV: &str = "MASQCTL_SOCKET";
/// The environment variable for `-o/--output`.
pub const OUTPUT_ENV: &str = "MASQCTL_OUTPUT";
pub const DEFAULT_SOCKET: &str = "/run/masq/control.sock";
/// The environment variables for `policy apply --operator-cert/-key`.
pub const OPERATOR_CERT_ENV: &str = "MASQCTL_OPERATOR_CERT";
pub const OPERATOR_KEY_ENV: &str = "MASQCTL_OPERATOR_KEY";

pub const AFTER_HELP: &str = "Environment: MASQCTL_SOCKET for --socket, MASQCTL_OUTPUT for -o, \
                              MASQCTL_OPERATOR_CERT and MASQCTL_OPERATOR_KEY for policy apply's \
                              --operator-cert and --operator-key.\n\n\
                              Exit status: 0 success, 1 masqd (or etcd, for cluster init-auth \
                              and policy apply as the operator) answered with an error, 2 usage error, 3 masqd could not be \
                              reached.";

#[derive(Parser, Debug)]
#[command(
    name = "masqctl",
    version,
    about = "Inspect and steer a running masqd: endpoints, sessions, the VPC map, \
             RDMA CM ids, security groups and tracked connections",
    long_about = "Inspect and steer a running masqd over its control socket. \
                  Every command is a noun then a verb (masqctl endpoint list, \
                  masqctl conntrack delete --tenant acme); -o json and -o yaml \
                  print masqd's answer with apiVersion masqctl/v1 and its kind.",
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// masqd's control socket.
    #[arg(long, env = SOCKET_ENV, default_value = DEFAULT_SOCKET, global = true,
          value_name = "PATH", help_heading = "Global options")]
    pub socket: PathBuf,
    /// Output format: a table, a wide table (more columns), or masqd's
    /// answer as JSON or YAML, with apiVersion (masqctl/v1) and kind.
    #[arg(short = 'o', long, value_enum, env = OUTPUT_ENV, default_value_t = Format::Table,
          global = true, value_name = "FORMAT", help_heading = "Global options")]
    pub output: Format,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Wide,
    Json,
    Yaml,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// masqd itself: device, host, counts, backstop drops, cluster state.
    #[command(subcommand)]
    Daemon(DaemonCmd),
    /// Endpoints served on this host: list, add or delete them.
    #[command(subcommand)]
    Endpoint(EndpointCmd),
    /// Live sessions (one per opened device context) and their QPs.
    #[command(subcommand)]
    Session(SessionCmd),
    /// The VPC map: every endpoint of every VPC and its host.
    ///
    /// Each entry says whether it is local, another host's (cluster) or
    /// from the config file.
    #[command(subcommand)]
    Vpc(VpcCmd),
    /// RDMA CM ids of librdmacm apps: listeners and connections.
    #[command(subcommand)]
    Cm(CmCmd),
    /// Security groups: check, apply or show the policy.
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// The RConntrack table of admitted RDMA connections.
    ///
    /// List, watch or delete them; conntrack(8)'s -L, -E and -D work too.
    Conntrack(ConntrackArgs),
    /// Cluster mode: etcd's users and roles for masq (talks to etcd, not
    /// to masqd).
    #[command(subcommand)]
    Cluster(ClusterCmd),
    /// A shell completion script for masqctl, on stdout.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// The commands of before the noun-verb grammar, and the new spellings
/// `modernize` puts in their place.
pub const OLD_COMMANDS: [(&str, &[&str]); 5] = [
    ("status", &["daemon", "show"]),
    ("endpoints", &["endpoint", "list"]),
    ("sessions", &["session", "list"]),
    ("vpc", &["vpc", "list"]),
    ("cm", &["cm", "list"]),
];

/// The command line with an old command (`OLD_COMMANDS`) spelled anew:
/// the first word that is neither an option nor a global option's value,
/// if it is an old command. `vpc` and `cm`, which are nouns now, gain
/// their verb only when no word follows and no --help (`masqctl vpc
/// --help` is the noun's help).
pub fn modernize<I, T>(args: I) -> Vec<OsString>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let root = Cli::command();
    let valued: Vec<String> = root
        .get_arguments()
        .filter(|g| g.get_action().takes_values())
        .flat_map(|g| {
            let long = g.get_long().map(|l| format!("--{l}"));
            let short = g.get_short().map(|c| format!("-{c}"));
            long.into_iter().chain(short)
        })
        .collect();
    // The words of args[from..]: their indices, skipping options and the
    // global options' values; and whether --help or -h is among them.
    let words = |args: &[OsString], from: usize| -> (Vec<usize>, bool) {
        let (mut out, mut help, mut i) = (Vec::new(), false, from);
        while i < args.len() {
            match args[i].to_str() {
                Some("--") => break,
                Some("-h" | "--help") => help = true,
                Some(o) if o.starts_with('-') && valued.iter().any(|v| v == o) => i += 1,
                Some(o) if o.starts_with('-') => {}
                _ => out.push(i),
            }
            i += 1;
        }
        (out, help)
    };
    let Some(&at) = words(&args, 1).0.first() else {
        return args;
    };
    let Some((old, new)) = OLD_COMMANDS.iter().find(|(old, _)| args[at] == **old) else {
        return args;
    };
    if *old == new[0] {
        let (after, help) = words(&args, at + 1);
        if !after.is_empty() || help {
            return args;
        }
    }
    args.splice(at..=at, new.iter().map(OsString::from));
    args
}

impl Cli {
    /// The command line of this process, old spellings spelled anew.
    pub fn parse_args() -> Cli {
        Cli::parse_from(modernize(std::env::args_os()))
    }
}

#[derive(Subcommand, Debug)]
pub enum DaemonCmd {
    /// Device, host, counts; backstop drop counters; cluster state.
    Show,
}

#[derive(Subcommand, Debug, Clone, Copy)]
pub enum VpcCmd {
    /// Every entry: VNI, vIP, endpoint, host, and where it came from.
    List,
}

#[derive(Subcommand, Debug, Clone, Copy)]
pub enum CmCmd {
    /// Every id: endpoint, port space, state, side, addresses, QPN.
    List,
}

#[derive(Subcommand, Debug)]
pub enum SessionCmd {
    /// Every live session, its app and its QPs.
    List,
}

#[derive(Subcommand, Debug)]
pub enum EndpointCmd {
    /// The endpoints and their virtual devices (GID tables).
    ///
    /// Where each came from (file or command); with -o wide or -o json
    /// also its netns, limits and counters.
    List,
    /// Serve a new endpoint at once.
    ///
    /// masqd makes its socket (socketDir/endpoints/NAME/masq.sock),
    /// backstop chain and tcp/udp rules. It is checked as the config file's
    /// endpoints are; a bad one changes nothing. masqd keeps it across
    /// restarts until it is deleted.
    Add(Box<EndpointAddArgs>),
    /// Stop serving an endpoint.
    ///
    /// Its apps' QPs go to ERROR (work requests flush), their sessions and
    /// CM ids close, and its connections are untracked.
    #[command(alias = "del")]
    Delete {
        /// The endpoint's name.
        name: String,
    },
}

#[derive(Args, Debug)]
pub struct EndpointAddArgs {
    /// Endpoint name (A-Z, a-z, 0-9, '-', '_', '.'; at most 64).
    pub name: String,
    /// The tenant it belongs to.
    #[arg(long)]
    pub tenant: String,
    /// The tenant's VPC (VXLAN network identifier).
    #[arg(long)]
    pub vni: u32,
    /// The endpoint's virtual IP in that VPC.
    #[arg(long)]
    pub vip: Ipv4Addr,
    /// Its network namespace, e.g. /run/netns/NAME or /proc/PID/ns/net.
    #[arg(long, value_name = "PATH")]
    pub netns: PathBuf,
    /// The vNIC inside that namespace.
    #[arg(long, default_value = "eth0", value_name = "IFNAME")]
    pub vnic: String,
    /// The rail (masqd.yaml's rails[].name) its virtual device is on;
    /// default the first.
    #[arg(long, value_name = "RAIL")]
    pub rail: Option<String>,
    /// Make it a further virtual device of endpoint NAME on this host
    /// (its apps' vrdma1, say, on another rail): served on NAME's socket.
    #[arg(long, value_name = "NAME")]
    pub device_of: Option<String>,
    /// Host side of the vNIC (a bridge port), for the policy's tcp/udp rules.
    #[arg(long, requires = "bridge", value_name = "IFNAME")]
    pub host_if: Option<String>,
    /// The bridge --host-if is on.
    #[arg(long, requires = "host_if", value_name = "BRIDGE")]
    pub bridge: Option<String>,
    /// Most connections (QPs in RTR or RTS) it may hold at once; one more
    /// fails with EDQUOT.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<u32>,
    /// Most device contexts its processes may hold open (the kernel's rdma
    /// cgroup limit hca_handle, in its cgroup).
    #[arg(long, value_name = "N")]
    pub max_handles: Option<u32>,
    /// Most verbs objects (PDs, CQs, QPs, MRs...) its processes may hold
    /// (rdma cgroup hca_object); one more fails with EAGAIN.
    #[arg(long, value_name = "N")]
    pub max_objects: Option<u32>,
    /// Software RoCE: shape its RoCE egress to this many Mbit/s.
    #[arg(long, value_name = "MBPS")]
    pub max_rate_mbps: Option<u32>,
}

#[derive(Subcommand, Debug)]
pub enum PolicyCmd {
    /// Validate FILE (- for standard input) against this host's VPC map without applying it.
    ///
    /// masqctl reads FILE and sends its text, at most 4 MiB, to masqd.
    Check { file: PathBuf },
    /// Validate and apply FILE (- for standard input) atomically.
    ///
    /// masqctl reads FILE and sends its text, at most 4 MiB, to masqd:
    /// masqd need not see the file, e.g.
    /// `kubectl exec -i ... -- masqctl policy apply - < policy.yaml`.
    /// In cluster mode, on every host. An invalid file changes nothing.
    /// With etcd's roles on (cluster init-auth), only the operator may
    /// write the cluster's policy: give the operator's certificate and key,
    /// and masqctl writes the file masqd checked, then waits until masqd
    /// runs it.
    Apply {
        file: PathBuf,
        #[command(flatten)]
        operator: OperatorArgs,
    },
    /// The active policy, its file and version hash.
    ///
    /// In cluster mode, the version each host runs.
    Show,
}

#[derive(Args, Debug, PartialEq, Eq)]
pub struct OperatorArgs {
    /// The operator's certificate (its CN is etcd's operator user): write
    /// the cluster's policy with it instead of masqd's host identity.
    #[arg(long, env = OPERATOR_CERT_ENV, requires = "operator_key", value_name = "FILE")]
    pub operator_cert: Option<PathBuf>,
    /// The operator's key.
    #[arg(long, env = OPERATOR_KEY_ENV, requires = "operator_cert", value_name = "FILE")]
    pub operator_key: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCmd {
    /// Set up etcd's authentication for masq's keys.
    ///
    /// Each host's certificate (its CN is its etcd user) may then write
    /// only its own keys under the prefix, the operator's may write the
    /// policy and anything else there, and all of them read the prefix.
    /// Run it with the certificate of etcd's root user (CN=root), which it
    /// makes; run it again, as root, to add hosts. With --netpol-mirror,
    /// Kubernetes NetworkPolicy's mirror may write the prefix's k8s/ keys
    /// and nothing else (no host may write them). Idempotent.
    InitAuth(InitAuthArgs),
}

#[derive(Args, Debug, PartialEq, Eq)]
pub struct InitAuthArgs {
    /// etcd's client URLs (https://), comma-separated or repeated.
    #[arg(long, required = true, value_delimiter = ',', value_name = "URL")]
    pub etcd: Vec<String>,
    /// The cluster's CA certificate (PEM).
    #[arg(long, value_name = "FILE")]
    pub ca: PathBuf,
    /// The certificate of etcd's root user (subject CN=root).
    #[arg(long, value_name = "FILE")]
    pub cert: PathBuf,
    /// Its key.
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
    /// The prefix of masq's keys (cluster.prefix in masqd.yaml).
    #[arg(long, default_value = "/masq", value_name = "PREFIX")]
    pub prefix: String,
    /// The operator's etcd user: the CN of the certificate that writes the
    /// policy.
    #[arg(long, default_value = "operator", value_name = "NAME")]
    pub operator: String,
    /// NetworkPolicy's mirror's etcd user (the CN of masq-netpol's
    /// certificate, masq-netpol in Kubernetes): role masq-netpol, which
    /// writes the prefix's k8s/ keys only.
    #[arg(long, value_name = "NAME")]
    pub netpol_mirror: Option<String>,
    /// Each host: its certificate's CN and its underlay IP.
    #[arg(
        required_unless_present = "netpol_mirror",
        value_name = "NAME=IP",
        value_parser = crate::cluster::auth::parse_host
    )]
    pub hosts: Vec<crate::cluster::auth::Host>,
}

#[derive(Args, Debug)]
#[command(
    subcommand_required = true,
    after_help = "conntrack(8)'s spellings work too: -L, -E, -D (or --list, --event, \
                  --delete) for the verbs, before or after the filters. masqctl's old \
                  -t and -q, which conntrack(8) has for a timeout and a reply \
                  destination, still mean --tenant and --qpn."
)]
pub struct ConntrackArgs {
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(subcommand)]
    pub verb: ConntrackCmd,
}

#[derive(Subcommand, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConntrackCmd {
    /// List the tracked connections (conntrack -L).
    #[command(short_flag = 'L', long_flag = "list", long_flag_alias = "dump")]
    List,
    /// Stream events (NEW, UPDATE, DESTROY) until interrupted (conntrack -E).
    #[command(short_flag = 'E', long_flag = "event")]
    Watch,
    /// Reset the matching connections: their QPs go to ERROR (conntrack -D).
    #[command(short_flag = 'D', long_flag = "delete")]
    Delete,
}

/// Which tracked connections: all of them unless narrowed. -t and -q
/// still work for --tenant and --qpn, but are not shown: conntrack(8) has
/// them for a timeout and a reply destination.
#[derive(Args, Debug, Default, Clone, PartialEq, Eq)]
pub struct FilterArgs {
    /// Only this tenant's.
    #[arg(long, short_alias = 't', global = true, help_heading = "Filters")]
    pub tenant: Option<String>,
    /// Only this VPC's.
    #[arg(long, global = true, help_heading = "Filters")]
    pub vni: Option<u32>,
    /// Local vIP or CIDR.
    #[arg(short = 's', long = "src", global = true, value_name = "CIDR",
          value_parser = cidr("--src"), help_heading = "Filters")]
    pub src: Option<String>,
    /// Remote vIP or CIDR.
    #[arg(short = 'd', long = "dst", global = true, value_name = "CIDR",
          value_parser = cidr("--dst"), help_heading = "Filters")]
    pub dst: Option<String>,
    /// Local or remote QPN (decimal, or hex with 0x).
    #[arg(long, short_alias = 'q', global = true, value_parser = qpn, help_heading = "Filters")]
    pub qpn: Option<u32>,
    /// Only this QP type: reliable or unreliable connected, or unreliable
    /// datagram (a UD entry is an address handle).
    #[arg(
        short = 'p',
        long = "proto",
        global = true,
        value_enum,
        ignore_case = true,
        help_heading = "Filters"
    )]
    pub proto: Option<Proto>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Proto {
    Rc,
    Uc,
    Ud,
}

impl Proto {
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Rc => "rc",
            Proto::Uc => "uc",
            Proto::Ud => "ud",
        }
    }
}

/// A vIP or CIDR, checked as masqd will read it; kept as given.
fn cidr(flag: &'static str) -> impl Fn(&str) -> Result<String, String> + Clone {
    move |s: &str| {
        s.parse::<rconntrack::Cidr>()
            .map(|_| s.to_string())
            .map_err(|e| format!("{flag} wants an IPv4 address or CIDR such as 10.0.0.0/24: {e}"))
    }
}

/// A QPN: 24 bits, decimal or 0x-hex (as conntrack lines print them).
fn qpn(s: &str) -> Result<u32, String> {
    let n = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("--qpn wants a QP number, decimal or 0x-hex: {e}"))?;
    if n > 0x00ff_ffff {
        return Err(format!("--qpn {s}: a QPN has 24 bits (at most 0xffffff)"));
    }
    Ok(n)
}

/// What a command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// One request, one reply.
    Call(Request),
    /// A stream of conntrack events until interrupted.
    Watch(CtFilter),
    /// Print a completion script.
    Completion(clap_complete::Shell),
    /// Set up etcd's users and roles (not a request to masqd).
    InitAuth(InitAuthArgs),
    /// Read a policy file (`-`: standard input) and send its text to masqd
    /// to check (`apply` false) or to apply.
    SendPolicy { path: PathBuf, apply: bool },
    /// Check a policy file with masqd, then write it to etcd as the
    /// operator (cert, key).
    ApplyAsOperator {
        path: PathBuf,
        cert: PathBuf,
        key: PathBuf,
    },
}

impl FilterArgs {
    pub fn to_filter(&self) -> CtFilter {
        CtFilter {
            tenant: self.tenant.clone(),
            vni: self.vni,
            src: self.src.clone(),
            dst: self.dst.clone(),
            qpn: self.qpn,
            proto: self.proto.map(|p| p.as_str().to_string()),
        }
    }
}

impl EndpointAddArgs {
    pub fn to_config(self) -> EndpointConfig {
        let a = self;
        EndpointConfig {
            name: a.name,
            tenant: a.tenant,
            vni: a.vni,
            vip: a.vip,
            // Not canonicalized: /proc/PID/ns/net must stay as given.
            netns: std::path::absolute(&a.netns).unwrap_or(a.netns),
            vnic: a.vnic,
            rail: a.rail,
            device_of: a.device_of,
            host_if: a.host_if,
            bridge: a.bridge,
            socket: None,
            max_connections: a.max_connections,
            rdma_limits: (a.max_handles.is_some() || a.max_objects.is_some()).then_some(
                RdmaLimits {
                    handles: a.max_handles,
                    objects: a.max_objects,
                },
            ),
            max_rate_mbps: a.max_rate_mbps,
            cni: None,
        }
    }
}

impl Command {
    pub fn action(self) -> Action {
        let call = Action::Call;
        match self {
            Command::Daemon(DaemonCmd::Show) => call(Request::Status),
            Command::Endpoint(EndpointCmd::List) => call(Request::Endpoints),
            Command::Endpoint(EndpointCmd::Add(a)) => call(Request::EndpointAdd {
                endpoint: a.to_config(),
            }),
            Command::Endpoint(EndpointCmd::Delete { name }) => {
                call(Request::EndpointDel { name, owner: None })
            }
            Command::Session(SessionCmd::List) => call(Request::Sessions),
            Command::Vpc(VpcCmd::List) => call(Request::Vpc),
            Command::Cm(CmCmd::List) => call(Request::Cm),
            Command::Policy(PolicyCmd::Check { file }) => Action::SendPolicy {
                path: file,
                apply: false,
            },
            Command::Policy(PolicyCmd::Apply {
                file,
                operator:
                    OperatorArgs {
                        operator_cert: Some(cert),
                        operator_key: Some(key),
                    },
            }) => Action::ApplyAsOperator {
                path: file,
                cert,
                key,
            },
            Command::Policy(PolicyCmd::Apply { file, .. }) => Action::SendPolicy {
                path: file,
                apply: true,
            },
            Command::Policy(PolicyCmd::Show) => call(Request::PolicyShow),
            Command::Conntrack(a) => {
                let filter = a.filter.to_filter();
                match a.verb {
                    ConntrackCmd::List => call(Request::ConntrackList { filter }),
                    ConntrackCmd::Watch => Action::Watch(filter),
                    ConntrackCmd::Delete => call(Request::ConntrackDelete { filter }),
                }
            }
            Command::Completion { shell } => Action::Completion(shell),
            Command::Cluster(ClusterCmd::InitAuth(a)) => Action::InitAuth(a),
        }
    }
}

#[cfg(test)]
#[path = "masqctl_tests.rs"]
mod tests;
