//! AOF rewrite in the journal: rotation at the instant S, commit and abort,
//! every intermediate state loadable and checkable, and durability across
//! the switch with I/O faults injected.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use common::*;
use keel_journal::check::{check, CheckOutcome, Repair};
use keel_journal::testing::{Fault, Op};
use keel_journal::{BaseBuffer, BaseFormat, FsyncPolicy, IncrListing, Journal, JournalConfig, JournalError, Replayed, RewriteOptions};
use keel_rdb::{RdbValue, RdbWriter, WriteOptions};

const T: Duration = Duration::from_secs(10);

fn set(j: &Journal, db: usize, i: usize) -> u64 {
    j.append(db, &[&b"SET"[..], format!("k{i}").as_bytes(), b"v"])
}

fn files_in(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn manifest(cfg: &JournalConfig) -> String {
    String::from_utf8(std::fs::read(cfg.dir.join("appendonly.aof.manifest")).unwrap()).unwrap()
}

/// keel-check-aof accepts the directory, and a fresh open replays it:
/// returns what it replays, commands as "db:SET k<i> v" strings, RDB keys
/// as "db:KEY k<i>=v".
fn check_and_load(cfg: &JournalConfig) -> Vec<String> {
    let mut out = Vec::new();
    let outcome = check(&cfg.dir.join("appendonly.aof.manifest"), Repair::Nothing, &mut out).unwrap();
    assert_eq!(outcome, CheckOutcome::Valid, "{}", String::from_utf8_lossy(&out));
    let (_j, replay) = open(cfg);
    replay
        .filter(|item| !matches!(item, Ok(Replayed::Resize { .. })))
        .map(|item| match item.unwrap() {
            Replayed::Resize { .. } => unreachable!("filtered out"),
            Replayed::Key(e) => match e.value {
                RdbValue::String(v) => format!("{}:KEY {}={}", e.db, String::from_utf8_lossy(&e.key), String::from_utf8_lossy(&v)),
                other => panic!("{other:?}"),
            },
            Replayed::Command { db, argv } => format!("{db}:{}", strs(&argv).join(" ")),
            Replayed::ItemFlags { flags } => format!("FLAGS {flags}"),
        })
        .collect()
}

/// Copies the appendonly directory (as a crash would leave it, the journal
/// having synced what it holds) and loads the copy.
fn load_copy(cfg: &JournalConfig, j: &Journal) -> Vec<String> {
    j.flush_and_sync().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let copy = JournalConfig { dir: tmp.path().join("appendonlydir"), ..cfg.clone() };
    std::fs::create_dir_all(&copy.dir).unwrap();
    for name in files_in(&cfg.dir) {
        std::fs::copy(cfg.dir.join(&name), copy.dir.join(&name)).unwrap();
    }
    let got = check_and_load(&copy);
    drop(tmp);
    got
}

fn sets(db: usize, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{db}:SET k{i} v")).collect()
}

/// Writes `SET k<i> v` for each `i` in `range` (database 0) to the base.
fn base_of(rw: &mut keel_journal::Rewrite, range: std::ops::Range<usize>) {
    let mut buf = BaseBuffer::new();
    for i in range {
        buf.push(0, &[&b"SET"[..], format!("k{i}").as_bytes(), b"v"]);
    }
    rw.write(&mut buf).unwrap();
}

#[test]
fn rotation_then_commit_replaces_the_files_and_every_step_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (j, _) = open(&cfg);
    for i in 0..50 {
        set(&j, 3, i);
    }

    let prepared = j.prepare_rewrite().unwrap();
    // Step 1 done: the manifest lists the new, empty incr file.
    assert!(manifest(&cfg).contains("appendonly.aof.2.incr.aof seq 2 type i"), "{}", manifest(&cfg));
    assert_eq!(load_copy(&cfg, &j), sets(3, 0..50));
    assert!(matches!(j.prepare_rewrite(), Err(JournalError::RewriteInProgress)));

    let mut rw = prepared.start();
    assert_eq!(rw.at(), j.appended_lsn());
    // Records after S, in the same database: the new file must SELECT it.
    let last = (50..80).map(|i| set(&j, 3, i)).last().unwrap();
    assert!(wait_durable(&j, last, T));
    let old_incr = std::fs::read(cfg.dir.join("appendonly.aof.1.incr.aof")).unwrap();
    let new_incr = std::fs::read(cfg.dir.join("appendonly.aof.2.incr.aof")).unwrap();
    assert!(String::from_utf8_lossy(&old_incr).contains("k49") && !String::from_utf8_lossy(&old_incr).contains("k50"));
    assert!(new_incr.starts_with(b"*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n"), "{}", String::from_utf8_lossy(&new_incr));
    let all: Vec<String> = sets(3, 0..80);
    assert_eq!(load_copy(&cfg, &j), all);

    // Step 3: the base, as the server would write it (the state at S).
    let mut buf = BaseBuffer::new();
    for i in 0..50 {
        buf.push(3, &[&b"SET"[..], format!("k{i}").as_bytes(), b"v"]);
        if i % 10 == 9 {
            rw.write(&mut buf).unwrap();
            assert!(buf.is_empty());
        }
    }
    let temp: Vec<String> = files_in(&cfg.dir).into_iter().filter(|n| n.starts_with("temp-rewriteaof-bg-")).collect();
    assert_eq!(temp.len(), 1, "{:?}", files_in(&cfg.dir));
    assert_eq!(load_copy(&cfg, &j), all, "an unlisted temporary base is ignored");

    assert!(j.stats().aof_rewrite_in_progress);
    let old_len = |name: &str| std::fs::metadata(cfg.dir.join(name)).unwrap().len();
    let input = old_len("appendonly.aof.1.base.aof") + old_len("appendonly.aof.1.incr.aof");
    let summary = rw.commit().unwrap();
    assert_eq!(summary.base_name, "appendonly.aof.2.base.aof");
    assert_eq!(summary.input_bytes, input);
    assert_eq!(
        files_in(&cfg.dir),
        names(&["appendonly.aof.2.base.aof", "appendonly.aof.2.incr.aof", "appendonly.aof.manifest"])
    );
    assert_eq!(
        manifest(&cfg),
        "file appendonly.aof.2.base.aof seq 2 type b\nfile appendonly.aof.2.incr.aof seq 2 type i\n"
    );
    assert_eq!(load_copy(&cfg, &j), all);

    let st = j.stats();
    let base_len = std::fs::metadata(cfg.dir.join("appendonly.aof.2.base.aof")).unwrap().len();
    let incr_len = content_len(&cfg.dir.join("appendonly.aof.2.incr.aof"));
    assert_eq!((st.base_file_size, st.aof_current_size), (base_len, base_len + incr_len));
    assert_eq!(st.aof_base_size, base_len + incr_len);
    assert_eq!((st.aof_rewrites, st.aof_rewrite_in_progress, st.aof_last_rewrite_ok), (1, false, true));
    assert!(st.aof_last_rewrite_ms.is_some() && st.aof_current_rewrite_ms.is_none());

    // Appends go on, a reopen continues the new files, and sizes follow.
    let lsn = set(&j, 0, 80);
    assert!(wait_durable(&j, lsn, T));
    assert_eq!(j.sizes().current, content_len(&cfg.dir.join("appendonly.aof.2.incr.aof")) + base_len);
    drop(j);
    let mut expected = all.clone();
    expected.push("0:SET k80 v".into());
    assert_eq!(check_and_load(&cfg), expected);
    // A second rewrite after a reopen takes the next sequence numbers.
    let (j, _) = open(&cfg);
    let rw = j.start_rewrite().unwrap();
    rw.commit().unwrap();
    assert_eq!(
        files_in(&cfg.dir),
        names(&["appendonly.aof.3.base.aof", "appendonly.aof.3.incr.aof", "appendonly.aof.manifest"])
    );
    drop(j);
    assert_eq!(check_and_load(&cfg), Vec::<String>::new(), "an empty base replaces everything");
}

