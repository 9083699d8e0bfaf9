//! Black-box tests of the sorted-set commands over real sockets: exact
//! replies and error texts, RESP3 shapes, the listpack/skiplist encodings
//! and their conversion, empty keys going away, the random commands (by
//! their properties), ZSCAN, WATCH, and the journal bringing sets back
//! after a restart.

mod common;

use std::collections::{BTreeMap, HashSet};

use common::{bulk, err, int, ok, temp_dir, Client, Frame, Server};

fn keel() -> (Server, Client) {
    let server = Server::start(&[]);
    let client = server.client();
    (server, client)
}

fn array(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

fn bulks(items: &[&str]) -> Frame {
    array(items.iter().map(|s| bulk(s)).collect())
}

fn double(s: &str) -> Frame {
    Frame::Double(s.as_bytes().to_vec())
}

fn pair3(member: &str, score: &str) -> Frame {
    array(vec![bulk(member), double(score)])
}

fn items(frame: Frame) -> Vec<Frame> {
    match frame {
        Frame::Array(items) | Frame::Set(items) => items,
        other => panic!("not an array: {other:?}"),
    }
}

fn text(frame: &Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Double(b) | Frame::Simple(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("not a string: {other:?}"),
    }
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
fn scores_are_formatted_as_redis_does() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("ZADD z 1.5 a 0.1 b 1e20 c inf d -inf e 3 f 0x10 g"), int(7));
    assert_eq!(
        c.cmd("ZRANGE z 0 -1 WITHSCORES"),
        bulks(&["e", "-inf", "b", "0.10000000000000001", "a", "1.5", "f", "3", "g", "16", "c", "1e+20", "d", "inf"])
    );
    assert_eq!(c.cmd("ZSCORE z b"), bulk("0.10000000000000001"));
    assert_eq!(c.cmd("ZSCORE z nope"), Frame::Null);
    assert_eq!(c.cmd("ZSCORE nokey a"), Frame::Null);
    assert_eq!(c.cmd("ZINCRBY z 0.2 b"), bulk("0.30000000000000004"));
    assert_eq!(c.cmd("ZADD z +inf h"), int(1));
    assert_eq!(c.cmd("ZSCORE z h"), bulk("inf"));
    assert_eq!(c.cmd("ZMSCORE z a nope h"), array(vec![bulk("1.5"), Frame::Null, bulk("inf")]));
    assert_eq!(c.cmd("ZMSCORE nokey a b"), array(vec![Frame::Null, Frame::Null]));
}

