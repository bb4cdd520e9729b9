//! masqctl: look at and steer a running masqd through its control socket.

use clap::{Parser, Subcommand, ValueEnum};
use masq_backend::config::EndpointConfig;
use masq_backend::control::{self, CtFilter, Request};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "masqctl",
    version,
    about = "Inspect a running masqd: endpoints, virtual devices and live sessions",
    after_help = "Exit status: 0 success, 1 masqd answered with an error, 2 usage error, \
                  3 masqd could not be reached."
)]
struct Cli {
    /// masqd's control socket.
    #[arg(long, default_value = "/run/masq/control.sock", global = true)]
    socket: PathBuf,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Table, global = true)]
    output: Format,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Table,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Daemon status: device, host, counts.
    Status,
    /// Endpoints served on this host and their virtual devices (GID tables).
    Endpoints,
    /// Add or delete an endpoint while masqd runs, or list them.
    #[command(subcommand)]
    Endpoint(EndpointCmd),
    /// Live sessions (one per opened device context) and their QPs.
    Sessions,
    /// The VPC map: every endpoint of every VPC, its host, and whether it
    /// is local, another host's (cluster) or from the config file.
    Vpc,
    /// RDMA CM ids of librdmacm apps: listeners and connections.
    Cm,
    /// Security groups: check, apply or show the policy.
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// The RConntrack table of admitted RDMA connections, like conntrack(8).
    Conntrack(ConntrackArgs),
}

#[derive(Subcommand)]
enum EndpointCmd {
    /// Serve a new endpoint at once: its socket (at <socketDir>/endpoints/
    /// NAME/masq.sock), backstop chain and tcp/udp rules. Checked as the
    /// config file's endpoints are; a bad one changes nothing. masqd keeps
    /// it across restarts until it is deleted.
    Add(EndpointAddArgs),
    /// Stop serving NAME: its apps' QPs go to ERROR (work requests flush),
    /// their sessions and CM ids close, and its connections are untracked.
    Del { name: String },
    /// The endpoints, where each came from (file or command) and its GIDs.
    List,
}

#[derive(clap::Args)]
struct EndpointAddArgs {
    /// Endpoint name (A-Z, a-z, 0-9, '-', '_', '.'; at most 64).
    name: String,
    #[arg(long)]
    tenant: String,
    /// The tenant's VPC (VXLAN network identifier).
    #[arg(long)]
    vni: u32,
    /// The endpoint's virtual IP in that VPC.
    #[arg(long)]
    vip: std::net::Ipv4Addr,
    /// Its network namespace, e.g. /run/netns/NAME or /proc/PID/ns/net.
    #[arg(long)]
    netns: PathBuf,
    /// The vNIC inside that namespace.
    #[arg(long, default_value = "eth0")]
    vnic: String,
    /// Host side of the vNIC (a bridge port), for the policy's tcp/udp rules.
    #[arg(long, requires = "bridge")]
    host_if: Option<String>,
    /// The bridge host_if is on.
    #[arg(long, requires = "host_if")]
    bridge: Option<String>,
    /// Most connections (QPs in RTR or RTS) it may hold at once; one more
    /// fails with EDQUOT.
    #[arg(long)]
    max_connections: Option<u32>,
    /// Most device contexts its processes may hold open (the kernel's rdma
    /// cgroup limit hca_handle, in its cgroup).
    #[arg(long)]
    max_handles: Option<u32>,
    /// Most verbs objects (PDs, CQs, QPs, MRs...) its processes may hold
    /// (rdma cgroup hca_object); one more fails with EAGAIN.
    #[arg(long)]
    max_objects: Option<u32>,
    /// Software RoCE: shape its RoCE egress to this many Mbit/s.
    #[arg(long)]
    max_rate_mbps: Option<u32>,
}

