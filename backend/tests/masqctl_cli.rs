//! The masqctl binary against a fake masqd on a control socket: the old
//! spellings send the same requests and print the same output as the new
//! ones; -o json carries apiVersion; the exit statuses; MASQCTL_SOCKET.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

/// A fake masqd: answers each request by its "cmd" and keeps the requests.
struct FakeMasqd {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    seen: Arc<Mutex<Vec<Value>>>,
}

fn answer(req: &Value) -> Vec<Value> {
    match req["cmd"].as_str().unwrap_or_default() {
        "status" => vec![json!({"host": "198.18.0.1", "device": "rxe0", "port": 1,
            "endpoints": 1, "sessions": 0, "qps": 0, "uptime_s": 5, "backstop": null,
            "cluster": null})],
        "endpoints" => vec![json!({"endpoints": [{"name": "acme-a", "tenant": "acme",
            "vni": 100, "vip": "10.0.0.1", "vdev": "vrdma0", "sessions": 0, "origin": "file",
            "socket": "/run/masq/endpoints/acme-a/masq.sock", "netns": "/run/netns/acme-a",
            "gids": [{"index": 1, "gid": "::ffff:10.0.0.1", "type": "RoCE v2"}]}]})],
        "sessions" => vec![json!({"sessions": []})],
        "vpc" => vec![
            json!({"vpc": [{"vni": 100, "vip": "10.0.0.1", "name": "acme-a",
            "host": "198.18.0.1", "tenant": "acme", "source": "local"}]}),
        ],
        "cm" => vec![json!({"ids": []})],
        "endpoint_del" if req["name"] == "no-such" => {
            vec![json!({"error": "no endpoint \"no-such\""})]
        }
        "endpoint_del" => vec![json!({"name": req["name"], "sessions": 1, "qps_reset": 2})],
        "conntrack_list" => vec![json!({"lines": ["rdma rc tenant=acme vni=100"],
            "entries": [{"tenant": "acme", "local_qpn": 17}]})],
        "conntrack_delete" => vec![json!({"reset": 1})],
        "conntrack_events" => vec![
            json!({"event": "    [NEW] rdma rc tenant=acme",
                   "data": {"event": "NEW", "tenant": "acme", "local_qpn": 17}}),
            json!({"event": "[DESTROY] rdma rc tenant=acme",
                   "data": {"event": "DESTROY", "tenant": "acme", "local_qpn": 17}}),
        ],
        _ => vec![json!({"error": "unexpected request"})],
    }
}

impl FakeMasqd {
    fn start() -> FakeMasqd {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("control.sock");
        let listener = UnixListener::bind(&socket).expect("bind");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut line = String::new();
                if BufReader::new(&stream).read_line(&mut line).is_err() {
                    continue;
                }
                let req: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                for reply in answer(&req) {
                    let _ = writeln!(stream, "{reply}");
                }
                log.lock().expect("log").push(req);
            }
        });
        FakeMasqd {
            _dir: dir,
            socket,
            seen,
        }
    }

    fn run(&self, args: &[&str]) -> (Output, Option<Value>) {
        self.run_with(args, |c| {
            c.arg("--socket").arg(&self.socket);
        })
    }

    fn run_with(&self, args: &[&str], setup: impl FnOnce(&mut Command)) -> (Output, Option<Value>) {
        let before = self.seen.lock().expect("log").len();
        let mut cmd = masqctl();
        setup(&mut cmd);
        let out = cmd.args(args).output().expect("run masqctl");
        // The fake logs a request after answering it: wait a little.
        let mut req = None;
        for _ in 0..100 {
            req = self.seen.lock().expect("log").get(before).cloned();
            if req.is_some() || !out.status.success() && out.status.code() != Some(1) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        (out, req)
    }
}

