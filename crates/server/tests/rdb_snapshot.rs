//! RDB snapshots: SAVE, BGSAVE, loading dump.rdb at start, and
//! compatibility with redis-server 7.0.15's files.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{encode, ok, simple, temp_dir, Client, Frame, Server};
use keel_rdb::{RdbItem, RdbReader, RdbValue};

/// A value as compared: collections in a canonical order, scores as bits.
#[derive(Debug, Clone, PartialEq)]
enum Val {
    Str(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    ZSet(Vec<(Vec<u8>, u64)>),
}

/// (db, key) -> (value, expiry in Unix ms).
type State = BTreeMap<(u64, Vec<u8>), (Val, Option<u64>)>;

fn bulk_bytes(f: &Frame) -> Vec<u8> {
    match f {
        Frame::Bulk(b) | Frame::Simple(b) => b.clone(),
        other => panic!("not a bulk: {other:?}"),
    }
}

fn array(f: Frame) -> Vec<Frame> {
    match f {
        Frame::Array(items) | Frame::Set(items) => items,
        other => panic!("not an array: {other:?}"),
    }
}

fn score_bits(text: &[u8]) -> u64 {
    let t = String::from_utf8_lossy(text);
    let v: f64 = match t.as_ref() {
        "inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        s => s.parse().expect("score"),
    };
    // 0.0 and -0.0 compare as one.
    if v == 0.0 { 0 } else { v.to_bits() }
}

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
    }
}

/// Sends `commands` pipelined and returns the replies.
fn pipeline(c: &mut Client, commands: &[Vec<Vec<u8>>]) -> Vec<Frame> {
    let mut bytes = Vec::new();
    for cmd in commands {
        bytes.extend(encode(cmd));
    }
    c.write_raw(&bytes);
    commands.iter().map(|_| c.read()).collect()
}

fn argv(words: &[&[u8]]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.to_vec()).collect()
}

/// Everything in every database of the server `c` talks to.
fn read_state(c: &mut Client) -> State {
    let mut state = State::new();
    for db in 0..16u64 {
        assert_eq!(c.cmd(&format!("SELECT {db}")), ok());
        let keys: Vec<Vec<u8>> = array(c.cmd("KEYS *")).iter().map(bulk_bytes).collect();
        for chunk in keys.chunks(500) {
            let types = pipeline(c, &chunk.iter().map(|k| argv(&[b"TYPE", k])).collect::<Vec<_>>());
            let mut cmds = Vec::new();
            for (k, t) in chunk.iter().zip(&types) {
                let t = bulk_bytes(t);
                cmds.push(match &t[..] {
                    b"string" => argv(&[b"GET", k]),
                    b"list" => argv(&[b"LRANGE", k, b"0", b"-1"]),
                    b"set" => argv(&[b"SMEMBERS", k]),
                    b"hash" => argv(&[b"HGETALL", k]),
                    b"zset" => argv(&[b"ZRANGE", k, b"0", b"-1", b"WITHSCORES"]),
                    other => panic!("type {}", String::from_utf8_lossy(other)),
                });
                cmds.push(argv(&[b"PEXPIRETIME", k]));
            }
            let replies = pipeline(c, &cmds);
            for (i, (k, t)) in chunk.iter().zip(&types).enumerate() {
                let (value, ttl) = (replies[2 * i].clone(), replies[2 * i + 1].clone());
                let val = match &bulk_bytes(t)[..] {
                    b"string" => Val::Str(bulk_bytes(&value)),
                    b"list" => Val::List(array(value).iter().map(bulk_bytes).collect()),
                    b"set" => {
                        let mut m: Vec<_> = array(value).iter().map(bulk_bytes).collect();
                        m.sort();
                        Val::Set(m)
                    }
                    b"hash" => {
                        let items: Vec<_> = array(value).iter().map(bulk_bytes).collect();
                        let mut pairs: Vec<_> = items.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect();
                        pairs.sort();
                        Val::Hash(pairs)
                    }
                    _ => {
                        let items: Vec<_> = array(value).iter().map(bulk_bytes).collect();
                        let mut pairs: Vec<_> = items.chunks(2).map(|p| (p[0].clone(), score_bits(&p[1]))).collect();
                        pairs.sort();
                        Val::ZSet(pairs)
                    }
                };
                let Frame::Integer(ttl) = ttl else { panic!("PEXPIRETIME: {ttl:?}") };
                let ttl = (ttl >= 0).then_some(ttl as u64);
                state.insert((db, k.clone()), (val, ttl));
            }
        }
    }
    assert_eq!(c.cmd("SELECT 0"), ok());
    state
}

