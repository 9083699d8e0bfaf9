//! Black-box tests of the set commands over a real socket: replies and
//! error texts, encodings and their conversions, WRONGTYPE, removal of
//! emptied keys, RESP3 shapes, the random commands by their properties,
//! and what the journal brings back after a restart.

mod common;

use std::collections::{BTreeSet, HashMap};

use common::{bulk, err, int, ok, temp_dir, Client, Frame, Server};

fn keel() -> (Server, Client) {
    let server = Server::start(&[]);
    let client = server.client();
    (server, client)
}

fn text(frame: &Frame) -> String {
    match frame {
        Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("not a bulk string: {other:?}"),
    }
}

/// The members of an array or set reply, as strings, in reply order.
fn items(frame: Frame) -> Vec<String> {
    match frame {
        Frame::Array(items) | Frame::Set(items) => items.iter().map(text).collect(),
        other => panic!("not an array: {other:?}"),
    }
}

fn sorted(frame: Frame) -> Vec<String> {
    let mut v = items(frame);
    v.sort();
    v
}

fn strs(words: &str) -> Vec<String> {
    let mut v: Vec<String> = words.split_whitespace().map(String::from).collect();
    v.sort();
    v
}

fn encoding(c: &mut Client, key: &str) -> Frame {
    c.send(&["OBJECT", "ENCODING", key])
}

/// SADDs `members` to `key` in one command.
fn sadd(c: &mut Client, key: &str, members: impl IntoIterator<Item = String>) -> Frame {
    let mut argv = vec!["SADD".to_string(), key.to_string()];
    argv.extend(members);
    c.send(&argv)
}

#[test]
fn basics_in_both_encodings() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("SADD ints 17 16 16 -3"), int(3));
    assert_eq!(encoding(&mut c, "ints"), bulk("intset"));
    assert_eq!(c.cmd("SADD ints 16"), int(0));
    assert_eq!(c.cmd("SCARD ints"), int(3));
    assert_eq!(c.cmd("SISMEMBER ints 16"), int(1));
    assert_eq!(c.cmd("SISMEMBER ints 18"), int(0));
    assert_eq!(c.cmd("SISMEMBER ints abc"), int(0));
    assert_eq!(c.cmd("SMISMEMBER ints 16 18 -3"), Frame::Array(vec![int(1), int(0), int(1)]));
    // An intset answers in ascending order, as Redis's does.
    assert_eq!(items(c.cmd("SMEMBERS ints")), ["-3", "16", "17"]);

    assert_eq!(c.cmd("SADD strs foo bar"), int(2));
    assert_eq!(encoding(&mut c, "strs"), bulk("hashtable"));
    assert_eq!(c.cmd("SISMEMBER strs foo"), int(1));
    assert_eq!(c.cmd("SMISMEMBER strs bla foo"), Frame::Array(vec![int(0), int(1)]));
    assert_eq!(sorted(c.cmd("SMEMBERS strs")), ["bar", "foo"]);
    assert_eq!(c.send(&["SADD", "strs", ""]), int(1));
    assert_eq!(c.send(&["SISMEMBER", "strs", ""]), int(1));

    assert_eq!(c.cmd("SCARD nokey"), int(0));
    assert_eq!(c.cmd("SISMEMBER nokey a"), int(0));
    assert_eq!(c.cmd("SMISMEMBER nokey a b"), Frame::Array(vec![int(0), int(0)]));
    assert_eq!(c.cmd("SMEMBERS nokey"), Frame::Array(vec![]));
    assert_eq!(c.cmd("TYPE ints"), Frame::Simple(b"set".to_vec()));
}