fn masqctl() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_masqctl"));
    c.env_remove("MASQCTL_SOCKET").env_remove("MASQCTL_OUTPUT");
    c
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn old_spellings_send_and_print_what_the_new_ones_do() {
    let masqd = FakeMasqd::start();
    let pairs: [(&[&str], &[&str]); 9] = [
        (&["status"], &["daemon", "show"]),
        (&["endpoints"], &["endpoint", "list"]),
        (
            &["-o", "json", "endpoints"],
            &["endpoint", "list", "-o", "json"],
        ),
        (&["sessions"], &["session", "list"]),
        (&["vpc"], &["vpc", "list"]),
        (&["-o", "json", "cm"], &["cm", "list", "-o", "json"]),
        (
            &["endpoint", "del", "acme-d"],
            &["endpoint", "delete", "acme-d"],
        ),
        (
            &["conntrack", "-L", "-t", "acme", "-d", "10.0.0.2"],
            &["conntrack", "list", "--tenant", "acme", "--dst", "10.0.0.2"],
        ),
        (
            &["-o", "json", "conntrack", "-D", "-t", "globex"],
            &["conntrack", "delete", "--tenant", "globex", "-o", "json"],
        ),
    ];
    for (old, new) in pairs {
        let (o, oreq) = masqd.run(old);
        let (n, nreq) = masqd.run(new);
        assert!(o.status.success(), "{old:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), stdout(&n), "{old:?} vs {new:?}");
        assert_eq!(oreq, nreq, "{old:?} vs {new:?}");
        assert!(oreq.is_some(), "{old:?} sent nothing");
    }
}

#[test]
fn the_tables_are_masqctls_as_before() {
    let masqd = FakeMasqd::start();
    let (o, _) = masqd.run(&["endpoints"]);
    let table = stdout(&o);
    assert!(table.starts_with("ENDPOINT     TENANT"), "{table}");
    assert!(table.contains("acme-a") && table.contains("GID[  1] ::ffff:10.0.0.1"));
    let (o, _) = masqd.run(&["conntrack", "-L"]);
    assert_eq!(
        stdout(&o),
        "rdma rc tenant=acme vni=100\nmasqctl: 1 RDMA connection(s) shown.\n"
    );
    let (o, _) = masqd.run(&["-o", "wide", "endpoint", "list"]);
    assert!(stdout(&o).contains("/run/netns/acme-a"), "{}", stdout(&o));
}

#[test]
fn json_and_yaml_carry_the_api_version_and_every_key() {
    let masqd = FakeMasqd::start();
    let (o, _) = masqd.run(&["-o", "json", "status"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["apiVersion"], "masqctl/v1");
    assert_eq!(v["kind"], "DaemonStatus");
    assert_eq!(v["device"], "rxe0");
    assert_eq!(v["uptime_s"], 5);
    let (o, _) = masqd.run(&["-o", "yaml", "vpc", "list"]);
    let y: Value = serde_yaml_ng::from_slice(&o.stdout).expect("yaml");
    assert_eq!(y["kind"], "VpcMap");
    assert_eq!(y["vpc"][0]["name"], "acme-a");
    let (o, _) = masqd.run(&["-o", "json", "endpoint", "del", "acme-d"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(
        (v["sessions"].clone(), v["qps_reset"].clone()),
        (json!(1), json!(2))
    );
}

#[test]
fn events_stream_one_json_object_a_line() {
    let masqd = FakeMasqd::start();
    let (o, req) = masqd.run(&["-o", "json", "conntrack", "-E", "-t", "acme"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(req.expect("request")["filter"]["tenant"], "acme");
    let events: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["event"], "NEW");
    assert_eq!(events[0]["local_qpn"], 17);
    assert_eq!(events[1]["apiVersion"], "masqctl/v1");
    let (o, _) = masqd.run(&["conntrack", "watch"]);
    assert_eq!(
        stdout(&o),
        "    [NEW] rdma rc tenant=acme\n[DESTROY] rdma rc tenant=acme\n"
    );
}

#[test]
fn exit_statuses_are_as_documented() {
    let masqd = FakeMasqd::start();
    let (o, _) = masqd.run(&["endpoint", "del", "no-such"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "masqctl: masqd: no endpoint \"no-such\"\n");
    // Usage errors never reach masqd.
    let before = masqd.seen.lock().expect("log").len();
    for bad in [
        &["conntrack", "-L", "-p", "tcp"][..],
        &["conntrack"],
        &["-o", "xml", "status"],
        &[
            "endpoint",
            "add",
            "x",
            "--tenant",
            "t",
            "--vni",
            "1",
            "--vip",
            "10.0.0.1",
            "--netns",
            "/n",
            "--host-if",
            "ve-x",
        ],
    ] {
        let (o, _) = masqd.run(bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
    }
    assert_eq!(masqd.seen.lock().expect("log").len(), before);
    let gone = Path::new("/nonexistent/masq/control.sock");
    let o = masqctl()
        .arg("--socket")
        .arg(gone)
        .arg("status")
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("cannot reach masqd at /nonexistent/masq/control.sock"));
    let o = masqctl().arg("--help").output().expect("run");
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn the_environment_names_the_socket_and_the_format() {
    let masqd = FakeMasqd::start();
    let (o, req) = masqd.run_with(&["status"], |c| {
        c.env("MASQCTL_SOCKET", &masqd.socket)
            .env("MASQCTL_OUTPUT", "json");
    });
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(req.expect("request")["cmd"], "status");
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["kind"], "DaemonStatus");
    // The options win over the environment.
    let (o, _) = masqd.run_with(&["status", "-o", "table"], |c| {
        c.env("MASQCTL_SOCKET", "/nonexistent")
            .env("MASQCTL_OUTPUT", "json")
            .arg("--socket")
            .arg(&masqd.socket);
    });
    assert!(
        stdout(&o).starts_with("host       198.18.0.1"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn completion_prints_a_script_for_each_shell() {
    for (shell, mark) in [
        ("bash", "complete -F _masqctl"),
        ("zsh", "#compdef masqctl"),
        ("fish", "complete -c masqctl"),
    ] {
        let o = masqctl().args(["completion", shell]).output().expect("run");
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        assert!(stdout(&o).contains(mark), "{shell}: no {mark:?}");
    }
    let o = masqctl()
        .args(["completion", "tcsh"])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2));
}
