//! The control socket's server side: one thread per masqctl connection,
//! answering the requests of `control.rs`.

use crate::endpoints::endpoint::Endpoint;
use crate::operator::control::{self, CtFilter, Request};
use crate::pipeline::session::QpRecord;
use crate::tenants::parts::Parts;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::UnixListener;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;

/// Accept masqctl's connections until masqd stops. The listener is
/// polled with a timeout, not blocked on, so that the loop beats (and
/// sees masqd stop) with no masqctl about.
pub fn control_loop(parts: Arc<Parts>, listener: UnixListener) {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    // Non-blocking: a client gone between the poll and the accept must not
    // hold the loop until the next one. Accepted streams block again.
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::warn!("control socket: {e}");
    }
    let beat = parts.run().heartbeat("control", crate::run::STALL);
    while !parts.run().is_stopping() {
        beat.beat();
        let mut pfd = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        if !matches!(nix::poll::poll(&mut pfd, PollTimeout::from(1000u16)), Ok(n) if n > 0) {
            continue;
        }
        let Ok((stream, _)) = listener.accept() else {
            continue;
        };
        if parts.run().is_stopping() {
            return;
        }
        let parts = parts.clone();
        // A thread per connection: `conntrack -E` keeps its stream open.
        let _ = thread::Builder::new()
            .name("control-conn".into())
            .spawn(move || control_conn(&parts, stream));
    }
}

fn control_conn(parts: &Arc<Parts>, mut stream: std::os::unix::net::UnixStream) {
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let reply = match control::read_request(&stream) {
        Ok(Request::ConntrackEvents { filter }) => match filter.compile() {
            Ok(f) => return stream_events(parts, stream, f),
            Err(e) => json!({ "error": e }),
        },
        Ok(req) => answer(parts, &req),
        Err(e) => json!({ "error": e }),
    };
    let mut line = reply.to_string();
    line.push('\n');
    let _ = stream.write_all(line.as_bytes());
}

fn stream_events(parts: &Parts, mut stream: std::os::unix::net::UnixStream, f: rconntrack::Filter) {
    let rx = parts.admission().table().subscribe(4096);
    for ev in rx {
        if !f.matches(&ev.entry) {
            continue;
        }
        let mut line = json!({ "event": ev.to_string(), "data": ev }).to_string();
        line.push('\n');
        if stream.write_all(line.as_bytes()).is_err() || parts.run().is_stopping() {
            return;
        }
    }
}

/// The backstop's drop counters, or null when it is off.
fn backstop_status(parts: &Parts) -> Value {
    let Some(b) = parts.admission().backstop() else {
        return Value::Null;
    };
    match b.counters() {
        Ok(c) => json!({
            "table": format!("inet {}", crate::enforce::backstop::TABLE),
            "drops": c.iter().map(|(name, packets, bytes)| {
                json!({"counter": name, "packets": packets, "bytes": bytes})
            }).collect::<Vec<_>>(),
        }),
        Err(e) => json!({"error": e.to_string()}),
    }
}

fn conntrack_reply(entries: Vec<rconntrack::Entry>) -> Value {
    json!({
        "lines": entries.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
        "entries": entries,
    })
}

/// The reply to one request: a line per request kind, the longer ones a
/// function each.
fn answer(parts: &Arc<Parts>, req: &Request) -> Value {
    match req {
        Request::Status => status(parts),
        Request::EndpointAdd { endpoint } => parts
            .add_endpoint(endpoint.clone())
            .unwrap_or_else(|e| json!({ "error": format!("{e}\nnothing changed") })),
        Request::EndpointPod { sandbox, pid } => parts
            .adopt_pod(sandbox, *pid)
            .unwrap_or_else(|e| json!({ "error": e })),
        Request::EndpointDel { name, owner } => parts
            .remove_endpoint(name, owner.as_ref())
            .unwrap_or_else(|e| json!({ "error": e })),
        Request::Endpoints => endpoints(parts),
        Request::PolicyCheck { file, text } => policy_check(parts, file, text),
        Request::PolicyApply { file, text } => control::check_policy_size(file, text.len())
            .and_then(|()| parts.apply_policy_text(text, file))
            .unwrap_or_else(|e| json!({ "error": e })),
        Request::PolicyShow => policy_show(parts),
        Request::ConntrackList { filter } => match filter.compile() {
            Ok(f) => conntrack_reply(parts.admission().table().list(&f).cloned().collect()),
            Err(e) => json!({ "error": e }),
        },
        Request::ConntrackDelete { filter } => conntrack_delete(parts, filter),
        Request::ConntrackEvents { .. } => json!({ "error": "events are streamed" }),
        Request::Cm => json!({ "ids": parts.cm().list() }),
        Request::Vpc => json!({ "vpc": parts.registry().listing() }),
        Request::Sessions => sessions(parts),
    }
}

