//! Differential tests of the hash commands against Debian's redis-server
//! (the harness is `common::diff`). Fields and values come from a small
//! alphabet so that updates, HDEL and HEXISTS find them; CONFIG SET of the
//! `hash-max-listpack-*` limits in the stream makes hashes convert at
//! tiny sizes, so both encodings and the conversion are exercised.
//!
//! A listpack answers in insertion order, which Keel keeps as Redis does:
//! streams whose hashes never leave the listpack compare HGETALL, HKEYS,
//! HVALS and HSCAN unsorted. Streams that convert sort them, since a
//! table's order is its own. HRANDFIELD is random: the black-box tests
//! check it by its properties.

mod common;

use common::diff::{sort_flat, sort_pairs, Stream};
use common::Frame;
use rand::rngs::StdRng;
use rand::Rng;

const HASHES: &[&str] = &[
    "HSET {k} {fd} {e}",
    "HSET {k} {fd} {e} {fd} {e}",
    "HSET {k} {fd} {e} {fd} {e} {fd} {e} {fd} {e}",
    "HSET {k} {fd} [{e}]",
    "HMSET {k} {fd} {e}",
    "HMSET {k} {fd} {e} {fd} {e} [{fd}]",
    "HSETNX {k} {fd} {e}",
    "HGET {k} {fd}",
    "HMGET {k} {fd} [{fd}] [{fd}]",
    "HDEL {k} {fd} [{fd}] [{fd}]",
    "HLEN {k}",
    "HSTRLEN {k} {fd}",
    "HEXISTS {k} {fd}",
    "HINCRBY {k} {fd} [{i}|-3|9223372036854775807|-9223372036854775808|x|1.5]",
    "HINCRBYFLOAT {k} {fd} [{f}|0.1|-1.25|1e300|inf|x]",
    "HRANDFIELD {k} 0 [WITHVALUES|FOO]",
    "HRANDFIELD {k} x [WITHVALUES]",
    "HRANDFIELD {k} -9223372036854775808 [WITHVALUES]",
    "HRANDFIELD {k} [-9223372036854775807|4611686018427387904] WITHVALUES",
    "HRANDFIELD {k} [1|-1|9223372036854775807] FOO",
    "HRANDFIELD {k} 1 WITHVALUES WITHVALUES",
];

/// Replies whose order (or HSCAN cursor) a table decides: normalised by
/// `scan_shape`, and kept out of transactions, whose EXEC nests them.
const UNORDERED: &[&str] =
    &["HKEYS {k}", "HVALS {k}", "HGETALL {k}", "HSCAN {k} [0|x|-1] [MATCH|COUNT] [a*|0|{i}]"];

const AROUND: &[&str] = &["SET {k} {v}", "DEL {k}", "TYPE {k}", "EXISTS {k}", "OBJECT ENCODING {k}"];

/// `{fd}`: a field; `{e}`: a value. Mostly short, from a small alphabet;
/// sometimes numbers (for HINCRBY*) or long (past hash-max-listpack-value).
fn token(token: &str, rng: &mut StdRng) -> Option<String> {
    match token {
        "{fd}" => Some(match rng.gen_range(0..12) {
            0 => String::new(),
            1 => "f".repeat(rng.gen_range(60..80)),
            n => ["a", "b", "c", "d", "ab", "num", "fl", "a", "b", "c"][n - 2].into(),
        }),
        "{e}" => Some(match rng.gen_range(0..10) {
            0 => String::new(),
            1 => rng.gen_range(-100..100).to_string(),
            2 => "1.5".into(),
            3 => "x".repeat(rng.gen_range(50..90)),
            n => ["a", "b", "c", "10", "v", "a"][n - 4].into(),
        }),
        _ => None,
    }
}

/// Compact-only streams: values and counts stay within the limits.
fn small_token(t: &str, rng: &mut StdRng) -> Option<String> {
    match token(t, rng) {
        Some(s) if s.len() > 20 => Some("short".into()),
        other => other,
    }
}

/// Sorts the replies whose order a table does not define.
fn unordered(command: &str, frame: Frame) -> Frame {
    match command {
        "HKEYS" | "HVALS" => sort_flat(frame),
        "HGETALL" => sort_pairs(frame),
        _ => frame,
    }
}

#[test]
fn compact_hashes_match_redis_in_order() {
    // Without the long tokens and with few fields, every hash stays a
    // listpack: order, HSCAN's one-call answer and encodings must match.
    const COMPACT: &[&str] = &[
        "HSET {k} {fd} {e}",
        "HSET {k} {fd} {e} {fd} {e}",
        "HSETNX {k} {fd} {e}",
        "HGET {k} {fd}",
        "HDEL {k} {fd} [{fd}]",
        "HMGET {k} {fd} [{fd}]",
        "HKEYS {k}",
        "HVALS {k}",
        "HGETALL {k}",
        "HINCRBY {k} {fd} {i}",
        "HINCRBYFLOAT {k} {fd} [{f}|0.1]",
        "HSCAN {k} [0|7] [MATCH|COUNT] [a*|1|{i}]",
        "HSCAN {k} 0 MATCH [a*|?|*] COUNT 1",
        "OBJECT ENCODING {k}",
    ];
    for seed in 0..3 {
        Stream { fill: small_token, ..Stream::new(&[COMPACT, COMPACT, AROUND]) }.run(seed, 2000);
    }
}

/// HSCAN of a table answers a cursor that depends on the table's seed:
/// compare only what is certain (errors, and that the reply is a pair).
fn scan_shape(command: &str, frame: Frame) -> Frame {
    match (command, frame) {
        ("HSCAN", Frame::Array(parts)) if parts.len() == 2 => Frame::Simple(b"scan reply".to_vec()),
        (c, f) => unordered(c, f),
    }
}

#[test]
fn hashes_match_redis() {
    for seed in 0..4 {
        Stream { fill: token, normalize: scan_shape, ..Stream::new(&[HASHES, HASHES, UNORDERED, AROUND]) }
            .run(seed, 2000);
    }
}

#[test]
fn hashes_with_tiny_limits_match_redis() {
    const TINY: &[&str] =
        &["CONFIG SET hash-max-listpack-entries [0|1|2|3|128]", "CONFIG SET hash-max-listpack-value [0|1|2|8|64]"];
    for seed in 10..13 {
        Stream { fill: token, normalize: scan_shape, ..Stream::new(&[HASHES, HASHES, UNORDERED, TINY]) }
            .run(seed, 2000);
    }
}

#[test]
fn hash_transactions_match_redis() {
    const MULTI: &[&str] = &["MULTI", "EXEC", "DISCARD", "WATCH {k}", "UNWATCH"];
    Stream { fill: token, ..Stream::new(&[HASHES, HASHES, AROUND, MULTI]) }.run(20, 2000);
}

#[test]
fn hash_resp3_replies_match_redis() {
    Stream { fill: token, normalize: scan_shape, resp3: true, ..Stream::new(&[HASHES, HASHES, UNORDERED, AROUND]) }
        .run(99, 2000);
}

#[test]
fn hash_notifications_match_redis() {
    for seed in 30..32 {
        Stream { fill: token, normalize: scan_shape, notify: true, ..Stream::new(&[HASHES, HASHES, AROUND]) }
            .run(seed, 1500);
    }
}