#[test]
fn abort_keeps_the_files_and_the_rotation() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::EverySec);
    let (j, _) = open(&cfg);
    for i in 0..10 {
        set(&j, 0, i);
    }
    let mut rw = j.start_rewrite().unwrap();
    for i in 10..20 {
        set(&j, 0, i);
    }
    let mut buf = BaseBuffer::new();
    buf.push(0, &["SET", "not", "kept"]);
    rw.write(&mut buf).unwrap();
    rw.abort();
    let st = j.stats();
    assert_eq!((st.aof_rewrites, st.aof_last_rewrite_ok, st.aof_rewrites_consecutive_failures), (1, false, 1));
    assert_eq!(
        files_in(&cfg.dir),
        names(&[
            "appendonly.aof.1.base.aof",
            "appendonly.aof.1.incr.aof",
            "appendonly.aof.2.incr.aof",
            "appendonly.aof.manifest"
        ])
    );
    // Dropping a prepared rewrite or a started one aborts too.
    drop(j.prepare_rewrite().unwrap());
    drop(j.start_rewrite().unwrap());
    for i in 20..30 {
        set(&j, 0, i);
    }
    assert_eq!(j.stats().aof_rewrites_consecutive_failures, 3);
    assert_eq!(load_copy(&cfg, &j), sets(0, 0..30));
    // The next rewrite that commits replaces all four incr files.
    let mut rw = j.start_rewrite().unwrap();
    base_of(&mut rw, 0..30);
    rw.commit().unwrap();
    assert_eq!(j.stats().aof_rewrites_consecutive_failures, 0);
    assert_eq!(
        files_in(&cfg.dir),
        names(&["appendonly.aof.2.base.aof", "appendonly.aof.5.incr.aof", "appendonly.aof.manifest"])
    );
    assert_eq!(load_copy(&cfg, &j), sets(0, 0..30));
}

