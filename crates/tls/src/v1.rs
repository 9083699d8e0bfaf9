//! Certificates of X.509's first version, which webpki refuses and
//! OpenSSL accepts: `openssl x509 -req` without extensions makes them, as
//! Redis's utils/gen-test-certs.sh makes its `redis.crt`. Keel shows one
//! as its own certificate ([`certified_key`]), and accepts a peer's when a
//! trusted CA signed it directly, within its dates, as OpenSSL does
//! ([`verify_chain`]); it has no extensions to check. A version 3
//! certificate goes to webpki as before.

use std::sync::Arc;

use der::{Decode, Encode, Reader};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, SubjectPublicKeyInfoDer, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, DigitallySignedStruct, Error, InconsistentKeys, RootCertStore};
use x509_cert::Certificate;

/// `cert` parsed, if it is of X.509's first version.
fn parse_v1(cert: &CertificateDer<'_>) -> Option<Certificate> {
    let parsed = Certificate::from_der(cert).ok()?;
    (parsed.tbs_certificate.version == x509_cert::Version::V1).then_some(parsed)
}

/// Whether `cert` is of X.509's first version.
pub fn is_v1(cert: &CertificateDer<'_>) -> bool {
    parse_v1(cert).is_some()
}

/// `certs` (the first is this end's) and `key` to show in handshakes,
/// checked to belong together: by rustls where it can read the
/// certificate, by comparing the public keys of a first-version one (as
/// rustls, not where the key cannot give its public half).
pub fn certified_key(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, Error> {
    let Some(cert) = parse_v1(certs.first().ok_or(Error::NoCertificatesPresented)?) else {
        return CertifiedKey::from_der(certs, key, provider).map(Arc::new);
    };
    let certified = CertifiedKey::new(certs, provider.key_provider.load_private_key(key)?);
    let spki = cert.tbs_certificate.subject_public_key_info.to_der().map_err(|_| CertificateError::BadEncoding)?;
    if certified.key.public_key().is_some_and(|public| public.as_ref() != spki) {
        return Err(InconsistentKeys::KeyMismatch.into());
    }
    Ok(Arc::new(certified))
}

/// Checks a first-version `end_entity` as OpenSSL would: signed by one of
/// `roots` directly, and within its dates at `now`.
pub fn verify_chain(end_entity: &CertificateDer<'_>, roots: &RootCertStore, now: UnixTime, algs: &WebPkiSupportedAlgorithms) -> Result<(), Error> {
    let cert = parse_v1(end_entity).ok_or(CertificateError::BadEncoding)?;
    let tbs = &cert.tbs_certificate;
    let validity = (tbs.validity.not_before.to_unix_duration(), tbs.validity.not_after.to_unix_duration());
    let now = std::time::Duration::from_secs(now.as_secs());
    if now < validity.0 {
        return Err(CertificateError::NotValidYet.into());
    }
    if now > validity.1 {
        return Err(CertificateError::Expired.into());
    }
    let issuer = value_of(&tbs.issuer)?;
    // Encoded again: the same bytes for a DER certificate, and a failed
    // signature for one that is not.
    let signed = tbs.to_der().map_err(|_| CertificateError::BadEncoding)?;
    let signature_alg = value_of(&cert.signature_algorithm)?;
    let signature = cert.signature.as_bytes().ok_or(CertificateError::BadEncoding)?;
    for anchor in roots.roots.iter().filter(|anchor| anchor.subject.as_ref() == issuer) {
        let spki = reframed_spki(anchor.subject_public_key_info.as_ref())?;
        let public_key_alg = value_of(&spki.algorithm)?;
        let public_key = spki.subject_public_key.as_bytes().ok_or(CertificateError::BadEncoding)?;
        let verified = algs.all.iter().any(|alg| {
            alg.public_key_alg_id().as_ref() == public_key_alg
                && alg.signature_alg_id().as_ref() == signature_alg
                && alg.verify_signature(public_key, &signed, signature).is_ok()
        });
        if verified {
            return Ok(());
        }
    }
    Err(CertificateError::UnknownIssuer.into())
}

/// A handshake's signature by `cert`'s key: checked by rustls, or
/// against a first-version certificate's public key as rustls checks a
/// raw key's.
pub fn verify_signature(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algs: &WebPkiSupportedAlgorithms,
    tls13: bool,
) -> Result<HandshakeSignatureValid, Error> {
    let Some(parsed) = parse_v1(cert) else {
        return match tls13 {
            true => rustls::crypto::verify_tls13_signature(message, cert, dss, algs),
            false => rustls::crypto::verify_tls12_signature(message, cert, dss, algs),
        };
    };
    let spki = parsed.tbs_certificate.subject_public_key_info.to_der().map_err(|_| CertificateError::BadEncoding)?;
    let spki = SubjectPublicKeyInfoDer::from(spki);
    if tls13 {
        return rustls::crypto::verify_tls13_signature_with_raw_key(message, &spki, dss, algs);
    }
    // What rustls's verify_tls12_signature does, with the key in hand.
    let public_key_alg = value_of(&parsed.tbs_certificate.subject_public_key_info.algorithm)?;
    let public_key = parsed.tbs_certificate.subject_public_key_info.subject_public_key.as_bytes().ok_or(CertificateError::BadEncoding)?;
    let candidates = algs.mapping.iter().filter(|(scheme, _)| *scheme == dss.scheme).flat_map(|(_, algs)| algs.iter());
    let mut matching = candidates.filter(|alg| alg.public_key_alg_id().as_ref() == public_key_alg).peekable();
    if matching.peek().is_none() {
        return Err(rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme.into());
    }
    match matching.any(|alg| alg.verify_signature(public_key, message, dss.signature()).is_ok()) {
        true => Ok(HandshakeSignatureValid::assertion()),
        false => Err(CertificateError::BadSignature.into()),
    }
}

/// The DER of `field`'s value, without its tag and length: how webpki
/// and rustls give names and algorithm identifiers.
fn value_of(field: &impl Encode) -> Result<Vec<u8>, Error> {
    let der = field.to_der().map_err(|_| CertificateError::BadEncoding)?;
    let value = der::SliceReader::new(&der).and_then(|mut reader| {
        let header = der::Header::decode(&mut reader)?;
        reader.read_slice(header.length).map(<[u8]>::to_vec)
    });
    value.map_err(|_| CertificateError::BadEncoding.into())
}

/// A trust anchor's SubjectPublicKeyInfo, which webpki keeps without its
/// outer SEQUENCE, parsed.
fn reframed_spki(value: &[u8]) -> Result<spki::SubjectPublicKeyInfoOwned, Error> {
    let len = der::Length::try_from(value.len()).map_err(|_| CertificateError::BadEncoding)?;
    let mut framed = der::Header::new(der::Tag::Sequence, len).and_then(|h| h.to_der()).map_err(|_| CertificateError::BadEncoding)?;
    framed.extend_from_slice(value);
    spki::SubjectPublicKeyInfoOwned::from_der(&framed).map_err(|_| CertificateError::BadEncoding.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;

    /// A CA, a first-version certificate it signed (`openssl x509 -req`
    /// without extensions, valid until 2126) with its key, another key, and
    /// the same request signed by another CA of the same name.
    const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBhTCCASugAwIBAgIUItVl8k1PTn9Jjh71wvgN72xYaKowCgYIKoZIzj0EAwIw
FzEVMBMGA1UEAwwMS2VlbCBUZXN0IENBMCAXDTI2MTEyOTIxNDcwN1oYDzIxMjYx
MTA1MjE0NzA3WjAXMRUwEwYDVQQDDAxLZWVsIFRlc3QgQ0EwWTATBgcqhkjOPQIB
BggqhkjOPQMBBwNCAARjKdHGsoUua9srWBG3bKkB0Rs9ED51xSr5hfPF7qEY/vhF
KdklxPhMoSWDjRm5j1x/326wcBjDxy28jcHbOVmoo1MwUTAdBgNVHQ4EFgQUA7qO
RZKn/xKUSgRqGgtuQ/BGZswwHwYDVR0jBBgwFoAUA7qORZKn/xKUSgRqGgtuQ/BG
ZswwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiAplhVb5mdlFQb1
xYChVIX+u32vxK1wKGTHe9QxWzSPjgIhAOM8vVFTT0d8dM6ekyT38oiOYKF5bzlA
mhpdVVWlP7/M
-----END CERTIFICATE-----
";
    const GENERIC: &str = "-----BEGIN CERTIFICATE-----
MIIBJjCBzAIUPmZDnCezWOPnVpnhZ8RyC+hUkXAwCgYIKoZIzj0EAwIwFzEVMBMG
A1UEAwwMS2VlbCBUZXN0IENBMCAXDTI2MTEyOTIxNDcwN1oYDzIxMjYxMTA1MjE0
NzA3WjASMRAwDgYDVQQDDAdnZW5lcmljMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcD
QgAEsqB7aFDkrhklKUJUydqZqK6EgbVhQgc7rsLN+mXqAyHHYbFIxj/3EiI1LPoe
EkYcW/GjnbXLsmmf9yAdctCOdzAKBggqhkjOPQQDAgNJADBGAiEAuC4g3WYNSVnL
tmnDoTBcsp2pImtGfQVFa3fwrLcyJFICIQCq5jk51A1kgHfTnRVgfLC/SeBxaZQ7
l3JsTCjT76I85A==
-----END CERTIFICATE-----
";
    const GENERIC_KEY: &str = "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIMMbtfOyy0wZMThRBh/WSv5l2EIc7S6TFOQl0uvr3zdgoAoGCCqGSM49
AwEHoUQDQgAEsqB7aFDkrhklKUJUydqZqK6EgbVhQgc7rsLN+mXqAyHHYbFIxj/3
EiI1LPoeEkYcW/GjnbXLsmmf9yAdctCOdw==
-----END EC PRIVATE KEY-----
";
    const OTHER_KEY: &str = "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIEA39hDUdc8Q7NXUtP4E7eNn7CkOTYngxIMqHZNRtBQvoAoGCCqGSM49
AwEHoUQDQgAE1ClO7qzOUDTOVSUJeUiuT+YR8VpcQnlDs8DKe6TmJ9V4bc2zKWtp
14OxeHLVohth6JubjUKNyxLmJHb/IvrNGQ==
-----END EC PRIVATE KEY-----
";
    const ROGUE: &str = "-----BEGIN CERTIFICATE-----
MIIBJTCBzAIULDXVLmUWJBp3supvrUQUYnxZEnMwCgYIKoZIzj0EAwIwFzEVMBMG
A1UEAwwMS2VlbCBUZXN0IENBMCAXDTI2MTEyOTIxNDcwOFoYDzIxMjYxMTA1MjE0
NzA4WjASMRAwDgYDVQQDDAdnZW5lcmljMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcD
QgAEsqB7aFDkrhklKUJUydqZqK6EgbVhQgc7rsLN+mXqAyHHYbFIxj/3EiI1LPoe
EkYcW/GjnbXLsmmf9yAdctCOdzAKBggqhkjOPQQDAgNIADBFAiEAmCNIBbn6wyFO
9CeUmOL/eTN2u1qtdHjyfcxd6orQJqMCIDCPTv+46uULqP+bCSn7X4muWb51H1KI
YfHwQDR2XHlQ
-----END CERTIFICATE-----
";

    fn cert(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).expect("a certificate")
    }

    fn roots() -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(cert(CA)).expect("a CA");
        roots
    }

    fn at(secs: u64) -> UnixTime {
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs))
    }

    #[test]
    fn a_first_version_certificate_is_checked_against_its_issuer_and_dates() {
        let algs = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        let (generic, roots) = (cert(GENERIC), roots());
        assert!(is_v1(&generic) && !is_v1(&cert(CA)));
        assert_eq!(verify_chain(&generic, &roots, UnixTime::now(), &algs), Ok(()));
        let refused = |c: &CertificateDer<'_>, now| match verify_chain(c, &roots, now, &algs) {
            Err(Error::InvalidCertificate(e)) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(&cert(ROGUE), UnixTime::now()), CertificateError::UnknownIssuer);
        assert_eq!(refused(&generic, at(0)), CertificateError::NotValidYet);
        assert_eq!(refused(&generic, at(5_000_000_000)), CertificateError::Expired);
    }

    #[test]
    fn a_first_version_certificate_goes_with_its_own_key_only() {
        let provider = rustls::crypto::ring::default_provider();
        let key = |pem: &str| PrivateKeyDer::from_pem_slice(pem.as_bytes()).expect("a key");
        assert!(certified_key(vec![cert(GENERIC)], key(GENERIC_KEY), &provider).is_ok());
        let mismatch = certified_key(vec![cert(GENERIC)], key(OTHER_KEY), &provider);
        assert!(matches!(mismatch, Err(Error::InconsistentKeys(InconsistentKeys::KeyMismatch))));
    }
}
