//! Black-box tests of the string commands: exact replies and error texts
//! over a real socket, and scripted comparisons with Debian's redis-server
//! 7.0.15 where it is installed.

mod common;

use common::{bulk, err, int, ok, Client, Frame, Server};

fn keel() -> (Server, Client) {
    let server = Server::start(&[]);
    let client = server.client();
    (server, client)
}

fn array(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

/// Sends each command to redis-server and to Keel and requires the same
/// replies (TTL-like integers compared by rough magnitude).
fn same_as_redis(script: &[Vec<String>]) {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&[]);
    let (mut r, mut k) = (redis.client(), keel.client());
    for argv in script {
        let (want, got) = (r.send(argv), k.send(argv));
        assert_eq!(want, got, "reply differs for {argv:?}");
    }
}

fn script(lines: &[&str]) -> Vec<Vec<String>> {
    lines.iter().map(|l| l.split(' ').map(String::from).collect()).collect()
}

#[test]
fn set_and_get() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("SET x foobar"), ok());
    assert_eq!(c.cmd("GET x"), bulk("foobar"));
    assert_eq!(c.send(&["SET", "x", ""]), ok());
    assert_eq!(c.cmd("GET x"), bulk(""));
    assert_eq!(c.cmd("GET nokey"), Frame::Null);
    let big = "abcd".repeat(1_000_000);
    assert_eq!(c.send(&["SET", "big", &big]), ok());
    assert_eq!(c.cmd("GET big"), bulk(&big));
    assert_eq!(c.cmd("STRLEN big"), int(4_000_000));
}

#[test]
fn set_options() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("SET foo 1 NX"), ok());
    assert_eq!(c.cmd("SET foo 2 NX"), Frame::Null);
    assert_eq!(c.cmd("GET foo"), bulk("1"));
    assert_eq!(c.cmd("SET bar 1 XX"), Frame::Null);
    assert_eq!(c.cmd("SET foo 2 XX"), ok());
    assert_eq!(c.cmd("SET foo 3 GET"), bulk("2"));
    assert_eq!(c.cmd("SET none v GET"), Frame::Null);
    assert_eq!(c.cmd("GET none"), bulk("v"));
    assert_eq!(c.cmd("SET foo 4 GET XX"), bulk("3"));
    assert_eq!(c.cmd("SET nx2 4 GET XX"), Frame::Null);
    assert_eq!(c.cmd("GET nx2"), Frame::Null);
    assert_eq!(c.cmd("SET foo 5 GET NX"), bulk("4"));
    assert_eq!(c.cmd("GET foo"), bulk("4"));
    assert_eq!(c.cmd("SET foo bar non-existing-option"), err("ERR syntax error"));
    assert_eq!(c.cmd("SET foo bar NX XX"), err("ERR syntax error"));
    assert_eq!(c.cmd("SET foo bar EX 10 PX 100"), err("ERR syntax error"));
    assert_eq!(c.cmd("SET foo bar EX 10 KEEPTTL"), err("ERR syntax error"));
    assert_eq!(c.cmd("SET foo bar EX"), err("ERR syntax error"));
    assert_eq!(c.cmd("SET foo bar EX 0"), err("ERR invalid expire time in 'set' command"));
    assert_eq!(c.cmd("SET foo bar PX -5"), err("ERR invalid expire time in 'set' command"));
    assert_eq!(c.cmd("SET foo bar EX 9223372036854775"), err("ERR invalid expire time in 'set' command"));
    assert_eq!(c.cmd("SET foo bar PX 9223372036854775807"), err("ERR invalid expire time in 'set' command"));
    assert_eq!(c.cmd("SET foo bar EX abc"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("SET foo bar EX 10 EX 20"), ok());
    assert_eq!(c.cmd("SET"), err("ERR wrong number of arguments for 'set' command"));
}

