//! Any bytes as a peer's certificate: the first-version check of its
//! issuer and dates (`keel_tls::v1`) answers, never panics, whether the
//! bytes parse as a certificate of either version or not at all.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::RootCertStore;

fuzz_target!(|data: &[u8]| {
    let cert = CertificateDer::from(data);
    let algs = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    // The certificate as its own trust anchor too, where it parses as one.
    let mut roots = RootCertStore::empty();
    let _ = roots.add(cert.clone());
    if keel_tls::v1::is_v1(&cert) {
        let _ = keel_tls::v1::verify_chain(&cert, &roots, UnixTime::now(), &algs);
    }
});
