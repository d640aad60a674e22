//! The TLS client configuration of a PostgreSQL store, per `sslmode` as libpq defines it:
//! `prefer` and `require` encrypt without checking who answers (unless `require` is given a
//! root certificate, which makes it `verify-ca`, as in libpq); `verify-ca` checks the
//! server's certificate chain against `sslrootcert` and accepts any host name; `verify-full`
//! also checks that the certificate names the host in the URL. A client certificate
//! (`sslcert` + `sslkey`, PEM) is offered when given. rustls with the ring provider, TLS 1.2
//! and 1.3. Left out: post-quantum key exchange, the system's trust store (`sslrootcert=system`), revocation lists and
//! encrypted keys.

use crate::settings::{ConnectionSettings, SslMode};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{self, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a TLS configuration could not be built: the file (or parameter) and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{field} {}: {reason}", path.display())]
pub struct TlsSetupError {
    /// The URL parameter the file came from.
    pub field: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

/// The ring provider. rustls 0.23.48 deprecates it for lacking post-quantum key exchange
/// (left out here); aws-lc-rs, which has it, costs a C and CMake build on every fresh machine.
#[allow(deprecated)]
fn provider() -> Arc<CryptoProvider> {
    Arc::new(crypto::ring::default_provider())
}

/// The root certificate file a verifying mode uses: `sslrootcert`, else libpq's default
/// `~/.postgresql/root.crt`.
fn root_cert_path(s: &ConnectionSettings) -> Option<PathBuf> {
    s.ssl_root_cert.clone().or_else(|| {
        std::env::var_os("HOME").map(|h| Path::new(&h).join(".postgresql").join("root.crt"))
    })
}

fn read_roots(path: &Path) -> Result<RootCertStore, TlsSetupError> {
    let bad = |reason: String| TlsSetupError {
        field: "sslrootcert",
        path: path.to_path_buf(),
        reason,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(format!("cannot read: {e}")))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(bad("holds no certificate".into()));
    }
    let mut roots = RootCertStore::empty();
    for c in certs {
        roots
            .add(c)
            .map_err(|e| bad(format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}

/// A verifier that accepts any certificate but still checks the handshake's signatures
/// (`prefer`, `require`: encryption against a passive listener only).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain checked by webpki against the roots; a certificate for another
/// host name is accepted.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(m, c, d)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(m, c, d)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The rustls client configuration for `s`, or `None` for a mode without TLS
/// (`disable`, `allow`).
pub fn client_config(s: &ConnectionSettings) -> Result<Option<ClientConfig>, TlsSetupError> {
    let provider = provider();
    // `require` with a root certificate given verifies the chain, as libpq does.
    let mode = match s.ssl_mode {
        SslMode::Require if s.ssl_root_cert.is_some() => SslMode::VerifyCa,
        m => m,
    };
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError {
            field: "sslmode",
            path: PathBuf::new(),
            reason: e.to_string(),
        })?;
    let verifying = |full: bool| -> Result<Arc<dyn ServerCertVerifier>, TlsSetupError> {
        let path = root_cert_path(s).ok_or_else(|| TlsSetupError {
            field: "sslrootcert",
            path: PathBuf::from("~/.postgresql/root.crt"),
            reason: format!(
                "sslmode={} needs the CA certificate to trust",
                mode.as_str()
            ),
        })?;
        if !path.is_file() {
            return Err(TlsSetupError {
                field: "sslrootcert",
                path,
                reason: format!(
                    "no such file (sslmode={} needs the CA certificate to trust; give sslrootcert=PATH)",
                    mode.as_str()
                ),
            });
        }
        let roots = read_roots(&path)?;
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| TlsSetupError {
                field: "sslrootcert",
                path: path.clone(),
                reason: e.to_string(),
            })?;
        Ok(if full {
            webpki
        } else {
            Arc::new(ChainOnly(webpki))
        })
    };
    let verifier: Arc<dyn ServerCertVerifier> = match mode {
        SslMode::Disable | SslMode::Allow => return Ok(None),
        SslMode::Prefer | SslMode::Require => Arc::new(AnyCertificate(provider.clone())),
        SslMode::VerifyCa => verifying(false)?,
        SslMode::VerifyFull => verifying(true)?,
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match (&s.ssl_cert, &s.ssl_key) {
        (Some(cert), Some(key)) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .and_then(|i| i.collect::<Result<_, _>>())
                .map_err(|e| TlsSetupError {
                    field: "sslcert",
                    path: cert.clone(),
                    reason: format!("cannot read PEM certificates: {e}"),
                })?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsSetupError {
                field: "sslkey",
                path: key.clone(),
                reason: format!("cannot read a PEM private key: {e}"),
            })?;
            builder
                .with_client_auth_cert(certs, key_der)
                .map_err(|e| TlsSetupError {
                    field: "sslkey",
                    path: key.clone(),
                    reason: format!("does not go with sslcert: {e}"),
                })?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_without_tls_build_nothing_and_verifying_modes_need_a_ca_file() {
        let mut s = ConnectionSettings::default();
        s.set("sslmode", "disable").unwrap();
        assert!(client_config(&s).unwrap().is_none());
        s.set("sslmode", "require").unwrap();
        assert!(client_config(&s).unwrap().is_some());
        s.set("sslmode", "verify-full").unwrap();
        s.set("sslrootcert", "/nonexistent/ca.pem").unwrap();
        let e = client_config(&s).unwrap_err().to_string();
        assert!(
            e.contains("sslrootcert /nonexistent/ca.pem: no such file"),
            "{e}"
        );
        // A file that is not PEM is named with the reason.
        let d = std::env::temp_dir().join(format!("tf-tls-{}", crate::new_run_id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("ca.pem");
        std::fs::write(&f, "not a certificate\n").unwrap();
        s.set("sslrootcert", f.to_str().unwrap()).unwrap();
        let e = client_config(&s).unwrap_err().to_string();
        assert!(e.contains("holds no certificate"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