#[test]
fn encodings_convert_one_way_at_redis_thresholds() {
    let (_s, mut c) = keel();
    // A string member converts at once.
    assert_eq!(c.cmd("SADD s 1 2 3"), int(3));
    assert_eq!(c.cmd("SADD s a"), int(1));
    assert_eq!(encoding(&mut c, "s"), bulk("hashtable"));
    // ... and removing it does not convert back.
    assert_eq!(c.cmd("SREM s a"), int(1));
    assert_eq!(encoding(&mut c, "s"), bulk("hashtable"));
    assert_eq!(c.cmd("SISMEMBER s 2"), int(1));

    // Integers past 64 bits and non-canonical forms are strings.
    for member in ["213244124402402314402033402", "01", "+1", "-0", "1.5", " 1"] {
        c.cmd("DEL t");
        assert_eq!(c.send(&["SADD", "t", member]), int(1));
        assert_eq!(encoding(&mut c, "t"), bulk("hashtable"), "{member}");
        assert_eq!(c.send(&["SISMEMBER", "t", member]), int(1));
    }
    // The extremes of i64 stay in the intset.
    assert_eq!(c.cmd("SADD wide -9223372036854775808 9223372036854775807 0"), int(3));
    assert_eq!(encoding(&mut c, "wide"), bulk("intset"));
    assert_eq!(items(c.cmd("SMEMBERS wide")), ["-9223372036854775808", "0", "9223372036854775807"]);

    // set-max-intset-entries: 512 by default.
    assert_eq!(sadd(&mut c, "big", (0..512).map(|i| i.to_string())), int(512));
    assert_eq!(encoding(&mut c, "big"), bulk("intset"));
    assert_eq!(c.cmd("SADD big 512"), int(1));
    assert_eq!(encoding(&mut c, "big"), bulk("hashtable"));
    assert_eq!(c.cmd("SCARD big"), int(513));

    assert_eq!(c.cmd("CONFIG SET set-max-intset-entries 3"), ok());
    assert_eq!(c.cmd("SADD small 1 2 3"), int(3));
    assert_eq!(encoding(&mut c, "small"), bulk("intset"));
    assert_eq!(c.cmd("SADD small 4"), int(1));
    assert_eq!(encoding(&mut c, "small"), bulk("hashtable"));
    assert_eq!(c.cmd("SADD many 1 2 3 4"), int(4));
    assert_eq!(encoding(&mut c, "many"), bulk("hashtable"));
    assert_eq!(c.cmd("CONFIG SET set-max-intset-entries 0"), ok());
    assert_eq!(c.cmd("SADD zero 1"), int(1));
    assert_eq!(encoding(&mut c, "zero"), bulk("hashtable"));
}

#[test]
fn srem_removes_and_deletes_emptied_keys() {
    let (_s, mut c) = keel();
    c.cmd("SADD s a b c d");
    assert_eq!(c.cmd("SREM s k k k"), int(0));
    assert_eq!(c.cmd("SREM s b d x y"), int(2));
    assert_eq!(sorted(c.cmd("SMEMBERS s")), ["a", "c"]);
    assert_eq!(c.cmd("SREM nokey a"), int(0));
    c.cmd("SADD i 1 2 3");
    assert_eq!(c.cmd("SREM i 1 2 3 4 5 6 7 8"), int(3));
    assert_eq!(c.cmd("EXISTS i"), int(0));
    assert_eq!(c.cmd("SREM s a c"), int(2));
    assert_eq!(c.cmd("EXISTS s"), int(0));
}

#[test]
fn every_command_refuses_other_types() {
    let (_s, mut c) = keel();
    c.cmd("SET str x");
    c.cmd("SADD set a");
    let wrongtype = err("WRONGTYPE Operation against a key holding the wrong kind of value");
    for line in [
        "SADD str a",
        "SREM str a",
        "SMEMBERS str",
        "SISMEMBER str a",
        "SMISMEMBER str a",
        "SCARD str",
        "SPOP str",
        "SPOP str 0",
        "SRANDMEMBER str",
        "SRANDMEMBER str 0",
        "SMOVE str set a",
        "SMOVE set str a",
        "SINTER set str",
        "SINTER str nokey",
        "SINTERCARD 2 set str",
        "SINTERCARD 2 str nokey",
        "SINTERSTORE d set str",
        "SUNION set str",
        "SUNIONSTORE d set str",
        "SDIFF set str",
        "SDIFF nokey str",
        "SDIFFSTORE d set str",
        "SSCAN str 0",
    ] {
        assert_eq!(c.cmd(line), wrongtype, "{line}");
    }
    // A missing source answers 0 before the destination's type is checked.
    assert_eq!(c.cmd("SMOVE nokey str a"), int(0));
    // Nothing changed.
    assert_eq!(c.cmd("GET str"), bulk("x"));
    assert_eq!(c.cmd("EXISTS d"), int(0));
}

