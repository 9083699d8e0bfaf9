//! SORT and SORT_RO against Debian's redis-server: generated streams over
//! lists, sets and sorted sets with BY and GET patterns (string keys and
//! hash fields), LIMIT, ASC/DESC, ALPHA and STORE.

mod common;

use common::diff::Stream;
use common::{bulk, err, int, Frame, Server};
use rand::rngs::StdRng;
use rand::Rng;

/// Collections to sort and the weight/object keys their elements name.
const SETUP: &[&str] = &[
    "RPUSH {c} {e} {e} {e}",
    "SADD {c} {e} {e}",
    "ZADD {c} {i} {e} {i} {e}",
    "SET o_{e} {w}",
    "HSET h_{e} f {w}",
    "DEL {c}",
];

/// Distinct weights: under ALPHA, Redis leaves ties between equal weights
/// in whatever order its quicksort leaves them, which is not worth copying.
const WEIGHTS: &[&str] = &["MSET w_1 5 w_2 1 w_3 3.5 w_10 x w_a -2 w_b 7 w_-1.5 0"];

const SORTS: &[&str] = &[
    "SORT {c} [ASC|DESC] [ALPHA] [LIMIT {i} {i}]",
    "SORT {c} BY w_* [ASC|DESC] [ALPHA] [GET o_*] [GET #] [GET h_*->f]",
    "SORT {c} BY h_*->f [DESC] [LIMIT {i} {i}]",
    "SORT {c} BY nosort STORE dst [DESC]",
    "SORT {c} [ALPHA] STORE dst [GET o_*]",
    "SORT_RO {c} [ALPHA] [DESC] [GET #] [GET o_*]",
    "SORT_RO {c} STORE dst",
    "LRANGE dst 0 -1",
    "SORT {c} LIMIT {i}",
];

fn fill(token: &str, rng: &mut StdRng) -> Option<String> {
    Some(match token {
        // Collections of every type, and a string for WRONGTYPE.
        "{c}" => ["l1", "l2", "s1", "z1", "o_1"][rng.gen_range(0..5)].to_string(),
        "{e}" => ["1", "2", "3", "10", "a", "b", "-1.5"][rng.gen_range(0..7)].to_string(),
        "{w}" => ["5", "1", "3.5", "x", "-2", "7"][rng.gen_range(0..6)].to_string(),
        _ => return None,
    })
}

#[test]
fn sort_matches_redis() {
    for seed in 0..4 {
        Stream { fill, prelude: WEIGHTS, ..Stream::new(&[SETUP, SORTS]) }.run(seed, 1500);
    }
}

#[test]
fn sort_answers_in_resp3_as_redis() {
    Stream { fill, resp3: true, prelude: WEIGHTS, ..Stream::new(&[SETUP, SORTS]) }.run(50, 1500);
}

#[test]
fn sort_cases() {
    let server = Server::start(&[]);
    let mut c = server.client();
    c.cmd("RPUSH l 3 1 2");
    c.cmd("MSET w_1 10 w_2 30 w_3 20 o_1 one o_2 two o_3 three");
    let arr = |items: &[&str]| Frame::Array(items.iter().map(|s| bulk(s)).collect());
    assert_eq!(c.cmd("SORT l"), arr(&["1", "2", "3"]));
    assert_eq!(c.cmd("SORT l BY w_* GET o_* GET #"), arr(&["one", "1", "three", "3", "two", "2"]));
    assert_eq!(c.cmd("SORT l BY nosort DESC LIMIT 1 1"), arr(&["1"]));
    assert_eq!(c.cmd("SORT l STORE dst"), int(3));
    assert_eq!(c.cmd("LRANGE dst 0 -1"), arr(&["1", "2", "3"]));
    assert_eq!(c.cmd("SORT_RO l STORE x"), err("ERR syntax error"));
    c.cmd("SADD s a b");
    assert_eq!(c.cmd("SORT s"), err("ERR One or more scores can't be converted into double"));
    // An empty result deletes the destination.
    assert_eq!(c.cmd("SORT missing STORE dst"), int(0));
    assert_eq!(c.cmd("EXISTS dst"), int(0));
    // COMMAND GETKEYS finds the STORE destination.
    assert_eq!(c.cmd("COMMAND GETKEYS SORT l BY w_* STORE out"), arr(&["l", "out"]));
    assert_eq!(c.cmd("COMMAND GETKEYS SORT l STORE a STORE b"), arr(&["l", "b"]));
}
