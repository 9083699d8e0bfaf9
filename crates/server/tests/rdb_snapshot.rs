//! RDB snapshots: SAVE, BGSAVE, loading dump.rdb at start, and
//! compatibility with redis-server 7.0.15's files.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::state::{argv, array, assert_same, bulk_bytes, fill_every_type, pipeline, read_state, State, Val};
use common::{encode, ok, simple, temp_dir, Client, Frame, Server};
use keel_rdb::{RdbItem, RdbReader, RdbValue};

fn from_rdb(value: RdbValue) -> Val {
    match value {
        RdbValue::String(s) => Val::Str(s),
        RdbValue::List(l) => Val::List(l),
        RdbValue::Set(mut s) => {
            s.sort();
            Val::Set(s)
        }
        RdbValue::Hash(mut h) => {
            h.sort();
            Val::Hash(h)
        }
        RdbValue::ZSet(z) => {
            let mut z: Vec<_> = z.into_iter().map(|(m, s)| (m, if s == 0.0 { 0 } else { s.to_bits() })).collect();
            z.sort();
            Val::ZSet(z)
        }
        RdbValue::Stream(_) => panic!("fill_every_type writes no stream"),
    }
}

/// Everything in an RDB file.
fn read_file(path: &Path) -> State {
    let file = std::fs::File::open(path).expect("open dump");
    let mut reader = RdbReader::new(std::io::BufReader::new(file)).expect("header");
    let mut state = State::new();
    while let Some(item) = reader.next_item().expect("valid file") {
        if let RdbItem::Entry(e) = item {
            let old = state.insert((e.db, e.key), (from_rdb(e.value), e.expire_at_ms));
            assert!(old.is_none(), "a key twice in the file");
        }
    }
    state
}

