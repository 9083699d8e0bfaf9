//! TLS, with Redis's directives: for clients on `tls-port` (the server's
//! certificate and key, encrypted or not, the CAs that sign clients'
//! certificates, `tls-auth-clients`, the protocol versions, the cipher
//! suites and the server's order of them, the session cache and its
//! timeout), for a replica's link to
//! its master (`tls-replication`), and for the cluster bus and MIGRATE
//! (`tls-cluster`); what this server shows when it connects is
//! `tls-client-cert-file` and `tls-client-key-file`, or its own
//! certificate. rustls does the protocol; `keel-tls` runs it over the
//! non-blocking sockets of the workers and the bus thread, and over the
//! blocking ones of replication's and MIGRATE's threads.
//!
//! A replica's TLS connection syncs as a plain one does.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::crypto::CryptoProvider;
use rustls::server::{NoServerSessionStorage, StoresServerSessions, WebPkiClientVerifier};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{CipherSuite, ClientConfig, RootCertStore, ServerConfig, ServerConnection, SupportedCipherSuite};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use crate::config::{Config, TlsSettings};

/// Redis's answer when CONFIG SET leaves TLS unusable.
pub const UPDATE_FAILED: &str = "Unable to update TLS configuration. Check server logs.";

/// Whether `config` asks for TLS (Redis's `tls_port || tls_replication ||
/// tls_cluster`).
pub fn wanted(config: &Config) -> bool {
    config.tls.port != 0 || config.tls.replication || config.tls.cluster
}

/// What TLS connections start from: those accepted on `tls-port`; those
/// this server opens (to its master, to other nodes, to a MIGRATE's
/// target); and the cluster bus's accepted links, whose peers must show
/// a certificate whatever `tls-auth-clients` says, as in Redis. The last
/// two need CAs to check the other side with.
#[derive(Clone)]
pub struct Contexts {
    pub server: Arc<ServerConfig>,
    pub client: Option<Arc<ClientConfig>>,
    pub bus: Option<Arc<ServerConfig>>,
}

/// The rustls configurations `settings` describe (Redis's tlsConfigure),
/// or why there are none, in Redis's words where it has them.
pub fn configure(settings: &TlsSettings) -> Result<Contexts, String> {
    let cert_file = settings.cert_file.as_deref().ok_or("No tls-cert-file configured!")?;
    let key_file = settings.key_file.as_deref().ok_or("No tls-key-file configured!")?;
    let auth = settings.auth_clients.as_str();
    if (auth != "no" || settings.replication || settings.cluster) && settings.ca_cert_file.is_none() && settings.ca_cert_dir.is_none() {
        return Err("Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-cluster, tls-replication or tls-auth-clients are enabled!".into());
    }
    let versions = protocol_versions(settings.protocols.as_deref())?;
    if let Some(file) = &settings.dh_params_file {
        check_dh_params(file)?;
    }
    let provider = Arc::new(CryptoProvider { cipher_suites: cipher_suites(settings)?, ..rustls::crypto::ring::default_provider() });
    let own = certified_key(cert_file, key_file, settings.key_file_pass.as_deref(), &provider)?;
    let roots = match settings.ca_cert_file.is_some() || settings.ca_cert_dir.is_some() {
        true => Some(Arc::new(trusted_roots(settings)?)),
        false => None,
    };
    let server_with = |verifier: Arc<dyn rustls::server::danger::ClientCertVerifier>| -> Result<Arc<ServerConfig>, String> {
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(Arc::new(SingleCertAndKey::from(own.clone())));
        server.ignore_client_order = settings.prefer_server_ciphers;
        server.session_storage = match settings.session_caching {
            true => Arc::new(SessionCache::new(settings.session_cache_size, settings.session_cache_timeout)),
            false => Arc::new(NoServerSessionStorage {}),
        };
        Ok(Arc::new(server))
    };
    // Peers' certificates checked against the CAs, if any.
    let checking = |optional: bool| -> Result<Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>, String> {
        let Some(roots) = &roots else { return Ok(None) };
        let builder = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
        let builder = if optional { builder.allow_unauthenticated() } else { builder };
        let verifier = builder.build().map_err(|e| format!("Failed to configure CA certificate(s) file/directory: {e}"))?;
        Ok(Some(Arc::new(keel_tls::ClientChain::new(verifier, roots.clone(), provider.clone()))))
    };
    let clients_checked = if auth == "no" { None } else { checking(auth == "optional")? };
    let server = server_with(clients_checked.unwrap_or_else(WebPkiClientVerifier::no_client_auth))?;
    let bus = checking(false)?.map(server_with).transpose()?;
    // Redis's client context: its own certificate unless a client one is
    // set; the master's chain checked, not its name (`keel_tls::ChainOnly`).
    let client = match roots {
        Some(roots) => {
            let shown = match (&settings.client_cert_file, &settings.client_key_file) {
                (Some(cert_file), Some(key_file)) => certified_key(cert_file, key_file, settings.client_key_file_pass.as_deref(), &provider)?,
                _ => own,
            };
            let verifier = keel_tls::ChainOnly::new(Some(roots), provider.clone())
                .map_err(|e| format!("Failed to configure CA certificate(s) file/directory: {e}"))?;
            let client = ClientConfig::builder_with_provider(provider)
                .with_protocol_versions(&versions)
                .map_err(|e| e.to_string())?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_client_cert_resolver(Arc::new(SingleCertAndKey::from(shown)));
            Some(Arc::new(client))
        }
        None => None,
    };
    Ok(Contexts { server, client, bus })
}

