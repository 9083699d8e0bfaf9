//! TLS on `tls-port`, against Debian's redis-server under the same
//! directives, both reached with `redis-cli --tls`: what a client with and
//! without a certificate gets under each `tls-auth-clients`, large values
//! and pipelines through the session, CONFIG SET of the TLS settings, and
//! a start without a certificate, encrypted keys, sessions resumed until
//! their timeout. Replication over TLS
//! (`tls-replication`) between Keel and redis-server, each way, and a
//! cluster of both over a TLS bus (`tls-cluster`).

mod common;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{err, ok, temp_dir, Frame, Server};

/// A CA, a server certificate and a client certificate it signed, made
/// with openssl(1) as Redis's utils/gen-test-certs.sh makes its own.
struct Certs {
    dir: PathBuf,
}

impl Certs {
    /// None, said on stderr, without openssl or redis-cli.
    fn make() -> Option<Certs> {
        for tool in ["openssl", "redis-cli"] {
            if Command::new(tool).arg("-v").output().is_err() {
                eprintln!("{tool} not installed: skipping (scripts/test.sh installs it)");
                return None;
            }
        }
        let dir = temp_dir("tls-certs");
        let certs = Certs { dir };
        certs.openssl(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key"]);
        certs.openssl(&["req", "-x509", "-new", "-key", "ca.key", "-sha256", "-days", "30", "-subj", "/O=Keel Test/CN=Certificate Authority", "-out", "ca.crt"]);
        for (name, usage) in [("server", "serverAuth"), ("client", "clientAuth")] {
            let ext = format!("{name}.ext");
            std::fs::write(
                certs.dir.join(&ext),
                format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage={usage}\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"),
            )
            .expect("write");
            certs.openssl(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", &format!("{name}.key")]);
            certs.openssl(&["req", "-new", "-key", &format!("{name}.key"), "-subj", &format!("/O=Keel Test/CN={name}"), "-out", &format!("{name}.csr")]);
            certs.openssl(&[
                "x509", "-req", "-in", &format!("{name}.csr"), "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "30",
                "-sha256", "-extfile", &ext, "-out", &format!("{name}.crt"),
            ]);
        }
        Some(certs)
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl").args(args).current_dir(&self.dir).output().expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// `name`.crt and .key: a certificate of X.509's first version (no
    /// extensions), as Redis's utils/gen-test-certs.sh makes its
    /// redis.crt, signed by `ca` (`ca.crt` and `ca.key` is the trusted
    /// one; another is made if missing).
    fn first_version(&self, name: &str, ca: &str) {
        if !self.dir.join(format!("{ca}.crt")).exists() {
            self.openssl(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", &format!("{ca}.key")]);
            let subject = format!("/O=Keel Test/CN={ca}");
            self.openssl(&["req", "-x509", "-new", "-key", &format!("{ca}.key"), "-days", "30", "-subj", &subject, "-out", &format!("{ca}.crt")]);
        }
        self.openssl(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", &format!("{name}.key")]);
        self.openssl(&["req", "-new", "-key", &format!("{name}.key"), "-subj", &format!("/O=Keel Test/CN={name}"), "-out", &format!("{name}.csr")]);
        let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
        self.openssl(&["x509", "-req", "-in", &format!("{name}.csr"), "-CA", &ca_crt, "-CAkey", &ca_key, "-CAcreateserial", "-days", "30", "-out", &format!("{name}.crt")]);
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// The directives that serve TLS on `port` with these certificates.
    fn server_flags(&self, port: u16) -> Vec<String> {
        let mut flags = vec!["--tls-port".to_string(), port.to_string()];
        for (directive, file) in [("--tls-cert-file", "server.crt"), ("--tls-key-file", "server.key"), ("--tls-ca-cert-file", "ca.crt")] {
            flags.extend([directive.to_string(), self.path(file)]);
        }
        flags
    }

    /// `redis-cli --tls` on `port` with `args` (and `input` on its
    /// standard input), showing the client certificate or not: whether it
    /// succeeded, and what it printed.
    fn cli(&self, port: u16, with_cert: bool, args: &[&str], input: Option<&[u8]>) -> (bool, String) {
        self.cli_to("127.0.0.1", port, with_cert, args, input)
    }

    /// [`Certs::cli`] to `host`.
    fn cli_to(&self, host: &str, port: u16, with_cert: bool, args: &[&str], input: Option<&[u8]>) -> (bool, String) {
        let mut cli = Command::new("redis-cli");
        cli.args(["--tls", "--cacert", &self.path("ca.crt"), "-h", host, "-p", &port.to_string()]);
        if with_cert {
            cli.args(["--cert", &self.path("client.crt"), "--key", &self.path("client.key")]);
        }
        let mut child = cli.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("redis-cli");
        let mut stdin = child.stdin.take().expect("stdin");
        if let Some(input) = input {
            stdin.write_all(input).expect("redis-cli's input");
        }
        drop(stdin);
        let out = child.wait_with_output().expect("redis-cli");
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        // redis-cli exits 0 on a connection error in a single command; its
        // text says.
        let failed = !out.status.success() || text.contains("Could not connect") || text.contains("SSL_connect failed");
        (!failed, text)
    }
}

impl Certs {
    /// The cipher suite `openssl s_client` with `args` agrees on at
    /// `port`, or "(NONE)" (openssl's word) when the handshake fails.
    fn handshake(&self, port: u16, args: &[&str]) -> String {
        let out = Command::new("openssl")
            .args(["s_client", "-connect", &format!("127.0.0.1:{port}"), "-CAfile", &self.path("ca.crt")])
            .args(["-cert", &self.path("client.crt"), "-key", &self.path("client.key")])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("openssl s_client");
        let text = String::from_utf8_lossy(&out.stdout);
        let cipher = text.lines().find_map(|l| l.split_once(", Cipher is ").map(|(_, c)| c.trim().to_string()));
        cipher.unwrap_or_else(|| "(NONE)".into())
    }

    /// Whether `openssl s_client` with `args` (`-sess_in` or `-sess_out`)
    /// gets a "New" session at `port` or a "Reused" one. Its input stays
    /// open a moment: a TLS 1.3 session ticket comes after the handshake.
    fn session(&self, port: u16, args: &[&str]) -> String {
        let mut child = Command::new("openssl")
            .args(["s_client", "-connect", &format!("127.0.0.1:{port}"), "-CAfile", &self.path("ca.crt")])
            .args(["-cert", &self.path("client.crt"), "-key", &self.path("client.key")])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl s_client");
        std::thread::sleep(std::time::Duration::from_millis(300));
        drop(child.stdin.take());
        let out = child.wait_with_output().expect("openssl s_client");
        let text = String::from_utf8_lossy(&out.stdout);
        let kind = text.lines().find_map(|l| l.split_once(", TLSv").map(|(kind, _)| kind.to_string()));
        kind.unwrap_or_else(|| "(NONE)".into())
    }

    /// `name`'s key encrypted with the passphrase "secret", as
    /// `openssl ec -aes256` writes it (`traditional`) or as
    /// `openssl pkcs8 -topk8` does: the file's name.
    fn encrypted_key(&self, name: &str, traditional: bool) -> String {
        let key = self.path(&format!("{name}.key"));
        let out = self.path(&format!("{name}-{}.key", if traditional { "ec-aes256" } else { "pkcs8" }));
        let args: &[&str] = match traditional {
            true => &["ec", "-aes256"],
            false => &["pkcs8", "-topk8"],
        };
        self.openssl(&[args, &["-in", &key, "-passout", "pass:secret", "-out", &out]].concat());
        out
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Keel, and redis-server where installed, each serving TLS on a port of
/// its own with these certificates and `extra`.
fn start_both(certs: &Certs, extra: &[&str]) -> Vec<(&'static str, Server, u16)> {
    let start = |name: &'static str, start: Start| {
        let tls_port = common::free_port();
        let mut flags = certs.server_flags(tls_port);
        flags.extend(extra.iter().map(|s| s.to_string()));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        start(&flags).map(|server| (name, server, tls_port))
    };
    [start("keel", KEEL), start("redis", REDIS)].into_iter().flatten().collect()
}

/// Starts a server under these flags: Keel, or redis-server where installed.
type Start = fn(&[&str]) -> Option<Server>;
const KEEL: Start = |flags| Some(Server::start(flags));
const REDIS: Start = Server::start_redis;

/// What a client with the CA's certificate sees, with each server: the
/// replies, a value of 4 MB each way, a pipeline of 20,000 commands.
fn tls_session(certs: &Certs, port: u16) -> Vec<String> {
    let mut seen = Vec::new();
    for args in [&["PING"][..], &["SET", "k", "v"], &["GET", "k"], &["CLIENT", "NO-EVICT", "maybe"]] {
        let (done, text) = certs.cli(port, true, args, None);
        assert!(done, "{args:?}: {text}");
        seen.push(text.lines().next().unwrap_or_default().to_string());
    }
    let big: Vec<u8> = (0..4 << 20).map(|i| b'a' + (i % 26) as u8).collect();
    let (done, text) = certs.cli(port, true, &["-x", "SET", "big"], Some(&big));
    assert!(done, "{text}");
    let (done, text) = certs.cli(port, true, &["GET", "big"], None);
    assert!(done && text.trim_end() == std::str::from_utf8(&big).expect("ascii"), "GET big: {} bytes back", text.len());
    let pipeline: String = (0..20_000).map(|i| format!("*3\r\n$3\r\nSET\r\n$8\r\nkey{i:05}\r\n$6\r\nv{i:05}\r\n")).collect();
    let (done, text) = certs.cli(port, true, &["--pipe"], Some(pipeline.as_bytes()));
    assert!(done, "{text}");
    seen.push(text.lines().last().unwrap_or_default().to_string());
    seen.push(certs.cli(port, true, &["DBSIZE"], None).1);
    seen
}

#[test]
fn clients_are_served_over_tls_as_by_redis() {
    let Some(certs) = Certs::make() else { return };
    let mut sessions = Vec::new();
    for (name, server, tls_port) in start_both(&certs, &[]) {
        let session = tls_session(&certs, tls_port);
        // The plain port serves as before.
        assert_eq!(server.client().cmd("GET k"), common::bulk("v"), "{name}");
        // `tls-auth-clients yes`: no certificate, no session.
        let (done, text) = certs.cli(tls_port, false, &["PING"], None);
        assert!(!done, "{name} served a client without a certificate: {text}");
        sessions.push((name, session));
    }
    let keel = &sessions[0].1;
    assert_eq!(keel[..3], ["PONG", "OK", "v"]);
    assert_eq!(keel[4], "errors: 0, replies: 20000");
    assert_eq!(keel[5].trim(), "20002");
    if let Some((_, redis)) = sessions.get(1) {
        assert_eq!(keel, redis);
    }
}

/// A client that does not speak TLS on `tls-port` has its connection
/// reset, by Keel as by Redis: redis-cli says "Connection reset by peer"
/// rather than reading a TLS alert as a reply.
#[test]
fn a_plaintext_client_on_the_tls_port_is_reset_as_by_redis() {
    use std::io::Read as _;
    let Some(certs) = Certs::make() else { return };
    for (name, _server, tls_port) in start_both(&certs, &[]) {
        let mut plain = std::net::TcpStream::connect(("127.0.0.1", tls_port)).expect("connect");
        plain.set_read_timeout(Some(std::time::Duration::from_secs(10))).expect("timeout");
        plain.write_all(&common::encode(&["PING"])).expect("write");
        let got = plain.read(&mut [0u8; 64]).map_err(|e| e.kind());
        assert_eq!(got, Err(std::io::ErrorKind::ConnectionReset), "{name}");
    }
}

#[test]
fn tls_auth_clients_no_and_optional_admit_clients_without_certificates() {
    let Some(certs) = Certs::make() else { return };
    for auth in ["no", "optional"] {
        for (name, _server, tls_port) in start_both(&certs, &["--tls-auth-clients", auth]) {
            for with_cert in [false, true] {
                let (done, text) = certs.cli(tls_port, with_cert, &["PING"], None);
                assert!(done && text.trim() == "PONG", "{name}, tls-auth-clients {auth}, certificate {with_cert}: {text}");
            }
        }
    }
}

/// In protected mode a TLS client from outside the loopback interface
/// is told why it is turned away once its handshake is done, as Redis
/// tells it, and counted as rejected.
#[test]
fn protected_mode_refuses_a_tls_client_after_its_handshake() {
    let Some(certs) = Certs::make() else { return };
    let Some(ip) = common::outside_address() else {
        eprintln!("NOTICE: no non-loopback address; skipping the protected-mode test");
        return;
    };
    for (name, server, tls_port) in start_both(&certs, &["--bind", "0.0.0.0"]) {
        let (_, text) = certs.cli_to(&ip.to_string(), tls_port, true, &["PING"], None);
        assert!(text.starts_with("DENIED Redis is running in protected mode"), "{name}: {text}");
        assert_eq!(server.client().info_field("stats", "rejected_connections"), "1", "{name}");
    }
}

/// `tls-ciphersuites` (TLS 1.3) and `tls-ciphers` (TLS 1.2) limit the
/// suites offered, as in Redis: `openssl s_client` gets a suite named
/// there and a failed handshake otherwise. CONFIG SET passes over a
/// TLS 1.2 name Keel lacks, as OpenSSL passes over one it does not know,
/// and refuses an unknown TLS 1.3 one.
#[test]
fn cipher_suites_are_limited_as_by_redis() {
    let Some(certs) = Certs::make() else { return };
    let flags = ["--tls-ciphersuites", "TLS_CHACHA20_POLY1305_SHA256", "--tls-ciphers", "ECDHE-ECDSA-AES128-GCM-SHA256"];
    let mut seen = Vec::new();
    for (name, server, tls_port) in start_both(&certs, &flags) {
        let mut got = Vec::new();
        for suite in ["TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"] {
            got.push(certs.handshake(tls_port, &["-tls1_3", "-ciphersuites", suite]));
        }
        for suite in ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384"] {
            got.push(certs.handshake(tls_port, &["-tls1_2", "-cipher", suite]));
        }
        let mut c = server.client();
        let reply = |frame: Frame| common::readable(&format!("{frame:?}"));
        got.push(reply(c.send(&["CONFIG", "SET", "tls-ciphers", "AES256-SHA:ECDHE-ECDSA-AES256-GCM-SHA384"])));
        got.push(certs.handshake(tls_port, &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES256-GCM-SHA384"]));
        got.push(reply(c.send(&["CONFIG", "SET", "tls-ciphersuites", "TLS_BOGUS"])));
        seen.push((name, got));
    }
    let keel = &seen[0].1;
    assert_eq!(keel[..4], ["TLS_CHACHA20_POLY1305_SHA256", "(NONE)", "ECDHE-ECDSA-AES128-GCM-SHA256", "(NONE)"]);
    assert_eq!(keel[4], common::readable(&format!("{:?}", ok())));
    assert_eq!(keel[5], "ECDHE-ECDSA-AES256-GCM-SHA384");
    assert!(keel[6].contains("Unable to update TLS configuration"), "{}", keel[6]);
    if let Some((_, redis)) = seen.get(1) {
        assert_eq!(keel, redis);
    }
}

#[test]
fn config_set_of_tls_settings_as_redis_s() {
    let Some(certs) = Certs::make() else { return };
    let failed = |name: &str| err(&format!("ERR CONFIG SET failed (possibly related to argument '{name}') - Unable to update TLS configuration. Check server logs."));
    for (name, server, tls_port) in start_both(&certs, &[]) {
        let mut c = server.client();
        // A file that cannot be read leaves TLS as it was.
        assert_eq!(c.send(&["CONFIG", "SET", "tls-cert-file", "/nonexistent/server.crt"]), failed("tls-cert-file"), "{name}");
        let cert = Frame::Array(vec![common::bulk("tls-cert-file"), common::bulk(&certs.path("server.crt"))]);
        assert_eq!(c.send(&["CONFIG", "GET", "tls-cert-file"]), cert, "{name}");
        assert!(certs.cli(tls_port, true, &["PING"], None).0, "{name}");
        assert_eq!(c.send(&["CONFIG", "SET", "tls-protocols", "SSLv3"]), failed("tls-protocols"), "{name}");
        // Only TLSv1.3 offered: redis-cli still connects.
        assert_eq!(c.send(&["CONFIG", "SET", "tls-protocols", "TLSv1.3"]), ok(), "{name}");
        assert!(certs.cli(tls_port, true, &["PING"], None).0, "{name}");
        // Clients unchecked from now on.
        assert_eq!(c.send(&["CONFIG", "SET", "tls-auth-clients", "no"]), ok(), "{name}");
        assert!(certs.cli(tls_port, false, &["PING"], None).0, "{name}");
        // The port moves: the old one refuses, the new one serves.
        let moved = common::free_port();
        assert_eq!(c.send(&["CONFIG", "SET", "tls-port", &moved.to_string()]), ok(), "{name}");
        assert!(!certs.cli(tls_port, false, &["PING"], None).0, "{name}");
        assert!(certs.cli(moved, false, &["PING"], None).0, "{name}");
        assert_eq!(c.send(&["CONFIG", "SET", "tls-port", "0"]), ok(), "{name}");
        assert!(!certs.cli(moved, false, &["PING"], None).0, "{name}");
    }
}

#[test]
fn a_tls_port_without_a_certificate_stops_the_start() {
    for (binary, text) in failed_starts(&["--tls-port", &common::free_port().to_string()]) {
        assert!(text.contains("No tls-cert-file configured!") && text.contains("Failed to configure TLS"), "{binary}: {text}");
    }
}

/// What Keel, and redis-server where installed, print as they fail to
/// start with `flags` (and no persistence): each must fail.
fn failed_starts(flags: &[&str]) -> Vec<(&'static str, String)> {
    let dir = temp_dir("tls-start");
    let mut seen = Vec::new();
    for binary in [env!("CARGO_BIN_EXE_keel-server"), "/usr/bin/redis-server"] {
        if !Path::new(binary).exists() {
            continue;
        }
        let out = Command::new(binary)
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .args(flags)
            .arg("--dir")
            .arg(&dir)
            .output()
            .expect("start");
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{binary} started: {text}");
        seen.push((binary, text));
    }
    let _ = std::fs::remove_dir_all(&dir);
    seen
}

/// Keys encrypted as `openssl ec -aes256` and `openssl pkcs8 -topk8`
/// write them load with `tls-key-file-pass`, in Keel as in Redis; a wrong
/// passphrase stops the start, and fails CONFIG SET leaving TLS as it
/// was. A replica shows an encrypted client key
/// (`tls-client-key-file-pass`) to its master.
#[test]
fn encrypted_keys_load_with_their_passphrase_as_by_redis() {
    let Some(certs) = Certs::make() else { return };
    for traditional in [true, false] {
        let key = certs.encrypted_key("server", traditional);
        let flags = ["--tls-key-file", &key, "--tls-key-file-pass", "secret"];
        for (name, server, tls_port) in start_both(&certs, &flags) {
            let (done, text) = certs.cli(tls_port, true, &["PING"], None);
            assert!(done && text.trim() == "PONG", "{name}, {key}: {text}");
            let failed = err("ERR CONFIG SET failed (possibly related to argument 'tls-key-file-pass') - Unable to update TLS configuration. Check server logs.");
            assert_eq!(server.client().send(&["CONFIG", "SET", "tls-key-file-pass", "wrong"]), failed, "{name}");
            assert!(certs.cli(tls_port, true, &["PING"], None).0, "{name}");
        }
        let mut flags = certs.server_flags(common::free_port());
        flags.extend(["--tls-key-file", &key, "--tls-key-file-pass", "wrong"].map(String::from));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        for (binary, text) in failed_starts(&flags) {
            assert!(text.contains(&format!("Failed to load private key: {key}: ")), "{binary}: {text}");
        }
    }

    let master_tls = common::free_port();
    let master_flags = certs.server_flags(master_tls);
    let master = Server::start(&master_flags.iter().map(String::as_str).collect::<Vec<_>>());
    let client_key = certs.encrypted_key("client", false);
    for start in [KEEL, REDIS] {
        let mut flags = certs.server_flags(common::free_port());
        let replicaof = master_tls.to_string();
        flags.extend(["--tls-replication", "yes", "--replicaof", "127.0.0.1", &replicaof].map(String::from));
        flags.extend(["--tls-client-cert-file", &certs.path("client.crt"), "--tls-client-key-file", &client_key].map(String::from));
        flags.extend(["--tls-client-key-file-pass", "secret"].map(String::from));
        let Some(replica) = start(&flags.iter().map(String::as_str).collect::<Vec<_>>()) else { continue };
        replica.wait_link_up();
    }
    drop(master);
}

/// Certificates of X.509's first version, which webpki refuses, serve as
/// in Redis: as the server's own, as a client's, and both ways on a
/// replica's link; one an untrusted CA signed is refused, and one whose
/// key is not its own stops the start.
#[test]
fn first_version_certificates_serve_as_in_redis() {
    let Some(certs) = Certs::make() else { return };
    certs.first_version("generic", "ca");
    certs.first_version("rogue", "rogue-ca");
    let (generic_crt, generic_key) = (certs.path("generic.crt"), certs.path("generic.key"));
    let as_generic = ["--tls-cert-file", &generic_crt, "--tls-key-file", &generic_key];
    let cli_as = |port: u16, name: &str| {
        let mut cli = Command::new("redis-cli");
        cli.args(["--tls", "--cacert", &certs.path("ca.crt"), "-p", &port.to_string()]);
        cli.args(["--cert", &certs.path(&format!("{name}.crt")), "--key", &certs.path(&format!("{name}.key")), "PING"]);
        let out = cli.output().expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string() + &String::from_utf8_lossy(&out.stderr)
    };
    for (name, start) in [("keel", KEEL), ("redis", REDIS)] {
        let tls_port = common::free_port();
        let mut flags = certs.server_flags(tls_port);
        flags.extend(as_generic.map(String::from));
        let Some(_master) = start(&flags.iter().map(String::as_str).collect::<Vec<_>>()) else { continue };
        assert_eq!(cli_as(tls_port, "client"), "PONG", "{name}: a first-version server certificate");
        assert_eq!(cli_as(tls_port, "generic"), "PONG", "{name}: a first-version client certificate");
        assert_ne!(cli_as(tls_port, "rogue"), "PONG", "{name}: a certificate no trusted CA signed");

        let mut flags = certs.server_flags(common::free_port());
        flags.extend(as_generic.map(String::from));
        flags.extend(["--tls-replication", "yes", "--replicaof", "127.0.0.1", &tls_port.to_string()].map(String::from));
        let Some(replica) = start(&flags.iter().map(String::as_str).collect::<Vec<_>>()) else { continue };
        replica.wait_link_up();
    }
    let mut flags = certs.server_flags(common::free_port());
    flags.extend(["--tls-cert-file", &generic_crt].map(String::from));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    for (binary, text) in failed_starts(&flags) {
        assert!(text.contains("Failed to configure TLS"), "{binary}: a key that is not the certificate's: {text}");
    }
}

/// Sessions resume within `tls-session-cache-timeout` and not after it,
/// over TLS 1.2 (session IDs) and 1.3 (tickets), in Keel as in Redis.
#[test]
fn sessions_resume_until_their_timeout_as_by_redis() {
    let Some(certs) = Certs::make() else { return };
    let servers = start_both(&certs, &["--tls-session-cache-timeout", "3"]);
    let versions = ["-tls1_2", "-tls1_3"];
    let file = |name: &str, version: &str| certs.path(&format!("{name}{version}.session"));
    let mut seen: Vec<Vec<String>> = vec![Vec::new(); servers.len()];
    for ((name, _, port), got) in servers.iter().zip(&mut seen) {
        for version in versions {
            got.push(certs.session(*port, &[version, "-sess_out", &file(name, version)]));
            got.push(certs.session(*port, &[version, "-sess_in", &file(name, version)]));
        }
    }
    // Past the timeout, by more than OpenSSL's whole seconds.
    std::thread::sleep(std::time::Duration::from_millis(4500));
    for ((name, _, port), got) in servers.iter().zip(&mut seen) {
        for version in versions {
            got.push(certs.session(*port, &[version, "-sess_in", &file(name, version)]));
        }
    }
    assert_eq!(seen[0], ["New", "Reused", "New", "Reused", "New", "New"]);
    if let Some(redis) = seen.get(1) {
        assert_eq!(&seen[0], redis);
    }
}

/// A master serving TLS and a replica whose link to it speaks TLS
/// (`tls-replication`, with the client certificate of
/// `tls-client-cert-file`), Keel or redis-server each, under each sync:
/// the data before and after the link, a value larger than a TLS record
/// each time, WAIT's count, the port the replica announces (its TLS one),
/// and a partial resync after CLIENT KILL TYPE master.
#[test]
fn replicas_sync_over_tls_with_redis_either_side() {
    let Some(certs) = Certs::make() else { return };
    let big = |n: usize| (0..n).map(|i| (b'a' + (i % 26) as u8) as char).collect::<String>();
    let pairs = [("keel", KEEL, "redis", REDIS, "yes"), ("keel", KEEL, "keel", KEEL, "no"), ("redis", REDIS, "keel", KEEL, "yes")];
    for (master_name, start_master, replica_name, start_replica, diskless) in pairs {
        let case = format!("{master_name} master, {replica_name} replica, repl-diskless-sync {diskless}");
        let master_tls = common::free_port();
        let mut flags = certs.server_flags(master_tls);
        flags.extend(["--repl-diskless-sync", diskless, "--repl-diskless-sync-delay", "0"].map(String::from));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let Some(master) = start_master(&flags) else { return };
        let mut m = master.client();
        for i in 0..2000 {
            m.write_command(&["SET", &format!("before:{i}"), &format!("{i}")]);
        }
        (0..2000).for_each(|_| drop(m.read()));
        assert_eq!(m.send(&["SET", "big:before", &big(1 << 20)]), ok(), "{case}");

        let replica_tls = common::free_port();
        let mut flags = certs.server_flags(replica_tls);
        let replicaof = master_tls.to_string();
        flags.extend(["--tls-replication", "yes", "--replicaof", "127.0.0.1", &replicaof].map(String::from));
        flags.extend(["--tls-client-cert-file", &certs.path("client.crt"), "--tls-client-key-file", &certs.path("client.key")].map(String::from));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let Some(replica) = start_replica(&flags) else { return };
        replica.wait_link_up();
        for i in 0..2000 {
            m.write_command(&["SET", &format!("after:{i}"), &format!("{i}")]);
        }
        (0..2000).for_each(|_| drop(m.read()));
        assert_eq!(m.send(&["SET", "big:after", &big(300_000)]), ok(), "{case}");
        assert_eq!(m.send(&["WAIT", "1", "10000"]), common::int(1), "{case}");
        let mut r = replica.client();
        assert_eq!(r.send(&["DBSIZE"]), common::int(4002), "{case}");
        assert_eq!(r.send(&["GET", "big:before"]), common::bulk(&big(1 << 20)), "{case}");
        assert_eq!(r.send(&["GET", "big:after"]), common::bulk(&big(300_000)), "{case}");
        assert_eq!(r.send(&["GET", "after:1999"]), common::bulk("1999"), "{case}");
        let listed = m.info_field("replication", "slave0");
        assert!(listed.contains(&format!("port={replica_tls},state=online")), "{case}: {listed}");

        // The link goes; the replica comes back for what it missed.
        let partial = |m: &mut common::Client| m.info_field("stats", "sync_partial_ok");
        let before = partial(&mut m);
        assert_eq!(r.send(&["CLIENT", "KILL", "TYPE", "master"]), common::int(1), "{case}");
        assert_eq!(m.send(&["SET", "missed", "1"]), ok(), "{case}");
        common::wait_for("the partial resync", || partial(&mut m) != before);
        assert_eq!(m.send(&["WAIT", "1", "10000"]), common::int(1), "{case}");
        assert_eq!(r.send(&["GET", "missed"]), common::bulk("1"), "{case}");
    }
}

/// Under `tls-cluster`: two Keel nodes and a redis-server node form one
/// cluster over a TLS bus (each MEETs at its TLS port). A plain client is
/// sent to nodes' plaintext ports and a TLS one to their TLS ports, by
/// Keel and by Redis alike; CLUSTER SHARDS lists both ports; MIGRATE goes
/// over TLS from Keel to Redis and from Redis to Keel.
#[test]
fn a_cluster_bus_over_tls_joins_keel_and_redis_nodes() {
    let Some(certs) = Certs::make() else { return };
    struct Node {
        server: Server,
        tls: u16,
        bus: u16,
    }
    let start = |start: Start| {
        let (tls, bus) = (common::free_port(), common::free_port());
        let mut flags = certs.server_flags(tls);
        flags.extend(["--cluster-enabled", "yes", "--cluster-port", &bus.to_string(), "--cluster-node-timeout", "1000"].map(String::from));
        flags.extend(["--tls-cluster", "yes", "--tls-client-cert-file", &certs.path("client.crt")].map(String::from));
        flags.extend(["--tls-client-key-file", &certs.path("client.key")].map(String::from));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        start(&flags).map(|server| Node { server, tls, bus })
    };
    let (Some(a), Some(b), Some(r)) = (start(KEEL), start(KEEL), start(REDIS)) else { return };
    let nodes = [&a, &b, &r];
    let ranges = [("0", "8000"), ("8001", "12000"), ("12001", "16383")];
    for (i, (node, (from, to))) in nodes.iter().zip(ranges).enumerate() {
        let mut c = node.server.client();
        assert_eq!(c.send(&["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()]), ok());
        assert_eq!(c.send(&["CLUSTER", "ADDSLOTSRANGE", from, to]), ok());
    }
    for node in &nodes[1..] {
        let meet = ["CLUSTER", "MEET", "127.0.0.1", &node.tls.to_string(), &node.bus.to_string()];
        assert_eq!(a.server.client().send(&meet), ok());
    }
    for node in nodes {
        let mut c = node.server.client();
        wait_for_cluster_ok(&mut c);
    }
    let id = |node: &Node| match node.server.client().send(&["CLUSTER", "MYID"]) {
        Frame::Bulk(b) => String::from_utf8(b).expect("id"),
        other => panic!("{other:?}"),
    };

    // Redirections: "b" is in slot 3300 (a's), "a" in 15495 (r's).
    let moved = |slot: u32, to: u16| err(&format!("MOVED {slot} 127.0.0.1:{to}"));
    assert_eq!(a.server.client().send(&["GET", "a"]), moved(15495, r.server.port));
    assert_eq!(r.server.client().send(&["GET", "b"]), moved(3300, a.server.port));
    for (from, key, slot, to) in [(&a, "a", 15495, &r), (&r, "b", 3300, &a)] {
        let (_, text) = certs.cli(from.tls, true, &["GET", key], None);
        assert_eq!(text.trim(), format!("MOVED {slot} 127.0.0.1:{}", to.tls));
    }
    // CLUSTER SHARDS names both ports of each node, in Keel as in Redis.
    for node in nodes {
        let shards = common::readable(&format!("{:?}", node.server.client().send(&["CLUSTER", "SHARDS"])));
        for other in nodes {
            let ports = format!("Bulk(\"port\"), Integer({}), Bulk(\"tls-port\"), Integer({})", other.server.port, other.tls);
            assert!(shards.contains(&ports), "{ports} in {shards}");
        }
    }

    // MIGRATE over TLS, each way: a slot moves, its key with it.
    for (from, to, key, slot) in [(&a, &r, "b", "3300"), (&r, &b, "a", "15495")] {
        let (mut f, mut t) = (from.server.client(), to.server.client());
        assert_eq!(f.send(&["SET", key, "moved over TLS"]), ok());
        assert_eq!(t.send(&["CLUSTER", "SETSLOT", slot, "IMPORTING", &id(from)]), ok());
        assert_eq!(f.send(&["CLUSTER", "SETSLOT", slot, "MIGRATING", &id(to)]), ok());
        assert_eq!(f.send(&["MIGRATE", "127.0.0.1", &to.tls.to_string(), key, "0", "5000"]), ok());
        assert_eq!(f.send(&["GET", key]), err(&format!("ASK {slot} 127.0.0.1:{}", to.server.port)));
        assert_eq!(t.send(&["ASKING"]), ok());
        assert_eq!(t.send(&["GET", key]), common::bulk("moved over TLS"));
    }
}

fn wait_for_cluster_ok(c: &mut common::Client) {
    common::wait_for("the cluster's state", || {
        let Frame::Bulk(info) = c.send(&["CLUSTER", "INFO"]) else { return false };
        let info = String::from_utf8_lossy(&info);
        info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
    });
}
