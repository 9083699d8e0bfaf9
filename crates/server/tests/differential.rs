//! Differential tests: the same generated command streams go to Debian's
//! redis-server 7.0.15 and to Keel, and every reply must match (errors by
//! their text, unordered replies sorted first).
//!
//! Commands are generated from templates: `{k}` a key from a small set (so
//! commands collide on keys, across shards), `{v}` a value, `{i}` a small
//! integer, `{f}` a float, `{t}` a TTL, `{bit}` 0 or 1, `{o}` a bit offset,
//! and `[a|b|c]` one of the alternatives or none of them.

mod common;

use common::{Frame, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KEYS: &[&str] = &["a", "b", "c", "{t}x", "{t}y", "num", "bits", "k:1", "k:2", "k:3"];

const STRINGS: &[&str] = &[
    "SET {k} {v} [NX|XX] [GET] [EX {t}|PX {t}|KEEPTTL]",
    "GET {k}",
    "GETSET {k} {v}",
    "GETDEL {k}",
    "GETEX {k} [EX {t}|PX {t}|PERSIST]",
    "SETNX {k} {v}",
    "SETEX {k} {t} {v}",
    "PSETEX {k} {t} {v}",
    "MGET {k} {k} {k}",
    "MSET {k} {v} {k} {v}",
    "MSETNX {k} {v} {k} {v}",
    "APPEND {k} {v}",
    "STRLEN {k}",
    "INCR {k}",
    "DECR {k}",
    "INCRBY {k} {i}",
    "DECRBY {k} {i}",
    "INCRBYFLOAT {k} {f}",
    "GETRANGE {k} {i} {i}",
    "SUBSTR {k} {i} {i}",
    "SETRANGE {k} {i} {v}",
    "LCS {k} {k} [LEN|IDX]",
];

const KEYSPACE: &[&str] = &[
    "DEL {k} [{k}]",
    "UNLINK {k} [{k}]",
    "EXISTS {k} [{k}]",
    "TYPE {k}",
    "RENAME {k} {k}",
    "RENAMENX {k} {k}",
    "COPY {k} {k} [REPLACE]",
    "EXPIRE {k} {t} [NX|XX|GT|LT]",
    "PEXPIRE {k} {t} [NX|XX|GT|LT]",
    "PERSIST {k}",
    "TTL {k}",
    "PTTL {k}",
    "TOUCH {k} [{k}]",
    "OBJECT ENCODING {k}",
    "KEYS *",
    "KEYS k:*",
    "DBSIZE",
    "MOVE {k} 1",
    "SELECT [0|1]",
];

const BITMAPS: &[&str] = &[
    "SETBIT {k} {o} {bit}",
    "GETBIT {k} {o}",
    "BITCOUNT {k} [{i} {i}]",
    "BITPOS {k} {bit} [{i}]",
    "BITOP [AND|OR|XOR] {k} {k} {k}",
    "BITOP NOT {k} {k}",
    "BITFIELD {k} [GET|SET|INCRBY] [u8|i8|u4|i16] {o} {i}",
];

const TRANSACTIONS: &[&str] = &["MULTI", "EXEC", "DISCARD", "WATCH {k}", "UNWATCH"];

/// Expands one template with random choices.
fn expand(template: &str, rng: &mut StdRng) -> Vec<String> {
    let mut argv = Vec::new();
    for word in template.split(' ') {
        let word = if let Some(inner) = word.strip_prefix('[').and_then(|w| w.strip_suffix(']')) {
            let choices: Vec<&str> = inner.split('|').collect();
            let pick = rng.gen_range(0..=choices.len());
            match choices.get(pick) {
                Some(c) => *c,
                None => continue,
            }
        } else {
            word
        };
        for part in word.split(' ') {
            argv.push(fill(part, rng));
        }
    }
    argv
}

fn fill(token: &str, rng: &mut StdRng) -> String {
    match token {
        "{k}" => KEYS[rng.gen_range(0..KEYS.len())].to_string(),
        "{v}" => match rng.gen_range(0..5) {
            0 => rng.gen_range(-100..100).to_string(),
            1 => "hello".into(),
            2 => format!("{}.{}", rng.gen_range(0..10), rng.gen_range(0..100)),
            3 => String::new(),
            _ => "x".repeat(rng.gen_range(1..60)),
        },
        "{i}" => rng.gen_range(-5..20).to_string(),
        "{f}" => match rng.gen_range(0..4) {
            0 => "1.5".into(),
            1 => "-0.25".into(),
            2 => "3e2".into(),
            _ => "abc".into(),
        },
        "{t}" => match rng.gen_range(0..6) {
            0 => "0".into(),
            1 => "-1".into(),
            // Never short enough to run out during a test: the two
            // servers receive each command a little apart in time.
            _ => rng.gen_range(10_000..100_000).to_string(),
        },
        "{bit}" => rng.gen_range(0..2).to_string(),
        "{o}" => rng.gen_range(0..64).to_string(),
        other => other.to_string(),
    }
}

/// Replies whose order Redis does not define are sorted.
fn normalize(command: &str, frame: Frame) -> Frame {
    match (command, frame) {
        ("KEYS", Frame::Array(mut items)) => {
            items.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
            Frame::Array(items)
        }
        (_, frame) => frame,
    }
}

/// Equal, except that remaining TTLs may differ by the time between the two
/// servers receiving the command (a second for TTL, that in ms for PTTL).
fn same(command: &str, want: &Frame, got: &Frame) -> bool {
    match (command, want, got) {
        ("TTL", Frame::Integer(a), Frame::Integer(b)) if *a > 0 && *b > 0 => (a - b).abs() <= 1,
        ("PTTL", Frame::Integer(a), Frame::Integer(b)) if *a > 0 && *b > 0 => (a - b).abs() <= 1000,
        _ => want == got,
    }
}

fn run_stream(families: &[&[&str]], seed: u64, commands: usize) {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&[]);
    let mut r = redis.client();
    let mut k = keel.client();
    let mut rng = StdRng::seed_from_u64(seed);
    let templates: Vec<&str> = families.iter().flat_map(|f| f.iter().copied()).collect();
    let mut history: Vec<String> = Vec::new();
    for _ in 0..commands {
        let argv = expand(templates[rng.gen_range(0..templates.len())], &mut rng);
        let name = argv[0].to_ascii_uppercase();
        history.push(argv.join(" "));
        let want = normalize(&name, r.send(&argv));
        let got = normalize(&name, k.send(&argv));
        if !same(&name, &want, &got) {
            let start = history.len().saturating_sub(15);
            panic!(
                "seed {seed}: reply differs for `{}`\n redis: {want:?}\n keel:  {got:?}\nlast commands:\n  {}",
                argv.join(" "),
                history[start..].join("\n  ")
            );
        }
    }
}