#[derive(Subcommand)]
enum PolicyCmd {
    /// Validate FILE against this host's VPC map without applying it.
    Check { file: PathBuf },
    /// Validate and apply FILE atomically; an invalid file changes nothing.
    Apply { file: PathBuf },
    /// Print the active policy, its file and version hash.
    Show,
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("action").required(true).args(["list", "event", "delete"])))]
struct ConntrackArgs {
    /// List tracked connections.
    #[arg(short = 'L', long)]
    list: bool,
    /// Stream events (NEW, UPDATE, DESTROY) until interrupted.
    #[arg(short = 'E', long)]
    event: bool,
    /// Reset the matching connections (their QPs go to ERROR).
    #[arg(short = 'D', long)]
    delete: bool,
    /// Only this tenant.
    #[arg(short = 't', long)]
    tenant: Option<String>,
    /// Only this VNI.
    #[arg(long)]
    vni: Option<u32>,
    /// Local vIP or CIDR.
    #[arg(short = 's', long = "src")]
    src: Option<String>,
    /// Remote vIP or CIDR.
    #[arg(short = 'd', long = "dst")]
    dst: Option<String>,
    /// Local or remote QPN.
    #[arg(short = 'q', long)]
    qpn: Option<u32>,
    /// Only this QP type: rc, uc or ud (a UD entry is an address handle).
    #[arg(short = 'p', long = "proto")]
    proto: Option<String>,
}

/// A path masqd can open: it may run with another working directory.
fn absolute(p: PathBuf) -> PathBuf {
    std::fs::canonicalize(&p).unwrap_or(p)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let req = match cli.command {
        Command::Status => Request::Status,
        Command::Endpoints | Command::Endpoint(EndpointCmd::List) => Request::Endpoints,
        Command::Endpoint(EndpointCmd::Add(a)) => Request::EndpointAdd {
            endpoint: EndpointConfig {
                name: a.name,
                tenant: a.tenant,
                vni: a.vni,
                vip: a.vip,
                // Not canonicalized: /proc/PID/ns/net must stay as given.
                netns: std::path::absolute(&a.netns).unwrap_or(a.netns),
                vnic: a.vnic,
                host_if: a.host_if,
                bridge: a.bridge,
                socket: None,
                max_connections: a.max_connections,
                rdma_limits: (a.max_handles.is_some() || a.max_objects.is_some()).then_some(
                    masq_backend::config::RdmaLimits {
                        handles: a.max_handles,
                        objects: a.max_objects,
                    },
                ),
                max_rate_mbps: a.max_rate_mbps,
                cni: None,
            },
        },
        Command::Endpoint(EndpointCmd::Del { name }) => Request::EndpointDel { name, owner: None },
        Command::Sessions => Request::Sessions,
        Command::Vpc => Request::Vpc,
        Command::Cm => Request::Cm,
        Command::Policy(PolicyCmd::Check { file }) => Request::PolicyCheck {
            path: absolute(file),
        },
        Command::Policy(PolicyCmd::Apply { file }) => Request::PolicyApply {
            path: absolute(file),
        },
        Command::Policy(PolicyCmd::Show) => Request::PolicyShow,
        Command::Conntrack(a) => {
            let filter = CtFilter {
                tenant: a.tenant,
                vni: a.vni,
                src: a.src,
                dst: a.dst,
                qpn: a.qpn,
                proto: a.proto,
            };
            if a.event {
                return stream_events(&cli.socket, filter, cli.output);
            } else if a.delete {
                Request::ConntrackDelete { filter }
            } else {
                Request::ConntrackList { filter }
            }
        }
    };
    let reply = match control::call(&cli.socket, &req) {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "masqctl: cannot reach masqd at {}: {e}",
                cli.socket.display()
            );
            return ExitCode::from(3);
        }
    };
    if let Some(err) = reply.get("error").and_then(|e| e.as_str()) {
        eprintln!("masqctl: masqd: {err}");
        return ExitCode::from(1);
    }
    match cli.output {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&reply).unwrap_or_else(|_| reply.to_string())
        ),
        Format::Table => print!("{}", control::render_table(&req, &reply)),
    }
    ExitCode::SUCCESS
}

fn stream_events(socket: &std::path::Path, filter: CtFilter, output: Format) -> ExitCode {
    let req = Request::ConntrackEvents { filter };
    let mut failed = None;
    let res = control::stream(socket, &req, |v| {
        if let Some(err) = v.get("error").and_then(|e| e.as_str()) {
            failed = Some(err.to_string());
            return;
        }
        match output {
            Format::Json => println!("{}", v["data"]),
            Format::Table => println!("{}", v["event"].as_str().unwrap_or_default()),
        }
    });
    if let Some(err) = failed {
        eprintln!("masqctl: masqd: {err}");
        return ExitCode::from(1);
    }
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("masqctl: cannot reach masqd at {}: {e}", socket.display());
            ExitCode::from(3)
        }
    }
}
