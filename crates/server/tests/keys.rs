//! Black-box tests of the generic key commands over real sockets: DEL,
//! UNLINK, EXISTS, TYPE, KEYS, SCAN, RANDOMKEY, RENAME(NX), MOVE, COPY,
//! TOUCH, OBJECT, SWAPDB, FLUSHDB, FLUSHALL. Replies and error texts are
//! Redis 7.0.15's.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{bulk, err, int, ok, simple, Client, Frame, Server};

fn keys_of(frame: Frame) -> Vec<String> {
    match frame {
        Frame::Array(items) => items
            .into_iter()
            .map(|f| match f {
                Frame::Bulk(b) => String::from_utf8(b).expect("utf8 key"),
                other => panic!("not a bulk: {other:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}

fn sorted(frame: Frame) -> Vec<String> {
    let mut keys = keys_of(frame);
    keys.sort();
    keys
}

/// One SCAN call: (next cursor, keys).
fn scan_once(c: &mut Client, args: &[&str]) -> (u64, Vec<String>) {
    match c.send(args) {
        Frame::Array(mut parts) if parts.len() == 2 => {
            let keys = keys_of(parts.pop().expect("keys"));
            let cursor = match parts.pop() {
                Some(Frame::Bulk(b)) => String::from_utf8(b).expect("utf8").parse().expect("numeric cursor"),
                other => panic!("cursor: {other:?}"),
            };
            (cursor, keys)
        }
        other => panic!("SCAN reply: {other:?}"),
    }
}

/// A full SCAN with extra options; every key it returned.
fn scan_all(c: &mut Client, options: &[&str]) -> Vec<String> {
    let mut cursor = 0u64;
    let mut all = Vec::new();
    loop {
        let cur = cursor.to_string();
        let mut args = vec!["SCAN", cur.as_str()];
        args.extend_from_slice(options);
        let (next, keys) = scan_once(c, &args);
        all.extend(keys);
        if next == 0 {
            return all;
        }
        cursor = next;
    }
}

/// Sends many commands in one write and reads every reply.
fn pipeline(c: &mut Client, commands: &[Vec<String>]) -> Vec<Frame> {
    let mut bytes = Vec::new();
    for argv in commands {
        bytes.extend(common::encode(argv));
    }
    c.write_raw(&bytes);
    commands.iter().map(|_| c.read()).collect()
}

fn populate(c: &mut Client, prefix: &str, n: usize) {
    let commands: Vec<Vec<String>> =
        (0..n).map(|i| vec!["SET".into(), format!("{prefix}{i}"), format!("value:{i}")]).collect();
    for reply in pipeline(c, &commands) {
        assert_eq!(reply, ok());
    }
}

#[test]
fn del_unlink_exists_type() {
    let server = Server::start(&[]);
    let mut c = server.client();
    for k in ["a", "b", "c", "{t}1", "{t}2"] {
        assert_eq!(c.cmd(&format!("SET {k} v")), ok());
    }
    assert_eq!(c.cmd("EXISTS a b nokey a"), int(3));
    assert_eq!(c.cmd("DEL a b nokey a"), int(2));
    assert_eq!(c.cmd("EXISTS a b"), int(0));
    assert_eq!(c.cmd("TYPE c"), simple("string"));
    assert_eq!(c.cmd("TYPE a"), simple("none"));
    assert_eq!(c.cmd("UNLINK c {t}1 {t}2 nokey"), int(3));
    assert_eq!(c.cmd("DBSIZE"), int(0));
    // A big value goes to the lazyfree thread; the key is gone at once.
    let big = "x".repeat(8 << 20);
    assert_eq!(c.send(&["SET", "big", &big]), ok());
    assert_eq!(c.cmd("UNLINK big"), int(1));
    assert_eq!(c.cmd("EXISTS big"), int(0));
    assert_eq!(c.cmd("DEL"), err("ERR wrong number of arguments for 'del' command"));
    assert_eq!(c.cmd("UNLINK"), err("ERR wrong number of arguments for 'unlink' command"));
    assert_eq!(c.cmd("EXISTS"), err("ERR wrong number of arguments for 'exists' command"));
    assert_eq!(c.cmd("TYPE a b"), err("ERR wrong number of arguments for 'type' command"));
    // Zero-length values exist.
    assert_eq!(c.send(&["SET", "empty", ""]), ok());
    assert_eq!(c.cmd("EXISTS empty"), int(1));
}

#[test]
fn del_of_an_expired_key_counts_nothing() {
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
    assert_eq!(c.cmd("SET k v PX 1"), ok());
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(c.cmd("DEL k"), int(0));
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 1"), ok());
}

#[test]
fn keys_and_dbsize() {
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    for k in ["key_x", "key_y", "key_z", "foo_a", "foo_b", "foo_c"] {
        assert_eq!(c.cmd(&format!("SET {k} hello")), ok());
    }
    assert_eq!(sorted(c.cmd("KEYS foo*")), ["foo_a", "foo_b", "foo_c"]);
    assert_eq!(sorted(c.cmd("KEYS *")).len(), 6);
    assert_eq!(sorted(c.cmd("KEYS key_[xy]")), ["key_x", "key_y"]);
    assert_eq!(c.cmd("KEYS nomatch*"), Frame::Array(vec![]));
    assert_eq!(c.cmd("DBSIZE"), int(6));
    assert_eq!(c.cmd("KEYS"), err("ERR wrong number of arguments for 'keys' command"));
    // Expired keys are not listed.
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
    assert_eq!(c.cmd("SET gone v PX 1"), ok());
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(sorted(c.cmd("KEYS g*")), Vec::<String>::new());
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 1"), ok());
    // Pathological patterns end.
    assert_eq!(c.cmd("FLUSHDB"), ok());
    assert_eq!(c.cmd("SET aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 1"), ok());
    assert_eq!(c.cmd("KEYS a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b"), Frame::Array(vec![]));
}

#[test]
fn scan_options_and_errors() {
    let server = Server::start(&[]);
    let mut c = server.client();
    populate(&mut c, "key:", 1000);
    let all: HashSet<String> = scan_all(&mut c, &[]).into_iter().collect();
    assert_eq!(all.len(), 1000);
    let all: HashSet<String> = scan_all(&mut c, &["COUNT", "5"]).into_iter().collect();
    assert_eq!(all.len(), 1000);
    let matched: HashSet<String> = scan_all(&mut c, &["MATCH", "key:1??"]).into_iter().collect();
    assert_eq!(matched.len(), 100);
    assert!(scan_all(&mut c, &["TYPE", "list"]).is_empty());
    let strings: HashSet<String> = scan_all(&mut c, &["TYPE", "STRING"]).into_iter().collect();
    assert_eq!(strings.len(), 1000);
    let all3: HashSet<String> =
        scan_all(&mut c, &["type", "string", "match", "key:*", "count", "10"]).into_iter().collect();
    assert_eq!(all3.len(), 1000);
    // One call with a large COUNT returns everything.
    let (cursor, keys) = scan_once(&mut c, &["SCAN", "0", "COUNT", "100000"]);
    assert_eq!((cursor, keys.len()), (0, 1000));

    assert_eq!(c.cmd("SCAN abc"), err("ERR invalid cursor"));
    assert_eq!(c.send(&["SCAN", " 1"]), err("ERR invalid cursor"));
    assert_eq!(c.cmd("SCAN 18446744073709551616"), err("ERR invalid cursor"));
    assert_eq!(c.cmd("SCAN 0 COUNT 0"), err("ERR syntax error"));
    assert_eq!(c.cmd("SCAN 0 COUNT x"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("SCAN 0 FOO"), err("ERR syntax error"));
    assert_eq!(c.cmd("SCAN 0 MATCH"), err("ERR syntax error"));
    assert_eq!(c.cmd("SCAN"), err("ERR wrong number of arguments for 'scan' command"));
    // An empty database ends at once.
    assert_eq!(c.cmd("SELECT 3"), ok());
    assert_eq!(scan_once(&mut c, &["SCAN", "0"]), (0, vec![]));
}

#[test]
fn scan_skips_and_deletes_expired_keys() {
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
    populate(&mut c, "live:", 50);
    for i in 0..50 {
        assert_eq!(c.cmd(&format!("SET dead:{i} v PX 1")), ok());
    }
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(c.cmd("DBSIZE"), int(100));
    let keys = scan_all(&mut c, &[]);
    assert!(keys.iter().all(|k| k.starts_with("live:")), "{keys:?}");
    assert_eq!(keys.iter().collect::<HashSet<_>>().len(), 50);
    assert_eq!(c.cmd("DBSIZE"), int(50));
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 1"), ok());
}

/// Every key present for the whole scan is returned, while another
/// connection adds enough keys to grow every shard's table several times.
#[test]
fn scan_guarantee_under_concurrent_growth() {
    let server = Server::start(&[]);
    let mut c = server.client();
    populate(&mut c, "stable:", 500);
    let port = server.port;
    let writer = std::thread::spawn(move || {
        let mut w = Client::connect(port);
        for batch in 0..40 {
            let commands: Vec<Vec<String>> =
                (0..1000).map(|i| vec!["SET".into(), format!("added:{batch}:{i}"), "x".into()]).collect();
            pipeline(&mut w, &commands);
        }
    });
    let mut seen = HashSet::new();
    let mut cursor = 0u64;
    let mut calls = 0;
    loop {
        let cur = cursor.to_string();
        let (next, keys) = scan_once(&mut c, &["SCAN", &cur, "COUNT", "3"]);
        calls += 1;
        seen.extend(keys);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    writer.join().expect("writer");
    for i in 0..500 {
        assert!(seen.contains(&format!("stable:{i}")), "stable:{i} missing after {calls} SCAN calls");
    }
    assert_eq!(c.cmd("DBSIZE"), int(40_500));
}

#[test]
fn randomkey() {
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    assert_eq!(c.cmd("RANDOMKEY"), Frame::Null);
    assert_eq!(c.cmd("SET foo x"), ok());
    assert_eq!(c.cmd("SET bar y"), ok());
    let mut seen = HashSet::new();
    for _ in 0..200 {
        if let Frame::Bulk(k) = c.cmd("RANDOMKEY") {
            seen.insert(k);
        }
    }
    assert_eq!(seen.len(), 2);
    assert_eq!(c.cmd("DEL foo bar"), int(2));
    assert_eq!(c.cmd("RANDOMKEY"), Frame::Null);
    // Only expired keys: each is deleted and none returned.
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
    for i in 0..20 {
        assert_eq!(c.cmd(&format!("SET e{i} v PX 1")), ok());
    }
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(c.cmd("RANDOMKEY"), Frame::Null);
    assert_eq!(c.cmd("DBSIZE"), int(0));
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 1"), ok());
    assert_eq!(c.cmd("RANDOMKEY x"), err("ERR wrong number of arguments for 'randomkey' command"));
    let mut c3 = server.client();
    c3.cmd("HELLO 3");
    assert_eq!(c3.cmd("RANDOMKEY"), Frame::Null);
}

#[test]
fn rename_and_renamenx() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("SET mykey hello"), ok());
    assert_eq!(c.cmd("RENAME mykey mykey1"), ok());
    // "a" and "b" live in different shards: the rename crosses them.
    assert_eq!(c.cmd("RENAME mykey1 a"), ok());
    assert_eq!(c.cmd("RENAME a b"), ok());
    assert_eq!(c.cmd("GET b"), bulk("hello"));
    assert_eq!(c.cmd("EXISTS mykey mykey1 a"), int(0));
    // Over an existing key.
    assert_eq!(c.cmd("SET c other"), ok());
    assert_eq!(c.cmd("RENAME c b"), ok());
    assert_eq!(c.cmd("GET b"), bulk("other"));
    assert_eq!(c.cmd("EXISTS c"), int(0));
    // RENAMENX.
    assert_eq!(c.cmd("SET x foobar"), ok());
    assert_eq!(c.cmd("RENAMENX x y"), int(1));
    assert_eq!(c.cmd("GET y"), bulk("foobar"));
    assert_eq!(c.cmd("SET x foo"), ok());
    assert_eq!(c.cmd("RENAMENX x y"), int(0));
    assert_eq!(c.cmd("GET x"), bulk("foo"));
    // Errors and the same key.
    assert_eq!(c.cmd("RENAME nokey foo"), err("ERR no such key"));
    assert_eq!(c.cmd("RENAMENX nokey foo"), err("ERR no such key"));
    assert_eq!(c.cmd("RENAME nokey nokey"), err("ERR no such key"));
    assert_eq!(c.cmd("RENAME x x"), ok());
    assert_eq!(c.cmd("RENAMENX x x"), int(0));
    assert_eq!(c.cmd("RENAME x"), err("ERR wrong number of arguments for 'rename' command"));
    // The TTL moves with the value; the target's own TTL does not stay.
    assert_eq!(c.cmd("SET v1 foo EX 100"), ok());
    assert_eq!(c.cmd("RENAME v1 v2"), ok());
    let ttl = c.cmd("TTL v2");
    assert!(matches!(ttl, Frame::Integer(t) if t > 95 && t <= 100), "{ttl:?}");
    assert_eq!(c.cmd("SET p1 foo"), ok());
    assert_eq!(c.cmd("SET p2 bar EX 100"), ok());
    assert_eq!(c.cmd("RENAME p1 p2"), ok());
    assert_eq!(c.cmd("TTL p2"), int(-1));
}

#[test]
fn move_between_databases() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("SET mykey foobar"), ok());
    assert_eq!(c.cmd("MOVE mykey 10"), int(1));
    assert_eq!(c.cmd("EXISTS mykey"), int(0));
    assert_eq!(c.cmd("SELECT 10"), ok());
    assert_eq!(c.cmd("GET mykey"), bulk("foobar"));
    assert_eq!(c.cmd("SELECT 0"), ok());
    assert_eq!(c.cmd("SET mykey hello"), ok());
    assert_eq!(c.cmd("MOVE mykey 10"), int(0));
    assert_eq!(c.cmd("MOVE nokey 10"), int(0));
    assert_eq!(c.cmd("MOVE mykey notanumber"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("MOVE mykey 4294967296"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("MOVE mykey 0"), err("ERR source and destination objects are the same"));
    assert_eq!(c.cmd("MOVE mykey 16"), err("ERR DB index is out of range"));
    assert_eq!(c.cmd("MOVE mykey -1"), err("ERR DB index is out of range"));
    // TTL goes along; no TTL is created.
    assert_eq!(c.cmd("SET t foo EX 100"), ok());
    assert_eq!(c.cmd("SET n foo"), ok());
    assert_eq!(c.cmd("MOVE t 11"), int(1));
    assert_eq!(c.cmd("MOVE n 11"), int(1));
    assert_eq!(c.cmd("TTL t"), int(-2));
    assert_eq!(c.cmd("SELECT 11"), ok());
    assert!(matches!(c.cmd("TTL t"), Frame::Integer(t) if t > 0 && t <= 100));
    assert_eq!(c.cmd("TTL n"), int(-1));
}

#[test]
fn copy_semantics() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("SET mykey foobar"), ok());
    assert_eq!(c.cmd("COPY mykey newkey"), int(1));
    assert_eq!(c.cmd("GET newkey"), bulk("foobar"));
    assert_eq!(c.cmd("COPY mykey newkey DB 10"), int(1));
    assert_eq!(c.cmd("SET mykey2 hello"), ok());
    assert_eq!(c.cmd("COPY mykey2 newkey DB 10"), int(0));
    assert_eq!(c.cmd("COPY mykey2 newkey DB 10 REPLACE"), int(1));
    assert_eq!(c.cmd("SELECT 10"), ok());
    assert_eq!(c.cmd("GET newkey"), bulk("hello"));
    // Independent after the copy.
    assert_eq!(c.cmd("SET newkey hoge"), ok());
    assert_eq!(c.cmd("SELECT 0"), ok());
    assert_eq!(c.cmd("GET mykey2"), bulk("hello"));
    // Encodings survive.
    assert_eq!(c.cmd("SET n 12345"), ok());
    assert_eq!(c.cmd("APPEND r abc"), int(3));
    assert_eq!(c.cmd("APPEND r d"), int(4));
    assert_eq!(c.cmd("COPY n n2"), int(1));
    assert_eq!(c.cmd("COPY r r2"), int(1));
    assert_eq!(c.cmd("OBJECT ENCODING n2"), bulk("int"));
    assert_eq!(c.cmd("OBJECT ENCODING r2"), bulk("raw"));
    // TTL is copied, not created.
    assert_eq!(c.cmd("SET e foobar EX 100"), ok());
    assert_eq!(c.cmd("COPY e e2 REPLACE"), int(1));
    assert!(matches!(c.cmd("TTL e2"), Frame::Integer(t) if t > 0 && t <= 100));
    assert_eq!(c.cmd("COPY mykey e2 REPLACE"), int(1));
    assert_eq!(c.cmd("TTL e2"), int(-1));
    // Errors.
    assert_eq!(c.cmd("COPY nokey x"), int(0));
    assert_eq!(c.cmd("COPY mykey x DB notanumber"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("COPY mykey x DB 99"), err("ERR DB index is out of range"));
    assert_eq!(c.cmd("COPY mykey x DB"), err("ERR syntax error"));
    assert_eq!(c.cmd("COPY mykey x XX"), err("ERR syntax error"));
    assert_eq!(c.cmd("COPY mykey mykey"), err("ERR source and destination objects are the same"));
    assert_eq!(c.cmd("COPY mykey mykey DB 0"), err("ERR source and destination objects are the same"));
    assert_eq!(c.cmd("COPY mykey mykey DB 1"), int(1));
    assert_eq!(c.cmd("COPY mykey"), err("ERR wrong number of arguments for 'copy' command"));
}

#[test]
fn touch_and_object() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("SET i 1"), ok());
    assert_eq!(c.cmd("SET big 123456"), ok());
    assert_eq!(c.cmd("SET e hello"), ok());
    assert_eq!(c.send(&["SET", "r", &"x".repeat(45)]), ok());
    assert_eq!(c.cmd("TOUCH i e nokey i"), int(3));
    assert_eq!(c.cmd("OBJECT ENCODING i"), bulk("int"));
    assert_eq!(c.cmd("OBJECT ENCODING e"), bulk("embstr"));
    assert_eq!(c.cmd("OBJECT ENCODING r"), bulk("raw"));
    assert_eq!(c.cmd("OBJECT ENCODING nokey"), Frame::Null);
    assert_eq!(c.cmd("OBJECT REFCOUNT i"), int(2_147_483_647));
    assert_eq!(c.cmd("OBJECT REFCOUNT big"), int(1));
    assert_eq!(c.cmd("OBJECT REFCOUNT e"), int(1));
    assert_eq!(c.cmd("OBJECT IDLETIME e"), int(0));
    assert_eq!(c.cmd("OBJECT IDLETIME nokey"), Frame::Null);
    assert_eq!(
        c.cmd("OBJECT FREQ e"),
        err("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.")
    );
    assert_eq!(c.cmd("CONFIG SET maxmemory-policy allkeys-lfu"), ok());
    assert_eq!(
        c.cmd("OBJECT IDLETIME e"),
        err("ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.")
    );
    assert_eq!(c.cmd("CONFIG SET maxmemory-policy noeviction"), ok());
    match c.cmd("OBJECT HELP") {
        Frame::Array(lines) => {
            assert_eq!(lines[0], simple("OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"));
            assert_eq!(lines[1], simple("ENCODING <key>"));
            assert_eq!(lines.len(), 15);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.cmd("OBJECT foo"), err("ERR unknown subcommand 'foo'. Try OBJECT HELP."));

    // A read refreshes the access time; EXISTS, TYPE, TTL, OBJECT and WATCH
    // do not.
    let payload = match c.cmd("DUMP e") {
        Frame::Bulk(b) => b,
        other => panic!("{other:?}"),
    };
    let restore = |c: &mut Client, key: &str, option: &str| {
        let mut args: Vec<&[u8]> = vec![b"RESTORE", key.as_bytes(), b"0", &payload];
        args.extend(option.split(' ').map(str::as_bytes));
        c.send(&args)
    };
    assert_eq!(restore(&mut c, "idle", "IDLETIME 1000"), ok());
    for probe in ["EXISTS idle", "TYPE idle", "TTL idle", "OBJECT ENCODING idle", "WATCH idle", "UNWATCH"] {
        c.cmd(probe);
    }
    assert!(matches!(c.cmd("OBJECT IDLETIME idle"), Frame::Integer(n) if n >= 1000));
    assert_eq!(c.cmd("GET idle"), bulk("hello"));
    assert!(matches!(c.cmd("OBJECT IDLETIME idle"), Frame::Integer(n) if n < 5));

    // Under an LFU policy a new key starts at 5, every access up to 5
    // counts, then they count less and less (lfu-log-factor 10).
    assert_eq!(c.cmd("CONFIG SET maxmemory-policy allkeys-lfu"), ok());
    assert_eq!(c.cmd("SET f v"), ok());
    assert_eq!(c.cmd("OBJECT FREQ f"), int(5));
    for probe in ["EXISTS f", "TYPE f", "PTTL f", "OBJECT ENCODING f", "WATCH f", "UNWATCH"] {
        c.cmd(probe);
    }
    assert_eq!(c.cmd("OBJECT FREQ f"), int(5));
    assert_eq!(c.cmd("GET f"), bulk("v"));
    assert_eq!(c.cmd("OBJECT FREQ f"), int(6));
    // Overwriting counts as an access and keeps the counter.
    assert_eq!(c.cmd("SET f w"), ok());
    assert!(matches!(c.cmd("OBJECT FREQ f"), Frame::Integer(6 | 7)));
    for _ in 0..300 {
        c.cmd("GET f");
    }
    assert!(matches!(c.cmd("OBJECT FREQ f"), Frame::Integer(n) if (8..=20).contains(&n)), "{:?}", c.cmd("OBJECT FREQ f"));
    assert_eq!(c.cmd("CONFIG SET lfu-log-factor 0"), ok());
    assert_eq!(c.cmd("SET g v"), ok());
    for _ in 0..10 {
        c.cmd("HGET g x");
    }
    assert_eq!(c.cmd("OBJECT FREQ g"), int(15), "with factor 0 every access counts, even a failed one");
    assert_eq!(restore(&mut c, "freq", "FREQ 100"), ok());
    assert_eq!(c.cmd("OBJECT FREQ freq"), int(100));
    assert_eq!(c.cmd("CONFIG SET maxmemory-policy noeviction"), ok());
    assert_eq!(c.cmd("OBJECT"), err("ERR wrong number of arguments for 'object' command"));
    assert_eq!(c.cmd("OBJECT ENCODING"), err("ERR wrong number of arguments for 'object|encoding' command"));
    assert_eq!(c.cmd("TOUCH"), err("ERR wrong number of arguments for 'touch' command"));
}

#[test]
fn idletime_grows_and_touch_resets_it() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("SET foo bar"), ok());
    std::thread::sleep(Duration::from_millis(2200));
    let idle = c.cmd("OBJECT IDLETIME foo");
    assert!(matches!(idle, Frame::Integer(i) if i >= 1), "{idle:?}");
    // TTL and TYPE do not touch; TOUCH does.
    c.cmd("TTL foo");
    assert!(matches!(c.cmd("OBJECT IDLETIME foo"), Frame::Integer(i) if i >= 1));
    assert_eq!(c.cmd("TOUCH foo"), int(1));
    assert_eq!(c.cmd("OBJECT IDLETIME foo"), int(0));
}

#[test]
fn swapdb_and_its_watch_rules() {
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    assert_eq!(c.cmd("SET a 0a"), ok());
    assert_eq!(c.cmd("SELECT 1"), ok());
    assert_eq!(c.cmd("SET b 1b"), ok());
    assert_eq!(c.cmd("SWAPDB 0 1"), ok());
    assert_eq!(c.cmd("GET a"), bulk("0a"));
    assert_eq!(c.cmd("GET b"), Frame::Null);
    assert_eq!(c.cmd("SELECT 0"), ok());
    assert_eq!(c.cmd("GET b"), bulk("1b"));
    assert_eq!(c.cmd("SWAPDB 0 0"), ok());
    assert_eq!(c.cmd("SWAPDB a 1"), err("ERR invalid first DB index"));
    assert_eq!(c.cmd("SWAPDB 0 b"), err("ERR invalid second DB index"));
    assert_eq!(c.cmd("SWAPDB 0 4294967296"), err("ERR invalid second DB index"));
    assert_eq!(c.cmd("SWAPDB 0 16"), err("ERR DB index is out of range"));
    assert_eq!(c.cmd("SWAPDB -1 0"), err("ERR DB index is out of range"));
    assert_eq!(c.cmd("SWAPDB 0"), err("ERR wrong number of arguments for 'swapdb' command"));

    // A watched key that exists is touched by the swap...
    assert_eq!(c.cmd("FLUSHALL"), ok());
    assert_eq!(c.cmd("SET x 30"), ok());
    assert_eq!(c.cmd("WATCH x"), ok());
    assert_eq!(c.cmd("SWAPDB 0 1"), ok());
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("PING"), simple("QUEUED"));
    assert_eq!(c.cmd("EXEC"), Frame::Null);
    // ...and one that the swap brings in.
    assert_eq!(c.cmd("FLUSHALL"), ok());
    assert_eq!(c.cmd("SELECT 1"), ok());
    assert_eq!(c.cmd("SET x 30"), ok());
    assert_eq!(c.cmd("SELECT 0"), ok());
    assert_eq!(c.cmd("WATCH x"), ok());
    assert_eq!(c.cmd("SWAPDB 0 1"), ok());
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("PING"), simple("QUEUED"));
    assert_eq!(c.cmd("EXEC"), Frame::Null);
    // A stale key replaced by nothing, or by another stale key: no change.
    assert_eq!(c.cmd("FLUSHALL"), ok());
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
    assert_eq!(c.cmd("SELECT 1"), ok());
    assert_eq!(c.cmd("SET x foo PX 1"), ok());
    assert_eq!(c.cmd("SELECT 0"), ok());
    assert_eq!(c.cmd("SET x bar PX 1"), ok());
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(c.cmd("SELECT 1"), ok());
    assert_eq!(c.cmd("WATCH x"), ok());
    assert_eq!(c.cmd("SWAPDB 0 1"), ok());
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("PING"), simple("QUEUED"));
    assert_eq!(c.cmd("EXEC"), Frame::Array(vec![simple("PONG")]));
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 1"), ok());
}

