//! Durability over real processes: acknowledged writes survive `kill -9`
//! at any instant (under `always`, `everysec` and `no`: a process crash is
//! not a machine crash); a torn tail is truncated at start; a failing disk
//! turns writes away with MISCONF and loses nothing acknowledged.

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{bulk, int, temp_dir, Client, Frame, Server};
use rand::{Rng, SeedableRng};

const WRITERS: usize = 4;

/// What one writer had acknowledged: SETs `w{id}:{0..acked}` and an INCR
/// counter.
struct Acked {
    sets: AtomicU64,
    incrs: AtomicU64,
    incrs_sent: AtomicU64,
}

fn writer(port: u16, id: usize, first: u64, acked: Arc<Acked>, stop: Arc<AtomicBool>) {
    let mut client = Client::connect(port);
    let mut i = first;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("w{id}:{i}");
        match client.try_send(&["SET", &key, &format!("v{i}")]) {
            Some(Frame::Simple(_)) => {
                acked.sets.store(i + 1, Ordering::SeqCst);
            }
            _ => return,
        }
        acked.incrs_sent.fetch_add(1, Ordering::SeqCst);
        match client.try_send(&["INCR", &format!("counter:{id}")]) {
            Some(Frame::Integer(_)) => {
                acked.incrs.fetch_add(1, Ordering::SeqCst);
            }
            _ => return,
        }
        i += 1;
    }
}

/// Checks that keys `w{id}:{from..to}` hold their values.
fn check_sets(client: &mut Client, id: usize, from: u64, to: u64) {
    let mut i = from;
    while i < to {
        let end = (i + 500).min(to);
        let keys: Vec<String> = (i..end).map(|n| format!("w{id}:{n}")).collect();
        let mut argv = vec!["MGET".to_string()];
        argv.extend(keys.iter().cloned());
        let Frame::Array(values) = client.send(&argv) else { panic!("MGET") };
        for (n, v) in (i..end).zip(values) {
            assert_eq!(v, bulk(&format!("v{n}")), "acknowledged write w{id}:{n} lost");
        }
        i = end;
    }
}

#[test]
fn kill_9_never_loses_an_acknowledged_write() {
    kill_9_cycles("always", 30);
}

/// As Redis, which writes its AOF buffer before it sends replies whatever
/// `appendfsync` says: only a machine crash loses the writes not yet
/// synced.
#[test]
fn kill_9_never_loses_an_acknowledged_write_under_everysec_or_no() {
    kill_9_cycles("everysec", 10);
    kill_9_cycles("no", 5);
}

/// Replies held under `always` are let go by a switch to `everysec` or
/// `no`, and the writer's sync begun under `always` may still run: the
/// replies must still wait for their records to be written.
#[test]
fn kill_9_never_loses_an_acknowledged_write_across_appendfsync_switches() {
    kill_9_cycles("always/no", 20);
    kill_9_cycles("always/everysec", 10);
}