#[test]
fn argument_errors_match_redis() {
    let (_s, mut c) = keel();
    c.cmd("SADD s a b c");
    let cases = [
        ("SADD s", "ERR wrong number of arguments for 'sadd' command"),
        ("SMISMEMBER s", "ERR wrong number of arguments for 'smismember' command"),
        ("SINTERCARD", "ERR wrong number of arguments for 'sintercard' command"),
        ("SINTERCARD 1", "ERR wrong number of arguments for 'sintercard' command"),
        ("SPOP s -1", "ERR value is out of range, must be positive"),
        ("SPOP s abc", "ERR value is out of range, must be positive"),
        ("SPOP nokey -1", "ERR value is out of range, must be positive"),
        ("SPOP s 1 2", "ERR syntax error"),
        ("SRANDMEMBER s abc", "ERR value is not an integer or out of range"),
        ("SRANDMEMBER s 9223372036854775808", "ERR value is not an integer or out of range"),
        (
            "SRANDMEMBER s -9223372036854775808",
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        ),
        ("SRANDMEMBER s 1 2", "ERR syntax error"),
        ("SINTERCARD 0 s", "ERR numkeys should be greater than 0"),
        ("SINTERCARD a s", "ERR numkeys should be greater than 0"),
        ("SINTERCARD -1 s", "ERR numkeys should be greater than 0"),
        ("SINTERCARD 2 s", "ERR Number of keys can't be greater than number of args"),
        ("SINTERCARD 1 s s2", "ERR syntax error"),
        ("SINTERCARD 1 s LIMIT", "ERR syntax error"),
        ("SINTERCARD 1 s LIMIT -1", "ERR LIMIT can't be negative"),
        ("SINTERCARD 1 s LIMIT a", "ERR LIMIT can't be negative"),
        ("SSCAN s abc", "ERR invalid cursor"),
        ("SSCAN nokey abc", "ERR invalid cursor"),
        ("SSCAN s 0 COUNT 0", "ERR syntax error"),
        ("SSCAN s 0 COUNT abc", "ERR value is not an integer or out of range"),
        ("SSCAN s 0 MATCH", "ERR syntax error"),
        ("SSCAN s 0 FOO bar", "ERR syntax error"),
    ];
    for (line, error) in cases {
        assert_eq!(c.cmd(line), err(error), "{line}");
    }
    // A missing key answers before SSCAN's options are read, as in Redis.
    assert_eq!(c.cmd("SSCAN nokey 0 COUNT 0"), Frame::Array(vec![bulk("0"), Frame::Array(vec![])]));
}

#[test]
fn spop_returns_what_it_removes() {
    let (_s, mut c) = keel();
    for (key, members) in [("ints", (1..=26).map(|i| i.to_string()).collect::<Vec<_>>()), ("strs", {
        ('a'..='z').map(|ch| ch.to_string()).collect()
    })] {
        assert_eq!(sadd(&mut c, key, members.clone()), int(26));
        let mut popped = Vec::new();
        popped.push(text(&c.send(&["SPOP", key])));
        for count in ["11", "9", "0", "1", "0", "1"] {
            let got = items(c.send(&["SPOP", key, count]));
            assert_eq!(got.len(), count.parse::<usize>().expect("count"));
            popped.extend(got);
        }
        assert_eq!(c.send(&["SCARD", key]), int(3));
        // The rest: the whole set, and the key goes.
        popped.extend(items(c.send(&["SPOP", key, "100"])));
        assert_eq!(c.send(&["EXISTS", key]), int(0));
        let distinct: BTreeSet<&String> = popped.iter().collect();
        assert_eq!(distinct.len(), 26, "popped twice: {popped:?}");
        assert_eq!(distinct, members.iter().collect());
    }
    assert_eq!(c.cmd("SPOP nokey"), Frame::Null);
    assert_eq!(c.cmd("SPOP nokey 3"), Frame::Array(vec![]));
    c.cmd("SADD one x");
    assert_eq!(c.cmd("SPOP one 0"), Frame::Array(vec![]));
    assert_eq!(c.cmd("SPOP one"), bulk("x"));
    assert_eq!(c.cmd("EXISTS one"), int(0));

    // Both of Redis's code paths (few taken, most taken) on an intset.
    for count in [2, 18] {
        let all: Vec<String> = (1..=20).map(|i| i.to_string()).collect();
        sadd(&mut c, "p", all.clone());
        let taken = items(c.send(&["SPOP", "p", &count.to_string()]));
        assert_eq!(taken.len(), count);
        let mut union = taken;
        union.extend(items(c.cmd("SMEMBERS p")));
        union.sort_by_key(|s| s.parse::<i64>().expect("integer member"));
        assert_eq!(union, all);
        assert_eq!(encoding(&mut c, "p"), bulk("intset"));
        c.cmd("DEL p");
    }
}