/// `masqctl daemon show`: the host, its rails, counts, the backstop and etcd.
fn status(parts: &Parts) -> Value {
    let sessions = parts.sessions().with_views(|v| v.clone());
    json!({
        "host": parts.config().underlay.ip.to_string(),
        "device": parts.first_device().name,
        "port": parts.first_device().port,
        "rails": parts.rails().iter().map(|r| json!({
            "name": r.name, "device": r.device.host.name, "port": r.device.host.port,
            "netdev": r.underlay.netdev, "ip": r.underlay.ip,
        })).collect::<Vec<_>>(),
        "endpoints": parts.registry().local().len(),
        "sessions": sessions.len(),
        "qps": sessions.values().map(|s| s.qps.len()).sum::<usize>(),
        "uptime_s": parts.run().uptime().as_secs(),
        "backstop": backstop_status(parts),
        "cluster": parts.cluster().map(|c| c.health()),
        "certificate": parts.cluster().and_then(|c| c.identity()).map(|id| json!({
            "subject": id.subject,
            "not_after": id.not_after,
        })),
    })
}

/// `masqctl endpoint list`: every endpoint served here.
fn endpoints(parts: &Parts) -> Value {
    let sessions = parts.sessions().with_views(|v| v.clone());
    let rates = parts
        .limits()
        .rates
        .as_ref()
        .map(|r| r.stats())
        .unwrap_or_default();
    let adopted = parts
        .admission()
        .backstop()
        .map(|b| b.adopted())
        .unwrap_or_default();
    let eps: Vec<Value> = parts
        .registry()
        .local()
        .iter()
        .map(|ep| {
            let n = sessions
                .values()
                .filter(|s| s.endpoint == ep.cfg.name)
                .count();
            endpoint(parts, ep, n, &rates, &adopted)
        })
        .collect();
    json!({ "endpoints": eps })
}

/// One endpoint, with its `n` sessions, its rate limit's state (of
/// `rates`) and the container cgroups the backstop adopted for it.
fn endpoint(
    parts: &Parts,
    ep: &Endpoint,
    n: usize,
    rates: &BTreeMap<String, Value>,
    adopted: &BTreeMap<String, String>,
) -> Value {
    let mut v = json!({
        "name": ep.cfg.name, "tenant": ep.cfg.tenant, "vni": ep.cfg.vni,
        "vip": ep.cfg.vip.to_string(), "netns": ep.cfg.netns,
        "vnic": ep.cfg.vnic, "socket": ep.socket, "vdev": crate::endpoints::endpoint::vdev_name(ep.vdev.load(Ordering::Relaxed)),
        "rail": parts.rail(ep).name, "device_of": ep.cfg.device_of,
        "origin": ep.origin, "host_if": ep.cfg.host_if, "bridge": ep.cfg.bridge,
        "max_connections": ep.cfg.max_connections,
        "rdma_limits": ep.cfg.rdma_limits,
        "max_rate_mbps": ep.cfg.max_rate_mbps,
        "cni": ep.cfg.cni,
        // Container cgroups the backstop filters as this endpoint's.
        "cgroups": adopted.iter()
            .filter(|(_, id)| **id == crate::kernel::nft::nft_id(&ep.cfg.name))
            .map(|(p, _)| format!("/{p}")).collect::<Vec<_>>(),
        "rate": rates.get(&ep.cfg.name),
        "rdma_current": parts.limits().rdma_cgroups
            .current(ep.cgroup_name(), &parts.rail(ep).device.host.name)
            .map(|(h, o)| json!({ "handles": h, "objects": o })),
        "sessions": n,
        "refused_connections": ep.refused_connections.load(Ordering::Relaxed),
        "refused_requests": ep.refused_requests.load(Ordering::Relaxed),
        "audit_bypasses": ep.audit_bypasses.load(Ordering::Relaxed),
        "audit_kills": ep.audit_kills.load(Ordering::Relaxed),
    });
    if let Some(why) = crate::operator::endpoints::refusal(parts, ep) {
        v["not_served"] = json!(why);
    }
    match ep.virtual_gids() {
        Ok(t) => {
            v["gids"] = t
                .iter()
                .map(|g| {
                    json!({
                        "index": g.index, "gid": vbond::gid_to_string(&g.gid),
                        "type": if g.roce_v2 { "RoCE v2" } else { "RoCE v1" },
                    })
                })
                .collect();
        }
        Err(e) => v["gid_error"] = json!(e.to_string()),
    }
    v
}