/// What a crash leaves at each step, written by hand: every state loads,
/// passes keel-check-aof, and the next open tidies up.
#[test]
fn leftovers_of_an_interrupted_rewrite_load_and_are_cleaned_up() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    std::fs::create_dir_all(&cfg.dir).unwrap();
    let w = |name: &str, bytes: &[u8]| std::fs::write(cfg.dir.join(name), bytes).unwrap();
    w("appendonly.aof.1.base.aof", &resp(&["SET", "a", "1"]));
    w("appendonly.aof.1.incr.aof", &resp(&["SET", "b", "2"]));
    // A crash after the new incr file was created, before the manifest named it.
    w("appendonly.aof.2.incr.aof", &resp(&["SET", "junk", "x"]));
    // A temporary base, and a renamed base the manifest never listed.
    w("temp-rewriteaof-bg-123.aof", &resp(&["SET", "junk", "y"]));
    w("appendonly.aof.2.base.aof", &resp(&["SET", "junk", "z"]));
    w(
        "appendonly.aof.manifest",
        b"file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n",
    );
    assert_eq!(check_and_load(&cfg), ["0:SET a 1", "0:SET b 2"]);
    assert!(!files_in(&cfg.dir).contains("temp-rewriteaof-bg-123.aof"));
    // The next rotation reuses (truncates) the unlisted incr file and the
    // commit replaces the unlisted base.
    let (j, _) = open(&cfg);
    let mut rw = j.start_rewrite().unwrap();
    let mut buf = BaseBuffer::new();
    buf.push(0, &["SET", "a", "1"]);
    buf.push(0, &["SET", "b", "2"]);
    rw.write(&mut buf).unwrap();
    rw.commit().unwrap();
    drop(j);
    assert_eq!(check_and_load(&cfg), ["0:SET a 1", "0:SET b 2"]);

    // A crash after the commit's manifest, before the history was deleted:
    // some history files still there, one already gone.
    w("appendonly.aof.2.incr.aof", &resp(&["SET", "c", "3"]));
    w("appendonly.aof.3.base.aof", &resp(&["SET", "d", "4"]));
    w("appendonly.aof.3.incr.aof", &resp(&["SET", "e", "5"]));
    w(
        "appendonly.aof.manifest",
        b"file appendonly.aof.3.base.aof seq 3 type b\n\
          file appendonly.aof.2.base.aof seq 2 type h\n\
          file appendonly.aof.2.incr.aof seq 2 type h\n\
          file appendonly.aof.1.incr.aof seq 1 type h\n\
          file appendonly.aof.3.incr.aof seq 3 type i\n",
    );
    let mut out = Vec::new();
    assert_eq!(check(&cfg.dir.join("appendonly.aof.manifest"), Repair::Nothing, &mut out).unwrap(), CheckOutcome::Valid);
    assert_eq!(check_and_load(&cfg), ["0:SET d 4", "0:SET e 5"]);
    assert_eq!(
        files_in(&cfg.dir),
        names(&["appendonly.aof.3.base.aof", "appendonly.aof.3.incr.aof", "appendonly.aof.manifest"])
    );
    assert_eq!(
        manifest(&cfg),
        "file appendonly.aof.3.base.aof seq 3 type b\nfile appendonly.aof.3.incr.aof seq 3 type i\n"
    );
}

