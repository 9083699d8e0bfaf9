//! AOF rewrite over real processes: BGREWRITEAOF while clients write,
//! `kill -9` after and in the middle of a rewrite, redis-server loading the
//! directory Keel rewrote (and the other way round), and the automatic
//! triggers (Redis's percentage rule, Keel's greedy bounds).
//!
//! Nothing here sleeps for a flush: tests poll INFO or wait on conditions.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{bulk, int, ok, simple, temp_dir, Client, Frame, Server};

const T: Duration = Duration::from_secs(30);

fn info(c: &mut Client) -> HashMap<String, String> {
    let Frame::Bulk(text) = c.send(&["INFO", "persistence"]) else { panic!("INFO") };
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

fn field(c: &mut Client, name: &str) -> String {
    info(c).remove(name).unwrap_or_else(|| panic!("INFO has no {name}"))
}

fn num(c: &mut Client, name: &str) -> u64 {
    field(c, name).parse().unwrap_or_else(|_| panic!("{name} is not a number"))
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !f() {
        if Instant::now() > deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(2));
    }
    true
}

/// Waits until `n` rewrites have started and none is running; returns
/// `aof_last_bgrewrite_status`.
fn wait_rewrites(c: &mut Client, n: u64) -> String {
    assert!(
        wait_until(T, || {
            let i = info(c);
            i["aof_rewrite_in_progress"] == "0" && i["aof_rewrite_scheduled"] == "0" && i["aof_rewrites"].parse::<u64>().unwrap_or(0) >= n
        }),
        "rewrite {n} never finished: {:?}",
        info(c)
    );
    field(c, "aof_last_bgrewrite_status")
}

fn aof_files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir.join("appendonlydir"))
        .expect("appendonlydir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("appendonlydir"))
        .expect("appendonlydir")
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn assert_check_aof_valid(dir: &Path) {
    let mut out = Vec::new();
    let manifest = dir.join("appendonlydir").join("appendonly.aof.manifest");
    let outcome = keel_journal::check::check(&manifest, keel_journal::check::Repair::Nothing, &mut out).expect("check");
    assert_eq!(outcome, keel_journal::check::CheckOutcome::Valid, "{}", String::from_utf8_lossy(&out));
}

/// `n` keys `fill:<i>` of `size` bytes, with MSETs pipelined 50 deep.
fn prefill(c: &mut Client, n: usize, size: usize) {
    let value = "x".repeat(size);
    let per = 500;
    let mut sent = 0;
    let mut i = 0;
    while i < n {
        let mut argv = vec!["MSET".to_string()];
        for k in i..(i + per).min(n) {
            argv.push(format!("fill:{k}"));
            argv.push(value.clone());
        }
        c.write_command(&argv);
        sent += 1;
        i += per;
        if sent == 50 || i >= n {
            for _ in 0..sent {
                assert_eq!(c.read(), ok());
            }
            sent = 0;
        }
    }
}

/// What one writer of one cycle did. Iteration `i` sends, in order,
/// `SET w:<id>:<i> v<i>`, `INCR c:<id>`, `RPUSH l:<id> <i>`, `APPEND a:<id> <i>;`.
#[derive(Default)]
struct Progress {
    /// Iterations whose four replies came back.
    done: AtomicU64,
    /// Iterations begun (their writes may or may not have landed).
    begun: AtomicU64,
}

fn writer(port: u16, tag: String, p: Arc<Progress>, stop: Arc<AtomicBool>) {
    let mut c = Client::connect(port);
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        p.begun.store(i + 1, Ordering::SeqCst);
        let replies = [
            c.try_send(&["SET", &format!("w:{tag}:{i}"), &format!("v{i}")]),
            c.try_send(&["INCR", &format!("c:{tag}")]),
            c.try_send(&["RPUSH", &format!("l:{tag}"), &i.to_string()]),
            c.try_send(&["APPEND", &format!("a:{tag}"), &format!("{i};")]),
        ];
        for r in replies {
            match r {
                Some(Frame::Error(e)) => panic!("writer {tag}: {}", String::from_utf8_lossy(&e)),
                Some(_) => {}
                None => return,
            }
        }
        p.done.store(i + 1, Ordering::SeqCst);
        i += 1;
    }
}

/// Checks one writer's keys after a restart: every acknowledged iteration
/// is there, none is applied twice (the counter, the list and the string
/// each count between `done` and `begun`, with no repeats).
fn check_writer(c: &mut Client, tag: &str, done: u64, begun: u64) {
    for i in 0..done {
        assert_eq!(c.send(&["GET", &format!("w:{tag}:{i}")]), bulk(&format!("v{i}")), "acknowledged SET {tag}:{i} lost");
    }
    let Frame::Bulk(n) = c.send(&["GET", &format!("c:{tag}")]) else { panic!("counter {tag} missing") };
    let n: u64 = String::from_utf8_lossy(&n).parse().expect("counter");
    assert!(n >= done && n <= begun, "counter {tag} = {n}: acknowledged {done}, sent {begun}");
    let Frame::Array(items) = c.send(&["LRANGE", &format!("l:{tag}"), "0", "-1"]) else { panic!("LRANGE") };
    let len = items.len() as u64;
    assert!(len >= done && len <= begun, "list {tag} has {len}: acknowledged {done}, sent {begun}");
    for (k, item) in items.iter().enumerate() {
        assert_eq!(*item, bulk(&k.to_string()), "list {tag} at {k}");
    }
    let Frame::Bulk(s) = c.send(&["GET", &format!("a:{tag}")]) else { panic!("string {tag} missing") };
    let s = String::from_utf8_lossy(&s).into_owned();
    let parts: Vec<&str> = s.split_terminator(';').collect();
    assert!(parts.len() as u64 >= done && parts.len() as u64 <= begun, "APPENDs of {tag}: {}", parts.len());
    for (k, part) in parts.iter().enumerate() {
        assert_eq!(*part, k.to_string(), "APPEND {tag} at {k}");
    }
}

