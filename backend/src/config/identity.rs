//! This host's identity in the cluster: the CA every member trusts, and
//! this host's certificate and key, read from the files `cluster.tls`
//! names. etcd checks them (and maps the certificate to the host's etcd
//! user); masqd checks here only that each file holds what its field says,
//! so that a wrong path or a swapped file is an error naming the field and
//! the file at start, not a TLS failure later. `certs` and `key` read the
//! metrics listener's files the same way. A private key (and any secret
//! read through `secret`) is refused if its mode lets group or others
//! read or write it: a key others can read is no longer this host's.

use super::TlsFiles;
use crate::error::{Error, Result};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;

/// The PEM text of the cluster's CA, this host's certificate (with any
/// intermediates) and its key; the certificate's subject and end of
/// validity.
#[derive(Clone)]
pub struct Identity {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    /// The certificate's subject, e.g. `CN=host1`.
    pub subject: String,
    /// Its notAfter, Unix seconds.
    pub not_after: i64,
}

impl std::fmt::Debug for Identity {
    // Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Identity { .. }")
    }
}

/// Why `path` cannot be read; a missing file is said to be the host's
/// identity not provisioned yet (a new node; on Kubernetes, masqd's pod
/// starts with an empty `/etc/masq/pki` and restarts until it is there).
fn cannot_read(field: &str, path: &Path, e: &std::io::Error) -> Error {
    let hint = if e.kind() == std::io::ErrorKind::NotFound {
        " (this host's cluster identity is not provisioned yet: docs/cluster.md#etcd-over-tls)"
    } else {
        ""
    };
    Error::Invalid(format!(
        "{field}: {}: cannot read: {e}{hint}",
        path.display()
    ))
}

fn read(field: &str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| cannot_read(field, path, &e))
}

/// The text of the secret file `path` (a private key, a token), for
/// `field`: refused, naming the file and its mode, unless only its owner
/// may read or write it. The mode is the open file's (fstat), so a file
/// swapped in after the check is not the one read.
pub fn secret(field: &str, path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let cannot = |e: std::io::Error| cannot_read(field, path, &e);
    let mut f = std::fs::File::open(path).map_err(cannot)?;
    let mode = f.metadata().map_err(cannot)?.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(Error::Invalid(format!(
            "{field}: {}: mode {mode:04o} lets group or others read it; \
             a secret must be its owner's only (chmod 600)",
            path.display()
        )));
    }
    let mut text = Vec::new();
    f.read_to_end(&mut text).map_err(cannot)?;
    Ok(text)
}

/// A PEM file of certificates: its text, the certificates, and the first
/// one's subject and notAfter.
struct Certificates {
    pem: Vec<u8>,
    ders: Vec<CertificateDer<'static>>,
    subject: String,
    not_after: i64,
}

fn certificates(field: &str, path: &Path) -> Result<Certificates> {
    let pem = read(field, path)?;
    let ders = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::Invalid(format!(
                "{field}: {}: not PEM certificates: {e}",
                path.display()
            ))
        })?;
    let Some(first) = ders.first() else {
        return Err(Error::Invalid(format!(
            "{field}: {}: holds no certificate (BEGIN CERTIFICATE)",
            path.display()
        )));
    };
    let (_, cert) = x509_parser::parse_x509_certificate(first).map_err(|e| {
        Error::Invalid(format!(
            "{field}: {}: not an X.509 certificate: {e}",
            path.display()
        ))
    })?;
    let subject = cert.subject().to_string();
    let not_after = cert.validity().not_after.timestamp();
    Ok(Certificates {
        pem,
        ders,
        subject,
        not_after,
    })
}

/// The certificates in the PEM file `path` (at least one), for `field`.
pub fn certs(field: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    Ok(certificates(field, path)?.ders)
}

/// The private key in `pem`, the text of `path`, for `field`.
fn parse_key(field: &str, path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| {
        Error::Invalid(format!(
            "{field}: {}: holds no private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}",
            path.display()
        ))
    })
}

/// The private key in the PEM file `path`, for `field`.
pub fn key(field: &str, path: &Path) -> Result<PrivateKeyDer<'static>> {
    parse_key(field, path, &secret(field, path)?)
}

