//! Keel as a replica of Debian's redis-server 7.0 (`replica.rs`): full
//! sync, the streamed commands, READONLY, promotion, partial resync after
//! a dropped link, full resync from a restarted master, and a synced
//! dataset that survives a kill -9 through the AOF.

mod common;

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use common::{bulk, err, int, ok, simple, wait_for, Client, Frame, Server};

/// A redis-server master (no diskless delay: syncs start at once), or
/// None where it is not installed.
fn redis_master() -> Option<Server> {
    Server::start_redis(&["--repl-diskless-sync-delay", "0"])
}

/// redis-server on `port` again, after the last one there stopped.
fn redis_master_on(port: u16) -> Server {
    let dir = common::temp_dir("redis-master");
    let dir_arg = dir.display().to_string();
    let args = ["--port", &port.to_string(), "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0", "--dir", &dir_arg];
    let mut server = Server::spawn_with(PathBuf::from("/usr/bin/redis-server"), args.iter().map(|s| s.to_string()).collect(), port);
    server.dir = Some(dir);
    server
}

fn replica_of(master: &Server, extra: &[&str]) -> Server {
    let port = master.port.to_string();
    let mut args = vec!["--replicaof", "127.0.0.1", &port];
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn text(frame: Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) | Frame::Error(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("not text: {other:?}"),
    }
}

/// Polls `what` until it holds, for at most 30 s.
fn wait_link_up(replica: &mut Client) {
    wait_for("master_link_status:up", || replica.info_field("replication", "master_link_status") == "up");
}

/// The master's WAIT: every write before it is acknowledged by the replica.
fn wait_acked(master: &mut Client) {
    assert_eq!(master.cmd("WAIT 1 5000"), int(1), "the replica did not acknowledge");
}

fn sorted(frame: Frame) -> Vec<String> {
    let Frame::Array(items) = frame else { panic!("not an array: {frame:?}") };
    let mut out: Vec<String> = items.into_iter().map(text).collect();
    out.sort();
    out
}

fn strings(frame: Frame) -> Vec<String> {
    let Frame::Array(items) = frame else { panic!("not an array: {frame:?}") };
    items.into_iter().map(text).collect()
}

fn ttl(c: &mut Client, key: &str) -> i64 {
    match c.send(&["TTL", key]) {
        Frame::Integer(n) => n,
        other => panic!("TTL {key}: {other:?}"),
    }
}

/// The data written before the replica starts: every type, TTLs, two
/// databases.
fn write_initial(m: &mut Client) {
    assert_eq!(m.cmd("SET s1 v1"), ok());
    assert_eq!(m.cmd("HSET h a 1 b 2"), int(2));
    assert_eq!(m.cmd("RPUSH l a b c"), int(3));
    assert_eq!(m.cmd("SADD st x y z"), int(3));
    assert_eq!(m.cmd("ZADD z 1 one 2 two"), int(2));
    assert_eq!(m.cmd("SET ttl v EX 1000"), ok());
    assert_eq!(m.cmd("SELECT 3"), ok());
    assert_eq!(m.cmd("SET d3 three"), ok());
    assert_eq!(m.cmd("SELECT 0"), ok());
}

fn check_initial(r: &mut Client) {
    assert_eq!(r.cmd("HGETALL h"), Frame::Array(vec![bulk("a"), bulk("1"), bulk("b"), bulk("2")]));
    assert_eq!(sorted(r.cmd("SMEMBERS st")), ["x", "y", "z"]);
    assert_eq!(strings(r.cmd("ZRANGE z 0 -1 WITHSCORES")), ["one", "1", "two", "2"]);
    assert_eq!(r.cmd("GET ttl"), bulk("v"));
    let left = ttl(r, "ttl");
    assert!((900..=1000).contains(&left), "ttl kept its TTL: {left}");
    assert_eq!(r.cmd("SELECT 3"), ok());
    assert_eq!(r.cmd("GET d3"), bulk("three"));
    assert_eq!(r.cmd("SELECT 0"), ok());
}

#[test]
fn replicates_a_redis_master_sync_then_stream() {
    let Some(master) = redis_master() else { return };
    let mut m = master.client();
    write_initial(&mut m);
    let replica = replica_of(&master, &["--appendonly", "no"]);
    let mut r = replica.client();
    wait_link_up(&mut r);
    assert_eq!(r.info_field("replication", "role"), "slave");
    assert_eq!(r.info_field("replication", "master_port"), master.port.to_string());
    check_initial(&mut r);
    assert_eq!(r.cmd("GET s1"), bulk("v1"));
    assert_eq!(r.cmd("LRANGE l 0 -1"), Frame::Array(vec![bulk("a"), bulk("b"), bulk("c")]));

    // Writes after the sync arrive as the master's stream.
    assert_eq!(m.cmd("SET s2 v2"), ok());
    assert_eq!(m.cmd("MULTI"), ok());
    assert_eq!(m.cmd("INCR n"), simple("QUEUED"));
    assert_eq!(m.cmd("LPUSH l first"), simple("QUEUED"));
    assert_eq!(m.cmd("HSET h c 3"), simple("QUEUED"));
    assert_eq!(m.cmd("EXEC"), Frame::Array(vec![int(1), int(4), int(1)]));
    assert_eq!(m.cmd("SELECT 5"), ok());
    assert_eq!(m.cmd("SET d5 five"), ok());
    assert_eq!(m.cmd("SELECT 0"), ok());
    assert_eq!(m.cmd("DEL s1"), int(1));
    assert_eq!(m.cmd("EXPIRE s2 500"), int(1));
    assert_eq!(m.cmd("SREM st y"), int(1));
    assert_eq!(m.cmd("ZINCRBY z 5 one"), bulk("6"));
    wait_acked(&mut m);

    assert_eq!(r.cmd("GET s1"), Frame::Null);
    assert_eq!(r.cmd("GET s2"), bulk("v2"));
    let left = ttl(&mut r, "s2");
    assert!((400..=500).contains(&left), "EXPIRE arrived: {left}");
    assert_eq!(r.cmd("GET n"), bulk("1"));
    assert_eq!(r.cmd("LRANGE l 0 -1"), Frame::Array(vec![bulk("first"), bulk("a"), bulk("b"), bulk("c")]));
    assert_eq!(r.cmd("HGET h c"), bulk("3"));
    assert_eq!(sorted(r.cmd("SMEMBERS st")), ["x", "z"]);
    assert_eq!(strings(r.cmd("ZRANGE z 0 -1 WITHSCORES")), ["two", "2", "one", "6"]);
    assert_eq!(r.cmd("SELECT 5"), ok());
    assert_eq!(r.cmd("GET d5"), bulk("five"));
    assert_eq!(r.cmd("SELECT 0"), ok());
    assert_eq!(r.cmd("DBSIZE"), m.cmd("DBSIZE"));

    // The offsets agree once the replica has acknowledged everything.
    let master_offset = m.info_field("replication", "master_repl_offset");
    wait_for("slave_repl_offset reaches the master's", || r.info_field("replication", "slave_repl_offset") == master_offset);
}

