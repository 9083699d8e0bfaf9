//! DEBUG DIGEST and DEBUG DIGEST-VALUE against Debian's redis-server
//! 7.0.15: the same data gives the same digests (Redis's own tests compare
//! them before and after a reload), every type in each of its encodings,
//! keys with a TTL, several databases.

mod common;

use common::{Client, Frame, Server};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// 2100-01-01 in ms: a TTL both servers hold as the same absolute time.
const EXPIRE_AT_MS: &str = "4102444800000";

/// Sends every command through `c`, failing on an error reply.
fn run(c: &mut Client, commands: &[Vec<String>]) {
    for argv in commands {
        if let Frame::Error(e) = c.send(argv) {
            panic!("{argv:?}: {}", String::from_utf8_lossy(&e));
        }
    }
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// Writes the same dataset through `c`: every type, small and large (each
/// Redis encoding), integer-like strings and members, special scores,
/// TTLs, three databases.
fn fill(c: &mut Client) {
    let big = 1_000u64;
    let mut commands: Vec<Vec<String>> = [
        &["SET", "s", "plain"][..],
        &["SET", "int", "-12345"],
        &["SET", "bin", "a\u{0}b\r\n"],
        &["SET", "empty", ""],
        // Integer-like but not canonical, or past i64: kept as text.
        &["SET", "not-int", "007"],
        &["SET", "minus-zero", "-0"],
        &["SET", "past-i64", "9223372036854775808"],
        &["SET", "i64-max", "9223372036854775807"],
        &["SET", "long", &"x".repeat(100)],
        // Built by INCR (an integer) and by APPEND (raw, integer text).
        &["SET", "counter", "9"],
        &["INCR", "counter"],
        &["SET", "appended", "1"],
        &["APPEND", "appended", "2"],
        &["RPUSH", "l", "x", "42", "", "y", "-9223372036854775808"],
        &["SADD", "intset", "3", "-1", "7"],
        &["SADD", "smallset", "a", "b", "10"],
        &["ZADD", "z", "1", "one", "1.5", "7", "-0.1", "neg", "inf", "top", "-inf", "bottom", "1e20", "huge"],
        // %.17g: a signed zero, a small and a long fraction, 17 digits.
        &["ZADD", "z", "-0", "minus-zero", "0", "zero", "1e-5", "tiny", "0.1", "tenth"],
        &["ZADD", "z", "123456789012345678", "42", "-1e-300", "-7"],
        &["ZINCRBY", "z", "0.1", "sum"],
        &["ZINCRBY", "z", "0.1", "sum"],
        &["ZINCRBY", "z", "0.1", "sum"],
        &["HSET", "h", "f", "v", "n", "12", "7", "-3"],
        &["SET", "ttl", "v", "PXAT", EXPIRE_AT_MS],
        &["RPUSH", "ttl-list", "a"],
        &["PEXPIREAT", "ttl-list", EXPIRE_AT_MS],
    ]
    .iter()
    .map(|words| argv(words))
    .collect();
    for i in 0..big {
        commands.push(argv(&["RPUSH", "biglist", &format!("element-{i}")]));
        commands.push(argv(&["RPUSH", "biglist", &i.to_string()]));
        commands.push(argv(&["SADD", "bigset", &format!("member-{i}")]));
        commands.push(argv(&["SADD", "bigintset", &(i * 7).to_string()]));
        commands.push(argv(&["ZADD", "bigzset", &format!("{}", i as f64 / 3.0), &format!("m{i}")]));
        commands.push(argv(&["HSET", "bighash", &format!("field-{i}"), &format!("value-{i}")]));
        commands.push(argv(&["HSET", "bighash", &i.to_string(), &(i * 3).to_string()]));
    }
    commands.extend(
        [
            &["ZADD", "bigzset", "-0", "minus-zero", "inf", "top", "0.1", "42"][..],
            &["SELECT", "1"],
            &["SET", "s", "plain"],
            &["SET", "ttl", "v", "PXAT", EXPIRE_AT_MS],
            &["SELECT", "5"],
            &["ZADD", "z", "2", "b", "2", "a"],
            &["HSET", "ttl-h", "f", "v"],
            &["EXPIREAT", "ttl-h", "4102444800"],
            &["SELECT", "0"],
        ]
        .iter()
        .map(|words| argv(words)),
    );
    run(c, &commands);
}

const KEYS: &[&str] = &[
    "s",
    "int",
    "bin",
    "empty",
    "not-int",
    "minus-zero",
    "past-i64",
    "i64-max",
    "long",
    "counter",
    "appended",
    "l",
    "intset",
    "smallset",
    "z",
    "h",
    "ttl",
    "ttl-list",
    "ttl-h",
    "biglist",
    "bigset",
    "bigintset",
    "bigzset",
    "bighash",
    "missing",
];

/// DEBUG DIGEST, then DEBUG DIGEST-VALUE of every key in databases 0, 1
/// and 5 (DIGEST-VALUE reads the selected one).
fn digests(c: &mut Client) -> Vec<Frame> {
    let mut argv = vec!["DEBUG", "DIGEST-VALUE"];
    argv.extend_from_slice(KEYS);
    let mut replies = vec![c.send(&["DEBUG", "DIGEST"])];
    for db in ["0", "1", "5"] {
        assert_eq!(c.send(&["SELECT", db]), Frame::Simple(b"OK".to_vec()));
        replies.push(c.send(&argv));
    }
    assert_eq!(c.send(&["SELECT", "0"]), Frame::Simple(b"OK".to_vec()));
    replies
}

fn zeros() -> Frame {
    Frame::Simple("0".repeat(40).into_bytes())
}

#[test]
fn digests_are_redis_digests() {
    let Some(redis) = Server::start_redis(&["--enable-debug-command", "yes"]) else { return };
    let keel = Server::start(&["--enable-debug-command", "yes"]);
    let (mut r, mut k) = (redis.client(), keel.client());
    for c in [&mut r, &mut k] {
        assert_eq!(c.send(&["DEBUG", "DIGEST"]), zeros());
        assert_eq!(c.send(&["DEBUG", "DIGEST-VALUE"]), Frame::Array(vec![]));
        assert_eq!(c.send(&["DEBUG", "DIGEST-VALUE", "missing"]), Frame::Array(vec![zeros()]));
    }
    assert_eq!(r.send(&["DEBUG", "DIGEST", "x"]), k.send(&["DEBUG", "DIGEST", "x"]));
    fill(&mut r);
    fill(&mut k);
    let (want, got) = (digests(&mut r), digests(&mut k));
    assert_ne!(want[0], zeros());
    assert_eq!(want, got);
    // One element more changes both the same way.
    for c in [&mut r, &mut k] {
        assert_eq!(c.send(&["ZADD", "bigzset", "0.1", "extra"]), Frame::Integer(1));
    }
    let changed = digests(&mut r);
    assert_ne!(changed[0], want[0]);
    assert_eq!(changed, digests(&mut k));
}

/// Redis digests the keyspace as stored: a key past its expiry that
/// nothing has removed yet still counts, with its TTL marker.
#[test]
fn keys_expired_but_not_removed_count_as_in_redis() {
    let Some(redis) = Server::start_redis(&["--enable-debug-command", "yes"]) else { return };
    let keel = Server::start(&["--enable-debug-command", "yes"]);
    let (mut r, mut k) = (redis.client(), keel.client());
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis() as u64;
    let soon_ms = (now_ms + 300).to_string();
    for c in [&mut r, &mut k] {
        run(
            c,
            &[
                argv(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]),
                argv(&["SET", "kept", "v"]),
                argv(&["SADD", "going", "a", "b"]),
                argv(&["PEXPIREAT", "going", &soon_ms]),
            ],
        );
    }
    let deadline = Duration::from_millis(now_ms + 350);
    while SystemTime::now().duration_since(UNIX_EPOCH).expect("clock") < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let expired = [r.send(&["DEBUG", "DIGEST"]), r.send(&["DEBUG", "DIGEST-VALUE", "going", "kept"])];
    assert_eq!(expired, [k.send(&["DEBUG", "DIGEST"]), k.send(&["DEBUG", "DIGEST-VALUE", "going", "kept"])]);
    assert_ne!(expired[1], Frame::Array(vec![zeros(), zeros()]));
    // An access removes it, in both.
    for c in [&mut r, &mut k] {
        assert_eq!(c.send(&["EXISTS", "going"]), Frame::Integer(0));
    }
    let removed = r.send(&["DEBUG", "DIGEST"]);
    assert_ne!(removed, expired[0]);
    assert_eq!(removed, k.send(&["DEBUG", "DIGEST"]));
}

