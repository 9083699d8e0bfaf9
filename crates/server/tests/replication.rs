//! Replication, Keel as the master: Debian's redis-server 7.0.15 (and raw
//! replication connections) follow a Keel server. Every wait is on a
//! condition (WAIT's count, INFO's fields), never a fixed sleep.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::state::{assert_same, fill_every_type, read_state};
use common::*;

/// Polls `check` every 10 ms until it holds, for at most 20 s.
fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A redis-server replicating from `master`, once its link is up.
fn redis_replica_of(master: &Server, extra: &[&str]) -> Option<Server> {
    let port = master.port.to_string();
    let mut args = vec!["--replicaof", "127.0.0.1", &port];
    args.extend_from_slice(extra);
    let replica = Server::start_redis(&args)?;
    let mut c = replica.client();
    wait_until("the replica's link", || c.info_field("replication", "master_link_status") == "up");
    Some(replica)
}

/// A Keel server (with Keel's durable defaults) replicating from
/// `master`, once its link is up.
fn keel_replica_of(master: &Server) -> Server {
    let port = master.port.to_string();
    let replica = Server::start(&["--replicaof", "127.0.0.1", &port]);
    let mut r = replica.client();
    wait_until("the replica's link", || r.info_field("replication", "master_link_status") == "up");
    replica
}

/// WAIT on `c`'s writes for one replica; panics unless it acknowledged.
fn wait_one(c: &mut Client) {
    assert_eq!(c.cmd("WAIT 1 20000"), int(1), "the replica did not acknowledge");
}

#[test]
fn a_redis_replica_gets_the_dataset_and_every_write_after_it() {
    let master = Server::start(&[]);
    let mut m = master.client();
    fill_every_type(&mut m);
    let Some(replica) = redis_replica_of(&master, &[]) else { return };
    let mut r = replica.client();

    // Writes after the sync, in several databases, a transaction among them.
    m.cmd("SET after 1");
    m.cmd("INCR after");
    m.cmd("DEL smalllist");
    m.cmd("EXPIRE str 100000");
    m.cmd("SELECT 3");
    m.cmd("HSET smallhash f3 v3");
    m.cmd("MULTI");
    m.cmd("LPUSH txlist a b");
    m.cmd("SELECT 15");
    m.cmd("SADD txset x");
    assert_eq!(m.cmd("EXEC"), Frame::Array(vec![int(2), ok(), int(1)]));
    m.cmd("SELECT 0");
    wait_one(&mut m);
    assert_same(&read_state(&mut r), &read_state(&mut m), "replica against master");

    // As Redis shows its replicas.
    let line = m.info_field("replication", "slave0");
    assert!(line.starts_with(&format!("ip=127.0.0.1,port={},state=online,offset=", replica.port)), "{line}");
    let Frame::Array(role) = m.cmd("ROLE") else { panic!("ROLE") };
    assert_eq!(role[0], bulk("master"));
    assert_eq!(role[2], Frame::Array(vec![Frame::Array(vec![bulk("127.0.0.1"), bulk(&replica.port.to_string()), role_offset(&mut m)])]));
    assert_eq!(m.info_field("stats", "sync_full"), "1");
}

/// The offset the one replica acknowledged, as ROLE lists it.
fn role_offset(m: &mut Client) -> Frame {
    let Frame::Array(role) = m.cmd("ROLE") else { panic!("ROLE") };
    let Frame::Array(replicas) = &role[2] else { panic!("ROLE replicas") };
    let Frame::Array(first) = &replicas[0] else { panic!("ROLE replica") };
    first[2].clone()
}

#[test]
fn publish_reaches_replicas_and_not_the_journal() {
    let master = Server::start(&[]);
    let mut m = master.client();
    let mut raw = RawReplica::connect(master.port, false);
    raw.full_sync_with_length();
    // Alone, and inside a transaction: as Redis propagates them.
    assert_eq!(m.cmd("PUBLISH ch hello"), int(0));
    m.cmd("MULTI");
    m.cmd("SET k v");
    m.cmd("PUBLISH ch bye");
    m.cmd("EXEC");
    let want: Vec<u8> = [
        encode(&["SELECT", "0"]),
        encode(&["PUBLISH", "ch", "hello"]),
        encode(&["MULTI"]),
        encode(&["SET", "k", "v"]),
        encode(&["PUBLISH", "ch", "bye"]),
        encode(&["EXEC"]),
    ]
    .concat();
    assert_eq!(raw.take(want.len()), want);
    // The journal has the SET alone: no message comes back after a restart.
    let dir = master.dir.clone().expect("dir");
    let incr: Vec<u8> = std::fs::read_dir(dir.join("appendonlydir"))
        .expect("appendonlydir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".incr.aof"))
        .flat_map(|e| std::fs::read(e.path()).expect("incr file"))
        .collect();
    assert!(incr.windows(3).any(|w| w == b"SET"), "the SET is journaled");
    assert!(!incr.windows(7).any(|w| w.eq_ignore_ascii_case(b"PUBLISH")), "no PUBLISH in the journal");
}

#[test]
fn a_master_without_persistence_streams_too() {
    let master = Server::start(&["--appendonly", "no"]);
    let mut m = master.client();
    m.cmd("SET before 1");
    let Some(replica) = redis_replica_of(&master, &[]) else { return };
    m.cmd("SET after 2");
    m.cmd("MULTI");
    m.cmd("INCR after");
    m.cmd("DEL before");
    m.cmd("EXEC");
    wait_one(&mut m);
    assert_same(&read_state(&mut replica.client()), &read_state(&mut m), "replica against master");
}

#[test]
fn repl_diskless_sync_no_sends_the_rdb_through_a_file() {
    let master = Server::start(&["--repl-diskless-sync", "no"]);
    let mut m = master.client();
    m.cmd("SET k v");
    let Some(replica) = redis_replica_of(&master, &[]) else { return };
    assert_eq!(replica.client().cmd("GET k"), bulk("v"));
    // A replica that takes `$EOF:` gets the RDB with its length all the same.
    let mut raw = RawReplica::connect(master.port, true);
    raw.send(&["PSYNC", "?", "-1"]);
    assert!(raw.line().starts_with("+FULLRESYNC "));
    let len = raw.line();
    assert!(len.starts_with('$') && len[1..].parse::<usize>().is_ok(), "{len}");
    assert_eq!(m.cmd("CONFIG GET repl-diskless-sync"), Frame::Array(vec![bulk("repl-diskless-sync"), bulk("no")]));
}

#[test]
fn a_dropped_link_resumes_from_the_backlog() {
    let master = Server::start(&[]);
    let mut m = master.client();
    m.cmd("SET before 1");
    let Some(replica) = redis_replica_of(&master, &[]) else { return };
    let mut r = replica.client();
    // The replica drops its link to the master; it asks to go on from its
    // offset, which the backlog still holds.
    assert_eq!(r.cmd("CLIENT KILL TYPE master"), int(1));
    m.cmd("SET during 2");
    wait_until("a partial resync", || m.info_field("stats", "sync_partial_ok") == "1");
    m.cmd("SET after 3");
    wait_one(&mut m);
    assert_eq!(r.cmd("MGET before during after"), Frame::Array(vec![bulk("1"), bulk("2"), bulk("3")]));
    assert_eq!(m.info_field("stats", "sync_full"), "1");
}

#[test]
fn a_full_sync_under_writes_misses_none_of_them() {
    // Each key slowed on its way into the snapshot, so that the sync
    // lasts while writes go on.
    let master = Server::start(&["--rdb-key-save-delay", "20"]);
    let mut m = master.client();
    for chunk in 0..4 {
        let mut cmd = vec!["MSET".to_string()];
        for i in 0..500 {
            cmd.push(format!("k{}", chunk * 500 + i));
            cmd.push(format!("v{i}"));
        }
        m.send(&cmd);
    }
    // A writer that goes on until told, then WAITs for its writes.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (port, done, stop) = (master.port, done.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut w = Client::connect(port);
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                w.send(&["SET", &format!("k{}", i * 7 % 2000), &format!("w{i}")]);
                w.send(&["INCR", "counter"]);
                w.send(&["RPUSH", "log", &i.to_string()]);
                if i.is_multiple_of(100) {
                    w.send(&["DEL", &format!("k{}", i / 2 % 2000)]);
                }
                i += 1;
                done.store(i, std::sync::atomic::Ordering::Relaxed);
            }
            assert_eq!(w.cmd("WAIT 1 30000"), int(1));
            i
        })
    };
    let count = || done.load(std::sync::atomic::Ordering::Relaxed);
    wait_until("the writer's first writes", || count() > 0);
    let before_sync = count();
    let replica = redis_replica_of(&master, &[]);
    let after_sync = count();
    wait_until("writes after the sync", || count() > after_sync + 200);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.join().expect("writer");
    let Some(replica) = replica else { return };
    assert!(after_sync > before_sync, "no write came during the sync");
    let mut r = replica.client();
    assert_eq!(r.cmd("GET counter"), bulk(&written.to_string()));
    assert_same(&read_state(&mut r), &read_state(&mut m), "replica against master");
}