/// Writers change keys that exist at S (INCR, RPUSH and APPEND in place)
/// while the snapshot reads them out: a base that saw a change made after
/// S would replay it twice (the new incr file has it too). The first
/// cycle runs under `always`, the second under `everysec`, where workers
/// write the journal themselves except while the rewrite switches files.
#[test]
fn bgrewriteaof_under_concurrent_writes_then_kill_9() {
    let dir = temp_dir("rw-concurrent");
    const WRITERS: usize = 4;
    let mut history: Vec<(String, u64, u64)> = Vec::new();
    for cycle in 0..2u64 {
        let appendfsync = if cycle == 0 { "always" } else { "everysec" };
        let server = Server::start_in(&dir, &["--auto-aof-rewrite-percentage", "0", "--appendfsync", appendfsync]);
        let mut c = server.client();
        for (tag, done, begun) in &history {
            check_writer(&mut c, tag, *done, *begun);
        }
        if cycle == 0 {
            // Enough data that the snapshot takes many steps.
            prefill(&mut c, 60_000, 64);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let progress: Vec<Arc<Progress>> = (0..WRITERS).map(|_| Arc::new(Progress::default())).collect();
        let tags: Vec<String> = (0..WRITERS).map(|id| format!("{cycle}-{id}")).collect();
        let handles: Vec<_> = (0..WRITERS)
            .map(|id| {
                let (p, s, tag, port) = (progress[id].clone(), stop.clone(), tags[id].clone(), server.port);
                thread::spawn(move || writer(port, tag, p, s))
            })
            .collect();
        let total = |p: &[Arc<Progress>]| p.iter().map(|p| p.done.load(Ordering::SeqCst)).sum::<u64>();
        assert!(wait_until(T, || total(&progress) >= 100));
        // The first rewrite writes an RDB base (the default), the second,
        // switched at run time, an AOF one.
        let format = if cycle == 0 { "rdb" } else { "aof" };
        if cycle == 1 {
            assert_eq!(c.cmd("CONFIG SET aof-use-rdb-preamble no"), ok());
        }
        assert_eq!(c.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
        assert_eq!(wait_rewrites(&mut c, 1), "ok");
        let after = total(&progress);
        assert!(wait_until(T, || total(&progress) >= after + 100), "writes after the rewrite");
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().expect("writer");
        }
        let base_seq = cycle + 2;
        assert_eq!(
            aof_files(&dir),
            [
                format!("appendonly.aof.{base_seq}.base.{format}"),
                format!("appendonly.aof.{base_seq}.incr.aof"),
                "appendonly.aof.manifest".to_string()
            ]
            .into_iter()
            .collect::<BTreeSet<_>>(),
            "one base and one incr file after the rewrite"
        );
        assert_check_aof_valid(&dir);
        for (id, p) in progress.iter().enumerate() {
            history.push((tags[id].clone(), p.done.load(Ordering::SeqCst), p.begun.load(Ordering::SeqCst)));
        }
    }
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    for (tag, done, begun) in &history {
        check_writer(&mut c, tag, *done, *begun);
    }
    assert_eq!(c.send(&["GET", "fill:59999"]), bulk(&"x".repeat(64)));
    let Frame::Integer(keys) = c.send(&["DBSIZE"]) else { panic!("DBSIZE") };
    let writes: u64 = history.iter().map(|h| h.1).sum();
    assert!(keys as u64 >= 60_000 + writes, "{keys} keys");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A crash while the base is being written: the temporary base is not
/// listed, the old files are, so nothing is lost; the next start deletes the
/// leftover and the next rewrite succeeds.
#[test]
fn kill_9_in_the_middle_of_a_rewrite_loses_nothing() {
    let dir = temp_dir("rw-midway");
    // Uncompressed, so that the RDB base grows as the scan goes.
    let server = Server::start_in(&dir, &["--auto-aof-rewrite-percentage", "0", "--rdbcompression", "no"]);
    let mut c = server.client();
    let keys = 120_000;
    prefill(&mut c, keys, 400);
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(Progress::default());
    let handle = {
        let (p, s, port) = (progress.clone(), stop.clone(), server.port);
        thread::spawn(move || writer(port, "mid".into(), p, s))
    };
    assert!(wait_until(T, || progress.done.load(Ordering::SeqCst) >= 20));
    assert_eq!(c.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
    // Kill once the temporary base holds a few MB: well inside the rewrite.
    let temp_len = || {
        std::fs::read_dir(dir.join("appendonlydir"))
            .ok()?
            .filter_map(Result::ok)
            .find(|e| e.file_name().to_string_lossy().starts_with("temp-rewriteaof-bg-"))
            .and_then(|e| e.metadata().ok())
            .map(|m| m.len())
    };
    let mut caught = false;
    let deadline = Instant::now() + T;
    while Instant::now() < deadline {
        if temp_len().is_some_and(|n| n >= 4 << 20) {
            caught = true;
            break;
        }
        if field(&mut c, "aof_rewrite_in_progress") == "0" {
            break;
        }
        thread::sleep(Duration::from_millis(1));
    }
    server.kill9();
    stop.store(true, Ordering::Relaxed);
    handle.join().expect("writer");
    assert!(caught, "the rewrite ended before it could be interrupted");
    let files = aof_files(&dir);
    assert!(files.contains("appendonly.aof.1.base.rdb") && files.iter().any(|f| f.starts_with("temp-rewriteaof-bg-")), "{files:?}");
    assert_check_aof_valid(&dir);

    let server = Server::start_in(&dir, &["--auto-aof-rewrite-percentage", "0", "--rdbcompression", "no"]);
    let mut c = server.client();
    assert!(!aof_files(&dir).iter().any(|f| f.starts_with("temp-")), "the leftover temporary base is deleted");
    let (done, begun) = (progress.done.load(Ordering::SeqCst), progress.begun.load(Ordering::SeqCst));
    check_writer(&mut c, "mid", done, begun);
    let value = bulk(&"x".repeat(400));
    for chunk in (0..keys).collect::<Vec<_>>().chunks(1000) {
        let mut argv = vec!["MGET".to_string()];
        argv.extend(chunk.iter().map(|k| format!("fill:{k}")));
        let Frame::Array(values) = c.send(&argv) else { panic!("MGET") };
        assert!(values.iter().all(|v| *v == value), "a prefilled key was lost");
    }
    // The next rewrite runs to the end.
    assert_eq!(c.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
    assert_eq!(wait_rewrites(&mut c, 1), "ok");
    let files = aof_files(&dir);
    assert_eq!(files.len(), 3, "{files:?}");
    drop(server);
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    check_writer(&mut c, "mid", done, begun);
    assert_eq!(c.send(&["GET", &format!("fill:{}", keys - 1)]), value);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Debian's redis-server 7.0.15 loads the directory Keel rewrote, and Keel
/// loads the directory redis-server rewrote in turn.
#[test]
fn redis_and_keel_load_each_others_rewritten_directories() {
    let dir = temp_dir("rw-interop");
    let long: Vec<String> = (0..150).map(|i| format!("e{i}")).collect();
    {
        let server = Server::start_in(&dir, &["--aof-use-rdb-preamble", "no"]);
        let mut c = server.client();
        c.cmd("SET plain value");
        c.send(&["SET", "bin", "a\r\nb\0c"]);
        c.cmd("INCRBY n 41");
        c.cmd("SET ttl v PX 100000");
        c.cmd("SET gone v PX 1");
        let mut argv = vec!["RPUSH".to_string(), "long".to_string()];
        argv.extend(long.iter().cloned());
        c.send(&argv);
        c.cmd("SELECT 5");
        c.cmd("RPUSH short a b c");
        c.cmd("SET other db5");
        c.cmd("SELECT 0");
        assert_eq!(c.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
        assert_eq!(wait_rewrites(&mut c, 1), "ok");
        // After S: into the new incr file, in both databases.
        c.cmd("INCR n");
        c.cmd("SELECT 5");
        c.cmd("RPUSH short d");
        server.kill9();
    }
    let base = std::fs::read(dir.join("appendonlydir").join("appendonly.aof.2.base.aof")).expect("base");
    let text = String::from_utf8_lossy(&base);
    assert!(!text.contains("gone"), "a key expired at S is left out");
    assert_eq!(text.matches("RPUSH").count(), 4, "150 elements in batches of 64, and one short list");
    assert!(text.contains("PEXPIREAT"));
    let flags = ["--dir", dir.to_str().expect("utf8 dir"), "--appendonly", "yes", "--aof-use-rdb-preamble", "no"];
    let Some(redis) = Server::start_redis(&flags) else { return };
    let mut r = redis.client();
    assert_eq!(r.cmd("GET plain"), bulk("value"));
    assert_eq!(r.send(&["GET", "bin"]), bulk("a\r\nb\0c"));
    assert_eq!(r.cmd("GET n"), bulk("42"));
    let Frame::Integer(ttl) = r.cmd("PTTL ttl") else { panic!("pttl") };
    assert!(ttl > 0 && ttl <= 100_000);
    assert_eq!(r.cmd("EXISTS gone"), int(0));
    let Frame::Array(items) = r.cmd("LRANGE long 0 -1") else { panic!("lrange") };
    assert_eq!(items, long.iter().map(|e| bulk(e)).collect::<Vec<_>>());
    r.cmd("SELECT 5");
    assert_eq!(r.cmd("LRANGE short 0 -1"), Frame::Array(vec![bulk("a"), bulk("b"), bulk("c"), bulk("d")]));
    assert_eq!(r.cmd("GET other"), bulk("db5"));
    // Redis writes on and rewrites (history files and all); Keel reads it.
    assert_eq!(r.cmd("SET from-redis yes"), ok());
    assert_eq!(r.cmd("BGREWRITEAOF"), simple("Background append only file rewriting started"));
    assert_eq!(wait_rewrites(&mut r, 1), "ok");
    assert_eq!(r.cmd("SET after-redis-rewrite yes"), ok());
    r.write_command(&["SHUTDOWN", "NOSAVE"]);
    r.read_to_close();
    drop(redis);
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("GET n"), bulk("42"));
    assert_eq!(c.send(&["GET", "bin"]), bulk("a\r\nb\0c"));
    let Frame::Array(items) = c.cmd("LRANGE long 0 -1") else { panic!("lrange") };
    assert_eq!(items.len(), 150);
    c.cmd("SELECT 5");
    assert_eq!(c.cmd("GET from-redis"), bulk("yes"));
    assert_eq!(c.cmd("GET after-redis-rewrite"), bulk("yes"));
    assert_eq!(c.cmd("LLEN short"), int(4));
    // And Keel rewrites the directory Redis left.
    assert_eq!(c.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
    assert_eq!(wait_rewrites(&mut c, 1), "ok");
    drop(server);
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    c.cmd("SELECT 5");
    assert_eq!(c.cmd("GET after-redis-rewrite"), bulk("yes"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bgrewriteaof_replies_as_redis() {
    let server = Server::start(&["--auto-aof-rewrite-percentage", "0"]);
    let mut c = server.client();
    prefill(&mut c, 20_000, 32);
    // The second request arrives while the first runs: it was accepted
    // before its reply was written.
    c.write_command(&["BGREWRITEAOF"]);
    c.write_command(&["BGREWRITEAOF"]);
    assert_eq!(c.read(), simple("Background append only file rewriting started"));
    assert_eq!(c.read(), common::err("ERR Background append only file rewriting already in progress"));
    assert_eq!(wait_rewrites(&mut c, 1), "ok");
    // Inside a transaction it is scheduled, and the cron starts it.
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("BGREWRITEAOF"), simple("QUEUED"));
    assert_eq!(c.cmd("EXEC"), Frame::Array(vec![simple("Background append only file rewriting scheduled")]));
    assert_eq!(wait_rewrites(&mut c, 2), "ok");
    let i = info(&mut c);
    assert_eq!(i["aof_rewrites_consecutive_failures"], "0");
    assert_ne!(i["aof_last_rewrite_time_sec"], "-1");
    assert_eq!(i["aof_current_rewrite_time_sec"], "-1");
    assert_eq!(i["keel_snapshot_saved_bytes"], "0");
    assert_eq!(i["keel_aof_base_file_size"], std::fs::metadata(server.dir.as_ref().expect("dir").join("appendonlydir/appendonly.aof.3.base.rdb")).expect("base").len().to_string());
    // As Redis's: the size right after the rewrite (nothing written since).
    assert_eq!(i["aof_base_size"], i["aof_current_size"]);
}

/// With `appendonly no` BGREWRITEAOF still writes a base of the data as it
/// is, as Redis's does (its tests load it with DEBUG LOADAOF), and a start
/// with `appendonly yes` on the directory loads it.
#[test]
fn bgrewriteaof_with_the_aof_off_writes_a_base() {
    let dir = temp_dir("rw-off");
    {
        let server = Server::start_in(&dir, &["--appendonly", "no", "--save", "", "--enable-debug-command", "yes"]);
        let mut c = server.client();
        common::state::fill_every_type(&mut c);
        let digest = c.cmd("DEBUG DIGEST");
        assert_eq!(c.cmd("BGREWRITEAOF"), simple("Background append only file rewriting started"));
        assert_eq!(wait_rewrites(&mut c, 1), "ok");
        assert_eq!(c.cmd("SET unlogged 1"), ok());
        assert_eq!(c.cmd("DEBUG LOADAOF"), ok());
        assert_eq!(c.cmd("DEBUG DIGEST"), digest);
        assert_eq!(c.cmd("SET unlogged 1"), ok());
        assert_eq!(c.cmd("CONFIG GET appendonly"), Frame::Array(vec![bulk("appendonly"), bulk("no")]));
        let want = common::state::read_state(&mut c);
        drop(server);
        let server = Server::start_last_in(&dir, &["--appendonly", "yes"]);
        let mut c = server.client();
        assert_eq!(c.cmd("EXISTS unlogged"), int(0), "written after the base, with the AOF off");
        assert_eq!(c.cmd("SET unlogged 1"), ok());
        common::state::assert_same(&common::state::read_state(&mut c), &want, "the base and the write after it");
    }
}

/// Redis's rule: once the AOF passes `auto-aof-rewrite-min-size` and has
/// doubled since the last rewrite.
#[test]
fn automatic_rewrite_by_growth_percentage() {
    // A fast cron, so that a trigger is seen within a few writes. An AOF
    // base, whose size follows the data's (an RDB one compresses the
    // repetitive values to almost nothing).
    let server = Server::start(&["--auto-aof-rewrite-min-size", "64kb", "--hz", "500", "--aof-use-rdb-preamble", "no"]);
    let mut c = server.client();
    assert_eq!(
        c.cmd("CONFIG GET auto-aof-rewrite-*"),
        Frame::Array(vec![bulk("auto-aof-rewrite-percentage"), bulk("100"), bulk("auto-aof-rewrite-min-size"), bulk("65536")])
    );
    assert_eq!(field(&mut c, "keel_aof_last_auto_rewrite"), "none");
    // Overwrites of 50 keys: a rewrite shrinks the files to about 50 KB.
    write_until(&mut c, |c| num(c, "aof_rewrites") > 0, |_| {});
    assert_eq!(field(&mut c, "keel_aof_last_auto_rewrite"), "growth");
    let at = num(&mut c, "keel_aof_last_auto_rewrite_size");
    assert!(at > 65_536 && at < 2 * 65_536, "fired at {at} bytes");
    assert_eq!(wait_rewrites(&mut c, 1), "ok");
    assert!(num(&mut c, "aof_current_size") < 70_000);
    // The next one once the files have doubled since.
    let base = num(&mut c, "aof_base_size");
    write_until(&mut c, |c| num(c, "aof_rewrites") > 1, |_| {});
    let at = num(&mut c, "keel_aof_last_auto_rewrite_size");
    assert!(at >= 2 * base && at < 3 * base, "fired at {at} bytes, {base} after the last rewrite");
    assert_eq!(wait_rewrites(&mut c, 2), "ok");
}

/// Writes 1 KB overwrites of 50 keys until `until` holds, checking `each`
/// after every write; returns how long it took.
fn write_until(c: &mut Client, mut until: impl FnMut(&mut Client) -> bool, mut each: impl FnMut(&mut Client)) -> Duration {
    let value = "z".repeat(1000);
    let started = Instant::now();
    let mut i = 0;
    while !until(c) {
        assert_eq!(c.send(&["SET", &format!("k{}", i % 50), &value]), ok());
        each(c);
        i += 1;
        assert!(i < 100_000, "never happened");
    }
    started.elapsed()
}

/// The greedy recovery bound: at 100 KB/s replay and a 4 s bound, the
/// rewrite starts at 90% of it (360 KB), before the bound, though Redis's
/// rule (set to fire early here) would have fired long before.
#[test]
fn greedy_recovery_bound_triggers_at_ninety_percent() {
    let server = Server::start(&[
        // The rewrite lasts about a second: long enough to look at it.
        "--rdb-key-save-delay",
        "20000",
        "--keel-aof-max-recovery-seconds",
        "4",
        "--keel-aof-replay-rate",
        "100000",
        "--auto-aof-rewrite-min-size",
        "1kb",
        "--auto-aof-rewrite-percentage",
        "1",
        "--hz",
        "500",
    ]);
    let mut c = server.client();
    assert_eq!(field(&mut c, "keel_aof_replay_rate"), "100000");
    assert_eq!(field(&mut c, "keel_aof_replay_rate_measured"), "0");
    let took = write_until(&mut c, |c| num(c, "aof_rewrites") > 0, |_| {});
    // At hz 500 the cron looked many times meanwhile.
    assert!(took > Duration::from_millis(20), "too fast for the cron to have looked in between");
    assert_eq!(field(&mut c, "keel_aof_last_auto_rewrite"), "recovery");
    let at = num(&mut c, "keel_aof_last_auto_rewrite_size");
    assert!(at >= 360_000, "fired before 90% of the bound: at {at} bytes");
    assert!(at < 400_000, "fired past the bound: at {at} bytes");
    // It keeps a bound: its scan runs as an equal of the workers.
    assert_eq!(field(&mut c, "keel_aof_rewrite_behind_workers"), "0");
    assert_eq!(num(&mut c, "aof_rewrite_in_progress"), 1);
    assert_eq!(server.thread_policy("keel-rewrite-bg"), None);
    assert_eq!(c.cmd("CONFIG SET rdb-key-save-delay 0"), ok());
    assert_eq!(wait_rewrites(&mut c, 1), "ok");
    let after: f64 = field(&mut c, "keel_aof_recovery_estimate_sec").parse().expect("estimate");
    assert!(after < 1.0, "the rewrite brought the estimate down: {after}");
    // Raising the bound at run time puts the next rewrite off.
    assert_eq!(c.cmd("CONFIG SET keel-aof-max-recovery-seconds 1000"), ok());
    write_until(&mut c, |c| num(c, "aof_current_size") > 450_000, |_| {});
    assert_eq!(num(&mut c, "aof_rewrites"), 1);
}

/// The greedy disk bound: the files plus the base the rewrite will write
/// must stay under `keel-aof-max-disk-bytes`. Before any rewrite the base
/// may be as large as the files (so it starts at 45%); after one, the
/// estimate follows how much the last rewrite compacted, and the files grow
/// closer to the bound, never past it.
#[test]
fn greedy_disk_bound_keeps_the_directory_under_it() {
    let dir = temp_dir("rw-disk");
    let bound: u64 = 1_000_000;
    let server = Server::start_in(
        &dir,
        &["--keel-aof-max-disk-bytes", &bound.to_string(), "--auto-aof-rewrite-min-size", "1kb", "--auto-aof-rewrite-percentage", "1", "--hz", "500"],
    );
    let mut c = server.client();
    write_until(&mut c, |c| num(c, "aof_rewrites") > 0, |_| {});
    assert_eq!(field(&mut c, "keel_aof_last_auto_rewrite"), "disk");
    let first = num(&mut c, "keel_aof_last_auto_rewrite_size");
    assert!(first >= bound * 45 / 100 && first < bound / 2, "first rewrite at {first} bytes");
    assert_eq!(wait_rewrites(&mut c, 1), "ok");
    let mut max_dir = 0;
    write_until(&mut c, |c| num(c, "aof_rewrites") > 2, |_| max_dir = max_dir.max(dir_bytes(&dir)));
    // 50 KB of live data: the first rewrite compacted 450 KB to 50 KB, so
    // the next starts when the files x 1.11 reach 90%: at about 810 KB.
    assert_eq!(wait_rewrites(&mut c, 3), "ok");
    let third = num(&mut c, "keel_aof_last_auto_rewrite_size");
    assert!(third > bound * 75 / 100, "the rewrites were not put off: at {third} bytes");
    assert!(max_dir < bound, "the directory reached {max_dir} bytes");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rdb-key-save-delay` slows a rewrite key by key, as it slows Redis's
/// rewrite child (Redis's own tests keep rewrites going with it), and
/// setting it back to 0 lets the rewrite finish at once.
#[test]
fn rdb_key_save_delay_holds_a_rewrite_until_set_back() {
    let server = Server::start(&["--rdb-key-save-delay", "1000000"]);
    let mut c = server.client();
    // One hash tag: one shard, so all ten keys are read in one step.
    for i in 0..10 {
        assert_eq!(c.send(&["SET", &format!("{{t}}k{i}"), "v"]), ok());
    }
    assert_eq!(c.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
    // Without the delay the rewrite would commit within milliseconds of
    // that step; with it, it waits ten seconds first.
    assert!(wait_until(T, || num(&mut c, "current_save_keys_processed") == 10), "the step never ran");
    let ended = wait_until(Duration::from_secs(1), || num(&mut c, "aof_rewrite_in_progress") == 0);
    assert!(!ended, "ten keys at a second each, yet the rewrite ended within a second");
    // The scan behind the workers, the rest of the rewrite as their equal.
    assert_eq!(server.thread_policy("keel-rewrite"), Some(libc::SCHED_OTHER));
    assert_eq!(server.thread_policy("keel-rewrite-bg"), Some(libc::SCHED_IDLE));
    assert_eq!(field(&mut c, "keel_aof_rewrite_behind_workers"), "1");
    assert_eq!(c.send(&["CONFIG", "SET", "rdb-key-save-delay", "0"]), ok());
    assert_eq!(wait_rewrites(&mut c, 1), "ok");
    assert_eq!(field(&mut c, "keel_aof_rewrite_behind_workers"), "0");
}

/// `CONFIG SET appendonly no` stops a rewrite under way before it replies,
/// as Redis kills its child: logged in Redis's words (its unit/aofrw looks
/// for them), not a failed rewrite, and no new base replaces the old.
#[test]
fn turning_the_aof_off_stops_a_rewrite_under_way() {
    let server = Server::start(&["--rdb-key-save-delay", "1000000"]);
    let log = std::env::temp_dir().join("keel-test-logs").join(format!("{}.log", server.port));
    let dir = server.dir.clone().expect("dir");
    let mut c = server.client();
    for i in 0..10 {
        assert_eq!(c.send(&["SET", &format!("k{i}"), "v"]), ok());
    }
    let before = aof_files(&dir);
    assert_eq!(c.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
    assert!(wait_until(T, || num(&mut c, "current_save_keys_processed") > 0), "the scan never began");
    assert_eq!(c.send(&["CONFIG", "SET", "appendonly", "no"]), ok());
    // Gone once the reply came, as Redis's child is, and not counted as a
    // failure.
    assert_eq!(num(&mut c, "aof_rewrite_in_progress"), 0);
    assert_eq!(field(&mut c, "aof_last_bgrewrite_status"), "ok");
    assert_eq!(num(&mut c, "aof_rewrites_consecutive_failures"), 0);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("Killing running AOF rewrite child"), "{text}");
    // The base stays (the incr file the rewrite opened stays too, as Redis's).
    let bases = |files: BTreeSet<String>| files.into_iter().filter(|f| f.contains(".base.")).collect::<Vec<_>>();
    assert_eq!(bases(aof_files(&dir)), bases(before));
}

/// A rewrite's scan behind the workers moves to the rewrite thread, as
/// their equal, once the snapshot keeps more than a tenth of the memory in
/// use (old versions of keys overwritten before the scan reached them);
/// the base it then finishes holds every key, read before and after.
#[test]
fn a_scan_behind_the_workers_moves_up_when_the_snapshot_keeps_too_much() {
    let dir = temp_dir("rw-moves-up");
    let server = Server::start_in(&dir, &["--auto-aof-rewrite-percentage", "0", "--rdb-key-save-delay", "2000"]);
    let mut c = server.client();
    let n = 20_000;
    prefill(&mut c, n, 1000);
    assert_eq!(c.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
    // Two ms a key: the scan is still early when the overwrites come.
    assert!(wait_until(T, || num(&mut c, "current_save_keys_processed") > 0), "the scan never began");
    assert_eq!(field(&mut c, "keel_aof_rewrite_behind_workers"), "1");
    assert_eq!(server.thread_policy("keel-rewrite-bg"), Some(libc::SCHED_IDLE));
    // Half the keys overwritten: about 10 MB kept, against some 25 MB in use.
    let fresh = "y".repeat(1000);
    for k in 0..n / 2 {
        c.write_command(&["SET".to_string(), format!("fill:{k}"), fresh.clone()]);
    }
    for _ in 0..n / 2 {
        assert_eq!(c.read(), ok());
    }
    assert!(num(&mut c, "keel_snapshot_saved_bytes") > 5_000_000, "the overwrites kept little");
    // INFO's sample is the peak's floor (Redis's copy-on-write fields).
    assert!(num(&mut c, "current_cow_peak") > 5_000_000);
    assert!(
        wait_until(T, || field(&mut c, "keel_aof_rewrite_behind_workers") == "0"),
        "the scan stayed behind the workers"
    );
    assert_eq!(num(&mut c, "aof_rewrite_in_progress"), 1, "moved up before the rewrite ended");
    assert!(num(&mut c, "current_save_keys_processed") < n as u64 / 2, "the scan was nearly done anyway");
    assert_eq!(c.send(&["CONFIG", "SET", "rdb-key-save-delay", "0"]), ok());
    assert_eq!(wait_rewrites(&mut c, 1), "ok");
    assert!(num(&mut c, "aof_last_cow_size") > 5_000_000);
    assert_eq!(num(&mut c, "current_cow_size"), 0);
    server.kill9();
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!(c.send(&["DBSIZE"]), int(n as i64));
    let old = "x".repeat(1000);
    for k in (0..n).step_by(97).chain([n / 2 - 1, n / 2, n - 1]) {
        let want = if k < n / 2 { &fresh } else { &old };
        assert_eq!(c.send(&["GET", &format!("fill:{k}")]), bulk(want), "fill:{k}");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A disk error while the base is written (KEEL_JOURNAL_FAILPOINT: the
/// first write after the clients' 200) fails the rewrite and nothing else:
/// the temporary base is deleted, every file stays listed, clients never
/// see an error, and the next rewrite succeeds.
#[test]
fn a_failing_base_write_fails_the_rewrite_alone() {
    let dir = temp_dir("rw-fault");
    // Each acknowledged SET, sent one at a time, is one write(2) of the
    // journal: write 201 is the rewrite's first.
    let server = Server::start_in_with_env(
        &dir,
        &["--auto-aof-rewrite-percentage", "0"],
        &[("KEEL_JOURNAL_FAILPOINT", "write-enospc:201:1")],
    );
    let mut c = server.client();
    for i in 0..200 {
        assert_eq!(c.send(&["SET", &format!("k{i}"), &format!("v{i}")]), ok());
    }
    assert_eq!(num(&mut c, "keel_aof_write_errors"), 0);
    assert_eq!(c.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
    assert_eq!(wait_rewrites(&mut c, 1), "err");
    assert_eq!(field(&mut c, "aof_rewrites_consecutive_failures"), "1");
    assert_eq!(field(&mut c, "aof_last_write_status"), "ok", "the journal itself never failed");
    assert_eq!(
        aof_files(&dir),
        ["appendonly.aof.1.base.rdb", "appendonly.aof.1.incr.aof", "appendonly.aof.2.incr.aof", "appendonly.aof.manifest"]
            .into_iter()
            .map(String::from)
            .collect::<BTreeSet<_>>()
    );
    for i in 200..300 {
        assert_eq!(c.send(&["SET", &format!("k{i}"), &format!("v{i}")]), ok());
    }
    assert_eq!(c.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
    assert_eq!(wait_rewrites(&mut c, 2), "ok");
    assert_eq!(field(&mut c, "aof_rewrites_consecutive_failures"), "0");
    assert_eq!(aof_files(&dir).len(), 3);
    assert_eq!(c.send(&["SET", "last", "one"]), ok());
    server.kill9();
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    for i in 0..300 {
        assert_eq!(c.send(&["GET", &format!("k{i}")]), bulk(&format!("v{i}")));
    }
    assert_eq!(c.send(&["GET", "last"]), bulk("one"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every key of databases 0..4 with its value and whether it has a TTL.
fn dump(c: &mut Client) -> Vec<(usize, String, String, bool)> {
    let mut out = Vec::new();
    for db in 0..4 {
        assert_eq!(c.send(&["SELECT", &db.to_string()]), ok());
        let Frame::Array(keys) = c.send(&["KEYS", "r:*"]) else { panic!("KEYS") };
        for k in keys {
            let Frame::Bulk(k) = k else { panic!("key") };
            let k = String::from_utf8_lossy(&k).into_owned();
            let value = match c.send(&["TYPE", &k]) {
                Frame::Simple(t) if t == b"string" => format!("{:?}", c.send(&["GET", &k])),
                Frame::Simple(t) if t == b"list" => format!("{:?}", c.send(&["LRANGE", &k, "0", "-1"])),
                other => panic!("type {other:?}"),
            };
            let Frame::Integer(ttl) = c.send(&["PTTL", &k]) else { panic!("PTTL") };
            out.push((db, k, value, ttl > 0));
        }
    }
    assert_eq!(c.send(&["SELECT", "0"]), ok());
    out.sort();
    out
}

/// A random mix of writes, whole-database ones included (SWAPDB, FLUSHDB,
/// MOVE, COPY) and in-place ones (SETRANGE, APPEND, INCR, LPOP, EXPIRE),
/// over four databases while rewrites run back to back: after `kill -9`
/// the state is exactly the one before. `everysec`, so that many writes
/// land during each snapshot; the kill comes once everything is written
/// to the kernel, which a killed process does not lose.
#[test]
fn random_writes_across_databases_during_rewrites() {
    use rand::{Rng, SeedableRng};
    let dir = temp_dir("rw-random");
    let server = Server::start_in(&dir, &["--auto-aof-rewrite-percentage", "0", "--appendfsync", "everysec"]);
    let mut c = server.client();
    // A large database the random writes leave alone: each snapshot of it
    // takes many steps, during which the others change.
    assert_eq!(c.send(&["SELECT", "5"]), ok());
    prefill(&mut c, 200_000, 100);
    assert_eq!(c.send(&["SELECT", "0"]), ok());
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut db = 0;
    let mut rewrites = 0;
    let key = |rng: &mut rand::rngs::StdRng| format!("r:{}", rng.gen_range(0..300));
    let mut round = 0;
    // The last rewrite: writes stop soon after its snapshot has begun (a
    // write kept an old version), so that what they did during it is
    // mostly not overwritten before the comparison.
    let mut tail: Option<u32> = None;
    loop {
        round += 1;
        assert!(round < 2_000_000, "rewrites did not finish");
        if round % 100 == 0 && rewrites < 8 && field(&mut c, "aof_rewrite_in_progress") == "0" {
            assert_eq!(c.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
            rewrites += 1;
        }
        if rewrites == 8 && round % 10 == 0 {
            match &mut tail {
                Some(n) if *n > 300 => break,
                Some(n) => *n += 10,
                None if field(&mut c, "keel_snapshot_saved_bytes") != "0" => tail = Some(0),
                None if field(&mut c, "aof_rewrite_in_progress") == "0" => break,
                None => {}
            }
        }
        let k = key(&mut rng);
        let argv: Vec<String> = match rng.gen_range(0..100) {
            0..=19 => vec!["SET".into(), k, format!("v{round}")],
            20..=29 => vec!["APPEND".into(), k, format!("+{round}")],
            30..=34 => vec!["SETRANGE".into(), k, "2".into(), "xy".into()],
            35..=44 => vec!["RPUSH".into(), format!("{k}:l"), round.to_string()],
            45..=49 => vec!["LPOP".into(), format!("{k}:l")],
            50..=54 => vec!["INCR".into(), format!("{k}:n")],
            55..=59 => vec!["DEL".into(), k],
            60..=64 => vec!["EXPIRE".into(), k, "100000".into()],
            65..=66 => vec!["PERSIST".into(), k],
            67..=70 => vec!["RENAME".into(), k, key(&mut rng)],
            71..=74 => vec!["MOVE".into(), k, rng.gen_range(0..4).to_string()],
            75..=77 => vec!["COPY".into(), k, key(&mut rng), "DB".into(), rng.gen_range(0..4).to_string(), "REPLACE".into()],
            78..=79 => vec!["SWAPDB".into(), rng.gen_range(0..4).to_string(), rng.gen_range(0..4).to_string()],
            80 => vec!["FLUSHDB".into()],
            81..=84 => {
                db = rng.gen_range(0..4);
                vec!["SELECT".into(), db.to_string()]
            }
            _ => vec!["SET".into(), k, "x".repeat(rng.gen_range(1..200))],
        };
        if let Frame::Error(e) = c.send(&argv) {
            let e = String::from_utf8_lossy(&e);
            let expected = ["WRONGTYPE", "no such key", "not an integer", "source and destination objects are the same"];
            assert!(expected.iter().any(|x| e.contains(x)), "{argv:?}: {e}");
        }
    }
    assert_eq!(c.send(&["SELECT", &db.to_string()]), ok());
    assert_eq!(wait_rewrites(&mut c, rewrites), "ok");
    let before = dump(&mut c);
    assert!(before.len() > 10, "{} keys", before.len());
    assert!(wait_until(T, || {
        let i = info(&mut c);
        i["keel_aof_durable_lsn"] == i["keel_aof_appended_lsn"]
    }));
    server.kill9();
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!(dump(&mut c), before);
    assert_eq!(c.send(&["SELECT", "5"]), ok());
    assert_eq!(c.send(&["DBSIZE"]), int(200_000));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// With RDB bases (`aof-use-rdb-preamble yes`, both servers' default): the
/// directory redis-server rewrote starts Keel with the same data, every
/// type and encoding; Keel rewrites it, and redis-server starts on Keel's
/// directory with the same data. redis-check-aof accepts Keel's directory.
#[test]
fn rdb_base_directories_move_between_redis_and_keel() {
    use common::state::{assert_same, fill_every_type, read_state};
    let dir = temp_dir("rw-rdb-interop");
    let d = dir.to_str().expect("utf8 dir");
    let Some(redis) = Server::start_redis(&["--dir", d, "--appendonly", "yes"]) else { return };
    let mut r = redis.client();
    fill_every_type(&mut r);
    assert_eq!(r.cmd("BGREWRITEAOF"), simple("Background append only file rewriting started"));
    assert_eq!(wait_rewrites(&mut r, 1), "ok");
    // After the rewrite: into Redis's incr file.
    assert_eq!(r.cmd("SET after-redis-rewrite yes"), ok());
    r.cmd("RPUSH smalllist tail");
    let want = read_state(&mut r);
    r.write_command(&["SHUTDOWN", "NOSAVE"]);
    r.read_to_close();
    drop(redis);
    assert!(aof_files(&dir).contains("appendonly.aof.2.base.rdb"), "{:?}", aof_files(&dir));

    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    assert_same(&read_state(&mut c), &want, "Keel loads redis-server's RDB-based directory");
    assert_eq!(c.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
    assert_eq!(wait_rewrites(&mut c, 1), "ok");
    assert_eq!(c.cmd("SET after-keel-rewrite yes"), ok());
    let want = read_state(&mut c);
    server.kill9();
    let files = aof_files(&dir);
    assert!(files.contains("appendonly.aof.3.base.rdb") && files.len() == 3, "{files:?}");
    assert_check_aof_valid(&dir);
    let manifest = dir.join("appendonlydir/appendonly.aof.manifest");
    let check = std::process::Command::new("/usr/bin/redis-check-aof").arg(&manifest).output().expect("redis-check-aof");
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success() && text.contains("RDB preamble is OK"), "{text}");

    let Some(redis) = Server::start_redis(&["--dir", d, "--appendonly", "yes"]) else { return };
    let mut r = redis.client();
    assert_same(&read_state(&mut r), &want, "redis-server loads Keel's RDB base");
    r.write_command(&["SHUTDOWN", "NOSAVE"]);
    r.read_to_close();
    drop(redis);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A damaged RDB base stops start-up with an error naming the file; the
/// check tool reports it and `--fix` leaves it alone.
#[test]
fn a_damaged_rdb_base_stops_start_up() {
    let dir = temp_dir("rw-rdb-corrupt");
    {
        let server = Server::start_in(&dir, &[]);
        let mut c = server.client();
        common::state::fill_every_type(&mut c);
        assert_eq!(c.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
        assert_eq!(wait_rewrites(&mut c, 1), "ok");
    }
    let base = dir.join("appendonlydir/appendonly.aof.2.base.rdb");
    let mut bytes = std::fs::read(&base).expect("base");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x5a;
    std::fs::write(&base, &bytes).expect("write");
    let (status, log) = common::start_expecting_exit(&dir, &[]);
    assert!(!status.success());
    assert!(log.contains("appendonly.aof.2.base.rdb") && log.contains("bad RDB"), "log: {log}");
    let manifest = dir.join("appendonlydir/appendonly.aof.manifest");
    let mut out = Vec::new();
    let outcome = keel_journal::check::check(&manifest, keel_journal::check::Repair::Fix, &mut out).expect("check");
    assert_eq!(outcome, keel_journal::check::CheckOutcome::Invalid);
    assert_eq!(std::fs::read(&base).expect("base"), bytes, "--fix leaves an RDB alone");
    let _ = std::fs::remove_dir_all(&dir);
}

/// DEBUG LOADAOF empties the dataset and loads it again from the files the
/// manifest lists (an RDB base, then commands, a transaction among them):
/// the digest comes back, a write the log never saw (`appendonly no`) goes,
/// and writes after it are logged as before.
#[test]
fn debug_loadaof_reloads_the_dataset_from_the_files() {
    let dir = temp_dir("rw-loadaof");
    {
        let server = Server::start_in(&dir, &["--enable-debug-command", "yes"]);
        let mut c = server.client();
        common::state::fill_every_type(&mut c);
        assert_eq!(c.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
        assert_eq!(wait_rewrites(&mut c, 1), "ok");
        assert_eq!(c.cmd("SET after 1"), ok());
        assert_eq!(c.cmd("MULTI"), simple("OK"));
        assert_eq!(c.cmd("INCR after"), simple("QUEUED"));
        assert_eq!(c.cmd("EXPIRE after 100000"), simple("QUEUED"));
        assert!(matches!(c.cmd("EXEC"), Frame::Array(_)));
        assert_eq!(c.cmd("SELECT 3"), ok());
        assert_eq!(c.cmd("RPUSH other-db a b"), int(2));
        let digest = c.cmd("DEBUG DIGEST");
        assert_eq!(c.cmd("DEBUG LOADAOF"), ok());
        assert_eq!(c.cmd("DEBUG DIGEST"), digest);
        assert_eq!(c.cmd("LRANGE other-db 0 -1"), Frame::Array(vec![bulk("a"), bulk("b")]));
        assert_eq!(c.cmd("SELECT 0"), ok());
        assert_eq!(c.cmd("CONFIG SET appendonly no"), ok());
        assert_eq!(c.cmd("SET unlogged 1"), ok());
        assert_eq!(c.cmd("DEBUG LOADAOF"), ok());
        assert_eq!(c.cmd("EXISTS unlogged"), int(0));
        assert_eq!(c.cmd("DEBUG DIGEST"), digest);
        assert_eq!(c.cmd("CONFIG SET appendonly yes"), ok());
        assert_eq!(wait_rewrites(&mut c, 2), "ok");
        assert_eq!(c.cmd("SET last 1"), ok());
        server.kill9();
    }
    let server = Server::start_last_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("GET last"), bulk("1"));
    assert_eq!(c.cmd("GET after"), bulk("2"));
}

/// DEBUG LOADAOF replays as the loading client does at start: an XADD
/// whose approximate trim stopped at its LIMIT is logged as an exact trim
/// that keeps its LIMIT, which only the loader (or a replica's master)
/// may send, as in Redis. Before, the caller replayed it as a plain
/// client and it failed, losing the entry.
#[test]
fn debug_loadaof_replays_as_the_loader() {
    let dir = temp_dir("rw-loadaof-loader");
    let server = Server::start_in(&dir, &["--enable-debug-command", "yes", "--stream-node-max-entries", "10"]);
    let mut c = server.client();
    for _ in 0..100 {
        assert!(matches!(c.send(&["XADD", "s", "*", "f", "v"]), Frame::Bulk(_)));
    }
    assert!(matches!(c.send(&["XADD", "s", "MAXLEN", "~", "55", "LIMIT", "30", "*", "f", "v"]), Frame::Bulk(_)));
    assert_eq!(c.cmd("XLEN s"), int(71));
    // Nodes of one entry: a replay that trimmed approximately again would
    // trim to 55.
    assert_eq!(c.cmd("CONFIG SET stream-node-max-entries 1"), ok());
    let digest = c.cmd("DEBUG DIGEST");
    assert_eq!(c.cmd("DEBUG LOADAOF"), ok());
    assert_eq!(c.cmd("XLEN s"), int(71));
    assert_eq!(c.cmd("DEBUG DIGEST"), digest);
    // The caller is a plain client again.
    assert_eq!(
        c.send(&["XADD", "s", "MAXLEN", "=", "5", "LIMIT", "3", "*", "f", "v"]),
        common::err("ERR syntax error, LIMIT cannot be used without the special ~ option")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
