//! TLS on `tls-port`, against Debian's redis-server under the same
//! directives, both reached with `redis-cli --tls`: what a client with and
//! without a certificate gets under each `tls-auth-clients`, large values
//! and pipelines through the session, CONFIG SET of the TLS settings, and
//! a start without a certificate. (Keel's replicas sync over plain
//! sockets only: SYNC on `tls-port` is refused.)

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
        let run = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(&dir).output().expect("openssl");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        run(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key"]);
        run(&["req", "-x509", "-new", "-key", "ca.key", "-sha256", "-days", "30", "-subj", "/O=Keel Test/CN=Certificate Authority", "-out", "ca.crt"]);
        for (name, usage) in [("server", "serverAuth"), ("client", "clientAuth")] {
            let ext = format!("{name}.ext");
            std::fs::write(
                dir.join(&ext),
                format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage={usage}\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"),
            )
            .expect("write");
            run(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", &format!("{name}.key")]);
            run(&["req", "-new", "-key", &format!("{name}.key"), "-subj", &format!("/O=Keel Test/CN={name}"), "-out", &format!("{name}.csr")]);
            run(&[
                "x509", "-req", "-in", &format!("{name}.csr"), "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "30",
                "-sha256", "-extfile", &ext, "-out", &format!("{name}.crt"),
            ]);
        }
        Some(Certs { dir })
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
        let mut cli = Command::new("redis-cli");
        cli.args(["--tls", "--cacert", &self.path("ca.crt"), "-p", &port.to_string()]);
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

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Keel, and redis-server where installed, each serving TLS on a port of
/// its own with these certificates and `extra`.
fn start_both(certs: &Certs, extra: &[&str]) -> Vec<(&'static str, Server, u16)> {
    let start = |name: &'static str, start: fn(&[&str]) -> Option<Server>| {
        let tls_port = common::free_port();
        let mut flags = certs.server_flags(tls_port);
        flags.extend(extra.iter().map(|s| s.to_string()));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        start(&flags).map(|server| (name, server, tls_port))
    };
    [start("keel", |flags| Some(Server::start(flags))), start("redis", Server::start_redis)].into_iter().flatten().collect()
}

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
        if name == "keel" {
            // A replica's sync runs over plain sockets only: refused.
            let (_, text) = certs.cli(tls_port, true, &["SYNC"], None);
            assert!(text.contains("ERR Keel does not serve replicas over TLS yet"), "{text}");
        }
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
    let dir = temp_dir("tls-start");
    let port = common::free_port().to_string();
    for binary in [env!("CARGO_BIN_EXE_keel-server"), "/usr/bin/redis-server"] {
        if !Path::new(binary).exists() {
            continue;
        }
        let out = Command::new(binary)
            .args(["--port", "0", "--tls-port", &port, "--save", "", "--appendonly", "no", "--dir"])
            .arg(&dir)
            .output()
            .expect("start");
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{binary}: {text}");
        assert!(text.contains("No tls-cert-file configured!") && text.contains("Failed to configure TLS"), "{binary}: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