#[test]
fn writes_are_refused_until_promotion_which_keeps_the_data() {
    let Some(master) = redis_master() else { return };
    let mut m = master.client();
    assert_eq!(m.cmd("SET kept 1"), ok());
    let replica = replica_of(&master, &["--appendonly", "no"]);
    let mut r = replica.client();
    wait_link_up(&mut r);
    let readonly = err("READONLY You can't write against a read only replica.");
    assert_eq!(r.cmd("SET x 1"), readonly);
    assert_eq!(r.cmd("DEL kept"), readonly);
    // Reads still work.
    assert_eq!(r.cmd("GET kept"), bulk("1"));
    // A write queued in MULTI aborts the transaction, as in Redis.
    assert_eq!(r.cmd("MULTI"), ok());
    assert_eq!(r.cmd("SET x 1"), readonly);
    assert_eq!(r.cmd("EXEC"), err("EXECABORT Transaction discarded because of previous errors."));

    assert_eq!(r.cmd("CONFIG GET replicaof"), Frame::Array(vec![bulk("replicaof"), bulk(&format!("127.0.0.1 {}", master.port))]));
    assert_eq!(r.cmd("CONFIG GET slave-read-only"), Frame::Array(vec![bulk("slave-read-only"), bulk("yes")]));
    assert_eq!(r.cmd("CONFIG GET repl-timeout"), Frame::Array(vec![bulk("repl-timeout"), bulk("60")]));
    let again = r.send(&["REPLICAOF", "127.0.0.1", &master.port.to_string()]);
    assert_eq!(again, simple("OK Already connected to specified master"));
    assert_eq!(r.cmd("REPLICAOF 127.0.0.1 70000"), err("ERR Invalid master port"));
    assert_eq!(r.cmd("REPLICAOF 127.0.0.1"), err("ERR wrong number of arguments for 'replicaof' command"));

    // replica-read-only no lets writes in while still a replica.
    assert_eq!(r.cmd("CONFIG SET replica-read-only no"), ok());
    assert_eq!(r.cmd("SET local 1"), ok());
    assert_eq!(r.cmd("CONFIG SET replica-read-only yes"), ok());
    assert_eq!(r.cmd("SET x 1"), readonly);

    assert_eq!(m.cmd("SET late 2"), ok());
    wait_acked(&mut m);
    assert_eq!(r.cmd("SLAVEOF NO ONE"), ok());
    assert_eq!(r.info_field("replication", "role"), "master");
    assert_eq!(r.cmd("CONFIG GET replicaof"), Frame::Array(vec![bulk("replicaof"), bulk("")]));
    assert_eq!(r.cmd("GET kept"), bulk("1"));
    assert_eq!(r.cmd("GET late"), bulk("2"));
    assert_eq!(r.cmd("SET x 1"), ok());
    assert_eq!(r.cmd("REPLICAOF NO ONE"), ok());
    // The master no longer has a replica.
    wait_for("the master lost its replica", || m.info_field("replication", "connected_slaves") == "0");
}

#[test]
fn a_dropped_link_resumes_with_a_partial_resync() {
    let Some(master) = redis_master() else { return };
    let mut m = master.client();
    assert_eq!(m.cmd("SET before 1"), ok());
    let replica = replica_of(&master, &["--appendonly", "no"]);
    let mut r = replica.client();
    wait_link_up(&mut r);
    assert_eq!(m.cmd("SET during 1"), ok());
    wait_acked(&mut m);
    for round in 0..3 {
        assert_eq!(m.cmd("CLIENT KILL TYPE replica"), int(1));
        assert_eq!(m.send(&["SET", &format!("after{round}"), "v"]), ok());
        assert_eq!(m.cmd("MULTI"), ok());
        assert_eq!(m.cmd("INCR counter"), simple("QUEUED"));
        assert_eq!(m.cmd("INCR counter"), simple("QUEUED"));
        assert_eq!(m.cmd("EXEC"), Frame::Array(vec![int(2 * round + 1), int(2 * round + 2)]));
        wait_acked(&mut m);
        assert_eq!(m.info_field("stats", "sync_partial_ok"), (round + 1).to_string());
    }
    assert_eq!(m.info_field("stats", "sync_full"), "1");
    assert_eq!(r.cmd("GET after2"), bulk("v"));
    assert_eq!(r.cmd("GET counter"), bulk("6"));
    assert_eq!(r.cmd("DBSIZE"), m.cmd("DBSIZE"));
}