#[test]
fn srandmember_counts() {
    let (_s, mut c) = keel();
    let members: Vec<String> = (0..50).map(|i| i.to_string()).collect();
    sadd(&mut c, "ints", members.clone());
    let mut strs: Vec<String> = members.iter().map(|m| format!("m{m}")).collect();
    sadd(&mut c, "strs", strs.clone());
    strs.sort();
    for (key, all) in [("ints", &members), ("strs", &strs)] {
        let all: BTreeSet<&String> = all.iter().collect();
        assert_eq!(c.send(&["SRANDMEMBER", key, "0"]), Frame::Array(vec![]));
        // Negative: repetitions allowed, exactly that many.
        let got = items(c.send(&["SRANDMEMBER", key, "-100"]));
        assert_eq!(got.len(), 100);
        assert!(got.iter().all(|m| all.contains(m)));
        // At least the size: the whole set.
        for n in ["50", "100"] {
            let got: BTreeSet<String> = items(c.send(&["SRANDMEMBER", key, n])).into_iter().collect();
            assert_eq!(got.iter().collect::<BTreeSet<_>>(), all);
        }
        // Fewer: distinct members (both of Redis's paths: near the size, and small).
        for n in [45, 5, 1] {
            let got = items(c.send(&["SRANDMEMBER", key, &n.to_string()]));
            assert_eq!(got.len(), n);
            let distinct: BTreeSet<&String> = got.iter().collect();
            assert_eq!(distinct.len(), n);
            assert!(got.iter().all(|m| all.contains(m)));
        }
        assert!(all.contains(&text(&c.send(&["SRANDMEMBER", key]))));
        // Every member comes up eventually.
        let mut seen = BTreeSet::new();
        for _ in 0..1000 {
            seen.extend(items(c.send(&["SRANDMEMBER", key, "-10"])));
            if seen.len() == 50 {
                break;
            }
        }
        assert_eq!(seen.len(), 50);
    }
    assert_eq!(c.cmd("SRANDMEMBER nokey"), Frame::Null);
    assert_eq!(c.cmd("SRANDMEMBER nokey 5"), Frame::Array(vec![]));
    assert_eq!(c.cmd("SRANDMEMBER nokey -5"), Frame::Array(vec![]));
}

/// A chi-square check that draws are uniform (df = 9; 40 is p = 0.00001,
/// the bound Redis's own test uses).
#[test]
fn srandmember_is_uniform() {
    let (_s, mut c) = keel();
    c.cmd("SADD ints 0 1 2 3 4 5 6 7 8 9");
    c.cmd("SADD strs 1 5 10 50 125 MARY PATRICIA LINDA BARBARA ELIZABETH");
    for key in ["ints", "strs"] {
        let chi = |draws: &[String]| {
            let mut hist: HashMap<&String, f64> = HashMap::new();
            draws.iter().for_each(|d| *hist.entry(d).or_default() += 1.0);
            let expected = draws.len() as f64 / 10.0;
            assert_eq!(hist.len(), 10);
            hist.values().map(|n| (n - expected).powi(2) / expected).sum::<f64>()
        };
        assert!(chi(&items(c.send(&["SRANDMEMBER", key, "-1000"]))) < 40.0);
        for n in [8, 2] {
            let mut draws = Vec::new();
            for _ in 0..1000 / n {
                draws.extend(items(c.send(&["SRANDMEMBER", key, &n.to_string()])));
            }
            assert!(chi(&draws) < 40.0, "{key} {n}");
        }
    }
}

