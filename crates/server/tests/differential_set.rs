//! Differential tests of the set commands against Debian's redis-server
//! 7.0.15 (the harness is `common::diff`). Replies whose order Redis does
//! not define are sorted first; SPOP and SRANDMEMBER appear only where
//! their result is determined (a count that takes the whole set, 0,
//! errors): their randomness is tested by properties in `tests/sets.rs`.

mod common;

use common::diff::{sort_flat, Stream};
use common::Frame;
use rand::rngs::StdRng;
use rand::Rng;

// Alternatives in `[a|b]` hold no spaces: the harness splits templates on
// spaces before it expands them.
const SETS: &[&str] = &[
    "SADD {k} {m}",
    "SADD {k} {m} {m} [{m}]",
    "SADD {k} {m} {m} {m} {m} {m} {m} {m} {m}",
    "SREM {k} {m} [{m}]",
    "SREM {k} {m} {m} {m} {m}",
    "SMEMBERS {k}",
    "SISMEMBER {k} {m}",
    "SMISMEMBER {k} {m} [{m}] [{m}]",
    "SCARD {k}",
    "SMOVE {k} {k} {m}",
    "SPOP {k} {whole}",
    "SPOP {k} 1 2",
    "SRANDMEMBER {k} {rcount}",
    "SINTER {k} [{k}] [{k}]",
    "SINTERCARD 1 {k} [LIMIT] [{i}]",
    "SINTERCARD 2 {k} {k} [LIMIT] [{i}]",
    "SINTERCARD 3 {k} {k} {k}",
    "SINTERCARD [0|4|x] {k} {k}",
    "SINTERSTORE {k} {k} [{k}] [{k}]",
    "SUNION {k} [{k}] [{k}]",
    "SUNIONSTORE {k} {k} [{k}] [{k}]",
    "SDIFF {k} [{k}] [{k}] [{k}]",
    "SDIFFSTORE {k} {k} [{k}] [{k}]",
    "SSCAN {k} 0 COUNT 1000 [MATCH] [*1*]",
    "SSCAN {k} [0|x] COUNT [0|x|-1|1000]",
    "SSCAN {k} 0 MATCH",
    "OBJECT ENCODING {k}",
    "EXISTS {k}",
    "TYPE {k}",
];

/// Other types on the same keys, for WRONGTYPE and overwrites.
const OTHERS: &[&str] =
    &["SET {k} {v}", "DEL {k}", "INCR {k}", "EXPIRE {k} {t}", "TTL {k}", "COPY {k} {k}", "RENAME {k} {k}"];

/// Small thresholds, so that sets cross them often.
const LIMITS: &[&str] = &["CONFIG SET set-max-intset-entries [3|8|512]"];

/// `{m}` a member: small and wide integers, non-canonical integers (which
/// are strings), strings. `{whole}` (SPOP) and `{rcount}` (SRANDMEMBER) a
/// count whose result is determined: all of the set, none, or an error.
fn members(token: &str, rng: &mut StdRng) -> Option<String> {
    let pick = |rng: &mut StdRng, of: &[&str]| of[rng.gen_range(0..of.len())].to_string();
    match token {
        "{m}" => Some(match rng.gen_range(0..10) {
            0..=4 => rng.gen_range(-3..12).to_string(),
            5 => pick(rng, &["70000", "-2147483649", "9223372036854775807", "-9223372036854775808"]),
            6 => pick(rng, &["01", "+1", "-0", "1.0", ""]),
            _ => pick(rng, &["a", "b", "c", "foo", "1a"]),
        }),
        "{whole}" => Some(pick(rng, &["1000", "0", "-1", "x"])),
        "{rcount}" => Some(pick(rng, &["1000", "0", "x", "-9223372036854775808"])),
        _ => None,
    }
}

fn normalize(command: &str, frame: Frame) -> Frame {
    match command {
        "SMEMBERS" | "SINTER" | "SUNION" | "SDIFF" | "SPOP" | "SRANDMEMBER" => sort_flat(frame),
        "SSCAN" => match frame {
            Frame::Array(mut parts) if parts.len() == 2 => {
                let page = parts.pop().map(sort_flat).unwrap_or(Frame::Null);
                parts.push(page);
                Frame::Array(parts)
            }
            other => other,
        },
        _ => frame,
    }
}

#[test]
fn sets_match_redis() {
    for seed in 0..4 {
        Stream { fill: members, normalize, ..Stream::new(&[SETS, SETS, LIMITS]) }.run(seed, 2000);
    }
}

#[test]
fn sets_and_other_types_match_redis() {
    for seed in 10..13 {
        Stream { fill: members, normalize, ..Stream::new(&[SETS, OTHERS]) }.run(seed, 1500);
    }
}

#[test]
fn sets_match_redis_in_resp3() {
    Stream { fill: members, normalize, resp3: true, ..Stream::new(&[SETS, LIMITS]) }.run(20, 2000);
}

#[test]
fn set_notifications_match_redis() {
    for seed in 30..32 {
        Stream { fill: members, normalize, notify: true, ..Stream::new(&[SETS, SETS, OTHERS]) }.run(seed, 1500);
    }
}
