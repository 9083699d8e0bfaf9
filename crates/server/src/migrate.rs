//! MIGRATE's side of the wire: the connections to target instances and
//! the exchange of one MIGRATE over them (the command itself, which reads
//! and deletes the keys, is in `command/dump.rs`).
//!
//! As Redis's `migrateGetSocket`: one connection per `host:port` (the
//! arguments as written), kept after a successful exchange for the next
//! MIGRATE to the same target, with the database it last selected there
//! so that SELECT goes only when the database changes. A connection is
//! closed on any I/O error, after [`CACHE_TTL`] unused (worker 0's cron:
//! [`Cache::close_idle`]), and when a new target needs a place among the
//! [`CACHE_ITEMS_MAX`] kept. Every step is blocking and bounded by the
//! command's timeout: the connect, each write of at most 64 KB, each reply
//! line read. The replies are Redis's, quirks included: a connection
//! refused or timed out is reported as a failed write (Redis's blocking
//! connect returns success either way and its first write fails), and
//! only a host that resolves to nothing as a failure to connect. Under
//! `tls-cluster` the connection speaks TLS, as Redis's does; the
//! handshake is bounded by the timeout too.
//!
//! A MIGRATE takes its target's connection out of the cache while it uses
//! it, so two workers migrating to one target at once never interleave on
//! one socket: the second connects anew, and the one put back last is
//! closed if the cache has one for that target already.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::link::Link;

/// Redis's `MIGRATE_SOCKET_CACHE_ITEMS`.
pub const CACHE_ITEMS_MAX: usize = 64;
/// Redis's `MIGRATE_SOCKET_CACHE_TTL`: a connection unused for longer is
/// closed.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// Redis writes the request in pieces of this size, each bounded by the
/// timeout, so that a big payload to a slow target is not cut short.
const WRITE_CHUNK_BYTES: usize = 64 * 1024;
/// A reply line longer than this is no reply to AUTH, SELECT or RESTORE:
/// the exchange fails as an I/O error rather than buffer without bound.
const LINE_BYTES_MAX: usize = 64 * 1024;

/// `last_db` of a connection whose database is unknown. It is Redis's -1,
/// which a MIGRATE to database -1 takes as already selected (so sends no
/// SELECT, and the target answers for the database it has), as Redis does.
const NO_DB: i64 = -1;

/// A connection to a target instance.
pub struct Target {
    stream: Link,
    /// Bytes read past the last line (replies arrive together).
    rbuf: Vec<u8>,
    /// The database the last successful MIGRATE selected (Redis's
    /// `last_dbid`), or [`NO_DB`].
    last_db: i64,
    last_use: Instant,
}

/// The cached connections, by `host:port`.
#[derive(Default)]
pub struct Cache {
    targets: Mutex<HashMap<Vec<u8>, Target>>,
}

impl Cache {
    /// INFO's `migrate_cached_sockets` (connections in use by a running
    /// MIGRATE are not counted).
    pub fn len(&self) -> usize {
        self.targets.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes the connections unused for longer than [`CACHE_TTL`]
    /// (Redis's `migrateCloseTimedoutSockets`).
    pub fn close_idle(&self) {
        self.targets.lock().retain(|_, t| t.last_use.elapsed() <= CACHE_TTL);
    }

    fn take(&self, name: &[u8]) -> Option<Target> {
        self.targets.lock().remove(name)
    }

    fn put(&self, name: Vec<u8>, mut target: Target) {
        target.last_use = Instant::now();
        let mut targets = self.targets.lock();
        if targets.contains_key(&name) {
            return;
        }
        if targets.len() >= CACHE_ITEMS_MAX {
            // Redis drops one at random; a HashMap's first is as good.
            if let Some(victim) = targets.keys().next().cloned() {
                targets.remove(&victim);
            }
        }
        targets.insert(name, target);
    }
}

/// What the client is told when the exchange failed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoFailure {
    Connect,
    Write,
    Read,
}

impl IoFailure {
    /// Redis's texts, word for word.
    pub fn reply(self) -> &'static str {
        match self {
            IoFailure::Connect => "IOERR error or timeout connecting to the client",
            IoFailure::Write => "IOERR error or timeout writing to target instance",
            IoFailure::Read => "IOERR error or timeout reading to target instance",
        }
    }
}

/// One MIGRATE's request, apart from what depends on the connection.
pub struct Request<'a> {
    pub host: &'a [u8],
    pub port: &'a [u8],
    pub timeout: Duration,
    /// AUTH's arguments: the password, after the user name for AUTH2.
    pub auth: Option<(Option<&'a [u8]>, &'a [u8])>,
    pub db: i64,
    /// The RESTORE commands, encoded, one per key.
    pub restores: &'a [u8],
    pub count: usize,
    /// Under `tls-cluster`: what the TLS connection starts from.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// How the exchange went.