/// OpenSSL's names of the cipher suites Keel has (rustls's with ring):
/// TLS 1.3's, for `tls-ciphersuites`, are the IANA names; TLS 1.2's, for
/// `tls-ciphers`, OpenSSL's own.
const TLS13_NAMES: [(&str, CipherSuite); 3] = [
    ("TLS_AES_256_GCM_SHA384", CipherSuite::TLS13_AES_256_GCM_SHA384),
    ("TLS_AES_128_GCM_SHA256", CipherSuite::TLS13_AES_128_GCM_SHA256),
    ("TLS_CHACHA20_POLY1305_SHA256", CipherSuite::TLS13_CHACHA20_POLY1305_SHA256),
];
const TLS12_NAMES: [(&str, CipherSuite); 6] = [
    ("ECDHE-ECDSA-AES256-GCM-SHA384", CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
    ("ECDHE-ECDSA-AES128-GCM-SHA256", CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
    ("ECDHE-ECDSA-CHACHA20-POLY1305", CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
    ("ECDHE-RSA-AES256-GCM-SHA384", CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384),
    ("ECDHE-RSA-AES128-GCM-SHA256", CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
    ("ECDHE-RSA-CHACHA20-POLY1305", CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
];

/// The suites `tls-ciphersuites` and `tls-ciphers` name, in their order
/// (TLS 1.3's first); an unset list is every suite of its version. As in
/// OpenSSL, a TLS 1.3 name Keel does not have is an error, and a TLS 1.2
/// one is passed over (Keel has fewer than OpenSSL), so long as one
/// remains. Only lists of names are read: OpenSSL's keywords and
/// operators (`HIGH`, `!aNULL`, `@STRENGTH`) are refused.
fn cipher_suites(settings: &TlsSettings) -> Result<Vec<SupportedCipherSuite>, String> {
    let all = rustls::crypto::ring::ALL_CIPHER_SUITES;
    let of = |id: CipherSuite| all.iter().find(|s| s.suite() == id).copied();
    let pick = |list: Option<&str>, tls12: bool| -> Result<Vec<SupportedCipherSuite>, String> {
        let (names, directive) = if tls12 { (&TLS12_NAMES[..], "ciphers") } else { (&TLS13_NAMES[..], "ciphersuites") };
        let Some(list) = list else { return Ok(names.iter().filter_map(|(_, id)| of(*id)).collect()) };
        let mut picked: Vec<SupportedCipherSuite> = Vec::new();
        for name in list.split([':', ',', ' ']).filter(|n| !n.is_empty()) {
            match names.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
                Some((_, id)) if picked.iter().any(|s| s.suite() == *id) => {}
                Some((_, id)) => picked.extend(of(*id)),
                None if tls12 && name.contains('-') && !name.starts_with(['!', '+', '-', '@']) => {
                    tracing::warn!("tls-ciphers: Keel has no cipher suite {name}; passed over");
                }
                None if tls12 => {
                    return Err(format!("Failed to configure ciphers: Keel reads cipher suites' names, not OpenSSL's keywords or operators ('{name}')"));
                }
                None => {
                    let known: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
                    return Err(format!("Failed to configure ciphersuites: '{name}' is none of {}", known.join(", ")));
                }
            }
        }
        if picked.is_empty() {
            return Err(format!("Failed to configure {directive}: no cipher suite Keel has is named"));
        }
        Ok(picked)
    };
    let mut suites = pick(settings.ciphersuites.as_deref(), false)?;
    suites.extend(pick(settings.ciphers.as_deref(), true)?);
    Ok(suites)
}

/// Redis reads `tls-dh-params-file` for DHE cipher suites, which rustls
/// does not offer: the file is only checked, in Redis's words.
fn check_dh_params(file: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("Failed to load {file}: {e}"))?;
    match text.contains("-----BEGIN DH PARAMETERS-----") {
        true => Ok(()),
        false => Err(format!("{file}: failed to read DH params.")),
    }
}

/// A certificate chain and its key, which `passphrase` decrypts where it
/// is encrypted (`tls-key-file-pass`, `tls-client-key-file-pass`), ready
/// to show.
fn certified_key(cert_file: &str, key_file: &str, passphrase: Option<&str>, provider: &CryptoProvider) -> Result<Arc<CertifiedKey>, String> {
    let certs = CertificateDer::pem_file_iter(cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("Failed to load certificate: {cert_file}: {e}"))?;
    let key = keel_tls::private_key(key_file.as_ref(), passphrase).map_err(|e| format!("Failed to load private key: {key_file}: {e}"))?;
    keel_tls::v1::certified_key(certs, key, provider).map_err(|e| format!("Failed to load certificate and key: {cert_file}, {key_file}: {e}"))
}

/// `tls-protocols` as Redis's parseProtocolsConfig reads it; unset means
/// TLSv1.2 and TLSv1.3. rustls has no TLSv1 or TLSv1.1.
fn protocol_versions(protocols: Option<&str>) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    let Some(protocols) = protocols else { return Ok(vec![&rustls::version::TLS12, &rustls::version::TLS13]) };
    let mut versions = Vec::new();
    for word in protocols.split_whitespace() {
        let version = match word.to_ascii_lowercase().as_str() {
            "tlsv1.2" => &rustls::version::TLS12,
            "tlsv1.3" => &rustls::version::TLS13,
            "tlsv1" | "tlsv1.1" => return Err(format!("Keel does not offer {word}: use a combination of 'TLSv1.2' and 'TLSv1.3'.")),
            _ => return Err("Invalid tls-protocols specified. Use a combination of 'TLSv1', 'TLSv1.1', 'TLSv1.2' and 'TLSv1.3'.".into()),
        };
        if !versions.contains(&version) {
            versions.push(version);
        }
    }
    if versions.is_empty() {
        return Err("No tls-protocols specified. Use a combination of 'TLSv1', 'TLSv1.1', 'TLSv1.2' and 'TLSv1.3'.".into());
    }
    Ok(versions)
}

/// The certificates of `tls-ca-cert-file` and of each file in
/// `tls-ca-cert-dir`.
fn trusted_roots(settings: &TlsSettings) -> Result<RootCertStore, String> {
    let mut files = Vec::new();
    files.extend(settings.ca_cert_file.iter().map(std::path::PathBuf::from));
    if let Some(dir) = &settings.ca_cert_dir {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("Failed to configure CA certificate(s) file/directory: {dir}: {e}"))?;
        files.extend(entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_file()));
    }
    let mut roots = RootCertStore::empty();
    for file in files {
        let certs = CertificateDer::pem_file_iter(&file)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("Failed to configure CA certificate(s) file/directory: {}: {e}", file.display()))?;
        roots.add_parsable_certificates(certs);
    }
    if roots.is_empty() {
        return Err("Failed to configure CA certificate(s) file/directory: no certificate found".into());
    }
    Ok(roots)
}