/// Appenders race with the instant S: a lock stands for the server's shard
/// locks, and under `everysec` and `no` each writes through as a worker
/// does. The base holds exactly the records before S; after the commit
/// every record is there exactly once, in order.
fn concurrent_rewrite(policy: FsyncPolicy) {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), policy);
    let (j, _) = open(&cfg);
    let j = Arc::new(j);
    // (next key to write, the lock appends happen under)
    let state = Arc::new(RwLock::new(0usize));
    let stop = Arc::new(AtomicBool::new(false));
    let appended = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..3)
        .map(|_| {
            let (j, state, stop, appended) = (j.clone(), state.clone(), stop.clone(), appended.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let lsn = {
                        let mut next = state.write().unwrap();
                        let lsn = set(&j, *next % 3, *next);
                        *next += 1;
                        lsn
                    };
                    // As a worker would before it replies (it leaves
                    // the bytes to the writer thread while files switch).
                    if policy != FsyncPolicy::Always {
                        j.write_through();
                    }
                    // As a client would: wait for the acknowledgement.
                    assert!(wait_durable(&j, lsn, T));
                    appended.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for round in 0..3 {
        let seen = appended.load(Ordering::Relaxed);
        assert!(wait_until(T, || appended.load(Ordering::Relaxed) > seen + 200));
        let prepared = j.prepare_rewrite().unwrap();
        let (mut rw, at_s) = {
            let next = state.write().unwrap();
            (prepared.start(), *next)
        };
        let mut buf = BaseBuffer::new();
        for i in 0..at_s {
            buf.push(i % 3, &[&b"SET"[..], format!("k{i}").as_bytes(), b"v"]);
            if buf.len() > 4096 {
                rw.write(&mut buf).unwrap();
            }
        }
        rw.write(&mut buf).unwrap();
        let seen = appended.load(Ordering::Relaxed);
        assert!(wait_until(T, || appended.load(Ordering::Relaxed) > seen + 100), "round {round}");
        rw.commit().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let total = *state.read().unwrap();
    j.flush_and_sync().unwrap();
    drop(j);
    let expected: Vec<String> = (0..total).map(|i| format!("{}:SET k{i} v", i % 3)).collect();
    assert_eq!(check_and_load(&cfg), expected);
}

#[test]
fn concurrent_appends_always() {
    concurrent_rewrite(FsyncPolicy::Always);
}

#[test]
fn concurrent_appends_everysec() {
    concurrent_rewrite(FsyncPolicy::EverySec);
}

#[test]
fn concurrent_appends_no() {
    concurrent_rewrite(FsyncPolicy::No);
}

/// Records appended before S while the disk fails stay in memory, still
/// bound for the old file; S switches only once they are written and
/// synced there, and nothing is acknowledged before that.
#[test]
fn a_failing_write_before_s_holds_the_switch_and_acknowledgements() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (tuning, fp) = faulty_tuning();
    let (j, _) = Journal::open_with(cfg.clone(), tuning).unwrap();
    let lsn = set(&j, 0, 0);
    assert!(wait_durable(&j, lsn, T));
    fp.fail(Op::Write, 1, u64::MAX, Fault::Enospc);
    let before_s = set(&j, 0, 1);
    assert!(wait_until(T, || j.health().is_err()));
    let durable = j.durable_lsn();
    let rw = j.start_rewrite().unwrap();
    let after_s = set(&j, 0, 2);
    assert!(before_s <= rw.at() && rw.at() < after_s);
    // The commit waits for the switch; a failing disk makes it give up.
    assert!(matches!(rw.commit(), Err(JournalError::Poisoned(_))));
    assert_eq!(j.durable_lsn(), durable, "nothing acknowledged while failing");
    fp.clear();
    assert!(wait_durable(&j, after_s, T));
    assert!(wait_until(T, || j.health().is_ok()));
    let old = std::fs::read(cfg.dir.join("appendonly.aof.1.incr.aof")).unwrap();
    let new = std::fs::read(cfg.dir.join("appendonly.aof.2.incr.aof")).unwrap();
    assert!(String::from_utf8_lossy(&old).contains("k1"), "a record before S went to the old file");
    assert!(String::from_utf8_lossy(&new).contains("k2") && !String::from_utf8_lossy(&new).contains("k1"));
    assert_eq!(load_copy(&cfg, &j), sets(0, 0..3));
    // The next rewrite works.
    let mut rw = j.start_rewrite().unwrap();
    base_of(&mut rw, 0..3);
    rw.commit().unwrap();
    assert_eq!(load_copy(&cfg, &j), sets(0, 0..3));
}

/// The old file's last fsync fails (made by the switch under `always` and
/// `no`, by the fsync thread under `everysec`): the file is repaired and
/// synced again; records on both sides survive exactly once.
#[test]
fn a_failing_fsync_at_the_switch_is_retried() {
    for policy in [FsyncPolicy::Always, FsyncPolicy::EverySec, FsyncPolicy::No] {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path(), policy);
        let (tuning, fp) = faulty_tuning();
        let (j, _) = Journal::open_with(cfg.clone(), tuning).unwrap();
        let lsn = (0..20).map(|i| set(&j, 0, i)).last().unwrap();
        assert!(wait_durable(&j, lsn, T));
        if policy == FsyncPolicy::Always {
            // Synced already: the switch has nothing to sync. Leave one
            // record unsynced by failing its fsync.
            fp.fail(Op::Sync, 1, 2, Fault::Eio);
            set(&j, 0, 20);
        } else {
            fp.fail(Op::Sync, 1, 2, Fault::Eio);
            set(&j, 0, 20);
            assert!(wait_durable(&j, j.appended_lsn(), T));
        }
        let prepared = j.prepare_rewrite().unwrap();
        let rw = prepared.start();
        let last = (21..40).map(|i| set(&j, 0, i)).last().unwrap();
        assert!(wait_durable(&j, last, T), "{policy:?}: durable advances once the retry succeeds");
        // Both failures spent, so that none falls on the base's sync.
        assert!(wait_until(T, || j.stats().fsync_errors >= 2), "{policy:?}: the fault fired");
        assert!(wait_until(T, || j.health().is_ok()), "{policy:?}");
        let mut rw = rw;
        base_of(&mut rw, 0..21);
        rw.commit().unwrap();
        j.flush_and_sync().unwrap();
        drop(j);
        assert_eq!(check_and_load(&cfg), sets(0, 0..40), "{policy:?}");
    }
}

/// Under `everysec` and `no` a switch does not wait for the old file's
/// fdatasync, as Redis hands its old incr file to a background fsync:
/// records after S are written while that sync hangs. The fsync thread
/// syncs the old file before the new one; when that fails, the old file is
/// written again from memory (under `everysec`, which keeps what is not
/// synced) and synced once the disk works, and stays whole for a rewrite
/// that is then abandoned.
#[test]
fn a_switch_leaves_the_old_file_to_the_fsync_thread() {
    for policy in [FsyncPolicy::EverySec, FsyncPolicy::No] {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path(), policy);
        let (tuning, fp) = faulty_tuning();
        let (j, _) = Journal::open_with(cfg.clone(), tuning).unwrap();
        let before = (0..20).map(|i| set(&j, 0, i)).last().unwrap();
        assert!(wait_durable(&j, before, T));
        fp.hold(Op::Sync);
        let rw = j.prepare_rewrite().unwrap().start();
        let last = (20..40).map(|i| set(&j, 0, i)).last().unwrap();
        let written = wait_durable(&j, last, T);
        // The sync that waits fails once let go.
        fp.fail(Op::Sync, 1, 1, Fault::Eio);
        fp.release();
        assert!(written, "{policy:?}: written after S while the old file's sync hangs");
        assert!(wait_until(T, || j.stats().fsync_errors >= 1), "{policy:?}: the fault fired");
        assert!(wait_until(T, || j.health().is_ok()), "{policy:?}: {:?}", j.health());
        rw.abort();
        j.flush_and_sync().unwrap();
        drop(j);
        assert_eq!(check_and_load(&cfg), sets(0, 0..40), "{policy:?}");
    }
}

