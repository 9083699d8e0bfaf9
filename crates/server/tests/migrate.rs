//! MIGRATE over real sockets: Keel to Keel, Keel to Debian's
//! redis-server 7.0.15 and redis-server to Keel; one key and the KEYS
//! form, COPY, REPLACE, a busy key, NOKEY, TTLs, every type, the target
//! database, AUTH and AUTH2, a target that never answers, the cached
//! connection, the source's keyspace events and WATCH, a write that comes
//! while MIGRATE waits for the target, the deletion's durability across a
//! kill -9, and RESTORE-ASKING.

mod common;

use common::{bulk, int, ok, simple, temp_dir, Client, Frame, Server};

/// Fills every type, compact and big encodings, and a TTL.
fn fill(c: &mut Client) -> Vec<&'static str> {
    c.cmd("SET s hello");
    c.cmd("SET n 12345");
    c.cmd("RPUSH l a b c 1 2 3");
    c.cmd("SADD si 1 2 3");
    c.cmd("SADD ss a b c");
    c.cmd("HSET h f1 v1 f2 v2");
    c.cmd("ZADD z 1 a 2.5 b");
    c.cmd("PFADD hll a b c");
    c.cmd("XADD x 1-1 f v");
    c.cmd("XGROUP CREATE x g 0");
    c.cmd("XREADGROUP GROUP g alice COUNT 1 STREAMS x >");
    for i in 0..300 {
        c.send(&["RPUSH", "bl", &format!("e{i}")]);
        c.send(&["SADD", "bs", &format!("m{i}")]);
        c.send(&["HSET", "bh", &format!("f{i}"), &format!("v{i}")]);
        c.send(&["ZADD", "bz", &i.to_string(), &format!("m{i}")]);
    }
    c.cmd("SET t withttl");
    c.cmd("PEXPIRE t 100000");
    vec!["s", "n", "l", "si", "ss", "h", "z", "hll", "x", "bl", "bs", "bh", "bz", "t"]
}

/// Each key's value digest, which Redis and Keel compute alike.
fn digests(c: &mut Client, keys: &[&str]) -> Frame {
    let mut argv = vec!["DEBUG", "DIGEST-VALUE"];
    argv.extend(keys);
    c.send(&argv)
}

fn port_arg(server: &Server) -> String {
    server.port.to_string()
}

fn migrate(c: &mut Client, target: &Server, rest: &[&str]) -> Frame {
    let port = port_arg(target);
    let mut argv = vec!["MIGRATE", "127.0.0.1", &port];
    argv.extend(rest);
    c.send(&argv)
}

/// Every key and type moves, with its TTL, and is gone from the source.
fn moves_everything(source: &Server, target: &Server) {
    let (mut s, mut t) = (source.client(), target.client());
    let keys = fill(&mut s);
    let before = digests(&mut s, &keys);
    let mut rest = vec!["", "0", "5000", "KEYS"];
    rest.extend(&keys);
    assert_eq!(migrate(&mut s, target, &rest), ok());
    assert_eq!(digests(&mut t, &keys), before);
    assert_eq!(s.cmd("DBSIZE"), int(0));
    assert_eq!(t.cmd("DBSIZE"), int(keys.len() as i64));
    let Frame::Integer(ttl) = t.cmd("PTTL t") else { panic!("PTTL") };
    assert!((90_000..=100_000).contains(&ttl), "TTL {ttl}");
    assert_eq!(t.cmd("PTTL s"), int(-1));
    assert_eq!(t.cmd("XPENDING x g"), s_pending());
}

fn s_pending() -> Frame {
    Frame::Array(vec![
        int(1),
        bulk("1-1"),
        bulk("1-1"),
        Frame::Array(vec![Frame::Array(vec![bulk("alice"), bulk("1")])]),
    ])
}

#[test]
fn every_type_moves_between_keel_servers() {
    let (source, target) = (Server::start(DEBUG), Server::start(DEBUG));
    moves_everything(&source, &target);
}

const DEBUG: &[&str] = &["--enable-debug-command", "yes"];

#[test]
fn every_type_moves_from_keel_to_redis() {
    let Some(target) = Server::start_redis(DEBUG) else { return };
    moves_everything(&Server::start(DEBUG), &target);
}

#[test]
fn every_type_moves_from_redis_to_keel() {
    let Some(source) = Server::start_redis(DEBUG) else { return };
    moves_everything(&source, &Server::start(DEBUG));
}