#[test]
fn wait_counts_the_replicas_that_acknowledged() {
    let master = Server::start(&[]);
    let mut m = master.client();
    // No replica: nobody acknowledges, and WAIT says so when it times out.
    m.cmd("SET a 1");
    assert_eq!(m.cmd("WAIT 1 50"), int(0));
    assert_eq!(m.cmd("WAIT 0 0"), int(0));
    assert_eq!(m.cmd("WAIT x 0"), err("ERR value is not an integer or out of range"));
    assert_eq!(m.cmd("WAIT 1 -1"), err("ERR timeout is negative"));
    let Some(_replica) = redis_replica_of(&master, &[]) else { return };
    m.cmd("SET a 2");
    wait_one(&mut m);
    // Two asked for, one there: the count when the timeout passes.
    assert_eq!(m.cmd("WAIT 2 100"), int(1));
    // Inside a transaction WAIT answers at once.
    m.cmd("MULTI");
    m.cmd("WAIT 5 0");
    assert_eq!(m.cmd("EXEC"), Frame::Array(vec![int(1)]));
}

#[test]
fn min_replicas_to_write_counts_acknowledging_replicas() {
    let master = Server::start(&["--min-replicas-to-write", "1", "--min-replicas-max-lag", "10"]);
    let mut m = master.client();
    assert_eq!(m.cmd("SET a 1"), err("NOREPLICAS Not enough good replicas to write."));
    let Some(_replica) = redis_replica_of(&master, &[]) else { return };
    wait_until("a good replica", || m.info_field("replication", "min_slaves_good_slaves") == "1");
    assert_eq!(m.cmd("SET a 1"), ok());
}

/// A raw replication connection: REPLCONF, then PSYNC or SYNC.
struct RawReplica {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RawReplica {
    fn connect(port: u16, capa_eof: bool) -> RawReplica {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
        let mut raw = RawReplica { stream, buf: Vec::new() };
        raw.send(&["REPLCONF", "listening-port", "1234"]);
        assert_eq!(raw.line(), "+OK");
        let capa: &[&str] = if capa_eof { &["REPLCONF", "capa", "eof", "capa", "psync2"] } else { &["REPLCONF", "capa", "psync2"] };
        raw.send(capa);
        assert_eq!(raw.line(), "+OK");
        raw
    }

    /// PSYNC ? -1 answered with `+FULLRESYNC` and an RDB with its length
    /// first (a replica without `capa eof`); returns the master's replid.
    fn full_sync_with_length(&mut self) -> String {
        self.send(&["PSYNC", "?", "-1"]);
        let replid = self.line().split(' ').nth(1).expect("replid").to_string();
        let len: usize = self.line().strip_prefix('$').expect("bulk length").parse().expect("length");
        self.take(len);
        replid
    }

    fn send(&mut self, argv: &[&str]) {
        self.stream.write_all(&encode(argv)).expect("write");
    }

    fn fill(&mut self) {
        let mut piece = [0u8; 65536];
        let n = self.stream.read(&mut piece).expect("read");
        assert!(n > 0, "the master closed the link");
        self.buf.extend_from_slice(&piece[..n]);
    }

    /// The next line, without its CRLF.
    fn line(&mut self) -> String {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                self.buf.drain(..end + 2);
                return line;
            }
            self.fill();
        }
    }

    fn take(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            self.fill();
        }
        self.buf.drain(..n).collect()
    }

    /// The next command of the stream (PINGs passed over), as text.
    fn command(&mut self) -> Vec<String> {
        loop {
            match keel_protocol::frame::parse_frame(&self.buf).expect("a valid stream") {
                Some((frame, used)) => {
                    self.buf.drain(..used);
                    let Frame::Array(args) = frame else { panic!("not a command: {frame:?}") };
                    let args: Vec<String> = args
                        .into_iter()
                        .map(|a| match a {
                            Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
                            other => panic!("not a bulk argument: {other:?}"),
                        })
                        .collect();
                    if !args[0].eq_ignore_ascii_case("ping") {
                        return args;
                    }
                }
                None => self.fill(),
            }
        }
    }

    /// Reads until `want` has come; returns everything read up to its end.
    fn until(&mut self, want: &[u8]) -> Vec<u8> {
        // Where the search resumes: bytes before it cannot start `want`.
        let mut from = 0;
        loop {
            if let Some(at) = self.buf[from..].windows(want.len()).position(|w| w == want) {
                return self.buf.drain(..from + at + want.len()).collect();
            }
            from = self.buf.len().saturating_sub(want.len() - 1);
            self.fill();
        }
    }
}

#[test]
fn a_replica_without_capa_eof_gets_the_rdb_with_its_length_then_the_stream() {
    let master = Server::start(&[]);
    let mut m = master.client();
    m.cmd("SET k v");
    let mut raw = RawReplica::connect(master.port, false);
    raw.send(&["PSYNC", "?", "-1"]);
    let fullresync = raw.line();
    let parts: Vec<&str> = fullresync.split(' ').collect();
    assert_eq!((parts[0], parts[1].len(), parts[2]), ("+FULLRESYNC", 40, "0"), "{fullresync}");
    let len: usize = raw.line().strip_prefix('$').expect("bulk length").parse().expect("length");
    let rdb = raw.take(len);
    assert!(rdb.starts_with(b"REDIS0010"), "an RDB");
    // The stream from the sync's instant on: SELECT first, then the write.
    m.cmd("SET after 1");
    let stream = raw.until(b"after\r\n$1\r\n1\r\n");
    assert_eq!(stream, encode(&["SELECT", "0"]).into_iter().chain(encode(&["SET", "after", "1"])).collect::<Vec<u8>>());
    // Its acknowledgement counts for WAIT.
    raw.send(&["REPLCONF", "ACK", &(stream.len()).to_string()]);
    assert_eq!(m.cmd("WAIT 1 5000"), int(1));
    // The master's replication id came with +FULLRESYNC.
    assert_eq!(m.info_field("replication", "master_replid"), parts[1]);
}

