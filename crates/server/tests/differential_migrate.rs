//! Differential test of MIGRATE against Debian's redis-server 7.0.15: its
//! argument errors, NOKEY, the target's errors (a busy key, a database
//! out of range, AUTH to a target without a password), an unreachable
//! target, COPY and REPLACE, and what the source is left with (KEYS,
//! and the keyspace notifications), with COMMAND GETKEYS and
//! GETKEYSANDFLAGS of its forms. Both sources talk to one redis-server
//! target, whose database 9 holds every key the streams use, so a
//! migration there is refused as busy whichever source came first.

mod common;

use std::sync::atomic::{AtomicU16, Ordering};

use common::diff::Stream;
use common::Server;
use rand::rngs::StdRng;

/// The target's port and a port nobody listens on, for the templates.
static TARGET_PORT: AtomicU16 = AtomicU16::new(0);
static CLOSED_PORT: AtomicU16 = AtomicU16::new(0);

fn fill(token: &str, _: &mut StdRng) -> Option<String> {
    match token {
        "{tp}" => Some(TARGET_PORT.load(Ordering::Relaxed).to_string()),
        "{cp}" => Some(CLOSED_PORT.load(Ordering::Relaxed).to_string()),
        "{empty}" => Some(String::new()),
        _ => None,
    }
}

const WRITES: &[&str] = &["SET {k} {v}", "RPUSH {k} {v} {v}", "PEXPIRE {k} {t}", "KEYS *"];

const MIGRATES: &[&str] = &[
    "MIGRATE 127.0.0.1 {tp} {k} 0 1000 [COPY] REPLACE",
    "MIGRATE 127.0.0.1 {tp} {k} 9 1000 [COPY|REPLACE]",
    "MIGRATE 127.0.0.1 {tp} {empty} 0 1000 [COPY] REPLACE KEYS {k} {k} {k}",
    "MIGRATE 127.0.0.1 {tp} {empty} 9 1000 [COPY|REPLACE] KEYS {k} {k}",
    "MIGRATE 127.0.0.1 {tp} {k} 0 1000 KEYS {k}",
    "MIGRATE 127.0.0.1 {tp} {k} [0|x|-1|99|16] [1000|y|0|-5] [COPY|REPLACE|AUTH|AUTH2|foo|AUTH2 u]",
    "MIGRATE 127.0.0.1 {tp} {k} 0 1000 REPLACE [AUTH pw|AUTH2 u pw]",
    "MIGRATE 127.0.0.1 {cp} {k} 0 100 [COPY]",
    "MIGRATE 127.0.0.1 {tp} {k} [0]",
];

const GETKEYS: &[&str] = &[
    "COMMAND GETKEYS MIGRATE h 1 {k} 0 0 [COPY|REPLACE|AUTH|AUTH2 u] [KEYS] {k} {k}",
    "COMMAND GETKEYS MIGRATE h 1 {empty} 0 0 [COPY|AUTH|AUTH2|AUTH2 u] [KEYS|keys] [{k} {k}]",
    "COMMAND GETKEYSANDFLAGS MIGRATE h 1 [{k}|{empty}] 0 0 [REPLACE|AUTH x] [KEYS] [{k}] {k}",
];

#[test]
fn migrate_matches_redis() {
    let Some(target) = Server::start_redis(&[]) else { return };
    let mut t = target.client();
    t.cmd("SELECT 9");
    for key in common::diff::KEYS {
        t.send(&["SET", key, "busy"]);
    }
    TARGET_PORT.store(target.port, Ordering::Relaxed);
    CLOSED_PORT.store(keel_testkit::free_port(), Ordering::Relaxed);
    let mut stream = Stream::new(&[WRITES, MIGRATES, GETKEYS]);
    stream.fill = fill;
    stream.notify = true;
    for seed in 0..4 {
        stream.run(seed, 400);
    }
}
