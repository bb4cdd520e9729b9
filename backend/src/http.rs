//! masqd's HTTP listener (`metrics.listen`): Prometheus metrics at
//! `/metrics` (`metrics.rs`), and the liveness and readiness probes
//! `/healthz` and `/readyz` (what each checks is in `daemon.rs`), for a
//! Kubernetes probe or a load balancer. `metrics.tls` makes it HTTPS (and,
//! with `clientCa`, takes only clients with a certificate of that CA);
//! `metrics.bearerTokenFile` makes a scrape of `/metrics` bring the token.
//! The probes stay open, so they tell only a state (`ready`, `not ready:
//! socket gone`): no path, no error text. What lies behind a state (which
//! socket, etcd's error) is for a client `/metrics` would let in, asking
//! `?verbose`.

use crate::config::identity;
use crate::config::MetricsConfig;
use crate::error::{Error, Result};
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

/// A probe's answer: `Ok` is 200, `Err` 503; either in plain text, one
/// line.
pub type Probe = Box<dyn Fn() -> Result<Said, Said> + Send + Sync>;

/// What a probe says: its `state`, which anyone who reaches the listener
/// reads, so a fixed phrase with no path and no error text in it; and the
/// `detail` behind it, for a client the metrics' access lets in that asks
/// `?verbose`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    pub state: &'static str,
    pub detail: String,
}

impl Said {
    pub fn state(state: &'static str) -> Said {
        Said {
            state,
            detail: String::new(),
        }
    }
    pub fn detail(state: &'static str, detail: impl Into<String>) -> Said {
        Said {
            state,
            detail: detail.into(),
        }
    }
    /// The body's line: the state, and the detail when `verbose`.
    fn line(&self, verbose: bool) -> String {
        if verbose && !self.detail.is_empty() {
            format!("{}: {}\n", self.state, self.detail)
        } else {
            format!("{}\n", self.state)
        }
    }
}

/// What `/healthz` and `/readyz` ask (see `daemon.rs` for what each
/// checks).
pub struct Probes {
    pub health: Probe,
    pub ready: Probe,
}

struct Served {
    registry: Registry,
    probes: Probes,
    access: Access,
}

/// Who may scrape, as `metrics:` says: TLS (with client certificates or
/// not) and a bearer token; neither is plain HTTP open to anyone who
/// reaches the address.
#[derive(Default)]
pub struct Access {
    tls: Option<Arc<rustls::ServerConfig>>,
    token: Option<Vec<u8>>,
}

impl Access {
    /// Read the files `cfg` names; an error names the field and the file.
    pub fn load(cfg: &MetricsConfig) -> Result<Access> {
        let tls = match &cfg.tls {
            None => None,
            Some(t) => {
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let chain = identity::certs("metrics.tls.cert", &t.cert)?;
                let key = identity::key("metrics.tls.key", &t.key)?;
                let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()
                    .map_err(|e| Error::Failed(e.to_string()))?;
                let builder = match &t.client_ca {
                    None => builder.with_no_client_auth(),
                    Some(ca) => {
                        let mut roots = rustls::RootCertStore::empty();
                        for c in identity::certs("metrics.tls.clientCa", ca)? {
                            roots.add(c).map_err(|e| {
                                Error::Invalid(format!(
                                    "metrics.tls.clientCa: {}: {e}",
                                    ca.display()
                                ))
                            })?;
                        }
                        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                            Arc::new(roots),
                            provider,
                        )
                        .build()
                        .map_err(|e| {
                            Error::Invalid(format!("metrics.tls.clientCa: {}: {e}", ca.display()))
                        })?;
                        builder.with_client_cert_verifier(verifier)
                    }
                };
                let mut config = builder
                    .with_single_cert(chain, key)
                    .map_err(|e| Error::Invalid(format!("metrics.tls.cert and key: {e}")))?;
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                Some(Arc::new(config))
            }
        };
        let token = match &cfg.bearer_token_file {
            None => None,
            Some(path) => {
                let field = "metrics.bearerTokenFile";
                let text = String::from_utf8(identity::secret(field, path)?).map_err(|_| {
                    Error::Invalid(format!("{field}: {}: not text", path.display()))
                })?;
                let token = text.trim();
                if token.is_empty() || token.chars().any(|c| c.is_whitespace()) {
                    return Err(Error::Invalid(format!(
                        "metrics.bearerTokenFile: {}: must hold one token (no spaces)",
                        path.display()
                    )));
                }
                Some(token.as_bytes().to_vec())
            }
        };
        Ok(Access { tls, token })
    }

    /// Whether `req` may read `/metrics`.
    fn allows<B>(&self, req: &Request<B>) -> bool {
        let Some(want) = &self.token else {
            return true;
        };
        let got = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim().as_bytes());
        // Every byte compared, so the time says nothing of how much matched.
        got.is_some_and(|got| {
            got.len() == want.len() && got.iter().zip(want).fold(0, |d, (a, b)| d | (a ^ b)) == 0
        })
    }
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
    access: Access,
    beat: Heartbeat,
    stopping: impl Fn() -> bool + Send + 'static,
) -> Result<SocketAddr> {
    let cannot = |e: std::io::Error| Error::os(format!("metrics: cannot listen on {addr}"), e);
    let std_listener = std::net::TcpListener::bind(addr).map_err(cannot)?;
    std_listener.set_nonblocking(true).map_err(cannot)?;
    let addr = std_listener.local_addr()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    announce(addr, &access);
    let acceptor = access.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let served = Arc::new(Served {
        registry,
        probes,
        access,
    });
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || rt.block_on(accept_loop(std_listener, served, acceptor, beat, stopping)))?;
    Ok(addr)
}