#[test]
fn sync_gets_the_rdb_without_fullresync_and_psync_continues_from_an_offset() {
    let master = Server::start(&[]);
    let mut m = master.client();
    let mut raw = RawReplica::connect(master.port, true);
    raw.send(&["PSYNC", "?", "-1"]);
    let fullresync = raw.line();
    let replid = fullresync.split(' ').nth(1).expect("replid").to_string();
    // Diskless: `$EOF:<mark>`, the RDB, the mark.
    let mark = raw.line().strip_prefix("$EOF:").expect("EOF framing").to_string();
    assert_eq!(mark.len(), 40);
    let rdb = raw.until(mark.as_bytes());
    assert!(rdb.starts_with(b"REDIS0010"));
    // Loaded: the stream follows only once the replica says so.
    raw.send(&["REPLCONF", "ACK", "0"]);
    m.cmd("SET a 1");
    let first = raw.until(b"a\r\n$1\r\n1\r\n");
    drop(raw);
    m.cmd("SET b 2");
    // A new link asks to go on right after what the first one applied.
    let mut again = RawReplica::connect(master.port, true);
    again.send(&["PSYNC", &replid, &(first.len() + 1).to_string()]);
    assert_eq!(again.line(), format!("+CONTINUE {replid}"));
    assert_eq!(again.until(b"b\r\n$1\r\n2\r\n"), encode(&["SET", "b", "2"]));
    // An offset the backlog does not hold, or another history: full sync.
    let mut other = RawReplica::connect(master.port, true);
    other.send(&["PSYNC", &replid, "999999"]);
    assert!(other.line().starts_with("+FULLRESYNC "));
    assert_eq!(m.info_field("stats", "sync_partial_ok"), "1");
    assert_eq!(m.info_field("stats", "sync_partial_err"), "1");
    // The old protocol: SYNC answers with the RDB alone.
    let mut old = RawReplica::connect(master.port, false);
    old.send(&["SYNC"]);
    let len = old.line();
    assert!(len.starts_with('$') && len[1..].parse::<usize>().is_ok(), "{len}");
}

#[test]
fn replconf_refuses_what_redis_refuses() {
    let master = Server::start(&[]);
    let mut m = master.client();
    assert_eq!(m.cmd("REPLCONF listening-port"), err("ERR syntax error"));
    assert_eq!(m.cmd("REPLCONF nope 1"), err("ERR Unrecognized REPLCONF option: nope"));
    assert_eq!(m.cmd("REPLCONF listening-port x"), err("ERR value is not an integer or out of range"));
    assert_eq!(m.cmd("REPLCONF capa eof capa psync2"), ok());
    assert_eq!(m.cmd("PSYNC ? x"), err("ERR value is not an integer or out of range"));
    m.cmd("MULTI");
    assert_eq!(m.cmd("PSYNC ? -1"), err("ERR Command not allowed inside a transaction"));
    assert_eq!(m.cmd("DISCARD"), ok());
    // ACK from a connection that is no replica: no reply at all.
    m.write_command(&["REPLCONF", "ACK", "10"]);
    assert_eq!(m.cmd("PING"), simple("PONG"));
}

#[test]
fn a_keel_replica_follows_a_keel_master() {
    let master = Server::start(&[]);
    let mut m = master.client();
    fill_every_type(&mut m);
    // Both with Keel's durable defaults.
    let replica = keel_replica_of(&master);
    let mut r = replica.client();
    m.cmd("SET after 1");
    m.cmd("MULTI");
    m.cmd("INCR after");
    m.cmd("SELECT 7");
    m.cmd("RPUSH l a b c");
    m.cmd("EXEC");
    m.cmd("SELECT 0");
    m.cmd("EXPIRE int 100000");
    wait_one(&mut m);
    assert_same(&read_state(&mut r), &read_state(&mut m), "Keel replica against Keel master");
    // The replica shows the master's history, applied as far as the master's end.
    assert_eq!(r.info_field("replication", "master_replid"), m.info_field("replication", "master_replid"));
    wait_until("the replica's offset", || {
        r.info_field("replication", "master_repl_offset") == m.info_field("replication", "master_repl_offset")
    });
    let Frame::Array(role) = r.cmd("ROLE") else { panic!("ROLE") };
    assert_eq!(role[..4], [bulk("slave"), bulk("127.0.0.1"), int(master.port as i64), bulk("connected")]);
    // The master's memory counts the replication buffer, as Redis's: all
    // of it in the backlog while it is within repl-backlog-size.
    let mut memory = |field: &str| -> u64 { m.info_field("memory", field).parse().expect("a number") };
    let (backlog, buffers) = (memory("mem_replication_backlog"), memory("mem_total_replication_buffers"));
    assert!(backlog > 0 && backlog == buffers, "{backlog} {buffers}");
    assert_eq!(memory("mem_clients_slaves"), 0);
    assert_eq!(
        r.cmd("WAIT 1 0"),
        err("ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.")
    );
}

