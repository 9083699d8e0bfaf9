//! Differential tests of the list commands against Debian's redis-server
//! (the harness is `common::diff`). Elements come from a small alphabet so
//! that LREM, LPOS and LINSERT find matches; CONFIG SET of
//! `list-max-listpack-size` in the stream makes new lists use tiny or
//! byte-bounded nodes, so node splits and merges are exercised too.

mod common;

use common::diff::Stream;
use rand::rngs::StdRng;
use rand::Rng;

const LISTS: &[&str] = &[
    "LPUSH {k} {e} [{e}]",
    "RPUSH {k} {e} [{e} {e}]",
    "RPUSH {k} {e} {e} {e} {e} {e} {e} {e} {e}",
    "LPUSHX {k} {e} [{e}]",
    "RPUSHX {k} {e}",
    "LPOP {k} [{i}]",
    "RPOP {k} [{i}|x]",
    "LRANGE {k} {i} {i}",
    "LRANGE {k} 0 -1",
    "LINDEX {k} {i}",
    "LSET {k} {i} {e}",
    "LLEN {k}",
    "LREM {k} {i} {e}",
    "LTRIM {k} {i} {i}",
    "LINSERT {k} [BEFORE|AFTER|MIDDLE] {e} {e}",
    "LPOS {k} {e} [RANK {i}] [COUNT {i}] [MAXLEN {i}]",
    "LMOVE {k} {k} [LEFT|RIGHT|UP] [LEFT|RIGHT]",
    "RPOPLPUSH {k} {k}",
    "LMPOP [1|2|0|x] {k} {k} [LEFT|RIGHT] [COUNT {i}]",
    "LMPOP 3 {k} {k} {k} RIGHT [COUNT {i}]",
];

const AROUND: &[&str] = &[
    "SET {k} {v}",
    "DEL {k}",
    "TYPE {k}",
    "EXISTS {k}",
    "OBJECT ENCODING {k}",
    "CONFIG SET list-max-listpack-size [1|2|3|-1|-2|128]",
];

/// `{e}`: a list element from a small alphabet, sometimes long (a
/// kilobyte-sized one fills a byte-bounded node quickly).
fn element(token: &str, rng: &mut StdRng) -> Option<String> {
    (token == "{e}").then(|| match rng.gen_range(0..10) {
        0 => String::new(),
        1 => "12".into(),
        2 => "x".repeat(rng.gen_range(100..1500)),
        n => ["a", "b", "c", "d", "a", "b", "c"][n - 3].into(),
    })
}

#[test]
fn lists_match_redis() {
    for seed in 0..4 {
        Stream { fill: element, ..Stream::new(&[LISTS, LISTS, AROUND]) }.run(seed, 2000);
    }
}

#[test]
fn lists_with_tiny_nodes_match_redis() {
    const TINY: &[&str] = &["CONFIG SET list-max-listpack-size [1|2|3]"];
    for seed in 10..13 {
        Stream { fill: element, ..Stream::new(&[LISTS, LISTS, LISTS, TINY]) }.run(seed, 2000);
    }
}

/// DEBUG QUICKLIST-PACKED-THRESHOLD lowered to a few bytes: most
/// elements are then "large", each alone in its node (Redis's plain
/// nodes), and LSET and LINSERT split nodes around them; DEBUG RELOAD
/// writes and reads such lists back.
#[test]
fn lists_with_plain_nodes_match_redis() {
    const PLAIN: &[&str] = &[
        "DEBUG QUICKLIST-PACKED-THRESHOLD [1b|2|5b|100b|0|1kb]",
        "DEBUG QUICKLIST-PACKED-THRESHOLD [-1|5gb|x]",
        "DEBUG RELOAD",
    ];
    let flags = ["--enable-debug-command", "yes", "--save", ""];
    for seed in 40..43 {
        Stream { fill: element, flags: &flags, ..Stream::new(&[LISTS, LISTS, LISTS, PLAIN]) }.run(seed, 1500);
    }
}

#[test]
fn list_transactions_match_redis() {
    const MULTI: &[&str] = &["MULTI", "EXEC", "DISCARD", "WATCH {k}", "UNWATCH"];
    Stream { fill: element, ..Stream::new(&[LISTS, LISTS, AROUND, MULTI]) }.run(20, 2000);
}

#[test]
fn list_resp3_replies_match_redis() {
    Stream { fill: element, resp3: true, ..Stream::new(&[LISTS, LISTS, AROUND]) }.run(99, 2000);
}

#[test]
fn list_notifications_match_redis() {
    for seed in 30..32 {
        Stream { fill: element, notify: true, ..Stream::new(&[LISTS, LISTS, AROUND]) }.run(seed, 1500);
    }
}
