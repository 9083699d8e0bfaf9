//! Interop with Debian's Redis 7.0 (`redis-server`, `redis-check-aof`):
//! Keel replays a directory Redis wrote, and Redis accepts and loads a
//! directory Keel wrote. Skipped, with a notice, where Redis is not installed.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use keel_journal::{FsyncPolicy, Journal};
use keel_testkit::redis::{have, Redis, Reply};

/// redis-server and redis-check-aof both there, or a notice.
fn have_redis_tools() -> bool {
    let both = have("redis-server") && have("redis-check-aof");
    if !both {
        eprintln!("NOTICE: redis-server/redis-check-aof not installed; skipping Redis interop test");
    }
    both
}

/// Redis with its AOF on, in the plain format throughout (no RDB base).
fn start_redis_aof(dir: &std::path::Path) -> Redis {
    Redis::start(dir, &["--appendonly", "yes", "--aof-use-rdb-preamble", "no"])
}

#[test]
fn keel_replays_what_redis_wrote() {
    if !have("redis-server") {
        eprintln!("NOTICE: redis-server not installed; skipping Redis interop test");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut r = start_redis_aof(tmp.path());
    r.ok(&[b"SET", b"a", b"1"]);
    r.ok(&[b"SET", b"e", b"v", b"EX", b"1000"]);
    r.select(3);
    assert_eq!(r.cmd(&[b"RPUSH", b"l", b"x", b"y z"]), Reply::Int(2));
    r.ok(&[b"MULTI"]);
    assert_eq!(r.cmd(&[b"INCR", b"n"]), Reply::Status("QUEUED".into()));
    assert_eq!(r.cmd(&[b"HSET", b"h", b"f", b"v"]), Reply::Status("QUEUED".into()));
    assert_eq!(r.cmd(&[b"EXEC"]), Reply::Array(vec![Reply::Int(1), Reply::Int(1)]));
    r.select(0);
    assert_eq!(r.cmd(&[b"DEL", b"a"]), Reply::Int(1));
    r.shutdown();

    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (j, replay) = open(&cfg);
    assert!(replay.warnings().is_empty());
    let got: Vec<(usize, Vec<String>)> =
        replay_all(replay).into_iter().map(|(db, a)| (db, strs(&a))).collect();
    let names: Vec<(usize, String)> =
        got.iter().map(|(db, a)| (*db, a[0].to_ascii_uppercase())).collect();
    assert_eq!(
        names,
        vec![
            (0, "SET".to_string()),
            (0, "SET".into()),
            (3, "RPUSH".into()),
            (3, "MULTI".into()),
            (3, "INCR".into()),
            (3, "HSET".into()),
            (3, "EXEC".into()),
            (0, "DEL".into()),
        ]
    );
    assert_eq!(got[1].1[3], "PXAT", "Redis rewrites EX as an absolute PXAT");
    assert_eq!(got[2].1[1..], ["l", "x", "y z"]);
    // Appending to Redis's directory continues its incr file.
    let size = std::fs::metadata(cfg.dir.join("appendonly.aof.1.incr.aof")).unwrap().len();
    assert_eq!(j.appended_lsn(), size);
}

#[test]
fn redis_accepts_and_loads_what_keel_wrote() {
    if !have_redis_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (j, _) = open(&cfg);
    j.append(0, &[&b"SET"[..], b"plain", b"hello"]);
    j.append(0, &[&b"SET"[..], b"bin", b"a\r\nb\0c"]);
    j.append(2, &[&b"RPUSH"[..], b"list", b"1", b"2", b"3"]);
    j.append_transaction(&[
        (2, vec![b"INCRBY".to_vec(), b"n".to_vec(), b"5".to_vec()]),
        (1, vec![b"SET".to_vec(), b"in-db-1".to_vec(), b"yes".to_vec()]),
    ]);
    j.append(0, &[&b"SET"[..], b"last", b"1"]);
    j.flush_and_sync().unwrap();
    drop(j);

    let manifest = cfg.dir.join("appendonly.aof.manifest");
    let out = Command::new("redis-check-aof").arg(&manifest).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("All AOF files and manifest are valid"), "{text}");

    let mut r = start_redis_aof(tmp.path());
    assert_eq!(r.cmd(&[b"GET", b"plain"]).bulk(), b"hello");
    assert_eq!(r.cmd(&[b"GET", b"bin"]).bulk(), b"a\r\nb\0c");
    assert_eq!(r.cmd(&[b"GET", b"last"]).bulk(), b"1");
    r.select(2);
    let list = Reply::Array([b"1", b"2", b"3"].map(|i| Reply::Bulk(i.to_vec())).to_vec());
    assert_eq!(r.cmd(&[b"LRANGE", b"list", b"0", b"-1"]), list);
    assert_eq!(r.cmd(&[b"GET", b"n"]).bulk(), b"5");
    r.select(1);
    assert_eq!(r.cmd(&[b"GET", b"in-db-1"]).bulk(), b"yes");
    // Redis appends to Keel's incr file; Keel reads it back.
    r.ok(&[b"SET", b"from-redis", b"ok"]);
    r.shutdown();

    let (_j, replay) = open(&cfg);
    let got = replay_all(replay);
    let (db, last) = got.last().unwrap();
    let last = strs(last);
    assert_eq!(*db, 1);
    assert!(last[0].eq_ignore_ascii_case("SET"));
    assert_eq!(last[1..], ["from-redis", "ok"]);
}