/// Asserts `got == want`, naming the first few keys that differ (the
/// states are too big to print whole).
fn assert_same(got: &State, want: &State, what: &str) {
    let short = |v: Option<&(Val, Option<u64>)>| {
        let t = format!("{v:?}");
        if t.len() > 300 { format!("{}...", &t[..300]) } else { t }
    };
    let mut diffs = Vec::new();
    for k in got.keys().chain(want.keys()) {
        if got.get(k) != want.get(k) && diffs.len() < 5 {
            diffs.push(format!(
                "db {} key {:?}: got {} want {}",
                k.0,
                String::from_utf8_lossy(&k.1),
                short(got.get(k)),
                short(want.get(k))
            ));
        }
    }
    assert!(diffs.is_empty(), "{what}: {} vs {} keys; {}", got.len(), want.len(), diffs.join("\n"));
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

/// Every type in small and big encodings, several databases, TTLs.
fn fill_every_type(c: &mut Client) {
    let far = 4_000_000_000_000u64; // year 2096, in ms
    for db in [0, 3, 15] {
        assert_eq!(c.cmd(&format!("SELECT {db}")), ok());
        c.cmd("SET int 12345");
        c.cmd("SET neg -7");
        c.cmd("SET str hello");
        let big = "x".repeat(20_000);
        c.send(&["SET", "bigstr", &big]);
        let compressible: String = (0..2000).map(|i| format!("abc{}", i % 10)).collect();
        c.send(&["SET", "lzf", &compressible]);
        c.cmd("RPUSH smalllist a b c 1 2 3");
        let items: Vec<String> = (0..2000).map(|i| format!("item-{i}")).collect();
        let mut cmd = vec!["RPUSH".to_string(), "biglist".into()];
        cmd.extend(items.iter().cloned());
        c.send(&cmd);
        c.cmd("SADD intset 1 2 3 -100 99999");
        c.cmd("SADD smallset a b c");
        let mut cmd = vec!["SADD".to_string(), "bigset".into()];
        cmd.extend((0..1000).map(|i| format!("m{i}")));
        c.send(&cmd);
        let mut cmd = vec!["SADD".to_string(), "bigintset".into()];
        cmd.extend((0..1000).map(|i| i.to_string()));
        c.send(&cmd);
        c.cmd("HSET smallhash f1 v1 f2 2");
        let mut cmd = vec!["HSET".to_string(), "bighash".into()];
        cmd.extend((0..1000).flat_map(|i| [format!("f{i}"), format!("v{i}")]));
        c.send(&cmd);
        c.cmd("ZADD smallz 1.5 a -inf b 3 c 0.1 d");
        let mut cmd = vec!["ZADD".to_string(), "bigz".into()];
        cmd.extend((0..1000).flat_map(|i| [format!("{}", i as f64 / 7.0), format!("z{i}")]));
        c.send(&cmd);
        c.cmd(&format!("PEXPIREAT str {far}"));
        c.cmd(&format!("PEXPIREAT biglist {far}"));
        c.cmd(&format!("PEXPIREAT smallz {}", far + 1));
        c.cmd(&format!("SET db{db} only-here"));
    }
    assert_eq!(c.cmd("SELECT 0"), ok());
}

fn wait_bgsave(c: &mut Client) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.info_field("persistence", "rdb_bgsave_in_progress") != "0" {
        assert!(Instant::now() < deadline, "BGSAVE did not end");
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
        // A key that has expired but is still in memory is left out.
        assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
        assert_eq!(c.cmd("SET gone x PX 20"), ok());
        let server_ms = |c: &mut Client| {
            let t = array(c.cmd("TIME"));
            let s: u64 = String::from_utf8_lossy(&bulk_bytes(&t[0])).parse().unwrap();
            let us: u64 = String::from_utf8_lossy(&bulk_bytes(&t[1])).parse().unwrap();
            s * 1000 + us / 1000
        };
        let until = server_ms(&mut c) + 30;
        while server_ms(&mut c) < until {}
        assert_ne!(c.info_field("persistence", "rdb_changes_since_last_save"), "0");
        let before = read_state(&mut c);
        assert_eq!(c.cmd("SAVE"), ok());
        assert_eq!(c.info_field("persistence", "rdb_changes_since_last_save"), "0");
        assert_eq!(c.info_field("persistence", "rdb_saves"), "1");
        assert!(dir.join("dump.rdb").is_file());
        assert!(!dir.join(format!("temp-{}.rdb", 0)).exists());
        let Frame::Integer(last) = c.cmd("LASTSAVE") else { panic!() };
        assert_eq!(c.info_field("persistence", "rdb_last_save_time"), last.to_string());
        assert_same(&read_file(&dir.join("dump.rdb")), &before, "the file has what the server had");
        before
    };
    assert!(before.len() >= 3 * 15);
    let server = Server::start_in(&dir, &["--appendonly", "no"]);
    let mut c = server.client();
    assert_same(&read_state(&mut c), &before, "after restart");
    assert_eq!(c.info_field("persistence", "rdb_last_load_keys_loaded"), before.len().to_string());
    assert_eq!(c.info_field("persistence", "rdb_last_load_keys_expired"), "0");
    // An uncompressed, unchecksummed file loads as well.
    assert_eq!(c.cmd("CONFIG SET rdbcompression no"), ok());
    assert_eq!(c.cmd("CONFIG SET rdbchecksum no"), ok());
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
    let server = Server::start_in(&dir, &["--appendonly", "no"]);
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
    // and change collections.
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
        if c.info_field("persistence", "rdb_bgsave_in_progress") == "0" {
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
    let dirty: u64 = c.info_field("persistence", "rdb_changes_since_last_save").parse().unwrap();
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

#[test]
fn bgsave_while_an_aof_rewrite_runs() {
    let server = Server::start(&["--appendonly", "yes", "--auto-aof-rewrite-percentage", "0"]);
    let mut c = server.client();
    for chunk in (0..200_000).collect::<Vec<_>>().chunks(1000) {
        let mut cmd = vec!["MSET".to_string()];
        for i in chunk {
            cmd.push(format!("k{i}"));
            cmd.push("v".repeat(50));
        }
        c.send(&cmd);
    }
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
    let dir = server.dir.clone().unwrap();
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

/// Runs keel-server on `dir` expecting it to exit at start; returns its
/// status and its log.
fn start_expecting_exit(dir: &Path) -> (std::process::ExitStatus, String) {
    let port = common::free_port();
    let log = dir.join("keel.log");
    let out = Command::new(env!("CARGO_BIN_EXE_keel-server"))
        .args(["--port", &port.to_string(), "--threads", "2", "--appendonly", "no", "--dir", &dir.display().to_string()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn");
    let mut child = out;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, std::fs::read_to_string(&log).unwrap_or_default());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("keel-server kept running on a corrupt dump.rdb");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
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
    let good = std::fs::read(&path).unwrap();
    // Truncated.
    std::fs::write(&path, &good[..good.len() / 2]).unwrap();
    let (status, log) = start_expecting_exit(&dir);
    assert!(!status.success());
    assert!(log.contains("dump.rdb") && log.contains("offset"), "log: {log}");
    // One flipped byte: the checksum catches it if nothing else does.
    let mut bad = good.clone();
    let at = bad.len() / 3;
    bad[at] ^= 0x5a;
    std::fs::write(&path, &bad).unwrap();
    let (status, log) = start_expecting_exit(&dir);
    assert!(!status.success());
    assert!(log.contains("dump.rdb"), "log: {log}");
    // Not an RDB file at all.
    std::fs::write(&path, b"hello world").unwrap();
    let (status, _) = start_expecting_exit(&dir);
    assert!(!status.success());
    let _ = std::fs::remove_dir_all(&dir);
}