#[test]
fn expiring_sets_expire() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("SET a 1 PX 50"), ok());
    assert_eq!(c.cmd("SETEX b 100 v"), ok());
    assert_eq!(c.cmd("PSETEX p 50 v"), ok());
    let past_ms = "1000";
    assert_eq!(c.send(&["SET", "c", "1", "PXAT", past_ms]), ok());
    assert_eq!(c.cmd("GET c"), Frame::Null);
    assert_eq!(c.cmd("SET d 1 EXAT 1"), ok());
    assert_eq!(c.cmd("GET d"), Frame::Null);
    let future_s = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() + 100)
        .to_string();
    assert_eq!(c.send(&["SET", "e", "1", "EXAT", &future_s]), ok());
    std::thread::sleep(std::time::Duration::from_millis(120));
    assert_eq!(c.cmd("GET a"), Frame::Null);
    assert_eq!(c.cmd("GET p"), Frame::Null);
    assert_eq!(c.cmd("GET b"), bulk("v"));
    assert_eq!(c.cmd("GET e"), bulk("1"));
    assert_eq!(c.cmd("SETEX b 0 v"), err("ERR invalid expire time in 'setex' command"));
    assert_eq!(c.cmd("PSETEX b -1 v"), err("ERR invalid expire time in 'psetex' command"));
    assert_eq!(c.cmd("SETEX b x v"), err("ERR value is not an integer or out of range"));
    // KEEPTTL keeps it, a plain SET drops it. (A short TTL here would race
    // with the durable replies: a key already expired when KEEPTTL runs is
    // absent, and the SET then makes it anew without one, as in Redis.)
    assert_eq!(c.cmd("SET k v PX 100000"), ok());
    assert_eq!(c.cmd("SET k w KEEPTTL"), ok());
    let Frame::Integer(ttl) = c.cmd("PTTL k") else { panic!("PTTL") };
    assert!(ttl > 0 && ttl <= 100_000, "KEEPTTL kept {ttl} ms");
    assert_eq!(c.cmd("GET k"), bulk("w"));
    assert_eq!(c.cmd("SET k w"), ok());
    assert_eq!(c.cmd("PTTL k"), Frame::Integer(-1));
}

#[test]
fn setnx_getset_getdel_getex() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("SETNX novar foobared"), int(1));
    assert_eq!(c.cmd("SETNX novar blabla"), int(0));
    assert_eq!(c.cmd("GET novar"), bulk("foobared"));
    assert_eq!(c.cmd("GETSET foo xyz"), Frame::Null);
    assert_eq!(c.cmd("GETSET foo bar"), bulk("xyz"));
    assert_eq!(c.cmd("GETDEL foo"), bulk("bar"));
    assert_eq!(c.cmd("GETDEL foo"), Frame::Null);
    assert_eq!(c.cmd("SET foo bar"), ok());
    assert_eq!(c.cmd("GETEX foo"), bulk("bar"));
    assert_eq!(c.cmd("GETEX foo PX 60"), bulk("bar"));
    assert_eq!(c.cmd("GETEX foo PERSIST"), bulk("bar"));
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(c.cmd("GET foo"), bulk("bar"));
    assert_eq!(c.cmd("GETEX foo PX 50"), bulk("bar"));
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(c.cmd("GET foo"), Frame::Null);
    assert_eq!(c.cmd("SET foo bar"), ok());
    assert_eq!(c.cmd("GETEX foo PXAT 1"), bulk("bar"));
    assert_eq!(c.cmd("GET foo"), Frame::Null);
    assert_eq!(c.cmd("GETEX foo non-existing-option"), err("ERR syntax error"));
    assert_eq!(c.cmd("GETEX foo EX 1 PERSIST"), err("ERR syntax error"));
    // The expiry is validated only once the key is found.
    assert_eq!(c.cmd("GETEX missing EX 0"), Frame::Null);
    assert_eq!(c.cmd("SET foo bar"), ok());
    assert_eq!(c.cmd("GETEX foo EX 0"), err("ERR invalid expire time in 'getex' command"));
    assert_eq!(c.cmd("GETEX foo EX x"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("GETEX"), err("ERR wrong number of arguments for 'getex' command"));
}

#[test]
fn mget_mset_msetnx_across_shards() {
    let (_s, mut c) = keel();
    // Plain keys hash to different shards; the dispatcher locks them all.
    assert_eq!(c.cmd("MSET a 1 b 2 c 3 d 4"), ok());
    assert_eq!(c.cmd("MGET a b nokey c d"), array(vec![bulk("1"), bulk("2"), Frame::Null, bulk("3"), bulk("4")]));
    assert_eq!(c.cmd("MSET a 1 b"), err("ERR wrong number of arguments for 'mset' command"));
    assert_eq!(c.cmd("MSETNX x 1 y 2 z"), err("ERR wrong number of arguments for 'msetnx' command"));
    assert_eq!(c.cmd("MSETNX x1 xxx y2 yyy a 20"), int(0));
    assert_eq!(c.cmd("EXISTS x1 y2"), int(0));
    assert_eq!(c.cmd("MSETNX x1 xxx y2 yyy"), int(1));
    assert_eq!(c.cmd("MGET x1 y2"), array(vec![bulk("xxx"), bulk("yyy")]));
    assert_eq!(c.cmd("MSETNX q1 xxx q1 yyy"), int(1));
    assert_eq!(c.cmd("GET q1"), bulk("yyy"));
    assert_eq!(c.cmd("MSETNX q1 zzz q1 www"), int(0));
    assert_eq!(c.cmd("MSET"), err("ERR wrong number of arguments for 'mset' command"));
}

