//! Append, reopen, replay; group commit under many threads; durable LSNs.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use keel_journal::FsyncPolicy;

const T: Duration = Duration::from_secs(10);

#[test]
fn fresh_directory_looks_like_redis() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (j, replay) = open(&cfg);
    assert_eq!(replay_all(replay).len(), 0);
    assert_eq!(j.appended_lsn(), 0);
    assert_eq!(j.durable_lsn(), 0);
    drop(j);
    let manifest = std::fs::read_to_string(cfg.dir.join("appendonly.aof.manifest")).unwrap();
    assert_eq!(
        manifest,
        "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
    );
    assert_eq!(std::fs::metadata(base_path(&cfg)).unwrap().len(), 0);
    assert!(!cfg.dir.join("temp-appendonly.aof.manifest").exists());
}

#[test]
fn round_trip_every_policy() {
    for policy in [FsyncPolicy::Always, FsyncPolicy::EverySec, FsyncPolicy::No] {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path(), policy);
        // Past the size at which appenders seal a batch (1 MB).
        let big = vec![0xffu8; 1_500_000];
        let (j, _) = open(&cfg);
        let l1 = j.append(0, &[&b"SET"[..], b"a", b"1"]);
        let l2 = j.append(0, &[&b"SET"[..], b"bin\r\n\0", &big]);
        let l3 = j.append(5, &[&b"RPUSH"[..], b"l", b"x", b"y"]);
        let l4 = j.append_transaction(&[
            (5, vec![b"INCR".to_vec(), b"n".to_vec()]),
            (2, vec![b"DEL".to_vec(), b"a".to_vec()]),
        ]);
        let l5 = j.append(2, &[b"PING"]);
        assert!(l1 < l2 && l2 < l3 && l3 < l4 && l4 < l5);
        j.flush_and_sync().unwrap();
        assert_eq!(j.durable_lsn(), l5);
        assert_eq!(j.stats().aof_current_size, l5);
        drop(j);
        let file_len = std::fs::metadata(incr_path(&cfg)).unwrap().len();
        assert_eq!(file_len, l5, "LSN is the byte position in the stream");

        let (j, replay) = open(&cfg);
        assert_eq!(j.appended_lsn(), l5, "LSNs continue from the recovered size");
        assert_eq!(j.durable_lsn(), l5);
        let got = replay_all(replay);
        let flat: Vec<(usize, Vec<String>)> =
            got.iter().map(|(db, a)| (*db, strs(a))).collect();
        assert_eq!(flat[0], (0, vec!["SET".into(), "a".into(), "1".into()]));
        assert_eq!(got[1].1[1], b"bin\r\n\0");
        assert_eq!(got[1].1[2], big);
        assert_eq!(flat[2], (5, vec!["RPUSH".into(), "l".into(), "x".into(), "y".into()]));
        assert_eq!(flat[3], (5, vec!["MULTI".into()]));
        assert_eq!(flat[4], (5, vec!["INCR".into(), "n".into()]));
        assert_eq!(flat[5], (2, vec!["DEL".into(), "a".into()]));
        assert_eq!(flat[6].1, vec!["EXEC".to_string()]);
        assert_eq!(flat[7], (2, vec!["PING".into()]));
        assert_eq!(flat.len(), 8, "{policy:?}");

        // Appending after a reopen starts with a SELECT again, so the next
        // reopen replays the right db even though each file starts in db 0.
        let l6 = j.append(2, &[&b"SET"[..], b"z", b"9"]);
        j.flush_and_sync().unwrap();
        assert!(l6 > l5);
        drop(j);
        let (_j, replay) = open(&cfg);
        let got = replay_all(replay);
        assert_eq!(got.last().unwrap().0, 2);
        assert_eq!(strs(&got.last().unwrap().1), vec!["SET", "z", "9"]);
    }
}

/// A record's memcached flags come back right after it on replay, and the
/// file stays one Redis loads (the flags are an annotation line).
#[test]
fn item_flags_replay_after_their_record() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (j, _) = open(&cfg);
    j.append(0, &[&b"SET"[..], b"a", b"1"]);
    let lsn = j.append_with_item_flags(3, &[&b"SET"[..], b"b", b"2"], 42);
    assert!(wait_durable(&j, lsn, T));
    drop(j);
    let incr = std::fs::read(cfg.dir.join("appendonly.aof.1.incr.aof")).unwrap();
    assert!(incr.windows(16).any(|w| w == b"#item-flags:42\r\n"), "{}", String::from_utf8_lossy(&incr));
    let (_j, replay) = open(&cfg);
    let items: Vec<String> = replay
        .map(|r| match r.unwrap() {
            keel_journal::Replayed::ItemFlags { flags } => format!("flags {flags}"),
            other => {
                let (db, argv) = command(other);
                format!("{db}:{}", strs(&argv).join(" "))
            }
        })
        .collect();
    assert_eq!(items, ["0:SET a 1", "3:SET b 2", "flags 42"]);
}