#[test]
fn a_restarted_master_with_new_data_is_synced_in_full() {
    let Some(master) = redis_master() else { return };
    let port = master.port;
    let mut m = master.client();
    assert_eq!(m.cmd("SET old 1"), ok());
    let replica = replica_of(&master, &["--appendonly", "no"]);
    let mut r = replica.client();
    wait_link_up(&mut r);
    assert_eq!(r.cmd("GET old"), bulk("1"));
    let old_replid = m.info_field("replication", "master_replid");
    drop(m);
    drop(master);
    wait_for("the link is down", || r.info_field("replication", "master_link_status") == "down");
    assert_ne!(r.info_field("replication", "master_link_down_since_seconds"), "");

    let master = redis_master_on(port);
    let mut m = master.client();
    assert_eq!(m.cmd("SET new 2"), ok());
    assert_eq!(m.cmd("RPUSH list a b"), int(2));
    assert_ne!(m.info_field("replication", "master_replid"), old_replid);
    wait_for("the new data arrives", || r.cmd("GET new") == bulk("2"));
    wait_link_up(&mut r);
    assert_eq!(r.cmd("GET old"), Frame::Null);
    assert_eq!(r.cmd("LRANGE list 0 -1"), Frame::Array(vec![bulk("a"), bulk("b")]));
    assert_eq!(m.cmd("SET streamed 3"), ok());
    wait_acked(&mut m);
    assert_eq!(r.cmd("GET streamed"), bulk("3"));
    assert_eq!(m.info_field("stats", "sync_full"), "1");
    // The file received from the master became the replica's dump.
    let dump = replica.dir.as_ref().map(|d| d.join("dump.rdb")).expect("the replica's dir");
    assert!(dump.is_file(), "{} is missing", dump.display());
}