#[test]
fn strings_match_redis() {
    for seed in 0..4 {
        run_stream(&[STRINGS], seed, 1500);
    }
}

#[test]
fn keyspace_matches_redis() {
    for seed in 10..14 {
        run_stream(&[STRINGS, KEYSPACE], seed, 1500);
    }
}

#[test]
fn bitmaps_match_redis() {
    for seed in 20..24 {
        run_stream(&[BITMAPS, &["GET {k}", "DEL {k}", "SET {k} {v}"]], seed, 1500);
    }
}

#[test]
fn transactions_match_redis() {
    for seed in 30..34 {
        run_stream(&[STRINGS, TRANSACTIONS, TRANSACTIONS], seed, 1500);
    }
}

#[test]
fn resp3_replies_match_redis() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&[]);
    let mut r = redis.client();
    let mut k = keel.client();
    // HELLO's map differs by design (id, version); the rest must not.
    assert!(matches!(r.cmd("HELLO 3"), Frame::Map(_)));
    assert!(matches!(k.cmd("HELLO 3"), Frame::Map(_)));
    let mut rng = StdRng::seed_from_u64(99);
    let templates: Vec<&str> = [STRINGS, KEYSPACE, BITMAPS].iter().flat_map(|f| f.iter().copied()).collect();
    for _ in 0..1500 {
        let argv = expand(templates[rng.gen_range(0..templates.len())], &mut rng);
        let name = argv[0].to_ascii_uppercase();
        let want = normalize(&name, r.send(&argv));
        let got = normalize(&name, k.send(&argv));
        assert!(same(&name, &want, &got), "RESP3 reply differs for `{}`: {want:?} vs {got:?}", argv.join(" "));
    }
}
