//! A real `redis-server` for the interop tests, and a binary-safe RESP
//! client to talk to it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// Whether `bin` can be started (`bin --version`; redis-check-aof takes
/// that for a file name and fails, so only the start counts).
pub fn have(bin: &str) -> bool {
    Command::new(bin).arg("--version").output().is_ok()
}

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
}

impl Reply {
    pub fn bulk(self) -> Vec<u8> {
        match self {
            Reply::Bulk(b) => b,
            other => panic!("expected a bulk reply, got {other:?}"),
        }
    }

    pub fn array(self) -> Vec<Reply> {
        match self {
            Reply::Array(a) => a,
            other => panic!("expected an array reply, got {other:?}"),
        }
    }

    pub fn int(self) -> i64 {
        match self {
            Reply::Int(i) => i,
            other => panic!("expected an integer reply, got {other:?}"),
        }
    }

    pub fn status(self) -> String {
        match self {
            Reply::Status(s) => s,
            other => panic!("expected a status reply, got {other:?}"),
        }
    }
}

/// Whether `conn` reaches the process `pid`, done loading: PING answered
/// +PONG, and INFO's process_id is `pid`.
fn answered_by(conn: &mut BufReader<TcpStream>, pid: u32) -> std::io::Result<bool> {
    conn.get_mut().write_all(b"*1\r\n$4\r\nPING\r\n")?;
    let mut line = Vec::new();
    conn.read_until(b'\n', &mut line)?;
    if line != b"+PONG\r\n" {
        return Ok(false);
    }
    conn.get_mut().write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")?;
    line.clear();
    conn.read_until(b'\n', &mut line)?;
    let len: usize = String::from_utf8_lossy(line.get(1..line.len().saturating_sub(2)).unwrap_or_default())
        .parse()
        .unwrap_or(0);
    let mut info = vec![0u8; len + 2];
    conn.read_exact(&mut info)?;
    Ok(String::from_utf8_lossy(&info).contains(&format!("process_id:{pid}\r\n")))
}

/// Debian's `redis-server`, killed when dropped.
pub struct Redis {
    child: Child,
    conn: BufReader<TcpStream>,
}

impl Redis {
    /// Starts `redis-server` on a free port with its files in `dir`, no
    /// automatic saves, no AOF, and then `extra` arguments (later ones
    /// win: `--appendonly yes` turns the AOF on); returns once it has
    /// loaded its data.
    pub fn start(dir: &Path, extra: &[&str]) -> Redis {
        let port = free_port();
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let deadline = Instant::now() + Duration::from_secs(20);
        // Ready once this very process answers PING without -LOADING. A
        // connection that fails or is reset (a port briefly held by a
        // process on its way out) is retried until the deadline.
        loop {
            if let Some(status) = child.try_wait().expect("redis-server's status") {
                panic!("redis-server exited at startup: {status}");
            }
            assert!(Instant::now() < deadline, "redis-server did not start on port {port}");
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
                stream.set_read_timeout(Some(Duration::from_secs(30))).expect("a read timeout");
                let mut conn = BufReader::new(stream);
                if answered_by(&mut conn, child.id()).unwrap_or(false) {
                    return Redis { child, conn };
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn cmd(&mut self, argv: &[&[u8]]) -> Reply {
        let mut req = format!("*{}\r\n", argv.len()).into_bytes();
        for a in argv {
            req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            req.extend_from_slice(a);
            req.extend_from_slice(b"\r\n");
        }
        self.conn.get_mut().write_all(&req).expect("send to redis-server");
        self.read_reply()
    }

    /// A command that must succeed with `+OK`.
    pub fn ok(&mut self, argv: &[&[u8]]) {
        assert_eq!(self.cmd(argv), Reply::Status("OK".into()), "{:?}", String::from_utf8_lossy(&argv.concat()));
    }

    pub fn select(&mut self, db: u64) {
        self.ok(&[b"SELECT", db.to_string().as_bytes()]);
    }

    fn read_reply(&mut self) -> Reply {
        let mut line = Vec::new();
        self.conn.read_until(b'\n', &mut line).expect("a reply from redis-server");
        assert!(line.ends_with(b"\r\n"), "bad reply line {line:?}");
        let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
        let length = || text.parse::<i64>().unwrap_or_else(|_| panic!("bad length {text:?}"));
        match line[0] {
            b'+' => Reply::Status(text),
            b'-' => Reply::Error(text),
            b':' => Reply::Int(length()),
            b'$' => match usize::try_from(length()) {
                Err(_) => Reply::Nil,
                Ok(n) => {
                    let mut buf = vec![0u8; n + 2];
                    self.conn.read_exact(&mut buf).expect("a bulk reply's bytes");
                    buf.truncate(n);
                    Reply::Bulk(buf)
                }
            },
            b'*' => match usize::try_from(length()) {
                Err(_) => Reply::Nil,
                Ok(n) => Reply::Array((0..n).map(|_| self.read_reply()).collect()),
            },
            other => panic!("unknown reply type {other}"),
        }
    }

    /// SHUTDOWN (without a save: the AOF, if on, is synced all the same),
    /// then waits for the process to exit.
    pub fn shutdown(mut self) {
        let _ = self.conn.get_mut().write_all(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait().is_ok_and(|status| status.is_some()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not shut down");
    }
}

impl Drop for Redis {
    /// A failing test must not leave a server behind.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