/// A failing base write aborts the rewrite and leaves the journal as it
/// was; the journal's own writes are unaffected.
#[test]
fn a_failing_base_write_aborts_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (tuning, fp) = faulty_tuning();
    let (j, _) = Journal::open_with(cfg.clone(), tuning).unwrap();
    let lsn = (0..5).map(|i| set(&j, 0, i)).last().unwrap();
    assert!(wait_durable(&j, lsn, T));
    let mut rw = j.start_rewrite().unwrap();
    // Nothing else writes now: the next write is the base's.
    assert!(wait_until(T, || j.stats().durable_lsn == j.appended_lsn()));
    fp.fail(Op::Write, 1, 1, Fault::Enospc);
    let mut buf = BaseBuffer::new();
    buf.push(0, &["SET", "x", "y"]);
    assert!(matches!(rw.write(&mut buf), Err(JournalError::Io { .. })));
    drop(rw);
    assert!(j.health().is_ok());
    let st = j.stats();
    assert!(!st.aof_last_rewrite_ok && !st.aof_rewrite_in_progress);
    let lsn = (5..10).map(|i| set(&j, 0, i)).last().unwrap();
    assert!(wait_durable(&j, lsn, T));
    assert!(!files_in(&cfg.dir).iter().any(|n| n.starts_with("temp-")));
    assert_eq!(load_copy(&cfg, &j), sets(0, 0..10));
    // A failing fsync of the base fails the commit the same way.
    let mut rw = j.start_rewrite().unwrap();
    assert!(wait_until(T, || j.stats().durable_lsn == j.appended_lsn()));
    rw.write(&mut buf).unwrap();
    fp.fail(Op::Sync, 1, 1, Fault::Eio);
    assert!(matches!(rw.commit(), Err(JournalError::Io { .. })));
    assert!(!files_in(&cfg.dir).iter().any(|n| n.starts_with("temp-") || n.contains(".2.base")));
    assert_eq!(load_copy(&cfg, &j), sets(0, 0..10));
}

