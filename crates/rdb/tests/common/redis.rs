//! A real `redis-server` for interop tests, with a binary-safe RESP client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use keel_rdb::RdbValue;
pub use keel_testkit::free_port;

/// Whether `bin` runs (`bin --version`).
pub fn have(bin: &str) -> bool {
    Command::new(bin).arg("--version").output().is_ok_and(|o| o.status.success())
}

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

pub struct Redis {
    child: Child,
    conn: BufReader<TcpStream>,
}

impl Redis {
    /// Starts `redis-server` with its files in `dir`, no automatic saves,
    /// no AOF, and `extra` arguments (e.g. `--dbfilename x.rdb`).
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
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        // Ready once this very process answers PING without -LOADING. A
        // connection that fails or is reset (a port briefly held by a
        // process on its way out) is retried until the deadline.
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("redis-server exited at startup: {status}");
            }
            assert!(Instant::now() < deadline, "redis-server did not start on port {port}");
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
                stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
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
        self.conn.get_mut().write_all(&req).unwrap();
        self.read_reply()
    }

    /// A command that must succeed with `+OK`.
    pub fn ok(&mut self, argv: &[&[u8]]) {
        assert_eq!(self.cmd(argv), Reply::Status("OK".into()), "{:?}", String::from_utf8_lossy(&argv.concat()));
    }

    fn read_reply(&mut self) -> Reply {
        let mut line = Vec::new();
        self.conn.read_until(b'\n', &mut line).unwrap();
        assert!(line.ends_with(b"\r\n"), "bad reply line {line:?}");
        let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
        match line[0] {
            b'+' => Reply::Status(text),
            b'-' => Reply::Error(text),
            b':' => Reply::Int(text.parse().unwrap()),
            b'$' => {
                let n: i64 = text.parse().unwrap();
                if n < 0 {
                    return Reply::Nil;
                }
                let mut buf = vec![0u8; n as usize + 2];
                self.conn.read_exact(&mut buf).unwrap();
                buf.truncate(n as usize);
                Reply::Bulk(buf)
            }
            b'*' => {
                let n: i64 = text.parse().unwrap();
                if n < 0 {
                    return Reply::Nil;
                }
                Reply::Array((0..n).map(|_| self.read_reply()).collect())
            }
            other => panic!("unknown reply type {other}"),
        }
    }

    pub fn select(&mut self, db: u64) {
        self.ok(&[b"SELECT", db.to_string().as_bytes()]);
    }

    /// Stores `value` at `key` in the selected database (replacing it).
    pub fn store(&mut self, key: &[u8], value: &RdbValue) {
        self.cmd(&[b"DEL", key]);
        match value {
            RdbValue::String(s) => self.ok(&[b"SET", key, s]),
            RdbValue::List(items) => {
                for chunk in items.chunks(100) {
                    let mut argv: Vec<&[u8]> = vec![b"RPUSH", key];
                    argv.extend(chunk.iter().map(Vec::as_slice));
                    self.cmd(&argv).int();
                }
            }
            RdbValue::Set(members) => {
                for chunk in members.chunks(100) {
                    let mut argv: Vec<&[u8]> = vec![b"SADD", key];
                    argv.extend(chunk.iter().map(Vec::as_slice));
                    self.cmd(&argv).int();
                }
            }
            RdbValue::Hash(pairs) => {
                for chunk in pairs.chunks(100) {
                    let mut argv: Vec<&[u8]> = vec![b"HSET", key];
                    for (f, v) in chunk {
                        argv.push(f);
                        argv.push(v);
                    }
                    self.cmd(&argv).int();
                }
            }
            RdbValue::ZSet(pairs) => {
                for chunk in pairs.chunks(100) {
                    let scores: Vec<Vec<u8>> = chunk.iter().map(|(_, s)| score_arg(*s)).collect();
                    let mut argv: Vec<&[u8]> = vec![b"ZADD", key];
                    for ((m, _), s) in chunk.iter().zip(&scores) {
                        argv.push(s);
                        argv.push(m);
                    }
                    self.cmd(&argv).int();
                }
            }
            // Streams carry Redis's own nodes: the tests hand them to Redis
            // in files, never through commands.
            RdbValue::Stream(_) => panic!("streams are stored through RDB files"),
        }
    }

    /// The value at `key` in the selected database, read with the commands
    /// of its type.
    pub fn fetch(&mut self, key: &[u8]) -> Option<RdbValue> {
        let t = self.cmd(&[b"TYPE", key]).status();
        let all = |r: Reply| -> Vec<Vec<u8>> { r.array().into_iter().map(Reply::bulk).collect() };
        Some(match t.as_str() {
            "none" => return None,
            "string" => RdbValue::String(self.cmd(&[b"GET", key]).bulk()),
            "list" => RdbValue::List(all(self.cmd(&[b"LRANGE", key, b"0", b"-1"]))),
            "set" => RdbValue::Set(all(self.cmd(&[b"SMEMBERS", key]))),
            "hash" => {
                let flat = all(self.cmd(&[b"HGETALL", key]));
                RdbValue::Hash(flat.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect())
            }
            "zset" => {
                let flat = all(self.cmd(&[b"ZRANGE", key, b"0", b"-1", b"WITHSCORES"]));
                RdbValue::ZSet(
                    flat.chunks(2)
                        .map(|p| (p[0].clone(), std::str::from_utf8(&p[1]).unwrap().parse::<f64>().unwrap()))
                        .collect(),
                )
            }
            other => panic!("unexpected type {other}"),
        })
    }

    /// The key's expiry in Unix milliseconds (`PEXPIRETIME`).
    pub fn expire_at_ms(&mut self, key: &[u8]) -> Option<u64> {
        let t = self.cmd(&[b"PEXPIRETIME", key]).int();
        u64::try_from(t).ok()
    }

    /// Every key of the selected database.
    pub fn keys(&mut self) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self.cmd(&[b"KEYS", b"*"]).array().into_iter().map(Reply::bulk).collect();
        keys.sort();
        keys
    }

    pub fn encoding(&mut self, key: &[u8]) -> String {
        String::from_utf8(self.cmd(&[b"OBJECT", b"ENCODING", key]).bulk()).unwrap()
    }

    pub fn shutdown(mut self) {
        let _ = self.conn.get_mut().write_all(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
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

/// A score as a command argument that Redis parses back to the same bits.
pub fn score_arg(s: f64) -> Vec<u8> {
    if s.is_infinite() {
        return if s > 0.0 { b"inf".to_vec() } else { b"-inf".to_vec() };
    }
    if s == 0.0 && s.is_sign_negative() {
        return b"-0".to_vec();
    }
    format!("{s:?}").into_bytes()
}