#[test]
fn flushdb_and_flushall() {
    let server = Server::start(&[]);
    let mut c = server.client();
    populate(&mut c, "k", 100);
    assert_eq!(c.cmd("SELECT 1"), ok());
    populate(&mut c, "k", 10);
    assert_eq!(c.cmd("FLUSHDB"), ok());
    assert_eq!(c.cmd("DBSIZE"), int(0));
    assert_eq!(c.cmd("SELECT 0"), ok());
    assert_eq!(c.cmd("DBSIZE"), int(100));
    assert_eq!(c.cmd("FLUSHDB ASYNC"), ok());
    assert_eq!(c.cmd("DBSIZE"), int(0));
    populate(&mut c, "k", 100);
    assert_eq!(c.cmd("FLUSHDB sync"), ok());
    assert_eq!(c.cmd("DBSIZE"), int(0));
    assert_eq!(c.cmd("FLUSHDB x"), err("ERR syntax error"));
    assert_eq!(c.cmd("FLUSHDB sync async"), err("ERR syntax error"));
    assert_eq!(c.cmd("FLUSHALL x"), err("ERR syntax error"));
    populate(&mut c, "k", 50);
    assert_eq!(c.cmd("SELECT 5"), ok());
    populate(&mut c, "k", 50);
    assert_eq!(c.cmd("FLUSHALL ASYNC"), ok());
    assert_eq!(c.cmd("DBSIZE"), int(0));
    assert_eq!(c.cmd("SELECT 0"), ok());
    assert_eq!(c.cmd("DBSIZE"), int(0));
    populate(&mut c, "k", 50);
    assert_eq!(c.cmd("CONFIG SET lazyfree-lazy-user-flush yes"), ok());
    assert_eq!(c.cmd("FLUSHALL"), ok());
    assert_eq!(c.cmd("DBSIZE"), int(0));

    // WATCH: a flush touches watched keys that exist, not missing ones.
    assert_eq!(c.cmd("SET x 30"), ok());
    assert_eq!(c.cmd("WATCH x"), ok());
    assert_eq!(c.cmd("FLUSHALL"), ok());
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("PING"), simple("QUEUED"));
    assert_eq!(c.cmd("EXEC"), Frame::Null);
    assert_eq!(c.cmd("WATCH x"), ok());
    assert_eq!(c.cmd("FLUSHDB"), ok());
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("PING"), simple("QUEUED"));
    assert_eq!(c.cmd("EXEC"), Frame::Array(vec![simple("PONG")]));
}