/// Writes keys k0..n of database `db` as an RDB base through `rw`.
fn write_rdb_base(rw: &mut keel_journal::Rewrite, db: u64, n: usize) {
    let options = WriteOptions { aof_base: true, ..WriteOptions::default() };
    let mut w = RdbWriter::new(std::io::BufWriter::new(rw.base_writer()), options).unwrap();
    w.select_db(db, n as u64, 0).unwrap();
    for i in 0..n {
        w.write_key(format!("k{i}").as_bytes(), &RdbValue::String(b"v".to_vec()), None).unwrap();
    }
    w.finish().unwrap().into_inner().map_err(|e| e.into_error()).unwrap();
}

#[test]
fn an_rdb_base_is_named_listed_checked_and_replayed_as_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = JournalConfig { base_format: BaseFormat::Rdb, ..config(tmp.path(), FsyncPolicy::Always) };
    let (j, replay) = open(&cfg);
    assert_eq!(replay.count(), 0);
    // A fresh directory starts with an empty RDB base, as Redis 7.0's.
    assert_eq!(
        manifest(&cfg),
        "file appendonly.aof.1.base.rdb seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
    );
    assert!(std::fs::read(cfg.dir.join("appendonly.aof.1.base.rdb")).unwrap().starts_with(b"REDIS0010"));
    for i in 0..20 {
        set(&j, 2, i);
    }
    let options = RewriteOptions { base_format: BaseFormat::Rdb, incr: IncrListing::AtOnce, incremental_fsync: true };
    let mut rw = j.prepare_rewrite_with(options).unwrap().start();
    let last = (20..25).map(|i| set(&j, 2, i)).last().unwrap();
    write_rdb_base(&mut rw, 2, 20);
    let summary = rw.commit().unwrap();
    assert_eq!(summary.base_name, "appendonly.aof.2.base.rdb");
    assert!(wait_durable(&j, last, T));
    assert_eq!(
        manifest(&cfg),
        "file appendonly.aof.2.base.rdb seq 2 type b\nfile appendonly.aof.2.incr.aof seq 2 type i\n"
    );
    assert!(j.sizes().base_rdb);
    let mut expected: Vec<String> = (0..20).map(|i| format!("2:KEY k{i}=v")).collect();
    expected.extend(sets(2, 20..25));
    assert_eq!(load_copy(&cfg, &j), expected);
    let (j2, replay) = {
        drop(j);
        open(&cfg)
    };
    let items: Vec<Replayed> = replay.map(|r| r.unwrap()).collect();
    assert_eq!(items.len(), 26, "20 keys, 5 commands and the base's sizing hint");
    assert!(matches!(items[0], Replayed::Resize { db: 2, keys: 20, with_expiry: 0 }), "{:?}", items[0]);
    assert!(j2.sizes().base_rdb);

    // A damaged RDB base is reported by the check, never "fixed".
    let base = cfg.dir.join("appendonly.aof.2.base.rdb");
    let mut bytes = std::fs::read(&base).unwrap();
    let at = bytes.len() - 12;
    bytes[at] ^= 0xff;
    std::fs::write(&base, &bytes).unwrap();
    let mut out = Vec::new();
    let outcome = check(&cfg.dir.join("appendonly.aof.manifest"), Repair::Fix, &mut out).unwrap();
    let text = String::from_utf8_lossy(&out);
    assert_eq!(outcome, CheckOutcome::Invalid, "{text}");
    assert!(text.contains("RDB preamble of AOF file is not sane"), "{text}");
    assert_eq!(std::fs::read(&base).unwrap(), bytes, "left as it was");
    drop(j2);
    let (_j, replay) = open(&cfg);
    let err = replay.filter_map(Result::err).next().expect("an error");
    assert!(matches!(&err, JournalError::RdbBase { file, .. } if *file == base), "{err}");
}

/// Replay's progress (INFO loading_loaded_bytes) moves through an RDB
/// base as through commands, and ends at the total.
#[test]
fn replay_progress_moves_through_an_rdb_base() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = JournalConfig { base_format: BaseFormat::Rdb, ..config(tmp.path(), FsyncPolicy::Always) };
    let (j, _) = open(&cfg);
    let options = RewriteOptions { base_format: BaseFormat::Rdb, incr: IncrListing::AtOnce, incremental_fsync: true };
    let mut rw = j.prepare_rewrite_with(options).unwrap().start();
    write_rdb_base(&mut rw, 0, 20_000);
    rw.commit().unwrap();
    let last = (0..10).map(|i| set(&j, 1, i)).last().unwrap();
    assert!(wait_durable(&j, last, T));
    drop(j);
    let (_j, mut replay) = open(&cfg);
    let total = replay.total_bytes();
    let mut seen = Vec::new();
    while let Some(item) = replay.next() {
        item.unwrap();
        seen.push(replay.loaded_bytes());
    }
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "progress never goes back");
    assert!(seen[0] < total / 2 && seen[10_000] > 0 && seen[10_000] < total, "{} {} of {total}", seen[0], seen[10_000]);
    assert_eq!(replay.loaded_bytes(), total);
    assert_eq!((replay.keys(), replay.commands()), (20_000, 10));
    let rdb = std::fs::metadata(cfg.dir.join("appendonly.aof.2.base.rdb")).unwrap().len();
    assert_eq!(replay.rdb_bytes(), rdb);
}