/// The sessions clients may resume: at most `limit`
/// (`tls-session-cache-size`), the oldest forgotten first, 0 being no
/// limit as in OpenSSL's cache; none older than `timeout`
/// (`tls-session-cache-timeout`). Not rustls's own cache: that one
/// reserves room for its whole limit at once (Redis's maximum, 2^31 - 1
/// sessions, up front), and keeps sessions for ever.
#[derive(Debug)]
struct SessionCache {
    limit: usize,
    timeout: Duration,
    sessions: Mutex<Sessions>,
}

#[derive(Debug, Default)]
struct Sessions {
    by_key: HashMap<Vec<u8>, (Vec<u8>, Instant)>,
    /// The keys in the order they came, so oldest first (a taken
    /// session's key stays until its turn to go).
    order: VecDeque<Vec<u8>>,
}

impl SessionCache {
    fn new(limit: u32, timeout_secs: u32) -> SessionCache {
        SessionCache { limit: limit as usize, timeout: Duration::from_secs(timeout_secs.into()), sessions: Mutex::default() }
    }

    fn fresh(&self, (value, stored): (Vec<u8>, Instant)) -> Option<Vec<u8>> {
        (stored.elapsed() <= self.timeout).then_some(value)
    }
}

impl StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let mut sessions = self.sessions.lock();
        let Sessions { by_key, order } = &mut *sessions;
        if by_key.insert(key.clone(), (value, Instant::now())).is_none() {
            order.push_back(key);
        }
        // The oldest go: past the limit, or past their time.
        while let Some(oldest) = order.front() {
            let expired = by_key.get(oldest).is_none_or(|(_, stored)| stored.elapsed() > self.timeout);
            if !expired && (self.limit == 0 || order.len() <= self.limit) {
                break;
            }
            if let Some(oldest) = order.pop_front() {
                by_key.remove(&oldest);
            }
        }
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.fresh(self.sessions.lock().by_key.get(key)?.clone())
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.fresh(self.sessions.lock().by_key.remove(key)?)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

