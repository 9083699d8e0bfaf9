//! I/O faults injected into the real write path: a failed write or fsync
//! never loses an acknowledged record nor corrupts the log, health() says so
//! while it lasts, and the journal recovers once the fault clears.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use keel_journal::check::{check, CheckOutcome, Repair};
use keel_journal::testing::{Fault, Op};
use keel_journal::{FsyncPolicy, Journal, JournalConfig, JournalError};

const T: Duration = Duration::from_secs(10);

/// keel-check-aof's verdict on the directory, and what it printed.
fn check_log(cfg: &JournalConfig) -> (CheckOutcome, String) {
    let mut out = Vec::new();
    let outcome = check(&cfg.dir.join("appendonly.aof.manifest"), Repair::Nothing, &mut out).unwrap();
    (outcome, String::from_utf8_lossy(&out).into_owned())
}

fn assert_log_valid(cfg: &JournalConfig) {
    let (outcome, text) = check_log(cfg);
    assert_eq!(outcome, CheckOutcome::Valid, "{text}");
}

/// Reopens and checks that records `0..n` (SET k<i>) are each there exactly once, in order.
fn assert_exactly_once(cfg: &JournalConfig, n: usize) {
    assert_log_valid(cfg);
    let (_j, replay) = open(cfg);
    let got = replay_all(replay);
    let mut seen = HashMap::new();
    for (i, (_, argv)) in got.iter().enumerate() {
        let a = strs(argv);
        assert_eq!(a[1], format!("k{i}"), "order");
        *seen.entry(a[1].clone()).or_insert(0) += 1;
    }
    assert_eq!(got.len(), n, "every record exactly once");
}

fn append_n(j: &Journal, from: usize, to: usize) -> u64 {
    let mut lsn = 0;
    for i in from..to {
        lsn = j.append(0, &[&b"SET"[..], format!("k{i}").as_bytes(), b"some value"]);
    }
    lsn
}

/// Appends one record at a time, waiting for each, until the journal turns
/// unhealthy; returns how many were appended.
fn append_until_failure(j: &Journal, from: usize) -> usize {
    for i in 0..1000 {
        let lsn = append_n(j, from + i, from + i + 1);
        if !wait_durable(j, lsn, Duration::from_millis(300)) {
            assert!(wait_until(T, || j.health().is_err()));
            return i + 1;
        }
    }
    panic!("the fault never fired");
}

/// `clean_while_failing`: the file on disk holds only complete records while
/// the fault lasts (false only when even the truncation of a partial write
/// failed: then it ends in a correct prefix of the next record, a torn tail
/// that recovery completes and `aof-load-truncated` would cut).
fn fault_then_recover(
    policy: FsyncPolicy,
    clean_while_failing: bool,
    arm: impl Fn(&keel_journal::testing::Failpoints),
) {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), policy);
    let (tuning, fp) = faulty_tuning();
    let (j, _) = Journal::open_with(cfg.clone(), tuning).unwrap();
    // Some records get through before the fault.
    let lsn = append_n(&j, 0, 5);
    assert!(wait_durable(&j, lsn, T));
    arm(&fp);
    let n = append_until_failure(&j, 5);
    let durable_at_failure = j.durable_lsn();
    // More records keep coming while failing: appenders never block. Of
    // 200 KB each, 4 MB in all: appenders seal batches meanwhile (at 1 MB),
    // to be written in order once the fault clears.
    let big = vec![b'v'; 200_000];
    let mut last = 0;
    for i in 5 + n..5 + n + 20 {
        last = j.append(0, &[&b"SET"[..], format!("k{i}").as_bytes(), &big]);
    }
    std::thread::sleep(Duration::from_millis(100)); // several retries
    assert!(matches!(j.health(), Err(JournalError::Poisoned(_))), "{:?}", j.health());
    let st = j.stats();
    assert!(!st.aof_last_write_status_ok);
    assert!(st.last_error.is_some());
    if policy == FsyncPolicy::Always {
        assert_eq!(j.durable_lsn(), durable_at_failure, "nothing new acknowledged while failing");
        assert!(j.durable_lsn() < last);
        assert!(j.flush_and_sync().is_err());
    }
    // The file on disk is a valid AOF even now, between retries (a check
    // that lands while a retry writes sees the record being written).
    if clean_while_failing {
        let mut last = String::new();
        let valid = wait_until(T, || {
            let (outcome, text) = check_log(&cfg);
            assert!(!text.contains("bad command"), "{text}");
            last = text;
            outcome == CheckOutcome::Valid
        });
        assert!(valid, "{last}");
    } else {
        let mut out = Vec::new();
        let manifest = cfg.dir.join("appendonly.aof.manifest");
        check(&manifest, Repair::Nothing, &mut out).unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("torn tail") && !text.contains("bad command"), "{text}");
    }
    fp.clear();
    assert!(wait_durable(&j, last, T), "durable advances after the fault clears");
    assert!(wait_until(T, || j.health().is_ok()), "{:?}", j.health());
    j.flush_and_sync().unwrap();
    drop(j);
    assert_exactly_once(&cfg, 5 + n + 20);
}

#[test]
fn write_eio_always() {
    fault_then_recover(FsyncPolicy::Always, true, |fp| fp.fail(Op::Write, 1, u64::MAX, Fault::Eio));
}

#[test]
fn write_enospc_after_a_short_write_is_truncated_back() {
    fault_then_recover(FsyncPolicy::Always, true, |fp| {
        fp.fail(Op::Write, 1, 1, Fault::Short);
        fp.fail(Op::Write, 2, u64::MAX, Fault::Enospc);
    });
}