/// `masqctl policy check`: the policy's version and the endpoints it
/// names that are unknown; in cluster mode, what masqctl writes as the
/// operator, and where.
fn policy_check(parts: &Parts, file: &str, text: &str) -> Value {
    let refs = parts.registry().policy_refs();
    let checked = control::check_policy_size(file, text.len())
        .and_then(|()| parts.admission().check_text(text, file, &refs));
    match checked {
        Ok((p, unknown)) => {
            let mut v = json!({ "version": p.version_hash(), "unknown_endpoints": unknown });
            if let Some(c) = parts.cluster() {
                // What masqctl writes as the operator, and where.
                v["cluster"] = c.policy_target();
                v["cluster"]["text"] = json!(p.text());
                v["cluster"]["file"] = json!(p.file());
            }
            v
        }
        Err(e) => json!({ "error": e }),
    }
}

/// `masqctl policy show`: the policy in force, and each host's version in
/// cluster mode.
fn policy_show(parts: &Parts) -> Value {
    let mut v = match parts.admission().active() {
        Some(p) => json!({
            "file": p.file(), "version": p.version_hash(),
            "on_rule_change": format!("{:?}", p.on_rule_change()).to_lowercase(),
            "text": p.text(),
        }),
        None => json!({ "file": null, "version": null,
                        "on_rule_change": "none (no policy: all pairs in a VPC allowed)" }),
    };
    if let Some(c) = parts.cluster() {
        // The version in force on each host, as each reports it.
        v["hosts"] = c
            .policy_status()
            .unwrap_or_else(|e| json!({ "error": e.to_string() }));
    }
    v
}

/// `masqctl conntrack delete`: the QPs of the matching entries are reset.
fn conntrack_delete(parts: &Parts, filter: &CtFilter) -> Value {
    match filter.compile() {
        Ok(f) => {
            let victims: Vec<_> = parts.admission().table().list(&f).cloned().collect();
            let driver_id = parts.first_device().driver_id;
            let why = "deleted by the operator";
            json!({ "reset": parts.sessions().reset(parts.admission(), driver_id, &victims, why) })
        }
        Err(e) => json!({ "error": e }),
    }
}

/// `masqctl session list`: every live session and its QPs.
fn sessions(parts: &Parts) -> Value {
    let sessions = parts.sessions().with_views(|v| v.clone());
    let list: Vec<Value> = sessions
        .iter()
        .map(|(id, s)| {
            json!({
                "id": id, "endpoint": s.endpoint, "tenant": s.tenant, "pid": s.pid,
                "app": s.app, "started": s.started, "requests": s.requests,
                "qps": s.qps.values().map(QpRecord::to_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "sessions": list })
}

#[cfg(test)]
#[path = "control_server_tests.rs"]
mod tests;
