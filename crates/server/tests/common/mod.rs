//! Helpers for black-box tests: start a real `keel-server` (or Debian's
//! `redis-server`) on a free port and talk raw RESP to it.
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use keel_protocol::frame::Frame;

/// A free TCP port on loopback (bound then released; good enough for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// A server process, killed when dropped.
pub struct Server {
    pub port: u16,
    child: Child,
}

impl Server {
    /// Starts keel-server with `--port P --threads 2` and the given extra flags.
    pub fn start(extra: &[&str]) -> Server {
        let port = free_port();
        let mut args: Vec<String> = vec!["--port".into(), port.to_string(), "--threads".into(), "2".into()];
        args.extend(extra.iter().map(|s| s.to_string()));
        Server::spawn(env!("CARGO_BIN_EXE_keel-server").into(), args, port)
    }

    /// Starts Debian's redis-server, or None if it is not installed.
    pub fn start_redis(extra: &[&str]) -> Option<Server> {
        let path = PathBuf::from("/usr/bin/redis-server");
        if !path.exists() {
            eprintln!("redis-server not installed: skipping (scripts/test.sh installs it)");
            return None;
        }
        let port = free_port();
        let mut args: Vec<String> = ["--port", &port.to_string(), "--save", "", "--appendonly", "no"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        Some(Server::spawn(path, args, port))
    }

    /// Starts `path` with exactly `args`, expecting it to listen on `port`.
    pub fn spawn_with(path: PathBuf, args: Vec<String>, port: u16) -> Server {
        Server::spawn(path, args, port)
    }

    fn spawn(path: PathBuf, args: Vec<String>, port: u16) -> Server {
        let child =
            Command::new(path).args(&args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn server");
        let server = Server { port, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "server did not start on port {port}");
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    pub fn client(&self) -> Client {
        Client::connect(self.port)
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw RESP connection.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
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

    /// Reads one reply frame.
    pub fn read(&mut self) -> Frame {
        loop {
            if let Some((frame, used)) = keel_protocol::frame::parse_frame(&self.buf).expect("valid reply") {
                self.buf.drain(..used);
                return frame;
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "connection closed while waiting for a reply");
            self.buf.extend_from_slice(&chunk[..n]);
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
