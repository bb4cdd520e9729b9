//! masqd's command line.

use clap::Parser;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "masqd",
    version,
    about = "The masq host daemon: virtual RDMA devices for tenant endpoints",
    long_about = "masqd serves the endpoints of one RDMA host. Apps in an endpoint, \
                  preloaded with libmasq.so, reach it on the endpoint's socket; masqd \
                  shows them a virtual device built from their vNIC and executes their \
                  QP state changes after translating virtual addresses to physical ones. \
                  masqctl(1) inspects and steers it through its control socket.",
    after_help = "Exit status: 0 after SIGTERM/SIGINT, 1 on a bad config or a failed start, \
                  2 on a usage error. Signals: SIGHUP re-reads the policy file and, in cluster mode, this host's \
                  certificate (cluster.tls). \
                  Log level: --log-level or RUST_LOG (error, warn, info, debug, trace)."
)]
pub struct Cli {
    /// Configuration file (YAML); see examples/host1.yaml.
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// Validate the configuration and exit.
    #[arg(long)]
    pub check: bool,
    /// Log level (error, warn, info, debug, trace) or a filter; overrides RUST_LOG.
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
}