#[test]
fn check_tools_agree_on_a_torn_tail() {
    if !have("redis-check-aof") {
        eprintln!("NOTICE: redis-check-aof not installed; skipping");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (j, _) = open(&cfg);
    j.append(0, &[&b"SET"[..], b"a", b"1"]);
    j.flush_and_sync().unwrap();
    drop(j);
    let incr = cfg.dir.join("appendonly.aof.1.incr.aof");
    let good = std::fs::metadata(&incr).unwrap().len();
    let mut f = std::fs::OpenOptions::new().append(true).open(&incr).unwrap();
    f.write_all(b"*2\r\n$3\r\nDEL\r\n$1").unwrap();
    drop(f);
    let manifest = cfg.dir.join("appendonly.aof.manifest");
    let redis = Command::new("redis-check-aof").arg(&manifest).output().unwrap();
    let keel = Command::new(env!("CARGO_BIN_EXE_keel-check-aof")).arg(&manifest).output().unwrap();
    assert!(!redis.status.success() && !keel.status.success());
    let needle = format!("ok_up_to={good},");
    assert!(String::from_utf8_lossy(&redis.stdout).contains(&needle));
    assert!(String::from_utf8_lossy(&keel.stdout).contains(&needle));
}

/// What a `kill -9` leaves of a journal under `always`: the records, then
/// the space written ahead of them (`prealloc.rs`). redis-server and
/// redis-check-aof read that space as annotations; Keel cuts it off.
#[test]
fn a_directory_left_with_space_written_ahead_loads_in_redis_and_keel() {
    if !have_redis_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (j, _) = open(&cfg);
    // Values of every length mod 512 put the end of the last record, where
    // the space starts, at every offset within a line of it.
    for i in 0..600usize {
        j.append(0, &[&b"SET"[..], format!("k{i}").as_bytes(), &vec![b'v'; i]]);
        j.flush_and_sync().unwrap();
    }
    let incr = incr_path(&cfg);
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::metadata(&incr).unwrap().len() > content_len(&incr)),
        "no space written ahead"
    );
    let crashed = tempfile::tempdir().unwrap();
    let copy = crashed.path().join("appendonlydir");
    copy_files(&cfg.dir, &copy);
    drop(j);

    let out = Command::new("redis-check-aof").arg(copy.join("appendonly.aof.manifest")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("All AOF files and manifest are valid"), "{text}");
    let mut r = start_redis_aof(crashed.path());
    assert_eq!(r.cmd(&[b"DBSIZE"]), Reply::Int(600));
    assert_eq!(r.cmd(&[b"STRLEN", b"k599"]), Reply::Int(599));
    r.shutdown();

    let crashed_cfg = config(crashed.path(), FsyncPolicy::Always);
    let (j, replay) = open(&crashed_cfg);
    assert!(replay.warnings().is_empty(), "{:?}", replay.warnings());
    // Redis appended nothing: Keel replays the 600 SETs.
    assert_eq!(replay_all(replay).len(), 600);
    let incr = incr_path(&crashed_cfg);
    assert_eq!(std::fs::metadata(&incr).unwrap().len(), content_len(&incr));
    drop(j);
}

/// `aof-timestamp-enabled`: a `#TS:` annotation before the first record of
/// each second, which Keel replays past and redis-check-aof
/// `--truncate-to-timestamp` cuts at.
#[test]
fn timestamp_annotations_let_redis_check_aof_truncate_to_a_time() {
    if !have_redis_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cfg = keel_journal::JournalConfig { timestamps: true, ..config(tmp.path(), FsyncPolicy::Always) };
    let (j, _) = Journal::open_with(cfg.clone(), fast_tuning()).unwrap();
    let next_second = || {
        let now = |_: ()| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let start = now(());
        while now(()) == start {
            std::thread::sleep(Duration::from_millis(5));
        }
        now(())
    };
    j.append(0, &[&b"SET"[..], b"early", b"1"]);
    j.append(1, &[&b"SET"[..], b"early", b"2"]);
    j.flush_and_sync().unwrap();
    let cut = next_second();
    next_second();
    j.append(0, &[&b"SET"[..], b"late", b"3"]);
    j.flush_and_sync().unwrap();
    drop(j);
    let text = String::from_utf8_lossy(&std::fs::read(incr_path(&cfg)).unwrap()).into_owned();
    assert_eq!(text.matches("#TS:").count(), 2, "{text}");
    assert!(text.starts_with("#TS:"), "the annotation comes before the SELECT: {text}");
    let (_j, replay) = open(&cfg);
    assert_eq!(replay_all(replay).len(), 3);
    drop(_j);

    let out = Command::new("redis-check-aof")
        .args(["--truncate-to-timestamp", &cut.to_string()])
        .arg(cfg.dir.join("appendonly.aof.manifest"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let (_j, replay) = open(&cfg);
    let keys: Vec<String> = replay_all(replay).iter().map(|(_, argv)| strs(argv)[1].clone()).collect();
    assert_eq!(keys, ["early", "early"]);
}