#[test]
fn a_keel_replica_leaves_expiry_to_its_master() {
    let master = Server::start(&["--enable-debug-command", "yes"]);
    let mut m = master.client();
    let replica = keel_replica_of(&master);
    let mut r = replica.client();
    // The master keeps its expired key until told to expire keys again.
    assert_eq!(m.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
    m.cmd("SET shortlived v PX 50");
    wait_one(&mut m);
    // Time for the TTL to pass (not for anything to flush).
    std::thread::sleep(Duration::from_millis(300));
    // The replica's cron expires nothing, and its reads see the key as
    // absent without deleting it: its key count holds the key the master
    // has not expired yet.
    assert_eq!(r.cmd("EXISTS shortlived"), int(0));
    assert_eq!(r.cmd("GET shortlived"), Frame::Null);
    assert_eq!(r.cmd("DBSIZE"), int(1));
    // A writable replica's write expires it, and makes a key anew.
    assert_eq!(r.cmd("CONFIG SET replica-read-only no"), ok());
    assert_eq!(r.cmd("INCR shortlived"), int(1));
    assert_eq!(r.cmd("TTL shortlived"), int(-1));
    assert_eq!(r.cmd("DBSIZE"), int(1));
    // The master's expiry reaches the replica as a DEL.
    assert_eq!(m.cmd("DEBUG SET-ACTIVE-EXPIRE 1"), ok());
    wait_until("the master's DEL on the replica", || r.cmd("DBSIZE") == int(0));
}

#[test]
fn client_kill_drops_replication_links_which_resume() {
    let master = Server::start(&[]);
    let mut m = master.client();
    let replica = keel_replica_of(&master);
    let mut r = replica.client();
    m.cmd("SET a 1");
    wait_one(&mut m);
    // From the master's side, then from the replica's: each link comes
    // back with a partial resync.
    assert_eq!(m.cmd("CLIENT KILL TYPE replica"), int(1));
    m.cmd("SET b 2");
    wait_until("a first partial resync", || m.info_field("stats", "sync_partial_ok") == "1");
    wait_one(&mut m);
    assert_eq!(r.cmd("CLIENT KILL TYPE master"), int(1));
    m.cmd("SET c 3");
    wait_until("a second partial resync", || m.info_field("stats", "sync_partial_ok") == "2");
    wait_one(&mut m);
    assert_eq!(r.cmd("MGET a b c"), Frame::Array(vec![bulk("1"), bulk("2"), bulk("3")]));
    assert_eq!(m.info_field("stats", "sync_full"), "1");
    // Nothing of the kind on the other side.
    assert_eq!(r.cmd("CLIENT KILL TYPE replica"), int(0));
    assert_eq!(m.cmd("CLIENT KILL TYPE master"), int(0));
}

/// A replica of `master` that has synced and reads no more.
fn stalled_replica(master: &Server) -> RawReplica {
    let mut raw = RawReplica::connect(master.port, false);
    raw.full_sync_with_length();
    raw
}

/// Writes `mb` values of a megabyte each.
fn write_megabytes(m: &mut Client, mb: usize) {
    let value = "v".repeat(1 << 20);
    for i in 0..mb {
        assert_eq!(m.send(&["SET", &format!("k{i}"), &value]), ok());
    }
}

#[test]
fn a_replica_s_hard_output_limit_is_never_below_repl_backlog_size() {
    // Redis's rule: a partial resync may send `repl-backlog-size` at
    // once, so a smaller hard limit would drop every replica that used one.
    let master = Server::start(&["--appendonly", "no", "--repl-backlog-size", "64mb"]);
    let mut m = master.client();
    assert_eq!(m.send(&["CONFIG", "SET", "client-output-buffer-limit", "replica 1mb 0 0"]), ok());
    let _raw = stalled_replica(&master);
    // More than the loopback socket's buffers hold: tens of megabytes behind.
    write_megabytes(&mut m, 40);
    assert_eq!(m.info_field("replication", "connected_slaves"), "1");
    let held: u64 = m.info_field("memory", "mem_total_replication_buffers").parse().expect("a number");
    assert!(held > 20 << 20, "{held} bytes held for the replica");
    // With the backlog smaller than what the replica lags, the limit is.
    assert_eq!(m.send(&["CONFIG", "SET", "repl-backlog-size", "1mb"]), ok());
    m.cmd("SET one more");
    wait_until("the replica dropped", || m.info_field("replication", "connected_slaves") == "0");
    assert!(master.log().contains("for overcoming of output buffer limits"), "{}", master.log());
    // What was held for it goes back (Redis frees the blocks only it used).
    let held: u64 = m.info_field("memory", "mem_total_replication_buffers").parse().expect("a number");
    assert!(held < 4 << 20, "{held} bytes still held");
}

#[test]
fn a_replica_dropped_past_its_hard_limit_gets_nothing_of_the_write_that_passed_it() {
    // Redis writes nothing more to a replica it will close; one that got
    // the write anyway would resync partially where Redis's resyncs fully.
    let master = Server::start(&["--appendonly", "no", "--repl-backlog-size", "16kb"]);
    let mut m = master.client();
    assert_eq!(m.send(&["CONFIG", "SET", "client-output-buffer-limit", "replica 32kb 0 0"]), ok());
    let mut raw = RawReplica::connect(master.port, false);
    raw.full_sync_with_length();
    m.cmd("SET small 1");
    raw.until(b"small\r\n$1\r\n1\r\n");
    assert_eq!(m.send(&["SET", "big", &"v".repeat(256 << 10)]), ok());
    let mut rest = std::mem::take(&mut raw.buf);
    let deadline = Instant::now() + Duration::from_secs(20);
    raw.stream.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
    let mut piece = [0u8; 65536];
    loop {
        match raw.stream.read(&mut piece) {
            Ok(0) => break,
            Ok(n) => rest.extend_from_slice(&piece[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(_) => assert!(Instant::now() < deadline, "the link is still up"),
        }
    }
    assert!(!rest.windows(3).any(|w| w == b"big"), "the replica got {} bytes of the write", rest.len());
    wait_until("the replica dropped", || m.info_field("replication", "connected_slaves") == "0");
}

#[test]
fn a_replica_past_the_soft_output_limit_for_its_seconds_is_dropped() {
    let master = Server::start(&["--appendonly", "no", "--repl-backlog-size", "1mb"]);
    let mut m = master.client();
    assert_eq!(m.send(&["CONFIG", "SET", "client-output-buffer-limit", "replica 0 1mb 3600"]), ok());
    let _raw = stalled_replica(&master);
    write_megabytes(&mut m, 40);
    // Past the soft limit, but not for an hour: the cron (every 100 ms)
    // keeps it.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(m.info_field("replication", "connected_slaves"), "1");
    // It has been past the limit for more than a second now.
    assert_eq!(m.send(&["CONFIG", "SET", "client-output-buffer-limit", "replica 0 1mb 1"]), ok());
    wait_until("the replica dropped", || m.info_field("replication", "connected_slaves") == "0");
    assert!(master.log().contains("for overcoming of output buffer limits"), "{}", master.log());
}

#[test]
fn a_replica_never_holds_a_write_that_a_crashed_master_lost() {
    // Under `appendfsync always` (Keel's default) a record reaches
    // replicas only once it is on the master's disk: after a kill -9 and
    // a restart, the master holds everything its replica got.
    for cycle in 0..20 {
        let dir = temp_dir("repl-crash");
        let master = Server::start_in(&dir, &[]);
        let Some(replica) = redis_replica_of(&master, &[]) else { return };
        let mut r = replica.client();
        let port = master.port;
        let writer = std::thread::spawn(move || {
            let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) else { return };
            let mut stream = std::io::BufWriter::new(stream);
            // Pipelined, so that many writes are in flight when the kill comes.
            for i in 0.. {
                if stream.write_all(&encode(&["RPUSH", "log", &i.to_string()])).is_err() {
                    return;
                }
                if i % 64 == 63 && stream.flush().is_err() {
                    return;
                }
            }
        });
        let llen = |c: &mut Client| match c.cmd("LLEN log") {
            Frame::Integer(n) => n,
            other => panic!("LLEN: {other:?}"),
        };
        wait_until("writes on the replica", || llen(&mut r) > 500 + 300 * cycle);
        master.kill9();
        let _ = writer.join();
        let got = r.cmd("LRANGE log 0 -1");
        let master = Server::start_last_in(&dir, &[]);
        let mut m = master.client();
        let Frame::Array(got) = got else { panic!("LRANGE") };
        let Frame::Array(kept) = m.cmd("LRANGE log 0 -1") else { panic!("LRANGE") };
        assert!(kept.len() >= got.len(), "cycle {cycle}: the master kept {} entries, its replica had {}", kept.len(), got.len());
        assert_eq!(&kept[..got.len()], &got[..], "cycle {cycle}: the replica's entries are the master's first ones");
    }
}

#[test]
fn a_message_published_on_the_master_reaches_subscribers_of_its_replica() {
    let master = Server::start(&[]);
    let mut m = master.client();
    let replica = keel_replica_of(&master);
    let mut sub = replica.client();
    assert_eq!(sub.cmd("SUBSCRIBE news"), Frame::Array(vec![bulk("subscribe"), bulk("news"), int(1)]));
    m.cmd("PUBLISH news hello");
    assert_eq!(sub.read(), Frame::Array(vec![bulk("message"), bulk("news"), bulk("hello")]));
}

#[test]
fn the_backlog_goes_after_repl_backlog_ttl_without_replicas() {
    let master = Server::start(&["--repl-backlog-ttl", "1"]);
    let mut m = master.client();
    let mut raw = RawReplica::connect(master.port, false);
    let replid = raw.full_sync_with_length();
    m.cmd("SET a 1");
    raw.until(b"a\r\n$1\r\n1\r\n");
    let offset = m.info_field("replication", "master_repl_offset");
    drop(raw);
    wait_until("the backlog freed", || m.info_field("replication", "repl_backlog_active") == "0");
    // A new history, the offset where it was; the old history is gone.
    assert_ne!(m.info_field("replication", "master_replid"), replid);
    assert_eq!(m.info_field("replication", "master_repl_offset"), offset);
    let mut again = RawReplica::connect(master.port, false);
    let next: u64 = offset.parse::<u64>().expect("offset") + 1;
    again.send(&["PSYNC", &replid, &next.to_string()]);
    assert!(again.line().starts_with("+FULLRESYNC "));
    assert_eq!(m.info_field("replication", "repl_backlog_active"), "1");
}

/// `bind-source-addr`: a Keel replica connects to its master from that
/// address (127.0.0.2 is this host's, as all of 127/8), which the master
/// shows as the replica's; as Redis's replica does, shown by Keel's master.
/// (Protected mode would turn away a client from 127.0.0.2: Redis's
/// local clients are 127.0.0.1 and ::1 only.)
#[test]
fn a_replica_connects_from_bind_source_addr() {
    let master = Server::start(&["--protected-mode", "no"]);
    let mut m = master.client();
    let port = master.port.to_string();
    let replica = Server::start(&["--bind-source-addr", "127.0.0.2", "--replicaof", "127.0.0.1", &port]);
    let mut r = replica.client();
    wait_until("the replica's link", || r.info_field("replication", "master_link_status") == "up");
    let line = m.info_field("replication", "slave0");
    assert!(line.starts_with(&format!("ip=127.0.0.2,port={},", replica.port)), "{line}");
    drop(replica);
    if let Some(redis) = redis_replica_of(&master, &["--bind-source-addr", "127.0.0.2"]) {
        wait_until("the first replica's exit", || m.info_field("replication", "connected_slaves") == "1");
        let line = m.info_field("replication", "slave0");
        assert!(line.starts_with(&format!("ip=127.0.0.2,port={},", redis.port)), "{line}");
    }
}

/// The stream carries SET and INCRBYFLOAT as Redis 7.0 sends them: a SET
/// as it came but for GET (KEEPTTL, XX and NX kept) unless it set an
/// expiry, which goes as `SET k v PXAT <ms>` (SETEX too); INCRBYFLOAT as
/// `SET k <value> KEEPTTL`; a SET NX that set nothing, not at all; GETSET
/// as SET; BRPOPLPUSH and BLMOVE as RPOPLPUSH and LMOVE.
/// Compared with redis-server's stream, PXAT's time by its shape.
#[test]
fn the_stream_carries_sets_as_redis_sends_them() {
    let lines = [
        "SET k v",
        "SET k v2 KEEPTTL",
        "SET k v3 XX GET",
        "SET n 1 NX",
        "SET n 2 NX",
        "INCRBYFLOAT f 1.5",
        "INCRBYFLOAT f 1",
        "SET e v EX 100 GET",
        "SETEX e2 100 v",
        "SET p v PXAT 99999999999999",
        "GETSET g v",
        "RPUSH src a b c",
        "BRPOPLPUSH src dst 1",
        "BLMOVE src dst LEFT RIGHT 1",
    ];
    let stream_of = |server: &Server| -> Vec<Vec<String>> {
        let mut raw = RawReplica::connect(server.port, false);
        raw.full_sync_with_length();
        let mut c = server.client();
        for line in lines {
            c.cmd(line);
        }
        c.cmd("SET end 1");
        let mut got = Vec::new();
        loop {
            let mut command = raw.command();
            if command == ["SET", "end", "1"] {
                return got;
            }
            if let Some(at) = command.iter().position(|a| a.eq_ignore_ascii_case("pxat")) {
                if command[at + 1] != "99999999999999" {
                    command[at + 1] = "<ms>".into();
                }
            }
            got.push(command);
        }
    };
    let keel = stream_of(&Server::start(&[]));
    let strings = |cs: &[&[&str]]| -> Vec<Vec<String>> { cs.iter().map(|c| c.iter().map(|a| a.to_string()).collect()).collect() };
    assert_eq!(
        keel[1..5],
        strings(&[&["SET", "k", "v"], &["SET", "k", "v2", "KEEPTTL"], &["SET", "k", "v3", "XX"], &["SET", "n", "1", "NX"]])
    );
    assert_eq!(keel[5], ["SET", "f", "1.5", "KEEPTTL"]);
    if let Some(redis) = Server::start_redis(&[]) {
        let redis = stream_of(&redis);
        let lower = |cs: Vec<Vec<String>>| -> Vec<Vec<String>> {
            cs.into_iter().map(|c| c.into_iter().map(|a| if a == "<ms>" { a } else { a.to_ascii_lowercase() }).collect()).collect()
        };
        assert_eq!(lower(keel), lower(redis));
    }
}

/// A diskless full sync as a raw replica sees it: `+FULLRESYNC`'s replid
/// and offset, the EOF mark, and the RDB before the mark. The newlines
/// that kept the link up before it are passed over.
fn diskless_sync(raw: &mut RawReplica) -> (String, String, Vec<u8>) {
    let line = raw.line();
    let fullresync = line.trim_start_matches('\n');
    let words: Vec<&str> = fullresync.split(' ').collect();
    assert_eq!(words[0], "+FULLRESYNC", "{fullresync}");
    let mark = raw.line().strip_prefix("$EOF:").expect("an EOF mark").to_string();
    let mut rdb = raw.until(mark.as_bytes());
    rdb.truncate(rdb.len() - mark.len());
    assert!(rdb.starts_with(b"REDIS0010"), "an RDB");
    (format!("{} {}", words[1], words[2]), mark, rdb)
}

/// Replicas that ask for a diskless sync close together share one: the
/// same snapshot instant, one RDB, one EOF mark. The first waits
/// `repl-diskless-sync-delay`, unless `repl-diskless-sync-max-replicas`
/// are waiting before; one that comes after the sync began gets one of its
/// own.
#[test]
fn replicas_that_come_together_share_one_diskless_sync() {
    // Started by the second replica: the delay would be a minute.
    let master = Server::start(&["--repl-diskless-sync-delay", "60", "--repl-diskless-sync-max-replicas", "2"]);
    let mut m = master.client();
    assert_eq!(m.cmd("SET k v"), ok());
    let mut first = RawReplica::connect(master.port, true);
    first.send(&["PSYNC", "?", "-1"]);
    wait_until("the first replica waiting", || m.info_field("replication", "slave0").contains("state=wait_bgsave"));
    let mut second = RawReplica::connect(master.port, true);
    second.send(&["PSYNC", "?", "-1"]);
    let one = diskless_sync(&mut first);
    assert_eq!(diskless_sync(&mut second), one, "the same instant, mark and RDB");
    for raw in [&mut first, &mut second] {
        raw.send(&["REPLCONF", "ACK", "0"]);
    }
    // The stream from the shared instant on goes to both.
    assert_eq!(m.cmd("SET after 1"), ok());
    for raw in [&mut first, &mut second] {
        assert_eq!(raw.command(), ["SELECT", "0"]);
        assert_eq!(raw.command(), ["SET", "after", "1"]);
    }

    // With a delay of 2 s and no number, two replicas a moment apart
    // share the sync; it starts no sooner than 2 s after the first, which
    // gets a newline every second meanwhile, as from Redis.
    assert_eq!(m.send(&["CONFIG", "SET", "repl-diskless-sync-delay", "2", "repl-diskless-sync-max-replicas", "0"]), ok());
    let asked = Instant::now();
    let mut third = RawReplica::connect(master.port, true);
    third.send(&["PSYNC", "?", "-1"]);
    let mut fourth = RawReplica::connect(master.port, true);
    fourth.send(&["PSYNC", "?", "-1"]);
    third.fill();
    assert_eq!(third.buf[0], b'\n', "a newline first");
    let shared = diskless_sync(&mut third);
    assert!(asked.elapsed() >= Duration::from_secs(2), "the sync waited the delay");
    assert_eq!(diskless_sync(&mut fourth), shared);
    assert_ne!(shared.1, one.1, "a new sync, with a mark of its own");
}

/// A replica whose socket fails during a shared sync is dropped from it;
/// the other gets the whole RDB and then the stream.
#[test]
fn a_replica_that_fails_during_a_shared_sync_leaves_the_others_theirs() {
    let args = ["--appendonly", "no", "--rdbcompression", "no", "--repl-diskless-sync-delay", "60", "--repl-diskless-sync-max-replicas", "2"];
    let master = Server::start(&args);
    let mut m = master.client();
    // About 20 MB: more than the socket buffers hold.
    let value = "x".repeat(10_000);
    for i in 0..2000 {
        assert_eq!(m.send(&["SET", &format!("key:{i}"), &value]), ok());
    }
    let mut leaving = RawReplica::connect(master.port, true);
    leaving.send(&["PSYNC", "?", "-1"]);
    let mut staying = RawReplica::connect(master.port, true);
    staying.send(&["PSYNC", "?", "-1"]);
    assert!(leaving.line().starts_with("+FULLRESYNC"));
    drop(leaving);
    let (_, _, rdb) = diskless_sync(&mut staying);
    assert!(rdb.len() > 20_000_000, "the whole RDB: {} bytes", rdb.len());
    staying.send(&["REPLCONF", "ACK", "0"]);
    assert_eq!(m.cmd("SET after 1"), ok());
    assert_eq!(staying.command(), ["SELECT", "0"]);
    assert_eq!(staying.command(), ["SET", "after", "1"]);
    wait_until("one replica left", || m.info_field("replication", "connected_slaves") == "1");
}

/// A redis-server replica and a Keel replica that come together are
/// served by one sync, and both hold the master's data after it.
#[test]
fn a_redis_and_a_keel_replica_share_one_sync() {
    let master = Server::start(&["--repl-diskless-sync-delay", "60", "--repl-diskless-sync-max-replicas", "2"]);
    let mut m = master.client();
    assert_eq!(m.cmd("SET k v"), ok());
    let port = master.port.to_string();
    let Some(redis) = Server::start_redis(&["--replicaof", "127.0.0.1", &port]) else { return };
    let keel = Server::start(&["--replicaof", "127.0.0.1", &port]);
    for replica in [&redis, &keel] {
        let mut r = replica.client();
        wait_until("the replica's link", || r.info_field("replication", "master_link_status") == "up");
        assert_eq!(r.cmd("GET k"), bulk("v"));
    }
    let log = master.log();
    assert!(log.contains("Starting a diskless sync at offset 0 for 2 replica(s)"), "{log}");
}

/// The `== CRITICAL ==` lines a server has logged, from that mark on.
fn critical_lines(server: &Server) -> Vec<String> {
    server.log().lines().filter_map(|l| l.find("== CRITICAL ==").map(|at| l[at..].to_string())).collect()
}

/// A command from the master that fails on a replica (DEBUG REPLICATE puts
/// one in the stream) is logged as Redis logs it and counted in
/// unexpected_error_replies; with `propagation-error-behavior panic` the
/// replica stops, with exit code 1 under `use-exit-on-panic`. A Keel and a
/// redis-server replica of one Keel master, the same log line, the same
/// exit.
#[test]
fn a_failed_command_from_the_master_is_logged_or_panics_as_configured() {
    let master = Server::start(&["--appendonly", "no", "--enable-debug-command", "yes"]);
    let mut m = master.client();
    let port = master.port.to_string();
    let mut keel = keel_replica_of(&master);
    let Some(mut redis) = redis_replica_of(&master, &[]) else { return };
    assert_eq!(m.cmd("DEBUG REPLICATE fake-command-1 a"), ok());
    assert_eq!(m.cmd("SET after 1"), ok());
    assert_eq!(m.cmd("WAIT 2 5000"), int(2));
    let lines = critical_lines(&redis);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("'unknown command 'fake-command-1'"), "{lines:?}");
    assert_eq!(critical_lines(&keel), lines);
    for replica in [&keel, &redis] {
        let mut r = replica.client();
        assert_eq!(r.info_field("stats", "unexpected_error_replies"), "1", "port {}", replica.port);
        assert_eq!(r.cmd("GET after"), bulk("1"));
        assert_eq!(r.cmd("CONFIG SET propagation-error-behavior panic"), ok());
        assert_eq!(r.cmd("CONFIG SET use-exit-on-panic yes"), ok());
    }
    assert_eq!(m.cmd("DEBUG REPLICATE fake-command-2"), ok());
    for replica in [&mut keel, &mut redis] {
        wait_until("the replica's exit", || !replica.alive());
        assert_eq!(replica.exit_status().and_then(|s| s.code()), Some(1), "port {}", replica.port);
    }
    drop(port);
}

/// A command of the master's that comes while a script on the replica is
/// busy waits for the script to end, as Redis defers its master's stream,
/// rather than being refused -BUSY (which would lose it).
#[test]
fn the_masters_stream_waits_for_a_busy_script_on_the_replica() {
    let master = Server::start(&["--appendonly", "no"]);
    let replica = keel_replica_of(&master);
    let mut r = replica.client();
    assert_eq!(r.cmd("CONFIG SET busy-reply-threshold 50"), ok());
    // Busy for a second and a half.
    let script = "#!lua flags=no-writes\n\
                  local function us() local t = redis.call('TIME') return t[1] * 1000000 + t[2] end\n\
                  local start = us()\n\
                  while us() - start < 1500000 do end\n\
                  return 1";
    let mut busy = replica.client();
    busy.write_command(&["EVAL", script, "0"]);
    wait_until("the script busy", || matches!(r.cmd("PING"), Frame::Error(e) if e.starts_with(b"BUSY")));
    let mut m = master.client();
    assert_eq!(m.cmd("SET x 1"), ok());
    assert_eq!(busy.read(), int(1));
    wait_one(&mut m);
    assert_eq!(r.cmd("GET x"), bulk("1"));
    assert_eq!(critical_lines(&replica), Vec::<String>::new());
}

/// Redis's async loading: a `swapdb` replica that must sync in full again
/// from the same history (its PSYNC's offset gone from the backlog) goes
/// on serving its old data meanwhile, refuses what is flagged
/// `no-async-loading` with -LOADING, and keeps that data when the sync
/// fails. A Keel and a redis-server replica of one Keel master, which
/// serves both with one sync.
#[test]
fn a_swapdb_resync_of_the_same_history_serves_the_old_data_meanwhile() {
    let master = Server::start(&["--appendonly", "no", "--enable-debug-command", "yes", "--rdbcompression", "no"]);
    let mut m = master.client();
    assert_eq!(m.cmd("SET old v"), ok());
    let swapdb = ["--repl-diskless-load", "swapdb"];
    let keel = Server::start(&[&["--replicaof", "127.0.0.1", &master.port.to_string()][..], &swapdb].concat());
    let Some(redis) = redis_replica_of(&master, &swapdb) else { return };
    for replica in [&keel, &redis] {
        let mut r = replica.client();
        wait_until("the replica's link", || r.info_field("replication", "master_link_status") == "up");
        assert_eq!(r.cmd("GET old"), bulk("v"));
    }
    // 100 keys of 100 kB sent one every 100 ms: ten seconds of sync.
    assert_eq!(m.cmd("DEBUG POPULATE 100 key 100000"), ok());
    assert_eq!(m.cmd("CONFIG SET rdb-key-save-delay 100000"), ok());
    // Both replicas in one sync, which starts once both are back.
    assert_eq!(m.cmd("CONFIG SET repl-diskless-sync-delay 60 repl-diskless-sync-max-replicas 2"), ok());
    // In one transaction, as Redis's test: the links dropped, and the
    // backlog left holding too little for a partial resync.
    assert_eq!(m.cmd("MULTI"), ok());
    for line in ["CLIENT KILL TYPE replica", "CONFIG SET repl-backlog-size 16384"] {
        assert_eq!(m.cmd(line), simple("QUEUED"));
    }
    assert_eq!(m.send(&["SET", "filler", &"x".repeat(20_000)]), simple("QUEUED"));
    assert_eq!(m.cmd("EXEC"), Frame::Array(vec![int(2), ok(), ok()]));
    for replica in [&keel, &redis] {
        let mut r = replica.client();
        wait_until("the async load", || r.info_field("persistence", "async_loading") == "1");
        assert_eq!(r.info_field("persistence", "loading"), "0");
        assert_eq!(r.cmd("GET old"), bulk("v"), "the old data serves, port {}", replica.port);
    }
    // Refused as by Redis's own test of it (redis-server answers these
    // -LOADING only while its load is between two reads, so not here).
    let mut r = keel.client();
    for refused in ["REPLICAOF NO ONE", "CONFIG SET appendonly no"] {
        assert_eq!(r.cmd(refused), err("LOADING Keel is loading the dataset in memory"), "{refused}");
    }
    // No sync after this one for a while.
    assert_eq!(m.cmd("CONFIG SET repl-diskless-sync-max-replicas 0"), ok());
    assert_eq!(m.cmd("CLIENT KILL TYPE replica"), int(2));
    for replica in [&keel, &redis] {
        let mut r = replica.client();
        wait_until("the load's end", || r.info_field("persistence", "async_loading") == "0");
        assert_eq!(r.cmd("GET old"), bulk("v"), "the old data stays, port {}", replica.port);
        assert_eq!(r.cmd("EXISTS key:1"), int(0));
    }
}

/// A replication link carries no replies: a replica that sends a command
/// (anything but REPLCONF ACK or GETACK) loses its link, with Redis's log
/// lines, and one that reads or writes keys also counts as an error sent
/// to it. PSYNC with an offset that is no number is refused and logged.
/// Keel and redis-server alike.
#[test]
fn a_replica_that_sends_a_command_loses_its_link() {
    let keel = Server::start(&["--appendonly", "no"]);
    let Some(redis) = Server::start_redis(&[]) else { return };
    for master in [&keel, &redis] {
        let mut m = master.client();
        // In this order: the keyspace refusal's line comes with the GET.
        for (command, name) in [(&["PING"][..], "ping"), (&["GET", "foo"], "get"), (&["XINFO", "HELP"], "xinfo|help")] {
            let mut raw = RawReplica::connect(master.port, false);
            raw.full_sync_with_length();
            raw.send(command);
            let mut rest = Vec::new();
            let _ = raw.stream.read_to_end(&mut rest);
            let rest = String::from_utf8_lossy(&rest);
            assert!(!rest.contains("PONG") && !rest.contains('-'), "no reply on the link: {rest:?}");
            let log = master.log();
            assert!(log.contains(&format!("Replica generated a reply to command '{name}', disconnecting it: ")), "port {}: {name}", master.port);
            let critical = "This master is sending an error to its replica: 'Replica can't interact with the keyspace' after processing the command 'get'";
            assert_eq!(log.contains(critical), name != "ping", "port {}: {name}", master.port);
            assert_eq!(m.cmd("PING"), simple("PONG"));
        }
        assert_eq!(m.info_field("stats", "unexpected_error_replies"), "1", "port {}", master.port);
        let mut c = master.client();
        assert_eq!(c.cmd("PSYNC replicationid offset_str"), err("ERR value is not an integer or out of range"));
        let log = master.log();
        assert!(log.contains("asks for synchronization but with a wrong offset"), "port {}", master.port);
    }
}

/// A disk-based full sync sends the replica a newline every second while
/// the RDB file is written, before its length: a big dataset must not let
/// the replica's `repl-timeout` pass. Keel and redis-server alike.
#[test]
fn a_disk_based_sync_keeps_the_link_alive_while_the_file_is_written() {
    let args = ["--repl-diskless-sync", "no", "--rdb-key-save-delay", "100000"];
    let keel = Server::start(&[&args[..], &["--appendonly", "no"]].concat());
    let Some(redis) = Server::start_redis(&args) else { return };
    for master in [&keel, &redis] {
        let mut m = master.client();
        for i in 0..25 {
            assert_eq!(m.send(&["SET", &format!("k{i}"), "v"]), ok());
        }
        // 25 keys at 100 ms each: the file takes 2.5 s.
        let mut raw = RawReplica::connect(master.port, false);
        raw.send(&["PSYNC", "?", "-1"]);
        assert!(raw.line().starts_with("+FULLRESYNC"));
        let header = raw.line();
        let newlines = header.len() - header.trim_start_matches('\n').len();
        assert!(newlines >= 1, "port {}: {header:?}", master.port);
        assert!(header[newlines..].starts_with('$'), "port {}: {header:?}", master.port);
    }
}

/// One field of a CLIENT LIST line.
fn client_field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split(' ').find_map(|f| f.strip_prefix(name)?.strip_prefix('=')).unwrap_or_else(|| panic!("no {name} in {line}"))
}

