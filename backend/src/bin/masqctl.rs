//! masqctl: look at and steer a running masqd through its control socket.

use clap::{Parser, Subcommand, ValueEnum};
use masq_backend::control::{self, Request};
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
    /// Live sessions (one per opened device context) and their QPs.
    Sessions,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let req = match cli.command {
        Command::Status => Request::Status,
        Command::Endpoints => Request::Endpoints,
        Command::Sessions => Request::Sessions,
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