#[test]
fn append_strlen_ranges() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("APPEND s hello"), int(5));
    assert_eq!(c.cmd("APPEND s _world"), int(11));
    assert_eq!(c.cmd("GET s"), bulk("hello_world"));
    assert_eq!(c.cmd("STRLEN s"), int(11));
    assert_eq!(c.cmd("STRLEN nokey"), int(0));
    assert_eq!(c.cmd("SET n -555"), ok());
    assert_eq!(c.cmd("STRLEN n"), int(4));
    assert_eq!(c.cmd("APPEND n 1"), int(5));
    assert_eq!(c.cmd("GET n"), bulk("-5551"));

    assert_eq!(c.cmd("SET mykey Hello"), ok());
    assert_eq!(c.send(&["SET", "mykey", "Hello World"]), ok());
    assert_eq!(c.cmd("GETRANGE mykey 0 3"), bulk("Hell"));
    assert_eq!(c.cmd("GETRANGE mykey 0 -1"), bulk("Hello World"));
    assert_eq!(c.cmd("GETRANGE mykey -4 -1"), bulk("orld"));
    assert_eq!(c.cmd("GETRANGE mykey 5 3"), bulk(""));
    assert_eq!(c.cmd("GETRANGE mykey 5 5000"), bulk(" World"));
    assert_eq!(c.cmd("GETRANGE mykey -5000 10000"), bulk("Hello World"));
    assert_eq!(c.cmd("GETRANGE mykey 0 4294967297"), bulk("Hello World"));
    assert_eq!(c.cmd("SUBSTR mykey 0 3"), bulk("Hell"));
    assert_eq!(c.cmd("GETRANGE nokey 0 -1"), bulk(""));
    assert_eq!(c.cmd("GETRANGE mykey a 1"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("SET i 1234"), ok());
    assert_eq!(c.cmd("GETRANGE i -3 -1"), bulk("234"));

    assert_eq!(c.cmd("SETRANGE r 1 foo"), int(4));
    assert_eq!(c.cmd("GET r"), bulk("\0foo"));
    assert_eq!(c.send(&["SETRANGE", "r2", "0", ""]), int(0));
    assert_eq!(c.cmd("EXISTS r2"), int(0));
    assert_eq!(c.cmd("SET r foo"), ok());
    assert_eq!(c.cmd("SETRANGE r 4 bar"), int(7));
    assert_eq!(c.cmd("GET r"), bulk("foo\0bar"));
    assert_eq!(c.send(&["SETRANGE", "r", "1", ""]), int(7));
    assert_eq!(c.cmd("SETRANGE r -1 x"), err("ERR offset is out of range"));
    let too_far = (512 * 1024 * 1024 - 4).to_string();
    let exceeds = err("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
    assert_eq!(c.send(&["SETRANGE", "r", &too_far, "world"]), exceeds);
    assert_eq!(c.send(&["SETRANGE", "new", &too_far, "world"]), exceeds);
    assert_eq!(c.cmd("SETRANGE K 9223372036854775807 A"), exceeds);
}

#[test]
fn incr_family() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("INCR novar"), int(1));
    assert_eq!(c.cmd("INCR novar"), int(2));
    assert_eq!(c.cmd("SET novar 17179869184"), ok());
    assert_eq!(c.cmd("INCRBY novar 17179869184"), int(34359738368));
    assert_eq!(c.cmd("DECRBY novar 34359738369"), int(-1));
    assert_eq!(c.cmd("DECR novar"), int(-2));
    for bad in ["    11", "11    ", "1.5", "abc", "01"] {
        assert_eq!(c.send(&["SET", "novar", bad]), ok());
        assert_eq!(c.cmd("INCR novar"), err("ERR value is not an integer or out of range"));
    }
    assert_eq!(c.cmd("SET x 0"), ok());
    assert_eq!(c.cmd("DECRBY x -9223372036854775808"), err("ERR decrement would overflow"));
    assert_eq!(c.cmd("SET x 9223372036854775807"), ok());
    assert_eq!(c.cmd("INCR x"), err("ERR increment or decrement would overflow"));
    assert_eq!(c.cmd("INCRBY x abc"), err("ERR value is not an integer or out of range"));
    // The TTL survives an increment.
    assert_eq!(c.cmd("SET t 1 PX 80"), ok());
    assert_eq!(c.cmd("INCR t"), int(2));
    std::thread::sleep(std::time::Duration::from_millis(120));
    assert_eq!(c.cmd("GET t"), Frame::Null);
}