/// The lines of a CLIENT LIST reply.
fn client_lines(c: &mut Client, args: &[&str]) -> Vec<String> {
    let Frame::Bulk(text) = c.send(&[&["CLIENT", "LIST"], args].concat()) else { panic!("not a bulk") };
    String::from_utf8_lossy(&text).lines().map(str::to_string).collect()
}

/// A replica's connection shows on its master as Redis's replica client
/// (flag S, TYPE replica, its ACKs as `cmd`), and the master's on the
/// replica as its master client (flag M, TYPE master, no user of its own,
/// counted in connected_clients); CLIENT KILL finds them by id and type
/// as well. A Keel pair and a redis-server pair, the same checks.
#[test]
fn replication_links_show_in_client_list_as_redis_shows_them() {
    let keel = Some((Server::start(&[]), false));
    let redis = Server::start_redis(&[]).map(|server| (server, true));
    for (master, is_redis) in keel.iter().chain(redis.iter()) {
        let replica = if *is_redis { redis_replica_of(master, &[]).expect("installed") } else { keel_replica_of(master) };
        let (mut m, mut r) = (master.client(), replica.client());
        m.cmd("SET a 1");
        wait_one(&mut m);
        let on_master = client_lines(&mut m, &["TYPE", "replica"]);
        assert_eq!(on_master.len(), 1, "{on_master:?}");
        let line = &on_master[0];
        assert_eq!(client_field(line, "flags"), "S", "{line}");
        assert_eq!(client_field(line, "cmd"), "replconf", "{line}");
        assert_eq!(client_field(line, "user"), "default", "{line}");
        let id = client_field(line, "id").to_string();
        assert!(client_lines(&mut m, &[]).iter().any(|l| client_field(l, "id") == id));
        assert_eq!(client_lines(&mut m, &["ID", &id]).len(), 1);
        assert_eq!(m.info_field("clients", "connected_clients"), "1", "a replica is no client here");

        let on_replica = client_lines(&mut r, &["TYPE", "master"]);
        assert_eq!(on_replica.len(), 1, "{on_replica:?}");
        let line = &on_replica[0];
        assert_eq!(client_field(line, "flags"), "M", "{line}");
        assert_eq!(client_field(line, "user"), "(superuser)", "{line}");
        assert_eq!(client_field(line, "addr"), format!("127.0.0.1:{}", master.port), "{line}");
        assert_eq!(r.info_field("clients", "connected_clients"), "2", "the master's client counts");
        assert_eq!(r.cmd("CLIENT KILL USER default"), int(0), "the master's client runs as no user");
        assert!(client_lines(&mut r, &["TYPE", "normal"]).iter().all(|l| client_field(l, "flags") != "M"));

        assert_eq!(m.send(&["CLIENT", "KILL", "ID", &id]), int(1));
        wait_until("a partial resync", || m.info_field("stats", "sync_partial_ok") == "1");
    }
}

