//! Helpers for black-box tests: start a real `keel-server` (or Debian's
//! `redis-server`) on a free port and talk raw RESP to it.
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use keel_protocol::frame::Frame;
pub use keel_testkit::free_port;

pub mod diff;
pub mod memcache;
pub mod state;

/// `INFO section` on a fresh connection, authenticated with `password`
/// first where the server has one; None if the connection fails.
fn try_info(port: u16, password: Option<&str>, section: &str) -> Option<Frame> {
    let stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut client = Client { stream, buf: Vec::new() };
    if let Some(password) = password {
        client.try_send(&["AUTH", password])?;
    }
    client.try_send(&["INFO", section])
}

/// Where a test server's log goes, kept so that a failure can be read
/// afterwards.
pub fn log_path(port: u16) -> PathBuf {
    std::env::temp_dir().join("keel-test-logs").join(format!("{port}.log"))
}

fn server_log(port: u16) -> Stdio {
    let path = log_path(port);
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::File::create(path) {
        Ok(f) => Stdio::from(f),
        Err(_) => Stdio::null(),
    }
}

/// keel-server's arguments for `port` and `dir`: two threads, full syncs at
/// once, then `extra`.
fn keel_args(port: u16, dir: &std::path::Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec!["--port".into(), port.to_string(), "--threads".into(), "2".into()];
    args.extend(["--dir".into(), dir.display().to_string()]);
    // A master's full syncs start at once (by default they wait 5 s for
    // more replicas to share them); tests of the delay set their own.
    args.extend(["--repl-diskless-sync-delay".into(), "0".into()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Runs keel-server on `dir` (two threads, then `extra`) expecting it to
/// exit at start; returns its status and its log.
pub fn start_expecting_exit(dir: &std::path::Path, extra: &[&str]) -> (std::process::ExitStatus, String) {
    let log = dir.join("keel.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel-server"))
        .args(keel_args(free_port(), dir, extra))
        .stdout(std::fs::File::create(&log).expect("test setup"))
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("test setup") {
            return (status, std::fs::read_to_string(&log).unwrap_or_default());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("keel-server kept running on {}", dir.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A server process, killed when dropped.
pub struct Server {
    pub port: u16,
    child: Child,
    /// The server's `dir` (its append-only files), removed on drop.
    pub dir: Option<PathBuf>,
}

/// Polls `holds` every 20 ms until it is true, for at most 30 s.
pub fn wait_for(what: &str, mut holds: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !holds() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A fresh empty directory under the system's temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("keel-test-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

impl Server {
    /// Starts keel-server with `--port P --threads 2` and the given extra flags.
    /// Keel runs with its durable defaults, in a fresh directory.
    pub fn start(extra: &[&str]) -> Server {
        let dir = temp_dir("server");
        let mut server = Server::start_in(&dir, extra);
        server.dir = Some(dir);
        server
    }

    /// `start_in` for the last start on `dir`: the directory is removed
    /// when this server is dropped.
    pub fn start_last_in(dir: &std::path::Path, extra: &[&str]) -> Server {
        let mut server = Server::start_in(dir, extra);
        server.dir = Some(dir.to_path_buf());
        server
    }

    /// Starts keel-server with `--dir dir` (kept on drop: crash tests
    /// restart on it).
    pub fn start_in(dir: &std::path::Path, extra: &[&str]) -> Server {
        Server::start_in_with_env(dir, extra, &[])
    }

    /// `start_in` with extra environment variables (failpoints).
    pub fn start_in_with_env(dir: &std::path::Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let port = free_port();
        let args = keel_args(port, dir, extra);
        Server::spawn_to(env!("CARGO_BIN_EXE_keel-server").into(), args, port, env, server_log(port))
    }

    /// Starts keel-server with `--dir dir` and returns at once, before it
    /// listens or loads, for tests of what clients see meanwhile; its first
    /// client is [`Server::first_client`].
    pub fn launch_in(dir: &std::path::Path, extra: &[&str]) -> Server {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_keel-server"))
            .args(keel_args(port, dir, extra))
            .stdout(server_log(port))
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn server");
        Server { port, child, dir: None }
    }

    /// A connection to a server just launched, once it listens.
    pub fn first_client(&mut self) -> Client {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return self.client();
            }
            assert!(self.alive(), "server on port {} exited at start", self.port);
            assert!(Instant::now() < deadline, "server did not listen on port {}", self.port);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// `start` with the server's log (its stdout) going to `log`; the read
    /// end of a piped log is [`Server::log_pipe`].
    pub fn start_logging_to(log: Stdio, extra: &[&str]) -> Server {
        let dir = temp_dir("server");
        let port = free_port();
        let mut server =
            Server::spawn_to(env!("CARGO_BIN_EXE_keel-server").into(), keel_args(port, &dir, extra), port, &[], log);
        server.dir = Some(dir);
        server
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The scheduling policy (`libc::SCHED_*`) of the server's thread
    /// called `name`, if it has one.
    #[allow(dead_code)] // Not every test binary looks at threads.
    pub fn thread_policy(&self, name: &str) -> Option<i32> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid())).ok()?;
        let thread = tasks
            .filter_map(|t| t.ok())
            .find(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))?;
        let tid: i32 = thread.file_name().to_string_lossy().parse().ok()?;
        // SAFETY: reads the policy of a thread of another process, no memory passed.
        Some(unsafe { libc::sched_getscheduler(tid) })
    }

    pub fn log_pipe(&mut self) -> Option<std::process::ChildStdout> {
        self.child.stdout.take()
    }

    /// Kills the process with SIGKILL, as a crash would.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.dir = None;
    }

    /// Starts keel-server (`extra` after the usual arguments) on a tmpfs of
    /// `size` bytes, mounted over a fresh directory in a user and mount
    /// namespace of the server's own (unshare(1)): a real filesystem that
    /// fills up, gone with the process. The test reaches its files through
    /// [`Server::files`]. None, said on stderr, where this machine allows
    /// no such namespace.
    pub fn start_on_tmpfs(size: &str, extra: &[&str]) -> Option<Server> {
        let allowed = Command::new("unshare")
            .args(["-rm", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", "/mnt"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !allowed {
            eprintln!("no user and mount namespace to mount a tmpfs in: skipping");
            return None;
        }
        let dir = temp_dir("tmpfs");
        let port = free_port();
        let mut args: Vec<String> = ["-rm", "sh", "-c", r#"mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@""#, "sh"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend([size.to_string(), dir.display().to_string(), env!("CARGO_BIN_EXE_keel-server").to_string()]);
        args.extend(keel_args(port, &dir, extra));
        // unshare and sh exec what follows: the server keeps the child's pid.
        let mut server = Server::spawn_to("unshare".into(), args, port, &[], server_log(port));
        server.dir = Some(dir);
        Some(server)
    }

    /// `path` in the server's `dir` as the server sees it, through
    /// /proc/PID/root: where a server runs in a mount namespace of its own
    /// ([`Server::start_on_tmpfs`]) that is the only way to it.
    pub fn files(&self, path: &str) -> PathBuf {
        let dir = self.dir.as_ref().expect("a server with a dir of its own");
        let dir = dir.strip_prefix("/").unwrap_or(dir);
        PathBuf::from(format!("/proc/{}/root", self.pid())).join(dir).join(path)
    }

    /// Starts Debian's redis-server, or None if it is not installed.
    pub fn start_redis(extra: &[&str]) -> Option<Server> {
        Server::start_redis_with_env(extra, &[])
    }

    /// `start_redis` with extra environment variables.
    pub fn start_redis_with_env(extra: &[&str], env: &[(&str, &str)]) -> Option<Server> {
        let path = PathBuf::from("/usr/bin/redis-server");
        if !path.exists() {
            eprintln!("redis-server not installed: skipping (scripts/test.sh installs it)");
            return None;
        }
        let port = free_port();
        // A directory of its own (unless `extra` names one): a replica
        // saves what it receives as dump.rdb there, and any redis-server
        // loads a dump.rdb it finds in its directory at start.
        let dir = temp_dir("redis");
        // No memory test in a crash report: it walks the process's maps
        // while other threads unmap, and then dies by SIGSEGV itself.
        let mut args: Vec<String> = ["--port", &port.to_string(), "--save", "", "--appendonly", "no", "--crash-memcheck-enabled", "no"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(["--dir".to_string(), dir.display().to_string()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut server = Server::spawn_to(path, args, port, env, server_log(port));
        server.dir = Some(dir);
        Some(server)
    }

    /// Starts `path` with exactly `args`, expecting it to listen on `port`.
    pub fn spawn_with(path: PathBuf, args: Vec<String>, port: u16) -> Server {
        Server::spawn(path, args, port)
    }

    fn spawn(path: PathBuf, args: Vec<String>, port: u16) -> Server {
        Server::spawn_to(path, args, port, &[], server_log(port))
    }

    fn spawn_to(path: PathBuf, args: Vec<String>, port: u16, env: &[(&str, &str)], log: Stdio) -> Server {
        let child = Command::new(path)
            .args(&args)
            .envs(env.iter().copied())
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn server");
        let mut server = Server { port, child, dir: None };
        let deadline = Instant::now() + Duration::from_secs(10);
        // Listening is not enough: the port must be answered by this very
        // process (its INFO process_id), not by another test's server.
        let pid = server.child.id().to_string();
        let password = args.iter().position(|a| a == "--requirepass").and_then(|i| args.get(i + 1));
        let password = password.map(String::as_str);
        loop {
            assert!(server.alive(), "server on port {port} exited at start (port taken?)");
            assert!(Instant::now() < deadline, "server did not start on port {port}");
            // A connection that fails or is reset (the port briefly held by
            // a process on its way out) is retried until the deadline.
            if let Some(info) = try_info(port, password, "server") {
                let Frame::Bulk(text) = info else { panic!("INFO server on port {port}: {info:?}") };
                let text = String::from_utf8_lossy(&text);
                let answered_by = text.lines().find_map(|l| l.strip_prefix("process_id:")).unwrap_or("");
                assert_eq!(answered_by.trim(), pid, "port {port} is answered by another process");
                // Serving starts before the journal is replayed (others
                // get -LOADING meanwhile): wait for the data.
                let loading = || match try_info(port, password, "persistence") {
                    Some(Frame::Bulk(t)) => String::from_utf8_lossy(&t).contains("loading:1"),
                    _ => true,
                };
                while loading() {
                    assert!(server.alive(), "server on port {port} exited while loading");
                    assert!(Instant::now() < deadline, "server on port {port} still loading");
                    std::thread::sleep(Duration::from_millis(5));
                }
                return server;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(log_path(self.port)).unwrap_or_default()
    }

    /// A Keel replica of this server (Keel's durable defaults), once its
    /// link is up.
    pub fn start_replica(&self) -> Server {
        let replica = Server::start(&["--replicaof", "127.0.0.1", &self.port.to_string()]);
        replica.wait_link_up();
        replica
    }

    /// Sends the process a signal, as kill(1) names it (`-STOP`, `-CONT`, `-TERM`).
    pub fn signal(&self, sig: &str) {
        let status = std::process::Command::new("kill").args([sig, &self.pid().to_string()]).status().expect("kill");
        assert!(status.success(), "kill {sig}");
    }

    /// Waits until this replica's link to its master is up.
    pub fn wait_link_up(&self) {
        let mut c = self.client();
        wait_for("the replica's link", || c.info_field("replication", "master_link_status") == "up");
    }

    pub fn client(&self) -> Client {
        Client::connect(self.port)
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// How the process ended, once it has.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A raw RESP connection.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(port: u16) -> Client {
        Client::connect_to(std::net::Ipv4Addr::LOCALHOST.into(), port)
    }

    /// Connects to `ip:port` (a server bound to more than loopback).
    pub fn connect_to(ip: std::net::IpAddr, port: u16) -> Client {
        let stream = TcpStream::connect((ip, port)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        stream.set_nodelay(true).expect("nodelay");
        Client { stream, buf: Vec::new() }
    }

    /// Sends one command as a multibulk and reads its reply.
    pub fn send<A: AsRef<[u8]>>(&mut self, argv: &[A]) -> Frame {
        self.write_command(argv);
        self.read()
    }

    /// Shorthand for `send` with string arguments split on spaces.
    pub fn cmd(&mut self, line: &str) -> Frame {
        let argv: Vec<&str> = line.split_whitespace().collect();
        self.send(&argv)
    }

    pub fn write_command<A: AsRef<[u8]>>(&mut self, argv: &[A]) {
        self.write_raw(&encode(argv));
    }

    pub fn write_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Like `send`, but None when the connection fails (crash tests).
    pub fn try_send<A: AsRef<[u8]>>(&mut self, argv: &[A]) -> Option<Frame> {
        self.stream.write_all(&encode(argv)).ok()?;
        self.try_read()
    }

    /// Like `read`, but None when the connection fails (crash tests).
    pub fn try_read(&mut self) -> Option<Frame> {
        loop {
            if let Ok(Some((frame, used))) = keel_protocol::frame::parse_frame(&self.buf) {
                self.buf.drain(..used);
                return Some(frame);
            }
            match self.fill() {
                Ok(n) if n > 0 => {}
                _ => return None,
            }
        }
    }

    /// Reads what the server sent into the buffer: the count of bytes, 0
    /// when the connection is closed. A read a signal interrupts is tried
    /// again: a socket with a read timeout sees EINTR when the whole test
    /// process is stopped and resumed, as a loaded host may do.
    fn fill(&mut self) -> std::io::Result<usize> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One field of `INFO section`, as text ("" when absent).
    pub fn info_field(&mut self, section: &str, field: &str) -> String {
        let Frame::Bulk(text) = self.send(&["INFO", section]) else { panic!("INFO is a bulk string") };
        let text = String::from_utf8_lossy(&text);
        let prefix = format!("{field}:");
        text.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_default().trim().to_string()
    }

    /// Waits until INFO counts `n` connected clients: a connection closed
    /// just before (the start-up probe's) is reaped a moment later.
    pub fn wait_connected_clients(&mut self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.info_field("clients", "connected_clients") != n.to_string() {
            assert!(Instant::now() < deadline, "connected_clients never became {n}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Reads one reply frame.
    pub fn read(&mut self) -> Frame {
        loop {
            if let Some((frame, used)) = keel_protocol::frame::parse_frame(&self.buf).expect("valid reply") {
                self.buf.drain(..used);
                return frame;
            }
            let n = self.fill().expect("read");
            assert!(n > 0, "connection closed while waiting for a reply");
        }
    }

    /// Reads until the server closes the connection; returns what came.
    pub fn read_to_close(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        let _ = self.stream.read_to_end(&mut out);
        out
    }
}

pub fn encode<A: AsRef<[u8]>>(argv: &[A]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", argv.len()).into_bytes();
    for a in argv {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Frame constructors for expectations.
pub fn bulk(s: &str) -> Frame {
    Frame::Bulk(s.as_bytes().to_vec())
}

pub fn simple(s: &str) -> Frame {
    Frame::Simple(s.as_bytes().to_vec())
}

pub fn int(i: i64) -> Frame {
    Frame::Integer(i)
}

pub fn err(s: &str) -> Frame {
    Frame::Error(s.as_bytes().to_vec())
}

pub fn ok() -> Frame {
    simple("OK")
}

/// A frame's debug form with every `Bulk([104, 105])`-like byte list
/// shown as the string it holds: `Bulk("hi")`.
pub fn readable(debug: &str) -> String {
    let mut out = String::new();
    let mut rest = debug;
    while let Some(at) = rest.find("([") {
        let (head, tail) = rest.split_at(at);
        out.push_str(head);
        let Some(end) = tail.find("])") else { break };
        let inner = &tail[2..end];
        let is_bytes = ["Bulk", "Error", "Simple", "Double", "BigNumber"].iter().any(|k| head.ends_with(k));
        let bytes: Option<Vec<u8>> = match (is_bytes, inner.is_empty()) {
            (false, _) => None,
            (true, true) => Some(Vec::new()),
            (true, false) => inner.split(", ").map(|n| n.parse().ok()).collect(),
        };
        match bytes {
            Some(bytes) => {
                out.push_str(&format!("({:?})", String::from_utf8_lossy(&bytes)));
                rest = &tail[end + 2..];
            }
            None => {
                out.push_str("([");
                rest = &tail[2..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Copies `from`'s files, and its subdirectories' (the AOF directory), to `to`.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            copy_dir(&path, &to.join(entry.file_name()));
        } else {
            // A file the crash left half-made may go meanwhile: not needed.
            let _ = std::fs::copy(&path, to.join(entry.file_name()));
        }
    }
}

/// An address of this machine that is not loopback, if it has one.
pub fn outside_address() -> Option<std::net::IpAddr> {
    // No packet is sent: connecting a UDP socket only picks the route.
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}
