//! TLS to the server (`--tls`, with memtier's options): the session
//! configuration every connection shares (`keel-tls` runs each session
//! over the driver's non-blocking socket).
//!
//! Certificates are checked as memtier checks them (`keel_tls::ChainOnly`).
//! Without `--cacert`, the server's certificate is not checked. With it,
//! the chain must lead to one of its CAs, but the name in the certificate
//! is not compared with the server's. `--tls-skip-verify` checks nothing.

use std::io;
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::{ClientConfig, ClientConnection, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::BenchError;

/// `--tls` and the options that go with it.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    pub cert: Option<String>,
    pub key: Option<String>,
    pub cacert: Option<String>,
    pub skip_verify: bool,
    /// The name sent in the handshake (`--sni`); by default the host.
    pub sni: Option<String>,
}

/// What every connection's session starts from.
pub struct Tls {
    pub config: Arc<ClientConfig>,
    pub name: ServerName<'static>,
}

impl Tls {
    /// The session configuration `options` describe, for `host`.
    pub fn new(options: &TlsOptions, host: &str) -> Result<Tls, BenchError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| BenchError::Usage(format!("TLS: {what}: {e}"));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = match (&options.cacert, options.skip_verify) {
            (Some(file), false) => {
                let certs = CertificateDer::pem_file_iter(file)
                    .and_then(|c| c.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| fail(&format!("cannot read --cacert {file}"), &e))?;
                let mut roots = RootCertStore::empty();
                roots.add_parsable_certificates(certs);
                Some(Arc::new(roots))
            }
            _ => None,
        };
        let verifier = keel_tls::ChainOnly::new(roots, provider.clone()).map_err(|e| fail("no usable CA in --cacert", &e))?;
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| fail("protocol versions", &e))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier));
        let config = match (&options.cert, &options.key) {
            (Some(cert), Some(key)) => {
                let certs = CertificateDer::pem_file_iter(cert)
                    .and_then(|c| c.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| fail(&format!("cannot read --cert {cert}"), &e))?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| fail(&format!("cannot read --key {key}"), &e))?;
                builder.with_client_auth_cert(certs, key).map_err(|e| fail("--cert and --key", &e))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err(BenchError::Usage("TLS: --cert and --key go together".into())),
        };
        let sni = options.sni.as_deref().unwrap_or(host);
        let name = ServerName::try_from(sni.to_string()).map_err(|e| fail(&format!("server name '{sni}'"), &e))?;
        Ok(Tls { config: Arc::new(config), name })
    }

    /// A session for a new connection's socket.
    pub fn connect(&self, sock: TcpStream) -> io::Result<keel_tls::TlsStream> {
        let session = ClientConnection::new(self.config.clone(), self.name.clone()).map_err(io::Error::other)?;
        Ok(keel_tls::TlsStream::new(sock, session.into()))
    }
}