#[test]
fn incrbyfloat_formats_like_long_double() {
    let (_s, mut c) = keel();
    let cases: &[(&str, &str, &str)] = &[
        ("10.5", "0.1", "10.6"),
        ("3.0e3", "0", "3000"),
        ("5.0e3", "0", "5000"),
        ("1", "-1.1", "-0.1"),
        ("0.1", "0.2", "0.3"),
        ("17179869184", "1.5", "17179869185.5"),
        ("17179869184", "17179869184", "34359738368"),
        ("1.5", "1.5", "3"),
        ("0x10", "1", "17"),
    ];
    for (start, by, want) in cases {
        assert_eq!(c.send(&["SET", "f", start]), ok());
        assert_eq!(c.send(&["INCRBYFLOAT", "f", by]), bulk(want), "{start} + {by}");
        assert_eq!(c.cmd("GET f"), bulk(want));
    }
    assert_eq!(c.cmd("INCRBYFLOAT new 1"), bulk("1"));
    assert_eq!(c.cmd("INCRBYFLOAT new 0.25"), bulk("1.25"));
    // Redis's "No negative zero" test: x + (-x) prints 0, not -0.
    let tiny = format!("{}", 1.0f64 / 41.0);
    assert!(matches!(c.send(&["INCRBYFLOAT", "z", &tiny]), Frame::Bulk(_)));
    assert_eq!(c.send(&["INCRBYFLOAT", "z", &format!("-{tiny}")]), bulk("0"));
    assert_eq!(c.cmd("SET foo 0"), ok());
    assert_eq!(c.cmd("INCRBYFLOAT foo +inf"), err("ERR increment would produce NaN or Infinity"));
    // Beyond f64's range but within long double's: 4933 digits.
    match c.cmd("INCRBYFLOAT foo 1.1e4932") {
        Frame::Bulk(digits) => assert_eq!(digits.len(), 4933),
        other => panic!("expected a bulk, got {other:?}"),
    }
    assert_eq!(c.cmd("INCRBYFLOAT foo 1.1e4932"), err("ERR increment would produce NaN or Infinity"));
    assert_eq!(c.cmd("INCRBYFLOAT foo abc"), err("ERR value is not a valid float"));
    for bad in ["    11", "11    ", " 11 ", "nan"] {
        assert_eq!(c.send(&["SET", "novar", bad]), ok());
        assert_eq!(c.cmd("INCRBYFLOAT novar 1.0"), err("ERR value is not a valid float"));
    }
    assert_eq!(c.cmd("SET foo 1"), ok());
    assert_eq!(c.cmd("SETRANGE foo 2 2"), int(3));
    assert_eq!(c.cmd("INCRBYFLOAT foo 1"), err("ERR value is not a valid float"));
}

#[test]
fn incrbyfloat_matches_redis_on_many_values() {
    let values = [
        "0",
        "1",
        "-1",
        "0.1",
        "-0.1",
        "10.5",
        "3.0e3",
        "5.0e3",
        "1e300",
        "-1e-300",
        "123456789.123456789",
        "1e17",
        "1e18",
        "9223372036854775807",
        "-9223372036854775808",
        "0.000000000000000001",
        "2.5",
        "0.5e-17",
        "1.5e-17",
        "3.14159265358979323846",
        "1e4000",
        "-7.77e77",
        "0x1p-2",
        "1.",
        ".5",
        "+3",
        "99.99999999999999999999",
    ];
    let mut lines = Vec::new();
    for a in values {
        for b in values {
            lines.push(vec!["SET".to_string(), "f".into(), a.into()]);
            lines.push(vec!["INCRBYFLOAT".to_string(), "f".into(), b.into()]);
            lines.push(vec!["INCRBYFLOAT".to_string(), "f".into(), b.into()]);
        }
    }
    same_as_redis(&lines);
}

