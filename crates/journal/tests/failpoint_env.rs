//! `KEEL_JOURNAL_FAILPOINT` reaches the real write path through `Journal::open`.
//! (Its own test binary: it sets a process-wide environment variable.)
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use keel_journal::{FsyncPolicy, Journal};

#[test]
fn env_failpoint_poisons_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    std::env::set_var("KEEL_JOURNAL_FAILPOINT", "write-enospc:2:inf");
    let (j, _) = Journal::open(cfg.clone()).unwrap();
    std::env::remove_var("KEEL_JOURNAL_FAILPOINT");
    let first = j.append(0, &[&b"SET"[..], b"a", b"1"]);
    assert!(wait_durable(&j, first, Duration::from_secs(10)));
    let second = j.append(0, &[&b"SET"[..], b"b", b"2"]);
    assert!(wait_until(Duration::from_secs(10), || j.health().is_err()));
    assert!(j.durable_lsn() < second);
    let msg = j.health().unwrap_err().to_string();
    assert!(msg.contains("No space left on device"), "{msg}");

    std::env::set_var("KEEL_JOURNAL_FAILPOINT", "bogus");
    assert!(Journal::open(config(tmp.path(), FsyncPolicy::Always)).is_err());
    std::env::remove_var("KEEL_JOURNAL_FAILPOINT");
}
