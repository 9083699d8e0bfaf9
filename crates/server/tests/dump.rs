//! Whole values of every type and encoding: DUMP and RESTORE (round trips,
//! payloads moving between Keel and Debian's redis-server both ways,
//! RESTORE's errors), and the AOF rewrite's base that recreates them.

mod common;

use common::{bulk, err, int, ok, Client, Frame, Server};

/// Fills every type, in compact and big encodings.
fn fill(c: &mut Client) {
    c.cmd("SET s hello");
    c.cmd("SET n 12345");
    c.send(&["SET", "long", &"abc".repeat(100)]);
    c.cmd("RPUSH l a b c 1 2 3");
    c.cmd("SADD si 1 2 3");
    c.cmd("SADD ss a b c");
    c.cmd("HSET h f1 v1 f2 v2");
    c.cmd("ZADD z 1 a 2.5 b -inf c");
    for i in 0..600 {
        c.send(&["RPUSH", "bl", &format!("e{i}")]);
        c.send(&["SADD", "bs", &format!("m{i}")]);
        c.send(&["HSET", "bh", &format!("f{i}"), &format!("v{i}")]);
        c.send(&["ZADD", "bz", &i.to_string(), &format!("m{i}")]);
    }
}

const KEYS: &[&str] = &["s", "n", "long", "l", "si", "ss", "h", "z", "bl", "bs", "bh", "bz"];

/// A key's contents in a comparable form.
fn contents(c: &mut Client, key: &str) -> Frame {
    let Frame::Simple(t) = c.send(&["TYPE", key]) else { panic!("TYPE") };
    let sorted = |f: Frame| match f {
        Frame::Array(mut items) => {
            items.sort_by_key(|i| format!("{i:?}"));
            Frame::Array(items)
        }
        other => other,
    };
    match t.as_slice() {
        b"string" => c.send(&["GET", key]),
        b"list" => c.send(&["LRANGE", key, "0", "-1"]),
        b"set" => sorted(c.send(&["SMEMBERS", key])),
        b"hash" => sorted(c.send(&["HGETALL", key])),
        b"zset" => c.send(&["ZRANGE", key, "0", "-1", "WITHSCORES"]),
        other => panic!("type {}", String::from_utf8_lossy(other)),
    }
}

fn transfer(from: &mut Client, to: &mut Client) {
    for key in KEYS {
        let Frame::Bulk(payload) = from.send(&["DUMP", key]) else { panic!("DUMP {key}") };
        assert_eq!(to.send(&[b"RESTORE".as_slice(), key.as_bytes(), b"0", &payload, b"REPLACE"]), ok(), "{key}");
        assert_eq!(contents(to, key), contents(from, key), "{key}");
        assert_eq!(to.send(&["OBJECT", "ENCODING", key]), from.send(&["OBJECT", "ENCODING", key]), "{key}");
    }
}

#[test]
fn every_type_round_trips_within_keel() {
    let server = Server::start(&[]);
    let mut a = server.client();
    let mut b = server.client();
    fill(&mut a);
    b.cmd("SELECT 1");
    transfer(&mut a, &mut b);
}

#[test]
fn payloads_move_between_keel_and_redis_both_ways() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&[]);
    let (mut r, mut k) = (redis.client(), keel.client());
    fill(&mut r);
    transfer(&mut r, &mut k);
    k.cmd("FLUSHALL");
    r.cmd("FLUSHALL");
    fill(&mut k);
    transfer(&mut k, &mut r);
}

#[test]
fn restore_checks_as_redis_does() {
    let server = Server::start(&[]);
    let mut c = server.client();
    c.cmd("SET k v");
    let Frame::Bulk(payload) = c.cmd("DUMP k") else { panic!("DUMP") };
    let restore = |c: &mut Client, extra: &[&[u8]]| {
        let mut argv: Vec<&[u8]> = vec![b"RESTORE", b"k2", b"0", &payload];
        argv.extend_from_slice(extra);
        c.send(&argv)
    };
    assert_eq!(c.cmd("DUMP missing"), Frame::Null);
    assert_eq!(restore(&mut c, &[]), ok());
    assert_eq!(restore(&mut c, &[]), err("BUSYKEY Target key name already exists."));
    assert_eq!(restore(&mut c, &[b"REPLACE", b"IDLETIME", b"-1"]), err("ERR Invalid IDLETIME value, must be >= 0"));
    assert_eq!(restore(&mut c, &[b"REPLACE", b"FREQ", b"256"]), err("ERR Invalid FREQ value, must be >= 0 and <= 255"));
    assert_eq!(restore(&mut c, &[b"REPLACE", b"IDLETIME", b"1", b"FREQ", b"1"]), err("ERR syntax error"));
    assert_eq!(restore(&mut c, &[b"REPLACE", b"bogus"]), err("ERR syntax error"));
    assert_eq!(restore(&mut c, &[b"REPLACE", b"IDLETIME", b"1000"]), ok());
    let Frame::Integer(idle) = c.cmd("OBJECT IDLETIME k2") else { panic!("IDLETIME") };
    assert!(idle >= 1000, "{idle}");
    let mut bad = payload.clone();
    bad[0] ^= 0xff;
    assert_eq!(
        c.send(&[b"RESTORE".as_slice(), b"k3", b"0", &bad]),
        err("ERR DUMP payload version or checksum are wrong")
    );
    assert_eq!(c.send(&[b"RESTORE".as_slice(), b"k3", b"-1", &payload]), err("ERR Invalid TTL value, must be >= 0"));
    assert_eq!(c.send(&[b"RESTORE".as_slice(), b"k3", b"100000", &payload]), ok());
    let Frame::Integer(pttl) = c.cmd("PTTL k3") else { panic!("PTTL") };
    assert!(pttl > 90_000 && pttl <= 100_000, "{pttl}");
    // An absolute TTL already past: nothing is created.
    assert_eq!(c.send(&[b"RESTORE".as_slice(), b"k4", b"1", &payload, b"ABSTTL"]), ok());
    assert_eq!(c.cmd("EXISTS k4"), int(0));
    assert_eq!(c.cmd("GET k3"), bulk("v"));
}