#[test]
fn zadd_options_and_errors() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("ZADD z XX 1 a"), int(0));
    assert_eq!(c.cmd("EXISTS z"), int(0));
    assert_eq!(c.cmd("ZADD z XX INCR 1 a"), Frame::Null);
    assert_eq!(c.cmd("ZADD z NX 1 a 2 b"), int(2));
    assert_eq!(c.cmd("ZADD z NX 5 a 3 c"), int(1));
    assert_eq!(c.cmd("ZSCORE z a"), bulk("1"));
    assert_eq!(c.cmd("ZADD z CH 10 a 2 b 4 d"), int(2));
    assert_eq!(c.cmd("ZADD z GT CH 5 a 20 b"), int(1));
    assert_eq!(c.cmd("ZADD z LT CH 50 a 1 b 7 e"), int(2));
    assert_eq!(c.cmd("ZADD z GT INCR -1 a"), Frame::Null);
    assert_eq!(c.cmd("ZADD z INCR 0 a"), bulk("10"));
    assert_eq!(c.cmd("ZADD z XX CH GT INCR 5 a"), bulk("15"));
    assert_eq!(c.cmd("ZADD z XX NX 1 a"), err("ERR XX and NX options at the same time are not compatible"));
    for bad in ["ZADD z GT NX 1 a", "ZADD z LT NX 1 a", "ZADD z GT LT 1 a"] {
        assert_eq!(c.cmd(bad), err("ERR GT, LT, and/or NX options at the same time are not compatible"), "{bad}");
    }
    assert_eq!(c.cmd("ZADD z INCR 1 a 2 b"), err("ERR INCR option supports a single increment-element pair"));
    assert_eq!(c.cmd("ZADD z 1 a 2"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZADD z NX"), err("ERR wrong number of arguments for 'zadd' command"));
    assert_eq!(c.cmd("ZADD z CH NX"), err("ERR syntax error"));
    // Every score is checked before anything is added.
    assert_eq!(c.cmd("ZADD z 1 x abc y"), err("ERR value is not a valid float"));
    assert_eq!(c.cmd("ZSCORE z x"), Frame::Null);
    for bad in ["nan", "1e400", "1e-400", "1x", "0x"] {
        assert_eq!(c.send(&["ZADD", "z", bad, "x"]), err("ERR value is not a valid float"), "{bad}");
    }
    for bad in ["", " 1", "\t1"] {
        assert_eq!(c.send(&["ZADD", "z", bad, "x"]), err("ERR value is not a valid float"), "{bad:?}");
    }
    assert_eq!(c.cmd("ZADD z +inf inf"), int(1));
    assert_eq!(c.cmd("ZINCRBY z -inf inf"), err("ERR resulting score is not a number (NaN)"));
    assert_eq!(c.cmd("ZADD z INCR -inf inf"), err("ERR resulting score is not a number (NaN)"));
    assert_eq!(c.cmd("ZSCORE z inf"), bulk("inf"));
    assert_eq!(c.cmd("ZINCRBY newkey 2.5 m"), bulk("2.5"));
    assert_eq!(c.cmd("ZINCRBY newkey abc m"), err("ERR value is not a valid float"));
    assert_eq!(c.cmd("ZINCRBY z 1 a b"), err("ERR wrong number of arguments for 'zincrby' command"));
}

#[test]
fn every_command_checks_the_type() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("SET s v"), ok());
    c.cmd("ZADD z 1 a");
    let commands = [
        "ZADD s 1 a",
        "ZINCRBY s 1 a",
        "ZREM s a",
        "ZSCORE s a",
        "ZMSCORE s a",
        "ZCARD s",
        "ZCOUNT s 0 1",
        "ZLEXCOUNT s - +",
        "ZRANGE s 0 -1",
        "ZRANGESTORE d s 0 -1",
        "ZRANGEBYSCORE s 0 1",
        "ZREVRANGEBYSCORE s 1 0",
        "ZRANGEBYLEX s - +",
        "ZREVRANGEBYLEX s + -",
        "ZREVRANGE s 0 -1",
        "ZRANK s a",
        "ZREVRANK s a",
        "ZREMRANGEBYRANK s 0 1",
        "ZREMRANGEBYSCORE s 0 1",
        "ZREMRANGEBYLEX s - +",
        "ZPOPMIN s",
        "ZPOPMAX s 0",
        "ZMPOP 2 nokey s MIN",
        "ZRANDMEMBER s",
        "ZRANDMEMBER s 2",
        "ZUNION 2 z s",
        "ZINTER 2 z s",
        "ZDIFF 2 z s",
        "ZUNIONSTORE d 2 z s",
        "ZINTERSTORE d 2 z s",
        "ZDIFFSTORE d 2 z s",
        "ZINTERCARD 2 z s",
        "ZSCAN s 0",
    ];
    for command in commands {
        assert_eq!(c.cmd(command), err(WRONGTYPE), "{command}");
    }
    // Nothing was created on the way.
    assert_eq!(c.cmd("EXISTS d"), int(0));
}