#[test]
fn smove_moves_and_converts() {
    let (_s, mut c) = keel();
    let setup = |c: &mut Client| {
        c.cmd("DEL {t}1 {t}2 {t}3 src dst");
        c.cmd("SADD {t}1 1 a b");
        c.cmd("SADD {t}2 2 3 4");
    };
    setup(&mut c);
    assert_eq!(c.cmd("SMOVE {t}1 {t}2 a"), int(1));
    assert_eq!(sorted(c.cmd("SMEMBERS {t}1")), ["1", "b"]);
    assert_eq!(sorted(c.cmd("SMEMBERS {t}2")), ["2", "3", "4", "a"]);
    assert_eq!(encoding(&mut c, "{t}2"), bulk("hashtable"));
    setup(&mut c);
    assert_eq!(c.cmd("SMOVE {t}1 {t}2 1"), int(1));
    assert_eq!(encoding(&mut c, "{t}2"), bulk("intset"));
    assert_eq!(items(c.cmd("SMEMBERS {t}2")), ["1", "2", "3", "4"]);
    setup(&mut c);
    assert_eq!(c.cmd("SMOVE {t}1 {t}2 foo"), int(0));
    assert_eq!(c.cmd("SMOVE {t}1 {t}1 foo"), int(0));
    assert_eq!(c.cmd("SMOVE {t}1 {t}1 a"), int(1));
    assert_eq!(sorted(c.cmd("SMEMBERS {t}1")), ["1", "a", "b"]);
    assert_eq!(c.cmd("SMOVE nokey {t}2 foo"), int(0));
    // To a new destination: its encoding follows the member.
    assert_eq!(c.cmd("SMOVE {t}1 {t}3 a"), int(1));
    assert_eq!(encoding(&mut c, "{t}3"), bulk("hashtable"));
    c.cmd("DEL {t}3");
    assert_eq!(c.cmd("SMOVE {t}2 {t}3 2"), int(1));
    assert_eq!(encoding(&mut c, "{t}3"), bulk("intset"));
    // Across shards, and the emptied source goes.
    c.cmd("SADD src only");
    c.cmd("SADD dst x");
    assert_eq!(c.cmd("SMOVE src dst only"), int(1));
    assert_eq!(c.cmd("EXISTS src"), int(0));
    assert_eq!(sorted(c.cmd("SMEMBERS dst")), ["only", "x"]);
}

#[test]
fn smove_touches_the_destination_only_when_it_adds() {
    let server = Server::start(&[]);
    let (mut c, mut other) = (server.client(), server.client());
    c.cmd("SADD {t}src a b");
    c.cmd("SADD {t}dst a");
    assert_eq!(c.cmd("WATCH {t}dst"), ok());
    assert_eq!(c.cmd("MULTI"), ok());
    c.cmd("SCARD {t}dst");
    assert_eq!(other.cmd("SMOVE {t}src {t}dst a"), int(1));
    assert_eq!(c.cmd("EXEC"), Frame::Array(vec![int(1)]));
    // A real addition aborts a watcher.
    assert_eq!(c.cmd("WATCH {t}dst"), ok());
    assert_eq!(c.cmd("MULTI"), ok());
    c.cmd("SCARD {t}dst");
    assert_eq!(other.cmd("SMOVE {t}src {t}dst b"), int(1));
    assert_eq!(c.cmd("EXEC"), Frame::Null);
}

/// Sets spread over shards (no hash tags) for the algebra.
fn algebra_sets(c: &mut Client, large: &str) {
    c.cmd("FLUSHALL");
    sadd(c, "set1", (0..200).map(|i| i.to_string()).chain([large.to_string()]));
    sadd(c, "set2", (195..395).map(|i| i.to_string()).chain([large.to_string()]));
    sadd(c, "set3", ["199", "195", "1000", "2000", large].map(String::from));
    sadd(c, "set4", (5..200).map(|i| i.to_string()).chain([large.to_string()]));
    sadd(c, "set5", ["0", large].map(String::from));
}

