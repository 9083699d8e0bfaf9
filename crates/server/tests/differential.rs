//! Differential tests of strings, keys, bitmaps and transactions against
//! Debian's redis-server (the harness is `common::diff`).

mod common;

use common::diff::Stream;

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

#[test]
fn strings_match_redis() {
    for seed in 0..4 {
        Stream::new(&[STRINGS]).run(seed, 1500);
    }
}

#[test]
fn keyspace_matches_redis() {
    for seed in 10..14 {
        Stream::new(&[STRINGS, KEYSPACE]).run(seed, 1500);
    }
}

#[test]
fn bitmaps_match_redis() {
    for seed in 20..24 {
        Stream::new(&[BITMAPS, &["GET {k}", "DEL {k}", "SET {k} {v}"]]).run(seed, 1500);
    }
}

#[test]
fn transactions_match_redis() {
    for seed in 30..34 {
        Stream::new(&[STRINGS, TRANSACTIONS, TRANSACTIONS]).run(seed, 1500);
    }
}

#[test]
fn resp3_replies_match_redis() {
    Stream { resp3: true, ..Stream::new(&[STRINGS, KEYSPACE, BITMAPS]) }.run(99, 1500);
}

#[test]
fn string_keyspace_and_bitmap_notifications_match_redis() {
    for seed in 40..42 {
        Stream { notify: true, ..Stream::new(&[STRINGS, KEYSPACE, BITMAPS]) }.run(seed, 1000);
        Stream { notify: true, ..Stream::new(&[STRINGS, TRANSACTIONS]) }.run(seed + 10, 1000);
    }
}