#[test]
fn wrong_type_errors() {
    // Needs a second type: skipped until Keel has lists.
    let (_s, mut c) = keel();
    if matches!(c.cmd("RPUSH probe a"), Frame::Error(_)) {
        eprintln!("RPUSH not available yet: skipping");
        return;
    }
    same_as_redis(&script(&[
        "RPUSH list a",
        "GET list",
        "SET list x GET",
        "GETSET list x",
        "GETDEL list",
        "GETEX list",
        "APPEND list x",
        "STRLEN list",
        "INCR list",
        "INCRBYFLOAT list 1",
        "GETRANGE list 0 1",
        "SETRANGE list 0 x",
        "MGET list nokey",
        "LCS list nokey",
        "SET list x",
        "GET list",
    ]));
}

#[test]
fn lcs() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("MSET {t}a ohmytext {t}b mynewtext"), ok());
    assert_eq!(c.cmd("LCS {t}a {t}b"), bulk("mytext"));
    assert_eq!(c.cmd("LCS {t}a {t}b LEN"), int(6));
    let range = |a: i64, b: i64| array(vec![int(a), int(b)]);
    let matches =
        array(vec![array(vec![range(4, 7), range(5, 8), int(4)]), array(vec![range(2, 3), range(0, 1), int(2)])]);
    assert_eq!(c.cmd("LCS {t}a {t}b IDX WITHMATCHLEN"), array(vec![bulk("matches"), matches, bulk("len"), int(6)]));
    assert_eq!(
        c.cmd("LCS {t}a {t}b IDX MINMATCHLEN 4"),
        array(vec![bulk("matches"), array(vec![array(vec![range(4, 7), range(5, 8)])]), bulk("len"), int(6)])
    );
    assert_eq!(
        c.cmd("LCS {t}a {t}b LEN IDX"),
        err("ERR If you want both the length and indexes, please just use IDX.")
    );
    assert_eq!(c.cmd("LCS {t}a {t}b FOO"), err("ERR syntax error"));
    assert_eq!(c.cmd("LCS {t}a {t}b MINMATCHLEN"), err("ERR syntax error"));
    assert_eq!(c.cmd("LCS {t}a {t}none"), bulk(""));

    // The RNA example of Redis's own test suite.
    let rna1 = "CACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTTCGTCCGGGTGTG";
    let rna2 = "ATTAAAGGTTTATACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTT";
    assert_eq!(c.send(&["MSET", "v1{t}", rna1, "v2{t}", rna2]), ok());
    assert_eq!(c.cmd("LCS v1{t} v2{t} LEN"), int(227));
    let got = c.cmd("LCS v1{t} v2{t} IDX WITHMATCHLEN MINMATCHLEN 5");
    assert_eq!(
        got,
        array(vec![
            bulk("matches"),
            array(vec![array(vec![range(1, 222), range(13, 234), int(222)])]),
            bulk("len"),
            int(227)
        ])
    );
    // RESP3: a map.
    assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
    match c.cmd("LCS {t}a {t}b IDX") {
        Frame::Map(pairs) => assert_eq!(pairs.len(), 2),
        other => panic!("expected a map, got {other:?}"),
    }
    assert_eq!(c.cmd("GET nokey"), Frame::Null);
}