#[test]
fn ranges_by_rank_score_and_lex() {
    let (_s, mut c) = keel();
    for entries in ["128", "0"] {
        assert_eq!(c.send(&["CONFIG", "SET", "zset-max-listpack-entries", entries]), ok());
        c.cmd("DEL z l");
        c.cmd("ZADD z 1 a 2 b 3 c 4 d 5 e");
        let want = if entries == "0" { "skiplist" } else { "listpack" };
        assert_eq!(c.cmd("OBJECT ENCODING z"), bulk(want));
        assert_eq!(c.cmd("ZRANGE z 1 -2"), bulks(&["b", "c", "d"]));
        assert_eq!(c.cmd("ZRANGE z -100 100"), bulks(&["a", "b", "c", "d", "e"]));
        assert_eq!(c.cmd("ZRANGE z 3 1"), bulks(&[]));
        assert_eq!(c.cmd("ZRANGE z 0 0 REV WITHSCORES"), bulks(&["e", "5"]));
        assert_eq!(c.cmd("ZREVRANGE z 0 1 WITHSCORES"), bulks(&["e", "5", "d", "4"]));
        assert_eq!(c.cmd("ZRANGE z (1 3 BYSCORE"), bulks(&["b", "c"]));
        assert_eq!(c.cmd("ZRANGE z 4 (1 BYSCORE REV"), bulks(&["d", "c", "b"]));
        assert_eq!(c.cmd("ZRANGE z -inf +inf BYSCORE LIMIT 1 2"), bulks(&["b", "c"]));
        assert_eq!(c.cmd("ZRANGE z +inf -inf BYSCORE REV LIMIT 1 2 WITHSCORES"), bulks(&["d", "4", "c", "3"]));
        assert_eq!(c.cmd("ZRANGEBYSCORE z 2 +inf LIMIT 1 -1"), bulks(&["c", "d", "e"]));
        assert_eq!(c.cmd("ZRANGEBYSCORE z 2 +inf LIMIT -1 10"), bulks(&[]));
        assert_eq!(c.cmd("ZRANGEBYSCORE z 2 +inf LIMIT 5 10"), bulks(&[]));
        assert_eq!(c.cmd("ZREVRANGEBYSCORE z (5 2 WITHSCORES LIMIT 0 2"), bulks(&["d", "4", "c", "3"]));
        assert_eq!(c.cmd("ZCOUNT z (1 (5"), int(3));
        assert_eq!(c.cmd("ZCOUNT z 3 1"), int(0));
        assert_eq!(c.cmd("ZCOUNT nokey 0 1"), int(0));
        assert_eq!(c.cmd("ZRANK z c"), int(2));
        assert_eq!(c.cmd("ZREVRANK z c"), int(2));
        assert_eq!(c.cmd("ZREVRANK z a"), int(4));
        assert_eq!(c.cmd("ZRANK z nope"), Frame::Null);
        assert_eq!(c.cmd("ZRANK nokey a"), Frame::Null);
        c.cmd("ZADD l 0 alpha 0 beta 0 gamma 0 delta 0 epsilon");
        assert_eq!(c.cmd("ZRANGEBYLEX l - +"), bulks(&["alpha", "beta", "delta", "epsilon", "gamma"]));
        assert_eq!(c.cmd("ZRANGEBYLEX l [beta (epsilon"), bulks(&["beta", "delta"]));
        assert_eq!(c.cmd("ZREVRANGEBYLEX l (gamma [beta LIMIT 1 2"), bulks(&["delta", "beta"]));
        assert_eq!(c.cmd("ZRANGE l [b + BYLEX LIMIT 1 1"), bulks(&["delta"]));
        assert_eq!(c.cmd("ZLEXCOUNT l (alpha +"), int(4));
        assert_eq!(c.cmd("ZLEXCOUNT l + -"), int(0));
        assert_eq!(c.cmd("ZLEXCOUNT nokey - +"), int(0));
    }
}