/// A new client's connection on `tls-port`: its socket and TLS session.
pub fn accept(sock: mio::net::TcpStream, contexts: &Contexts) -> io::Result<keel_tls::TlsStream> {
    let session = ServerConnection::new(contexts.server.clone()).map_err(io::Error::other)?;
    Ok(keel_tls::TlsStream::new(sock, session.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_are_read_as_redis_s() {
        let names = |p: Option<&str>| protocol_versions(p).map(|v| v.iter().map(|v| format!("{:?}", v.version)).collect::<Vec<_>>());
        assert_eq!(names(None).expect("default"), ["TLSv1_2", "TLSv1_3"]);
        assert_eq!(names(Some("tlsv1.3")).expect("one"), ["TLSv1_3"]);
        assert_eq!(names(Some("TLSv1.3 TLSv1.2 TLSv1.3")).expect("both"), ["TLSv1_3", "TLSv1_2"]);
        assert!(names(Some("TLSv1.1")).expect_err("old").contains("does not offer TLSv1.1"));
        assert!(names(Some("SSLv3")).expect_err("unknown").starts_with("Invalid tls-protocols specified"));
    }

    #[test]
    fn the_session_cache_keeps_the_newest_up_to_its_limit() {
        let cache = SessionCache::new(2, 300);
        for k in [b"a", b"b", b"c"] {
            assert!(cache.put(k.to_vec(), k.to_vec()));
        }
        assert_eq!((cache.get(b"a"), cache.get(b"c")), (None, Some(b"c".to_vec())));
        assert_eq!(cache.take(b"b"), Some(b"b".to_vec()));
        assert_eq!(cache.get(b"b"), None);
        // The taken key's place goes first: "c" stays beside "d".
        cache.put(b"d".to_vec(), b"d".to_vec());
        assert_eq!((cache.get(b"c"), cache.get(b"d")), (Some(b"c".to_vec()), Some(b"d".to_vec())));
        let unlimited = SessionCache::new(0, 300);
        for i in 0..1000u32 {
            unlimited.put(i.to_be_bytes().to_vec(), vec![]);
        }
        assert_eq!(unlimited.sessions.lock().by_key.len(), 1000);
    }

    #[test]
    fn the_session_cache_forgets_sessions_past_their_time() {
        let cache = SessionCache::new(0, 0);
        cache.put(b"a".to_vec(), b"a".to_vec());
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(cache.get(b"a"), None);
        assert_eq!(cache.take(b"a"), None);
        cache.put(b"b".to_vec(), b"b".to_vec());
        std::thread::sleep(Duration::from_millis(5));
        // A put sweeps the expired out, limit or not.
        cache.put(b"c".to_vec(), b"c".to_vec());
        assert!(!cache.sessions.lock().by_key.contains_key(&b"b"[..]));
    }

    #[test]
    fn a_certificate_and_key_are_needed_and_a_ca_unless_nothing_is_checked() {
        let mut s = TlsSettings::default();
        let why = |s: &TlsSettings| configure(s).err().unwrap_or_default();
        assert_eq!(why(&s), "No tls-cert-file configured!");
        s.cert_file = Some("/nonexistent/cert.pem".into());
        assert_eq!(why(&s), "No tls-key-file configured!");
        s.key_file = Some("/nonexistent/key.pem".into());
        assert!(why(&s).starts_with("Either tls-ca-cert-file or tls-ca-cert-dir"));
        s.auth_clients = "no".into();
        assert!(why(&s).starts_with("Failed to load certificate: /nonexistent/cert.pem"));
        for (replication, cluster) in [(true, false), (false, true)] {
            (s.replication, s.cluster) = (replication, cluster);
            assert!(why(&s).starts_with("Either tls-ca-cert-file or tls-ca-cert-dir"));
        }
    }

    #[test]
    fn cipher_lists_are_read_as_openssl_reads_names() {
        let names = |ciphers: Option<&str>, ciphersuites: Option<&str>| {
            let s = TlsSettings { ciphers: ciphers.map(Into::into), ciphersuites: ciphersuites.map(Into::into), ..TlsSettings::default() };
            cipher_suites(&s).map(|v| v.iter().map(|s| format!("{:?}", s.suite())).collect::<Vec<_>>())
        };
        assert_eq!(names(None, None).expect("all").len(), 9);
        let picked = names(Some("ECDHE-RSA-AES128-GCM-SHA256:AES256-SHA:ecdhe-ecdsa-aes256-gcm-sha384"), Some("TLS_CHACHA20_POLY1305_SHA256"));
        assert_eq!(
            picked.expect("named"),
            ["TLS13_CHACHA20_POLY1305_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"]
        );
        assert!(names(Some("HIGH:!aNULL"), None).expect_err("keywords").contains("not OpenSSL's keywords"));
        assert!(names(Some("AES256-SHA"), None).expect_err("none left").contains("no cipher suite Keel has"));
        assert!(names(None, Some("TLS_AES_128_CCM_SHA256")).expect_err("unknown").starts_with("Failed to configure ciphersuites"));
    }

    #[test]
    fn dh_params_are_checked_though_unused() {
        let dir = std::env::temp_dir().join(format!("keel-dh-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let (good, bad) = (dir.join("good.dh"), dir.join("bad.dh"));
        std::fs::write(&good, "-----BEGIN DH PARAMETERS-----\nMIIBCAKCAQEA\n-----END DH PARAMETERS-----\n").expect("write");
        std::fs::write(&bad, "not a PEM file\n").expect("write");
        let path = |p: &std::path::Path| p.display().to_string();
        assert_eq!(check_dh_params(&path(&good)), Ok(()));
        assert_eq!(check_dh_params(&path(&bad)), Err(format!("{}: failed to read DH params.", path(&bad))));
        assert!(check_dh_params("/nonexistent.dh").expect_err("missing").starts_with("Failed to load /nonexistent.dh: "));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