#[test]
fn durable_lsn_is_monotonic_and_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (j, _) = open(&cfg);
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let s2 = Arc::clone(&seen);
    j.on_durable(Box::new(move |lsn| s2.lock().push(lsn)));
    let mut last = 0;
    for i in 0..200 {
        let lsn = j.append(0, &[&b"SET"[..], b"k", format!("{i}").as_bytes()]);
        assert!(lsn > last);
        last = lsn;
        if i % 50 == 0 {
            assert!(wait_durable(&j, lsn, Duration::from_secs(10)));
        }
    }
    assert!(wait_durable(&j, last, Duration::from_secs(10)));
    // The writer publishes the durable position, then calls on_durable:
    // the callback may trail wait_durable by a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while seen.lock().last() != Some(&last) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let seen = seen.lock().clone();
    assert!(!seen.is_empty());
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "on_durable is strictly increasing");
    assert_eq!(*seen.last().unwrap(), last);
    let st = j.stats();
    assert_eq!(st.durable_lsn, last);
    assert_eq!(st.pending_bytes, 0);
    assert!(st.fsync_count >= 1 && st.fsync_count <= 200);
    assert!(st.aof_last_write_status_ok);
    j.health().unwrap();
}

/// The writer reports each round of writes as `aof-write`, and each
/// fdatasync as `aof-fsync-always` under `always` only (Redis's latency
/// events), before the position they make durable is published.
#[test]
fn the_writer_reports_its_writes_and_always_syncs() {
    for policy in [FsyncPolicy::Always, FsyncPolicy::EverySec] {
        let tmp = tempfile::tempdir().unwrap();
        let (j, _) = open(&config(tmp.path(), policy));
        let events = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen = Arc::clone(&events);
        j.on_latency(Box::new(move |event, took| seen.lock().push((event, took))));
        let lsn = j.append(0, &[&b"SET"[..], b"k", b"v"]);
        assert!(wait_durable(&j, lsn, T));
        let events = events.lock().clone();
        let count = |name: &str| events.iter().filter(|(event, _)| *event == name).count();
        assert!(count("aof-write") >= 1, "{policy:?}: {events:?}");
        assert_eq!(count("aof-fsync-always") >= 1, policy == FsyncPolicy::Always, "{policy:?}: {events:?}");
        assert_eq!(count("aof-write") + count("aof-fsync-always"), events.len(), "{events:?}");
    }
}

/// Many threads append concurrently and wait for durability like clients:
/// every record is replayed exactly once, each thread's records in order,
/// and the file's order is LSN order. Values of 2 KB make 24 MB in all, so
/// appenders also seal batches at 1 MB between two writes.
#[test]
fn group_commit_many_threads() {
    for policy in [FsyncPolicy::Always, FsyncPolicy::EverySec] {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path(), policy);
        let (j, _) = open(&cfg);
        let j = Arc::new(j);
        let threads = 8;
        let per_thread = 1500;
        let max_wait = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let j = Arc::clone(&j);
                let max_wait = Arc::clone(&max_wait);
                std::thread::spawn(move || {
                    let mut lsns = Vec::with_capacity(per_thread);
                    for i in 0..per_thread {
                        let key = format!("t{t}");
                        let val = format!("{i}:{}", "v".repeat(2000));
                        let lsn = j.append(t % 3, &[b"RPUSH", key.as_bytes(), val.as_bytes()]);
                        lsns.push(lsn);
                        // Every 10th append waits like a client would.
                        if i % 10 == 0 {
                            let t0 = std::time::Instant::now();
                            assert!(wait_durable(&j, lsn, Duration::from_secs(20)));
                            max_wait.fetch_max(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
                        }
                    }
                    lsns
                })
            })
            .collect();
        let lsns: Vec<Vec<u64>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        for l in &lsns {
            assert!(l.windows(2).all(|w| w[0] < w[1]));
        }
        let mut all: Vec<u64> = lsns.iter().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), threads * per_thread, "LSNs are unique");
        j.flush_and_sync().unwrap();
        let st = j.stats();
        eprintln!(
            "{policy:?}: {} batches, {:.1} records/batch avg, {} max, {} fsyncs, p50 {} us, p99 {} us",
            st.batch_count,
            st.batch_records_avg,
            st.batch_records_max,
            st.fsync_count,
            st.fsync_latency_p50_us,
            st.fsync_latency_p99_us
        );
        assert!(st.batch_records_max > 1, "group commit gathered more than one record");
        drop(Arc::try_unwrap(j).unwrap());

        let (_j, replay) = open(&cfg);
        let mut next: HashMap<String, u64> = HashMap::new();
        let mut count = 0;
        for (db, argv) in replay_all(replay) {
            let argv = strs(&argv);
            assert_eq!(argv[0], "RPUSH");
            let t: usize = argv[1][1..].parse().unwrap();
            assert_eq!(db, t % 3, "SELECT tracked across interleaved threads");
            let want = next.entry(argv[1].clone()).or_insert(0);
            let (i, pad) = argv[2].split_once(':').unwrap();
            assert_eq!((i.parse::<u64>().unwrap(), pad.len()), (*want, 2000), "per-thread order");
            *want += 1;
            count += 1;
        }
        assert_eq!(count, threads * per_thread, "every record exactly once");
    }
}

