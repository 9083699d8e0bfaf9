//! Black-box tests of the hash commands over a real socket: replies and
//! error texts, WRONGTYPE, deletion of emptied keys, encodings and their
//! conversion, RESP3 shapes, HRANDFIELD and HSCAN by their properties,
//! WATCH, dirty counts, the journal (HINCRBYFLOAT logged as HSET) and
//! persistence across a restart.

mod common;

use std::collections::{HashMap, HashSet};

use common::{bulk, err, int, ok, temp_dir, Client, Frame, Server};

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn keel() -> (Server, Client) {
    let server = Server::start(&[]);
    let client = server.client();
    (server, client)
}

fn bulks(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(|s| bulk(s)).collect())
}

fn text(f: &Frame) -> String {
    match f {
        Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("not a bulk: {other:?}"),
    }
}

fn items(f: Frame) -> Vec<Frame> {
    match f {
        Frame::Array(v) => v,
        other => panic!("not an array: {other:?}"),
    }
}

/// HSETs `n` fields `f0..` with values `v0..` into `key`.
fn fill(c: &mut Client, key: &str, n: usize) {
    let mut argv = vec!["HSET".to_string(), key.to_string()];
    for i in 0..n {
        argv.push(format!("f{i}"));
        argv.push(format!("v{i}"));
    }
    assert_eq!(c.send(&argv), int(n as i64));
}

#[test]
fn set_get_and_delete() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("HSET h a 1 b 2"), int(2));
    assert_eq!(c.cmd("HSET h a 10 c 3"), int(1));
    assert_eq!(c.cmd("HMSET h d 4"), ok());
    assert_eq!(c.cmd("HSETNX h a x"), int(0));
    assert_eq!(c.cmd("HSETNX h e 5"), int(1));
    assert_eq!(c.cmd("HGET h a"), bulk("10"));
    assert_eq!(c.cmd("HGET h nope"), Frame::Null);
    assert_eq!(c.cmd("HGET nokey a"), Frame::Null);
    assert_eq!(
        c.cmd("HMGET h a nope e"),
        Frame::Array(vec![bulk("10"), Frame::Null, bulk("5")])
    );
    assert_eq!(c.cmd("HMGET nokey a b"), Frame::Array(vec![Frame::Null, Frame::Null]));
    assert_eq!(c.cmd("HLEN h"), int(5));
    assert_eq!(c.cmd("HLEN nokey"), int(0));
    assert_eq!(c.cmd("HSTRLEN h a"), int(2));
    assert_eq!(c.cmd("HSTRLEN h nope"), int(0));
    assert_eq!(c.cmd("HEXISTS h a"), int(1));
    assert_eq!(c.cmd("HEXISTS h nope"), int(0));
    // A listpack answers in insertion order; an update keeps the place.
    assert_eq!(c.cmd("HKEYS h"), bulks(&["a", "b", "c", "d", "e"]));
    assert_eq!(c.cmd("HVALS h"), bulks(&["10", "2", "3", "4", "5"]));
    assert_eq!(c.cmd("HGETALL h"), bulks(&["a", "10", "b", "2", "c", "3", "d", "4", "e", "5"]));
    assert_eq!(c.cmd("HGETALL nokey"), bulks(&[]));
    assert_eq!(c.cmd("HKEYS nokey"), bulks(&[]));
    assert_eq!(c.cmd("HDEL h a nope b"), int(2));
    assert_eq!(c.cmd("HDEL nokey a"), int(0));
    assert_eq!(c.cmd("TYPE h"), Frame::Simple(b"hash".to_vec()));
    // Deleting the last field deletes the key, even mid-argument list.
    assert_eq!(c.cmd("HDEL h c d e c"), int(3));
    assert_eq!(c.cmd("EXISTS h"), int(0));
    // Empty fields and values are fine.
    assert_eq!(c.send(&["HSET", "h", "", ""]), int(1));
    assert_eq!(c.send(&["HGET", "h", ""]), bulk(""));
    assert_eq!(c.send(&["HSTRLEN", "h", ""]), int(0));
}

