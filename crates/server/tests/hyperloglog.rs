//! Black-box tests of the HyperLogLog commands over real sockets: exact
//! replies, error texts and value bytes (those redis-server 7.0.15 gives),
//! the cached count, `hll-sparse-max-bytes`, WATCH, and the value's life
//! through the AOF (a restart), an RDB file redis-server loads, and a
//! replica.

mod common;

use std::time::{Duration, Instant};

use common::state::bulk_bytes;
use common::{bulk, err, int, ok, simple, temp_dir, Client, Frame, Server};

fn keel(extra: &[&str]) -> (Server, Client) {
    let server = Server::start(extra);
    let client = server.client();
    (server, client)
}

fn bytes(b: &[u8]) -> Frame {
    Frame::Bulk(b.to_vec())
}

/// `PFADD key` with `n` elements named from `tag`.
fn add_many(c: &mut Client, key: &str, tag: &str, n: usize) -> Frame {
    let mut argv = vec!["PFADD".to_string(), key.to_string()];
    argv.extend((0..n).map(|i| format!("{tag}:{i}")));
    c.send(&argv)
}

const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

#[test]
fn pfadd_and_pfcount_give_redis_bytes() {
    let (_s, mut c) = keel(&[]);
    // PFADD without elements creates an empty sparse HLL (counted as a
    // change, so its cache is marked stale, as Redis's).
    assert_eq!(c.cmd("PFADD empty"), int(1));
    assert_eq!(c.cmd("PFADD empty"), int(0));
    assert_eq!(c.cmd("GET empty"), bytes(b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80\x7f\xff"));
    assert_eq!(c.cmd("PFCOUNT empty"), int(0));
    assert_eq!(c.cmd("PFADD k a b c"), int(1));
    assert_eq!(c.cmd("PFADD k a b c"), int(0));
    // What redis-server 7.0.15 holds after the same PFADD: a stale cache.
    let stale = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80\x60\xf3\x80\x50\xb1\x84\x4b\xfb\x80\x42\x5a";
    assert_eq!(c.cmd("GET k"), bytes(stale));
    assert_eq!(c.cmd("PFDEBUG DECODE k"), bulk("Z:8436 v:1,1 Z:4274 v:2,1 Z:3068 v:1,1 Z:603"));
    assert_eq!(c.cmd("OBJECT ENCODING k"), bulk("raw"));
    // PFCOUNT writes the count into the header.
    assert_eq!(c.cmd("PFCOUNT k"), int(3));
    let mut cached = stale.to_vec();
    cached[8] = 3;
    cached[15] = 0;
    assert_eq!(c.cmd("GET k"), bytes(&cached));
    // The register of "" and its value, as Redis's.
    assert_eq!(c.send(&["PFADD", "e", ""]), int(1));
    assert_eq!(c.cmd("PFDEBUG DECODE e"), bulk("Z:5938 v:2,1 Z:10445"));
    assert_eq!(c.cmd("PFDEBUG ENCODING e"), simple("sparse"));
    // PFCOUNT of several keys: the union, nothing written.
    assert_eq!(c.cmd("PFADD k2 c d e"), int(1));
    assert_eq!(c.cmd("PFCOUNT k k2 nokey"), int(5));
    assert_eq!(c.cmd("PFCOUNT nokey"), int(0));
    assert_eq!(c.cmd("EXISTS nokey"), int(0));
}

/// Redis's own test: the cache byte is 0x00 after a count, stays so when
/// nothing changed, and 0x80 once a register rose.
#[test]
fn the_cache_is_invalidated_only_by_changes() {
    let (_s, mut c) = keel(&[]);
    c.cmd("PFADD hll a b c");
    c.cmd("PFCOUNT hll");
    assert_eq!(c.cmd("GETRANGE hll 15 15"), bytes(b"\x00"));
    c.cmd("PFADD hll a b c");
    assert_eq!(c.cmd("GETRANGE hll 15 15"), bytes(b"\x00"));
    c.cmd("PFADD hll 1 2 3");
    assert_eq!(c.cmd("GETRANGE hll 15 15"), bytes(b"\x80"));
    c.cmd("PFDEBUG TODENSE hll");
    assert_eq!(c.cmd("STRLEN hll"), int(12304));
    assert_eq!(c.cmd("GETRANGE hll 15 15"), bytes(b"\x80"));
    assert_eq!(c.cmd("PFCOUNT hll"), int(6));
    assert_eq!(c.cmd("GETRANGE hll 8 15"), bytes(b"\x06\0\0\0\0\0\0\0"));
}

#[test]
fn errors_are_redis_ones() {
    let (_s, mut c) = keel(&[]);
    c.cmd("RPUSH list a");
    let wrongtype = err("WRONGTYPE Operation against a key holding the wrong kind of value");
    assert_eq!(c.cmd("PFADD list a"), wrongtype);
    assert_eq!(c.cmd("PFCOUNT list"), wrongtype);
    assert_eq!(c.cmd("PFCOUNT nokey list"), wrongtype);
    assert_eq!(c.cmd("PFMERGE list"), wrongtype);
    c.cmd("SET str hello");
    c.cmd("SET num 12345678901234567");
    for key in ["str", "num"] {
        assert_eq!(c.send(&["PFADD", key, "x"]), err(NOT_HLL));
        assert_eq!(c.send(&["PFCOUNT", key]), err(NOT_HLL));
        assert_eq!(c.send(&["PFMERGE", "dest", key]), err(NOT_HLL));
        assert_eq!(c.send(&["PFMERGE", key, "nokey"]), err(NOT_HLL));
        assert_eq!(c.send(&["PFDEBUG", "ENCODING", key]), err(NOT_HLL));
    }
    assert_eq!(c.cmd("EXISTS dest"), int(0));
    // Broken magic, unknown encoding, a dense value of the wrong length.
    for (at, with) in [(0, "0123"), (4, "x"), (4, "\x00")] {
        c.cmd("DEL hll");
        c.cmd("PFADD hll a b c");
        c.send(&["SETRANGE", "hll", &at.to_string(), with]);
        assert_eq!(c.cmd("PFCOUNT hll"), err(NOT_HLL), "SETRANGE {at}");
    }
    // Registers past the end: the header is fine, the opcodes are not.
    c.cmd("DEL hll");
    c.cmd("PFADD hll a b c");
    c.cmd("APPEND hll hello");
    assert_eq!(c.cmd("PFCOUNT hll"), err(CORRUPT));
    assert_eq!(c.cmd("PFCOUNT hll nokey"), err(CORRUPT));
    assert_eq!(c.cmd("PFMERGE dest hll"), err(CORRUPT));
    assert_eq!(c.cmd("PFDEBUG GETREG hll"), err(CORRUPT));
    let errorstats = String::from_utf8_lossy(&bulk_bytes(&c.cmd("INFO errorstats"))).into_owned();
    assert!(errorstats.contains("errorstat_INVALIDOBJ:count=4"), "{errorstats}");
    // PFDEBUG.
    assert_eq!(c.cmd("PFDEBUG GETREG nokey"), err("ERR The specified key does not exist"));
    assert_eq!(c.cmd("PFDEBUG nosuch nokey"), err("ERR The specified key does not exist"));
    c.cmd("PFADD h x");
    assert_eq!(c.cmd("PFDEBUG nosuch h"), err("ERR Unknown PFDEBUG subcommand 'nosuch'"));
    assert_eq!(c.cmd("PFDEBUG TODENSE h"), int(1));
    assert_eq!(c.cmd("PFDEBUG todense h"), int(0));
    assert_eq!(c.cmd("PFDEBUG DECODE h"), err("ERR HLL encoding is not sparse"));
    assert_eq!(c.cmd("PFDEBUG ENCODING h"), simple("dense"));
    assert_eq!(c.cmd("PFDEBUG GETREG h extra"), err("ERR wrong number of arguments for 'pfdebug' command"));
    assert_eq!(c.cmd("PFADD"), err("ERR wrong number of arguments for 'pfadd' command"));
    assert_eq!(c.cmd("PFSELFTEST x"), err("ERR wrong number of arguments for 'pfselftest' command"));
    assert_eq!(c.cmd("PFSELFTEST"), ok());
}

#[test]
fn getreg_lists_every_register_and_turns_the_value_dense() {
    let (_s, mut c) = keel(&[]);
    c.cmd("PFADD hll 1 2 3");
    let Frame::Array(registers) = c.cmd("PFDEBUG GETREG hll") else { panic!("not an array") };
    assert_eq!(registers.len(), 16384);
    assert_eq!(registers.iter().filter(|r| **r != int(0)).count(), 3);
    assert_eq!(c.cmd("PFDEBUG ENCODING hll"), simple("dense"));
}

#[test]
fn pfmerge_is_the_union_and_dense_when_a_source_is() {
    let (_s, mut c) = keel(&[]);
    c.cmd("PFADD a{t} a b c");
    c.cmd("PFADD b{t} b c d");
    c.cmd("PFADD c{t} c d e");
    assert_eq!(c.cmd("PFMERGE hll{t} a{t} b{t} c{t}"), ok());
    assert_eq!(c.cmd("PFCOUNT hll{t}"), int(5));
    assert_eq!(c.cmd("PFDEBUG ENCODING hll{t}"), simple("sparse"));
    // A merge into itself alone still writes (and invalidates the cache).
    assert_eq!(c.cmd("PFMERGE hll{t}"), ok());
    assert_eq!(c.cmd("GETRANGE hll{t} 15 15"), bytes(b"\x80"));
    assert_eq!(c.cmd("PFMERGE new{t}"), ok());
    assert_eq!(c.cmd("PFCOUNT new{t}"), int(0));
    c.cmd("PFDEBUG TODENSE c{t}");
    assert_eq!(c.cmd("PFMERGE d{t} a{t} c{t}"), ok());
    assert_eq!(c.cmd("PFDEBUG ENCODING d{t}"), simple("dense"));
    assert_eq!(c.cmd("PFCOUNT d{t}"), int(5));
    // The merge of many sparse sources goes dense at the limit.
    for i in 0..5 {
        add_many(&mut c, &format!("s{i}{{t}}"), &format!("s{i}"), 400);
    }
    assert_eq!(c.cmd("PFMERGE all{t} s0{t} s1{t} s2{t} s3{t} s4{t}"), ok());
    assert_eq!(c.cmd("PFDEBUG ENCODING all{t}"), simple("dense"));
    let Frame::Integer(n) = c.cmd("PFCOUNT all{t}") else { panic!("not a count") };
    assert!((1900..=2100).contains(&n), "{n}");
}

#[test]
fn hll_sparse_max_bytes_sets_where_values_turn_dense() {
    let (_s, mut c) = keel(&[]);
    assert_eq!(c.cmd("CONFIG GET hll-sparse-max-bytes"), Frame::Array(vec![bulk("hll-sparse-max-bytes"), bulk("3000")]));
    add_many(&mut c, "three", "x", 200);
    assert_eq!(c.cmd("PFDEBUG ENCODING three"), simple("sparse"));
    assert_eq!(c.cmd("CONFIG SET hll-sparse-max-bytes 100"), ok());
    add_many(&mut c, "hundred", "x", 200);
    assert_eq!(c.cmd("PFDEBUG ENCODING hundred"), simple("dense"));
    // A value already past the new limit turns dense at its next growth.
    assert_eq!(c.cmd("PFDEBUG ENCODING three"), simple("sparse"));
    add_many(&mut c, "three", "y", 10);
    assert_eq!(c.cmd("PFDEBUG ENCODING three"), simple("dense"));
    assert_eq!(c.cmd("CONFIG SET hll-sparse-max-bytes 0"), ok());
    assert_eq!(c.cmd("PFADD zero a"), int(1));
    assert_eq!(c.cmd("PFDEBUG ENCODING zero"), simple("dense"));
    assert_eq!(
        c.cmd("CONFIG SET hll-sparse-max-bytes -1"),
        err("ERR CONFIG SET failed (possibly related to argument 'hll-sparse-max-bytes') - argument must be a memory value")
    );
    // Started with the directive.
    let (_s, mut c) = keel(&["--hll-sparse-max-bytes", "50"]);
    add_many(&mut c, "h", "x", 20);
    assert_eq!(c.cmd("PFDEBUG ENCODING h"), simple("dense"));
}

#[test]
fn a_refreshed_count_touches_watchers_and_counts_as_a_change() {
    let (s, mut c) = keel(&[]);
    c.cmd("PFADD hll a b c");
    let before: u64 = c.info_field("persistence", "rdb_changes_since_last_save").parse().expect("a number");
    let mut other = s.client();
    assert_eq!(other.cmd("WATCH hll"), ok());
    assert_eq!(c.cmd("PFCOUNT hll"), int(3));
    assert_eq!(other.cmd("MULTI"), ok());
    other.cmd("PING");
    assert_eq!(other.cmd("EXEC"), Frame::Null);
    let after: u64 = c.info_field("persistence", "rdb_changes_since_last_save").parse().expect("a number");
    assert_eq!(after, before + 1);
    // A cached count changes nothing.
    assert_eq!(other.cmd("WATCH hll"), ok());
    assert_eq!(c.cmd("PFCOUNT hll"), int(3));
    other.cmd("MULTI");
    other.cmd("PING");
    assert_eq!(other.cmd("EXEC"), Frame::Array(vec![simple("PONG")]));
}

#[test]
fn keyspace_events_are_pfadd_for_adds_and_merges() {
    let (s, mut c) = keel(&[]);
    assert_eq!(c.cmd("CONFIG SET notify-keyspace-events K$"), ok());
    let mut sub = s.client();
    sub.cmd("PSUBSCRIBE __keyspace@0__:*");
    c.cmd("PFADD a x");
    c.cmd("PFADD a x");
    c.cmd("PFCOUNT a");
    c.cmd("PFMERGE a");
    let event = |key: &str, what: &str| {
        Frame::Array(vec![bulk("pmessage"), bulk("__keyspace@0__:*"), bulk(&format!("__keyspace@0__:{key}")), bulk(what)])
    };
    assert_eq!(sub.read(), event("a", "pfadd"));
    assert_eq!(sub.read(), event("a", "pfadd"));
}

/// The HLL state a restart must give back: every key's bytes.
fn hll_state(c: &mut Client) -> Vec<Frame> {
    ["s", "d", "m", "g", "c"].iter().map(|k| c.send(&["GET", k])).collect()
}

#[test]
fn values_survive_a_restart_from_the_aof_byte_for_byte() {
    let dir = temp_dir("hll-aof");
    let before = {
        let server = Server::start_in(&dir, &["--appendonly", "yes", "--hll-sparse-max-bytes", "500"]);
        let mut c = server.client();
        add_many(&mut c, "s", "s", 50);
        add_many(&mut c, "d", "d", 1000);
        assert_eq!(c.cmd("PFDEBUG ENCODING d"), simple("dense"));
        assert_eq!(c.cmd("PFMERGE m s d"), ok());
        add_many(&mut c, "g", "g", 3);
        c.cmd("PFDEBUG GETREG g");
        add_many(&mut c, "c", "c", 30);
        // A refreshed cache is journaled (as Redis propagates the PFCOUNT).
        c.cmd("PFCOUNT c");
        c.cmd("PFCOUNT s m");
        let state = hll_state(&mut c);
        assert_eq!(bulk_bytes(&state[4])[15], 0, "cache valid");
        state
    };
    let incr = std::fs::read_dir(dir.join("appendonlydir"))
        .expect("appendonlydir")
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().ends_with(".incr.aof"))
        .expect("an incr file");
    let log = String::from_utf8_lossy(&std::fs::read(incr.path()).expect("readable")).into_owned();
    assert!(log.contains("PFCOUNT\r\n$1\r\nc\r\n"), "{log}");
    assert!(!log.contains("$1\r\ns\r\n$1\r\nm\r\n"), "a PFCOUNT of several keys writes nothing");
    // The limit is part of the state a replay needs.
    let server = Server::start_in(&dir, &["--appendonly", "yes", "--hll-sparse-max-bytes", "500"]);
    assert_eq!(hll_state(&mut server.client()), before);
    // After a rewrite the base holds the bytes themselves.
    let mut c = server.client();
    assert_eq!(c.cmd("BGREWRITEAOF"), simple("Background append only file rewriting started"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.info_field("persistence", "aof_rewrite_in_progress") != "0" || c.info_field("persistence", "aof_rewrites") == "0" {
        assert!(Instant::now() < deadline, "rewrite never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(server);
    let server = Server::start_last_in(&dir, &["--appendonly", "yes"]);
    assert_eq!(hll_state(&mut server.client()), before);
}

/// A PFADD that raises a register of a corrupt value and then meets an
/// element it cannot place answers INVALIDOBJ with the first raise kept,
/// as Redis does; Keel journals it all the same, so a replay reaches the
/// same bytes (Redis's AOF would lack the raise).
#[test]
fn a_pfadd_stopped_by_corruption_replays_to_the_same_bytes() {
    // Opcodes that stop one register short of the end.
    let short = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0\x7f\xfe";
    let last = (0..)
        .map(|i| format!("x{i}"))
        .find(|e| keel_engine::hyperloglog::register_and_value(e.as_bytes()).0 == 16383)
        .expect("some element falls in the last register");
    let dir = temp_dir("hll-corrupt-aof");
    let before = {
        let server = Server::start_in(&dir, &["--appendonly", "yes"]);
        let mut c = server.client();
        assert_eq!(c.send(&[b"SET".as_slice(), b"k", short]), ok());
        assert_eq!(c.send(&["PFADD", "k", "", &last]), err(CORRUPT));
        let value = c.cmd("GET k");
        assert_ne!(value, bytes(short), "the first element's raise is kept");
        value
    };
    let server = Server::start_last_in(&dir, &["--appendonly", "yes"]);
    assert_eq!(server.client().cmd("GET k"), before);
}

/// A BGSAVE saves the dataset as it was when it began: a PFCOUNT that
/// refreshes a cache meanwhile (a read to the dispatcher, a write to the
/// value) must not show in the file, as it would not in Redis's fork.
#[test]
fn a_bgsave_keeps_the_cache_as_it_was_when_it_began() {
    let dir = temp_dir("hll-bgsave");
    let stale = {
        let server = Server::start_in(&dir, &["--appendonly", "no", "--rdb-key-save-delay", "5000"]);
        let mut c = server.client();
        for i in 0..200 {
            c.send(&["SET", &format!("filler:{i}"), "x"]);
        }
        c.cmd("PFADD h a b c");
        let stale = c.cmd("GET h");
        assert_eq!(c.cmd("BGSAVE"), simple("Background saving started"));
        assert_eq!(c.cmd("PFCOUNT h"), int(3));
        assert_ne!(c.cmd("GET h"), stale);
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.info_field("persistence", "rdb_bgsave_in_progress") != "0" {
            assert!(Instant::now() < deadline, "BGSAVE did not end");
            std::thread::sleep(Duration::from_millis(10));
        }
        stale
    };
    let server = Server::start_last_in(&dir, &["--appendonly", "no"]);
    assert_eq!(server.client().cmd("GET h"), stale);
}

#[test]
fn redis_loads_keels_rdb_with_the_same_counts_and_back() {
    let dir = temp_dir("hll-rdb");
    let (before, counts) = {
        let server = Server::start_in(&dir, &["--appendonly", "no"]);
        let mut c = server.client();
        add_many(&mut c, "s", "s", 50);
        add_many(&mut c, "d", "d", 5000);
        c.cmd("PFMERGE m s d");
        add_many(&mut c, "g", "g", 3);
        add_many(&mut c, "c", "c", 30);
        c.cmd("PFCOUNT c");
        let counts: Vec<Frame> = ["s", "d", "m", "g", "c"].iter().map(|k| c.send(&["PFCOUNT", k])).collect();
        // Counting refreshed the caches: the state saved is after them.
        let state = hll_state(&mut c);
        assert_eq!(c.cmd("SAVE"), ok());
        (state, counts)
    };
    let d = dir.display().to_string();
    let Some(redis) = Server::start_redis(&["--dir", &d, "--dbfilename", "dump.rdb"]) else { return };
    let mut r = redis.client();
    assert_eq!(hll_state(&mut r), before, "redis-server loads Keel's bytes");
    let redis_counts: Vec<Frame> = ["s", "d", "m", "g", "c"].iter().map(|k| r.send(&["PFCOUNT", k])).collect();
    assert_eq!(redis_counts, counts);
    // And redis-server's own writes load in Keel.
    add_many(&mut r, "s", "more", 40);
    r.cmd("PFMERGE g s d");
    let union = r.cmd("PFCOUNT s g c");
    let redis_state = hll_state(&mut r);
    assert_eq!(r.cmd("SAVE"), ok());
    drop(redis);
    let server = Server::start_last_in(&dir, &["--appendonly", "no"]);
    let mut c = server.client();
    assert_eq!(hll_state(&mut c), redis_state);
    assert_eq!(c.cmd("PFCOUNT s g c"), union);
}

#[test]
fn dump_and_restore_carry_the_bytes() {
    let (_s, mut c) = keel(&[]);
    add_many(&mut c, "h", "x", 100);
    let value = c.cmd("GET h");
    let Frame::Bulk(payload) = c.cmd("DUMP h") else { panic!("no payload") };
    assert_eq!(c.send(&[b"RESTORE".as_slice(), b"copy", b"0", &payload]), ok());
    assert_eq!(c.cmd("GET copy"), value);
    assert_eq!(c.cmd("PFCOUNT copy"), c.cmd("PFCOUNT h"));
}

#[test]
fn a_replica_holds_the_masters_bytes() {
    let master = Server::start(&["--appendonly", "no"]);
    let mut m = master.client();
    let port = master.port.to_string();
    let replica = Server::start(&["--appendonly", "no", "--replicaof", "127.0.0.1", &port]);
    let mut r = replica.client();
    let deadline = Instant::now() + Duration::from_secs(30);
    while r.info_field("replication", "master_link_status") != "up" {
        assert!(Instant::now() < deadline, "the replica never synced");
        std::thread::sleep(Duration::from_millis(20));
    }
    add_many(&mut m, "s", "s", 50);
    add_many(&mut m, "d", "d", 3000);
    m.cmd("PFMERGE m s d");
    add_many(&mut m, "g", "g", 3);
    m.cmd("PFDEBUG TODENSE g");
    add_many(&mut m, "c", "c", 30);
    m.cmd("PFCOUNT c");
    let want = hll_state(&mut m);
    // The replica has it all once it has the last write.
    m.cmd("SET done 1");
    while r.cmd("GET done") != bulk("1") {
        assert!(Instant::now() < deadline, "the replica never caught up");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(hll_state(&mut r), want);
    // Redis's "PFCOUNT updates cache on readonly replica": a replica's
    // PFCOUNT refreshes its own copy's cache.
    m.cmd("PFADD q a b c d e f g h i j k l m n o p q");
    let stale = m.cmd("GET q");
    m.cmd("SET done 2");
    while r.cmd("GET done") != bulk("2") {
        assert!(Instant::now() < deadline, "the replica never caught up");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(r.cmd("GET q"), stale);
    assert_eq!(r.cmd("PFCOUNT q"), int(17));
    assert_ne!(r.cmd("GET q"), stale);
    assert_eq!(m.cmd("GET q"), stale);
}