#[test]
fn range_argument_errors() {
    let (_s, mut c) = keel();
    c.cmd("ZADD z 1 a 2 b");
    let float = err("ERR min or max is not a float");
    let lex = err("ERR min or max not valid string range item");
    assert_eq!(c.cmd("ZRANGEBYSCORE z a 1"), float);
    assert_eq!(c.cmd("ZCOUNT z 1 (x"), float);
    assert_eq!(c.cmd("ZREMRANGEBYSCORE z nan 1"), float);
    assert_eq!(c.cmd("ZRANGE z 1 x BYSCORE"), float);
    // Bounds are read with strtod: empty is 0, spaces lead, hex works.
    assert_eq!(c.send(&["ZRANGEBYSCORE", "z", "", "( 2"]), bulks(&["a"]));
    assert_eq!(c.send(&["ZCOUNT", "z", " 1", "0x2"]), int(2));
    assert_eq!(c.cmd("ZCOUNT z ( +inf"), int(2));
    assert_eq!(c.cmd("ZRANGEBYLEX z a +"), lex);
    assert_eq!(c.cmd("ZLEXCOUNT z - +a"), lex);
    assert_eq!(c.cmd("ZREMRANGEBYLEX z [a b"), lex);
    assert_eq!(c.send(&["ZRANGEBYLEX", "z", "", "+"]), lex);
    assert_eq!(
        c.cmd("ZRANGE z - + BYLEX WITHSCORES"),
        err("ERR syntax error, WITHSCORES not supported in combination with BYLEX")
    );
    assert_eq!(
        c.cmd("ZRANGE z 0 1 LIMIT 0 1"),
        err("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
    );
    assert_eq!(c.cmd("ZRANGE z 0 1 LIMIT 0 -1"), bulks(&["a", "b"]));
    assert_eq!(c.cmd("ZRANGE z 0 1 BYSCORE BYSCORE"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZRANGE z 0 1 REV REV"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZREVRANGE z 0 1 REV"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZRANGEBYSCORE z 0 1 BYLEX"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZRANGE z 0 1 LIMIT 0"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZRANGE z 0 1 LIMIT x 1 BYSCORE"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("ZRANGE z a 1"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("ZRANGESTORE d z 0 1 WITHSCORES"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZREMRANGEBYRANK z 0 x"), err("ERR value is not an integer or out of range"));
}

#[test]
fn encodings_convert_one_way_at_the_limits() {
    let (_s, mut c) = keel();
    c.cmd("CONFIG SET zset-max-listpack-entries 4");
    c.cmd("CONFIG SET zset-max-listpack-value 8");
    c.cmd("ZADD z 1 a 2 b 3 c 4 d");
    assert_eq!(c.cmd("OBJECT ENCODING z"), bulk("listpack"));
    // Updating existing members never converts.
    c.cmd("ZADD z 10 a 20 b");
    assert_eq!(c.cmd("OBJECT ENCODING z"), bulk("listpack"));
    c.cmd("ZADD z 5 e");
    assert_eq!(c.cmd("OBJECT ENCODING z"), bulk("skiplist"));
    c.cmd("ZREM z a b c");
    assert_eq!(c.cmd("OBJECT ENCODING z"), bulk("skiplist"));
    assert_eq!(c.cmd("ZRANGE z 0 -1 WITHSCORES"), bulks(&["d", "4", "e", "5"]));
    // A long member converts; a new key with one starts as a skiplist.
    c.cmd("ZADD y 1 a");
    c.cmd("ZADD y 2 abcdefghi");
    assert_eq!(c.cmd("OBJECT ENCODING y"), bulk("skiplist"));
    c.cmd("ZADD x 1 abcdefghi");
    assert_eq!(c.cmd("OBJECT ENCODING x"), bulk("skiplist"));
    // STORE results take the encoding their size calls for.
    c.cmd("ZADD big 1 a 2 b 3 c 4 d 5 e 6 f");
    assert_eq!(c.cmd("ZUNIONSTORE u 2 big z"), int(6));
    assert_eq!(c.cmd("OBJECT ENCODING u"), bulk("skiplist"));
    assert_eq!(c.cmd("ZINTERSTORE i 2 big z"), int(2));
    assert_eq!(c.cmd("OBJECT ENCODING i"), bulk("listpack"));
    assert_eq!(c.cmd("ZRANGESTORE r big 0 3"), int(4));
    assert_eq!(c.cmd("OBJECT ENCODING r"), bulk("listpack"));
    assert_eq!(c.cmd("ZRANGESTORE r big 0 4"), int(5));
    assert_eq!(c.cmd("OBJECT ENCODING r"), bulk("skiplist"));
    c.cmd("CONFIG SET zset-max-listpack-entries 0");
    c.cmd("ZADD w 1 a");
    assert_eq!(c.cmd("OBJECT ENCODING w"), bulk("skiplist"));
    assert_eq!(c.cmd("ZRANGESTORE r2 w 0 -1"), int(1));
    assert_eq!(c.cmd("OBJECT ENCODING r2"), bulk("skiplist"));
}

#[test]
fn emptied_sets_are_deleted() {
    let (_s, mut c) = keel();
    for entries in ["128", "0"] {
        c.send(&["CONFIG", "SET", "zset-max-listpack-entries", entries]);
        let script: [(&str, Frame); 6] = [
            ("ZREM z a b c d", int(3)),
            ("ZPOPMIN z 10", bulks(&["a", "1", "b", "2", "c", "3"])),
            ("ZREMRANGEBYSCORE z -inf +inf", int(3)),
            ("ZREMRANGEBYRANK z 0 -1", int(3)),
            ("ZREMRANGEBYLEX z - +", int(3)),
            (
                "ZMPOP 1 z MAX COUNT 5",
                array(vec![bulk("z"), array(vec![bulks(&["c", "3"]), bulks(&["b", "2"]), bulks(&["a", "1"])])]),
            ),
        ];
        for (command, reply) in script {
            c.cmd("ZADD z 1 a 2 b 3 c");
            assert_eq!(c.cmd(command), reply, "{command}");
            assert_eq!(c.cmd("EXISTS z"), int(0), "{command} with entries {entries}");
        }
        // Storing an empty result deletes the destination.
        c.cmd("SET d v");
        assert_eq!(c.cmd("ZUNIONSTORE d 1 nokey"), int(0));
        assert_eq!(c.cmd("EXISTS d"), int(0));
        c.cmd("SET d v");
        assert_eq!(c.cmd("ZRANGESTORE d nokey 0 -1"), int(0));
        assert_eq!(c.cmd("EXISTS d"), int(0));
    }
}

#[test]
fn pops() {
    let (_s, mut c) = keel();
    c.cmd("ZADD z 1 a 2 b 3 c 4 d");
    assert_eq!(c.cmd("ZPOPMIN z"), bulks(&["a", "1"]));
    assert_eq!(c.cmd("ZPOPMAX z 2"), bulks(&["d", "4", "c", "3"]));
    assert_eq!(c.cmd("ZPOPMIN z 0"), bulks(&[]));
    assert_eq!(c.cmd("ZPOPMIN nokey"), bulks(&[]));
    assert_eq!(c.cmd("ZPOPMIN z -1"), err("ERR value is out of range, must be positive"));
    assert_eq!(c.cmd("ZPOPMIN z x"), err("ERR value is out of range, must be positive"));
    assert_eq!(c.cmd("ZPOPMIN z 1 2"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZMPOP 2 nokey z MIN"), array(vec![bulk("z"), array(vec![bulks(&["b", "2"])])]));
    assert_eq!(c.cmd("ZMPOP 1 z MIN"), Frame::Null);
    assert_eq!(c.cmd("ZMPOP 0 z MIN"), err("ERR numkeys should be greater than 0"));
    assert_eq!(c.cmd("ZMPOP x z MIN"), err("ERR numkeys should be greater than 0"));
    assert_eq!(c.cmd("ZMPOP 1 z MIN COUNT 0"), err("ERR count should be greater than 0"));
    assert_eq!(c.cmd("ZMPOP 1 z MIN COUNT 1 COUNT 1"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZMPOP 2 z MIN"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZMPOP 1 z LEFT"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZMPOP 1 z MAX COUNT"), err("ERR syntax error"));
}

#[test]
fn resp3_shapes() {
    let (_s, mut c) = keel();
    assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
    c.cmd("ZADD z 1 a 2.5 b 3 c");
    assert_eq!(c.cmd("ZSCORE z b"), double("2.5"));
    assert_eq!(c.cmd("ZSCORE z x"), Frame::Null);
    assert_eq!(c.cmd("ZINCRBY z 1 a"), double("2"));
    assert_eq!(c.cmd("ZADD z XX INCR 1 x"), Frame::Null);
    assert_eq!(c.cmd("ZMSCORE z a x"), array(vec![double("2"), Frame::Null]));
    assert_eq!(c.cmd("ZRANGE z 0 1 WITHSCORES"), array(vec![pair3("a", "2"), pair3("b", "2.5")]));
    assert_eq!(c.cmd("ZRANGE z 0 1"), bulks(&["a", "b"]));
    assert_eq!(c.cmd("ZUNION 1 z WITHSCORES"), array(vec![pair3("a", "2"), pair3("b", "2.5"), pair3("c", "3")]));
    let nested_pairs = |frame: Frame, n: usize| {
        matches!(&frame, Frame::Array(v) if v.len() == n
            && v.iter().all(|p| matches!(p, Frame::Array(p) if p.len() == 2 && matches!(p[1], Frame::Double(_)))))
    };
    assert!(nested_pairs(c.cmd("ZRANDMEMBER z 1 WITHSCORES"), 1));
    assert!(nested_pairs(c.cmd("ZRANDMEMBER z -5 WITHSCORES"), 5));
    assert!(nested_pairs(c.cmd("ZRANDMEMBER z 2 WITHSCORES"), 2));
    assert!(matches!(c.cmd("ZRANDMEMBER z 2"), Frame::Array(v) if v.len() == 2 && matches!(v[0], Frame::Bulk(_))));
    // ZPOP without a count is flat, with one nested; ZMPOP always nested.
    assert_eq!(c.cmd("ZPOPMIN z"), array(vec![bulk("a"), double("2")]));
    assert_eq!(c.cmd("ZPOPMAX z 1"), array(vec![pair3("c", "3")]));
    assert_eq!(c.cmd("ZMPOP 1 z MIN"), array(vec![bulk("z"), array(vec![pair3("b", "2.5")])]));
    assert_eq!(c.cmd("ZMPOP 1 z MIN"), Frame::Null);
    assert_eq!(c.cmd("ZRANDMEMBER z"), Frame::Null);
    c.cmd("ZADD z inf a -inf b");
    assert_eq!(c.cmd("ZRANGE z 0 -1 WITHSCORES"), array(vec![pair3("b", "-inf"), pair3("a", "inf")]));
    // ZSCAN answers strings, as in RESP2.
    assert_eq!(c.cmd("ZSCAN z 0"), array(vec![bulk("0"), bulks(&["b", "-inf", "a", "inf"])]));
}

#[test]
fn algebra() {
    let (_s, mut c) = keel();
    c.cmd("ZADD a 1 x 2 y 3 z");
    c.cmd("ZADD b 10 y 20 z 30 w");
    assert_eq!(c.cmd("ZUNION 2 a b WITHSCORES"), bulks(&["x", "1", "y", "12", "z", "23", "w", "30"]));
    assert_eq!(c.cmd("ZUNION 2 a b WEIGHTS 2 -1 WITHSCORES"), bulks(&["w", "-30", "z", "-14", "y", "-6", "x", "2"]));
    assert_eq!(c.cmd("ZINTER 2 a b AGGREGATE MAX WITHSCORES"), bulks(&["y", "10", "z", "20"]));
    assert_eq!(c.cmd("ZINTER 2 a b AGGREGATE MIN"), bulks(&["y", "z"]));
    assert_eq!(c.cmd("ZDIFF 2 a b WITHSCORES"), bulks(&["x", "1"]));
    assert_eq!(c.cmd("ZDIFF 2 a a"), bulks(&[]));
    assert_eq!(c.cmd("ZINTERCARD 2 a b"), int(2));
    assert_eq!(c.cmd("ZINTERCARD 2 a b LIMIT 1"), int(1));
    assert_eq!(c.cmd("ZINTERCARD 2 a b LIMIT 0"), int(2));
    assert_eq!(c.cmd("ZINTERCARD 2 a b LIMIT -1"), err("ERR LIMIT can't be negative"));
    assert_eq!(c.cmd("ZUNIONSTORE d 2 a b AGGREGATE MIN"), int(4));
    assert_eq!(c.cmd("ZRANGE d 0 -1 WITHSCORES"), bulks(&["x", "1", "y", "2", "z", "3", "w", "30"]));
    assert_eq!(c.cmd("ZDIFFSTORE d 2 b a"), int(1));
    assert_eq!(c.cmd("ZRANGE d 0 -1 WITHSCORES"), bulks(&["w", "30"]));
    // +inf + -inf sums to 0, NaN products too.
    c.cmd("ZADD p inf m");
    c.cmd("ZADD n -inf m");
    assert_eq!(c.cmd("ZUNION 2 p n WITHSCORES"), bulks(&["m", "0"]));
    assert_eq!(c.cmd("ZINTER 2 p n WEIGHTS 0 1 WITHSCORES"), bulks(&["m", "-inf"]));
    assert_eq!(c.cmd("ZUNION 1 p WEIGHTS 0 WITHSCORES"), bulks(&["m", "0"]));
    for name in ["zunion", "zinter", "zdiff", "zintercard"] {
        assert_eq!(c.send(&[name, "0", "a"]), err(&format!("ERR at least 1 input key is needed for '{name}' command")));
    }
    for name in ["zunionstore", "zinterstore", "zdiffstore"] {
        assert_eq!(
            c.send(&[name, "d", "0", "a"]),
            err(&format!("ERR at least 1 input key is needed for '{name}' command"))
        );
    }
    assert_eq!(c.cmd("ZUNION 3 a b"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZUNION x a"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("ZUNION 2 a b WEIGHTS 1 x"), err("ERR weight value is not a float"));
    assert_eq!(c.cmd("ZUNION 2 a b WEIGHTS 1 nan"), err("ERR weight value is not a float"));
    assert_eq!(c.cmd("ZUNION 2 a b WEIGHTS 1"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZUNION 2 a b AGGREGATE AVG"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZDIFF 2 a b WEIGHTS 1 1"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZUNIONSTORE d 2 a b WITHSCORES"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZINTERCARD 2 a b WITHSCORES"), err("ERR syntax error"));
    // The type check comes before the options.
    c.cmd("SET s v");
    assert_eq!(c.cmd("ZUNION 2 a s BADOPTION"), err(WRONGTYPE));
}

/// Plain sets are inputs of score 1. SADD belongs to another part of the
/// server: without it this test has nothing to build its inputs from.
#[test]
fn plain_sets_are_inputs_with_score_one() {
    let (_s, mut c) = keel();
    if let Frame::Error(e) = c.cmd("SADD s1 a b 3") {
        assert!(String::from_utf8_lossy(&e).contains("unknown command"), "{e:?}");
        return;
    }
    c.cmd("SADD ints 1 2 3");
    c.cmd("ZADD z 5 a 7 3 9 q");
    assert_eq!(c.cmd("ZUNION 2 z s1 WITHSCORES"), bulks(&["b", "1", "a", "6", "3", "8", "q", "9"]));
    assert_eq!(c.cmd("ZINTER 2 z s1 WEIGHTS 1 10 WITHSCORES"), bulks(&["a", "15", "3", "17"]));
    assert_eq!(c.cmd("ZINTER 2 ints z WITHSCORES"), bulks(&["3", "8"]));
    assert_eq!(c.cmd("ZDIFF 2 s1 z WITHSCORES"), bulks(&["b", "1"]));
    assert_eq!(c.cmd("ZINTERCARD 2 ints s1"), int(1));
    assert_eq!(c.cmd("ZUNIONSTORE d 2 ints s1"), int(5));
    assert_eq!(c.cmd("ZRANGE d 0 -1 WITHSCORES"), bulks(&["1", "1", "2", "1", "a", "1", "b", "1", "3", "2"]));
}

#[test]
fn zrandmember_properties() {
    let (_s, mut c) = keel();
    for (entries, n) in [("128", 20usize), ("0", 300)] {
        c.send(&["CONFIG", "SET", "zset-max-listpack-entries", entries]);
        c.cmd("DEL z");
        let mut model = BTreeMap::new();
        for i in 0..n {
            let (m, s) = (format!("m{i}"), (i * 3) as f64 / 2.0);
            c.send(&["ZADD", "z", &s.to_string(), &m]);
            model.insert(m, s);
        }
        let single = text(&c.cmd("ZRANDMEMBER z"));
        assert!(model.contains_key(&single));
        for count in [1, 5, n / 2, n - 1, n, n + 10] {
            let got = items(c.send(&["ZRANDMEMBER", "z", &count.to_string(), "WITHSCORES"]));
            assert_eq!(got.len(), 2 * count.min(n), "count {count}");
            let mut seen = HashSet::new();
            for pair in got.chunks(2) {
                let m = text(&pair[0]);
                assert_eq!(text(&pair[1]).parse::<f64>().ok(), model.get(&m).copied(), "{m}");
                assert!(seen.insert(m), "distinct members for a positive count");
            }
        }
        // All of it comes back, from the top, when the count covers the set.
        let all = items(c.send(&["ZRANDMEMBER", "z", &(n + 1).to_string()]));
        let want = items(c.cmd("ZRANGE z 0 -1 REV"));
        assert_eq!(all, want);
        let repeated = items(c.cmd("ZRANDMEMBER z -1000"));
        assert_eq!(repeated.len(), 1000);
        let distinct: HashSet<String> = repeated.iter().map(text).collect();
        assert!(distinct.iter().all(|m| model.contains_key(m)));
        assert!(distinct.len() > n.min(1000) / 4, "a negative count samples the whole set");
    }
    assert_eq!(c.cmd("ZRANDMEMBER z 0"), bulks(&[]));
    assert_eq!(c.cmd("ZRANDMEMBER nokey"), Frame::Null);
    assert_eq!(c.cmd("ZRANDMEMBER nokey 5"), bulks(&[]));
    assert_eq!(c.cmd("ZRANDMEMBER z 1 WITHSCORE"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZRANDMEMBER z 1 WITHSCORES x"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZRANDMEMBER z x"), err("ERR value is not an integer or out of range"));
    assert_eq!(
        c.cmd("ZRANDMEMBER z -9223372036854775808"),
        err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    );
    assert_eq!(c.cmd("ZRANDMEMBER z -9223372036854770000 WITHSCORES"), err("ERR value is out of range"));
}

#[test]
fn zscan_returns_every_member_with_its_score() {
    let (_s, mut c) = keel();
    c.cmd("ZADD small 1 a 2.5 b -0 c 1e17 d");
    // A listpack comes whole, integers in integer form.
    assert_eq!(
        c.cmd("ZSCAN small 0"),
        array(vec![bulk("0"), bulks(&["c", "0", "a", "1", "b", "2.5", "d", "100000000000000000"])])
    );
    assert_eq!(c.cmd("ZSCAN small 0 MATCH [ab]"), array(vec![bulk("0"), bulks(&["a", "1", "b", "2.5"])]));
    assert_eq!(c.cmd("ZSCAN nokey 0 BADOPTION"), array(vec![bulk("0"), bulks(&[])]));
    assert_eq!(c.cmd("ZSCAN small 0 COUNT 0"), err("ERR syntax error"));
    assert_eq!(c.cmd("ZSCAN small x"), err("ERR invalid cursor"));
    c.cmd("CONFIG SET zset-max-listpack-entries 16");
    let mut model = BTreeMap::new();
    for i in 0..1000 {
        let s = format!("{}.25", i % 37);
        c.send(&["ZADD", "big", &s, &format!("member:{i}")]);
        model.insert(format!("member:{i}"), s);
    }
    c.cmd("ZADD big 1e17 huge");
    model.insert("huge".into(), "1e+17".into());
    let mut seen = BTreeMap::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    loop {
        let reply = items(c.send(&["ZSCAN", "big", &cursor, "COUNT", "50"]));
        cursor = text(&reply[0]);
        for pair in items(reply[1].clone()).chunks(2) {
            seen.insert(text(&pair[0]), text(&pair[1]));
        }
        calls += 1;
        if cursor == "0" {
            break;
        }
    }
    assert!(calls > 5, "a big set is scanned in steps");
    assert_eq!(seen, model);
    let matched = items(items(c.cmd("ZSCAN big 0 MATCH member:99* COUNT 100000"))[1].clone());
    assert_eq!(matched.len(), 2 * 11);
}

#[test]
fn big_skiplists_keep_ranks_and_order() {
    let (_s, mut c) = keel();
    let n = 5000;
    let mut args = vec!["ZADD".to_string(), "z".to_string()];
    for i in 0..n {
        args.push(((i * 7919) % 1000).to_string());
        args.push(format!("m{i:05}"));
    }
    assert_eq!(c.send(&args), int(n as i64));
    assert_eq!(c.cmd("OBJECT ENCODING z"), bulk("skiplist"));
    let mut model: Vec<(i64, String)> = (0..n).map(|i| (((i * 7919) % 1000) as i64, format!("m{i:05}"))).collect();
    model.sort();
    for i in (0..n).step_by(97) {
        let (score, member) = &model[i];
        assert_eq!(c.send(&["ZRANK", "z", member]), int(i as i64));
        assert_eq!(c.send(&["ZREVRANK", "z", member]), int((n - 1 - i) as i64));
        assert_eq!(c.send(&["ZRANGE", "z", &i.to_string(), &i.to_string()]), bulks(&[member]));
        assert_eq!(c.send(&["ZSCORE", "z", member]), bulk(&score.to_string()));
    }
    let in_range = model.iter().filter(|(s, _)| (100..=200).contains(s)).count();
    assert_eq!(c.cmd("ZCOUNT z 100 200"), int(in_range as i64));
    assert_eq!(c.cmd("ZREMRANGEBYSCORE z 100 200"), int(in_range as i64));
    model.retain(|(s, _)| !(100..=200).contains(s));
    assert_eq!(c.cmd("ZREMRANGEBYRANK z 10 1009"), int(1000));
    model.drain(10..1010);
    let got = items(c.cmd("ZRANGE z 0 -1"));
    assert_eq!(got.len(), model.len());
    assert!(got.iter().map(text).eq(model.iter().map(|(_, m)| m.clone())));
}

#[test]
fn writes_that_change_nothing_keep_watchers_happy() {
    let (_s, mut c) = keel();
    let server_port = _s.port;
    let mut other = Client::connect(server_port);
    c.cmd("ZADD z 1 a");
    c.cmd("WATCH z");
    other.cmd("ZADD z XX 1 b");
    other.cmd("ZADD z 1 a");
    other.cmd("ZREM z nope");
    c.cmd("MULTI");
    c.cmd("PING");
    assert_eq!(c.cmd("EXEC"), array(vec![Frame::Simple(b"PONG".to_vec())]));
    c.cmd("WATCH z");
    other.cmd("ZINCRBY z 1 a");
    c.cmd("MULTI");
    c.cmd("PING");
    assert_eq!(c.cmd("EXEC"), Frame::Null);
}

#[test]
fn sets_come_back_after_a_restart() {
    let dir = temp_dir("zsets");
    let commands = [
        "ZADD z 1 a 2 b 3 c 4 d 5 e 0.1 f",
        "ZINCRBY z 2.5 a",
        "ZADD z GT CH 10 b 1 c",
        "ZREM z d",
        "ZPOPMIN z",
        "ZMPOP 1 z MAX COUNT 1",
        "ZADD other 1 x 2 y",
        "ZUNIONSTORE u 2 z other WEIGHTS 2 3",
        "ZRANGESTORE r z 0 1",
        "ZREMRANGEBYSCORE other 2 2",
        "CONFIG SET zset-max-listpack-entries 2",
        "ZADD s 1 a 2 b 3 c",
        "ZREMRANGEBYRANK s 0 0",
    ];
    let keys = ["z", "other", "u", "r", "s"];
    let before: Vec<Frame> = {
        let server = Server::start_in(&dir, &[]);
        let mut c = server.client();
        for command in commands {
            assert!(!matches!(c.cmd(command), Frame::Error(_)), "{command}");
        }
        keys.iter().map(|k| c.send(&["ZRANGE", k, "0", "-1", "WITHSCORES"])).collect()
    };
    assert_eq!(before[0], bulks(&["c", "3", "a", "3.5", "e", "5"]));
    // ZMPOP is logged as the pop it made.
    let journal: Vec<u8> = std::fs::read_dir(dir.join("appendonlydir"))
        .expect("journal dir")
        .flat_map(|e| std::fs::read(e.expect("entry").path()).unwrap_or_default())
        .collect();
    assert!(journal.windows(7).any(|w| w == b"ZPOPMAX"));
    assert!(!journal.windows(5).any(|w| w == b"ZMPOP"));
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    let after: Vec<Frame> = keys.iter().map(|k| c.send(&["ZRANGE", k, "0", "-1", "WITHSCORES"])).collect();
    assert_eq!(before, after);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
