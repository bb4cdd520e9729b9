//! masqctl: look at and steer a running masqd through its control socket.
//! The grammar is masq_backend::operator::cli::masqctl's.

use masq_backend::cluster::auth;
use masq_backend::config::identity::Identity;
use masq_backend::config::TlsFiles;
use masq_backend::error::Error;
use masq_backend::operator::cli::generate;
use masq_backend::operator::cli::masqctl::{Action, Cli, Format, InitAuthArgs};
use masq_backend::operator::cli::output;
use masq_backend::operator::control::{self, CtFilter, Request};
use masq_backend::operator::policy_as_operator;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse_args();
    let req = match cli.command.action() {
        Action::Call(req) => req,
        Action::Watch(filter) => return stream_events(&cli.socket, filter, cli.output),
        Action::Completion(shell) => {
            generate::completion(shell, &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        Action::InitAuth(a) => return init_auth(a),
        Action::SendPolicy { path, apply } => {
            match control::read_policy(&path, std::io::stdin().lock()) {
                Ok((file, text)) if apply => Request::PolicyApply { file, text },
                Ok((file, text)) => Request::PolicyCheck { file, text },
                Err(e) => {
                    eprintln!("masqctl: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        Action::ApplyAsOperator { path, cert, key } => {
            return apply_as_operator(&cli.socket, cli.output, path, cert, key)
        }
    };
    let reply = match control::call(&cli.socket, &req) {
        Ok(r) => r,
        Err(e) => return unreachable(&cli.socket, e),
    };
    if let Some(err) = reply.get("error").and_then(|e| e.as_str()) {
        eprintln!("masqctl: masqd: {err}");
        return ExitCode::from(1);
    }
    print_reply(cli.output, &req, &reply)
}

fn print_reply(format: Format, req: &Request, reply: &serde_json::Value) -> ExitCode {
    match output::render(format, req, reply) {
        Ok(text) => print!("{text}"),
        Err(e) => {
            eprintln!("masqctl: cannot print masqd's answer: {e}");
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}

/// `masqctl cluster init-auth`: etcd's users and roles, a line per step.
fn init_auth(a: InitAuthArgs) -> ExitCode {
    let files = TlsFiles {
        ca: a.ca,
        cert: a.cert,
        key: a.key,
    };
    // The fields named as the command's options.
    let identity = match Identity::load(&files) {
        Ok(id) => id,
        Err(e) => {
            let e = e.to_string().replace("cluster.tls.", "--");
            eprintln!("masqctl: {e}");
            return ExitCode::from(2);
        }
    };
    match auth::run(
        &a.etcd,
        &identity,
        &a.prefix,
        &a.operator,
        &a.hosts,
        a.netpol_mirror.as_deref(),
    ) {
        Ok(done) => {
            for line in done {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("masqctl: {e}");
            ExitCode::from(1)
        }
    }
}

/// `masqctl policy apply --operator-cert --operator-key`.
fn apply_as_operator(
    socket: &Path,
    format: Format,
    path: PathBuf,
    cert: PathBuf,
    key: PathBuf,
) -> ExitCode {
    let (file, text) = match control::read_policy(&path, std::io::stdin().lock()) {
        Ok(read) => read,
        Err(e) => {
            eprintln!("masqctl: {e}");
            return ExitCode::from(2);
        }
    };
    let reply = match policy_as_operator::apply(socket, &file, &text, cert, key) {
        Ok(v) => v,
        // Who must act is the exit status: masqd cannot be reached (3), the
        // command line cannot work here (2), masqd or etcd refused (1).
        Err(e @ Error::Os { .. }) => return unreachable(socket, e),
        Err(e @ Error::Invalid(_)) => {
            eprintln!("masqctl: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("masqctl: {e}");
            return ExitCode::from(1);
        }
    };
    // Rendered as an apply of that file; the text is not printed.
    let req = Request::PolicyApply {
        file,
        text: String::new(),
    };
    print_reply(format, &req, &reply)
}

fn unreachable(socket: &Path, e: Error) -> ExitCode {
    eprintln!("masqctl: cannot reach masqd at {}: {e}", socket.display());
    ExitCode::from(3)
}

fn stream_events(socket: &Path, filter: CtFilter, format: Format) -> ExitCode {
    let req = Request::ConntrackEvents { filter };
    let mut failed = None;
    let mut stdout = std::io::stdout();
    let res = control::stream(socket, &req, |v| {
        if let Some(err) = v.get("error").and_then(|e| e.as_str()) {
            failed = Some(err.to_string());
            return;
        }
        let line = v["event"].as_str().unwrap_or_default();
        match output::render_event(format, line, &v["data"]) {
            Ok(text) => {
                // Each event as it comes, also into a pipe; a reader that
                // went (`| head`) ends the stream.
                if let Err(e) = stdout
                    .write_all(text.as_bytes())
                    .and_then(|()| stdout.flush())
                {
                    if e.kind() != std::io::ErrorKind::BrokenPipe {
                        eprintln!("masqctl: stdout: {e}");
                        std::process::exit(1);
                    }
                    std::process::exit(0);
                }
            }
            Err(e) => failed = Some(format!("cannot print an event: {e}")),
        }
    });
    if let Some(err) = failed {
        eprintln!("masqctl: masqd: {err}");
        return ExitCode::from(1);
    }
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => unreachable(socket, e),
    }
}