#[derive(Debug, Default)]
pub struct Outcome {
    /// For each RESTORE whose reply was read: whether the target took it
    /// (it and the AUTH and SELECT before it answered no error).
    pub acked: Vec<bool>,
    /// The first error the target answered, without its `-`.
    pub target_error: Option<String>,
    /// Set when the exchange failed on the wire and the client is told so
    /// (not when the target's error is the reply).
    pub io_failure: Option<IoFailure>,
}

/// Runs `request` against its target as Redis's `migrateCommand` does,
/// retrying once on a fresh connection when the cached one failed before
/// any RESTORE was answered, unless by a timeout (a cached connection the
/// target closed is common; a target too slow is not helped by another).
pub fn exchange(cache: &Cache, request: &Request<'_>) -> Outcome {
    let mut name = request.host.to_vec();
    name.push(b':');
    name.extend_from_slice(request.port);
    let mut may_retry = true;
    loop {
        let mut target = match cache.take(&name) {
            Some(target) => target,
            None => match connect(request.host, request.port, request.timeout, request.tls.as_ref()) {
                Ok(target) => target,
                Err(Unreachable::Unresolved) => {
                    return Outcome { io_failure: Some(IoFailure::Connect), ..Default::default() };
                }
                // Redis's blocking connect reports success once the
                // socket is writable or the time is up, refused or not:
                // the write that follows fails, and that is the reply.
                Err(Unreachable::Failed(e)) if may_retry && !is_timeout(&e) => {
                    may_retry = false;
                    continue;
                }
                Err(Unreachable::Failed(_)) => {
                    return Outcome { io_failure: Some(IoFailure::Write), ..Default::default() };
                }
            },
        };
        match attempt(&mut target, request) {
            Attempt::Done(outcome) => {
                cache.put(name, target);
                return outcome;
            }
            // The failed connection is dropped (closed) either way.
            Attempt::Failed { timed_out: false, .. } if may_retry => may_retry = false,
            Attempt::Failed { failure, .. } => {
                return Outcome { io_failure: Some(failure), ..Default::default() };
            }
            Attempt::Partial(outcome) => return outcome,
        }
    }
}

enum Attempt {
    /// Every reply read: the connection goes back to the cache.
    Done(Outcome),
    /// Nothing answered: may be retried.
    Failed { failure: IoFailure, timed_out: bool },
    /// Some RESTOREs answered, then the wire failed: never retried.
    Partial(Outcome),
}

