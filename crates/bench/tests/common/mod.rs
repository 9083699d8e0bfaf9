//! Shared by keel-bench's black-box tests: real servers (Debian's
//! redis-server and memcached) on free ports, and keel-bench run as a user
//! runs it.
//!
//! A tool the tests need and that is missing fails the test with the
//! package to install (`scripts/test.sh` installs them all): a benchmark
//! test that skipped would pass without checking anything.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use keel_testkit::free_port;

/// A server process, killed when dropped.
pub struct Server {
    pub port: u16,
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The path of `program`, or a failed test naming the Debian package.
pub fn require(program: &str, package: &str) -> PathBuf {
    let found = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file());
    match found {
        Some(p) => p,
        None => panic!("{program} is not installed: install Debian's {package} (scripts/test.sh does)"),
    }
}

/// Starts `program` with `args(port)` and waits until it answers `probe`
/// with a reply starting with `expect` on that port. The port is free when
/// chosen but something else may take it first; then the server exits and
/// a new port is tried. Accepting a connection proves nothing: another
/// test's `free_port` briefly listens on the ports it looks at, and a
/// probe once connected to such a listener while the server it stood for
/// had lost the port (keel-bench then found the port closed).
fn start(program: &Path, args: impl Fn(u16) -> Vec<String>, probe: &[u8], expect: &[u8]) -> Server {
    for _ in 0..5 {
        let port = free_port();
        let child = Command::new(program)
            .args(args(port))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        let mut server = Server { port, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(_)) = server.child.try_wait() {
                break; // lost the port race: try another
            }
            if answers(port, probe, expect) {
                return server;
            }
            assert!(Instant::now() < deadline, "{} did not start listening on {port}", program.display());
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    panic!("{} could not bind a free port in 5 tries", program.display());
}

/// Whether whatever listens on `port` answers `probe` with `expect...`.
fn answers(port: u16, probe: &[u8], expect: &[u8]) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    // A connect to a port nobody listens on yet can be given that very
    // port as its source (a TCP self-connect), which would echo the probe.
    if stream.local_addr().map(|a| a.port()).ok() == Some(port) {
        return false;
    }
    let mut reply = vec![0u8; expect.len()];
    stream.set_read_timeout(Some(Duration::from_millis(500))).is_ok()
        && stream.write_all(probe).is_ok()
        && std::io::Read::read_exact(&mut stream, &mut reply).is_ok()
        && reply == expect
}

/// Debian's redis-server, persistence off.
pub fn start_redis() -> Server {
    start_redis_with(&[])
}

/// `start_redis` with `extra` options.
pub fn start_redis_with(extra: &[String]) -> Server {
    let path = require("redis-server", "redis-server");
    start(&path, |port| {
        let mut args = ["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"].map(String::from).to_vec();
        args.extend(extra.iter().cloned());
        args
    }, b"PING\r\n", b"+PONG")
}

/// A CA, and a server and a client certificate it signed (openssl(1),
/// as Redis's utils/gen-test-certs.sh), in `dir`.
pub fn make_certificates(dir: &Path) {
    let openssl = require("openssl", "openssl");
    let run = |args: &[&str]| {
        let out = Command::new(&openssl).args(args).current_dir(dir).output().expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key"]);
    run(&["req", "-x509", "-new", "-key", "ca.key", "-sha256", "-days", "30", "-subj", "/CN=keel-bench test CA", "-out", "ca.crt"]);
    for (name, usage) in [("server", "serverAuth"), ("client", "clientAuth")] {
        let ext = format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage={usage}\n");
        std::fs::write(dir.join(format!("{name}.ext")), ext).expect("write");
        run(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", &format!("{name}.key")]);
        run(&["req", "-new", "-key", &format!("{name}.key"), "-subj", &format!("/CN={name}"), "-out", &format!("{name}.csr")]);
        run(&[
            "x509", "-req", "-in", &format!("{name}.csr"), "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "30",
            "-extfile", &format!("{name}.ext"), "-out", &format!("{name}.crt"),
        ]);
    }
}

/// Debian's memcached, 64 MB, on 127.0.0.1 only, with `extra` options.
pub fn start_memcached(extra: &[&str]) -> Server {
    let path = require("memcached", "memcached");
    start(&path, |port| {
        let mut args: Vec<String> = ["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0", "-m", "64"].map(String::from).to_vec();
        // memcached refuses to run as root unless told which user to be.
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            args.extend(["-u".to_string(), "root".to_string()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }, b"version\r\n", b"VERSION ")
}

/// memcached's `stats` counters (get_hits, get_misses, cmd_set, ...).
pub fn memcached_stats(port: u16) -> HashMap<String, u64> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).expect("connect to memcached");
    conn.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    conn.write_all(b"stats\r\n").expect("send stats");
    let mut text = String::new();
    let mut reader = BufReader::new(conn);
    while !text.ends_with("END\r\n") {
        assert!(reader.read_line(&mut text).expect("read stats") > 0, "memcached closed the connection: {text}");
    }
    text.lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("STAT ")?.split(' ');
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect()
}

/// Runs keel-bench with `args`.
pub fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_keel-bench")).args(args).output().expect("run keel-bench")
}

/// Runs keel-bench, which must succeed; returns its stdout.
pub fn bench_ok(args: &[&str]) -> String {
    let out = bench(args);
    assert!(
        out.status.success(),
        "keel-bench {args:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A file path under the system temp dir, unique to this process and `name`,
/// removed when dropped.
pub struct TempPath(pub PathBuf);

impl TempPath {
    pub fn new(name: &str) -> TempPath {
        TempPath(std::env::temp_dir().join(format!("keel-bench-test-{}-{name}", std::process::id())))
    }
    pub fn as_str(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = if self.0.is_dir() { std::fs::remove_dir_all(&self.0) } else { std::fs::remove_file(&self.0) };
    }
}

/// Runs keel-bench with `--json-out-file` added; returns how it ended and
/// the parsed JSON (written even when the run is invalid).
pub fn bench_json(args: &[&str]) -> (Output, serde_json::Value) {
    let json = TempPath::new(&format!("{}.json", unique()));
    let mut all = args.to_vec();
    all.extend(["--json-out-file", json.as_str()]);
    let out = bench(&all);
    let text = std::fs::read(&json.0).unwrap_or_else(|e| panic!("no JSON file ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    (out, serde_json::from_slice(&text).expect("valid JSON"))
}

/// A number unique within this process, for file names.
pub fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