#[test]
fn algebra_in_both_encodings() {
    let (_s, mut c) = keel();
    for (kind, large) in [("hashtable", "foo"), ("intset", "200")] {
        algebra_sets(&mut c, large);
        for k in ["set1", "set2", "set3", "set4", "set5"] {
            assert_eq!(encoding(&mut c, k), bulk(kind), "{k}");
        }
        let expect = |words: &str| strs(&format!("{words} {large}"));
        assert_eq!(sorted(c.cmd("SINTER set1 set2")), expect("195 196 197 198 199"));
        assert_eq!(c.cmd("SINTERCARD 2 set1 set2"), int(6));
        assert_eq!(c.cmd("SINTERCARD 2 set1 set2 LIMIT 0"), int(6));
        assert_eq!(c.cmd("SINTERCARD 2 set1 set2 LIMIT 3"), int(3));
        assert_eq!(c.cmd("SINTERCARD 2 set1 set2 LIMIT 10"), int(6));
        assert_eq!(c.cmd("SINTERSTORE setres set1 set2"), int(6));
        assert_eq!(encoding(&mut c, "setres"), bulk(kind));
        assert_eq!(sorted(c.cmd("SMEMBERS setres")), expect("195 196 197 198 199"));
        let union: BTreeSet<String> = (0..395).map(|i| i.to_string()).chain([large.to_string()]).collect();
        let union: Vec<String> = union.into_iter().collect();
        assert_eq!(sorted(c.cmd("SUNION set1 set2")), union);
        assert_eq!(c.cmd("SUNIONSTORE setres set1 set2"), int(union.len() as i64));
        assert_eq!(encoding(&mut c, "setres"), bulk(kind));
        assert_eq!(sorted(c.cmd("SMEMBERS setres")), union);
        assert_eq!(sorted(c.cmd("SINTER set1 set2 set3")), expect("195 199"));
        assert_eq!(c.cmd("SINTERCARD 3 set1 set2 set3"), int(3));
        assert_eq!(c.cmd("SINTERSTORE setres set1 set2 set3"), int(3));
        assert_eq!(sorted(c.cmd("SMEMBERS setres")), expect("195 199"));
        assert_eq!(sorted(c.cmd("SUNION set1 set2 nokey")), union);
        assert_eq!(sorted(c.cmd("SDIFF set1 set4")), strs("0 1 2 3 4"));
        assert_eq!(sorted(c.cmd("SDIFF set1 set4 set5")), strs("1 2 3 4"));
        assert_eq!(c.cmd("SDIFFSTORE setres set1 set4 set5"), int(4));
        assert_eq!(encoding(&mut c, "setres"), bulk("intset"));
        assert_eq!(items(c.cmd("SMEMBERS setres")), ["1", "2", "3", "4"]);
        // A big first set and small ones to subtract: Redis's other algorithm.
        let mut want: Vec<String> = (1..199).filter(|&i| i != 195).map(|i| i.to_string()).collect();
        want.sort();
        assert_eq!(sorted(c.cmd("SDIFF set1 set5 set3 set5")), want);
        for op in ["SINTER", "SUNION"] {
            assert_eq!(sorted(c.send(&[op, "set1", "set1", "set1"])), sorted(c.cmd("SMEMBERS set1")));
        }
        assert_eq!(c.cmd("SDIFF set1 set1 set1"), Frame::Array(vec![]));
    }
    // Past set-max-intset-entries, a union of intsets is a table.
    assert_eq!(c.cmd("CONFIG SET set-max-intset-entries 300"), ok());
    assert_eq!(c.cmd("SUNIONSTORE setres set1 set2"), int(395));
    assert_eq!(encoding(&mut c, "setres"), bulk("hashtable"));
    assert_eq!(c.cmd("SINTERSTORE setres set1 set4"), int(196));
    assert_eq!(encoding(&mut c, "setres"), bulk("intset"));
}

#[test]
fn algebra_edge_cases() {
    let (_s, mut c) = keel();
    c.cmd("SADD a 1 2 3 x");
    c.cmd("SADD b 2 3");
    assert_eq!(c.cmd("SDIFF nokey a"), Frame::Array(vec![]));
    assert_eq!(sorted(c.cmd("SDIFF a nokey")), strs("1 2 3 x"));
    assert_eq!(c.cmd("SINTER a nokey"), Frame::Array(vec![]));
    assert_eq!(c.cmd("SINTERCARD 1 nokey LIMIT 10"), int(0));
    // Integers meet across encodings.
    assert_eq!(sorted(c.cmd("SINTER a b")), strs("2 3"));
    assert_eq!(sorted(c.cmd("SDIFF a b")), strs("1 x"));
    // Integer results come sorted, as Redis replies from an intset.
    c.cmd("SADD c 30 -5 100 7");
    assert_eq!(items(c.cmd("SUNION c b")), ["-5", "2", "3", "7", "30", "100"]);
    assert_eq!(items(c.cmd("SDIFF c b")), ["-5", "7", "30", "100"]);

    // Empty results delete the destination; stores drop its TTL.
    c.cmd("SET dst xxx");
    assert_eq!(c.cmd("SINTERSTORE dst a nokey"), int(0));
    assert_eq!(c.cmd("EXISTS dst"), int(0));
    c.cmd("SET dst xxx");
    assert_eq!(c.cmd("SUNIONSTORE dst nokey1 nokey2"), int(0));
    assert_eq!(c.cmd("EXISTS dst"), int(0));
    c.cmd("SET dst xxx");
    assert_eq!(c.cmd("SDIFFSTORE dst b a"), int(0));
    assert_eq!(c.cmd("EXISTS dst"), int(0));
    c.cmd("SET dst xxx EX 1000");
    assert_eq!(c.cmd("SUNIONSTORE dst b"), int(2));
    assert_eq!(c.cmd("TTL dst"), int(-1));
    assert_eq!(c.cmd("TYPE dst"), Frame::Simple(b"set".to_vec()));
    // The destination may be a source.
    assert_eq!(c.cmd("SUNIONSTORE b b a"), int(4));
    assert_eq!(c.cmd("SINTERSTORE b b c"), int(0));
    assert_eq!(c.cmd("EXISTS b"), int(0));
}