/// Appenders that write through (workers before they send a turn's
/// replies under `everysec` and `no`), many at once beside the writer
/// thread: each finds its records written when the call returns, and the
/// files hold every record once, in each appender's order.
#[test]
fn write_through_from_many_threads() {
    for policy in [FsyncPolicy::EverySec, FsyncPolicy::No] {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path(), policy);
        let (j, _) = open(&cfg);
        let j = Arc::new(j);
        let (threads, per_thread) = (8, 1000);
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let j = Arc::clone(&j);
                std::thread::spawn(move || {
                    for i in 0..per_thread {
                        let key = format!("t{t}");
                        let lsn = j.append(0, &[b"RPUSH", key.as_bytes(), i.to_string().as_bytes()]);
                        if i % 3 == 0 {
                            assert!(j.write_through(), "{policy:?}: written through");
                            assert!(j.durable_lsn() >= lsn, "{policy:?}: a record written through is written");
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        drop(Arc::try_unwrap(j).unwrap());
        let (_j, replay) = open(&cfg);
        let mut next: HashMap<String, u64> = HashMap::new();
        let records = replay_all(replay);
        for (_, argv) in &records {
            let argv = strs(argv);
            let want = next.entry(argv[1].clone()).or_insert(0);
            assert_eq!(argv[2].parse::<u64>().unwrap(), *want, "per-thread order");
            *want += 1;
        }
        assert_eq!(records.len(), threads * per_thread as usize, "every record exactly once");
    }
}

#[test]
fn backlog_is_reported_not_blocking() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (tuning, fp) = faulty_tuning();
    let tuning = keel_journal::Tuning { backlog_max_bytes: 10_000, ..tuning };
    // The disk is "full": nothing becomes durable.
    fp.fail(keel_journal::testing::Op::Write, 1, u64::MAX, keel_journal::testing::Fault::Enospc);
    let (j, _) = keel_journal::Journal::open_with(cfg.clone(), tuning).unwrap();
    let t0 = std::time::Instant::now();
    for i in 0..1000 {
        j.append(0, &[&b"SET"[..], b"k", format!("{i:0100}").as_bytes()]);
    }
    assert!(t0.elapsed() < Duration::from_secs(2), "appenders never wait for the disk");
    assert!(j.health().is_err());
    assert!(j.stats().pending_bytes > 10_000);
    fp.clear();
    let last = j.appended_lsn();
    assert!(wait_durable(&j, last, Duration::from_secs(10)));
    assert!(wait_until(Duration::from_secs(5), || j.health().is_ok()));
}

#[test]
fn the_fsync_policy_changes_at_run_time() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (j, _) = open(&cfg);
    let set = |i: u32| j.append(0, &[&b"SET"[..], format!("k{i}").as_bytes(), b"v"]);
    let fsyncs = || j.stats().fsync_count;
    assert!(wait_durable(&j, set(0), T));
    let synced_once = fsyncs();
    assert!(synced_once >= 1);

    // `no`: durable once written, and nothing fsyncs.
    j.set_fsync(FsyncPolicy::No);
    assert_eq!(j.fsync(), FsyncPolicy::No);
    let last = (1..20).map(set).last().unwrap();
    assert!(wait_durable(&j, last, T));
    assert_eq!(fsyncs(), synced_once);

    // `everysec`: the fsync thread, idle until now, syncs in the background.
    j.set_fsync(FsyncPolicy::EverySec);
    assert!(wait_durable(&j, set(20), T));
    assert!(wait_until(T, || fsyncs() > synced_once), "the fsync thread never synced");

    // Back to `always`: each acknowledgement waits for an fdatasync again.
    j.set_fsync(FsyncPolicy::Always);
    let before = fsyncs();
    assert!(wait_durable(&j, set(21), T));
    assert!(fsyncs() > before);
    drop(j);
    let (_j, replay) = open(&cfg);
    assert_eq!(replay_all(replay).len(), 22);
}

/// `suspend_fsync` (Redis's `no-appendfsync-on-rewrite` while a save runs):
/// under `Always`, records are acknowledged once written, with no
/// fdatasync, and syncing resumes after; an explicit request still syncs.
#[test]
fn suspended_fsync_acknowledges_what_is_written_then_syncs_again() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (j, _) = open(&cfg);
    let set = |i: u32| j.append(0, &[&b"SET"[..], format!("k{i}").as_bytes(), b"v"]);
    assert!(wait_durable(&j, set(0), Duration::from_secs(10)));
    let synced = j.stats().fsync_count;
    j.suspend_fsync(true);
    for i in 1..20 {
        assert!(wait_durable(&j, set(i), Duration::from_secs(10)));
    }
    assert_eq!(j.stats().fsync_count, synced, "no fdatasync while suspended");
    j.flush_and_sync().unwrap();
    assert_eq!(j.stats().fsync_count, synced + 1, "an explicit request syncs");
    set(20);
    j.suspend_fsync(false);
    assert!(wait_durable(&j, set(21), Duration::from_secs(10)));
    assert!(j.stats().fsync_count > synced + 1, "syncing resumed");
}