#[test]
fn an_incr_file_listed_at_commit_is_invisible_until_its_base_is() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (j, _) = open(&cfg);
    for i in 0..5 {
        set(&j, 0, i);
    }
    let before = manifest(&cfg);
    let at_commit = RewriteOptions { base_format: BaseFormat::Rdb, incr: IncrListing::AtCommit, incremental_fsync: true };
    // A first attempt fails (is aborted) after records went to its file.
    let rw = j.prepare_rewrite_with(at_commit).unwrap().start();
    let last = (5..8).map(|i| set(&j, 0, i)).last().unwrap();
    assert!(wait_durable(&j, last, T));
    assert_eq!(manifest(&cfg), before, "the new incr file is not listed");
    assert!(cfg.dir.join("temp-appendonly.aof.incr").exists());
    rw.abort();
    assert_eq!(load_copy(&cfg, &j), sets(0, 0..5), "a crash now loads the old files alone");

    // The next rewrite, even an ordinary one, lists at commit too, under
    // the seq that follows the files it replaces.
    let mut rw = j.prepare_rewrite().unwrap().start();
    assert_eq!(manifest(&cfg), before);
    let last = (8..10).map(|i| set(&j, 0, i)).last().unwrap();
    assert!(wait_durable(&j, last, T));
    base_of(&mut rw, 0..8);
    let summary = rw.commit().unwrap();
    assert_eq!(summary.base_name, "appendonly.aof.2.base.aof");
    assert_eq!(
        manifest(&cfg),
        "file appendonly.aof.2.base.aof seq 2 type b\nfile appendonly.aof.2.incr.aof seq 2 type i\n"
    );
    assert_eq!(
        files_in(&cfg.dir),
        names(&["appendonly.aof.2.base.aof", "appendonly.aof.2.incr.aof", "appendonly.aof.manifest"]),
        "the failed attempt's unlisted file is gone"
    );
    assert_eq!(load_copy(&cfg, &j), sets(0, 0..10));
    // Back to normal: the next rewrite lists its incr file at once.
    let prepared = j.prepare_rewrite().unwrap();
    assert!(manifest(&cfg).contains("appendonly.aof.3.incr.aof seq 3 type i"));
    prepared.start().abort();
}

fn options(incr: IncrListing) -> RewriteOptions {
    RewriteOptions { base_format: BaseFormat::Aof, incr, incremental_fsync: true }
}

/// Opened while `appendonly no`, a fresh directory stays empty but for the
/// unlisted file; turning the AOF on then writes seq 1, as Redis does.
#[test]
fn an_idle_journal_lists_nothing_until_its_first_rewrite_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = JournalConfig { idle: true, ..config(tmp.path(), FsyncPolicy::Always) };
    let (j, replay) = open(&cfg);
    assert_eq!(replay.count(), 0);
    assert_eq!(files_in(&cfg.dir), names(&["temp-appendonly.aof.incr"]));
    let mut rw = j.prepare_rewrite_with(options(IncrListing::AtCommit)).unwrap().start();
    let last = (3..5).map(|i| set(&j, 0, i)).last().unwrap();
    assert!(wait_durable(&j, last, T));
    let unlisted = files_in(&cfg.dir).into_iter().filter(|n| n.starts_with("temp-appendonly.aof.incr")).collect();
    assert_eq!(names(&["temp-appendonly.aof.incr", "temp-appendonly.aof.incr.1"]), unlisted);
    base_of(&mut rw, 0..3);
    assert_eq!(rw.commit().unwrap().base_name, "appendonly.aof.1.base.aof");
    assert_eq!(
        manifest(&cfg),
        "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
    );
    assert_eq!(
        files_in(&cfg.dir),
        names(&["appendonly.aof.1.base.aof", "appendonly.aof.1.incr.aof", "appendonly.aof.manifest"])
    );
    // The writer goes on in the renamed file.
    let last = set(&j, 0, 5);
    assert!(wait_durable(&j, last, T));
    assert_eq!(load_copy(&cfg, &j), sets(0, 0..6));

    // Opened idle again over that directory: the listed files stay as
    // they are (the incr file is not scanned or cut, none is added).
    drop(j);
    let before = manifest(&cfg);
    let incr_len = std::fs::metadata(cfg.dir.join("appendonly.aof.1.incr.aof")).unwrap().len();
    let (_j, _) = open(&cfg);
    assert_eq!(manifest(&cfg), before);
    assert_eq!(std::fs::metadata(cfg.dir.join("appendonly.aof.1.incr.aof")).unwrap().len(), incr_len);
    assert!(files_in(&cfg.dir).contains("temp-appendonly.aof.incr"));
}