#[test]
fn the_synced_data_survives_a_crash_through_the_aof() {
    let Some(master) = redis_master() else { return };
    let mut m = master.client();
    write_initial(&mut m);
    for i in 0..200 {
        assert_eq!(m.send(&["SET", &format!("bulk:{i}"), &format!("v{i}")]), ok());
    }
    let dir = common::temp_dir("replica-aof");
    let port = master.port.to_string();
    // Keel's defaults: appendonly yes, appendfsync always.
    let replica = Server::start_in(&dir, &["--replicaof", "127.0.0.1", &port]);
    let mut r = replica.client();
    wait_link_up(&mut r);
    // The AOF comes back on after the sync: its rewrite holds the synced data.
    wait_for("the AOF rewrite after the sync", || {
        r.info_field("persistence", "aof_rewrites").parse::<u64>().unwrap_or(0) >= 1
            && r.info_field("persistence", "aof_rewrite_in_progress") == "0"
            && r.info_field("persistence", "aof_rewrite_scheduled") == "0"
    });
    assert_eq!(r.info_field("persistence", "aof_last_bgrewrite_status"), "ok");
    // Streamed writes, acknowledged: they are in the journal.
    assert_eq!(m.cmd("SET streamed yes"), ok());
    assert_eq!(m.cmd("DEL bulk:7"), int(1));
    assert_eq!(m.cmd("SELECT 4"), ok());
    assert_eq!(m.cmd("LPUSH l4 x"), int(1));
    assert_eq!(m.cmd("SELECT 0"), ok());
    wait_acked(&mut m);
    replica.kill9();

    let keys = m.cmd("DBSIZE");
    drop(master);
    // Restarted as a master, and as a replica of the master that is gone:
    // the journal is all either has, and a replica's replay obeys it
    // rather than refusing its writes as -READONLY.
    for (extra, role) in [(&[][..], "master"), (&["--replicaof", "127.0.0.1", &port][..], "slave")] {
        let restarted = Server::start_in(&dir, extra);
        let mut r = restarted.client();
        assert_eq!(r.info_field("replication", "role"), role);
        check_initial(&mut r);
        assert_eq!(r.cmd("GET s1"), bulk("v1"));
        assert_eq!(r.cmd("GET streamed"), bulk("yes"));
        assert_eq!(r.cmd("GET bulk:7"), Frame::Null);
        assert_eq!(r.cmd("GET bulk:199"), bulk("v199"));
        assert_eq!(r.cmd("SELECT 4"), ok());
        assert_eq!(r.cmd("LRANGE l4 0 -1"), Frame::Array(vec![bulk("x")]));
        assert_eq!(r.cmd("SELECT 0"), ok());
        assert_eq!(r.cmd("DBSIZE"), keys);
        restarted.kill9();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A replica restarted from its dump, or from its journal, keeps the keys
/// that expired while it was down, as Redis's does: its master's DELs for
/// them are still to come. A reader sees them expired.
fn a_restarted_replica_keeps_the_keys_that_expired_meanwhile(appendonly: &str) {
    let Some(master) = redis_master() else { return };
    let mut m = master.client();
    assert_eq!(m.cmd("SET kept v"), ok());
    let dir = common::temp_dir("replica-expired");
    let port = master.port.to_string();
    let args = ["--appendonly", appendonly, "--replicaof", "127.0.0.1", &port];
    let replica = Server::start_in(&dir, &args);
    let mut r = replica.client();
    wait_link_up(&mut r);
    if appendonly == "yes" {
        // The keys below go to the journal's incremental file, replayed
        // as commands at the restart.
        wait_for("the AOF rewrite after the sync", || {
            r.info_field("persistence", "aof_rewrites") == "1" && r.info_field("persistence", "aof_rewrite_in_progress") == "0"
        });
    }
    for i in 0..10 {
        assert_eq!(m.send(&["SET", &format!("e{i}"), "v", "PX", "1000"]), ok());
    }
    wait_acked(&mut m);
    assert_eq!(r.cmd("DBSIZE"), int(11));
    if appendonly == "no" {
        assert_eq!(r.cmd("SAVE"), ok());
    }
    replica.kill9();
    drop(master);
    std::thread::sleep(Duration::from_millis(1100));
    let restarted = Server::start_last_in(&dir, &args);
    let mut r = restarted.client();
    assert_eq!(r.cmd("GET e0"), Frame::Null);
    assert_eq!(r.cmd("GET kept"), bulk("v"));
    // Still there a moment later: a read-only replica expires nothing of
    // its own, the replayed keys included.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(r.cmd("DBSIZE"), int(11));
}

#[test]
fn a_replica_restarted_from_its_dump_keeps_the_keys_that_expired_meanwhile() {
    a_restarted_replica_keeps_the_keys_that_expired_meanwhile("no");
}

#[test]
fn a_replica_restarted_from_its_journal_keeps_the_keys_that_expired_meanwhile() {
    a_restarted_replica_keeps_the_keys_that_expired_meanwhile("yes");
}

#[test]
fn replicaof_at_run_time_then_a_second_master() {
    let Some(first) = redis_master() else { return };
    let Some(second) = redis_master() else { return };
    let mut a = first.client();
    let mut b = second.client();
    assert_eq!(a.cmd("SET from a"), ok());
    assert_eq!(b.cmd("SET from b"), ok());
    let keel = Server::start(&["--appendonly", "no"]);
    let mut k = keel.client();
    assert_eq!(k.cmd("SET mine 1"), ok());
    assert_eq!(k.send(&["REPLICAOF", "127.0.0.1", &first.port.to_string()]), ok());
    wait_link_up(&mut k);
    assert_eq!(k.cmd("GET from"), bulk("a"));
    // A full sync replaces the dataset.
    assert_eq!(k.cmd("GET mine"), Frame::Null);
    assert_eq!(k.send(&["SLAVEOF", "127.0.0.1", &second.port.to_string()]), ok());
    wait_for("the second master's data", || k.cmd("GET from") == bulk("b"));
    assert_eq!(b.cmd("SET more 1"), ok());
    wait_acked(&mut b);
    assert_eq!(k.cmd("GET more"), bulk("1"));
}

/// A master played by the test, to pin the protocol's bytes and offsets.
struct FakeMaster {
    stream: std::net::TcpStream,
    buf: Vec<u8>,
}

impl FakeMaster {
    fn accept(listener: &std::net::TcpListener) -> FakeMaster {
        listener.set_nonblocking(true).expect("nonblocking");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).expect("blocking");
                    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
                    return FakeMaster { stream, buf: Vec::new() };
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "the replica never connected");
                    thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("accept: {e}"),
            }
        }
    }

    /// The next command the replica sent.
    fn read_command(&mut self) -> Vec<String> {
        use std::io::Read;
        loop {
            if let Some((frame, used)) = keel_protocol::frame::parse_frame(&self.buf).expect("valid RESP") {
                self.buf.drain(..used);
                let Frame::Array(items) = frame else { panic!("not a command: {frame:?}") };
                return items.into_iter().map(text).collect();
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).expect("read from the replica");
            assert!(n > 0, "the replica closed the link");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn expect(&mut self, want: &[&str]) {
        assert_eq!(self.read_command(), want);
    }

    fn write(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.stream.write_all(bytes).expect("write to the replica");
    }

    /// The handshake up to PSYNC, whose arguments it returns.
    fn handshake(&mut self, replica_port: u16) -> Vec<String> {
        self.expect(&["PING"]);
        self.write(b"+PONG\r\n");
        self.expect(&["AUTH", "repl", "secret"]);
        self.expect(&["REPLCONF", "listening-port", &replica_port.to_string()]);
        self.expect(&["REPLCONF", "capa", "eof", "capa", "psync2"]);
        self.write(b"+OK\r\n+OK\r\n+OK\r\n");
        let psync = self.read_command();
        assert_eq!(psync[0], "PSYNC");
        psync
    }

    /// Reads ACKs until one acknowledges `offset`; none may pass it.
    fn wait_ack(&mut self, offset: i64) {
        loop {
            let ack = self.read_command();
            assert_eq!(ack[..2], ["REPLCONF", "ACK"]);
            let acked: i64 = ack[2].parse().expect("an offset");
            assert!(acked <= offset, "acknowledged {acked} past {offset}");
            if acked == offset {
                return;
            }
        }
    }
}

#[test]
fn offsets_acks_timeouts_and_psync_follow_redis() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port().to_string();
    let replica = Server::start(&[
        "--appendonly", "no", "--replicaof", "127.0.0.1", &port, "--repl-timeout", "2", "--masteruser", "repl", "--masterauth", "secret",
    ]);
    let mut r = replica.client();
    assert_eq!(r.cmd("CONFIG GET masterauth"), Frame::Array(vec![bulk("masterauth"), bulk("secret")]));

    let mut master = FakeMaster::accept(&listener);
    assert_eq!(master.handshake(replica.port), ["PSYNC", "?", "-1"]);
    let replid = "0123456789abcdef0123456789abcdef01234567";
    // An RDB with one string key (checksum 0: not checked), sent with its
    // length and followed at once by the stream.
    let rdb = b"REDIS0009\xfe\x00\x00\x03key\x05value\xff\x00\x00\x00\x00\x00\x00\x00\x00";
    master.write(format!("+FULLRESYNC {replid} 100\r\n\n\n${}\r\n", rdb.len()).as_bytes());
    master.write(rdb);
    let select = common::encode(&["SELECT", "0"]);
    let set = common::encode(&["SET", "a", "1"]);
    let getack = common::encode(&["REPLCONF", "GETACK", "*"]);
    let mut offset = 100;
    master.write(&[select.clone(), set.clone(), getack.clone()].concat());
    // The GETACK's answer leaves the GETACK out; the next ACK counts it.
    offset += (select.len() + set.len()) as i64;
    master.wait_ack(offset);
    offset += getack.len() as i64;
    master.wait_ack(offset);
    wait_link_up(&mut r);
    assert_eq!(r.cmd("GET key"), bulk("value"));
    assert_eq!(r.cmd("GET a"), bulk("1"));
    assert_eq!(r.info_field("replication", "slave_repl_offset"), offset.to_string());

    // Silence past repl-timeout: the replica drops the link (saying so as
    // Redis does) and comes back asking to continue after what it
    // processed.
    let mut master = FakeMaster::accept(&listener);
    assert!(replica.log().contains("MASTER timed out: no data nor PING received..."));
    assert_eq!(master.handshake(replica.port), ["PSYNC", replid, &(offset + 1).to_string()]);
    master.write(b"+CONTINUE\r\n");
    let set_b = common::encode(&["SET", "b", "2"]);
    master.write(&set_b);
    offset += set_b.len() as i64;
    master.wait_ack(offset);
    assert_eq!(r.cmd("GET b"), bulk("2"));

    // A link lost inside MULTI resumes at the MULTI: nothing of it applied.
    let multi = common::encode(&["MULTI"]);
    let incr = common::encode(&["INCR", "c"]);
    let exec = common::encode(&["EXEC"]);
    master.write(&[multi.clone(), incr.clone()].concat());
    thread::sleep(Duration::from_millis(200));
    drop(master);
    let mut master = FakeMaster::accept(&listener);
    assert_eq!(master.handshake(replica.port), ["PSYNC", replid, &(offset + 1).to_string()]);
    assert_eq!(r.cmd("GET c"), Frame::Null);
    // A new replid on CONTINUE is taken up.
    let new_replid = "fedcba9876543210fedcba9876543210fedcba98";
    master.write(format!("+CONTINUE {new_replid}\r\n").as_bytes());
    master.write(&[multi.clone(), incr.clone(), exec.clone()].concat());
    offset += (multi.len() + incr.len() + exec.len()) as i64;
    master.wait_ack(offset);
    assert_eq!(r.cmd("GET c"), bulk("1"));
    assert_eq!(r.info_field("replication", "slave_repl_offset"), offset.to_string());
    drop(master);
    let mut master = FakeMaster::accept(&listener);
    assert_eq!(master.handshake(replica.port), ["PSYNC", new_replid, &(offset + 1).to_string()]);
}

