//! masqd's HTTP listener (`metrics.listen`): Prometheus metrics at
//! `/metrics` (`metrics.rs`), and the liveness and readiness probes
//! `/healthz` and `/readyz` (what each checks is in `daemon.rs`), for a
//! Kubernetes probe or a load balancer.

use crate::run::Heartbeat;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// A probe's answer: `Ok(text)` is 200, `Err(reason)` 503; either in
/// plain text, one line.
pub type Probe = Box<dyn Fn() -> Result<String, String> + Send + Sync>;

/// What `/healthz` and `/readyz` ask (see `daemon.rs` for what each
/// checks).
pub struct Probes {
    pub health: Probe,
    pub ready: Probe,
}

struct Served {
    registry: Registry,
    probes: Probes,
}

/// Serve `GET /metrics`, `/healthz` and `/readyz` on addr from a thread
/// that beats every half second and ends once `stopping`. HTTP/1.1 by
/// hyper, the server half of the stack the etcd client already brings, on
/// a single-threaded runtime of the thread's own. Returns the address
/// bound (addr's port may be 0).
pub fn serve(
    addr: SocketAddr,
    registry: Registry,
    probes: Probes,
    beat: Heartbeat,
    stopping: impl Fn() -> bool + Send + 'static,
) -> std::io::Result<SocketAddr> {
    let cannot = |e: std::io::Error| {
        std::io::Error::new(e.kind(), format!("metrics: cannot listen on {addr}: {e}"))
    };
    let std_listener = std::net::TcpListener::bind(addr).map_err(cannot)?;
    std_listener.set_nonblocking(true).map_err(cannot)?;
    let addr = std_listener.local_addr()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let served = Arc::new(Served { registry, probes });
    info!(%addr, "metrics served at http://{addr}/metrics, probes at /healthz and /readyz");
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(std_listener) {
                    Ok(l) => l,
                    Err(e) => {
                        warn!("metrics: {e}");
                        return;
                    }
                };
                loop {
                    beat.beat();
                    let accepted = tokio::select! {
                        a = listener.accept() => a,
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {
                            if stopping() {
                                return;
                            }
                            continue;
                        }
                    };
                    let stream = match accepted {
                        Ok((s, _)) => s,
                        Err(e) => {
                            debug!("metrics: accept: {e}");
                            continue;
                        }
                    };
                    let served = served.clone();
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |req: Request<_>| {
                            let reply = answer(&served, &req);
                            async move { Ok::<_, std::convert::Infallible>(reply) }
                        });
                        // A client that sends no request in time is dropped.
                        let conn = hyper::server::conn::http1::Builder::new()
                            .timer(TokioTimer::new())
                            .header_read_timeout(Duration::from_secs(10))
                            .serve_connection(TokioIo::new(stream), service);
                        if let Err(e) = conn.await {
                            debug!("metrics: connection: {e}");
                        }
                    });
                }
            })
        })?;
    Ok(addr)
}

fn text(code: StatusCode, body: String, ctype: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(ctype),
    );
    r
}

fn answer<B>(served: &Served, req: &Request<B>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let probe = match path {
        "/metrics" => None,
        "/healthz" => Some(&served.probes.health),
        "/readyz" => Some(&served.probes.ready),
        _ => {
            return text(
                StatusCode::NOT_FOUND,
                "not found: masqd serves /metrics, /healthz and /readyz\n".into(),
                "text/plain",
            )
        }
    };
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("only GET {path}\n"),
            "text/plain",
        );
    }
    if let Some(probe) = probe {
        return match probe() {
            Ok(t) => text(
                StatusCode::OK,
                format!("{t}\n"),
                "text/plain; charset=utf-8",
            ),
            Err(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{why}\n"),
                "text/plain; charset=utf-8",
            ),
        };
    }
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &served.registry) {
        Ok(()) => text(
            StatusCode::OK,
            body,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
        Err(_) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding failed\n".into(),
            "text/plain",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One request over a real connection: (status, Content-Type, body).
    fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(
            c,
            "{method} {path} HTTP/1.1\r\nHost: masqd\r\nConnection: close\r\n\r\n"
        )
        .expect("send");
        let mut reply = String::new();
        c.read_to_string(&mut reply).expect("reply");
        let (head, body) = reply.split_once("\r\n\r\n").expect("a header");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("a status");
        let ctype = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                // Header names are case-insensitive.
                name.eq_ignore_ascii_case("content-type")
                    .then(|| value.trim().to_string())
            })
            .unwrap_or_default();
        (status, ctype, body.to_string())
    }

    #[test]
    fn the_listener_serves_metrics_and_probes_that_follow_masqd() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let run = Arc::new(crate::run::Run::new(Duration::from_secs(1)));
        // Bound loose enough that the requests before the wedge fit in it
        // on a loaded machine.
        let wedged = run.heartbeat("control", Duration::from_secs(2));
        let ready = Arc::new(AtomicBool::new(false));
        let (r1, r2, up, stop) = (run.clone(), run.clone(), ready.clone(), run.clone());
        let probes = Probes {
            health: Box::new(move || {
                let s = r1.stalled();
                if s.is_empty() {
                    Ok("ok".into())
                } else {
                    Err(format!("stalled: {}", s.join("; ")))
                }
            }),
            ready: Box::new(move || match (up.load(Ordering::SeqCst), r2.stalled()) {
                (true, s) if s.is_empty() => Ok("ready".into()),
                (false, _) => Err("not ready: starting".into()),
                (_, s) => Err(format!("not ready: stalled: {}", s.join("; "))),
            }),
        };
        let m = crate::metrics::Metrics::default();
        m.admission("acme", Ok("acme/db/ingress[0]"));
        let registry = crate::metrics::registry(&m, Box::new(|| None));
        let addr = serve(
            "127.0.0.1:0".parse().expect("addr"),
            registry,
            probes,
            run.heartbeat("metrics", Duration::from_secs(60)),
            move || stop.is_stopping(),
        )
        .expect("listen");

        let (code, ctype, body) = http(addr, "GET", "/metrics");
        assert_eq!(code, 200);
        assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
        assert!(body.contains("masq_build_info{"), "{body}");
        assert!(
            body.contains(r#"masq_admissions_total{tenant="acme""#),
            "{body}"
        );
        assert_eq!(
            http(addr, "GET", "/healthz"),
            (200, "text/plain; charset=utf-8".into(), "ok\n".into())
        );
        assert_eq!(http(addr, "GET", "/readyz").0, 503);
        assert_eq!(http(addr, "GET", "/readyz").2, "not ready: starting\n");
        ready.store(true, Ordering::SeqCst);
        assert_eq!(http(addr, "GET", "/readyz?verbose").2, "ready\n");
        assert_eq!(http(addr, "HEAD", "/readyz").0, 200);

        // The control loop wedges: both probes fail, saying which loop.
        std::thread::sleep(Duration::from_millis(2100));
        let (code, _, body) = http(addr, "GET", "/healthz");
        assert_eq!(code, 503);
        assert!(
            body.starts_with("stalled: control: no progress for "),
            "{body}"
        );
        let (code, _, body) = http(addr, "GET", "/readyz");
        assert_eq!(code, 503);
        assert!(body.starts_with("not ready: stalled: control"), "{body}");
        wedged.beat();
        assert_eq!(http(addr, "GET", "/healthz").0, 200);

        assert_eq!(http(addr, "GET", "/nothing").0, 404);
        assert_eq!(http(addr, "POST", "/healthz").0, 405);
        run.stop();
    }
}