fn attempt(target: &mut Target, request: &Request<'_>) -> Attempt {
    let mut out = Vec::with_capacity(request.restores.len() + 64);
    if let Some((user, password)) = request.auth {
        let mut argv: Vec<&[u8]> = vec![b"AUTH"];
        argv.extend(user);
        argv.push(password);
        keel_journal::encode_command(&mut out, &argv);
    }
    let select = target.last_db != request.db;
    if select {
        keel_journal::encode_command(&mut out, &[b"SELECT".as_slice(), request.db.to_string().as_bytes()]);
    }
    out.extend_from_slice(request.restores);
    for chunk in out.chunks(WRITE_CHUNK_BYTES) {
        if let Err(e) = target.write_chunk(chunk, request.timeout) {
            return Attempt::Failed { failure: IoFailure::Write, timed_out: is_timeout(&e) };
        }
    }
    let read = |target: &mut Target| target.read_line(request.timeout);
    let auth_reply = match request.auth {
        Some(_) => match read(target) {
            Ok(line) => Some(line),
            Err(e) => return Attempt::Failed { failure: IoFailure::Read, timed_out: is_timeout(&e) },
        },
        None => None,
    };
    let select_reply = match select {
        true => match read(target) {
            Ok(line) => Some(line),
            Err(e) => return Attempt::Failed { failure: IoFailure::Read, timed_out: is_timeout(&e) },
        },
        false => None,
    };
    // Redis reports the AUTH error, else SELECT's, else the RESTORE's,
    // and an AUTH or SELECT error fails every key.
    let is_error = |line: &Option<Vec<u8>>| line.as_ref().is_some_and(|l| l.first() == Some(&b'-'));
    let preamble_error = [&auth_reply, &select_reply].into_iter().find(|l| is_error(l)).cloned().flatten();
    let mut outcome = Outcome::default();
    for j in 0..request.count {
        let line = match read(target) {
            Ok(line) => line,
            Err(e) if j == 0 => {
                return Attempt::Failed { failure: IoFailure::Read, timed_out: is_timeout(&e) };
            }
            Err(_) => {
                if outcome.target_error.is_none() {
                    outcome.io_failure = Some(IoFailure::Read);
                }
                return Attempt::Partial(outcome);
            }
        };
        let error = preamble_error.as_ref().or((line.first() == Some(&b'-')).then_some(&line));
        if let Some(error) = error {
            if outcome.target_error.is_none() {
                outcome.target_error = Some(String::from_utf8_lossy(&error[1..]).into_owned());
            }
            target.last_db = NO_DB;
        }
        outcome.acked.push(error.is_none());
    }
    if outcome.target_error.is_none() {
        target.last_db = request.db;
    }
    Attempt::Done(outcome)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// Why no connection was made.
enum Unreachable {
    /// The host has no address (Redis's `anetTcpNonBlockConnect` fails).
    Unresolved,
    Failed(io::Error),
}

/// Connects within `timeout` to the first address `host` resolves to
/// that accepts, and runs the TLS handshake within `timeout` again if
/// `tls` is given. The port is read as C's `atoi` reads it and cut to 16
/// bits, as Redis's resolver gets it.
fn connect(host: &[u8], port: &[u8], timeout: Duration, tls: Option<&Arc<rustls::ClientConfig>>) -> Result<Target, Unreachable> {
    let host = std::str::from_utf8(host).map_err(|_| Unreachable::Unresolved)?;
    let addrs: Vec<_> = match (host, atoi(port) as u16).to_socket_addrs() {
        Ok(addrs) => addrs.collect(),
        Err(_) => return Err(Unreachable::Unresolved),
    };
    let mut last = Unreachable::Unresolved;
    for addr in addrs {
        let connected = TcpStream::connect_timeout(&addr, timeout).and_then(|s| s.set_nodelay(true).map(|()| s));
        match connected.and_then(|stream| secure(stream, addr, timeout, tls)) {
            Ok(stream) => return Ok(Target { stream, rbuf: Vec::new(), last_db: NO_DB, last_use: Instant::now() }),
            Err(e) => last = Unreachable::Failed(e),
        }
    }
    Err(last)
}

/// The connection as a [`Link`]: over TLS if `tls` is given (the target's
/// certificate chain checked, not its name, as `crate::tls` says).
fn secure(stream: TcpStream, addr: std::net::SocketAddr, timeout: Duration, tls: Option<&Arc<rustls::ClientConfig>>) -> io::Result<Link> {
    let Some(config) = tls else { return Ok(Link::Tcp(stream)) };
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let name = rustls_pki_types::ServerName::from(addr.ip());
    let session = rustls::ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
    let tls = keel_tls::BlockingTls::handshake(stream, session.into(), Instant::now() + timeout)?;
    Ok(Link::Tls(Arc::new(tls)))
}

/// C's `atoi`: optional blanks and sign, then digits; 0 for none.
fn atoi(s: &[u8]) -> i64 {
    let s = s.trim_ascii_start();
    let (negative, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut n: i64 = 0;
    for &d in digits.iter().take_while(|d| d.is_ascii_digit()) {
        n = n.saturating_mul(10).saturating_add(i64::from(d - b'0'));
    }
    if negative {
        -n
    } else {
        n
    }
}

impl Target {
    fn write_chunk(&mut self, chunk: &[u8], timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut written = 0;
        while written < chunk.len() {
            self.stream.set_write_timeout(remaining(deadline)?)?;
            match (&self.stream).write(&chunk[written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The next reply line, without its CRLF, read within `timeout`.
    fn read_line(&mut self, timeout: Duration) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(end) = self.rbuf.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.rbuf.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(line);
            }
            if self.rbuf.len() > LINE_BYTES_MAX {
                return Err(io::ErrorKind::InvalidData.into());
            }
            self.stream.set_read_timeout(remaining(deadline)?)?;
            let mut buf = [0u8; 4096];
            match (&self.stream).read(&mut buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.rbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// The time left until `deadline`; a timeout error once it passed (a zero
/// socket timeout would mean none).
fn remaining(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::ErrorKind::TimedOut.into());
    }
    Ok(left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atoi_reads_as_c_does() {
        assert_eq!(atoi(b"6379"), 6379);
        assert_eq!(atoi(b" 6379x"), 6379);
        assert_eq!(atoi(b"-1"), -1);
        assert_eq!(atoi(b"abc"), 0);
        assert_eq!(atoi(b""), 0);
    }

    #[test]
    fn the_cache_keeps_one_per_target_and_at_most_its_bound() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port().to_string();
        let cache = Cache::default();
        let open = || connect(b"127.0.0.1", port.as_bytes(), Duration::from_secs(1), None).ok().expect("connect");
        cache.put(b"a:1".to_vec(), open());
        cache.put(b"a:1".to_vec(), open());
        assert_eq!(cache.len(), 1);
        for i in 0..CACHE_ITEMS_MAX + 3 {
            cache.put(format!("t:{i}").into_bytes(), open());
        }
        assert_eq!(cache.len(), CACHE_ITEMS_MAX);
        assert!(cache.take(b"nothing:0").is_none());
    }
}
