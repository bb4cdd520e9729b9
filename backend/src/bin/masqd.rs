//! masqd: the masq host daemon. Its command line is
//! masq_backend::operator::cli::masqd's.

use clap::Parser;
use masq_backend::config::Config;
use masq_backend::daemon::Daemon;
use masq_backend::operator::cli::masqd::Cli;
use nix::sys::signal::{SigSet, Signal};
use std::path::Path;
use std::process::ExitCode;
use tracing::{error, info};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli);
    let cfg = match Config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            error!("bad configuration: {e}");
            eprintln!("masqd: {e}");
            return ExitCode::from(1);
        }
    };
    let config_dir = cli
        .config
        .parent()
        .map(|p| p.to_path_buf())
        .unwrap_or_default();
    if cli.check {
        return check(&cli.config, &cfg, &config_dir);
    }
    run(cfg, &config_dir)
}

/// Log to stderr at `--log-level`, else `RUST_LOG`, else info.
fn init_logging(cli: &Cli) {
    let filter = cli
        .log_level
        .clone()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info".into());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// `masqd --check`: the files the loaded config names, and the policy,
/// checked without starting.
fn check(path: &Path, cfg: &Config, config_dir: &Path) -> ExitCode {
    // The files the config names besides the policy: the identity and
    // the metrics listener's.
    let identity = cfg.cluster.as_ref().and_then(|c| c.tls.as_ref());
    let files = identity
        .map_or(Ok(()), |f| {
            masq_backend::config::identity::Identity::load(f).map(drop)
        })
        .and_then(|()| masq_backend::http::Access::load(&cfg.metrics).map(drop));
    if let Err(e) = files {
        eprintln!("masqd: {}: {e}", path.display());
        return ExitCode::from(1);
    }
    let checked =
        masq_backend::cluster::source::FileSource::new(cfg, config_dir).and_then(|f| f.check());
    let policy = match checked {
        Ok(p) => p,
        Err(e) => {
            eprintln!("masqd: policy: {e}");
            return ExitCode::from(1);
        }
    };
    println!(
        "{}: ok ({} local endpoints, {} in the VPC map, {policy})",
        path.display(),
        cfg.endpoints.len(),
        cfg.vpc.len()
    );
    ExitCode::SUCCESS
}

/// Start the daemon and serve until SIGTERM or SIGINT; SIGHUP reloads.
fn run(cfg: Config, config_dir: &Path) -> ExitCode {
    // Block the signals we handle before any thread starts, so that only
    // the main thread's sigwait sees them.
    let mut signals = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        signals.add(s);
    }
    if let Err(e) = signals.thread_block() {
        eprintln!("masqd: cannot block signals: {e}");
        return ExitCode::from(1);
    }

    let daemon = match Daemon::start(cfg, config_dir) {
        Ok(d) => d,
        Err(e) => {
            error!("cannot start: {e}");
            eprintln!("masqd: {e}");
            return ExitCode::from(1);
        }
    };
    info!("masqd ready");
    masq_backend::notify::ready(&daemon.status());
    loop {
        match signals.wait() {
            Ok(Signal::SIGHUP) => daemon.reload(),
            Ok(sig) => {
                info!("{sig}: shutting down");
                break;
            }
            Err(e) => {
                error!("sigwait: {e}");
                break;
            }
        }
    }
    masq_backend::notify::stopping();
    daemon.shutdown();
    ExitCode::SUCCESS
}