/// `replica-lazy-flush`: the data a replica had before a full sync from
/// a file goes on the lazyfree thread (INFO `lazyfreed_objects`), or in
/// place without it. A Keel and a redis-server replica, the same counts.
#[test]
fn replica_lazy_flush_frees_the_old_data_in_the_background() {
    let master = Server::start(&[]);
    let mut m = master.client();
    m.cmd("SET fresh 1");
    let port = master.port.to_string();
    for lazy in ["yes", "no"] {
        let flags = ["--replica-lazy-flush", lazy, "--repl-diskless-load", "disabled", "--appendonly", "no"];
        let keel = Some(Server::start(&flags));
        let redis = Server::start_redis(&flags);
        for replica in keel.iter().chain(redis.iter()) {
            let mut r = replica.client();
            for i in 0..100 {
                r.send(&["SET", &format!("old:{i}"), "x"]);
            }
            assert_eq!(r.send(&["REPLICAOF", "127.0.0.1", &port]), ok());
            wait_until("the replica's link", || r.info_field("replication", "master_link_status") == "up");
            assert_eq!(r.cmd("DBSIZE"), int(1));
            let freed = if lazy == "yes" { "100" } else { "0" };
            wait_until("the old keys freed", || r.info_field("memory", "lazyfreed_objects") == freed);
        }
    }
}