/// BGREWRITEAOF with the AOF off: the base alone stays listed, and turning
/// the AOF on afterwards numbers incr files from 1 again (Redis's seqs come
/// from the manifest).
#[test]
fn a_rewrite_that_never_lists_its_incr_file_leaves_the_base_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (j, _) = open(&cfg);
    let last = (0..4).map(|i| set(&j, 0, i)).last().unwrap();
    assert!(wait_durable(&j, last, T));
    let mut rw = j.prepare_rewrite_with(options(IncrListing::Never)).unwrap().start();
    base_of(&mut rw, 0..4);
    rw.commit().unwrap();
    assert_eq!(manifest(&cfg), "file appendonly.aof.2.base.aof seq 2 type b\n");
    assert_eq!(load_copy(&cfg, &j), sets(0, 0..4));

    let mut rw = j.prepare_rewrite_with(options(IncrListing::AtCommit)).unwrap().start();
    let last = set(&j, 0, 4);
    assert!(wait_durable(&j, last, T));
    base_of(&mut rw, 0..4);
    rw.commit().unwrap();
    assert_eq!(
        manifest(&cfg),
        "file appendonly.aof.3.base.aof seq 3 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
    );
    assert_eq!(
        files_in(&cfg.dir),
        names(&["appendonly.aof.3.base.aof", "appendonly.aof.1.incr.aof", "appendonly.aof.manifest"])
    );
    assert_eq!(load_copy(&cfg, &j), sets(0, 0..5));
}

/// `aof-disable-auto-gc yes`: replaced files stay, listed as history in
/// Redis's order; setting it back to no deletes them.
#[test]
fn kept_history_is_listed_in_redis_order_until_collected() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = JournalConfig { keep_history: true, ..config(tmp.path(), FsyncPolicy::Always) };
    let (j, _) = open(&cfg);
    for n in 0..2 {
        let mut rw = j.start_rewrite().unwrap();
        let last = set(&j, 0, n);
        assert!(wait_durable(&j, last, T));
        base_of(&mut rw, 0..n);
        rw.commit().unwrap();
    }
    assert_eq!(
        manifest(&cfg),
        "file appendonly.aof.3.base.aof seq 3 type b\n\
         file appendonly.aof.2.incr.aof seq 2 type h\n\
         file appendonly.aof.2.base.aof seq 2 type h\n\
         file appendonly.aof.1.incr.aof seq 1 type h\n\
         file appendonly.aof.1.base.aof seq 1 type h\n\
         file appendonly.aof.3.incr.aof seq 3 type i\n"
    );
    assert_eq!(files_in(&cfg.dir).len(), 7, "six files and the manifest");
    assert_eq!(load_copy(&cfg, &j), sets(0, 0..2));
    j.set_keep_history(false);
    assert_eq!(
        manifest(&cfg),
        "file appendonly.aof.3.base.aof seq 3 type b\nfile appendonly.aof.3.incr.aof seq 3 type i\n"
    );
    assert_eq!(
        files_in(&cfg.dir),
        names(&["appendonly.aof.3.base.aof", "appendonly.aof.3.incr.aof", "appendonly.aof.manifest"])
    );
}

/// An RDB base holding module aux data stops the replay, naming the file,
/// as Redis without the module refuses it.
#[test]
fn module_aux_data_in_an_rdb_base_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = JournalConfig { base_format: BaseFormat::Rdb, ..config(tmp.path(), FsyncPolicy::Always) };
    drop(open(&cfg));
    let base = cfg.dir.join("appendonly.aof.1.base.rdb");
    let good = std::fs::read(&base).unwrap();
    let mut bytes = good[..good.len() - 9].to_vec();
    bytes.extend_from_slice(&[0xF7, 0x81]);
    bytes.extend_from_slice(&(1u64 << 40 | 1 << 10).to_be_bytes());
    bytes.extend_from_slice(&[0x02, 0x01, 0x00, 0xFF]);
    bytes.extend_from_slice(&[0; 8]);
    std::fs::write(&base, &bytes).unwrap();
    let (_j, replay) = open(&cfg);
    let err = replay.filter_map(Result::err).next().expect("an error");
    assert!(
        matches!(&err, JournalError::RdbBase { file, reason } if *file == base && reason.contains("no matching module")),
        "{err}"
    );
}