#[test]
fn short_write_when_truncate_also_fails_keeps_the_prefix() {
    fault_then_recover(FsyncPolicy::Always, false, |fp| {
        fp.fail(Op::Write, 1, 1, Fault::Short);
        fp.fail(Op::Write, 2, u64::MAX, Fault::Enospc);
        fp.fail(Op::SetLen, 1, 1, Fault::Eio);
    });
}

#[test]
fn fsync_eio_always_rewrites_unsynced_bytes() {
    fault_then_recover(FsyncPolicy::Always, true, |fp| fp.fail(Op::Sync, 1, u64::MAX, Fault::Eio));
}

#[test]
fn write_enospc_everysec() {
    fault_then_recover(FsyncPolicy::EverySec, true, |fp| fp.fail(Op::Write, 1, u64::MAX, Fault::Enospc));
}

#[test]
fn write_eio_no_fsync() {
    fault_then_recover(FsyncPolicy::No, true, |fp| fp.fail(Op::Write, 1, u64::MAX, Fault::Eio));
}

#[test]
fn background_fsync_failure_everysec_is_repaired() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::EverySec);
    let (tuning, fp) = faulty_tuning();
    let (j, _) = Journal::open_with(cfg.clone(), tuning).unwrap();
    fp.fail(Op::Sync, 1, u64::MAX, Fault::Eio);
    let lsn = append_n(&j, 0, 50);
    // everysec acknowledges once written...
    assert!(wait_durable(&j, lsn, T));
    // ...and the failed background fsync turns health to Err.
    assert!(wait_until(T, || j.health().is_err()));
    assert!(j.stats().fsync_errors >= 1);
    assert_log_valid(&cfg);
    let last = append_n(&j, 50, 80);
    fp.clear();
    assert!(wait_until(T, || j.health().is_ok()), "{:?}", j.health());
    assert!(wait_durable(&j, last, T));
    j.flush_and_sync().unwrap();
    assert!(wait_until(T, || j.stats().fsync_count >= 2));
    drop(j);
    assert_exactly_once(&cfg, 80);
}

/// Under `everysec` a record is acknowledged once written, so a process
/// crash must find it in the file whatever the disk does next. After a
/// failed fsync the writer rewrites what is unsynced so that the next
/// fsync writes it again; when those writes fail too, the file must
/// still hold every written record while the disk is failing (what
/// `kill -9` at that moment would leave behind).
#[test]
fn a_failing_repair_after_a_failed_fsync_keeps_every_written_record_in_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::EverySec);
    let (tuning, fp) = faulty_tuning();
    let (j, _) = Journal::open_with(cfg.clone(), tuning).unwrap();
    fp.fail(Op::Sync, 1, u64::MAX, Fault::Eio);
    let lsn = append_n(&j, 0, 50);
    assert!(wait_until(T, || j.written_lsn() >= lsn));
    fp.fail(Op::Write, 1, u64::MAX, Fault::Eio);
    let tries = || fp.count(Op::Write);
    let before = tries();
    assert!(wait_until(T, || tries() > before + 3), "repairs tried, each failing");
    assert!(j.health().is_err());
    assert!(j.stats().fsync_errors > 0);
    let crashed = tmp.path().join("crashed");
    let copy = JournalConfig { dir: crashed.join("appendonlydir"), ..cfg.clone() };
    copy_files(&cfg.dir, &copy.dir);
    assert_exactly_once(&copy, 50);
    fp.clear();
    assert!(wait_until(T, || j.health().is_ok()), "{:?}", j.health());
    let last = append_n(&j, 50, 60);
    assert!(wait_durable(&j, last, T));
    j.flush_and_sync().unwrap();
    drop(j);
    assert_exactly_once(&cfg, 60);
}

/// A write that fails on an appender's thread ([`Journal::write_through`])
/// is the writer thread's to retry: the journal recovers with nothing more
/// appended (and, with writes refused while it fails, nothing would be).
#[test]
fn a_failed_write_through_is_retried_by_the_writer_thread() {
    for policy in [FsyncPolicy::EverySec, FsyncPolicy::No] {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path(), policy);
        let (tuning, fp) = faulty_tuning();
        let (j, _) = Journal::open_with(cfg.clone(), tuning).unwrap();
        let lsn = append_n(&j, 0, 5);
        assert!(j.write_through());
        assert!(j.durable_lsn() >= lsn);
        // Which thread writes the record, this one or the writer thread the
        // append woke, is a race: rounds enough that this one does, often.
        let rounds = 20;
        for i in 5..5 + rounds {
            fp.fail(Op::Write, 1, u64::MAX, Fault::Eio);
            let last = append_n(&j, i, i + 1);
            // Whichever thread wrote it, the write failed.
            assert!(!j.write_through());
            assert!(wait_until(T, || j.health().is_err()));
            fp.clear();
            assert!(wait_durable(&j, last, T), "{policy:?}, round {i}: the writer thread retried");
            assert!(wait_until(T, || j.health().is_ok()), "{:?}", j.health());
        }
        drop(j);
        assert_exactly_once(&cfg, 5 + rounds);
    }
}

#[test]
fn transient_write_fault_recovers_on_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (tuning, fp) = faulty_tuning();
    let (j, _) = Journal::open_with(cfg.clone(), tuning).unwrap();
    fp.fail(Op::Write, 3, 2, Fault::Enospc);
    let mut last = 0;
    for i in 0..30 {
        last = append_n(&j, i, i + 1);
        assert!(wait_durable(&j, last, T));
    }
    assert!(j.stats().write_errors >= 2);
    assert!(wait_until(T, || j.health().is_ok()));
    assert_eq!(j.durable_lsn(), last);
    drop(j);
    assert_exactly_once(&cfg, 30);
}