#[test]
fn hstrlen_counts_digits_of_integers() {
    let (_s, mut c) = keel();
    for v in ["-9223372036854775808", "9223372036854775807", "9223372036854775808", "", "0", "-1", "x"] {
        c.send(&["HSET", "h", "f", v]);
        assert_eq!(c.cmd("HSTRLEN h f"), int(v.len() as i64), "{v}");
    }
}

#[test]
fn hincrby_and_hincrbyfloat() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("HINCRBY h n 5"), int(5));
    assert_eq!(c.cmd("HINCRBY h n -7"), int(-2));
    assert_eq!(c.cmd("HINCRBY h big 17179869184"), int(17179869184));
    assert_eq!(c.cmd("HINCRBY h big 17179869184"), int(34359738368));
    c.cmd("HSET h max 9223372036854775807 min -9223372036854775808 s abc f 1.5");
    c.send(&["HSET", "h", "sp", " 1"]);
    let overflow = err("ERR increment or decrement would overflow");
    assert_eq!(c.cmd("HINCRBY h max 1"), overflow);
    assert_eq!(c.cmd("HINCRBY h min -1"), overflow);
    assert_eq!(c.cmd("HINCRBY h max -1"), int(9223372036854775806));
    let not_int = err("ERR hash value is not an integer");
    assert_eq!(c.cmd("HINCRBY h s 1"), not_int);
    assert_eq!(c.cmd("HINCRBY h sp 1"), not_int);
    assert_eq!(c.cmd("HINCRBY h f 1"), not_int);
    assert_eq!(c.cmd("HINCRBY h n x"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("HINCRBY h n 1.5"), err("ERR value is not an integer or out of range"));

    assert_eq!(c.cmd("HINCRBYFLOAT h fl 1.23"), bulk("1.23"));
    assert_eq!(c.cmd("HINCRBYFLOAT h fl 0.77"), bulk("2"));
    assert_eq!(c.cmd("HINCRBYFLOAT h fl -0.1"), bulk("1.9"));
    assert_eq!(c.cmd("HINCRBYFLOAT h n 10.5"), bulk("8.5"));
    assert_eq!(c.cmd("HINCRBYFLOAT h big 1.5"), bulk("34359738369.5"));
    assert_eq!(c.cmd("HINCRBYFLOAT h f 3.0e3"), bulk("3001.5"));
    assert_eq!(c.cmd("HINCRBYFLOAT h s 1"), err("ERR hash value is not a float"));
    assert_eq!(c.cmd("HINCRBYFLOAT h sp 1"), err("ERR hash value is not a float"));
    c.send(&["HSET", "h", "nul", "1\u{0}2"]);
    assert_eq!(c.cmd("HINCRBYFLOAT h nul 1"), err("ERR hash value is not a float"));
    assert_eq!(c.cmd("HINCRBYFLOAT h fl x"), err("ERR value is not a valid float"));
    let Frame::Bulk(huge) = c.cmd("HINCRBYFLOAT h x 1.1e4932") else { panic!("no value") };
    assert_eq!(huge.len(), 4933);
    assert_eq!(c.cmd("HINCRBYFLOAT h x 1.1e4932"), err("ERR increment would produce NaN or Infinity"));
    c.cmd("HSET h inf inf");
    assert_eq!(c.cmd("HINCRBYFLOAT h inf 1"), err("ERR increment would produce NaN or Infinity"));
    // An infinite increment is refused before the key is looked at.
    for inf in ["+inf", "-inf", "Infinity"] {
        assert_eq!(c.send(&["HINCRBYFLOAT", "hfoo", "f", inf]), err("ERR value is NaN or Infinity"));
    }
    assert_eq!(c.cmd("HINCRBYFLOAT hfoo f nan"), err("ERR value is not a valid float"));
    assert_eq!(c.cmd("EXISTS hfoo"), int(0));
    assert_eq!(c.cmd("HINCRBY hfoo f x"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("EXISTS hfoo"), int(0));
}

#[test]
fn argument_errors() {
    let (_s, mut c) = keel();
    c.cmd("HSET h a 1");
    assert_eq!(c.cmd("HSET h a"), err("ERR wrong number of arguments for 'hset' command"));
    assert_eq!(c.cmd("HSET h a 1 b"), err("ERR wrong number of arguments for 'hset' command"));
    assert_eq!(c.cmd("HMSET h a 1 b"), err("ERR wrong number of arguments for 'hmset' command"));
    assert_eq!(c.cmd("HSETNX h a"), err("ERR wrong number of arguments for 'hsetnx' command"));
    assert_eq!(c.cmd("HGET h"), err("ERR wrong number of arguments for 'hget' command"));
    assert_eq!(c.cmd("HMGET h"), err("ERR wrong number of arguments for 'hmget' command"));
    assert_eq!(c.cmd("HDEL h"), err("ERR wrong number of arguments for 'hdel' command"));
    assert_eq!(c.cmd("HLEN h x"), err("ERR wrong number of arguments for 'hlen' command"));
    assert_eq!(c.cmd("HGETALL"), err("ERR wrong number of arguments for 'hgetall' command"));
    assert_eq!(c.cmd("HSCAN h"), err("ERR wrong number of arguments for 'hscan' command"));
    assert_eq!(c.cmd("HRANDFIELD"), err("ERR wrong number of arguments for 'hrandfield' command"));
    assert_eq!(c.cmd("HGET h a"), bulk("1"));
}

#[test]
fn wrong_type_everywhere() {
    let (_s, mut c) = keel();
    c.cmd("SET s v");
    for line in [
        "HSET s a 1",
        "HMSET s a 1",
        "HSETNX s a 1",
        "HGET s a",
        "HMGET s a",
        "HDEL s a",
        "HLEN s",
        "HSTRLEN s a",
        "HEXISTS s a",
        "HKEYS s",
        "HVALS s",
        "HGETALL s",
        "HINCRBY s a 1",
        "HINCRBYFLOAT s a 1",
        "HRANDFIELD s",
        "HRANDFIELD s 2 WITHVALUES",
        "HSCAN s 0",
        "HSCAN s 0 COUNT 0",
    ] {
        assert_eq!(c.cmd(line), err(WRONGTYPE), "{line}");
    }
    assert_eq!(c.cmd("GET s"), bulk("v"));
    c.cmd("HSET h a 1");
    assert_eq!(c.cmd("GET h"), err(WRONGTYPE));
    assert_eq!(c.cmd("LPUSH h a"), err(WRONGTYPE));
}

#[test]
fn encoding_converts_one_way() {
    let (_s, mut c) = keel();
    // Redis 7.0's default hash-max-listpack-entries is 512.
    fill(&mut c, "small", 512);
    assert_eq!(c.cmd("OBJECT ENCODING small"), bulk("listpack"));
    assert_eq!(c.cmd("HSET small f512 v"), int(1));
    assert_eq!(c.cmd("OBJECT ENCODING small"), bulk("hashtable"));
    // Back under the limit, a table stays a table.
    for i in 0..100 {
        c.send(&["HDEL", "small", &format!("f{i}")]);
    }
    assert_eq!(c.cmd("OBJECT ENCODING small"), bulk("hashtable"));
    assert_eq!(c.cmd("HGET small f511"), bulk("v511"));
    assert_eq!(c.cmd("HLEN small"), int(413));

    let long = "x".repeat(65);
    c.send(&["HSET", "v", "a", &"x".repeat(64)]);
    assert_eq!(c.cmd("OBJECT ENCODING v"), bulk("listpack"));
    c.send(&["HSET", "v", "a", &long]);
    assert_eq!(c.cmd("OBJECT ENCODING v"), bulk("hashtable"));
    c.send(&["HSET", "f", &long, "1"]);
    assert_eq!(c.cmd("OBJECT ENCODING f"), bulk("hashtable"));
    // HSETNX of an existing field sets nothing, so converts nothing.
    c.cmd("HSET nx a 1");
    c.send(&["HSETNX", "nx", "a", &long]);
    assert_eq!(c.cmd("OBJECT ENCODING nx"), bulk("listpack"));
    c.send(&["HSETNX", "nx", "b", &long]);
    assert_eq!(c.cmd("OBJECT ENCODING nx"), bulk("hashtable"));

    // The increments convert on the length of what they store.
    assert_eq!(c.cmd("CONFIG SET hash-max-listpack-value 8"), ok());
    c.cmd("HSET i1 tmp 0");
    c.cmd("HSET i2 tmp 0");
    c.cmd("HINCRBYFLOAT i1 tmp 0.000005");
    c.cmd("HINCRBYFLOAT i2 tmp 0.0000005");
    assert_eq!(c.cmd("OBJECT ENCODING i1"), bulk("listpack"));
    assert_eq!(c.cmd("OBJECT ENCODING i2"), bulk("hashtable"));
    c.cmd("HINCRBY i3 abcdefgh 1");
    c.cmd("HINCRBY i4 abcdefghi 1");
    assert_eq!(c.cmd("OBJECT ENCODING i3"), bulk("listpack"));
    assert_eq!(c.cmd("OBJECT ENCODING i4"), bulk("hashtable"));

    // The old ziplist names set the same limits.
    assert_eq!(c.cmd("CONFIG SET hash-max-ziplist-entries 2"), ok());
    c.cmd("HSET z a 1 b 2");
    assert_eq!(c.cmd("OBJECT ENCODING z"), bulk("listpack"));
    c.cmd("HSET z c 3");
    assert_eq!(c.cmd("OBJECT ENCODING z"), bulk("hashtable"));
    assert_eq!(c.cmd("CONFIG SET hash-max-listpack-entries 0"), ok());
    c.cmd("HSET zero a 1");
    assert_eq!(c.cmd("OBJECT ENCODING zero"), bulk("hashtable"));
}

#[test]
fn both_encodings_answer_the_same() {
    let (_s, mut c) = keel();
    for key in ["lp", "ht"] {
        fill(&mut c, key, 100);
    }
    c.cmd("CONFIG SET hash-max-listpack-entries 10");
    c.cmd("DEL ht");
    fill(&mut c, "ht", 100);
    assert_eq!(c.cmd("OBJECT ENCODING lp"), bulk("listpack"));
    assert_eq!(c.cmd("OBJECT ENCODING ht"), bulk("hashtable"));
    let pairs = |c: &mut Client, key: &str| -> HashMap<String, String> {
        let all = items(c.send(&["HGETALL", key]));
        all.chunks(2).map(|p| (text(&p[0]), text(&p[1]))).collect()
    };
    assert_eq!(pairs(&mut c, "lp"), pairs(&mut c, "ht"));
    for key in ["lp", "ht"] {
        assert_eq!(c.send(&["HGET", key, "f42"]), bulk("v42"));
        assert_eq!(c.send(&["HDEL", key, "f42", "f43"]), int(2));
        assert_eq!(c.send(&["HLEN", key]), int(98));
        assert_eq!(c.send(&["HINCRBY", key, "n", "3"]), int(3));
    }
    assert_eq!(pairs(&mut c, "lp"), pairs(&mut c, "ht"));
}

#[test]
fn resp3_shapes() {
    let (_s, mut c) = keel();
    assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
    assert_eq!(c.cmd("HGETALL nokey"), Frame::Map(vec![]));
    assert_eq!(c.cmd("HKEYS nokey"), bulks(&[]));
    assert_eq!(c.cmd("HGET nokey a"), Frame::Null);
    assert_eq!(c.cmd("HRANDFIELD nokey"), Frame::Null);
    assert_eq!(c.cmd("HRANDFIELD nokey 3 WITHVALUES"), bulks(&[]));
    c.cmd("HSET h a 1 b 2");
    assert_eq!(c.cmd("HGETALL h"), Frame::Map(vec![(bulk("a"), bulk("1")), (bulk("b"), bulk("2"))]));
    assert_eq!(c.cmd("HMGET h a x"), Frame::Array(vec![bulk("1"), Frame::Null]));
    // WITHVALUES answers [field, value] pairs in RESP3, a flat array in RESP2.
    for (count, want) in [("5", 2), ("-3", 3), ("1", 1)] {
        let reply = items(c.send(&["HRANDFIELD", "h", count, "WITHVALUES"]));
        assert_eq!(reply.len(), want, "{count}");
        for pair in reply {
            let pair = items(pair);
            assert_eq!(pair.len(), 2);
            assert_eq!(c.send(&["HGET", "h", &text(&pair[0])]), pair[1]);
        }
    }
    assert_eq!(items(c.cmd("HRANDFIELD h -3")).len(), 3);
    assert_eq!(c.cmd("HSCAN h 0"), Frame::Array(vec![bulk("0"), bulks(&["a", "1", "b", "2"])]));
    c.cmd("HELLO 2");
    assert_eq!(items(c.cmd("HRANDFIELD h -3 WITHVALUES")).len(), 6);
    assert_eq!(c.cmd("HGETALL nokey"), bulks(&[]));
}

#[test]
fn raw_resp_null_forms() {
    let (_s, mut c) = keel();
    for (cmd, want) in [
        (&["HGET", "k", "f"][..], &b"$-1\r\n"[..]),
        (&["HRANDFIELD", "k"], b"$-1\r\n"),
        (&["HRANDFIELD", "k", "2"], b"*0\r\n"),
        (&["HMGET", "k", "f"], b"*1\r\n$-1\r\n"),
        (&["HGETALL", "k"], b"*0\r\n"),
    ] {
        c.write_command(cmd);
        let mut buf = vec![0u8; want.len()];
        std::io::Read::read_exact(&mut c.stream, &mut buf).expect("reply");
        assert_eq!(buf, want, "{cmd:?}");
    }
}

/// HRANDFIELD's fields and values, whatever the protocol shape.
fn randfield(c: &mut Client, key: &str, count: i64, with_values: bool) -> Vec<(String, Option<String>)> {
    let mut argv = vec!["HRANDFIELD".to_string(), key.to_string(), count.to_string()];
    if with_values {
        argv.push("WITHVALUES".into());
    }
    let reply = items(c.send(&argv));
    if with_values {
        reply.chunks(2).map(|p| (text(&p[0]), Some(text(&p[1])))).collect()
    } else {
        reply.iter().map(|f| (text(f), None)).collect()
    }
}

#[test]
fn hrandfield_cases() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("HRANDFIELD h 0"), bulks(&[]));
    c.cmd("CONFIG SET hash-max-listpack-entries 64");
    fill(&mut c, "lp", 30);
    fill(&mut c, "ht", 300);
    assert_eq!(c.cmd("OBJECT ENCODING lp"), bulk("listpack"));
    assert_eq!(c.cmd("OBJECT ENCODING ht"), bulk("hashtable"));
    for (key, size) in [("lp", 30usize), ("ht", 300)] {
        assert_eq!(c.send(&["HRANDFIELD", key, "0"]), bulks(&[]));
        assert_eq!(c.send(&["HRANDFIELD", key, "0", "WITHVALUES"]), bulks(&[]));
        let Frame::Bulk(one) = c.send(&["HRANDFIELD", key]) else { panic!() };
        assert!(String::from_utf8_lossy(&one).starts_with('f'));
        // Every count: distinct fields from the hash, values that match.
        for count in [1, 2, size / 3, size / 3 + 1, size / 2, size - 1, size, size + 5] {
            for with_values in [false, true] {
                let got = randfield(&mut c, key, count as i64, with_values);
                assert_eq!(got.len(), count.min(size), "{key} {count}");
                let fields: HashSet<&String> = got.iter().map(|(f, _)| f).collect();
                assert_eq!(fields.len(), got.len(), "{key} {count}: repeats");
                for (f, v) in &got {
                    let n: usize = f[1..].parse().expect("field number");
                    assert!(n < size);
                    if let Some(v) = v {
                        assert_eq!(v, &format!("v{n}"));
                    }
                }
            }
        }
        // Negative counts repeat, and reach every field soon enough.
        let got = randfield(&mut c, key, -(size as i64) * 20, true);
        assert_eq!(got.len(), size * 20);
        let fields: HashSet<&String> = got.iter().map(|(f, _)| f).collect();
        assert_eq!(fields.len(), size, "{key}: a negative count misses fields");
        for (f, v) in &got {
            assert_eq!(v.as_deref().expect("with values")[1..], f[1..]);
        }
    }
    // Argument errors come before the key is looked at.
    assert_eq!(c.cmd("HRANDFIELD nokey x"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("HRANDFIELD nokey 1 FOO"), err("ERR syntax error"));
    assert_eq!(c.cmd("HRANDFIELD lp 1 WITHVALUES x"), err("ERR syntax error"));
    assert_eq!(
        c.cmd("HRANDFIELD lp -9223372036854775808"),
        err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    );
    assert_eq!(c.cmd("HRANDFIELD lp -9223372036854775807 WITHVALUES"), err("ERR value is out of range"));
    assert_eq!(c.cmd("HRANDFIELD lp 4611686018427387904 WITHVALUES"), err("ERR value is out of range"));
    assert_eq!(items(c.cmd("HRANDFIELD lp 4611686018427387903 WITHVALUES")).len(), 60);
}