#[test]
fn sscan_walks_every_member() {
    let (_s, mut c) = keel();
    sadd(&mut c, "ints", (0..100).map(|i| i.to_string()));
    // An intset comes whole, cursor 0, whatever COUNT says.
    let reply = c.cmd("SSCAN ints 0 COUNT 1");
    let Frame::Array(parts) = reply else { panic!() };
    assert_eq!(parts[0], bulk("0"));
    assert_eq!(items(parts[1].clone()).len(), 100);
    let Frame::Array(parts) = c.cmd("SSCAN ints 0 MATCH 1*") else { panic!() };
    assert_eq!(sorted(parts[1].clone()), strs("1 10 11 12 13 14 15 16 17 18 19"));

    let all: BTreeSet<String> = (0..1000).map(|i| format!("m{i}")).collect();
    sadd(&mut c, "strs", all.iter().cloned());
    for (options, want) in [
        (vec![], all.clone()),
        (vec!["COUNT", "7"], all.clone()),
        (vec!["MATCH", "m1*", "COUNT", "100"], all.iter().filter(|m| m.starts_with("m1")).cloned().collect()),
    ] {
        let mut seen = BTreeSet::new();
        let mut cursor = "0".to_string();
        let mut calls = 0;
        loop {
            let mut argv = vec!["SSCAN", "strs", &cursor];
            argv.extend(options.iter().copied());
            let Frame::Array(parts) = c.send(&argv) else { panic!() };
            seen.extend(items(parts[1].clone()));
            cursor = text(&parts[0]);
            calls += 1;
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(seen, want, "{options:?}");
        assert!(calls > 1);
    }
}

#[test]
fn resp3_shapes() {
    let (_s, mut c) = keel();
    assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
    c.cmd("SADD s 1 2 3");
    c.cmd("SADD t a");
    let set = |v: &[&str]| Frame::Set(v.iter().map(|s| bulk(s)).collect());
    assert_eq!(c.cmd("SMEMBERS s"), set(&["1", "2", "3"]));
    assert_eq!(c.cmd("SMEMBERS nokey"), Frame::Set(vec![]));
    assert_eq!(c.cmd("SINTER s nokey"), Frame::Set(vec![]));
    assert_eq!(c.cmd("SUNION s nokey"), set(&["1", "2", "3"]));
    assert_eq!(c.cmd("SDIFF s nokey"), set(&["1", "2", "3"]));
    assert_eq!(c.cmd("SPOP nokey"), Frame::Null);
    assert_eq!(c.cmd("SPOP nokey 2"), Frame::Set(vec![]));
    assert_eq!(c.cmd("SPOP s 0"), Frame::Set(vec![]));
    assert!(matches!(c.cmd("SPOP s 2"), Frame::Set(v) if v.len() == 2));
    assert!(matches!(c.cmd("SPOP t 5"), Frame::Set(v) if v == vec![bulk("a")]));
    assert!(matches!(c.cmd("SRANDMEMBER s 2"), Frame::Array(v) if v.len() == 1));
    assert_eq!(c.cmd("SRANDMEMBER nokey 2"), Frame::Array(vec![]));
    assert_eq!(c.cmd("SRANDMEMBER nokey"), Frame::Null);
    c.cmd("SADD m 1 2");
    assert_eq!(c.cmd("SMISMEMBER m 1 5"), Frame::Array(vec![int(1), int(0)]));
    assert!(matches!(c.cmd("SSCAN s 0"), Frame::Array(v) if v.len() == 2 && matches!(&v[1], Frame::Array(_))));
    assert_eq!(c.cmd("SISMEMBER nokey a"), int(0));
}

#[test]
fn keyspace_hits_count_reads_only() {
    let (_s, mut c) = keel();
    let stats = |c: &mut Client| {
        let info = text(&c.cmd("INFO stats"));
        let get = |name: &str| -> i64 {
            info.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse().ok()).expect("INFO field")
        };
        (get("keyspace_hits:"), get("keyspace_misses:"))
    };
    c.cmd("SADD s a");
    c.cmd("SADD s2 a");
    let (h0, m0) = stats(&mut c);
    c.cmd("SINTER s nokey s2");
    c.cmd("SUNIONSTORE d s nokey");
    c.cmd("SMOVE s s2 a");
    c.cmd("SPOP s2");
    assert_eq!(stats(&mut c), (h0 + 3, m0 + 2));
}