#[test]
fn one_key_copy_replace_and_a_busy_key() {
    let (source, target) = (Server::start(&[]), Server::start(&[]));
    let (mut s, mut t) = (source.client(), target.client());
    s.cmd("SET k v1");
    assert_eq!(migrate(&mut s, &target, &["k", "0", "1000", "COPY"]), ok());
    assert_eq!(s.cmd("GET k"), bulk("v1"));
    assert_eq!(t.cmd("GET k"), bulk("v1"));
    // The target has the key: refused, and the source keeps it.
    s.cmd("SET k v2");
    assert_eq!(
        migrate(&mut s, &target, &["k", "0", "1000"]),
        Frame::Error(b"ERR Target instance replied with error: BUSYKEY Target key name already exists.".to_vec())
    );
    assert_eq!(s.cmd("GET k"), bulk("v2"));
    assert_eq!(migrate(&mut s, &target, &["k", "0", "1000", "REPLACE"]), ok());
    assert_eq!(s.cmd("EXISTS k"), int(0));
    assert_eq!(t.cmd("GET k"), bulk("v2"));
    // None of the keys here.
    assert_eq!(migrate(&mut s, &target, &["k", "0", "1000"]), simple("NOKEY"));
    assert_eq!(migrate(&mut s, &target, &["", "0", "1000", "KEYS", "a", "b"]), simple("NOKEY"));
}