/// DEBUG SLEEP stops the whole master, its replication links too: a
/// replica kept waiting in the handshake (a long diskless delay, so only
/// keepalive newlines come) times out while the master sleeps, as in
/// Redis's "Slave is able to detect timeout during handshake".
#[test]
fn debug_sleep_stops_the_keepalives_of_a_waiting_replica() {
    let master = Server::start(&["--appendonly", "no", "--enable-debug-command", "yes", "--repl-diskless-sync-delay", "1000"]);
    let replica = Server::start(&["--appendonly", "no", "--repl-timeout", "2"]);
    let mut r = replica.client();
    assert_eq!(r.send(&["REPLICAOF", "127.0.0.1", &master.port.to_string()]), ok());
    let mut m = master.client();
    // Its PSYNC taken: the master holds it for the diskless delay.
    wait_until("the replica's PSYNC", || m.info_field("replication", "connected_slaves") == "1");
    assert!(matches!(r.cmd("ROLE"), Frame::Array(items) if items.get(3) == Some(&bulk("handshake"))));
    m.write_command(&["DEBUG", "SLEEP", "5"]);
    wait_until("the replica's timeout", || replica.log().contains("Timeout connecting to the MASTER"));
    assert_eq!(m.read(), ok());
}

/// A replica behind NAT or port forwarding announces the address its
/// master is to list it as: Keel's master and redis-server list Keel's
/// replica at `replica-announce-ip` and `-port`; `replica-announced`
/// shows in the replica's INFO for Sentinel.
#[test]
fn a_replica_announces_the_address_it_is_set_to() {
    let keel = Server::start(&[]);
    let redis = Server::start_redis(&[]);
    for master in std::iter::once(&keel).chain(redis.as_ref()) {
        let port = master.port.to_string();
        let flags = ["--replicaof", "127.0.0.1", &port, "--replica-announce-ip", "10.9.8.7", "--slave-announce-port", "4321"];
        let replica = Server::start(&flags);
        replica.wait_link_up();
        let mut m = master.client();
        wait_until("the replica to be listed online", || {
            let line = m.info_field("replication", "slave0");
            line.starts_with("ip=10.9.8.7,port=4321,") && line.contains("state=online")
        });
        let Frame::Array(role) = m.cmd("ROLE") else { panic!("ROLE") };
        let Frame::Array(replicas) = &role[2] else { panic!("ROLE's replicas") };
        let Frame::Array(first) = &replicas[0] else { panic!("a replica's entry") };
        assert_eq!(first[..2], [bulk("10.9.8.7"), bulk("4321")]);
        let mut r = replica.client();
        assert_eq!(r.info_field("replication", "replica_announced"), "1");
        assert_eq!(r.cmd("CONFIG SET replica-announced no"), ok());
        assert_eq!(r.info_field("replication", "replica_announced"), "0");
        assert_eq!(r.cmd("CONFIG GET replica-announce-ip"), Frame::Array(vec![bulk("replica-announce-ip"), bulk("10.9.8.7")]));
    }
}

