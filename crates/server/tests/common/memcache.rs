//! A memcached text-protocol client for tests, and the servers it talks
//! to: Keel with `--memcached-port`, or Debian's memcached (the reference
//! the tests' expectations were taken from).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, server_log, Server};

/// Debian's memcached (1.6.18 in bookworm).
const MEMCACHED: &str = "/usr/bin/memcached";

/// Whether Debian's memcached is installed; says how to get it when not.
pub fn memcached_installed() -> bool {
    let there = Path::new(MEMCACHED).exists();
    if !there {
        eprintln!("memcached not installed: skipping (scripts/test.sh installs it)");
    }
    there
}

/// Starts Debian's memcached on a free port of 127.0.0.1 (TCP only, 64 MB,
/// then `extra` options), killed on drop; None if it is not installed. Its
/// `port` is the memcached port.
pub fn start_memcached(extra: &[&str]) -> Option<Server> {
    if !memcached_installed() {
        return None;
    }
    let port = free_port();
    let mut args: Vec<String> =
        ["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1", "-m", "64"].iter().map(|s| s.to_string()).collect();
    // memcached refuses to run as root unless told which user to be.
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        args.extend(["-u".to_string(), "root".to_string()]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let child = Command::new(PathBuf::from(MEMCACHED))
        .args(&args)
        .stdout(server_log(port))
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn memcached");
    let mut server = Server { port, child, dir: None };
    wait_memcache(&mut server, port);
    Some(server)
}

/// Keel started with `--memcached-port` on a free port (and `extra`), in a
/// fresh directory; returns the server and its memcached port.
pub fn start_keel(extra: &[&str]) -> (Server, u16) {
    let mc_port = free_port();
    let mut args = vec!["--memcached-port".to_string(), mc_port.to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut server = Server::start(&args);
    wait_memcache(&mut server, mc_port);
    (server, mc_port)
}

/// The server a memcached test runs against, and its memcached port:
/// Keel, or Debian's memcached with `KEEL_MEMCACHE_REFERENCE=1` (None
/// when it is not installed: the test then returns). memcached runs with
/// its segmented LRU off: with it on, an incr/decr shortly after the
/// second fetch of an item may find it held by an asynchronous LRU bump
/// and then replace it with one of the result's length rather than pad it
/// in place (see `differential_memcache.rs`); Keel always pads.
pub fn start_under_test() -> Option<(Server, u16)> {
    if reference() {
        let server = start_memcached(&["-o", "no_lru_maintainer"])?;
        let port = server.port;
        return Some((server, port));
    }
    Some(start_keel(&[]))
}

/// Whether the tests run against memcached itself (see `start_under_test`).
pub fn reference() -> bool {
    std::env::var_os("KEEL_MEMCACHE_REFERENCE").is_some()
}

/// `start_keel` on `dir`, kept on drop (crash tests restart on it).
pub fn start_keel_in(dir: &Path, extra: &[&str]) -> (Server, u16) {
    let mc_port = free_port();
    let mut args = vec!["--memcached-port".to_string(), mc_port.to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut server = Server::start_in(dir, &args);
    wait_memcache(&mut server, mc_port);
    (server, mc_port)
}

/// Waits until `port` answers memcached's `stats` with the pid of
/// `server`'s process (not another test's server on a reused port).
fn wait_memcache(server: &mut Server, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = server.pid().to_string();
    loop {
        assert!(server.alive(), "server with memcached port {port} exited at start (port taken?)");
        assert!(Instant::now() < deadline, "nothing answered memcached on port {port}");
        if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
            let mut c = McClient::from_stream(stream);
            if let Some(stats) = c.try_stats() {
                assert_eq!(stats.get("pid").map(String::as_str), Some(pid.as_str()), "port {port} is answered by another process");
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One item of a retrieval reply: `VALUE <key> <flags> <bytes> [<cas>]`
/// and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub key: String,
    pub flags: u32,
    pub value: Vec<u8>,
    pub cas: Option<u64>,
}

impl Item {
    /// The value as text (tests store text).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.value).into_owned()
    }
}

/// A retrieval reply: its items, or, when a line came instead of a VALUE
/// or END (an error), the items before it and that line.
pub type Retrieval = Result<Vec<Item>, (Vec<Item>, String)>;

/// A raw memcached text-protocol connection.
pub struct McClient {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl McClient {
    pub fn connect(port: u16) -> McClient {
        McClient::from_stream(TcpStream::connect(("127.0.0.1", port)).expect("connect"))
    }

    fn from_stream(stream: TcpStream) -> McClient {
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        stream.set_nodelay(true).expect("nodelay");
        McClient { stream, buf: Vec::new() }
    }

    pub fn write_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Like `write_raw`, but false when the connection fails (crash tests).
    pub fn try_write(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).is_ok()
    }

    /// Reads more into the buffer; false when the connection is closed or
    /// failed. A read a signal interrupts is tried again, as in
    /// [`super::Client`].
    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(n) if n > 0 => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return true;
                }
                _ => return false,
            }
        }
    }

    /// The next line of the reply, without its `\r\n`; None when the
    /// connection ends first.
    pub fn try_line(&mut self) -> Option<String> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..at]).into_owned();
                self.buf.drain(..at + 2);
                return Some(line);
            }
            if !self.fill() {
                return None;
            }
        }
    }

    /// The next reply line, without its `\r\n`.
    pub fn line(&mut self) -> String {
        self.try_line().unwrap_or_else(|| panic!("connection closed while waiting for a reply line ({:?} read)", self.pending()))
    }

    /// Exactly `n` bytes of the reply; None when the connection ends first.
    pub fn try_bytes(&mut self, n: usize) -> Option<Vec<u8>> {
        while self.buf.len() < n {
            if !self.fill() {
                return None;
            }
        }
        Some(self.buf.drain(..n).collect())
    }

    /// What was read and not yet taken, as text.
    fn pending(&self) -> String {
        String::from_utf8_lossy(&self.buf).into_owned()
    }

    /// Reads a retrieval reply: VALUE blocks until `END`; None when the
    /// connection ends first.
    pub fn try_items(&mut self) -> Option<Retrieval> {
        let mut items = Vec::new();
        loop {
            let line = self.try_line()?;
            if line == "END" {
                return Some(Ok(items));
            }
            let Some(header) = line.strip_prefix("VALUE ") else { return Some(Err((items, line))) };
            let words: Vec<&str> = header.split(' ').collect();
            assert!(words.len() == 3 || words.len() == 4, "bad VALUE line {line:?}");
            let len: usize = words[2].parse().unwrap_or_else(|_| panic!("bad length in {line:?}"));
            let mut value = self.try_bytes(len + 2)?;
            assert_eq!(&value[len..], b"\r\n", "data of {line:?} not followed by \\r\\n");
            value.truncate(len);
            items.push(Item {
                key: words[0].to_string(),
                flags: words[1].parse().unwrap_or_else(|_| panic!("bad flags in {line:?}")),
                value,
                cas: words.get(3).map(|c| c.parse().unwrap_or_else(|_| panic!("bad cas in {line:?}"))),
            });
        }
    }

    /// `try_items` that must succeed with END.
    pub fn items(&mut self) -> Vec<Item> {
        match self.try_items() {
            Some(Ok(items)) => items,
            Some(Err((items, line))) => panic!("retrieval answered {line:?} after {items:?}"),
            None => panic!("connection closed during a retrieval reply"),
        }
    }

    /// Sends `line` (with `\r\n` added) and reads a one-line reply.
    pub fn cmd(&mut self, line: &str) -> String {
        self.write_raw(format!("{line}\r\n").as_bytes());
        self.line()
    }

    /// Sends a retrieval command (`get a b`, `gats 10 a`) and reads its items.
    pub fn retrieve(&mut self, line: &str) -> Vec<Item> {
        self.write_raw(format!("{line}\r\n").as_bytes());
        self.items()
    }

    /// `get key`: its item, if any.
    pub fn get(&mut self, key: &str) -> Option<Item> {
        let mut items = self.retrieve(&format!("get {key}"));
        assert!(items.len() <= 1, "one key, several items: {items:?}");
        items.pop()
    }

    /// `gets key`: its item, if any, with its CAS value.
    pub fn gets(&mut self, key: &str) -> Option<Item> {
        let mut items = self.retrieve(&format!("gets {key}"));
        assert!(items.len() <= 1, "one key, several items: {items:?}");
        let item = items.pop()?;
        assert!(item.cas.is_some(), "gets without a CAS value: {item:?}");
        Some(item)
    }

    /// The CAS value `gets` shows for `key`, which exists.
    pub fn cas_of(&mut self, key: &str) -> u64 {
        let item = self.gets(key).unwrap_or_else(|| panic!("{key} is missing"));
        item.cas.expect("gets shows a CAS value")
    }

    /// The bytes of a storage command: `head` (`set k 0 0`, `cas k 0 0`)
    /// with the value's length and `tail` (a CAS value, `noreply`) added.
    pub fn storage(head: &str, value: &[u8], tail: &str) -> Vec<u8> {
        let mut out = format!("{head} {}", value.len());
        if !tail.is_empty() {
            out.push(' ');
            out.push_str(tail);
        }
        out.push_str("\r\n");
        let mut out = out.into_bytes();
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
        out
    }

    /// A storage command (`set k 5 0` with `value` and `tail`), its reply line.
    pub fn store(&mut self, head: &str, value: &str, tail: &str) -> String {
        self.write_raw(&McClient::storage(head, value.as_bytes(), tail));
        self.line()
    }

    /// `set key flags exptime` of `value`: its reply line.
    pub fn set(&mut self, key: &str, flags: u32, exptime: i64, value: &str) -> String {
        self.store(&format!("set {key} {flags} {exptime}"), value, "")
    }

    /// `try_` form of `set` for crash tests: None when the connection fails.
    pub fn try_set(&mut self, key: &str, flags: u32, value: &str) -> Option<String> {
        let bytes = McClient::storage(&format!("set {key} {flags} 0"), value.as_bytes(), "");
        if !self.try_write(&bytes) {
            return None;
        }
        self.try_line()
    }

    /// `stats`: name -> value; None if the connection fails or the reply
    /// is not STAT lines and END.
    pub fn try_stats(&mut self) -> Option<HashMap<String, String>> {
        if !self.try_write(b"stats\r\n") {
            return None;
        }
        let mut stats = HashMap::new();
        loop {
            let line = self.try_line()?;
            if line == "END" {
                return Some(stats);
            }
            let mut words = line.strip_prefix("STAT ")?.splitn(2, ' ');
            let name = words.next()?.to_string();
            stats.insert(name, words.next().unwrap_or("").to_string());
        }
    }

    /// `stats`, which must succeed.
    pub fn stats(&mut self) -> HashMap<String, String> {
        self.try_stats().expect("stats: STAT lines then END")
    }

    /// Checks that nothing more arrives within `wait`: a reply that
    /// should not have been sent.
    pub fn expect_silence(&mut self, wait: Duration) {
        assert!(self.buf.is_empty(), "unexpected reply bytes {:?}", self.pending());
        self.stream.set_read_timeout(Some(wait)).expect("timeout");
        let mut chunk = [0u8; 4096];
        let got = self.stream.read(&mut chunk);
        self.stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        if let Ok(n) = got {
            assert!(n == 0, "unexpected reply bytes {:?}", String::from_utf8_lossy(&chunk[..n]));
        }
    }

    /// Reads until the server closes the connection; returns what came.
    pub fn read_to_close(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        let _ = self.stream.read_to_end(&mut out);
        out
    }

    /// Exactly `n` bytes of the reply (they must come).
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        self.try_bytes(n).expect("connection closed during a reply")
    }
}