#[test]
fn clients_are_answered_loading_while_a_sync_loads() {
    let Some(master) = Server::start_redis(&["--repl-diskless-sync-delay", "0", "--enable-debug-command", "yes"]) else { return };
    let mut m = master.client();
    assert_eq!(m.cmd("DEBUG POPULATE 3000"), ok());
    // 1 ms per key: a load of about three seconds.
    let replica = Server::start(&["--appendonly", "no", "--key-load-delay", "1000", "--loading-process-events-interval-bytes", "1024"]);
    let mut r = replica.client();
    assert_eq!(r.send(&["REPLICAOF", "127.0.0.1", &master.port.to_string()]), ok());
    wait_for("-LOADING while the sync loads", || matches!(r.cmd("GET key:1"), Frame::Error(e) if e.starts_with(b"LOADING")));
    // INFO runs while loading, as in Redis; it waited for the load's end
    // when the load held every shard.
    assert_eq!(r.info_field("persistence", "loading"), "1");
    wait_for("the data once loaded", || r.cmd("GET key:1") == bulk("value:1"));
    assert_eq!(r.cmd("DBSIZE"), int(3000));
    wait_link_up(&mut r);
}

#[test]
fn masterauth_opens_a_master_with_a_password() {
    let Some(master) = Server::start_redis(&["--repl-diskless-sync-delay", "0", "--requirepass", "s3cret"]) else { return };
    let mut m = master.client();
    assert_eq!(m.cmd("AUTH s3cret"), ok());
    assert_eq!(m.cmd("SET guarded 1"), ok());
    let replica = replica_of(&master, &["--appendonly", "no", "--masterauth", "wrong"]);
    let mut r = replica.client();
    // Redis's words, which its tests wait for.
    wait_for("the refusal logged", || replica.log().contains("Unable to AUTH to MASTER: -WRONGPASS"));
    assert_eq!(r.cmd("CONFIG SET masterauth s3cret"), ok());
    wait_link_up(&mut r);
    assert_eq!(r.cmd("GET guarded"), bulk("1"));
    assert_eq!(r.cmd("CONFIG GET masteruser"), Frame::Array(vec![bulk("masteruser"), bulk("")]));
}

/// `replica-serve-stale-data no` on a replica whose master is not there:
/// the same MASTERDOWN refusals, and the same commands let through, from
/// Keel and from Redis, in and out of transactions and scripts.
#[test]
fn a_stale_replica_refuses_as_redis_does() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&["--appendonly", "no"]);
    let mut r = redis.client();
    let mut k = keel.client();
    let commands: &[&[&str]] = &[
        &["SET", "x", "1"],
        &["CONFIG", "SET", "replica-serve-stale-data", "no"],
        &["CONFIG", "GET", "slave-serve-stale-data"],
        &["REPLICAOF", "127.0.0.1", "1"],
        &["GET", "x"],
        &["PING"],
        &["ECHO", "e"],
        &["INFO", "keyspace"],
        &["DBSIZE"],
        &["MULTI"],
        &["GET", "x"],
        &["EXEC"],
        &["MULTI"],
        &["PING"],
        &["EXEC"],
        &["EVAL", "return 1", "0"],
        &["EVAL", "return redis.call('get', 'x')", "0"],
        &["EVAL", "#!lua\nreturn 1", "0"],
        &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('ping')", "0"],
        &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('get', 'x')", "0"],
        &["CONFIG", "SET", "replica-serve-stale-data", "yes"],
        &["GET", "x"],
        &["REPLICAOF", "NO", "ONE"],
        &["CONFIG", "SET", "replica-serve-stale-data", "no"],
        &["GET", "x"],
    ];
    for argv in commands {
        assert_eq!(k.send(argv), r.send(argv), "`{}`", argv.join(" "));
    }
}