/// A replica whose log cannot be written stops at its master's next write
/// (Redis's "Replica was unable to write command to disk."); with
/// `replica-ignore-disk-write-errors yes` it applies the writes, warning.
/// (Under `everysec`: under `always` a read of what the replica could not
/// log would wait for the disk.)
#[test]
fn a_replica_that_cannot_log_its_master_s_writes_stops_unless_told_to_go_on() {
    for ignore in ["no", "yes"] {
        let master = Server::start(&[]);
        let port = master.port.to_string();
        let flags = [
            "--replicaof",
            "127.0.0.1",
            &port,
            "--appendfsync",
            "everysec",
            "--use-exit-on-panic",
            "yes",
            "--replica-ignore-disk-write-errors",
            ignore,
        ];
        let mut replica = Server::start_in_with_env(&temp_dir("replica-eio"), &flags, &[("KEEL_JOURNAL_FAILPOINT", "write-eio:1:inf")]);
        replica.wait_link_up();
        let mut m = master.client();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut i = 0;
        let expected = if ignore == "no" {
            "Replica was unable to write command to disk."
        } else {
            "Replica is applying a command even though it is unable to write to disk."
        };
        while !replica.log().contains(expected) {
            assert!(Instant::now() < deadline, "never logged {expected:?}: {}", replica.log());
            assert_eq!(m.send(&["SET", &format!("k{i}"), "v"]), ok());
            i += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
        if ignore == "no" {
            wait_until("the replica to stop", || !replica.alive());
            assert_eq!(replica.exit_status().and_then(|s| s.code()), Some(1));
        } else {
            let last = format!("k{}", i - 1);
            let mut r = replica.client();
            wait_until("the last write on the replica", || r.send(&["GET", &last]) == bulk("v"));
            assert!(replica.alive());
        }
    }
}

/// `redis-cli --rdb` and `--functions-rdb` (an rdb-only replica, the second
/// with `REPLCONF rdb-filter-only functions`): the first file holds the
/// keys and the functions, the second the functions only, even from a
/// master that syncs through files. A server started on each file has
/// what it holds.
#[test]
fn redis_cli_dumps_the_rdb_or_the_functions_alone() {
    if !std::path::Path::new("/usr/bin/redis-cli").exists() {
        eprintln!("redis-cli not installed: skipping (scripts/test.sh installs redis-tools)");
        return;
    }
    let master = Server::start(&["--repl-diskless-sync", "no"]);
    let mut m = master.client();
    for i in 0..100 {
        assert_eq!(m.send(&["SET", &format!("k{i}"), "v"]), ok());
    }
    let library = "#!lua name=lib1\nredis.register_function('func1', function() return 123 end)";
    assert_eq!(m.send(&["FUNCTION", "LOAD", library]), bulk("lib1"));
    let dir = temp_dir("cli-rdb");
    for (flag, keys) in [("--rdb", 100), ("--functions-rdb", 0)] {
        let file = dir.join(format!("{}.rdb", &flag[2..]));
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &master.port.to_string(), flag])
            .arg(&file)
            .output()
            .expect("run redis-cli");
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(text.contains("Transfer finished with success"), "{flag}: {text}");
        let name = file.file_name().expect("a name").to_string_lossy().into_owned();
        let copy = Server::start_in(&dir, &["--appendonly", "no", "--dbfilename", &name]);
        let mut c = copy.client();
        assert_eq!(c.cmd("DBSIZE"), Frame::Integer(keys), "{flag}");
        assert_eq!(c.send(&["FCALL", "func1", "0"]), Frame::Integer(123), "{flag}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// REPLCONF rdb-filter-only's errors, and PSYNC's for a filtered replica
/// without `capa eof`, as Redis answers them; DEBUG RELOAD puts the file's
/// function libraries in place of the server's, as Redis's.
#[test]
fn rdb_filters_and_reloaded_functions_answer_as_redis_s() {
    let lines: &[&[&str]] = &[
        &["REPLCONF", "rdb-filter-only", "bogus"],
        &["REPLCONF", "rdb-filter-only", "\"functions"],
        &["REPLCONF", "rdb-filter-only", "functions"],
        &["PSYNC", "?", "-1"],
        &["FUNCTION", "LOAD", "#!lua name=kept\nredis.register_function('kept', function() return 1 end)"],
        &["SAVE"],
        &["FUNCTION", "LOAD", "#!lua name=gone\nredis.register_function('gone', function() return 2 end)"],
        &["DEBUG", "RELOAD", "NOSAVE"],
        &["FUNCTION", "LIST"],
    ];
    let flags = ["--enable-debug-command", "yes", "--appendonly", "no"];
    let run = |server: &Server| -> Vec<Frame> {
        let mut c = server.client();
        lines.iter().map(|argv| c.send(argv)).collect()
    };
    let keel = run(&Server::start(&flags));
    assert!(matches!(&keel[8], Frame::Array(libs) if libs.len() == 1), "{:?}", keel[8]);
    if let Some(redis) = Server::start_redis(&flags) {
        for ((line, keel), redis) in lines.iter().zip(&keel).zip(run(&redis)) {
            assert_eq!(*keel, redis, "{line:?}");
        }
    }
}