/// Every pair of `key` by HSCAN, following cursors to 0.
fn scan_all(c: &mut Client, key: &str, extra: &[&str]) -> (Vec<(String, String)>, usize) {
    let mut cursor = "0".to_string();
    let mut pairs = Vec::new();
    let mut calls = 0;
    loop {
        let mut argv = vec!["HSCAN", key, &cursor];
        argv.extend_from_slice(extra);
        let reply = items(c.send(&argv));
        calls += 1;
        let next = text(&reply[0]);
        pairs.extend(items(reply[1].clone()).chunks(2).map(|p| (text(&p[0]), text(&p[1]))));
        if next == "0" {
            return (pairs, calls);
        }
        cursor = next;
    }
}

#[test]
fn hscan_covers_both_encodings() {
    let (_s, mut c) = keel();
    fill(&mut c, "lp", 50);
    fill(&mut c, "ht", 1000);
    assert_eq!(c.cmd("OBJECT ENCODING ht"), bulk("hashtable"));
    // A listpack answers everything in one call, whatever the COUNT.
    let (pairs, calls) = scan_all(&mut c, "lp", &["COUNT", "1"]);
    assert_eq!((pairs.len(), calls), (50, 1));
    assert!(pairs.iter().all(|(f, v)| f[1..] == v[1..]));
    let (pairs, calls) = scan_all(&mut c, "ht", &[]);
    let fields: HashSet<&String> = pairs.iter().map(|(f, _)| f).collect();
    assert_eq!(fields.len(), 1000);
    assert!(calls > 10, "{calls} calls");
    assert!(pairs.iter().all(|(f, v)| f[1..] == v[1..]));
    let (pairs, _) = scan_all(&mut c, "ht", &["MATCH", "f1*", "COUNT", "100"]);
    let fields: HashSet<&String> = pairs.iter().map(|(f, _)| f).collect();
    assert_eq!(fields.len(), 111);
    let (pairs, _) = scan_all(&mut c, "lp", &["MATCH", "f?"]);
    assert_eq!(pairs.len(), 10);

    assert_eq!(c.cmd("HSCAN nokey 0"), Frame::Array(vec![bulk("0"), bulks(&[])]));
    // A missing key answers before the options are parsed, as in Redis.
    assert_eq!(c.cmd("HSCAN nokey 0 COUNT 0"), Frame::Array(vec![bulk("0"), bulks(&[])]));
    assert_eq!(c.cmd("HSCAN nokey x"), err("ERR invalid cursor"));
    assert_eq!(c.cmd("HSCAN lp 0 COUNT 0"), err("ERR syntax error"));
    assert_eq!(c.cmd("HSCAN lp 0 COUNT x"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("HSCAN lp 0 MATCH"), err("ERR syntax error"));
    assert_eq!(c.cmd("HSCAN lp 0 FOO bar"), err("ERR syntax error"));
}

#[test]
fn dirty_counts_match_redis() {
    let (_s, mut c) = keel();
    let dirty = |c: &mut Client| -> i64 {
        c.info_field("persistence", "rdb_changes_since_last_save").parse().expect("number")
    };
    let base = dirty(&mut c);
    c.cmd("HSET h a 1 b 2 c 3");
    assert_eq!(dirty(&mut c) - base, 3);
    // Updates count like inserts.
    c.cmd("HMSET h a 1 b 2");
    assert_eq!(dirty(&mut c) - base, 5);
    c.cmd("HSETNX h a 1");
    c.cmd("HDEL h nope");
    c.cmd("HDEL nokey a");
    c.cmd("HINCRBY h a x");
    assert_eq!(dirty(&mut c) - base, 5);
    c.cmd("HSETNX h d 1");
    c.cmd("HINCRBY h a 1");
    c.cmd("HINCRBYFLOAT h a 1");
    assert_eq!(dirty(&mut c) - base, 8);
    c.cmd("HDEL h a b nope");
    assert_eq!(dirty(&mut c) - base, 10);
}

#[test]
fn watch_sees_hash_changes() {
    let (s, mut c) = keel();
    let mut other = s.client();
    c.cmd("HSET h a 1 b 2");
    for change in ["HSET h c 3", "HSET h a 1", "HDEL h c", "HSETNX h z 1", "HINCRBY h a 1", "HINCRBYFLOAT h a 1"] {
        assert_eq!(c.cmd("WATCH h"), ok());
        other.cmd(change);
        c.cmd("MULTI");
        c.cmd("HLEN h");
        assert_eq!(c.cmd("EXEC"), Frame::Null, "{change}");
    }
    for no_change in ["HDEL h nope", "HSETNX h a 5", "HINCRBY h b x", "HGETALL h", "HRANDFIELD h 2"] {
        assert_eq!(c.cmd("WATCH h"), ok());
        other.cmd(no_change);
        c.cmd("MULTI");
        c.cmd("HLEN h");
        assert!(matches!(c.cmd("EXEC"), Frame::Array(_)), "{no_change}");
    }
}

#[test]
fn keyspace_hits_and_misses() {
    let (_s, mut c) = keel();
    let stats = |c: &mut Client| -> (i64, i64) {
        let Frame::Bulk(text) = c.cmd("INFO stats") else { panic!() };
        let text = String::from_utf8(text).expect("utf-8");
        let get = |name: &str| -> i64 {
            text.lines().find_map(|l| l.strip_prefix(name)).expect("field").trim().parse().expect("number")
        };
        (get("keyspace_hits:"), get("keyspace_misses:"))
    };
    c.cmd("HSET h a 1");
    let (h0, m0) = stats(&mut c);
    for line in ["HGET h a", "HMGET h a b", "HLEN h", "HGETALL h", "HSCAN h 0", "HRANDFIELD h", "HEXISTS h x"] {
        c.cmd(line);
    }
    for line in ["HGET nokey a", "HSTRLEN nokey a", "HSCAN nokey 0", "HRANDFIELD nokey 2"] {
        c.cmd(line);
    }
    // Write lookups count nothing.
    c.cmd("HSET h b 2");
    c.cmd("HDEL nokey a");
    let (h1, m1) = stats(&mut c);
    assert_eq!((h1 - h0, m1 - m0), (7, 4));
}

#[test]
fn hashes_survive_a_restart() {
    let dir = temp_dir("hashes");
    let want;
    {
        let server = Server::start_in(&dir, &[]);
        let mut c = server.client();
        c.cmd("HSET h a 1 b 2 c 3");
        c.cmd("HMSET h d 4");
        c.cmd("HSETNX h e 5");
        c.cmd("HDEL h b");
        c.cmd("HINCRBY h a 41");
        c.cmd("HINCRBYFLOAT h f 10.5");
        c.cmd("HINCRBYFLOAT h f 0.1");
        fill(&mut c, "big", 200);
        c.cmd("HDEL big f7");
        c.cmd("HSET gone x 1");
        c.cmd("HDEL gone x");
        want = (c.cmd("HGETALL h"), c.cmd("HLEN big"), c.cmd("OBJECT ENCODING big"));
        assert_eq!(want.0, bulks(&["a", "42", "c", "3", "d", "4", "e", "5", "f", "10.6"]));
        drop(server);
    }
    // HINCRBYFLOAT is journaled as the HSET of its result, as Redis
    // propagates it.
    let aof: Vec<u8> = std::fs::read_dir(dir.join("appendonlydir"))
        .expect("aof dir")
        .filter_map(Result::ok)
        .filter(|e| e.path().to_string_lossy().ends_with(".incr.aof"))
        .flat_map(|e| std::fs::read(e.path()).expect("read aof"))
        .collect();
    let text = String::from_utf8_lossy(&aof).to_ascii_uppercase();
    assert!(!text.contains("HINCRBYFLOAT"), "HINCRBYFLOAT logged as it came");
    assert!(text.contains("$4\r\nHSET\r\n$1\r\nH\r\n$1\r\nF\r\n$4\r\n10.6\r\n"), "{text}");
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!((c.cmd("HGETALL h"), c.cmd("HLEN big"), c.cmd("OBJECT ENCODING big")), want);
    assert_eq!(c.cmd("HGET big f199"), bulk("v199"));
    assert_eq!(c.cmd("EXISTS gone"), int(0));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn command_table_entries() {
    let (_s, mut c) = keel();
    let Frame::Array(info) = c.cmd("COMMAND INFO hset hget hgetall hrandfield hdel") else { panic!() };
    let head = |f: &Frame| -> (Frame, Frame, Frame) {
        let Frame::Array(parts) = f else { panic!("{f:?}") };
        (parts[1].clone(), parts[2].clone(), parts[3].clone())
    };
    let flags = |names: &[&str]| Frame::Set(names.iter().map(|n| Frame::Simple(n.as_bytes().to_vec())).collect());
    let flat = |f: Frame| match f {
        Frame::Set(v) | Frame::Array(v) => Frame::Set(v),
        other => other,
    };
    let (arity, fl, first) = head(&info[0]);
    assert_eq!((arity, flat(fl), first), (int(-4), flags(&["write", "denyoom", "fast"]), int(1)));
    let (arity, fl, _) = head(&info[1]);
    assert_eq!((arity, flat(fl)), (int(3), flags(&["readonly", "fast"])));
    let (arity, fl, _) = head(&info[2]);
    assert_eq!((arity, flat(fl)), (int(2), flags(&["readonly"])));
    let (arity, fl, _) = head(&info[3]);
    assert_eq!((arity, flat(fl)), (int(-2), flags(&["readonly"])));
    let (arity, fl, _) = head(&info[4]);
    assert_eq!((arity, flat(fl)), (int(-3), flags(&["write", "fast"])));
    let Frame::Array(parts) = &info[3] else { panic!() };
    assert!(format!("{:?}", parts[7]).contains(&format!("{:?}", b"nondeterministic_output".to_vec())));
}