/// `sync_gap`: while appends keep coming, fdatasyncs are at least the gap
/// apart; a client that waits for each of its writes alone never waits for
/// the gap.
#[test]
fn sync_gap_spaces_syncs_only_while_appends_go_on() {
    let tmp = tempfile::tempdir().unwrap();
    let gap = Duration::from_millis(50);
    let cfg = keel_journal::JournalConfig { sync_gap: gap, ..config(tmp.path(), FsyncPolicy::Always) };
    let (j, _) = open(&cfg);
    let j = Arc::new(j);

    // Ten gaps' worth of appends by two threads that never wait: tens of
    // syncs at most (a cycle that no append overlapped goes without a gap;
    // on a fast file system some do), where without the gap each append
    // of the thousands would find a sync of its own.
    let syncs = syncs_under_appends(&j, 10 * gap);
    assert!(syncs <= 60, "{syncs} fdatasyncs in ten 50 ms gaps");

    // One client alone: each write waits for its sync, nothing is appended
    // meanwhile, so no gap. With a gap of a second, ten such writes would
    // take ten seconds (the first may wait out the last gap above).
    j.set_sync_gap(Duration::from_secs(1));
    let started = std::time::Instant::now();
    for _ in 0..10 {
        let lsn = j.append(0, &[&b"SET"[..], b"k", b"v"]);
        assert!(wait_durable(&j, lsn, T));
    }
    assert!(started.elapsed() < Duration::from_secs(5), "{:?} for 10 lone writes", started.elapsed());

    // Off at run time: more syncs in the same ten gaps' time than a 50 ms
    // gap allows (about a dozen), on any disk that syncs in under 25 ms.
    j.set_sync_gap(Duration::ZERO);
    let syncs = syncs_under_appends(&j, 10 * gap);
    assert!(syncs > 20, "{syncs} fdatasyncs in 500 ms without a gap");
}

/// Appends from two threads, a record every few microseconds each, for
/// `how_long`; returns the fdatasyncs it took to make them durable.
fn syncs_under_appends(j: &Arc<keel_journal::Journal>, how_long: Duration) -> u64 {
    let before = j.stats().fsync_count;
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let j = Arc::clone(j);
            std::thread::spawn(move || {
                let started = std::time::Instant::now();
                let mut last = 0;
                while started.elapsed() < how_long {
                    last = j.append(0, &[&b"SET"[..], b"k", b"v"]);
                    let pause = std::time::Instant::now();
                    while pause.elapsed() < Duration::from_micros(5) {
                        std::hint::spin_loop();
                    }
                }
                last
            })
        })
        .collect();
    let last = threads.into_iter().map(|t| t.join().unwrap()).max().unwrap();
    assert!(wait_durable(j, last, T));
    j.stats().fsync_count - before
}
