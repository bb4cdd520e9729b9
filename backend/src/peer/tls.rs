//! Mutual TLS on the CM link, with the hosts' cluster identities
//! (`cluster.tls`): each side shows its host's certificate, signed by the
//! cluster's CA, and each checks that the other's names the address it
//! speaks from. A masqd that accepted a connection from 198.18.0.2 then
//! knows the messages on it come from the holder of 198.18.0.2's key, so
//! the CM's checks of "the host that serves this endpoint" rest on more
//! than a source address.

use crate::config::identity::Identity;
use crate::error::{Error, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// How long a handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The link's TLS configurations, both sides, from one identity.
pub struct LinkTls {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

/// A connection's reading side, TLS or not.
pub type Reader = Box<dyn Read + Send>;
/// A connection's writing side, TLS or not.
pub type Writer = Box<dyn Write + Send>;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl LinkTls {
    pub fn new(id: &Identity) -> Result<LinkTls> {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&id.ca) {
            let c = c.map_err(|e| Error::Invalid(format!("cluster.tls.ca: {e}")))?;
            roots.add(c).map_err(|e| {
                Error::Invalid(format!("cluster.tls.ca: not a CA certificate: {e}"))
            })?;
        }
        let chain = CertificateDer::pem_slice_iter(&id.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Invalid(format!("cluster.tls.cert: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(&id.key)
            .map_err(|e| Error::Invalid(format!("cluster.tls.key: {e}")))?;
        let roots = Arc::new(roots);
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| Error::Invalid(format!("cluster.tls.ca: {e}")))?;
        let server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Failed(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| Error::Invalid(format!("cluster.tls.cert and key: {e}")))?;
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Failed(e.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| Error::Invalid(format!("cluster.tls.cert and key: {e}")))?;
        Ok(LinkTls {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// The server's side of a connection from `from`: the handshake, then
    /// the check that the client's certificate (the CA's, verified in the
    /// handshake) names `from`.
    pub fn accept(&self, from: Ipv4Addr, mut tcp: TcpStream) -> Result<Reader> {
        let mut conn =
            ServerConnection::new(self.server.clone()).map_err(|e| Error::Peer(e.to_string()))?;
        handshake(&mut conn, &mut tcp)?;
        let cert = conn
            .peer_certificates()
            .and_then(|c| c.first())
            .ok_or_else(|| Error::Peer("no client certificate".into()))?;
        names(cert, from)?;
        Ok(Box::new(rustls::StreamOwned::new(conn, tcp)))
    }

    /// The client's side of a connection to `host`, whose certificate must
    /// name it.
    pub fn connect(&self, host: Ipv4Addr, mut tcp: TcpStream) -> Result<Writer> {
        let name = ServerName::IpAddress(IpAddr::V4(host).into());
        let mut conn = ClientConnection::new(self.client.clone(), name)
            .map_err(|e| Error::Peer(e.to_string()))?;
        handshake(&mut conn, &mut tcp)?;
        Ok(Box::new(Flushed(rustls::StreamOwned::new(conn, tcp))))
    }
}

/// Run the handshake to its end within HANDSHAKE_TIMEOUT, then let reads
/// block again (a link is quiet for as long as nobody connects).
fn handshake<C, S>(conn: &mut C, tcp: &mut TcpStream) -> Result<()>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<S>>,
    S: rustls::SideData,
{
    let _ = tcp.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    while conn.is_handshaking() {
        conn.complete_io(tcp)
            .map_err(|e| Error::Peer(format!("TLS handshake: {e}")))?;
    }
    let _ = tcp.set_read_timeout(None);
    Ok(())
}

/// Whether `cert` names `ip` (a subject alternative name).
fn names(cert: &CertificateDer<'_>, ip: Ipv4Addr) -> Result<()> {
    let ee = webpki::EndEntityCert::try_from(cert)
        .map_err(|e| Error::Peer(format!("client certificate: {e:?}")))?;
    let name = ServerName::IpAddress(IpAddr::V4(ip).into());
    ee.verify_is_valid_for_subject_name(&name)
        .map_err(|_| Error::Peer(format!("its certificate does not name {ip}")))
}

/// A TLS stream whose `write_all` also flushes: rustls' own write reports
/// a failed send only on the next call, and the link must know at once to
/// connect again and retry (`write_to`).
struct Flushed<W: Write>(W);

impl<W: Write> Write for Flushed<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.write(b)
    }
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.0.write_all(b)?;
        self.0.flush()
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}