fn wait_bgsave(c: &mut Client) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.info_field("persistence", "rdb_bgsave_in_progress") != "0" {
        assert!(Instant::now() < deadline, "BGSAVE did not end");
        // Not a busy loop: the BGSAVE's scan is idle-class, and a client
        // polling flat out keeps the server's core from ever being idle.
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn save_then_restart_loads_every_key() {
    let dir = temp_dir("rdb-save");
    let flags = ["--appendonly", "no", "--enable-debug-command", "yes"];
    let before = {
        let server = Server::start_in(&dir, &flags);
        let mut c = server.client();
        fill_every_type(&mut c);
        // A key that has expired but is still in memory is written, as
        // Redis writes it, and skipped by the load.
        assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
        assert_eq!(c.cmd("SET gone x PX 20"), ok());
        let server_ms = |c: &mut Client| {
            let t = array(c.cmd("TIME"));
            let s: u64 = String::from_utf8_lossy(&bulk_bytes(&t[0])).parse().expect("test setup");
            let us: u64 = String::from_utf8_lossy(&bulk_bytes(&t[1])).parse().expect("test setup");
            s * 1000 + us / 1000
        };
        let until = server_ms(&mut c) + 30;
        while server_ms(&mut c) < until {}
        assert_ne!(c.info_field("persistence", "rdb_changes_since_last_save"), "0");
        assert_eq!(c.cmd("SAVE"), ok());
        assert_eq!(c.info_field("persistence", "rdb_changes_since_last_save"), "0");
        assert_eq!(c.info_field("persistence", "rdb_saves"), "1");
        // Read after the SAVE: reading deletes the expired key.
        let before = read_state(&mut c);
        assert!(dir.join("dump.rdb").is_file());
        assert!(!dir.join(format!("temp-{}.rdb", 0)).exists());
        let Frame::Integer(last) = c.cmd("LASTSAVE") else { panic!() };
        assert_eq!(c.info_field("persistence", "rdb_last_save_time"), last.to_string());
        let mut in_file = read_file(&dir.join("dump.rdb"));
        let gone = in_file.remove(&(0, b"gone".to_vec())).expect("the expired key is in the file");
        assert!(gone.1.is_some_and(|at| at <= server_ms(&mut c)), "{:?}", gone.1);
        assert_same(&in_file, &before, "the file has what the server had");
        before
    };
    assert!(before.len() >= 3 * 15);
    // `rdbchecksum` is set at start only, as Redis's.
    let server = Server::start_in(&dir, &["--appendonly", "no", "--rdbchecksum", "no"]);
    let mut c = server.client();
    assert_same(&read_state(&mut c), &before, "after restart");
    assert_eq!(c.info_field("persistence", "rdb_last_load_keys_loaded"), before.len().to_string());
    assert_eq!(c.info_field("persistence", "rdb_last_load_keys_expired"), "1");
    // An uncompressed, unchecksummed file loads as well.
    assert_eq!(c.cmd("CONFIG SET rdbcompression no"), ok());
    assert_eq!(c.cmd("BGSAVE"), simple("Background saving started"));
    wait_bgsave(&mut c);
    assert_eq!(c.info_field("persistence", "rdb_last_bgsave_status"), "ok");
    drop(server);
    let server = Server::start_in(&dir, &["--appendonly", "no"]);
    assert_same(&read_state(&mut server.client()), &before, "after the uncompressed BGSAVE");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bgsave_is_point_in_time_under_concurrent_writes() {
    let dir = temp_dir("rdb-bgsave");
    // No save rules: a cron BGSAVE after this one would reset `dirty`.
    let server = Server::start_in(&dir, &["--appendonly", "no", "--save", ""]);
    let mut c = server.client();
    const N: usize = 200_000;
    let value = |i: usize, gen: u32| format!("value-{gen}-{i}-{}", "p".repeat(64));
    for chunk in (0..N).collect::<Vec<_>>().chunks(1000) {
        let mut cmd = vec![b"MSET".to_vec()];
        for &i in chunk {
            cmd.push(format!("key:{i}").into_bytes());
            cmd.push(value(i, 0).into_bytes());
        }
        c.send(&cmd);
    }
    fill_every_type(&mut c);
    let before = read_state(&mut c);
    assert_eq!(before.len(), N + 3 * 16);

    assert_eq!(c.cmd("BGSAVE"), simple("Background saving started"));
    // Writes from another client while it runs: overwrite, delete, create,
    // and change collections. A bounded number of batches: the BGSAVE
    // thread runs in the idle scheduling class, so writes without pause
    // would hold it back for as long as they go on.
    let mut w = server.client();
    let mut batches_during = 0;
    let mut i = 0;
    loop {
        let mut cmds = Vec::new();
        for j in i..i + 500 {
            let k = format!("key:{}", (j * 7919) % N);
            match j % 4 {
                0 => cmds.push(vec![b"SET".to_vec(), k.into_bytes(), value(j, 1).into_bytes()]),
                1 => cmds.push(vec![b"DEL".to_vec(), k.into_bytes()]),
                2 => cmds.push(vec![b"SET".to_vec(), format!("new:{j}").into_bytes(), b"n".to_vec()]),
                _ => cmds.push(argv(&[b"RPUSH", b"biglist", b"more"])),
            }
        }
        cmds.push(argv(&[b"HSET", b"bighash", b"f1", b"changed"]));
        cmds.push(argv(&[b"SADD", b"intset", b"424242"]));
        pipeline(&mut w, &cmds);
        i += 500;
        if c.info_field("persistence", "rdb_bgsave_in_progress") == "0" || batches_during == 20 {
            break;
        }
        batches_during += 1;
    }
    wait_bgsave(&mut c);
    eprintln!("{batches_during} batches of 502 writes ran during the BGSAVE");
    assert!(batches_during > 0, "the BGSAVE ended before any write: make the dataset bigger");
    assert_eq!(c.info_field("persistence", "rdb_last_bgsave_status"), "ok");
    assert_eq!(c.info_field("persistence", "rdb_saves"), "1");
    let saved = read_file(&dir.join("dump.rdb"));
    assert_same(&saved, &before, "the file is the state at BGSAVE");
    // The writes went through.
    assert!(read_state(&mut c) != before);
    // Dirty counts only what came after S.
    let dirty: u64 = c.info_field("persistence", "rdb_changes_since_last_save").parse().expect("test setup");
    assert!(dirty > 0);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bgsave_and_save_replies() {
    let server = Server::start(&["--appendonly", "no"]);
    let mut c = server.client();
    assert_eq!(c.cmd("BGSAVE foo"), Frame::Error(b"ERR syntax error".to_vec()));
    assert_eq!(c.cmd("BGSAVE SCHEDULE"), simple("Background saving started"));
    wait_bgsave(&mut c);
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("SAVE"), Frame::Error(b"ERR Command not allowed inside a transaction".to_vec()));
    c.cmd("DISCARD");
    assert_eq!(c.cmd("SAVE"), ok());
    assert_eq!(c.info_field("persistence", "rdb_saves"), "2");
    assert_eq!(c.info_field("persistence", "rdb_last_bgsave_time_sec"), "0");
    assert_eq!(c.info_field("persistence", "rdb_current_bgsave_time_sec"), "-1");
}

/// `n` keys k0.. with 50-byte values, a thousand per MSET.
fn fill_plain(c: &mut Client, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut cmd = vec!["MSET".to_string()];
        for i in chunk {
            cmd.push(format!("k{i}"));
            cmd.push("v".repeat(50));
        }
        c.send(&cmd);
    }
}

#[test]
fn bgsave_takes_its_instant_before_replying() {
    let server = Server::start(&["--appendonly", "no"]);
    let dir = server.dir.clone().expect("dir");
    let mut c = server.client();
    fill_plain(&mut c, 100_000);
    // Pipelined: the SET is read with the BGSAVE, and runs right after its reply.
    c.write_raw(&[encode(&["BGSAVE"]), encode(&["SET", "after", "1"]), encode(&["DEL", "k0"])].concat());
    assert_eq!(c.read(), simple("Background saving started"));
    assert_eq!(c.read(), ok());
    assert_eq!(c.read(), Frame::Integer(1));
    wait_bgsave(&mut c);
    let saved = read_file(&dir.join("dump.rdb"));
    assert_eq!(saved.len(), 100_000);
    assert!(!saved.contains_key(&(0, b"after".to_vec())));
    assert!(saved.contains_key(&(0, b"k0".to_vec())));
    // Inside EXEC it is scheduled (as Redis), and runs once EXEC lets go.
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("SET inside 1"), simple("QUEUED"));
    assert_eq!(c.cmd("BGSAVE"), simple("QUEUED"));
    assert_eq!(c.cmd("EXEC"), Frame::Array(vec![ok(), simple("Background saving scheduled")]));
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.info_field("persistence", "rdb_saves") != "2" {
        assert!(Instant::now() < deadline, "the scheduled BGSAVE never ran");
    }
    wait_bgsave(&mut c);
    assert!(read_file(&dir.join("dump.rdb")).contains_key(&(0, b"inside".to_vec())));
}