/// DEBUG SET-SKIP-CHECKSUM-VALIDATION lets a payload with a wrong CRC64
/// through to the value's own checks, which still refuse a damaged value
/// whatever `sanitize-dump-payload` says; Keel and redis-server alike.
#[test]
fn a_skipped_checksum_still_leaves_the_value_checked() {
    let script = |server: &Server| -> Vec<Frame> {
        let mut c = server.client();
        c.cmd("RPUSH l a b c");
        let Frame::Bulk(payload) = c.cmd("DUMP l") else { panic!("DUMP") };
        let mut wrong_crc = payload.clone();
        let last = wrong_crc.len() - 1;
        wrong_crc[last] ^= 0xff;
        // A listpack whose element count (its header's last two bytes)
        // says one more than it holds, under a CRC left wrong.
        let mut damaged = wrong_crc.clone();
        damaged[8] ^= 0x01;
        let mut replies = Vec::new();
        for argv in [
            &[b"CONFIG".as_slice(), b"SET", b"sanitize-dump-payload", b"yes"][..],
            &[b"RESTORE", b"k1", b"0", &wrong_crc],
            &[b"DEBUG", b"SET-SKIP-CHECKSUM-VALIDATION", b"1"],
            &[b"RESTORE", b"k1", b"0", &wrong_crc],
            &[b"LRANGE", b"k1", b"0", b"-1"],
            &[b"RESTORE", b"k2", b"0", &damaged],
            &[b"EXISTS", b"k2"],
            &[b"DEBUG", b"SET-SKIP-CHECKSUM-VALIDATION", b"0"],
            &[b"RESTORE", b"k3", b"0", &wrong_crc],
            &[b"CONFIG", b"GET", b"sanitize-dump-payload"],
            &[b"CONFIG", b"SET", b"sanitize-dump-payload", b"clients"],
            &[b"CONFIG", b"GET", b"sanitize-dump-payload"],
            &[b"CONFIG", b"SET", b"sanitize-dump-payload", b"maybe"],
            &[b"CONFIG", b"SET", b"use-exit-on-panic", b"yes"],
            &[b"CONFIG", b"GET", b"use-exit-on-panic"],
        ] {
            replies.push(c.send(argv));
        }
        replies
    };
    let debug = ["--enable-debug-command", "yes"];
    let keel = script(&Server::start(&debug));
    assert_eq!(keel[1], err("ERR DUMP payload version or checksum are wrong"));
    assert_eq!(keel[3], ok());
    assert_eq!(keel[5], err("ERR Bad data format"));
    assert_eq!(keel[6], int(0));
    assert_eq!(keel[8], err("ERR DUMP payload version or checksum are wrong"));
    if let Some(redis) = Server::start_redis(&debug) {
        assert_eq!(keel, script(&redis), "Keel, then redis-server");
    }
}

#[test]
fn every_type_survives_an_aof_rewrite_and_a_restart() {
    let dir = common::temp_dir("rewrite-types");
    let before: Vec<(Frame, Frame)>;
    {
        let server = Server::start_in(&dir, &[]);
        let mut c = server.client();
        fill(&mut c);
        c.cmd("EXPIRE h 100000");
        before = KEYS.iter().map(|k| (contents(&mut c, k), c.send(&["OBJECT", "ENCODING", k]))).collect();
        assert_eq!(c.cmd("BGREWRITEAOF"), Frame::Simple(b"Background append only file rewriting started".to_vec()));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let Frame::Bulk(info) = c.cmd("INFO persistence") else { panic!("INFO") };
            let info = String::from_utf8_lossy(&info).to_string();
            if info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrites:1") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "rewrite did not finish");
            std::thread::yield_now();
        }
        server.kill9();
    }
    let server = Server::start_last_in(&dir, &[]);
    let mut c = server.client();
    let after: Vec<(Frame, Frame)> = KEYS.iter().map(|k| (contents(&mut c, k), c.send(&["OBJECT", "ENCODING", k]))).collect();
    assert_eq!(after, before);
    let Frame::Integer(ttl) = c.cmd("TTL h") else { panic!("TTL") };
    assert!(ttl > 99_000, "{ttl}");
}