/// Where the metrics are served, and what guards them.
fn announce(addr: SocketAddr, access: &Access) {
    let scheme = if access.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let guard = match (&access.token, &access.tls) {
        (Some(_), _) => "a bearer token",
        (None, Some(_)) => "TLS",
        (None, None) => "nothing: keep the address off untrusted networks",
    };
    info!(%addr, "metrics served at {scheme}://{addr}/metrics (guarded by {guard}), probes at /healthz and /readyz");
}

/// Accept connections, each served by a task of its own, beating every
/// half second until `stopping`.
async fn accept_loop(
    std_listener: std::net::TcpListener,
    served: Arc<Served>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    beat: Heartbeat,
    stopping: impl Fn() -> bool,
) {
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
        tokio::spawn(connection(stream, served.clone(), acceptor.clone()));
    }
}

/// One client's connection: its TLS handshake if TLS is on, then its
/// requests over HTTP/1.1.
async fn connection(
    stream: tokio::net::TcpStream,
    served: Arc<Served>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
) {
    let service = hyper::service::service_fn(move |req: Request<_>| {
        let reply = answer(&served, &req);
        async move { Ok::<_, std::convert::Infallible>(reply) }
    });
    // A client that sends no request in time is dropped.
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    let done = match acceptor {
        None => http.serve_connection(TokioIo::new(stream), service).await,
        Some(acceptor) => {
            let handshake = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream));
            match handshake.await {
                Ok(Ok(tls)) => http.serve_connection(TokioIo::new(tls), service).await,
                Ok(Err(e)) => {
                    debug!("metrics: TLS handshake: {e}");
                    return;
                }
                Err(_) => return,
            }
        }
    };
    if let Err(e) = done {
        debug!("metrics: connection: {e}");
    }
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
    if probe.is_none() && !served.access.allows(req) {
        let mut r = text(
            StatusCode::UNAUTHORIZED,
            "unauthorized: /metrics takes the bearer token of metrics.bearerTokenFile\n".into(),
            "text/plain",
        );
        r.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer"),
        );
        return r;
    }
    if let Some(probe) = probe {
        let verbose = req
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "verbose"))
            && served.access.allows(req);
        let (code, said) = match probe() {
            Ok(said) => (StatusCode::OK, said),
            Err(said) => (StatusCode::SERVICE_UNAVAILABLE, said),
        };
        return text(code, said.line(verbose), "text/plain; charset=utf-8");
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
        let c = std::net::TcpStream::connect(addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        exchange(c, method, path, "").expect("an answer")
    }

    /// One request with `headers` (each ending in CRLF) on `c`.
    fn exchange(
        mut c: impl std::io::Read + std::io::Write,
        method: &str,
        path: &str,
        headers: &str,
    ) -> std::io::Result<(u16, String, String)> {
        write!(
            c,
            "{method} {path} HTTP/1.1\r\nHost: masqd\r\n{headers}Connection: close\r\n\r\n"
        )?;
        let mut reply = String::new();
        c.read_to_string(&mut reply)?;
        let (head, body) = reply
            .split_once("\r\n\r\n")
            .ok_or_else(|| std::io::Error::other(format!("no header in {reply:?}")))?;
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
        Ok((status, ctype, body.to_string()))
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
                    Ok(Said::state("ok"))
                } else {
                    Err(Said::detail("stalled", s.join("; ")))
                }
            }),
            ready: Box::new(move || match (up.load(Ordering::SeqCst), r2.stalled()) {
                (true, s) if s.is_empty() => Ok(Said::state("ready")),
                (false, _) => Err(Said::state("not ready: starting")),
                (_, s) => Err(Said::detail("not ready: stalled", s.join("; "))),
            }),
        };
        let m = crate::metrics::Metrics::default();
        m.admission("acme", Some("acme/db/ingress[0]"));
        let registry = crate::metrics::registry(&m, Box::new(|| None));
        let addr = serve(
            "127.0.0.1:0".parse().expect("addr"),
            registry,
            probes,
            Access::default(),
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

        // The control loop wedges: both probes fail; asked ?verbose (the
        // metrics are open here), they say which loop.
        std::thread::sleep(Duration::from_millis(2100));
        let (code, _, body) = http(addr, "GET", "/healthz");
        assert_eq!((code, body.as_str()), (503, "stalled\n"));
        let (code, _, body) = http(addr, "GET", "/healthz?verbose");
        assert_eq!(code, 503);
        assert!(
            body.starts_with("stalled: control: no progress for "),
            "{body}"
        );
        let (code, _, body) = http(addr, "GET", "/readyz");
        assert_eq!((code, body.as_str()), (503, "not ready: stalled\n"));
        let body = http(addr, "GET", "/readyz?verbose").2;
        assert!(body.starts_with("not ready: stalled: control"), "{body}");
        wedged.beat();
        assert_eq!(http(addr, "GET", "/healthz").0, 200);

        assert_eq!(http(addr, "GET", "/nothing").0, 404);
        assert_eq!(http(addr, "POST", "/healthz").0, 405);
        run.stop();
    }

    /// A listener with `access` and probes that say ok; stop the Run after.
    fn listener(access: Access) -> (SocketAddr, Arc<crate::run::Run>) {
        let run = Arc::new(crate::run::Run::new(Duration::from_secs(1)));
        let stop = run.clone();
        let probes = Probes {
            health: Box::new(|| Ok(Said::state("ok"))),
            ready: Box::new(|| {
                Err(Said::detail(
                    "not ready: socket gone",
                    "/run/masq/endpoints/acme-a/masq.sock",
                ))
            }),
        };
        let registry =
            crate::metrics::registry(&crate::metrics::Metrics::default(), Box::new(|| None));
        let addr = serve(
            "127.0.0.1:0".parse().expect("addr"),
            registry,
            probes,
            access,
            run.heartbeat("metrics", Duration::from_secs(60)),
            move || stop.is_stopping(),
        )
        .expect("listen");
        (addr, run)
    }

    fn metrics_config(
        tls: Option<crate::config::MetricsTls>,
        token: Option<std::path::PathBuf>,
    ) -> MetricsConfig {
        MetricsConfig {
            listen: Some("127.0.0.1:0".parse().expect("addr")),
            tls,
            bearer_token_file: token,
        }
    }

    /// `text` in a new file at `path`, readable by its owner only.
    fn secret_file(path: &std::path::Path, text: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, text).expect("write");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }

    /// The probes answer anyone, with their state only: the socket's path
    /// is for a client with the token that asks `?verbose`.
    #[test]
    fn a_bearer_token_guards_the_metrics_and_the_probes_details_but_not_the_probes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("token");
        secret_file(&file, "s3cret\n");
        let access = Access::load(&metrics_config(None, Some(file))).expect("load");
        let (addr, run) = listener(access);
        let get = |path: &str, headers: &str| {
            let c = std::net::TcpStream::connect(addr).expect("connect");
            exchange(c, "GET", path, headers).expect("an answer")
        };
        let with = |headers: &str| get("/metrics", headers).0;
        assert_eq!(with(""), 401);
        assert_eq!(with("Authorization: Bearer wrong\r\n"), 401);
        assert_eq!(with("Authorization: Bearer s3cre\r\n"), 401);
        assert_eq!(with("Authorization: Basic s3cret\r\n"), 401);
        assert_eq!(with("Authorization: Bearer s3cret\r\n"), 200);
        assert_eq!(with("authorization: bearer s3cret\r\n"), 200);
        assert_eq!(http(addr, "GET", "/healthz").0, 200);
        let gone = "not ready: socket gone\n";
        for headers in ["", "Authorization: Bearer wrong\r\n"] {
            for path in ["/readyz", "/readyz?verbose"] {
                let (code, _, body) = get(path, headers);
                assert_eq!((code, body.as_str()), (503, gone), "{path} {headers}");
            }
        }
        let token = "Authorization: Bearer s3cret\r\n";
        assert_eq!(get("/readyz", token).2, gone);
        assert_eq!(
            get("/readyz?verbose", token).2,
            "not ready: socket gone: /run/masq/endpoints/acme-a/masq.sock\n"
        );
        run.stop();
    }

    #[test]
    fn bad_access_files_are_errors_naming_the_field_and_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = dir.path().join("empty");
        secret_file(&empty, "\n");
        let e = Access::load(&metrics_config(None, Some(empty)))
            .err()
            .expect("empty")
            .to_string();
        assert!(
            e.starts_with("metrics.bearerTokenFile: ") && e.contains("empty"),
            "{e}"
        );
        // A token others can read is no secret.
        let open = dir.path().join("open");
        std::fs::write(&open, "s3cret\n").expect("write");
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .expect("chmod");
        let e = Access::load(&metrics_config(None, Some(open)))
            .err()
            .expect("open to others")
            .to_string();
        assert!(
            e.starts_with("metrics.bearerTokenFile: ") && e.contains("open: mode 0644"),
            "{e}"
        );
        let tls = crate::config::MetricsTls {
            cert: dir.path().join("nowhere.pem"),
            key: dir.path().join("key.pem"),
            client_ca: None,
        };
        let e = Access::load(&metrics_config(Some(tls), None))
            .err()
            .expect("missing")
            .to_string();
        assert!(
            e.starts_with("metrics.tls.cert: ") && e.contains("nowhere.pem"),
            "{e}"
        );
    }

    /// make-pki's certificates: the listener's (m, for 127.0.0.1) and a
    /// scraper's under one CA, and a scraper's under another.
    #[test]
    fn https_with_client_certificates_answers_only_the_cas_clients() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = |ca: &str, out: &str, names: &[&str]| {
            let made = std::process::Command::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../integration/make-pki"
            ))
            .arg(dir.path().join(ca))
            .arg(dir.path().join(out))
            .args(names)
            .status()
            .expect("integration/make-pki (openssl)");
            assert!(made.success());
            dir.path().join(out)
        };
        let ours = pki("ca", "pki", &["m=127.0.0.1", "scraper"]);
        let theirs = pki("other-ca", "other", &["scraper"]);
        let tls = crate::config::MetricsTls {
            cert: ours.join("m.pem"),
            key: ours.join("m-key.pem"),
            client_ca: Some(ours.join("ca.pem")),
        };
        let (addr, run) = listener(Access::load(&metrics_config(Some(tls), None)).expect("load"));
        let get = |client: Option<&std::path::Path>| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut roots = rustls::RootCertStore::empty();
            for c in identity::certs("ca", &ours.join("ca.pem")).expect("ca") {
                roots.add(c).expect("root");
            }
            let builder = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_root_certificates(roots);
            let config = match client {
                None => builder.with_no_client_auth(),
                Some(dir) => builder
                    .with_client_auth_cert(
                        identity::certs("cert", &dir.join("scraper.pem")).expect("cert"),
                        identity::key("key", &dir.join("scraper-key.pem")).expect("key"),
                    )
                    .expect("client auth"),
            };
            let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
            let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
            let tcp = std::net::TcpStream::connect(addr).expect("connect");
            tcp.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            exchange(rustls::StreamOwned::new(conn, tcp), "GET", "/metrics", "").map(|r| r.0)
        };
        assert_eq!(get(Some(&ours)).expect("our scraper"), 200);
        assert!(
            get(None).is_err(),
            "a client without a certificate got an answer"
        );
        assert!(
            get(Some(&theirs)).is_err(),
            "another CA's client got an answer"
        );
        // Plain HTTP to the HTTPS port gets no HTTP answer.
        let c = std::net::TcpStream::connect(addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        assert!(exchange(c, "GET", "/metrics", "").is_err());
        run.stop();
    }
}