/// A writable replica expires the keys its own clients gave a TTL, as
/// Redis's expireSlaveKeys (no DEL of the master's will come for them),
/// while a key of the master's past its time stays until the master's DEL
/// (hidden from reads meanwhile). Checked with a Keel master and with a
/// redis-server master whose active expiry is off.
#[test]
fn a_writable_replica_expires_the_keys_its_own_clients_made_volatile() {
    let keel_master = Server::start(&["--enable-debug-command", "yes"]);
    let redis_master = Server::start_redis(&["--repl-diskless-sync-delay", "0", "--enable-debug-command", "yes"]);
    for master in std::iter::once(&keel_master).chain(redis_master.as_ref()) {
        let mut m = master.client();
        let replica = replica_of(master, &["--replica-read-only", "no"]);
        let mut r = replica.client();
        wait_link_up(&mut r);
        assert_eq!(m.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
        assert_eq!(m.cmd("SET theirs v PX 50"), ok());
        wait_acked(&mut m);
        let lines = ["SET own1 v PX 50", "SETEX own2 1 v", "SET own3 v", "PEXPIRE own3 50", "SET keep v", "SET later v EX 1000"];
        for (i, line) in lines.iter().enumerate() {
            assert!(!matches!(r.cmd(line), Frame::Error(_)), "{i}: {line}");
        }
        assert_eq!(r.cmd("DBSIZE"), int(6));
        // own1, own2 and own3 go by themselves; the master's key stays,
        // absent to reads, until the master deletes it.
        wait_for("the replica's own keys expired", || r.cmd("DBSIZE") == int(3));
        assert_eq!(r.info_field("stats", "slave_expires_tracked_keys"), "1", "`later` still tracked");
        assert_eq!(r.cmd("EXISTS theirs"), int(0));
        assert_eq!(r.cmd("GET keep"), bulk("v"));
        assert_eq!(m.cmd("DEBUG SET-ACTIVE-EXPIRE 1"), ok());
        wait_for("the master's DEL", || r.cmd("DBSIZE") == int(2));
    }
}

/// A function library whose function a read-only replica may call.
const LIBRARY: &str = "#!lua name=lib\nredis.register_function{function_name='hi', callback=function() return 'hi' end, flags={'no-writes'}}";

/// `repl-diskless-load swapdb`: the RDB goes from the link to the parser,
/// whether the master streams it with an EOF mark (redis-server with
/// `repl-diskless-sync yes`, Keel) or sends its length first (redis-server
/// with `repl-diskless-sync no`). The master's data and function libraries
/// replace the replica's own, nothing is written to its directory, and the
/// stream goes on after the payload.
#[test]
fn a_diskless_load_reads_the_rdb_straight_off_the_link() {
    let Some(redis) = redis_master() else { return };
    let redis_sized = Server::start_redis(&["--repl-diskless-sync", "no"]).expect("installed");
    let keel = Server::start(&["--appendonly", "no"]);
    for (master, framing) in [(&redis, "streamed RDB from master with EOF"), (&redis_sized, " bytes from master"), (&keel, "with EOF")] {
        let mut m = master.client();
        write_initial(&mut m);
        assert_eq!(m.send(&["FUNCTION", "LOAD", LIBRARY]), bulk("lib"));
        let replica = Server::start(&["--appendonly", "no", "--repl-diskless-load", "swapdb"]);
        let mut r = replica.client();
        assert_eq!(r.cmd("SET own 1"), ok());
        assert_eq!(r.send(&["REPLICAOF", "127.0.0.1", &master.port.to_string()]), ok());
        wait_link_up(&mut r);
        check_initial(&mut r);
        assert_eq!(r.cmd("EXISTS own"), int(0));
        assert_eq!(r.cmd("FCALL_RO hi 0"), bulk("hi"));
        assert_eq!(m.cmd("SET after 1"), ok());
        wait_acked(&mut m);
        assert_eq!(r.cmd("GET after"), bulk("1"));
        let log = replica.log();
        assert!(log.lines().any(|l| l.contains(framing) && l.ends_with("to parser")), "{log}");
        assert!(log.contains("Swapping active DB with loaded DB"), "{log}");
        let dir = replica.dir.as_ref().expect("a directory");
        let files: Vec<_> = std::fs::read_dir(dir).expect("the replica's dir").map(|e| e.expect("entry").file_name()).collect();
        assert!(files.is_empty(), "nothing written: {files:?}");
    }
}

/// A `swapdb` load that fails (the link cut inside the RDB, a wrong EOF
/// mark, a sized payload cut short) leaves the replica's old data, from
/// Keel as from redis-server; the next full sync that succeeds replaces
/// it. So does a damaged RDB in Keel (redis-server 7.0 exits on one).
#[test]
fn a_failed_diskless_load_leaves_the_old_data() {
    let auth = ["--masteruser", "repl", "--masterauth", "secret", "--repl-diskless-load", "swapdb"];
    let Some(redis) = Server::start_redis(&auth) else { return };
    let keel = Server::start(&[&["--appendonly", "no"][..], &auth].concat());
    // One string key; checksum 0 is not checked.
    let rdb: &[u8] = b"REDIS0009\xfe\x00\x00\x03key\x05value\xff\x00\x00\x00\x00\x00\x00\x00\x00";
    let mark = "m".repeat(40);
    let fullresync = "+FULLRESYNC 0123456789abcdef0123456789abcdef01234567 0\r\n";
    let streamed = |body: &[u8], end: &str| [format!("{fullresync}$EOF:{mark}\r\n").as_bytes(), body, end.as_bytes()].concat();
    let sized = |body: &[u8]| [format!("{fullresync}${}\r\n", rdb.len()).as_bytes(), body].concat();
    let mut failures: Vec<(&str, Vec<u8>)> = vec![
        ("cut inside the RDB", streamed(&rdb[..12], "")),
        ("a wrong EOF mark", streamed(rdb, &"x".repeat(40))),
        ("a sized payload cut short", sized(&rdb[..rdb.len() - 5])),
    ];
    let redis_failures = failures.clone();
    // An unknown value type (99) after the first key.
    let damaged = [&rdb[..22], b"\x63", &rdb[22..]].concat();
    failures.push(("a damaged RDB", streamed(&damaged, &mark)));
    for (replica, failures) in [(&redis, &redis_failures), (&keel, &failures)] {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port().to_string();
        let mut r = replica.client();
        assert_eq!(r.cmd("SET old 1"), ok());
        assert_eq!(r.send(&["REPLICAOF", "127.0.0.1", &port]), ok());
        let mut master = FakeMaster::accept(&listener);
        for (failure, payload) in failures {
            master.handshake(replica.port);
            master.write(payload);
            // The link is cut (a wrong mark alone would have it given up),
            // and the replica comes back.
            drop(master);
            master = FakeMaster::accept(&listener);
            assert_eq!(r.cmd("GET old"), bulk("1"), "after {failure}, port {}", replica.port);
            assert_eq!(r.cmd("EXISTS key"), int(0), "after {failure}");
        }
        master.handshake(replica.port);
        master.write(&streamed(rdb, &mark));
        wait_for("the synced data", || r.cmd("GET key") == bulk("value"));
        assert_eq!(r.cmd("EXISTS old"), int(0));
        assert_eq!(r.cmd("REPLICAOF NO ONE"), ok());
    }
    let log = keel.log();
    assert!(log.contains("Replication stream EOF marker is broken"), "{log}");
    // Redis's lines for a cut link (no damage) and for a damaged RDB.
    assert!(log.contains("Failure loading rdb format from socket, assuming connection error, resuming operation."), "{log}");
    assert!(log.contains("-> at offset 22: corrupt RDB at byte 22: unknown opcode or value type 99. Failure loading rdb format"), "{log}");
    assert!(log.contains("Discarding temporary DB in background"), "{log}");
}

/// `on-empty-db` loads from the link only into an empty dataset, and
/// through a file otherwise (Redis's `useDisklessLoad`).
#[test]
fn on_empty_db_loads_from_the_link_only_into_an_empty_dataset() {
    let Some(master) = redis_master() else { return };
    let mut m = master.client();
    assert_eq!(m.cmd("SET k v"), ok());
    for (own_key, target) in [(false, "to parser"), (true, "to disk")] {
        let replica = Server::start(&["--appendonly", "no", "--repl-diskless-load", "on-empty-db"]);
        let mut r = replica.client();
        if own_key {
            assert_eq!(r.cmd("SET own 1"), ok());
        }
        assert_eq!(r.send(&["REPLICAOF", "127.0.0.1", &master.port.to_string()]), ok());
        wait_link_up(&mut r);
        assert_eq!(r.cmd("GET k"), bulk("v"));
        assert_eq!(r.cmd("EXISTS own"), int(0));
        let log = replica.log();
        assert!(log.lines().any(|l| l.contains("receiving streamed RDB") && l.ends_with(target)), "{log}");
    }
}

/// CLIENT KILL finds the link to the master by its address (the old form,
/// ADDR) or by TYPE master, as Redis's finds its master client; the link
/// comes back with a partial resync. A Keel and a redis-server replica of
/// one master, the same commands, the same replies.
#[test]
fn client_kill_by_address_drops_the_master_link() {
    let Some(master) = redis_master() else { return };
    let mut m = master.client();
    assert_eq!(m.cmd("SET k v"), ok());
    let port = master.port.to_string();
    let keel = replica_of(&master, &["--appendonly", "no"]);
    let redis = Server::start_redis(&["--replicaof", "127.0.0.1", &port]).expect("installed");
    let addr = format!("127.0.0.1:{port}");
    let kills: [(&[&str], Frame); 3] = [
        (&["CLIENT", "KILL", &addr], ok()),
        (&["CLIENT", "KILL", "ADDR", &addr], int(1)),
        (&["CLIENT", "KILL", "TYPE", "master"], int(1)),
    ];
    for replica in [&keel, &redis] {
        let mut r = replica.client();
        wait_link_up(&mut r);
        for (kill, reply) in &kills {
            let mut resyncs = || m.info_field("stats", "sync_partial_ok").parse::<u64>().expect("a count");
            let before = resyncs();
            assert_eq!(r.send(kill), *reply, "{kill:?} on port {}", replica.port);
            wait_for("a partial resync", || resyncs() > before);
            wait_link_up(&mut r);
        }
        assert_eq!(r.send(&["CLIENT", "KILL", "ADDR", "127.0.0.1:1"]), int(0));
        assert_eq!(r.send(&["CLIENT", "KILL", "127.0.0.1:1"]), err("ERR No such client"));
        assert_eq!(r.cmd("GET k"), bulk("v"));
    }
}

/// A `swapdb` load cut off by the master, as Redis's own test of it: while
/// the master's RDB comes slowly (`rdb-key-save-delay`), the replica says
/// it is loading (once `loading-process-events-interval-bytes` are in,
/// however few keys that is); when the master drops it, the old data is
/// there again, whole. A Keel and a redis-server replica, each of a Keel
/// master.
#[test]
fn a_swapdb_load_cut_off_by_the_master_shows_loading_then_the_old_data() {
    let Some(redis) = Server::start_redis(&["--repl-diskless-load", "swapdb"]) else { return };
    let keel = Server::start(&["--appendonly", "no", "--repl-diskless-load", "swapdb"]);
    for replica in [&keel, &redis] {
        let master = Server::start(&["--appendonly", "no", "--enable-debug-command", "yes", "--rdbcompression", "no"]);
        let mut m = master.client();
        // 100 keys of 100 kB, one every 100 ms.
        assert_eq!(m.cmd("DEBUG POPULATE 100 key 100000"), ok());
        assert_eq!(m.cmd("CONFIG SET rdb-key-save-delay 100000"), ok());
        let mut r = replica.client();
        assert_eq!(r.cmd("SET mykey myvalue"), ok());
        assert_eq!(r.send(&["REPLICAOF", "127.0.0.1", &master.port.to_string()]), ok());
        wait_for("the replica loading", || r.info_field("persistence", "loading") == "1");
        assert!(matches!(r.cmd("GET mykey"), Frame::Error(e) if e.starts_with(b"LOADING")), "port {}", replica.port);
        // The next sync would start at once otherwise.
        assert_eq!(m.cmd("CONFIG SET repl-diskless-sync-delay 30"), ok());
        assert_eq!(m.cmd("CLIENT KILL TYPE replica"), int(1));
        wait_for("the load's end", || r.info_field("persistence", "loading") == "0");
        assert_eq!(r.cmd("GET mykey"), bulk("myvalue"), "port {}", replica.port);
        assert_eq!(r.cmd("DBSIZE"), int(1));
        assert_eq!(r.cmd("REPLICAOF NO ONE"), ok());
    }
}

/// Becoming a replica ends the waits of blocked clients with Redis's
/// -UNBLOCKED error and closes them (what they wait for would now come
/// from the master): Keel and redis-server alike.
#[test]
fn becoming_a_replica_unblocks_blocked_clients_with_an_error() {
    let Some(master) = redis_master() else { return };
    let port = master.port.to_string();
    let keel = Server::start(&["--appendonly", "no"]);
    let redis = Server::start_redis(&[]).expect("installed");
    for server in [&keel, &redis] {
        let mut blocked = server.client();
        blocked.write_command(&["BLPOP", "foo", "0"]);
        let mut c = server.client();
        wait_for("the client blocked", || c.info_field("clients", "blocked_clients") == "1");
        assert_eq!(c.send(&["REPLICAOF", "127.0.0.1", &port]), ok());
        let unblocked = err("UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)");
        assert_eq!(blocked.read(), unblocked, "port {}", server.port);
        assert!(blocked.read_to_close().is_empty(), "closed after the error");
    }
}

/// A replica's own replica gets its master's stream byte for byte, and a
/// transaction only once its EXEC came, even when its MULTI arrived in an
/// earlier read: the two pieces go on together.
#[test]
fn a_replicas_replica_gets_a_split_transaction_whole_at_its_exec() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port().to_string();
    let replica = Server::start(&["--appendonly", "no", "--replicaof", "127.0.0.1", &port, "--masteruser", "repl", "--masterauth", "secret"]);
    let mut master = FakeMaster::accept(&listener);
    assert_eq!(master.handshake(replica.port), ["PSYNC", "?", "-1"]);
    let replid = "0123456789abcdef0123456789abcdef01234567";
    let rdb = b"REDIS0009\xff\x00\x00\x00\x00\x00\x00\x00\x00";
    master.write(format!("+FULLRESYNC {replid} 100\r\n${}\r\n", rdb.len()).as_bytes());
    master.write(rdb);
    let select = common::encode(&["SELECT", "0"]);
    master.write(&select);
    master.wait_ack(100 + select.len() as i64);

    // A replica of the replica, raw: its full sync, then the stream.
    let mut sub = std::net::TcpStream::connect(("127.0.0.1", replica.port)).expect("connect");
    sub.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    sub.write_all(&common::encode(&["PSYNC", "?", "-1"])).expect("psync");
    let mut got = Vec::new();
    let read_until = |sub: &mut std::net::TcpStream, got: &mut Vec<u8>, enough: &dyn Fn(&[u8]) -> bool| {
        while !enough(got) {
            let mut piece = [0u8; 4096];
            let n = sub.read(&mut piece).expect("read");
            assert!(n > 0, "closed");
            got.extend_from_slice(&piece[..n]);
        }
    };
    let fullresync = format!("+FULLRESYNC {replid} {}\r\n", 100 + select.len());
    read_until(&mut sub, &mut got, &|g: &[u8]| g.windows(2).filter(|w| w == b"\r\n").count() >= 2);
    assert!(got.starts_with(fullresync.as_bytes()), "{}", String::from_utf8_lossy(&got));
    got.drain(..fullresync.len());
    // Keepalive newlines may come before the RDB's length.
    let newlines = got.iter().take_while(|&&b| b == b'\n').count();
    got.drain(..newlines);
    let header_end = got.windows(2).position(|w| w == b"\r\n").expect("length") + 2;
    let len: usize = String::from_utf8_lossy(&got[1..header_end - 2]).parse().expect("length");
    read_until(&mut sub, &mut got, &|g: &[u8]| g.len() >= header_end + len);
    got.drain(..header_end + len);

    let (multi, incr, exec) = (common::encode(&["MULTI"]), common::encode(&["INCR", "n"]), common::encode(&["EXEC"]));
    master.write(&[multi.clone(), incr.clone()].concat());
    let mut r = replica.client();
    wait_for("the MULTI read", || r.info_field("replication", "slave_read_repl_offset") == (100 + select.len() + multi.len() + incr.len()).to_string());
    // Nothing of the transaction goes on before its EXEC.
    sub.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
    let mut piece = [0u8; 64];
    assert!(got.is_empty() && sub.read(&mut piece).is_err(), "sent before the EXEC: {got:?}");
    sub.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    master.write(&exec);
    let whole = [multi, incr, exec].concat();
    read_until(&mut sub, &mut got, &|g: &[u8]| g.len() >= whole.len());
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&whole), "the transaction as the master sent it");
    assert_eq!(r.cmd("GET n"), bulk("1"));
}
