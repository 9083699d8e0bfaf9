//! The checks of a peer's certificate. [`ChainOnly`]: the check of a
//! server's that Redis makes of its master's and memtier of the server's:
//! the chain must lead to a trusted CA, but the name in the certificate is
//! not compared with the one dialled (OpenSSL's `SSL_VERIFY_PEER` with no
//! host check); with no CAs, nothing is checked. [`ClientChain`]: a
//! client's, by webpki. Both also take a certificate of X.509's first
//! version, which webpki refuses and OpenSSL accepts ([`crate::v1`]).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{VerifierBuilderError, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use crate::v1;

#[derive(Debug)]
pub struct ChainOnly {
    chain: Option<(Arc<WebPkiServerVerifier>, Arc<RootCertStore>)>,
    provider: Arc<CryptoProvider>,
}

impl ChainOnly {
    /// Checks chains against `roots`; `None` checks nothing.
    pub fn new(roots: Option<Arc<RootCertStore>>, provider: Arc<CryptoProvider>) -> Result<ChainOnly, VerifierBuilderError> {
        let chain = match roots {
            Some(roots) => Some((WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone()).build()?, roots)),
            None => None,
        };
        Ok(ChainOnly { chain, provider })
    }
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some((chain, roots)) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
        if v1::is_v1(end_entity) {
            v1::verify_chain(end_entity, roots, now, &self.provider.signature_verification_algorithms)?;
            return Ok(ServerCertVerified::assertion());
        }
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            checked => checked,
        }
    }

    fn verify_tls12_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        v1::verify_signature(message, cert, dss, &self.provider.signature_verification_algorithms, false)
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        v1::verify_signature(message, cert, dss, &self.provider.signature_verification_algorithms, true)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// webpki's check of clients' certificates (`inner`, against `roots`),
/// which also takes a first-version certificate a root signed.
#[derive(Debug)]
pub struct ClientChain {
    inner: Arc<dyn ClientCertVerifier>,
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ClientChain {
    pub fn new(inner: Arc<dyn ClientCertVerifier>, roots: Arc<RootCertStore>, provider: Arc<CryptoProvider>) -> ClientChain {
        ClientChain { inner, roots, provider }
    }
}

impl ClientCertVerifier for ClientChain {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(&self, end_entity: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>], now: UnixTime) -> Result<ClientCertVerified, rustls::Error> {
        if v1::is_v1(end_entity) {
            v1::verify_chain(end_entity, &self.roots, now, &self.provider.signature_verification_algorithms)?;
            return Ok(ClientCertVerified::assertion());
        }
        self.inner.verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        v1::verify_signature(message, cert, dss, &self.provider.signature_verification_algorithms, false)
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        v1::verify_signature(message, cert, dss, &self.provider.signature_verification_algorithms, true)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