/// The incremental AOF file of a server directory.
fn incr_aof(dir: &std::path::Path) -> Vec<u8> {
    let path = std::fs::read_dir(dir.join("appendonlydir"))
        .expect("aof dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("incr file");
    std::fs::read(path).expect("read incr")
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn sets_survive_a_restart_and_spop_is_journaled_as_redis_does() {
    let dir = temp_dir("sets");
    let before;
    {
        let server = Server::start_in(&dir, &[]);
        let mut c = server.client();
        sadd(&mut c, "ints", (0..20).map(|i| i.to_string()));
        sadd(&mut c, "strs", (0..20).map(|i| format!("s{i}")));
        c.cmd("SADD whole a b c");
        let one = text(&c.cmd("SPOP ints"));
        assert_eq!(items(c.cmd("SPOP ints 3")).len(), 3);
        assert_eq!(items(c.cmd("SPOP strs 15")).len(), 15);
        assert_eq!(items(c.cmd("SPOP whole 10")).len(), 3);
        c.cmd("SMOVE strs moved s0");
        c.cmd("SMOVE strs moved s1");
        c.cmd("SINTERSTORE inter ints ints");
        c.cmd("SUNIONSTORE union ints strs");
        c.cmd("SDIFFSTORE diff ints inter");
        c.cmd("SREM ints 19");
        before = ["ints", "strs", "moved", "inter", "union", "diff"]
            .map(|k| (sorted(c.send(&["SMEMBERS", k])), encoding(&mut c, k)));
        let aof = incr_aof(&dir);
        assert!(contains(&aof, &format!("*3\r\n$4\r\nSREM\r\n$4\r\nints\r\n${}\r\n{one}\r\n", one.len())));
        assert!(contains(&aof, "MULTI"), "SPOP with a count logs SREMs in MULTI/EXEC");
        assert!(contains(&aof, "*2\r\n$3\r\nDEL\r\n$5\r\nwhole\r\n"));
        assert!(!contains(&aof, "SPOP") && !contains(&aof, "spop"));
    }
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    let after = ["ints", "strs", "moved", "inter", "union", "diff"]
        .map(|k| (sorted(c.send(&["SMEMBERS", k])), encoding(&mut c, k)));
    assert_eq!(before, after);
    assert_eq!(c.cmd("EXISTS whole"), int(0));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Freeing a big collection goes to the lazy-free thread (UNLINK, and DEL
/// under lazyfree-lazy-user-del) while a small one is freed inline.
#[test]
fn big_collections_are_freed_off_the_serving_path() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let freed = |c: &mut Client| -> u64 {
        let field = |c: &mut Client, name: &str| c.info_field("memory", name).parse::<u64>().expect(name);
        field(c, "lazyfreed_objects") + field(c, "lazyfree_pending_objects")
    };
    // The background thread counts an object once it has freed it: wait
    // for the count (freeing 20k members takes a moment).
    let wait_freed = |c: &mut Client, n: u64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while freed(c) < n {
            assert!(std::time::Instant::now() < deadline, "never freed {n} objects in the background");
            std::thread::yield_now();
        }
    };
    for key in ["big1", "big2"] {
        let members: Vec<String> = (0..20_000).map(|i| format!("m{i}")).collect();
        let mut argv = vec!["SADD", key];
        argv.extend(members.iter().map(String::as_str));
        assert_eq!(c.send(&argv), int(20_000));
    }
    c.cmd("SADD small a b c");
    let before = freed(&mut c);
    assert_eq!(c.cmd("UNLINK small"), int(1));
    assert_eq!(freed(&mut c), before);
    assert_eq!(c.cmd("UNLINK big1"), int(1));
    wait_freed(&mut c, before + 1);
    assert_eq!(c.cmd("CONFIG SET lazyfree-lazy-user-del yes"), Frame::Simple(b"OK".to_vec()));
    assert_eq!(c.cmd("DEL big2"), int(1));
    wait_freed(&mut c, before + 2);
    // CONFIG RESETSTAT starts the count afresh, as Redis's
    // lazyfreeResetStats (unit/lazyfree resets between its tests).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while c.info_field("memory", "lazyfree_pending_objects") != "0" {
        assert!(std::time::Instant::now() < deadline, "the background frees never ended");
        std::thread::yield_now();
    }
    assert_ne!(c.info_field("memory", "lazyfreed_objects"), "0");
    assert_eq!(c.cmd("CONFIG RESETSTAT"), Frame::Simple(b"OK".to_vec()));
    assert_eq!(c.info_field("memory", "lazyfreed_objects"), "0");
}