#[test]
fn bgsave_while_an_aof_rewrite_runs() {
    let server = Server::start(&["--appendonly", "yes", "--auto-aof-rewrite-percentage", "0"]);
    let mut c = server.client();
    fill_plain(&mut c, 200_000);
    assert_eq!(c.cmd("BGREWRITEAOF"), simple("Background append only file rewriting started"));
    let bg = c.cmd("BGSAVE");
    let scheduled = c.cmd("BGSAVE SCHEDULE");
    if c.info_field("persistence", "aof_rewrite_in_progress") == "1" {
        eprintln!("BGSAVE was refused and scheduled during the rewrite");
        assert_eq!(
            bg,
            Frame::Error(b"ERR Another child process is active (AOF?): can't BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.".to_vec())
        );
        assert_eq!(scheduled, simple("Background saving scheduled"));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.info_field("persistence", "rdb_saves") != "1" {
        assert!(Instant::now() < deadline, "the scheduled BGSAVE never ran");
    }
    // rdb_saves counts saves started, as Redis's stat_rdb_saves.
    wait_bgsave(&mut c);
    let dir = server.dir.clone().expect("test setup");
    assert_eq!(read_file(&dir.join("dump.rdb")).len(), 200_000);
}

#[test]
fn redis_and_keel_load_each_others_dump_rdb() {
    // Keel's file into redis-server.
    let dir = temp_dir("rdb-to-redis");
    let before = {
        let server = Server::start_in(&dir, &["--appendonly", "no"]);
        let mut c = server.client();
        fill_every_type(&mut c);
        assert_eq!(c.cmd("SAVE"), ok());
        read_state(&mut c)
    };
    let d = dir.display().to_string();
    let Some(redis) = Server::start_redis(&["--dir", &d, "--dbfilename", "dump.rdb"]) else { return };
    let mut r = redis.client();
    assert_same(&read_state(&mut r), &before, "redis-server loads Keel's dump.rdb");
    // redis-server's own file into Keel.
    r.cmd("SET from-redis yes");
    r.cmd("SELECT 7");
    r.cmd("HSET h7 a 1");
    assert_eq!(r.cmd("SELECT 0"), ok());
    let redis_state = read_state(&mut r);
    assert_eq!(r.cmd("SAVE"), ok());
    drop(redis);
    let server = Server::start_in(&dir, &["--appendonly", "no"]);
    assert_same(&read_state(&mut server.client()), &redis_state, "Keel loads redis-server's dump.rdb");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_corrupt_dump_rdb_stops_start_up() {
    let dir = temp_dir("rdb-corrupt");
    {
        let server = Server::start_in(&dir, &["--appendonly", "no"]);
        let mut c = server.client();
        fill_every_type(&mut c);
        assert_eq!(c.cmd("SAVE"), ok());
    }
    let path = dir.join("dump.rdb");
    let good = std::fs::read(&path).expect("test setup");
    // Truncated.
    std::fs::write(&path, &good[..good.len() / 2]).expect("test setup");
    let (status, log) = common::start_expecting_exit(&dir, &["--appendonly", "no"]);
    assert!(!status.success());
    assert!(log.contains("dump.rdb") && log.contains("offset"), "log: {log}");
    assert!(log.contains("Terminating server after rdb file reading failure."), "Redis's last words: {log}");
    // One flipped byte: the checksum catches it if nothing else does.
    let mut bad = good.clone();
    let at = bad.len() / 3;
    bad[at] ^= 0x5a;
    std::fs::write(&path, &bad).expect("test setup");
    let (status, log) = common::start_expecting_exit(&dir, &["--appendonly", "no"]);
    assert!(!status.success());
    assert!(log.contains("dump.rdb"), "log: {log}");
    // Module aux data of a module Keel does not have: refused, as Redis
    // refuses it without the module (the checksum 0 means none).
    let mut with_aux = good[..good.len() - 9].to_vec();
    with_aux.push(0xF7);
    with_aux.push(0x81);
    with_aux.extend_from_slice(&(1u64 << 40 | 1 << 10).to_be_bytes());
    with_aux.extend_from_slice(&[0x02, 0x01, 0x00, 0xFF]);
    with_aux.extend_from_slice(&[0; 8]);
    std::fs::write(&path, &with_aux).expect("test setup");
    let (status, log) = common::start_expecting_exit(&dir, &["--appendonly", "no"]);
    assert!(!status.success());
    assert!(log.contains("AUX module data I can't load: no matching module"), "log: {log}");
    // Not an RDB file at all.
    std::fs::write(&path, b"hello world").expect("test setup");
    let (status, _) = common::start_expecting_exit(&dir, &["--appendonly", "no"]);
    assert!(!status.success());
    // A key twice (Redis stops too): whichever loading thread meets it second.
    let mut w = keel_rdb::RdbWriter::new(Vec::new(), keel_rdb::WriteOptions::default()).expect("header");
    w.select_db(0, 3, 0).expect("select");
    for key in [&b"a"[..], b"b", b"a"] {
        w.write_key(key, &RdbValue::String(b"v".to_vec()), None).expect("key");
    }
    std::fs::write(&path, w.finish().expect("trailer")).expect("test setup");
    let (status, log) = common::start_expecting_exit(&dir, &["--appendonly", "no"]);
    assert!(!status.success());
    assert!(log.contains("duplicated key 'a'"), "log: {log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A function library in a dump.rdb written by hand (as Redis writes one,
/// a `FUNCTION2` item) is loaded with the keys; one that registers no
/// function stops the start, as Redis's load does.
#[test]
fn a_function_library_in_dump_rdb_is_loaded() {
    let dir = temp_dir("rdb-function");
    {
        let server = Server::start_in(&dir, &["--appendonly", "no"]);
        let mut c = server.client();
        assert_eq!(c.cmd("SET k v"), ok());
        assert_eq!(c.cmd("SAVE"), ok());
    }
    let path = dir.join("dump.rdb");
    let good = std::fs::read(&path).expect("test setup");
    let with_library = |code: &[u8]| {
        let mut file = good[..good.len() - 9].to_vec();
        // RDB's 14-bit length: 01, then the length in 14 bits.
        file.extend_from_slice(&[0xF5, 0x40 | (code.len() >> 8) as u8, code.len() as u8]);
        file.extend_from_slice(code);
        file.push(0xFF);
        file.extend_from_slice(&[0; 8]);
        file
    };
    let code = b"#!lua name=l\nredis.register_function('f', function() return 7 end)";
    std::fs::write(&path, with_library(code)).expect("test setup");
    {
        let server = Server::start_in(&dir, &["--appendonly", "no"]);
        let mut c = server.client();
        assert_eq!(c.cmd("GET k"), common::bulk("v"));
        assert_eq!(c.cmd("FCALL f 0"), common::int(7));
    }
    std::fs::write(&path, with_library(b"#!lua name=l\nreturn 1")).expect("test setup");
    let (status, log) = common::start_expecting_exit(&dir, &["--appendonly", "no"]);
    assert!(!status.success());
    assert!(log.contains("No functions registered"), "log: {log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// INFO's current_save_keys_total / _processed and current_fork_perc follow
/// a running BGSAVE, and are zero before and after it.
#[test]
fn info_reports_the_progress_of_a_bgsave() {
    let server = Server::start(&["--appendonly", "no", "--save", ""]);
    let mut c = server.client();
    for i in 0..500 {
        assert_eq!(c.send(&["SET", &format!("k{i}"), "v"]), ok());
    }
    assert_eq!(c.info_field("persistence", "current_save_keys_total"), "0");
    assert_eq!(c.cmd("CONFIG SET rdb-key-save-delay 2000"), ok());
    assert_eq!(c.cmd("BGSAVE"), simple("Background saving started"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let processed = loop {
        let processed: u64 = c.info_field("persistence", "current_save_keys_processed").parse().expect("number");
        if processed > 0 {
            break processed;
        }
        assert!(Instant::now() < deadline, "no progress reported");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(c.info_field("persistence", "current_save_keys_total"), "500");
    assert!(processed < 500, "{processed}: the delay keeps the save going");
    let perc: f64 = c.info_field("persistence", "current_fork_perc").parse().expect("number");
    assert!(perc > 0.0 && perc < 100.0, "{perc}");
    assert_eq!(c.cmd("CONFIG SET rdb-key-save-delay 0"), ok());
    wait_bgsave(&mut c);
    assert_eq!(c.info_field("persistence", "rdb_last_bgsave_status"), "ok");
    assert_eq!(c.info_field("persistence", "current_save_keys_total"), "0");
    assert_eq!(c.info_field("persistence", "current_save_keys_processed"), "0");
}

/// A BGSAVE's scan runs behind the workers, on a helper in the idle class,
/// and moves up to the BGSAVE thread, as their equal, once the snapshot
/// keeps more than a tenth of the memory in use (old versions of keys
/// overwritten before the scan reached them); the file it then finishes
/// still holds every key as it was at the BGSAVE.
#[test]
fn a_bgsave_behind_the_workers_moves_up_when_the_snapshot_keeps_too_much() {
    let dir = temp_dir("rdb-moves-up");
    let server = Server::start_in(&dir, &["--appendonly", "no", "--save", ""]);
    let mut c = server.client();
    let (n, size) = (2000, 10_000);
    let old = "x".repeat(size);
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let mut argv = vec!["MSET".to_string()];
        for k in chunk {
            argv.extend([format!("k{k}"), old.clone()]);
        }
        assert_eq!(c.send(&argv.iter().map(String::as_str).collect::<Vec<_>>()), ok());
    }
    // Two ms a key: the scan is still early when the overwrites come.
    assert_eq!(c.cmd("CONFIG SET rdb-key-save-delay 2000"), ok());
    assert_eq!(c.cmd("BGSAVE"), simple("Background saving started"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.info_field("persistence", "current_save_keys_processed") == "0" {
        assert!(Instant::now() < deadline, "the scan never began");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(c.info_field("persistence", "keel_rdb_bgsave_behind_workers"), "1");
    assert_eq!(server.thread_policy("keel-bgsave"), Some(libc::SCHED_OTHER));
    assert_eq!(server.thread_policy("keel-bgsave-bg"), Some(libc::SCHED_IDLE));
    // Half the keys overwritten: about 10 MB kept, against some 25 MB in use.
    let fresh = "y".repeat(size);
    for k in 0..n / 2 {
        c.write_command(&["SET".to_string(), format!("k{k}"), fresh.clone()]);
    }
    for _ in 0..n / 2 {
        assert_eq!(c.read(), ok());
    }
    // What the snapshot keeps is Redis's copy-on-write to INFO.
    let info = persistence(&mut c);
    let kept: u64 = info["keel_snapshot_saved_bytes"].parse().expect("number");
    assert!(kept > 5_000_000, "the overwrites kept {kept} bytes");
    assert_eq!(info["current_cow_size"], kept.to_string());
    assert!(info["current_cow_peak"].parse::<u64>().expect("number") >= kept);
    while c.info_field("persistence", "keel_rdb_bgsave_behind_workers") == "1" {
        assert!(Instant::now() < deadline, "the scan stayed behind the workers");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(c.info_field("persistence", "rdb_bgsave_in_progress"), "1", "moved up before the save ended");
    wait_bgsave(&mut c);
    let info = persistence(&mut c);
    assert_eq!(info["rdb_last_bgsave_status"], "ok");
    assert!(info["rdb_last_cow_size"].parse::<u64>().expect("number") >= kept, "{info:?}");
    for (field, value) in [("current_cow_size", "0"), ("current_cow_peak", "0"), ("aof_last_cow_size", "0")] {
        assert_eq!(info[field], value, "{field}");
    }
    server.kill9();
    let server = Server::start_in(&dir, &["--appendonly", "no"]);
    let mut c = server.client();
    assert_eq!(c.cmd("DBSIZE"), Frame::Integer(n as i64));
    for k in (0..n).step_by(37).chain([n / 2 - 1, n / 2, n - 1]) {
        assert_eq!(c.send(&["GET", &format!("k{k}")]), common::bulk(&old), "k{k} as at the BGSAVE");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// INFO persistence's fields, from one reply.
fn persistence(c: &mut Client) -> std::collections::HashMap<String, String> {
    let Frame::Bulk(text) = c.cmd("INFO persistence") else { panic!("INFO persistence") };
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}