#[test]
fn flush_of_a_large_database_does_not_stall_other_clients_when_async() {
    let server = Server::start(&[]);
    let mut c = server.client();
    for batch in 0..20 {
        populate(&mut c, &format!("b{batch}:"), 5000);
    }
    assert_eq!(c.cmd("DBSIZE"), int(100_000));
    let started = Instant::now();
    assert_eq!(c.cmd("FLUSHALL ASYNC"), ok());
    let elapsed = started.elapsed();
    assert_eq!(c.cmd("DBSIZE"), int(0));
    assert!(elapsed < Duration::from_secs(2), "FLUSHALL ASYNC took {elapsed:?}");
}

#[test]
fn memory_usage_counts_what_a_key_holds() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("MEMORY USAGE missing"), Frame::Null);
    c.cmd("SET small x");
    c.cmd(&format!("SET big {}", "x".repeat(10_000)));
    let (Frame::Integer(small), Frame::Integer(big)) = (c.cmd("MEMORY USAGE small"), c.cmd("MEMORY USAGE big SAMPLES 0")) else {
        panic!("integers")
    };
    assert!(small > 0 && big > small && big > 10_000, "{small} {big}");
    assert_eq!(c.cmd("MEMORY USAGE small SAMPLES -1"), err("ERR syntax error"));
    assert_eq!(c.cmd("MEMORY USAGE small SAMPLES x"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("MEMORY USAGE small bogus"), err("ERR syntax error"));
}