#[test]
fn scripted_against_redis() {
    same_as_redis(&script(&[
        "SET a 1",
        "SET a 2 GET",
        "SET a 3 NX GET",
        "SET a 3 XX GET EX 100",
        "SET a 3 KEEPTTL GET",
        "SET a 3 KEEPTTL EX 1",
        "SET a 3 PX 100 EX 1",
        "SET a 3 EX 1 EX 2",
        "SET a 3 GET GET",
        "SET a 3 EXAT 0",
        "SET a 3 EX 1.5",
        "SET a",
        "GETEX a PERSIST PERSIST",
        "GETEX a EX 10 EX 20",
        "GETEX a EX 10 PX 20",
        "GETEX a KEEPTTL",
        "GETEX a PXAT 99999999999999",
        "GETEX a PXAT abc",
        "GETDEL a",
        "GETDEL a",
        "APPEND a 123",
        "INCR a",
        "INCRBY a -200",
        "DECRBY a 9223372036854775807",
        "DECRBY a 9223372036854775807",
        "INCRBYFLOAT a 1e3",
        "INCR a",
        "INCRBYFLOAT a abc",
        "INCRBYFLOAT a inf",
        "INCRBYFLOAT a -inf",
        "INCRBYFLOAT a 0x1p3",
        "SETRANGE a 0 xyz",
        "SETRANGE a 10 xyz",
        "SETRANGE a abc xyz",
        "GETRANGE a -100 -50",
        "GETRANGE a -1 -100",
        "GETRANGE a 3 2",
        "GETRANGE a 9223372036854775807 -9223372036854775808",
        "SUBSTR a 1 3",
        "STRLEN a",
        "MSET k1 v1 k2 v2 k3 v3",
        "MGET k1 k2 k3 k4",
        "MSETNX k1 a k9 b",
        "MSETNX k8 a k9 b",
        "MGET k8 k9",
        "SETNX k8 z",
        "SETNX k7 z",
        "GETSET k7 w",
        "SETEX k7 abc v",
        "PSETEX k7 0 v",
        "LCS k1 k2",
        "LCS k1 k2 LEN",
        "LCS k1 k2 IDX",
        "LCS k1 k2 IDX WITHMATCHLEN MINMATCHLEN -5",
        "LCS k1 k2 MINMATCHLEN x",
    ]));
}

#[test]
fn encodings_match_redis() {
    // OBJECT ENCODING after each kind of write: SET-like commands pick
    // int/embstr/raw, in-place mutations leave raw, INCR stores int,
    // INCRBYFLOAT stores text.
    same_as_redis(&script(&[
        "SET a 123",
        "OBJECT ENCODING a",
        "SET a 0123",
        "OBJECT ENCODING a",
        "SET a aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "OBJECT ENCODING a",
        "APPEND a x",
        "OBJECT ENCODING a",
        "APPEND n 12",
        "OBJECT ENCODING n",
        "APPEND n 3",
        "OBJECT ENCODING n",
        "INCR n",
        "OBJECT ENCODING n",
        "INCRBYFLOAT n 1",
        "OBJECT ENCODING n",
        "INCRBYFLOAT n 0.5",
        "OBJECT ENCODING n",
        "SETRANGE n 0 9",
        "OBJECT ENCODING n",
        "SET m 5",
        "SETBIT m 0 0",
        "OBJECT ENCODING m",
        "SET b 7",
        "GETBIT b 1",
        "BITFIELD b GET u8 0",
        "OBJECT ENCODING b",
        "BITFIELD b SET u8 0 55",
        "OBJECT ENCODING b",
        "BITOP NOT c b",
        "OBJECT ENCODING c",
        "MSET x 1 y hello",
        "OBJECT ENCODING x",
        "OBJECT ENCODING y",
        "GETSET x 99999999999999999999",
        "OBJECT ENCODING x",
        "SETRANGE new 0 12",
        "OBJECT ENCODING new",
        "SETEX e 100 12",
        "OBJECT ENCODING e",
    ]));
}

#[test]
fn resp3_replies_match_redis() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&[]);
    let (mut r, mut k) = (redis.client(), keel.client());
    assert!(matches!(r.cmd("HELLO 3"), Frame::Map(_)));
    assert!(matches!(k.cmd("HELLO 3"), Frame::Map(_)));
    for line in [
        "GET nokey",
        "MGET nokey a",
        "SET a 1 NX",
        "SET a 1 NX",
        "SET a 2 XX GET",
        "SET b 2 XX GET",
        "GETEX nokey",
        "GETDEL nokey",
        "GETSET nokey 1",
        "INCRBYFLOAT f 1.5",
        "MSET {t}1 ohmytext {t}2 mynewtext",
        "LCS {t}1 {t}2",
        "LCS {t}1 {t}2 IDX WITHMATCHLEN",
        "LCS {t}1 {t}2 LEN",
        "BITFIELD bf OVERFLOW FAIL INCRBY u2 0 5 GET u2 0",
        "BITFIELD_RO bf GET i3 0",
        "BITPOS nokey 0",
        "BITCOUNT nokey",
        "GETRANGE nokey 0 -1",
    ] {
        let (want, got) = (r.cmd(line), k.cmd(line));
        assert_eq!(want, got, "RESP3 reply differs for {line}");
    }
}