/// DEBUG POPULATE makes Redis's keys and values (digests equal), leaves
/// existing keys alone, and answers Redis's errors.
#[test]
fn debug_populate_makes_redis_keys() {
    let Some(redis) = Server::start_redis(&["--enable-debug-command", "yes"]) else { return };
    let keel = Server::start(&["--enable-debug-command", "yes"]);
    let (mut r, mut k) = (redis.client(), keel.client());
    let long_prefix = "p".repeat(130);
    let calls: [&[&str]; 7] = [
        &["SET", "key:3", "mine"],
        &["DEBUG", "POPULATE", "50"],
        &["DEBUG", "POPULATE", "20", "short", "4"],
        &["DEBUG", "POPULATE", "20", "padded", "12"],
        &["DEBUG", "POPULATE", "3", &long_prefix],
        &["DEBUG", "POPULATE", "-1"],
        &["DEBUG", "POPULATE", "x"],
    ];
    for call in calls {
        assert_eq!(k.send(call), r.send(call), "{call:?}");
    }
    assert_eq!(k.send(&["GET", "key:3"]), Frame::Bulk(b"mine".to_vec()));
    assert_eq!(k.send(&["DBSIZE"]), r.send(&["DBSIZE"]));
    assert_eq!(k.send(&["DEBUG", "DIGEST"]), r.send(&["DEBUG", "DIGEST"]));
}