/// `cycles` times: writers on several connections, `kill -9` at a random
/// instant, a restart on the same directory, and every acknowledged write
/// checked. `appendfsync` is a policy, or two separated by `/` that a
/// `CONFIG SET` switches between every few milliseconds.
fn kill_9_cycles(appendfsync: &str, cycles: usize) {
    let policies: Vec<String> = appendfsync.split('/').map(String::from).collect();
    let dir = temp_dir(&format!("crash-{}", policies.join("-")));
    let flags = ["--appendfsync", policies[0].as_str()];
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut durable_sets = [0u64; WRITERS];
    let mut durable_incrs = [0u64; WRITERS];
    // Every INCR ever sent: a counter above it was replayed twice.
    let mut sent_incrs = [0u64; WRITERS];
    for cycle in 0..cycles {
        let server = Server::start_in(&dir, &flags);
        let mut check = server.client();
        for id in 0..WRITERS {
            check_sets(&mut check, id, 0, durable_sets[id]);
            let Frame::Integer(n) = check.send(&["INCRBY", &format!("counter:{id}"), "0"]) else { panic!("counter") };
            let acked = durable_incrs[id];
            assert!(n as u64 >= acked, "{appendfsync}, cycle {cycle}: counter {id} = {n}, acknowledged {acked}");
            assert!(n as u64 <= sent_incrs[id], "{appendfsync}, cycle {cycle}: counter {id} = {n}, only {} sent", sent_incrs[id]);
            // Unacknowledged INCRs may or may not have landed; continue from what is there.
            durable_incrs[id] = n as u64;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Vec<Arc<Acked>> = (0..WRITERS)
            .map(|_| Arc::new(Acked { sets: AtomicU64::new(0), incrs: AtomicU64::new(0), incrs_sent: AtomicU64::new(0) }))
            .collect();
        let handles: Vec<_> = (0..WRITERS)
            .map(|id| {
                let (a, s, first) = (acked[id].clone(), stop.clone(), durable_sets[id]);
                a.sets.store(first, Ordering::SeqCst);
                let port = server.port;
                thread::spawn(move || writer(port, id, first, a, s))
            })
            .collect();
        let switcher = (policies.len() > 1).then(|| {
            let (port, stop, policies, seed) = (server.port, stop.clone(), policies.clone(), rng.gen());
            thread::spawn(move || switch_appendfsync(port, &policies, seed, &stop))
        });
        thread::sleep(Duration::from_millis(rng.gen_range(50..300)));
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        for h in handles.into_iter().chain(switcher) {
            let _ = h.join();
        }
        for (id, acked) in acked.iter().enumerate() {
            durable_sets[id] = acked.sets.load(Ordering::SeqCst);
            durable_incrs[id] += acked.incrs.load(Ordering::SeqCst);
            sent_incrs[id] += acked.incrs_sent.load(Ordering::SeqCst);
        }
    }
    let server = Server::start_in(&dir, &flags);
    let mut check = server.client();
    let mut total = 0;
    for (id, &acked) in durable_sets.iter().enumerate() {
        check_sets(&mut check, id, 0, acked);
        total += acked;
    }
    assert!(total > 0, "the writers never got an acknowledgement");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sets `appendfsync` to each of `policies` in turn, a few milliseconds
/// apart, until `stop` or the server goes.
fn switch_appendfsync(port: u16, policies: &[String], seed: u64, stop: &AtomicBool) {
    let mut client = Client::connect(port);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for policy in policies.iter().cycle() {
        if stop.load(Ordering::Relaxed) || client.try_send(&["CONFIG", "SET", "appendfsync", policy]).is_none() {
            return;
        }
        thread::sleep(Duration::from_micros(rng.gen_range(500..3000)));
    }
}

/// The integer value of `key` (0 when absent).
fn counter(c: &mut Client, key: &str) -> i64 {
    match c.send(&["GET", key]) {
        Frame::Null => 0,
        Frame::Bulk(b) => String::from_utf8_lossy(&b).parse().expect("a counter"),
        other => panic!("GET {key}: {other:?}"),
    }
}

/// What a client reads of another client's writes survives `kill -9`,
/// though the writer has not had its replies yet: under `always` a reply
/// that shows a write waits until the write is durable, under `everysec`
/// and `no` until it is written (a worker writes what the journal gathered,
/// every worker's, before it sends a turn's replies). Writers pipeline
/// INCRs, readers GET the counters; no counter may come back below a value
/// read.
#[test]
fn kill_9_never_loses_a_write_another_client_read() {
    const PIPELINE: usize = 64;
    for (appendfsync, cycles) in [("always", 10), ("everysec", 5), ("no", 5)] {
        let dir = temp_dir(&format!("crash-read-{appendfsync}"));
        let flags = ["--appendfsync", appendfsync];
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut seen = [0i64; WRITERS];
        // No counter can exceed its value at the start of a cycle plus the
        // INCRs sent during it.
        let mut ceiling = [0i64; WRITERS];
        for cycle in 0..cycles {
            let server = Server::start_in(&dir, &flags);
            let mut check = server.client();
            let mut start = [0i64; WRITERS];
            for id in 0..WRITERS {
                let n = counter(&mut check, &format!("counter:{id}"));
                assert!(n >= seen[id], "{appendfsync}, cycle {cycle}: counter {id} = {n}, yet a client read {}", seen[id]);
                assert!(n <= ceiling[id], "{appendfsync}, cycle {cycle}: counter {id} = {n}, only {} sent", ceiling[id]);
                start[id] = n;
            }
            let stop = Arc::new(AtomicBool::new(false));
            let sent: Vec<Arc<AtomicU64>> = (0..WRITERS).map(|_| Arc::new(AtomicU64::new(0))).collect();
            let read: Vec<Arc<AtomicI64>> = (0..WRITERS).map(|id| Arc::new(AtomicI64::new(start[id]))).collect();
            let mut handles = Vec::new();
            for id in 0..WRITERS {
                let (port, halt, sent) = (server.port, stop.clone(), sent[id].clone());
                handles.push(thread::spawn(move || {
                    let mut c = Client::connect(port);
                    let batch: Vec<u8> = (0..PIPELINE).flat_map(|_| common::encode(&["INCR", &format!("counter:{id}")])).collect();
                    while !halt.load(Ordering::Relaxed) {
                        sent.fetch_add(PIPELINE as u64, Ordering::SeqCst);
                        if c.stream.write_all(&batch).is_err() {
                            return;
                        }
                        for _ in 0..PIPELINE {
                            if c.try_read().is_none() {
                                return;
                            }
                        }
                    }
                }));
                let (port, halt, read) = (server.port, stop.clone(), read[id].clone());
                handles.push(thread::spawn(move || {
                    let mut c = Client::connect(port);
                    while !halt.load(Ordering::Relaxed) {
                        match c.try_send(&["GET", &format!("counter:{id}")]) {
                            Some(Frame::Bulk(b)) => {
                                read.fetch_max(String::from_utf8_lossy(&b).parse().expect("a counter"), Ordering::SeqCst);
                            }
                            Some(Frame::Null) => {}
                            _ => return,
                        }
                    }
                }));
            }
            thread::sleep(Duration::from_millis(rng.gen_range(50..300)));
            server.kill9();
            stop.store(true, Ordering::Relaxed);
            for h in handles {
                let _ = h.join();
            }
            for id in 0..WRITERS {
                seen[id] = read[id].load(Ordering::SeqCst);
                ceiling[id] = start[id] + sent[id].load(Ordering::SeqCst) as i64;
            }
        }
        assert!(seen.iter().all(|&n| n > 0), "{appendfsync}: the readers never saw a write: {seen:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A MULTI/EXEC transaction is one unit of the log: `kill -9` at any
/// instant leaves all of it or none of it, and every acknowledged one.
/// Each transaction increments two counters around a 256 KB value, so that
/// the kill can land inside the transaction's write.
#[test]
fn kill_9_never_splits_a_transaction() {
    for (appendfsync, cycles) in [("always", 10), ("everysec", 5), ("no", 5)] {
        let dir = temp_dir(&format!("crash-multi-{appendfsync}"));
        let flags = ["--appendfsync", appendfsync];
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        let mut acked = [0i64; WRITERS];
        let mut ceiling = [0i64; WRITERS];
        let pad = "p".repeat(256 << 10);
        for cycle in 0..=cycles {
            let server = Server::start_in(&dir, &flags);
            let mut check = server.client();
            let mut start = [0i64; WRITERS];
            for id in 0..WRITERS {
                let (a, b) = (counter(&mut check, &format!("a:{id}")), counter(&mut check, &format!("b:{id}")));
                assert_eq!(a, b, "{appendfsync}, cycle {cycle}: half of a transaction of writer {id} survived");
                assert!(a >= acked[id], "{appendfsync}, cycle {cycle}: {a} transactions of writer {id}, {} acknowledged", acked[id]);
                assert!(a <= ceiling[id], "{appendfsync}, cycle {cycle}: {a} transactions of writer {id}, {} sent", ceiling[id]);
                start[id] = a;
            }
            if cycle == cycles {
                break;
            }
            let stop = Arc::new(AtomicBool::new(false));
            let done: Vec<Arc<AtomicU64>> = (0..WRITERS).map(|_| Arc::new(AtomicU64::new(0))).collect();
            let handles: Vec<_> = (0..WRITERS)
                .map(|id| {
                    let (port, stop, done, pad) = (server.port, stop.clone(), done[id].clone(), pad.clone());
                    thread::spawn(move || {
                        let mut c = Client::connect(port);
                        let mut unit = common::encode(&["MULTI"]);
                        unit.extend(common::encode(&["INCR", &format!("a:{id}")]));
                        unit.extend(common::encode(&["SET", &format!("pad:{id}"), &pad]));
                        unit.extend(common::encode(&["INCR", &format!("b:{id}")]));
                        unit.extend(common::encode(&["EXEC"]));
                        while !stop.load(Ordering::Relaxed) {
                            if c.stream.write_all(&unit).is_err() {
                                return;
                            }
                            for _ in 0..4 {
                                if c.try_read().is_none() {
                                    return;
                                }
                            }
                            match c.try_read() {
                                Some(Frame::Array(replies)) => assert_eq!(replies.len(), 3, "EXEC"),
                                _ => return,
                            }
                            done.fetch_add(1, Ordering::SeqCst);
                        }
                    })
                })
                .collect();
            thread::sleep(Duration::from_millis(rng.gen_range(50..300)));
            server.kill9();
            stop.store(true, Ordering::Relaxed);
            for h in handles {
                h.join().expect("writer");
            }
            for id in 0..WRITERS {
                acked[id] = start[id] + done[id].load(Ordering::SeqCst) as i64;
                // The one in flight at the kill may have landed.
                ceiling[id] = acked[id] + 1;
            }
        }
        assert!(acked.iter().all(|&n| n > 0), "{appendfsync}: no transaction was acknowledged: {acked:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The incr file of the AOF directory in `dir` (a fresh one has one).
fn incr_file(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::read_dir(dir.join("appendonlydir"))
        .expect("aof dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("incr file")
}

#[test]
fn a_torn_tail_is_truncated_at_start() {
    let dir = temp_dir("torn");
    {
        let server = Server::start_in(&dir, &[]);
        let mut c = server.client();
        assert_eq!(c.cmd("SET a 1"), common::ok());
        assert_eq!(c.cmd("SET b 2"), common::ok());
        server.kill9();
    }
    let incr = incr_file(&dir);
    let mut bytes = std::fs::read(&incr).expect("read incr");
    bytes.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$1\r\nc\r\n$10\r\nhalf");
    std::fs::write(&incr, bytes).expect("tear");
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("GET a"), bulk("1"));
    assert_eq!(c.cmd("GET b"), bulk("2"));
    assert_eq!(c.cmd("EXISTS c"), int(0));
    assert_eq!(c.cmd("SET c 3"), common::ok());
    drop(server);
    let server = Server::start_in(&dir, &[]);
    assert_eq!(server.client().cmd("GET c"), bulk("3"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// FLUSHDB and FLUSHALL are logged even when the databases are empty
/// already, as Redis forces them into its AOF.
#[test]
fn flushes_of_empty_databases_are_logged() {
    let dir = temp_dir("flush-logged");
    let server = Server::start_last_in(&dir, &[]);
    let mut c = server.client();
    for command in ["SET key v", "FLUSHDB", "FLUSHDB", "FLUSHDB", "SET key v", "FLUSHALL", "FLUSHALL"] {
        assert_eq!(c.cmd(command), common::ok());
    }
    let text = String::from_utf8_lossy(&std::fs::read(incr_file(&dir)).expect("incr")).to_ascii_lowercase();
    assert_eq!(text.matches("$7\r\nflushdb\r\n").count(), 3, "{text}");
    assert_eq!(text.matches("$8\r\nflushall\r\n").count(), 2, "{text}");
}

/// A command Keel cannot run, in the log, stops start-up (loading without
/// it would drop its effect) with Redis's words and the file's name; the
/// file is left as it was.
#[test]
fn an_unknown_command_in_the_log_stops_start_up() {
    let dir = temp_dir("unknown-command");
    {
        let server = Server::start_in(&dir, &[]);
        assert_eq!(server.client().cmd("SET a 1"), common::ok());
        server.kill9();
    }
    let incr = incr_file(&dir);
    let mut bytes = std::fs::read(&incr).expect("read incr");
    bytes.extend_from_slice(b"*2\r\n$3\r\nbla\r\n$1\r\nx\r\n");
    std::fs::write(&incr, &bytes).expect("append");
    let (status, log) = common::start_expecting_exit(&dir, &[]);
    assert!(!status.success());
    let name = incr.file_name().expect("name").to_string_lossy().into_owned();
    assert!(log.contains("Unknown command 'bla' reading the append only file") && log.contains(&name), "log: {log}");
    assert_eq!(std::fs::read(&incr).expect("read incr"), bytes);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Scripts wait for Redis's "Ready to accept connections" (and find the
/// process by the banner's PID line): it comes once the data is loaded;
/// and for its "ready to exit, bye bye" when the server stops.
#[test]
fn the_log_says_ready_once_the_data_is_loaded() {
    let dir = temp_dir("ready");
    {
        let server = Server::start_in(&dir, &[]);
        assert_eq!(server.client().cmd("SET a 1"), common::ok());
    }
    let log = dir.join("ready.log");
    let server = Server::start_in(&dir, &["--always-show-logo", "yes", "--logfile", &log.display().to_string()]);
    assert_eq!(server.client().cmd("GET a"), bulk("1"));
    let text = std::fs::read_to_string(&log).expect("log");
    let at = |line: &str| text.find(line).unwrap_or_else(|| panic!("no {line:?} in {text}"));
    assert!(at(&format!("PID: {}", server.pid())) < at("DB loaded from append only file"), "{text}");
    assert!(at("DB loaded from append only file") < at("Ready to accept connections"), "{text}");
    let mut c = server.client();
    c.write_command(&["SHUTDOWN", "NOSAVE"]);
    c.read_to_close();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log).expect("log").contains("ready to exit, bye bye") {
        assert!(Instant::now() < deadline, "no last line in {}", std::fs::read_to_string(&log).unwrap_or_default());
        thread::sleep(Duration::from_millis(10));
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failing_disk_refuses_writes_then_recovers_without_loss() {
    let dir = temp_dir("faults");
    let mut acked = Vec::new();
    {
        // The 30th and 31st writes of the log fail with ENOSPC.
        let server = Server::start_in_with_env(&dir, &[], &[("KEEL_JOURNAL_FAILPOINT", "write-enospc:30:2")]);
        let mut c = server.client();
        assert_eq!(c.cmd("SET k0 v0"), common::ok());
        // A prober writes beside the main writer once the server logged the
        // failure (a write of its own appended just before would wait for
        // the recovery): while the log cannot be written, its writes are
        // refused and its reads still answered.
        let stop = Arc::new(AtomicBool::new(false));
        let prober = {
            let (stop, port) = (stop.clone(), server.port);
            let log = std::env::temp_dir().join("keel-test-logs").join(format!("{port}.log"));
            thread::spawn(move || {
                let mut p = Client::connect(port);
                while !std::fs::read_to_string(&log).unwrap_or_default().contains("refusing writes") {
                    if stop.load(Ordering::Relaxed) {
                        return false;
                    }
                    thread::sleep(Duration::from_millis(1));
                }
                let Frame::Error(e) = p.send(&["SET", "probe", "x"]) else { return false };
                let text = String::from_utf8_lossy(&e).to_string();
                assert!(text.starts_with("MISCONF"), "{text}");
                assert_eq!(p.send(&["GET", "k0"]), bulk("v0"));
                true
            })
        };
        acked.push(0);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut i = 1;
        let mut refused = false;
        while Instant::now() < deadline && acked.len() <= 100 {
            match c.send(&["SET", &format!("k{i}"), &format!("v{i}")]) {
                Frame::Simple(_) => acked.push(i),
                Frame::Error(e) => {
                    assert!(e.starts_with(b"MISCONF"), "{}", String::from_utf8_lossy(&e));
                    assert_eq!(c.send(&["GET", "k0"]), bulk("v0"));
                    refused = true;
                }
                other => panic!("unexpected {other:?}"),
            }
            i += 1;
        }
        stop.store(true, Ordering::Relaxed);
        // On a loaded machine the refusal may be over between two probes:
        // the main writer's own refusals count too.
        let probed = prober.join().expect("prober");
        assert!(refused || probed, "the failing disk never refused a write");
        assert!(acked.len() > 100, "writes did not resume after the disk recovered");
        server.kill9();
    }
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    for i in acked {
        assert_eq!(c.send(&["GET", &format!("k{i}")]), bulk(&format!("v{i}")), "acknowledged k{i} lost");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn keel_and_redis_read_each_others_append_only_files() {
    let dir = temp_dir("interop");
    {
        let server = Server::start_in(&dir, &[]);
        let mut c = server.client();
        c.cmd("SET plain value");
        c.cmd("SET ttl v PX 100000");
        c.cmd("INCRBY n 41");
        c.cmd("INCR n");
        c.cmd("SELECT 3");
        c.cmd("SET other db3");
        server.kill9();
    }
    let flags = ["--dir", dir.to_str().expect("utf8 dir"), "--appendonly", "yes", "--aof-use-rdb-preamble", "no"];
    let Some(redis) = Server::start_redis(&flags) else { return };
    let mut r = redis.client();
    assert_eq!(r.cmd("GET plain"), bulk("value"));
    assert_eq!(r.cmd("GET n"), bulk("42"));
    let Frame::Integer(ttl) = r.cmd("PTTL ttl") else { panic!("pttl") };
    assert!(ttl > 0 && ttl <= 100_000);
    r.cmd("SELECT 3");
    assert_eq!(r.cmd("GET other"), bulk("db3"));
    // Redis writes on; Keel reads what Redis wrote.
    assert_eq!(r.cmd("SET from-redis yes"), common::ok());
    r.write_command(&["SHUTDOWN", "NOSAVE"]);
    r.read_to_close();
    drop(redis);
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("GET plain"), bulk("value"));
    c.cmd("SELECT 3");
    assert_eq!(c.cmd("GET from-redis"), bulk("yes"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The incr file's size without the space written ahead of it.
fn incr_content_len(c: &mut Client) -> u64 {
    let num = |c: &mut Client, f: &str| c.info_field("persistence", f).parse::<u64>().expect(f);
    num(c, "aof_current_size") - num(c, "keel_aof_base_file_size")
}

/// `keel-aof-sync-gap-us` is a directive CONFIG knows, with its range;
/// with a gap, pipelined writes from several clients are acknowledged only
/// once on disk, as without one: all of them outlive a `kill -9`.
#[test]
fn writes_acknowledged_across_a_sync_gap_outlive_a_crash() {
    let dir = temp_dir("sync-gap");
    {
        let server = Server::start_in(&dir, &["--keel-aof-sync-gap-us", "300"]);
        let mut c = server.client();
        assert_eq!(c.cmd("CONFIG GET keel-aof-sync-gap-us"), Frame::Array(vec![bulk("keel-aof-sync-gap-us"), bulk("300")]));
        assert_eq!(
            c.cmd("CONFIG SET keel-aof-sync-gap-us 10001"),
            common::err("ERR CONFIG SET failed (possibly related to argument 'keel-aof-sync-gap-us') - argument must be between 0 and 10000 inclusive")
        );
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let mut c = server.client();
                thread::spawn(move || {
                    for i in 0..200 {
                        c.write_command(&["SET", &format!("w{w}:{i}"), &format!("{i}")]);
                    }
                    for _ in 0..200 {
                        assert_eq!(c.read(), common::ok());
                    }
                })
            })
            .collect();
        writers.into_iter().for_each(|w| w.join().expect("writer"));
        server.kill9();
    }
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("DBSIZE"), int(800));
    assert_eq!(c.cmd("GET w3:199"), bulk("199"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The journal's writer runs in `SCHED_BATCH` by default, and CONFIG SET
/// `keel-aof-writer-batch-class no` moves it back to the normal class at
/// its next cycle: here the cycle of the SET that follows, whose reply
/// waits for that cycle's fdatasync.
#[test]
fn the_writer_runs_in_the_batch_class_unless_told_otherwise() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("SET k 1"), common::ok());
    assert_eq!(server.thread_policy("keel-aof-writer"), Some(libc::SCHED_BATCH));
    assert_eq!(
        c.cmd("CONFIG GET keel-aof-writer-batch-class"),
        Frame::Array(vec![bulk("keel-aof-writer-batch-class"), bulk("yes")])
    );
    assert_eq!(c.cmd("CONFIG SET keel-aof-writer-batch-class no"), common::ok());
    assert_eq!(c.cmd("SET k 2"), common::ok());
    assert_eq!(server.thread_policy("keel-aof-writer"), Some(libc::SCHED_OTHER));
}

/// The space written ahead of the incr file (`keel-aof-space-ahead`) is a
/// directive CONFIG knows; a `kill -9` leaves it in the file, redis-server
/// loads the directory as it is, and Keel cuts the space off at start.
#[test]
fn space_written_ahead_outlives_a_crash_in_both_servers() {
    let dir = temp_dir("space-ahead");
    let incr = dir.join("appendonlydir/appendonly.aof.1.incr.aof");
    let size = || std::fs::metadata(&incr).expect("incr file").len();
    {
        let server = Server::start_in(&dir, &["--keel-aof-space-ahead", "64kb"]);
        let mut c = server.client();
        let get = c.cmd("CONFIG GET keel-aof-space-ahead");
        assert_eq!(get, Frame::Array(vec![bulk("keel-aof-space-ahead"), bulk("65536")]));
        for i in 0..100 {
            assert_eq!(c.send(&["SET", &format!("k{i}"), &format!("v{i}")]), common::ok());
        }
        let content = incr_content_len(&mut c);
        let deadline = Instant::now() + Duration::from_secs(10);
        while size() <= content {
            assert!(Instant::now() < deadline, "no space written ahead of {content} bytes");
            thread::sleep(Duration::from_millis(5));
        }
        assert!(size() <= content + 65536 + 512, "{} bytes for {content}", size());
        server.kill9();
    }
    let flags = ["--dir", dir.to_str().expect("utf8 dir"), "--appendonly", "yes"];
    if let Some(redis) = Server::start_redis(&flags) {
        let mut r = redis.client();
        assert_eq!(r.cmd("DBSIZE"), int(100));
        assert_eq!(r.cmd("GET k99"), bulk("v99"));
        r.write_command(&["SHUTDOWN", "NOSAVE"]);
        r.read_to_close();
    }
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("DBSIZE"), int(100));
    assert_eq!(size(), incr_content_len(&mut c), "the space is cut off at start");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Space is written ahead only under `appendfsync always`: under
/// `everysec` the incr file ends at its last record even after syncs, and
/// CONFIG SET of `always` brings the space.
#[test]
fn space_is_written_ahead_only_under_always() {
    let dir = temp_dir("space-ahead-policy");
    let incr = dir.join("appendonlydir/appendonly.aof.1.incr.aof");
    let size = || std::fs::metadata(&incr).expect("incr file").len();
    let server = Server::start_in(&dir, &["--appendfsync", "everysec", "--keel-aof-space-ahead", "64kb"]);
    let mut c = server.client();
    let fsyncs = |c: &mut Client| c.info_field("persistence", "keel_aof_fsyncs").parse::<u64>().expect("fsyncs");
    for i in 0..100 {
        assert_eq!(c.send(&["SET", &format!("k{i}"), &format!("v{i}")]), common::ok());
    }
    // Two syncs, with writes going on: the helper, were it on, would be
    // asked for space after the first and have a second to write it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let synced = fsyncs(&mut c);
    for i in 0.. {
        if fsyncs(&mut c) >= synced + 2 {
            break;
        }
        assert!(Instant::now() < deadline, "no fsync under everysec");
        assert_eq!(c.send(&["SET", "n", &i.to_string()]), common::ok());
        thread::sleep(Duration::from_millis(20));
    }
    loop {
        let (written, content) = (size(), incr_content_len(&mut c));
        assert!(written <= content, "space written ahead under everysec: {written} bytes for {content}");
        if written == content {
            break;
        }
        assert!(Instant::now() < deadline, "records not written under everysec");
        thread::sleep(Duration::from_millis(5));
    }

    assert_eq!(c.cmd("CONFIG SET appendfsync always"), common::ok());
    assert_eq!(c.cmd("SET k 1"), common::ok());
    let content = incr_content_len(&mut c);
    while size() <= content {
        assert!(Instant::now() < deadline, "no space written ahead under always");
        thread::sleep(Duration::from_millis(5));
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `aof-timestamp-enabled`: a `#TS:` annotation before the first write of
/// each second while it is on (CONFIG SET switches it); Keel and
/// redis-server both load the files.
#[test]
fn aof_timestamp_annotations_follow_their_directive() {
    let dir = temp_dir("aof-ts");
    let incr = dir.join("appendonlydir/appendonly.aof.1.incr.aof");
    let stamps = || String::from_utf8_lossy(&std::fs::read(&incr).expect("incr")).matches("#TS:").count();
    let next_second = || {
        let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs();
        let start = now();
        while now() == start {
            thread::sleep(Duration::from_millis(5));
        }
    };
    {
        let server = Server::start_in(&dir, &["--aof-timestamp-enabled", "yes"]);
        let mut c = server.client();
        assert_eq!(c.cmd("SET a 1"), common::ok());
        assert_eq!(stamps(), 1);
        next_second();
        assert_eq!(c.cmd("SET b 2"), common::ok());
        assert_eq!(stamps(), 2);
        assert_eq!(c.cmd("CONFIG SET aof-timestamp-enabled no"), common::ok());
        next_second();
        assert_eq!(c.cmd("SET c 3"), common::ok());
        assert_eq!(stamps(), 2);
        c.write_command(&["SHUTDOWN"]);
        c.read_to_close();
    }
    let flags = ["--dir", dir.to_str().expect("utf8 dir"), "--appendonly", "yes"];
    if let Some(redis) = Server::start_redis(&flags) {
        assert_eq!(redis.client().cmd("DBSIZE"), int(3));
        let mut r = redis.client();
        r.write_command(&["SHUTDOWN", "NOSAVE"]);
        r.read_to_close();
    }
    let server = Server::start_in(&dir, &[]);
    assert_eq!(server.client().cmd("MGET a b c"), Frame::Array(vec![bulk("1"), bulk("2"), bulk("3")]));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `no-appendfsync-on-rewrite yes`: while a BGSAVE runs, writes are
/// acknowledged without an fdatasync (INFO's count stands still); with it
/// off (set at run time) they are synced again, BGSAVE or not.
#[test]
fn no_appendfsync_on_rewrite_skips_fsyncs_while_a_save_runs() {
    // Each key of the dump waits a second: the save outlasts the test.
    let server = Server::start(&["--no-appendfsync-on-rewrite", "yes", "--rdb-key-save-delay", "1000000"]);
    let mut c = server.client();
    let fsyncs = |c: &mut Client| info_field(c, "keel_aof_fsyncs").parse::<u64>().expect("fsyncs");
    set_range(&mut c, "pre", 20);
    assert_eq!(c.cmd("BGSAVE"), common::simple("Background saving started"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(&mut c, "rdb_bgsave_in_progress") != "1" {
        assert!(Instant::now() < deadline, "BGSAVE did not start");
        thread::sleep(Duration::from_millis(5));
    }
    let before = fsyncs(&mut c);
    set_range(&mut c, "during", 50);
    assert_eq!(fsyncs(&mut c), before, "fsyncs during the save");
    assert_eq!(c.cmd("CONFIG SET no-appendfsync-on-rewrite no"), common::ok());
    set_range(&mut c, "after", 5);
    assert!(fsyncs(&mut c) > before, "writes are synced again");
    assert_eq!(info_field(&mut c, "rdb_bgsave_in_progress"), "1");
    assert_range(&mut c, "during", 50);
}

/// CONFIG RESETSTAT starts the journal's figures afresh, as it zeroes
/// Redis's `aof_delayed_fsync`: a measurement after it sees only its own
/// syncs. Positions are state and stay.
#[test]
fn config_resetstat_starts_the_journal_figures_afresh() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let figure = |c: &mut Client, name: &str| info_field(c, name).parse::<u64>().expect(name);
    set_range(&mut c, "before", 20);
    assert!(figure(&mut c, "keel_aof_fsyncs") > 0 && figure(&mut c, "keel_aof_batch_records_max") > 0);
    let durable = figure(&mut c, "keel_aof_durable_lsn");
    assert_eq!(c.cmd("CONFIG RESETSTAT"), common::ok());
    for name in ["keel_aof_fsyncs", "keel_aof_fsync_p99_us", "keel_aof_fsync_max_us", "keel_aof_batches", "keel_aof_batch_records_max", "aof_delayed_fsync"] {
        assert_eq!(figure(&mut c, name), 0, "{name}");
    }
    assert_eq!(figure(&mut c, "keel_aof_durable_lsn"), durable);
    set_range(&mut c, "after", 1);
    assert_eq!(figure(&mut c, "keel_aof_batches"), 1);
}

/// Waits until `key`'s TTL has run out (its own remaining time, not a
/// guess at how long something else takes).
fn wait_expired(c: &mut Client, key: &str) {
    let Frame::Integer(ms) = c.send(&["PTTL", key]) else { panic!("PTTL") };
    thread::sleep(Duration::from_millis(ms.max(0) as u64 + 5));
}

/// A replay must not depend on when it runs: keys whose TTL passed since
/// they were written come back as they were and expire afterwards (nothing
/// expires while loading), and an expiry that happened is replayed as the
/// DEL it was journaled as, before the writes that followed it.
#[test]
fn replay_does_not_depend_on_when_it_runs() {
    let dir = temp_dir("replay-time");
    {
        let server = Server::start_in(&dir, &[]);
        let mut c = server.client();
        // Written before its TTL ran out: at replay, after the TTL, it must
        // be absent, not restarted from an earlier value. (The TTL outlasts
        // a slow fsync between the two replies: a full test run once saw
        // one take over 300 ms.)
        assert_eq!(c.cmd("SET counter 1 PX 1500"), common::ok());
        assert_eq!(c.cmd("INCR counter"), int(2));
        // Expired, then written again: the new value has no TTL.
        assert_eq!(c.cmd("SET reborn 1 PX 300"), common::ok());
        wait_expired(&mut c, "reborn");
        assert_eq!(c.cmd("GET reborn"), Frame::Null);
        assert_eq!(c.cmd("INCR reborn"), int(1));
        wait_expired(&mut c, "counter");
        server.kill9();
    }
    let server = Server::start_last_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("GET counter"), Frame::Null);
    assert_eq!(c.cmd("GET reborn"), bulk("1"));
    assert_eq!(c.cmd("TTL reborn"), int(-1));
}

fn info_field(c: &mut Client, name: &str) -> String {
    c.info_field("persistence", name)
}

/// Waits until no rewrite runs or waits and `n` have started; returns
/// `aof_last_bgrewrite_status`. All from one INFO: a retry can start
/// between two of them, and its predecessor's status would be read as
/// its own.
fn wait_rewrites(c: &mut Client, n: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let Frame::Bulk(info) = c.send(&["INFO", "persistence"]) else { panic!("INFO is a bulk string") };
        let info = String::from_utf8_lossy(&info).into_owned();
        let field = |name: &str| {
            let prefix = format!("{name}:");
            info.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_default().trim().to_string()
        };
        let done = field("aof_rewrite_in_progress") == "0"
            && field("aof_rewrite_scheduled") == "0"
            && field("aof_rewrites").parse::<u64>().unwrap_or(0) >= n;
        if done {
            return field("aof_last_bgrewrite_status");
        }
        assert!(Instant::now() < deadline, "rewrite {n} never finished");
        thread::sleep(Duration::from_millis(5));
    }
}

fn set_range(c: &mut Client, prefix: &str, n: usize) {
    for i in 0..n {
        assert_eq!(c.send(&["SET", &format!("{prefix}:{i}"), &format!("v{i}")]), common::ok());
    }
}

fn assert_range(c: &mut Client, prefix: &str, n: usize) {
    for i in 0..n {
        assert_eq!(c.send(&["GET", &format!("{prefix}:{i}")]), bulk(&format!("v{i}")), "{prefix}:{i} lost");
    }
}

/// `CONFIG SET appendonly yes` at run time, as Redis 7.0's startAppendOnly:
/// aof_enabled is 1 at once, a rewrite writes the base from the current
/// data while writers go on, and every write acknowledged after the reply
/// survives `kill -9` once that rewrite finished. `no` stops logging: what
/// is written then is not in the files.
#[test]
fn appendonly_switches_at_run_time() {
    let dir = temp_dir("aof-switch");
    let acked: Vec<Arc<Acked>> = (0..WRITERS)
        .map(|_| Arc::new(Acked { sets: AtomicU64::new(0), incrs: AtomicU64::new(0), incrs_sent: AtomicU64::new(0) }))
        .collect();
    {
        let server = Server::start_in(&dir, &["--appendonly", "no"]);
        let mut c = server.client();
        assert_eq!(info_field(&mut c, "aof_enabled"), "0");
        // Enough data that the rewrite's snapshot takes many steps.
        for chunk in 0..60 {
            let mut argv = vec!["MSET".to_string()];
            for i in chunk * 500..(chunk + 1) * 500 {
                argv.extend([format!("before:{i}"), format!("v{i}")]);
            }
            assert_eq!(c.send(&argv), common::ok());
        }
        assert_eq!(c.cmd("CONFIG SET appendonly yes"), common::ok());
        assert_eq!(info_field(&mut c, "aof_enabled"), "1", "on at once, as Redis");
        // Writes acknowledged from now on, during the rewrite and after.
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..WRITERS)
            .map(|id| {
                let (a, s, port) = (acked[id].clone(), stop.clone(), server.port);
                thread::spawn(move || writer(port, id, 0, a, s))
            })
            .collect();
        assert_eq!(wait_rewrites(&mut c, 1), "ok");
        assert_eq!(c.cmd("CONFIG GET appendonly"), Frame::Array(vec![bulk("appendonly"), bulk("yes")]));
        let total = || acked.iter().map(|a| a.sets.load(Ordering::SeqCst)).sum::<u64>();
        let at_commit = total();
        let deadline = Instant::now() + Duration::from_secs(30);
        while total() < at_commit + 200 {
            assert!(Instant::now() < deadline, "writes stalled after the rewrite");
            thread::sleep(Duration::from_millis(1));
        }
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            let _ = h.join();
        }
    }
    let files: std::collections::BTreeSet<String> = std::fs::read_dir(dir.join("appendonlydir"))
        .expect("appendonlydir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    // As Redis names them: the directory had no manifest, so the enabling
    // rewrite's files are the first (the unlisted incr file renamed).
    let expected = ["appendonly.aof.1.base.rdb", "appendonly.aof.1.incr.aof", "appendonly.aof.manifest"];
    assert_eq!(files, expected.iter().map(|s| s.to_string()).collect());
    {
        let server = Server::start_in(&dir, &[]);
        let mut c = server.client();
        assert_range(&mut c, "before", 30_000);
        for (id, a) in acked.iter().enumerate() {
            check_sets(&mut c, id, 0, a.sets.load(Ordering::SeqCst));
            let Frame::Integer(n) = c.send(&["INCRBY", &format!("counter:{id}"), "0"]) else { panic!("counter") };
            assert!(n as u64 >= a.incrs.load(Ordering::SeqCst), "counter {id} lost acknowledged INCRs");
        }
        assert_eq!(c.cmd("CONFIG SET appendonly no"), common::ok());
        assert_eq!(info_field(&mut c, "aof_enabled"), "0");
        assert_eq!(c.cmd("SET unlogged x"), common::ok());
        server.kill9();
    }
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    check_sets(&mut c, 0, 0, acked[0].sets.load(Ordering::SeqCst));
    assert_eq!(c.cmd("EXISTS unlogged"), int(0), "written while appendonly was no");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A rewrite that fails while `appendonly yes` waits for its base is tried
/// again by itself, as Redis schedules it: the AOF switches on, and what
/// was written before it and since survives `kill -9`.
#[test]
fn turning_the_aof_on_retries_a_failed_base_until_one_is_written() {
    let dir = temp_dir("aof-on-retry");
    {
        // The journal's first write, the base's, fails.
        let failpoint = [("KEEL_JOURNAL_FAILPOINT", "write-enospc:1:1")];
        let server = Server::start_in_with_env(&dir, &["--appendonly", "no"], &failpoint);
        let mut c = server.client();
        assert_eq!(c.cmd("SET before 1"), common::ok());
        assert_eq!(c.cmd("CONFIG SET appendonly yes"), common::ok());
        assert_eq!(wait_rewrites(&mut c, 2), "ok", "the failed base was not tried again");
        assert_eq!(info_field(&mut c, "aof_rewrites_consecutive_failures"), "0");
        assert_eq!(c.cmd("SET after 2"), common::ok());
        server.kill9();
    }
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("MGET before after"), Frame::Array(vec![bulk("1"), bulk("2")]));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// While the journal cannot write, what would write is refused before it
/// runs, as Redis's processCommand refuses it: a write queued in MULTI
/// (the transaction then aborts), an EXEC of writes queued before the
/// failure (refused whole, never halfway), a script that declares it may
/// write, and PING, which Redis refuses so that monitoring notices. Reads
/// and scripts that do not write still run.
#[test]
fn a_failing_disk_refuses_what_would_write_before_it_runs() {
    let dir = temp_dir("refused-before");
    let server =
        Server::start_in_with_env(&dir, &["--appendfsync", "everysec"], &[("KEEL_JOURNAL_FAILPOINT", "sync-eio:1:inf")]);
    let mut c = server.client();
    assert_eq!(c.cmd("SET k v"), common::ok());
    let mut tx = server.client();
    assert_eq!(tx.cmd("MULTI"), common::ok());
    assert_eq!(tx.cmd("SET a 1"), Frame::Simple(b"QUEUED".to_vec()));
    assert_eq!(tx.send(&["EVAL", "#!lua\nreturn redis.call('set', KEYS[1], '2')", "1", "b"]), Frame::Simple(b"QUEUED".to_vec()));
    // The everysec fsync fails within a second; the log says when.
    let log = std::env::temp_dir().join("keel-test-logs").join(format!("{}.log", server.port));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("refusing writes until a retry succeeds") {
        assert!(Instant::now() < deadline, "the fsync never failed");
        thread::sleep(Duration::from_millis(2));
    }
    let misconf = |reply: Frame, prefix: &str| match reply {
        Frame::Error(e) => {
            let text = String::from_utf8_lossy(&e).to_string();
            assert!(text.starts_with(&format!("{prefix}MISCONF Errors writing to the AOF file: ")), "{text}");
        }
        other => panic!("{other:?}"),
    };
    misconf(tx.cmd("EXEC"), "EXECABORT Transaction discarded because of: ");
    assert_eq!(c.cmd("MULTI"), common::ok());
    misconf(c.cmd("INCR a"), "");
    assert_eq!(c.cmd("GET k"), Frame::Simple(b"QUEUED".to_vec()));
    assert_eq!(c.cmd("EXEC"), Frame::Error(b"EXECABORT Transaction discarded because of previous errors.".to_vec()));
    misconf(c.cmd("PING"), "");
    misconf(c.send(&["EVAL", "#!lua\nreturn 1", "0"]), "");
    misconf(c.send(&["EVAL", "return redis.call('set', KEYS[1], '3')", "1", "b"]), "");
    assert_eq!(c.send(&["EVAL", "#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])", "1", "k"]), bulk("v"));
    assert_eq!(c.send(&["EVAL", "return redis.call('get', KEYS[1])", "1", "k"]), bulk("v"));
    assert_eq!(c.cmd("MGET k a b"), Frame::Array(vec![bulk("v"), Frame::Null, Frame::Null]));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reply held for a durable position that a failing disk never reaches
/// leaves as soon as the log stops gating it: `CONFIG SET appendonly no`,
/// or `appendfsync` moving off `always`. Whole-keyspace commands that
/// read no data answer meanwhile (INFO but for its keyspace section, CONFIG
/// RESETSTAT, MEMORY DOCTOR, DEBUG SLEEP).
#[test]
fn a_held_reply_leaves_when_the_log_stops_gating_it() {
    for switch in ["appendonly no", "appendfsync everysec"] {
        // Every fdatasync fails: the first write is appended, never durable.
        let dir = temp_dir("held-reply");
        let args = ["--enable-debug-command", "yes"];
        let server = Server::start_in_with_env(&dir, &args, &[("KEEL_JOURNAL_FAILPOINT", "sync-eio:1:inf")]);
        let mut held = server.client();
        let mut admin = server.client();
        let mut counting = server.client();
        held.write_command(&["SET", "k", "v"]);
        // INFO and the other whole-keyspace commands that read no data
        // answer meanwhile; INFO's keyspace section counts the held write,
        // and waits with it.
        common::wait_for("the failed fsync", || info_field(&mut admin, "aof_last_write_status") == "err");
        assert_eq!(admin.cmd("CONFIG RESETSTAT"), common::ok());
        assert!(matches!(admin.cmd("MEMORY DOCTOR"), Frame::Bulk(_)));
        assert_eq!(admin.cmd("DEBUG SLEEP 0"), common::ok());
        counting.write_command(&["INFO", "keyspace"]);
        counting.stream.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
        assert_eq!(counting.try_read(), None, "INFO keyspace answered before the write it counts was durable");
        assert_eq!(admin.cmd(&format!("CONFIG SET {switch}")), common::ok());
        assert_eq!(held.read(), common::ok(), "after CONFIG SET {switch}");
        counting.stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let Frame::Bulk(keyspace) = counting.read() else { panic!("INFO is a bulk string") };
        let keyspace = String::from_utf8_lossy(&keyspace);
        assert!(keyspace.contains("db0:keys=1,"), "{keyspace}");
        assert_eq!(held.cmd("GET k"), bulk("v"));
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `CONFIG SET appendfsync` at run time: from `everysec` to `always`, every
/// acknowledged write survives `kill -9`.
#[test]
fn appendfsync_switches_at_run_time() {
    let dir = temp_dir("fsync-switch");
    {
        let server = Server::start_in(&dir, &["--appendfsync", "everysec"]);
        let mut c = server.client();
        set_range(&mut c, "lazy", 50);
        assert_eq!(c.cmd("CONFIG SET appendfsync always"), common::ok());
        assert_eq!(c.cmd("CONFIG GET appendfsync"), Frame::Array(vec![bulk("appendfsync"), bulk("always")]));
        let fsyncs = info_field(&mut c, "keel_aof_fsyncs").parse::<u64>().expect("fsyncs");
        set_range(&mut c, "synced", 200);
        let after = info_field(&mut c, "keel_aof_fsyncs").parse::<u64>().expect("fsyncs");
        assert!(after > fsyncs, "always fsyncs for its acknowledgements");
        server.kill9();
    }
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    assert_range(&mut c, "synced", 200);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// CONFIG SET appendonly / appendfsync reply as redis-server 7.0.15 does,
/// and INFO's aof_enabled follows the same steps.
#[test]
fn appendonly_switch_replies_as_redis() {
    let keel_dir = temp_dir("aof-switch-keel");
    let redis_dir = temp_dir("aof-switch-redis");
    let keel = Server::start_in(&keel_dir, &["--appendonly", "no"]);
    let Some(redis) = Server::start_redis(&["--dir", redis_dir.to_str().expect("utf8 dir")]) else { return };
    let mut seen = Vec::new();
    for server in [&keel, &redis] {
        let mut c = server.client();
        let mut replies = vec![
            c.cmd("CONFIG SET appendfsync bogus"),
            c.cmd("CONFIG SET appendonly maybe"),
            c.cmd("CONFIG SET appendonly yes"),
        ];
        replies.push(bulk(&info_field(&mut c, "aof_enabled")));
        replies.push(bulk(&wait_rewrites(&mut c, 1)));
        replies.push(c.cmd("CONFIG GET appendonly"));
        replies.push(c.cmd("CONFIG SET appendfsync no"));
        replies.push(c.cmd("CONFIG SET appendonly no"));
        replies.push(bulk(&info_field(&mut c, "aof_enabled")));
        seen.push(replies);
    }
    assert_eq!(seen[0], seen[1]);
    drop((keel, redis));
    let _ = std::fs::remove_dir_all(&keel_dir);
    let _ = std::fs::remove_dir_all(&redis_dir);
}

/// DEBUG AOF-FLUSH-SLEEP, as Redis's: the writer sleeps before each write,
/// and under `always` a write's reply waits for it while a read of data
/// already durable does not.
#[test]
fn debug_aof_flush_sleep_holds_the_replies_of_writes() {
    let server = Server::start(&["--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "yes"]);
    let mut c = server.client();
    let mut other = server.client();
    assert_eq!(c.cmd("SET before x"), common::ok());
    assert_eq!(c.cmd("DEBUG AOF-FLUSH-SLEEP 2000000"), common::ok());
    c.write_command(&["SET", "k", "v"]);
    assert_eq!(other.cmd("GET before"), bulk("x"));
    c.stream.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
    let mut byte = [0u8; 1];
    assert!(c.stream.peek(&mut byte).is_err(), "a reply came while the writer slept");
    c.stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    assert_eq!(c.read(), common::ok());
    assert_eq!(c.cmd("DEBUG AOF-FLUSH-SLEEP 0"), common::ok());
    assert_eq!(c.cmd("SET after y"), common::ok());
}

/// A journal command that fails on replay (an INCR of a word, appended to
/// the incr file by hand) is logged as Redis logs it, `== CRITICAL ==`
/// with the command, and counted in unexpected_error_replies; under
/// `propagation-error-behavior panic` the start stops there, with exit code
/// 1 under `use-exit-on-panic`. Keel and redis-server on the same
/// directory: the same line, the same exit.
#[test]
fn a_journal_command_that_fails_on_replay_is_logged_or_stops_the_start() {
    let dir = temp_dir("replay-error");
    {
        let server = Server::start_in(&dir, &["--appendfsync", "everysec"]);
        let mut c = server.client();
        assert_eq!(c.cmd("SET k word"), common::ok());
        c.write_command(&["SHUTDOWN"]);
        c.read_to_close();
    }
    let incr = dir.join("appendonlydir/appendonly.aof.1.incr.aof");
    let mut file = std::fs::OpenOptions::new().append(true).open(&incr).expect("the incr file");
    file.write_all(&common::encode(&["INCR", "k"])).expect("append");
    drop(file);
    let critical = |log: &str| -> Vec<String> { log.lines().filter_map(|l| l.find("== CRITICAL ==").map(|at| l[at..].to_string())).collect() };
    let want = "== CRITICAL == This server is sending an error to its AOF-loading-client: \
                'value is not an integer or out of range' after processing the command 'incr'";
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("GET k"), bulk("word"));
    assert_eq!(c.info_field("stats", "unexpected_error_replies"), "1");
    let log_path = std::env::temp_dir().join("keel-test-logs").join(format!("{}.log", server.port));
    assert_eq!(critical(&std::fs::read_to_string(log_path).unwrap_or_default()), [want]);
    drop(server);
    let (status, log) = common::start_expecting_exit(&dir, &["--propagation-error-behavior", "panic", "--use-exit-on-panic", "yes"]);
    assert_eq!(status.code(), Some(1), "{log}");
    assert_eq!(critical(&log), [want]);

    if std::path::Path::new("/usr/bin/redis-server").exists() {
        let redis_dir = temp_dir("replay-error-redis");
        let copy = |to: &std::path::Path| {
            std::fs::create_dir_all(to.join("appendonlydir")).expect("dir");
            for entry in std::fs::read_dir(dir.join("appendonlydir")).expect("aof dir") {
                let entry = entry.expect("entry");
                std::fs::copy(entry.path(), to.join("appendonlydir").join(entry.file_name())).expect("copy");
            }
        };
        copy(&redis_dir);
        let output = std::process::Command::new("/usr/bin/redis-server")
            .args(["--port", &common::free_port().to_string(), "--dir", redis_dir.to_str().expect("utf8"), "--appendonly", "yes"])
            .args(["--propagation-error-behavior", "panic", "--use-exit-on-panic", "yes"])
            // Its crash report's memory test can fault on its own (common::Server::start_redis).
            .args(["--crash-memcheck-enabled", "no"])
            .output()
            .expect("run redis-server");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(1), "redis-server ended with {}: {stdout}", output.status);
        assert_eq!(critical(&stdout), [want]);
        let _ = std::fs::remove_dir_all(&redis_dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