impl Identity {
    /// Read and check the three files.
    pub fn load(files: &TlsFiles) -> Result<Identity> {
        let ca = certificates("cluster.tls.ca", &files.ca)?;
        let cert = certificates("cluster.tls.cert", &files.cert)?;
        let key = secret("cluster.tls.key", &files.key)?;
        parse_key("cluster.tls.key", &files.key, &key)?;
        Ok(Identity {
            ca: ca.pem,
            cert: cert.pem,
            key,
            subject: cert.subject,
            not_after: cert.not_after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A self-signed P-256 certificate, made for this test with
    // `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256`.
    const CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBgDCCASWgAwIBAgIUXP7TqezVDenNztDYiRiabBIzWn4wCgYIKoZIzj0EAwIw
FTETMBEGA1UEAwwKbWFzcS10ZXN0czAeFw0yNjExMjYyMzMwMzlaFw0zNjExMjMy
MzMwMzlaMBUxEzARBgNVBAMMCm1hc3EtdGVzdHMwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAATIjI4ldywENflQ3bvxMgUI9dogoAYix6mo9OQpYOC3UQTV3Y82Xl7k
iuqwH69fZTeJ0s/AMaofHs00SYXg+2Sjo1MwUTAdBgNVHQ4EFgQUICO41o27WnFF
gGNQE30iSrDCoxswHwYDVR0jBBgwFoAUICO41o27WnFFgGNQE30iSrDCoxswDwYD
VR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNJADBGAiEA5ShRjwfkI+SoqVsv+0Sp
WALAEdL293P8hSTmpW5H3PMCIQCccr1IPRKrk7+g4udeQWbLA+DwBoMh12fP/haY
ZV6X6g==
-----END CERTIFICATE-----
";

    /// The three files in `dir`, the key readable by its owner only.
    fn files(dir: &Path, ca: &str, cert: &str, key: &str) -> TlsFiles {
        use std::os::unix::fs::PermissionsExt;
        let mut paths = Vec::new();
        for (name, text) in [("ca.pem", ca), ("cert.pem", cert), ("key.pem", key)] {
            let p = dir.join(name);
            std::fs::write(&p, text).expect("write");
            paths.push(p);
        }
        let owner_only = std::fs::Permissions::from_mode(0o600);
        std::fs::set_permissions(&paths[2], owner_only).expect("chmod");
        TlsFiles {
            ca: paths[0].clone(),
            cert: paths[1].clone(),
            key: paths[2].clone(),
        }
    }

    #[test]
    fn each_bad_file_is_an_error_naming_its_field_and_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        // The key in the certificate's place, the certificate in the key's.
        let swapped = files(dir.path(), CERT, key, CERT);
        let e = Identity::load(&swapped).expect_err("swapped").to_string();
        assert!(
            e.starts_with("cluster.tls.cert: ")
                && e.contains("cert.pem")
                && e.contains("no certificate"),
            "{e}"
        );
        let no_key = files(dir.path(), CERT, CERT, CERT);
        let e = Identity::load(&no_key).expect_err("no key").to_string();
        assert!(
            e.starts_with("cluster.tls.key: ") && e.contains("key.pem"),
            "{e}"
        );
        let mut missing = files(dir.path(), CERT, CERT, key);
        missing.ca = dir.path().join("nowhere.pem");
        let e = Identity::load(&missing).expect_err("missing").to_string();
        assert!(
            e.starts_with("cluster.tls.ca: ")
                && e.contains("nowhere.pem")
                && e.contains("cannot read")
                && e.contains("cluster identity is not provisioned yet"),
            "{e}"
        );
        let good = files(dir.path(), CERT, CERT, key);
        let id = Identity::load(&good).expect("good");
        // The test certificate: CN=masq-tests, valid until 2036-11-23 23:30:39 UTC.
        assert_eq!(
            (id.subject.as_str(), id.not_after),
            ("CN=masq-tests", 2_111_095_839)
        );
    }

    /// A key that group or others may read (as make-pki wrote them before
    /// issue 51) is refused at load, naming the file and its mode; 0400
    /// and 0600 are taken.
    #[test]
    fn a_key_readable_by_group_or_others_is_refused_naming_the_file_and_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        let f = files(dir.path(), CERT, CERT, key);
        for (mode, refused) in [
            (0o644, true),
            (0o640, true),
            (0o604, true),
            (0o620, true),
            (0o600, false),
            (0o400, false),
        ] {
            std::fs::set_permissions(&f.key, std::fs::Permissions::from_mode(mode)).expect("chmod");
            let r = Identity::load(&f).map(drop);
            if refused {
                let e = r.expect_err("refused").to_string();
                assert!(
                    e.starts_with("cluster.tls.key: ")
                        && e.contains("key.pem")
                        && e.contains(&format!("mode {mode:04o}")),
                    "{mode:o}: {e}"
                );
                let e = key_of(&f.key).expect_err("refused").to_string();
                assert!(e.contains(&format!("mode {mode:04o}")), "{e}");
            } else {
                r.expect("taken");
                key_of(&f.key).expect("taken");
            }
        }
    }

    fn key_of(path: &Path) -> Result<()> {
        key("metrics.tls.key", path).map(drop)
    }
}