/// Keys the target took are deleted, the ones it refused stay (Redis's
/// "delete just ack keys"), and the journal and a replica get one DEL of
/// the moved ones.
#[test]
fn only_the_keys_the_target_took_are_deleted() {
    let (source, target) = (Server::start(&[]), Server::start(&[]));
    let (mut s, mut t) = (source.client(), target.client());
    let replica = Server::start(&["--replicaof", "127.0.0.1", &source.port.to_string()]);
    let mut r = replica.client();
    s.cmd("MSET a 1 b 2 c 3 d 4 e 5");
    t.cmd("MSET c x d y");
    let reply = migrate(&mut s, &target, &["", "0", "1000", "KEYS", "a", "b", "c", "d", "e"]);
    assert_eq!(reply, Frame::Error(b"ERR Target instance replied with error: BUSYKEY Target key name already exists.".to_vec()));
    assert_eq!(s.cmd("DBSIZE"), int(2));
    assert_eq!(s.cmd("MGET c d"), Frame::Array(vec![bulk("3"), bulk("4")]));
    assert_eq!(t.cmd("MGET a b c d e"), Frame::Array(["1", "2", "x", "y", "5"].map(bulk).to_vec()));
    common::wait_for("the replica to apply the DEL", || r.cmd("DBSIZE") == int(2));
    let log = std::fs::read_dir(source.dir.as_ref().expect("dir").join("appendonlydir"))
        .expect("aof dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".incr.aof"))
        .map(|e| std::fs::read(e.path()).expect("read incr"))
        .next()
        .expect("an incr file");
    let log = String::from_utf8_lossy(&log);
    assert!(log.contains("*4\r\n$3\r\nDEL\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\ne\r\n"), "{log}");
}

#[test]
fn the_destination_database_and_the_cached_connection() {
    let (source, target) = (Server::start(&[]), Server::start(&[]));
    let (mut s, mut t) = (source.client(), target.client());
    s.cmd("MSET a 1 b 2 c 3");
    assert_eq!(migrate(&mut s, &target, &["a", "5", "1000"]), ok());
    assert_eq!(migrate(&mut s, &target, &["b", "5", "1000"]), ok());
    assert_eq!(migrate(&mut s, &target, &["c", "6", "1000"]), ok());
    // One connection served all three, and SELECT went only when the
    // database changed.
    let Frame::Bulk(list) = t.cmd("CLIENT LIST") else { panic!("CLIENT LIST") };
    let list = String::from_utf8_lossy(&list);
    assert_eq!(list.lines().filter(|l| l.contains("cmd=restore")).count(), 1, "{list}");
    assert_eq!(s.info_field("stats", "migrate_cached_sockets"), "1");
    let Frame::Bulk(stats) = t.cmd("INFO commandstats") else { panic!("INFO") };
    let stats = String::from_utf8_lossy(&stats);
    assert!(stats.contains("cmdstat_select:calls=2,"), "{stats}");
    t.cmd("SELECT 5");
    assert_eq!(t.cmd("MGET a b"), Frame::Array(vec![bulk("1"), bulk("2")]));
    t.cmd("SELECT 6");
    assert_eq!(t.cmd("GET c"), bulk("3"));
    // The target's database 99 does not exist: its error is the reply,
    // and the key stays.
    s.cmd("SET d 4");
    assert_eq!(
        migrate(&mut s, &target, &["d", "99", "1000"]),
        Frame::Error(b"ERR Target instance replied with error: ERR DB index is out of range".to_vec())
    );
    assert_eq!(s.cmd("GET d"), bulk("4"));
}

/// A cached connection the target closed is replaced once, silently.
#[test]
fn a_cached_connection_the_target_closed_is_reopened() {
    let (source, target) = (Server::start(&[]), Server::start(&[]));
    let (mut s, mut t) = (source.client(), target.client());
    s.cmd("MSET a 1 b 2");
    assert_eq!(migrate(&mut s, &target, &["a", "0", "1000"]), ok());
    assert_eq!(t.cmd("CLIENT KILL TYPE normal SKIPME yes"), int(1));
    assert_eq!(migrate(&mut s, &target, &["b", "0", "1000"]), ok());
    assert_eq!(t.cmd("MGET a b"), Frame::Array(vec![bulk("1"), bulk("2")]));
}

#[test]
fn auth_and_auth2_to_a_target_with_a_password() {
    let target = Server::start(&["--requirepass", "foobar"]);
    let source = Server::start(&[]);
    let (mut s, mut t) = (source.client(), target.client());
    t.cmd("AUTH foobar");
    t.cmd("ACL SETUSER mover on >pw ~* +@all");
    s.cmd("MSET a 1 b 2 c 3 d 4");
    assert_eq!(migrate(&mut s, &target, &["a", "0", "1000", "AUTH", "foobar"]), ok());
    assert_eq!(migrate(&mut s, &target, &["b", "0", "1000", "AUTH2", "mover", "pw"]), ok());
    assert_eq!(t.cmd("MGET a b"), Frame::Array(vec![bulk("1"), bulk("2")]));
    let Frame::Error(e) = migrate(&mut s, &target, &["c", "0", "1000", "AUTH", "wrong"]) else { panic!("accepted") };
    assert_eq!(
        String::from_utf8_lossy(&e),
        "ERR Target instance replied with error: WRONGPASS invalid username-password pair or user is disabled."
    );
    // The source keeps the key. The cached connection was authenticated
    // before, as mover, and a failed AUTH leaves it so: the RESTORE ran
    // there, as it does in Redis.
    assert_eq!(s.cmd("GET c"), bulk("3"));
    assert_eq!(t.cmd("GET c"), bulk("3"));
    // The password is not in the slow log, nor shown to MONITOR.
    s.cmd("CONFIG SET slowlog-log-slower-than 0");
    let mut monitor = source.client();
    assert_eq!(monitor.cmd("MONITOR"), ok());
    assert_eq!(migrate(&mut s, &target, &["d", "0", "1000", "AUTH2", "mover", "pw"]), ok());
    let log = common::readable(&format!("{:?}", s.cmd("SLOWLOG GET 1")));
    assert!(log.contains(r#"Bulk("AUTH2"), Bulk("(redacted)"), Bulk("(redacted)")"#), "{log}");
    let Frame::Simple(line) = monitor.read() else { panic!("MONITOR line") };
    let line = String::from_utf8_lossy(&line);
    assert!(line.ends_with(r#""AUTH2" "(redacted)" "(redacted)""#), "{line}");
}

/// A target that accepts and never answers: the reply is Redis's IOERR
/// once the timeout passes, the key stays, and the source keeps serving.
#[test]
fn a_silent_target_times_out() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port().to_string();
    let source = Server::start(&[]);
    let mut s = source.client();
    s.cmd("SET k v");
    let reply = s.send(&["MIGRATE", "127.0.0.1", &port, "k", "0", "200"]);
    assert_eq!(reply, Frame::Error(b"IOERR error or timeout reading to target instance".to_vec()));
    assert_eq!(s.cmd("GET k"), bulk("v"));
    assert_eq!(s.info_field("stats", "migrate_cached_sockets"), "0");
    drop(listener);
    // Nobody listens there now: Redis's connect does not notice, its
    // write does.
    let reply = s.send(&["MIGRATE", "127.0.0.1", &port, "k", "0", "200"]);
    assert_eq!(reply, Frame::Error(b"IOERR error or timeout writing to target instance".to_vec()));
    // A host with no address is the one failure to connect.
    let reply = s.send(&["MIGRATE", "256.1.1.1", &port, "k", "0", "200"]);
    assert_eq!(reply, Frame::Error(b"IOERR error or timeout connecting to the client".to_vec()));
}

/// The source announces `del` for a moved key and its watchers' EXEC
/// fails; COPY changes nothing.
#[test]
fn the_source_sees_a_deletion() {
    let (source, target) = (Server::start(&[]), Server::start(&[]));
    let mut s = source.client();
    s.cmd("CONFIG SET notify-keyspace-events Eg");
    let mut sub = source.client();
    sub.cmd("SUBSCRIBE __keyevent@0__:del");
    let mut watcher = source.client();
    s.cmd("MSET a 1 b 2");
    watcher.cmd("WATCH a");
    assert_eq!(migrate(&mut s, &target, &["a", "0", "1000"]), ok());
    let message = Frame::Array(vec![bulk("message"), bulk("__keyevent@0__:del"), bulk("a")]);
    assert_eq!(sub.read(), message);
    watcher.cmd("MULTI");
    watcher.cmd("PING");
    assert_eq!(watcher.cmd("EXEC"), Frame::Null);
    watcher.cmd("WATCH b");
    assert_eq!(migrate(&mut s, &target, &["b", "0", "1000", "COPY", "REPLACE"]), ok());
    watcher.cmd("MULTI");
    watcher.cmd("PING");
    assert_eq!(watcher.cmd("EXEC"), Frame::Array(vec![simple("PONG")]));
}

/// Under `appendfsync always` the reply leaves once the DEL is on disk:
/// killed right after it, the source comes back without the key.
#[test]
fn a_moved_key_stays_gone_after_kill_9() {
    let dir = temp_dir("migrate-kill9");
    let target = Server::start(&[]);
    for round in 0..3 {
        let source = Server::start_in(&dir, &["--appendfsync", "always"]);
        let mut s = source.client();
        let key = format!("k{round}");
        s.send(&["SET", &key, "v"]);
        assert_eq!(migrate(&mut s, &target, &[&key, "0", "1000"]), ok());
        source.kill9();
        let source = Server::start_in(&dir, &["--appendfsync", "always"]);
        assert_eq!(source.client().send(&["EXISTS", &key]), int(0), "round {round}");
        source.kill9();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// RESTORE-ASKING is RESTORE outside cluster mode, in Keel as in
/// redis-server, and survives a restart (journaled with its absolute TTL).
#[test]
fn restore_asking_is_restore() {
    let dir = temp_dir("restore-asking");
    let keel = Server::start_in(&dir, &[]);
    let mut servers = vec![keel];
    servers.extend(Server::start_redis(&[]));
    for server in &servers {
        let mut c = server.client();
        c.cmd("RPUSH l a b c");
        let Frame::Bulk(payload) = c.cmd("DUMP l") else { panic!("DUMP") };
        assert_eq!(
            c.send(&[&b"RESTORE-ASKING"[..], b"l", b"0", &payload]),
            Frame::Error(b"BUSYKEY Target key name already exists.".to_vec())
        );
        assert_eq!(c.send(&[&b"RESTORE-ASKING"[..], b"m", b"100000", &payload]), ok());
        assert_eq!(c.cmd("LRANGE m 0 -1"), Frame::Array(vec![bulk("a"), bulk("b"), bulk("c")]));
        assert_eq!(c.send(&[&b"restore-asking"[..], b"m", b"0", b"junk", b"REPLACE"]), Frame::Error(b"ERR DUMP payload version or checksum are wrong".to_vec()));
    }
    let keel = servers.remove(0);
    keel.kill9();
    let keel = Server::start_last_in(&dir, &[]);
    let mut c = keel.client();
    assert_eq!(c.cmd("LRANGE m 0 -1"), Frame::Array(vec![bulk("a"), bulk("b"), bulk("c")]));
    let Frame::Integer(ttl) = c.cmd("PTTL m") else { panic!("PTTL") };
    assert!(ttl > 0 && ttl <= 100_000, "TTL {ttl}");
}

/// A write to a key while MIGRATE waits for the target's answer waits for
/// MIGRATE (the key's shard stays locked): it lands after the deletion
/// instead of being deleted with the key. The target here is a listener
/// that answers only once the write was dispatched.
#[test]
fn a_write_during_the_exchange_waits_for_it() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port().to_string();
    let source = Server::start(&["--threads", "4"]);
    let (mut s, mut writer, mut observer) = (source.client(), source.client(), source.client());
    s.cmd("SET k old");
    s.write_command(&["MIGRATE", "127.0.0.1", &port, "k", "0", "10000"]);
    let (mut target, _) = listener.accept().expect("accept");
    // SELECT 0, then the RESTORE: read until both have come whole.
    let (mut got, mut commands) = (Vec::new(), 0);
    while commands < 2 {
        let mut buf = [0u8; 4096];
        let n = target.read(&mut buf).expect("read");
        assert!(n > 0, "MIGRATE closed the connection");
        got.extend_from_slice(&buf[..n]);
        while let Ok(Some((_, used))) = keel_protocol::frame::parse_frame(&got) {
            got.drain(..used);
            commands += 1;
        }
    }
    writer.write_command(&["SET", "k", "new"]);
    common::wait_for("the SET to be dispatched", || {
        let Frame::Bulk(list) = observer.cmd("CLIENT LIST") else { return false };
        String::from_utf8_lossy(&list).lines().any(|l| l.contains("cmd=set"))
    });
    target.write_all(b"+OK\r\n+OK\r\n").expect("answer");
    assert_eq!(s.read(), ok());
    assert_eq!(writer.read(), ok());
    assert_eq!(s.cmd("GET k"), bulk("new"));
}
